//! The records of a stream and their payload encodings (little-endian, docs/FORMAT.md
//! section 21.3). Decoding checks every length and value against its bound.

use crate::manifest::Manifest;

/// `TARNSEND` read as a little-endian u64: the first field of every BEGIN payload.
pub const STREAM_MAGIC: u64 = u64::from_le_bytes(*b"TARNSEND");
/// The stream version this build writes and reads.
pub const STREAM_VERSION: u32 = 1;

/// Feature bit: WRITE records carry blocks as stored (compressed) (`send -c`).
pub const FEATURE_COMPRESSED: u64 = 1;
/// Feature bit: records larger than 128 KiB are kept whole (`send -L`).
pub const FEATURE_LARGE_BLOCKS: u64 = 1 << 1;
/// Feature bit: embedded block pointers may be sent as they are (`send -e`; tarn stores no
/// data in block pointers, so the bit only records the request).
pub const FEATURE_EMBEDDED: u64 = 1 << 2;
/// Feature bit: PROPERTY records follow BEGIN (`send -p`, `-R`).
pub const FEATURE_PROPERTIES: u64 = 1 << 3;
/// Feature bit: the substream resumes a partial one (`send -t`): it starts at
/// [`Begin::resume_object`]/[`Begin::resume_offset`].
pub const FEATURE_RESUMING: u64 = 1 << 4;
/// Feature bit: the substream is one dataset of a replication stream (`send -R`).
pub const FEATURE_REPLICATED: u64 = 1 << 5;
/// Feature bit: the substream's source snapshot is the origin of the dataset sent (`send -i
/// ORIGIN CLONE@SNAP`, and a clone in `send -R`): a receiver without the destination makes
/// it a clone of its snapshot of that GUID.
pub const FEATURE_CLONE: u64 = 1 << 6;
/// Feature bit: the substream is the manifest of a replication stream (`send -R`): MANIFEST
/// records only, listing the sent tree's datasets and snapshots (`crate::manifest`). A
/// receiver that does not know the bit refuses the stream at its first BEGIN.
pub const FEATURE_MANIFEST: u64 = 1 << 7;
/// Feature bit: the substream is one of a *chain* (`send -I` of two or more snapshots
/// without `-R`): its BEGIN's [`Begin::chain`] counts the chain's substreams from this one
/// to the last, so a receiver knows whether the input ended at the chain's end or was cut
/// at a substream boundary, and holds the chain until its last substream. A receiver that
/// does not know the bit refuses the stream at its first BEGIN.
pub const FEATURE_CHAIN: u64 = 1 << 8;
/// Feature bit: BEGIN's bytes 57..64 carry the size of the whole stream, all its substreams
/// included ([`Begin::stream_size`]), so that a receiver shows bytes of a total and the
/// time left. A sender sets it only in the stream's first BEGIN, and only when it sized the
/// stream first (`send -v` on a terminal, `send -P`). The size is a hint, never checked
/// against what arrives: a wrong one makes a wrong ETA, nothing else. A receiver that does
/// not know the bit refuses the stream at its first BEGIN.
pub const FEATURE_STREAM_SIZE: u64 = 1 << 9;
/// Every feature bit this build knows.
pub const FEATURES_KNOWN: u64 = FEATURE_COMPRESSED
    | FEATURE_LARGE_BLOCKS
    | FEATURE_EMBEDDED
    | FEATURE_PROPERTIES
    | FEATURE_RESUMING
    | FEATURE_REPLICATED
    | FEATURE_CLONE
    | FEATURE_MANIFEST
    | FEATURE_CHAIN
    | FEATURE_STREAM_SIZE;

/// Largest [`Begin::stream_size`]: it is a 56-bit field (64 PiB less a byte). A sender
/// whose stream is larger leaves the size out.
pub const STREAM_SIZE_MAX: u64 = (1 << 56) - 1;

/// Longest dataset or snapshot name in a record.
pub const NAME_MAX: usize = 1024;
/// Longest property value.
pub const VALUE_MAX: usize = 8192;
/// Longest bonus buffer (a dnode's).
pub const BONUS_MAX: usize = 320;
/// Largest data of one WRITE record (the largest block).
pub const DATA_MAX: usize = 16 << 20;
/// Payload length of an END record.
pub const END_LEN: usize = 48;

const _: () = assert!(DATA_MAX as u64 == tarn_base::limits::BLOCK_SIZE_MAX);

/// The kind of a record (its header's `kind` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Starts a substream.
    Begin = 1,
    /// An object's dnode.
    Object = 2,
    /// A range of free object slots.
    FreeObjects = 3,
    /// Data of an object.
    Write = 4,
    /// A hole or zeroed range of an object.
    Free = 5,
    /// A dataset property.
    Property = 6,
    /// Ends a substream.
    End = 7,
    /// The datasets and snapshots of a replication stream's tree.
    Manifest = 8,
}

impl Kind {
    /// The kind of a header's field, if known.
    #[must_use]
    pub fn from_u16(value: u16) -> Option<Kind> {
        Some(match value {
            1 => Kind::Begin,
            2 => Kind::Object,
            3 => Kind::FreeObjects,
            4 => Kind::Write,
            5 => Kind::Free,
            6 => Kind::Property,
            7 => Kind::End,
            8 => Kind::Manifest,
            _ => return None,
        })
    }

    /// Its name in messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Kind::Begin => "begin",
            Kind::Object => "object",
            Kind::FreeObjects => "freeobjects",
            Kind::Write => "write",
            Kind::Free => "free",
            Kind::Property => "property",
            Kind::End => "end",
            Kind::Manifest => "manifest",
        }
    }
}

/// How a WRITE record's data is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// The logical bytes.
    Raw = 0,
    /// LZ4 as the pool stored it (`send -c`).
    Lz4 = 1,
    /// Zstandard as the pool stored it.
    Zstd = 2,
    /// ZLE as the pool stored it.
    Zle = 3,
}

impl Encoding {
    fn from_u8(value: u8) -> Option<Encoding> {
        Some(match value {
            0 => Encoding::Raw,
            1 => Encoding::Lz4,
            2 => Encoding::Zstd,
            3 => Encoding::Zle,
            _ => return None,
        })
    }
}

/// The BEGIN record: what the substream is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Begin {
    /// Feature bits (`FEATURE_*`).
    pub features: u64,
    /// GUID of the snapshot the stream is relative to (0: a full stream).
    pub from_guid: u64,
    /// GUID of the snapshot the stream carries.
    pub to_guid: u64,
    /// The txg that snapshot was taken in, on the sending pool (informational).
    pub to_txg: u64,
    /// Its creation time (Unix seconds); the received snapshot keeps it.
    pub creation_time: u64,
    /// With [`FEATURE_CHAIN`], the substreams of its chain from this one to the last (at
    /// least 1: the last has 1); 0 without it.
    pub chain: u32,
    /// What the object set holds: 1 a filesystem, 2 a volume.
    pub objset_kind: u8,
    /// With [`FEATURE_STREAM_SIZE`], the bytes of the whole stream this BEGIN starts (every
    /// frame of every substream, as a reader counts them; at most [`STREAM_SIZE_MAX`]);
    /// 0 without it.
    pub stream_size: u64,
    /// With [`FEATURE_RESUMING`], the first object of the substream.
    pub resume_object: u64,
    /// With [`FEATURE_RESUMING`], the first offset in `resume_object`.
    pub resume_offset: u64,
    /// Full name of the snapshot the stream is relative to (empty for a full stream).
    pub from_name: String,
    /// Full name of the snapshot the stream carries (`pool/ds@snap`).
    pub to_name: String,
}

/// An OBJECT record: one dnode's shape and bonus buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRecord {
    /// Object id (>= 1).
    pub object: u64,
    /// Object type (never 0).
    pub object_type: u8,
    /// Bonus type.
    pub bonus_type: u8,
    /// log2 of the indirect block size.
    pub indirect_shift: u8,
    /// Dnode flags.
    pub flags: u8,
    /// Checksum override byte.
    pub checksum: u8,
    /// Compression override byte.
    pub compression: u8,
    /// Data block size in bytes (512..=16 MiB, a multiple of 512).
    pub data_block_size: u32,
    /// Highest block id of the object.
    pub maxblkid: u64,
    /// The bonus buffer (at most [`BONUS_MAX`] bytes).
    pub bonus: Vec<u8>,
}

/// A WRITE record: data of one block of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// Object id.
    pub object: u64,
    /// Byte offset in the object (a multiple of the block size).
    pub offset: u64,
    /// Logical size of the block.
    pub logical_size: u32,
    /// How `data` is encoded.
    pub encoding: Encoding,
    /// The bytes: `logical_size` of them when raw, fewer when compressed.
    pub data: Vec<u8>,
}

/// One record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// Starts a substream.
    Begin(Box<Begin>),
    /// An object's dnode.
    Object(ObjectRecord),
    /// `count` object slots from `first` are free.
    FreeObjects {
        /// First object id.
        first: u64,
        /// How many.
        count: u64,
    },
    /// Data of an object.
    Write(Write),
    /// `length` bytes of `object` from `offset` read as zeros (`u64::MAX`: to the end).
    Free {
        /// Object id.
        object: u64,
        /// Byte offset.
        offset: u64,
        /// Bytes.
        length: u64,
    },
    /// A dataset property (`send -p`): name and value.
    Property {
        /// Its name.
        name: String,
        /// Its value.
        value: String,
    },
    /// Ends a substream.
    End {
        /// Records of the substream before this one.
        records: u64,
        /// Their bytes.
        bytes: u64,
        /// The running checksum over their checks.
        checksum: [u8; 32],
    },
    /// One dataset of a replication stream's tree and its snapshots.
    Manifest(Manifest),
}

impl Record {
    /// Its kind.
    #[must_use]
    pub fn kind(&self) -> Kind {
        match self {
            Record::Begin(_) => Kind::Begin,
            Record::Object(_) => Kind::Object,
            Record::FreeObjects { .. } => Kind::FreeObjects,
            Record::Write(_) => Kind::Write,
            Record::Free { .. } => Kind::Free,
            Record::Property { .. } => Kind::Property,
            Record::End { .. } => Kind::End,
            Record::Manifest(_) => Kind::Manifest,
        }
    }

    /// Appends the payload encoding to `out`, except a WRITE record's data, which the
    /// frame writer passes on without a copy ([`Record::payload_tail`]).
    pub(crate) fn encode_payload(&self, out: &mut Vec<u8>) {
        match self {
            Record::Begin(begin) => encode_begin(begin, out),
            Record::Object(o) => {
                put64(out, o.object);
                out.extend_from_slice(&[
                    o.object_type,
                    o.bonus_type,
                    o.indirect_shift,
                    o.flags,
                    o.checksum,
                    o.compression,
                    0,
                    0,
                ]);
                put32(out, o.data_block_size);
                put16(out, o.bonus.len() as u16);
                put16(out, 0);
                put64(out, o.maxblkid);
                out.extend_from_slice(&o.bonus);
            }
            Record::FreeObjects { first, count } => {
                put64(out, *first);
                put64(out, *count);
            }
            Record::Write(w) => {
                put64(out, w.object);
                put64(out, w.offset);
                put32(out, w.logical_size);
                out.extend_from_slice(&[w.encoding as u8, 0, 0, 0]);
            }
            Record::Free {
                object,
                offset,
                length,
            } => {
                put64(out, *object);
                put64(out, *offset);
                put64(out, *length);
            }
            Record::Property { name, value } => {
                put_str16(out, name);
                put32(out, value.len() as u32);
                out.extend_from_slice(value.as_bytes());
            }
            Record::End {
                records,
                bytes,
                checksum,
            } => {
                put64(out, *records);
                put64(out, *bytes);
                out.extend_from_slice(checksum);
            }
            Record::Manifest(manifest) => manifest.encode(out),
        }
    }

    /// The part of the payload [`Record::encode_payload`] leaves out: a WRITE's data.
    pub(crate) fn payload_tail(&self) -> &[u8] {
        match self {
            Record::Write(w) => &w.data,
            _ => &[],
        }
    }

    /// Length of the whole payload (encoded part and tail).
    #[must_use]
    pub(crate) fn payload_len(&self) -> usize {
        match self {
            Record::Begin(begin) => 84 + begin.from_name.len() + begin.to_name.len(),
            Record::Object(o) => 32 + o.bonus.len(),
            Record::FreeObjects { .. } => 16,
            Record::Write(w) => 24 + w.data.len(),
            Record::Free { .. } => 24,
            Record::Property { name, value } => 2 + name.len() + 4 + value.len(),
            Record::End { .. } => END_LEN,
            Record::Manifest(manifest) => manifest.payload_len(),
        }
    }

    /// Decodes the payload of a record of `kind` (`record` is its sequence number, for
    /// errors). Every bound is checked; nothing here panics on any input (I1).
    pub(crate) fn decode_payload(
        kind: Kind,
        record: u64,
        payload: &[u8],
    ) -> Result<Record, crate::StreamError> {
        let bad = |why| crate::StreamError::Malformed {
            record,
            kind: kind.name(),
            why,
        };
        let mut r = Cursor { bytes: payload };
        let decoded = match kind {
            Kind::Begin => decode_begin(&mut r, record)?,
            Kind::Object => decode_object(&mut r).map_err(bad)?,
            Kind::FreeObjects => {
                let first = r.u64().map_err(bad)?;
                let count = r.u64().map_err(bad)?;
                if first == 0 || count == 0 || first.checked_add(count).is_none() {
                    return Err(bad("free object range is empty or overflows"));
                }
                Record::FreeObjects { first, count }
            }
            Kind::Write => decode_write(&mut r).map_err(bad)?,
            Kind::Free => {
                let object = r.u64().map_err(bad)?;
                let offset = r.u64().map_err(bad)?;
                let length = r.u64().map_err(bad)?;
                if object == 0 || length == 0 {
                    return Err(bad("free of object 0 or of no bytes"));
                }
                Record::Free {
                    object,
                    offset,
                    length,
                }
            }
            Kind::Property => {
                let name = r.str16(NAME_MAX).map_err(bad)?;
                let len = r.u32().map_err(bad)? as usize;
                if len > VALUE_MAX {
                    return Err(bad("property value too long"));
                }
                let value = String::from_utf8(r.take(len).map_err(bad)?.to_vec())
                    .map_err(|_| bad("property value is not UTF-8"))?;
                if name.is_empty() {
                    return Err(bad("empty property name"));
                }
                Record::Property { name, value }
            }
            Kind::End => {
                let records = r.u64().map_err(bad)?;
                let bytes = r.u64().map_err(bad)?;
                let mut checksum = [0u8; 32];
                checksum.copy_from_slice(r.take(32).map_err(bad)?);
                Record::End {
                    records,
                    bytes,
                    checksum,
                }
            }
            Kind::Manifest => Record::Manifest(Manifest::decode(&mut r).map_err(bad)?),
        };
        if !r.bytes.is_empty() {
            return Err(bad("bytes after the payload"));
        }
        Ok(decoded)
    }
}

fn encode_begin(begin: &Begin, out: &mut Vec<u8>) {
    put64(out, STREAM_MAGIC);
    put32(out, STREAM_VERSION);
    put32(out, begin.chain);
    for value in [
        begin.features,
        begin.from_guid,
        begin.to_guid,
        begin.to_txg,
        begin.creation_time,
    ] {
        put64(out, value);
    }
    out.push(begin.objset_kind);
    assert!(
        begin.stream_size <= STREAM_SIZE_MAX,
        "a stream size of {} bytes does not fit 56 bits",
        begin.stream_size
    );
    assert!(
        begin.features & FEATURE_STREAM_SIZE != 0 || begin.stream_size == 0,
        "a stream size without FEATURE_STREAM_SIZE"
    );
    out.extend_from_slice(&begin.stream_size.to_le_bytes()[..7]);
    put64(out, begin.resume_object);
    put64(out, begin.resume_offset);
    put_str16(out, &begin.from_name);
    put_str16(out, &begin.to_name);
}

fn decode_begin(r: &mut Cursor<'_>, record: u64) -> Result<Record, crate::StreamError> {
    let bad = |why| crate::StreamError::Malformed {
        record,
        kind: "begin",
        why,
    };
    if r.u64().map_err(bad)? != STREAM_MAGIC {
        return Err(bad("not a tarn stream (bad magic)"));
    }
    let version = r.u32().map_err(bad)?;
    let chain = r.u32().map_err(bad)?;
    let features = r.u64().map_err(bad)?;
    if version != STREAM_VERSION {
        return Err(crate::StreamError::Unsupported {
            version,
            features,
            why: "this build reads version 1",
        });
    }
    if features & !FEATURES_KNOWN != 0 {
        return Err(crate::StreamError::Unsupported {
            version,
            features,
            why: "unknown feature bits",
        });
    }
    let from_guid = r.u64().map_err(bad)?;
    let to_guid = r.u64().map_err(bad)?;
    let to_txg = r.u64().map_err(bad)?;
    let creation_time = r.u64().map_err(bad)?;
    let (objset_kind, stream_size) = decode_kind_and_size(r, features).map_err(bad)?;
    let resume_object = r.u64().map_err(bad)?;
    let resume_offset = r.u64().map_err(bad)?;
    let from_name = r.str16(NAME_MAX).map_err(bad)?;
    let to_name = r.str16(NAME_MAX).map_err(bad)?;
    if to_guid == 0 || to_name.is_empty() {
        return Err(bad("no snapshot GUID or name"));
    }
    if (from_guid == 0) != from_name.is_empty() {
        return Err(bad("source snapshot GUID and name disagree"));
    }
    if features & FEATURE_RESUMING == 0 && (resume_object != 0 || resume_offset != 0) {
        return Err(bad("resume point in a stream that does not resume"));
    }
    let manifest_with = FEATURE_RESUMING | FEATURE_CLONE;
    if features & FEATURE_MANIFEST != 0 && features & manifest_with != 0 {
        return Err(bad("a manifest that resumes or is a clone stream"));
    }
    check_chain(features, chain, from_guid).map_err(bad)?;
    Ok(Record::Begin(Box::new(Begin {
        features,
        from_guid,
        to_guid,
        to_txg,
        creation_time,
        chain,
        objset_kind,
        stream_size,
        resume_object,
        resume_offset,
        from_name,
        to_name,
    })))
}

/// BEGIN's bytes 56..64: the object-set kind, then 7 bytes that are the stream's size with
/// [`FEATURE_STREAM_SIZE`] (any value: it is only a hint) and are reserved, 0, without it.
fn decode_kind_and_size(r: &mut Cursor<'_>, features: u64) -> Result<(u8, u64), &'static str> {
    let field = r.take(8)?;
    let mut size = [0u8; 8];
    size[..7].copy_from_slice(&field[1..]);
    let (objset_kind, stream_size) = (field[0], u64::from_le_bytes(size));
    if objset_kind != 1 && objset_kind != 2 {
        return Err("unknown object-set kind");
    }
    if features & FEATURE_STREAM_SIZE == 0 && stream_size != 0 {
        return Err("reserved bytes after the object-set kind are not 0");
    }
    Ok((objset_kind, stream_size))
}

/// The rules of a BEGIN's chain count ([`FEATURE_CHAIN`]): a chain substream counts at
/// least itself and has a source (a chain is `send -I`); it neither resumes (`send -t`
/// resumes one substream alone) nor belongs to a replication stream (whose manifest counts
/// its substreams); without the bit the field is 0.
fn check_chain(features: u64, chain: u32, from_guid: u64) -> Result<(), &'static str> {
    if features & FEATURE_CHAIN == 0 {
        return match chain {
            0 => Ok(()),
            _ => Err("a chain count without the chain feature"),
        };
    }
    if chain == 0 || from_guid == 0 {
        return Err("a chain substream without a count or a source");
    }
    let alone = FEATURE_RESUMING | FEATURE_MANIFEST | FEATURE_REPLICATED;
    if features & alone != 0 {
        return Err("a chain substream that resumes or is replicated");
    }
    Ok(())
}

fn decode_object(r: &mut Cursor<'_>) -> Result<Record, &'static str> {
    let object = r.u64()?;
    let b = r.take(8)?;
    let (object_type, bonus_type, indirect_shift, flags, checksum, compression) =
        (b[0], b[1], b[2], b[3], b[4], b[5]);
    let data_block_size = r.u32()?;
    let bonus_len = usize::from(r.u16()?);
    let _reserved = r.u16()?;
    let maxblkid = r.u64()?;
    if object == 0 || object_type == 0 {
        return Err("object 0 or object type 0");
    }
    if !(512..=DATA_MAX as u32).contains(&data_block_size) || data_block_size % 512 != 0 {
        return Err("data block size out of range");
    }
    if !(10..=17).contains(&indirect_shift) {
        return Err("indirect block shift out of range");
    }
    if bonus_len > BONUS_MAX {
        return Err("bonus buffer too long");
    }
    let bonus = r.take(bonus_len)?.to_vec();
    Ok(Record::Object(ObjectRecord {
        object,
        object_type,
        bonus_type,
        indirect_shift,
        flags,
        checksum,
        compression,
        data_block_size,
        maxblkid,
        bonus,
    }))
}

fn decode_write(r: &mut Cursor<'_>) -> Result<Record, &'static str> {
    let object = r.u64()?;
    let offset = r.u64()?;
    let logical_size = r.u32()?;
    let e = r.take(4)?;
    let encoding = Encoding::from_u8(e[0]).ok_or("unknown data encoding")?;
    // In a stocked buffer (tarn-base `stock`): a received block becomes the dataset's dirty
    // record as it is, new memory while the ARC grows, so its copy took a fault per page.
    let data = tarn_base::stock::copied(r.rest());
    if object == 0 {
        return Err("write to object 0");
    }
    if !(512..=DATA_MAX as u32).contains(&logical_size) || logical_size % 512 != 0 {
        return Err("block size out of range");
    }
    if offset % u64::from(logical_size) != 0
        || offset.checked_add(u64::from(logical_size)).is_none()
    {
        return Err("offset is not a multiple of the block size");
    }
    let fits = match encoding {
        Encoding::Raw => data.len() == logical_size as usize,
        _ => !data.is_empty() && data.len() <= logical_size as usize,
    };
    if !fits {
        return Err("data length does not match the block size");
    }
    Ok(Record::Write(Write {
        object,
        offset,
        logical_size,
        encoding,
        data,
    }))
}

fn put16(out: &mut Vec<u8>, value: u16) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_str16(out: &mut Vec<u8>, text: &str) {
    assert!(
        text.len() <= NAME_MAX,
        "name of {} bytes in a record",
        text.len()
    );
    put16(out, text.len() as u16);
    out.extend_from_slice(text.as_bytes());
}

/// A bounded little-endian cursor (every read checks its length).
pub(crate) struct Cursor<'a> {
    pub(crate) bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub(crate) fn take(&mut self, len: usize) -> Result<&'a [u8], &'static str> {
        if len > self.bytes.len() {
            return Err("payload too short");
        }
        let (head, tail) = self.bytes.split_at(len);
        self.bytes = tail;
        Ok(head)
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }

    pub(crate) fn u16(&mut self) -> Result<u16, &'static str> {
        let mut a = [0u8; 2];
        a.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(a))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, &'static str> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, &'static str> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    pub(crate) fn str16(&mut self, max: usize) -> Result<String, &'static str> {
        let len = usize::from(self.u16()?);
        if len > max {
            return Err("name too long");
        }
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| "name is not UTF-8")
    }
}
