//! The healing workload: replace a faulty leaf with a fresh device, let the engine put hot
//! spares beside leaves out of service (`Engine::fault_check`, what the daemon's thread
//! calls), take a faulty leaf offline and bring it back (online resilvers what it missed),
//! start a scrub, and advance a running scrub or resilver a little at a time, so
//! writes, crashes, exports and renames land in the middle of a scan.
//!
//! The budget stays kept: a fresh device and a spare are healthy (no fault plan), and a
//! replaced leaf is *retired*: it keeps its plan while it still serves reads during the
//! resilver, but the workload no longer rots it or makes it vanish. Every commit these verbs
//! make (the replace, the spare activation, the scrub record, the end of a scan) carries the
//! open model, which the run follows; the checkers run after each.

use tarn_device::{Device, FaultPlan, SimDevice};
use tarn_engine::{EngineError, ScanState, ScrubAction, check};

use super::{Flow, POOL, Sim, Step};
use crate::config::DEVICE_DIR;

/// Most bytes one workload step lets a running scan read.
const SCAN_STEP_BYTES_MAX: u64 = 1 << 20;
/// Most fresh devices a run adds by replacing.
const FRESH_DEVICES_MAX: usize = 4;
/// Bound on scan steps when a run must finish a scan (a scan of the simulator's pools takes
/// far fewer; more means the scan does not move).
const SCAN_STEPS_MAX: u64 = 1 << 20;

impl Sim {
    /// Faulty leaves the workload may still damage: configured faulty, not replaced.
    pub(super) fn faulty_present(&self) -> Vec<usize> {
        let mut faulty = self.cfg.faulty();
        faulty.retain(|i| !self.retired.contains(i));
        faulty
    }

    fn scanning(&self) -> bool {
        self.engine.scanning_pools().iter().any(|p| p == POOL)
    }

    /// One batch of a running scan, of a random size; nothing when none runs.
    pub(super) fn scan_batch(&mut self) -> Step {
        if !self.scanning() {
            return Ok(Flow::Continue);
        }
        let bytes = 1 + self.rng.below(SCAN_STEP_BYTES_MAX);
        self.scan_step(bytes)
    }

    pub(super) fn op_heal(&mut self) -> Step {
        if self.scanning() && self.rng.chance(2, 3) {
            return self.scan_batch();
        }
        match self.rng.below(4) {
            0 => self.replace_faulty(),
            1 => self.activate_spares(),
            2 => self.offline_or_online(),
            _ => self.start_scrub(),
        }
    }

    /// Takes a present faulty leaf offline (for good or `-t`; within budget it is one of the
    /// leaves its vdev may lose anyway), or brings an offlined one back, which resilvers what
    /// it missed.
    fn offline_or_online(&mut self) -> Step {
        let before = self.committed_txg;
        if let Some(index) = self.offlined.pop() {
            let path = self.devices[index].path().to_string();
            let what = format!("online {path}");
            return match self.engine.online(POOL, &path, "pool online") {
                Ok(outcome) => {
                    self.trace
                        .line(format!("{what}: resilver from {:?}", outcome.resilver_from));
                    self.follow_verb(&what)
                }
                // Vanished while offline, or gone from the tree (replaced).
                Err(e @ (EngineError::DeviceNotPresent | EngineError::NoSuchDevice)) => {
                    self.refused(&what, &e, before)
                }
                Err(e) => {
                    self.hold_in_flight();
                    self.engine_error(&what, &e)
                }
            };
        }
        let present: Vec<usize> = self
            .faulty_present()
            .into_iter()
            .filter(|i| !self.gone.contains(i))
            .collect();
        if present.is_empty() {
            return Ok(Flow::Continue);
        }
        let index = present[self.rng.below(present.len() as u64) as usize];
        let path = self.devices[index].path().to_string();
        let temporary = self.rng.chance(1, 2);
        let what = format!("offline {}{path}", if temporary { "-t " } else { "" });
        match self.engine.offline(POOL, &path, temporary, "pool offline") {
            Ok(()) => {
                self.offlined.push(index);
                self.ever_missing.insert(index);
                self.follow_verb(&what)
            }
            // Its vdev cannot spare it now (another leaf is out), or it stands in a
            // replacing or spare node.
            Err(
                e @ (EngineError::NoValidReplicas
                | EngineError::InvalidArgument(_)
                | EngineError::NoSuchDevice),
            ) => self.refused(&what, &e, before),
            Err(e) => {
                self.hold_in_flight();
                self.engine_error(&what, &e)
            }
        }
    }

    /// A commit an admin verb or a scan made carries the open model.
    fn follow_verb(&mut self, what: &str) -> Step {
        let now = check::committed_txg(&self.engine, POOL)
            .map_err(|e| e.to_string())?
            .ok_or("an imported pool has no committed txg")?;
        if now == self.committed_txg {
            return Ok(Flow::Continue);
        }
        self.committed_after(now)?;
        self.trace.line(format!("{what}: txg {now}"));
        self.check_all(what)
    }

    /// One batch of the running scan; within budget a finished scan found nothing lost.
    pub(super) fn scan_step(&mut self, bytes: u64) -> Step {
        let progress = match self.engine.scrub_step(POOL, bytes) {
            Ok(progress) => progress,
            Err(e) => {
                self.hold_in_flight();
                return self.engine_error("scan step", &e);
            }
        };
        let Some(p) = progress.filter(|p| p.state == ScanState::Finished) else {
            return self.follow_verb("scan step");
        };
        self.trace.line(format!(
            "{} finished: examined {} repaired {} errors {}",
            p.function.name(),
            p.examined,
            p.repaired,
            p.errors
        ));
        self.counts.scans_finished += 1;
        if self.within() && p.errors > 0 {
            return Err(format!(
                "{} found {} unrecoverable blocks within budget",
                p.function.name(),
                p.errors
            ));
        }
        self.follow_verb("scan finish")
    }

    /// Runs the running scan (if any) to its end.
    pub(super) fn finish_scan(&mut self) -> Step {
        for _ in 0..SCAN_STEPS_MAX {
            if !self.scanning() {
                return Ok(Flow::Continue);
            }
            if let Flow::End(why) = self.scan_step(SCAN_STEP_BYTES_MAX)? {
                return Ok(Flow::End(why));
            }
        }
        Err("a scan did not finish".into())
    }

    /// `pool replace` of a faulty leaf (present or vanished) with a fresh, healthy device.
    fn replace_faulty(&mut self) -> Step {
        let candidates = self.faulty_present();
        let fresh = self.devices.len() - self.cfg.paths.len();
        if candidates.is_empty() || fresh >= FRESH_DEVICES_MAX {
            return Ok(Flow::Continue);
        }
        let old = candidates[self.rng.below(candidates.len() as u64) as usize];
        // A vanished leaf keeps, in the pool, the path it had when it went.
        let old_path = match self.vanished_at.get(&old) {
            Some(path) => path.clone(),
            None => self.devices[old].path().to_string(),
        };
        let new_path = format!("{DEVICE_DIR}/r{fresh}");
        let healthy = self
            .devices
            .iter()
            .enumerate()
            .find(|(i, _)| !self.cfg.faulty().contains(i))
            .map(|(_, d)| d.plan());
        let plan = FaultPlan {
            seed: self.rng.next_u64(),
            ..healthy.unwrap_or_default()
        };
        let device =
            SimDevice::with_clock(&new_path, self.cfg.device_size, plan, self.clock.clone());
        self.provider.devices.insert(&new_path, device.clone());
        self.devices.push(device);
        self.renames.push(0);
        let before = self.committed_txg;
        let what = format!("replace {old_path} with {new_path}");
        match self
            .engine
            .replace(POOL, &old_path, Some(&new_path), "pool replace")
        {
            Ok(()) => {
                self.retired.push(old);
                self.counts.replaces += 1;
                self.follow_verb(&what)
            }
            // Refusals the workload cannot rule out beforehand: the leaf already stands in a
            // replacing or spare node, or vanished from a tree imported without it.
            Err(e @ (EngineError::AlreadyReplacing | EngineError::InvalidArgument(_))) => {
                self.refused(&what, &e, before)
            }
            // A faulty leaf that moved to a new path may have lost every label on the way
            // (its lost writes are in its plan): then the pool never read it there and
            // knows it only by its last recorded path, as ZFS would (seed 70143).
            Err(e @ EngineError::NoSuchDevice) if self.renames[old] > 0 => {
                self.refused(&what, &e, before)
            }
            Err(e) => {
                self.hold_in_flight();
                self.engine_error(&what, &e)
            }
        }
    }

    /// A refused verb changed nothing: no commit.
    fn refused(&mut self, what: &str, error: &EngineError, before: tarn_base::Txg) -> Step {
        self.trace.line(format!("{what}: refused: {error}"));
        let now = check::committed_txg(&self.engine, POOL).map_err(|e| e.to_string())?;
        if now != Some(before) {
            return Err(format!(
                "{what} was refused ({error}) but committed {now:?}"
            ));
        }
        Ok(Flow::Continue)
    }

    /// What the daemon's fault thread does: fault erroring leaves, spare the missing ones.
    fn activate_spares(&mut self) -> Step {
        let started = self.engine.fault_check();
        self.note_out_of_service();
        self.counts.spares += started.len() as u64;
        self.trace
            .line(format!("fault check: resilver started in {started:?}"));
        self.follow_verb("spare activation")
    }

    fn start_scrub(&mut self) -> Step {
        let before = self.committed_txg;
        match self
            .engine
            .scrub(&[POOL.to_string()], ScrubAction::Start, "pool scrub")
        {
            Ok(()) => self.follow_verb("scrub start"),
            Err((_, e @ (EngineError::ResilverInProgress | EngineError::ScanInProgress))) => {
                self.refused("scrub", &e, before)
            }
            Err((_, e)) => {
                self.hold_in_flight();
                self.engine_error("scrub start", &e)
            }
        }
    }
}
