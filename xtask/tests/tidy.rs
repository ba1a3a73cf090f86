//! Tidy on the real workspace, one test per rule so a failure names the rule it broke
//! (STYLE.md §9: tidy runs inside `cargo test`). Each test lists every violation it found;
//! `cargo run -p xtask -- tidy` prints the same lines.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use xtask::{TidyError, Tree, Violation};

/// Fails with every violation, one per line, when `found` is not empty.
fn assert_clean(rule: &str, found: Result<Vec<Violation>, TidyError>) {
    let found = found.unwrap_or_else(|error| panic!("tidy rule {rule} could not run: {error}"));
    let lines: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert!(
        lines.is_empty(),
        "tidy rule {rule}: {} violation(s)\n{}",
        lines.len(),
        lines.join("\n")
    );
}

fn tree() -> Tree {
    Tree::open(&xtask::workspace_root()).expect("git lists the workspace")
}

#[test]
fn layering() {
    assert_clean("layering", xtask::check_layering(&xtask::workspace_root()));
}

#[test]
fn module_docs() {
    assert_clean("module-docs", xtask::check_module_docs(&tree()));
}

#[test]
fn banned_words() {
    assert_clean("banned-words", xtask::check_banned_words(&tree()));
}

#[test]
fn line_length() {
    assert_clean("line-length", xtask::check_line_length(&tree()));
}

#[test]
fn message_ids() {
    assert_clean("message-ids", xtask::check_message_ids(&tree()));
}

#[test]
fn large_blobs() {
    assert_clean("large-blobs", xtask::check_large_blobs(&tree()));
}

#[test]
fn function_length() {
    assert_clean("function-length", xtask::check_function_lengths(&tree()));
}
