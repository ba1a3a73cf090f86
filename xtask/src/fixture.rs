//! Synthetic workspaces for the unit tests: a temporary directory turned into a git work tree.

use std::path::Path;
use std::process::Command;

use crate::Tree;

/// Writes `files` (relative path, contents) under a new temporary directory, runs `git init`
/// there and lists it. The directory lives as long as the returned guard.
pub(crate) fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, Tree) {
    let dir = workspace(files);
    let tree = Tree::open(dir.path()).expect("git lists a freshly initialised repository");
    (dir, tree)
}

/// Like [`tree`] but returns only the directory, for checks that list files themselves.
pub(crate) fn workspace(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("create temporary directory");
    for (path, text) in files {
        write(dir.path(), path, text.as_bytes());
    }
    let status = Command::new("git")
        .arg("-C")
        .arg(dir.path())
        .args(["init", "-q"])
        .status()
        .expect("run git init");
    assert!(
        status.success(),
        "git init failed in {}",
        dir.path().display()
    );
    dir
}

/// Writes `bytes` to `root/path`, creating parent directories.
pub(crate) fn write(root: &Path, path: &str, bytes: &[u8]) {
    let full = root.join(path);
    if let Some(parent) = full.parent() {
        std::fs::create_dir_all(parent).expect("create fixture directory");
    }
    std::fs::write(&full, bytes).expect("write fixture file");
}
