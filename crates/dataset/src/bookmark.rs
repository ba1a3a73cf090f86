//! Bookmarks (ZFS's `dsl_bookmark`): what an incremental send needs of a snapshot, its GUID
//! and txg, kept under a name after the snapshot itself is destroyed. A bookmark holds no
//! block: `send -i DS#BM DS@SNAP` walks only blocks born after the bookmark's txg, and the
//! receiver matches the GUID against its own snapshot.
//!
//! ```text
//!  dataset props ZAP:  "%bookmark/NAME" -> "GUID TXG CREATION"   (decimal, one space apart)
//! ```
//! Stored in the dataset's property ZAP under a key no property can have (`%` starts no
//! property name; `send -p` leaves `%` keys out), like a partial receive's resume token, so
//! a bookmark goes with its dataset (destroy, rename) and needs no structure of its own.
//!
//! Invariants: B1: a bookmark's name is a valid snapshot name component; B2: its txg and GUID
//! are those of the snapshot (or bookmark) it was made from. Values read from disk are
//! parsed; a bad one is [`DatasetError::Corrupt`], never a panic.

use std::collections::BTreeMap;

use tarn_base::{Guid, Txg};

use crate::DatasetError;

/// Key prefix of a bookmark among a dataset's local properties.
pub const KEY_PREFIX: &str = "%bookmark/";

/// One bookmark of a dataset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bookmark {
    /// The part after `#`.
    pub name: String,
    /// The GUID of the snapshot it marks.
    pub guid: Guid,
    /// That snapshot's txg (`createtxg`).
    pub txg: Txg,
    /// That snapshot's creation time (Unix seconds).
    pub creation_time: u64,
}

impl Bookmark {
    /// Its key and value among the dataset's local properties.
    #[must_use]
    pub fn entry(&self) -> (String, String) {
        (
            format!("{KEY_PREFIX}{}", self.name),
            format!("{} {} {}", self.guid.0, self.txg.0, self.creation_time),
        )
    }
}

/// Splits `tank/a#mark` into the dataset and the bookmark name, validating both.
pub fn split_name(full: &str) -> Result<(&str, &str), DatasetError> {
    let Some((dataset, mark)) = full.split_once('#') else {
        return Err(DatasetError::InvalidName(
            "missing '#' delimiter in bookmark name".into(),
        ));
    };
    crate::name::validate_name(dataset)?;
    crate::snapshot::validate_snapshot_name(mark)?;
    if dataset.len() + 1 + mark.len() > crate::name::NAME_MAX {
        return Err(DatasetError::InvalidName("name is too long".into()));
    }
    Ok((dataset, mark))
}

/// The bookmarks among a dataset's local properties, oldest first.
pub fn list(local: &BTreeMap<String, String>) -> Result<Vec<Bookmark>, DatasetError> {
    let mut out = Vec::new();
    for (key, value) in local.range(KEY_PREFIX.to_string()..) {
        let Some(name) = key.strip_prefix(KEY_PREFIX) else {
            break;
        };
        let bad = || DatasetError::Corrupt(format!("bookmark '{name}' is '{value}'"));
        let words: Vec<u64> = value
            .split(' ')
            .map(|w| w.parse::<u64>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        let [guid, txg, creation_time] = words[..] else {
            return Err(bad());
        };
        out.push(Bookmark {
            name: name.to_string(),
            guid: Guid(guid),
            txg: Txg(txg),
            creation_time,
        });
    }
    out.sort_by_key(|b| (b.txg, b.name.clone()));
    Ok(out)
}

/// The bookmark `name` of a dataset whose local properties are `local`.
pub fn find(
    local: &BTreeMap<String, String>,
    name: &str,
) -> Result<Option<Bookmark>, DatasetError> {
    Ok(list(local)?.into_iter().find(|b| b.name == name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookmarks_round_trip_and_garbage_is_an_error() {
        let mark = Bookmark {
            name: "monday".into(),
            guid: Guid(77),
            txg: Txg(12),
            creation_time: 1_700_000_000,
        };
        let mut local = BTreeMap::new();
        local.insert("compression".to_string(), "lz4".to_string());
        let (key, value) = mark.entry();
        local.insert(key, value);
        local.insert("%receive_resume_token".to_string(), "x".to_string());
        assert_eq!(list(&local).unwrap(), vec![mark.clone()]);
        assert_eq!(find(&local, "monday").unwrap(), Some(mark));
        assert_eq!(find(&local, "tuesday").unwrap(), None);
        for bad in ["1 2", "1 2 3 4", "a 2 3", ""] {
            let mut local = BTreeMap::new();
            local.insert(format!("{KEY_PREFIX}x"), bad.to_string());
            assert!(list(&local).is_err(), "{bad}");
        }
        assert_eq!(split_name("tank/a#m").unwrap(), ("tank/a", "m"));
        for bad in ["tank/a", "tank/a#", "tank#a#b", "tank#a@b", "#a"] {
            assert!(split_name(bad).is_err(), "{bad}");
        }
    }
}
