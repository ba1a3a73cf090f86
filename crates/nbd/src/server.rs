//! One NBD connection: the fixed-newstyle handshake, then the transmission phase with
//! several requests served at once by a few worker threads that live as long as the
//! connection (`std::thread::scope`), replies written whole under one lock.

use std::io::{self, IoSlice, Read, Write};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

use crate::codec::{self, ReplyStyle, Request, cflags, chunk, cmd, errno, opt, rep, tflags};
use crate::{Backend, BackendError, Chunk, Export, ReadData};

/// Largest READ or WRITE payload (the block-size maximum advertised).
pub const PAYLOAD_MAX: u64 = 32 << 20;
/// Worker threads per connection: requests served at once.
pub const WORKERS: usize = 4;
/// Requests read ahead of the workers (bounds memory: each holds at most a payload).
const QUEUE: usize = 4;
/// Options a client may send before it must have chosen an export.
const OPTIONS_MAX: usize = 1024;
/// Largest option payload skipped (answered `ERR_TOO_BIG`); a larger one disconnects.
const OPTION_SKIP_MAX: u64 = 16 << 20;
/// Largest range one BLOCK_STATUS answers (compact descriptors are 32-bit).
const STATUS_LEN_MAX: u64 = 1 << 30;
/// Largest range one CACHE reads ahead.
const CACHE_LEN_MAX: u64 = 8 << 20;
/// The zeros a reply's holes are written from, a piece at a time.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// How a connection ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The socket failed or the client went away.
    #[error("connection: {0}")]
    Io(#[from] io::Error),
    /// The client broke the protocol (the connection was dropped).
    #[error("protocol: {0}")]
    Protocol(String),
}

/// What the handshake settled.
struct Session {
    export: Export,
    style: ReplyStyle,
    allocation: bool,
}

/// What a connection offers for TLS (crate doc, "TLS").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tls {
    /// Not offered: STARTTLS is answered `ERR_UNSUP`.
    Off,
    /// Offered: STARTTLS upgrades the connection; a client may also go on in the clear.
    Offered,
    /// Required: nothing but STARTTLS and ABORT is served before the upgrade.
    Required,
    /// The upgrade is done: the handshake goes on over the decrypted stream, with the
    /// client's NO_ZEROES flag from the greeting.
    Established {
        /// The client asked for no zero padding after EXPORT_NAME.
        no_zeroes: bool,
    },
}

/// How [`serve_tls`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// The client is done (disconnected, aborted, or its session ended).
    Closed,
    /// STARTTLS was acknowledged: run the TLS handshake on the socket, then call
    /// [`serve_tls`] again with [`Tls::Established`].
    StartTls {
        /// The client's NO_ZEROES flag, for [`Tls::Established`].
        no_zeroes: bool,
    },
}

/// Serves one connection until the client disconnects: `reader` and `writer` are the two
/// directions of one socket (no TLS).
pub fn serve<R: Read, W: Write + Send>(
    reader: R,
    writer: W,
    backend: &dyn Backend,
) -> Result<(), ServeError> {
    serve_tls(reader, writer, backend, Tls::Off).map(drop)
}

/// [`serve`] under the TLS policy `tls`.
pub fn serve_tls<R: Read, W: Write + Send>(
    mut reader: R,
    writer: W,
    backend: &dyn Backend,
    tls: Tls,
) -> Result<Served, ServeError> {
    let mut writer = writer;
    let session = match handshake(&mut reader, &mut writer, backend, tls)? {
        End::Session(session) => session,
        End::Disconnect => return Ok(Served::Closed),
        End::StartTls { no_zeroes } => return Ok(Served::StartTls { no_zeroes }),
    };
    backend.connected(&session.export, true);
    let result = transmission(reader, writer, backend, &session);
    backend.connected(&session.export, false);
    result.map(|()| Served::Closed)
}

/// How the handshake ended.
enum End {
    Session(Session),
    Disconnect,
    StartTls { no_zeroes: bool },
}

fn protocol(text: impl Into<String>) -> ServeError {
    ServeError::Protocol(text.into())
}

/// Handshake state between options.
struct Haggle {
    no_zeroes: bool,
    style: ReplyStyle,
    allocation: bool,
    tls: Tls,
}

/// The handshake, until an export was chosen, a soft disconnect or STARTTLS.
fn handshake<R: Read, W: Write>(
    reader: &mut R,
    writer: &mut W,
    backend: &dyn Backend,
    tls: Tls,
) -> Result<End, ServeError> {
    let no_zeroes = if let Tls::Established { no_zeroes } = tls {
        no_zeroes
    } else {
        writer.write_all(&codec::encode_greeting())?;
        writer.flush()?;
        let mut flags = [0u8; 4];
        reader.read_exact(&mut flags)?;
        let flags = codec::decode_client_flags(flags).map_err(|e| protocol(e.to_string()))?;
        flags & codec::CLIENT_NO_ZEROES != 0
    };
    let mut state = Haggle {
        no_zeroes,
        style: ReplyStyle::Simple,
        allocation: false,
        tls,
    };
    for _ in 0..OPTIONS_MAX {
        let mut header = [0u8; 16];
        reader.read_exact(&mut header)?;
        let (option, len) =
            codec::decode_option_header(header).map_err(|e| protocol(e.to_string()))?;
        if len > codec::OPTION_LEN_MAX {
            if u64::from(len) > OPTION_SKIP_MAX {
                return Err(protocol("option payload too large"));
            }
            io::copy(&mut reader.take(u64::from(len)), &mut io::sink())?;
            reply(
                writer,
                option,
                rep::ERR_TOO_BIG,
                b"option payload too large",
            )?;
            continue;
        }
        let mut payload = vec![0u8; len as usize];
        reader.read_exact(&mut payload)?;
        if state.tls == Tls::Required && option != opt::STARTTLS && option != opt::ABORT {
            if option == opt::EXPORT_NAME {
                return Err(protocol("EXPORT_NAME before the TLS this server requires"));
            }
            reply(writer, option, rep::ERR_TLS_REQD, b"TLS required")?;
            continue;
        }
        let request = match codec::decode_option(option, &payload) {
            Ok(request) => request,
            Err(e) => {
                reply(writer, option, rep::ERR_INVALID, e.to_string().as_bytes())?;
                continue;
            }
        };
        if let Some(end) = option_step(writer, backend, &mut state, option, request)? {
            return Ok(end);
        }
    }
    Err(protocol("too many options"))
}

/// STARTTLS under the connection's policy (crate doc, "TLS").
fn start_tls<W: Write>(writer: &mut W, state: &Haggle) -> io::Result<Option<End>> {
    let option = opt::STARTTLS;
    match state.tls {
        Tls::Off => reply(writer, option, rep::ERR_UNSUP, b"TLS is not offered here")?,
        Tls::Established { .. } => {
            reply(writer, option, rep::ERR_INVALID, b"TLS already negotiated")?;
        }
        Tls::Offered | Tls::Required => {
            reply(writer, option, rep::ACK, &[])?;
            return Ok(Some(End::StartTls {
                no_zeroes: state.no_zeroes,
            }));
        }
    }
    Ok(None)
}

fn reply<W: Write>(writer: &mut W, option: u32, kind: u32, data: &[u8]) -> io::Result<()> {
    writer.write_all(&codec::encode_option_reply(option, kind, data))?;
    writer.flush()
}

/// Transmission flags of an export.
fn transmission_flags(export: &Export) -> u16 {
    let mut flags = tflags::HAS_FLAGS
        | tflags::SEND_FLUSH
        | tflags::SEND_FUA
        | tflags::SEND_TRIM
        | tflags::SEND_WRITE_ZEROES
        | tflags::CAN_MULTI_CONN
        | tflags::SEND_CACHE
        | tflags::SEND_FAST_ZERO;
    if export.readonly {
        flags |= tflags::READ_ONLY;
    }
    flags
}

/// One option: `Some` ends the handshake, `None` goes on haggling.
fn option_step<W: Write>(
    writer: &mut W,
    backend: &dyn Backend,
    state: &mut Haggle,
    option: u32,
    request: codec::OptionRequest,
) -> Result<Option<End>, ServeError> {
    use codec::OptionRequest as O;
    match request {
        O::ExportName(name) => {
            if state.style == ReplyStyle::Extended {
                return Err(protocol("EXPORT_NAME after extended headers"));
            }
            let export = backend
                .open(&name)
                .map_err(|e| protocol(format!("export '{name}': {}", e.message)))?;
            let size = export.size;
            let flags = transmission_flags(&export);
            writer.write_all(&codec::encode_export_name_reply(
                size,
                flags,
                state.no_zeroes,
            ))?;
            writer.flush()?;
            Ok(Some(End::Session(session(export, state))))
        }
        O::Info { go, name, .. } => {
            let Some(export) = info(writer, backend, option, &name)? else {
                return Ok(None);
            };
            Ok(go.then(|| End::Session(session(export, state))))
        }
        O::MetaContext { set, name, queries } => {
            meta_context(writer, backend, state, option, set, &name, &queries)?;
            Ok(None)
        }
        O::Bare(opt::ABORT) => {
            reply(writer, option, rep::ACK, &[])?;
            Ok(Some(End::Disconnect))
        }
        O::Bare(opt::STARTTLS) => Ok(start_tls(writer, state)?),
        O::Bare(opt::LIST) => {
            for name in backend.list() {
                reply(writer, option, rep::SERVER, &codec::rep_server(&name))?;
            }
            reply(writer, option, rep::ACK, &[])?;
            Ok(None)
        }
        O::Bare(kind) => {
            negotiate_headers(writer, state, kind)?;
            Ok(None)
        }
        O::Unknown(_) => {
            reply(writer, option, rep::ERR_UNSUP, b"option not supported")?;
            Ok(None)
        }
    }
}

/// `INFO` and `GO`: the export's size, flags and block sizes, then ACK (`None`: no such
/// export, answered `ERR_UNKNOWN`).
fn info<W: Write>(
    writer: &mut W,
    backend: &dyn Backend,
    option: u32,
    name: &str,
) -> io::Result<Option<Export>> {
    let export = match backend.open(name) {
        Ok(export) => export,
        Err(e) => {
            reply(writer, option, rep::ERR_UNKNOWN, e.message.as_bytes())?;
            return Ok(None);
        }
    };
    let flags = transmission_flags(&export);
    reply(
        writer,
        option,
        rep::INFO,
        &codec::info_export(export.size, flags),
    )?;
    let preferred = export.block_size.max(4096);
    let max = u32::try_from(PAYLOAD_MAX).expect("payload max fits u32");
    reply(
        writer,
        option,
        rep::INFO,
        &codec::info_block_size(1, preferred, max),
    )?;
    reply(writer, option, rep::ACK, &[])?;
    Ok(Some(export))
}

fn session(export: Export, state: &Haggle) -> Session {
    Session {
        export,
        style: state.style,
        allocation: state.allocation && state.style != ReplyStyle::Simple,
    }
}

/// `STRUCTURED_REPLY` and `EXTENDED_HEADERS`.
fn negotiate_headers<W: Write>(writer: &mut W, state: &mut Haggle, kind: u32) -> io::Result<()> {
    let next = if kind == opt::EXTENDED_HEADERS {
        ReplyStyle::Extended
    } else {
        ReplyStyle::Structured
    };
    if state.style == ReplyStyle::Extended {
        return reply(
            writer,
            kind,
            rep::ERR_EXT_HEADER_REQD,
            b"extended headers in use",
        );
    }
    if state.style == next {
        return reply(writer, kind, rep::ERR_INVALID, b"already negotiated");
    }
    // A change of reply style forgets the meta contexts chosen before it (spec).
    state.style = next;
    state.allocation = false;
    reply(writer, kind, rep::ACK, &[])
}

/// `LIST_META_CONTEXT` / `SET_META_CONTEXT`: only `base:allocation` exists.
fn meta_context<W: Write>(
    writer: &mut W,
    backend: &dyn Backend,
    state: &mut Haggle,
    option: u32,
    set: bool,
    name: &str,
    queries: &[String],
) -> Result<(), ServeError> {
    if state.style == ReplyStyle::Simple {
        reply(
            writer,
            option,
            rep::ERR_INVALID,
            b"structured replies not negotiated",
        )?;
        return Ok(());
    }
    if let Err(e) = backend.open(name) {
        reply(writer, option, rep::ERR_UNKNOWN, e.message.as_bytes())?;
        return Ok(());
    }
    let wanted = if set {
        queries.iter().any(|q| q == codec::BASE_ALLOCATION)
    } else {
        queries.is_empty()
            || queries
                .iter()
                .any(|q| q == codec::BASE_ALLOCATION || q == "base:")
    };
    if set {
        state.allocation = wanted;
    }
    if wanted {
        let data = codec::rep_meta_context(codec::BASE_ALLOCATION_ID, codec::BASE_ALLOCATION);
        reply(writer, option, rep::META_CONTEXT, &data)?;
    }
    reply(writer, option, rep::ACK, &[])?;
    Ok(())
}

/// A request read whole (with its payload), ready for a worker.
struct Job {
    request: Request,
    /// A WRITE's payload in pieces ([`payload_pieces`]); empty for other requests.
    payload: Vec<Vec<u8>>,
}

/// The transmission phase: this thread reads requests, [`WORKERS`] threads serve them.
fn transmission<R: Read, W: Write + Send>(
    mut reader: R,
    writer: W,
    backend: &dyn Backend,
    session: &Session,
) -> Result<(), ServeError> {
    let out = Replies {
        writer: Mutex::new(writer),
        style: session.style,
    };
    let (send, receive) = sync_channel::<Job>(QUEUE);
    let receive = Arc::new(Mutex::new(receive));
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            let receive = Arc::clone(&receive);
            let out = &out;
            scope.spawn(move || worker(&receive, out, backend, session));
        }
        let result = read_requests(&mut reader, &send, session);
        drop(send);
        result
    })
}

fn worker<W: Write>(
    receive: &Mutex<Receiver<Job>>,
    out: &Replies<W>,
    backend: &dyn Backend,
    session: &Session,
) {
    loop {
        let job = {
            let Ok(receive) = receive.lock() else { return };
            match receive.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        // A reply that cannot be written means the client is gone; the reader sees it too.
        let _ = execute(out, backend, session, job);
    }
}

/// Reads requests until DISC or the end of the stream (a malformed header ends it).
fn read_requests<R: Read>(
    reader: &mut R,
    send: &SyncSender<Job>,
    session: &Session,
) -> Result<(), ServeError> {
    let extended = session.style == ReplyStyle::Extended;
    let len = if extended {
        codec::EXTENDED_REQUEST_LEN
    } else {
        codec::REQUEST_LEN
    };
    let mut header = [0u8; codec::EXTENDED_REQUEST_LEN];
    loop {
        match reader.read_exact(&mut header[..len]) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let request =
            codec::decode_request(&header[..len], extended).map_err(|e| protocol(e.to_string()))?;
        let mut payload = Vec::new();
        if request.kind == cmd::WRITE {
            if request.len > PAYLOAD_MAX {
                // The payload cannot be skipped safely at this size: hard disconnect.
                return Err(protocol("write payload too large"));
            }
            let block = u64::from(session.export.block_size);
            payload = read_payload(reader, request.offset, request.len, block)?;
        }
        if request.kind == cmd::DISC {
            return Ok(());
        }
        if send.send(Job { request, payload }).is_err() {
            return Ok(());
        }
    }
}

/// The lengths of the pieces a WRITE of `len` bytes at `offset` is read into: cut at every
/// multiple of `block` (the export's block size), so each whole block of the export the
/// write covers is a piece of its own and the ragged head and tail are pieces too; one
/// piece when `block` is 0. The lengths add up to `len`; none is 0.
pub fn payload_pieces(offset: u64, len: u64, block: u64) -> Vec<u64> {
    if block == 0 {
        return if len == 0 { Vec::new() } else { vec![len] };
    }
    let mut pieces = Vec::with_capacity(len.div_ceil(block) as usize + 1);
    // Counted down from `len`, not up to an end: a range past 2^64 (refused later, by
    // `check`) still has all its bytes read, or the stream would lose its place.
    let (mut at, mut left) = (offset, len);
    while left > 0 {
        let take = (block - at % block).min(left);
        pieces.push(take);
        at = at.wrapping_add(take);
        left -= take;
    }
    pieces
}

/// A WRITE's payload of `len` bytes at `offset` (at most [`PAYLOAD_MAX`]), read from the
/// socket straight into the buffers of its pieces ([`payload_pieces`] of `block`).
fn read_payload<R: Read>(
    reader: &mut R,
    offset: u64,
    len: u64,
    block: u64,
) -> io::Result<Vec<Vec<u8>>> {
    assert!(len <= PAYLOAD_MAX, "N4: a payload is at most PAYLOAD_MAX");
    let lengths = payload_pieces(offset, len, block);
    let mut pieces = Vec::with_capacity(lengths.len());
    for piece_len in lengths {
        // Zero-filled in a ready buffer of the stock (resident: a `memset`, no page
        // faults), so that the socket fills it in as few reads as it has bytes for;
        // `read_to_end` into spare capacity read 8 KiB first and doubled, four or five
        // reads per 128 KiB piece.
        let mut piece = tarn_base::stock::zeroed(piece_len as usize);
        reader.read_exact(&mut piece)?;
        pieces.push(piece);
    }
    Ok(pieces)
}

/// Writes `parts` whole with as few vectored writes as the writer takes (one for a socket
/// with room for them).
fn write_parts<W: Write>(writer: &mut W, parts: &[&[u8]]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = (parts.iter())
        .filter(|part| !part.is_empty())
        .map(|part| IoSlice::new(part))
        .collect();
    let mut rest = slices.as_mut_slice();
    while !rest.is_empty() {
        match writer.write_vectored(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => IoSlice::advance_slices(&mut rest, written),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The reply side of a connection.
struct Replies<W> {
    writer: Mutex<W>,
    style: ReplyStyle,
}

impl<W: Write> Replies<W> {
    fn send(&self, parts: &[&[u8]]) -> io::Result<()> {
        let mut writer = self
            .writer
            .lock()
            .map_err(|_| io::Error::other("reply lock poisoned"))?;
        write_parts(&mut *writer, parts)?;
        writer.flush()
    }

    /// Success without data.
    fn done(&self, request: &Request) -> io::Result<()> {
        match self.style {
            ReplyStyle::Simple | ReplyStyle::Structured => {
                self.send(&[&codec::encode_simple_reply(request.cookie, 0)])
            }
            ReplyStyle::Extended => {
                let header = codec::encode_chunk_header(
                    true,
                    chunk::FLAG_DONE,
                    chunk::NONE,
                    request.cookie,
                    request.offset,
                    0,
                );
                self.send(&[&header])
            }
        }
    }

    fn error(&self, request: &Request, error: &BackendError) -> io::Result<()> {
        if self.style == ReplyStyle::Simple {
            return self.send(&[&codec::encode_simple_reply(request.cookie, error.errno)]);
        }
        let payload = codec::error_payload(error.errno, &error.message);
        let header = codec::encode_chunk_header(
            self.style == ReplyStyle::Extended,
            chunk::FLAG_DONE,
            chunk::ERROR,
            request.cookie,
            request.offset,
            payload.len() as u64,
        );
        self.send(&[&header, &payload])
    }

    /// A read's reply, written from the backend's runs (N5).
    fn data(&self, request: &Request, data: &dyn ReadData) -> io::Result<()> {
        let chunks = data.chunks();
        let mut body: Vec<&[u8]> = Vec::with_capacity(chunks.len() + 2);
        let mut len = 0u64;
        for chunk in chunks {
            match chunk {
                Chunk::Bytes(bytes) => {
                    len += bytes.len() as u64;
                    body.push(bytes);
                }
                Chunk::Zeros(zeros) => {
                    len += zeros as u64;
                    let whole = zeros / ZEROS.len();
                    body.extend(std::iter::repeat_n(&ZEROS[..], whole));
                    body.push(&ZEROS[..zeros % ZEROS.len()]);
                }
            }
        }
        assert_eq!(len, request.len, "N5: a read's runs cover its request");
        let header;
        let offset = request.offset.to_be_bytes();
        let head: [&[u8]; 2] = if self.style == ReplyStyle::Simple {
            header = codec::encode_simple_reply(request.cookie, 0).to_vec();
            [&header, &[]]
        } else {
            header = codec::encode_chunk_header(
                self.style == ReplyStyle::Extended,
                chunk::FLAG_DONE,
                chunk::OFFSET_DATA,
                request.cookie,
                request.offset,
                8 + len,
            );
            [&header, &offset]
        };
        let parts: Vec<&[u8]> = head.into_iter().chain(body).collect();
        self.send(&parts)
    }

    fn status(&self, request: &Request, extents: &[(u64, u32)]) -> io::Result<()> {
        let extended = self.style == ReplyStyle::Extended;
        let payload = codec::block_status_payload(extended, codec::BASE_ALLOCATION_ID, extents);
        let kind = if extended {
            chunk::BLOCK_STATUS_EXT
        } else {
            chunk::BLOCK_STATUS
        };
        let header = codec::encode_chunk_header(
            extended,
            chunk::FLAG_DONE,
            kind,
            request.cookie,
            request.offset,
            payload.len() as u64,
        );
        self.send(&[&header, &payload])
    }
}

fn refused(errno: u32, message: &str) -> BackendError {
    BackendError {
        errno,
        message: message.to_string(),
    }
}

/// The checks every request passes before the backend sees it (the spec's errors).
fn check(request: &Request, session: &Session) -> Result<(), BackendError> {
    if request.flags & !cflags::KNOWN != 0 {
        return Err(refused(errno::EINVAL, "unknown command flags"));
    }
    let known = matches!(
        request.kind,
        cmd::READ | cmd::WRITE | cmd::FLUSH | cmd::TRIM | cmd::CACHE | cmd::WRITE_ZEROES
    ) || (request.kind == cmd::BLOCK_STATUS && session.allocation);
    if !known {
        return Err(refused(errno::EINVAL, "unknown or unnegotiated command"));
    }
    let writes = matches!(request.kind, cmd::WRITE | cmd::TRIM | cmd::WRITE_ZEROES);
    if writes && session.export.readonly {
        return Err(refused(errno::EPERM, "export is read-only"));
    }
    if request.kind == cmd::FLUSH {
        return Ok(());
    }
    let inside = request
        .offset
        .checked_add(request.len)
        .is_some_and(|end| end <= session.export.size);
    if !inside {
        let error = if writes { errno::ENOSPC } else { errno::EINVAL };
        return Err(refused(error, "range past the end of the export"));
    }
    if request.kind == cmd::READ && request.len > PAYLOAD_MAX {
        let error = if session.style == ReplyStyle::Simple {
            errno::EINVAL
        } else {
            errno::EOVERFLOW
        };
        return Err(refused(error, "read larger than the maximum block size"));
    }
    if request.kind == cmd::BLOCK_STATUS && request.len == 0 {
        return Err(refused(errno::EINVAL, "block status of nothing"));
    }
    Ok(())
}

/// Serves one request and writes its reply.
fn execute<W: Write>(
    out: &Replies<W>,
    backend: &dyn Backend,
    session: &Session,
    job: Job,
) -> io::Result<()> {
    let request = job.request;
    if let Err(error) = check(&request, session) {
        return out.error(&request, &error);
    }
    let export = &session.export;
    let fua = request.flags & cflags::FUA != 0;
    let result = match request.kind {
        cmd::READ => match backend.read(export, request.offset, request.len as usize) {
            Ok(data) => return out.data(&request, data.as_ref()),
            Err(e) => Err(e),
        },
        cmd::WRITE => backend.write(export, request.offset, job.payload, fua),
        cmd::FLUSH => backend.flush(export),
        cmd::TRIM | cmd::WRITE_ZEROES => backend.zero(export, request.offset, request.len, fua),
        cmd::CACHE => {
            let len = request.len.min(CACHE_LEN_MAX);
            backend.read(export, request.offset, len as usize).map(drop)
        }
        _ => match status(backend, export, &request) {
            Ok(extents) => return out.status(&request, &extents),
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => out.done(&request),
        Err(error) => out.error(&request, &error),
    }
}

/// `base:allocation` of a request's range: holes read as zeros.
fn status(
    backend: &dyn Backend,
    export: &Export,
    request: &Request,
) -> Result<Vec<(u64, u32)>, BackendError> {
    let len = request.len.min(STATUS_LEN_MAX);
    let mut extents: Vec<(u64, u32)> = backend
        .extents(export, request.offset, len)?
        .into_iter()
        .filter(|(len, _)| *len > 0)
        .map(|(len, hole)| {
            let flags = if hole {
                codec::STATE_HOLE | codec::STATE_ZERO
            } else {
                0
            };
            (len, flags)
        })
        .collect();
    if extents.is_empty() {
        return Err(refused(errno::EIO, "no extents"));
    }
    if request.flags & cflags::REQ_ONE != 0 {
        extents.truncate(1);
    }
    Ok(extents)
}
