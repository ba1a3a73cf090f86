//! The records of one received substream, from the stream to the open txg: reading and
//! applying overlap, and the txgs that take the received data to disk run as a file
//! writer's do.
//!
//! ```text
//!  caller's thread:  read+verify batch 1 ─ batch 2 ─ batch 3 ─ ...        (no pool lock)
//!                                 │ channel (BATCHES_AHEAD waiting)
//!  applier thread:               apply 1 ── throttle ── apply 2 ── ...   (pool lock, open)
//!  syncer (daemon):                          txg write phase ── commit phase
//! ```
//!
//! # Model
//! The caller's thread reads the stream (each record's BLAKE3 check, the order rule, the
//! decode: tarn-send) in batches of about [`BATCH_BYTES`] and hands each batch to an applier
//! thread; while one batch is applied the next one is read. The applier takes the pool lock
//! without waiting for a txg's commit phase (`PoolHandle::lock_open`), applies the batch to
//! the destination's object set in the open txg, and passes the write throttle
//! (module [`crate::txg`]): past `DIRTY_SYNC` the daemon's syncer writes and commits a txg
//! while the stream goes on, at `DIRTY_MAX` the applier waits for the syncing txg without
//! the pool lock; without a syncer (tests, the simulator) the applier syncs inline at
//! `DIRTY_MAX`. Before, every batch waited for a pending commit and the receive wrote each
//! txg on its own thread, holding the pool lock, so reading, applying and writing never
//! overlapped.
//!
//! # Invariants
//! - I1: batches are applied in stream order, each whole or up to its first bad record, and
//!   `position` is the first object and offset not yet applied after every record (the
//!   resume point of `receive -s`): one applier, one channel, FIFO.
//! - I2: what a refusal undoes is exactly what was applied: the caller returns only after
//!   the applier has ended (joined), so no record is applied after the caller goes on to
//!   undo the receive or save its token.
//! - I3: records read before a bad one (a stream error) passed their checks and are
//!   applied, as before; an apply error stops the reader at its next batch (the channel is
//!   closed), and is the error reported (it concerns earlier records than any later
//!   stream error).
//! - I4: every batch is admitted before it is applied, as a file write of its data is
//!   (module [`crate::admission`]): a received txg always finds the space it needs to
//!   commit, and a stream that does not fit the pool (or a quota of the destination or
//!   its parents) fails with `out of space` (`disk quota exceeded`), which the caller
//!   undoes like any failed receive; it never suspends the pool.
//!
//! # Failure model
//! A stream error, an apply error, a destination destroyed meanwhile, a suspended pool or a
//! failed commit end the substream with that error after the applier ended; the caller
//! (`send_ops`) undoes the receive or saves its token, as for any failure. A crash is a
//! crash of the pool at some committed txg: the same states as a receive that synced on
//! its own thread (the hidden dataset, or the head, with the records of whole batches).
//! A panic of the applier (a failed invariant) is re-raised on the caller's thread.
//!
//! # Not here
//! Writing blocks ahead of their txg outside the pool lock (the write phase still checksums,
//! computes parity and queues every block under the pool lock, on the syncer's thread);
//! the checks of the destination and what END does (`send_ops`).

use std::io::Read;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use tarn_dataset::send as dsend;
use tarn_send::{Record, StreamReader};

use crate::dataset_ops::invalid;
use crate::send_ops::{BATCH_BYTES, ReceiveProgress, still_there, stream_error};
use crate::{DatasetId, Engine, EngineError, FsOp, Imported, PoolHandle};

/// Batches read ahead and waiting for the applier (besides the one it applies and the one
/// being read): one keeps both threads busy; more would only hold more stream in memory.
const BATCHES_AHEAD: usize = 1;

/// What a receive keeps track of while records arrive.
pub(crate) struct Progressed<'a> {
    pub(crate) progress: &'a mut dyn FnMut(ReceiveProgress),
    /// The first object and offset not yet received (the resume point).
    pub(crate) position: &'a mut (u64, u64),
    /// PROPERTY records, applied at END.
    pub(crate) props: &'a mut Vec<(String, String)>,
}

/// Reads records in batches without the pool lock while an applier thread applies the
/// previous batch under it (module doc), until the substream's END (not applied: the caller
/// finishes).
pub(crate) fn receive_records(
    engine: &Engine,
    handle: &PoolHandle,
    id: DatasetId,
    reader: &mut StreamReader<&mut dyn Read>,
    at: &mut Progressed<'_>,
) -> Result<(), EngineError> {
    let position = &mut *at.position;
    std::thread::scope(|scope| {
        let (batches, incoming) = sync_channel::<Vec<Record>>(BATCHES_AHEAD);
        let applier = std::thread::Builder::new()
            .name("tarn-receive".into())
            .spawn_scoped(scope, move || {
                apply_all(engine, handle, id, &incoming, position)
            })
            .map_err(|e| invalid(format!("cannot start the receive's applier thread: {e}")))?;
        let read = read_batches(reader, at.props, at.progress, &batches);
        drop(batches);
        // I2: joined before anything else; an apply error comes first (I3).
        let applied = match applier.join() {
            Ok(applied) => applied,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        applied.and(read)
    })
}

/// The applier: each batch under the pool lock, then the write throttle, until the reader
/// closes the channel or a batch fails.
fn apply_all(
    engine: &Engine,
    handle: &PoolHandle,
    id: DatasetId,
    incoming: &Receiver<Vec<Record>>,
    position: &mut (u64, u64),
) -> Result<(), EngineError> {
    for mut batch in incoming {
        let mut inner = handle.lock_open();
        inner.check_writable()?;
        still_there(&inner, id)?;
        // I4: admitted as a file write of the batch's data is, so that a stream larger
        // than the pool or a quota fails here with ENOSPC or EDQUOT, not in a txg.
        inner.admit(id, FsOp::Write(data_bytes(&batch)))?;
        apply_batch(&mut inner, id, &mut batch, position)?;
        engine.throttle(handle, inner)?;
    }
    Ok(())
}

/// The reader: batches of about [`BATCH_BYTES`] to `batches`, PROPERTY records to `props`,
/// the bytes read (and the stream's size) to `progress` after each batch; returns at END or
/// at the first error, after handing on the records read before it (I3). Stops early,
/// without error, when the applier has ended (its error is the receive's).
fn read_batches(
    reader: &mut StreamReader<&mut dyn Read>,
    props: &mut Vec<(String, String)>,
    progress: &mut dyn FnMut(ReceiveProgress),
    batches: &SyncSender<Vec<Record>>,
) -> Result<(), EngineError> {
    loop {
        let mut batch = Vec::new();
        let mut bytes = 0u64;
        let mut ended = Ok(false);
        while bytes < BATCH_BYTES {
            let record = match reader.next_record() {
                Ok(Some(Record::End { .. })) => {
                    ended = Ok(true);
                    break;
                }
                Ok(Some(Record::Property { name, value })) => {
                    props.push((name, value));
                    continue;
                }
                Ok(Some(record)) => record,
                Ok(None) => {
                    let record = reader.sequence();
                    ended = Err(stream_error(tarn_send::StreamError::Truncated { record }));
                    break;
                }
                Err(error) => {
                    ended = Err(stream_error(error));
                    break;
                }
            };
            bytes += tarn_send::encoded_len(&record);
            batch.push(record);
        }
        if !batch.is_empty() && batches.send(batch).is_err() {
            return Ok(());
        }
        progress(ReceiveProgress::of(reader));
        if ended? {
            return Ok(());
        }
    }
}

/// The bytes of data `batch` writes (its WRITE records' logical sizes).
fn data_bytes(batch: &[Record]) -> u64 {
    let write = |record: &Record| match record {
        Record::Write(w) => u64::from(w.logical_size),
        _ => 0,
    };
    batch.iter().map(write).sum()
}

/// Where a receive stands after `record`: the first object and offset not yet received.
fn advance(position: &mut (u64, u64), record: &Record) {
    *position = match record {
        Record::Object(o) => (o.object, 0),
        Record::Write(w) => (w.object, w.offset.saturating_add(u64::from(w.logical_size))),
        Record::Free {
            object,
            offset,
            length,
        } => (*object, offset.saturating_add(*length)),
        Record::FreeObjects { first, count } => (first.saturating_add(*count), 0),
        _ => *position,
    };
}

fn apply_batch(
    inner: &mut Imported,
    id: DatasetId,
    batch: &mut Vec<Record>,
    position: &mut (u64, u64),
) -> Result<(), EngineError> {
    let Imported { pool, datasets, .. } = inner;
    let reader = pool.reader();
    let objset = &mut datasets.node_mut(id).objset;
    for record in batch.drain(..) {
        if matches!(record, Record::Property { .. }) {
            continue;
        }
        let mut next = *position;
        advance(&mut next, &record);
        // Taken, not borrowed: a whole block's bytes become the dirty block uncopied.
        dsend::apply_owned(objset, &reader, record, tarn_posix::RECOMPUTED_TYPES)
            .map_err(|e| invalid(format!("invalid stream: cannot apply a record: {e}")))?;
        *position = next;
    }
    Ok(())
}
