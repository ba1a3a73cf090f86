//! Rule `banned-words`: no placeholder markers and no debugging or stub macros in `.rs` and
//! `.md` files (STYLE.md §4: placeholders are banned on main; §9: tidy checks them).
//!
//! The needles are spelled with `concat!` so this file does not trip its own rule (I3).

use crate::tree::numbered_lines;
use crate::{Rule, TidyError, Tree, Violation};

/// The banned substrings, matched case-sensitively, and why each is banned.
const BANNED: [(&str, &str); 6] = [
    (
        concat!("FIX", "ME"),
        "placeholder marker; finish the work or describe the weakness",
    ),
    (
        concat!("X", "XX"),
        "placeholder marker; finish the work or describe the weakness",
    ),
    (
        concat!("TO", "DO"),
        "placeholder marker; finish the work or describe the weakness",
    ),
    (concat!("dbg", "!("), "debugging macro left in"),
    (
        concat!("todo", "!("),
        "stub macro; leave the part out and say so instead",
    ),
    (
        concat!("unimplemented", "!("),
        "stub macro; leave the part out and say so instead",
    ),
];

/// Reports every occurrence of a banned substring in the tree's `.rs` and `.md` files, one
/// violation per needle per line.
///
/// # Errors
/// [`TidyError::Io`] when a file cannot be read.
pub fn check_banned_words(tree: &Tree) -> Result<Vec<Violation>, TidyError> {
    let mut found = Vec::new();
    tree.for_each_text(&["rs", "md"], |path, text| found.extend(scan(path, text)))?;
    Ok(found)
}

fn scan(path: &str, text: &str) -> Vec<Violation> {
    let mut found = Vec::new();
    for (number, line) in numbered_lines(text) {
        for (needle, why) in BANNED {
            if line.contains(needle) {
                let message = format!("`{needle}`: {why}");
                found.push(Violation::new(path, number, Rule::BannedWords, message));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::{BANNED, check_banned_words, scan};
    use crate::{Rule, fixture};

    #[test]
    fn every_needle_is_caught() {
        for (needle, _) in BANNED {
            let text = format!("fn f() {{\n    let x = 1; // {needle} here\n}}\n");
            let found = scan("a.rs", &text);
            assert_eq!(found.len(), 1, "needle {needle:?}: {found:?}");
            assert_eq!(found[0].line, 2);
        }
    }

    #[test]
    fn clean_text_and_other_cases_pass() {
        assert!(scan("a.rs", "fn todo_list() {}\n// Todo lists are fine.\n").is_empty());
        assert!(scan("a.md", "# Doc\n\nNothing to see.\n").is_empty());
    }

    #[test]
    fn finds_markers_in_rust_and_markdown_but_not_other_files() {
        let marker = concat!("FIX", "ME");
        let (_dir, tree) = fixture::tree(&[
            ("src/lib.rs", &format!("//! Doc.\n// {marker}: later\n")),
            ("docs/notes.md", &format!("# Notes\n\n{marker}\n")),
            ("notes.txt", marker),
        ]);
        let found = check_banned_words(&tree).expect("check runs");
        let places: Vec<_> = found
            .iter()
            .map(|v| (v.path.as_str(), v.line, v.rule))
            .collect();
        assert_eq!(
            places,
            [
                ("src/lib.rs", 2, Rule::BannedWords),
                ("docs/notes.md", 3, Rule::BannedWords)
            ]
        );
    }
}
