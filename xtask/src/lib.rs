//! xtask: the repository's own checks ("tidy"), run by `cargo run -p xtask -- tidy` and by
//! `cargo test` (xtask/tests/tidy.rs), so a broken rule fails the ordinary test run.
//!
//! # Purpose
//! STYLE.md §1 and §9 state rules a compiler does not enforce: the layer order of the crates,
//! a `//!` doc on every module, no placeholder markers, lines of at most 100 characters, a doc
//! page for every operator message ID, no large blobs outside fixtures, and a ratchet on
//! function length. Rules that only live in prose rot (OpenZFS's zio theory comment still says
//! to fill it in), so each one here is a function that returns its violations.
//!
//! # Model
//! ```text
//!   workspace root (CARGO_MANIFEST_DIR/..)
//!        |
//!        +-- cargo metadata --no-deps --> check_layering        (Cargo.toml edges, serde users)
//!        |
//!        +-- git ls-files --cached --others --exclude-standard
//!                 |
//!                 v
//!               Tree (relative paths) --> check_module_docs, check_banned_words,
//!                                         check_line_length, check_message_ids,
//!                                         check_large_blobs, check_function_lengths
//!                                                   |
//!                                                   v
//!                                    Vec<Violation>  "path:line: rule: message"
//! ```
//! A [`Violation`] is a fact about the tree, not an error: the checks return all of them so
//! one run shows everything. A [`TidyError`] means the check itself could not run (git or
//! cargo missing, unreadable file, malformed allow-list).
//!
//! # State
//! None in memory beyond one run. On disk: `xtask/function-lengths.txt`, the allow-list of
//! functions that were already longer than [`FN_LINES_MAX`] when the ratchet was set, written
//! by [`update_function_lengths`] (`tidy --update-lengths`).
//!
//! # Invariants
//! - I1: Every check is a pure function of the tree's files (and, for layering, of the
//!   manifests cargo reads); running it twice gives the same violations in the same order.
//! - I2: The file set is git's: tracked files plus untracked files that are not ignored, so
//!   build output and `*.img` scratch files are never scanned and new files are.
//! - I3: The tidy source never contains the markers it bans; it builds them with `concat!`.
//! - I4: A crate missing from the layer order is a violation, so adding a crate forces a
//!   decision about where it sits.
//!
//! # Concurrency and context
//! Single-threaded; each integration test opens its own [`Tree`]. Other people editing the
//! tree during a run can make a listed file vanish: missing files are skipped, not errors.
//!
//! # Failure model
//! git or cargo failing to run or exiting non-zero is a [`TidyError::Tool`]; unreadable files
//! are [`TidyError::Io`]. Files that are not UTF-8 are read lossily (a replacement character
//! counts as one character).
//!
//! # Not here
//! Formatting (rustfmt) and lints (clippy) have their own tools. Fail-point uniqueness
//! (STYLE.md §9) waits until fail points exist. The function parser is a brace matcher over a
//! small lexer, not a Rust parser: macro-generated functions are invisible to it.

mod banned;
mod blobs;
mod fn_length;
mod layering;
mod lexer;
mod line_length;
mod module_docs;
mod msg_ids;
mod tree;

#[cfg(test)]
mod fixture;

use std::fmt;
use std::path::{Path, PathBuf};

pub use banned::check_banned_words;
pub use blobs::{BLOB_BYTES_MAX, check_large_blobs};
pub use fn_length::{FN_LINES_MAX, LENGTHS_FILE, check_function_lengths, update_function_lengths};
pub use layering::{LAYERS, check_layering};
pub use line_length::{LINE_CHARS_MAX, check_line_length};
pub use module_docs::check_module_docs;
pub use msg_ids::check_message_ids;
pub use tree::Tree;

/// The rule a [`Violation`] breaks; its [`Rule::name`] is the third field of a report line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// STYLE.md §1: crate dependencies follow the layer order; serde only where allowed.
    Layering,
    /// STYLE.md §4: every module starts with a `//!` line.
    ModuleDocs,
    /// STYLE.md §4, §9: no placeholder markers or debugging macros.
    BannedWords,
    /// STYLE.md §9: `.rs` lines are at most [`LINE_CHARS_MAX`] characters.
    LineLength,
    /// STYLE.md §6: every `TARN-NNNN` has a page in docs/msg.
    MessageIds,
    /// STYLE.md §9: no file over [`BLOB_BYTES_MAX`] outside tests/fixtures.
    LargeBlobs,
    /// STYLE.md §9: new functions are at most [`FN_LINES_MAX`] lines; listed ones never grow.
    FunctionLength,
}

impl Rule {
    /// The stable name printed in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Rule::Layering => "layering",
            Rule::ModuleDocs => "module-docs",
            Rule::BannedWords => "banned-words",
            Rule::LineLength => "line-length",
            Rule::MessageIds => "message-ids",
            Rule::LargeBlobs => "large-blobs",
            Rule::FunctionLength => "function-length",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken rule at one place. Displays as `path:line: rule: message`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// Path relative to the workspace root, `/`-separated.
    pub path: String,
    /// 1-based line number (1 when the rule is about the whole file).
    pub line: usize,
    /// The rule broken.
    pub rule: Rule,
    /// What is wrong and, where it helps, what is allowed.
    pub message: String,
}

impl Violation {
    pub(crate) fn new(path: &str, line: usize, rule: Rule, message: String) -> Violation {
        Violation {
            path: path.to_string(),
            line,
            rule,
            message,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.path, self.line, self.rule, self.message
        )
    }
}

/// A check could not run (as opposed to finding violations).
#[derive(Debug)]
#[non_exhaustive]
pub enum TidyError {
    /// Reading or writing a file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An external tool (git, cargo) could not be started or exited with an error.
    Tool {
        /// The program.
        program: String,
        /// Its stderr or the spawn error.
        detail: String,
    },
    /// `cargo metadata` printed something this code does not understand.
    Metadata {
        /// What was missing or malformed.
        detail: String,
    },
    /// A line of the function-length allow-list is malformed.
    LengthsFile {
        /// 1-based line number in [`LENGTHS_FILE`].
        line: usize,
        /// What is wrong with it.
        detail: String,
    },
}

impl fmt::Display for TidyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TidyError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            TidyError::Tool { program, detail } => write!(f, "running {program}: {detail}"),
            TidyError::Metadata { detail } => write!(f, "cargo metadata: {detail}"),
            TidyError::LengthsFile { line, detail } => write!(f, "{LENGTHS_FILE}:{line}: {detail}"),
        }
    }
}

impl std::error::Error for TidyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TidyError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The workspace root: the parent of xtask's manifest directory.
#[must_use]
pub fn workspace_root() -> PathBuf {
    let xtask_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask_dir
        .parent()
        .expect("xtask's manifest directory has a parent: xtask lives at <root>/xtask")
        .to_path_buf()
}

/// Runs every check on the workspace at `root` and returns all violations, sorted by path,
/// line and rule.
///
/// # Errors
/// A [`TidyError`] when a check cannot run (git or cargo unavailable, unreadable file,
/// malformed allow-list).
pub fn run_all(root: &Path) -> Result<Vec<Violation>, TidyError> {
    let tree = Tree::open(root)?;
    let mut found = check_layering(root)?;
    found.extend(check_module_docs(&tree)?);
    found.extend(check_banned_words(&tree)?);
    found.extend(check_line_length(&tree)?);
    found.extend(check_message_ids(&tree)?);
    found.extend(check_large_blobs(&tree)?);
    found.extend(check_function_lengths(&tree)?);
    found.sort();
    Ok(found)
}
