//! The set of files tidy looks at: what git would track (tracked plus untracked-not-ignored).

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::TidyError;

/// A workspace's files as git sees them, with paths relative to the root and `/`-separated.
///
/// Listed files that no longer exist (deleted but still in the index) and anything that is not
/// a regular file (symlinks, submodule entries) are left out, so a concurrent edit cannot make
/// a check fail to run.
#[derive(Clone, Debug)]
pub struct Tree {
    root: PathBuf,
    files: Vec<String>,
}

impl Tree {
    /// Lists the files under `root` with
    /// `git ls-files --cached --others --exclude-standard`.
    ///
    /// # Errors
    /// [`TidyError::Tool`] when git cannot run or fails (for example, `root` is not inside a
    /// git work tree).
    pub fn open(root: &Path) -> Result<Tree, TidyError> {
        let output = Command::new("git")
            .arg("-C")
            .arg(root)
            .args([
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ])
            .output()
            .map_err(|error| TidyError::Tool {
                program: "git".into(),
                detail: error.to_string(),
            })?;
        if !output.status.success() {
            let detail = String::from_utf8_lossy(&output.stderr).trim().to_string();
            return Err(TidyError::Tool {
                program: "git ls-files".into(),
                detail,
            });
        }
        let listed: BTreeSet<String> = output
            .stdout
            .split(|&byte| byte == 0)
            .filter(|name| !name.is_empty())
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .collect();
        let files = listed
            .into_iter()
            .filter(|name| {
                root.join(name)
                    .symlink_metadata()
                    .is_ok_and(|meta| meta.file_type().is_file())
            })
            .collect();
        Ok(Tree {
            root: root.to_path_buf(),
            files,
        })
    }

    /// The workspace root this tree was listed from.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every file, sorted, relative to the root.
    #[must_use]
    pub fn files(&self) -> &[String] {
        &self.files
    }

    /// Whether `path` (relative, `/`-separated) is one of the tree's files.
    #[must_use]
    pub fn contains(&self, path: &str) -> bool {
        self.files
            .binary_search_by(|file| file.as_str().cmp(path))
            .is_ok()
    }

    /// The files whose name ends in `.{extension}`.
    pub fn files_with_extension<'a>(
        &'a self,
        extension: &'a str,
    ) -> impl Iterator<Item = &'a str> + 'a {
        self.files.iter().map(String::as_str).filter(move |file| {
            file.rsplit_once('.')
                .is_some_and(|(stem, ext)| !stem.is_empty() && ext == extension)
        })
    }

    /// The text of `path`, decoded lossily; `None` when the file vanished since listing.
    ///
    /// # Errors
    /// [`TidyError::Io`] for any other read failure.
    pub fn read(&self, path: &str) -> Result<Option<String>, TidyError> {
        let full = self.root.join(path);
        match std::fs::read(&full) {
            Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
            Err(source) => Err(TidyError::Io { path: full, source }),
        }
    }

    /// Calls `visit(path, text)` for every file with the given extension that still exists.
    pub(crate) fn for_each_text(
        &self,
        extensions: &[&str],
        mut visit: impl FnMut(&str, &str),
    ) -> Result<(), TidyError> {
        for extension in extensions {
            for path in self.files_with_extension(extension) {
                if let Some(text) = self.read(path)? {
                    visit(path, &text);
                }
            }
        }
        Ok(())
    }
}

/// The lines of `text` with their 1-based numbers, without `\n` or a trailing `\r`.
pub(crate) fn numbered_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split('\n')
        .enumerate()
        .map(|(index, line)| (index + 1, line.strip_suffix('\r').unwrap_or(line)))
}

#[cfg(test)]
mod tests {
    use crate::fixture;

    #[test]
    fn lists_untracked_files_but_not_ignored_ones() {
        let (_dir, tree) = fixture::tree(&[
            (".gitignore", "/target\n*.img\n"),
            ("src/lib.rs", "//! x\n"),
            ("target/debug/big.rs", "fn main() {}\n"),
            ("disk.img", "bytes"),
        ]);
        assert_eq!(tree.files(), [".gitignore", "src/lib.rs"]);
        assert!(tree.contains("src/lib.rs"));
        assert!(!tree.contains("disk.img"));
        assert_eq!(
            tree.files_with_extension("rs").collect::<Vec<_>>(),
            ["src/lib.rs"]
        );
    }

    #[test]
    fn numbered_lines_strips_carriage_returns() {
        let lines: Vec<_> = super::numbered_lines("a\r\nb\n").collect();
        assert_eq!(lines, [(1, "a"), (2, "b"), (3, "")]);
    }
}
