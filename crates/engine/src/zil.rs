//! The intent log (ZFS's ZIL): `fsync` and `sync=always` made durable without a txg.
//!
//! ```text
//!  fs_op ── Fs::with_log ──► pending records (txg, LogRecord) per dataset, in memory
//!  fsync ── commit ──► under the pool lock: records → stream → log blocks planned at the
//!                      pre-allocated next address, each naming the next (allocated now);
//!                      without it: the blocks written, then one flush of the top-level
//!                      vdevs written (ZFS flushes only those too)
//!  sync of txg T ──► every record is in T: the old chain is freed (deferred), a fresh first
//!                    block is allocated and named by the dataset header committed in T
//!  import ──► claim the chain's blocks, replay its records on the committed state through
//!             tarn-posix, then the import's txg commits the result and frees the chain
//! ```
//!
//! Volumes use the same chains: a volume's writes and zeroes are queued as
//! `tarn_dataset::volume_log::Change`s (no bytes) and a flush or FUA commits them as volume
//! records, read from the volume at commit, as file writes are; a dataset's queue holds one
//! kind or the other, and replay decodes a chain by the kind of its dataset's object set.
//!
//! # `logbias=throughput` (volumes and files)
//! ZFS's `WR_INDIRECT`: a commit writes each volume block its pending writes touched in
//! place, as the block the open txg will hold (`tarn_objects::ObjectSet::write_ahead_many`,
//! all of the commit's blocks in batches written in parallel where the devices allow it,
//! allocated in open context through `tarn_pool::OpenWriter`), and logs indirect records
//! (range and block pointer) instead of the bytes; one flush covers the chain's blocks and
//! the written blocks. At the txg's sync a block still holding the block's dirty data is
//! adopted by the object set as it is (`logs_before_sync` asks the same question and keeps
//! its hands off it); a block changed again since is freed with the chain
//! (`free_log_block`: never reusable before that txg commits, while the chain may name it).
//! So the data goes to the pool once, on the data vdevs, and log devices carry only
//! pointers. Replay reads each block through its pointer (checksum verified) and writes the
//! range again; the block is free space in the committed state, read before the import's
//! txg allocates anything, so it is not claimed. The last commit of a chain is dropped
//! whole when one of its blocks does not verify: its flush had not returned; in an earlier
//! commit such a block stops the replay with its reason (never installed as wrong bytes).
//! A filesystem's commit does the same for the whole blocks its pending writes cover
//! (`tarn_posix::intent_indirect`: partial blocks and blocks under 4 KiB stay logged as
//! data, as ZFS's `latency` logs small writes), with indirect file records (type 16) naming
//! (inode, range, block pointer); `DatasetLog::indirect` keeps the object beside each
//! block, so the sync's adoption is one rule for both. An unlink, truncate or overwrite of
//! the file before the txg changes or frees the block's dirty data, so the sync frees the
//! block instead of adopting it; replay applies the indirect record and then the later
//! records, as it would data records.
//!
//! # Choices
//! - An `fsync` of any file commits every pending record of its dataset (simpler than
//!   ZFS's per-file dependency tracking, and never less durable). A write is queued
//!   without its bytes and they are read from the file's dirty records at commit (ZFS's
//!   WR_NEED_COPY, `tarn_posix::intent`), so writes nobody fsyncs cost no copy; in the log
//!   the bytes are inline, however large. A commit of more than [`COMMIT_BYTES_MAX`], or of
//!   a queue that cannot be read back, syncs a txg instead.
//! - A dataset gets a chain only once it asks for one: the first `fsync` (or `sync=always`
//!   operation) on a dataset without a chain syncs a txg, as ZFS's first commit waits for
//!   the header. The chain is kept across txgs while the dataset keeps using it and
//!   dropped after [`IDLE_TXGS_MAX`] txgs without a commit, and at export (`logs_close`):
//!   an exported pool names no log, so a log device missing at the next import is known
//!   to have held no records and no `log_replay` event is posted. After a crash that
//!   cannot be known (the first block is written after its header commits), so a missing
//!   log device that a committed header names is reported as a possible loss.
//! - Records carry the open txg ([`tarn_pool::Pool::open_txg`]): while txg T commits
//!   (module [`crate::txg`]) new records are T+1's, and T's commit drops only records of T
//!   and older. The write phase of T gives an active dataset a new chain (new first block,
//!   new chain id) named by T's header and frees the old chain in T; a commit waits until T
//!   has committed before it writes into the new chain. Were it to write there earlier and
//!   T not commit, the import would open T-1, whose header names the old chain, and the
//!   fsync'd records would be lost. Records of T stay pending (and in the old chain) until
//!   T commits, so a failed commit of T leaves them replayable from T-1.
//! - Log blocks are allocated in open context ([`tarn_space::SpaceManager::allocate_log`],
//!   on a log device when the pool has one) and recorded in the next txg's space-log
//!   delta. They are freed with [`tarn_space::SpaceManager::free_log_block`], which never
//!   lets a block a committed header's chain may name be reused before the txg that drops
//!   the chain commits (blocks born in that txg are released at its commit, older ones are
//!   deferred `TXG_DEFER` txgs). A rewind (`-T`/`-F`) to an older txg may therefore find
//!   its chain overwritten: its replay then ends early, safely.
//! - Replay goes through tarn-posix like the original calls, at their recorded times, on the
//!   committed state with the committed properties; it is not admitted against quotas (the
//!   operations were admitted when they ran). A replayed inode's generation is the replay's
//!   txg, not the original one.
//!
//! # Commits off the pool lock
//! A commit ([`crate::PoolHandle::log_commit`]) holds the pool lock only to gather: it
//! waits until no txg is syncing, turns every pending record of the dataset into the
//! stream, allocates and encodes the chain's next blocks and advances the chain
//! (`Imported::log_gather`, `plan_chain`); then it writes the blocks and flushes their
//! vdevs without the lock (`LogBatch::write`, through a `tarn_pool::LogWriter`), and takes
//! the lock again to drop the records it wrote (`log_written`). Meanwhile reads, writes and
//! other datasets' commits go on. As ZFS's `zil_commit` writer and waiters:
//! - One commit of a dataset writes at a time (`DatasetLog::writing`). An `fsync` that
//!   finds one writing waits on the handle's `log_idle` condvar (the pool lock released);
//!   when it ends, the first waiter gathers everything pending, its own records and those
//!   of every later caller, and the others find theirs durable: commits that arrive
//!   together share one log write and one flush. Batch N+1 is written only after batch N's
//!   flush returned, so the chain on disk never has a later commit without the earlier.
//! - Each record has a sequence number (`Logs::added`); an `fsync` returns when every record
//!   of its dataset numbered before its call is durable (`DatasetLog::done`, advanced by a
//!   batch's flush and by a txg's commit). Records stay in the queue until then, so a
//!   failed write loses none of them.
//! - A write or flush that fails breaks the chain at that batch: the chain takes no more
//!   commits (`next` cleared) and the caller syncs a txg, which makes the records durable or
//!   fails the `fsync` with the pool's suspension; nothing is acknowledged that is not
//!   durable.
//! - A txg whose write phase runs while a batch is in flight frees the chain the batch
//!   writes into (`logs_before_sync`); its commit phase waits until no log write is in
//!   flight (`txg::Lane::wait_log_writes`), so those blocks are never released for reuse
//!   while still being written. The records of the batch are in that txg too, so either the
//!   old chain (if the txg does not commit) or the txg holds them.
//!
//! Lock order: the pool lock, then the lane's slot, then the lane's log-write count; a log
//! writer holds none of them while it writes and ends its count before it takes the pool
//! lock again, so a holder of the pool lock or the slot may wait for it (`PoolHandle::lock`
//! does: admin verbs see no log write in flight). `logbias=throughput` commits still write
//! their data blocks ahead under the pool lock (only the chain's blocks and the flush are
//! off it).
//!
//! # Crash safety
//! A block is accepted only when its self-checksum, chain id and sequence number match
//! (`tarn_format::intent_log`), so a torn or missing block, stale bytes at a pre-allocated
//! address or garbage end the chain there, and nothing after it is replayed. A commit is
//! replayed whole or not at all: its blocks but the last carry the `continues` flag, and
//! the stream is cut after the last block without it, so a commit the crash cut (its fsync
//! never returned) leaves no part of itself. Replay happens on the last committed state and
//! its result, the freeing of the chain and the header without a log commit in one txg: a
//! crash during replay leaves the log as it was, and the next import replays it again.
//!
//! # Space
//! The first block of each committed chain is allocated in the committed space log and
//! named by the committed header; blocks written since are open allocations
//! ([`tarn_space::SpaceManager::open_allocated`]). `check::verify_pool` counts both.

use std::collections::BTreeMap;
use std::sync::MutexGuard;

use tarn_base::{Guid, Txg};
use tarn_dataset::LogHead;
use tarn_dataset::volume_log::{self, Change};
use tarn_format::intent_log::{
    LOG_BLOCK_MAX, LOG_BLOCK_MIN, LOG_HEADER_LEN, LogBlockHeader, LogPtr, decode_block,
    encode_block,
};
use tarn_format::{BlockPtr, Dva};
use tarn_objects::ObjsetKind;
use tarn_posix::intent_indirect::{WrittenAhead, records_throughput};
use tarn_posix::{Fs, LogRecord, Logged};

use crate::{DatasetId, EngineError, Imported};

/// Txgs without a commit after which a dataset's chain is dropped (its next `fsync` syncs a
/// txg to start a new one).
pub const IDLE_TXGS_MAX: u32 = 8;
/// Largest commit written to the log; more pending bytes sync a txg instead.
pub const COMMIT_BYTES_MAX: usize = 64 << 20;
/// Size of a chain's first block (later blocks are sized to what they carry).
const FIRST_BLOCK: u32 = 16 << 10;
/// Most blocks one chain is followed through at import.
const CHAIN_BLOCKS_MAX: u64 = 1 << 20;
/// Bytes before each record in the stream: txg (u64) and length (u32).
const RECORD_PREFIX: usize = 12;

/// What a pending record is tagged with: the txg it went into and its sequence number
/// (`Logs::added` when it was added).
#[derive(Clone, Copy, Debug)]
struct Tag {
    txg: Txg,
    seq: u64,
}

/// The intent log of one dataset, in memory.
#[derive(Debug, Default)]
pub(crate) struct DatasetLog {
    /// Records not yet durable, with the txg each went into; writes without their bytes
    /// (`tarn_posix::intent`: read from the file at commit). Records a commit is writing
    /// stay here until its flush returned.
    pending: tarn_posix::LogQueue<Tag>,
    /// A volume's changes not yet durable, with their tag (a write without its bytes: read
    /// from the volume at commit). A dataset uses one queue or the other.
    volume: Vec<(Tag, Change)>,
    /// Every record of this dataset with a smaller sequence number is durable (in the log
    /// or a committed txg), or moot by a later record that is (a reclaim drops the queued
    /// writes of its inode).
    done: u64,
    /// A commit is writing the records before this sequence number, off the pool lock.
    writing: Option<u64>,
    /// The first sequence number of each txg that has records here and has not committed,
    /// oldest first: a txg's commit makes every record before the next txg's first durable
    /// (those a reclaim dropped from `pending` included).
    starts: std::collections::VecDeque<(Txg, u64)>,
    /// Blocks written ahead of the open txg by `logbias=throughput` commits (the volume's
    /// or file's object, block id, pointer), named by records of the chain: the txg's sync
    /// adopts each one that is still the block's current data, and the others are freed
    /// with the chain.
    indirect: Vec<WrittenAhead>,
    /// Every block of the current chain: the committed first block, the blocks written
    /// since and the pre-allocated next one (all freed by the next sync).
    blocks: Vec<Dva>,
    /// Where the next block goes; `None` when the committed header names no chain.
    next: Option<LogPtr>,
    chain: u64,
    seq: u64,
    /// Txgs synced since the last commit.
    idle: u32,
    /// A commit asked for a chain since the last sync.
    wanted: bool,
}

/// The intent logs of one pool.
#[derive(Debug, Default)]
pub(crate) struct Logs {
    map: BTreeMap<DatasetId, DatasetLog>,
    /// Sequence number of the next record added to any dataset's log.
    added: u64,
}

/// What a commit found to do under the pool lock ([`Imported::log_gather`]).
enum Gathered {
    /// Nothing is left to write: the records are durable (`by_txg`: a txg synced them).
    Done { by_txg: bool },
    /// Blocks to write and flush without the pool lock.
    Write(LogBatch),
}

/// One commit's log blocks, allocated and encoded under the pool lock, written and flushed
/// without it (module doc, "Commits off the pool lock").
struct LogBatch {
    /// The batch holds every pending record with a smaller sequence number.
    upto: u64,
    /// The chain its blocks belong to.
    chain: u64,
    /// Each block's address and bytes, in chain order.
    blocks: Vec<(Dva, Vec<u8>)>,
    /// The top-level vdevs to flush: the blocks' and those of blocks written ahead.
    vdevs: Vec<tarn_base::VdevId>,
    writer: tarn_pool::LogWriter,
}

impl LogBatch {
    /// Writes the blocks in chain order, then flushes their vdevs: the batch is durable when
    /// this returns `Ok`. Takes no lock.
    fn write(&self) -> Result<(), String> {
        for (dva, bytes) in &self.blocks {
            self.writer.write_raw(dva, bytes)?;
        }
        self.writer.flush_vdevs(&self.vdevs)
    }
}

/// What an import's replay found in one dataset's log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Dataset name.
    pub dataset: String,
    /// Log blocks read (and claimed).
    pub blocks: u64,
    /// Records replayed.
    pub records: u64,
    /// Why replay stopped early, if it did (records after that point are lost).
    pub stopped: Option<String>,
}

impl Logs {
    /// Memory the pending records of every dataset hold.
    pub(crate) fn memory_bytes(&self) -> u64 {
        self.map
            .values()
            .map(|log| {
                log.pending.memory_bytes()
                    + (log.volume.capacity() * size_of::<(Tag, Change)>()) as u64
                    + (log.indirect.capacity() * size_of::<WrittenAhead>()) as u64
            })
            .sum()
    }

    /// Adds a volume change made in `txg` to the dataset's pending list.
    pub(crate) fn add_volume(&mut self, id: DatasetId, txg: Txg, change: Change) {
        self.entry(id);
        let seq = self.next_seq();
        let log = self.entry(id);
        log.started(txg, seq);
        log.volume.push((Tag { txg, seq }, change));
    }

    /// The log of `id`, made when it has none: every record before now is not its concern.
    fn entry(&mut self, id: DatasetId) -> &mut DatasetLog {
        let added = self.added;
        self.map.entry(id).or_insert_with(|| DatasetLog {
            done: added,
            ..DatasetLog::default()
        })
    }

    fn next_seq(&mut self) -> u64 {
        self.added += 1;
        self.added - 1
    }

    /// Whether every record of `id` before sequence number `target` is durable (a dataset
    /// without a log has none pending: its log is dropped only when empty).
    fn covered(&self, id: DatasetId, target: u64) -> bool {
        self.map.get(&id).is_none_or(|log| log.done >= target)
    }

    /// Whether a commit of `id` is writing without the pool lock.
    fn writing(&self, id: DatasetId) -> bool {
        self.map.get(&id).is_some_and(|log| log.writing.is_some())
    }

    /// Adds records made in `txg` to the dataset's pending list.
    pub(crate) fn add(&mut self, id: DatasetId, txg: Txg, records: Vec<Logged>) {
        if records.is_empty() {
            return;
        }
        // Made before the first sequence number is taken: its records are its concern.
        self.entry(id);
        for record in records {
            let seq = self.next_seq();
            let log = self.entry(id);
            log.started(txg, seq);
            log.pending.push(Tag { txg, seq }, record);
        }
    }

    /// Bytes of log blocks allocated in memory (every chain's blocks and the volume blocks
    /// written ahead of the open txg), for the checker.
    pub(crate) fn allocated_bytes(&self) -> u64 {
        let chains: u64 = self
            .map
            .values()
            .flat_map(|l| &l.blocks)
            .map(|d| d.asize)
            .sum();
        let ahead: u64 = self
            .map
            .values()
            .flat_map(|l| &l.indirect)
            .map(|(_, _, bp)| bp.asize_total())
            .sum();
        chains + ahead
    }

    /// The blocks of `id` written ahead of the open txg and not yet adopted.
    pub(crate) fn written_ahead(&self, id: DatasetId) -> Vec<BlockPtr> {
        self.map.get(&id).map_or_else(Vec::new, |l| {
            l.indirect.iter().map(|(_, _, bp)| *bp).collect()
        })
    }

    /// The blocks of `id`'s chain, oldest first.
    pub(crate) fn blocks(&self, id: DatasetId) -> Vec<Dva> {
        self.map
            .get(&id)
            .map_or_else(Vec::new, |l| l.blocks.clone())
    }
}

impl DatasetLog {
    /// Notes that a record `seq` went into `txg`.
    fn started(&mut self, txg: Txg, seq: u64) {
        if self.starts.back().is_none_or(|(last, _)| *last != txg) {
            self.starts.push_back((txg, seq));
        }
    }

    fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.volume.is_empty()
    }

    /// Bytes the pending records will take in the log, about.
    fn bytes(&self) -> u64 {
        let files: u64 = self
            .pending
            .entries()
            .iter()
            .map(|(_, e)| e.log_bytes())
            .sum();
        let volume: u64 = self.volume.iter().map(|(_, c)| c.log_bytes()).sum();
        files + volume
    }
}

/// Appends one record of txg `txg` to a log stream: txg, length, the record.
fn push_record(stream: &mut Vec<u8>, txg: Txg, record: &[u8]) {
    stream.extend_from_slice(&txg.0.to_le_bytes());
    stream.extend_from_slice(&(record.len() as u32).to_le_bytes());
    stream.extend_from_slice(record);
}

fn chain_id(pool: Guid, dataset: Guid, txg: Txg, dva: &Dva) -> u64 {
    let mut x = pool.0 ^ dataset.0.rotate_left(17) ^ txg.0.rotate_left(41) ^ dva.offset;
    x ^= u64::from(dva.vdev.0) << 56;
    // splitmix64's finalizer: ids of neighbouring txgs share no obvious bits.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn block_size_for(bytes: usize) -> u32 {
    let wanted = (bytes + LOG_HEADER_LEN).next_multiple_of(LOG_BLOCK_MIN as usize);
    u32::try_from(wanted)
        .unwrap_or(LOG_BLOCK_MAX)
        .clamp(LOG_BLOCK_MIN, LOG_BLOCK_MAX)
}

impl Imported {
    /// Before the next txg syncs: returns every chain's blocks (the sync frees them), gives
    /// each dataset that uses its log a fresh first block in its header, and drops the logs
    /// of datasets that are gone or idle.
    pub(crate) fn logs_before_sync(&mut self) -> Vec<Dva> {
        let txg = self.pool.txg().next();
        let pool_guid = self.pool.guid();
        let mut frees = Vec::new();
        let ids: Vec<DatasetId> = self.logs.map.keys().copied().collect();
        for id in ids {
            if !self.datasets.contains(id) {
                if let Some(log) = self.logs.map.remove(&id) {
                    frees.extend(log.blocks);
                    let ahead = log
                        .indirect
                        .iter()
                        .flat_map(|(_, _, bp)| bp.copies().copied());
                    frees.extend(ahead);
                }
                continue;
            }
            let log = self.logs.map.entry(id).or_default();
            frees.append(&mut log.blocks);
            // Blocks written ahead: adopted by this sync while still the block's data (the
            // object layer's rule, `tarn_objects::ObjectSet::written_ahead`), else freed
            // with the chain that names them.
            let objset = &self.datasets.node(id).objset;
            for (object, blkid, bp) in std::mem::take(&mut log.indirect) {
                let adopted = bp.birth == txg && objset.written_ahead(object, blkid) == Some(bp);
                if !adopted {
                    frees.extend(bp.copies().copied());
                }
            }
            let active = log.wanted || (log.next.is_some() && log.idle < IDLE_TXGS_MAX);
            log.wanted = false;
            log.idle = log.idle.saturating_add(1);
            log.next = None;
            let node = self.datasets.node_mut(id);
            let mut head = LogHead::default();
            if active && let Some(dva) = self.pool.space_mut().allocate_log(u64::from(FIRST_BLOCK))
            {
                let first = LogPtr {
                    dva,
                    psize: FIRST_BLOCK,
                };
                head = LogHead {
                    first,
                    chain: chain_id(pool_guid, node.header.guid, txg, &dva),
                };
                log.blocks.push(dva);
                log.next = Some(first);
                log.chain = head.chain;
                log.seq = 1;
            }
            if node.header.log != head {
                node.header.log = head;
                node.header_dirty = true;
            }
            if log.next.is_none()
                && log.is_empty()
                && log.blocks.is_empty()
                && log.writing.is_none()
            {
                self.logs.map.remove(&id);
            }
        }
        frees
    }

    /// Before an export's last txg: no dataset keeps a chain, so that txg commits headers
    /// that name no log (ZFS's `zil_close` leaves an empty header too). An exported pool
    /// therefore has nothing to replay, and an import that misses a log device knows that
    /// device held no records rather than reporting them lost. Records still pending go
    /// into that txg as always.
    pub(crate) fn logs_close(&mut self) {
        for log in self.logs.map.values_mut() {
            log.wanted = false;
            log.next = None;
        }
    }

    /// After txg `txg` committed: every pending record is in it or older.
    pub(crate) fn logs_after_sync(&mut self, txg: Txg) {
        let added = self.logs.added;
        for log in self.logs.map.values_mut() {
            log.pending.retain(|t| t.txg > txg);
            log.volume.retain(|(t, _)| t.txg > txg);
            while log.starts.front().is_some_and(|(t, _)| *t <= txg) {
                log.starts.pop_front();
            }
            let durable = log.starts.front().map_or(added, |(_, seq)| *seq);
            log.done = log.done.max(durable);
        }
    }

    /// Under the pool lock, no txg syncing: what a commit of `id`'s pending records does.
    /// Either a txg makes them durable here (no chain yet, too much pending, a queue that
    /// cannot be read back, a chain that cannot take them), or they are gathered into a
    /// [`LogBatch`] whose blocks are allocated and encoded now and written by the caller
    /// without the pool lock. No other commit of `id` may be writing.
    fn log_gather(&mut self, id: DatasetId) -> Result<Gathered, EngineError> {
        let upto = self.logs.added;
        let log = self.logs.entry(id);
        assert!(
            log.writing.is_none(),
            "I3: one commit of a log writes at a time"
        );
        if log.is_empty() {
            // Every record ever added is durable: a commit or a txg took it from the queue,
            // or a reclaim that is durable itself made it moot.
            log.done = upto;
            return Ok(Gathered::Done { by_txg: false });
        }
        let bytes = log.bytes();
        let readable = log.pending.readable();
        if log.next.is_none() || !readable || bytes > COMMIT_BYTES_MAX as u64 {
            log.wanted = true;
            return self.sync().map(|_| Gathered::Done { by_txg: true });
        }
        let stream = self.log_stream(id);
        let batch = stream
            .filter(|stream| stream.len() <= COMMIT_BYTES_MAX)
            .and_then(|stream| self.plan_chain(id, &stream, upto).ok());
        let log = self.logs.entry(id);
        let Some(batch) = batch else {
            // Nothing was written; the chain may have advanced past blocks that never will
            // be, so no later commit may use it.
            log.next = None;
            log.wanted = true;
            return self.sync().map(|_| Gathered::Done { by_txg: true });
        };
        log.writing = Some(upto);
        self.lane.log_write_started();
        Ok(Gathered::Write(batch))
    }

    /// Under the pool lock again, after `batch` of `id` was written (`result`): its records
    /// are durable and leave the queue, or (the write or the flush failed) a txg makes them
    /// durable instead. Returns whether a txg did.
    fn log_written(
        &mut self,
        id: DatasetId,
        batch: &LogBatch,
        result: Result<(), String>,
    ) -> Result<bool, EngineError> {
        let log = self.logs.map.get_mut(&id);
        let Some(log) = log else {
            // The dataset went while the batch was written: a txg dropped its log.
            return Ok(false);
        };
        log.writing = None;
        if result.is_ok() {
            log.pending.retain(|t| t.seq >= batch.upto);
            log.volume.retain(|(t, _)| t.seq >= batch.upto);
            log.done = log.done.max(batch.upto);
            log.idle = 0;
            return Ok(false);
        }
        // The chain may end before this batch's blocks now: nothing more goes into it (a
        // txg that started meanwhile already gave the dataset a new chain).
        if log.chain == batch.chain {
            log.next = None;
        }
        log.wanted = true;
        self.sync().map(|_| true)
    }

    /// The pending records of `id` as the log's stream (each: txg, length, record), writes'
    /// bytes read from their files now (from the open txg's dirty records); `None` when one
    /// cannot be read back, and the caller syncs a txg instead.
    fn log_stream(&mut self, id: DatasetId) -> Option<Vec<u8>> {
        if !self.logs.map.get(&id)?.volume.is_empty() {
            return self.volume_stream(id);
        }
        if self.datasets.fs_settings(id).throughput {
            return self.file_stream_throughput(id);
        }
        let Imported {
            pool,
            datasets,
            logs,
            ..
        } = self;
        let log = logs.map.get(&id)?;
        let settings = datasets.fs_settings(id);
        let reader = pool.reader();
        let node = datasets.node_mut(id);
        // Reads only: the time and the access-time mode do not matter.
        let now = tarn_posix::Timespec { secs: 0, nsecs: 0 };
        let mut fs = Fs::new(&mut node.objset, &reader, now, settings.config);
        let mut stream = Vec::new();
        for (tag, entry) in log.pending.entries() {
            let record = fs.log_record(entry).ok()??;
            push_record(&mut stream, tag.txg, &record.encode());
        }
        Some(stream)
    }

    /// [`Imported::log_stream`] of a volume: its changes as volume records, writes' bytes
    /// read from the volume now, or under `logbias=throughput` written ahead in place and
    /// named by indirect records (`volume_log::Change::records_indirect`).
    fn volume_stream(&mut self, id: DatasetId) -> Option<Vec<u8>> {
        let Imported {
            pool,
            datasets,
            logs,
            ..
        } = self;
        let throughput = datasets.fs_settings(id).throughput;
        let log = logs.map.get_mut(&id)?;
        let objset = &mut datasets.node_mut(id).objset;
        let mut stream = Vec::new();
        if !throughput {
            let reader = pool.reader();
            for (tag, change) in &log.volume {
                let bytes = change.record(objset, &reader).ok()?.encode();
                push_record(&mut stream, tag.txg, &bytes);
            }
            return Some(stream);
        }
        let mut writer = pool.open_writer();
        let mut written = BTreeMap::new();
        let mut new_blocks = Vec::new();
        // Every block of the commit in batches first (in parallel where the devices allow
        // it); the records then name the blocks written here.
        let changes = log.volume.iter().map(|(_, change)| change);
        let mut failed =
            Change::write_ahead_all(changes, objset, &mut writer, &mut written, &mut new_blocks)
                .is_err();
        for (tag, change) in &log.volume {
            if failed {
                break;
            }
            let records =
                change.records_indirect(objset, &mut writer, &mut written, &mut new_blocks);
            let Ok(records) = records else {
                failed = true;
                break;
            };
            for record in records {
                push_record(&mut stream, tag.txg, &record.encode());
            }
        }
        // Written or not, every new block is the log's until the next sync decides.
        let object = tarn_dataset::volume::VOLUME_OBJECT;
        let new_blocks = new_blocks
            .into_iter()
            .map(|(blkid, bp)| (object, blkid, bp));
        log.indirect.extend(new_blocks);
        (!failed).then_some(stream)
    }

    /// [`Imported::log_stream`] of a filesystem under `logbias=throughput`: the whole
    /// blocks its pending writes cover written ahead in place and named by indirect records
    /// (`tarn_posix::intent_indirect`), the rest as under `latency`.
    fn file_stream_throughput(&mut self, id: DatasetId) -> Option<Vec<u8>> {
        let Imported {
            pool,
            datasets,
            logs,
            ..
        } = self;
        let config = datasets.fs_settings(id).config;
        let log = logs.map.get_mut(&id)?;
        let objset = &mut datasets.node_mut(id).objset;
        let mut writer = pool.open_writer();
        let mut new_blocks = Vec::new();
        let entries = log.pending.entries();
        let records = records_throughput(objset, &mut writer, config, entries, &mut new_blocks);
        let mut stream = Vec::new();
        if let Ok(Some(records)) = &records {
            for (tag, record) in records {
                push_record(&mut stream, tag.txg, &record.encode());
            }
        }
        // Written or not, every new block is the log's until the next sync decides.
        log.indirect.extend(new_blocks);
        matches!(records, Ok(Some(_))).then_some(stream)
    }

    /// Plans `stream` as the next blocks of `id`'s chain: allocates each block's successor,
    /// encodes the blocks and advances the chain, and names the vdevs to flush, those of
    /// the blocks written ahead for it included (one flush makes the commit durable: replay
    /// drops a last commit whose blocks do not all verify, module doc). Nothing is written.
    fn plan_chain(&mut self, id: DatasetId, stream: &[u8], upto: u64) -> Result<LogBatch, String> {
        let Imported { pool, logs, .. } = self;
        let writer = pool.log_writer()?;
        let log = logs.map.get_mut(&id).ok_or("no log")?;
        let mut current = log.next.ok_or("no chain")?;
        let mut rest = stream;
        let mut vdevs: Vec<tarn_base::VdevId> = log
            .indirect
            .iter()
            .flat_map(|(_, _, bp)| bp.copies().map(|dva| dva.vdev))
            .collect();
        let mut blocks = Vec::new();
        loop {
            let room = (current.psize as usize).saturating_sub(LOG_HEADER_LEN);
            let take = rest.len().min(room);
            let after = rest.len() - take;
            let next_psize = block_size_for(if after > 0 { after } else { stream.len() });
            let dva = pool
                .space_mut()
                .allocate_log(u64::from(next_psize))
                .ok_or("no space for a log block")?;
            log.blocks.push(dva);
            let next = LogPtr {
                dva,
                psize: next_psize,
            };
            let header = LogBlockHeader {
                chain: log.chain,
                seq: log.seq,
                payload_len: take as u32,
                continues: after > 0,
                next,
            };
            blocks.push((
                current.dva,
                encode_block(&header, &rest[..take], current.psize),
            ));
            vdevs.push(current.dva.vdev);
            log.seq += 1;
            log.next = Some(next);
            current = next;
            rest = &rest[take..];
            if rest.is_empty() {
                break;
            }
        }
        vdevs.sort_unstable();
        vdevs.dedup();
        Ok(LogBatch {
            upto,
            chain: log.chain,
            blocks,
            vdevs,
            writer,
        })
    }

    /// At import, before anything else changes: claims and replays the intent log of every
    /// dataset whose header names one. The import's sync then commits the result and frees
    /// the chains.
    pub(crate) fn replay_logs(&mut self) -> Vec<ReplayReport> {
        let mut reports = Vec::new();
        for id in self.datasets.all() {
            let head = self.datasets.node(id).header.log;
            if head.first.is_empty() {
                continue;
            }
            let mut report = ReplayReport {
                dataset: self.datasets.node(id).name.clone(),
                ..ReplayReport::default()
            };
            // An unavailable dataset's log waits, untouched, for an import that can read
            // the dataset (`datasets`, "Unavailable datasets"): replaying nothing and
            // freeing the chain would lose acknowledged writes.
            if let Err(e) = self.datasets.check_available(id) {
                report.stopped = Some(format!("not replayed: {e}"));
                reports.push(report);
                continue;
            }
            let (blocks, stream, end, last) = self.read_chain(&head);
            report.blocks = blocks.len() as u64;
            let log = self.logs.map.entry(id).or_default();
            log.blocks = blocks;
            report.stopped = end;
            let volume = self.datasets.node(id).objset.kind() == ObjsetKind::Volume;
            let (mut records, cut) = decode_stream(&stream, volume);
            if report.stopped.is_none() {
                report.stopped = cut;
            }
            let committed = self.pool.imported_txg().unwrap_or(Txg(0));
            records.retain(|(_, txg, _)| *txg > committed);
            self.drop_incomplete_commit(&mut records, last);
            for (_, txg, record) in &records {
                if let Err(e) = self.replay_one(id, record) {
                    report.stopped = Some(format!("a record of txg {} failed: {e}", txg.0));
                    break;
                }
                report.records += 1;
            }
            reports.push(report);
        }
        reports
    }

    /// A read-only import neither claims nor replays (as ZFS): the logs stay for the next
    /// read-write import, and their committed first blocks are only noted so that the
    /// accounting knows them.
    pub(crate) fn keep_logs(&mut self) {
        for id in self.datasets.all() {
            let first = self.datasets.node(id).header.log.first;
            if !first.is_empty() && self.inside_a_vdev(&first.dva) {
                self.logs.map.entry(id).or_default().blocks = vec![first.dva];
            }
        }
    }

    /// Drops the last commit of a chain (its records from stream offset `last` on) when a
    /// block one of its indirect records (a volume's or a file's) names does not verify:
    /// that commit's single flush (`write_chain`) had not returned, since every block it
    /// wrote would be durable if it had, so it was never acknowledged and goes whole, as a
    /// commit the crash cut inside the chain does. Blocks of earlier commits are not
    /// excused here: a bad one stops the replay with its reason.
    fn drop_incomplete_commit(&self, records: &mut Vec<(usize, Txg, Record)>, last: usize) {
        let bad = records
            .iter()
            .filter(|(at, _, _)| *at >= last)
            .any(|(_, _, r)| {
                r.indirect_block()
                    .is_some_and(|block| self.pool.pipeline().read_block(block).is_err())
            });
        if bad {
            records.retain(|(at, _, _)| *at < last);
        }
    }

    /// Replays one record; an indirect write (a volume's or a file's) reads the block it
    /// names through its block pointer, and one that does not verify is an error (the
    /// replay stops there and says why: its bytes are never installed). That block is free
    /// space in the committed state and is not claimed (ZFS claims it, as its replay runs
    /// later): every replay read happens here, before the import's first txg allocates
    /// anything, and that txg writes the data anew.
    fn replay_one(&mut self, id: DatasetId, record: &Record) -> Result<(), EngineError> {
        let config = self.datasets.fs_config(id);
        let Imported { pool, datasets, .. } = self;
        let block = match record.indirect_block() {
            Some(block) => {
                let bytes = pool.pipeline().read_block(block);
                Some(
                    bytes
                        .map_err(|e| crate::dataset_ops::invalid(format!("indirect block: {e}")))?,
                )
            }
            None => None,
        };
        let reader = pool.reader();
        let objset = &mut datasets.node_mut(id).objset;
        match record {
            Record::File(record) => {
                let mut fs = Fs::new(objset, &reader, record.now, config);
                match &block {
                    Some(bytes) => fs.replay_indirect(record, bytes)?,
                    None => fs.replay(record)?,
                }
            }
            Record::Volume(record) => match &block {
                Some(bytes) => record.apply_indirect(objset, &reader, bytes)?,
                None => record.apply(objset, &reader)?,
            },
        }
        Ok(())
    }

    /// Follows a chain from its first block: the blocks (claimed, except the first, which
    /// the committed space log already holds), their payloads in order, and why the chain
    /// ended when that was not a clean end (an unreadable block rather than one never
    /// written cannot be told apart here, so both are a clean end unless its vdev is
    /// missing).
    fn read_chain(&mut self, head: &LogHead) -> (Vec<Dva>, Vec<u8>, Option<String>, usize) {
        if !self.inside_a_vdev(&head.first.dva) {
            // Not a block this pool could have allocated: leave it alone (freeing it could
            // release space that is not allocated), read nothing.
            return (
                Vec::new(),
                Vec::new(),
                Some("the log's first block is outside the pool".into()),
                0,
            );
        }
        let mut blocks = vec![head.first.dva];
        let mut stream = Vec::new();
        let mut current = head.first;
        let mut end = None;
        // Stream bytes through the last block that ends a commit, and where that commit
        // starts.
        let mut complete = 0;
        let mut last = 0;
        for seq in 1..=CHAIN_BLOCKS_MAX {
            let psize = current.psize;
            let sane = (LOG_HEADER_LEN as u32..=LOG_BLOCK_MAX).contains(&psize)
                && psize.is_multiple_of(512)
                && !current.is_empty();
            if !sane {
                break;
            }
            let verify = |bytes: &[u8]| decode_block(bytes, head.chain, seq).is_some();
            let read = self
                .pool
                .pipeline()
                .read_raw(&current.dva, u64::from(psize), &verify);
            let bytes = match read {
                Ok(bytes) => bytes,
                Err(e) => {
                    if self.vdev_missing(&current.dva) {
                        end = Some(format!("log block {seq} is on a missing device: {e}"));
                    }
                    break;
                }
            };
            let Some((header, payload)) = decode_block(&bytes, head.chain, seq) else {
                break;
            };
            if seq > 1 {
                if self.pool.space_mut().claim_log(&current.dva).is_err() {
                    break;
                }
                blocks.push(current.dva);
            }
            stream.extend_from_slice(payload);
            if !header.continues {
                last = complete;
                complete = stream.len();
            }
            current = header.next;
        }
        // A commit cut by the crash is dropped whole, silently as a record cut by the end of
        // the chain always was: its fsync had not returned, so nothing it acknowledged is
        // lost, and a part of it could show writes' bytes from later in the commit.
        stream.truncate(complete);
        (blocks, stream, end, last)
    }

    fn inside_a_vdev(&self, dva: &Dva) -> bool {
        self.pool
            .tops()
            .get(dva.vdev.0 as usize)
            .is_some_and(|top| {
                dva.asize > 0
                    && dva
                        .offset
                        .checked_add(dva.asize)
                        .is_some_and(|end| end <= top.asize())
            })
    }

    fn vdev_missing(&self, dva: &Dva) -> bool {
        self.pool.tops().get(dva.vdev.0 as usize).is_none_or(|top| {
            matches!(
                top.health(),
                tarn_vdev::Health::Unavail | tarn_vdev::Health::Faulted
            )
        })
    }
}

/// A record of a filesystem's log or of a volume's.
enum Record {
    File(LogRecord),
    Volume(volume_log::LogRecord),
}

impl Record {
    /// The block an indirect write names, outside the committed tree.
    fn indirect_block(&self) -> Option<&BlockPtr> {
        match self {
            Record::File(record) => record.indirect_block(),
            Record::Volume(volume_log::LogRecord::Indirect { block, .. }) => Some(block),
            Record::Volume(_) => None,
        }
    }
}

/// Splits a replayed stream into records (of a volume's log when `volume`), each with its
/// offset in the stream; a cut or undecodable record ends it (the reason is returned when it
/// was not a clean end).
fn decode_stream(stream: &[u8], volume: bool) -> (Vec<(usize, Txg, Record)>, Option<String>) {
    let mut records = Vec::new();
    let mut rest = stream;
    while rest.len() >= RECORD_PREFIX {
        let txg = Txg(u64::from_le_bytes(rest[..8].try_into().unwrap_or([0; 8])));
        let len = u32::from_le_bytes(rest[8..12].try_into().unwrap_or([0; 4])) as usize;
        let Some(body) = rest.get(RECORD_PREFIX..RECORD_PREFIX + len) else {
            break;
        };
        let record = if volume {
            volume_log::LogRecord::decode(body)
                .map(Record::Volume)
                .map_err(|e| e.to_string())
        } else {
            LogRecord::decode(body)
                .map(Record::File)
                .map_err(|e| e.to_string())
        };
        match record {
            Ok(record) => records.push((stream.len() - rest.len(), txg, record)),
            Err(e) => return (records, Some(format!("undecodable record: {e}"))),
        }
        rest = &rest[RECORD_PREFIX + len..];
    }
    (records, None)
}

/// The event posted when an import's replay lost records (`ereport.fs.zfs.log_replay`).
pub(crate) fn replay_event(
    pool: &str,
    report: &ReplayReport,
    why: &str,
    time: u64,
) -> crate::events::Event {
    let mut event = crate::events::pool_event(pool, time, "log_replay");
    event.class = "ereport.fs.zfs.log_replay".into();
    event.payload = vec![
        ("dataset".into(), report.dataset.clone()),
        ("records_replayed".into(), report.records.to_string()),
        ("reason".into(), why.to_string()),
    ];
    event
}

impl crate::Engine {
    /// What the import of `pool` replayed from each dataset's intent log.
    pub fn log_replay_reports(&self, pool: &str) -> Result<Vec<ReplayReport>, EngineError> {
        Ok(self.pool(pool)?.lock().replayed.clone())
    }
}

impl crate::PoolHandle {
    /// Makes every record of `id` added so far durable: in its intent log when it has a
    /// chain, else (or when the log cannot take them) by syncing a txg. The log's blocks are
    /// written and flushed without the pool lock; one commit of a dataset writes at a time,
    /// and commits that arrive meanwhile wait for it, then the first of them writes
    /// everything pending for all (module doc, "Commits off the pool lock"). `inner` is this
    /// handle's pool lock; it is released on return.
    pub(crate) fn log_commit(
        &self,
        inner: MutexGuard<'_, Imported>,
        id: DatasetId,
    ) -> Result<(), EngineError> {
        let target = inner.logs.added;
        if inner.logs.covered(id, target) {
            return Ok(());
        }
        let start = self.lane.stats.start();
        let mut by_txg = false;
        let mut inner = inner;
        loop {
            // Checked first: a batch that just covered these records (or a waiter's records
            // written by another's batch) needs no txg to finish.
            if inner.logs.covered(id, target) {
                break;
            }
            if inner.logs.writing(id) {
                tarn_base::wait::before_wait();
                inner = self
                    .log_idle
                    .wait(inner)
                    .expect("pool lock poisoned by a failed invariant");
                continue;
            }
            if inner.pool.syncing_txg().is_some() {
                // The chain is the syncing txg's until it commits: finish it first.
                inner = self.wait_commit(inner)?;
                continue;
            }
            let batch = match inner.log_gather(id) {
                Ok(Gathered::Write(batch)) => batch,
                Ok(Gathered::Done { by_txg: txg }) => {
                    by_txg |= txg;
                    continue;
                }
                Err(e) => {
                    self.lane.stats.log_committed(start, true);
                    return Err(e);
                }
            };
            drop(inner);
            tarn_base::wait::before_wait();
            let result = batch.write();
            self.lane.log_write_ended();
            inner = self.lock_open();
            let written = inner.log_written(id, &batch, result);
            // Whatever happened, the next commit of the dataset may start.
            self.log_idle.notify_all();
            by_txg |= written?;
        }
        self.lane.stats.log_committed(start, by_txg);
        Ok(())
    }
}
