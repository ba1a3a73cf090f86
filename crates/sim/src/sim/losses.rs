//! I6: a loss the engine reports sits where the devices were damaged. Beyond budget a read
//! may fail, but only for a block whose every copy lost more of its children than its vdev
//! tolerates to faults that touched exactly those bytes (issue 17: only files touching a
//! damaged region are reported lost; a lost dnode or directory block is the files' own
//! metadata, which holds as well).
//!
//! The engine names the lost block's copies ([`EngineError::lost_copies`]) and where each lies
//! on its leaves ([`Engine::block_placement`]); the devices remember every range a fault
//! touched ([`SimDevice::scarred`]). A device that was ever gone, offline, a hot spare or a
//! fresh replacement may miss any write of its time away or before its resilver, so all of
//! it counts as damaged: the check is weaker there, never wrong. So does a child the engine
//! itself has out of service (a leaf the fault check faulted) or is resilvering, and a leaf
//! path the run does not know (a dRAID distributed spare).
//!
//! [`Engine::block_placement`]: tarn_engine::Engine::block_placement
//! [`SimDevice::scarred`]: tarn_device::SimDevice::scarred

use std::ops::Range;

use tarn_device::Device;
use tarn_engine::{EngineError, VdevNode};

use super::{POOL, Sim};

impl Sim {
    /// I6 for `error`, met doing `what`: `Err` when it reports a block lost that no fault
    /// could have destroyed.
    pub(super) fn check_loss(&mut self, what: &str, error: &EngineError) -> Result<(), String> {
        let Some(copies) = error.lost_copies() else {
            return Ok(());
        };
        for dva in copies {
            let placement = self
                .engine
                .block_placement(POOL, dva)
                .map_err(|e| format!("{what}: where is the lost block? {e}"))?;
            let damaged = placement
                .children
                .iter()
                .filter(|share| {
                    share.impaired || share.leaves.iter().any(|p| self.damaged(p, &share.range))
                })
                .count();
            if damaged <= placement.tolerated {
                return Err(format!(
                    "{what}: I6: reported lost ({error}), but faults touched copy {}:{:#x}:{:#x} \
                     on {damaged} of its {} children only, and its vdev tolerates {}",
                    dva.vdev.0,
                    dva.offset,
                    dva.asize,
                    placement.children.len(),
                    placement.tolerated
                ));
            }
        }
        self.counts.losses_placed += 1;
        Ok(())
    }

    /// Adds the leaves the engine has out of service (the fault check faulted them) to
    /// the devices that may miss writes: they stay so after a later `clear` or import.
    pub(super) fn note_out_of_service(&mut self) {
        let Ok(status) = self.engine.status(POOL) else {
            return;
        };
        let mut stack: Vec<&VdevNode> = vec![&status.config];
        while let Some(node) = stack.pop() {
            stack.extend(&node.children);
            let out = ["FAULTED", "OFFLINE", "REMOVED", "UNAVAIL"].contains(&node.state.as_str());
            if let Some(index) = self.devices.iter().position(|d| d.path() == node.name)
                && out
            {
                self.ever_missing.insert(index);
            }
        }
    }

    /// Whether a fault may have destroyed `range` of the leaf at `path`.
    fn damaged(&self, path: &str, range: &Range<u64>) -> bool {
        let Some(index) = self.devices.iter().position(|d| d.path() == path) else {
            return true;
        };
        self.ever_missing.contains(&index)
            || index >= self.cfg.paths.len()
            || self.cfg.spares.contains(&index)
            || self.devices[index].scarred(range.start, range.end - range.start)
    }
}

#[cfg(test)]
mod tests {
    use tarn_base::{ObjectId, Txg, VdevId};
    use tarn_engine::EngineError;
    use tarn_format::Dva;
    use tarn_objects::ObjectError;
    use tarn_zio::ZioError;

    use super::super::tests::started;
    use super::*;

    fn lost(dva: Dva) -> EngineError {
        EngineError::Objects(ObjectError::Io {
            object: ObjectId(1),
            offset: 0,
            source: ZioError::Unrecoverable {
                dva: String::new(),
                birth: Txg(1),
                why: "test".into(),
                copies: Box::new([dva]),
            },
        })
    }

    #[test]
    fn a_loss_on_undamaged_devices_breaks_i6_and_one_in_a_damaged_region_does_not() {
        // Goal: I6 can fail, and accepts a loss exactly where the devices were damaged.
        // Method: find a block address no fault touched on any of its children; a loss
        // claimed there is a broken invariant; rot the block's bytes on every child, and the
        // same loss is justified.
        // Seed 3: vdev 0 is a raidz2 of four leaves at ashift 12, so six sectors cover all.
        let mut sim = started(3);
        let clean = (0..4096u64)
            .map(|i| Dva {
                vdev: VdevId(0),
                offset: (i * 97 % 4096) << 13,
                asize: 6 << 12,
            })
            .find(|dva| {
                let placed = sim.engine.block_placement(POOL, dva).unwrap();
                placed
                    .children
                    .iter()
                    .all(|share| share.leaves.iter().all(|p| !sim.damaged(p, &share.range)))
            })
            .expect("some block address untouched by faults");
        let broken = sim.check_loss("test", &lost(clean)).unwrap_err();
        assert!(broken.contains("I6"), "{broken}");
        let placed = sim.engine.block_placement(POOL, &clean).unwrap();
        for share in &placed.children {
            let device = sim
                .devices
                .iter()
                .find(|d| d.path() == share.leaves[0])
                .unwrap();
            device
                .rot(share.range.start, share.range.end - share.range.start)
                .unwrap();
        }
        sim.check_loss("test", &lost(clean)).unwrap();
    }
}
