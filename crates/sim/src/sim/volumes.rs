//! Volumes in the workload (a quarter of the seeds, or `--volumes`): `create -V` (sparse or
//! thick, `logbias=latency` or `throughput`, a seed-drawn `volblocksize`, compression and
//! checksum), writes of random bytes, trims and write-zeroes, reads compared with the model,
//! flushes and FUA writes (the volume's intent log, records 32-34), and `set volsize` growth,
//! through the same verbs the NBD server calls (`Engine::volume_*`). Volumes are datasets:
//! the dataset verbs rename and destroy them, the snapshot verbs snapshot, roll back and
//! clone them (`Model::volumes`, `SnapshotModel::volume`).
//!
//! # The crash model
//! A flush (or a FUA write) that returned makes the volume durable as it was then: the run
//! keeps that state (`Sim::volflushed`) until the next commit, and an import of the last
//! committed txg must find every flushed volume exactly so (the replay), every other volume
//! as committed. Writes after the last flush are gone after a crash (nothing logged them
//! durably). A flush that failed at the power cut may or may not have made its commit
//! durable (it was never acknowledged): the import may find either state, and the run reads
//! the volume to learn which (`Sim::volume_maybe`); any third state is a broken invariant.
//! Flushes happen within budget only, as `fsync`: beyond it a replay may end early, which
//! the model does not predict. Within budget every read equals the model; beyond it a read
//! equals the model or fails with a loss that I6 places, and a failed change restarts the
//! engine (its txg may be half changed), as the POSIX workload does.
//!
//! Not here: shrinking (`set volsize -f`), `sync=always` and `sync=disabled` (their commit
//! after the change and an admission commit before it leave a failed write two possible
//! txgs in flight, and the model keeps one), flushes between a txg's write and commit phases
//! (the commit would first finish that txg, which the run follows only for plain writes).

use tarn_engine::{EngineError, VolumeSpec, check};

use super::{CHECK_CHUNK, Flow, POOL, Sim, Step};
use crate::model::VolumeModel;

/// Most volumes alive at once.
const VOLUMES_MAX: usize = 3;
/// Largest volume the workload creates (the model holds every byte).
const VOLUME_BYTES_MAX: u64 = 2 << 20;
/// Longest volume write.
const VOLUME_WRITE_MAX: u64 = 128 << 10;

fn full_name(name: &str) -> String {
    format!("{POOL}/{name}")
}

/// One volume change the workload asks of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Write { fua: bool },
    Zero,
    Flush,
}

impl Sim {
    fn pick_volume(&mut self) -> Option<String> {
        let names: Vec<String> = self.open.volumes.keys().cloned().collect();
        if names.is_empty() {
            return None;
        }
        Some(names[self.rng.below(names.len() as u64) as usize].clone())
    }

    /// One volume operation (module doc).
    pub(super) fn op_volume(&mut self) -> Step {
        let count = self.open.volumes.len();
        if count == 0 || (count < VOLUMES_MAX && self.rng.chance(1, 12)) {
            return self.volume_create();
        }
        let Some(name) = self.pick_volume() else {
            return Ok(Flow::Continue);
        };
        match self.rng.below(20) {
            0..=6 => {
                let fua = self.within() && self.rng.chance(1, 5);
                self.volume_change(&name, Change::Write { fua })
            }
            7..=9 => self.volume_change(&name, Change::Zero),
            10..=13 => self.volume_read(&name),
            14..=17 if self.within() => {
                // A few changes first, so that most flushes have records to commit.
                for _ in 0..self.rng.below(5) {
                    let change = match self.rng.chance(1, 4) {
                        true => Change::Zero,
                        false => Change::Write { fua: false },
                    };
                    if let Flow::End(why) = self.volume_change(&name, change)? {
                        return Ok(Flow::End(why));
                    }
                }
                if let Flow::End(why) = self.volume_change(&name, Change::Flush)? {
                    return Ok(Flow::End(why));
                }
                // A quarter of the flushes: the process dies right after the reply, every
                // device loses what it had not made durable, and the import must replay
                // the flushed bytes (the NBD client's promise).
                if self.rng.chance(1, 4) {
                    return self.crash_and_import("crash after a flush");
                }
                Ok(Flow::Continue)
            }
            18 => self.volume_grow(&name),
            _ => self.volume_read(&name),
        }
    }

    /// `create -V`: a new volume `v<N>`, at the top or in a random filesystem dataset,
    /// with seed-drawn properties; commits a txg.
    fn volume_create(&mut self) -> Step {
        let parents: Vec<String> = self
            .open
            .datasets
            .iter()
            .filter(|d| !self.open.volumes.contains_key(*d))
            .cloned()
            .collect();
        self.volume_serial += 1;
        let mut name = format!("v{}", self.volume_serial);
        if !parents.is_empty() && self.rng.chance(1, 3) {
            let parent = &parents[self.rng.below(parents.len() as u64) as usize];
            name = format!("{parent}/{name}");
        }
        let low = u64::from(self.cfg.ashift.max(12));
        let block = 1u64 << (low + self.rng.below(17 - low));
        let blocks = (4 + self.rng.below(60))
            .min(VOLUME_BYTES_MAX / block)
            .max(4);
        let size = block * blocks;
        let sparse = self.rng.chance(1, 2);
        let logbias = if self.rng.chance(1, 2) {
            "throughput"
        } else {
            "latency"
        };
        let mut props = vec![("logbias".to_string(), logbias.to_string())];
        for (property, values) in [
            ("compression", &["off", "lz4", "zstd", "zle"][..]),
            ("checksum", &["fletcher4", "sha256", "blake3"][..]),
        ] {
            if self.rng.chance(1, 2) {
                let value = values[self.rng.below(values.len() as u64) as usize];
                props.push((property.to_string(), value.to_string()));
            }
        }
        let spec = VolumeSpec {
            size: size.to_string(),
            block_size: Some(block.to_string()),
            sparse,
        };
        let mut model = self.open.clone();
        model.datasets.insert(name.clone());
        model
            .volumes
            .insert(name.clone(), VolumeModel::new(size, block as u32));
        let result =
            self.engine
                .create_volume(&full_name(&name), &spec, &props, false, "create -V");
        let what = format!("create -V {size} -b {block} (sparse {sparse}) {name} {props:?}");
        if let Err(EngineError::NoSpace) = result {
            return Ok(self.volume_no_space(&what));
        }
        self.counts.volume_ops += u64::from(result.is_ok());
        self.follow_admin(&what, model, result, false)
    }

    /// `set volsize=` to a larger size (a whole number of blocks); commits a txg. A thick
    /// volume's refreservation follows, and may not fit: that refusal changes nothing.
    fn volume_grow(&mut self, name: &str) -> Step {
        let volume = &self.open.volumes[name];
        let block = u64::from(volume.block_size);
        let size = volume.bytes.len() as u64;
        if size >= VOLUME_BYTES_MAX {
            return self.volume_read(name);
        }
        let new = (size + block * (1 + self.rng.below(16))).min(VOLUME_BYTES_MAX.max(size));
        let mut model = self.open.clone();
        model
            .volumes
            .get_mut(name)
            .expect("a model volume")
            .grow(new);
        let what = format!("set volsize={new} {name} (was {size})");
        let result = self
            .engine
            .set_volsize(&full_name(name), &new.to_string(), false, "set");
        match &result {
            Err(EngineError::NoSpace) => return Ok(self.volume_no_space(&what)),
            Err(EngineError::InvalidArgument(e)) if e.contains("available space") => {
                return Ok(self.volume_no_space(&what));
            }
            _ => {}
        }
        self.counts.volume_ops += u64::from(result.is_ok());
        self.follow_admin(&what, model, result, false)
    }

    fn volume_no_space(&mut self, what: &str) -> Flow {
        self.counts.no_space += 1;
        self.trace.line(format!("{what}: out of space"));
        Flow::Continue
    }

    /// A random range of volume `name`: (offset, length), inside it.
    fn volume_range(&mut self, name: &str) -> (u64, u64) {
        let size = self.open.volumes[name].bytes.len() as u64;
        let offset = self.rng.below(size);
        let most = VOLUME_WRITE_MAX
            .min(self.cfg.write_len_max)
            .min(size - offset);
        (offset, 1 + self.rng.below(most))
    }

    /// Runs `change` on volume `name`: the engine's answer, and the volume as the model
    /// has it after the change (also when it failed: what a failed flush or FUA write may
    /// have made durable).
    fn run_volume_change(
        &mut self,
        name: &str,
        change: Change,
    ) -> (String, VolumeModel, Result<(), EngineError>) {
        let mut volume = self.open.volumes[name].clone();
        let dataset = match self.engine.find_dataset(&full_name(name)) {
            Ok((_, id)) => id,
            Err(e) => return (format!("find volume {name}"), volume, Err(e)),
        };
        let (what, result) = match change {
            Change::Write { fua } => {
                let (offset, len) = self.volume_range(name);
                let mut data = vec![0u8; usize::try_from(len).unwrap_or(0)];
                if !self.rng.chance(1, 6) {
                    self.rng.fill(&mut data);
                }
                volume.write(offset, &data);
                let result = self.engine.volume_write(POOL, dataset, offset, &data, fua);
                let what = format!("volume write {name} at {offset} len {len} fua {fua}");
                (what, result)
            }
            Change::Zero => {
                let (offset, len) = self.volume_range(name);
                volume.zero(offset, len);
                let result = self.engine.volume_zero(POOL, dataset, offset, len, false);
                (format!("volume zero {name} at {offset} len {len}"), result)
            }
            Change::Flush => (
                format!("volume flush {name}"),
                self.engine.volume_flush(POOL, dataset),
            ),
        };
        (what, volume, result)
    }

    /// A write, zero or flush of volume `name`, followed by the model (module doc).
    fn volume_change(&mut self, name: &str, change: Change) -> Step {
        let (what, volume, result) = self.run_volume_change(name, change);
        // A write's admission, or a volume's first flush, may commit the open txg.
        let synced = self.follow_commit()?;
        match result {
            Ok(()) => {
                self.volume_changed(name, change, volume);
                self.trace.line(format!("{what} (txg committed: {synced})"));
                if synced {
                    return self.check_all("volume admission sync");
                }
                Ok(Flow::Continue)
            }
            Err(EngineError::NoSpace) => Ok(self.volume_no_space(&what)),
            Err(e) if self.within() => Err(format!("{what} failed within budget: {e}")),
            Err(e) => {
                // Its txg may be half changed: restart, as an admin would.
                self.trace.line(format!("{what}: error: {e}"));
                self.check_loss(&what, &e)?;
                self.counts.errors_reported += 1;
                self.hold_in_flight();
                self.crash_and_import("volume error")
            }
        }
    }

    /// The model after an acknowledged change: the open volume, and for a flush or FUA
    /// write the state a crash before the next commit must bring back. Also when the run
    /// followed a commit during the change: an admission commit before a FUA write's
    /// change and a txg the write's log commit synced after it look the same from here,
    /// and the run committed the open model without the write; the flushed state makes up
    /// for that at a crash either way (seed 5 of the first `--volumes` soak).
    fn volume_changed(&mut self, name: &str, change: Change, volume: VolumeModel) {
        self.counts.volume_ops += 1;
        self.open.volumes.insert(name.to_string(), volume.clone());
        if matches!(change, Change::Flush | Change::Write { fua: true }) {
            self.counts.volume_flushes += 1;
            self.volflushed.insert(name.to_string(), volume);
        }
    }

    /// One volume change inside the burst before a power cut (within budget only: flushes
    /// are): `false` when it failed, and the run crashes now. A failed flush or FUA write
    /// may have made its state durable or not (module doc).
    pub(super) fn burst_volume_change(&mut self) -> Result<bool, String> {
        if !self.within() {
            return Ok(true);
        }
        let Some(name) = self.pick_volume() else {
            return Ok(true);
        };
        let change = match self.rng.below(6) {
            0 | 1 => Change::Write { fua: false },
            2 => Change::Write { fua: true },
            3 => Change::Zero,
            _ => Change::Flush,
        };
        let (what, volume, result) = self.run_volume_change(&name, change);
        self.follow_commit()?;
        if result.is_ok() {
            self.volume_changed(&name, change, volume);
            self.trace.line(format!("burst: {what}"));
            return Ok(true);
        }
        self.trace.line(format!("burst: {what}: failed"));
        if matches!(change, Change::Flush | Change::Write { fua: true }) {
            self.volume_maybe.insert(name, volume);
        }
        self.hold_in_flight();
        Ok(false)
    }

    /// Reads a random range of volume `name` and compares it with the model.
    fn volume_read(&mut self, name: &str) -> Step {
        let (offset, len) = self.volume_range(name);
        self.trace
            .line(format!("volume read {name} at {offset} len {len}"));
        self.volume_compare(name, offset, len, "volume read")
    }

    /// Reads `len` bytes of volume `name` at `offset`: equal to the open model, or beyond
    /// budget a loss I6 places.
    fn volume_compare(&mut self, name: &str, offset: u64, len: u64, when: &str) -> Step {
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
        let read = self
            .engine
            .find_dataset(&full_name(name))
            .and_then(|(_, id)| self.engine.volume_read(POOL, id, offset, &mut buf));
        match read {
            Ok(()) => match self.open.volumes[name].compare(offset, &buf) {
                None => Ok(Flow::Continue),
                Some(m) => Err(format!(
                    "{when}: wrong bytes: volume {name} offset {} expected {:#04x} read {:#04x}",
                    m.offset, m.expected, m.actual
                )),
            },
            Err(e) if self.within() => Err(format!(
                "{when}: read of volume {name} at {offset} failed within budget: {e}"
            )),
            Err(e) => {
                self.check_loss(when, &e)?;
                self.counts.errors_reported += 1;
                self.trace.line(format!(
                    "{when}: volume {name} at {offset}: loss reported: {e}"
                ));
                Ok(Flow::Continue)
            }
        }
    }

    /// Every volume of the model: its size and block size as the engine states them, and
    /// every byte.
    pub(super) fn check_volumes(&mut self, when: &str) -> Step {
        let names: Vec<String> = self.open.volumes.keys().cloned().collect();
        for name in names {
            let (size, block) = {
                let volume = &self.open.volumes[&name];
                (volume.bytes.len() as u64, volume.block_size)
            };
            let stat = match self.engine.volume_stat(&full_name(&name)) {
                Ok(stat) => stat,
                Err(e) => return self.engine_error(&format!("volume stat {name}"), &e),
            };
            if (stat.size, stat.block_size) != (size, block) {
                return Err(format!(
                    "after {when}: volume {name} has volsize {} volblocksize {}, the model \
                     {size} and {block}",
                    stat.size, stat.block_size
                ));
            }
            let mut offset = 0;
            while offset < size {
                let len = CHECK_CHUNK.min(size - offset);
                if let Flow::End(why) = self.volume_compare(&name, offset, len, when)? {
                    return Ok(Flow::End(why));
                }
                offset += len;
            }
        }
        Ok(Flow::Continue)
    }

    /// Within budget, every volume snapshot reads as it was taken.
    pub(super) fn check_volume_snapshots(&mut self, when: &str) -> Result<(), String> {
        let taken: Vec<(String, String, VolumeModel)> = self
            .open
            .snapshots
            .iter()
            .flat_map(|(d, list)| {
                list.iter()
                    .filter_map(move |s| Some((d.clone(), s.name.clone(), s.volume.clone()?)))
            })
            .collect();
        for (dataset, snap, volume) in taken {
            let full = format!("{}@{snap}", full_name(&dataset));
            let size = volume.bytes.len() as u64;
            let mut offset = 0;
            while offset < size {
                let len = CHECK_CHUNK.min(size - offset);
                let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
                let object = tarn_dataset::volume::VOLUME_OBJECT;
                check::snapshot_read(&self.engine, &full, object, offset, &mut buf)
                    .map_err(|e| format!("after {when}: read {full}: {e}"))?;
                if let Some(m) = volume.compare(offset, &buf) {
                    return Err(format!(
                        "after {when}: {full} at {}: expected {:#04x}, read {:#04x}",
                        m.offset, m.expected, m.actual
                    ));
                }
                offset += len;
            }
        }
        Ok(())
    }

    /// After an import: a volume whose flush failed at the power cut holds the state
    /// `model` has for it or the failed flush's (module doc); the run reads it to learn
    /// which, and anything else is a broken invariant.
    pub(super) fn resolve_volumes(
        &mut self,
        why: &str,
        mut model: crate::model::Model,
    ) -> Result<crate::model::Model, String> {
        for (name, maybe) in std::mem::take(&mut self.volume_maybe) {
            let Some(expected) = model.volumes.get(&name) else {
                continue;
            };
            let mut bytes = vec![0u8; expected.bytes.len()];
            self.engine
                .find_dataset(&full_name(&name))
                .and_then(|(_, id)| self.engine.volume_read(POOL, id, 0, &mut bytes))
                .map_err(|e| format!("{why}: read of volume {name} failed: {e}"))?;
            if expected.compare(0, &bytes).is_none() {
                self.trace.line(format!(
                    "{why}: volume {name}: the failed flush was not replayed"
                ));
                continue;
            }
            if maybe.bytes.len() == bytes.len() && maybe.compare(0, &bytes).is_none() {
                self.trace.line(format!(
                    "{why}: volume {name}: the failed flush was replayed"
                ));
                model.volumes.insert(name, maybe);
                continue;
            }
            let m = expected.compare(0, &bytes).expect("differs from the model");
            return Err(format!(
                "{why}: volume {name} is neither as flushed nor as the failed flush left it: \
                 offset {} expected {:#04x} read {:#04x}",
                m.offset, m.expected, m.actual
            ));
        }
        Ok(model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::tests::started_with;

    /// A run with volumes forced on and a volume with a flushed and an unflushed write.
    fn flushed(seed: u64) -> (Sim, String) {
        let mut sim = started_with(seed, |config| config.force_volumes());
        sim.volume_create().unwrap();
        let name = sim.open.volumes.keys().next().unwrap().clone();
        for _ in 0..4 {
            sim.volume_change(&name, Change::Write { fua: false })
                .unwrap();
        }
        // The first flush of a volume commits a txg (it has no chain yet): the second one
        // goes to the log.
        sim.volume_change(&name, Change::Flush).unwrap();
        sim.volume_change(&name, Change::Write { fua: false })
            .unwrap();
        sim.volume_change(&name, Change::Flush).unwrap();
        (sim, name)
    }

    #[test]
    fn a_flushed_volume_comes_back_after_a_crash_and_unflushed_writes_go() {
        // Goal: the crash model of volumes (module doc) holds and is tested by the run:
        // flushed bytes come back by replay, a write after the last flush is gone. Method:
        // writes, two flushes, one more write, a crash; the import's checkers compare every
        // volume byte with the flushed state. Negative control: the engine's replay of volume
        // records turned off (zil::replay_one returning Ok(()) for volume records) fails it.
        for seed in [11, 12, 13] {
            let (mut sim, name) = flushed(seed);
            assert!(sim.volflushed.contains_key(&name), "seed {seed}");
            let flushed = sim.volflushed[&name].clone();
            sim.volume_change(&name, Change::Write { fua: false })
                .unwrap();
            sim.crash_and_import("crash").unwrap();
            assert_eq!(sim.open.volumes[&name], flushed, "seed {seed}");
            assert!(sim.counts.volume_flushes >= 2);
        }
    }

    #[test]
    fn the_volume_checker_catches_wrong_bytes() {
        // Goal: the volume checker can fail. Method: change the model of a volume behind the
        // engine's back; the checker must name the volume and the offset.
        let (mut sim, name) = flushed(14);
        sim.open
            .volumes
            .get_mut(&name)
            .unwrap()
            .write(4097, &[0x5a, 0xa5]);
        let broken = sim.check_all("tamper").unwrap_err();
        assert!(
            broken.contains("wrong bytes") && broken.contains("offset 409"),
            "{broken}"
        );
    }

    #[test]
    fn a_failed_flush_may_come_back_whole_or_not_at_all() {
        // Goal: the alternative a failed flush leaves is resolved at import, and a third
        // state is refused. Method: claim a failed flush with other bytes than the volume
        // can hold; the import must refuse it.
        let (mut sim, name) = flushed(15);
        let mut bogus = sim.open.volumes[&name].clone();
        bogus.write(0, &[1, 2, 3]);
        let mut flushed = sim.volflushed[&name].clone();
        flushed.write(10, &[9]);
        sim.volflushed.insert(name.clone(), flushed);
        sim.volume_maybe.insert(name.clone(), bogus);
        let broken = sim.crash_and_import("crash").unwrap_err();
        assert!(broken.contains("neither as flushed"), "{broken}");
    }
}
