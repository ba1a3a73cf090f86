//! Rule `line-length`: `.rs` lines are at most [`LINE_CHARS_MAX`] characters.
//!
//! rustfmt wraps code at the same width (rustfmt.toml) but leaves long comments and string
//! literals alone, which is where this check earns its keep. Characters, not bytes, are
//! counted, so a line of box-drawing characters in a diagram is measured as it is seen.

use crate::tree::numbered_lines;
use crate::{Rule, TidyError, Tree, Violation};

/// The longest allowed line, in characters (rustfmt.toml `max_width`).
pub const LINE_CHARS_MAX: usize = 100;

/// Reports every `.rs` line longer than [`LINE_CHARS_MAX`] characters.
///
/// # Errors
/// [`TidyError::Io`] when a file cannot be read.
pub fn check_line_length(tree: &Tree) -> Result<Vec<Violation>, TidyError> {
    let mut found = Vec::new();
    tree.for_each_text(&["rs"], |path, text| found.extend(scan(path, text)))?;
    Ok(found)
}

fn scan(path: &str, text: &str) -> Vec<Violation> {
    numbered_lines(text)
        .filter_map(|(number, line)| {
            let chars = line.chars().count();
            (chars > LINE_CHARS_MAX).then(|| {
                let message = format!("line is {chars} characters; the limit is {LINE_CHARS_MAX}");
                Violation::new(path, number, Rule::LineLength, message)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{LINE_CHARS_MAX, check_line_length, scan};
    use crate::{Rule, fixture};

    #[test]
    fn the_limit_is_inclusive_and_counts_characters() {
        let at_limit = "x".repeat(LINE_CHARS_MAX);
        let over = "x".repeat(LINE_CHARS_MAX + 1);
        // 100 three-byte characters: 300 bytes but exactly at the limit.
        let wide = "\u{2500}".repeat(LINE_CHARS_MAX);
        let text = format!("{at_limit}\n{wide}\r\n{over}\n");
        let found = scan("a.rs", &text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 3);
        assert!(
            found[0].message.contains("101 characters"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn finds_long_lines_in_rust_files_only() {
        let long = format!("// {}\n", "y".repeat(LINE_CHARS_MAX));
        let (_dir, tree) = fixture::tree(&[
            ("src/lib.rs", &format!("//! Doc.\n{long}")),
            ("README.md", &long),
        ]);
        let found = check_line_length(&tree).expect("check runs");
        let places: Vec<_> = found
            .iter()
            .map(|v| (v.path.as_str(), v.line, v.rule))
            .collect();
        assert_eq!(places, [("src/lib.rs", 2, Rule::LineLength)]);
    }
}
