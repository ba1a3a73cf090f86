//! One run: the engine on the seed's devices, the workload, the faults between operations, and
//! the checkers after every commit and every import. Every method returns `Err(invariant)` for
//! a broken invariant, `Ok(Flow::End)` when a beyond-budget run cannot go on (the engine
//! refused an import with an error, which is a correct answer), and `Ok(Flow::Continue)`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tarn_base::{ManualClock, ObjectId, SeededRng, Txg};
use tarn_device::{Device, FaultPlan, SimDevice};
use tarn_engine::{
    CreateOptions, CreateSpec, Engine, EngineError, HostIdentity, ImportOptions, PoolError,
    ScanState, ScrubAction, SimProvider, TopSpec, check,
};

mod clones;
mod fsops;
mod heal;
mod losses;
mod outage;
mod snapshots;
mod volumes;

use fsops::FsKind;

use crate::config::{Config, DEVICE_DIR};
use crate::model::Model;
use crate::power::{PowerSwitch, PoweredProvider};
use crate::trace::Trace;
use crate::{Budget, Counts};

/// The pool every run creates.
pub(crate) const POOL: &str = "tank";
/// Recent committed txgs whose model is kept (a beyond-budget import may go back this far).
const HISTORY_TXGS: usize = 8;
/// Uberblocks a beyond-budget import tries, newest first.
const IMPORT_TRIES: usize = 4;
/// Times a device may be renamed (SimDevice keeps every name it had).
const RENAMES_MAX: usize = tarn_device::SIM_NAMES_MAX - 4;
/// Bytes per read when comparing a whole object.
const CHECK_CHUNK: u64 = 256 << 10;
/// Operations between the power cut being armed and the crash.
const BURST_OPS_MAX: u64 = 12;

/// Whether the run goes on.
#[derive(Debug)]
pub(crate) enum Flow {
    Continue,
    End(String),
}

/// Result of a step: a broken invariant is the error.
pub(crate) type Step = Result<Flow, String>;

/// The workload operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Create,
    Write,
    Overwrite,
    Punch,
    Read,
    Sync,
    ExportImport,
    Crash,
    RenameImport,
    Rot,
    Vanish,
    Dataset,
    Heal,
    Outage,
    Snapshot,
    Volume,
    Fs(FsKind),
}

pub(crate) struct Sim {
    pub(crate) cfg: Config,
    /// Cache-device hits of the current import already counted.
    l2_hits_seen: u64,
    /// Hits by entries the import's rebuild restored, of the current import, already counted.
    l2_restored_hits_seen: u64,
    rng: SeededRng,
    clock: Arc<ManualClock>,
    pub(crate) devices: Vec<Arc<SimDevice>>,
    provider: Arc<PoweredProvider>,
    switch: Arc<PowerSwitch>,
    engine: Engine,
    open: Model,
    committed: Model,
    committed_txg: Txg,
    inflight: Option<Model>,
    /// The txg whose write phase ran and whose commit phase has not (a split sync): a
    /// commit the engine makes meanwhile (a flush's, an admission's) finishes it first.
    syncing: Option<Txg>,
    history: BTreeMap<Txg, Model>,
    gone: Vec<usize>,
    /// The path each vanished device had when it went (the one its pool still names).
    vanished_at: BTreeMap<usize, String>,
    /// Faulty leaves replaced by fresh devices (heal.rs): no longer damaged on purpose.
    retired: Vec<usize>,
    /// Datasets fsync'd since the last commit, as they were at their last fsync: a crash
    /// before the next commit brings back exactly that (the intent log's replay).
    fsynced: BTreeMap<String, crate::fsmodel::FsModel>,
    /// Volumes flushed (or FUA-written) since the last commit, as they were at their last
    /// flush: a crash before the next commit brings back exactly that (sim/volumes.rs).
    volflushed: BTreeMap<String, crate::model::VolumeModel>,
    /// Volumes whose flush failed at a power cut, as that flush would have left them: the
    /// import may find this state or the model's (sim/volumes.rs).
    volume_maybe: BTreeMap<String, crate::model::VolumeModel>,
    /// Faulty leaves the workload took offline (heal.rs).
    offlined: Vec<usize>,
    /// Devices that were ever gone or offline: they may miss any write (losses.rs).
    ever_missing: BTreeSet<usize>,
    renames: Vec<usize>,
    rename_serial: u64,
    dataset_serial: u64,
    snapshot_serial: u64,
    volume_serial: u64,
    /// The pool's `failmode` is `wait` (an outage set it; sim/outage.rs).
    failmode_wait: bool,
    pub(crate) trace: Trace,
    pub(crate) counts: Counts,
    pub(crate) step: u64,
}

fn new_engine(provider: &Arc<PoweredProvider>, clock: &Arc<ManualClock>, seed: u64) -> Engine {
    let identity = HostIdentity {
        hostid: 0x5157,
        hostname: "sim".into(),
    };
    let provider: Arc<dyn tarn_engine::DeviceProvider> = provider.clone();
    let clock: Arc<dyn tarn_base::Clock> = clock.clone();
    Engine::new(provider, identity, clock, seed)
}

impl Sim {
    pub(crate) fn new(cfg: Config, echo: bool) -> Sim {
        let mut rng = SeededRng::new(cfg.seed ^ 0x7461_726e_2d73_696d);
        let clock = Arc::new(ManualClock::new(1_700_000_000 + cfg.seed % 100_000_000));
        let sims = Arc::new(SimProvider::new());
        let devices: Vec<Arc<SimDevice>> = cfg
            .paths
            .iter()
            .zip(&cfg.plans)
            .map(|(path, plan)| {
                let device =
                    SimDevice::with_clock(path, cfg.device_size, plan.clone(), Arc::clone(&clock));
                sims.insert(path, Arc::clone(&device));
                device
            })
            .collect();
        let switch = Arc::new(PowerSwitch::new());
        let provider = Arc::new(PoweredProvider {
            devices: sims,
            switch: Arc::clone(&switch),
        });
        let engine = new_engine(&provider, &clock, rng.next_u64());
        let renames = vec![0; devices.len()];
        Sim {
            cfg,
            rng,
            clock,
            devices,
            provider,
            switch,
            engine,
            open: Model::new(),
            committed: Model::new(),
            committed_txg: Txg(0),
            inflight: None,
            syncing: None,
            history: BTreeMap::new(),
            gone: Vec::new(),
            vanished_at: BTreeMap::new(),
            retired: Vec::new(),
            offlined: Vec::new(),
            ever_missing: BTreeSet::new(),
            fsynced: BTreeMap::new(),
            volflushed: BTreeMap::new(),
            volume_maybe: BTreeMap::new(),
            renames,
            rename_serial: 0,
            dataset_serial: 0,
            snapshot_serial: 0,
            volume_serial: 0,
            failmode_wait: false,
            trace: Trace::new(echo),
            counts: Counts::default(),
            l2_hits_seen: 0,
            l2_restored_hits_seen: 0,
            step: 0,
        }
    }

    fn within(&self) -> bool {
        self.cfg.budget == Budget::Within
    }

    /// Creates the pool and applies the write properties.
    pub(crate) fn create(&mut self) -> Step {
        let cfg = &self.cfg;
        let path = |i: &usize| cfg.paths[*i].clone();
        let top = |t: &crate::config::TopPlan| TopSpec {
            layout: t.layout,
            devices: t.leaves.iter().map(path).collect(),
        };
        let spec = CreateSpec {
            name: POOL.into(),
            tops: cfg.tops.iter().filter(|t| !t.special).map(top).collect(),
            spares: cfg.spares.iter().map(path).collect(),
            caches: cfg.caches.iter().map(path).collect(),
            logs: Vec::new(),
            // The special top is the last one, so pool ids stay the plan's indices.
            specials: cfg.tops.iter().filter(|t| t.special).map(top).collect(),
            ashift: cfg.ashift,
            // A seeded topology may mix replication levels (ZFS's `-f`).
            force: true,
        };
        let options = CreateOptions {
            command: "pool create".into(),
            // One thread drives everything: a read or write waiting for `clear`
            // (failmode=wait) would wait forever; beyond budget a suspended pool must fail
            // its writes at once. Outages set failmode=wait for their span (sim/outage.rs).
            properties: vec![("failmode".into(), "continue".into())],
            ..CreateOptions::default()
        };
        if let Err(e) = self.engine.create_pool(&spec, &options) {
            self.trace.line(format!("create: error: {e}"));
            if self.within() {
                return Err(format!("pool create failed within budget: {e}"));
            }
            return Ok(Flow::End(format!("pool create refused: {e}")));
        }
        let txg = check::committed_txg(&self.engine, POOL)
            .map_err(|e| e.to_string())?
            .ok_or("a created pool has no committed txg")?;
        self.committed_after(txg)?;
        self.apply_write_config()?;
        // A slow healthy leaf faulted by slow-device detection (and spared) would be one
        // more leaf out than the budget allows beside a faulty one: detection stays on only
        // when every slow leaf is a faulty one.
        let faulty = self.cfg.faulty();
        let slow_healthy = (0..self.cfg.plans.len())
            .any(|i| self.cfg.plans[i].latency_ns > 0 && !faulty.contains(&i));
        if slow_healthy {
            if let Err(e) = self
                .engine
                .set_prop(POOL, "slow_io_ratio", "off", "pool set")
            {
                // Beyond budget its commit may fail like any other.
                self.hold_in_flight();
                return self.engine_error("pool set slow_io_ratio=off", &e);
            }
            let now = check::committed_txg(&self.engine, POOL)
                .map_err(|e| e.to_string())?
                .ok_or("a created pool has no committed txg")?;
            if now > self.committed_txg {
                self.committed_after(now)?;
            }
        }
        self.trace.line(format!(
            "create: txg {txg} slow detection {}",
            !slow_healthy
        ));
        self.check_all("create")
    }

    fn apply_write_config(&mut self) -> Result<(), String> {
        check::set_data_write_config(&self.engine, POOL, self.cfg.write_config)
            .map_err(|e| format!("write config refused: {e}"))?;
        check::set_data_cache_policy(&self.engine, POOL, self.cfg.primarycache)
            .map_err(|e| format!("cache policy refused: {e}"))
    }

    /// One workload operation, chosen by the seed's weights.
    pub(crate) fn step(&mut self) -> Step {
        self.step += 1;
        self.clock.advance_ns(self.rng.below(50_000_000));
        let w = self.cfg.weights;
        let table = [
            (w.create, Op::Create),
            (w.write, Op::Write),
            (w.overwrite, Op::Overwrite),
            (w.punch, Op::Punch),
            (w.read, Op::Read),
            (w.sync, Op::Sync),
            (w.export_import, Op::ExportImport),
            (w.crash, Op::Crash),
            (w.rename_import, Op::RenameImport),
            (w.rot, Op::Rot),
            (w.vanish, Op::Vanish),
            (w.dataset, Op::Dataset),
            (w.fs_create, Op::Fs(FsKind::Create)),
            (w.fs_mkdir, Op::Fs(FsKind::Mkdir)),
            (w.fs_symlink, Op::Fs(FsKind::Symlink)),
            (w.fs_write, Op::Fs(FsKind::Write)),
            (w.fs_truncate, Op::Fs(FsKind::Truncate)),
            (w.fs_punch, Op::Fs(FsKind::Punch)),
            (w.fs_rename, Op::Fs(FsKind::Rename)),
            (w.fs_link, Op::Fs(FsKind::Link)),
            (w.fs_unlink, Op::Fs(FsKind::Unlink)),
            (w.fs_rmdir, Op::Fs(FsKind::Rmdir)),
            (w.fs_xattr, Op::Fs(FsKind::Xattr)),
            (w.fs_read, Op::Fs(FsKind::Read)),
            (w.fs_fsync, Op::Fs(FsKind::Fsync)),
            (w.fs_clone, Op::Fs(FsKind::Clone)),
            (w.heal, Op::Heal),
            (w.outage, Op::Outage),
            (w.snapshot, Op::Snapshot),
            (w.volume, Op::Volume),
        ];
        let total: u64 = table.iter().map(|(weight, _)| weight).sum();
        let mut pick = self.rng.below(total);
        let mut op = Op::Write;
        for (weight, candidate) in table {
            if pick < weight {
                op = candidate;
                break;
            }
            pick -= weight;
        }
        let writes = matches!(
            op,
            Op::Write | Op::Overwrite | Op::Volume | Op::Fs(FsKind::Write)
        );
        let step = self.run_op(op);
        if writes && matches!(step, Ok(Flow::Continue)) && self.rng.chance(1, 4) {
            self.prewrite();
        }
        step
    }

    /// The engine's pre-write of the open txg's data (tarn-engine `prewrite`), as the
    /// daemon's sync thread runs it before a write phase: whatever the next steps do
    /// (writes, snapshots, destroys, rollbacks, crashes, syncs) lands between it and the
    /// write phase that adopts or frees its blocks.
    fn prewrite(&mut self) {
        match self.engine.prewrite(POOL) {
            Ok(Some(report)) => {
                self.counts.prewritten += report.blocks;
                self.trace
                    .line(format!("prewrite: {} blocks", report.blocks));
            }
            Ok(None) => {}
            Err(e) => self.trace.line(format!("prewrite: error: {e}")),
        }
    }

    fn run_op(&mut self, op: Op) -> Step {
        match op {
            Op::Create => self.op_create(),
            Op::Write | Op::Overwrite | Op::Punch => self.op_write(op),
            Op::Read => self.op_read(),
            Op::Sync => self.op_sync(),
            Op::ExportImport => self.op_export_import(),
            Op::Crash => self.op_crash(),
            Op::RenameImport => self.op_rename_import(),
            Op::Rot => self.op_rot(),
            Op::Vanish => self.op_vanish(),
            Op::Dataset => self.op_dataset(),
            Op::Heal => self.op_heal(),
            Op::Outage => self.op_outage(),
            Op::Snapshot => self.op_snapshot(),
            Op::Volume => self.op_volume(),
            Op::Fs(kind) => self.op_fs(kind),
        }
    }

    /// An engine error: a broken invariant within budget; beyond, a suspended pool is
    /// recovered the way an admin would (restart, reimport) and anything else is counted.
    fn engine_error(&mut self, what: &str, error: &EngineError) -> Step {
        self.trace.line(format!("{what}: error: {error}"));
        if self.within() {
            return Err(format!("{what} failed within budget: {error}"));
        }
        self.check_loss(what, error)?;
        self.counts.errors_reported += 1;
        if matches!(error, EngineError::Pool(PoolError::Suspended(_))) {
            return self.crash_and_import("suspension");
        }
        Ok(Flow::Continue)
    }

    fn op_create(&mut self) -> Step {
        if self.open.objects.len() >= self.cfg.objects_max {
            return self.op_write(Op::Write);
        }
        // Blocks are at least one sector: a 512-byte block on 8 KiB sectors takes 16 times
        // its size, and the workload would fill the pool (space exhaustion is not part of the
        // fault model yet).
        let low = u64::from(self.cfg.ashift.max(9));
        let high = u64::from(self.cfg.block_shift_max).max(low);
        let block = 1u32 << (low + self.rng.below(high - low + 1));
        match self.engine.object_create(POOL, block) {
            Ok(id) => {
                self.open.create(id, block, self.cfg.object_span);
                self.trace
                    .line(format!("create object {} block {block}", id.0));
                Ok(Flow::Continue)
            }
            Err(e) => self.engine_error("object create", &e),
        }
    }

    fn pick_object(&mut self) -> Option<(ObjectId, u32)> {
        let count = self.open.objects.len() as u64;
        if count == 0 {
            return None;
        }
        let index = self.rng.below(count) as usize;
        self.open
            .objects
            .iter()
            .nth(index)
            .map(|(id, object)| (*id, object.block_size))
    }

    /// A write of the kind `op` asks for: random bytes or zeros at a random range, or whole
    /// blocks of random bytes (overwrite) or zeros (punch).
    fn random_write(&mut self, op: Op) -> Option<(ObjectId, u64, Vec<u8>)> {
        let (id, block_size) = self.pick_object()?;
        let span = self.cfg.object_span;
        let (offset, len, zeros) = if op == Op::Write {
            let offset = self.rng.below(span);
            let len = 1 + self.rng.below(self.cfg.write_len_max.min(span - offset));
            (offset, len, self.rng.chance(1, 5))
        } else {
            let block = u64::from(block_size);
            let blocks = span / block;
            let first = self.rng.below(blocks);
            let most = (self.cfg.write_len_max / block).clamp(1, blocks - first);
            let count = 1 + self.rng.below(most);
            (first * block, count * block, op == Op::Punch)
        };
        let mut data = vec![0u8; usize::try_from(len).expect("write length fits in memory")];
        if !zeros {
            self.rng.fill(&mut data);
        }
        Some((id, offset, data))
    }

    fn op_write(&mut self, op: Op) -> Step {
        let Some((id, offset, data)) = self.random_write(op) else {
            return self.op_create();
        };
        let len = data.len() as u64;
        let result = self.engine.object_write(POOL, id, offset, &data);
        let synced = self.follow_commit()?;
        match result {
            Ok(()) => {
                self.open.write(id, offset, &data);
                self.trace
                    .line(format!("{op:?} object {} at {offset} len {len}", id.0));
                if synced {
                    return self.check_all("admission sync");
                }
                Ok(Flow::Continue)
            }
            Err(EngineError::NoSpace) => {
                // Refused before anything changed: a full pool is not a fault, and the
                // model stays as it was.
                self.counts.no_space += 1;
                self.trace
                    .line(format!("{op:?} object {} at {offset}: out of space", id.0));
                Ok(Flow::Continue)
            }
            Err(e) => {
                self.hold_in_flight();
                self.open.forget(id, offset, len);
                self.engine_error(&format!("{op:?} object {} at {offset} len {len}", id.0), &e)
            }
        }
    }

    /// Reads `len` bytes of `id` at `offset` and compares them with the open model. Wrong
    /// bytes are always a broken invariant; an error only within budget.
    fn read_and_compare(&mut self, id: ObjectId, offset: u64, len: u64, when: &str) -> Step {
        let mut buf = vec![0u8; usize::try_from(len).expect("read length fits in memory")];
        match self.engine.object_read(POOL, id, offset, &mut buf) {
            Ok(()) => match self.open.compare(id, offset, &buf) {
                None => Ok(Flow::Continue),
                Some(m) => Err(format!(
                    "{when}: wrong bytes: object {} offset {} expected {:#04x} read {:#04x}",
                    id.0, m.offset, m.expected, m.actual
                )),
            },
            Err(e) if self.within() => Err(format!(
                "{when}: read of object {} at {offset} failed within budget: {e}",
                id.0
            )),
            Err(e) => {
                self.check_loss(when, &e)?;
                self.counts.errors_reported += 1;
                self.trace.line(format!(
                    "{when}: object {} at {offset}: loss reported: {e}",
                    id.0
                ));
                Ok(Flow::Continue)
            }
        }
    }

    fn op_read(&mut self) -> Step {
        let Some((id, _)) = self.pick_object() else {
            return Ok(Flow::Continue);
        };
        let offset = self.rng.below(self.cfg.object_span);
        let len = 1 + self
            .rng
            .below((128 << 10).min(self.cfg.object_span - offset));
        self.trace
            .line(format!("read object {} at {offset} len {len}", id.0));
        self.read_and_compare(id, offset, len, "read")
    }

    /// Txg `txg` committed the open model.
    fn committed_after(&mut self, txg: Txg) -> Result<(), String> {
        let model = self.open.clone();
        self.committed_model(txg, model)
    }

    /// Txg `txg` committed `model` (the open model when its write phase ran).
    fn committed_model(&mut self, txg: Txg, model: Model) -> Result<(), String> {
        if txg <= self.committed_txg {
            return Err(format!(
                "committed txg went from {} to {txg}",
                self.committed_txg
            ));
        }
        self.committed = model;
        self.committed_txg = txg;
        self.inflight = None;
        self.syncing = None;
        self.fsynced.clear();
        self.volflushed.clear();
        self.volume_maybe.clear();
        self.history.insert(txg, self.committed.clone());
        while self.history.len() > HISTORY_TXGS {
            self.history.pop_first();
        }
        self.counts.txgs += 1;
        Ok(())
    }

    /// A write that found too little room commits the open txg first (admission, before
    /// the write changes anything), and a flush may commit one: the run follows those
    /// commits. A txg between its phases (`syncing`) commits first with the model its
    /// write phase wrote, then the open txg with the open model. `true` when there was one.
    fn follow_commit(&mut self) -> Result<bool, String> {
        let now = check::committed_txg(&self.engine, POOL)
            .map_err(|e| e.to_string())?
            .ok_or("an imported pool has no committed txg")?;
        let mut followed = false;
        if let Some(txg) = self.syncing
            && now >= txg
            && self.committed_txg < txg
            && let Some(model) = self.inflight.take()
        {
            self.committed_model(txg, model)?;
            self.trace
                .line(format!("txg {txg} committed between its phases"));
            followed = true;
        }
        if now > self.committed_txg {
            self.committed_after(now)?;
            self.trace.line(format!("admission sync: txg {now}"));
            followed = true;
        }
        Ok(followed)
    }

    /// An operation failed, perhaps in the admission sync it started before changing
    /// anything: that txg (the open model as it was) may have reached a disk. An earlier
    /// failed sync's txg stays the one in flight.
    fn hold_in_flight(&mut self) {
        if self.inflight.is_none() {
            self.inflight = Some(self.open.clone());
        }
    }

    fn op_sync(&mut self) -> Step {
        if self.rng.chance(1, 2) {
            return self.op_split_sync();
        }
        match self.engine.sync_pool(POOL) {
            Ok(txg) => {
                self.committed_after(txg)?;
                self.trace
                    .line(format!("sync: txg {txg} model {:016x}", self.open.digest()));
                if let Flow::End(why) = self.check_all("sync")? {
                    return Ok(Flow::End(why));
                }
                // The daemon's thread drives a running scan (one an import started, too);
                // here every sync gives it one batch.
                self.scan_batch()
            }
            Err(e) => {
                self.inflight = Some(self.open.clone());
                self.engine_error("sync", &e)
            }
        }
    }

    /// A txg synced in its two phases as the daemon's sync thread runs them, with writes of
    /// the next txg between them (the run drives the phases itself, so it stays
    /// deterministic). The txg is in flight from its write phase to its commit.
    fn op_split_sync(&mut self) -> Step {
        let txg = match self.split_write_phase()? {
            Ok(txg) => txg,
            Err(e) => return self.engine_error("sync write phase", &e),
        };
        let count = 1 + self.rng.below(4);
        let failed = self.split_open_writes(count)?;
        // Seeds without volumes draw nothing here. A flush finishes the syncing txg first
        // (sim/volumes.rs); a failed change or a crash after it reimported already.
        if failed.is_none() && self.cfg.weights.volume > 0 && self.rng.chance(1, 2) {
            if let Flow::End(why) = self.split_volume_flush()? {
                return Ok(Flow::End(why));
            }
            if self.syncing != Some(txg) {
                return self.check_all("flush between a txg's phases");
            }
        }
        // The commit runs even after a failed write, so that no later step finds the txg
        // still syncing (a failed commit is the error then).
        let committed = self.split_commit_phase(txg)?;
        if let Some(e) = failed {
            return self.engine_error("write while a txg commits", &e);
        }
        match committed {
            Ok(_) => {
                if let Flow::End(why) = self.check_all("split sync")? {
                    return Ok(Flow::End(why));
                }
                self.scan_batch()
            }
            Err(e) => self.engine_error("sync commit phase", &e),
        }
    }

    /// The write phase of the open txg; the open model as written is in flight from now on
    /// (also when the phase failed: it may have written part of the txg).
    fn split_write_phase(&mut self) -> Result<Result<Txg, EngineError>, String> {
        self.inflight = Some(self.open.clone());
        let result = self.engine.sync_write_phase(POOL);
        match &result {
            Ok(txg) => {
                self.syncing = Some(*txg);
                self.trace.line(format!("sync write phase: txg {txg}"));
            }
            Err(e) => self.trace.line(format!("sync write phase: error: {e}")),
        }
        Ok(result)
    }

    /// `count` writes into the txg after the syncing one while that waits for its commit
    /// phase. The error of the one that failed, if one did. A write whose admission
    /// committed first is followed (`follow_commit`).
    fn split_open_writes(&mut self, count: u64) -> Result<Option<EngineError>, String> {
        for _ in 0..count {
            let Some((id, offset, data)) = self.random_write(Op::Write) else {
                return Ok(None);
            };
            let result = self.engine.object_write(POOL, id, offset, &data);
            self.follow_commit()?;
            match result {
                Ok(()) => {
                    self.open.write(id, offset, &data);
                    let len = data.len();
                    self.trace
                        .line(format!("open write object {} at {offset} len {len}", id.0));
                }
                Err(EngineError::NoSpace) => {}
                Err(e) => {
                    self.trace.line(format!("open write: error: {e}"));
                    self.hold_in_flight();
                    self.open.forget(id, offset, data.len() as u64);
                    return Ok(Some(e));
                }
            }
        }
        Ok(None)
    }

    /// The commit phase of `txg` (if it is still syncing).
    fn split_commit_phase(&mut self, txg: Txg) -> Result<Result<Txg, EngineError>, String> {
        match self.engine.sync_commit_phase(POOL) {
            Ok(Some(done)) => {
                if done != txg {
                    return Err(format!("commit phase finished txg {done}, not {txg}"));
                }
                let model = self.inflight.take().ok_or("no model in flight")?;
                self.committed_model(done, model)?;
                self.trace.line(format!(
                    "sync commit phase: txg {done} model {:016x}",
                    self.committed.digest()
                ));
                Ok(Ok(done))
            }
            // An admission sync between the phases committed it already.
            Ok(None) => Ok(Ok(self.committed_txg)),
            Err(e) => {
                self.trace.line(format!("sync commit phase: error: {e}"));
                Ok(Err(e))
            }
        }
    }

    /// Every checker: the whole-pool walk (within budget: every reachable block verifies,
    /// births, space closes, txg) and the data of every object against the model.
    fn check_all(&mut self, when: &str) -> Step {
        self.counts.checks += 1;
        if let Ok(stats) = self.engine.l2_stats(POOL) {
            // The counters restart at every import (`imported` resets what was seen).
            let seen = self.l2_hits_seen.min(stats.hits);
            self.counts.l2_hits += stats.hits - seen;
            self.l2_hits_seen = stats.hits;
            let seen = self.l2_restored_hits_seen.min(stats.restored_hits);
            self.counts.l2_restored_hits += stats.restored_hits - seen;
            self.l2_restored_hits_seen = stats.restored_hits;
        }
        if self.within() {
            let report =
                check::verify_pool(&self.engine, POOL).map_err(|e| format!("after {when}: {e}"))?;
            if report.txg != self.committed_txg {
                return Err(format!(
                    "after {when}: pool reports committed txg {} but the run saw {}",
                    report.txg, self.committed_txg
                ));
            }
            self.trace.line(format!(
                "check: txg {} blocks {} referenced {} deferred {} allocated {} exact {}",
                report.txg,
                report.blocks,
                report.referenced_bytes,
                report.deferred_bytes,
                report.allocated_bytes,
                report.deferred_exact
            ));
        }
        if let Flow::End(why) = self.check_datasets(when)? {
            return Ok(Flow::End(why));
        }
        if let Flow::End(why) = self.check_fs(when)? {
            return Ok(Flow::End(why));
        }
        if let Flow::End(why) = self.check_snapshots(when)? {
            return Ok(Flow::End(why));
        }
        if let Flow::End(why) = self.check_volumes(when)? {
            return Ok(Flow::End(why));
        }
        let ids: Vec<ObjectId> = self.open.objects.keys().copied().collect();
        for id in ids {
            let mut offset = 0;
            while offset < self.cfg.object_span {
                let len = CHECK_CHUNK.min(self.cfg.object_span - offset);
                if let Flow::End(why) = self.read_and_compare(id, offset, len, when)? {
                    return Ok(Flow::End(why));
                }
                offset += len;
            }
        }
        Ok(Flow::Continue)
    }

    /// Creates, destroys (with descendants) or renames a dataset; each commits a txg.
    fn op_dataset(&mut self) -> Step {
        let names: Vec<String> = self.open.datasets.iter().cloned().collect();
        let pick = |rng: &mut SeededRng| names[rng.below(names.len() as u64) as usize].clone();
        let full = |name: &str| format!("{POOL}/{name}");
        self.dataset_serial += 1;
        let fresh = format!("d{}", self.dataset_serial);
        let mut model = self.open.clone();
        // A volume has no children: it is never a parent.
        let parents: Vec<String> = names
            .iter()
            .filter(|d| !self.open.volumes.contains_key(*d))
            .cloned()
            .collect();
        let (what, result) = match self.rng.below(if names.is_empty() { 1 } else { 4 }) {
            0 | 1 => {
                let name = match self.rng.chance(1, 2) && !parents.is_empty() {
                    true => {
                        let at = self.rng.below(parents.len() as u64) as usize;
                        format!("{}/{fresh}", parents[at])
                    }
                    false => fresh,
                };
                model.create_dataset(&name);
                let mut props = self.dataset_properties();
                props.extend(self.dataset_logbias(&name));
                let result = self
                    .engine
                    .create_dataset(&full(&name), &props, false, "create");
                (format!("create dataset {name} {props:?}"), result)
            }
            2 => {
                let name = pick(&mut self.rng);
                // A clone of one of its snapshots outside it needs -R (which takes the
                // clones, theirs, and their descendants); -R is drawn sometimes anyway.
                // (Runs without snapshots have no clones and draw nothing more here.)
                let snapshots = self.cfg.weights.snapshot > 0;
                if model.destroy_blocked(&name) || (snapshots && self.rng.chance(1, 4)) {
                    if model.dependents(&name).is_none() {
                        return Ok(Flow::Continue);
                    }
                    model.destroy_dependents(&name);
                    let result =
                        self.engine
                            .destroy_dataset_with(&full(&name), true, true, "destroy -R");
                    (format!("destroy -R dataset {name}"), result)
                } else {
                    model.destroy_dataset(&name);
                    let result = self.engine.destroy_dataset(&full(&name), true, "destroy");
                    (format!("destroy dataset {name}"), result)
                }
            }
            _ => {
                let old = pick(&mut self.rng);
                let parent = parents
                    .iter()
                    .find(|p| **p != old && !p.starts_with(&format!("{old}/")))
                    .filter(|_| self.rng.chance(1, 2));
                let new = match parent {
                    Some(parent) => format!("{parent}/{fresh}"),
                    None => fresh,
                };
                model.rename_dataset(&old, &new);
                let result = self
                    .engine
                    .rename_dataset(&full(&old), &full(&new), "rename");
                (format!("rename dataset {old} to {new}"), result)
            }
        };
        self.follow_admin(&what, model, result, false)
    }

    /// Follows an admin verb that commits a txg (dataset, snapshot and clone verbs): when it
    /// failed, its txg may have reached a disk (in flight) and the error is handled as any
    /// engine error; when it succeeded, `model` is the open state, committed by the pool's
    /// new txg, and the checkers run. `snapshot_verb` counts it among the snapshot verbs.
    pub(super) fn follow_admin(
        &mut self,
        what: &str,
        model: Model,
        result: Result<(), EngineError>,
        snapshot_verb: bool,
    ) -> Step {
        if let Err(e) = result {
            self.inflight = Some(model);
            return self.engine_error(what, &e);
        }
        self.open = model;
        let txg = check::committed_txg(&self.engine, POOL)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{what} left no committed txg"))?;
        self.committed_after(txg)?;
        self.counts.snapshot_ops += u64::from(snapshot_verb);
        self.trace.line(format!("{what}: txg {txg}"));
        self.check_all(what)
    }

    /// Properties of a new dataset (each set in one dataset of two, else inherited): its
    /// record size (never below a sector or 4 KiB: small records on big sectors would fill
    /// the pool), compression, checksum and copies. Not `sync=always`: its commit after the
    /// change and an admission commit before it would leave a failed write two possible
    /// txgs in flight, and the model keeps one.
    fn dataset_properties(&mut self) -> Vec<(String, String)> {
        let low = u64::from(self.cfg.ashift.max(12));
        let shift = low + self.rng.below(18 - low);
        let choices: [(&str, Vec<String>); 4] = [
            ("recordsize", vec![(1u64 << shift).to_string()]),
            (
                "compression",
                ["off", "lz4", "zstd", "zle"].map(String::from).to_vec(),
            ),
            (
                "checksum",
                ["fletcher4", "sha256", "blake3"].map(String::from).to_vec(),
            ),
            ("copies", ["1", "2"].map(String::from).to_vec()),
        ];
        let mut props = Vec::new();
        for (name, values) in choices {
            let value = &values[self.rng.below(values.len() as u64) as usize];
            if self.rng.chance(1, 2) {
                props.push((name.to_string(), value.clone()));
            }
        }
        props
    }

    /// `logbias` of a new dataset named `name`: set to `latency` or `throughput` (fsync
    /// writes whole records ahead and logs pointers to them) in one dataset of two, else
    /// inherited. Drawn from a generator of its own, seeded by the run's seed and the name,
    /// so that every other draw of a seed is what it was before logbias was drawn.
    fn dataset_logbias(&self, name: &str) -> Option<(String, String)> {
        let salt = name.bytes().fold(0x006c_6f67_6269_6173_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let mut rng = SeededRng::new(self.cfg.seed ^ salt);
        let value = ["latency", "throughput"][rng.below(2) as usize];
        rng.chance(1, 2)
            .then(|| ("logbias".to_string(), value.to_string()))
    }

    /// The datasets the engine lists equal the model's.
    fn check_datasets(&mut self, when: &str) -> Step {
        let query = tarn_engine::DatasetQuery {
            names: vec![POOL.into()],
            recursive: true,
            properties: vec!["name".into()],
            ..tarn_engine::DatasetQuery::default()
        };
        let rows = match self.engine.dataset_props(&query) {
            Ok(rows) => rows,
            Err(e) => return self.engine_error(&format!("list datasets after {when}"), &e),
        };
        let prefix = format!("{POOL}/");
        let listed: std::collections::BTreeSet<String> = rows
            .iter()
            .filter_map(|r| r.name.strip_prefix(&prefix).map(str::to_string))
            .collect();
        if listed != self.open.datasets {
            return Err(format!(
                "after {when}: datasets {listed:?} but the model has {:?}",
                self.open.datasets
            ));
        }
        Ok(Flow::Continue)
    }

    fn op_export_import(&mut self) -> Step {
        if let Some(flow) = self.export("export")? {
            return Ok(flow);
        }
        self.import("export")
    }

    /// Exports the pool; the export's sync commits the open model. `Some(flow)` when the
    /// export failed (beyond budget) and the run already recovered or ended.
    fn export(&mut self, why: &str) -> Result<Option<Flow>, String> {
        match self.engine.export_pool(POOL, false) {
            Ok(()) => {
                self.committed_after(Txg(self.committed_txg.0 + 1))?;
                self.trace
                    .line(format!("{why}: exported at txg {}", self.committed_txg));
                Ok(None)
            }
            Err(e) => {
                // The export may have committed its txg before failing on the labels.
                self.inflight = Some(self.open.clone());
                self.trace.line(format!("{why}: export: error: {e}"));
                if self.within() {
                    return Err(format!("{why}: export failed within budget: {e}"));
                }
                self.counts.errors_reported += 1;
                // Suspended or half-exported: restart and reimport, as an admin would.
                self.crash_and_import("failed export").map(Some)
            }
        }
    }

    /// Arms the power cut, keeps working until an operation fails or the burst ends, then
    /// crashes every device and reimports.
    fn op_crash(&mut self) -> Step {
        let ops = 1 + self.rng.below(self.cfg.power_ops_max);
        self.switch.cut_after(ops);
        self.trace
            .line(format!("power cut after {ops} device operations"));
        for _ in 0..1 + self.rng.below(BURST_OPS_MAX) {
            if self.rng.chance(1, 6) {
                // A txg written, writes of the next one, and perhaps its commit: the cut
                // lands between the phases or inside either.
                let Ok(txg) = self.split_write_phase()? else {
                    break;
                };
                let count = self.rng.below(3);
                // A volume change or flush between the phases: a flush commits the syncing
                // txg before its log, and the cut may land in either (seeds without volumes
                // draw nothing here).
                let volume = self.cfg.weights.volume > 0 && self.rng.chance(1, 2);
                if self.split_open_writes(count)?.is_some()
                    || (volume && !self.burst_volume_change()?)
                    || self.rng.chance(1, 3)
                    || self.split_commit_phase(txg)?.is_err()
                {
                    break;
                }
            } else if self.rng.chance(1, 3) {
                match self.engine.sync_pool(POOL) {
                    Ok(txg) => self.committed_after(txg)?,
                    Err(_) => {
                        self.inflight = Some(self.open.clone());
                        break;
                    }
                }
            } else if self.cfg.weights.volume > 0 && self.rng.chance(1, 3) {
                // Seeds without volumes draw nothing here.
                if !self.burst_volume_change()? {
                    break;
                }
            } else if self.rng.chance(1, 2) {
                if !self.burst_fs_write()? {
                    break;
                }
            } else if let Some((id, offset, data)) = self.random_write(Op::Write) {
                let result = self.engine.object_write(POOL, id, offset, &data);
                self.follow_commit()?;
                if result.is_err() {
                    self.hold_in_flight();
                    break;
                }
                self.open.write(id, offset, &data);
            }
        }
        self.crash_and_import("crash")
    }

    /// The process dies (the engine is dropped), every device loses power, the power comes
    /// back, and a new process imports the pool.
    fn crash_and_import(&mut self, why: &str) -> Step {
        let power_off = self.switch.is_off();
        self.engine = new_engine(&self.provider, &self.clock, self.rng.next_u64());
        for device in &self.devices {
            device.crash();
        }
        self.switch.restore();
        self.counts.crashes += 1;
        self.trace
            .line(format!("{why}: crashed with power off: {power_off}"));
        self.import(why)
    }

    /// The model of a txg an import found: the committed one, the one in flight when the
    /// power went, or (beyond budget only) an older one.
    fn model_for(&self, txg: Txg) -> Option<Model> {
        if txg == self.committed_txg {
            // The import replays what was fsync'd since (the intent log).
            let mut model = self.committed.clone();
            for (dataset, fs) in &self.fsynced {
                if model.fs.contains_key(dataset) {
                    model.fs.insert(dataset.clone(), fs.clone());
                }
            }
            // And every volume as it was at its last flush.
            for (name, volume) in &self.volflushed {
                if model.volumes.contains_key(name) {
                    model.volumes.insert(name.clone(), volume.clone());
                }
            }
            return Some(model);
        }
        if txg.0 == self.committed_txg.0 + 1 {
            return self.inflight.clone();
        }
        if self.within() {
            return None;
        }
        self.history.get(&txg).cloned()
    }

    /// Imports the pool into the current engine and checks everything. Within budget the
    /// newest uberblock must be the last committed txg (or the one in flight at a crash).
    fn import(&mut self, why: &str) -> Step {
        let dirs = vec![DEVICE_DIR.to_string()];
        let candidates = match self.engine.import_txgs(&dirs, POOL) {
            Ok(list) if !list.is_empty() => list,
            Ok(_) => return self.import_refused(why, "no uberblock found"),
            Err(e) => return self.import_refused(why, &e.to_string()),
        };
        let tries = if self.within() { 1 } else { IMPORT_TRIES };
        let mut imported = None;
        for &(txg, _) in candidates.iter().take(tries) {
            let options = ImportOptions {
                max_txg: Some(txg),
                ..ImportOptions::default()
            };
            match self
                .engine
                .import_pool(&dirs, POOL, &options, "pool import")
            {
                Ok(_) => {
                    imported = Some(txg);
                    break;
                }
                Err(e) => self
                    .trace
                    .line(format!("{why}: import at txg {txg}: error: {e}")),
            }
        }
        let Some(listed) = imported else {
            return self.import_refused(why, "no uberblock could be imported");
        };
        self.note_out_of_service();
        // A faulty device may fail the label read at import that worked for the listing, so
        // the import can open an older uberblock than the one asked for: use what it opened.
        let txg = check::imported_txg(&self.engine, POOL)
            .map_err(|e| e.to_string())?
            .ok_or("an imported pool does not say which txg it opened")?;
        if txg != listed {
            self.trace.line(format!(
                "{why}: asked for txg {listed}, the import opened txg {txg}"
            ));
            // Within budget the only acceptable fallback is from the txg whose commit was
            // in flight at the crash (never acknowledged; its uberblock may sit on one
            // faulty leaf that fails the import's read) to the last committed one.
            let unacknowledged = listed.0 == self.committed_txg.0 + 1 && txg == self.committed_txg;
            if self.within() && !unacknowledged {
                return Err(format!("{why}: import opened txg {txg}, not {listed}"));
            }
        }
        if txg == self.committed_txg {
            // The replay must bring back every volume flushed since.
            self.counts.volume_replays += self.volflushed.len() as u64;
        }
        let Some(model) = self.model_for(txg) else {
            if self.within() {
                return Err(format!(
                    "{why}: import found txg {txg}; last committed was {} (in flight: {})",
                    self.committed_txg,
                    self.inflight.is_some()
                ));
            }
            return Ok(Flow::End(format!(
                "{why}: imported txg {txg} is older than the model"
            )));
        };
        self.imported(why, txg, model)
    }

    fn imported(&mut self, why: &str, txg: Txg, model: Model) -> Step {
        self.counts.imports += 1;
        let model = self.resolve_volumes(why, model)?;
        // A new engine pool: its cache counters start at zero, plus what the rebuild of its
        // cache devices' persistent index restored.
        self.l2_hits_seen = 0;
        self.l2_restored_hits_seen = 0;
        if let Ok(stats) = self.engine.l2_stats(POOL) {
            self.counts.l2_restored += stats.restored;
        }
        self.open = model.clone();
        self.committed = model;
        self.committed_txg = self.committed_txg.min(txg);
        self.inflight = None;
        self.syncing = None;
        let now = check::committed_txg(&self.engine, POOL)
            .map_err(|e| e.to_string())?
            .ok_or("an imported pool has no committed txg")?;
        if now <= txg {
            return Err(format!("{why}: import of txg {txg} committed txg {now}"));
        }
        self.committed_after(now)?;
        self.apply_write_config()?;
        self.trace
            .line(format!("{why}: imported txg {txg}, now {now}"));
        // An outage that ended in an import left failmode=wait on disk: back to continue
        // before a checker's read could wait for a `clear` this thread never calls.
        if self.failmode_wait {
            if let Err(e) = self
                .engine
                .set_prop(POOL, "failmode", "continue", "pool set")
            {
                let why = format!("{why}: failmode=continue refused after an import: {e}");
                if self.within() {
                    return Err(why);
                }
                return Ok(Flow::End(why));
            }
            self.failmode_wait = false;
            self.follow_commit()?;
        }
        self.check_all(why)
    }

    fn import_refused(&mut self, why: &str, error: &str) -> Step {
        self.trace.line(format!("{why}: import refused: {error}"));
        if self.within() {
            return Err(format!("{why}: import failed within budget: {error}"));
        }
        Ok(Flow::End(format!(
            "{why}: import refused with an error: {error}"
        )))
    }

    /// Gives device `index` a new path in the device directory.
    fn rename(&mut self, index: usize) {
        if self.renames[index] >= RENAMES_MAX {
            return;
        }
        self.renames[index] += 1;
        self.rename_serial += 1;
        let from = self.devices[index].path().to_string();
        let to = format!("{DEVICE_DIR}/m{}", self.rename_serial);
        let moved = self.provider.devices.rename(&from, &to);
        assert!(moved, "device {from} is in the provider");
        self.trace.line(format!("rename {from} -> {to}"));
    }

    fn op_rename_import(&mut self) -> Step {
        if let Some(flow) = self.export("rename")? {
            return Ok(flow);
        }
        let count = 1 + self.rng.below(self.devices.len() as u64);
        for _ in 0..count {
            let index = self.rng.below(self.devices.len() as u64) as usize;
            self.rename(index);
        }
        self.import("rename")
    }

    fn op_rot(&mut self) -> Step {
        let faulty = self.faulty_present();
        if faulty.is_empty() {
            return Ok(Flow::Continue);
        }
        if !self.within() && self.rng.chance(1, 3) {
            // Beyond budget: rot every faulty leaf of the vdev that is over its tolerance at
            // once, so that some stripes lose more columns than parity.
            let over = self
                .cfg
                .tops
                .iter()
                .find(|t| t.faulty.len() > t.tolerated());
            let mut victims = over.map(|t| t.faulty.clone()).unwrap_or_default();
            victims.retain(|i| !self.retired.contains(i));
            if self.rng.chance(1, 2) {
                return Ok(self.rot_region(&victims));
            }
            let sectors = 200 + self.rng.below(2000) as usize;
            for index in victims {
                let rotted = self.devices[index].rot_random(sectors);
                self.trace
                    .line(format!("rot {} sectors of device {index}", rotted.len()));
            }
            return Ok(Flow::Continue);
        }
        let index = faulty[self.rng.below(faulty.len() as u64) as usize];
        let most = if self.within() { 8 } else { 64 };
        let sectors = 1 + self.rng.below(most) as usize;
        let rotted = self.devices[index].rot_random(sectors);
        self.trace
            .line(format!("rot {} sectors of device {index}", rotted.len()));
        Ok(Flow::Continue)
    }

    /// Beyond budget: garbage over the same region (64 KiB to 4 MiB at one offset) of every
    /// victim, as a bad zone or a burst of stray writes leaves it (issue 17). Metadata keeps
    /// a copy elsewhere, so the pool must stay importable and only data in the region is
    /// lost; the model's reads still never accept wrong bytes.
    fn rot_region(&mut self, victims: &[usize]) -> Flow {
        let Some(size) = victims.iter().map(|&i| self.devices[i].size_bytes()).min() else {
            return Flow::Continue;
        };
        let len = (64 << 10) << self.rng.below(7);
        let len = len.min(size);
        let start = self.rng.below(size - len + 1) & !4095;
        for &index in victims {
            // A region past a device's end (a smaller replacement) rots nothing there.
            let _ = self.devices[index].rot(start, len);
        }
        self.trace.line(format!(
            "rot region {start:#x}+{len:#x} of devices {victims:?}"
        ));
        Flow::Continue
    }

    /// A faulty device vanishes, or a vanished one returns under a new path (export, move,
    /// import: the pool finds it by GUID).
    fn op_vanish(&mut self) -> Step {
        let present: Vec<usize> = self
            .faulty_present()
            .into_iter()
            .filter(|i| !self.gone.contains(i))
            .collect();
        if !self.gone.is_empty() && (present.is_empty() || self.rng.chance(1, 2)) {
            let index = self
                .gone
                .remove(self.rng.below(self.gone.len() as u64) as usize);
            self.vanished_at.remove(&index);
            if let Some(flow) = self.export("return")? {
                self.devices[index].set_gone(false);
                return Ok(flow);
            }
            self.devices[index].set_gone(false);
            self.rename(index);
            self.trace.line(format!("device {index} returns"));
            return self.import("return");
        }
        let Some(&index) = present.get(self.rng.below(present.len().max(1) as u64) as usize) else {
            return Ok(Flow::Continue);
        };
        self.devices[index].set_gone(true);
        self.ever_missing.insert(index);
        self.gone.push(index);
        let path = self.devices[index].path().to_string();
        self.vanished_at.insert(index, path);
        self.trace.line(format!("device {index} vanishes"));
        Ok(Flow::Continue)
    }

    /// Sum of every fault the devices injected so far.
    pub(crate) fn faults_injected(&self) -> u64 {
        self.devices
            .iter()
            .map(|device| {
                let s = device.stats();
                s.injected_read_eio
                    + s.injected_write_eio
                    + s.injected_flush_eio
                    + s.lost_writes
                    + s.misdirected_writes
                    + s.bitrot_writes
                    + s.rotted_sectors
                    + s.torn_on_crash
                    + s.dropped_on_crash
                    + s.gone_refusals
            })
            .sum()
    }

    /// The end of a run: faults stop, vanished devices return, and the pool must commit,
    /// verify, export and import with every byte equal to the model.
    pub(crate) fn finish(&mut self) -> Step {
        for device in &self.devices {
            let plan = device.plan();
            device.set_plan(FaultPlan {
                seed: plan.seed,
                drop_on_crash: plan.drop_on_crash,
                torn_on_crash: plan.torn_on_crash,
                latency_ns: plan.latency_ns,
                latency_jitter_ns: plan.latency_jitter_ns,
                ..FaultPlan::default()
            });
        }
        for index in std::mem::take(&mut self.gone) {
            self.devices[index].set_gone(false);
        }
        self.vanished_at.clear();
        self.trace.line("finish: faults off".into());
        if let Flow::End(why) = self.op_sync()? {
            return Ok(Flow::End(why));
        }
        if let Flow::End(why) = self.op_export_import()? {
            return Ok(Flow::End(why));
        }
        self.scrub()
    }

    /// Scrubs the whole pool. Within budget it must end without an unrecoverable block (it
    /// may repair what the faults left) and the data must still equal the model.
    fn scrub(&mut self) -> Step {
        if let Flow::End(why) = self.finish_scan()? {
            return Ok(Flow::End(why));
        }
        let names = [POOL.to_string()];
        if let Err((_, e)) = self.engine.scrub(&names, ScrubAction::Start, "pool scrub") {
            return self.engine_error("scrub start", &e);
        }
        let progress = loop {
            match self.engine.scrub_step(POOL, 1 << 20) {
                Ok(Some(p)) if p.state != ScanState::Scanning => break p,
                Ok(_) => {}
                Err(e) => return self.engine_error("scrub", &e),
            }
        };
        self.trace.line(format!(
            "scrub: {:?} examined {} repaired {} errors {}",
            progress.state, progress.examined, progress.repaired, progress.errors
        ));
        // The scan record is committed in txgs of its own; the data did not change.
        let now = check::committed_txg(&self.engine, POOL)
            .map_err(|e| e.to_string())?
            .ok_or("a scrubbed pool has no committed txg")?;
        if now > self.committed_txg {
            self.committed_after(now)?;
        }
        if self.within() && progress.errors > 0 {
            return Err(format!(
                "scrub found {} unrecoverable blocks within budget",
                progress.errors
            ));
        }
        self.check_all("scrub")
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::sim) fn started(seed: u64) -> Sim {
        started_with(seed, |_| {})
    }

    /// [`started`] with the configuration changed first.
    pub(in crate::sim) fn started_with(seed: u64, change: impl FnOnce(&mut Config)) -> Sim {
        let mut config = Config::from_seed(seed, Some(Budget::Within));
        change(&mut config);
        let mut sim = Sim::new(config, false);
        assert!(matches!(sim.create().unwrap(), Flow::Continue));
        for _ in 0..3 {
            sim.op_create().unwrap();
        }
        for _ in 0..20 {
            sim.op_write(Op::Write).unwrap();
        }
        sim.op_sync().unwrap();
        sim
    }

    #[test]
    fn the_checkers_catch_damage_beyond_what_the_run_promised() {
        // Goal: the checkers can fail. Method: a within-budget run whose every leaf then rots
        // heavily (far beyond any parity) must report a broken invariant, not pass.
        let mut sim = started(3);
        for device in &sim.devices {
            device.rot_random(4000);
        }
        let broken = sim.check_all("rot").unwrap_err();
        assert!(!broken.is_empty());
    }

    #[test]
    fn wrong_bytes_in_the_model_are_reported_with_the_offset() {
        // Goal: a model/engine disagreement names the object and the offset. Method: change
        // the model behind the engine's back and check.
        let mut sim = started(4);
        let (&id, _) = sim.open.objects.iter().next().unwrap();
        sim.open.write(id, 777, &[0xA5]);
        let broken = sim.check_all("model").unwrap_err();
        assert!(
            broken.contains("wrong bytes") && broken.contains("offset 777"),
            "{broken}"
        );
    }

    #[test]
    fn a_crash_goes_back_to_the_last_committed_txg() {
        // Goal: after a power cut, the model is the committed one (or the in-flight one whose
        // uberblock reached a disk) and every checker passes.
        let mut sim = started(5);
        let committed = sim.committed_txg;
        for _ in 0..5 {
            sim.op_write(Op::Write).unwrap();
        }
        sim.op_crash().unwrap();
        assert!(sim.committed_txg > committed);
        assert_eq!(sim.counts.crashes, 1);
        assert_eq!(sim.open.digest(), sim.committed.digest());
    }
}
