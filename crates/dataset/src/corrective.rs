//! Corrective receive at the object-set level (`tarn receive -c`, OpenZFS 2.2's
//! `zfs receive -c`): where a WRITE record of a replica's stream of a snapshot lands in the
//! snapshot's own object set, and what the block pointer found there says the stored bytes
//! must be.
//!
//! ```text
//!  WRITE(object, offset, data) ─► locate: the level-0 block pointer at that place in the
//!                                 snapshot (None: a hole or no such object)
//!                              ─► stored_form: the bytes as the pool stores that block
//!                                 ─► the engine hands both to tarn-zio's heal_block
//! ```
//!
//! Compression: a block pointer's checksum covers the block as stored (compressed, padded
//! to 512 bytes), and no checksum of the logical bytes is kept anywhere. So the stream's
//! block is brought to the stored form before it is compared: as it is when it was sent as
//! stored (`send -c`) in the same algorithm, else decoded and compressed again with the
//! block pointer's algorithm as the write path does (LZ4 and ZLE are deterministic; zstd
//! at the dataset's level, or at the default level 3 when the dataset's setting is not
//! zstd: a block written at another level since changed does not reproduce and is
//! reported as not matching, to be healed from a `send -c` stream instead). What decides
//! is always the checksum, so a wrong guess can only leave a block unhealed, never write
//! wrong bytes (tarn-zio I7).
//!
//! Not here: the stream (tarn-send), the snapshot and GUID checks and the report (the
//! engine's `corrective.rs`), the writing (tarn-zio). Metadata blocks (indirect and dnode
//! blocks) are not in a stream and are not healed this way: a lost indirect block shows as
//! an error of [`locate`] for every record under it.

use tarn_base::ObjectId;
use tarn_format::compress::{compress, decompress};
use tarn_format::{BlockPtr, CompressKind, CompressSetting};
use tarn_objects::{BlockChange, ObjectError, ObjectSet};
use tarn_send::{Encoding, WriteRecord};
use tarn_zio::BlockStore;

use crate::DatasetError;

/// The level-0 block pointer of `os` where `write` lands, `None` when there is no block
/// there (a hole, past the object's end, or no such object). A record whose size or offset
/// does not fit the object's blocks is an error: the stream is not of this snapshot.
pub fn locate(
    os: &mut ObjectSet,
    store: &dyn BlockStore,
    write: &WriteRecord,
) -> Result<Option<BlockPtr>, DatasetError> {
    let id = ObjectId(write.object);
    let info = match os.object_info(store, id) {
        Ok(info) => info,
        Err(ObjectError::NoSuchObject { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let size = u64::from(info.data_block_size);
    if info.data_block_size != write.logical_size || !write.offset.is_multiple_of(size) {
        return Err(DatasetError::Corrupt(format!(
            "write of {} bytes at {} to object {} of {size}-byte blocks",
            write.logical_size, write.offset, write.object
        )));
    }
    let blkid = write.offset / size;
    if blkid > info.maxblkid {
        return Ok(None);
    }
    let mut found = None;
    os.visit_changes(store, id, None, blkid, &mut |change| {
        if let BlockChange::Data { blkid: at, bp } = change
            && at == blkid
        {
            found = Some(bp);
        }
        Ok(false)
    })?;
    Ok(found)
}

/// The bytes `write` says the block of `bp` holds, in the form the pool stored it (module
/// doc); `setting` is the dataset's compression, whose zstd level is tried. `None` when
/// the record cannot be that block at all (another logical size, data that does not
/// decode, or data the algorithm would not have kept compressed).
#[must_use]
pub fn stored_form(
    bp: &BlockPtr,
    write: &WriteRecord,
    setting: CompressSetting,
) -> Option<Vec<u8>> {
    if write.logical_size != bp.lsize {
        return None;
    }
    let sent_kind = match write.encoding {
        Encoding::Raw => CompressKind::Off,
        Encoding::Lz4 => CompressKind::Lz4,
        Encoding::Zstd => CompressKind::Zstd,
        Encoding::Zle => CompressKind::Zle,
    };
    if sent_kind == bp.compression {
        return Some(write.data.clone());
    }
    let size = write.logical_size as usize;
    let logical = match sent_kind {
        CompressKind::Off => write.data.clone(),
        kind => decompress(kind, &write.data, size).ok()?,
    };
    if logical.len() != size {
        return None;
    }
    let again = match bp.compression {
        CompressKind::Off => return Some(logical),
        CompressKind::Lz4 => CompressSetting::Lz4,
        CompressKind::Zle => CompressSetting::Zle,
        CompressKind::Zstd => match setting {
            CompressSetting::Zstd(level) => CompressSetting::Zstd(level),
            _ => CompressSetting::Zstd(3),
        },
    };
    compress(again, &logical)
}

#[cfg(test)]
mod tests {
    //! Goal: a record lands on the block pointer at its place, and its stored form is the
    //! block as stored whatever encoding the stream used. Method: an object set on a
    //! memory store, one object of lz4-compressible blocks and a hole; the stored form of
    //! raw and compressed records against the bytes the store holds.

    use super::*;
    use tarn_format::dnode::OBJECT_TYPE_PLAIN;
    use tarn_objects::ObjsetKind;
    use tarn_objects::testing::MemStore;

    fn record(object: u64, offset: u64, encoding: Encoding, data: Vec<u8>) -> WriteRecord {
        WriteRecord {
            object,
            offset,
            logical_size: 4096,
            encoding,
            data,
        }
    }

    #[test]
    fn records_land_on_their_block_in_its_stored_form() {
        let mut store = MemStore::new();
        let mut os = ObjectSet::create(ObjsetKind::Filesystem);
        let id = os
            .allocate_object(&store, OBJECT_TYPE_PLAIN, 4096, 0, 0)
            .unwrap();
        let text: Vec<u8> = b"compressible "
            .iter()
            .copied()
            .cycle()
            .take(4096)
            .collect();
        os.write(&store, id, 0, &text).unwrap();
        os.write(&store, id, 2 * 4096, &text).unwrap();
        let root = os.sync(&mut store).unwrap();
        let mut os = ObjectSet::open(&store, &root).unwrap();
        let raw = record(id.0, 0, Encoding::Raw, text.clone());
        let bp = locate(&mut os, &store, &raw).unwrap().expect("block 0");
        assert_eq!(bp.compression, CompressKind::Lz4);
        // The memory store checksums the compressed bytes unpadded.
        let formed = stored_form(&bp, &raw, CompressSetting::Lz4).unwrap();
        let sum = tarn_format::checksum::checksum(bp.checksum_kind, &formed);
        assert_eq!(sum, bp.checksum, "raw data compressed again is the block");
        let sent = record(id.0, 0, Encoding::Lz4, formed.clone());
        assert_eq!(stored_form(&bp, &sent, CompressSetting::Off), Some(formed));
        let hole = record(id.0, 4096, Encoding::Raw, text.clone());
        assert_eq!(locate(&mut os, &store, &hole).unwrap(), None, "a hole");
        let past = record(id.0, 9 * 4096, Encoding::Raw, text.clone());
        assert_eq!(
            locate(&mut os, &store, &past).unwrap(),
            None,
            "past the end"
        );
        let missing = record(id.0 + 50, 0, Encoding::Raw, text.clone());
        assert_eq!(locate(&mut os, &store, &missing).unwrap(), None);
        let misaligned = record(id.0, 100, Encoding::Raw, text);
        assert!(locate(&mut os, &store, &misaligned).is_err());
    }
}
