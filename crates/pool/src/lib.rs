//! tarn-pool: a pool is a vdev tree, an allocator and a sequence of committed txgs.
//!
//! # Purpose
//! Creates pools on leaf devices, finds and imports them again by GUID wherever their
//! devices now are, and commits transaction groups atomically: the one place that decides
//! what is durable.
//!
//! # Model
//! ```text
//!  txg T:  open ──► quiescing ──► syncing ─────────────────────────────► committed
//!            write phase (&mut Pool): │ upper layers write their dirty blocks (SyncCtx)
//!              Pool::sync_write       │ space log delta for T (tarn-space)
//!                                     │   ── returns PendingCommit; T is `syncing` ──
//!            commit phase (no Pool):  │ flush every leaf
//!              PendingCommit::commit  │ [config changed: labels L0+L2, flush]
//!                                     │ uberblock T into ring slot T % slots, all labels
//!                                     │ flush every leaf
//!                                     │ [config changed: labels L1+L3, flush]
//!            finish (&mut Pool):      │ frees of T deferred, txg and uberblock advance,
//!              Pool::sync_finish      │ or the pool suspends when the commit failed
//! ```
//! The open and quiescing states are the engine's; this crate owns the syncing step and
//! what "committed" means. [`Pool::sync`] runs the three phases in one call. Split, the
//! commit phase needs only the `Arc`'d vdevs and leaves it was handed, so the engine runs it
//! without its pool lock while txg T+1 is open ([`Pool::open_txg`]).
//!
//! # State
//! On disk: labels and uberblock rings on every leaf (docs/FORMAT.md "Labels",
//! "Uberblock"), the space log, and the blocks of upper layers, rooted in the uberblock's
//! root block pointer (the meta object set, owned by the engine). With multihost on, two
//! heartbeat slots per leaf in the boot reserve ([`multihost`], docs/FORMAT.md section 17).
//!
//! # Invariants
//! - I1: an uberblock for txg T is written only after every block reachable from it, and
//!   the space log of T, are flushed; and it is flushed before T counts as committed.
//! - I2: committed txgs strictly increase, both when writing and when importing.
//! - I3: import matches devices by GUID only; paths in labels are for messages.
//! - I4: a refused create or import writes nothing to any device.
//! - I5: a suspended pool writes nothing until it is cleared ([`Pool::resume`]); a txg that
//!   failed is retried as the same txg, never skipped or committed half written.
//! - I6: at most one txg is syncing: the write phase of T+1 starts only after
//!   [`Pool::sync_finish`] of T committed it (a failed T is kept, the pool suspended, and
//!   T+1 waits for `clear` to commit T). Open-context changes made meanwhile belong to T+1.
//!
//! # Concurrency and context
//! `Pool` is owned by one thread at a time (the engine wraps it in a mutex); syncing
//! context is the [`SyncCtx`] passed to the upper layer's closure, and is the only way to
//! allocate or free. A [`PendingCommit`] is `Send` and may run on another thread while the
//! pool's owner goes on in open context; the devices take concurrent I/O (`Device` is
//! `Sync`), and open-context writes meanwhile (intent-log blocks, heals) only add to what
//! the commit's flushes make durable. The space manager tells the txgs apart: open-context
//! allocations after the write phase of T are recorded in T+1's delta.
//!
//! # Failure model
//! Device errors below the redundancy budget are the vdev layer's business. A data vdev that
//! lost more leaves than it tolerates (checked before a txg starts), a block that could not
//! reach enough devices, a failed flush or an uberblock that no leaf took suspends the pool:
//! the txg is not committed and nothing more is written until `clear` ([`Pool::resume`],
//! module `resume`: the failed txg is kept whole in memory, blocks included, and written
//! again at the same places once the devices are back) or an export and import.
//! With the commit phase split off ([`PendingCommit`]), a commit that fails suspends the
//! pool at [`Pool::sync_finish`], which keeps the txg exactly as a failed [`Pool::sync`]
//! does (module `resume` has the state machine: open, syncing, commit failed and
//! suspended, resumed). A pool suspended by someone else while a commit phase runs (the
//! multihost heartbeat) lets that commit finish its writes (a known exception to I5: the
//! commit holds no `&mut Pool` to see the suspension); if it succeeded, its uberblock is
//! durable and the txg counts; if it failed, the suspension stays one `clear` refuses.
//! Corrupt labels are skipped (other copies are used); corrupt uberblocks are skipped
//! (older ones are used); import with rewind (`-F`, `-T`) walks back through the ring.
//!
//! # Log devices
//! Top-level vdevs created from `log` specs carry the `log` flag in the vdev tree
//! ([`Pool::is_log_vdev`]); the space manager gives them only intent-log blocks. A missing
//! log device does not stop an import (only data vdevs must be readable), and its flush
//! failures do not fail a txg once it is not writable. [`Pool::flush_vdevs`] is the
//! intent log's commit point.
//!
//! # Cache devices
//! The pool owns the `L2Cache` (tarn-vdev) of its cache devices. [`Pool::import`] keeps it
//! from feeding until the verify at the chosen uberblock is done, then rebuilds each cache
//! device's persistent index ([`Pool::l2_rebuilds`] says what came back);
//! [`Pool::sync_finish`] writes the entries fed meanwhile as a log block after the txg
//! committed (so no txg waits for a cache device), and [`Pool::export`] does the same
//! before the labels. A read-only import writes nothing to cache devices.
//!
//! # Allocation classes and changes of the tree
//! Top-level vdevs created from `special` specs carry the `special` flag
//! ([`Pool::is_special_vdev`]); the space manager gives them metadata and small blocks. They
//! count as data vdevs for import: a special vdev missing beyond its redundancy refuses the
//! import ([`PoolError::MissingSpecial`]), since every dataset's metadata is there. Labels
//! list the `org.tarn:allocation_classes` feature while a special vdev exists. A data or
//! special vdev with less redundancy than the data vdevs needs `force` at create and add
//! ([`check_replication`]). [`Pool::add`] and the removal of spares and log devices are in
//! module `change`, with the crash-safety argument; [`discover`] takes the newest config
//! whose txg committed.
//!
//! # Not here
//! Object sets and properties (tarn-objects, tarn-engine), scrub and resilver (background),
//! the timer that drives multihost heartbeats (the daemon; the heartbeat and the import-time
//! activity check are [`multihost`]), the intent log's records and chains (tarn-engine `zil`).

mod change;
pub mod labels;
pub mod multihost;
mod provider;
mod resume;
mod spec;

use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_base::{Clock, Guid, SeededRng, Txg};
use tarn_device::{Device, DeviceError};
use tarn_format::label::{PoolConfig, PoolState, VdevKind, VdevTree};
use tarn_format::uberblock::Uberblock;
use tarn_format::{
    BlockPtr, FEATURE_ALLOCATION_CLASSES, FEATURE_BLOCK_CLONING, FEATURE_DRAID, FEATURES_SUPPORTED,
    FORMAT_VERSION,
};
use tarn_space::{SpaceError, SpaceManager, TxgPin, TxgPins, VdevGeometry, VdevUsage};
use tarn_vdev::{Leaf, TopVdev, VdevError};
use tarn_zio::{BlockStore, Pipeline, WriteProps, ZioError};

pub use labels::{LabelScan, read_labels};
pub use provider::{FileProvider, SimProvider};
pub use spec::{CreateSpec, TopLayout, TopSpec, check_replication, validate_pool_name};

/// Errors of pool-level operations; the engine renders them as one line for the admin.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The pool name breaks the naming rules.
    #[error("invalid pool name '{name}': {why}")]
    InvalidName {
        /// Name given.
        name: String,
        /// Rule broken.
        why: String,
    },
    /// The vdev specification is malformed.
    #[error("{0}")]
    InvalidSpec(String),
    /// A data or special vdev would have less redundancy than the pool's data vdevs.
    #[error(
        "mismatched replication level: pool uses {pool} and new vdev is {new} (use -f to override)"
    )]
    MismatchedReplication {
        /// The pool's (strongest) data vdev, as `zpool` names it (`2-way mirror`, `raidz2`).
        pool: String,
        /// The weaker new vdev.
        new: String,
    },
    /// A special vdev (holding the pool's metadata) lost more devices than it tolerates.
    #[error(
        "the special vdev holding the pool's metadata is missing devices beyond its \
         redundancy: {}; the pool cannot be opened without it",
        missing.join(", ")
    )]
    MissingSpecial {
        /// Last known paths of its missing devices.
        missing: Vec<String>,
    },
    /// A device given to `add` is already part of this pool.
    #[error("device '{path}' is already in this pool")]
    AlreadyInPool {
        /// The path.
        path: String,
    },
    /// A device cannot be removed from the pool.
    #[error("{0}")]
    CannotRemove(String),
    /// The same device appears twice.
    #[error("device '{path}' is specified more than once")]
    DuplicateDevice {
        /// The path.
        path: String,
    },
    /// A device could not be opened.
    #[error("cannot open '{path}': {source}")]
    DeviceOpen {
        /// The path.
        path: String,
        /// Why.
        source: DeviceError,
    },
    /// A device is smaller than the minimum.
    #[error("device '{path}' is too small ({size} bytes; the minimum is {min} bytes)")]
    DeviceTooSmall {
        /// The path.
        path: String,
        /// Its size.
        size: u64,
        /// The minimum.
        min: u64,
    },
    /// A device belongs to another pool.
    #[error("device '{path}' is part of {state} pool '{pool}' (use -f to override)")]
    DeviceInUse {
        /// The path.
        path: String,
        /// The other pool.
        pool: String,
        /// `active`, `exported`, `spare`...
        state: String,
    },
    /// No pool with that name or GUID was found.
    #[error("no such pool available")]
    NotFound,
    /// Several pools have that name.
    #[error("more than one pool named '{name}' is available; import it by its numeric identifier")]
    Ambiguous {
        /// The name.
        name: String,
    },
    /// Too many devices are missing to import.
    #[error("one or more devices are missing beyond the pool's redundancy: {}", missing.join(", "))]
    MissingDevices {
        /// Last known paths (or GUIDs) of the missing devices.
        missing: Vec<String>,
    },
    /// The pool is in use by another host.
    #[error(
        "pool was last accessed by another system (host '{hostname}', hostid {hostid:#x}); \
         use -f to import anyway"
    )]
    ActiveElsewhere {
        /// The other host's name.
        hostname: String,
        /// The other host's id.
        hostid: u64,
    },
    /// Another host's multihost heartbeat advanced while this host watched it.
    #[error(
        "pool is in use by host {hostid:#x} (multihost=on); export it on that host, or import \
         after its heartbeat has stopped"
    )]
    InUseByHost {
        /// The host whose heartbeat was seen.
        hostid: u64,
    },
    /// The pool needs a feature this build does not support.
    #[error("pool uses unsupported feature '{0}'")]
    UnsupportedFeature(String),
    /// No uberblock could be used.
    #[error("no usable uberblock: {0}")]
    NoUberblock(String),
    /// The pool is suspended.
    #[error("pool I/O is suspended: {0}")]
    Suspended(String),
    /// `clear` of a suspended pool found devices that still cannot be written.
    #[error(
        "the pool is still suspended: {} cannot be written (the pool needs them to commit); \
         bring them back and clear again, or export it with 'tarn pool export -f'",
        devices.join(", ")
    )]
    StillFailing {
        /// Paths of the leaves that are missing or failing beyond their vdev's redundancy.
        devices: Vec<String>,
    },
    /// `clear` cannot resume this suspension at all.
    #[error("the pool is still suspended: {0}")]
    CannotResume(String),
    /// The pool was imported read-only.
    #[error("pool is read-only")]
    ReadOnly,
    /// A vdev could not be assembled.
    #[error(transparent)]
    Vdev(#[from] VdevError),
    /// Block I/O failed.
    #[error(transparent)]
    Zio(#[from] ZioError),
    /// The space log failed.
    #[error(transparent)]
    Space(#[from] SpaceError),
    /// A device operation failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
}

/// Finds and opens leaf devices: real files and block devices for the daemon, simulated ones
/// for tests. Paths are whatever the provider understands.
pub trait DeviceProvider: Send + Sync {
    /// Opens a device, for writing unless `read_only`.
    fn open(&self, path: &str, read_only: bool) -> Result<Arc<dyn Device>, DeviceError>;
    /// Lists candidate device paths in a directory (for import scanning).
    fn list(&self, dir: &str) -> Result<Vec<String>, DeviceError>;
}

/// Who this host is (labels record it; multihost and import checks compare it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostIdentity {
    /// Host id (nonzero).
    pub hostid: u64,
    /// Host name.
    pub hostname: String,
}

/// A pool found by scanning devices, before import.
#[derive(Clone, Debug)]
pub struct Discovered {
    /// The newest config among its devices' labels.
    pub config: PoolConfig,
    /// Leaf GUID -> path where it was found now.
    pub found: BTreeMap<Guid, String>,
    /// Leaf GUID -> the data area of the device found for it, in bytes: smaller than the
    /// leaf's `asize` (a truncated device) means it is found but cannot be used.
    pub areas: BTreeMap<Guid, u64>,
    /// Every valid uberblock found on its devices.
    pub uberblocks: Vec<Uberblock>,
    /// Leaf GUID -> the newest txg among the uberblocks in that device's own labels.
    pub leaf_txgs: BTreeMap<Guid, Txg>,
    /// The newest txg any label's config was written for, chosen or not (an interrupted
    /// config change can leave one newer than every uberblock): the txgs an import commits
    /// go past it, so its labels never tie with the ones the import writes.
    pub config_txg_max: Txg,
}

impl Discovered {
    /// Pool name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Leaves in the config that were not found, with their last known paths.
    #[must_use]
    pub fn missing(&self) -> Vec<&VdevTree> {
        self.config
            .vdev_tree
            .leaves()
            .into_iter()
            .filter(|l| !self.found.contains_key(&l.guid))
            .collect()
    }

    /// The newest uberblock (what a plain import would use).
    #[must_use]
    pub fn newest_uberblock(&self, max_txg: Option<Txg>) -> Option<Uberblock> {
        labels::best_uberblock(&self.uberblocks, self.config.pool_guid, max_txg)
    }

    /// Distinct uberblocks, newest first (for `import --list-txgs`).
    #[must_use]
    pub fn uberblock_history(&self) -> Vec<Uberblock> {
        let mut by_txg: BTreeMap<Txg, Uberblock> = BTreeMap::new();
        for ub in self
            .uberblocks
            .iter()
            .filter(|u| u.pool_guid == self.config.pool_guid)
        {
            by_txg.insert(ub.txg, *ub);
        }
        by_txg.into_values().rev().collect()
    }
}

/// Scans `dirs` for devices with tarn labels and groups them into pools. A pool's config is
/// the newest one whose txg has an uberblock on some device (a config written for a txg
/// that never committed describes a tree the committed state does not have: the even
/// labels of an interrupted config change, or the labels of devices an interrupted
/// `pool add` wrote first); only when no config qualifies is the newest one taken.
pub fn discover(provider: &dyn DeviceProvider, dirs: &[String]) -> Vec<Discovered> {
    let mut pools: BTreeMap<Guid, Discovered> = BTreeMap::new();
    let mut configs: BTreeMap<Guid, Vec<PoolConfig>> = BTreeMap::new();
    let mut spares: Vec<(Guid, Guid, String)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for dir in dirs {
        let Ok(paths) = provider.list(dir) else {
            continue;
        };
        for path in paths {
            if !seen.insert(path.clone()) {
                continue;
            }
            let Ok(device) = provider.open(&path, true) else {
                continue;
            };
            let scan = read_labels(device.as_ref());
            let Some(config) = scan.config else { continue };
            if matches!(config.state, PoolState::Spare | PoolState::L2cache) {
                // A spare's or cache device's label names its pool but carries no uberblocks
                // of its own.
                spares.push((config.pool_guid, config.this_guid, path.clone()));
                continue;
            }
            let entry = pools.entry(config.pool_guid).or_insert_with(|| Discovered {
                config: config.clone(),
                found: BTreeMap::new(),
                areas: BTreeMap::new(),
                uberblocks: Vec::new(),
                leaf_txgs: BTreeMap::new(),
                config_txg_max: Txg(0),
            });
            entry.config_txg_max = entry.config_txg_max.max(config.txg);
            configs
                .entry(config.pool_guid)
                .or_default()
                .push(config.clone());
            entry.found.insert(config.this_guid, path.clone());
            let area = tarn_format::label::data_area(device.size_bytes())
                .map_or(0, |(start, end)| end - start);
            entry.areas.insert(config.this_guid, area);
            let own = scan
                .uberblocks
                .iter()
                .filter(|u| u.pool_guid == config.pool_guid);
            if let Some(newest) = own.map(|u| u.txg).max() {
                entry.leaf_txgs.insert(config.this_guid, newest);
            }
            entry.uberblocks.extend(scan.uberblocks);
        }
    }
    for (pool, guid, path) in spares {
        if let Some(entry) = pools.get_mut(&pool) {
            entry.found.insert(guid, path);
        }
    }
    for (guid, entry) in &mut pools {
        let candidates = configs.remove(guid).unwrap_or_default();
        if let Some(config) = committed_config(entry, &candidates) {
            entry.config = config;
        }
    }
    pools.into_values().collect()
}

/// The newest of `candidates` whose txg has an uberblock among `found`'s (the newest of all
/// when none has): see [`discover`].
fn committed_config(found: &Discovered, candidates: &[PoolConfig]) -> Option<PoolConfig> {
    let guid = found.config.pool_guid;
    let committed = found
        .uberblocks
        .iter()
        .filter(|u| u.pool_guid == guid)
        .map(|u| u.txg)
        .max();
    let newest = |list: &mut dyn Iterator<Item = &PoolConfig>| list.max_by_key(|c| c.txg).cloned();
    newest(
        &mut candidates
            .iter()
            .filter(|c| committed.is_some_and(|t| c.txg <= t)),
    )
    .or_else(|| newest(&mut candidates.iter()))
}

/// Options of an import.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Import the newest txg at most this (`-T`).
    pub max_txg: Option<Txg>,
    /// Walk back to older txgs if the newest cannot be opened (`-F`).
    pub rewind: bool,
    /// Import even if another host seems to use the pool (`-f`).
    pub force: bool,
    /// Open read-only: nothing is ever written.
    pub readonly: bool,
    /// Import under another name.
    pub new_name: Option<String>,
}

/// Reads blocks outside syncing context (writes there are a bug). Made per engine call
/// (`Pool::reader`), so it lives for one request.
#[derive(Debug)]
pub struct PoolReader<'a> {
    pipeline: &'a Pipeline,
    txg: Txg,
    /// `Pipeline::reads_in_parallel`, asked once per reader: the object layer asks before
    /// every read it makes (whether to read ahead), and the answer walks every leaf. A
    /// leaf that changes state during one request changes only whether that request
    /// reads ahead, never what it reads.
    parallel: std::sync::OnceLock<bool>,
}

impl BlockStore for PoolReader<'_> {
    fn txg(&self) -> Txg {
        self.txg
    }

    fn write_block(&mut self, _data: &[u8], _props: &WriteProps) -> Result<BlockPtr, ZioError> {
        Err(ZioError::WriteFailed(
            "blocks are written only in syncing context".into(),
        ))
    }

    fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        read_checked(self.pipeline, bp, self.txg, true)
    }

    fn read_block_physical(&self, bp: &BlockPtr) -> Option<Result<Vec<u8>, ZioError>> {
        if bp.birth > self.txg {
            // The same temporal-incursion error as a logical read.
            return Some(read_checked(self.pipeline, bp, self.txg, false));
        }
        Some(self.pipeline.read_physical_l2(bp, false))
    }

    fn read_block_l2(&self, bp: &BlockPtr, feed_l2: bool) -> Result<Vec<u8>, ZioError> {
        read_checked(self.pipeline, bp, self.txg, feed_l2)
    }

    fn read_blocks_physical(&self, bps: &[BlockPtr]) -> Vec<Option<Result<Vec<u8>, ZioError>>> {
        if bps.iter().any(|bp| bp.birth > self.txg) {
            // The temporal-incursion error per block, from the one-block path.
            return bps.iter().map(|bp| self.read_block_physical(bp)).collect();
        }
        let results = self.pipeline.read_physicals(bps, false);
        results.into_iter().map(Some).collect()
    }

    fn read_blocks(&self, bps: &[BlockPtr]) -> Vec<Result<Vec<u8>, ZioError>> {
        self.read_blocks_l2(bps, true)
    }

    fn read_blocks_l2(&self, bps: &[BlockPtr], feed_l2: bool) -> Vec<Result<Vec<u8>, ZioError>> {
        if bps.iter().any(|bp| bp.birth > self.txg) {
            // The temporal-incursion error per block, from the one-block path.
            return bps
                .iter()
                .map(|bp| self.read_block_l2(bp, feed_l2))
                .collect();
        }
        self.pipeline.read_blocks_l2(bps, feed_l2)
    }

    fn reads_in_parallel(&self) -> bool {
        *self
            .parallel
            .get_or_init(|| self.pipeline.reads_in_parallel())
    }

    fn free_block(&mut self, bp: &BlockPtr) {
        panic!("free of {bp:?} outside syncing context");
    }
}

fn read_checked(
    pipeline: &Pipeline,
    bp: &BlockPtr,
    txg: Txg,
    feed_l2: bool,
) -> Result<Vec<u8>, ZioError> {
    // A block born after the txg being read from is corruption (ztest's "temporal
    // incursion"): it comes from disk, so it is an error, not an assertion.
    if bp.birth > txg {
        return Err(ZioError::Unrecoverable {
            dva: bp
                .copies()
                .next()
                .map_or_else(|| "-".into(), tarn_zio::dva_name),
            birth: bp.birth,
            why: format!("block born in txg {} is newer than txg {txg}", bp.birth),
            copies: Box::default(),
        });
    }
    pipeline.read_block_l2(bp, feed_l2)
}

/// Reads without the pool lock ([`Pool::detached_reader`]).
#[derive(Debug)]
pub struct DetachedReader {
    pipeline: Pipeline,
    _pin: TxgPin,
}

impl DetachedReader {
    /// [`Pipeline::read_blocks_l2`] of `bps`: verified, decompressed blocks in order, several
    /// in flight on the reader threads.
    #[must_use]
    pub fn read_blocks(&self, bps: &[BlockPtr], feed_l2: bool) -> Vec<Result<Vec<u8>, ZioError>> {
        self.pipeline.read_blocks_l2(bps, feed_l2)
    }

    /// [`Pipeline::read_physicals`] of `bps` (`send -c`): their bytes as stored, verified,
    /// several in flight, the cache devices not fed (as a [`PoolReader`]'s physical reads).
    #[must_use]
    pub fn read_physicals(&self, bps: &[BlockPtr]) -> Vec<Result<Vec<u8>, ZioError>> {
        self.pipeline.read_physicals(bps, false)
    }

    /// [`Pipeline::read_blocks_each`] of `bps`: each block's result handed to `each` as soon
    /// as it is finished, in order.
    pub fn read_blocks_each(
        &self,
        bps: &[BlockPtr],
        feed_l2: bool,
        each: &mut dyn FnMut(usize, Result<Vec<u8>, ZioError>),
    ) {
        self.pipeline.read_blocks_each(bps, feed_l2, each);
    }
}

/// Writes intent-log blocks to space the caller allocated, and flushes the top-level vdevs
/// they went to, without the pool lock ([`Pool::log_writer`]). It holds the vdevs as they
/// were when it was made; it allocates and frees nothing, so the caller keeps the blocks
/// it writes from being released meanwhile (the engine's commit lane waits for log writes
/// in flight before a txg that frees them commits).
#[derive(Debug)]
pub struct LogWriter {
    pipeline: Pipeline,
    tops: Vec<Arc<TopVdev>>,
}

impl LogWriter {
    /// [`Pipeline::write_raw`] of one log block.
    pub fn write_raw(&self, dva: &tarn_format::Dva, bytes: &[u8]) -> Result<(), String> {
        self.pipeline
            .write_raw(dva, bytes)
            .map_err(|e| e.to_string())
    }

    /// [`Pool::flush_vdevs`]: the blocks written to `vdevs` are durable once this returns.
    pub fn flush_vdevs(&self, vdevs: &[tarn_base::VdevId]) -> Result<(), String> {
        flush_tops(&self.tops, vdevs)
    }
}

/// Flushes every leaf of the top-level vdevs `vdevs` of `tops`.
fn flush_tops(tops: &[Arc<TopVdev>], vdevs: &[tarn_base::VdevId]) -> Result<(), String> {
    for id in vdevs {
        let top = tops
            .get(id.0 as usize)
            .ok_or_else(|| format!("no top-level vdev {}", id.0))?;
        top.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Writes blocks ahead of their txg, in open context (ZFS's `dmu_sync` for
/// `logbias=throughput`): each block is born in the open txg, allocated through
/// `SpaceManager::open_allocator` and written (not flushed: the caller flushes the vdevs of
/// the block pointers it got) before the txg that will adopt it syncs. Made per commit
/// (`Pool::open_writer`); it frees nothing.
#[derive(Debug)]
pub struct OpenWriter<'a> {
    pipeline: &'a Pipeline,
    space: &'a mut SpaceManager,
    txg: Txg,
}

impl BlockStore for OpenWriter<'_> {
    fn txg(&self) -> Txg {
        self.txg
    }

    fn write_block(&mut self, data: &[u8], props: &WriteProps) -> Result<BlockPtr, ZioError> {
        let mut allocator = self.space.open_allocator();
        self.pipeline
            .write_block(&mut allocator, self.txg, data, props)
    }

    fn write_block_shared(
        &mut self,
        data: &Arc<Vec<u8>>,
        props: &WriteProps,
    ) -> Result<BlockPtr, ZioError> {
        let mut allocator = self.space.open_allocator();
        self.pipeline
            .write_block_shared(&mut allocator, self.txg, data, props)
    }

    fn write_blocks(&mut self, blocks: &[(&[u8], &WriteProps)]) -> Vec<Result<BlockPtr, ZioError>> {
        let mut allocator = self.space.open_allocator();
        self.pipeline.write_blocks(&mut allocator, self.txg, blocks)
    }

    fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        read_checked(self.pipeline, bp, self.txg, true)
    }

    fn free_block(&mut self, bp: &BlockPtr) {
        panic!("free of {bp:?} in open context");
    }
}

/// The DVAs of one block [`Pool::allocate_ahead`] allocated, or why it could not.
pub type AllocatedAhead = Result<Vec<tarn_format::Dva>, ZioError>;

/// Syncing context: the only way to allocate, write and free blocks.
#[derive(Debug)]
pub struct SyncCtx<'a> {
    pipeline: &'a Pipeline,
    space: &'a mut SpaceManager,
    txg: Txg,
}

impl BlockStore for SyncCtx<'_> {
    fn txg(&self) -> Txg {
        self.txg
    }

    fn write_block(&mut self, data: &[u8], props: &WriteProps) -> Result<BlockPtr, ZioError> {
        self.pipeline.write_block(self.space, self.txg, data, props)
    }

    fn write_block_shared(
        &mut self,
        data: &Arc<Vec<u8>>,
        props: &WriteProps,
    ) -> Result<BlockPtr, ZioError> {
        self.pipeline
            .write_block_shared(self.space, self.txg, data, props)
    }

    fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        read_checked(self.pipeline, bp, self.txg, true)
    }

    fn read_block_l2(&self, bp: &BlockPtr, feed_l2: bool) -> Result<Vec<u8>, ZioError> {
        read_checked(self.pipeline, bp, self.txg, feed_l2)
    }

    fn free_block(&mut self, bp: &BlockPtr) {
        assert!(
            bp.birth <= self.txg,
            "free of a block born after the syncing txg"
        );
        // The space layer drops a clone reference instead when the block has one
        // (tarn-space `brt`); a last reference is freed as of the txg that wrote the bytes.
        for dva in bp.copies() {
            tarn_zio::Allocator::free(self.space, dva, bp.physical_birth());
        }
    }

    fn keeps_freed(&self, bp: &BlockPtr) -> bool {
        bp.copies().any(|dva| self.space.brt().refs(dva) > 0)
    }

    fn clone_block(&mut self, bp: &BlockPtr) -> Result<BlockPtr, ZioError> {
        assert!(!bp.is_hole(), "a clone of a hole");
        assert!(
            bp.birth < self.txg,
            "a clone of a block born in the syncing txg {}",
            self.txg
        );
        for (index, dva) in bp.copies().enumerate() {
            if let Err(error) = self.space.clone_ref(dva) {
                // Damage, not a bug: give back the references this clone took.
                for taken in bp.copies().take(index) {
                    tarn_zio::Allocator::free(self.space, taken, bp.physical_birth());
                }
                return Err(ZioError::WriteFailed(format!("clone: {error}")));
            }
        }
        Ok(BlockPtr {
            birth: self.txg,
            birth_physical: bp.physical_birth(),
            ..*bp
        })
    }
}

impl SyncCtx<'_> {
    /// Frees an intent-log block in this txg, never reusable before this txg commits (a
    /// committed header's chain may name it; `SpaceManager::free_log_block`).
    pub fn free_log_block(&mut self, dva: &tarn_format::Dva) {
        self.space.free_log_block(dva);
    }
}

/// An imported (or just created) pool.
#[derive(Debug)]
pub struct Pool {
    name: String,
    guid: Guid,
    root_guid: Guid,
    spares_guid: Guid,
    /// GUID of the cache-device group node (zero until the pool has cache devices).
    l2cache_guid: Guid,
    ashift: u8,
    tops: Vec<Arc<TopVdev>>,
    spares: Vec<Arc<Leaf>>,
    pipeline: Pipeline,
    space: SpaceManager,
    /// Txgs pinned by readers off the pool lock ([`Pool::detached_reader`]).
    pins: Arc<TxgPins>,
    last: Option<Uberblock>,
    /// The txg an import opened (None for a pool created here).
    imported_txg: Option<Txg>,
    txg: Txg,
    config_dirty: bool,
    suspended: Option<String>,
    /// What `Pool::resume` must do before a suspended pool writes again (module `resume`).
    retry: resume::Retry,
    readonly: bool,
    identity: HostIdentity,
    clock: Arc<dyn Clock>,
    /// Multihost heartbeat interval (0: multihost off), carried by every uberblock.
    multihost_interval_ms: u64,
    /// Ids of the top-level vdevs that are log devices.
    log_tops: std::collections::BTreeSet<u32>,
    /// Ids of the top-level vdevs that are special allocation-class devices.
    special_tops: std::collections::BTreeSet<u32>,
    /// The txg between its write phase and the end of its commit (I6), with every block its
    /// write phase wrote (kept for a retry until the uberblock commits, module `resume`).
    syncing: Option<Box<resume::Unfinished>>,
    /// The config changed while a txg was syncing (its labels, taken before, miss it).
    config_changed_since_write: bool,
    /// What the import's rebuild of each cache device's persistent index found.
    l2_rebuilds: Vec<tarn_vdev::L2Rebuild>,
    /// Why the space log of the imported txg could not be read; until
    /// [`Pool::rebuild_space`] the allocation state is empty and no txg may start.
    space_lost: Option<String>,
    /// The labels list `org.tarn:block_cloning` (the pool has cloned a block).
    block_cloning: bool,
}

/// Checks what the labels alone can tell: feature flags and whether another host owns it.
/// With multihost on, the activity check ([`multihost::activity_check`]) replaces the host id
/// test: a live owner is refused even with `-f`, a dead one needs no `-f`.
fn check_importable(
    found: &Discovered,
    identity: &HostIdentity,
    options: &ImportOptions,
) -> Result<(), PoolError> {
    let config = &found.config;
    let supported = |f: &&String| FEATURES_SUPPORTED.contains(&f.as_str());
    if let Some(feature) = config.features_for_read.iter().find(|f| !supported(f)) {
        return Err(PoolError::UnsupportedFeature(feature.clone()));
    }
    let watched = multihost::activity_check_interval(found, identity).is_some();
    if config.state == PoolState::Active
        && config.hostid != identity.hostid
        && !options.force
        && !watched
    {
        return Err(PoolError::ActiveElsewhere {
            hostname: config.hostname.clone(),
            hostid: config.hostid,
        });
    }
    Ok(())
}

/// Opens every device of `spec` for writing and checks it can join a pool: large enough, and
/// (without `-f`) not part of another pool. A device labelled for pool `own` (GUID and
/// current tree) but not in its tree is the leftover of an interrupted add of that pool and
/// is taken without `-f`. Writes nothing.
fn open_new_devices(
    spec: &CreateSpec,
    provider: &dyn DeviceProvider,
    own: Option<(Guid, &VdevTree)>,
) -> Result<BTreeMap<String, Arc<dyn Device>>, PoolError> {
    let mut devices = BTreeMap::new();
    for path in spec.all_devices() {
        let device = open_device(provider, path, false)?;
        let size = device.size_bytes();
        if size < tarn_base::limits::DEVICE_SIZE_MIN {
            return Err(PoolError::DeviceTooSmall {
                path: path.clone(),
                size,
                min: tarn_base::limits::DEVICE_SIZE_MIN,
            });
        }
        if !spec.force
            && let Some(config) = read_labels(device.as_ref()).config
            && config.state != PoolState::Destroyed
            && !own.is_some_and(|(guid, tree)| {
                config.pool_guid == guid && tree.find(config.this_guid).is_none()
            })
        {
            return Err(PoolError::DeviceInUse {
                path: path.clone(),
                pool: config.name,
                state: config.state.name().to_string(),
            });
        }
        devices.insert(path.clone(), device);
    }
    Ok(devices)
}

fn open_device(
    provider: &dyn DeviceProvider,
    path: &str,
    read_only: bool,
) -> Result<Arc<dyn Device>, PoolError> {
    provider
        .open(path, read_only)
        .map_err(|source| PoolError::DeviceOpen {
            path: path.to_string(),
            source,
        })
}

impl Pool {
    /// Creates a pool: checks everything first (nothing is written if any check fails), then
    /// writes every label. The pool has no committed txg until the first [`Pool::sync`].
    pub fn create(
        spec: &CreateSpec,
        provider: &dyn DeviceProvider,
        identity: HostIdentity,
        clock: Arc<dyn Clock>,
        rng: &mut SeededRng,
    ) -> Result<Pool, PoolError> {
        spec.validate()?;
        let devices = open_new_devices(spec, provider, None)?;
        let tree = build_tree(spec, &devices, rng);
        let guid = rng.guid();
        let by_guid = tree
            .leaves()
            .into_iter()
            .filter_map(|leaf| devices.get(&leaf.path).map(|d| (leaf.guid, Arc::clone(d))))
            .collect();
        let mut pool = Pool::assemble(
            spec.name.clone(),
            guid,
            &tree,
            &by_guid,
            identity,
            clock,
            false,
        )?;
        pool.config_dirty = true;
        pool.write_labels(PoolState::Active, Txg(1), LabelFlush::Strict)?;
        pool.config_dirty = false;
        Ok(pool)
    }

    fn assemble(
        name: String,
        guid: Guid,
        tree: &VdevTree,
        devices: &std::collections::HashMap<Guid, Arc<dyn Device>>,
        identity: HostIdentity,
        clock: Arc<dyn Clock>,
        readonly: bool,
    ) -> Result<Pool, PoolError> {
        let (tops, (spares_guid, spares), (l2cache_guid, caches)) = split_tree(tree, devices)?;
        let ashift = widest_ashift(&tops);
        for leaf in tops
            .iter()
            .flat_map(|t| t.leaves())
            .chain(spares.iter().cloned())
            .chain(caches.iter().cloned())
        {
            leaf.set_clock(Arc::clone(&clock));
        }
        let l2 = Arc::new(tarn_vdev::L2Cache::new(guid, caches, ashift));
        let pipeline = Pipeline::new(tops.clone()).with_l2(l2);
        let space = SpaceManager::new(space_geometry(&tops, tree));
        let log_tops = class_top_ids(tree, |c| c.log);
        let special_tops = class_top_ids(tree, |c| c.special);
        let mut pool = Pool {
            name,
            guid,
            root_guid: tree.guid,
            spares_guid,
            l2cache_guid,
            ashift,
            tops,
            spares,
            pipeline,
            space,
            pins: Arc::default(),
            last: None,
            imported_txg: None,
            txg: Txg(0),
            config_dirty: false,
            suspended: None,
            retry: resume::Retry::Nothing,
            readonly,
            identity,
            clock,
            multihost_interval_ms: 0,
            log_tops,
            special_tops,
            syncing: None,
            config_changed_since_write: false,
            l2_rebuilds: Vec::new(),
            space_lost: None,
            block_cloning: false,
        };
        pool.apply_classes();
        Ok(pool)
    }

    /// Tells the space manager which top-level vdevs are log and special devices.
    fn apply_classes(&mut self) {
        for id in &self.log_tops {
            self.space.set_log_class(*id as usize);
        }
        for id in &self.special_tops {
            self.space
                .set_class(*id as usize, tarn_space::VdevClass::Special);
        }
    }

    /// Whether top-level vdev `index` is a log device.
    #[must_use]
    pub fn is_log_vdev(&self, index: usize) -> bool {
        u32::try_from(index).is_ok_and(|id| self.log_tops.contains(&id))
    }

    /// Whether top-level vdev `index` is a special allocation-class device.
    #[must_use]
    pub fn is_special_vdev(&self, index: usize) -> bool {
        u32::try_from(index).is_ok_and(|id| self.special_tops.contains(&id))
    }

    /// Imports a discovered pool. `verify` opens the upper layers' root at a candidate
    /// uberblock; with `rewind`, older uberblocks are tried when it fails.
    pub fn import(
        found: &Discovered,
        provider: &dyn DeviceProvider,
        options: &ImportOptions,
        identity: HostIdentity,
        clock: Arc<dyn Clock>,
        verify: &dyn Fn(&Pool) -> Result<(), String>,
    ) -> Result<Pool, PoolError> {
        let config = &found.config;
        check_importable(found, &identity, options)?;
        multihost::activity_check(found, provider, &identity, clock.as_ref())?;
        let mut devices = std::collections::HashMap::new();
        for (guid, path) in &found.found {
            devices.insert(*guid, open_device(provider, path, options.readonly)?);
        }
        let name = options
            .new_name
            .clone()
            .unwrap_or_else(|| config.name.clone());
        let mut pool = Pool::assemble(
            name,
            config.pool_guid,
            &config.vdev_tree,
            &devices,
            identity,
            clock,
            options.readonly,
        )?;
        pool.check_readable()?;
        // Nothing is fed to the cache devices before their persistent index is rebuilt: a
        // feed would start their rings afresh over it.
        pool.pipeline.l2().set_readonly(true);
        pool.open_newest(found, options, verify)?;
        pool.l2_rebuilds = pool.pipeline.l2().rebuild(pool.clock.as_ref());
        pool.pipeline.l2().set_readonly(options.readonly);
        let opened = pool.imported_txg.unwrap_or(Txg(0));
        for (leaf, _) in pool.leaf_devices() {
            if let Some(&txg) = found.leaf_txgs.get(&leaf.guid()) {
                leaf.set_synced_txg(txg.min(opened));
            }
        }
        Ok(pool)
    }

    /// Refuses a pool with a top-level vdev missing more leaves than it tolerates, naming
    /// the missing ones.
    fn check_readable(&self) -> Result<(), PoolError> {
        let readable = |t: &&Arc<TopVdev>| {
            matches!(
                t.health(),
                tarn_vdev::Health::Online | tarn_vdev::Health::Degraded
            )
        };
        // A missing log device does not stop an import (the records on it are lost and
        // reported by the replay); ZFS asks for `-m` here, tarn imports and says so.
        let mut data = self
            .tops
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.is_log_vdev(*i));
        match data.find(|(_, t)| !readable(t)) {
            None => Ok(()),
            Some((index, top)) => {
                let leaves = top.leaves();
                let missing = leaves.iter().filter(|l| l.device().is_none());
                let missing = missing.map(|l| l.path()).collect();
                // The special class holds metadata of every dataset: without it nothing can
                // be opened, whatever the data vdevs hold (ZFS: the pool is lost).
                if self.is_special_vdev(index) {
                    return Err(PoolError::MissingSpecial { missing });
                }
                Err(PoolError::MissingDevices { missing })
            }
        }
    }

    /// Opens the newest usable uberblock (at most `-T`; with `-F`, walking back until one
    /// opens and `verify` accepts it).
    fn open_newest(
        &mut self,
        found: &Discovered,
        options: &ImportOptions,
        verify: &dyn Fn(&Pool) -> Result<(), String>,
    ) -> Result<(), PoolError> {
        let mut history = found.uberblock_history();
        history.retain(|ub| options.max_txg.is_none_or(|max| ub.txg <= max));
        let newest_seen = found
            .uberblocks
            .iter()
            .map(|u| u.txg)
            .max()
            .unwrap_or(Txg(0));
        let tries = if options.rewind { history.len() } else { 1 };
        let mut last_error = String::from("no uberblock found on any device");
        for ub in history.into_iter().take(tries) {
            let tree = &found.config.vdev_tree;
            match self
                .open_at(&ub, tree)
                .map_err(|e| e.to_string())
                .and_then(|()| verify(self))
            {
                Ok(()) => {
                    // Txgs keep increasing past everything ever written, even after a
                    // rewind, so a stale newer uberblock can never win a later import.
                    self.txg = newest_seen.max(ub.txg).max(found.config_txg_max);
                    self.imported_txg = Some(ub.txg);
                    self.config_dirty = true;
                    return Ok(());
                }
                Err(e) => last_error = format!("txg {}: {e}", ub.txg),
            }
        }
        Err(PoolError::NoUberblock(last_error))
    }

    fn open_at(&mut self, ub: &Uberblock, tree: &VdevTree) -> Result<(), PoolError> {
        // A space log that cannot be read does not stop the import: the allocation state
        // is rebuilt from the block tree (`Pool::rebuild_space`) before anything allocates.
        self.space = match SpaceManager::load(
            space_geometry(&self.tops, tree),
            &self.pipeline,
            &ub.space_log,
            ub.txg,
        ) {
            Ok(space) => {
                self.space_lost = None;
                space
            }
            Err(e) => {
                self.space_lost = Some(e.to_string());
                SpaceManager::new(space_geometry(&self.tops, tree))
            }
        };
        self.apply_classes();
        self.block_cloning = self.space.cloned();
        self.last = Some(*ub);
        self.txg = ub.txg;
        Ok(())
    }

    /// Pool name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Pool GUID.
    #[must_use]
    pub fn guid(&self) -> Guid {
        self.guid
    }

    /// The txg whose uberblock an import opened (`None` for a pool created by this process).
    /// With faulty devices it can be older than the newest one a listing saw.
    #[must_use]
    pub fn imported_txg(&self) -> Option<Txg> {
        self.imported_txg
    }

    /// The last committed uberblock (None before the first sync of a new pool).
    #[must_use]
    pub fn last_uberblock(&self) -> Option<&Uberblock> {
        self.last.as_ref()
    }

    /// The upper layers' root as of the last committed txg.
    #[must_use]
    pub fn root(&self) -> Option<BlockPtr> {
        self.last.map(|ub| ub.root)
    }

    /// The last committed txg.
    #[must_use]
    pub fn txg(&self) -> Txg {
        self.txg
    }

    /// Top-level vdevs.
    #[must_use]
    pub fn tops(&self) -> &[Arc<TopVdev>] {
        &self.tops
    }

    /// Hot spares.
    #[must_use]
    pub fn spares(&self) -> &[Arc<Leaf>] {
        &self.spares
    }

    /// What the import's rebuild of each cache device's persistent index found (empty for a
    /// pool created by this process).
    #[must_use]
    pub fn l2_rebuilds(&self) -> &[tarn_vdev::L2Rebuild] {
        &self.l2_rebuilds
    }

    /// Cache devices (L2ARC), in the order they were added.
    #[must_use]
    pub fn caches(&self) -> Vec<Arc<Leaf>> {
        self.pipeline.l2().leaves()
    }

    /// Forgets the hot spare `guid` (it became a permanent member of a vdev by detaching the
    /// leaf it stood in for). The caller marks the config dirty.
    pub fn remove_spare(&mut self, guid: Guid) {
        self.spares.retain(|spare| spare.guid() != guid);
    }

    /// Whether the hot spare `guid` stands in for a leaf somewhere in the tree.
    #[must_use]
    pub fn spare_in_use(&self, guid: Guid) -> bool {
        self.tops.iter().any(|top| top.leaf(guid).is_some())
    }

    /// `(size, allocated)` of the data vdevs (`SpaceManager::normal_space`): cheap enough
    /// for every write's admission.
    #[must_use]
    pub fn normal_space(&self) -> (u64, u64) {
        self.space.normal_space()
    }

    /// Bytes freed and not yet reusable (`SpaceManager::freeing_bytes`).
    #[must_use]
    pub fn freeing_bytes(&self) -> u64 {
        self.space.freeing_bytes()
    }

    /// Space usage per top-level vdev.
    #[must_use]
    pub fn usage(&self) -> Vec<VdevUsage> {
        self.space.usage()
    }

    /// `(size, allocated)` of every top-level vdev without the fragmentation of
    /// [`Pool::usage`] (no free-tree walk): for the write path.
    #[must_use]
    pub fn allocation(&self) -> Vec<(u64, u64)> {
        self.space.allocation()
    }

    /// Why the pool is suspended, if it is.
    #[must_use]
    pub fn suspended(&self) -> Option<&str> {
        self.suspended.as_deref()
    }

    /// True when imported read-only.
    #[must_use]
    pub fn readonly(&self) -> bool {
        self.readonly
    }

    /// The block pipeline (for scrub and checkers).
    #[must_use]
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The space manager (for checkers).
    #[must_use]
    pub fn space(&self) -> &SpaceManager {
        &self.space
    }

    /// Why the imported txg's space log could not be read, while its allocation state has
    /// not been rebuilt (`rebuild_space`).
    #[must_use]
    pub fn space_lost(&self) -> Option<&str> {
        self.space_lost.as_deref()
    }

    /// Rebuilds the allocation state from `live`, every block the upper layers reach from the
    /// imported txg plus the intent-log blocks its headers name (module doc of tarn-space's
    /// `rebuild`); the next txg writes it as a new base of the space log. Until then no txg
    /// can start.
    pub fn rebuild_space(&mut self, live: &[tarn_format::Dva]) -> Result<(), PoolError> {
        let txg = self.last.map_or(Txg(0), |ub| ub.txg);
        self.space.rebuild(live, txg)?;
        self.apply_classes();
        self.space_lost = None;
        Ok(())
    }

    /// A writer of blocks born in the open txg ([`OpenWriter`]). No txg may be syncing: a
    /// block written ahead belongs to the open txg, whose sync adopts it.
    pub fn open_writer(&mut self) -> OpenWriter<'_> {
        assert!(
            self.syncing_txg().is_none(),
            "I3: blocks are written ahead only between txgs"
        );
        let txg = self.open_txg();
        OpenWriter {
            pipeline: &self.pipeline,
            space: &mut self.space,
            txg,
        }
    }

    /// Allocates `blocks`, in order, for blocks written ahead of the open txg without the
    /// pool lock (the engine's pre-write: `Pipeline::encode_shared` before, and
    /// `Pipeline::write_encoded` after, both without the lock), through the open-context
    /// allocator as [`OpenWriter`] does: the space goes to the open txg's delta, so a crash
    /// before that txg commits leaves it free. `None` while a txg is syncing or kept for
    /// `clear`, or the pool is suspended or read-only (nothing is allocated). The caller
    /// frees every block its txg's sync does not adopt, with `SyncCtx::free_log_block`
    /// (never reusable before that txg commits, by when its device writes are done).
    pub fn allocate_ahead(
        &mut self,
        blocks: &[(&tarn_zio::EncodedBlock, &WriteProps)],
    ) -> Option<(Txg, Vec<AllocatedAhead>)> {
        if self.syncing_txg().is_some()
            || self.txg_kept().is_some()
            || self.suspended().is_some()
            || self.readonly()
        {
            return None;
        }
        let txg = self.open_txg();
        let mut allocator = self.space.open_allocator();
        let placed = blocks
            .iter()
            .map(|(block, props)| self.pipeline.allocate_encoded(&mut allocator, block, props))
            .collect();
        Some((txg, placed))
    }

    /// The space manager, to tune it (tests force frequent condensing with it).
    pub fn space_mut(&mut self) -> &mut SpaceManager {
        &mut self.space
    }

    /// Holds (or releases) deferred frees while a scrub runs (`SpaceManager::set_hold_deferred`).
    pub fn set_hold_deferred(&mut self, hold: bool) {
        self.space.set_hold_deferred(hold);
    }

    /// A reader for blocks of the last committed txg, of a syncing one and of the open txg's
    /// clean data. Its txg is the open one ([`Pool::open_txg`]), which open-context work
    /// (an inode's generation) stamps.
    #[must_use]
    pub fn reader(&self) -> PoolReader<'_> {
        PoolReader {
            pipeline: &self.pipeline,
            txg: self.open_txg(),
            parallel: std::sync::OnceLock::new(),
        }
    }

    /// A reader that works without the pool lock, for block pointers found in the open txg's
    /// state while the lock was held: it shares the vdevs and cache devices, and pins the
    /// open txg so that none of those blocks' space is reused while it lives (tarn-space
    /// `pins`). Its reads heal and count errors as any read does: with the pin, a copy that
    /// fails its checksum is damage, not a newer block.
    #[must_use]
    pub fn detached_reader(&self) -> DetachedReader {
        DetachedReader {
            pipeline: self.pipeline.clone(),
            _pin: self.pins.pin(self.open_txg()),
        }
    }

    /// The vdev tree as it is now (for labels and status).
    #[must_use]
    pub fn vdev_tree(&self) -> VdevTree {
        let mut children: Vec<VdevTree> = self.tops.iter().map(|t| t.to_tree()).collect();
        for child in &mut children {
            child.log = self.log_tops.contains(&child.id);
            child.special = self.special_tops.contains(&child.id);
        }
        if !self.spares.is_empty() {
            let spares = self
                .spares
                .iter()
                .enumerate()
                .map(|(i, s)| VdevTree {
                    asize: s.asize(),
                    ..new_leaf(&s.path(), i as u32, self.ashift, 0, s.guid())
                })
                .collect();
            let id = children.len() as u32;
            let guid = self.spares_guid;
            children.push(interior_node(
                VdevKind::Spares,
                guid,
                id,
                self.ashift,
                0,
                spares,
            ));
        }
        let caches = self.caches();
        if !caches.is_empty() {
            let leaves = caches
                .iter()
                .enumerate()
                .map(|(i, c)| VdevTree {
                    asize: c.asize(),
                    ..new_leaf(&c.path(), i as u32, self.ashift, 0, c.guid())
                })
                .collect();
            let id = children.len() as u32;
            let node = interior_node(
                VdevKind::L2cache,
                self.l2cache_guid,
                id,
                self.ashift,
                0,
                leaves,
            );
            children.push(node);
        }
        interior_node(VdevKind::Root, self.root_guid, 0, self.ashift, 0, children)
    }

    /// Whether a top-level vdev is dRAID (the pool then lists `org.tarn:draid`).
    fn has_draid(&self) -> bool {
        self.tops
            .iter()
            .any(|top| matches!(top.layout(), tarn_vdev::Layout::Draid(_)))
    }

    /// Marks the config changed: the next sync rewrites every label.
    pub fn set_config_dirty(&mut self) {
        self.config_dirty = true;
        self.config_changed_since_write |= self.syncing.is_some();
    }

    fn config_for(
        &self,
        state: PoolState,
        txg: Txg,
        leaf: Guid,
        top: Guid,
        tree: &VdevTree,
    ) -> PoolConfig {
        PoolConfig {
            version: FORMAT_VERSION,
            name: self.name.clone(),
            pool_guid: self.guid,
            txg,
            state,
            hostid: self.identity.hostid,
            hostname: self.identity.hostname.clone(),
            this_guid: leaf,
            top_guid: top,
            vdev_tree: tree.clone(),
            features_for_read: FEATURES_SUPPORTED
                .iter()
                .filter(|f| **f != FEATURE_ALLOCATION_CLASSES || !self.special_tops.is_empty())
                .filter(|f| **f != FEATURE_DRAID || self.has_draid())
                .filter(|f| **f != FEATURE_BLOCK_CLONING || self.block_cloning)
                .map(|f| (*f).to_string())
                .collect(),
            features_for_write: Vec::new(),
        }
    }

    /// Every usable leaf with the GUID of its top-level vdev (spares: their own GUID).
    fn leaf_devices(&self) -> Vec<(Arc<Leaf>, Guid)> {
        let mut out = Vec::new();
        for top in &self.tops {
            // A distributed spare has no label area of its own (its device is spare space).
            for leaf in top
                .leaves()
                .into_iter()
                .filter(|l| !l.is_distributed_spare())
            {
                out.push((leaf, top.guid()));
            }
        }
        for spare in &self.spares {
            // A spare in use carries the labels of the vdev it stands in (above).
            if !out.iter().any(|(leaf, _)| Arc::ptr_eq(leaf, spare)) {
                out.push((Arc::clone(spare), spare.guid()));
            }
        }
        out
    }

    /// The config every usable leaf gets in its labels for `state` at `txg` (a spare's says
    /// it is a spare, a cache device's that it is one).
    fn label_configs(&self, state: PoolState, txg: Txg) -> Vec<(Arc<Leaf>, PoolConfig)> {
        let tree = self.vdev_tree();
        let mut out = Vec::new();
        for (leaf, top) in self.leaf_devices() {
            if leaf.usable_device().is_none() {
                continue;
            }
            let in_top = self.tops.iter().any(|t| t.leaf(leaf.guid()).is_some());
            let is_spare = !in_top && self.spares.iter().any(|s| Arc::ptr_eq(s, &leaf));
            let leaf_state = if is_spare { PoolState::Spare } else { state };
            let config = self.config_for(leaf_state, txg, leaf.guid(), top, &tree);
            out.push((leaf, config));
        }
        // Cache devices carry a label naming the pool so that import finds them by GUID;
        // they do not count as devices that took the update (the pool needs none of them).
        for cache in self.caches() {
            if cache.usable_device().is_some() {
                let guid = cache.guid();
                let config = self.config_for(PoolState::L2cache, txg, guid, guid, &tree);
                out.push((cache, config));
            }
        }
        out
    }

    /// Flushes every leaf. Fails when a top-level vdev lost more leaves than its redundancy
    /// tolerates: then some acknowledged block may not be durable, and the txg must not
    /// commit. Spares hold only labels; their flush failures do not fail the txg.
    fn flush_all(&self) -> Result<(), String> {
        for spare in &self.spares {
            if let Some(device) = spare.usable_device() {
                let _ = device.flush();
            }
        }
        for (index, top) in self.tops.iter().enumerate() {
            match top.flush() {
                Ok(()) => {}
                // A log device holds nothing a txg needs: when it is gone, log blocks go to
                // the normal class (it is not writable) and its failure fails nothing.
                Err(_) if self.is_log_vdev(index) && !self.space.writable(index) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }

    /// Flushes every leaf of the top-level vdevs `vdevs`: the intent log's commit point (the
    /// log blocks written there are durable once this returns; other vdevs hold nothing the
    /// log needs, as ZFS flushes only the vdevs a log write touched). Fails when such a vdev
    /// lost more leaves than its redundancy tolerates; the pool is not suspended for that
    /// (the caller falls back to a txg sync, which decides).
    pub fn flush_vdevs(&self, vdevs: &[tarn_base::VdevId]) -> Result<(), String> {
        if let Some(why) = &self.suspended {
            return Err(why.clone());
        }
        flush_tops(&self.tops, vdevs)
    }

    /// A writer of intent-log blocks that works without `&Pool` ([`LogWriter`]): the engine
    /// writes a commit's blocks and flushes their vdevs with it after releasing the pool
    /// lock. Refuses to be made while the pool is suspended (the reason is the error).
    pub fn log_writer(&self) -> Result<LogWriter, String> {
        if let Some(why) = &self.suspended {
            return Err(why.clone());
        }
        Ok(LogWriter {
            pipeline: self.pipeline.clone(),
            tops: self.tops.clone(),
        })
    }

    /// Writes the whole config (all four label copies) with `state`: the even halves, a
    /// flush, the odd halves, a flush. `Strict`: every top-level vdev's flush must hold
    /// (create, export). `Reachable`: each leaf is flushed on its own and the leaves that
    /// took the label are enough (`destroy -f` of a pool beyond its redundancy). Fails when
    /// no leaf took it, or a strict flush failed.
    fn write_labels(&self, state: PoolState, txg: Txg, flush: LabelFlush) -> Result<(), PoolError> {
        // Each half from the leaves' state after the flush before it, as a commit does.
        let write_half = |half| {
            let configs = self.label_configs(state, txg);
            let written = write_label_configs(&configs, half);
            let flushed = match flush {
                LabelFlush::Strict => self.flush_all().is_ok(),
                LabelFlush::Reachable => {
                    for (leaf, _) in &configs {
                        if let Some(device) = leaf.usable_device() {
                            let _ = device.flush();
                        }
                    }
                    true
                }
            };
            (written, flushed)
        };
        let (even, _) = write_half(labels::LabelHalf::Even);
        let (odd, flushed) = write_half(labels::LabelHalf::Odd);
        if !flushed || even + odd == 0 {
            return Err(PoolError::Suspended(
                "no device accepted the label update".into(),
            ));
        }
        Ok(())
    }

    fn suspend(&mut self, why: String) -> PoolError {
        self.suspended = Some(why.clone());
        PoolError::Suspended(why)
    }

    /// Syncs one txg: `upper` writes the dirty state of the upper layers through the
    /// [`SyncCtx`] and returns their new root; then the space log, flushes and the uberblock
    /// make it durable (I1). Returns the committed txg. The three phases in one call:
    /// [`Pool::sync_write`], [`PendingCommit::commit`], [`Pool::sync_finish`].
    pub fn sync<F, E>(&mut self, upper: F) -> Result<Txg, PoolError>
    where
        F: FnOnce(&mut SyncCtx<'_>) -> Result<BlockPtr, E>,
        E: std::fmt::Display,
    {
        let pending = self.sync_write(upper)?;
        let outcome = pending.commit();
        self.sync_finish(outcome)
    }

    /// The write phase of a txg: `upper` writes the dirty state of the upper layers, then
    /// the space log of the txg. Returns what the commit phase needs; until
    /// [`Pool::sync_finish`] the txg is *syncing* ([`Pool::syncing_txg`]) and no other txg
    /// may start its write phase. A failure suspends the pool (nothing of the txg counts).
    pub fn sync_write<F, E>(&mut self, upper: F) -> Result<PendingCommit, PoolError>
    where
        F: FnOnce(&mut SyncCtx<'_>) -> Result<BlockPtr, E>,
        E: std::fmt::Display,
    {
        if self.readonly {
            return Err(PoolError::ReadOnly);
        }
        self.check_can_commit()?;
        assert!(
            self.syncing.is_none(),
            "I6: the write phase of a txg starts only after the previous commit finished"
        );
        let txg = self.txg.next();
        self.space.begin_txg(txg);
        self.pipeline.journal_begin();
        self.space.set_place_on_unwritable(true);
        // Plugged: the devices' I/O threads are woken per batch of writes, not per column
        // (tarn-device `plug`); the plug ends with the write phase, before its flushes.
        let plug = tarn_device::plug();
        let mut ctx = SyncCtx {
            pipeline: &self.pipeline,
            space: &mut self.space,
            txg,
        };
        let root = match upper(&mut ctx) {
            Ok(root) => root,
            Err(e) => return Err(self.abandon(format!("txg {txg} could not be written: {e}"))),
        };
        if !self.block_cloning && self.space.cloned() {
            // The first clone activates the feature: this txg's labels list it (FORMAT.md
            // section 9), before its uberblock names a space log with clone records.
            self.block_cloning = true;
            self.config_dirty = true;
        }
        let space_log = match self.space.sync(&self.pipeline) {
            Ok(head) => head,
            Err(e) => {
                return Err(self.abandon(format!("txg {txg} space log could not be written: {e}")));
            }
        };
        drop(plug);
        let unfinished = self.end_write(txg, root, space_log)?;
        let pending = self.pending_commit(txg, root, space_log);
        self.syncing = Some(unfinished);
        Ok(pending)
    }

    /// Everything the commit phase of `txg` touches, taken while the pool is still owned.
    fn pending_commit(&self, txg: Txg, root: BlockPtr, space_log: BlockPtr) -> PendingCommit {
        let uberblock = Uberblock {
            version: FORMAT_VERSION,
            txg,
            guid_sum: self.vdev_tree().guid_sum(),
            timestamp: self.clock.now_unix_secs(),
            pool_guid: self.guid,
            root,
            space_log,
            hostid: self.identity.hostid,
            mmp_sequence: 0,
            mmp_interval_ms: self.multihost_interval_ms,
        };
        if let Some(last) = &self.last {
            assert!(
                uberblock.txg > last.txg,
                "I2: uberblock txg {txg} after {}",
                last.txg
            );
        }
        let tops = self
            .tops
            .iter()
            .enumerate()
            .map(|(index, top)| {
                // A log device holds nothing a txg needs: when it is gone, log blocks go to
                // the normal class (it is not writable) and its failure fails nothing.
                let spare = self.is_log_vdev(index) && !self.space.writable(index);
                (Arc::clone(top), spare)
            })
            .collect();
        let labels = self
            .config_dirty
            .then(|| self.label_configs(PoolState::Active, txg));
        PendingCommit {
            uberblock,
            tops,
            spares: self.spares.clone(),
            leaves: self
                .leaf_devices()
                .into_iter()
                .map(|(leaf, _)| leaf)
                .collect(),
            labels,
            ashift: self.ashift,
        }
    }

    /// The end of a txg's commit phase, back with the pool: on success the txg counts as
    /// committed (frees of the txg start their deferral, the txg and uberblock advance, the
    /// blocks kept for a retry are let go); a failed commit suspends the pool (I5) keeping
    /// the txg whole for `clear` ([`Pool::resume`]), and nothing of the txg is committed.
    pub fn sync_finish(&mut self, outcome: Result<Uberblock, String>) -> Result<Txg, PoolError> {
        let unfinished = self
            .syncing
            .take()
            .expect("I6: a commit finishes only a txg whose write phase ran");
        let txg = unfinished.txg();
        let uberblock = match outcome {
            Ok(uberblock) => uberblock,
            Err(why) => return Err(self.commit_failed(why, unfinished)),
        };
        assert_eq!(
            uberblock.txg, txg,
            "I6: the commit finished is the txg written"
        );
        // The labels the write phase took are on disk now; a change made since is written
        // by the next txg.
        self.config_dirty = std::mem::take(&mut self.config_changed_since_write);
        self.space.txg_committed(self.pins.oldest());
        self.txg = txg;
        self.last = Some(uberblock);
        // After the commit, so that no txg waits for a cache device (l2cache I2).
        self.pipeline.l2().persist();
        Ok(txg)
    }

    /// The txg between its write phase and the end of its commit (at most one).
    #[must_use]
    pub fn syncing_txg(&self) -> Option<Txg> {
        self.syncing.as_ref().map(|unfinished| unfinished.txg())
    }

    /// The txg that changes made now belong to: after the syncing txg, or after the txg kept
    /// for `clear` ([`Pool::txg_in_flight`]), if there is one; else after the last committed
    /// txg. So records of the open txg are never taken for the kept txg's.
    #[must_use]
    pub fn open_txg(&self) -> Txg {
        self.syncing_txg()
            .or_else(|| self.txg_kept())
            .unwrap_or(self.txg)
            .next()
    }

    /// Marks the pool exported in every label. The caller syncs dirty data first.
    pub fn export(self) -> Result<(), PoolError> {
        if self.readonly {
            return Ok(());
        }
        self.pipeline.l2().persist();
        let txg = self.txg;
        self.write_labels(PoolState::Exported, txg, LabelFlush::Strict)
    }

    /// Marks the pool destroyed in the labels of every leaf it can write (import no longer
    /// lists it, and its devices are free for a new pool): a pool beyond its redundancy, or
    /// suspended, is destroyed all the same as far as its devices take it (`destroy -f` of a
    /// dead pool). Fails, having written nothing, when no leaf took the label.
    pub fn destroy(&self) -> Result<(), PoolError> {
        self.write_labels(PoolState::Destroyed, self.txg, LabelFlush::Reachable)
    }
}

/// How [`Pool::write_labels`] flushes.
#[derive(Clone, Copy)]
enum LabelFlush {
    Strict,
    Reachable,
}

/// Writes `configs` into the `half` of every leaf's labels; returns how many leaves took it.
fn write_label_configs(configs: &[(Arc<Leaf>, PoolConfig)], half: labels::LabelHalf) -> usize {
    let mut written = 0;
    for (leaf, config) in configs {
        let Some(device) = leaf.usable_device() else {
            continue;
        };
        let written_here = labels::write_config(device.as_ref(), config, half).is_ok();
        if written_here && config.state != PoolState::L2cache {
            written += 1;
        }
    }
    written
}

/// What the commit phase of one txg needs, taken by [`Pool::sync_write`]: the uberblock,
/// the vdevs to flush, the leaves whose rings get it and, when the config changed, every
/// leaf's new label. It needs no `&mut Pool`, so the engine runs it without the pool lock
/// while the next txg is open; its outcome goes back through [`Pool::sync_finish`].
#[derive(Debug)]
pub struct PendingCommit {
    uberblock: Uberblock,
    /// Top-level vdevs, each with whether its flush failure is tolerated (a log device no
    /// longer writable).
    tops: Vec<(Arc<TopVdev>, bool)>,
    spares: Vec<Arc<Leaf>>,
    leaves: Vec<Arc<Leaf>>,
    labels: Option<Vec<(Arc<Leaf>, PoolConfig)>>,
    ashift: u8,
}

impl PendingCommit {
    /// The txg this commit makes durable.
    #[must_use]
    pub fn txg(&self) -> Txg {
        self.uberblock.txg
    }

    /// The commit phase (I1): flush every leaf (the blocks and space log of the txg become
    /// durable), [label halves L0+L2, flush,] the uberblock into every ring, flush, [label
    /// halves L1+L3, flush]. Returns the uberblock once it is durable, or why the txg could
    /// not commit (the caller suspends the pool through [`Pool::sync_finish`]).
    pub fn commit(&self) -> Result<Uberblock, String> {
        let txg = self.uberblock.txg;
        // "commit phase" in the reason: status and the `io_failure` event tell a failure
        // here (every block of the txg was written) from one in the write phase.
        self.flush_all()
            .map_err(|why| format!("txg {txg}: commit phase: {why}"))?;
        if let Some(configs) = &self.labels {
            write_label_configs(configs, labels::LabelHalf::Even);
            let _ = self.flush_all();
        }
        let mut written = 0;
        for leaf in &self.leaves {
            let Some(device) = leaf.usable_device() else {
                continue;
            };
            if labels::write_uberblock(device.as_ref(), &self.uberblock, self.ashift).is_ok() {
                leaf.set_synced_txg(txg);
                written += 1;
            }
        }
        if written == 0 || self.flush_all().is_err() {
            return Err(format!(
                "txg {txg}: commit phase: the uberblock could not be written to any device"
            ));
        }
        if let Some(configs) = &self.labels {
            write_label_configs(configs, labels::LabelHalf::Odd);
            let _ = self.flush_all();
        }
        Ok(self.uberblock)
    }

    /// [`Pool`]'s flush of every leaf, over the vdevs taken at the write phase.
    fn flush_all(&self) -> Result<(), String> {
        for spare in &self.spares {
            if let Some(device) = spare.usable_device() {
                let _ = device.flush();
            }
        }
        for (top, tolerated) in &self.tops {
            match top.flush() {
                Ok(()) => {}
                Err(_) if *tolerated => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }
}

fn space_geometry(tops: &[Arc<TopVdev>], tree: &VdevTree) -> Vec<(Arc<dyn VdevGeometry>, u8)> {
    tops.iter()
        .map(|top| {
            let shift = tree
                .children
                .iter()
                .find(|c| c.guid == top.guid())
                .map(|c| c.metaslab_shift)
                .filter(|&s| s > 0)
                .unwrap_or_else(|| tarn_space::metaslab_shift_for(top.asize()));
            (Arc::clone(top) as Arc<dyn VdevGeometry>, shift)
        })
        .collect()
}

/// A spare or cache group's GUID and its leaves.
type AuxGroup = (Guid, Vec<Arc<Leaf>>);

/// The top-level vdevs of a label tree over `devices`, its spares and its cache devices.
fn split_tree(
    tree: &VdevTree,
    devices: &std::collections::HashMap<Guid, Arc<dyn Device>>,
) -> Result<(Vec<Arc<TopVdev>>, AuxGroup, AuxGroup), PoolError> {
    let aux = |group: &VdevTree| -> Vec<Arc<Leaf>> {
        group
            .children
            .iter()
            .map(|l| aux_leaf(l, devices))
            .collect()
    };
    let mut tops = Vec::new();
    let (mut spares, mut caches) = ((Guid(0), Vec::new()), (Guid(0), Vec::new()));
    for child in &tree.children {
        match child.kind {
            VdevKind::Spares => spares = (child.guid, aux(child)),
            VdevKind::L2cache => caches = (child.guid, aux(child)),
            _ => tops.push(Arc::new(TopVdev::from_tree(child, devices)?)),
        }
    }
    Ok((tops, spares, caches))
}

/// A spare or cache device of the tree: its leaf, online when its device was found.
pub(crate) fn aux_leaf(
    node: &VdevTree,
    devices: &std::collections::HashMap<Guid, Arc<dyn Device>>,
) -> Arc<Leaf> {
    let leaf = Leaf::missing(node.guid, node.path.clone(), node.asize);
    if let Some(device) = devices.get(&node.guid)
        && leaf.set_device(Some(Arc::clone(device))).is_ok()
    {
        leaf.set_state(tarn_vdev::LeafState::Online);
    }
    Arc::new(leaf)
}

/// A vdev-tree node that is not a leaf (root, mirror, raidz, the spares group).
fn interior_node(
    kind: VdevKind,
    guid: Guid,
    id: u32,
    ashift: u8,
    asize: u64,
    children: Vec<VdevTree>,
) -> VdevTree {
    VdevTree {
        kind,
        guid,
        id,
        ashift,
        asize,
        metaslab_shift: 0,
        path: String::new(),
        children,
        offline: false,
        resilvering: false,
        log: false,
        special: false,
    }
}

/// A leaf node for a new device of `size` bytes: its asize is the data area in whole sectors.
fn new_leaf(path: &str, id: u32, ashift: u8, size: u64, guid: Guid) -> VdevTree {
    let sector = 1u64 << ashift;
    let (start, end) = tarn_format::label::data_area(size).unwrap_or((0, 0));
    VdevTree {
        kind: VdevKind::Disk,
        guid,
        id,
        ashift,
        asize: (end - start) / sector * sector,
        metaslab_shift: 0,
        path: path.to_string(),
        children: Vec::new(),
        offline: false,
        resilvering: false,
        log: false,
        special: false,
    }
}

/// Ids of the top-level vdevs a tree marks with a class (`log`, `special`).
fn class_top_ids(
    tree: &VdevTree,
    marked: impl Fn(&VdevTree) -> bool,
) -> std::collections::BTreeSet<u32> {
    tree.children
        .iter()
        .filter(|c| c.kind != VdevKind::Spares && marked(c))
        .map(|c| c.id)
        .collect()
}

/// The label node of a new top-level vdev with id `id` over new `leaves`.
fn top_node(
    layout: TopLayout,
    leaves: Vec<VdevTree>,
    id: u32,
    ashift: u8,
    rng: &mut SeededRng,
) -> VdevTree {
    let smallest = leaves.iter().map(|l| l.asize).min().unwrap_or(0);
    let mut node = match layout {
        TopLayout::Disk => {
            let mut single = leaves.into_iter().next().expect("validated: one device");
            single.id = id;
            single
        }
        TopLayout::Mirror => {
            interior_node(VdevKind::Mirror, rng.guid(), id, ashift, smallest, leaves)
        }
        TopLayout::Raidz(parity) => {
            let asize = smallest * leaves.len() as u64;
            let kind = VdevKind::Raidz { parity };
            interior_node(kind, rng.guid(), id, ashift, asize, leaves)
        }
        TopLayout::Draid {
            parity,
            data,
            spares,
        } => {
            let guid = rng.guid();
            // The permutation seed: random per vdev, then fixed in the labels forever.
            let seed = rng.next_u64();
            let geometry = tarn_vdev::DraidGeometry::new(
                leaves.len(),
                parity.into(),
                data.into(),
                spares.into(),
                ashift,
                seed,
            );
            let asize = geometry.asize(smallest);
            let config = tarn_format::label::DraidConfig {
                parity,
                data,
                spares,
                seed,
            };
            interior_node(VdevKind::Draid(config), guid, id, ashift, asize, leaves)
        }
    };
    node.metaslab_shift = tarn_space::metaslab_shift_for(node.asize);
    node
}

/// The top-level vdev nodes of `spec` (data, log, special), ids from `first_id`, and its
/// spares as leaves, with fresh GUIDs and sizes from the devices.
fn build_tops(
    spec: &CreateSpec,
    devices: &BTreeMap<String, Arc<dyn Device>>,
    first_id: u32,
    ashift: u8,
    rng: &mut SeededRng,
) -> (Vec<VdevTree>, Vec<VdevTree>) {
    let leaf = |path: &String, id: usize, rng: &mut SeededRng| {
        let size = devices.get(path).map_or(0, |d| d.size_bytes());
        new_leaf(path, id as u32, ashift, size, rng.guid())
    };
    // Every leaf's GUID first, then the interior nodes' (the order seeded runs replay).
    let mut tops: Vec<(TopLayout, Vec<VdevTree>)> = Vec::new();
    for top in spec.all_tops() {
        let leaves = top
            .devices
            .iter()
            .enumerate()
            .map(|(i, p)| leaf(p, i, rng))
            .collect();
        tops.push((top.layout, leaves));
    }
    let spares = spec
        .spares
        .iter()
        .enumerate()
        .map(|(i, p)| leaf(p, i, rng))
        .collect();
    let (data, logs) = (spec.tops.len(), spec.logs.len());
    let mut children = Vec::new();
    for (index, (layout, leaves)) in tops.into_iter().enumerate() {
        let id = first_id + index as u32;
        let mut node = top_node(layout, leaves, id, ashift, rng);
        node.log = (data..data + logs).contains(&index);
        node.special = index >= data + logs;
        children.push(node);
    }
    (children, spares)
}

/// Leaves for the spares or cache devices at `paths`, with fresh GUIDs and sizes from the
/// devices.
pub(crate) fn aux_leaves(
    paths: &[String],
    devices: &BTreeMap<String, Arc<dyn Device>>,
    ashift: u8,
    rng: &mut SeededRng,
) -> Vec<VdevTree> {
    let leaf = |(i, path): (usize, &String)| {
        let size = devices.get(path).map_or(0, |d| d.size_bytes());
        new_leaf(path, i as u32, ashift, size, rng.guid())
    };
    paths.iter().enumerate().map(leaf).collect()
}

/// Builds the vdev tree for a new pool, with fresh GUIDs and sizes from the devices.
fn build_tree(
    spec: &CreateSpec,
    devices: &BTreeMap<String, Arc<dyn Device>>,
    rng: &mut SeededRng,
) -> VdevTree {
    let (mut children, spares) = build_tops(spec, devices, 0, spec.ashift, rng);
    let caches = aux_leaves(&spec.caches, devices, spec.ashift, rng);
    for (kind, group) in [(VdevKind::Spares, spares), (VdevKind::L2cache, caches)] {
        if !group.is_empty() {
            let id = children.len() as u32;
            children.push(interior_node(kind, rng.guid(), id, spec.ashift, 0, group));
        }
    }
    interior_node(VdevKind::Root, rng.guid(), 0, spec.ashift, 0, children)
}

/// The largest ashift of the top-level vdevs (what the cache devices align to).
fn widest_ashift(tops: &[Arc<TopVdev>]) -> u8 {
    tops.iter()
        .map(|t| t.ashift())
        .max()
        .unwrap_or(tarn_base::limits::ASHIFT_DEFAULT)
}
