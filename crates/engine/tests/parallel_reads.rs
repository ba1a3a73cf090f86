//! Reads, scrubs and resilvers on devices that serve reads in parallel.
//!
//! Goal: the parallel path (file devices behind `QueuedDevice`, whose I/O threads serve
//! submitted reads; scrub batches and file reads on several threads; read-ahead) gives
//! exactly what the one-block-at-a-time path gives on simulated devices: the same bytes,
//! the same scan counters (issued, repaired, errors), the same per-device error counts and
//! the same repaired device contents. Method: the same pool (same engine seed, clock and
//! operations, so the same layout) on simulated devices and on files; the same bytes of
//! two devices' data areas corrupted in both; scrub, replace, and read back in both; every
//! result compared between the two.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use tarn_base::{ManualClock, ObjectId, SeededRng};
use tarn_device::{Device, FaultPlan, SimDevice};
use tarn_engine::{
    CreateOptions, CreateSpec, DeviceProvider, Engine, FileProvider, HostIdentity, ScanProgress,
    ScanState, ScrubAction, SimProvider, TopLayout, VdevNode,
};

const DEVICE_SIZE: u64 = 96 << 20;
const DEVICES: [&str; 6] = ["d0", "d1", "d2", "d3", "d4", "d5"];
/// Corrupted ranges (device index, byte offset, length): inside the data area (4 MiB on).
const DAMAGE: [(usize, u64, u64); 2] = [(1, 4 << 20, 256 << 10), (4, (4 << 20) + 65536, 96 << 10)];

/// One of the two worlds: an engine over files or over simulated devices.
struct World {
    engine: Engine,
    paths: Vec<String>,
    corrupt: Box<dyn Fn(usize, u64, u64)>,
    _dir: tempfile::TempDir,
}

fn engine(provider: Arc<dyn DeviceProvider>) -> Engine {
    let identity = HostIdentity {
        hostid: 7,
        hostname: "host".into(),
    };
    let clock = Arc::new(ManualClock::new(1_795_357_800));
    Engine::new(provider, identity, clock, 9)
}

fn xor_range(device: &dyn Device, offset: u64, len: u64) {
    let mut buf = vec![0u8; len as usize];
    device.read_at(offset, &mut buf).unwrap();
    buf.iter_mut().for_each(|b| *b ^= 0xa5);
    device.write_at(offset, &buf).unwrap();
    device.flush().unwrap();
}

fn file_world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<String> = DEVICES
        .iter()
        .chain(&["new"])
        .map(|name| dir.path().join(name).display().to_string())
        .collect();
    for path in &paths {
        std::fs::File::create(path)
            .unwrap()
            .set_len(DEVICE_SIZE)
            .unwrap();
    }
    let files = paths.clone();
    let corrupt = Box::new(move |index: usize, offset: u64, len: u64| {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&files[index])
            .unwrap();
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, offset).unwrap();
        buf.iter_mut().for_each(|b| *b ^= 0xa5);
        file.write_all_at(&buf, offset).unwrap();
        file.sync_all().unwrap();
    });
    World {
        engine: engine(Arc::new(FileProvider { direct: false })),
        paths,
        corrupt,
        _dir: dir,
    }
}

fn sim_world() -> World {
    let provider = Arc::new(SimProvider::new());
    let paths: Vec<String> = DEVICES
        .iter()
        .chain(&["new"])
        .map(|name| format!("/sim/{name}"))
        .collect();
    let mut sims = Vec::new();
    for path in &paths {
        let sim = SimDevice::new(path, DEVICE_SIZE, FaultPlan::default());
        provider.insert(path, Arc::clone(&sim));
        sims.push(sim);
    }
    let corrupt = Box::new(move |index: usize, offset: u64, len: u64| {
        xor_range(sims[index].as_ref(), offset, len);
    });
    World {
        engine: engine(provider),
        paths,
        corrupt,
        _dir: tempfile::tempdir().unwrap(),
    }
}

fn leaves(node: &VdevNode, out: &mut Vec<(u64, u64, u64)>) {
    if node.children.is_empty() {
        out.push((node.read, node.write, node.cksum));
    }
    for child in &node.children {
        leaves(child, out);
    }
}

fn scrub_to_end(engine: &Engine) -> ScanProgress {
    loop {
        let progress = engine.scrub_step("tank", 4 << 20).unwrap().unwrap();
        if progress.state != ScanState::Scanning {
            return progress;
        }
    }
}

/// What one world went through: its objects, scrub results, counters and reads.
#[derive(Debug, PartialEq)]
struct Outcome {
    first_scrub: (u64, u64, u64, u64),
    second_scrub: (u64, u64, u64, u64),
    counters: Vec<(u64, u64, u64)>,
    resilver: (u64, u64),
}

fn key(p: &ScanProgress) -> (u64, u64, u64, u64) {
    (p.to_examine, p.issued, p.repaired, p.errors)
}

fn run(world: &World) -> Outcome {
    let engine = &world.engine;
    let spec = CreateSpec::one_top("tank", TopLayout::Raidz(2), world.paths[..6].to_vec());
    let options = CreateOptions {
        command: "pool create tank".into(),
        ..CreateOptions::default()
    };
    engine.create_pool(&spec, &options).unwrap();
    let mut written = Vec::new();
    for seed in 1..=3u64 {
        let object = engine.object_create("tank", 128 << 10).unwrap();
        let mut data = vec![0u8; (2 << 20) + (seed as usize) * 40_960];
        SeededRng::new(seed).fill(&mut data);
        engine.object_write("tank", object, 0, &data).unwrap();
        written.push((object, data));
    }
    engine.sync_pool("tank").unwrap();
    for (index, offset, len) in DAMAGE {
        (world.corrupt)(index, offset, len);
    }
    engine
        .scrub(&["tank".into()], ScrubAction::Start, "pool scrub tank")
        .unwrap();
    let first = scrub_to_end(engine);
    engine
        .scrub(&["tank".into()], ScrubAction::Start, "pool scrub tank")
        .unwrap();
    let second = scrub_to_end(engine);
    let mut counters = Vec::new();
    leaves(&engine.status("tank").unwrap().config, &mut counters);
    check_reads(engine, &written);
    engine
        .replace(
            "tank",
            &world.paths[2],
            Some(&world.paths[6]),
            "pool replace",
        )
        .unwrap();
    let resilver = scrub_to_end(engine);
    check_reads(engine, &written);
    Outcome {
        first_scrub: key(&first),
        second_scrub: key(&second),
        counters,
        resilver: (resilver.repaired, resilver.errors),
    }
}

/// Reads every object whole, then sequentially in 128 KiB requests (read-ahead), then a
/// few 4 KiB pieces at scattered offsets; all must match what was written.
fn check_reads(engine: &Engine, written: &[(ObjectId, Vec<u8>)]) {
    for (object, data) in written {
        let mut whole = vec![0u8; data.len()];
        engine.object_read("tank", *object, 0, &mut whole).unwrap();
        assert!(whole == *data, "whole read of {object:?}");
        for start in (0..data.len()).step_by(128 << 10) {
            let end = (start + (128 << 10)).min(data.len());
            let mut piece = vec![0u8; end - start];
            engine
                .object_read("tank", *object, start as u64, &mut piece)
                .unwrap();
            assert!(piece == data[start..end], "sequential read at {start}");
        }
        for start in [4096usize, 700_000, 1_500_000, data.len() - 4096] {
            let mut piece = vec![0u8; 4096];
            engine
                .object_read("tank", *object, start as u64, &mut piece)
                .unwrap();
            assert!(piece == data[start..start + 4096], "4K read at {start}");
        }
    }
}

#[test]
fn parallel_reads_scrub_and_resilver_match_the_serial_path() {
    let files = file_world();
    let sims = sim_world();
    let parallel = run(&files);
    let serial = run(&sims);
    assert!(parallel.first_scrub.2 > 0, "the damage was repaired");
    assert_eq!(parallel.first_scrub.3, 0, "within parity: nothing lost");
    assert_eq!(parallel.second_scrub.2, 0, "repaired for good");
    assert!(parallel.resilver.0 > 0, "the replacement was resilvered");
    assert_eq!(
        parallel, serial,
        "file devices (parallel) vs simulated (serial)"
    );
}
