//! Scrub: read and verify every live block of a pool, every copy of it, every mirror side and
//! every raidz column including parity, and repair what is wrong.
//!
//! # Model
//! ```text
//!  start ─► state Scanning (MOS "scan" record, synced) ─► steps, one batch each:
//!
//!   first step after start, resume or import:       every later step:
//!     traverse the committed state:                    under the pool lock, scrub the next
//!       MOS object set   (visit_object_set)            entries until `max_bytes` are issued
//!       root dataset     (visit_object_set)            (Pipeline::scrub_block: all copies),
//!       space-log chain  (SpaceManager::chain)         advance the bookmark, count repaired
//!     one entry per block, keyed by its lowest DVA     bytes and errors, log unrecoverable
//!     (vdev, offset); sorted by that key, so the       blocks in the MOS "errlog"
//!     scrub reads in device-address order, not tree
//!     order; entries <= bookmark are dropped;           last entry done ─► Finished, or,
//!     at most SCAN_QUEUE_MAX kept (the lowest keys)     with blocks left after it, the
//!                                                       next round lists them
//!     hold deferred frees (tarn-space)
//!
//!  pause ─► Paused (queue dropped, hold released)   cancel ─► Canceled (same)
//! ```
//! A step's blocks are scanned together (`Pipeline::scan_blocks`): with devices that serve
//! reads on their own threads, up to `BLOCKS_IN_FLIGHT_MAX` blocks are read, verified
//! (checksum, parity, reconstruction) and repaired at once on short-lived scoped threads
//! that end within the step, every block's columns in flight together; with simulated
//! devices one after another, in address order. Their outcomes are then counted in address
//! order, so `issued`, `repaired`, `errors`, the error log and the bookmark are exactly what
//! scanning the same blocks one by one gives, and a step is the unit of resume either way.
//! The lock is released between steps so foreground writes and txg syncs go on. A block
//! listed by the traversal may be freed by such a write before its turn; while the scrub is
//! active, frees are held (`SpaceManager::set_hold_deferred`), so its space is not reused and
//! its bytes stay what the listed block pointer says. Blocks born after the traversal are not
//! scrubbed in this pass: they were just written and verified by nobody but their writer,
//! as in ZFS, whose scrub also covers only blocks born before it started.
//!
//! The queue holds at most [`SCAN_QUEUE_MAX`] blocks (about 150 MiB), so a scrub's memory
//! does not grow with the pool: a traversal keeps the lowest keys after the bookmark (sorting
//! and cutting whenever it holds twice that), and when a round's queue is done with blocks
//! left after it, the next step traverses again from the bookmark (a pool of N blocks costs
//! N / SCAN_QUEUE_MAX traversals of its metadata, which the ARC mostly holds). Blocks born
//! after the first traversal with keys after the bookmark are scrubbed by a later round.
//!
//! # State
//! In memory: [`ScanProgress`] (mirrored in the MOS after every step, so each txg commits
//! the latest bookmark) and the sorted queue with this pass's start time. On disk: the MOS
//! "scan" ZAP (fields below) and "errlog" ZAP. After export/import or a daemon restart a
//! Scanning record is resumed by re-traversing and skipping every block whose key is at or
//! below the bookmark.
//!
//! # Invariants
//! - S1: the queue is sorted by key with no duplicates; the bookmark only grows in a pass.
//! - S2: deferred frees are held exactly while a queue exists (a round's queue: between
//!   rounds nothing is listed, so nothing needs holding).
//! - S3: issued <= to_examine; examined == to_examine once the traversal is done.
//!
//! # Failure model
//! A block none of whose copies verifies is counted in `errors` and recorded in the error
//! log; nothing is rewritten for it. A traversal that cannot read a tree block counts one
//! error for that object set (logged against its root) and scrubs what it could list.
//!
//! A resilver is the same machine with `function` resilver: the traversal keeps only blocks
//! with a copy on a top-level vdev that has a leaf being resilvered, each is read through
//! its vdev (reconstructing as needed) and its part written to those leaves
//! (`Pipeline::resilver_block`), and when the last one is done `replace::resilver_done`
//! marks the leaves complete and detaches the replaced ones. Blocks born after the traversal
//! were written to the new leaves already (they are members of the tree), so none is missed.
//!
//! # Not here
//! Scan rate throttling, aggregation of adjacent blocks into larger leaf reads (ZFS's scan
//! aggregates; each block's columns are one read per leaf), resilver by dirty-time ranges
//! (every live block of the affected vdevs is visited; blocks without a column on a
//! resilvering leaf are not read).
//! The queue is held in memory: about 150 bytes per block, fine for the pools tarn runs
//! today; a larger pool needs ZFS's range-bounded queues.

use std::collections::BTreeSet;

use tarn_base::{Txg, format_size};
use tarn_format::BlockPtr;
use tarn_objects::{BlockContext, visit_object_set_born_after};

use crate::{EngineError, Imported, PoolError};

/// What a scan is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanState {
    /// Running: steps make progress.
    Scanning,
    /// Paused by the administrator; a start resumes it from the bookmark.
    Paused,
    /// Done; the counters say what it found.
    Finished,
    /// Stopped by the administrator before it was done.
    Canceled,
}

impl ScanState {
    fn code(self) -> u64 {
        match self {
            ScanState::Scanning => 1,
            ScanState::Paused => 2,
            ScanState::Finished => 3,
            ScanState::Canceled => 4,
        }
    }

    fn from_code(code: u64) -> Option<ScanState> {
        match code {
            1 => Some(ScanState::Scanning),
            2 => Some(ScanState::Paused),
            3 => Some(ScanState::Finished),
            4 => Some(ScanState::Canceled),
            _ => None,
        }
    }
}

/// What a scan does: verify everything (scrub) or bring leaves being resilvered up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanFunction {
    /// `tarn pool scrub`.
    Scrub,
    /// Started by replace, attach, spare activation or import of a pool with a leaf being
    /// resilvered.
    Resilver,
}

impl ScanFunction {
    fn code(self) -> u64 {
        match self {
            ScanFunction::Scrub => FUNCTION_SCRUB,
            ScanFunction::Resilver => FUNCTION_RESILVER,
        }
    }

    /// `scrub` or `resilver`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ScanFunction::Scrub => "scrub",
            ScanFunction::Resilver => "resilver",
        }
    }
}

/// What a scrub asks for (`tarn pool scrub`, `-p`, `-s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrubAction {
    /// Start a scrub, or resume a paused one.
    Start,
    /// Pause the running scrub.
    Pause,
    /// Cancel the running or paused scrub.
    Cancel,
}

/// The scan record: what the MOS "scan" ZAP holds, and what status reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanProgress {
    /// Scrub or resilver.
    pub function: ScanFunction,
    /// State.
    pub state: ScanState,
    /// Unix seconds when the scrub started.
    pub start_time: u64,
    /// Unix seconds when it finished or was canceled (0 before).
    pub end_time: u64,
    /// Unix seconds when it was paused (0 unless paused).
    pub pause_time: u64,
    /// Last committed txg when it started; blocks born later are not part of it.
    pub start_txg: Txg,
    /// Bytes (allocated size of every copy) of every block listed.
    pub to_examine: u64,
    /// Bytes listed by the traversal so far.
    pub examined: u64,
    /// Bytes read and verified.
    pub issued: u64,
    /// Bytes rewritten (a scrub's repairs; a resilver's bytes written to the new leaves).
    pub repaired: u64,
    /// Blocks found unrecoverable.
    pub errors: u64,
    /// Key (top-level vdev, offset) of the last block done.
    pub bookmark: Option<(u32, u64)>,
    /// A resilver visits only blocks born in this txg or later: what leaves that were out
    /// of service missed (0: every block, for new leaves).
    pub min_birth: Txg,
    /// A resilver: sequential (`replace -s`, copies allocated ranges, see `rebuild`); a
    /// scrub: the verifying scrub that follows one.
    pub sequential: bool,
    /// A sequential resilver: top-level vdev and offset below which every range is copied
    /// (vdevs below it are done). Kept apart from `bookmark`, which a build without
    /// sequential resilver would read as block keys.
    pub rebuilt: Option<(u32, u64)>,
}

impl ScanProgress {
    fn new(function: ScanFunction, start_time: u64, start_txg: Txg) -> ScanProgress {
        ScanProgress {
            function,
            state: ScanState::Scanning,
            start_time,
            end_time: 0,
            pause_time: 0,
            start_txg,
            to_examine: 0,
            examined: 0,
            issued: 0,
            repaired: 0,
            errors: 0,
            bookmark: None,
            min_birth: Txg(0),
            sequential: false,
            rebuilt: None,
        }
    }

    fn fields(&self) -> Vec<(&'static str, u64)> {
        let (has_bookmark, vdev, offset) = match self.bookmark {
            Some((vdev, offset)) => (1, u64::from(vdev), offset),
            None => (0, 0, 0),
        };
        vec![
            ("function", self.function.code()),
            ("state", self.state.code()),
            ("start_time", self.start_time),
            ("end_time", self.end_time),
            ("pause_time", self.pause_time),
            ("start_txg", self.start_txg.0),
            ("to_examine", self.to_examine),
            ("examined", self.examined),
            ("issued", self.issued),
            ("repaired", self.repaired),
            ("errors", self.errors),
            ("has_bookmark", has_bookmark),
            ("bookmark_vdev", vdev),
            ("bookmark_offset", offset),
            ("min_birth", self.min_birth.0),
            ("sequential", u64::from(self.sequential)),
            (
                "rebuilt_vdev",
                self.rebuilt.map_or(u64::MAX, |(v, _)| u64::from(v)),
            ),
            ("rebuilt_offset", self.rebuilt.map_or(0, |(_, o)| o)),
        ]
    }

    fn from_fields(fields: &[(String, u64)]) -> Result<Option<ScanProgress>, EngineError> {
        if fields.is_empty() {
            return Ok(None);
        }
        let get = |name: &str| {
            fields
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| *v)
                .ok_or_else(|| EngineError::Corrupt(format!("scan record has no field '{name}'")))
        };
        let function = match get("function")? {
            FUNCTION_SCRUB => ScanFunction::Scrub,
            FUNCTION_RESILVER => ScanFunction::Resilver,
            _ => {
                return Err(EngineError::Corrupt(
                    "scan record names an unknown function".into(),
                ));
            }
        };
        let state = ScanState::from_code(get("state")?)
            .ok_or_else(|| EngineError::Corrupt("scan record has an unknown state".into()))?;
        let vdev = u32::try_from(get("bookmark_vdev")?)
            .map_err(|_| EngineError::Corrupt("scan bookmark vdev out of range".into()))?;
        let bookmark = (get("has_bookmark")? != 0).then_some((vdev, get("bookmark_offset")?));
        // Fields added with sequential resilver: absent in records of older builds.
        let optional = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        let rebuilt = optional("rebuilt_vdev")
            .and_then(|v| u32::try_from(v).ok())
            .map(|v| (v, optional("rebuilt_offset").unwrap_or(0)));
        let progress = ScanProgress {
            function,
            state,
            start_time: get("start_time")?,
            end_time: get("end_time")?,
            pause_time: get("pause_time")?,
            start_txg: Txg(get("start_txg")?),
            to_examine: get("to_examine")?,
            examined: get("examined")?,
            issued: get("issued")?,
            repaired: get("repaired")?,
            errors: get("errors")?,
            bookmark,
            // Records written before the field existed resilvered everything.
            min_birth: Txg(optional("min_birth").unwrap_or(0)),
            sequential: optional("sequential").is_some_and(|v| v != 0),
            rebuilt,
        };
        if progress.issued > progress.to_examine {
            return Err(EngineError::Corrupt(
                "scan record issued more than it listed".into(),
            ));
        }
        Ok(Some(progress))
    }
}

/// ZFS's `POOL_SCAN_SCRUB`.
const FUNCTION_SCRUB: u64 = 1;
/// ZFS's `POOL_SCAN_RESILVER`.
const FUNCTION_RESILVER: u64 = 2;

/// Where a listed block sits, for the error log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Mos(BlockContext),
    Data(crate::DatasetId, BlockContext),
    SpaceLog,
}

impl Origin {
    /// The error-log key: `mos/<object>/<level>/<blkid>`, `data/<dataset>/<object>/...`,
    /// `spacelog/...`.
    fn key(self, first: (u32, u64)) -> String {
        match self {
            Origin::Mos(c) => format!("mos/{}/{}/{}", c.object.0, c.level, c.blkid),
            Origin::Data(d, c) => {
                format!("data/{}/{}/{}/{}", d.0, c.object.0, c.level, c.blkid)
            }
            Origin::SpaceLog => format!("spacelog/{}/{}", first.0, first.1),
        }
    }
}

/// How `status -v` names an error-log entry: a file by its path (`/tank/data/file` under a
/// mounted dataset, `tank/data:/file` otherwise) when `describe` can name it, else
/// `<dataset>:<object N>`; `<pool>:<dataset N>:<object N>` for a dataset that no longer
/// exists; `<metadata>:<object N>` for the MOS and `<metadata>:<space log>` for the space
/// log.
pub(crate) fn errlog_display(
    pool: &str,
    key: &str,
    describe: &mut dyn FnMut(u64, u64) -> Option<String>,
) -> String {
    let mut parts = key.split('/');
    match (parts.next(), parts.next()) {
        (Some("data"), Some(id)) => {
            let object = parts.next().unwrap_or("?");
            let named = id
                .parse()
                .ok()
                .zip(object.parse().ok())
                .and_then(|(id, object)| describe(id, object));
            named.unwrap_or_else(|| format!("{pool}:<dataset {id}>:<object {object}>"))
        }
        (Some("mos"), Some(object)) => format!("<metadata>:<object {object}>"),
        (Some("spacelog"), _) => "<metadata>:<space log>".to_string(),
        _ => format!("<metadata>:<{key}>"),
    }
}

/// The name of object `object` of dataset `id`: its path when the POSIX layer can find one.
fn describe_object(
    datasets: &mut crate::datasets::Tree,
    reader: &dyn tarn_zio::BlockStore,
    id: u64,
    object: u64,
) -> Option<String> {
    let named = with_fs(datasets, reader, id, |fs| fs.path_of(object).ok().flatten())?;
    Some(match &named.found {
        Some(path) => named.display(path),
        None => format!("{}:<object {object}>", named.dataset),
    })
}

/// The files whose dnodes were in dnode block `blkid` of dataset `id` (the block is lost, so
/// they cannot be named from their own parent links): every path the directory tree gives
/// them, one per name. Empty when none is reachable (or the dataset is not a filesystem).
fn files_of_dnode_block(
    datasets: &mut crate::datasets::Tree,
    reader: &dyn tarn_zio::BlockStore,
    id: u64,
    blkid: u64,
) -> Vec<String> {
    let per_block = tarn_format::objset::DNODES_PER_BLOCK;
    let in_block = move |ino: u64| ino / per_block == blkid;
    let named = with_fs(datasets, reader, id, |fs| fs.paths_naming(&in_block).ok());
    let Some(named) = named else {
        return Vec::new();
    };
    let paths = named.found.iter().flatten();
    paths.map(|(_, path)| named.display(path)).collect()
}

/// What [`with_fs`] found in a dataset, and how to show its paths.
struct Named<T> {
    found: T,
    dataset: String,
    mountpoint: String,
}

impl<T> Named<T> {
    /// `path` (relative to the dataset's root) under its mountpoint, or as `DS:/path`.
    fn display(&self, path: &[u8]) -> String {
        let path = String::from_utf8_lossy(path);
        match self.mountpoint.starts_with('/') {
            true => format!("{}/{path}", self.mountpoint.trim_end_matches('/')),
            false => format!("{}:/{path}", self.dataset),
        }
    }
}

/// Runs `f` on the POSIX view of dataset `id` (`None` when there is no such dataset).
fn with_fs<T>(
    datasets: &mut crate::datasets::Tree,
    reader: &dyn tarn_zio::BlockStore,
    id: u64,
    f: impl FnOnce(&mut tarn_posix::Fs<'_>) -> T,
) -> Option<Named<T>> {
    let id = crate::DatasetId(id);
    if !datasets.contains(id) {
        return None;
    }
    let mountpoint = datasets.effective(id, "mountpoint").0;
    let config = datasets.fs_config(id);
    let node = datasets.node_mut(id);
    let fs_time = tarn_posix::Timespec::default();
    let found = f(&mut tarn_posix::Fs::new(
        &mut node.objset,
        reader,
        fs_time,
        config,
    ));
    Some(Named {
        found,
        dataset: node.name.clone(),
        mountpoint,
    })
}

/// An error-log key of a dataset's block, `data/<dataset>/<object>/<level>/<blkid>`, parsed.
#[derive(Clone, Copy, Debug)]
struct DataKey {
    dataset: u64,
    object: u64,
    level: u64,
    blkid: u64,
}

impl DataKey {
    fn parse(key: &str) -> Option<DataKey> {
        let mut parts = key.strip_prefix("data/")?.split('/');
        let mut next = || parts.next()?.parse().ok();
        Some(DataKey {
            dataset: next()?,
            object: next()?,
            level: next()?,
            blkid: next()?,
        })
    }

    /// A dnode block (object 0, level 0): the block id of the lost dnodes.
    fn dnode_block(self) -> Option<u64> {
        (self.object == 0 && self.level == 0).then_some(self.blkid)
    }

    /// What a scrub records for an object set it could not walk whole: its root context
    /// (object 0, `BlockContext::ROOT_LEVEL`, block 0).
    fn walk_failed(self) -> bool {
        let root = u64::from(BlockContext::ROOT_LEVEL);
        (self.object, self.level, self.blkid) == (0, root, 0)
    }
}

/// A damaged data block of a volume as the byte range it held (`tank/vol:<bytes A-B>`), so
/// an admin knows which part of the block device to restore; `None` for any other block.
fn volume_range(
    datasets: &mut crate::datasets::Tree,
    reader: &dyn tarn_zio::BlockStore,
    key: DataKey,
) -> Option<String> {
    let volume = tarn_dataset::volume::VOLUME_OBJECT;
    let id = crate::DatasetId(key.dataset);
    if key.object != volume.0 || key.level != 0 || !datasets.contains(id) {
        return None;
    }
    let node = datasets.node_mut(id);
    if node.objset.kind() != tarn_objects::ObjsetKind::Volume {
        return None;
    }
    let size = u64::from(
        node.objset
            .object_info(reader, volume)
            .ok()?
            .data_block_size,
    );
    let start = key.blkid.checked_mul(size)?;
    Some(format!(
        "{}:<bytes {start}-{}>",
        node.name,
        start + size - 1
    ))
}

/// One listed block.
#[derive(Clone, Copy, Debug)]
struct Entry {
    key: (u32, u64),
    bp: BlockPtr,
    origin: Origin,
}

impl Entry {
    fn new(bp: &BlockPtr, origin: Origin) -> Option<Entry> {
        let key = bp.copies().map(|dva| (dva.vdev.0, dva.offset)).min()?;
        Some(Entry {
            key,
            bp: *bp,
            origin,
        })
    }

    fn bytes(&self) -> u64 {
        self.bp.copies().map(|dva| dva.asize).sum()
    }
}

/// The sorted work of the current pass.
#[derive(Debug)]
pub(crate) struct ScanQueue {
    entries: Vec<Entry>,
    /// Blocks after the last entry remain: when the queue is done, the next step lists the
    /// next round from the bookmark.
    more: bool,
    next: usize,
    pass_start: u64,
    pass_issued: u64,
}

/// The scrub's state inside an imported pool.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub(crate) progress: Option<ScanProgress>,
    queue: Option<ScanQueue>,
    /// The ranges of a sequential resilver (`rebuild`), instead of `queue`.
    pub(crate) rebuild: Option<crate::rebuild::RebuildQueue>,
    /// Most entries a queue holds ([`SCAN_QUEUE_MAX`] unless a test sets less).
    queue_limit: Option<usize>,
}

impl Scan {
    /// Most entries a queue of this scan holds.
    fn queue_limit(&self) -> usize {
        self.queue_limit.unwrap_or(SCAN_QUEUE_MAX)
    }

    /// Makes later queues hold at most `limit` entries (tests of scans in rounds).
    pub(crate) fn set_queue_limit(&mut self, limit: usize) {
        self.queue_limit = Some(limit);
    }

    /// The running pass: when it started (Unix seconds; a pass starts at a scan's start, its
    /// resume and the pool's import) and the scan's issued bytes then. `None` between passes.
    pub(crate) fn pass(&self) -> Option<(u64, u64)> {
        match (&self.queue, &self.rebuild) {
            (Some(q), _) => Some((q.pass_start, q.pass_issued)),
            (None, Some(r)) => Some(r.pass()),
            (None, None) => None,
        }
    }

    /// Memory the running scan's queue holds: every block pointer it has yet to visit, or
    /// the ranges of a sequential resilver (the whole pool's, until it ends).
    pub(crate) fn memory_bytes(&self) -> u64 {
        let blocks = self
            .queue
            .as_ref()
            .map_or(0, |q| q.entries.capacity() * size_of::<Entry>());
        let ranges = self.rebuild.as_ref().map_or(0, |r| r.memory_bytes());
        (blocks + ranges) as u64
    }

    /// Loads the record of an imported pool.
    pub(crate) fn load(inner: &mut Imported) -> Result<Scan, EngineError> {
        let Imported { pool, mos, .. } = inner;
        let fields = mos.scan_fields(&pool.reader())?;
        Ok(Scan {
            progress: ScanProgress::from_fields(&fields)?,
            queue: None,
            rebuild: None,
            queue_limit: None,
        })
    }

    /// True while a scrub or resilver is running.
    pub(crate) fn scanning(&self) -> bool {
        self.progress
            .is_some_and(|p| p.state == ScanState::Scanning)
    }

    /// True while a resilver is running.
    pub(crate) fn resilvering(&self) -> bool {
        self.progress
            .is_some_and(|p| p.state == ScanState::Scanning && p.function == ScanFunction::Resilver)
    }
}

/// Writes the record into the MOS (committed with the next txg).
pub(crate) fn persist(inner: &mut Imported) -> Result<(), EngineError> {
    let Some(progress) = inner.scan.progress else {
        return Ok(());
    };
    let Imported { pool, mos, .. } = inner;
    mos.set_scan_fields(&pool.reader(), &progress.fields())
}

/// Drops the queue and releases held frees (S2).
fn drop_queue(inner: &mut Imported) {
    inner.scan.queue = None;
    inner.scan.rebuild = None;
    inner.pool.set_hold_deferred(false);
}

/// The check phase of a scrub request: whether `action` is valid now (no side effects).
pub(crate) fn check(inner: &Imported, action: ScrubAction) -> Result<(), EngineError> {
    if inner.pool.readonly() {
        return Err(PoolError::ReadOnly.into());
    }
    if let Some(why) = inner.pool.suspended() {
        return Err(PoolError::Suspended(why.to_string()).into());
    }
    if inner.scan.resilvering() {
        return Err(EngineError::ResilverInProgress);
    }
    let state = inner.scan.progress.map(|p| p.state);
    match action {
        ScrubAction::Start if state == Some(ScanState::Scanning) => {
            Err(EngineError::ScanInProgress)
        }
        ScrubAction::Pause | ScrubAction::Cancel
            if !matches!(state, Some(ScanState::Scanning | ScanState::Paused)) =>
        {
            Err(EngineError::NoActiveScan)
        }
        _ => Ok(()),
    }
}

/// The apply phase: changes the state (after [`check`] passed) and records it in the MOS.
pub(crate) fn apply(
    inner: &mut Imported,
    action: ScrubAction,
    now: u64,
) -> Result<(), EngineError> {
    check(inner, action)?;
    let state = inner.scan.progress.map(|p| p.state);
    match (action, state) {
        (ScrubAction::Start, Some(ScanState::Paused)) => {
            if let Some(progress) = &mut inner.scan.progress {
                progress.state = ScanState::Scanning;
                progress.pause_time = 0;
            }
        }
        (ScrubAction::Start, _) => restart(inner, ScanFunction::Scrub, now),
        (ScrubAction::Pause, Some(ScanState::Paused)) => return Ok(()),
        (ScrubAction::Pause, _) => {
            drop_queue(inner);
            if let Some(progress) = &mut inner.scan.progress {
                progress.state = ScanState::Paused;
                progress.pause_time = now;
            }
        }
        (ScrubAction::Cancel, _) => {
            drop_queue(inner);
            if let Some(progress) = &mut inner.scan.progress {
                progress.state = ScanState::Canceled;
                progress.end_time = now;
                progress.pause_time = 0;
            }
        }
    }
    persist(inner)
}

/// Starts a new scan from the beginning, whatever ran before (a scrub by `online`, a
/// resilver by replace, attach and spare activation).
pub(crate) fn restart(inner: &mut Imported, function: ScanFunction, now: u64) {
    drop_queue(inner);
    inner.scan.progress = Some(ScanProgress::new(function, now, inner.pool.txg()));
}

/// Starts a resilver of the blocks born in `min_birth` or later (what a leaf back from
/// offline missed). A resilver already running keeps its own, wider, window.
pub(crate) fn restart_resilver_from(inner: &mut Imported, now: u64, min_birth: Txg) {
    let running = inner
        .scan
        .progress
        .filter(|p| p.state == ScanState::Scanning && p.function == ScanFunction::Resilver)
        .map(|p| p.min_birth);
    restart(inner, ScanFunction::Resilver, now);
    if let Some(progress) = inner.scan.progress.as_mut() {
        progress.min_birth = running.map_or(min_birth, |m| m.min(min_birth));
    }
}

/// Most entries a scan's queue holds at once: about 150 MiB of block pointers. A pool with
/// more blocks is scanned in rounds (module doc), so a scrub's memory does not grow with the
/// pool.
pub const SCAN_QUEUE_MAX: usize = 1 << 20;

/// The blocks a traversal lists: those after the bookmark that the scan's function wants,
/// the `limit` lowest keys of them kept (S1), with the bytes of all of them.
struct Selection {
    entries: Vec<Entry>,
    limit: usize,
    bookmark: Option<(u32, u64)>,
    /// For a resilver: the top-level vdevs with a leaf being resilvered, and the oldest
    /// birth it needs.
    resilver: Option<(Vec<u32>, Txg)>,
    /// Bytes of every block offered and wanted, kept or not (`to_examine`).
    bytes: u64,
    /// Whether wanted blocks were left out (after the last kept key).
    more: bool,
}

impl Selection {
    fn offer(&mut self, entry: Entry) {
        if self.bookmark.is_some_and(|b| entry.key <= b) {
            return;
        }
        if let Some((tops, min_birth)) = &self.resilver {
            // Only blocks with a copy on a vdev that has a leaf being resilvered, born since
            // the leaves left service (copy-on-write: an older block was on them before).
            if !entry.bp.copies().any(|dva| tops.contains(&dva.vdev.0))
                || entry.bp.birth < *min_birth
            {
                return;
            }
        }
        self.bytes += entry.bytes();
        self.entries.push(entry);
        if self.entries.len() >= 2 * self.limit {
            self.compact();
        }
    }

    /// Sorts by key, drops duplicates (a block listed twice, or named by clones: same
    /// DVAs and checksum, another birth, tarn-space `brt`) and keeps the lowest `limit`.
    fn compact(&mut self) {
        self.entries.sort_unstable_by_key(|e| e.key);
        self.entries.dedup_by(|a, b| {
            a.key == b.key && a.bp.dvas == b.bp.dvas && a.bp.checksum == b.bp.checksum
        });
        if self.entries.len() > self.limit {
            self.entries.truncate(self.limit);
            self.more = true;
        }
    }
}

/// Lists the blocks of the committed state (module doc) after the bookmark, sorted by key:
/// at most `limit` of them, the lowest keys. Returns the selection and the object sets whose
/// traversal failed.
fn traverse(inner: &Imported, progress: &ScanProgress, limit: usize) -> (Selection, Vec<Origin>) {
    let pool = &inner.pool;
    let resilver = (progress.function == ScanFunction::Resilver).then(|| {
        let tops = pool
            .tops()
            .iter()
            .filter(|t| t.needs_resilver())
            .map(|t| t.id().0)
            .collect();
        (tops, progress.min_birth)
    });
    let mut selection = Selection {
        entries: Vec::new(),
        limit: limit.max(1),
        bookmark: progress.bookmark,
        resilver,
        bytes: 0,
        more: false,
    };
    let mut failed = Vec::new();
    let Some(ub) = pool.last_uberblock().copied() else {
        return (selection, failed);
    };
    let reader = pool.reader();
    let root_context = BlockContext {
        object: tarn_base::ObjectId(0),
        level: BlockContext::ROOT_LEVEL,
        blkid: 0,
    };
    let mut sets: Vec<(BlockPtr, Option<crate::DatasetId>, Option<Txg>)> =
        vec![(ub.root, None, None)];
    for id in inner.datasets.all() {
        // Snapshots share blocks with the head and each other: each is walked only for the
        // blocks born after the previous snapshot (or a clone's origin), the head for those
        // born after the latest snapshot: every block is listed once, the walk costs what
        // is unique.
        let node = inner.datasets.node(id);
        let mut after = node.origin.map(|o| o.txg);
        for snapshot in &node.snapshots {
            sets.push((snapshot.header.objset, Some(id), after));
            after = Some(snapshot.header.txg);
        }
        sets.push((node.objset.root(), Some(id), after));
    }
    for (root, dataset, after) in sets {
        let origin = |context| match dataset {
            None => Origin::Mos(context),
            Some(id) => Origin::Data(id, context),
        };
        let mut visit = |bp: &BlockPtr, context: BlockContext| {
            if let Some(entry) = Entry::new(bp, origin(context)) {
                selection.offer(entry);
            }
        };
        if visit_object_set_born_after(&reader, &root, after, &mut visit).is_err() {
            failed.push(origin(root_context));
        }
    }
    for bp in pool.space().chain() {
        if let Some(entry) = Entry::new(bp, Origin::SpaceLog) {
            selection.offer(entry);
        }
    }
    selection.compact();
    assert!(
        selection.entries.windows(2).all(|w| w[0].key < w[1].key),
        "S1: two listed blocks share a DVA"
    );
    (selection, failed)
}

/// Builds the queue of this pass (first step after start, resume or import).
fn build_queue(inner: &mut Imported, now: u64) -> Result<(), EngineError> {
    let Some(mut progress) = inner.scan.progress else {
        return Ok(());
    };
    let (selection, failed) = traverse(inner, &progress, inner.scan.queue_limit());
    let Selection {
        entries,
        bytes: remaining,
        more,
        ..
    } = selection;
    progress.to_examine = progress.issued + remaining;
    progress.examined = progress.to_examine;
    for origin in failed {
        progress.errors += 1;
        let Imported { pool, mos, .. } = &mut *inner;
        mos.errlog_add(&pool.reader(), &origin.key((0, 0)), progress.start_txg)?;
    }
    inner.scan.progress = Some(progress);
    inner.scan.queue = Some(ScanQueue {
        entries,
        more,
        next: 0,
        pass_start: now,
        pass_issued: progress.issued,
    });
    inner.pool.set_hold_deferred(true);
    Ok(())
}

/// One batch: scrubs listed blocks until `max_bytes` were issued (at least one block), under
/// the pool lock the caller holds. Returns the progress after it.
pub(crate) fn step(
    inner: &mut Imported,
    max_bytes: u64,
    now: u64,
) -> Result<Option<ScanProgress>, EngineError> {
    if !inner.scan.scanning() {
        return Ok(inner.scan.progress);
    }
    if let Some(why) = inner.pool.suspended() {
        return Err(PoolError::Suspended(why.to_string()).into());
    }
    if inner.scan.progress.is_some_and(|p| p.sequential) && inner.scan.resilvering() {
        return crate::rebuild::step(inner, max_bytes, now);
    }
    if inner.scan.queue.is_none() {
        build_queue(inner, now)?;
    }
    let Some(mut progress) = inner.scan.progress else {
        return Ok(None);
    };
    let (found, finished) = {
        let Imported { pool, scan, .. } = &mut *inner;
        let queue = scan
            .queue
            .as_mut()
            .expect("S2: a scanning pool has a queue after build_queue");
        let found = scan_batch(pool, queue, &mut progress, max_bytes.max(1));
        let done = queue.next == queue.entries.len();
        (found, done.then_some(queue.more))
    };
    // A round done with blocks after it: the next step lists them (the hold of frees ends
    // with this round's queue; the next traversal sees only live blocks).
    let round_done = finished == Some(true);
    let finished = finished == Some(false);
    if round_done {
        drop_queue(inner);
    }
    assert!(
        progress.issued <= progress.to_examine,
        "S3: issued {} > listed {}",
        progress.issued,
        progress.to_examine
    );
    record_found(inner, &found, progress.start_txg, finished)?;
    if finished {
        progress.state = ScanState::Finished;
        progress.end_time = now;
        drop_queue(inner);
        if progress.function == ScanFunction::Resilver {
            crate::replace::resilver_done(inner);
        }
    }
    inner.scan.progress = Some(progress);
    persist(inner)?;
    if finished {
        inner.sync()?;
    }
    Ok(Some(progress))
}

/// Scans the next blocks of `queue` until `max_bytes` were issued (at least one), advancing
/// the queue and `progress`; returns the error-log keys of the blocks found lost. The batch's
/// blocks are scrubbed together (several in flight, verified on several cores when the
/// devices allow it: `Pipeline::scan_blocks`); their outcomes are taken in address order, so
/// counters, error log and bookmark are exactly those of one block after another.
fn scan_batch(
    pool: &tarn_pool::Pool,
    queue: &mut ScanQueue,
    progress: &mut ScanProgress,
    max_bytes: u64,
) -> Vec<String> {
    prefetch(pool, &queue.entries[queue.next..], 2 * max_bytes);
    let batch = batch_len(&queue.entries[queue.next..], max_bytes);
    let bps: Vec<BlockPtr> = queue.entries[queue.next..queue.next + batch]
        .iter()
        .map(|entry| entry.bp)
        .collect();
    let resilver = progress.function == ScanFunction::Resilver;
    let outcomes = pool.pipeline().scan_blocks(&bps, resilver);
    assert_eq!(outcomes.len(), batch, "one outcome per block of the batch");
    let mut found = Vec::new();
    for outcome in outcomes {
        let entry = queue.entries[queue.next];
        if let Some(lost) = account(&entry, outcome, progress) {
            found.push(lost);
        }
        assert!(
            progress.bookmark.is_none_or(|b| b < entry.key),
            "S1: bookmark moves forward"
        );
        progress.bookmark = Some(entry.key);
        progress.issued += entry.bytes();
        queue.next += 1;
    }
    found
}

/// Announces the address range of the next `budget` bytes of listed blocks (by their first
/// copy) to each top-level vdev, so every leaf reads ahead in parallel
/// (`TopVdev::prefetch`); this batch and the next one, so reading overlaps verifying.
fn prefetch(pool: &tarn_pool::Pool, entries: &[Entry], budget: u64) {
    let mut spans: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
    let mut bytes = 0;
    for entry in entries.iter().take_while(|e| {
        let more = bytes < budget;
        bytes += e.bytes();
        more
    }) {
        let end = entry.key.1 + entry.bp.copies().next().map_or(0, |dva| dva.asize);
        let span = spans.entry(entry.key.0).or_insert((entry.key.1, end));
        span.1 = span.1.max(end);
    }
    for (vdev, (start, end)) in spans {
        if let Some(top) = pool.tops().iter().find(|t| t.id().0 == vdev) {
            top.prefetch(start, end - start);
        }
    }
}

/// How many of `entries` one step scans: blocks until `max_bytes` are reached, at least one
/// (the same blocks a loop checking `max_bytes` before each block would take).
fn batch_len(entries: &[Entry], max_bytes: u64) -> usize {
    let mut bytes = 0u64;
    let mut count = 0;
    for entry in entries {
        if bytes >= max_bytes {
            break;
        }
        bytes += entry.bytes();
        count += 1;
    }
    assert!(
        count > 0 || entries.is_empty(),
        "a step takes at least one block"
    );
    count
}

/// Counts the outcome of scrubbing or resilvering one listed block; returns its error-log
/// key when it is lost.
fn account(
    entry: &Entry,
    outcome: Result<tarn_zio::ScrubOutcome, tarn_zio::ZioError>,
    progress: &mut ScanProgress,
) -> Option<String> {
    match outcome {
        Ok(outcome) if progress.function == ScanFunction::Resilver => {
            progress.repaired += outcome.resilvered_bytes;
            None
        }
        Ok(outcome) => {
            progress.repaired += outcome.repaired_bytes;
            None
        }
        Err(_) => {
            progress.errors += 1;
            Some(entry.origin.key(entry.key))
        }
    }
}

/// Logs the blocks found unrecoverable; when the scrub finished, drops entries it did not
/// find again.
fn record_found(
    inner: &mut Imported,
    found: &[String],
    start_txg: Txg,
    finished: bool,
) -> Result<(), EngineError> {
    let Imported { pool, mos, .. } = inner;
    for key in found {
        mos.errlog_add(&pool.reader(), key, start_txg)?;
    }
    if finished {
        mos.errlog_prune(&pool.reader(), start_txg)?;
    }
    Ok(())
}

/// `zpool status`'s scan line (lines separated by `\n`; the CLI indents the continuation).
/// A sequential resilver names its top-level vdev, `rebuilding`, as ZFS does (`resilver
/// (draid2:8d:90c:2s-0) in progress since ...`).
pub(crate) fn scan_text(scan: &Scan, now: u64, rebuilding: Option<&str>) -> Option<String> {
    let p = scan.progress?;
    let note = rebuild_note(&p, rebuilding);
    let label = label(&p, &note);
    let percent = if p.to_examine == 0 {
        0.0
    } else {
        p.issued as f64 * 100.0 / p.to_examine as f64
    };
    let text = match p.state {
        ScanState::Scanning => {
            let (pass_start, pass_issued) = scan.pass().unwrap_or((p.start_time, 0));
            let elapsed = now.saturating_sub(pass_start).max(1);
            let issued_rate = (p.issued - pass_issued.min(p.issued)) / elapsed;
            let scanned_rate = p.examined.saturating_sub(pass_issued) / elapsed;
            let remaining = p.to_examine - p.issued;
            let to_go = remaining.checked_div(issued_rate).map_or_else(
                || "no estimated completion time".to_string(),
                |secs| format!("{} to go", duration(secs)),
            );
            format!(
                "{} in progress since {}\n{} scanned at {}/s, {} issued at {}/s, {} total\n\
                 {} {}, {percent:.2}% done, {to_go}",
                label,
                ctime(p.start_time),
                format_size(p.examined),
                format_size(scanned_rate),
                format_size(p.issued),
                format_size(issued_rate),
                format_size(p.to_examine),
                format_size(p.repaired),
                repaired_word(p.function),
            )
        }
        ScanState::Paused => format!(
            "scrub paused since {}\nscrub started on {}\n{} scanned, {} issued, {} total\n\
             {} repaired, {percent:.2}% done",
            ctime(p.pause_time),
            ctime(p.start_time),
            format_size(p.examined),
            format_size(p.issued),
            format_size(p.to_examine),
            format_size(p.repaired),
        ),
        ScanState::Finished if p.function == ScanFunction::Resilver => format!(
            "resilvered{note} {} in {} with {} errors on {}",
            format_size(p.repaired),
            duration(p.end_time.saturating_sub(p.start_time)),
            p.errors,
            ctime(p.end_time)
        ),
        ScanState::Finished => format!(
            "{} repaired {} in {} with {} errors on {}",
            label,
            format_size(p.repaired),
            duration(p.end_time.saturating_sub(p.start_time)),
            p.errors,
            ctime(p.end_time)
        ),
        ScanState::Canceled => format!("scrub canceled on {}", ctime(p.end_time)),
    };
    Some(text)
}

/// The name of the top-level vdev a sequential resilver copies (or last copied): where its
/// cursor is, or else the first vdev with a member being resilvered.
pub(crate) fn rebuilding_vdev(inner: &Imported) -> Option<String> {
    let progress = inner.scan.progress.filter(|p| p.sequential)?;
    let tops = inner.pool.tops();
    let top = match progress.rebuilt {
        Some((vdev, _)) => tops.get(vdev as usize)?,
        None => tops.iter().find(|t| t.needs_resilver())?,
    };
    Some(top.layout().display_name(top.width(), top.id().0))
}

/// What follows `resilver` (or `resilvered`) in a sequential resilver's scan line: the
/// top-level vdev it copies, ` (VDEV)` (` (sequential)` while that is unknown); nothing for
/// any other scan.
fn rebuild_note(p: &ScanProgress, rebuilding: Option<&str>) -> String {
    match (p.function, p.sequential) {
        (ScanFunction::Resilver, true) => format!(" ({})", rebuilding.unwrap_or("sequential")),
        _ => String::new(),
    }
}

/// The scan's name in status: `scrub`, `resilver` plus its `note` (see [`rebuild_note`]),
/// and `scrub (after a sequential resilver)`.
fn label(p: &ScanProgress, note: &str) -> String {
    match (p.function, p.sequential) {
        (ScanFunction::Scrub, false) => "scrub".into(),
        (ScanFunction::Scrub, true) => "scrub (after a sequential resilver)".into(),
        (ScanFunction::Resilver, _) => format!("resilver{note}"),
    }
}

fn repaired_word(function: ScanFunction) -> &'static str {
    match function {
        ScanFunction::Scrub => "repaired",
        ScanFunction::Resilver => "resilvered",
    }
}

/// Unique display names of the error log's entries, sorted.
pub(crate) fn error_names(
    inner: &mut Imported,
    pool_name: &str,
) -> Result<Vec<String>, EngineError> {
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    let reader = pool.reader();
    let mut names = BTreeSet::new();
    let mut walk_failed = Vec::new();
    let mut explained = BTreeSet::new();
    for (key, _) in mos.errlog(&reader)? {
        if let Some(data) = DataKey::parse(&key) {
            // A lost dnode block: the files it held, found through the directories (ZFS
            // can only print `<0x0>` here).
            if let Some(blkid) = data.dnode_block() {
                let files = files_of_dnode_block(datasets, &reader, data.dataset, blkid);
                if !files.is_empty() {
                    names.extend(files);
                    explained.insert(data.dataset);
                    continue;
                }
            }
            if let Some(range) = volume_range(datasets, &reader, data) {
                names.insert(range);
                continue;
            }
            if data.walk_failed() {
                let id = crate::DatasetId(data.dataset);
                if datasets.contains(id) && datasets.check_available(id).is_err() {
                    let name = &datasets.node(id).name;
                    names.insert(format!("{name}:<object set: dataset unavailable>"));
                    explained.insert(data.dataset);
                } else {
                    walk_failed.push((data.dataset, key));
                }
                continue;
            }
        }
        let mut describe = |id, object| describe_object(datasets, &reader, id, object);
        names.insert(errlog_display(pool_name, &key, &mut describe));
    }
    // A scrub whose walk of a dataset stopped at a lost metadata block logs the dataset as
    // well; the files named above already say what was lost there.
    for (dataset, key) in walk_failed {
        if !explained.contains(&dataset) {
            let mut describe = |id, object| describe_object(datasets, &reader, id, object);
            names.insert(errlog_display(pool_name, &key, &mut describe));
        }
    }
    Ok(names.into_iter().collect())
}

/// `HH:MM:SS`, with `N days ` in front past a day (ZFS's scan durations).
pub(crate) fn duration(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let clock = format!(
        "{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    if days > 0 {
        format!("{days} days {clock}")
    } else {
        clock
    }
}

/// C's `ctime` layout in UTC without the newline: `Sun Nov 22 14:30:00 2026`.
pub(crate) fn ctime(unix: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix / 86_400;
    let rest = unix % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{} {} {day:>2} {:02}:{:02}:{:02} {year}",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctime_matches_c() {
        assert_eq!(ctime(0), "Thu Jan  1 00:00:00 1970");
        assert_eq!(ctime(1_700_000_000), "Tue Nov 14 22:13:20 2023");
        assert_eq!(ctime(951_782_400), "Tue Feb 29 00:00:00 2000");
        assert_eq!(ctime(1_795_357_800), "Sun Nov 22 14:30:00 2026");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(3), "00:00:03");
        assert_eq!(duration(3723), "01:02:03");
        assert_eq!(duration(2 * 86_400 + 5), "2 days 00:00:05");
    }

    #[test]
    fn record_round_trips_through_its_fields() {
        let mut progress = ScanProgress::new(ScanFunction::Resilver, 100, Txg(7));
        progress.bookmark = Some((2, 4096));
        progress.to_examine = 10;
        progress.issued = 5;
        let fields: Vec<(String, u64)> = progress
            .fields()
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect();
        assert_eq!(ScanProgress::from_fields(&fields).unwrap(), Some(progress));
        assert_eq!(ScanProgress::from_fields(&[]).unwrap(), None);
        let mut bad = fields.clone();
        bad.retain(|(n, _)| n != "state");
        assert!(ScanProgress::from_fields(&bad).is_err());
    }

    fn scan(state: ScanState) -> Scan {
        let progress = ScanProgress {
            function: ScanFunction::Scrub,
            state,
            start_time: 1_795_357_800,
            end_time: 1_795_357_803,
            pause_time: 1_795_357_801,
            start_txg: Txg(5),
            to_examine: 5 << 30,
            examined: 5 << 30,
            issued: (11 << 30) / 10,
            repaired: 0,
            errors: 0,
            bookmark: Some((0, 1)),
            min_birth: Txg(0),
            sequential: false,
            rebuilt: None,
        };
        Scan {
            progress: Some(progress),
            queue: None,
            rebuild: None,
            queue_limit: None,
        }
    }

    #[test]
    fn scan_lines_in_zfs_layout() {
        assert_eq!(
            scan_text(&scan(ScanState::Finished), 0, None).unwrap(),
            "scrub repaired 0B in 00:00:03 with 0 errors on Sun Nov 22 14:30:03 2026"
        );
        assert_eq!(
            scan_text(&scan(ScanState::Canceled), 0, None).unwrap(),
            "scrub canceled on Sun Nov 22 14:30:03 2026"
        );
        assert_eq!(
            scan_text(&scan(ScanState::Paused), 0, None).unwrap(),
            "scrub paused since Sun Nov 22 14:30:01 2026\nscrub started on Sun Nov 22 14:30:00 \
             2026\n5G scanned, 1.10G issued, 5G total\n0B repaired, 22.00% done"
        );
        assert_eq!(
            scan_text(&scan(ScanState::Scanning), 1_795_357_810, None).unwrap(),
            "scrub in progress since Sun Nov 22 14:30:00 2026\n5G scanned at 512M/s, 1.10G \
             issued at 113M/s, 5G total\n0B repaired, 22.00% done, 00:00:35 to go"
        );
        assert_eq!(scan_text(&Scan::default(), 0, None), None);
    }

    #[test]
    fn errlog_names() {
        let mut names = |id: u64, object: u64| (id == 4).then(|| format!("/tank/file{object}"));
        assert_eq!(
            errlog_display("tank", "data/4/5/0/12", &mut names),
            "/tank/file5"
        );
        assert_eq!(
            errlog_display("tank", "data/9/5/0/12", &mut names),
            "tank:<dataset 9>:<object 5>"
        );
        assert_eq!(
            errlog_display("tank", "mos/3/1/0", &mut names),
            "<metadata>:<object 3>"
        );
        assert_eq!(
            errlog_display("tank", "spacelog/0/4096", &mut names),
            "<metadata>:<space log>"
        );
    }
}
