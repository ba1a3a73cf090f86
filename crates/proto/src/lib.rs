//! tarn-proto: the messages the `tarn` CLI and the tarn daemon exchange.
//!
//! # Purpose
//! One place that fixes the admin protocol: the requests a front end can make, the typed
//! replies the daemon gives back, the progress lines of long work, and the cache file the
//! daemon keeps of its imported pools. It is the only crate in the workspace with
//! serializable types (STYLE.md §1), so the engine never learns about JSON and the CLI never
//! learns about engine types.
//!
//! # Model
//! Line-delimited JSON over a Unix stream socket. Each message is one JSON document on one
//! line; JSON escapes newlines inside strings, so a line break always ends a message.
//!
//! ```text
//!   CLI                                       daemon
//!    | --- Request ---------------------------> |
//!    | <-- ServerLine::Progress  (0..n) ------- |   long work: scrub -w, resilver, send
//!    | <-- ServerLine::Response  (exactly 1) -- |
//!    | --- next Request (same connection) ----> |
//!
//!   send / receive (Request::wants_stream):
//!    | --- Request::Send / Receive -----------> |
//!    | <-- ServerLine::StreamWanted ----------- |
//!    | --- 1 byte + stdout/stdin (SCM_RIGHTS) > |   the daemon writes/reads the pipe itself
//!    | <-- Progress (0..n), Response ---------- |
//! ```
//! The stream's bytes never travel in these lines: passing the descriptor spares a copy
//! through the CLI and a JSON encoding of binary data (tarn-daemon's crate block, "Streams").
//!
//! A `Response` is `Ok(ReplyPayload)` with typed data (rows, trees) or `Error(ErrorReply)`
//! with the one-line reason. The CLI renders both; the daemon never formats tables.
//!
//! # State
//! None in memory. On disk: the cache file (`CacheFile`, JSON, written by tarn-daemon)
//! lists the pools the daemon re-imports at start.
//!
//! # Invariants
//! - I1: every encoded message is a single line: no `\n` before the terminating one.
//! - I2: no line longer than `MAX_LINE_BYTES` (terminator included) is produced by an encoder
//!   or accepted by a decoder; both sides enforce the same bound.
//! - I3: decoding arbitrary bytes returns `Ok` or `ProtoError`, never panics (fuzz target);
//!   nesting depth is bounded by serde_json's recursion limit (128).
//! - I4: a `VdevGroupSpec` of kind `Disk` names exactly one device; a `Mirror` at least two;
//!   a `Raidz(p)` at least `p + 1` and `1 <= p <= 3` (`VdevGroupSpec::check`).
//!
//! # Concurrency and context
//! Pure functions and plain data; `Send + Sync` everywhere.
//!
//! # Failure model
//! Malformed, truncated, oversized or unknown-variant input is a `ProtoError`; the daemon
//! answers it with an `ErrorReply` and the client reports it. Unknown object fields are
//! ignored so that an older peer tolerates added fields; unknown request variants are an
//! error ("unknown variant"), which is what an older daemon says to a newer CLI.
//!
//! # Not here
//! Sockets, threads and files (tarn-daemon); rendering of tables (tarn-cli); the meaning of
//! any request (the engine, behind tarn-daemon's `Handler`).

mod request;
mod response;

pub use request::{
    DatasetGet, PoolAdd, PoolCreate, PoolImport, Request, ScrubAction, VdevGroupSpec, VdevKind,
    VdevRole, VolumeCreate,
};
pub use response::{
    CacheEntry, CacheFile, ChecksumRow, DatasetProp, DatasetRow, DiffRow, ErrorReply, EventRow,
    HistoryEntry, HistoryPool, HoldRow, IOSTAT_LATENCY_BUCKETS, IOSTAT_SIZE_BUCKETS, ImportInfo,
    ImportablePool, IostatPool, IostatRow, IostatWait, IostatWaits, MemoryInfo, MountRow,
    NbdExportRow, PongInfo, PoolLayout, PoolListRow, PoolStatusInfo, Progress, ProjectRow,
    PropertyRow, ReplyPayload, Response, ScanStats, ServerLine, TxgRow, UserspaceRow, VdevNodeKind,
    VdevStatus,
};

/// Longest line (message plus its `\n`) either side sends or accepts: 16 MiB. Large enough
/// for a status reply of a pool at `TOP_VDEVS_MAX` top-level vdevs, small enough that a
/// confused peer cannot make the other side buffer without bound.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Version of the cache file layout written by `encode_cache_file`.
pub const CACHE_FILE_VERSION: u32 = 1;

/// Why a message could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// The line is longer than `MAX_LINE_BYTES`.
    #[error("message of {len} bytes exceeds the limit of {max} bytes")]
    TooLong {
        /// Length of the offending line in bytes.
        len: usize,
        /// The limit (`MAX_LINE_BYTES`).
        max: usize,
    },
    /// The bytes are not a valid message of the expected kind.
    #[error("malformed message: {source}")]
    Malformed {
        /// What serde_json found wrong (position and reason).
        #[from]
        source: serde_json::Error,
    },
    /// A cache file of a layout this build does not know.
    #[error("cache file version {found} is not supported (expected {expected})")]
    CacheVersion {
        /// Version found in the file.
        found: u32,
        /// Version this build writes.
        expected: u32,
    },
}

/// Encodes a request as one line, `\n` included.
pub fn encode_request(request: &Request) -> Result<Vec<u8>, ProtoError> {
    encode_line(request)
}

/// Decodes one request line (with or without its `\n`).
pub fn decode_request(line: &[u8]) -> Result<Request, ProtoError> {
    decode_line(line)
}

/// Encodes a daemon line (progress or final response) as one line, `\n` included.
pub fn encode_server_line(line: &ServerLine) -> Result<Vec<u8>, ProtoError> {
    encode_line(line)
}

/// Decodes one daemon line (with or without its `\n`).
pub fn decode_server_line(line: &[u8]) -> Result<ServerLine, ProtoError> {
    decode_line(line)
}

/// Encodes the cache file (pretty JSON so an admin can read it).
pub fn encode_cache_file(pools: &[CacheEntry]) -> Result<Vec<u8>, ProtoError> {
    let file = CacheFile {
        version: CACHE_FILE_VERSION,
        pools: pools.to_vec(),
    };
    let mut bytes = serde_json::to_vec_pretty(&file)?;
    bytes.push(b'\n');
    check_len(bytes.len())?;
    Ok(bytes)
}

/// Decodes the cache file and checks its version.
pub fn decode_cache_file(bytes: &[u8]) -> Result<Vec<CacheEntry>, ProtoError> {
    check_len(bytes.len())?;
    let file: CacheFile = serde_json::from_slice(bytes)?;
    if file.version != CACHE_FILE_VERSION {
        return Err(ProtoError::CacheVersion {
            found: file.version,
            expected: CACHE_FILE_VERSION,
        });
    }
    Ok(file.pools)
}

fn check_len(len: usize) -> Result<(), ProtoError> {
    if len > MAX_LINE_BYTES {
        return Err(ProtoError::TooLong {
            len,
            max: MAX_LINE_BYTES,
        });
    }
    Ok(())
}

fn encode_line<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, ProtoError> {
    let mut bytes = serde_json::to_vec(value)?;
    // I1: compact serde_json output escapes control characters inside strings, so the only
    // newline is the terminator added here.
    assert!(
        !bytes.contains(&b'\n'),
        "I1: encoded message contains a raw newline"
    );
    bytes.push(b'\n');
    check_len(bytes.len())?;
    Ok(bytes)
}

fn decode_line<T: serde::de::DeserializeOwned>(line: &[u8]) -> Result<T, ProtoError> {
    check_len(line.len())?;
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    Ok(serde_json::from_slice(body)?)
}

#[cfg(test)]
mod tests;
