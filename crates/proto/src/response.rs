//! Replies from the daemon: progress lines, the final response, and the cache file entries.

use serde::{Deserialize, Serialize};

use crate::request::VdevRole;

/// One line the daemon sends: zero or more `Progress` lines, then exactly one `Response`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerLine {
    /// Progress of long work; the request is still running.
    Progress(Progress),
    /// The final answer to the request.
    Response(Response),
    /// The request carries a stream (`send`, `receive`): the client is to pass its stdout
    /// or stdin now, as one byte with the descriptor attached (SCM_RIGHTS).
    StreamWanted,
}

/// Progress of long work (scrub with wait, resilver, send, receive).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// What is being done, as the CLI shows it (`scrub`, `resilver`).
    pub operation: String,
    /// Units done so far (bytes unless `operation` says otherwise).
    pub done: u64,
    /// Units in total; 0 when not known yet (or at all: the receive of a stream that does
    /// not say its size).
    pub total: u64,
}

/// The final answer to one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    /// The request succeeded; the payload carries its data.
    Ok(ReplyPayload),
    /// The request was refused or failed; nothing was changed (STYLE.md §6).
    Error(ErrorReply),
}

impl Response {
    /// An error response with just a message.
    #[must_use]
    pub fn error(message: impl Into<String>) -> Response {
        Response::Error(ErrorReply {
            message: message.into(),
            verb: None,
            object: None,
        })
    }
}

/// Why a request was refused. The CLI prints `cannot <verb> '<object>': <message>`; `verb`
/// and `object` default to what the command names (e.g. `create` and the pool name) and are
/// set here only when the failing object is another one (a property, a device, one pool of
/// several).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// What was wrong and, where it helps, what is valid: lowercase, one line, no trailing
    /// period.
    pub message: String,
    /// Overrides the verb of the CLI's message (`open` for a missing pool in `list`).
    #[serde(default)]
    pub verb: Option<String>,
    /// Overrides the object of the CLI's message.
    #[serde(default)]
    pub object: Option<String>,
}

/// Typed data of a successful reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReplyPayload {
    /// Success without data.
    Unit,
    /// `destroy [-n] DS@SNAP...`: the snapshots destroyed (or that would be) and the bytes
    /// reclaimed.
    SnapshotsDestroyed {
        /// Full names.
        names: Vec<String>,
        /// Bytes freed (or that would be).
        reclaimed: u64,
    },
    /// `send`: each substream sent as (source, snapshot) full names (source empty for a
    /// full stream), and the stream's bytes.
    Sent {
        /// (source, snapshot) per substream.
        streams: Vec<(String, String)>,
        /// The bytes of each substream.
        #[serde(default)]
        sizes: Vec<u64>,
        /// Stream bytes written (or, with `-n`, that would be).
        bytes: u64,
    },
    /// `receive`: the snapshots received, in order, and the stream's bytes.
    Received {
        /// Full names.
        snapshots: Vec<String>,
        /// Stream bytes read.
        bytes: u64,
        /// `receive -R -F`: what was destroyed because the sender no longer has it (with
        /// `-n`: would be), full names.
        #[serde(default)]
        destroyed: Vec<String>,
        /// `receive -R`: snapshots renamed as the sender renamed them (old, new).
        #[serde(default)]
        renamed: Vec<(String, String)>,
        /// `receive -R`: snapshots whose substreams were skipped because the destination
        /// has them already (by GUID), full names.
        #[serde(default)]
        skipped: Vec<String>,
    },
    /// `receive -c`: what a corrective receive checked and healed.
    Corrected {
        /// The snapshot (full name).
        snapshot: String,
        /// Blocks of the snapshot the stream's records were checked against.
        checked: u64,
        /// Blocks healed from the stream (`object O offset X`).
        healed: Vec<String>,
        /// Damaged blocks the stream did not heal, each with why.
        unhealed: Vec<String>,
        /// Stream bytes read.
        bytes: u64,
    },
    /// Answer to `Ping`.
    Pong(PongInfo),
    /// `pool create -n`: the layout that would be created.
    Layout(PoolLayout),
    /// `pool list`.
    PoolList(Vec<PoolListRow>),
    /// `pool status`.
    PoolStatus(Vec<PoolStatusInfo>),
    /// `pool get`.
    Properties(Vec<PropertyRow>),
    /// `pool import` without a pool.
    Importable(Vec<ImportablePool>),
    /// `pool import --list-txgs`.
    Txgs(Vec<TxgRow>),
    /// `pool import` that rewound (`-F`, `-X`, `-T`) or previewed (`-n`): what it opened.
    Imported(ImportInfo),
    /// `pool history`.
    History(Vec<HistoryPool>),
    /// Success with lines to show the admin (`pool online` starting a scrub).
    Notice(Vec<String>),
    /// `tarn list` and `tarn get`.
    Datasets(Vec<DatasetRow>),
    /// `tarn holds`.
    Holds(Vec<HoldRow>),
    /// `tarn diff`: one row per change.
    Diff(Vec<DiffRow>),
    /// `tarn nbd`: the volumes served over NBD.
    NbdExports(Vec<NbdExportRow>),
    /// `tarn mount` without arguments: what is mounted where.
    Mounts(Vec<MountRow>),
    /// `tarn userspace` and its kin.
    Userspace(Vec<UserspaceRow>),
    /// `tarn project`.
    Projects(Vec<ProjectRow>),
    /// `tarn checksum`: one file.
    Checksum(ChecksumRow),
    /// `pool events`.
    Events(Vec<EventRow>),
    /// `pool iostat`: one report per pool.
    Iostat(Vec<IostatPool>),
    /// `tarn memory`.
    Memory(Box<MemoryInfo>),
}

/// The daemon's memory (`tarn memory`): the process's RSS and, counted where it is held,
/// every category of it, in bytes. `other` is what the categories leave unexplained.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryInfo {
    /// Resident set of the daemon (`VmRSS`).
    pub rss: u64,
    /// The ARC: cached file and volume data (level-0 data blocks).
    pub arc_data: u64,
    /// The ARC: cached metadata (indirect blocks, dnodes, directories, the MOS).
    pub arc_metadata: u64,
    /// The ARC: what its entries cost beyond their bytes (index, buffer slack).
    pub arc_headers: u64,
    /// Dirty data of the pools' open txgs.
    pub dirty: u64,
    /// Blocks of txgs written and not yet committed.
    pub syncing: u64,
    /// Intent-log records waiting for a commit.
    pub intent_log: u64,
    /// Indexes of the cache devices (L2ARC headers).
    pub l2arc_headers: u64,
    /// Queues of running scrubs and resilvers (block pointers still to visit).
    #[serde(default)]
    pub scan_queue: u64,
    /// Request buffers of the FUSE session threads.
    pub fuse_buffers: u64,
    /// Record buffers made resident ahead of writes (tarn-base `stock`).
    #[serde(default)]
    pub buffer_stock: u64,
    /// Memory the allocator holds that nothing uses (freed pages not yet returned, its own
    /// metadata), measured: the RSS its free pages took with them when the report gave
    /// them back, plus its resident bytes over those allocated after.
    pub allocator_free: u64,
    /// The program's file-backed pages (the binary and libraries mapped).
    pub program: u64,
    /// Stacks of the daemon's threads (resident part, from /proc/self/smaps).
    pub stacks: u64,
    /// RSS less every category above (the rest of the heap: object sets, dataset trees,
    /// connections; negative when a category overcounts).
    pub other: i64,
    /// The bound the daemon keeps RSS under: `arc_max + dirty_max + overhead`.
    pub bound: u64,
    /// The fixed part of the bound (the program, stacks, FUSE buffers, the buffer stock,
    /// in-memory pool state).
    pub overhead: u64,
    /// The most dirty and kept data the imported pools hold together.
    pub dirty_max: u64,
    /// ARC: bytes it holds now (data + metadata + headers).
    pub arc_size: u64,
    /// ARC: the size it may grow to now (below `arc_max` while memory is short).
    pub arc_target: u64,
    /// ARC: the part of `arc_target` lent to the open and syncing txgs' dirty data (the
    /// ARC holds at most `arc_target` less this).
    #[serde(default)]
    pub arc_lent: u64,
    /// ARC: floor under memory pressure.
    pub arc_min: u64,
    /// ARC: upper limit.
    pub arc_max: u64,
    /// ARC: blocks held.
    pub arc_entries: u64,
    /// ARC: lookups answered from memory since the daemon started.
    pub arc_hits: u64,
    /// ARC: lookups that went to the pool.
    pub arc_misses: u64,
    /// ARC: entries evicted to make room.
    pub arc_evictions: u64,
    /// Bytes the program has allocated from the allocator (its heap in use).
    pub heap_allocated: u64,
    /// `MemAvailable` of the machine (what the ARC's target follows).
    pub mem_available: u64,
    /// `MemTotal` of the machine.
    pub mem_total: u64,
    /// Threads of the daemon.
    pub threads: u64,
}

/// One pool's running I/O totals (`pool iostat`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IostatPool {
    /// Pool name.
    pub name: String,
    /// The daemon clock's monotonic time of the report, in nanoseconds (rates divide by the
    /// difference between two reports).
    pub time_ns: u64,
    /// The same clock when the pool was imported: the first report's rates are the totals
    /// over `time_ns - imported_ns`, as `zpool iostat`'s first report covers the time since
    /// boot.
    #[serde(default)]
    pub imported_ns: u64,
    /// The pool row; its children are the top-level vdevs, theirs the devices.
    pub root: IostatRow,
}

/// One row of `pool iostat`: totals since import, queues now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IostatRow {
    /// Pool name, `raidz2-0`, `mirror-1`, `spare-2` or a device path.
    pub name: String,
    /// Allocated bytes (pool and top-level vdevs only).
    pub alloc: Option<u64>,
    /// Free bytes (pool and top-level vdevs only).
    pub free: Option<u64>,
    /// Reads issued.
    pub read_ops: u64,
    /// Writes issued.
    pub write_ops: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Summed read latency in nanoseconds.
    pub read_wait_ns: u64,
    /// Summed write latency in nanoseconds.
    pub write_wait_ns: u64,
    /// Latency histograms by class (`iostat -l` averages, `-w`).
    #[serde(default)]
    pub waits: IostatWaits,
    /// Reads per request size: 512 B, 1K, ... 16M (`iostat -r`).
    #[serde(default)]
    pub read_sizes: Vec<u64>,
    /// Writes per request size.
    #[serde(default)]
    pub write_sizes: Vec<u64>,
    /// Reads waiting for a write-behind queue to drain now.
    #[serde(default)]
    pub reads_pending: u64,
    /// Reads being serviced now.
    pub reads_active: u64,
    /// Writes being serviced now.
    pub writes_active: u64,
    /// Writes waiting in a write-behind queue now.
    pub writes_pending: u64,
    /// Rows below.
    pub children: Vec<IostatRow>,
}

/// Buckets of an [`IostatWait`] histogram (the engine's `LATENCY_BUCKETS`).
pub const IOSTAT_LATENCY_BUCKETS: usize = 37;
/// Buckets of a request-size histogram: 512 B, 1K, ... 16M (the engine's `SIZE_BUCKETS`).
pub const IOSTAT_SIZE_BUCKETS: usize = 16;

/// One latency class of one row: accesses, summed latency, and the histogram (bucket `b`
/// counts latencies in `[2^b, 2^(b+1))` ns, 37 buckets, the last open-ended).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IostatWait {
    /// Summed latency in nanoseconds.
    pub total_ns: u64,
    /// Accesses per bucket.
    pub histogram: Vec<u64>,
}

/// The latency classes of `pool iostat -l`/`-w` (what each means in tarn: the engine's
/// `iostat` module docs and docs/PERFORMANCE.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IostatWaits {
    /// Reads, start to end.
    pub total_read: IostatWait,
    /// Writes, acknowledged to applied.
    pub total_write: IostatWait,
    /// Reads in the device.
    pub disk_read: IostatWait,
    /// Writes in the device.
    pub disk_write: IostatWait,
    /// Reads waiting for queued writes.
    pub syncq_read: IostatWait,
    /// Writes waiting in the write-behind queue.
    pub asyncq_write: IostatWait,
}

/// One event of `pool events` (ZFS's class names).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRow {
    /// Sequence number.
    pub eid: u64,
    /// Unix seconds.
    pub time: u64,
    /// Class (`ereport.fs.zfs.checksum`, `sysevent.fs.zfs.resilver_start`, ...).
    pub class: String,
    /// Pool name.
    pub pool: String,
    /// GUID of the vdev concerned (0 for pool-wide events).
    pub vdev_guid: u64,
    /// Path of the leaf concerned (empty for pool-wide events).
    pub vdev_path: String,
    /// Further facts, name and value.
    pub payload: Vec<(String, String)>,
}

/// One owner's usage and quotas in a dataset (`tarn userspace`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserspaceRow {
    /// The uid, gid or project id (the CLI prints names).
    pub id: u32,
    /// Bytes charged.
    pub used: u64,
    /// Byte quota, if any.
    pub quota: Option<u64>,
    /// Inodes owned.
    pub objused: u64,
    /// Inode quota, if any.
    pub objquota: Option<u64>,
}

/// One file of `tarn project`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectRow {
    /// Its path as given (and below it with `-r`).
    pub path: String,
    /// Project id.
    pub id: u32,
    /// A directory whose new entries inherit the id.
    pub inherit: bool,
}

/// One file's checksum (`tarn checksum`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecksumRow {
    /// The path asked.
    pub path: String,
    /// `adler32`, `md5`, `sha256` or `crc32c`.
    pub algorithm: String,
    /// The checksum in lowercase hex (8 digits for adler32 and crc32c).
    pub value: String,
    /// The file's size in bytes.
    pub size: u64,
    /// Answered from the cache kept with the file (no data read).
    pub cached: bool,
    /// The value is now cached (not on a read-only dataset or a full pool).
    pub stored: bool,
    /// File bytes read for this answer (0 when cached).
    pub bytes_read: u64,
    /// The user attribute the value was also written to (`--xattr`).
    #[serde(default)]
    pub xattr: Option<String>,
}

/// One volume served over NBD (`tarn nbd`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NbdExportRow {
    /// Pool name.
    pub pool: String,
    /// Volume (export) name.
    pub volume: String,
    /// The listener's Unix socket.
    pub socket: String,
    /// Open connections.
    pub connections: u64,
    /// The pool's TCP listener as a URI base (`nbd://127.0.0.1:10809`, `nbds://` when TLS
    /// is required), when it has one (absent from older daemons).
    #[serde(default)]
    pub tcp: Option<String>,
}

/// One change of `tarn diff`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffRow {
    /// `M`, `+`, `-` or `R`.
    pub change: String,
    /// The file type character (`F`, `/`, `@`, `|`, `=`, `C`, `B`).
    pub file: String,
    /// The path (a rename's old one), escaped as ZFS does.
    pub path: String,
    /// A rename's new path.
    pub new_path: Option<String>,
    /// The change time as `SECONDS.NANOSECONDS`.
    pub ctime: String,
    /// How a file's link count moved (`(+1)`); 0 otherwise.
    #[serde(default)]
    pub links: i64,
}

/// One hold of a snapshot (`tarn holds`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldRow {
    /// Full snapshot name.
    pub name: String,
    /// The hold's tag.
    pub tag: String,
    /// Unix seconds the hold was placed.
    pub time: u64,
    /// The same for humans (`Tue Nov 14 22:13 2023`).
    pub when: String,
}

/// One dataset's properties (`tarn list`, `tarn get`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetRow {
    /// Full dataset name.
    pub name: String,
    /// Its properties, in the order asked (all of them for `all`).
    pub props: Vec<DatasetProp>,
}

/// One property of a dataset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetProp {
    /// Property name.
    pub property: String,
    /// Value for humans (`10G`, `none`).
    pub value: String,
    /// Exact value (`-p`).
    pub parsable: String,
    /// SOURCE column text (`local`, `default`, `inherited from tank`, `-`).
    pub source: String,
    /// The `-s` word of the source: `local`, `default`, `inherited` or `none`.
    pub source_kind: String,
}

/// A mounted dataset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountRow {
    /// Full dataset name.
    pub name: String,
    /// Where it is mounted.
    pub mountpoint: String,
}

/// Who answered a `Ping`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PongInfo {
    /// Process id of the daemon.
    pub pid: u32,
    /// Package version of the daemon (`CARGO_PKG_VERSION`).
    pub version: String,
}

/// What kind of node a `VdevStatus` is. Leaves are `Leaf`; `Root` is the pool itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum VdevNodeKind {
    /// The root of the tree (named after the pool).
    Root,
    /// A leaf device (file or block device).
    Leaf,
    /// A mirror.
    Mirror,
    /// raidz with this parity.
    Raidz(u8),
    /// dRAID with this parity (the name carries data, children and spares).
    Draid(u8),
    /// A device being replaced (old and new leaf as children).
    Replacing,
    /// A leaf and the hot spare standing in for it.
    Spare,
}

/// One node of a vdev tree as `pool status`, `pool import` and `pool create -n` show it.
/// Top-level children of the root carry their `role`; the CLI groups them under the
/// `special`, `logs` and `cache` headings the way ZFS does. Hot spares are listed separately
/// (`PoolStatusInfo::spares`, `PoolLayout::spares`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VdevStatus {
    /// Display name: the pool name for the root, `mirror-0`/`raidz2-1` for interior vdevs (or
    /// `mirror`/`raidz2` in a `create -n` layout, as ZFS shows it), the path for leaves.
    pub name: String,
    /// What kind of node this is.
    pub kind: VdevNodeKind,
    /// Role of a top-level vdev; `Data` for the root and for nodes below top level.
    #[serde(default = "role_data")]
    pub role: VdevRole,
    /// State as ZFS names it: `ONLINE`, `DEGRADED`, `FAULTED`, `OFFLINE`, `UNAVAIL`,
    /// `REMOVED`; for spares `AVAIL` or `INUSE`. Empty in a `create -n` layout.
    pub state: String,
    /// Read errors counted since import or the last `clear`.
    pub read: u64,
    /// Write errors.
    pub write: u64,
    /// Checksum errors.
    pub cksum: u64,
    /// Slow I/Os (`status -s`): counted on leaves; an interior node carries the sum of its
    /// leaves, though the SLOW column shows `-` for it as ZFS does.
    #[serde(default)]
    pub slow: u64,
    /// Note after the counters (`cannot open`, `too many errors`, `(resilvering)`).
    pub note: Option<String>,
    /// GUID (0 for grouping rows and `create -n` layouts).
    #[serde(default)]
    pub guid: u64,
    /// Allocated and total bytes: of a top-level vdev, and of the pool at the root; `None`
    /// elsewhere (tarn accounts space per top-level vdev).
    #[serde(default)]
    pub space: Option<(u64, u64)>,
    /// A leaf's physical device size (0 without a device) and the smallest device that can
    /// replace it; `None` elsewhere.
    #[serde(default)]
    pub device_sizes: Option<(u64, u64)>,
    /// Children in order.
    pub children: Vec<VdevStatus>,
}

fn role_data() -> VdevRole {
    VdevRole::Data
}

/// The layout `pool create -n` would create.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolLayout {
    /// Root of the tree (named after the pool) with top-level vdevs of every role but spare.
    pub config: VdevStatus,
    /// Hot spares.
    pub spares: Vec<VdevStatus>,
}

/// One row of `pool list`. Sizes are in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolListRow {
    /// Pool name.
    pub name: String,
    /// Usable size.
    pub size: u64,
    /// Allocated bytes.
    pub alloc: u64,
    /// Free bytes.
    pub free: u64,
    /// Space held by a checkpoint; `None` without one.
    pub checkpoint: Option<u64>,
    /// Space the pool could grow by; `None` when it cannot.
    pub expandsize: Option<u64>,
    /// Free-space fragmentation in percent; `None` when not known.
    pub frag: Option<u64>,
    /// Capacity used in percent.
    pub cap: u64,
    /// Deduplication ratio in hundredths (100 is `1.00x`).
    pub dedup_hundredths: u64,
    /// `ONLINE`, `DEGRADED`, ...
    pub health: String,
    /// Alternate root, if any.
    pub altroot: Option<String>,
    /// Pool GUID.
    pub guid: u64,
}

/// One pool of `pool status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStatusInfo {
    /// Pool name.
    pub name: String,
    /// Pool GUID.
    pub guid: u64,
    /// Health of the pool (`ONLINE`, `DEGRADED`, ...).
    pub state: String,
    /// What is wrong; lines separated by `\n` (the CLI indents continuation lines). `None`
    /// when the pool is healthy, which is what `status -x` tests.
    pub status: Option<String>,
    /// What to do about it; lines separated by `\n`.
    pub action: Option<String>,
    /// Message ID to read (`TARN-0001`).
    pub see: Option<String>,
    /// Preformatted scan line (`scrub repaired 0B in 00:00:01 with 0 errors on ...`); lines
    /// separated by `\n` (the CLI indents continuation lines with a tab, as ZFS prints a
    /// scrub in progress). `None` prints `none requested`.
    pub scan: Option<String>,
    /// The vdev tree, rooted at the pool.
    pub config: VdevStatus,
    /// Hot spares (state `AVAIL` or `INUSE`).
    pub spares: Vec<VdevStatus>,
    /// Damaged files, filled only for `status -v`.
    pub errors: Vec<String>,
    /// Number of damaged files (0 prints `No known data errors`).
    pub error_count: u64,
    /// The last committed txg.
    #[serde(default)]
    pub txg: u64,
    /// The scan record behind `scan` (`None` if the pool never scanned).
    #[serde(default)]
    pub scan_stats: Option<ScanStats>,
}

/// The figures of a pool's scan record, for `status -j`'s `scan_stats`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanStats {
    /// `SCRUB` or `RESILVER`.
    pub function: String,
    /// `SCANNING`, `PAUSED`, `FINISHED` or `CANCELED`.
    pub state: String,
    /// Unix seconds it started.
    pub start_time: u64,
    /// Unix seconds it finished or was canceled (0 before).
    pub end_time: u64,
    /// Unix seconds it was paused (0 unless paused).
    pub pause_time: u64,
    /// Bytes of every block it lists.
    pub to_examine: u64,
    /// Bytes listed so far.
    pub examined: u64,
    /// Bytes read and verified.
    pub issued: u64,
    /// Bytes repaired (a resilver: written to the new devices).
    pub processed: u64,
    /// Blocks found unrecoverable.
    pub errors: u64,
    /// The running pass (a pass starts at the scan's start, its resume and each import):
    /// Unix seconds it started (0 between passes: paused, finished, canceled).
    #[serde(default)]
    pub pass_start: u64,
    /// Bytes listed in this pass.
    #[serde(default)]
    pub pass_examined: u64,
    /// Bytes read and verified in this pass.
    #[serde(default)]
    pub pass_issued: u64,
}

/// One row of `pool get`. `value` is the exact (`-p`) form: bytes as integers, `capacity`
/// and `fragmentation` as plain percent numbers, `dedupratio` as `1.00`; the CLI turns it
/// into the human form unless `-p` is given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PropertyRow {
    /// Pool name.
    pub name: String,
    /// Property name.
    pub property: String,
    /// Exact value; `-` when unset.
    pub value: String,
    /// `local`, `default`, `-` (read-only), ...
    pub source: String,
}

/// A pool found by `pool import` without a pool name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportablePool {
    /// Pool name.
    pub name: String,
    /// Pool GUID.
    pub guid: u64,
    /// Health the pool would have (`ONLINE`, `DEGRADED`, `UNAVAIL`).
    pub state: String,
    /// What is wrong, if anything; lines separated by `\n`.
    pub status: Option<String>,
    /// What can be done (`The pool can be imported using its name or numeric identifier.`).
    pub action: String,
    /// Message ID to read.
    pub see: Option<String>,
    /// The vdev tree as found on the devices.
    pub config: VdevStatus,
    /// Hot spares recorded in the labels.
    pub spares: Vec<VdevStatus>,
}

/// One txg a pool could be imported at (`import --list-txgs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxgRow {
    /// Transaction group number.
    pub txg: u64,
    /// Uberblock timestamp, seconds since the epoch.
    pub timestamp: u64,
}

/// The txg an import opened (or with `-n` would open) against the newest one on the devices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportInfo {
    /// The pool's name as imported.
    pub pool: String,
    /// The txg opened.
    pub txg: u64,
    /// Its uberblock's time, seconds since the epoch.
    pub timestamp: u64,
    /// The newest txg on the devices.
    pub newest_txg: u64,
    /// Its uberblock's time.
    pub newest_timestamp: u64,
    /// Nothing was imported (`-n`).
    pub dry_run: bool,
    /// Datasets that could not be mounted.
    #[serde(default)]
    pub notices: Vec<String>,
}

/// History of one pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryPool {
    /// Pool name.
    pub name: String,
    /// Entries, oldest first.
    pub entries: Vec<HistoryEntry>,
}

/// One history record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Seconds since the epoch.
    pub time: u64,
    /// The command as typed (`tarn pool create tank mirror /d/a /d/b`) or, for internal
    /// events, ZFS's `[internal create txg:4] ...` text.
    pub command: String,
    /// Whether this is an internal event (shown only with `-i`).
    pub internal: bool,
    /// Numeric user id that ran the command.
    pub uid: u32,
    /// User name, empty when unknown.
    pub user: String,
    /// Host name.
    pub host: String,
}

/// One pool remembered in the cache file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// Pool name.
    pub name: String,
    /// Pool GUID.
    pub guid: u64,
    /// Absolute paths of its leaf devices when it was last imported.
    pub devices: Vec<String>,
}

/// The cache file as stored (`rundir/tarn.cache`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheFile {
    /// Layout version (`CACHE_FILE_VERSION`).
    pub version: u32,
    /// Imported pools.
    pub pools: Vec<CacheEntry>,
}
