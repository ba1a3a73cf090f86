//! The NBD server over a socket pair against an in-memory backend: the handshake options
//! (LIST, INFO with block sizes, unknown options, STRUCTURED_REPLY, EXTENDED_HEADERS,
//! SET_META_CONTEXT, GO, ABORT), then requests in each reply style: simple replies,
//! structured chunks and extended chunks (64-bit block status), the spec's errors, and
//! several requests in flight answered by cookie; a mixed load of reads (some failing with
//! EIO) and writes of every size in flight at once, and a client gone mid-payload; a read's
//! reply written once from the runs its backend holds; a write's payload handed over in
//! pieces cut at the export's blocks; structured replies without extended headers (compact
//! block status, LIST_META_CONTEXT, CACHE); oversize requests.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.
#![allow(clippy::big_endian_bytes)] // NBD is big-endian.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tarn_nbd::codec::{self, chunk, cmd, errno, opt, rep};
use tarn_nbd::{Backend, BackendError, Chunk, Export, ReadData};

const SIZE: u64 = 1 << 20;

/// One export `mem` of [`SIZE`] bytes; blocks of 4K never written are holes.
struct Memory {
    /// The size the export reports; bytes past [`SIZE`] are never touched by the tests.
    size: u64,
    bytes: Mutex<Vec<u8>>,
    written: Mutex<Vec<bool>>,
    /// Reads starting in a 4K block whose index is `1 mod eio_every` fail with EIO (0: none).
    eio_every: u64,
    /// Every write served: (offset, data).
    writes: Mutex<Vec<(u64, Vec<u8>)>>,
    /// Every WRITE request as the server handed it over: (offset, the pieces' lengths).
    pieces: Mutex<Vec<(u64, Vec<usize>)>>,
}

impl Memory {
    fn new() -> Memory {
        Memory {
            size: SIZE,
            bytes: Mutex::new(vec![0; SIZE as usize]),
            written: Mutex::new(vec![false; (SIZE / 4096) as usize]),
            eio_every: 0,
            writes: Mutex::new(Vec::new()),
            pieces: Mutex::new(Vec::new()),
        }
    }
}

impl Memory {
    fn read_into(&self, _: &Export, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        if self.eio_every > 0 && (offset / 4096) % self.eio_every == 1 {
            // A failed read leaves the buffer half written, as a device error might.
            let half = buf.len() / 2;
            buf[..half].fill(0xee);
            return Err(BackendError {
                errno: errno::EIO,
                message: "injected".into(),
            });
        }
        let bytes = self.bytes.lock().unwrap();
        buf.copy_from_slice(&bytes[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }

    fn write_slice(
        &self,
        _: &Export,
        offset: u64,
        data: &[u8],
        _: bool,
    ) -> Result<(), BackendError> {
        self.writes.lock().unwrap().push((offset, data.to_vec()));
        let mut bytes = self.bytes.lock().unwrap();
        bytes[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        let mut written = self.written.lock().unwrap();
        for block in offset / 4096..(offset + data.len() as u64).div_ceil(4096) {
            written[block as usize] = true;
        }
        Ok(())
    }
}

impl Backend for Memory {
    fn list(&self) -> Vec<String> {
        vec!["mem".into()]
    }

    fn open(&self, name: &str) -> Result<Export, BackendError> {
        if name != "mem" {
            return Err(BackendError {
                errno: errno::EINVAL,
                message: "no such export".into(),
            });
        }
        Ok(Export {
            name: name.into(),
            token: 1,
            size: self.size,
            block_size: 4096,
            readonly: false,
        })
    }

    fn read(&self, e: &Export, offset: u64, len: usize) -> Result<Box<dyn ReadData>, BackendError> {
        let mut buf = vec![0; len];
        self.read_into(e, offset, &mut buf)?;
        Ok(Box::new(buf))
    }

    fn write(
        &self,
        e: &Export,
        offset: u64,
        pieces: Vec<Vec<u8>>,
        fua: bool,
    ) -> Result<(), BackendError> {
        let lengths = pieces.iter().map(Vec::len).collect();
        self.pieces.lock().unwrap().push((offset, lengths));
        self.write_slice(e, offset, &pieces.concat(), fua)
    }

    fn zero(&self, _: &Export, offset: u64, len: u64, _: bool) -> Result<(), BackendError> {
        let mut bytes = self.bytes.lock().unwrap();
        bytes[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }

    fn flush(&self, _: &Export) -> Result<(), BackendError> {
        Ok(())
    }

    fn extents(&self, _: &Export, offset: u64, len: u64) -> Result<Vec<(u64, bool)>, BackendError> {
        let written = self.written.lock().unwrap();
        let mut runs: Vec<(u64, bool)> = Vec::new();
        let mut at = offset;
        while at < offset + len {
            let hole = !written[(at / 4096) as usize];
            let next = ((at / 4096) + 1) * 4096;
            let step = next.min(offset + len) - at;
            match runs.last_mut() {
                Some(last) if last.1 == hole => last.0 += step,
                _ => runs.push((step, hole)),
            }
            at += step;
        }
        Ok(runs)
    }
}

/// A client end with a server thread on the other.
fn start() -> (UnixStream, std::thread::JoinHandle<()>) {
    let (client, server) = UnixStream::pair().unwrap();
    let handle = std::thread::spawn(move || {
        let writer = server.try_clone().unwrap();
        let _ = tarn_nbd::serve(server, writer, &Memory::new());
    });
    (client, handle)
}

/// [`start`] over `memory`, shared with the test.
fn start_with(memory: Arc<Memory>) -> (UnixStream, std::thread::JoinHandle<()>) {
    let (client, server) = UnixStream::pair().unwrap();
    let handle = std::thread::spawn(move || {
        let writer = server.try_clone().unwrap();
        let _ = tarn_nbd::serve(server, writer, &*memory);
    });
    (client, handle)
}

fn read_n(stream: &mut UnixStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    stream.read_exact(&mut buf).unwrap();
    buf
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().unwrap())
}

fn be64(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes[..8].try_into().unwrap())
}

/// Greets: reads the server's greeting and sends client flags.
fn greet(stream: &mut UnixStream) {
    let greeting = read_n(stream, 18);
    assert_eq!(be64(&greeting), codec::INIT_MAGIC);
    stream.write_all(&3u32.to_be_bytes()).unwrap();
}

/// Sends an option and returns every reply (type, data) up to the final one.
fn option(stream: &mut UnixStream, option: u32, payload: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut out = codec::OPTION_MAGIC.to_be_bytes().to_vec();
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    stream.write_all(&out).unwrap();
    let mut replies = Vec::new();
    loop {
        let head = read_n(stream, 20);
        assert_eq!(be64(&head), codec::OPTION_REPLY_MAGIC);
        assert_eq!(be32(&head[8..]), option);
        let kind = be32(&head[12..]);
        let data = read_n(stream, be32(&head[16..]) as usize);
        replies.push((kind, data));
        if kind != rep::INFO && kind != rep::SERVER && kind != rep::META_CONTEXT {
            return replies;
        }
    }
}

fn named(name: &str, tail: &[u8]) -> Vec<u8> {
    let mut out = (name.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(tail);
    out
}

fn meta_query(name: &str, query: &str) -> Vec<u8> {
    let mut tail = 1u32.to_be_bytes().to_vec();
    tail.extend_from_slice(&(query.len() as u32).to_be_bytes());
    tail.extend_from_slice(query.as_bytes());
    named(name, &tail)
}

fn send(stream: &mut UnixStream, kind: u16, flags: u16, cookie: u64, offset: u64, len: u64) {
    let request = codec::Request {
        flags,
        kind,
        cookie,
        offset,
        len,
    };
    stream
        .write_all(&codec::encode_request(&request, true))
        .unwrap();
}

/// One extended reply chunk: (flags, type, cookie, payload).
fn chunk_of(stream: &mut UnixStream) -> (u16, u16, u64, Vec<u8>) {
    let head = read_n(stream, 32);
    assert_eq!(be32(&head), codec::EXTENDED_REPLY_MAGIC);
    let flags = u16::from_be_bytes([head[4], head[5]]);
    let kind = u16::from_be_bytes([head[6], head[7]]);
    let payload = read_n(stream, be64(&head[24..]) as usize);
    (flags, kind, be64(&head[8..]), payload)
}

/// The handshake of [`extended_headers_end_to_end`]: every option answered as the spec says,
/// ending in GO with extended headers and `base:allocation`.
fn negotiate_extended(c: &mut UnixStream) {
    greet(c);
    let list = option(c, opt::LIST, &[]);
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].0, rep::SERVER);
    assert_eq!(option(c, 99, &[])[0].0, rep::ERR_UNSUP);
    assert_eq!(
        option(c, opt::GO, &[1, 2])[0].0,
        rep::ERR_INVALID,
        "short payload"
    );
    let info = option(c, opt::INFO, &named("nope", &[0, 0]));
    assert_eq!(info[0].0, rep::ERR_UNKNOWN);
    let query = meta_query("mem", codec::BASE_ALLOCATION);
    let meta = option(c, opt::SET_META_CONTEXT, &query);
    assert_eq!(
        meta[0].0,
        rep::ERR_INVALID,
        "meta contexts need structured replies first"
    );
    assert_eq!(option(c, opt::EXTENDED_HEADERS, &[])[0].0, rep::ACK);
    assert_eq!(
        option(c, opt::STRUCTURED_REPLY, &[])[0].0,
        rep::ERR_EXT_HEADER_REQD
    );
    let meta = option(c, opt::SET_META_CONTEXT, &query);
    assert_eq!(meta[0].0, rep::META_CONTEXT);
    assert_eq!(meta.last().unwrap().0, rep::ACK);
    let go = option(c, opt::GO, &named("mem", &[0, 1, 0, 3]));
    let kinds: Vec<u32> = go.iter().map(|r| r.0).collect();
    assert_eq!(kinds, [rep::INFO, rep::INFO, rep::ACK]);
    assert_eq!(be64(&go[0].1[2..]), SIZE);
}

/// Goal: the handshake answers every option as the spec says, and extended headers carry
/// reads, writes, 64-bit block status and errors; requests in flight are answered by cookie.
#[test]
fn extended_headers_end_to_end() {
    let (mut c, server) = start();
    negotiate_extended(&mut c);
    // Two writes in flight, then their replies in any order.
    for (cookie, offset) in [(10u64, 8192u64), (11, 65536)] {
        send(&mut c, cmd::WRITE, codec::cflags::FUA, cookie, offset, 4096);
        c.write_all(&[cookie as u8; 4096]).unwrap();
    }
    let mut cookies = vec![chunk_of(&mut c).2, chunk_of(&mut c).2];
    cookies.sort_unstable();
    assert_eq!(cookies, [10, 11]);
    send(&mut c, cmd::READ, 0, 12, 8192, 4096);
    let (flags, kind, cookie, payload) = chunk_of(&mut c);
    assert_eq!(
        (flags, kind, cookie),
        (chunk::FLAG_DONE, chunk::OFFSET_DATA, 12)
    );
    assert_eq!(be64(&payload), 8192);
    assert!(payload[8..].iter().all(|b| *b == 10));
    send(&mut c, cmd::BLOCK_STATUS, 0, 13, 0, SIZE);
    let (_, kind, _, payload) = chunk_of(&mut c);
    assert_eq!(kind, chunk::BLOCK_STATUS_EXT);
    assert_eq!(be32(&payload), codec::BASE_ALLOCATION_ID);
    assert_eq!(be32(&payload[4..]), 5, "hole, data, hole, data, hole");
    assert_eq!((be64(&payload[8..]), be64(&payload[16..])), (8192, 3));
    assert_eq!((be64(&payload[24..]), be64(&payload[32..])), (4096, 0));
    send(&mut c, cmd::READ, 0, 14, SIZE - 10, 20);
    let (_, kind, cookie, payload) = chunk_of(&mut c);
    assert_eq!(
        (kind, cookie, be32(&payload)),
        (chunk::ERROR, 14, errno::EINVAL)
    );
    send(&mut c, 77, 0, 15, 0, 0);
    assert_eq!(be32(&chunk_of(&mut c).3), errno::EINVAL, "unknown command");
    send(&mut c, cmd::FLUSH, 0, 16, 0, 0);
    assert_eq!(chunk_of(&mut c).1, chunk::NONE);
    send(&mut c, cmd::DISC, 0, 17, 0, 0);
    server.join().unwrap();
}

/// Goal: without negotiation replies are simple; EXPORT_NAME enters transmission with the
/// 10-byte answer (no zeroes asked for); a bad magic ends the connection.
#[test]
fn simple_replies_and_export_name() {
    let (mut c, server) = start();
    greet(&mut c);
    let mut out = codec::OPTION_MAGIC.to_be_bytes().to_vec();
    out.extend_from_slice(&opt::EXPORT_NAME.to_be_bytes());
    out.extend_from_slice(&3u32.to_be_bytes());
    out.extend_from_slice(b"mem");
    c.write_all(&out).unwrap();
    let answer = read_n(&mut c, 10);
    assert_eq!(be64(&answer), SIZE);
    let request = codec::Request {
        flags: 0,
        kind: cmd::READ,
        cookie: 5,
        offset: 0,
        len: 512,
    };
    c.write_all(&codec::encode_request(&request, false))
        .unwrap();
    let reply = read_n(&mut c, 16 + 512);
    assert_eq!(be32(&reply), codec::SIMPLE_REPLY_MAGIC);
    assert_eq!((be32(&reply[4..]), be64(&reply[8..])), (0, 5));
    let write = codec::Request {
        flags: 0,
        kind: cmd::WRITE,
        cookie: 6,
        offset: SIZE,
        len: 1,
    };
    c.write_all(&codec::encode_request(&write, false)).unwrap();
    c.write_all(&[1]).unwrap();
    let reply = read_n(&mut c, 16);
    assert_eq!(be32(&reply[4..]), errno::ENOSPC, "a write past the end");
    c.write_all(&[0xffu8; 28]).unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "a bad magic ends the connection");
    server.join().unwrap();
}

/// Goal: ABORT is acknowledged and ends the session.
#[test]
fn abort_ends_the_handshake() {
    let (mut c, server) = start();
    greet(&mut c);
    assert_eq!(option(&mut c, opt::ABORT, &[])[0].0, rep::ACK);
    server.join().unwrap();
}

/// A client end with a server thread on the other under TLS policy `tls`; the thread
/// returns how `serve_tls` ended.
fn start_tls(
    tls: tarn_nbd::Tls,
) -> (
    UnixStream,
    std::thread::JoinHandle<Result<tarn_nbd::Served, String>>,
) {
    let (client, server) = UnixStream::pair().unwrap();
    let handle = std::thread::spawn(move || {
        let writer = server.try_clone().unwrap();
        tarn_nbd::serve_tls(server, writer, &Memory::new(), tls).map_err(|e| e.to_string())
    });
    (client, handle)
}

/// Goal: STARTTLS per the spec under each policy. Off (a Unix socket): `ERR_UNSUP` and the
/// handshake goes on. Required: every option but STARTTLS gets `ERR_TLS_REQD` (and nothing
/// else happens: LIST lists nothing), STARTTLS gets ACK and the server hands the socket
/// back for the TLS handshake. Established: no second greeting, STARTTLS is `ERR_INVALID`,
/// GO chooses the export as usual. Required, EXPORT_NAME in the clear: the connection ends.
#[test]
fn starttls_follows_the_policy() {
    use tarn_nbd::{Served, Tls};
    let (mut c, server) = start_tls(Tls::Off);
    greet(&mut c);
    assert_eq!(option(&mut c, opt::STARTTLS, &[])[0].0, rep::ERR_UNSUP);
    assert_eq!(option(&mut c, opt::ABORT, &[])[0].0, rep::ACK);
    assert_eq!(server.join().unwrap(), Ok(Served::Closed));

    let (mut c, server) = start_tls(Tls::Required);
    greet(&mut c);
    assert_eq!(
        option(&mut c, opt::LIST, &[]),
        [(rep::ERR_TLS_REQD, b"TLS required".to_vec())]
    );
    let go = option(&mut c, opt::GO, &named("mem", &[0, 0]));
    assert_eq!(go[0].0, rep::ERR_TLS_REQD);
    assert_eq!(option(&mut c, opt::STARTTLS, &[1])[0].0, rep::ERR_INVALID);
    assert_eq!(option(&mut c, opt::STARTTLS, &[]), [(rep::ACK, Vec::new())]);
    // Client flags 3 include NO_ZEROES.
    assert_eq!(
        server.join().unwrap(),
        Ok(Served::StartTls { no_zeroes: true })
    );

    let (mut c, server) = start_tls(Tls::Established { no_zeroes: true });
    assert_eq!(option(&mut c, opt::STARTTLS, &[])[0].0, rep::ERR_INVALID);
    let go = option(&mut c, opt::GO, &named("mem", &[0, 0]));
    assert_eq!(go.last().unwrap().0, rep::ACK);
    let disconnect = codec::Request {
        flags: 0,
        kind: cmd::DISC,
        cookie: 1,
        offset: 0,
        len: 0,
    };
    c.write_all(&codec::encode_request(&disconnect, false))
        .unwrap();
    assert_eq!(server.join().unwrap(), Ok(Served::Closed));

    let (mut c, server) = start_tls(Tls::Required);
    greet(&mut c);
    let mut out = codec::OPTION_MAGIC.to_be_bytes().to_vec();
    out.extend_from_slice(&opt::EXPORT_NAME.to_be_bytes());
    out.extend_from_slice(&3u32.to_be_bytes());
    out.extend_from_slice(b"mem");
    c.write_all(&out).unwrap();
    assert!(
        server.join().unwrap().is_err(),
        "EXPORT_NAME in the clear ends it"
    );
}

/// The byte at `position` of the lower half in [`replies_in_flight_carry_only_their_own_request`].
fn pattern(position: u64) -> u8 {
    (position / 4096 * 7 + position % 251) as u8
}

/// What the client sent per cookie: (a write, offset, length).
type Sent = BTreeMap<u64, (bool, u64, u64)>;

/// Sends `count` reads of the lower half and writes of the upper half (each of its own byte),
/// lengths from 1 byte to 300 KiB in a mixed order, without waiting for replies.
fn send_mixed(c: &mut UnixStream, count: u64) -> Sent {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut sent = BTreeMap::new();
    for cookie in 0..count {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Big and small requests alternate, so replies of both sizes are in flight together.
        let len = if cookie % 2 == 0 {
            1 + x % (300 << 10)
        } else {
            1 + x % 4096
        };
        let len = len.min(SIZE / 2 - 1);
        let offset = (x >> 20) % (SIZE / 2 - len);
        if cookie % 3 == 0 {
            let offset = SIZE / 2 + offset;
            send(c, cmd::WRITE, 0, cookie, offset, len);
            c.write_all(&vec![cookie as u8; len as usize]).unwrap();
            sent.insert(cookie, (true, offset, len));
        } else {
            send(c, cmd::READ, 0, cookie, offset, len);
            sent.insert(cookie, (false, offset, len));
        }
    }
    sent
}

/// Checks every reply of [`send_mixed`]'s requests; returns (reads served, reads failed).
fn check_replies(sent: &Sent, got: &BTreeMap<u64, (u16, Vec<u8>)>) -> (usize, usize) {
    let (mut reads, mut failed) = (0, 0);
    for (cookie, (write, offset, len)) in sent {
        let (kind, payload) = &got[cookie];
        if *write {
            assert_eq!(*kind, chunk::NONE, "write {cookie} succeeded");
            continue;
        }
        if (offset / 4096) % 5 == 1 {
            assert_eq!(
                (*kind, be32(payload)),
                (chunk::ERROR, errno::EIO),
                "read {cookie}"
            );
            failed += 1;
            continue;
        }
        assert_eq!(*kind, chunk::OFFSET_DATA, "read {cookie}");
        assert_eq!(be64(payload), *offset);
        assert_eq!(
            payload.len() as u64 - 8,
            *len,
            "read {cookie}: its own length"
        );
        let wrong = (payload[8..].iter().zip(*offset..)).position(|(b, p)| *b != pattern(p));
        assert_eq!(
            wrong, None,
            "read {cookie} at {offset} len {len}: only its own bytes"
        );
        reads += 1;
    }
    (reads, failed)
}

/// Goal: with requests of every size in flight together on all workers, every reply carries
/// only its own request's bytes and length, also when reads fail (EIO, the buffer half
/// overwritten by the failed read), and a client that vanishes in the middle of a write's
/// payload ends the connection cleanly. Method: the lower half of the export holds a known
/// pattern and is only read; 400 requests, reads of the lower half and writes of the upper
/// half (each filled with its own byte), lengths from 1 byte to 300 KiB in a mixed order,
/// are sent without waiting while another thread collects the replies by cookie. Every read
/// that succeeded must be exactly the pattern of its range, every read starting in a
/// failing block an EIO chunk without data, and every write the backend saw exactly the
/// bytes sent for it. Then a write header with half its payload and the client gone: the
/// server thread ends without a panic.
#[test]
fn replies_in_flight_carry_only_their_own_request() {
    let mut memory = Memory::new();
    memory.eio_every = 5;
    {
        let mut bytes = memory.bytes.lock().unwrap();
        for (position, byte) in bytes.iter_mut().enumerate().take((SIZE / 2) as usize) {
            *byte = pattern(position as u64);
        }
    }
    let memory = Arc::new(memory);
    let (mut c, server) = start_with(Arc::clone(&memory));
    negotiate_extended(&mut c);
    let mut replies = c.try_clone().unwrap();
    let count = 400u64;
    let collector = std::thread::spawn(move || {
        let mut got = BTreeMap::new();
        for _ in 0..count {
            let (flags, kind, cookie, payload) = chunk_of(&mut replies);
            assert_eq!(flags, chunk::FLAG_DONE, "one chunk per reply");
            assert!(
                got.insert(cookie, (kind, payload)).is_none(),
                "one reply per cookie"
            );
        }
        got
    });
    let sent = send_mixed(&mut c, count);
    let (reads, failed) = check_replies(&sent, &collector.join().unwrap());
    assert!(
        reads > 100 && failed > 20,
        "both kinds of read: {reads} ok, {failed} failed"
    );
    let writes = memory.writes.lock().unwrap().clone();
    assert_eq!(writes.len(), sent.values().filter(|s| s.0).count());
    for (offset, data) in writes {
        let (cookie, _) = (sent.iter())
            .find(|(_, s)| s.0 && s.1 == offset && s.2 == data.len() as u64)
            .unwrap_or_else(|| panic!("a write at {offset} of {} was sent", data.len()));
        assert!(
            data.iter().all(|b| *b == *cookie as u8),
            "write {cookie}: its own bytes"
        );
    }
    // The client vanishes in the middle of a payload.
    send(&mut c, cmd::WRITE, 0, count, SIZE / 2, 65536);
    c.write_all(&[1u8; 30000]).unwrap();
    drop(c);
    server.join().expect("the server ends without a panic");
}

/// [`Memory`]'s export, but reads are answered as runs the backend holds ([`ReadData`]):
/// a quarter of the request as bytes, half as zeros, the rest as bytes again.
struct Held {
    memory: Memory,
}

struct HeldRuns {
    bytes: Arc<Vec<u8>>,
    split: (usize, usize),
}

impl ReadData for HeldRuns {
    fn chunks(&self) -> Vec<Chunk<'_>> {
        let (first, zeros) = self.split;
        vec![
            Chunk::Bytes(&self.bytes[..first]),
            Chunk::Zeros(zeros),
            Chunk::Bytes(&self.bytes[first..]),
        ]
    }
}

impl Backend for Held {
    fn list(&self) -> Vec<String> {
        self.memory.list()
    }
    fn open(&self, name: &str) -> Result<Export, BackendError> {
        self.memory.open(name)
    }
    fn read(&self, _: &Export, offset: u64, len: usize) -> Result<Box<dyn ReadData>, BackendError> {
        let (first, zeros) = (len / 4, len / 2);
        let bytes = (0..len - zeros)
            .map(|i| pattern(offset + i as u64))
            .collect();
        Ok(Box::new(HeldRuns {
            bytes: Arc::new(bytes),
            split: (first, zeros),
        }))
    }
    fn write(
        &self,
        e: &Export,
        offset: u64,
        pieces: Vec<Vec<u8>>,
        fua: bool,
    ) -> Result<(), BackendError> {
        self.memory.write(e, offset, pieces, fua)
    }
    fn zero(&self, e: &Export, offset: u64, len: u64, fua: bool) -> Result<(), BackendError> {
        self.memory.zero(e, offset, len, fua)
    }
    fn flush(&self, e: &Export) -> Result<(), BackendError> {
        self.memory.flush(e)
    }
    fn extents(&self, e: &Export, offset: u64, len: u64) -> Result<Vec<(u64, bool)>, BackendError> {
        self.memory.extents(e, offset, len)
    }
}

/// The server's side of the socket, counting the calls that write to it.
struct Counted {
    stream: UnixStream,
    writes: Arc<AtomicUsize>,
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.stream.write(buf)
    }
    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.stream.write_vectored(bufs)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

/// Goal (issue 19, CPU per byte): a READ's reply is written from the runs the backend holds
/// (no buffer of the server's is filled, nothing copied into one) with one vectored write
/// per reply, header and holes included, and carries exactly the backend's bytes. Method:
/// a backend whose reads are runs of bytes, zeros and bytes; a writer that counts its
/// calls; reads of several sizes, each reply checked byte for byte against the pattern
/// with the zeros in the middle.
#[test]
fn a_read_reply_is_written_once_from_the_backends_runs() {
    let held = Arc::new(Held {
        memory: Memory::new(),
    });
    let writes = Arc::new(AtomicUsize::new(0));
    let (mut c, server_end) = UnixStream::pair().unwrap();
    let server = {
        let (held, writes) = (Arc::clone(&held), Arc::clone(&writes));
        std::thread::spawn(move || {
            let stream = server_end.try_clone().unwrap();
            let writer = Counted { stream, writes };
            let _ = tarn_nbd::serve(server_end, writer, &*held);
        })
    };
    negotiate_extended(&mut c);
    // 160K holes: two and a half pieces of the server's zero buffer.
    for (cookie, offset, len) in [(1u64, 4096u64, 4096u64), (2, 1000, 320 << 10), (3, 0, 3)] {
        let before = writes.load(Ordering::SeqCst);
        send(&mut c, cmd::READ, 0, cookie, offset, len);
        let (flags, kind, got, payload) = chunk_of(&mut c);
        assert_eq!(
            (flags, kind, got),
            (chunk::FLAG_DONE, chunk::OFFSET_DATA, cookie)
        );
        assert_eq!(be64(&payload), offset);
        let data = &payload[8..];
        assert_eq!(data.len() as u64, len);
        let (first, zeros) = ((len / 4) as usize, (len / 2) as usize);
        for (i, byte) in data.iter().enumerate() {
            let want = match i {
                i if i < first => pattern(offset + i as u64),
                i if i < first + zeros => 0,
                i => pattern(offset + (i - zeros) as u64),
            };
            assert_eq!(*byte, want, "read {cookie}: byte {i}");
        }
        let calls = writes.load(Ordering::SeqCst) - before;
        assert_eq!(calls, 1, "read {cookie}: one write for its whole reply");
    }
    drop(c);
    server.join().unwrap();
}

/// Goal (issue 19, a written byte copied once): a WRITE's payload reaches the backend in
/// pieces cut at the export's block boundaries (a ragged head, whole blocks, a ragged tail),
/// each its own buffer, so a backend can keep the whole blocks without a copy; the bytes
/// are the ones sent, in order. Method: [`Memory`] (4K blocks) records the pieces' lengths
/// of each WRITE; an unaligned write spanning blocks, an aligned one of whole blocks, one
/// inside a block and one of nothing; every piece list checked, then the bytes read back.
/// `payload_pieces` of a range past 2^64 still adds up to the request's length.
#[test]
fn a_write_payload_is_handed_over_in_block_pieces() {
    let memory = Arc::new(Memory::new());
    let (mut c, server) = start_with(Arc::clone(&memory));
    negotiate_extended(&mut c);
    let writes: [(u64, u64, Vec<usize>); 4] = [
        (1000, 3 * 4096 + 500, vec![3096, 4096, 4096, 1500]),
        (65536, 2 * 4096, vec![4096, 4096]),
        (70000, 100, vec![100]),
        (81920, 0, vec![]),
    ];
    for (cookie, (offset, len, _)) in writes.iter().enumerate() {
        send(&mut c, cmd::WRITE, 0, cookie as u64, *offset, *len);
        let data: Vec<u8> = (0..*len).map(|i| pattern(offset + i)).collect();
        c.write_all(&data).unwrap();
        let (flags, kind, got, _) = chunk_of(&mut c);
        assert_eq!(
            (flags, kind, got),
            (chunk::FLAG_DONE, chunk::NONE, cookie as u64)
        );
    }
    let seen = memory.pieces.lock().unwrap().clone();
    let want: Vec<(u64, Vec<usize>)> = (writes.iter())
        .map(|(offset, _, pieces)| (*offset, pieces.clone()))
        .collect();
    assert_eq!(seen, want, "pieces cut at the 4K blocks");
    let bytes = memory.bytes.lock().unwrap().clone();
    for (offset, len, _) in &writes {
        let range = *offset as usize..(offset + len) as usize;
        let wrong = (bytes[range].iter().zip(*offset..)).position(|(b, p)| *b != pattern(p));
        assert_eq!(wrong, None, "write at {offset}: the bytes sent");
    }
    send(&mut c, cmd::DISC, 0, 9, 0, 0);
    server.join().unwrap();
    let past = tarn_nbd::server::payload_pieces(u64::MAX - 5000, 9000, 4096);
    assert_eq!(
        past.iter().sum::<u64>(),
        9000,
        "every byte of the payload is read"
    );
    assert_eq!(
        tarn_nbd::server::payload_pieces(5, 7, 0),
        [7],
        "no block size: one piece"
    );
}

/// [`send`] with the compact (32-bit length) request header.
fn send_compact(
    stream: &mut UnixStream,
    kind: u16,
    flags: u16,
    cookie: u64,
    offset: u64,
    len: u32,
) {
    let request = codec::Request {
        flags,
        kind,
        cookie,
        offset,
        len: u64::from(len),
    };
    let bytes = codec::encode_request(&request, false);
    stream.write_all(&bytes).unwrap();
}

/// One structured (not extended) reply chunk: (flags, type, cookie, payload).
fn structured_chunk(stream: &mut UnixStream) -> (u16, u16, u64, Vec<u8>) {
    let head = read_n(stream, 20);
    assert_eq!(be32(&head), codec::STRUCTURED_REPLY_MAGIC);
    let flags = u16::from_be_bytes([head[4], head[5]]);
    let kind = u16::from_be_bytes([head[6], head[7]]);
    let payload = read_n(stream, be32(&head[16..]) as usize);
    (flags, kind, be64(&head[8..]), payload)
}

/// The reply to a request that carries no data under structured replies: a NONE chunk, or
/// a simple reply, which the spec lets a server send for any command but READ and
/// BLOCK_STATUS; returns (cookie, error value).
fn done_of(stream: &mut UnixStream) -> (u64, u32) {
    let magic = be32(&read_n(stream, 4));
    if magic == codec::SIMPLE_REPLY_MAGIC {
        let rest = read_n(stream, 12);
        return (be64(&rest[4..]), be32(&rest));
    }
    assert_eq!(magic, codec::STRUCTURED_REPLY_MAGIC);
    let head = read_n(stream, 16);
    let (flags, kind) = (
        u16::from_be_bytes([head[0], head[1]]),
        u16::from_be_bytes([head[2], head[3]]),
    );
    assert_eq!((flags, kind), (chunk::FLAG_DONE, chunk::NONE));
    assert_eq!(be32(&head[12..]), 0, "no payload");
    (be64(&head[4..]), 0)
}

/// Negotiates STRUCTURED_REPLY without extended headers, lists and sets `base:allocation`
/// and enters transmission with GO on `mem`.
fn negotiate_structured(c: &mut UnixStream) {
    greet(c);
    assert_eq!(option(c, opt::STRUCTURED_REPLY, &[])[0].0, rep::ACK);
    for query in [
        &named("mem", &[0, 0, 0, 0])[..],
        &meta_query("mem", "base:"),
    ] {
        let listed = option(c, opt::LIST_META_CONTEXT, query);
        let kinds: Vec<u32> = listed.iter().map(|r| r.0).collect();
        assert_eq!(kinds, [rep::META_CONTEXT, rep::ACK], "LIST_META_CONTEXT");
        assert_eq!(be32(&listed[0].1), codec::BASE_ALLOCATION_ID);
        assert_eq!(&listed[0].1[4..], codec::BASE_ALLOCATION.as_bytes());
    }
    let query = meta_query("mem", codec::BASE_ALLOCATION);
    assert_eq!(
        option(c, opt::SET_META_CONTEXT, &query)[0].0,
        rep::META_CONTEXT
    );
    let go = option(c, opt::GO, &named("mem", &[0, 0]));
    assert_eq!(go.last().unwrap().0, rep::ACK);
}

/// Goal: a client that negotiates STRUCTURED_REPLY but not extended headers (older libnbd,
/// qemu before 9) gets structured chunks with compact headers: LIST_META_CONTEXT (no
/// query, and the `base:` namespace) lists `base:allocation`, READ is one OFFSET_DATA chunk,
/// BLOCK_STATUS the 32-bit descriptors of chunk type 5; CACHE and WRITE succeed (a NONE
/// chunk or a simple reply, as the spec allows).
/// Method: compact requests over the socket pair, every chunk header checked.
/// Negative control: with `Replies::status` sending 64-bit descriptors to every structured
/// client, this failed at the block status chunk's type.
#[test]
fn structured_replies_without_extended_headers() {
    let (mut c, server) = start();
    negotiate_structured(&mut c);
    send_compact(&mut c, cmd::WRITE, 0, 1, 8192, 4096);
    c.write_all(&[7u8; 4096]).unwrap();
    assert_eq!(done_of(&mut c), (1, 0), "WRITE");
    send_compact(&mut c, cmd::READ, 0, 2, 8192, 4096);
    let (flags, kind, cookie, payload) = structured_chunk(&mut c);
    assert_eq!(
        (flags, kind, cookie),
        (chunk::FLAG_DONE, chunk::OFFSET_DATA, 2)
    );
    assert_eq!(be64(&payload), 8192);
    assert!(payload[8..].iter().all(|b| *b == 7));
    send_compact(&mut c, cmd::BLOCK_STATUS, 0, 3, 0, SIZE as u32);
    let (flags, kind, cookie, payload) = structured_chunk(&mut c);
    assert_eq!(
        (flags, kind, cookie),
        (chunk::FLAG_DONE, chunk::BLOCK_STATUS, 3)
    );
    assert_eq!(be32(&payload), codec::BASE_ALLOCATION_ID);
    assert_eq!(
        payload.len(),
        4 + 3 * 8,
        "hole, data, hole: 32-bit descriptors"
    );
    let descriptors: Vec<(u32, u32)> = (payload[4..].chunks(8))
        .map(|d| (be32(d), be32(&d[4..])))
        .collect();
    assert_eq!(
        descriptors,
        [(8192, 3), (4096, 0), (SIZE as u32 - 12288, 3)]
    );
    send_compact(&mut c, cmd::CACHE, 0, 4, 0, SIZE as u32);
    assert_eq!(done_of(&mut c), (4, 0), "CACHE succeeds");
    send_compact(&mut c, cmd::DISC, 0, 5, 0, 0);
    server.join().unwrap();
}

/// Goal: a READ longer than the maximum payload the server announced is refused with the
/// spec's EOVERFLOW (structured replies) and the connection goes on; a WRITE that long,
/// whose payload the server will not read, ends the connection (the spec's hard
/// disconnect: the stream cannot be resynchronised). Method: a 64 MiB export (beyond
/// `PAYLOAD_MAX`, so the range check passes), compact requests of `PAYLOAD_MAX + 1`.
/// Negative control: with `check` answering EINVAL there too, this failed at the error.
#[test]
fn oversize_requests_get_eoverflow_or_a_disconnect() {
    let memory = Arc::new(Memory {
        size: 64 << 20,
        ..Memory::new()
    });
    let (mut c, server) = start_with(memory);
    negotiate_structured(&mut c);
    let over = u32::try_from(tarn_nbd::server::PAYLOAD_MAX + 1).unwrap();
    send_compact(&mut c, cmd::READ, 0, 1, 0, over);
    let (flags, kind, cookie, payload) = structured_chunk(&mut c);
    assert_eq!((flags, kind, cookie), (chunk::FLAG_DONE, chunk::ERROR, 1));
    assert_eq!(be32(&payload), errno::EOVERFLOW);
    send_compact(&mut c, cmd::READ, 0, 2, 0, 512);
    let (_, kind, cookie, payload) = structured_chunk(&mut c);
    assert_eq!(
        (kind, cookie, payload.len()),
        (chunk::OFFSET_DATA, 2, 8 + 512),
        "goes on"
    );
    send_compact(&mut c, cmd::WRITE, 0, 3, 0, over);
    let _ = c.write_all(&[1u8; 4096]);
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "no reply, the connection ends: {} bytes",
        rest.len()
    );
    server.join().unwrap();
}
