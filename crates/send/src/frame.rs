//! Record framing: the 24-byte header, the payload and the 16-byte check of every record
//! (docs/FORMAT.md section 21.2), the running checksum a substream's END carries, and the
//! reader and writer over `std::io` streams.

use std::io::{Read, Write};

use crate::record::{Begin, Cursor, Kind, Record};
use crate::{FEATURE_CHAIN, FEATURE_STREAM_SIZE, Order, PAYLOAD_MAX, StreamError};

/// Bytes of a record header.
pub const HEADER_LEN: usize = 24;
/// Bytes of a record's check.
pub const TRAILER_LEN: usize = 16;
/// `TSND`, the first four bytes of every record.
const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"TSND");

/// Length of the payload of `record`.
#[must_use]
pub fn payload_len(record: &Record) -> usize {
    record.payload_len()
}

/// Bytes `record` takes in a stream (header, payload and check): what
/// [`StreamWriter::write`] writes for it.
#[must_use]
pub fn encoded_len(record: &Record) -> u64 {
    (HEADER_LEN + record.payload_len() + TRAILER_LEN) as u64
}

fn header_check(head: &[u8]) -> u32 {
    let hash = blake3::hash(head);
    let mut first = [0u8; 4];
    first.copy_from_slice(&hash.as_bytes()[..4]);
    u32::from_le_bytes(first)
}

fn header(kind: Kind, sequence: u64, len: usize) -> [u8; HEADER_LEN] {
    assert!(len <= PAYLOAD_MAX, "record payload of {len} bytes");
    let mut out = [0u8; HEADER_LEN];
    out[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
    out[4..6].copy_from_slice(&(kind as u16).to_le_bytes());
    out[8..16].copy_from_slice(&sequence.to_le_bytes());
    out[16..20].copy_from_slice(&(len as u32).to_le_bytes());
    let check = header_check(&out[..20]);
    out[20..24].copy_from_slice(&check.to_le_bytes());
    out
}

/// The 16-byte check of a record: BLAKE3 of its header and payload.
fn record_check(head: &[u8], parts: &[&[u8]]) -> [u8; TRAILER_LEN] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(head);
    for part in parts {
        hasher.update(part);
    }
    let mut out = [0u8; TRAILER_LEN];
    out.copy_from_slice(&hasher.finalize().as_bytes()[..TRAILER_LEN]);
    out
}

/// What a substream has seen so far: the sequence number of its next record, the bytes of
/// its records and the running checksum over their checks.
#[derive(Clone)]
struct Running {
    sequence: u64,
    bytes: u64,
    hasher: blake3::Hasher,
}

impl Running {
    fn new() -> Running {
        Running {
            sequence: 0,
            bytes: 0,
            hasher: blake3::Hasher::new(),
        }
    }

    fn add(&mut self, check: &[u8; TRAILER_LEN], len: u64) {
        self.hasher.update(check);
        self.bytes += len;
        self.sequence += 1;
    }

    fn end_record(&self) -> Record {
        Record::End {
            records: self.sequence,
            bytes: self.bytes,
            checksum: *self.hasher.finalize().as_bytes(),
        }
    }
}

/// Writes records to `W`, numbering them and keeping the running checksum; [`StreamWriter::end`]
/// closes a substream with its END record.
pub struct StreamWriter<W: Write> {
    inner: W,
    running: Running,
    in_substream: bool,
    total: u64,
    scratch: Vec<u8>,
}

impl<W: Write> StreamWriter<W> {
    /// A writer at the start of a stream.
    pub fn new(inner: W) -> Self {
        StreamWriter {
            inner,
            running: Running::new(),
            in_substream: false,
            total: 0,
            scratch: Vec::with_capacity(256),
        }
    }

    /// Writes one record (not END: [`StreamWriter::end`] does). A BEGIN starts a substream;
    /// every other record must be inside one.
    pub fn write(&mut self, record: &Record) -> Result<(), StreamError> {
        let begins = matches!(record, Record::Begin(_));
        assert!(
            begins != self.in_substream,
            "a BEGIN starts a substream, other records belong to one"
        );
        assert!(
            !matches!(record, Record::End { .. }),
            "END is written by StreamWriter::end"
        );
        self.in_substream = true;
        self.emit(record)
    }

    fn emit(&mut self, record: &Record) -> Result<(), StreamError> {
        self.scratch.clear();
        record.encode_payload(&mut self.scratch);
        let tail = record.payload_tail();
        let len = self.scratch.len() + tail.len();
        debug_assert_eq!(len, record.payload_len(), "I3: payload length");
        let head = header(record.kind(), self.running.sequence, len);
        let check = record_check(&head, &[&self.scratch, tail]);
        self.inner.write_all(&head)?;
        self.inner.write_all(&self.scratch)?;
        self.inner.write_all(tail)?;
        self.inner.write_all(&check)?;
        let frame = (HEADER_LEN + len + TRAILER_LEN) as u64;
        self.total += frame;
        self.running.add(&check, frame);
        Ok(())
    }

    /// Writes the END record of the current substream.
    pub fn end(&mut self) -> Result<(), StreamError> {
        assert!(self.in_substream, "END outside a substream");
        let end = self.running.end_record();
        self.emit(&end)?;
        self.running = Running::new();
        self.in_substream = false;
        Ok(())
    }

    /// Bytes written so far.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.total
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> Result<(), StreamError> {
        Ok(self.inner.flush()?)
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

/// Reads `buf.len()` bytes; `Ok(false)` when the stream ended before the first byte.
fn fill(inner: &mut impl Read, buf: &mut [u8], record: u64) -> Result<bool, StreamError> {
    let mut done = 0;
    while done < buf.len() {
        match inner.read(&mut buf[done..]) {
            Ok(0) if done == 0 => return Ok(false),
            Ok(0) => return Err(StreamError::Truncated { record }),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// Checks a header; returns its kind and payload length.
fn check_header(head: &[u8; HEADER_LEN], expected: u64) -> Result<(Kind, usize), StreamError> {
    let mut c = Cursor { bytes: head };
    let field = |r: Result<u64, &'static str>| r.unwrap_or(0);
    let magic = c.u32().map_or(0, u64::from);
    let kind = c.u16().map_or(0, |k| k);
    let _reserved = c.u16();
    let sequence = field(c.u64());
    let len = c.u32().map_or(0, u64::from);
    let check = c.u32().unwrap_or(0);
    if magic != u64::from(RECORD_MAGIC) {
        return Err(StreamError::BadMagic { record: expected });
    }
    if check != header_check(&head[..20]) {
        return Err(StreamError::HeaderChecksum { record: expected });
    }
    if sequence != expected {
        return Err(StreamError::Sequence {
            expected,
            found: sequence,
        });
    }
    let Some(kind_value) = Kind::from_u16(kind) else {
        return Err(StreamError::UnknownKind {
            record: sequence,
            kind,
        });
    };
    if len > PAYLOAD_MAX as u64 {
        return Err(StreamError::TooLarge {
            record: sequence,
            len,
            max: PAYLOAD_MAX as u64,
        });
    }
    Ok((kind_value, len as usize))
}

/// Decodes the one record at the start of `bytes` (expected to have sequence number
/// `sequence`); returns it and its length. The check of the record is verified; order
/// and running checksums are the [`StreamReader`]'s.
pub fn decode_frame(bytes: &[u8], sequence: u64) -> Result<(Record, usize), StreamError> {
    let mut input = bytes;
    let mut reader = StreamReader::new(&mut input);
    reader.running.sequence = sequence;
    let (record, len) = reader
        .read_frame()?
        .ok_or(StreamError::Truncated { record: sequence })?;
    Ok((record, len))
}

/// A chain of substreams being read ([`FEATURE_CHAIN`]): how many are still to end, out of
/// how many its first BEGIN counted, and the snapshot the last one brings (the next one's
/// source).
#[derive(Clone, Copy, Debug)]
struct Chain {
    left: u32,
    total: u32,
    to_guid: u64,
}

/// Reads records from `R`, checking each (I2). Returns `None` at the end of the input when
/// it falls between substreams, and outside a chain (a chain cut at a substream boundary is
/// [`StreamError::ChainTruncated`]).
pub struct StreamReader<R: Read> {
    inner: R,
    running: Running,
    in_substream: bool,
    order: Order,
    chain: Option<Chain>,
    total: u64,
    stream_size: u64,
    payload: Vec<u8>,
}

impl<R: Read> StreamReader<R> {
    /// A reader at the start of a stream.
    pub fn new(inner: R) -> Self {
        StreamReader {
            inner,
            running: Running::new(),
            in_substream: false,
            order: Order::default(),
            chain: None,
            total: 0,
            stream_size: 0,
            payload: Vec::new(),
        }
    }

    /// Bytes read so far.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.total
    }

    /// The size of the whole stream as its sender announced it ([`FEATURE_STREAM_SIZE`]):
    /// the bytes before the last BEGIN that carried a size plus that size, so that streams
    /// concatenated into one input each announce their own part; 0 while none did. A hint
    /// for progress only: never checked against the bytes that come, so it may be less
    /// than [`StreamReader::bytes`] (a wrong ETA, not an error).
    #[must_use]
    pub fn stream_size(&self) -> u64 {
        self.stream_size
    }

    /// Sequence number of the next record of the current substream.
    #[must_use]
    pub fn sequence(&self) -> u64 {
        self.running.sequence
    }

    /// Whether the reader is inside a substream (between a BEGIN and its END).
    #[must_use]
    pub fn in_substream(&self) -> bool {
        self.in_substream
    }

    /// Reads one record and checks its frame; `None` at end of input before a header.
    fn read_frame(&mut self) -> Result<Option<(Record, usize)>, StreamError> {
        let sequence = self.running.sequence;
        let mut head = [0u8; HEADER_LEN];
        if !fill(&mut self.inner, &mut head, sequence)? {
            return Ok(None);
        }
        let (kind, len) = check_header(&head, sequence)?;
        self.payload.clear();
        self.payload.resize(len, 0);
        let mut trailer = [0u8; TRAILER_LEN];
        let truncated = StreamError::Truncated { record: sequence };
        if len > 0 && !fill(&mut self.inner, &mut self.payload, sequence)? {
            return Err(truncated);
        }
        if !fill(&mut self.inner, &mut trailer, sequence)? {
            return Err(truncated);
        }
        let check = record_check(&head, &[&self.payload]);
        if check != trailer {
            return Err(StreamError::RecordChecksum {
                record: sequence,
                kind: kind.name(),
            });
        }
        let record = Record::decode_payload(kind, sequence, &self.payload)?;
        let frame = HEADER_LEN + len + TRAILER_LEN;
        if !matches!(record, Record::End { .. }) {
            self.running.add(&check, frame as u64);
        }
        self.total += frame as u64;
        Ok(Some((record, frame)))
    }

    /// The next record, checked (I2); `None` when the input ends between substreams.
    pub fn next_record(&mut self) -> Result<Option<Record>, StreamError> {
        let sequence = self.running.sequence;
        let expected_end = self.running.end_record();
        let Some((record, frame)) = self.read_frame()? else {
            if self.in_substream {
                return Err(StreamError::Truncated { record: sequence });
            }
            if let Some(chain) = self.chain {
                return Err(StreamError::ChainTruncated {
                    received: chain.total - chain.left,
                    total: chain.total,
                });
            }
            return Ok(None);
        };
        self.order.check(&record, sequence)?;
        match &record {
            Record::Begin(begin) => {
                self.chain_begin(begin)?;
                if begin.features & FEATURE_STREAM_SIZE != 0 {
                    let before = self.total - frame as u64;
                    self.stream_size = before.saturating_add(begin.stream_size);
                }
                self.in_substream = true;
            }
            Record::End { .. } => {
                if record != expected_end {
                    return Err(StreamError::EndChecksum { record: sequence });
                }
                self.running = Running::new();
                self.in_substream = false;
                self.chain_end();
            }
            _ => {}
        }
        Ok(Some(record))
    }

    /// A BEGIN and the chain ([`FEATURE_CHAIN`]): it starts one when none is being read;
    /// inside one it must be a chain substream counting one less than the one before and
    /// starting from the snapshot the one before brought, so a dropped, repeated or
    /// reordered substream of a chain is refused at its BEGIN.
    fn chain_begin(&mut self, begin: &Begin) -> Result<(), StreamError> {
        let bad = |why| StreamError::Order {
            record: 0,
            kind: Kind::Begin.name(),
            why,
        };
        let chained = begin.features & FEATURE_CHAIN != 0;
        match (&mut self.chain, chained) {
            (None, false) => {}
            (None, true) => {
                self.chain = Some(Chain {
                    left: begin.chain,
                    total: begin.chain,
                    to_guid: begin.to_guid,
                });
            }
            (Some(_), false) => return Err(bad("a substream inside a chain that is not of it")),
            (Some(chain), true) => {
                if begin.chain != chain.left {
                    return Err(bad("a chain substream out of its place in the chain"));
                }
                if begin.from_guid != chain.to_guid {
                    return Err(bad("a chain substream not from the snapshot before it"));
                }
                chain.to_guid = begin.to_guid;
            }
        }
        Ok(())
    }

    /// A substream's END: one substream less of the chain, if it is one's.
    fn chain_end(&mut self) {
        if let Some(chain) = &mut self.chain {
            assert!(chain.left > 0, "a chain being read has a substream left");
            chain.left -= 1;
            if chain.left == 0 {
                self.chain = None;
            }
        }
    }
}

#[cfg(test)]
impl<W: Write> StreamWriter<W> {
    pub(crate) fn set_sequence_for_tests(&mut self, sequence: u64) {
        self.running.sequence = sequence;
    }

    pub(crate) fn emit_for_tests(&mut self, record: &Record) -> Result<(), StreamError> {
        self.emit(record)
    }
}

#[cfg(test)]
pub(crate) fn tests_header_check(head: &[u8]) -> u32 {
    header_check(head)
}
