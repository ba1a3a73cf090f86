//! Volumes (ZFS's zvols): a dataset whose object set (kind `Volume`) holds one data object,
//! object 1, of `volblocksize` blocks, whose bonus buffer records the volume's size
//! (docs/FORMAT.md "Volumes"). Everything a block device does is a range operation on that
//! object: reads of never-written or trimmed ranges are holes and read as zeros without
//! I/O, trim and write-zeroes punch whole blocks to holes, block status walks the block
//! pointers. Snapshots and rollback need nothing here: the size lives in the object set,
//! so a rollback restores the size the snapshot had (as ZFS's does).
//!
//! Invariants: V1: every data block lies below the size in the bonus buffer (shrinking frees
//! the tail first); V2: the size is a non-zero multiple of the block size; V3: bytes read
//! from disk are input: a bonus that does not decode is [`DatasetError::Corrupt`].

use tarn_base::ObjectId;
use tarn_base::units::parse_size;
use tarn_format::wire::{Reader, Writer};
use tarn_objects::{Fetch, ObjectSet, ObjsetKind, ReadOut};
use tarn_zio::BlockStore;

use crate::DatasetError;

/// The data object of a volume's object set.
pub const VOLUME_OBJECT: ObjectId = ObjectId(1);
/// Object type of the data object.
pub const TYPE_VOLUME: u8 = 24;
/// Bonus type of the data object (the size record).
const BONUS_TYPE_VOLUME: u8 = 24;
/// Length of the size record: size (u64), version (u64).
const BONUS_LEN: u16 = 16;
const VOLUME_VERSION: u64 = 1;

/// Default `volblocksize` (docs/PERFORMANCE.md "Volumes": streaming through the txg pipeline
/// and raidz parity is cheaper per byte with larger blocks, and 4K random writes cost a
/// read-modify-write of one block either way; 64K keeps that read small).
pub const VOLBLOCKSIZE_DEFAULT: u32 = 64 << 10;
/// Smallest `volblocksize`.
pub const VOLBLOCKSIZE_MIN: u32 = 512;
/// Largest `volblocksize` (ZFS's limit without large blocks is 128K; tarn's objects take 1M).
pub const VOLBLOCKSIZE_MAX: u32 = 1 << 20;
/// Largest volume (16 PiB: far below what a tree of 1M blocks addresses).
pub const VOLSIZE_MAX: u64 = 1 << 54;

const VOLBLOCKSIZE_VALID: &str = "a power of two from 512 to 1M";

/// What a volume is: its size and block size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeInfo {
    /// `volsize` in bytes.
    pub size: u64,
    /// `volblocksize` in bytes.
    pub block_size: u32,
}

/// One run of an [`extents`] answer: `len` bytes that are all holes or all data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Length in bytes.
    pub len: u64,
    /// Never written, trimmed or zeroed: reads as zeros and takes no space.
    pub hole: bool,
}

fn invalid(text: String) -> DatasetError {
    DatasetError::InvalidProperty(text)
}

/// Parses a `volblocksize` (`-b`, `-o volblocksize=`).
pub fn parse_block_size(value: &str) -> Result<u32, DatasetError> {
    let bad = || {
        invalid(format!(
            "'volblocksize' must be {VOLBLOCKSIZE_VALID}, not '{value}'"
        ))
    };
    let bytes = parse_size(value).map_err(|_| bad())?;
    let ok = bytes.is_power_of_two()
        && (u64::from(VOLBLOCKSIZE_MIN)..=u64::from(VOLBLOCKSIZE_MAX)).contains(&bytes);
    if !ok {
        return Err(bad());
    }
    u32::try_from(bytes).map_err(|_| bad())
}

/// Parses a `volsize` for a volume of `block_size` blocks (V2).
pub fn parse_size_for(value: &str, block_size: u32) -> Result<u64, DatasetError> {
    let bytes = parse_size(value).map_err(|_| {
        invalid(format!(
            "'volsize' must be a size ('10G', '1.5T'), not '{value}'"
        ))
    })?;
    check_size(bytes, block_size)?;
    Ok(bytes)
}

/// Checks a volume size (V2).
pub fn check_size(bytes: u64, block_size: u32) -> Result<(), DatasetError> {
    if bytes == 0 {
        return Err(invalid("volume size cannot be zero".into()));
    }
    if bytes > VOLSIZE_MAX {
        return Err(invalid(format!(
            "volume size is larger than the largest volume (16P), not {bytes}"
        )));
    }
    if !bytes.is_multiple_of(u64::from(block_size)) {
        return Err(invalid(format!(
            "volume size must be a multiple of volume block size ({block_size})"
        )));
    }
    Ok(())
}

fn encode_bonus(size: u64) -> Vec<u8> {
    let mut w = Writer::new();
    w.u64(size);
    w.u64(VOLUME_VERSION);
    let bytes = w.finish();
    assert_eq!(bytes.len(), usize::from(BONUS_LEN), "volume bonus length");
    bytes
}

fn decode_bonus(bytes: &[u8]) -> Result<u64, DatasetError> {
    let corrupt = |e: tarn_format::FormatError| DatasetError::Corrupt(e.to_string());
    let mut r = Reader::new(bytes, "volume size record");
    let size = r.u64().map_err(corrupt)?;
    let version = r.u64().map_err(corrupt)?;
    if version != VOLUME_VERSION {
        return Err(DatasetError::Corrupt(format!(
            "volume record version {version} (this build reads {VOLUME_VERSION})"
        )));
    }
    if size == 0 || size > VOLSIZE_MAX {
        return Err(DatasetError::Corrupt(format!("volume size {size}")));
    }
    Ok(size)
}

/// Makes the empty object set `objset` (kind `Volume`) a volume of `size` bytes.
pub fn create(
    objset: &mut ObjectSet,
    store: &dyn BlockStore,
    size: u64,
    block_size: u32,
) -> Result<(), DatasetError> {
    assert_eq!(objset.kind(), ObjsetKind::Volume, "a volume's object set");
    check_size(size, block_size)?;
    objset.claim_object(
        store,
        VOLUME_OBJECT,
        TYPE_VOLUME,
        block_size,
        BONUS_TYPE_VOLUME,
        BONUS_LEN,
    )?;
    objset.set_bonus(store, VOLUME_OBJECT, &encode_bonus(size))?;
    Ok(())
}

/// The volume's size and block size.
pub fn info(objset: &mut ObjectSet, store: &dyn BlockStore) -> Result<VolumeInfo, DatasetError> {
    if objset.kind() != ObjsetKind::Volume {
        return Err(DatasetError::Corrupt("not a volume".into()));
    }
    let dnode = objset.object_info(store, VOLUME_OBJECT)?;
    if dnode.object_type != TYPE_VOLUME {
        return Err(DatasetError::Corrupt(format!(
            "volume data object of type {}",
            dnode.object_type
        )));
    }
    let size = decode_bonus(&objset.bonus(store, VOLUME_OBJECT)?)?;
    Ok(VolumeInfo {
        size,
        block_size: dnode.data_block_size,
    })
}

/// Changes the size; a smaller size frees everything past it first (V1). The caller has
/// decided that shrinking is allowed.
pub fn set_size(
    objset: &mut ObjectSet,
    store: &dyn BlockStore,
    size: u64,
) -> Result<(), DatasetError> {
    let current = info(objset, store)?;
    check_size(size, current.block_size)?;
    if size < current.size {
        objset.free_range(store, VOLUME_OBJECT, size, u64::MAX)?;
    }
    objset.set_bonus(store, VOLUME_OBJECT, &encode_bonus(size))?;
    Ok(())
}

/// Refuses a range that does not lie inside the volume.
pub fn check_range(info: VolumeInfo, offset: u64, len: u64) -> Result<(), DatasetError> {
    match offset.checked_add(len) {
        Some(end) if end <= info.size => Ok(()),
        _ => Err(DatasetError::OutOfRange {
            offset,
            len,
            size: info.size,
        }),
    }
}

/// Reads `buf.len()` bytes at `offset` (holes read as zeros, without I/O).
pub fn read(
    objset: &mut ObjectSet,
    store: &dyn BlockStore,
    offset: u64,
    buf: &mut [u8],
) -> Result<(), DatasetError> {
    let volume = info(objset, store)?;
    check_range(volume, offset, buf.len() as u64)?;
    objset.read(store, VOLUME_OBJECT, offset, buf)?;
    Ok(())
}

/// The device reads a [`read`] of `len` bytes at `offset` needs, to be done without the
/// pool lock (`ObjectSet::plan_read`); then [`read_out_planned`] reads.
pub fn plan_read(
    objset: &mut ObjectSet,
    store: &dyn BlockStore,
    offset: u64,
    len: u64,
) -> Result<Option<Fetch>, DatasetError> {
    let volume = info(objset, store)?;
    check_range(volume, offset, len)?;
    Ok(objset.plan_read(store, VOLUME_OBJECT, offset, len)?)
}

/// [`read`] of `len` bytes after [`plan_read`] (the size is checked again: it may have
/// changed between), as the blocks they lie in (tarn-objects `ReadOut`): the clean blocks
/// are shared with the cache, for a caller that sends them on without a copy.
pub fn read_out_planned(
    objset: &mut ObjectSet,
    store: &dyn BlockStore,
    offset: u64,
    len: usize,
) -> Result<ReadOut, DatasetError> {
    let volume = info(objset, store)?;
    check_range(volume, offset, len as u64)?;
    Ok(objset.read_out_planned(store, VOLUME_OBJECT, offset, len)?)
}

/// Writes `data` at `offset` (a block written all zeros becomes a hole at sync).
pub fn write(
    objset: &mut ObjectSet,
    store: &dyn BlockStore,
    offset: u64,
    data: &[u8],
) -> Result<(), DatasetError> {
    let volume = info(objset, store)?;
    check_range(volume, offset, data.len() as u64)?;
    objset.write(store, VOLUME_OBJECT, offset, data)?;
    Ok(())
}

/// [`write`] of `pieces`, in order from `offset`, taking them as they are: a piece that is
/// exactly one block of the volume, at a block boundary, becomes that block's dirty record
/// without a copy (`ObjectSet::write_block_owned`; an NBD write's payload is read into such
/// pieces); any other piece is written as [`write`] writes it. The whole range is checked
/// first, so a refused write changes nothing.
pub fn write_owned(
    objset: &mut ObjectSet,
    store: &dyn BlockStore,
    offset: u64,
    pieces: Vec<Vec<u8>>,
) -> Result<(), DatasetError> {
    let volume = info(objset, store)?;
    let len = pieces.iter().map(|piece| piece.len() as u64).sum();
    check_range(volume, offset, len)?;
    let block = u64::from(volume.block_size);
    let mut at = offset;
    for piece in pieces {
        let piece_len = piece.len() as u64;
        if at.is_multiple_of(block) && piece_len == block {
            objset.write_block_owned(store, VOLUME_OBJECT, at / block, piece)?;
        } else {
            objset.write(store, VOLUME_OBJECT, at, &piece)?;
        }
        at += piece_len;
    }
    Ok(())
}

/// Trim and write-zeroes: whole blocks of the range become holes, the partial blocks at its
/// ends are zeroed.
pub fn zero(
    objset: &mut ObjectSet,
    store: &dyn BlockStore,
    offset: u64,
    len: u64,
) -> Result<(), DatasetError> {
    let volume = info(objset, store)?;
    check_range(volume, offset, len)?;
    if len > 0 {
        objset.free_range(store, VOLUME_OBJECT, offset, len)?;
    }
    Ok(())
}

/// The holes and data of `[offset, offset + len)`, in order, at most `max` runs (the last
/// one may end before the range does). Answered from the block pointers: a block is data
/// when it has one (or is dirty), a hole otherwise.
pub fn extents(
    objset: &mut ObjectSet,
    store: &dyn BlockStore,
    offset: u64,
    len: u64,
    max: usize,
) -> Result<Vec<Extent>, DatasetError> {
    let volume = info(objset, store)?;
    check_range(volume, offset, len)?;
    assert!(max > 0, "extents: at least one run");
    let end = offset + len;
    let mut runs = Vec::new();
    let mut at = offset;
    while at < end && runs.len() < max {
        let data = objset.next_data(store, VOLUME_OBJECT, at)?;
        let (next, hole) = if data == Some(at) {
            (objset.next_hole(store, VOLUME_OBJECT, at)?, false)
        } else {
            (data.unwrap_or(u64::MAX), true)
        };
        assert!(next > at, "V4: every run is non-empty");
        let stop = next.min(end);
        runs.push(Extent {
            len: stop - at,
            hole,
        });
        at = stop;
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_objects::testing::MemStore;

    fn volume(size: u64, block_size: u32) -> (MemStore, ObjectSet) {
        let store = MemStore::new();
        let mut set = ObjectSet::create(ObjsetKind::Volume);
        create(&mut set, &store, size, block_size).expect("create");
        (store, set)
    }

    /// Goal: writes read back, holes read as zeros, and extents follow the block pointers
    /// through a sync; zeroing punches whole blocks back to holes.
    #[test]
    fn writes_holes_and_extents() {
        let (mut store, mut set) = volume(1 << 20, 4096);
        write(&mut set, &store, 8192, &[7u8; 8192]).expect("write");
        set.sync(&mut store).expect("sync");
        store.next_txg();
        let mut buf = vec![1u8; 4096];
        read(&mut set, &store, 0, &mut buf).expect("read");
        assert!(buf.iter().all(|b| *b == 0), "a hole reads as zeros");
        read(&mut set, &store, 12288, &mut buf).expect("read");
        assert!(buf.iter().all(|b| *b == 7));
        let runs = extents(&mut set, &store, 0, 1 << 20, 16).expect("extents");
        assert_eq!(
            runs,
            vec![
                Extent {
                    len: 8192,
                    hole: true
                },
                Extent {
                    len: 8192,
                    hole: false
                },
                Extent {
                    len: (1 << 20) - 16384,
                    hole: true
                },
            ]
        );
        zero(&mut set, &store, 8192, 4096).expect("zero");
        set.sync(&mut store).expect("sync");
        store.next_txg();
        let runs = extents(&mut set, &store, 0, 1 << 20, 16).expect("extents");
        assert_eq!(
            runs[0],
            Extent {
                len: 12288,
                hole: true
            }
        );
        assert_eq!(
            runs[1],
            Extent {
                len: 4096,
                hole: false
            }
        );
    }

    /// Goal: ranges past the end, sizes that are no multiple of the block size and bad
    /// block sizes are refused; shrinking frees the tail.
    #[test]
    fn refusals_and_shrink() {
        let (mut store, mut set) = volume(64 << 10, 4096);
        assert!(matches!(
            write(&mut set, &store, 60 << 10, &[1u8; 8192]),
            Err(DatasetError::OutOfRange { .. })
        ));
        assert!(read(&mut set, &store, u64::MAX - 1, &mut [0u8; 4]).is_err());
        assert!(parse_size_for("1000", 4096).is_err());
        assert!(parse_size_for("0", 4096).is_err());
        assert!(parse_block_size("3K").is_err());
        assert!(parse_block_size("2M").is_err());
        assert_eq!(parse_block_size("16K").expect("16K"), 16384);
        write(&mut set, &store, 32 << 10, &[9u8; 4096]).expect("write");
        set.sync(&mut store).expect("sync");
        store.next_txg();
        set_size(&mut set, &store, 16 << 10).expect("shrink");
        set_size(&mut set, &store, 64 << 10).expect("grow");
        let mut buf = vec![1u8; 4096];
        read(&mut set, &store, 32 << 10, &mut buf).expect("read");
        assert!(buf.iter().all(|b| *b == 0), "the shrunk tail was freed");
        assert_eq!(info(&mut set, &store).expect("info").size, 64 << 10);
        assert!(decode_bonus(&[0u8; 16]).is_err());
        assert!(decode_bonus(&[0u8; 3]).is_err());
    }
}
