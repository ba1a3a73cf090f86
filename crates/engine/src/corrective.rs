//! `tarn receive -c SNAP` (corrective receive, OpenZFS 2.2's `zfs receive -c`): heals the
//! damaged data blocks of an existing snapshot from a replica's stream of that same
//! snapshot. A thin verb: where a record lands and its stored form are tarn-dataset's
//! `corrective`, the check-and-write of one block is tarn-zio's `Pipeline::heal_block`.
//!
//! - The stream (full or incremental) must carry the snapshot itself: its BEGIN's GUID is
//!   the snapshot's, checked before anything is read or written, and it carries nothing
//!   more (one substream). Another snapshot's stream is refused with one line.
//! - Records are read without the pool lock in batches of about `BATCH_BYTES`; a batch is
//!   used only when every record in it passed the stream's checks (a bad frame refuses the
//!   stream before its batch touches a block). Each WRITE record's block in the snapshot is
//!   scrubbed; only a block none of whose copies verifies is rewritten, in place over every
//!   copy (the same DVAs, as self-heal does), and only with bytes that hash to its block
//!   pointer's checksum. The snapshot, its clones and every snapshot and head sharing the
//!   block see it healed. The written vdevs are flushed before the batch's lock is let go.
//! - Nothing else changes: no txg carries data, the block pointers and space are as they
//!   were. The error log keeps the block until the next finished scrub, which no longer
//!   finds it (as after any repair): its entries are dated txg 0 here, so that a scrub
//!   drops them even when a reader logged them in the txg the scrub started in (a scrub
//!   keeps entries dated at or after its start, which it may have passed). Blocks healed
//!   before a later batch's bad frame stay healed: they hold exactly the bytes their block
//!   pointers always named.
//! - A damaged block the stream cannot heal (its data does not match) is listed with why;
//!   the front end then fails the command.
//! - Metadata (indirect blocks, dnode blocks) is not healed, and cannot be from any stream:
//!   an indirect block is the array of its children's block pointers, and a dnode block
//!   holds each object's top block pointers, so their bytes (which the checksum in their
//!   parent's block pointer covers) are where this pool put each block (DVAs), when
//!   (birth txgs), and the checksums and sizes as stored here. A stream carries objects'
//!   logical contents only (OBJECT and WRITE records, FORMAT.md 21): the sender's
//!   placement is of another pool, and nothing in the stream says where this pool's
//!   children lie, so no byte-exact rebuild can be checked against the parent's checksum.
//!   Each such block that stays lost is listed once ([`BlockFix::metadata`], naming its
//!   DVA), and the WRITE records under it are counted as `unchecked`: their data blocks
//!   cannot even be found. The pool's own redundancy (metadata keeps an extra copy) or a
//!   restore of the dataset (`receive -F` of a full stream) is what brings them back.
//! - `receive -n -c` (dry run) reads and checks the same, with tarn-zio's `heal_check`
//!   instead of `heal_block`: nothing is written, not even a repair from the pool's own
//!   redundancy, no txg, no history; the report says what a real run would heal.

use std::io::Read;

use tarn_base::VdevId;
use tarn_dataset::corrective;
use tarn_dataset::snapshot::{self, Snapshot};
use tarn_objects::ObjectSet;
use tarn_send::{Begin, Record, StreamReader, WriteRecord};
use tarn_zio::HealOutcome;

use crate::dataset_ops::{invalid, pool_of};
use crate::send_ops::{BATCH_BYTES, ReceiveProgress, stream_error};
use crate::{Engine, EngineError, Imported};

/// One block a corrective receive healed or could not heal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockFix {
    /// The object.
    pub object: u64,
    /// The block's byte offset in it.
    pub offset: u64,
    /// The object's block size.
    pub block_size: u64,
    /// Bytes written over its copies (0 when not healed).
    pub bytes: u64,
    /// Why it was not healed (empty when it was).
    pub why: String,
    /// A metadata block (indirect or dnode block) that stays lost: `why` names it, `object`
    /// is the object whose record led to it, `offset` and `block_size` are 0.
    pub metadata: bool,
}

/// What a corrective receive did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CorrectiveReport {
    /// The snapshot healed (full name).
    pub snapshot: String,
    /// WRITE records whose block was checked.
    pub checked: u64,
    /// Blocks no copy of which verified, rewritten from the stream.
    pub healed: Vec<BlockFix>,
    /// Damaged blocks the stream could not heal.
    pub unhealed: Vec<BlockFix>,
    /// WRITE records whose block could not be found: a metadata block above it is lost.
    pub unchecked: u64,
    /// A dry run (`receive -n -c`): `healed` is what would be healed; nothing changed.
    pub dry_run: bool,
    /// Stream bytes read.
    pub bytes: u64,
}

impl Engine {
    /// `tarn receive -c SNAP`: heals `snapshot`'s damaged blocks from the stream on
    /// `input` (module doc); `progress` gets the bytes read after each batch (and the
    /// stream's size, when its sender put it in the stream).
    pub fn receive_corrective(
        &self,
        snapshot: &str,
        input: &mut dyn Read,
        progress: &mut dyn FnMut(ReceiveProgress),
    ) -> Result<CorrectiveReport, EngineError> {
        self.receive_corrective_with(snapshot, false, input, progress)
    }

    /// [`Engine::receive_corrective`], or with `dry_run` (`receive -n -c`) only what it
    /// would heal, changing nothing (module doc).
    pub fn receive_corrective_with(
        &self,
        snapshot: &str,
        dry_run: bool,
        input: &mut dyn Read,
        progress: &mut dyn FnMut(ReceiveProgress),
    ) -> Result<CorrectiveReport, EngineError> {
        let (dataset, snap) = snapshot::split_name(snapshot)?;
        let handle = self.pool(pool_of(dataset))?;
        let (target, setting, mut os) = {
            let inner = handle.lock();
            inner.check_writable()?;
            let node = inner.datasets.node(inner.datasets.lookup(dataset)?);
            let (_, target) = node
                .snapshot(snap)
                .ok_or_else(|| invalid(format!("snapshot '{snapshot}' does not exist")))?;
            let os = ObjectSet::open(&inner.pool.reader(), &target.header.objset)?;
            (target.clone(), node.objset.write_config().compression, os)
        };
        let mut reader = StreamReader::new(input);
        let begin = match reader.next_record().map_err(stream_error)? {
            None => return Err(invalid("invalid stream: it is empty")),
            Some(Record::Begin(begin)) => begin,
            Some(_) => return Err(invalid("invalid stream: no BEGIN record")),
        };
        check_begin(&begin, &target, snapshot)?;
        let mut report = CorrectiveReport {
            snapshot: snapshot.to_string(),
            dry_run,
            ..CorrectiveReport::default()
        };
        loop {
            let (batch, ended) = read_batch(&mut reader)?;
            {
                let inner = handle.lock();
                inner.check_writable()?;
                still_there(&inner, dataset, &target)?;
                heal_batch(&inner, &mut os, &batch, setting, &mut report)?;
            }
            progress(ReceiveProgress::of(&reader));
            if ended {
                break;
            }
        }
        if reader.next_record().map_err(stream_error)?.is_some() {
            return Err(invalid(
                "a corrective receive takes the stream of one snapshot (send it without -R \
                 or -I)",
            ));
        }
        report.bytes = reader.bytes();
        if dry_run {
            return Ok(report);
        }
        let mut inner = handle.lock();
        restamp_healed(&mut inner, &report.healed)?;
        let command = format!("receive -c {snapshot}");
        inner.history.push(self.history_record(&command, false));
        inner.sync()?;
        Ok(report)
    }
}

/// Dates the error-log entries of the healed blocks (in any dataset: clones share them)
/// txg 0, so the next finished scrub drops them unless it finds the block bad again.
fn restamp_healed(inner: &mut Imported, healed: &[BlockFix]) -> Result<(), EngineError> {
    if healed.is_empty() {
        return Ok(());
    }
    let Imported { pool, mos, .. } = inner;
    let reader = pool.reader();
    for (key, _) in mos.errlog(&reader)? {
        let parts: Vec<&str> = key.split('/').collect();
        let [kind, _dataset, object, level, blkid] = parts.as_slice() else {
            continue;
        };
        let at = |fix: &BlockFix| {
            *kind == "data"
                && *level == "0"
                && object.parse() == Ok(fix.object)
                && blkid.parse() == Ok(fix.offset / fix.block_size.max(1))
        };
        if healed.iter().any(at) {
            mos.errlog_add(&reader, &key, tarn_base::Txg(0))?;
        }
    }
    Ok(())
}

/// Refuses a stream that is not of `target` (module doc).
fn check_begin(begin: &Begin, target: &Snapshot, name: &str) -> Result<(), EngineError> {
    if begin.features & tarn_send::FEATURE_RESUMING != 0 {
        return Err(invalid(
            "a corrective receive takes a whole stream, not a resumed one (send without -t)",
        ));
    }
    if begin.features & tarn_send::FEATURE_MANIFEST != 0 {
        return Err(invalid(
            "a corrective receive takes the stream of one snapshot, not a replication \
             stream (send without -R)",
        ));
    }
    if begin.to_guid != target.header.guid.0 {
        return Err(invalid(format!(
            "the stream is of snapshot '{}' (guid {}), not of '{name}' (guid {}): a \
             corrective receive takes a stream of the same snapshot",
            begin.to_name, begin.to_guid, target.header.guid.0
        )));
    }
    Ok(())
}

/// The WRITE records up to about [`BATCH_BYTES`], and whether END came; any stream error
/// refuses the batch whole.
fn read_batch(
    reader: &mut StreamReader<&mut dyn Read>,
) -> Result<(Vec<WriteRecord>, bool), EngineError> {
    let mut batch = Vec::new();
    let mut bytes = 0u64;
    while bytes < BATCH_BYTES {
        let record = match reader.next_record().map_err(stream_error)? {
            Some(Record::End { .. }) => return Ok((batch, true)),
            Some(record) => record,
            None => {
                let record = reader.sequence();
                let error = tarn_send::StreamError::Truncated { record };
                return Err(stream_error(error));
            }
        };
        bytes += tarn_send::encoded_len(&record);
        if let Record::Write(write) = record {
            batch.push(write);
        }
    }
    Ok((batch, false))
}

/// Refuses to go on when the snapshot went away meanwhile (its blocks may be reused).
fn still_there(inner: &Imported, dataset: &str, target: &Snapshot) -> Result<(), EngineError> {
    let there = inner.datasets.by_name(dataset).is_some_and(|id| {
        let node = inner.datasets.node(id);
        node.snapshots
            .iter()
            .any(|s| s.header.guid == target.header.guid)
    });
    match there {
        true => Ok(()),
        false => Err(invalid(
            "the snapshot was destroyed during the corrective receive",
        )),
    }
}

/// Checks (and heals) the block of every record of `batch`, then flushes what was written.
fn heal_batch(
    inner: &Imported,
    os: &mut ObjectSet,
    batch: &[WriteRecord],
    setting: tarn_format::CompressSetting,
    report: &mut CorrectiveReport,
) -> Result<(), EngineError> {
    let reader = inner.pool.reader();
    let pipeline = inner.pool.pipeline();
    let mut written: Vec<VdevId> = Vec::new();
    for write in batch {
        let fix = |bytes: u64, why: &str| BlockFix {
            object: write.object,
            offset: write.offset,
            block_size: u64::from(write.logical_size),
            bytes,
            why: why.to_string(),
            metadata: false,
        };
        let bp = match corrective::locate(os, &reader, write) {
            Ok(Some(bp)) => bp,
            Ok(None) => continue,
            Err(tarn_dataset::DatasetError::Corrupt(why)) => {
                return Err(invalid(format!(
                    "the stream does not fit the snapshot: {why}"
                )));
            }
            Err(error) => {
                report.unchecked += 1;
                let lost = metadata_loss(write, &error);
                if !report
                    .unhealed
                    .iter()
                    .any(|f| f.metadata && f.why == lost.why)
                {
                    report.unhealed.push(lost);
                }
                continue;
            }
        };
        report.checked += 1;
        let stored = corrective::stored_form(&bp, write, setting).unwrap_or_default();
        let outcome = match report.dry_run {
            true => pipeline.heal_check(&bp, &stored),
            false => pipeline.heal_block(&bp, &stored),
        };
        match outcome {
            HealOutcome::Intact => {}
            HealOutcome::Healed(bytes) => {
                written.extend(bp.copies().map(|dva| dva.vdev));
                report.healed.push(fix(bytes, ""));
            }
            HealOutcome::Mismatch => report.unhealed.push(fix(
                0,
                "the stream's data does not match the block's checksum",
            )),
            HealOutcome::Unwritten(why) => report.unhealed.push(fix(0, &why)),
        }
    }
    if report.dry_run {
        return Ok(());
    }
    written.sort_unstable_by_key(|vdev| vdev.0);
    written.dedup();
    inner
        .pool
        .flush_vdevs(&written)
        .map_err(|why| invalid(format!("healed blocks could not be flushed: {why}")))?;
    Ok(())
}

/// The metadata block whose loss kept `write`'s block from being found (module doc).
fn metadata_loss(write: &WriteRecord, error: &tarn_dataset::DatasetError) -> BlockFix {
    use tarn_objects::ObjectError;
    let what = match error {
        tarn_dataset::DatasetError::Objects(ObjectError::Io { object, .. }) if object.0 == 0 => {
            "a dnode block (the object set's object 0)".to_string()
        }
        tarn_dataset::DatasetError::Objects(ObjectError::Io { object, .. }) => {
            format!("an indirect block of object {}", object.0)
        }
        _ => format!("metadata of object {}", write.object),
    };
    BlockFix {
        object: write.object,
        offset: 0,
        block_size: 0,
        bytes: 0,
        why: format!(
            "{what} stays lost ({error}): it holds this pool's block pointers, which no \
             stream carries"
        ),
        metadata: true,
    }
}
