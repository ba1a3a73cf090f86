//! The daemon's [`Handler`] over the real engine: turns protocol requests into engine calls
//! and engine answers (or errors) into protocol replies. The only place that knows both
//! vocabularies; it holds no state of its own beyond the engine and its two threads:
//!
//! ```text
//!  txg-sync:  the engine's TxgSyncer. Woken by a writer whose pool passed DIRTY_SYNC (or
//!             left a written txg for it), it runs Engine::sync_wanted_pools: each txg's
//!             write phase under the pool lock, its commit phase (flushes, uberblock)
//!             without it, so FUSE requests go on in the next txg meanwhile; and every
//!             TXG_TIMEOUT Engine::sync_all (ZFS's txg timer). One thread for all pools.
//!  scrub:     Engine::fault_check (probes for vanished devices, faults erroring leaves,
//!             activates hot spares, autoreplace),
//!             then while Engine::scanning_pools() is not empty, Engine::scrub_step(pool,
//!             SCRUB_BATCH_BYTES) round-robin (the pool lock is taken per batch, so requests
//!             interleave; a step runs a scrub or a resilver batch); otherwise sleeps until
//!             woken by a scrub/online/replace request or for SCRUB_IDLE. A scrub or resilver
//!             found scanning after import or daemon start is resumed.
//!  multihost: every Engine::multihost_interval_ms, Engine::multihost_heartbeat (pools with
//!             multihost=on; `TARN_MULTIHOST_INTERVAL_MS` sets the interval); it may block
//!             while a device is slow
//!  multihost-watch: every interval, Engine::multihost_watch (suspends a pool whose
//!             heartbeats stopped counting, even while a write hangs)
//! ```
//! The engine's clean-block cache (shared by every pool) is limited to `TARN_ARC_MAX` or a
//! quarter of the machine's memory (`cache_limit`). Device files are opened with `O_DIRECT`
//! or through the host's page cache as `TARN_DIRECT_IO` says (`direct_io`).
//! Lock order: `EngineBackend::batch` (held for one scrub batch, one pass of the txg sync
//! thread, and by export and destroy so that they never race either for the pool's handle),
//! then the engine's own locks.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tarn_base::{Clock, SeededRng, SystemClock};
use tarn_engine::{
    CreateOptions, CreateSpec, Engine, EngineError, FileProvider, HostIdentity, ImportOptions,
    ScanFunction, ScanState, ScrubAction, TopLayout, TopSpec, VdevNode,
};
use tarn_proto::{
    CacheEntry, ErrorReply, HistoryEntry, HistoryPool, ImportablePool, PoolAdd, PoolCreate,
    PoolImport, PoolLayout, PoolListRow, PoolStatusInfo, Progress, PropertyRow, ReplyPayload,
    Request, Response, ScanStats, TxgRow, VdevGroupSpec, VdevKind, VdevNodeKind, VdevRole,
    VdevStatus,
};

use crate::Handler;
use crate::mounts::{MountTable, notices_reply};

/// How often dirty data is committed even when nobody asks (ZFS's `zfs_txg_timeout`).
pub const TXG_TIMEOUT: Duration = Duration::from_secs(5);

/// Where `tarn pool import` looks when no `-d` is given.
pub const DEFAULT_SEARCH_DIRS: &[&str] = &["/dev/disk/by-id", "/dev"];

/// Bytes one scrub batch reads before the pool lock is released.
pub const SCRUB_BATCH_BYTES: u64 = 16 << 20;
/// How long the scrub thread sleeps when no pool is scrubbing (unless woken): also how soon
/// `Engine::fault_check` notices a device that went away from an idle pool (it probes every
/// leaf, one `fstat` each) and activates a spare.
pub const SCRUB_IDLE: Duration = Duration::from_secs(1);
/// How long the scrub thread backs off after a batch failed (a suspended pool).
pub const SCRUB_BACKOFF: Duration = Duration::from_secs(1);
/// How often `scrub -w` reports progress.
pub const SCRUB_PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
/// How often a waiting request looks whether the work ended (finer than the reports, so
/// `scrub -w` returns soon after the scrub is done).
pub const SCRUB_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Sleeps until the next report is due, returning early (`true`) once `running` says the
/// work ended.
fn wait_for_report(running: &dyn Fn() -> bool) -> bool {
    let polls = SCRUB_PROGRESS_INTERVAL.as_millis() / SCRUB_POLL_INTERVAL.as_millis();
    for _ in 0..polls {
        std::thread::sleep(SCRUB_POLL_INTERVAL);
        if !running() {
            return true;
        }
    }
    false
}

/// Wakes the scrub thread when a scrub starts.
#[derive(Debug, Default)]
struct Wake {
    pending: Mutex<bool>,
    signal: Condvar,
}

impl tarn_engine::TxgSyncer for Wake {
    fn sync_wanted(&self) {
        self.notify();
    }
}

impl Wake {
    fn notify(&self) {
        *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.signal.notify_all();
    }

    fn wait(&self, timeout: Duration) {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut pending, _) = self
            .signal
            .wait_timeout_while(pending, timeout, |pending| !*pending)
            .unwrap_or_else(PoisonError::into_inner);
        *pending = false;
    }
}

/// The daemon's handler for the real engine.
#[derive(Debug)]
pub struct EngineBackend {
    engine: Arc<Engine>,
    batch: Arc<Mutex<()>>,
    wake: Arc<Wake>,
    mounts: Arc<MountTable>,
    /// The NBD listeners (module `nbd`).
    nbd: Arc<crate::nbd::NbdTable>,
    /// The ARC's limits and target (module `memory`).
    arc: Arc<crate::memory::ArcControl>,
}

fn lock_batch(batch: &Mutex<()>) -> MutexGuard<'_, ()> {
    batch.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The scrub thread's loop (module doc): runs until the engine is dropped.
fn drive_scrubs(engine: &std::sync::Weak<Engine>, batch: &Mutex<()>, wake: &Wake) {
    while let Some(engine) = engine.upgrade() {
        // Leaves out of service get spares (and a resilver) before the scans are listed.
        let _ = engine.fault_check();
        let pools = engine.scanning_pools();
        if pools.is_empty() {
            drop(engine);
            wake.wait(SCRUB_IDLE);
            continue;
        }
        let mut failed = false;
        for pool in pools {
            let _batch = lock_batch(batch);
            // A pool exported since the list was taken is simply gone; a suspended one is
            // retried after a pause (status shows why it is stuck).
            let stepped = engine.scrub_step(&pool, SCRUB_BATCH_BYTES);
            failed |= matches!(stepped, Err(e) if !matches!(e, EngineError::NoSuchPool));
        }
        drop(engine);
        if failed {
            wake.wait(SCRUB_BACKOFF);
        }
    }
}

/// `tarn create [-p] [-s] [-b SIZE] [-V SIZE] [-o prop=val]... NAME`, recorded in history
/// as typed.
fn create_dataset(
    engine: &Engine,
    name: &str,
    properties: &[(String, String)],
    parents: bool,
    volume: Option<&tarn_proto::VolumeCreate>,
) -> Result<(), EngineError> {
    let mut command = String::from("create");
    if parents {
        command.push_str(" -p");
    }
    if let Some(volume) = volume {
        if volume.sparse {
            command.push_str(" -s");
        }
        if let Some(block) = &volume.block_size {
            command.push_str(&format!(" -b {block}"));
        }
        command.push_str(&format!(" -V {}", volume.size));
    }
    for (p, v) in properties {
        command.push_str(&format!(" -o {p}={v}"));
    }
    command.push_str(&format!(" {name}"));
    match volume {
        Some(volume) => {
            let spec = tarn_engine::VolumeSpec {
                size: volume.size.clone(),
                block_size: volume.block_size.clone(),
                sparse: volume.sparse,
            };
            engine.create_volume(name, &spec, properties, parents, &command)
        }
        None => engine.create_dataset(name, properties, parents, &command),
    }
}

/// `tarn set [-f] PROP=VAL... NAME` (`-f` with `volsize` alone: a volume may shrink).
fn set_dataset(
    engine: &Engine,
    name: &str,
    assignments: &[(String, String)],
    force: bool,
) -> Result<(), EngineError> {
    let flag = if force { "-f " } else { "" };
    let command = format!("set {flag}{} {name}", assignments_text(assignments));
    match assignments {
        [(property, value)] if force && property == "volsize" => {
            engine.set_volsize(name, value, true, &command)
        }
        _ => engine.set_dataset_props(name, assignments, &command),
    }
}

/// This host's identity: the `TARN_HOSTID` environment variable (hex with `0x`, or decimal;
/// for a second daemon on one machine, as tests run), else `/etc/hostid` when present (as ZFS
/// uses), else a stable hash of the host name; never zero.
#[must_use]
pub fn host_identity() -> HostIdentity {
    let hostname = std::fs::read_to_string("/etc/hostname")
        .map_or_else(|_| "localhost".to_string(), |h| h.trim().to_string());
    let from_env = std::env::var("TARN_HOSTID")
        .ok()
        .and_then(|v| parse_hostid(&v));
    let from_file = from_env.or_else(read_hostid_file);
    let hostid = from_file.unwrap_or_else(|| {
        let hash = hostname.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        (hash & 0xffff_ffff).max(1)
    });
    HostIdentity { hostid, hostname }
}

/// A host id as `TARN_HOSTID` gives it: `0x` and hex digits, or decimal; zero is no id.
fn parse_hostid(text: &str) -> Option<u64> {
    let text = text.trim();
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    };
    parsed.filter(|&id| id != 0)
}

fn read_hostid_file() -> Option<u64> {
    std::fs::read("/etc/hostid")
        .ok()
        .and_then(|bytes| <[u8; 4]>::try_from(bytes.as_slice()).ok())
        .map(|word| u64::from(u32::from_le_bytes(word)))
        .filter(|&id| id != 0)
}

/// `failmode=panic` and a multihost suspension: the process stops at once (ZFS panics the
/// host), so nothing this daemon still has queued reaches devices another host may import.
fn multihost_panic(reasons: &[String]) {
    if reasons.is_empty() {
        return;
    }
    for why in reasons {
        eprintln!("tarn daemon: stopping at once: {why}");
    }
    std::process::abort();
}

/// One pass of the txg sync thread under `batch`: whether some txg committed.
fn sync_pass(engine: &Engine, batch: &Mutex<()>) -> bool {
    let _batch = lock_batch(batch);
    engine.sync_wanted_pools()
}

/// Most dirty-data room a pool's open txg borrows from the ARC (tarn-engine `txg`, "Dirty
/// data lent by the ARC"): a txg of up to 1 GiB, half of it before its sync starts, when
/// the ARC can spare it (never more than half the ARC's limit in all).
pub const DIRTY_LOAN_MAX: u64 = 768 << 20;

/// Starts the txg sync thread (module doc) until the engine goes: it commits txgs when a
/// writer asks and every [`TXG_TIMEOUT`].
///
/// Each pass holds `batch` (the lock export and destroy take), so an export never finds the
/// pool's handle held by a sync in progress; passes repeat while a pool stays past
/// `DIRTY_SYNC`, taking `batch` again each time so that scrub batches interleave.
fn start_txg_sync(engine: &Arc<Engine>, batch: &Arc<Mutex<()>>) -> Result<(), String> {
    let wake = Arc::new(Wake::default());
    engine.set_txg_syncer(wake.clone());
    engine.set_dirty_loan_max(DIRTY_LOAN_MAX);
    let weak = Arc::downgrade(engine);
    let batch = Arc::clone(batch);
    let clock = SystemClock::new();
    std::thread::Builder::new()
        .name("txg-sync".into())
        .spawn(move || {
            let timeout_ns = u64::try_from(TXG_TIMEOUT.as_nanos()).unwrap_or(u64::MAX);
            let mut last_all = clock.monotonic_ns();
            while let Some(engine) = weak.upgrade() {
                while sync_pass(&engine, &batch) {}
                if clock.monotonic_ns().saturating_sub(last_all) >= timeout_ns {
                    let _batch = lock_batch(&batch);
                    engine.sync_all();
                    last_all = clock.monotonic_ns();
                }
                drop(engine);
                wake.wait(TXG_TIMEOUT);
            }
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start the txg sync thread: {e}"))
}

/// Starts the thread that writes multihost heartbeats (module doc) until the engine goes.
fn start_heartbeat(engine: &Arc<Engine>) -> Result<(), String> {
    if let Some(ms) = std::env::var("TARN_MULTIHOST_INTERVAL_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        engine.set_multihost_interval_ms(ms);
    }
    let weak = Arc::downgrade(engine);
    std::thread::Builder::new()
        .name("multihost".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                multihost_panic(&engine.multihost_heartbeat());
                let interval = Duration::from_millis(engine.multihost_interval_ms());
                drop(engine);
                std::thread::sleep(interval);
            }
        })
        .map_err(|e| format!("cannot start the multihost thread: {e}"))?;
    // The watch runs apart from the writer, so a heartbeat write that hangs is noticed.
    let weak = Arc::downgrade(engine);
    std::thread::Builder::new()
        .name("multihost-watch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                multihost_panic(&engine.multihost_watch());
                let interval = Duration::from_millis(engine.multihost_interval_ms());
                drop(engine);
                std::thread::sleep(interval);
            }
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start the multihost watch thread: {e}"))
}

/// An engine on real files and block devices with this host's identity, its clean-block
/// cache sized by [`cache_limit`].
#[must_use]
pub fn file_engine(direct: bool) -> Engine {
    let seed = SeededRng::from_entropy().next_u64();
    let engine = Engine::new(
        Arc::new(FileProvider { direct }),
        host_identity(),
        Arc::new(SystemClock::new()),
        seed,
    );
    engine.set_cache_limit(cache_limit());
    engine
}

/// Whether the daemon opens device files with `O_DIRECT` when nothing says otherwise: yes.
/// Measured against buffered I/O with the same build (docs/PERFORMANCE.md, "Device files
/// with O_DIRECT"): cold sequential reads faster and cheaper in CPU, writes as fast for
/// less CPU, through FUSE and NBD alike. What the host's page cache gave is covered
/// elsewhere: the ARC caches blocks (`cache_limit`), `QueuedDevice` writes behind, and a
/// flush still calls `fdatasync` (the disk's cache, and the file's block map on the host).
pub const DIRECT_IO_DEFAULT: bool = true;

/// Whether the daemon's device files bypass the host's page cache (`O_DIRECT`), from the
/// value of `TARN_DIRECT_IO` (`on`/`off`, `1`/`0`; [`DIRECT_IO_DEFAULT`] when unset or
/// empty). A file system without `O_DIRECT` (tmpfs) gets buffered I/O either way
/// (tarn-device `FileOpenOptions::direct`).
///
/// # Errors
/// Any other value: the daemon refuses to start rather than guess.
pub fn direct_io(value: Option<&str>) -> Result<bool, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(DIRECT_IO_DEFAULT),
        Some("on" | "1") => Ok(true),
        Some("off" | "0") => Ok(false),
        Some(other) => Err(format!(
            "cannot use TARN_DIRECT_IO '{other}': expected on or off"
        )),
    }
}

/// The byte limit of the engine's clean-block cache (ZFS's `zfs_arc_max`): `TARN_ARC_MAX`
/// (a size: `4G`, `512M`, bytes) when set, else a quarter of the machine's memory
/// (`MemTotal` of /proc/meminfo; a quarter rather than ZFS's half, the process also holds
/// dirty data and its own state), else the engine's default. Module `memory` shrinks the
/// cache below it while the machine is short of memory.
#[must_use]
pub fn cache_limit() -> u64 {
    if let Some(bytes) = env_arc_max() {
        return bytes;
    }
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_total(&text))
        .map_or(tarn_engine::CACHE_BYTES_DEFAULT, |total| total / 4)
}

/// `TARN_ARC_MAX` as a byte count, when set to a size.
#[must_use]
pub fn env_arc_max() -> Option<u64> {
    std::env::var("TARN_ARC_MAX")
        .ok()
        .and_then(|v| tarn_base::units::parse_size(&v).ok())
}

/// `MemTotal` of /proc/meminfo, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

impl EngineBackend {
    /// Opens the backend for the daemon of `rundir` and starts the txg sync thread.
    pub fn new(rundir: &Path) -> Result<EngineBackend, String> {
        let direct = direct_io(std::env::var("TARN_DIRECT_IO").ok().as_deref())?;
        let mut backend = EngineBackend::with_engine(Arc::new(file_engine(direct)))?;
        backend.arc = Arc::new(crate::memory::ArcControl::new(
            Arc::clone(&backend.engine),
            Some(rundir),
        ));
        crate::memory::ArcControl::start(&backend.arc)?;
        backend.nbd = Arc::new(crate::nbd::NbdTable::new(
            Arc::clone(&backend.engine),
            Some(rundir),
        ));
        crate::zedlets::start(&backend.engine, rundir)?;
        let fronts = crate::metrics::FrontEnds {
            mounts: Arc::downgrade(&backend.mounts),
            nbd: Arc::downgrade(&backend.nbd),
        };
        for problem in crate::metrics::start(&backend.engine, rundir, &fronts) {
            // The daemon serves without metrics; its log (stderr) says why.
            eprintln!("metrics not served: {problem}");
        }
        Ok(backend)
    }

    /// The backend over `engine` with the daemon's threads (module doc) started on it: what
    /// [`EngineBackend::new`] does with the engine over files. Tests pass an engine over
    /// simulated devices to run the daemon's own txg-sync and scrub threads on faults.
    pub fn with_engine(engine: Arc<Engine>) -> Result<EngineBackend, String> {
        let batch = Arc::new(Mutex::new(()));
        start_txg_sync(&engine, &batch)?;
        start_heartbeat(&engine)?;
        let wake = Arc::new(Wake::default());
        let (weak, thread_batch, thread_wake) = (
            Arc::downgrade(&engine),
            Arc::clone(&batch),
            Arc::clone(&wake),
        );
        std::thread::Builder::new()
            .name("scrub".into())
            .spawn(move || drive_scrubs(&weak, &thread_batch, &thread_wake))
            .map_err(|e| format!("cannot start the scrub thread: {e}"))?;
        Ok(EngineBackend {
            mounts: Arc::new(MountTable::new(Arc::clone(&engine))),
            nbd: Arc::new(crate::nbd::NbdTable::new(Arc::clone(&engine), None)),
            arc: Arc::new(crate::memory::ArcControl::adopt(Arc::clone(&engine))),
            engine,
            batch,
            wake,
        })
    }

    /// The engine (for in-process front ends such as the demo).
    #[must_use]
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }
}

fn error_reply(error: &EngineError) -> Response {
    use tarn_engine::PoolError;
    match error {
        EngineError::Pool(PoolError::DeviceOpen { path, source }) => Response::Error(ErrorReply {
            message: device_error_text(source),
            verb: Some("open".into()),
            object: Some(path.clone()),
        }),
        other => Response::error(other.to_string()),
    }
}

fn device_error_text(error: &tarn_engine::DeviceError) -> String {
    let text = match error {
        tarn_engine::DeviceError::Open { source, .. }
        | tarn_engine::DeviceError::Io { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    let text = match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    };
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(chars).collect()
    })
}

fn ok(payload: ReplyPayload) -> Response {
    Response::Ok(payload)
}

fn node_kind(kind: &str) -> VdevNodeKind {
    match kind {
        "root" => VdevNodeKind::Root,
        "mirror" => VdevNodeKind::Mirror,
        "raidz1" => VdevNodeKind::Raidz(1),
        "raidz2" => VdevNodeKind::Raidz(2),
        "raidz3" => VdevNodeKind::Raidz(3),
        "draid1" => VdevNodeKind::Draid(1),
        "draid2" => VdevNodeKind::Draid(2),
        "draid3" => VdevNodeKind::Draid(3),
        "spare" | "spares" => VdevNodeKind::Spare,
        "replacing" => VdevNodeKind::Replacing,
        _ => VdevNodeKind::Leaf,
    }
}

/// `status -j`'s `scan_stats` of a scan record.
fn scan_stats(p: &tarn_engine::ScanProgress, pass: Option<(u64, u64)>) -> ScanStats {
    let state = match p.state {
        tarn_engine::ScanState::Scanning => "SCANNING",
        tarn_engine::ScanState::Paused => "PAUSED",
        tarn_engine::ScanState::Finished => "FINISHED",
        tarn_engine::ScanState::Canceled => "CANCELED",
    };
    ScanStats {
        function: p.function.name().to_ascii_uppercase(),
        state: state.into(),
        start_time: p.start_time,
        end_time: p.end_time,
        pause_time: p.pause_time,
        to_examine: p.to_examine,
        examined: p.examined,
        issued: p.issued,
        processed: p.repaired,
        errors: p.errors,
        pass_start: pass.map_or(0, |(start, _)| start),
        pass_examined: pass.map_or(0, |(_, before)| p.examined.saturating_sub(before)),
        pass_issued: pass.map_or(0, |(_, before)| p.issued.saturating_sub(before)),
    }
}

fn vdev_status(node: &VdevNode) -> VdevStatus {
    VdevStatus {
        name: node.name.clone(),
        kind: node_kind(&node.kind),
        role: VdevRole::Data,
        state: node.state.clone(),
        read: node.read,
        write: node.write,
        cksum: node.cksum,
        slow: node.slow,
        note: node.note.clone(),
        guid: node.guid,
        space: node.space,
        device_sizes: node.device_sizes,
        children: node.children.iter().map(vdev_status).collect(),
    }
}

/// Splits the engine's tree into the config tree and the spares (the proto keeps them apart);
/// the engine's `logs` and `cache` groups become top-level children with those roles.
fn split_spares(node: &VdevNode) -> (VdevStatus, Vec<VdevStatus>) {
    let mut config = vdev_status(node);
    let mut spares = Vec::new();
    let mut classes = Vec::new();
    let mut specials = Vec::new();
    config.children.retain(|child| {
        let role = match child.name.as_str() {
            _ if !child.state.is_empty() => None,
            "logs" => Some(VdevRole::Log),
            "cache" => Some(VdevRole::Cache),
            _ => None,
        };
        if child.kind == VdevNodeKind::Spare && child.name == "spares" {
            spares.extend(child.children.iter().cloned());
            false
        } else if let Some(role) = role {
            classes.extend(child.children.iter().cloned().map(|mut member| {
                member.role = role;
                member
            }));
            false
        } else if child.name == "special" && child.state.is_empty() {
            specials.extend(child.children.iter().cloned().map(|mut special| {
                special.role = VdevRole::Special;
                special
            }));
            false
        } else {
            true
        }
    });
    config.children.extend(specials);
    config.children.extend(classes);
    (config, spares)
}

fn create_spec(request: &PoolCreate) -> Result<CreateSpec, String> {
    groups_spec(&request.name, &request.vdevs, request.force)
}

/// The pool layer's spec for `vdevs` (create, or add with `name` the pool's).
fn groups_spec(name: &str, vdevs: &[VdevGroupSpec], force: bool) -> Result<CreateSpec, String> {
    let mut tops = Vec::new();
    let mut spares = Vec::new();
    let mut logs = Vec::new();
    let mut specials = Vec::new();
    let mut caches = Vec::new();
    for group in vdevs {
        group.check()?;
        let layout = match group.kind {
            VdevKind::Disk => TopLayout::Disk,
            VdevKind::Mirror => TopLayout::Mirror,
            VdevKind::Raidz(parity) => TopLayout::Raidz(parity),
            VdevKind::Draid {
                parity,
                data,
                spares,
            } => TopLayout::Draid {
                parity,
                data,
                spares,
            },
        };
        let top = TopSpec {
            layout,
            devices: group.devices.clone(),
        };
        match group.role {
            VdevRole::Data => tops.push(top),
            VdevRole::Log => logs.push(top),
            VdevRole::Special => specials.push(top),
            VdevRole::Spare => spares.extend(group.devices.iter().cloned()),
            VdevRole::Cache => caches.extend(group.devices.iter().cloned()),
        }
    }
    Ok(CreateSpec {
        name: name.to_string(),
        tops,
        spares,
        caches,
        logs,
        specials,
        ashift: tarn_base::limits::ASHIFT_DEFAULT,
        force,
    })
}

fn role_name(role: VdevRole) -> &'static str {
    match role {
        VdevRole::Data => "data",
        VdevRole::Spare => "spare",
        VdevRole::Log => "log",
        VdevRole::Cache => "cache",
        VdevRole::Special => "special",
    }
}

fn group_text(group: &VdevGroupSpec) -> String {
    let mut words = Vec::new();
    match group.role {
        VdevRole::Data => {}
        role => words.push(role_name(role).to_string()),
    }
    match group.kind {
        VdevKind::Disk => {}
        VdevKind::Mirror => words.push("mirror".into()),
        VdevKind::Raidz(parity) => words.push(format!("raidz{parity}")),
        VdevKind::Draid {
            parity,
            data,
            spares,
        } => {
            let children = group.devices.len();
            words.push(format!("draid{parity}:{data}d:{children}c:{spares}s"));
        }
    }
    words.extend(group.devices.iter().cloned());
    words.join(" ")
}

fn add_command(request: &PoolAdd) -> String {
    let mut words = vec!["pool add".to_string()];
    if request.force {
        words.push("-f".into());
    }
    words.push(request.name.clone());
    words.extend(request.vdevs.iter().map(group_text));
    words.join(" ")
}

fn create_command(request: &PoolCreate) -> String {
    let mut words = vec!["pool create".to_string()];
    if request.force {
        words.push("-f".into());
    }
    for (name, value) in &request.properties {
        words.push(format!("-o {name}={value}"));
    }
    words.push(request.name.clone());
    words.extend(request.vdevs.iter().map(group_text));
    words.join(" ")
}

fn search_dirs(dirs: &[String]) -> Vec<String> {
    if dirs.is_empty() {
        DEFAULT_SEARCH_DIRS
            .iter()
            .map(|d| (*d).to_string())
            .collect()
    } else {
        dirs.to_vec()
    }
}

/// `tarn pool status` replies for `names` (every pool when empty).
pub fn status_infos(engine: &Engine, names: &[String]) -> Result<Vec<PoolStatusInfo>, EngineError> {
    let names = if names.is_empty() {
        engine.pool_names()
    } else {
        names.to_vec()
    };
    names
        .iter()
        .map(|name| {
            let status = engine.status(name)?;
            let (config, _) = split_spares(&status.config);
            Ok(PoolStatusInfo {
                name: status.name,
                guid: status.guid,
                state: status.state,
                status: status.status,
                action: status.action,
                see: status.see,
                scan: status.scan,
                config,
                spares: status.spares.iter().map(vdev_status).collect(),
                error_count: status.errors.len() as u64,
                errors: status.errors,
                txg: status.txg,
                scan_stats: status
                    .scan_progress
                    .map(|p| scan_stats(&p, status.scan_pass)),
            })
        })
        .collect()
}

impl EngineBackend {
    fn create(&self, request: &PoolCreate) -> Response {
        let spec = match create_spec(request) {
            Ok(spec) => spec,
            Err(message) => return Response::error(message),
        };
        let options = CreateOptions {
            properties: request.properties.clone(),
            dry_run: request.dry_run,
            command: create_command(request),
            root_properties: request
                .fs_properties
                .iter()
                .cloned()
                .chain(
                    request
                        .mountpoint
                        .iter()
                        .map(|m| ("mountpoint".into(), m.clone())),
                )
                .collect(),
        };
        match self.engine.create_pool(&spec, &options) {
            Ok(Some(layout)) => {
                let (config, spares) = split_spares(&layout);
                ok(ReplyPayload::Layout(PoolLayout { config, spares }))
            }
            Ok(None) => notices_reply(self.mounts.mount_pool(&request.name)),
            Err(e) => error_reply(&e),
        }
    }

    fn add(&self, request: &PoolAdd) -> Response {
        let spec = match groups_spec(&request.name, &request.vdevs, request.force) {
            Ok(spec) => spec,
            Err(message) => return Response::error(message),
        };
        let command = add_command(request);
        match self
            .engine
            .add_vdevs(&request.name, &spec, request.dry_run, &command)
        {
            Ok(Some(layout)) => {
                let (config, spares) = split_spares(&layout);
                ok(ReplyPayload::Layout(PoolLayout { config, spares }))
            }
            Ok(None) => ok(ReplyPayload::Unit),
            Err(e) => error_reply(&e),
        }
    }

    /// `pool add` and `pool remove`.
    fn topology(&self, request: &Request) -> Option<Response> {
        match request {
            Request::PoolAdd(add) => Some(self.add(add)),
            Request::PoolRemove { name, device } => Some(self.remove(name, device)),
            _ => None,
        }
    }

    fn remove(&self, name: &str, device: &str) -> Response {
        let command = format!("pool remove {name} {device}");
        match self.engine.remove_vdev(name, device, &command) {
            Ok(()) => ok(ReplyPayload::Unit),
            Err(e) => device_verb_error(&e, name),
        }
    }

    fn import(&self, request: &PoolImport) -> Response {
        let options = ImportOptions {
            max_txg: request.rewind_txg.map(tarn_base::Txg),
            rewind: request.rewind || request.extreme || request.rewind_txg.is_some(),
            force: request.force,
            readonly: request.readonly,
            new_name: request.new_name.clone(),
        };
        let mut command = String::from("pool import");
        for dir in &request.dirs {
            command.push_str(&format!(" -d {dir}"));
        }
        if let Some(txg) = request.rewind_txg {
            command.push_str(&format!(" -T {txg}"));
        }
        if request.extreme {
            command.push_str(" -X");
        } else if request.rewind {
            command.push_str(" -F");
        }
        command.push_str(&format!(" {}", request.pool));
        let recovery = tarn_engine::Recovery {
            extreme: request.extreme,
        };
        let dirs = search_dirs(&request.dirs);
        let imported = if request.dry_run {
            self.engine
                .import_preview(&dirs, &request.pool, &options, recovery)
        } else {
            self.engine
                .import_pool_with(&dirs, &request.pool, &options, recovery, &command)
        };
        let report = match imported {
            Ok(report) => report,
            Err(e) => return error_reply(&e),
        };
        let notices = match request.dry_run {
            true => Vec::new(),
            false => self.mounts.mount_pool(&report.name),
        };
        if !request.dry_run && !report.rewound() {
            return notices_reply(notices);
        }
        ok(ReplyPayload::Imported(tarn_proto::ImportInfo {
            pool: report.name,
            txg: report.opened.txg.0,
            timestamp: report.opened.time,
            newest_txg: report.newest.txg.0,
            newest_timestamp: report.newest.time,
            dry_run: request.dry_run,
            notices,
        }))
    }

    fn status(&self, names: &[String]) -> Result<Vec<PoolStatusInfo>, EngineError> {
        status_infos(&self.engine, names)
    }

    fn list(&self, names: &[String]) -> Result<Vec<PoolListRow>, EngineError> {
        Ok(self
            .engine
            .list(names)?
            .into_iter()
            .map(|s| PoolListRow {
                name: s.name,
                size: s.size,
                alloc: s.allocated,
                free: s.free,
                checkpoint: None,
                expandsize: None,
                frag: Some(s.fragmentation),
                cap: s.capacity,
                dedup_hundredths: 100,
                health: s.health,
                altroot: None,
                guid: s.guid,
            })
            .collect())
    }

    fn get(
        &self,
        properties: &[String],
        names: &[String],
    ) -> Result<Vec<PropertyRow>, EngineError> {
        let names = if names.is_empty() {
            self.engine.pool_names()
        } else {
            names.to_vec()
        };
        let mut rows = Vec::new();
        for name in names {
            for value in self.engine.get_props(&name, properties)? {
                rows.push(PropertyRow {
                    name: value.name,
                    property: value.property,
                    value: value.value,
                    source: value.source,
                });
            }
        }
        Ok(rows)
    }

    fn history(&self, names: &[String], internal: bool) -> Result<Vec<HistoryPool>, EngineError> {
        let names = if names.is_empty() {
            self.engine.pool_names()
        } else {
            names.to_vec()
        };
        names
            .into_iter()
            .map(|name| {
                let entries = self
                    .engine
                    .history(&name)?
                    .into_iter()
                    .filter(|r| internal || !r.internal)
                    .map(|r| HistoryEntry {
                        time: r.time,
                        command: format!("tarn {}", r.command),
                        internal: r.internal,
                        uid: 0,
                        user: r.user,
                        host: r.host,
                    })
                    .collect();
                Ok(HistoryPool { name, entries })
            })
            .collect()
    }
}

fn scrub_command(names: &[String], action: tarn_proto::ScrubAction, wait: bool) -> String {
    let mut words = vec!["pool scrub".to_string()];
    match action {
        tarn_proto::ScrubAction::Start => {}
        tarn_proto::ScrubAction::Pause => words.push("-p".into()),
        tarn_proto::ScrubAction::Stop => words.push("-s".into()),
    }
    if wait {
        words.push("-w".into());
    }
    words.extend(names.iter().cloned());
    words.join(" ")
}

/// An error naming the pool as `open` does (`cannot open 'x': no such pool`) when the pool is
/// unknown; otherwise the plain reply.
fn device_verb_error(error: &EngineError, pool: &str) -> Response {
    match error {
        EngineError::NoSuchPool => Response::Error(ErrorReply {
            message: error.to_string(),
            verb: Some("open".into()),
            object: Some(pool.to_string()),
        }),
        other => error_reply(other),
    }
}

impl EngineBackend {
    fn scrub(
        &self,
        names: &[String],
        action: tarn_proto::ScrubAction,
        wait: bool,
        progress: &mut dyn FnMut(Progress),
    ) -> Response {
        let engine_action = match action {
            tarn_proto::ScrubAction::Start => ScrubAction::Start,
            tarn_proto::ScrubAction::Pause => ScrubAction::Pause,
            tarn_proto::ScrubAction::Stop => ScrubAction::Cancel,
        };
        if names.is_empty() {
            return Response::error("missing pool name");
        }
        let command = scrub_command(names, action, wait);
        if let Err((pool, error)) = self.engine.scrub(names, engine_action, &command) {
            return Response::Error(ErrorReply {
                message: error.to_string(),
                verb: None,
                object: Some(pool),
            });
        }
        self.wake.notify();
        if wait {
            self.wait_scrubs(names, progress);
        }
        ok(ReplyPayload::Unit)
    }

    /// Reports progress until no named pool is scrubbing (or imported) any more.
    fn wait_scrubs(&self, names: &[String], progress: &mut dyn FnMut(Progress)) {
        loop {
            let (mut done, mut total, mut running) = (0, 0, false);
            for name in names {
                if let Ok(Some(scan)) = self.engine.scan_progress(name) {
                    running |= scan.state == ScanState::Scanning;
                    done += scan.issued;
                    total += scan.to_examine;
                }
            }
            progress(Progress {
                operation: "scrub".into(),
                done,
                total,
            });
            if !running {
                return;
            }
            let scanning = || {
                names.iter().any(|name| {
                    let scan = self.engine.scan_progress(name);
                    matches!(scan, Ok(Some(s)) if s.state == ScanState::Scanning)
                })
            };
            if wait_for_report(&scanning) {
                // One last report with the final figures.
                continue;
            }
        }
    }

    /// Reports progress until `name` runs no scan that `activity` names (module doc of
    /// `tarn pool wait`): `scrub`, `resilver`, `replace` (a resilver, and the scrub that
    /// follows a sequential one), or any scan when `None`.
    fn wait_activity(
        &self,
        name: &str,
        activity: Option<&str>,
        progress: &mut dyn FnMut(Progress),
    ) -> Response {
        loop {
            let scan = match self.engine.scan_progress(name) {
                Ok(scan) => scan,
                Err(e) => return error_reply(&e),
            };
            let running = scan.filter(|s| {
                let resilver = s.function == ScanFunction::Resilver;
                s.state == ScanState::Scanning
                    && match activity {
                        None => true,
                        Some("scrub") => !resilver,
                        Some("resilver") => resilver,
                        Some(_) => resilver || s.sequential,
                    }
            });
            let Some(scan) = running else {
                return ok(ReplyPayload::Unit);
            };
            let operation = match (scan.function, scan.sequential) {
                (ScanFunction::Resilver, false) => "resilver",
                (ScanFunction::Resilver, true) => "resilver (sequential)",
                (ScanFunction::Scrub, false) => "scrub",
                (ScanFunction::Scrub, true) => "scrub (after a sequential resilver)",
            };
            progress(Progress {
                operation: operation.into(),
                done: scan.issued,
                total: scan.to_examine,
            });
            let same = || {
                let now = self.engine.scan_progress(name);
                matches!(now, Ok(Some(s)) if s.state == ScanState::Scanning
                    && (s.function, s.sequential) == (scan.function, scan.sequential))
            };
            wait_for_report(&same);
        }
    }

    fn online(&self, name: &str, device: &str) -> Response {
        let command = format!("pool online {name} {device}");
        match self.engine.online(name, device, &command) {
            Ok(outcome) if outcome.resilver_from.is_some() => {
                self.wake.notify();
                ok(ReplyPayload::Unit)
            }
            Ok(_) => ok(ReplyPayload::Unit),
            Err(e) => device_verb_error(&e, name),
        }
    }

    /// replace, attach and detach; a started resilver wakes the background thread.
    fn replace(&self, request: &Request) -> Response {
        let (name, result) = match request {
            Request::PoolReplace {
                name,
                old,
                new,
                sequential,
                force,
                ..
            } => {
                let s = if *sequential { "-s " } else { "" };
                let f = if *force { "-f " } else { "" };
                let command = match new {
                    Some(new) => format!("pool replace {s}{f}{name} {old} {new}"),
                    None => format!("pool replace {s}{f}{name} {old}"),
                };
                let options = tarn_engine::replace::ReplaceOptions {
                    sequential: *sequential,
                    force: *force,
                };
                let new = new.as_deref();
                let result = self.engine.replace_with(name, old, new, options, &command);
                (name, result)
            }
            Request::PoolAttach { name, device, new } => {
                let command = format!("pool attach {name} {device} {new}");
                (name, self.engine.attach(name, device, new, &command))
            }
            Request::PoolDetach { name, device } => {
                let command = format!("pool detach {name} {device}");
                (name, self.engine.detach(name, device, &command))
            }
            _ => return Response::error("not a replace, attach or detach request"),
        };
        match result {
            Ok(()) => {
                self.wake.notify();
                ok(ReplyPayload::Unit)
            }
            Err(e) => device_verb_error(&e, name),
        }
    }

    fn devices(&self, request: &Request) -> Option<Response> {
        let response = match request {
            Request::PoolClear { name, device } => {
                let command = match device {
                    Some(device) => format!("pool clear {name} {device}"),
                    None => format!("pool clear {name}"),
                };
                match self.engine.clear(name, device.as_deref(), &command) {
                    Ok(()) => ok(ReplyPayload::Unit),
                    Err(e) => device_verb_error(&e, name),
                }
            }
            Request::PoolOffline {
                name,
                device,
                temporary,
            } => {
                let flag = if *temporary { "-t " } else { "" };
                let command = format!("pool offline {flag}{name} {device}");
                match self.engine.offline(name, device, *temporary, &command) {
                    Ok(()) => ok(ReplyPayload::Unit),
                    Err(e) => device_verb_error(&e, name),
                }
            }
            Request::PoolOnline { name, device } => self.online(name, device),
            Request::PoolSync { names } => self.sync_pools(names),
            Request::PoolEvents { name, after, clear } => {
                if let Some(name) = name
                    && let Err(e) = self.engine.pool(name)
                {
                    return Some(device_verb_error(&e, name));
                }
                let rows = self
                    .engine
                    .events(name.as_deref(), *after, *clear)
                    .into_iter()
                    .map(|e| tarn_proto::EventRow {
                        eid: e.eid,
                        time: e.time,
                        class: e.class,
                        pool: e.pool,
                        vdev_guid: e.vdev_guid,
                        vdev_path: e.vdev_path,
                        payload: e.payload,
                    })
                    .collect();
                ok(ReplyPayload::Events(rows))
            }
            Request::PoolReplace { .. }
            | Request::PoolAttach { .. }
            | Request::PoolDetach { .. } => self.replace(request),
            _ => return self.topology(request),
        };
        Some(response)
    }
}

const _: () = assert!(tarn_proto::IOSTAT_LATENCY_BUCKETS == tarn_engine::LATENCY_BUCKETS);
const _: () = assert!(tarn_proto::IOSTAT_SIZE_BUCKETS == tarn_engine::SIZE_BUCKETS);

/// `pool iostat`: the engine's running totals as protocol rows.
fn iostat(engine: &Engine, request: &Request) -> Option<Response> {
    let Request::PoolIostat { names } = request else {
        return None;
    };
    fn wait(latencies: &tarn_engine::Latencies) -> tarn_proto::IostatWait {
        tarn_proto::IostatWait {
            total_ns: latencies.total_ns,
            histogram: latencies.buckets.to_vec(),
        }
    }
    fn row(node: tarn_engine::IostatNode) -> tarn_proto::IostatRow {
        let w = &node.waits;
        let waits = tarn_proto::IostatWaits {
            total_read: wait(&w.total_read),
            total_write: wait(&w.total_write),
            disk_read: wait(&w.disk_read),
            disk_write: wait(&w.disk_write),
            syncq_read: wait(&w.syncq_read),
            asyncq_write: wait(&w.asyncq_write),
        };
        tarn_proto::IostatRow {
            waits,
            read_sizes: node.read_sizes.to_vec(),
            write_sizes: node.write_sizes.to_vec(),
            reads_pending: node.reads_pending,
            name: node.name,
            alloc: node.alloc,
            free: node.free,
            read_ops: node.read_ops,
            write_ops: node.write_ops,
            read_bytes: node.read_bytes,
            write_bytes: node.write_bytes,
            read_wait_ns: node.read_wait_ns,
            write_wait_ns: node.write_wait_ns,
            reads_active: node.reads_active,
            writes_active: node.writes_active,
            writes_pending: node.writes_pending,
            children: node.children.into_iter().map(row).collect(),
        }
    }
    let response = match engine.iostat(names) {
        Ok(pools) => ok(ReplyPayload::Iostat(
            pools
                .into_iter()
                .map(|pool| tarn_proto::IostatPool {
                    name: pool.name,
                    time_ns: pool.time_ns,
                    imported_ns: pool.imported_ns,
                    root: row(pool.root),
                })
                .collect(),
        )),
        Err(e) => error_reply(&e),
    };
    Some(response)
}

fn dataset_rows(rows: Vec<tarn_engine::DatasetRow>) -> Vec<tarn_proto::DatasetRow> {
    rows.into_iter()
        .map(|row| tarn_proto::DatasetRow {
            name: row.name,
            props: row
                .props
                .into_iter()
                .map(|p| tarn_proto::DatasetProp {
                    property: p.property,
                    value: p.value,
                    parsable: p.parsable,
                    source: p.source,
                    source_kind: p.source_kind,
                })
                .collect(),
        })
        .collect()
}

fn assignments_text(assignments: &[(String, String)]) -> String {
    assignments
        .iter()
        .map(|(p, v)| format!("{p}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The history line of `hold` or `release`.
fn hold_command(verb: &str, tag: &str, names: &[String], recursive: bool) -> String {
    let flag = if recursive { " -r" } else { "" };
    format!("{verb}{flag} {tag} {}", names.join(" "))
}

impl EngineBackend {
    /// `hold`, `release` and `holds`; `None` for other requests.
    fn holds(&self, request: &Request) -> Option<Response> {
        let engine = &self.engine;
        let unit = |()| ok(ReplyPayload::Unit);
        let result = match request {
            Request::Hold {
                tag,
                names,
                recursive,
            } => {
                let command = hold_command("hold", tag, names, *recursive);
                engine.hold(tag, names, *recursive, &command).map(unit)
            }
            Request::Release {
                tag,
                names,
                recursive,
            } => {
                let command = hold_command("release", tag, names, *recursive);
                engine.release(tag, names, *recursive, &command).map(unit)
            }
            Request::Holds { names, recursive } => engine.holds(names, *recursive).map(|rows| {
                let rows = rows
                    .into_iter()
                    .map(|r| tarn_proto::HoldRow {
                        name: r.name,
                        tag: r.tag,
                        time: r.time,
                        when: r.when,
                    })
                    .collect();
                ok(ReplyPayload::Holds(rows))
            }),
            Request::Diff { from, to } => engine.diff(from, to.as_deref()).map(|lines| {
                let rows = lines
                    .into_iter()
                    .map(|l| tarn_proto::DiffRow {
                        change: l.change.to_string(),
                        file: l.file.to_string(),
                        path: l.path,
                        new_path: l.new_path,
                        ctime: format!("{}.{:09}", l.ctime.0, l.ctime.1),
                        links: l.links,
                    })
                    .collect();
                ok(ReplyPayload::Diff(rows))
            }),
            _ => return None,
        };
        Some(result.unwrap_or_else(|e| error_reply(&e)))
    }

    /// The snapshot verbs (`snapshot`, `rollback`, `destroy DS@SNAP`, holds); `None` for other
    /// requests.
    fn snapshots(&self, request: &Request) -> Option<Response> {
        if let Some(response) = self.holds(request) {
            return Some(response);
        }
        let engine = &self.engine;
        let unit = |()| ok(ReplyPayload::Unit);
        let result = match request {
            Request::DatasetDestroy {
                name,
                recursive,
                dry_run,
                defer,
                dependents,
                ..
            } if name.contains('@') => {
                let flag = if *recursive { "-r " } else { "" };
                let defer_flag = if *defer { "-d " } else { "" };
                let deps = if *dependents { "-R " } else { "" };
                let command = format!("destroy {defer_flag}{deps}{flag}{name}");
                engine
                    .destroy_snapshots_with(
                        name,
                        *recursive,
                        *dry_run,
                        *defer,
                        *dependents,
                        &command,
                    )
                    .map(|report| {
                        ok(ReplyPayload::SnapshotsDestroyed {
                            names: report.destroyed,
                            reclaimed: report.reclaimed,
                        })
                    })
            }
            Request::Snapshot {
                names,
                recursive,
                properties,
            } => {
                let mut command = String::from("snapshot");
                if *recursive {
                    command.push_str(" -r");
                }
                for (p, v) in properties {
                    command.push_str(&format!(" -o {p}={v}"));
                }
                command.push_str(&format!(" {}", names.join(" ")));
                engine
                    .snapshot(names, *recursive, properties, &command)
                    .map(unit)
            }
            Request::ReceiveAbort { target } => engine.receive_abort(target).map(unit),
            Request::Send { dry_run: true, .. } => {
                let spec = send_spec(request)?;
                return Some(self.send(&spec, false, Box::new(std::io::sink()), &mut |_| {}));
            }
            Request::Rollback { .. }
            | Request::Clone { .. }
            | Request::Promote { .. }
            | Request::Bookmark { .. } => clone_verbs(engine, request).map(unit),
            _ => return None,
        };
        Some(result.unwrap_or_else(|e| error_reply(&e)))
    }

    /// The dataset verbs; `None` for other requests.
    fn datasets(&self, request: &Request) -> Option<Response> {
        if let Some(response) = self.snapshots(request) {
            return Some(response);
        }
        let engine = &self.engine;
        let unit = |()| ok(ReplyPayload::Unit);
        let result = match request {
            Request::DatasetCreate {
                name,
                properties,
                parents,
                volume,
            } => create_dataset(engine, name, properties, *parents, volume.as_ref()).map(unit),
            Request::DatasetDestroy {
                name,
                recursive,
                dependents,
                ..
            } => {
                let flag = if *recursive { "-r " } else { "" };
                let deps = if *dependents { "-R " } else { "" };
                let command = format!("destroy {deps}{flag}{name}");
                engine
                    .destroy_dataset_with(name, *recursive, *dependents, &command)
                    .map(unit)
            }
            Request::DatasetRename {
                old,
                new,
                recursive: false,
            } => engine
                .rename_dataset(old, new, &format!("rename {old} {new}"))
                .map(unit),
            Request::DatasetRename { old, new, .. } => engine
                .rename_snapshots(old, new, &format!("rename -r {old} {new}"))
                .map(unit),
            Request::DatasetGet(get) => {
                let query = tarn_engine::DatasetQuery {
                    names: get.names.clone(),
                    recursive: get.recursive,
                    depth: get.depth.map(|d| d as usize),
                    properties: get.properties.clone(),
                    types: get.types.clone(),
                };
                engine
                    .dataset_props(&query)
                    .map(|rows| ok(ReplyPayload::Datasets(dataset_rows(rows))))
            }
            Request::DatasetSet {
                name,
                assignments,
                force,
            } => set_dataset(engine, name, assignments, *force).map(unit),
            Request::DatasetInherit {
                name,
                property,
                recursive,
            } => {
                let flag = if *recursive { "-r " } else { "" };
                let command = format!("inherit {flag}{property} {name}");
                engine
                    .inherit_prop(name, property, *recursive, &command)
                    .map(unit)
            }
            _ => return self.userspace(request),
        };
        Some(result.unwrap_or_else(|e| error_reply(&e)))
    }

    /// `tarn project`: the dataset is the mount holding the path.
    fn project(&self, request: &Request) -> Option<Response> {
        let Request::Project {
            path,
            id,
            inherit,
            clear,
            keep,
            recursive,
        } = request
        else {
            return crate::checksum::serve(&self.engine, &self.mounts, request);
        };
        let Some((name, within)) = self.mounts.locate(Path::new(path)) else {
            return Some(Response::error(
                "not inside a mounted tarn dataset".to_string(),
            ));
        };
        let change = (id.is_some() || *inherit || *clear).then_some(tarn_engine::ProjectChange {
            id: *id,
            inherit: *inherit,
            clear: *clear,
            keep_id: *keep,
        });
        let rows = self.engine.find_dataset(&name).and_then(|(pool, dataset)| {
            self.engine
                .fs_project(&pool, dataset, &within, change, *recursive)
        });
        // A change sets the ctime of what it touched (even when it failed part way): the
        // kernel's cached attributes of those files are stale. Best effort: a failed
        // notification leaves them to expire with their TTL.
        if change.is_some() {
            let _ = self.mounts.invalidate(&name);
        }
        // The engine names files from the dataset's root (`.` for the root itself); the
        // reply names them from the path asked.
        let prefix = path.trim_end_matches('/');
        let root = match within.trim_matches('/') {
            "" => ".",
            _ => within.trim_end_matches('/'),
        };
        Some(match rows {
            Ok(rows) => ok(ReplyPayload::Projects(
                rows.into_iter()
                    .map(|r| tarn_proto::ProjectRow {
                        path: format!("{prefix}{}", r.path.strip_prefix(root).unwrap_or("")),
                        id: r.id,
                        inherit: r.inherit,
                    })
                    .collect(),
            )),
            Err(e) => error_reply(&e),
        })
    }

    /// `tarn userspace` and its kin, `tarn project`; `None` for other requests.
    fn userspace(&self, request: &Request) -> Option<Response> {
        let Request::Userspace { name, space } = request else {
            return self.project(request);
        };
        let space = match space.as_str() {
            "user" => tarn_engine::OwnerSpace::User,
            "group" => tarn_engine::OwnerSpace::Group,
            "project" => tarn_engine::OwnerSpace::Project,
            other => {
                return Some(Response::error(format!(
                    "unknown space '{other}' (user, group or project)"
                )));
            }
        };
        let rows = match self.engine.userspace(name, space) {
            Ok(rows) => rows,
            Err(e) => return Some(error_reply(&e)),
        };
        let rows = rows
            .into_iter()
            .map(|r| tarn_proto::UserspaceRow {
                id: r.id,
                used: r.used,
                quota: r.quota,
                objused: r.objused,
                objquota: r.objquota,
            })
            .collect();
        Some(ok(ReplyPayload::Userspace(rows)))
    }

    fn import_list(&self, dirs: &[String]) -> Response {
        let pools = self.engine.importable(&search_dirs(dirs));
        ok(ReplyPayload::Importable(
            pools
                .iter()
                .map(|p| {
                    let (config, spares) = split_spares(&p.config);
                    ImportablePool {
                        name: p.name.clone(),
                        guid: p.guid,
                        state: p.state.clone(),
                        status: p.status.clone(),
                        action: p.action.clone(),
                        see: p.see.clone(),
                        config,
                        spares,
                    }
                })
                .collect(),
        ))
    }
}

/// A receive's progress report: the total is the stream's size when its sender put it in
/// the stream (a sized send), else 0 (unknown: bytes and rate, no ETA).
fn receive_progress(read: tarn_engine::ReceiveProgress) -> Progress {
    Progress {
        operation: "receive".into(),
        done: read.bytes,
        total: read.total,
    }
}

/// The engine's view of a `Request::Send`.
fn send_spec(request: &Request) -> Option<tarn_engine::SendSpec> {
    let Request::Send {
        snapshot,
        from,
        intermediates,
        token,
        dry_run,
        properties,
        large_blocks,
        embedded,
        replicate,
        compressed,
        ..
    } = request
    else {
        return None;
    };
    Some(tarn_engine::SendSpec {
        snapshot: snapshot.clone(),
        from: from.clone(),
        intermediates: *intermediates,
        token: token.clone(),
        dry_run: *dry_run,
        properties: *properties,
        large_blocks: *large_blocks,
        embedded: *embedded,
        replicate: *replicate,
        compressed: *compressed,
        stream_size: 0,
    })
}

impl EngineBackend {
    /// `tarn send`: the stream goes to `file` (the CLI's stdout). When `sized`, a dry run
    /// sizes the stream first (from block pointers, no data read), so that each progress
    /// report carries the total and the stream's first BEGIN too (for its receiver's
    /// ETA); a dry run that fails leaves the total unknown (0, and the stream unsized), and
    /// the send itself says what is wrong.
    fn send(
        &self,
        spec: &tarn_engine::SendSpec,
        sized: bool,
        file: Box<dyn std::io::Write>,
        progress: &mut dyn FnMut(Progress),
    ) -> Response {
        let total = match sized && !spec.dry_run {
            true => self.engine.send_size(spec).unwrap_or(0),
            false => 0,
        };
        let spec = &tarn_engine::SendSpec {
            stream_size: total,
            ..spec.clone()
        };
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        let mut report = |done| {
            progress(Progress {
                operation: "send".into(),
                done,
                total,
            });
        };
        match self.engine.send(spec, &mut out, &mut report) {
            Ok(sent) => ok(ReplyPayload::Sent {
                streams: sent.streams,
                sizes: sent.sizes,
                bytes: sent.bytes,
            }),
            Err(error) => error_reply(&error),
        }
    }

    /// `tarn receive`: the stream comes from `file` (the CLI's stdin). The destination is
    /// unmounted while it is received and mounted again after (unless `unmounted`: then it
    /// is held unmounted, module `mounts`); a dry run leaves the mounts alone.
    fn receive(
        &self,
        spec: &tarn_engine::ReceiveSpec,
        unmounted: bool,
        file: std::fs::File,
        progress: &mut dyn FnMut(Progress),
    ) -> Response {
        let target = spec.target.as_str();
        let dataset = target.split('@').next().unwrap_or(target).to_string();
        if !spec.dry_run
            && let Err(error) = self.mounts.unmount_dataset(&dataset)
        {
            return Response::error(error.to_string());
        }
        let mut input = std::io::BufReader::with_capacity(1 << 20, file);
        let mut report = |read: tarn_engine::ReceiveProgress| progress(receive_progress(read));
        let result = self.engine.receive(spec, &mut input, &mut report);
        let pool = dataset.split('/').next().unwrap_or(&dataset);
        let notices = match (&result, unmounted) {
            _ if spec.dry_run => Vec::new(),
            (Ok(_), true) => {
                self.mounts.hold_unmounted_within(&dataset);
                Vec::new()
            }
            _ => self.mounts.mount_pool(pool),
        };
        match result {
            Ok(received) => {
                let _ = notices;
                ok(ReplyPayload::Received {
                    snapshots: received.snapshots,
                    bytes: received.bytes,
                    destroyed: received.destroyed,
                    renamed: received.renamed,
                    skipped: received.skipped,
                })
            }
            Err(error) => error_reply(&error),
        }
    }
}

impl EngineBackend {
    /// `tarn receive [-n] -c SNAP`: heals the snapshot's damaged blocks from the stream in
    /// `file` (with `dry_run` only says which it would). Nothing is unmounted: no dataset
    /// changes.
    fn receive_corrective(
        &self,
        snapshot: &str,
        dry_run: bool,
        file: std::fs::File,
        progress: &mut dyn FnMut(Progress),
    ) -> Response {
        let mut input = std::io::BufReader::with_capacity(1 << 20, file);
        let mut report = |read: tarn_engine::ReceiveProgress| progress(receive_progress(read));
        let place =
            |fix: &tarn_engine::BlockFix| format!("object {} offset {}", fix.object, fix.offset);
        // A metadata block's `why` names it; a data block's follows its place.
        let unhealed = |fix: &tarn_engine::BlockFix| match fix.metadata {
            true => fix.why.clone(),
            false => format!("{}: {}", place(fix), fix.why),
        };
        match self
            .engine
            .receive_corrective_with(snapshot, dry_run, &mut input, &mut report)
        {
            Ok(done) => ok(ReplyPayload::Corrected {
                snapshot: done.snapshot,
                checked: done.checked,
                healed: done.healed.iter().map(place).collect(),
                unhealed: done.unhealed.iter().map(unhealed).collect(),
                bytes: done.bytes,
            }),
            Err(error) => error_reply(&error),
        }
    }
}

impl Handler for EngineBackend {
    fn handle_with_progress(
        &self,
        request: Request,
        progress: &mut dyn FnMut(Progress),
    ) -> Response {
        match &request {
            Request::PoolScrub {
                names,
                action,
                wait,
            } => self.scrub(names, *action, *wait, progress),
            Request::PoolReplace {
                name, wait: true, ..
            } => match self.replace(&request) {
                Response::Ok(_) => self.wait_activity(name, Some("replace"), progress),
                refused => refused,
            },
            Request::PoolWait { name, activity } => {
                self.wait_activity(name, activity.as_deref(), progress)
            }
            _ => self.handle(request),
        }
    }

    fn handle_stream(
        &self,
        request: Request,
        stream: std::os::fd::OwnedFd,
        progress: &mut dyn FnMut(Progress),
    ) -> Response {
        let file = std::fs::File::from(stream);
        match &request {
            Request::Send { sized, .. } => match send_spec(&request) {
                Some(spec) => self.send(&spec, *sized, Box::new(file), progress),
                None => Response::error("not a send"),
            },
            Request::Receive {
                target,
                force,
                unmounted,
                resumable,
                dry_run,
                append,
                set,
                exclude,
                corrective: false,
            } => {
                let spec = tarn_engine::ReceiveSpec {
                    target: target.clone(),
                    force: *force,
                    resumable: *resumable,
                    dry_run: *dry_run,
                    append: *append,
                    set: set.clone(),
                    exclude: exclude.clone(),
                    origin: None,
                };
                self.receive(&spec, *unmounted, file, progress)
            }
            Request::Receive {
                target,
                corrective: true,
                dry_run,
                ..
            } => self.receive_corrective(target, *dry_run, file, progress),
            other => Response::error(format!("'{}' carries no stream", other.verb())),
        }
    }

    fn handle(&self, request: Request) -> Response {
        if let Some(response) = self.memory(&request) {
            return response;
        }
        if matches!(request, Request::NbdList) {
            let rows = self
                .nbd
                .served()
                .into_iter()
                .map(|v| tarn_proto::NbdExportRow {
                    pool: v.pool,
                    volume: v.volume,
                    socket: v.socket.display().to_string(),
                    connections: v.connections as u64,
                    tcp: v.tcp,
                });
            return Response::Ok(ReplyPayload::NbdExports(rows.collect()));
        }
        if let Some(response) = self.mounts.before(&request) {
            return response;
        }
        if let Request::PoolExport { name, force } | Request::PoolDestroy { name, force } = &request
        {
            if *force {
                // A suspended pool's waiting requests end first: the unmount waits for them,
                // and for the sync a mount makes as it ends.
                let _ = self.engine.end_suspended_waits(name);
            }
            if let Err(error) = self.mounts.unmount_pool(name, *force) {
                return Response::error(error.to_string());
            }
        }
        let response = self.handle_engine(&request);
        let succeeded = matches!(response, Response::Ok(_));
        self.nbd.follow();
        let notices = self.mounts.after(&request, succeeded);
        match response {
            Response::Ok(ReplyPayload::Unit) => notices_reply(notices),
            response => response,
        }
    }

    fn cache_entries(&self) -> Vec<CacheEntry> {
        self.cache_entries_of_engine()
    }

    fn import_cached(&self, entry: &CacheEntry) -> Result<(), String> {
        let name = self.import_cached_pool(entry)?;
        self.nbd.follow();
        for notice in self.mounts.mount_pool(&name) {
            eprintln!("{notice}");
        }
        Ok(())
    }

    fn shutdown(&self) {
        self.nbd.stop_all();
        self.mounts.unmount_all();
        self.engine.shutdown();
    }
}

impl EngineBackend {
    /// `tarn pool sync`: a txg of each named pool (every pool when `names` is empty), in
    /// order; the first that fails ends the request with its error.
    fn sync_pools(&self, names: &[String]) -> Response {
        let names = match names.is_empty() {
            true => self.engine.pool_names(),
            false => names.to_vec(),
        };
        for name in &names {
            if let Err(e) = self.engine.sync_pool(name) {
                return device_verb_error(&e, name);
            }
        }
        ok(ReplyPayload::Unit)
    }

    /// `tarn memory` and `tarn memory set` (module `memory`).
    fn memory(&self, request: &Request) -> Option<Response> {
        Some(match request {
            Request::Memory => {
                let info = crate::memory::report(&self.arc, self.mounts.fuse_buffers());
                Response::Ok(ReplyPayload::Memory(Box::new(info)))
            }
            Request::MemorySet { arc_max, arc_min } => match self.arc.set(*arc_max, *arc_min) {
                Ok(()) => Response::Ok(ReplyPayload::Unit),
                Err(message) => Response::error(message),
            },
            _ => return None,
        })
    }

    fn handle_engine(&self, request: &Request) -> Response {
        let answered = self.devices(request).or_else(|| self.datasets(request));
        if let Some(response) = answered.or_else(|| iostat(&self.engine, request)) {
            return response;
        }
        let result: Result<Response, EngineError> = match &request {
            Request::PoolScrub {
                names,
                action,
                wait,
            } => Ok(self.scrub(names, *action, *wait, &mut |_| {})),
            Request::PoolCreate(create) => Ok(self.create(create)),
            Request::PoolImport(import) => Ok(self.import(import)),
            Request::PoolDestroy { name, force } => {
                let _batch = lock_batch(&self.batch);
                self.engine
                    .destroy_pool(name, *force)
                    .map(|()| ok(ReplyPayload::Unit))
            }
            Request::PoolExport { name, force } => {
                let _batch = lock_batch(&self.batch);
                self.engine
                    .export_pool(name, *force)
                    .map(|()| ok(ReplyPayload::Unit))
            }
            Request::PoolList { names } => self
                .list(names)
                .map(|rows| ok(ReplyPayload::PoolList(rows))),
            Request::PoolStatus { names, .. } => self
                .status(names)
                .map(|rows| ok(ReplyPayload::PoolStatus(rows))),
            Request::PoolGet { properties, names } => self
                .get(properties, names)
                .map(|rows| ok(ReplyPayload::Properties(rows))),
            Request::PoolSet {
                property,
                value,
                name,
            } => {
                let command = format!("pool set {property}={value} {name}");
                self.engine
                    .set_prop(name, property, value, &command)
                    .map(|()| ok(ReplyPayload::Unit))
            }
            Request::PoolImportList { dirs } => Ok(self.import_list(dirs)),
            Request::PoolImportTxgs { dirs, pool } => self
                .engine
                .import_txgs(&search_dirs(dirs), pool)
                .map(|txgs| {
                    ok(ReplyPayload::Txgs(
                        txgs.into_iter()
                            .map(|(txg, timestamp)| TxgRow {
                                txg: txg.0,
                                timestamp,
                            })
                            .collect(),
                    ))
                }),
            Request::PoolHistory {
                names, internal, ..
            } => self
                .history(names, *internal)
                .map(|pools| ok(ReplyPayload::History(pools))),
            _ => Ok(Response::error(format!(
                "request '{}' is not handled by the engine",
                request.verb()
            ))),
        };
        result.unwrap_or_else(|e| error_reply(&e))
    }

    fn cache_entries_of_engine(&self) -> Vec<CacheEntry> {
        self.engine
            .cache_entries()
            .into_iter()
            .map(|(name, guid, devices)| CacheEntry {
                name,
                guid: guid.0,
                devices,
            })
            .collect()
    }

    fn import_cached_pool(&self, entry: &CacheEntry) -> Result<String, String> {
        let mut dirs: Vec<String> = entry
            .devices
            .iter()
            .filter_map(|d| Path::new(d).parent().map(|p| p.display().to_string()))
            .collect();
        dirs.sort();
        dirs.dedup();
        let options = ImportOptions {
            new_name: Some(entry.name.clone()),
            ..ImportOptions::default()
        };
        let command = format!("pool import {} (cache file)", entry.name);
        self.engine
            .import_pool(&dirs, &entry.guid.to_string(), &options, &command)
            .map_err(|e| e.to_string())
    }
}

/// `rollback`, `clone`, `promote` and `bookmark`, with the command line the pool history records.
fn clone_verbs(engine: &Engine, request: &Request) -> Result<(), EngineError> {
    match request {
        Request::Rollback {
            name,
            recursive,
            dependents,
            ..
        } => {
            let flag = if *recursive { "-r " } else { "" };
            let deps = if *dependents { "-R " } else { "" };
            let command = format!("rollback {deps}{flag}{name}");
            engine.rollback_with(name, *recursive, *dependents, &command)
        }
        Request::Clone {
            origin,
            name,
            properties,
            parents,
        } => {
            let mut command = String::from("clone");
            if *parents {
                command.push_str(" -p");
            }
            for (p, v) in properties {
                command.push_str(&format!(" -o {p}={v}"));
            }
            command.push_str(&format!(" {origin} {name}"));
            engine.clone_dataset(origin, name, properties, *parents, &command)
        }
        Request::Promote { name } => engine.promote(name, &format!("promote {name}")),
        Request::Bookmark { source, target } => {
            engine.bookmark(source, target, &format!("bookmark {source} {target}"))
        }
        _ => unreachable!("clone_verbs is called only for rollback, clone, promote, bookmark"),
    }
}

#[cfg(test)]
mod tests {
    use super::{DIRECT_IO_DEFAULT, direct_io, mem_total, parse_hostid};

    #[test]
    fn memory_size_comes_from_meminfo_in_kib() {
        let text = "MemTotal:       24576000 kB\nMemFree:         1000 kB\n";
        assert_eq!(mem_total(text), Some(24_576_000 * 1024));
        assert_eq!(mem_total("MemFree: 12 kB\n"), None);
        assert_eq!(mem_total("MemTotal: lots kB\n"), None);
    }

    #[test]
    fn hostid_from_the_environment_is_hex_or_decimal_and_never_zero() {
        assert_eq!(parse_hostid("0x2a"), Some(42));
        assert_eq!(parse_hostid(" 42\n"), Some(42));
        assert_eq!(parse_hostid("0"), None);
        assert_eq!(parse_hostid("0xzz"), None);
        assert_eq!(parse_hostid("host"), None);
    }

    #[test]
    fn direct_io_is_on_or_off_and_refuses_anything_else() {
        assert_eq!(direct_io(None), Ok(DIRECT_IO_DEFAULT));
        assert_eq!(direct_io(Some(" ")), Ok(DIRECT_IO_DEFAULT));
        assert_eq!(direct_io(Some("on")), Ok(true));
        assert_eq!(direct_io(Some("1")), Ok(true));
        assert_eq!(direct_io(Some("off\n")), Ok(false));
        assert_eq!(direct_io(Some("0")), Ok(false));
        assert_eq!(
            direct_io(Some("yes")),
            Err("cannot use TARN_DIRECT_IO 'yes': expected on or off".to_string())
        );
    }
}
