//! Requests from a front end to the daemon, one per line.

use serde::{Deserialize, Serialize};

/// Role of a top-level vdev group in `tarn pool create` (the keywords of the vdev grammar).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VdevRole {
    /// Ordinary data vdevs (no keyword).
    Data,
    /// Hot spares (`spare`).
    Spare,
    /// Separate intent log (`log`).
    Log,
    /// Level-2 read cache (`cache`).
    Cache,
    /// Allocation class for metadata and small blocks (`special`).
    Special,
}

impl VdevRole {
    /// The grammar keyword (`data` for the keyword-less role).
    #[must_use]
    pub fn keyword(self) -> &'static str {
        match self {
            VdevRole::Data => "data",
            VdevRole::Spare => "spare",
            VdevRole::Log => "log",
            VdevRole::Cache => "cache",
            VdevRole::Special => "special",
        }
    }
}

/// Redundancy of one vdev group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VdevKind {
    /// A single device (no redundancy).
    Disk,
    /// An n-way mirror.
    Mirror,
    /// raidz with this many parity columns (1..=3).
    Raidz(u8),
    /// dRAID: groups of `data + parity` columns and `spares` distributed spares spread over
    /// all the group's devices.
    Draid {
        /// Parity columns per group (1..=3).
        parity: u8,
        /// Data columns per group (at least 1).
        data: u8,
        /// Distributed spares.
        spares: u8,
    },
}

impl VdevKind {
    /// Fewest devices a group of this kind needs (I4 of the crate block).
    #[must_use]
    pub fn devices_min(self) -> usize {
        match self {
            VdevKind::Disk => 1,
            VdevKind::Mirror => 2,
            VdevKind::Raidz(parity) => usize::from(parity) + 1,
            VdevKind::Draid {
                parity,
                data,
                spares,
            } => usize::from(parity) + usize::from(data) + usize::from(spares),
        }
    }

    /// The grammar keyword: `disk`, `mirror`, `raidz1`..`raidz3`.
    #[must_use]
    pub fn keyword(self) -> String {
        match self {
            VdevKind::Disk => "disk".to_string(),
            VdevKind::Mirror => "mirror".to_string(),
            VdevKind::Raidz(parity) => format!("raidz{parity}"),
            VdevKind::Draid {
                parity,
                data,
                spares,
            } => format!("draid{parity}:{data}d:{spares}s"),
        }
    }
}

/// One top-level vdev to create: its role, its redundancy and its leaf devices (absolute
/// paths). A bare device list on the command line becomes one `Disk` group per device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VdevGroupSpec {
    /// What the group is for.
    pub role: VdevRole,
    /// How its devices are combined.
    pub kind: VdevKind,
    /// Leaf device paths, absolute, in command-line order.
    pub devices: Vec<String>,
}

impl VdevGroupSpec {
    /// Checks I4: device counts per kind, raidz parity range, an upper bound on width. Returns
    /// the reason in the CLI's wording (without the `invalid vdev specification:` prefix).
    pub fn check(&self) -> Result<(), String> {
        match self.kind {
            VdevKind::Disk if self.devices.len() != 1 => {
                return Err(format!(
                    "a single-disk vdev names exactly one device, not {}",
                    self.devices.len()
                ));
            }
            VdevKind::Raidz(parity) if !(1..=3).contains(&parity) => {
                return Err(format!("raidz parity must be 1, 2 or 3, not {parity}"));
            }
            VdevKind::Draid { parity, .. } if !(1..=3).contains(&parity) => {
                return Err(format!("draid parity must be 1, 2 or 3, not {parity}"));
            }
            VdevKind::Draid { data: 0, .. } => {
                return Err("draid needs at least 1 data column".to_string());
            }
            _ => {}
        }
        let min = self.kind.devices_min();
        if self.devices.len() < min {
            return Err(format!(
                "{} requires at least {min} devices",
                self.kind.keyword()
            ));
        }
        // Bounded by the engine's child limit; checked here too so that a request that can
        // never succeed is refused before it reaches the daemon.
        let max = tarn_base::limits::VDEV_CHILDREN_MAX;
        if self.devices.len() > max {
            return Err(format!(
                "{} of {} devices exceeds the limit of {max}",
                self.kind.keyword(),
                self.devices.len()
            ));
        }
        Ok(())
    }
}

/// `tarn create -V SIZE [-s] [-b VOLBLOCKSIZE]`: what makes the new dataset a volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeCreate {
    /// `volsize` as typed.
    pub size: String,
    /// `-b` as typed.
    pub block_size: Option<String>,
    /// `-s`: sparse (no refreservation).
    pub sparse: bool,
}

/// `tarn pool create` (also `-n`, the dry run that only returns the layout).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolCreate {
    /// Pool name.
    pub name: String,
    /// Top-level vdevs of every role, in command-line order.
    pub vdevs: Vec<VdevGroupSpec>,
    /// Pool properties (`-o prop=val`), in command-line order.
    pub properties: Vec<(String, String)>,
    /// Properties of the root dataset (`-O prop=val`), in command-line order.
    pub fs_properties: Vec<(String, String)>,
    /// Mountpoint of the root dataset (`-m`).
    pub mountpoint: Option<String>,
    /// Use devices that look in use by another pool (`-f`).
    pub force: bool,
    /// Only check and return the layout (`-n`); nothing is written.
    pub dry_run: bool,
}

/// `tarn pool add [-n] [-f] NAME VDEVSPEC...` (`-n`: only check and return the layout).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolAdd {
    /// Pool name.
    pub name: String,
    /// Top-level vdevs and spares to add, of every role, in command-line order.
    pub vdevs: Vec<VdevGroupSpec>,
    /// Use devices that look in use by another pool, and accept a mismatched replication
    /// level (`-f`).
    pub force: bool,
    /// Only check and return the resulting layout (`-n`); nothing is written.
    pub dry_run: bool,
}

/// `tarn pool import NAME|GUID [NEWNAME]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolImport {
    /// Directories to search for devices (`-d`, absolute); empty means the daemon's default.
    pub dirs: Vec<String>,
    /// Pool name or decimal pool GUID.
    pub pool: String,
    /// Name to import the pool under.
    pub new_name: Option<String>,
    /// Import even if the pool looks active elsewhere (`-f`).
    pub force: bool,
    /// Import at exactly this txg (`-T`).
    pub rewind_txg: Option<u64>,
    /// Rewind to the newest importable txg if the newest one is damaged (`-F`).
    pub rewind: bool,
    /// Import read-only (`-o readonly=on`).
    pub readonly: bool,
    /// With rewind, a txg must have every metadata block readable (`-X`).
    #[serde(default)]
    pub extreme: bool,
    /// Say which txg the import would open and what it would discard; import nothing
    /// (`-n`).
    #[serde(default)]
    pub dry_run: bool,
}

/// What `tarn pool scrub` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScrubAction {
    /// Start a scrub, or resume a paused one (no flag).
    Start,
    /// Pause the running scrub (`-p`).
    Pause,
    /// Cancel the running or paused scrub (`-s`).
    Stop,
}

/// Everything a front end can ask the daemon. New verbs are added as new variants; match
/// with a wildcard arm outside this crate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Request {
    /// Liveness check; answered by the daemon itself with `ReplyPayload::Pong`.
    Ping,
    /// `tarn memory`: the daemon's memory by category, the ARC's counters and the bound.
    Memory,
    /// `tarn memory set arc_max=SIZE arc_min=SIZE`: the ARC's limits from now on (kept in
    /// the rundir for the next start); `None` leaves a limit as it is.
    MemorySet {
        /// New upper limit of the ARC, in bytes.
        arc_max: Option<u64>,
        /// New floor the ARC never shrinks below under memory pressure, in bytes.
        arc_min: Option<u64>,
    },
    /// Stop the daemon cleanly (pools synced and closed, kept in the cache file); answered by
    /// the daemon itself with `ReplyPayload::Unit` before it exits.
    Shutdown,
    /// `tarn pool create`.
    PoolCreate(PoolCreate),
    /// `tarn pool add`.
    PoolAdd(PoolAdd),
    /// `tarn pool remove NAME DEVICE`: an unused hot spare or a log device.
    PoolRemove {
        /// Pool name.
        name: String,
        /// Device (path or GUID; a log mirror by its `mirror-N` name).
        device: String,
    },
    /// `tarn pool destroy [-f] NAME`.
    PoolDestroy {
        /// Pool name.
        name: String,
        /// Unmount busy datasets.
        force: bool,
    },
    /// `tarn pool list [NAME...]`; empty `names` means every imported pool.
    PoolList {
        /// Pools to list.
        names: Vec<String>,
    },
    /// `tarn pool status [-x] [-v] [NAME...]`.
    PoolStatus {
        /// Pools to describe; empty means every imported pool.
        names: Vec<String>,
        /// Include the list of damaged files (`-v`).
        verbose: bool,
        /// Only pools with a problem (`-x`).
        only_unhealthy: bool,
    },
    /// `tarn pool get PROP[,PROP...]|all [NAME...]`.
    PoolGet {
        /// Property names, or the single word `all`.
        properties: Vec<String>,
        /// Pools; empty means every imported pool.
        names: Vec<String>,
    },
    /// `tarn pool set PROP=VAL NAME`.
    PoolSet {
        /// Property name.
        property: String,
        /// New value as typed.
        value: String,
        /// Pool name.
        name: String,
    },
    /// `tarn pool export [-f] NAME`.
    PoolExport {
        /// Pool name.
        name: String,
        /// Unmount busy datasets.
        force: bool,
    },
    /// `tarn pool import` without a pool: list importable pools.
    PoolImportList {
        /// Directories to search (`-d`, absolute); empty means the daemon's default.
        dirs: Vec<String>,
    },
    /// `tarn pool import NAME|GUID [NEWNAME]`.
    PoolImport(PoolImport),
    /// `tarn pool import --list-txgs NAME|GUID`: the txgs the pool could be rewound to.
    PoolImportTxgs {
        /// Directories to search (`-d`, absolute); empty means the daemon's default.
        dirs: Vec<String>,
        /// Pool name or decimal pool GUID.
        pool: String,
    },
    /// `tarn pool history [-i] [-l] [NAME...]`.
    PoolHistory {
        /// Pools; empty means every imported pool.
        names: Vec<String>,
        /// Include user and host (`-l`).
        long: bool,
        /// Include internal events (`-i`).
        internal: bool,
    },
    /// `tarn pool scrub [-s | -p] [-w] NAME...`. With `wait`, the daemon sends `Progress`
    /// lines (operation `scrub`, bytes issued of bytes to scan) until every named pool's scrub
    /// ended, then the response.
    PoolScrub {
        /// Pools (at least one).
        names: Vec<String>,
        /// Start/resume, pause or stop.
        action: ScrubAction,
        /// Wait for the scrubs to end (`-w`).
        wait: bool,
    },
    /// `tarn pool clear NAME [DEVICE]`: reset error counters.
    PoolClear {
        /// Pool name.
        name: String,
        /// One device (path, last path component or GUID); every device when `None`.
        device: Option<String>,
    },
    /// `tarn pool offline [-t] NAME DEVICE`.
    PoolOffline {
        /// Pool name.
        name: String,
        /// Device (path, last path component or GUID).
        device: String,
        /// Until the next import only (`-t`).
        temporary: bool,
    },
    /// `tarn pool online NAME DEVICE`.
    PoolOnline {
        /// Pool name.
        name: String,
        /// Device (path, last path component or GUID).
        device: String,
    },
    /// `tarn pool replace NAME OLD [NEW]`: resilver NEW (or a new device at OLD's path) in
    /// OLD's place.
    PoolReplace {
        /// Pool name.
        name: String,
        /// Device replaced (path, last path component or GUID).
        old: String,
        /// New device path; `None` replaces in place.
        new: Option<String>,
        /// Sequential resilver (`-s`): copy allocated ranges, then scrub (mirrors only).
        #[serde(default)]
        sequential: bool,
        /// Take a device labelled by a pool not imported here (`-f`).
        #[serde(default)]
        force: bool,
        /// Wait (`-w`) until the resilver (and a sequential one's scrub) ends, reporting
        /// progress.
        #[serde(default)]
        wait: bool,
    },
    /// `tarn pool wait [-t ACTIVITY] NAME`: report progress until the activity (every one
    /// when `None`) is no longer running.
    /// `tarn pool sync [NAME...]`: commit a txg of each named pool (every pool when empty).
    PoolSync {
        /// Pool names.
        names: Vec<String>,
    },
    PoolWait {
        /// Pool name.
        name: String,
        /// `scrub`, `resilver` or `replace` (a resilver is how a replace runs).
        activity: Option<String>,
    },
    /// `tarn pool attach NAME DEVICE NEW`: mirror DEVICE onto NEW.
    PoolAttach {
        /// Pool name.
        name: String,
        /// Existing device (path, last path component or GUID).
        device: String,
        /// New device path.
        new: String,
    },
    /// `tarn pool events [-c] [POOL]`: events numbered above `after`.
    PoolEvents {
        /// One pool, or every pool.
        name: Option<String>,
        /// Only events with a larger sequence number (`-f` polls with the last one seen).
        after: u64,
        /// Empty the ring after reading (`-c`).
        clear: bool,
    },
    /// `tarn pool iostat [POOL...]`: running I/O totals since import (the CLI computes rates).
    PoolIostat {
        /// Pools (all when empty).
        names: Vec<String>,
    },
    /// `tarn pool detach NAME DEVICE`.
    PoolDetach {
        /// Pool name.
        name: String,
        /// Device (path, last path component or GUID).
        device: String,
    },
    /// `tarn create [-p] [-V SIZE [-s] [-b SIZE]] [-o prop=val]... NAME`.
    DatasetCreate {
        /// Full dataset name.
        name: String,
        /// Properties, in command-line order.
        properties: Vec<(String, String)>,
        /// Create missing parents (`-p`).
        parents: bool,
        /// A volume (`-V`) rather than a filesystem.
        #[serde(default)]
        volume: Option<VolumeCreate>,
    },
    /// `tarn destroy [-r] [-f] NAME`.
    DatasetDestroy {
        /// Full dataset name.
        name: String,
        /// Destroy descendants too (`-r`).
        recursive: bool,
        /// Unmount busy datasets (`-f`).
        force: bool,
        /// Only say what would be destroyed (`-n`; snapshots).
        #[serde(default)]
        dry_run: bool,
        /// Held snapshots are marked to go at their last release (`-d`; snapshots).
        #[serde(default)]
        defer: bool,
        /// Clones depending on the snapshots destroyed go too (`-R`).
        #[serde(default)]
        dependents: bool,
    },
    /// `tarn diff SNAP [SNAP|DS]`.
    Diff {
        /// The older snapshot.
        from: String,
        /// A later snapshot or the dataset (the dataset when absent).
        to: Option<String>,
    },
    /// `tarn bookmark SNAP|BOOKMARK DS#BM`.
    Bookmark {
        /// The snapshot or bookmark marked.
        source: String,
        /// The new bookmark's full name.
        target: String,
    },
    /// `tarn promote CLONE`.
    Promote {
        /// The clone's full name.
        name: String,
    },
    /// `tarn clone [-p] [-o prop=val]... DS@SNAP NEWDS`.
    Clone {
        /// The origin snapshot (`pool/ds@snap`).
        origin: String,
        /// The new dataset's full name.
        name: String,
        /// Properties, in command-line order.
        properties: Vec<(String, String)>,
        /// Create missing parents (`-p`).
        parents: bool,
    },
    /// `tarn hold [-r] TAG SNAP...`.
    Hold {
        /// The hold's tag.
        tag: String,
        /// Full snapshot names.
        names: Vec<String>,
        /// Every descendant's snapshot of the same name too (`-r`).
        recursive: bool,
    },
    /// `tarn release [-r] TAG SNAP...`.
    Release {
        /// The hold's tag.
        tag: String,
        /// Full snapshot names.
        names: Vec<String>,
        /// Every descendant's snapshot of the same name too (`-r`).
        recursive: bool,
    },
    /// `tarn nbd`: the volumes the daemon serves over NBD and their connections.
    NbdList,
    /// `tarn holds [-r] SNAP...`.
    Holds {
        /// Full snapshot names.
        names: Vec<String>,
        /// Every descendant's snapshot of the same name too (`-r`).
        recursive: bool,
    },
    /// `tarn snapshot [-r] [-o prop=val]... DS@SNAP...`.
    Snapshot {
        /// Full snapshot names.
        names: Vec<String>,
        /// Every descendant's snapshot of the same name too (`-r`).
        recursive: bool,
        /// User properties, in command-line order.
        properties: Vec<(String, String)>,
    },
    /// `tarn rollback [-r] DS@SNAP`.
    Rollback {
        /// Full snapshot name.
        name: String,
        /// Destroy later snapshots (`-r`).
        recursive: bool,
        /// Destroy their clones too (`-R`).
        #[serde(default)]
        dependents: bool,
        /// Unmount those clones even when busy (`-f`).
        #[serde(default)]
        force: bool,
    },
    /// `tarn send [-i SNAP | -I SNAP] SNAP`: the stream goes to the descriptor the client
    /// passes after `ServerLine::StreamWanted`.
    Send {
        /// The snapshot (`pool/ds@snap`).
        snapshot: String,
        /// `-i` or `-I`: the source snapshot.
        from: Option<String>,
        /// `-I`: every snapshot in between too.
        intermediates: bool,
        /// `-t TOKEN`: the rest of a partial receive.
        #[serde(default)]
        token: Option<String>,
        /// `-n`: only size the stream (no descriptor is passed).
        #[serde(default)]
        dry_run: bool,
        /// `-p`: carry the dataset's local properties.
        #[serde(default)]
        properties: bool,
        /// `-L`.
        #[serde(default)]
        large_blocks: bool,
        /// `-e`.
        #[serde(default)]
        embedded: bool,
        /// `-R`: the dataset, its descendants, their snapshots and properties.
        #[serde(default)]
        replicate: bool,
        /// `-c`: compressed blocks as stored.
        #[serde(default)]
        compressed: bool,
        /// `-v` on a terminal, `-P`: size the stream first (as `-n`, which reads no data
        /// block), so that progress reports carry its total (an ETA), and put the size in
        /// the stream's first BEGIN (the receiver's ETA).
        #[serde(default)]
        sized: bool,
    },
    /// `tarn receive [-F] [-u] DS`: the stream comes from the descriptor the client passes
    /// after `ServerLine::StreamWanted`.
    Receive {
        /// The destination dataset (or `ds@snap`).
        target: String,
        /// `-F`: roll the destination back to the stream's source first.
        force: bool,
        /// `-u`: do not mount what was received.
        unmounted: bool,
        /// `-s`: a stream that stops early leaves a resumable partial receive.
        #[serde(default)]
        resumable: bool,
        /// `-n`: read and check the stream, change nothing.
        #[serde(default)]
        dry_run: bool,
        /// `-d` (`Some(true)`) or `-e` (`Some(false)`): append the sent name.
        #[serde(default)]
        append: Option<bool>,
        /// `-o prop=val`.
        #[serde(default)]
        set: Vec<(String, String)>,
        /// `-x prop`.
        #[serde(default)]
        exclude: Vec<String>,
        /// `-c`: heal the damaged blocks of the existing snapshot `target` from the stream
        /// (corrective receive); nothing else is received.
        #[serde(default)]
        corrective: bool,
    },
    /// `tarn receive -A DS`: discard a partial receive saved by `receive -s`.
    ReceiveAbort {
        /// The destination dataset.
        target: String,
    },
    /// `tarn rename OLD NEW`.
    DatasetRename {
        /// Current name.
        old: String,
        /// New name.
        new: String,
        /// A snapshot of every descendant too (`-r`; snapshots only).
        #[serde(default)]
        recursive: bool,
    },
    /// `tarn list` and `tarn get`: properties of datasets.
    DatasetGet(DatasetGet),
    /// `tarn set [-f] PROP=VAL... NAME`.
    DatasetSet {
        /// Full dataset name.
        name: String,
        /// Assignments, in command-line order.
        assignments: Vec<(String, String)>,
        /// Allow a volume to shrink (`-f`, with `volsize`).
        #[serde(default)]
        force: bool,
    },
    /// `tarn inherit [-r] PROP NAME`.
    DatasetInherit {
        /// Full dataset name.
        name: String,
        /// Property.
        property: String,
        /// Descendants too (`-r`).
        recursive: bool,
    },
    /// `tarn userspace|groupspace|projectspace NAME`: per-owner usage and quotas.
    Userspace {
        /// Full dataset name.
        name: String,
        /// `user`, `group` or `project`.
        space: String,
    },
    /// `tarn project [-r] [-C [-k] | -s | -p ID] PATH`: project ids of files in a mount.
    Project {
        /// Absolute path inside a mounted dataset.
        path: String,
        /// New project id (`-p`).
        id: Option<u32>,
        /// Set the inherit flag on directories (`-s`).
        inherit: bool,
        /// Clear the flag and the id (`-C`).
        clear: bool,
        /// With `clear`, keep the id (`-k`).
        keep: bool,
        /// Everything below too (`-r`).
        recursive: bool,
    },
    /// `tarn checksum -a ALGORITHM [--xattr NAME] FILE`: one file's checksum, computed in
    /// the daemon through the engine and cached with the file.
    Checksum {
        /// Absolute path of a regular file inside a mounted dataset.
        path: String,
        /// `adler32`, `md5`, `sha256` or `crc32c`.
        algorithm: String,
        /// Also store the value (lowercase hex) as this user attribute of the file.
        #[serde(default)]
        xattr: Option<String>,
    },
    /// `tarn mount [-a] [NAME]`; neither: list what is mounted.
    Mount {
        /// Dataset to mount.
        name: Option<String>,
        /// Mount every dataset that should be (`-a`).
        all: bool,
    },
    /// `tarn unmount [-f] [-a] NAME|PATH`.
    Unmount {
        /// Dataset name or mountpoint.
        target: Option<String>,
        /// Unmount every tarn dataset (`-a`).
        all: bool,
        /// Detach even if busy (`-f`).
        force: bool,
    },
}

/// What `tarn list` and `tarn get` select.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetGet {
    /// Datasets named; empty means every pool's root dataset (with `recursive`).
    pub names: Vec<String>,
    /// Include descendants (`-r`).
    pub recursive: bool,
    /// At most this many levels below each named dataset (`-d`).
    pub depth: Option<u32>,
    /// Property names, or the single word `all`.
    pub properties: Vec<String>,
    /// Types listed (`filesystem`, `snapshot`, `all`; empty: filesystems).
    #[serde(default)]
    pub types: Vec<String>,
}

impl Request {
    /// Short name of the request for logs (`pool_create`), the same as its wire tag.
    #[must_use]
    pub fn verb(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::Shutdown => "shutdown",
            Request::Memory => "memory",
            Request::MemorySet { .. } => "memory_set",
            Request::PoolCreate(_) => "pool_create",
            Request::PoolAdd(_) => "pool_add",
            Request::PoolRemove { .. } => "pool_remove",
            Request::PoolDestroy { .. } => "pool_destroy",
            Request::PoolList { .. } => "pool_list",
            Request::PoolStatus { .. } => "pool_status",
            Request::PoolGet { .. } => "pool_get",
            Request::PoolSet { .. } => "pool_set",
            Request::PoolExport { .. } => "pool_export",
            Request::PoolImportList { .. } => "pool_import_list",
            Request::PoolImport(_) => "pool_import",
            Request::PoolImportTxgs { .. } => "pool_import_txgs",
            Request::PoolHistory { .. } => "pool_history",
            Request::PoolScrub { .. } => "pool_scrub",
            Request::PoolClear { .. } => "pool_clear",
            Request::PoolOffline { .. } => "pool_offline",
            Request::PoolOnline { .. } => "pool_online",
            Request::PoolReplace { .. } => "pool_replace",
            Request::PoolSync { .. } => "pool_sync",
            Request::PoolWait { .. } => "pool_wait",
            Request::PoolAttach { .. } => "pool_attach",
            Request::PoolDetach { .. } => "pool_detach",
            Request::PoolEvents { .. } => "pool_events",
            Request::PoolIostat { .. } => "pool_iostat",
            Request::DatasetCreate { .. } => "dataset_create",
            Request::DatasetDestroy { .. } => "dataset_destroy",
            Request::Clone { .. } => "clone",
            Request::Promote { .. } => "promote",
            Request::Bookmark { .. } => "bookmark",
            Request::Diff { .. } => "diff",
            Request::Snapshot { .. } => "snapshot",
            Request::Rollback { .. } => "rollback",
            Request::Hold { .. } => "hold",
            Request::Release { .. } => "release",
            Request::Holds { .. } => "holds",
            Request::NbdList => "nbd_list",
            Request::DatasetRename { .. } => "dataset_rename",
            Request::Send { .. } => "send",
            Request::Receive { .. } => "receive",
            Request::ReceiveAbort { .. } => "receive_abort",
            Request::DatasetGet(_) => "dataset_get",
            Request::DatasetSet { .. } => "dataset_set",
            Request::DatasetInherit { .. } => "dataset_inherit",
            Request::Userspace { .. } => "userspace",
            Request::Project { .. } => "project",
            Request::Checksum { .. } => "checksum",
            Request::Mount { .. } => "mount",
            Request::Unmount { .. } => "unmount",
        }
    }

    /// Whether the request carries a stream, so the daemon asks for the client's descriptor
    /// (`ServerLine::StreamWanted`) before serving it.
    #[must_use]
    pub fn wants_stream(&self) -> bool {
        matches!(
            self,
            Request::Send { dry_run: false, .. } | Request::Receive { .. }
        )
    }

    /// Whether serving this request may change the set of imported pools, so that the daemon
    /// must rewrite its cache file afterwards.
    #[must_use]
    pub fn changes_pool_set(&self) -> bool {
        match self {
            Request::PoolCreate(create) => !create.dry_run,
            // The cache file lists each pool's devices.
            Request::PoolAdd(add) => !add.dry_run,
            Request::PoolRemove { .. } => true,
            Request::PoolDestroy { .. } | Request::PoolExport { .. } | Request::PoolImport(_) => {
                true
            }
            _ => false,
        }
    }
}
