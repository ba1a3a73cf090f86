//! Rule `large-blobs`: no file over [`BLOB_BYTES_MAX`] bytes outside a `tests/fixtures`
//! directory. A pool image committed by accident stays in the history forever; fixtures are
//! the one place where images are the point (STYLE.md §8, compatibility tests).

use crate::{Rule, TidyError, Tree, Violation};

/// The largest allowed file outside fixtures: 1 MiB.
pub const BLOB_BYTES_MAX: u64 = 1024 * 1024;

/// Reports every file in the tree larger than [`BLOB_BYTES_MAX`] that is not under
/// `tests/fixtures/` (at the root or in a crate).
///
/// # Errors
/// [`TidyError::Io`] when a file's size cannot be read for a reason other than it vanishing.
pub fn check_large_blobs(tree: &Tree) -> Result<Vec<Violation>, TidyError> {
    let mut found = Vec::new();
    for path in tree.files() {
        if is_fixture(path) {
            continue;
        }
        let full = tree.root().join(path);
        let bytes = match full.symlink_metadata() {
            Ok(meta) => meta.len(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(TidyError::Io { path: full, source }),
        };
        if bytes > BLOB_BYTES_MAX {
            let message = format!(
                "file is {bytes} bytes; files over {BLOB_BYTES_MAX} bytes belong in tests/fixtures"
            );
            found.push(Violation::new(path, 1, Rule::LargeBlobs, message));
        }
    }
    Ok(found)
}

/// Whether `path` lies under a `tests/fixtures` directory.
fn is_fixture(path: &str) -> bool {
    path.starts_with("tests/fixtures/") || path.contains("/tests/fixtures/")
}

#[cfg(test)]
mod tests {
    use super::{BLOB_BYTES_MAX, check_large_blobs, is_fixture};
    use crate::{Rule, fixture};

    #[test]
    fn fixtures_are_recognised() {
        assert!(is_fixture("tests/fixtures/v1/pool.img.zst"));
        assert!(is_fixture("crates/pool/tests/fixtures/raidz2.bin"));
        assert!(!is_fixture("tests/fixturesque/big.bin"));
        assert!(!is_fixture("bench/results.bin"));
    }

    #[test]
    fn reports_large_files_outside_fixtures_only() {
        let dir = fixture::workspace(&[("src/lib.rs", "//! Doc.\n")]);
        let limit = usize::try_from(BLOB_BYTES_MAX).expect("1 MiB fits in usize");
        fixture::write(dir.path(), "data/at_limit.bin", &vec![0; limit]);
        fixture::write(dir.path(), "data/over.bin", &vec![0; limit + 1]);
        fixture::write(dir.path(), "tests/fixtures/pool.bin", &vec![0; limit + 1]);
        let tree = crate::Tree::open(dir.path()).expect("git lists the fixture");
        let found = check_large_blobs(&tree).expect("check runs");
        let places: Vec<_> = found.iter().map(|v| (v.path.as_str(), v.rule)).collect();
        assert_eq!(places, [("data/over.bin", Rule::LargeBlobs)]);
    }
}
