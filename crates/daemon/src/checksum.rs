//! `tarn checksum` in the daemon: the path names a file of a mounted dataset (the deepest
//! mountpoint above it), the engine reads and hashes it (tarn-engine `checksum_ops`, the
//! cache in tarn-posix `filesum`), and with `--xattr` the value is also written as a user
//! attribute where grid middlewares read it (docs/CHECKSUM.md).
//!
//! The file is read through the engine, not through the mount: no FUSE round trip per
//! block, no page cache filled with data nobody will read again.

use std::path::Path;

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
        check_xattr_name(name)?;
    }
    let Some((name, within)) = mounts.locate(Path::new(path)) else {
        return Err(
            "not inside a mounted tarn dataset (checksums are of files on tarn mounts)".into(),
        );
    };
    let (pool, dataset) = engine.find_dataset(&name).map_err(|e| e.to_string())?;
    let sum = engine
        .file_checksum(&pool, dataset, &within, kind)
        .map_err(|e| describe(&e))?;
    let value = hex(&sum.value);
    if let Some(attr) = xattr {
        engine
            .file_set_xattr(&pool, dataset, &within, attr, value.as_bytes())
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

/// Only user attributes: the namespace any user's tools read, and the one grid middlewares
/// use (`user.storm.checksum.adler32`, `user.XrdCks.adler32`).
fn check_xattr_name(name: &str) -> Result<(), String> {
    match name.strip_prefix("user.") {
        Some(rest) if !rest.is_empty() && name.len() <= 255 => Ok(()),
        _ => Err(format!(
            "invalid attribute name '{name}' (valid: user.NAME, up to 255 bytes, e.g. \
             user.storm.checksum.adler32)"
        )),
    }
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
