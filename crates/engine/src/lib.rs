//! tarn-engine: the one API front ends use. It owns imported pools, their meta object sets,
//! properties and history, and turns admin requests into checked, atomic pool changes.
//!
//! # Purpose
//! A library with no knowledge of FUSE, NBD, sockets or argv. The daemon, the simulator and
//! the demo drive the same [`Engine`].
//!
//! # Model
//! ```text
//!  Engine
//!   ├─ DeviceProvider (files, or SimDevices in tests)
//!   ├─ cache: tarn_objects::CacheStore (the clean-block cache, ZFS's ARC: one byte limit
//!   │         for every pool, one CacheDomain per import, dropped with the import)
//!   └─ pools: name -> PoolHandle ─ Mutex<Imported>
//!                                   ├─ tarn_pool::Pool   (vdevs, space, txgs)
//!                                   ├─ Mos               (props, history, root dataset ptr)
//!                                   ├─ datasets::Tree    (datasets, their object sets)
//!                                   └─ zil::Logs         (intent logs: pending records,
//!                                                         log-block chains)
//! ```
//! Every admin operation is a *check* phase with no side effects followed by an *apply*
//! phase (OpenZFS's synctask shape), so a refused command changes nothing.
//!
//! # Invariants
//! - I1: a pool name maps to at most one imported pool; a pool GUID is imported at most once.
//! - I2: a refused operation leaves every device byte-identical (tests compare images).
//! - I3: txgs are committed only through the phases of [`txg`]: a write phase under the
//!   pool lock, a commit phase (with or without it) and a finish under it; at most one txg
//!   is between its write phase and its finish. `Imported::sync` (sync_pool, the admin
//!   verbs, a finished scrub, export) runs all three holding the lock; the daemon's sync
//!   thread ([`TxgSyncer`], [`Engine::sync_wanted_pools`], [`Engine::sync_all`]) releases it
//!   for the commit phase. Writers are throttled: a sync starts at [`DIRTY_SYNC`], a writer
//!   at [`DIRTY_MAX`] waits for the syncing txg, so at most about twice [`DIRTY_MAX`] of
//!   dirty data are in memory per pool.
//!
//! # Concurrency and context
//! Lock order: `Engine::admin` (admin verbs), `Engine::pools` (briefly, to find a handle),
//! then one `PoolHandle::inner` (the pool lock), then that pool's commit lane
//! (`PoolHandle::lane`, module [`txg`]), then the clean-block cache store's mutex (held for
//! one lookup, insert or purge, never across I/O). Never two pool locks at once. A txg's
//! commit phase holds only its lane, never the pool lock, and takes the pool lock for the
//! finish only after releasing the lane; so a thread holding the pool lock may wait for the
//! lane, and no thread waits for the pool lock while holding the lane. A writer waiting for a
//! suspended pool to resume sleeps on the handle's `resumed` condvar with the pool lock
//! released and holding no lane (`suspend`); so does a writer the throttle or an `fsync`
//! made wait for a commit that failed. An intent-log commit writes and flushes its blocks
//! holding no lock (module [`zil`], "Commits off the pool lock"); the lane's count of such
//! writes is taken after the pool lock and the slot, and a commit phase (holding the slot)
//! or `PoolHandle::lock` waits for it to drain. `fsync`s of a dataset with one commit in
//! flight sleep on the handle's `log_idle` condvar with the pool lock released.
//!
//! Reads off the lock: a volume read ([`Engine::volume_read`]) and a file read through
//! [`Engine::fs_read_planned`] find, under the pool lock, the blocks they (and their
//! read-ahead) need that are not cached (`ObjectSet::plan_read`), read and verify them with
//! the lock released (`Pool::detached_reader`, several in flight on tarn-zio's reader
//! threads) into the clean-block cache, and take the lock again only to collect the
//! cached blocks (`ObjectSet::read_out`: a file read's are joined into the reply after the
//! lock is let go, a volume read's written to the NBD socket from the cache's blocks
//! without a copy); with nothing to fetch they never let
//! go of it before that. Their read-ahead is a batch
//! handed to a reader thread that the read does not wait for (`fs::OffLock`); a later read
//! that needs one of its blocks waits for that batch, and export and destroy end every
//! batch before the devices close. While such a
//! reader runs it pins the txg whose state it read, so no space its block pointers name is
//! reused (tarn-space `pins`): a copy that fails its checksum is damage and is healed and
//! counted as on any read, never a newer block. A block evicted or changed in between is
//! read under the lock as before. Simulated devices read synchronously and take none of
//! this (their runs stay deterministic).
//!
//! Open and syncing txgs overlap: while txg T's commit phase (flushes, uberblock) runs on
//! the daemon's sync thread, the pool lock is free and txg T+1 is open. Front-end requests
//! (`fs_op`, reads, `object_*`) take the pool lock with `lock_open` (writers through
//! `lock_for_write`, which adds the failmode wait) and run meanwhile; an `fsync` (or
//! `sync=always`) waits for T's commit without the lock, because its records go into the
//! chain T's header names ([`zil`]). Everything else (admin verbs, scrub steps, status,
//! checkers, `clear`) takes the pool lock with `PoolHandle::lock`, which first finishes a
//! syncing txg, so the vdev tree never changes under a commit phase. Without a sync thread
//! (the simulator, tests, `tarn demo`) every commit runs on the thread that needs it.
//!
//! # Failure model
//! Errors are [`EngineError`], each naming what was wrong; front ends print them as
//! `cannot <verb> '<object>': <error>`. A suspended pool (a txg that could not commit) makes
//! writers wait (`failmode=wait`) or fail (`continue`) until [`Engine::clear`] resumes it,
//! writing the failed txg again, or `export -f` ends it (`suspend`). A txg whose write or
//! commit phase fails suspends the pool in one place per phase; the states a txg goes
//! through (open, syncing, commit failed and suspended, resumed) and what each leaves in
//! memory are in [`txg`].
//!
//! Background work: [`scrub`] verifies every live block in device-address order in batches
//! ([`Engine::scrub_step`]) that a front end's thread drives; offline, online and clear
//! change leaf states and counters ([`Engine::offline`], [`Engine::online`],
//! [`Engine::clear`]).
//!
//! Replace, attach, detach, leaf faulting and hot spares are in [`replace`]; a resilver is a
//! scan with function resilver ([`scrub`]), or with `replace -s` a sequential resilver that
//! copies the allocated ranges of a mirror and is followed by a verifying scrub (`rebuild`);
//! [`Engine::fault_check`] runs the slow-device detector ([`slow`]: p99 against the
//! siblings' median, read-around, `delay` events, fault after `slow_io_period` when a spare
//! is free), faults leaves with `io_n` I/O errors and activates spares; the event ring is
//! [`events`]; [`iostat`] reports the leaves' running totals. The detector's windows and the
//! SLOW counts live in memory only and restart at import, as ZFS's do. Multihost protection
//! (`multihost=on`): [`Engine::multihost_heartbeat`] writes the heartbeat and suspends a pool
//! that cannot (`multihost`); the import-time activity check is `tarn_pool::multihost`.
//!
//! `pool add` and `pool remove` ([`Engine::add_vdevs`], [`Engine::remove_vdev`], module
//! `topology`) change which top-level vdevs and spares a pool has, each committed in a txg
//! with its history record; removing a log device first commits txgs until the intent log
//! left it. Allocation classes (log, special) are the pool and space layers'; this layer
//! passes each dataset's `special_small_blocks` into its object set's write config.
//!
//! # Not here
//! The snapshot and send logic itself (tarn-dataset; `snapshot_ops` and `send_ops` are the
//! verbs), rates over intervals (the front end divides two
//! [`Engine::iostat`] reports), the threads that drive scrubs, resilvers, fault checks and
//! heartbeats (the daemon owns them; the engine spawns no long-lived thread: the only
//! threads working under it are tarn-zio's reader threads, which serve batch reads and
//! finish each batch before it returns).

mod admission;
pub mod block_clone;
mod bookmark_ops;
pub mod checksum_ops;
mod clone_ops;
mod clone_stream;
pub mod corrective;
mod damage;
mod dataset_ops;
mod datasets;
mod devices;
mod diff_ops;
pub mod events;
pub mod fs;
mod holds;
pub mod iostat;
mod limits;
pub mod memory;
pub mod mos;
mod multihost;
pub mod prewrite;
pub mod project;
pub mod props;
mod rebuild;
mod receive_atomic;
mod receive_head;
mod receive_moves;
mod receive_new;
mod receive_pipe;
mod receive_prune;
mod receive_rollback;
pub mod replace;
pub mod rewind;
pub mod scrub;
pub mod send_ops;
mod send_pipe;
pub mod slow;
mod snapdir;
mod snapshot_ops;
pub mod status;
mod suspend;
mod topology;
pub mod txg;
mod userspace;
pub mod volume;
pub mod zil;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tarn_base::{Clock, Guid, ObjectId, SeededRng, Txg};
use tarn_format::BlockPtr;
use tarn_objects::{ObjectError, ObjectSet};
use tarn_pool::{Discovered, Pool};

pub use block_clone::FileRange;
pub use checksum_ops::FileChecksum;
pub use corrective::{BlockFix, CorrectiveReport};
pub use damage::{BlockPlacement, ChildShare};
pub use dataset_ops::{DatasetProp, DatasetQuery, DatasetRow};
pub use devices::OnlineOutcome;
pub use diff_ops::DiffLine;
pub use events::Event;
pub use fs::{DatasetId, FsOp, FsStat, MountSpec, PendingRead, ReadStep};
pub use holds::HoldRow;
pub use iostat::{IostatNode, PoolIostat, Waits};
pub use mos::HistoryRecord;
pub use project::{ProjectChange, ProjectRow};
pub use rewind::{ImportReport, Recovery, TxgTime};
pub use scrub::{ScanFunction, ScanProgress, ScanState, ScrubAction};
pub use send_ops::{ReceiveProgress, ReceiveReport, ReceiveSpec, SendReport, SendSpec};
pub use snapdir::SnapshotDir;
pub use snapshot_ops::SnapshotDestroyReport;
pub use status::{Importable, PoolStatus, PoolSummary, PropValue, VdevNode};
pub use tarn_dataset::DatasetError;
pub use tarn_dataset::props::OwnerSpace;
pub use tarn_device::DeviceError;
pub use tarn_device::timing::{Histogram, LATENCY_BUCKETS, Latencies};
/// What a [`DeviceProvider`] hands out and is built from, for front ends (and their tests)
/// that open devices their own way.
pub use tarn_device::{Device, FileDevice, FileOpenOptions, QueuedDevice, list_device_paths};
pub use tarn_objects::{CacheStats, Fetch, ReadOut, Run};
pub use tarn_pool::PoolError;
pub use tarn_pool::{
    CreateSpec, DeviceProvider, FileProvider, HostIdentity, ImportOptions, SimProvider, TopLayout,
    TopSpec,
};
pub use tarn_posix as posix;
pub use tarn_vdev::stats::SIZE_BUCKETS;
pub use txg::{DIRTY_SYNC, LOAN_STEP, SyncTimes, TxgSyncer};
pub use userspace::UserspaceRow;
pub use volume::{VolumeSpec, VolumeStat};

/// The pool keeps `1 / 2^SLOP_SHIFT` of its space in reserve (3%, as ZFS's slop space), so
/// that metadata of a txg can always be written and frees can always be committed.
pub const SLOP_SHIFT: u32 = 5;

/// The root dataset of every pool (the MOS object that holds it).
pub const ROOT_DATASET_ID: DatasetId = DatasetId(4);

/// Dirty bytes per pool at which a writer waits for the syncing txg and writes the open one
/// (the write throttle, module [`txg`]; without a sync thread it syncs the txg inline).
pub const DIRTY_MAX: u64 = 256 << 20;
/// Byte limit of the engine's clean-block cache until [`Engine::set_cache_limit`]: what one
/// object set's own cache holds (tests and the simulator size their data against it); the
/// daemon sizes the cache from the machine's memory.
pub const CACHE_BYTES_DEFAULT: u64 = tarn_objects::CACHE_BYTES_DEFAULT;

/// Errors of engine operations. The `Display` text is the part after
/// `cannot <verb> '<object>': ` in the CLI's one-line message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// No imported pool has that name.
    #[error("no such pool")]
    NoSuchPool,
    /// A pool with that name is already imported.
    #[error("a pool with that name already exists")]
    PoolExists,
    /// The pool is already imported (under some name).
    #[error("a pool with that GUID is already imported as '{0}'")]
    AlreadyImported(String),
    /// A property name or value is invalid.
    #[error("{0}")]
    InvalidProperty(String),
    /// An argument is invalid.
    #[error("{0}")]
    InvalidArgument(String),
    /// On-disk metadata is damaged.
    #[error("metadata is corrupt: {0}")]
    Corrupt(String),
    /// The write would leave the pool without the space it needs to commit (ENOSPC).
    #[error("out of space")]
    NoSpace,
    /// A pool-level error.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// An object-level error.
    #[error(transparent)]
    Objects(#[from] ObjectError),
    /// A scrub is already running.
    #[error("currently scrubbing; use 'tarn pool scrub -s' to cancel the current scrub")]
    ScanInProgress,
    /// Pause or cancel without a running (or paused) scrub.
    #[error("there is no active scrub")]
    NoActiveScan,
    /// No leaf of the pool has that path, name or GUID.
    #[error("no such device in pool")]
    NoSuchDevice,
    /// Taking the device offline would leave a top-level vdev without enough redundancy.
    #[error("no valid replicas")]
    NoValidReplicas,
    /// The device to bring online is not attached.
    #[error("the device is not present; attach it and try again")]
    DeviceNotPresent,
    /// A resilver is running (a scrub cannot start, pause or stop it).
    #[error("currently resilvering")]
    ResilverInProgress,
    /// Replace or attach named the device being replaced as the new one.
    #[error("cannot replace a device with itself")]
    SameDevice,
    /// The new device is already a device of this pool.
    #[error("'{0}' is already in use by this pool")]
    DeviceInUse(String),
    /// The new device is smaller than the device it replaces.
    #[error("device '{path}' is too small ({size}; it must be at least {needed})")]
    DeviceTooSmall {
        /// Its path.
        path: String,
        /// Its size, human readable.
        size: String,
        /// The size needed, human readable.
        needed: String,
    },
    /// The leaf is already being replaced.
    #[error("the device is already being replaced")]
    AlreadyReplacing,
    /// No dataset has that name.
    #[error("dataset does not exist")]
    NoSuchDataset,
    /// The dataset is read-only (`readonly=on`).
    #[error("dataset is read-only")]
    ReadOnlyDataset,
    /// The write would pass a quota (EDQUOT).
    #[error("disk quota exceeded")]
    QuotaExceeded,
    /// A dataset name or property was refused, or dataset metadata is damaged.
    #[error(transparent)]
    Dataset(#[from] tarn_dataset::DatasetError),
    /// A filesystem operation failed.
    #[error(transparent)]
    Posix(#[from] tarn_posix::PosixError),
    /// `tarn checksum`: the file was written to during every attempt to read it whole.
    #[error("the file changed while it was read ({0} attempts); try again when it is quiet")]
    FileChanging(u32),
    /// The dataset's object-set root could not be read at import (`datasets`, "Unavailable
    /// datasets"): the pool works, this dataset does not.
    #[error(
        "dataset '{name}' is unavailable: its object set cannot be read ({why}); repair the \
         devices and import the pool again, roll it back to a snapshot, or destroy it"
    )]
    DatasetUnavailable {
        /// The dataset's full name.
        name: String,
        /// The error of the root block's read.
        why: String,
    },
}

/// Validated properties of a pool being created.
struct PoolProps<'a> {
    pool: &'a [(String, String)],
    root: &'a [(String, Option<String>)],
    ashift: u8,
}

/// Options of a create that are not part of the vdev layout.
#[derive(Clone, Debug, Default)]
pub struct CreateOptions {
    /// `-o prop=value` pool properties.
    pub properties: Vec<(String, String)>,
    /// Only check and describe the layout (`-n`).
    pub dry_run: bool,
    /// The command line, for history.
    pub command: String,
    /// Properties of the root dataset (`-O prop=value`, `-m`).
    pub root_properties: Vec<(String, String)>,
}

struct Imported {
    pool: Pool,
    mos: Mos,
    datasets: datasets::Tree,
    /// Blocks of destroyed object sets, freed by the next sync.
    destroyed: Vec<BlockPtr>,
    /// The blocks of datasets a receive's end destroys, walked before its first change
    /// (`receive_atomic::read_ahead`) and taken by their destroy; empty otherwise.
    read_ahead: BTreeMap<DatasetId, Vec<BlockPtr>>,
    /// Datasets a front end has mounted (the `mounted` property; not persistent).
    mounted: std::collections::BTreeSet<DatasetId>,
    history: Vec<HistoryRecord>,
    scan: scrub::Scan,
    /// Intent logs of the datasets (records pending, chains).
    logs: zil::Logs,
    /// What the import's intent-log replay found, per dataset with a log.
    replayed: Vec<zil::ReplayReport>,
    /// Where a written txg waits for its commit phase (shared with the handle).
    lane: Arc<txg::Lane>,
    /// Dirty-data room lent by the ARC to this pool's txgs (module [`txg`]).
    loan: txg::DirtyLoan,
}

use mos::Mos;

/// One imported pool.
pub struct PoolHandle {
    name: String,
    guid: Guid,
    /// The engine clock's monotonic time at create or import (`iostat`'s first report).
    imported_ns: u64,
    inner: Mutex<Imported>,
    /// The commit lane of `inner`'s pool (module [`txg`]; locked after `inner`, or alone).
    lane: Arc<txg::Lane>,
    /// Multihost heartbeat state (its own lock: see [`multihost`]).
    beat: Mutex<multihost::Beat>,
    /// Signalled when a suspended pool resumes or is exported: writers waiting under
    /// `failmode=wait` sleep on it with the pool lock released (`suspend`).
    resumed: std::sync::Condvar,
    /// Signalled (under the pool lock) when an intent-log commit that wrote without the pool
    /// lock is done: commits of its dataset waiting for it go on (module [`zil`]).
    log_idle: std::sync::Condvar,
    /// Set by a forced export of a suspended pool: waiting writers fail instead of waiting.
    ended: std::sync::atomic::AtomicBool,
    /// The pool's memory figures as the last `memory_use` that got the lock counted them.
    memory: Mutex<memory::PoolMemory>,
}

impl std::fmt::Debug for PoolHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolHandle")
            .field("name", &self.name)
            .field("guid", &self.guid)
            .finish()
    }
}

/// The storage engine: every imported pool of this host.
pub struct Engine {
    provider: Arc<dyn DeviceProvider>,
    identity: HostIdentity,
    clock: Arc<dyn Clock>,
    rng: Mutex<SeededRng>,
    pools: Mutex<BTreeMap<String, Arc<PoolHandle>>>,
    admin: Mutex<()>,
    events: Mutex<events::EventLog>,
    slow: Mutex<slow::SlowWatch>,
    multihost_interval_ms: std::sync::atomic::AtomicU64,
    /// The clean-block cache of every imported pool (one domain each), ZFS's ARC.
    cache: tarn_objects::CacheStore,
    /// The front end's sync thread, if it has one (module [`txg`]).
    syncer: Mutex<Option<Arc<dyn TxgSyncer>>>,
    /// Most dirty-data room a pool's open txg may borrow from the ARC (0: none; the
    /// daemon's sync thread sets it: module [`txg`]).
    loan_max: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl Imported {
    /// The in-memory state of a pool just imported: its MOS, dataset tree and scan.
    fn open(pool: Pool, name: &str, clock: Arc<dyn Clock>) -> Result<Imported, EngineError> {
        let reader = pool.reader();
        let root = pool
            .root()
            .ok_or_else(|| EngineError::Corrupt("no root block".into()))?;
        let mut mos = Mos::open(&reader, &root)?;
        let tree = datasets::Tree::load(mos.objset(), &reader, name)?;
        let mut imported = Imported {
            pool,
            mos,
            datasets: tree,
            destroyed: Vec::new(),
            read_ahead: BTreeMap::new(),
            mounted: std::collections::BTreeSet::new(),
            history: Vec::new(),
            scan: scrub::Scan::default(),
            logs: zil::Logs::default(),
            replayed: Vec::new(),
            lane: Arc::new(txg::Lane::new(clock)),
            loan: txg::DirtyLoan::default(),
        };
        imported.scan = scrub::Scan::load(&mut imported)?;
        Ok(imported)
    }

    fn dirty_bytes(&self) -> u64 {
        self.mos.dirty_bytes() + self.datasets.dirty_bytes() + self.destroyed.len() as u64
    }

    /// When the imported txg's space log could not be read, rebuilds the allocation state
    /// from the block tree (`check::live_space`) before anything allocates, and says what it
    /// did; a tree that cannot be walked fails the import.
    fn rebuild_space_if_lost(&mut self) -> Result<Option<events::SpaceRebuild>, EngineError> {
        let Some(why) = self.pool.space_lost().map(str::to_string) else {
            return Ok(None);
        };
        let live = check::live_space(self).map_err(|walk| {
            EngineError::Corrupt(format!(
                "the space log is damaged ({why}) and the block tree cannot be walked to \
                 rebuild it: {walk}"
            ))
        })?;
        self.pool.rebuild_space(&live)?;
        Ok(Some(events::SpaceRebuild {
            why,
            blocks: live.len() as u64,
            bytes: live.iter().map(|d| d.asize).sum(),
        }))
    }

    /// The root dataset's object set (the raw object interface the simulator drives).
    fn root_objset(&mut self) -> &mut ObjectSet {
        &mut self.datasets.node_mut(ROOT_DATASET_ID).objset
    }
}

impl Engine {
    /// An engine with no pools.
    #[must_use]
    pub fn new(
        provider: Arc<dyn DeviceProvider>,
        identity: HostIdentity,
        clock: Arc<dyn Clock>,
        seed: u64,
    ) -> Self {
        Engine {
            provider,
            identity,
            clock,
            rng: Mutex::new(SeededRng::new(seed)),
            pools: Mutex::new(BTreeMap::new()),
            admin: Mutex::new(()),
            events: Mutex::new(events::EventLog::default()),
            slow: Mutex::new(slow::SlowWatch::default()),
            multihost_interval_ms: std::sync::atomic::AtomicU64::new(
                tarn_base::limits::MULTIHOST_INTERVAL_MS_DEFAULT,
            ),
            cache: tarn_objects::CacheStore::new(CACHE_BYTES_DEFAULT),
            syncer: Mutex::new(None),
            loan_max: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Sets the byte limit of the clean-block cache all pools share (at least
    /// `CACHE_BYTES_MIN`), evicting what no longer fits.
    pub fn set_cache_limit(&self, bytes: u64) {
        self.cache
            .set_limit(bytes.max(tarn_base::limits::CACHE_BYTES_MIN));
    }

    /// What the clean-block cache holds and how often it answered.
    #[must_use]
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    fn pools(&self) -> MutexGuard<'_, BTreeMap<String, Arc<PoolHandle>>> {
        self.pools
            .lock()
            .expect("pool table lock poisoned by a failed invariant")
    }

    fn admin(&self) -> MutexGuard<'_, ()> {
        self.admin
            .lock()
            .expect("admin lock poisoned by a failed invariant")
    }

    /// The imported pool called `name`.
    pub fn pool(&self, name: &str) -> Result<Arc<PoolHandle>, EngineError> {
        self.pools()
            .get(name)
            .cloned()
            .ok_or(EngineError::NoSuchPool)
    }

    /// Every imported pool's handle, by name.
    fn handles(&self) -> Vec<Arc<PoolHandle>> {
        self.pools().values().cloned().collect()
    }

    /// Names of imported pools, sorted.
    #[must_use]
    pub fn pool_names(&self) -> Vec<String> {
        self.pools().keys().cloned().collect()
    }

    fn history_record(&self, command: &str, internal: bool) -> HistoryRecord {
        HistoryRecord {
            time: self.clock.now_unix_secs(),
            command: command.to_string(),
            internal,
            user: "root".into(),
            host: self.identity.hostname.clone(),
            txg: Txg(0),
        }
    }

    /// Creates a pool (or with `dry_run`, only checks and returns the layout it would have).
    pub fn create_pool(
        &self,
        spec: &CreateSpec,
        options: &CreateOptions,
    ) -> Result<Option<VdevNode>, EngineError> {
        let _admin = self.admin();
        let mut spec = spec.clone();
        let mut props = Vec::new();
        for (name, value) in &options.properties {
            let value = props::validate(name, value, true)?;
            if name == "ashift" {
                spec.ashift = value
                    .parse()
                    .map_err(|_| EngineError::InvalidProperty("bad ashift".into()))?;
            } else {
                props.push((name.clone(), value));
            }
        }
        let root_props = options
            .root_properties
            .iter()
            .map(|(name, value)| Ok((name.clone(), dataset_ops::validate_prop(name, value)?)))
            .collect::<Result<Vec<_>, EngineError>>()?;
        spec.validate()?;
        if self.pools().contains_key(&spec.name) {
            return Err(EngineError::PoolExists);
        }
        if options.dry_run {
            return Ok(Some(status::layout_of(&spec)));
        }
        let mut rng = self.rng.lock().expect("rng lock poisoned").clone();
        let pool = Pool::create(
            &spec,
            self.provider.as_ref(),
            self.identity.clone(),
            Arc::clone(&self.clock),
            &mut rng,
        )?;
        *self.rng.lock().expect("rng lock poisoned") = rng;
        let guid = pool.guid();
        let pool_props = PoolProps {
            pool: &props,
            root: &root_props,
            ashift: spec.ashift,
        };
        let mut imported = self.created(pool, &spec.name, &pool_props, &options.command)?;
        imported.datasets.use_cache(self.cache.domain());
        dataset_ops::format_filesystem(&mut imported, ROOT_DATASET_ID, self.clock.as_ref())?;
        multihost::apply_prop(&mut imported, self.multihost_interval_ms())?;
        imported.sync()?;
        let handle = self.handle(spec.name.clone(), guid, imported);
        self.pools().insert(spec.name.clone(), handle);
        Ok(None)
    }

    /// The in-memory state of a pool just created: its MOS with the pool properties, and
    /// the dataset tree with the root dataset's properties (nothing synced yet).
    fn created(
        &self,
        pool: Pool,
        name: &str,
        props: &PoolProps<'_>,
        command: &str,
    ) -> Result<Imported, EngineError> {
        let reader = pool.reader();
        let mut mos = Mos::create(&reader)?;
        for (name, value) in props.pool {
            mos.set_prop(&reader, name, Some(value))?;
        }
        if props.ashift != tarn_base::limits::ASHIFT_DEFAULT {
            mos.set_prop(&reader, "ashift", Some(&props.ashift.to_string()))?;
        }
        let dataset_guid = Guid(self.rng.lock().expect("rng lock poisoned").next_u64());
        let now = self.clock.now_unix_secs();
        let mut tree = datasets::Tree::create(mos.objset(), &reader, name, now, dataset_guid)?;
        for (prop, value) in props.root {
            let value = value.as_deref();
            tree.set_local(mos.objset(), &reader, ROOT_DATASET_ID, prop, value)?;
        }
        Ok(Imported {
            pool,
            mos,
            datasets: tree,
            destroyed: Vec::new(),
            read_ahead: BTreeMap::new(),
            mounted: std::collections::BTreeSet::new(),
            history: vec![self.history_record(command, false)],
            scan: scrub::Scan::default(),
            logs: zil::Logs::default(),
            replayed: Vec::new(),
            lane: Arc::new(txg::Lane::new(Arc::clone(&self.clock))),
            loan: txg::DirtyLoan::default(),
        })
    }

    /// Commits the open txg of `name` now.
    pub fn sync_pool(&self, name: &str) -> Result<Txg, EngineError> {
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        inner.sync()
    }

    /// Bytes of changes of `name` not yet in a committed txg (dirty buffers of every dataset
    /// and the MOS), what the next sync writes.
    pub fn pool_dirty_bytes(&self, name: &str) -> Result<u64, EngineError> {
        let handle = self.pool(name)?;
        let inner = handle.lock_open();
        Ok(inner.dirty_bytes())
    }

    /// Syncs every pool that has changes (the daemon's txg timer), each commit phase off
    /// the pool lock ([`Engine::sync_pool_pipelined`]).
    pub fn sync_all(&self) {
        for handle in self.handles() {
            // A failure suspends the pool; status reports it.
            let _ = handle.sync_pipelined(true);
        }
    }

    /// Exports a pool: syncs it, marks its labels exported and forgets it.
    pub fn export_pool(&self, name: &str, force: bool) -> Result<(), EngineError> {
        let _admin = self.admin();
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        // A read-only pool has nothing to commit; its labels are left exactly as they were.
        if !inner.pool.readonly() {
            inner.logs_close();
            let synced = inner.sync();
            if let Err(e) = synced
                && !force
            {
                return Err(e);
            }
        }
        if force {
            // Writers waiting for `clear` (failmode=wait) fail now and let go of the pool.
            handle.end_waits_if_suspended(&inner);
        }
        drop(inner);
        drop(handle);
        // It waits (bounded) for other holders of the handle to let go: a verb or the sync
        // thread that waited for the lock while the export synced (refused at once, an
        // export failed now and then with "pool is busy" for no lasting reason), and when
        // forced, woken writers and a request of a lazily detached mount still in flight.
        let imported = self.take_when_released(name)?;
        imported.datasets.finish_reads_ahead();
        match imported.pool.export() {
            Ok(()) => Ok(()),
            Err(_) if force => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Destroys a pool: marks its labels destroyed and forgets it.
    pub fn destroy_pool(&self, name: &str, _force: bool) -> Result<(), EngineError> {
        let _admin = self.admin();
        if self.pool(name)?.lock().pool.readonly() {
            return Err(PoolError::ReadOnly.into());
        }
        // As an export: transient holders of the handle are waited for, briefly.
        let imported = self.take_when_released(name)?;
        imported.datasets.finish_reads_ahead();
        if let Err(e) = imported.pool.destroy() {
            // No device took the label: nothing changed, so the pool stays imported.
            let guid = imported.pool.guid();
            let handle = self.handle(name.to_string(), guid, imported);
            self.pools().insert(name.to_string(), handle);
            return Err(e.into());
        }
        Ok(())
    }

    /// Removes a pool from the table and takes sole ownership of it, for export and destroy.
    /// If another request still holds its handle, the pool stays imported and nothing changes.
    fn take(&self, name: &str) -> Result<Imported, EngineError> {
        let handle = self.pools().remove(name).ok_or(EngineError::NoSuchPool)?;
        match Arc::try_unwrap(handle) {
            Ok(handle) => {
                let imported = handle
                    .inner
                    .into_inner()
                    .expect("pool lock poisoned by a failed invariant");
                self.slow_drop(&imported.pool);
                Ok(imported)
            }
            Err(handle) => {
                self.pools().insert(name.to_string(), handle);
                Err(EngineError::InvalidArgument("pool is busy".into()))
            }
        }
    }

    /// Pools that could be imported from `dirs` (not counting ones imported here).
    pub fn importable(&self, dirs: &[String]) -> Vec<Importable> {
        let imported: Vec<Guid> = self.pools().values().map(|h| h.guid).collect();
        tarn_pool::discover(self.provider.as_ref(), dirs)
            .iter()
            .filter(|d| !imported.contains(&d.config.pool_guid))
            .filter(|d| d.config.state != tarn_format::label::PoolState::Destroyed)
            .map(status::importable)
            .collect()
    }

    fn find_importable(&self, dirs: &[String], which: &str) -> Result<Discovered, EngineError> {
        let found = tarn_pool::discover(self.provider.as_ref(), dirs);
        let mut matches: Vec<Discovered> = found
            .into_iter()
            .filter(|d| d.config.state != tarn_format::label::PoolState::Destroyed)
            .filter(|d| d.config.name == which || d.config.pool_guid.0.to_string() == which)
            .collect();
        match matches.len() {
            0 => Err(PoolError::NotFound.into()),
            1 => Ok(matches.remove(0)),
            _ => Err(PoolError::Ambiguous {
                name: which.to_string(),
            }
            .into()),
        }
    }

    /// The uberblocks (txg, time) a pool could be rewound to, newest first.
    pub fn import_txgs(
        &self,
        dirs: &[String],
        which: &str,
    ) -> Result<Vec<(Txg, u64)>, EngineError> {
        let found = self.find_importable(dirs, which)?;
        Ok(found
            .uberblock_history()
            .iter()
            .map(|ub| (ub.txg, ub.timestamp))
            .collect())
    }

    /// Imports a pool found in `dirs` by name or GUID. Returns its (possibly new) name.
    pub fn import_pool(
        &self,
        dirs: &[String],
        which: &str,
        options: &ImportOptions,
        command: &str,
    ) -> Result<String, EngineError> {
        let report = self.import_pool_with(dirs, which, options, Recovery::default(), command)?;
        Ok(report.name)
    }

    /// Refuses a pool already imported here (under any name).
    fn check_not_imported(&self, found: &Discovered) -> Result<(), EngineError> {
        match self
            .pools()
            .values()
            .find(|h| h.guid == found.config.pool_guid)
        {
            Some(handle) => Err(EngineError::AlreadyImported(handle.name.clone())),
            None => Ok(()),
        }
    }

    /// [`Engine::import_pool`] with `-X` (`recovery`), reporting the txg it opened against
    /// the newest one on the devices (module [`rewind`]).
    pub fn import_pool_with(
        &self,
        dirs: &[String],
        which: &str,
        options: &ImportOptions,
        recovery: Recovery,
        command: &str,
    ) -> Result<ImportReport, EngineError> {
        let _admin = self.admin();
        let found = self.find_importable(dirs, which)?;
        self.check_not_imported(&found)?;
        let name = options
            .new_name
            .clone()
            .unwrap_or_else(|| found.config.name.clone());
        tarn_pool::validate_pool_name(&name)?;
        if self.pools().contains_key(&name) {
            return Err(EngineError::PoolExists);
        }
        let pool = self.open_found(&found, options, recovery)?;
        let (guid, readonly) = (pool.guid(), pool.readonly());
        let report = ImportReport::of(&found, &pool, name.clone());
        let mut imported = Imported::open(pool, &name, Arc::clone(&self.clock))?;
        let rebuilt = imported.rebuild_space_if_lost()?;
        imported.datasets.use_cache(self.cache.domain());
        let now = self.clock.now_unix_secs();
        let mut resilvering = false;
        if readonly {
            imported.keep_logs();
        } else {
            self.replay_at_import(&mut imported, &name);
            imported.log_unavailable();
            let mut cut = receive_atomic::discard_at_import(&mut imported)?;
            cut.extend(receive_head::discard_at_import(&mut imported)?);
            for name in cut {
                let command = format!("receive -A {name} (cut by a crash)");
                imported.history.push(self.history_record(&command, true));
            }
            resilvering = replace::resume_at_import(&mut imported, now);
            imported.upgrade_usedby();
            multihost::apply_prop(&mut imported, self.multihost_interval_ms())?;
            imported.history.push(self.history_record(command, false));
            imported.sync()?;
        }
        self.post_import_events(&name, &imported, resilvering, now);
        if let Some(rebuilt) = rebuilt {
            self.post(events::space_rebuild_event(&name, now, &rebuilt));
        }
        let handle = self.handle(name.clone(), guid, imported);
        self.pools().insert(name, handle);
        Ok(report)
    }

    /// The events of an import: one `l2arc_rebuild` per cache device (what its persistent
    /// index gave back), and `resilver_start` when a resilver resumes.
    fn post_import_events(&self, name: &str, imported: &Imported, resilvering: bool, now: u64) {
        for report in imported.pool.l2_rebuilds() {
            self.post(events::l2_rebuild_event(name, now, report));
        }
        if resilvering {
            self.post(events::pool_event(name, now, "resilver_start"));
        }
    }

    /// Replays the intent logs of a pool being imported (before anything else changes) and
    /// posts an event for every log whose replay stopped early.
    fn replay_at_import(&self, imported: &mut Imported, name: &str) {
        imported.replayed = imported.replay_logs();
        for report in &imported.replayed {
            if let Some(why) = &report.stopped {
                let now = self.clock.now_unix_secs();
                self.post(zil::replay_event(name, report, why, now));
            }
        }
    }

    /// The handle of a pool just created or imported (its `iostat` totals start now).
    fn handle(&self, name: String, guid: Guid, imported: Imported) -> Arc<PoolHandle> {
        Arc::new(PoolHandle {
            name,
            guid,
            imported_ns: self.clock.monotonic_ns(),
            lane: Arc::clone(&imported.lane),
            inner: Mutex::new(imported),
            beat: Mutex::default(),
            resumed: std::sync::Condvar::new(),
            log_idle: std::sync::Condvar::new(),
            ended: std::sync::atomic::AtomicBool::new(false),
            memory: Mutex::default(),
        })
    }

    /// Records a successful command in the pool's history (written with the next txg).
    pub fn log_history(&self, name: &str, command: &str) -> Result<(), EngineError> {
        let handle = self.pool(name)?;
        let record = self.history_record(command, false);
        handle.lock().history.push(record);
        Ok(())
    }

    /// The pool's history, oldest first (including records not yet synced).
    pub fn history(&self, name: &str) -> Result<Vec<HistoryRecord>, EngineError> {
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        let Imported {
            pool, mos, history, ..
        } = &mut *inner;
        let mut records = mos.history(&pool.reader())?;
        records.extend(history.iter().cloned());
        Ok(records)
    }

    /// `zpool list` rows.
    pub fn list(&self, names: &[String]) -> Result<Vec<PoolSummary>, EngineError> {
        let handles = self.select(names)?;
        Ok(handles
            .iter()
            .map(|h| status::summary(&h.name, &h.lock().pool))
            .collect())
    }

    fn select(&self, names: &[String]) -> Result<Vec<Arc<PoolHandle>>, EngineError> {
        if names.is_empty() {
            return Ok(self.pools().values().cloned().collect());
        }
        names.iter().map(|n| self.pool(n)).collect()
    }

    /// `zpool status` of one pool: health, the scan line and the error log.
    pub fn status(&self, name: &str) -> Result<PoolStatus, EngineError> {
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        let errors = scrub::error_names(&mut inner, &handle.name)?;
        let mut status = status::pool_status(&handle.name, &inner.pool, errors.len());
        let rebuilding = scrub::rebuilding_vdev(&inner);
        status.scan = scrub::scan_text(
            &inner.scan,
            self.clock.now_unix_secs(),
            rebuilding.as_deref(),
        );
        status.scan_progress = inner.scan.progress;
        status.scan_pass = inner.scan.pass();
        status.errors = errors;
        self.slow_problem(&inner.pool, &mut status);
        Ok(status)
    }

    /// `tarn pool scrub [-p | -s] NAME...`: checks every pool first (a refusal changes
    /// nothing and names the pool), then starts, resumes, pauses or cancels each. The
    /// record is committed at once; the work happens in [`Engine::scrub_step`].
    pub fn scrub(
        &self,
        names: &[String],
        action: ScrubAction,
        command: &str,
    ) -> Result<(), (String, EngineError)> {
        let _admin = self.admin();
        let mut handles = Vec::new();
        for name in names {
            let handle = self.pool(name).map_err(|e| (name.clone(), e))?;
            scrub::check(&handle.lock(), action).map_err(|e| (name.clone(), e))?;
            handles.push(handle);
        }
        for handle in handles {
            let mut inner = handle.lock();
            let now = self.clock.now_unix_secs();
            let fail = |e| (handle.name.clone(), e);
            scrub::apply(&mut inner, action, now).map_err(fail)?;
            if action == ScrubAction::Start {
                self.post(events::pool_event(&handle.name, now, "scrub_start"));
            }
            inner.history.push(self.history_record(command, false));
            inner
                .sync()
                .map_err(|e| fail(kept_for_resume(e, action, &handle.name)))?;
        }
        Ok(())
    }

    /// One batch of the running scrub of `name`: verifies and repairs listed blocks until
    /// `max_bytes` were read (at least one block), holding the pool lock only for this batch.
    /// The first batch after a start, resume or import lists the blocks. Returns the scan
    /// record (`None` if the pool never scrubbed); a pool not scrubbing is left alone.
    pub fn scrub_step(
        &self,
        name: &str,
        max_bytes: u64,
    ) -> Result<Option<ScanProgress>, EngineError> {
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        let now = self.clock.now_unix_secs();
        let was = inner.scan.scanning();
        let progress = scrub::step(&mut inner, max_bytes, now);
        // The end of a resilver can return a hot spare to AVAIL (`replace::resilver_done`).
        self.spare_states(&handle.name, &inner);
        let progress = progress?;
        if let Some(p) = progress
            && was
            && p.state == ScanState::Finished
        {
            let what = format!("{}_finish", p.function.name());
            let mut event = events::pool_event(&handle.name, now, &what);
            // Exact figures for scripts (`events -v -j`): status rounds them for people.
            let (started, ended) = (p.start_time.to_string(), p.end_time.to_string());
            event.payload = vec![
                ("scan_bytes_issued".into(), p.issued.to_string()),
                ("scan_bytes_repaired".into(), p.repaired.to_string()),
                ("scan_errors".into(), p.errors.to_string()),
                ("scan_start_time".into(), started),
                ("scan_end_time".into(), ended),
                (
                    "scan_sequential".into(),
                    u64::from(p.sequential).to_string(),
                ),
            ];
            self.post(event);
            if inner.scan.scanning() {
                // A sequential resilver's verifying scrub started with its last step.
                self.post(events::pool_event(&handle.name, now, "scrub_start"));
            }
        }
        Ok(progress)
    }

    fn post(&self, event: Event) {
        self.events.lock().expect("event lock poisoned").post(event);
    }

    /// `tarn pool events`: events with a sequence number above `after`, of pool `name` (or
    /// of every pool), oldest first; with `clear`, the ring is emptied after reading.
    pub fn events(&self, name: Option<&str>, after: u64, clear: bool) -> Vec<Event> {
        let mut log = self.events.lock().expect("event lock poisoned");
        let mut found = log.since(after);
        found.retain(|e| name.is_none_or(|n| e.pool == n));
        if clear {
            log.clear();
        }
        found
    }

    /// The scan record of `name` (`None` if it never scrubbed).
    pub fn scan_progress(&self, name: &str) -> Result<Option<ScanProgress>, EngineError> {
        Ok(self.pool(name)?.lock().scan.progress)
    }

    /// Pools with a running scrub (including ones resumed by import), sorted by name.
    #[must_use]
    pub fn scanning_pools(&self) -> Vec<String> {
        let handles: Vec<Arc<PoolHandle>> = self.pools().values().cloned().collect();
        handles
            .iter()
            .filter(|h| h.lock().scan.scanning())
            .map(|h| h.name.clone())
            .collect()
    }

    /// `zpool get` values (`["all"]` for every property).
    pub fn get_props(&self, name: &str, which: &[String]) -> Result<Vec<PropValue>, EngineError> {
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        let Imported { pool, mos, .. } = &mut *inner;
        let local = mos.props(&pool.reader())?;
        let all = status::properties(&handle.name, pool, &local);
        if which.iter().any(|w| w == "all") {
            return Ok(all);
        }
        which
            .iter()
            .map(|w| {
                let feature = props::feature(w).map(|state| PropValue {
                    value: props::feature_state(w, state, pool).to_string(),
                    display: props::feature_state(w, state, pool).to_string(),
                    name: handle.name.clone(),
                    property: w.clone(),
                    source: "local".to_string(),
                });
                all.iter()
                    .find(|p| &p.property == w)
                    .cloned()
                    .or(feature)
                    .ok_or_else(|| {
                        EngineError::InvalidProperty(format!(
                            "invalid property '{w}' (valid properties: {})",
                            props::names()
                        ))
                    })
            })
            .collect()
    }

    /// `zpool set`: validates, then stores the value (committed with the next txg).
    pub fn set_prop(
        &self,
        name: &str,
        property: &str,
        value: &str,
        command: &str,
    ) -> Result<(), EngineError> {
        let value = props::validate(property, value, false)?;
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        if inner.pool.readonly() {
            return Err(PoolError::ReadOnly.into());
        }
        let Imported {
            pool, mos, history, ..
        } = &mut *inner;
        let default = props::find(property).map(|d| d.default);
        let stored = if Some(value.as_str()) == default && property != "comment" {
            None
        } else {
            Some(value.as_str())
        };
        mos.set_prop(&pool.reader(), property, stored)?;
        history.push(self.history_record(command, false));
        multihost::apply_prop(&mut inner, self.multihost_interval_ms())?;
        inner.sync()?;
        Ok(())
    }

    /// Creates an object in the pool's root dataset (the raw object interface the dataset
    /// layer builds on).
    pub fn object_create(&self, name: &str, block_size: u32) -> Result<ObjectId, EngineError> {
        let handle = self.pool(name)?;
        let mut inner = handle.lock_open();
        let Imported { pool, datasets, .. } = &mut *inner;
        let data = &mut datasets.node_mut(ROOT_DATASET_ID).objset;
        Ok(data.allocate_object(
            &pool.reader(),
            tarn_format::dnode::OBJECT_TYPE_PLAIN,
            block_size,
            0,
            0,
        )?)
    }

    /// Writes into an object of the root dataset; syncs when dirty data passes [`DIRTY_MAX`].
    pub fn object_write(
        &self,
        name: &str,
        object: ObjectId,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), EngineError> {
        let handle = self.pool(name)?;
        let mut inner = handle.lock_for_write()?;
        if !inner.has_room_for_object(object, bytes.len() as u64)? {
            // Committing what is dirty may return space (frees, compression): try once.
            inner.sync()?;
            if !inner.has_room_for_object(object, bytes.len() as u64)? {
                return Err(EngineError::NoSpace);
            }
        }
        let Imported { pool, datasets, .. } = &mut *inner;
        let data = &mut datasets.node_mut(ROOT_DATASET_ID).objset;
        data.write(&pool.reader(), object, offset, bytes)?;
        if let Err(error) = self.throttle(&handle, inner) {
            // The write is in memory; a commit that suspended the pool is waited out as a
            // write to a suspended pool is (module `suspend`).
            handle.wait_resumed(error)?;
        }
        Ok(())
    }

    /// Punches a hole in an object of the root dataset: whole blocks are freed, partial ones
    /// zeroed. Never refused for space (it is how a full pool gets space back).
    pub fn object_punch(
        &self,
        name: &str,
        object: ObjectId,
        offset: u64,
        len: u64,
    ) -> Result<(), EngineError> {
        let handle = self.pool(name)?;
        let mut inner = handle.lock_for_write()?;
        let Imported { pool, datasets, .. } = &mut *inner;
        let data = &mut datasets.node_mut(ROOT_DATASET_ID).objset;
        data.free_range(&pool.reader(), object, offset, len)?;
        Ok(())
    }

    /// Reads from an object of the root dataset (never unverified bytes). Under
    /// `failmode=wait` a read that needs missing devices waits for `clear` (module `suspend`).
    pub fn object_read(
        &self,
        name: &str,
        object: ObjectId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), EngineError> {
        let handle = self.pool(name)?;
        let mut inner = handle.lock_open();
        loop {
            let Imported { pool, datasets, .. } = &mut *inner;
            let data = &mut datasets.node_mut(ROOT_DATASET_ID).objset;
            match data.read(&pool.reader(), object, offset, buf) {
                Ok(()) => return Ok(()),
                // Devices missing under failmode=wait: wait for `clear`, read again.
                Err(error) => {
                    let error = error.into();
                    self.note_damage(name, &mut inner, ROOT_DATASET_ID, &error);
                    inner = handle.read_failed(inner, error)?;
                }
            }
        }
    }

    /// Imported pools with their GUIDs and current device paths (the daemon's cache file).
    /// Read-only imports are not remembered (as ZFS does not cache them): a restart must not
    /// bring a pool back writable that the admin imported read-only.
    #[must_use]
    pub fn cache_entries(&self) -> Vec<(String, Guid, Vec<String>)> {
        self.pools()
            .values()
            .filter(|h| !h.lock().pool.readonly())
            .map(|h| {
                let inner = h.lock();
                let mut paths: Vec<String> = inner
                    .pool
                    .tops()
                    .iter()
                    .flat_map(|t| t.leaves())
                    .map(|l| l.path())
                    .collect();
                paths.extend(inner.pool.spares().iter().map(|s| s.path()));
                (h.name.clone(), h.guid, paths)
            })
            .collect()
    }

    /// Syncs every pool (clean shutdown; the pools stay imported in the cache).
    pub fn shutdown(&self) {
        self.sync_all();
    }

    /// The last committed uberblock's root pointer of a pool (for tools and tests).
    pub fn root(&self, name: &str) -> Result<Option<BlockPtr>, EngineError> {
        Ok(self.pool(name)?.lock().pool.root())
    }
}
pub mod check;

/// A scrub verb whose txg suspended the pool (devices gone that nothing had noticed yet):
/// the change stays in memory and is written by the txg `clear` commits (module `suspend`),
/// so the error says so instead of reading as a refusal.
fn kept_for_resume(error: EngineError, action: ScrubAction, pool: &str) -> EngineError {
    let EngineError::Pool(tarn_pool::PoolError::Suspended(why)) = error else {
        return error;
    };
    let what = match action {
        ScrubAction::Start => "the scrub starts",
        ScrubAction::Pause => "the scrub pauses",
        ScrubAction::Cancel => "the scrub is cancelled",
    };
    let why = format!("{why}; {what} when 'tarn pool clear {pool}' resumes the pool");
    EngineError::Pool(tarn_pool::PoolError::Suspended(why))
}
