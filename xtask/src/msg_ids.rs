//! Rule `message-ids`: every operator message ID (`TARN-` and four digits) that appears in a
//! `.rs` or `.md` file has a page `docs/msg/TARN-NNNN.md` (STYLE.md §6: `tarn pool status`
//! prints `see: TARN-NNNN`, and the page is where the admin goes next).

use crate::tree::numbered_lines;
use crate::{Rule, TidyError, Tree, Violation};

/// The directory holding one page per message ID, relative to the workspace root.
const MSG_DIR: &str = "docs/msg";

/// Reports each occurrence of a message ID whose page is not in the tree.
///
/// # Errors
/// [`TidyError::Io`] when a file cannot be read.
pub fn check_message_ids(tree: &Tree) -> Result<Vec<Violation>, TidyError> {
    let mut found = Vec::new();
    tree.for_each_text(&["rs", "md"], |path, text| {
        for (number, line) in numbered_lines(text) {
            for id in message_ids(line) {
                let page = format!("{MSG_DIR}/{id}.md");
                if !tree.contains(&page) {
                    let message = format!("{id} has no page {page}");
                    found.push(Violation::new(path, number, Rule::MessageIds, message));
                }
            }
        }
    })?;
    Ok(found)
}

/// The message IDs on `line`: `TARN-` followed by exactly four ASCII digits (a fifth digit
/// makes it something else, so it is skipped).
fn message_ids(line: &str) -> Vec<&str> {
    const PREFIX: &str = "TARN-";
    let mut ids = Vec::new();
    for (start, _) in line.match_indices(PREFIX) {
        let digits = &line.as_bytes()[start + PREFIX.len()..];
        let four = digits.len() >= 4 && digits[..4].iter().all(u8::is_ascii_digit);
        let fifth = digits.get(4).is_some_and(u8::is_ascii_digit);
        if four && !fifth {
            ids.push(&line[start..start + PREFIX.len() + 4]);
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::{check_message_ids, message_ids};
    use crate::{Rule, fixture};

    #[test]
    fn extracts_exactly_four_digit_ids() {
        // The second ID is built at run time: it has no page, and this source must not cite it.
        let line = format!(
            "see: TARN-0002, TARN-12345, TARN-NNNN, TARN-12, (TARN-{})",
            "0100"
        );
        let second = format!("TARN-{}", "0100");
        assert_eq!(message_ids(&line), ["TARN-0002", second.as_str()]);
        assert!(message_ids("TARN-").is_empty());
    }

    #[test]
    fn reports_ids_without_a_page() {
        // Built at run time so this source does not mention an ID without a page.
        let missing = format!("TARN-{}", "9999");
        let (_dir, tree) = fixture::tree(&[
            ("docs/msg/TARN-0002.md", "# TARN-0002\n"),
            (
                "src/lib.rs",
                &format!("//! Doc.\nconst A: &str = \"TARN-0002\";\n// {missing}\n"),
            ),
            ("README.md", &format!("See {missing}.\n")),
        ]);
        let found = check_message_ids(&tree).expect("check runs");
        let places: Vec<_> = found
            .iter()
            .map(|v| (v.path.as_str(), v.line, v.rule))
            .collect();
        assert_eq!(
            places,
            [
                ("src/lib.rs", 3, Rule::MessageIds),
                ("README.md", 1, Rule::MessageIds)
            ]
        );
        assert!(
            found[0].message.contains(&format!("docs/msg/{missing}.md")),
            "{}",
            found[0].message
        );
    }
}
