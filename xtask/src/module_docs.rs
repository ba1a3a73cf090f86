//! Rule `module-docs`: every module under `crates/*/src` and `xtask/src` opens with `//!`.
//!
//! A reader who lands in a file should learn what it is for before reading code
//! (rust-analyzer's rule, STYLE.md §4). Blank lines and inner attributes (`#![...]`, possibly
//! spanning lines) may come first; anything else, including a plain `//` comment, may not.

use crate::tree::numbered_lines;
use crate::{Rule, TidyError, Tree, Violation};

/// Reports every `.rs` file under `crates/*/src` or `xtask/src` whose first line of content
/// is not a `//!` doc line.
///
/// # Errors
/// [`TidyError::Io`] when a file cannot be read.
pub fn check_module_docs(tree: &Tree) -> Result<Vec<Violation>, TidyError> {
    let mut found = Vec::new();
    tree.for_each_text(&["rs"], |path, text| {
        if !is_module_source(path) {
            return;
        }
        if let Some(line) = missing_doc_line(text) {
            let message = "a module must start with a `//!` line saying what it is for \
                           (only blank lines and `#![...]` attributes may come first)";
            found.push(Violation::new(
                path,
                line,
                Rule::ModuleDocs,
                message.to_string(),
            ));
        }
    })?;
    Ok(found)
}

/// Whether `path` is a module of a crate's library or binary sources.
fn is_module_source(path: &str) -> bool {
    if path.starts_with("xtask/src/") {
        return true;
    }
    let mut parts = path.split('/');
    matches!(
        (parts.next(), parts.next(), parts.next(), parts.next()),
        (Some("crates"), Some(_), Some("src"), Some(_))
    )
}

/// `None` when `text` starts with a `//!` line after blank lines and inner attributes;
/// otherwise the 1-based line where something else (or the end of the file) was found.
fn missing_doc_line(text: &str) -> Option<usize> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut attribute_depth: i64 = 0;
    let mut last_line = 1;
    for (number, line) in numbered_lines(text) {
        last_line = number;
        let trimmed = line.trim();
        if attribute_depth > 0 {
            attribute_depth += bracket_balance(trimmed);
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        if trimmed.starts_with("#![") {
            attribute_depth = bracket_balance(trimmed);
            continue;
        }
        return if trimmed.starts_with("//!") {
            None
        } else {
            Some(number)
        };
    }
    Some(last_line)
}

/// Opening minus closing square brackets on a line.
fn bracket_balance(line: &str) -> i64 {
    line.chars().fold(0, |balance, c| match c {
        '[' => balance + 1,
        ']' => balance - 1,
        _ => balance,
    })
}

#[cfg(test)]
mod tests {
    use super::{check_module_docs, is_module_source, missing_doc_line};
    use crate::{Rule, fixture};

    fn check(text: &str, expected: Option<usize>) {
        assert_eq!(missing_doc_line(text), expected, "text: {text:?}");
    }

    #[test]
    fn accepts_doc_after_blank_lines_and_attributes() {
        check("//! Purpose.\nfn f() {}\n", None);
        check("\n\n//! Purpose.\n", None);
        check("#![allow(unsafe_code)]\n//! SIMD kernels.\n", None);
        check(
            "#![cfg_attr(\n    test,\n    allow(dead_code)\n)]\n\n//! Doc.\n",
            None,
        );
    }

    #[test]
    fn rejects_code_plain_comments_and_empty_files() {
        check("fn f() {}\n", Some(1));
        check("// Copyright.\n//! Doc.\n", Some(1));
        check("#![allow(x)]\n\nuse std::fmt;\n", Some(3));
        check("/// Item doc, not module doc.\nfn f() {}\n", Some(1));
        check("", Some(1));
    }

    #[test]
    fn only_crate_and_xtask_sources_are_modules() {
        assert!(is_module_source("crates/pool/src/lib.rs"));
        assert!(is_module_source("crates/vdev/src/raidz_math/gf.rs"));
        assert!(is_module_source("xtask/src/main.rs"));
        assert!(!is_module_source("crates/pool/tests/pool.rs"));
        assert!(!is_module_source("crates/format/benches/codecs.rs"));
        assert!(!is_module_source("fuzz/fuzz_targets/blkptr.rs"));
    }

    #[test]
    fn finds_an_undocumented_module_in_a_tree() {
        let (_dir, tree) = fixture::tree(&[
            ("crates/a/src/lib.rs", "//! Crate a.\nmod b;\n"),
            ("crates/a/src/b.rs", "\nuse std::fmt;\n"),
            ("crates/a/tests/t.rs", "fn main() {}\n"),
        ]);
        let found = check_module_docs(&tree).expect("check runs");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].path.as_str(), found[0].line),
            ("crates/a/src/b.rs", 2)
        );
        assert_eq!(found[0].rule, Rule::ModuleDocs);
    }
}
