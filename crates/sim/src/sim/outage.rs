//! Outages ended by `clear`: every leaf of one vdev (more than it tolerates) goes away under
//! `failmode=wait`; a sync suspends the pool; a writer blocks; the devices come back and
//! `clear` resumes the pool; the blocked write completes; nothing acknowledged is lost.
//!
//! The run creates its pools with `failmode=continue` (one thread drives everything, and a
//! read or write that waits for `clear` would wait forever), so an outage sets
//! `failmode=wait` for its own span and back to `continue` at its end, with no read in
//! between; an outage that ends another way (an error, an import) gets `continue` back
//! before the run reads again (`op_outage`, and `Sim::imported` before its checkers).
//! Inside it, the only engine calls are the write and sync that meet the missing devices,
//! the blocked write on a second (scoped) thread, `clear`, and, if `clear` fails,
//! `export -f` (which ends the blocked write) followed by the crash-and-import path every
//! other suspension takes. The blocked write cannot return before `clear` (the pool is
//! suspended and the failmode is `wait`), and the run joins it before its next step, so
//! the order of everything the model sees is the seed's alone (I1).
//!
//! The devices return with their contents (`SimDevice::set_gone`), so within budget the
//! outage must end with every acknowledged byte there: `clear` must succeed, commit the
//! kept txg (or nothing, when the pool suspended before the txg started), the blocked write
//! must succeed, and the checkers run after the final commit. Only a suspension that
//! `clear` refuses by design may end in `export -f` and an import; beyond budget any failed
//! `clear` is counted and recovered so.

use tarn_device::Device;
use tarn_engine::{EngineError, PoolError, check};

use super::{Flow, POOL, Sim, Step};

/// How often an outage tries to set `failmode=continue` again before the run ends.
const FAILMODE_TRIES: u32 = 3;

/// The write that waited for `clear`: object, offset, bytes, and what it returned.
type BlockedWrite = (tarn_base::ObjectId, u64, Vec<u8>, Result<(), EngineError>);

impl Sim {
    /// One outage, and `failmode=continue` again whatever way it ended: the property is on
    /// disk, so a pool imported after an outage that ended early would still wait, and a
    /// later suspension would block the run's one thread for good.
    pub(super) fn op_outage(&mut self) -> Step {
        let mut flow = self.outage()?;
        for _ in 0..FAILMODE_TRIES {
            if !self.failmode_wait || !matches!(flow, Flow::Continue) {
                return Ok(flow);
            }
            flow = match self.set_failmode("continue")? {
                Some(flow) => flow,
                None => Flow::Continue,
            };
        }
        if self.failmode_wait && matches!(flow, Flow::Continue) {
            return Ok(Flow::End(
                "failmode=continue could not be set again after an outage".into(),
            ));
        }
        Ok(flow)
    }

    /// The outage itself (module doc): every leaf of one top-level vdev goes away. Skipped
    /// while devices are gone (the vanish workload).
    fn outage(&mut self) -> Step {
        let tops = self.outage_tops();
        if !self.gone.is_empty() || tops.is_empty() {
            return Ok(Flow::Continue);
        }
        // Every leaf the top-level vdev has now (spares and replacements in it too): more
        // than it tolerates whatever healing did to it, so the sync must suspend.
        let leaves = tops[self.rng.below(tops.len() as u64) as usize].clone();
        if let Some(flow) = self.set_failmode("wait")? {
            return Ok(flow);
        }
        for &index in &leaves {
            self.devices[index].set_gone(true);
            self.ever_missing.insert(index);
        }
        self.trace.line(format!(
            "outage: devices {leaves:?} go away (failmode=wait)"
        ));
        let synced = self.engine.sync_pool(POOL);
        let suspended = match synced {
            Ok(txg) => {
                // Nothing reached the missing devices' vdev beyond what it tolerates.
                self.committed_after(txg)?;
                self.trace.line(format!("outage: sync committed txg {txg}"));
                false
            }
            Err(EngineError::Pool(PoolError::Suspended(why))) => {
                self.inflight = Some(self.open.clone());
                self.trace.line(format!("outage: suspended: {why}"));
                true
            }
            Err(e) => {
                self.return_devices(&leaves);
                self.inflight = Some(self.open.clone());
                return self.engine_error("outage sync", &e);
            }
        };
        if !suspended {
            // Not expected (every leaf of the vdev was gone); the leaves the sync found
            // gone stay out of service, so recover as after any surprise: restart, import.
            self.return_devices(&leaves);
            return self.crash_and_import("outage without suspension");
        }
        self.counts.suspensions += 1;
        self.blocked_write_then_clear(&leaves)
    }

    /// Device indices of the leaves of each data, special and log-less top-level vdev, as
    /// the pool's status lists them (in order, so the choice is the seed's).
    fn outage_tops(&self) -> Vec<Vec<usize>> {
        let Ok(status) = self.engine.status(POOL) else {
            return Vec::new();
        };
        let mut tops = Vec::new();
        for node in &status.config.children {
            match node.kind.as_str() {
                "cache" | "logs" => {}
                "special" => tops.extend(node.children.iter().map(|t| self.leaf_indices(t))),
                _ => tops.push(self.leaf_indices(node)),
            }
        }
        tops.retain(|leaves| !leaves.is_empty());
        tops
    }

    fn leaf_indices(&self, node: &tarn_engine::VdevNode) -> Vec<usize> {
        if node.children.is_empty() {
            let index = self.devices.iter().position(|d| d.path() == node.name);
            return index.into_iter().collect();
        }
        node.children
            .iter()
            .flat_map(|child| self.leaf_indices(child))
            .collect()
    }

    fn return_devices(&mut self, leaves: &[usize]) {
        for &index in leaves {
            self.devices[index].set_gone(false);
        }
    }

    /// A writer blocks on the suspended pool (when there is an object to write); the
    /// devices come back; `clear`; the writer completes (or fails after `export -f` when
    /// `clear` cannot resume).
    fn blocked_write_then_clear(&mut self, leaves: &[usize]) -> Step {
        let write = self.random_write(super::Op::Write);
        let engine = &self.engine;
        let devices = &self.devices;
        let (early, cleared, written) = std::thread::scope(|scope| {
            let writer = write.as_ref().map(|(id, offset, data)| {
                scope.spawn(|| engine.object_write(POOL, *id, *offset, data))
            });
            for &index in leaves {
                devices[index].set_gone(false);
            }
            // It cannot have returned: the pool is suspended and failmode is `wait`.
            let early = writer.as_ref().is_some_and(|w| w.is_finished());
            let cleared = engine.clear(POOL, None, "pool clear");
            if cleared.is_err() {
                // `export -f` always succeeds and ends the waiting write.
                let _ = engine.export_pool(POOL, true);
            }
            let written = writer.map(|w| w.join().map_err(|_| "the blocked writer panicked"));
            (early, cleared, written)
        });
        if early {
            return Err(
                "a write to a pool suspended with failmode=wait returned before \
                        clear"
                    .into(),
            );
        }
        let written = written.transpose()?;
        if let Err(e) = cleared {
            return self.clear_refused(&e, written.as_ref().is_some_and(Result::is_ok));
        }
        let blocked = write
            .zip(written)
            .map(|((id, offset, data), w)| (id, offset, data, w));
        self.clear_outage(blocked)
    }

    /// `clear` could not resume: the pool was exported with `-f`, the blocked write failed;
    /// recover by import (the model goes back to what the import opens). Within budget only
    /// a suspension `clear` refuses by design may end so (tarn-pool `resume`: the write
    /// phase failed in the upper layers, e.g. a metadata read that needed the missing
    /// devices); devices still failing with every device back is a broken invariant.
    fn clear_refused(&mut self, error: &EngineError, written: bool) -> Step {
        self.trace.line(format!("outage: clear failed: {error}"));
        if written {
            return Err(
                "a blocked write succeeded although clear failed and the pool was \
                        exported"
                    .into(),
            );
        }
        let by_design = matches!(error, EngineError::Pool(PoolError::CannotResume(_)));
        if self.within() && !by_design {
            return Err(format!(
                "clear failed within budget after the devices came back: {error}"
            ));
        }
        self.counts.errors_reported += 1;
        self.crash_and_import("outage")
    }

    /// After a successful `clear`: the kept txg (if the suspension kept one) committed the
    /// model held in flight; the blocked write, which went ahead after it, is in the open
    /// model.
    fn clear_outage(&mut self, blocked: Option<BlockedWrite>) -> Step {
        self.counts.clears += 1;
        let now = check::committed_txg(&self.engine, POOL)
            .map_err(|e| e.to_string())?
            .ok_or("a resumed pool has no committed txg")?;
        let kept = self.inflight.take();
        if now > self.committed_txg {
            let model = kept.ok_or("clear committed a txg the run did not hold in flight")?;
            self.committed_model(now, model)?;
        }
        self.trace
            .line(format!("outage: cleared, committed txg {now}"));
        if let Some((id, offset, data, written)) = blocked {
            match written {
                Ok(()) => {
                    self.open.write(id, offset, &data);
                    self.trace.line(format!(
                        "outage: blocked write of object {} at {offset} went ahead",
                        id.0
                    ));
                }
                // Admission ran again after `clear` and found the pool full: refused
                // before anything changed.
                Err(EngineError::NoSpace) => {
                    self.counts.no_space += 1;
                    self.trace
                        .line("outage: blocked write after clear: out of space".to_string());
                }
                Err(e) => {
                    self.hold_in_flight();
                    self.open.forget(id, offset, data.len() as u64);
                    return self.engine_error("outage: blocked write after clear", &e);
                }
            }
        }
        self.end_outage()
    }

    /// Back to `failmode=continue` (a commit the run follows), then the checkers.
    fn end_outage(&mut self) -> Step {
        if let Some(flow) = self.set_failmode("continue")? {
            return Ok(flow);
        }
        self.check_all("outage")
    }

    /// Sets `failmode` (the property commits the open txg at once, which the run
    /// follows). `Some` when the run cannot go on from here (beyond budget).
    fn set_failmode(&mut self, value: &str) -> Result<Option<Flow>, String> {
        if let Err(e) = self.engine.set_prop(POOL, "failmode", value, "pool set") {
            self.hold_in_flight();
            return self
                .engine_error(&format!("pool set failmode={value}"), &e)
                .map(Some);
        }
        self.failmode_wait = value == "wait";
        let now = check::committed_txg(&self.engine, POOL)
            .map_err(|e| e.to_string())?
            .ok_or("an imported pool has no committed txg")?;
        if now > self.committed_txg {
            self.committed_after(now)?;
        }
        Ok(None)
    }
}
