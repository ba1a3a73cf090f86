//! Scrub, offline, online and clear on simulated devices.
//!
//! Goal: a scrub finds and repairs every silently corrupt copy or column within the
//! redundancy budget (counting checksum errors on exactly the bad devices), reports what is
//! beyond it in the error log without ever returning wrong data, survives pause, export and
//! import, and does not mistake blocks freed by concurrent writes for corruption. Offline is
//! refused when it would leave a vdev without redundancy; online starts a scrub that repairs
//! what the device missed.
//! Method: pools of a few 128 MiB `SimDevice`s; corruption is injected with `SimDevice::rot`,
//! either over a whole device's data area or on exact raidz columns found by walking the
//! pool's blocks from a separate read-only import.

// Helpers outside `#[test]` functions fail the test on any error, exactly like the tests.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{
    Host, PLAIN_NOV_22_2026, exported_tank, finish_scan, images, import_tank, scrub_tank,
    sim_devices,
};
use tarn_base::{ObjectId, SeededRng};
use tarn_device::SimDevice;
use tarn_engine::{
    CreateSpec, Engine, EngineError, ImportOptions, ScanFunction, ScanProgress, ScanState,
    ScrubAction, SimProvider, TopLayout,
};
use tarn_format::BlockPtr;
use tarn_format::label::data_area;
use tarn_objects::{BlockContext, visit_object_set};
use tarn_space::TXG_DEFER;
use tarn_vdev::RaidzMap;

const DEVICE_SIZE: u64 = 128 << 20;
const ASHIFT: u8 = 12;
const HOST: Host = PLAIN_NOV_22_2026;

struct Rig {
    provider: Arc<SimProvider>,
    engine: Engine,
    names: Vec<String>,
}

fn rig(layout: TopLayout, count: usize) -> Rig {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..count, DEVICE_SIZE);
    let spec = CreateSpec {
        ashift: ASHIFT,
        ..CreateSpec::one_top("tank", layout, names.clone())
    };
    let engine = HOST.create_tank(&provider, &spec, &[]);
    Rig {
        provider,
        engine,
        names,
    }
}

impl Rig {
    /// Writes `len` random bytes into a new object and commits them.
    fn write_object(&self, seed: u64, len: usize) -> (ObjectId, Vec<u8>) {
        common::write_object(&self.engine, 64 << 10, seed, len)
    }

    fn read_object(&self, object: ObjectId, len: usize) -> Result<Vec<u8>, EngineError> {
        let mut buf = vec![0u8; len];
        self.engine.object_read("tank", object, 0, &mut buf)?;
        Ok(buf)
    }

    fn device(&self, index: usize) -> Arc<SimDevice> {
        self.provider.get(&self.names[index]).unwrap()
    }

    /// Bit rot in every sector of device `index`'s data area.
    fn rot_device(&self, index: usize) {
        let (start, end) = data_area(DEVICE_SIZE).unwrap();
        self.device(index).rot(start, end - start).unwrap();
    }

    /// Runs the scrub to its end in small batches; returns the final record.
    fn finish_scrub(&self) -> ScanProgress {
        finish_scan(&self.engine, 256 << 10)
    }

    fn scrub(&self) -> ScanProgress {
        scrub_tank(&self.engine, 256 << 10)
    }

    /// CKSUM counter of every leaf, by device index.
    fn cksums(&self) -> Vec<u64> {
        let status = self.engine.status("tank").unwrap();
        let leaves = &status.config.children[0].children;
        self.names
            .iter()
            .map(|n| leaves.iter().find(|l| &l.name == n).unwrap().cksum)
            .collect()
    }

    fn leaf_state(&self, index: usize) -> String {
        let status = self.engine.status("tank").unwrap();
        let leaves = &status.config.children[0].children;
        leaves
            .iter()
            .find(|l| l.name == self.names[index])
            .unwrap()
            .state
            .clone()
    }

    fn export(&self) {
        self.engine.export_pool("tank", false).unwrap();
    }

    fn import(&mut self) {
        self.engine = HOST.engine(&self.provider);
        import_tank(&self.engine, &ImportOptions::default()).unwrap();
    }

    /// Every block of the exported pool: (in the root dataset?, block pointer, context).
    fn live_blocks(&self) -> Vec<(bool, BlockPtr, BlockContext)> {
        let (pool, data_root) = exported_tank(&self.provider, &HOST);
        let reader = pool.reader();
        let mos_root = pool.root().unwrap();
        let mut blocks = Vec::new();
        visit_object_set(&reader, &mos_root, &mut |bp, c| {
            blocks.push((false, *bp, c))
        })
        .unwrap();
        visit_object_set(&reader, &data_root, &mut |bp, c| {
            blocks.push((true, *bp, c))
        })
        .unwrap();
        blocks
    }

    /// Rots columns `columns` (0 = P) of every copy of `bp` on a raidz of `parity`; returns
    /// the devices rotted.
    fn rot_columns(&self, bp: &BlockPtr, parity: usize, columns: &[usize]) -> Vec<usize> {
        let padded = u64::from(bp.psize).next_multiple_of(1 << ASHIFT);
        let mut rotted = Vec::new();
        for dva in bp.copies() {
            let map = RaidzMap::new(self.names.len(), parity, ASHIFT, dva.offset, padded);
            for &c in columns.iter().filter(|&&c| c < map.columns.len()) {
                let child = map.columns[c].child;
                self.device(child)
                    .rot(map.leaf_offset(c), map.column_bytes(c) as u64)
                    .unwrap();
                rotted.push(child);
            }
        }
        rotted
    }
}

fn assert_cksums_only_on(cksums: &[u64], bad: &[usize]) {
    for (index, &count) in cksums.iter().enumerate() {
        if bad.contains(&index) {
            assert!(
                count > 0,
                "device {index} was rotted but has no CKSUM errors: {cksums:?}"
            );
        } else {
            assert_eq!(
                count, 0,
                "device {index} is healthy but has CKSUM errors: {cksums:?}"
            );
        }
    }
}

#[test]
fn raidz2_rotted_device_is_repaired() {
    let mut rig = rig(TopLayout::Raidz(2), 6);
    let (object, data) = rig.write_object(1, 3 << 20);
    rig.export();
    rig.rot_device(2);
    rig.import();
    let first = rig.scrub();
    assert_eq!(first.state, ScanState::Finished);
    assert_eq!(first.errors, 0);
    assert!(first.repaired > 0, "{first:?}");
    assert_eq!(first.issued, first.to_examine);
    assert_cksums_only_on(&rig.cksums(), &[2]);
    let status = rig.engine.status("tank").unwrap();
    let scan = status.scan.unwrap();
    assert!(
        scan.starts_with("scrub repaired ")
            && scan.ends_with(" with 0 errors on Sun Nov 22 14:30:00 2026"),
        "{scan}"
    );
    assert!(status.errors.is_empty());
    let second = rig.scrub();
    assert_eq!((second.repaired, second.errors), (0, 0), "{second:?}");
    assert_eq!(rig.read_object(object, data.len()).unwrap(), data);
}

/// Goal: a scan whose queue holds fewer blocks than the pool (rounds, each listing the next
/// blocks after the bookmark) issues, repairs and counts exactly what one queue does, and
/// its queue's memory stays at its limit. Method: the same pool and damage twice, one scrub
/// with the default queue, one with a queue of 5 blocks, stepped in small batches.
#[test]
fn a_scrub_in_rounds_repairs_what_one_queue_does() {
    let run = |limit: Option<usize>| {
        let mut rig = rig(TopLayout::Raidz(2), 6);
        let objects: Vec<_> = (0..4).map(|i| rig.write_object(10 + i, 1 << 20)).collect();
        rig.export();
        rig.rot_device(2);
        rig.import();
        if let Some(limit) = limit {
            tarn_engine::check::set_scan_queue_limit(&rig.engine, "tank", limit).unwrap();
        }
        rig.engine
            .scrub(&["tank".to_string()], ScrubAction::Start, "pool scrub tank")
            .unwrap();
        let mut queue_max = 0;
        let last = loop {
            let progress = rig.engine.scrub_step("tank", 64 << 10).unwrap().unwrap();
            queue_max = queue_max.max(rig.engine.memory_use().scan_queue);
            if progress.state != ScanState::Scanning {
                break progress;
            }
        };
        for (object, data) in &objects {
            assert_eq!(&rig.read_object(*object, data.len()).unwrap(), data);
        }
        (last, rig.cksums(), queue_max)
    };
    let (whole, whole_cksums, whole_queue) = run(None);
    let (rounds, rounds_cksums, rounds_queue) = run(Some(5));
    assert_eq!(whole.state, ScanState::Finished);
    assert!(whole.repaired > 0 && whole.errors == 0, "{whole:?}");
    assert_eq!(
        (rounds.state, rounds.issued, rounds.repaired, rounds.errors),
        (whole.state, whole.issued, whole.repaired, whole.errors)
    );
    assert_eq!(rounds_cksums, whole_cksums);
    assert_cksums_only_on(&rounds_cksums, &[2]);
    assert!(
        rounds_queue <= 4096,
        "a queue of 5 blocks took {rounds_queue} bytes"
    );
    assert!(
        whole_queue > 4 * rounds_queue,
        "{whole_queue} vs {rounds_queue}"
    );
}

/// Goal: `status` reports the running pass (`status -j`'s `pass_start`, `bytes_per_scan`,
/// `issued_bytes_per_scan`). Method: a scrub stepped part way (its pass counts from 0), paused
/// (no pass), resumed and stepped (the new pass counts from the bytes issued before the
/// pause), then run to the end (no pass).
#[test]
fn status_reports_the_running_pass() {
    let rig = rig(TopLayout::Raidz(2), 6);
    for i in 0..4 {
        rig.write_object(10 + i, 1 << 20);
    }
    let scrub = |action| {
        rig.engine
            .scrub(&["tank".to_string()], action, "pool scrub tank")
            .unwrap()
    };
    let pass = || rig.engine.status("tank").unwrap().scan_pass;
    scrub(ScrubAction::Start);
    let first = rig.engine.scrub_step("tank", 64 << 10).unwrap().unwrap();
    assert_eq!(first.state, ScanState::Scanning);
    assert!(first.issued > 0);
    assert_eq!(pass().map(|(_, before)| before), Some(0));
    scrub(ScrubAction::Pause);
    assert_eq!(pass(), None, "a paused scrub has no running pass");
    scrub(ScrubAction::Start);
    let resumed = rig.engine.scrub_step("tank", 64 << 10).unwrap().unwrap();
    assert!(resumed.issued > first.issued, "{resumed:?}");
    let (start, before) = pass().expect("a resumed scrub runs a pass");
    assert_eq!(
        before, first.issued,
        "the pass counts from the bytes issued before it"
    );
    assert!(start >= resumed.start_time);
    while rig
        .engine
        .scrub_step("tank", 1 << 30)
        .unwrap()
        .unwrap()
        .state
        == ScanState::Scanning
    {}
    assert_eq!(pass(), None);
}

#[test]
fn raidz2_rotted_parity_columns_are_repaired() {
    let mut rig = rig(TopLayout::Raidz(2), 6);
    let (object, data) = rig.write_object(2, 2 << 20);
    rig.export();
    let mut rotted = Vec::new();
    for (_, bp, _) in rig.live_blocks() {
        rotted.extend(rig.rot_columns(&bp, 2, &[0, 1]));
    }
    rotted.sort_unstable();
    rotted.dedup();
    rig.import();
    let first = rig.scrub();
    assert_eq!(first.errors, 0);
    assert!(first.repaired > 0);
    assert_cksums_only_on(&rig.cksums(), &rotted);
    assert_eq!(rig.scrub().repaired, 0);
    assert_eq!(rig.read_object(object, data.len()).unwrap(), data);
}

#[test]
fn mirror_rotted_side_is_repaired_and_clear_resets_counters() {
    let mut rig = rig(TopLayout::Mirror, 2);
    let (object, data) = rig.write_object(3, 1 << 20);
    rig.export();
    rig.rot_device(1);
    rig.import();
    let first = rig.scrub();
    assert_eq!(first.errors, 0);
    assert!(first.repaired > 0);
    assert_cksums_only_on(&rig.cksums(), &[1]);
    assert_eq!(rig.scrub().repaired, 0);
    assert_eq!(rig.read_object(object, data.len()).unwrap(), data);
    rig.engine
        .clear("tank", Some("d1"), "pool clear tank d1")
        .unwrap();
    assert_eq!(rig.cksums(), vec![0, 0]);
    let history = rig.engine.history("tank").unwrap();
    assert!(history.iter().any(|r| r.command == "pool clear tank d1"));
}

#[test]
fn beyond_parity_is_logged_never_returned() {
    let mut rig = rig(TopLayout::Raidz(1), 4);
    let (object, data) = rig.write_object(4, 512 << 10);
    rig.export();
    for (in_data, bp, context) in rig.live_blocks() {
        if in_data && context.object == object && context.level == 0 {
            rig.rot_columns(&bp, 1, &[0, 1]);
        }
    }
    rig.import();
    let progress = rig.scrub();
    assert_eq!(progress.state, ScanState::Finished);
    assert!(progress.errors > 0);
    let status = rig.engine.status("tank").unwrap();
    assert_eq!(status.errors, vec![format!("tank:<object {}>", object.0)]);
    assert_eq!(status.see.as_deref(), Some("TARN-0005"));
    assert!(
        status
            .scan
            .unwrap()
            .contains(&format!("with {} errors", progress.errors))
    );
    assert!(
        rig.read_object(object, data.len()).is_err(),
        "lost data must not be returned"
    );
    // The error log is persistent.
    rig.export();
    rig.import();
    assert_eq!(rig.engine.status("tank").unwrap().errors.len(), 1);
}

#[test]
fn paused_and_interrupted_scrubs_resume_after_import() {
    let mut rig = rig(TopLayout::Raidz(1), 3);
    let (object, data) = rig.write_object(5, 4 << 20);
    let tank = ["tank".to_string()];
    rig.engine
        .scrub(&tank, ScrubAction::Start, "pool scrub tank")
        .unwrap();
    for _ in 0..3 {
        rig.engine.scrub_step("tank", 256 << 10).unwrap();
    }
    rig.engine
        .scrub(&tank, ScrubAction::Pause, "pool scrub -p tank")
        .unwrap();
    let paused = rig.engine.scan_progress("tank").unwrap().unwrap();
    assert_eq!(paused.state, ScanState::Paused);
    assert!(paused.bookmark.is_some() && paused.issued > 0);
    let scan = rig.engine.status("tank").unwrap().scan.unwrap();
    assert!(scan.starts_with("scrub paused since "), "{scan}");
    rig.export();
    rig.import();
    assert_eq!(rig.engine.scan_progress("tank").unwrap(), Some(paused));
    assert!(rig.engine.scanning_pools().is_empty());
    rig.engine
        .scrub(&tank, ScrubAction::Start, "pool scrub tank")
        .unwrap();
    rig.engine.scrub_step("tank", 256 << 10).unwrap();
    let running = rig.engine.scan_progress("tank").unwrap().unwrap();
    assert!(running.bookmark > paused.bookmark);
    assert!(
        running.issued > paused.issued,
        "the resumed pass continues from the bookmark"
    );
    // Interrupted while scanning: the import finds it running and it continues.
    rig.export();
    rig.import();
    assert_eq!(rig.engine.scanning_pools(), vec!["tank".to_string()]);
    let resumed = rig.engine.scan_progress("tank").unwrap().unwrap();
    assert_eq!(resumed.bookmark, running.bookmark);
    let done = rig.finish_scrub();
    assert_eq!((done.state, done.errors), (ScanState::Finished, 0));
    assert_eq!(done.issued, done.to_examine);
    assert_eq!(rig.read_object(object, data.len()).unwrap(), data);
}

#[test]
fn scrub_concurrent_with_writes_finds_no_errors() {
    // Overwrites between batches free blocks the scrub listed. Those frees must be held (not
    // reusable) until the scrub ends: allocated space only grows while it runs, and shrinks
    // again a few txgs after it finished.
    let rig = rig(TopLayout::Raidz(2), 5);
    let (object, mut data) = rig.write_object(6, 2 << 20);
    let allocated = || rig.engine.list(&["tank".to_string()]).unwrap()[0].allocated;
    rig.engine
        .scrub(&["tank".to_string()], ScrubAction::Start, "pool scrub tank")
        .unwrap();
    let mut rng = SeededRng::new(7);
    let mut steps = 0;
    let start = allocated();
    let mut before = 0;
    loop {
        let progress = rig.engine.scrub_step("tank", 64 << 10).unwrap().unwrap();
        if progress.state != ScanState::Scanning {
            assert_eq!(progress.errors, 0, "{progress:?}");
            assert_eq!(progress.repaired, 0, "{progress:?}");
            break;
        }
        let now = allocated();
        assert!(
            now >= before,
            "a free was released during the scrub: {now} < {before}"
        );
        before = now;
        let offset = rng.below(data.len() as u64 - (128 << 10)) as usize;
        rng.fill(&mut data[offset..offset + (128 << 10)]);
        let slice = &data[offset..offset + (128 << 10)];
        rig.engine
            .object_write("tank", object, offset as u64, slice)
            .unwrap();
        rig.engine.sync_pool("tank").unwrap();
        steps += 1;
    }
    assert!(steps > 4, "the scrub must take several batches ({steps})");
    let overwritten = (steps as u64 - TXG_DEFER) * (128 << 10);
    assert!(
        before >= start + overwritten,
        "frees were reused: {before} < {start} + {overwritten}"
    );
    for _ in 0..3 {
        rig.engine
            .object_write("tank", object, 0, &data[..4096])
            .unwrap();
        rig.engine.sync_pool("tank").unwrap();
    }
    assert!(
        allocated() < before,
        "held frees are released after the scrub"
    );
    assert_cksums_only_on(&rig.cksums(), &[]);
    assert_eq!(rig.read_object(object, data.len()).unwrap(), data);
    assert_eq!(rig.scrub().errors, 0);
}

#[test]
fn scrub_refusals_change_nothing() {
    let rig = rig(TopLayout::Mirror, 2);
    let tank = ["tank".to_string()];
    let pause = rig
        .engine
        .scrub(&tank, ScrubAction::Pause, "pool scrub -p tank")
        .unwrap_err();
    assert!(
        matches!(pause, (ref n, EngineError::NoActiveScan) if n == "tank"),
        "{pause:?}"
    );
    let both = ["tank".to_string(), "nope".to_string()];
    let unknown = rig
        .engine
        .scrub(&both, ScrubAction::Start, "pool scrub tank nope")
        .unwrap_err();
    assert!(
        matches!(unknown, (ref n, EngineError::NoSuchPool) if n == "nope"),
        "{unknown:?}"
    );
    assert_eq!(
        rig.engine.scan_progress("tank").unwrap(),
        None,
        "the first pool was not started"
    );
    rig.engine
        .scrub(&tank, ScrubAction::Start, "pool scrub tank")
        .unwrap();
    let before = images(&rig.provider);
    let again = rig
        .engine
        .scrub(&tank, ScrubAction::Start, "pool scrub tank")
        .unwrap_err();
    assert!(matches!(again.1, EngineError::ScanInProgress));
    assert!(again.1.to_string().starts_with("currently scrubbing"));
    assert!(
        images(&rig.provider) == before,
        "a refused scrub must not write"
    );
    rig.engine
        .scrub(&tank, ScrubAction::Cancel, "pool scrub -s tank")
        .unwrap();
    let scan = rig.engine.status("tank").unwrap().scan.unwrap();
    assert_eq!(scan, "scrub canceled on Sun Nov 22 14:30:00 2026");
}

#[test]
fn offline_beyond_redundancy_is_refused_and_persists_otherwise() {
    let mut rig = rig(TopLayout::Raidz(1), 3);
    rig.engine
        .offline("tank", "/sim/d0", false, "pool offline tank /sim/d0")
        .unwrap();
    assert_eq!(rig.leaf_state(0), "OFFLINE");
    let status = rig.engine.status("tank").unwrap();
    assert_eq!(status.state, "DEGRADED");
    assert_eq!(status.see.as_deref(), Some("TARN-0006"));
    let before = images(&rig.provider);
    let refused = rig
        .engine
        .offline("tank", "d1", false, "pool offline tank d1")
        .unwrap_err();
    assert!(
        matches!(refused, EngineError::NoValidReplicas),
        "{refused:?}"
    );
    assert_eq!(refused.to_string(), "no valid replicas");
    assert!(
        images(&rig.provider) == before,
        "a refused offline must not write"
    );
    assert_eq!(rig.leaf_state(1), "ONLINE");
    let unknown = rig
        .engine
        .offline("tank", "/sim/zz", false, "x")
        .unwrap_err();
    assert!(matches!(unknown, EngineError::NoSuchDevice));
    rig.export();
    rig.import();
    assert_eq!(
        rig.leaf_state(0),
        "OFFLINE",
        "a persistent offline survives import"
    );
}

// DESCRIPTION: `online` after `offline -t` resilvers only what the leaf missed: the
// blocks born while it was away (copy-on-write never rewrites an older block in place),
// without reading the stale leaf (no checksum errors anywhere), and afterwards the leaf holds
// everything: a scrub repairs nothing, and with another leaf offline every byte still reads.
// Online right after an offline resilvers just the offline's own commit.
#[test]
fn online_resilvers_only_the_blocks_born_while_the_leaf_was_away() {
    let rig = rig(TopLayout::Raidz(1), 4);
    let (old, old_data) = rig.write_object(8, 4 << 20);
    rig.engine
        .offline("tank", "/sim/d1", true, "pool offline -t tank /sim/d1")
        .unwrap();
    assert_eq!(rig.leaf_state(1), "OFFLINE");
    let (new, new_data) = rig.write_object(9, 1 << 20);
    let outcome = rig
        .engine
        .online("tank", "/sim/d1", "pool online tank /sim/d1")
        .unwrap();
    assert!(
        outcome.resilver_from.is_some_and(|t| t.0 > 1),
        "{outcome:?}"
    );
    assert_eq!(rig.leaf_state(1), "ONLINE");
    assert_eq!(rig.engine.scanning_pools(), vec!["tank".to_string()]);
    let progress = rig.finish_scrub();
    assert_eq!(progress.function, ScanFunction::Resilver);
    assert_eq!(progress.errors, 0);
    // The new object with its parity (raidz1 of 4: 4/3 of its size) and the metadata that
    // changed; the 4 MiB written before the offline are not part of it.
    assert!(
        progress.to_examine > new_data.len() as u64
            && progress.to_examine < new_data.len() as u64 * 2,
        "{progress:?}"
    );
    assert!(
        progress.repaired > new_data.len() as u64 / 4,
        "{progress:?}"
    );
    assert_cksums_only_on(&rig.cksums(), &[]);
    assert_eq!(rig.scrub().repaired, 0, "the resilver left nothing stale");
    rig.engine
        .offline("tank", "/sim/d2", true, "pool offline -t tank /sim/d2")
        .unwrap();
    assert_eq!(rig.read_object(old, old_data.len()).unwrap(), old_data);
    assert_eq!(rig.read_object(new, new_data.len()).unwrap(), new_data);
    let again = rig
        .engine
        .online("tank", "/sim/d2", "pool online tank /sim/d2")
        .unwrap();
    // Only the offline's own commit (history, config) happened while it was away.
    assert!(again.resilver_from.is_some(), "{again:?}");
    let small = rig.finish_scrub();
    assert!(small.to_examine < 256 << 10, "{small:?}");
    assert_eq!(rig.scrub().repaired, 0);
    assert_cksums_only_on(&rig.cksums(), &[]);
    let history = rig.engine.history("tank").unwrap();
    assert!(
        history
            .iter()
            .any(|r| r.command == "pool online tank /sim/d1")
    );
}

/// Goal: `status -v` names a damaged file by its path under the dataset's mountpoint, as
/// ZFS does. Method: a file in a directory of the root dataset, its data rotted beyond
/// raidz1's parity, a scrub.
#[test]
fn damaged_files_are_named_by_path() {
    let mut rig = rig(TopLayout::Raidz(1), 4);
    let root_dataset = tarn_engine::ROOT_DATASET_ID;
    let creds = tarn_engine::posix::Creds::default();
    let mut data = vec![0u8; 256 << 10];
    tarn_base::SeededRng::new(5).fill(&mut data);
    let ino = rig
        .engine
        .fs_op(
            "tank",
            root_dataset,
            tarn_engine::FsOp::Write(data.len() as u64),
            |fs| {
                let root = fs.root()?;
                let dir = fs.mkdir(root, b"dir", 0o755, creds)?.ino;
                let kind = tarn_engine::posix::FileKind::Regular;
                let file = fs.mknod(dir, b"file", kind, 0o644, 0, creds)?.ino;
                fs.write(file, 0, &data)?;
                Ok(file)
            },
        )
        .unwrap();
    rig.engine.sync_pool("tank").unwrap();
    rig.export();
    for (in_data, bp, context) in rig.live_blocks() {
        if in_data && context.object.0 == ino && context.level == 0 {
            rig.rot_columns(&bp, 1, &[0, 1]);
        }
    }
    rig.import();
    let progress = rig.scrub();
    assert!(progress.errors > 0, "{progress:?}");
    let status = rig.engine.status("tank").unwrap();
    assert_eq!(status.errors, vec!["/tank/dir/file".to_string()]);
}

/// Goal: a lost dnode block (every copy beyond parity) names every file it held, by path,
/// found through the directories since the files' own dnodes are gone (ZFS prints `<0x0>`).
/// Method: 40 files in a directory, the dnode block of the last one rotted in every copy
/// (the root's and the directory's dnodes are in another block), a scrub, `status -v`.
#[test]
fn a_lost_dnode_block_names_every_file_it_held() {
    let mut rig = rig(TopLayout::Raidz(1), 4);
    let creds = tarn_engine::posix::Creds::default();
    let (dir, files) = rig
        .engine
        .fs_op(
            "tank",
            tarn_engine::ROOT_DATASET_ID,
            tarn_engine::FsOp::Write(0),
            |fs| {
                let root = fs.root()?;
                let dir = fs.mkdir(root, b"dir", 0o755, creds)?.ino;
                let kind = tarn_engine::posix::FileKind::Regular;
                let mut files = Vec::new();
                for i in 0..40 {
                    let name = format!("f{i}");
                    files.push((
                        fs.mknod(dir, name.as_bytes(), kind, 0o644, 0, creds)?.ino,
                        name,
                    ));
                }
                Ok(((root, dir), files))
            },
        )
        .unwrap();
    rig.engine.sync_pool("tank").unwrap();
    rig.export();
    let per_block = tarn_format::objset::DNODES_PER_BLOCK;
    let lost = files.last().unwrap().0 / per_block;
    assert!(
        dir.0 / per_block != lost && dir.1 / per_block != lost,
        "{dir:?}"
    );
    for (in_data, bp, context) in rig.live_blocks() {
        if in_data && context.object.0 == 0 && context.level == 0 && context.blkid == lost {
            rig.rot_columns(&bp, 1, &[0, 1]);
        }
    }
    rig.import();
    let progress = rig.scrub();
    assert!(progress.errors > 0, "{progress:?}");
    let mut expected: Vec<String> = files
        .iter()
        .filter(|(ino, _)| ino / per_block == lost)
        .map(|(_, name)| format!("/tank/dir/{name}"))
        .collect();
    expected.sort();
    assert!(expected.len() > 1, "{expected:?}");
    assert_eq!(rig.engine.status("tank").unwrap().errors, expected);
}

/// Goal: a damaged block of a volume is named by the byte range of the block device it held
/// (`tank/v:<bytes A-B>`), not `<object 1>`, so the admin knows what to restore; other blocks
/// read back. Method: a 64 KiB-block volume written in full, one data block rotted beyond
/// raidz1's parity, a scrub, `status -v`.
#[test]
fn a_damaged_volume_block_is_named_by_its_byte_range() {
    let mut rig = rig(TopLayout::Raidz(1), 4);
    let spec = tarn_engine::VolumeSpec {
        size: "1M".into(),
        block_size: Some("64K".into()),
        sparse: true,
    };
    let none: &[(String, String)] = &[];
    rig.engine
        .create_volume("tank/v", &spec, none, false, "create")
        .unwrap();
    let (_, volume) = rig.engine.find_dataset("tank/v").unwrap();
    let mut data = vec![0u8; 1 << 20];
    tarn_base::SeededRng::new(9).fill(&mut data);
    rig.engine
        .volume_write("tank", volume, 0, &data, false)
        .unwrap();
    rig.engine.sync_pool("tank").unwrap();
    // The volume's data blocks are the pool's only 64 KiB data blocks; rot the first.
    let blocks = tarn_engine::check::reachable_blocks(&rig.engine, "tank").unwrap();
    let victim = blocks
        .into_iter()
        .find(|bp| bp.block_type == tarn_format::BlockType::Data && bp.lsize == 64 << 10)
        .expect("a volume data block");
    rig.export();
    rig.rot_columns(&victim, 1, &[0, 1]);
    rig.import();
    assert!(rig.scrub().errors > 0);
    let errors = rig.engine.status("tank").unwrap().errors;
    assert_eq!(errors.len(), 1, "{errors:?}");
    let range = errors[0]
        .strip_prefix("tank/v:<bytes ")
        .and_then(|r| r.strip_suffix('>'))
        .and_then(|r| r.split_once('-'))
        .unwrap_or_else(|| panic!("{errors:?}"));
    let (start, end): (usize, usize) = (range.0.parse().unwrap(), range.1.parse().unwrap());
    assert_eq!(
        (start % (64 << 10), end - start + 1),
        (0, 64 << 10),
        "{errors:?}"
    );
    for block in (0..data.len()).step_by(64 << 10) {
        let mut buf = vec![0u8; 64 << 10];
        let read = rig
            .engine
            .volume_read("tank", volume, block as u64, &mut buf);
        match block == start {
            true => assert!(read.is_err(), "the named range is the damaged one"),
            false => assert!(read.is_ok() && buf == data[block..block + buf.len()]),
        }
    }
}

// DESCRIPTION: the window of `online` survives export and import: a leaf offlined for good,
// then the pool written, exported and imported, is resilvered from the newest txg in its own
// labels, not from the start.
#[test]
fn online_after_import_resilvers_from_the_leafs_own_labels() {
    let mut rig = rig(TopLayout::Raidz(1), 4);
    let (old, old_data) = rig.write_object(10, 4 << 20);
    rig.engine
        .offline("tank", "/sim/d3", false, "pool offline tank /sim/d3")
        .unwrap();
    let (new, new_data) = rig.write_object(11, 1 << 20);
    rig.export();
    rig.import();
    assert_eq!(rig.leaf_state(3), "OFFLINE");
    let outcome = rig
        .engine
        .online("tank", "/sim/d3", "pool online tank /sim/d3")
        .unwrap();
    assert!(
        outcome.resilver_from.is_some_and(|t| t.0 > 1),
        "{outcome:?}"
    );
    let progress = rig.finish_scrub();
    assert!(
        progress.to_examine < new_data.len() as u64 * 2,
        "only what was born after the offline: {progress:?}"
    );
    assert_eq!(rig.scrub().repaired, 0);
    assert_cksums_only_on(&rig.cksums(), &[]);
    rig.engine
        .offline("tank", "/sim/d0", true, "pool offline -t tank /sim/d0")
        .unwrap();
    assert_eq!(rig.read_object(old, old_data.len()).unwrap(), old_data);
    assert_eq!(rig.read_object(new, new_data.len()).unwrap(), new_data);
}

// DESCRIPTION: a device that vanished while the pool was written and is back at the next
// import is caught up by itself: the import starts a resilver of only the blocks born while
// it was gone (not read meanwhile: no checksum errors), after which it holds everything.
#[test]
fn a_device_back_at_import_is_resilvered_from_what_it_missed() {
    let mut rig = rig(TopLayout::Raidz(1), 4);
    let (old, old_data) = rig.write_object(12, 4 << 20);
    rig.device(2).set_gone(true);
    let (new, new_data) = rig.write_object(13, 1 << 20);
    rig.engine.sync_pool("tank").unwrap();
    rig.export();
    rig.device(2).set_gone(false);
    rig.import();
    assert_eq!(rig.engine.scanning_pools(), vec!["tank".to_string()]);
    let progress = rig.finish_scrub();
    assert_eq!(progress.function, ScanFunction::Resilver);
    assert!(progress.min_birth.0 > 1, "{progress:?}");
    assert!(
        progress.to_examine < new_data.len() as u64 * 2 && progress.repaired > 0,
        "only what was born while it was gone: {progress:?}"
    );
    assert_eq!(rig.leaf_state(2), "ONLINE");
    assert_cksums_only_on(&rig.cksums(), &[]);
    assert_eq!(rig.scrub().repaired, 0);
    rig.engine
        .offline("tank", "/sim/d1", true, "pool offline -t tank /sim/d1")
        .unwrap();
    assert_eq!(rig.read_object(old, old_data.len()).unwrap(), old_data);
    assert_eq!(rig.read_object(new, new_data.len()).unwrap(), new_data);
}
