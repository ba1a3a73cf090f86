//! `tarn checksum` in the daemon: the path names a file of a mounted dataset (the deepest
//! mountpoint above it), the engine reads and hashes it (tarn-engine `checksum_ops`, the
//! cache in tarn-posix `filesum`), and with `--xattr` the value is also written as a user
//! attribute where grid middlewares read it (docs/CHECKSUM.md): the hex text for StoRM and
//! most others, XRootD's binary record for `user.XrdCks.<algorithm>`. A path under
//! `.tarn/snapshot/SNAP/` names the file in that snapshot.
//!
//! The file is read through the engine, not through the mount: no FUSE round trip per
//! block, no page cache filled with data nobody will read again.

use std::path::Path;

use tarn_base::{Clock, SystemClock};
use tarn_engine::posix::PosixError;
use tarn_engine::posix::filesum::{FileSumKind, hex};
use tarn_engine::{Engine, EngineError};
use tarn_proto::{ChecksumRow, ReplyPayload, Request, Response};

use crate::mounts::MountTable;

/// The algorithms as help and errors list them.
#[must_use]
pub fn algorithms() -> String {
    FileSumKind::ALL.map(FileSumKind::name).join(", ")
}

/// Serves [`Request::Checksum`]; `None` for other requests.
#[must_use]
pub fn serve(engine: &Engine, mounts: &MountTable, request: &Request) -> Option<Response> {
    let Request::Checksum {
        path,
        algorithm,
        xattr,
    } = request
    else {
        return None;
    };
    Some(
        checksum(engine, mounts, path, algorithm, xattr.as_deref()).unwrap_or_else(Response::error),
    )
}

fn checksum(
    engine: &Engine,
    mounts: &MountTable,
    path: &str,
    algorithm: &str,
    xattr: Option<&str>,
) -> Result<Response, String> {
    let Some(kind) = FileSumKind::from_name(algorithm) else {
        return Err(format!(
            "unknown algorithm '{algorithm}' (valid: {})",
            algorithms()
        ));
    };
    if let Some(name) = xattr {
        check_xattr_name(name, kind)?;
    }
    let Some((name, within)) = mounts.locate(Path::new(path)) else {
        return Err(
            "not inside a mounted tarn dataset (checksums are of files on tarn mounts)".into(),
        );
    };
    let (pool, dataset) = engine.find_dataset(&name).map_err(|e| e.to_string())?;
    let sum = match in_snapshot(&within) {
        Some((snap, _)) if xattr.is_some() => {
            return Err(format!(
                "cannot write an attribute in snapshot '{name}@{snap}' (snapshots are \
                 read-only; leave out --xattr)"
            ));
        }
        Some((snap, path)) => {
            let guid = engine
                .fs_snapshot_dir(&pool, dataset)
                .map_err(|e| e.to_string())?
                .snapshots
                .into_iter()
                .find_map(|(n, guid)| (n == snap).then_some(guid))
                .ok_or_else(|| format!("no snapshot '{name}@{snap}'"))?;
            engine.snapshot_file_checksum(&pool, dataset, guid, path, kind)
        }
        None => engine.file_checksum(&pool, dataset, &within, kind),
    }
    .map_err(|e| describe(&e))?;
    let value = hex(&sum.value);
    if let Some(attr) = xattr {
        let bytes = match attr.starts_with(XRDCKS_PREFIX) {
            true => {
                let now = SystemClock::new().now_unix_secs();
                xrdcks_record(kind, &sum.value, sum.mtime, now)
            }
            false => value.clone().into_bytes(),
        };
        engine
            .file_set_xattr(&pool, dataset, &within, attr, &bytes)
            .map_err(|e| format!("cannot write attribute '{attr}': {}", describe(&e)))?;
        // The kernel may hold the file's attributes (ctime moved): drop them. Best effort.
        let _ = mounts.invalidate(&name);
    }
    Ok(Response::Ok(ReplyPayload::Checksum(ChecksumRow {
        path: path.to_string(),
        algorithm: kind.name().to_string(),
        value,
        size: sum.size,
        cached: sum.cached,
        stored: sum.stored,
        bytes_read: sum.bytes_read,
        xattr: xattr.map(str::to_string),
    })))
}

/// A path under a mount's snapshot list, `.tarn/snapshot/SNAP/PATH`: the snapshot's name and
/// PATH (empty for the snapshot's root).
fn in_snapshot(within: &str) -> Option<(&str, &str)> {
    let rest = within
        .strip_prefix(tarn_fuse::SNAPSHOT_DIR)?
        .strip_prefix('/')?;
    Some(rest.split_once('/').unwrap_or((rest, "")))
}

/// Only user attributes: the namespace any user's tools read, and the one grid middlewares
/// use (`user.storm.checksum.adler32`, `user.XrdCks.adler32`). XRootD's names carry the
/// algorithm, which must be the one computed.
fn check_xattr_name(name: &str, kind: FileSumKind) -> Result<(), String> {
    if let Some(algorithm) = name.strip_prefix(XRDCKS_PREFIX)
        && algorithm != kind.name()
    {
        return Err(format!(
            "invalid attribute name '{name}': XRootD keeps a {0} value in {XRDCKS_PREFIX}{0} \
             (valid: the algorithm computed, e.g. -a adler32 --xattr user.XrdCks.adler32)",
            kind.name()
        ));
    }
    match name.strip_prefix("user.") {
        Some(rest) if !rest.is_empty() && name.len() <= 255 => Ok(()),
        _ => Err(format!(
            "invalid attribute name '{name}' (valid: user.NAME, up to 255 bytes, e.g. \
             user.storm.checksum.adler32)"
        )),
    }
}

/// Where XRootD's checksum manager and `xrdadler32` keep a file's checksum: the attribute
/// `user.XrdCks.<algorithm>` holding [`xrdcks_record`].
const XRDCKS_PREFIX: &str = "user.XrdCks.";

/// XRootD's checksum record (its `XrdCksData` as `XrdCksXAttr` stores it), 96 bytes:
///
/// ```text
///   0  name      16  algorithm name, NUL-padded (at most 15 bytes)
///  16  fmTime     8  the file's mtime when computed, Unix seconds, big-endian
///  24  csTime     4  seconds from fmTime to the computation, big-endian
///  28  reserved   3  zero
///  31  length     1  bytes of the value
///  32  value     64  the binary value (adler32 big-endian, as XRootD's), zero-padded
/// ```
/// XRootD uses the value only while the file's mtime still equals fmTime, so a later write
/// makes it recompute rather than trust a stale copy.
// XRootD's record is in network order by its definition; the lint guards tarn's on-disk
// integers, which stay little-endian.
#[allow(clippy::big_endian_bytes)]
fn xrdcks_record(kind: FileSumKind, value: &[u8], mtime: i64, now: u64) -> Vec<u8> {
    let name = kind.name().as_bytes();
    assert!(
        name.len() < 16 && value.len() <= 64,
        "XrdCksData holds the value"
    );
    let mut record = vec![0u8; 96];
    record[..name.len()].copy_from_slice(name);
    record[16..24].copy_from_slice(&mtime.to_be_bytes());
    let delta = i64::try_from(now).unwrap_or(i64::MAX).saturating_sub(mtime);
    let delta = i32::try_from(delta.max(0)).unwrap_or(i32::MAX);
    record[24..28].copy_from_slice(&delta.to_be_bytes());
    record[31] = value.len() as u8;
    record[32..32 + value.len()].copy_from_slice(value);
    record
}

/// The engine's error in the words of this verb.
fn describe(error: &EngineError) -> String {
    match error {
        EngineError::Posix(PosixError::IsDir | PosixError::Invalid(_)) => {
            "not a regular file (checksums are of regular files)".into()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record byte for byte: name, big-endian times, length and value in place.
    #[test]
    #[allow(clippy::big_endian_bytes)]
    fn xrdcks_record_layout() {
        let value = [0x11, 0xe6, 0x03, 0x98];
        let record = xrdcks_record(FileSumKind::Adler32, &value, 1_700_000_000, 1_700_000_100);
        assert_eq!(record.len(), 96);
        assert_eq!(&record[..8], b"adler32\0");
        assert!(record[8..16].iter().all(|&b| b == 0));
        assert_eq!(record[16..24], 1_700_000_000i64.to_be_bytes());
        assert_eq!(record[24..28], 100i32.to_be_bytes());
        assert_eq!(record[28..31], [0, 0, 0]);
        assert_eq!(record[31], 4);
        assert_eq!(record[32..36], value);
        assert!(record[36..].iter().all(|&b| b == 0));
        // A clock behind the file's mtime gives 0, not a wrapped delta.
        let record = xrdcks_record(FileSumKind::Md5, &[7; 16], 50, 10);
        assert_eq!((record[24..28].to_vec(), record[31]), (vec![0; 4], 16));
    }

    #[test]
    fn xrdcks_names_must_match_the_algorithm() {
        assert!(check_xattr_name("user.XrdCks.adler32", FileSumKind::Adler32).is_ok());
        let refused = check_xattr_name("user.XrdCks.md5", FileSumKind::Adler32).unwrap_err();
        assert!(refused.contains("user.XrdCks.adler32"), "{refused}");
        assert!(check_xattr_name("user.storm.checksum.adler32", FileSumKind::Md5).is_ok());
    }
}
