//! tarn-nbd: the NBD server that serves volumes as block devices (no kernel module: any NBD
//! client, qemu, nbdcopy, nbdfuse or the kernel's nbd-client, talks to it).
//!
//! # Purpose
//! Speak the NBD protocol (fixed newstyle handshake, simple, structured and extended
//! replies, `base:allocation`) over one connection, and turn each request into a call of a
//! [`Backend`]: the daemon implements it over the engine's volume verbs, tests over memory.
//! This crate knows nothing of pools, datasets or the engine: it sits among the front ends
//! above tarn-fuse and below tarn-daemon (ARCHITECTURE.md "Layers") and depends on no
//! tarn crate but tarn-base (its buffers: `buf::zeroed`, from the daemon's buffer stock).
//!
//! # Model
//! ```text
//!  socket ── handshake (server::handshake) ── options: GO/INFO (block sizes), LIST,
//!     │                                        EXPORT_NAME, ABORT, STRUCTURED_REPLY,
//!     │                                        EXTENDED_HEADERS, LIST/SET_META_CONTEXT
//!     ▼
//!  transmission: reader thread ── bounded queue ── WORKERS threads ── Backend
//!                 (decode, payload)                 (check, execute)    │
//!                 replies: one lock, each written whole ◄───────────────┘
//!                 (one vectored write: header and the backend's runs)
//! ```
//! [`codec`] is the wire format, pure and fuzzed (request and option decoders:
//! `fuzz/fuzz_targets/nbd_request.rs`, `nbd_option.rs`); [`server`] the connection.
//!
//! # Invariants
//! - N1: every request read gets exactly one reply (simple, or chunks ending in one with
//!   the DONE flag), except DISC, which gets none.
//! - N2: a reply is written whole under the writer lock: replies of concurrent requests
//!   never interleave their bytes.
//! - N3: the backend never sees a range past the export's end, a write to a read-only
//!   export, or a payload over [`server::PAYLOAD_MAX`]: `server::check` answers those with
//!   the spec's errors first.
//! - N4: memory per connection is bounded: at most `WORKERS + QUEUE + 1` requests with
//!   payload exist at once (a read's [`ReadData`] lives only while its worker replies).
//! - N5: a read's reply carries exactly the request's length: the runs a backend hands
//!   over cover it (asserted; a backend that breaks this is a bug, and the stream could
//!   not be resynchronised).
//!
//! # Concurrency
//! One thread per connection reads; [`server::WORKERS`] serve requests in parallel and
//! end with the connection (`std::thread::scope`). Ordering between requests is the
//! client's business (the spec lets the server reorder); a FLUSH covers every write
//! already replied to because the backend's flush makes all acknowledged writes durable.
//!
//! # Failure model
//! Bytes from the socket are input: a malformed option gets `ERR_INVALID`, an unknown one
//! `ERR_UNSUP`, an oversize option payload `ERR_TOO_BIG`; a malformed request header or an
//! unskippable payload ends the connection (the stream cannot be resynchronised); a bad
//! request gets its errno (EINVAL, ENOSPC, EPERM, EOVERFLOW). A client vanishing
//! mid-request ends the connection after the requests in flight; a backend error (a volume
//! destroyed, a pool exported) is that request's EIO or ESHUTDOWN. Nothing here panics on
//! input.
//!
//! # Choices
//! A read's reply is written from where the backend holds the bytes ([`ReadData`]: the
//! daemon hands over the engine's cached blocks) with one vectored write per reply, header
//! included, and holes from one static zero buffer: no reply buffer is allocated,
//! zero-filled or copied into, which profiles of `nbdcopy` reads put at about a quarter of
//! the connection threads' time (docs/PERFORMANCE.md, "NBD with less CPU per byte"). A
//! write's payload is read from the socket straight into one buffer per block of the
//! export (`server::payload_pieces`: the ragged head and tail of an unaligned request are
//! pieces of their own), none zero-filled first, and handed over owned
//! ([`Backend::write`]): the daemon keeps each whole block as the volume's dirty
//! record, so a written byte is copied once, from the socket, and lands in fresh memory
//! once (docs/PERFORMANCE.md, "NBD writes copied once").
//!
//! WRITE_ZEROES with NO_HOLE is served like one without: tarn is copy-on-write, so space
//! set aside by writing zeros would not be the space a later write uses, and an all-zero
//! block is stored as a hole either way; the range reads as zeros, which is what the flag
//! needs from the client's side. FAST_ZERO always succeeds because zeroing never writes
//! data. The block sizes offered: minimum 1 (any alignment is served, partial blocks are
//! read, modified and written by the object layer), preferred the volume's block size (at
//! least 4K), maximum [`server::PAYLOAD_MAX`].
//!
//! # TLS
//! [`server::serve_tls`] takes the connection's [`server::Tls`] policy: `Off` (Unix sockets)
//! answers STARTTLS `ERR_UNSUP`; `Offered` and `Required` answer it `ACK` and return
//! [`server::Served::StartTls`], and the caller runs the TLS handshake on its socket and
//! calls again with `Established` over the decrypted stream, where the option haggling
//! goes on without a new greeting and from a clean state (nothing negotiated in the clear
//! carries over); `Required` answers every option but STARTTLS and ABORT with
//! `ERR_TLS_REQD` and ends the connection at EXPORT_NAME, which cannot be refused (the
//! spec's TLS-required mode). The TLS library itself is the caller's (the daemon's).
//!
//! # Not here
//! Listening sockets, TLS sessions and export tables (the daemon); `NBD_CMD_RESIZE`; meta
//! contexts other than `base:allocation`.

// The NBD protocol is big-endian (network order) by definition; the lint guards on-disk
// integers, which stay little-endian everywhere else.
#![allow(clippy::big_endian_bytes)]

pub mod codec;
pub mod server;

pub use server::{ServeError, Served, Tls, serve, serve_tls};

/// One export as a connection sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    /// The name clients ask for (a volume's dataset name).
    pub name: String,
    /// The backend's own key for it (the daemon: the dataset id).
    pub token: u64,
    /// Size in bytes.
    pub size: u64,
    /// The preferred I/O size (`volblocksize`).
    pub block_size: u32,
    /// Writes are refused with EPERM.
    pub readonly: bool,
}

/// Why the backend refused or failed a request: the NBD error value and a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    /// The error value sent to the client (`codec::errno`).
    pub errno: u32,
    /// For structured error replies and logs.
    pub message: String,
}

/// One run of a read's bytes as the backend holds them ([`ReadData`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chunk<'a> {
    /// These bytes.
    Bytes(&'a [u8]),
    /// This many zero bytes, stored nowhere (a hole).
    Zeros(usize),
}

/// A read's bytes where the backend holds them (the daemon: the engine's cached blocks),
/// written into the reply from there: no reply buffer, no copy into one.
pub trait ReadData: Send {
    /// The runs, in order; together exactly the request's length (N5).
    fn chunks(&self) -> Vec<Chunk<'_>>;
}

impl ReadData for Vec<u8> {
    fn chunks(&self) -> Vec<Chunk<'_>> {
        vec![Chunk::Bytes(self)]
    }
}

/// What the server needs from whoever holds the data.
pub trait Backend: Send + Sync {
    /// The names of every export (`NBD_OPT_LIST`).
    fn list(&self) -> Vec<String>;
    /// The export called `name`.
    fn open(&self, name: &str) -> Result<Export, BackendError>;
    /// Reads `len` bytes at `offset` as the backend holds them, for a reply written from
    /// there (READ and CACHE are served with this): a cached block is sent without a copy.
    fn read(
        &self,
        export: &Export,
        offset: u64,
        len: usize,
    ) -> Result<Box<dyn ReadData>, BackendError>;
    /// WRITE as the server read it: `pieces`, in order, are the payload written at
    /// `offset`, cut at the export's `block_size` boundaries (a ragged head, whole blocks,
    /// a ragged tail), each in a buffer of its own that the backend may keep: a whole block
    /// can become the backend's block without a copy. With `fua` durable before it
    /// returns.
    fn write(
        &self,
        export: &Export,
        offset: u64,
        pieces: Vec<Vec<u8>>,
        fua: bool,
    ) -> Result<(), BackendError>;
    /// TRIM and WRITE_ZEROES: `[offset, offset + len)` reads as zeros afterwards.
    fn zero(&self, export: &Export, offset: u64, len: u64, fua: bool) -> Result<(), BackendError>;
    /// Every write acknowledged so far is durable when this returns.
    fn flush(&self, export: &Export) -> Result<(), BackendError>;
    /// `(length, hole)` runs covering a prefix of `[offset, offset + len)`, in order.
    fn extents(
        &self,
        export: &Export,
        offset: u64,
        len: u64,
    ) -> Result<Vec<(u64, bool)>, BackendError>;
    /// A connection to `export` began (`true`) or ended.
    fn connected(&self, _export: &Export, _up: bool) {}
}
