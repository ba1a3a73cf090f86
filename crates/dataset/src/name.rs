//! Dataset names: `pool/dir/leaf`, ZFS's character set, no snapshot part yet.

use crate::DatasetError;

/// Longest full dataset name (ZFS's `ZFS_MAX_DATASET_NAME_LEN` less the terminator).
pub const NAME_MAX: usize = 255;

/// Checks a full dataset name (`tank`, `tank/home/ann`).
pub fn validate_name(name: &str) -> Result<(), DatasetError> {
    let bad = |why: &str| Err(DatasetError::InvalidName(why.to_string()));
    if name.is_empty() {
        return bad("empty name");
    }
    if name.len() > NAME_MAX {
        return bad("name is too long (at most 255 characters)");
    }
    if name.contains('@') {
        return bad("snapshot delimiter '@' is not expected here");
    }
    if name.contains('#') {
        return bad("bookmark delimiter '#' is not expected here");
    }
    for component in name.split('/') {
        if component.is_empty() {
            return bad("empty component (leading, trailing or double '/')");
        }
        if component == "." || component == ".." {
            return bad("'.' and '..' are not valid components");
        }
        if let Some(c) = component
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | ' ')))
        {
            return Err(DatasetError::InvalidName(format!(
                "invalid character '{c}' (valid: letters, digits, '_', '-', '.', ':', ' ')"
            )));
        }
    }
    Ok(())
}

/// The parent's name (`None` for a pool's root dataset).
#[must_use]
pub fn parent_name(name: &str) -> Option<&str> {
    name.rsplit_once('/').map(|(parent, _)| parent)
}

/// The last component (`ann` of `tank/home/ann`).
#[must_use]
pub fn leaf_name(name: &str) -> &str {
    name.rsplit_once('/').map_or(name, |(_, leaf)| leaf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["tank", "tank/a", "tank/a-b_c.d:e", "t/a/b/c"] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in [
            "", "tank//a", "tank/", "/tank", "tank/a@b", "tank/a#b", "tank/.", "ta*nk",
        ] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
        assert!(validate_name(&"a".repeat(256)).is_err());
        assert_eq!(parent_name("tank/a/b"), Some("tank/a"));
        assert_eq!(parent_name("tank"), None);
        assert_eq!(leaf_name("tank/a/b"), "b");
    }
}
