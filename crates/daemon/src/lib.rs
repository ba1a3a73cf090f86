//! tarn-daemon: the process that owns imported pools, and the client the CLI reaches it with.
//!
//! # Purpose
//! `tarn daemon` keeps pools imported between commands and serves the admin protocol of
//! tarn-proto on a Unix socket. The CLI is a short-lived client that starts the daemon on
//! demand. The daemon does not know the engine: it serves any `Handler`, and the engine's
//! adapter (`backend::EngineBackend`) is one implementation. Tests use their own.
//!
//! # Model
//! ```text
//!   rundir/ (0700, owned by the daemon's uid)
//!     tarn.pid    pid of the daemon; exclusively locked while it runs (one daemon per rundir);
//!                 removed on clean exit (`daemon --stop`, SIGTERM, SIGINT)
//!     tarn.sock   the socket (0600); removed on clean exit, replaced if stale at start
//!     tarn.cache  pools to re-import at start (JSON, tarn-proto CacheFile), atomic rewrite
//!     daemon.log  timestamped log lines; the autostarted daemon's stdout/stderr go here too
//!
//!   CLI --connect--> tarn.sock --accept--> connection thread --request--> Handler
//!       (absent or refused: spawn `tarn --rundir DIR daemon`, poll the socket for 10 s)
//! ```
//! `serve` runs the accept loop on the calling thread and one thread per connection; a
//! connection carries any number of requests, one at a time.
//!
//! Streams (`send`, `receive`): the bytes of a send stream never travel in the JSON lines.
//! For a request with `Request::wants_stream` the daemon answers `ServerLine::StreamWanted`;
//! the client then sends one byte with its stdout (send) or stdin (receive) attached as
//! SCM_RIGHTS ancillary data (`passfd`, with rustix, whose received descriptors are
//! `OwnedFd`s, so no `unsafe`), and the daemon reads or writes that pipe or file itself:
//! no copy through the CLI, and `tarn send | ssh host tarn receive` streams at pipe speed.
//! The client sends nothing else until its response, so no buffered read of the socket can
//! swallow the byte the descriptor rides on. Progress lines and the final response follow
//! as for any request.
//!
//! # State
//! In memory: the phase (`running`/`stopping`) and the number of requests in the handler.
//! On disk: the four files above. The cache file is the only durable state of the daemon
//! itself; pool state lives on the pools' devices.
//!
//! # Invariants
//! - I1: at most one daemon serves a rundir: `serve` holds an exclusive `flock` on
//!   `tarn.pid` from before it touches the socket until it returns (the kernel drops it if
//!   the process dies).
//! - I2: after every request that may change the set of pools (`Request::changes_pool_set`),
//!   the cache file equals `Handler::cache_entries()`; it is replaced by rename, so a crash
//!   leaves the old or the new file, never a torn one.
//! - I3: once `stopping` is set no new request reaches the handler, and `Handler::shutdown`
//!   runs after the requests already in it returned (bounded wait, `SHUTDOWN_WAIT_SECS`).
//! - I4: every request line gets exactly one final `Response` line; malformed or over-long
//!   input gets an error response, never a panic or silence.
//!
//! # Concurrency and context
//! Threads: the accept loop (caller of `serve`), one per connection (at most
//! `CONNECTIONS_MAX`). Locks, in order: `Server::phase` (held only to count requests), then
//! `Server::cache_lock` (held while the cache file is rewritten). The handler is called
//! without any daemon lock held; it must be safe for concurrent calls.
//!
//! # Failure model
//! A cache entry that fails to re-import is logged and skipped; an unreadable cache file is
//! kept aside as `tarn.cache.bad` and the daemon starts without pools. A failed cache
//! rewrite is logged; the request's own response is still returned. A client that
//! disappears mid-request loses its progress lines and response; the request still runs to
//! its end. A panic in the handler ends that connection only (the client sees the
//! connection closed); the request counter is released by a drop guard.
//!
//! # Not here
//! - Peer credentials (`SO_PEERCRED`): std's `peer_cred` is unstable and this crate forbids
//!   `unsafe`, so access is enforced by the filesystem instead: the rundir is 0700 and must
//!   be owned by the daemon's uid, the socket is 0600.
//! - SIGTERM/SIGINT handling: installing a handler needs `unsafe` (or a crate the workspace
//!   does not have). A signal ends the daemon like a crash: the kernel releases the pid lock,
//!   the next daemon replaces the stale socket and re-imports from the cache file, and pools
//!   come back at their last committed txg. `tarn daemon --stop` (a `Shutdown` request) is
//!   the clean path.
//! - The meaning of requests: the engine, behind `Handler`.

pub mod backend;
pub mod checksum;
mod client;
pub mod heap;
mod lineio;
mod log;
pub mod memory;
pub mod metrics;
pub mod mounts;
pub mod nbd;
pub mod nbd_tls;
mod passfd;
mod server;
pub mod zedlets;

use std::path::PathBuf;

pub use client::{Client, wait_stopped};
pub use log::{LOG_BYTES_MAX, Logger, utc_timestamp};
pub use server::serve;

/// File name of the socket inside the rundir.
pub const SOCKET_FILE: &str = "tarn.sock";
/// File name of the pid/lock file inside the rundir.
pub const PID_FILE: &str = "tarn.pid";
/// File name of the cache file inside the rundir.
pub const CACHE_FILE: &str = "tarn.cache";
/// File name of the log inside the rundir.
pub const LOG_FILE: &str = "daemon.log";
/// Most connections served at once; more are answered with an error and closed.
pub const CONNECTIONS_MAX: usize = 64;
/// How long `Client::connect_or_start` waits for an autostarted daemon's socket.
pub const START_WAIT_SECS: u64 = 10;
/// How long a stopping daemon waits for requests already in the handler.
pub const SHUTDOWN_WAIT_SECS: u64 = 60;

/// The daemon's view of the engine: serves requests and remembers imported pools.
pub trait Handler: Send + Sync {
    /// Serves one request (may block for a long time, e.g. a scrub with wait).
    fn handle(&self, request: tarn_proto::Request) -> tarn_proto::Response;
    /// What to remember in the cache file: the imported pools and their device paths.
    fn cache_entries(&self) -> Vec<tarn_proto::CacheEntry>;
    /// Re-imports a pool remembered in the cache file at daemon start.
    fn import_cached(&self, entry: &tarn_proto::CacheEntry) -> Result<(), String>;
    /// Called once when the daemon shuts down cleanly (sync and close pools, keep them in
    /// cache).
    fn shutdown(&self);
    /// Serves one request and reports progress of long work through `progress`; each call
    /// becomes one `ServerLine::Progress` line to the client. The daemon always calls this
    /// method; the default ignores `progress` and calls `handle`.
    fn handle_with_progress(
        &self,
        request: tarn_proto::Request,
        progress: &mut dyn FnMut(tarn_proto::Progress),
    ) -> tarn_proto::Response {
        let _ = progress;
        self.handle(request)
    }
    /// Serves a request that carries a stream (`Request::wants_stream`): `stream` is the
    /// client's stdout (`send`) or stdin (`receive`), passed over the socket. The default
    /// refuses.
    fn handle_stream(
        &self,
        request: tarn_proto::Request,
        stream: std::os::fd::OwnedFd,
        progress: &mut dyn FnMut(tarn_proto::Progress),
    ) -> tarn_proto::Response {
        let _ = (stream, progress);
        tarn_proto::Response::error(format!("'{}' is not served here", request.verb()))
    }
}

/// What went wrong starting, running or reaching the daemon.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// The run directory could not be created, secured or read.
    #[error("cannot use run directory {}: {}", path.display(), describe_io(source))]
    Rundir {
        /// The rundir.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The run directory belongs to another user, so the socket in it is not private.
    #[error("run directory {} is owned by uid {owner}, not by uid {uid}", path.display())]
    RundirOwner {
        /// The rundir.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's uid.
        uid: u32,
    },
    /// Another daemon holds the pid lock of this rundir (I1).
    #[error("a tarn daemon is already running for {} (pid {pid})", rundir.display())]
    AlreadyRunning {
        /// The rundir.
        rundir: PathBuf,
        /// Pid written by the running daemon (as found in the pid file).
        pid: String,
    },
    /// A file in the rundir could not be used.
    #[error("cannot {what} {}: {}", path.display(), describe_io(source))]
    File {
        /// What was being done (`bind`, `write`, `lock`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The socket could not be reached.
    #[error("cannot connect to tarn daemon at {}: {}", socket.display(), describe_io(source))]
    Connect {
        /// Socket path.
        socket: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An autostarted daemon did not come up.
    #[error("cannot connect to tarn daemon at {}: {reason}", socket.display())]
    Start {
        /// Socket path.
        socket: PathBuf,
        /// What happened, with the log to read.
        reason: String,
    },
    /// Sending or receiving on an open connection failed.
    #[error("lost connection to tarn daemon at {}: {}", socket.display(), describe_io(source))]
    Connection {
        /// Socket path.
        socket: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The daemon closed the connection before its final response.
    #[error("tarn daemon at {} closed the connection without answering", socket.display())]
    Closed {
        /// Socket path.
        socket: PathBuf,
    },
    /// A message could not be encoded or decoded.
    #[error("protocol error with tarn daemon: {source}")]
    Protocol {
        /// The codec's error.
        #[from]
        source: tarn_proto::ProtoError,
    },
}

/// An I/O error as one lowercase phrase without the `(os error N)` suffix:
/// `no such file or directory`.
#[must_use]
pub fn describe_io(error: &std::io::Error) -> String {
    let text = error.to_string();
    let text = match text.find(" (os error") {
        Some(end) => &text[..end],
        None => text.as_str(),
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The rundir used when `--rundir` is not given: `$TARN_RUNDIR` if set, else `/run/tarn` for
/// root, else `$XDG_RUNTIME_DIR/tarn`, else `/tmp/tarn-$UID`.
#[must_use]
pub fn default_rundir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TARN_RUNDIR").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir);
    }
    let uid = current_uid();
    if uid == Some(0) {
        return PathBuf::from("/run/tarn");
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir).join("tarn");
    }
    match uid {
        Some(uid) => PathBuf::from(format!("/tmp/tarn-{uid}")),
        None => PathBuf::from("/tmp/tarn"),
    }
}

/// This process's effective uid, read without `unsafe` as the owner of `/proc/self` (Linux
/// creates it owned by the process's effective uid). `None` without procfs.
#[must_use]
pub fn current_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").ok().map(|meta| meta.uid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_read_as_lowercase_phrases() {
        let error = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(describe_io(&error), "no such file or directory");
        let error = std::io::Error::other("Custom text");
        assert_eq!(describe_io(&error), "custom text");
    }

    #[test]
    fn connect_error_has_the_cli_shape() {
        let error = DaemonError::Connect {
            socket: PathBuf::from("/run/tarn/tarn.sock"),
            source: std::io::Error::from_raw_os_error(libc::ECONNREFUSED),
        };
        assert_eq!(
            error.to_string(),
            "cannot connect to tarn daemon at /run/tarn/tarn.sock: connection refused"
        );
    }

    #[test]
    fn current_uid_matches_a_new_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let meta = std::fs::metadata(dir.path()).expect("metadata");
        assert_eq!(current_uid(), Some(meta.uid()));
    }
}
