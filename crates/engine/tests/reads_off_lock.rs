//! Reads whose device I/O runs without the pool lock, racing writes, txg syncs and the
//! reuse of freed space, and holding no lock while they wait.
//!
//! Goal: a volume read on devices that serve reads in parallel (files behind `QueuedDevice`,
//! where `Engine::volume_read` reads off the lock) returns, for every block, bytes that some
//! write put at that block, never another block's bytes or a mix; no read counts a checksum
//! error where there was no damage, none heals anything over live data, and a scrub
//! afterwards finds the pool clean. Method: a tiny pool (so freed space is reused within a
//! few txgs), a writer overwriting random blocks of a volume with self-describing contents
//! (block number, version) and syncing a txg every few writes, two readers reading random
//! runs of blocks meanwhile and checking every block they get; then the counters, a scrub,
//! and a final read of every block against the writer's last version of it. Twice: on plain
//! files, and on files whose reads take a millisecond each, so that one read spans many
//! txgs. (The pin that keeps the space of those blocks from reuse meanwhile is tested in
//! tarn-space `pins`; here, with the pin removed, the runs still passed: this allocator
//! did not reuse freed space within one read's time. Caching a fetched block under another
//! block's pointer fails both tests at once.)
//!
//! And directly: a read held at its device leaves the pool lock to another request
//! (`a_read_waiting_for_its_device_leaves_the_pool_lock_to_others`).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tarn_base::SeededRng;
use tarn_device::{Device, DeviceError, FileDevice, FileOpenOptions, QueuedDevice};
use tarn_engine::{
    DeviceProvider, Engine, FileProvider, ScanState, ScrubAction, VdevNode, VolumeSpec, VolumeStat,
};

const BLOCK: usize = 8192;
const BLOCKS: u64 = 8192;
const WRITES: u64 = 2000;

/// The contents of `block` at `version`: its number and version, then bytes derived from
/// both (compressible: small blocks, so the test stays quick).
fn contents(block: u64, version: u64) -> Vec<u8> {
    let mut data = vec![0u8; BLOCK];
    data[..8].copy_from_slice(&block.to_le_bytes());
    data[8..16].copy_from_slice(&version.to_le_bytes());
    for (i, byte) in data[16..].iter_mut().enumerate() {
        *byte = (block as usize * 31 + version as usize * 17 + i / 64) as u8;
    }
    data
}

/// The version `data` claims for `block`, if it is exactly that version's contents.
fn version_of(block: u64, data: &[u8]) -> Option<u64> {
    let version = u64::from_le_bytes(data[8..16].try_into().unwrap());
    (contents(block, version) == data).then_some(version)
}

fn leaves(node: &VdevNode, out: &mut Vec<(String, u64, u64, u64)>) {
    if node.children.is_empty() {
        out.push((node.name.clone(), node.read, node.write, node.cksum));
    }
    for child in &node.children {
        leaves(child, out);
    }
}

/// Holds every read of the devices behind it while armed, counting the reads it holds.
#[derive(Debug, Default)]
struct ReadGate {
    /// (armed, reads held now)
    state: Mutex<(bool, usize)>,
    changed: std::sync::Condvar,
}

impl ReadGate {
    fn pass(&self) {
        let mut state = self.state.lock().unwrap();
        if !state.0 {
            return;
        }
        state.1 += 1;
        self.changed.notify_all();
        let mut state = self.changed.wait_while(state, |s| s.0).unwrap();
        state.1 -= 1;
    }

    fn set_armed(&self, armed: bool) {
        self.state.lock().unwrap().0 = armed;
        self.changed.notify_all();
    }

    fn wait_for_a_held_read(&self) {
        let state = self.state.lock().unwrap();
        drop(self.changed.wait_while(state, |s| s.1 == 0).unwrap());
    }
}

/// What a [`HookedReads`] device does before each read.
#[derive(Clone, Debug)]
enum BeforeRead {
    /// Takes a millisecond.
    Slow,
    /// Passes the gate.
    Gate(Arc<ReadGate>),
}

/// A file whose every read does its [`BeforeRead`] first.
#[derive(Debug)]
struct HookedReads(FileDevice, BeforeRead);

impl Device for HookedReads {
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        match &self.1 {
            BeforeRead::Slow => std::thread::sleep(std::time::Duration::from_millis(1)),
            BeforeRead::Gate(gate) => gate.pass(),
        }
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.0.write_at(offset, data)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        self.0.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.0.discard(offset, len)
    }
    fn path(&self) -> &str {
        self.0.path()
    }
}

/// Files opened as [`HookedReads`] behind the usual write-behind queue (`queued`), or bare.
struct HookedProvider(BeforeRead, bool);

impl DeviceProvider for HookedProvider {
    fn open(&self, path: &str, read_only: bool) -> Result<Arc<dyn Device>, DeviceError> {
        let options = FileOpenOptions {
            direct: false,
            exclusive: !read_only,
            read_only,
        };
        let file = FileDevice::open(std::path::Path::new(path), options)?;
        let hooked = Arc::new(HookedReads(file, self.0.clone()));
        if !self.1 {
            return Ok(hooked);
        }
        Ok(Arc::new(QueuedDevice::new(hooked)?))
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, DeviceError> {
        tarn_device::list_device_paths(std::path::Path::new(dir))
    }
}

/// Goal: a read waiting for its device does not hold the pool lock (crate docs, "Reads off
/// the lock"): another request takes the lock and finishes meanwhile. Method: a volume of
/// 1,024 blocks written and synced, the smallest cache (its first blocks leave it); every
/// device read held at a gate; one thread reads block 3 (only its data block is missing)
/// and waits at the gate; another thread asks for the volume's statistics, which take the
/// pool lock, and must finish within 10 s while the read still waits. Negative control: the
/// same files without the queue (devices that do not read in parallel, so reads happen
/// under the lock) fail it.
#[test]
fn a_read_waiting_for_its_device_leaves_the_pool_lock_to_others() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(ReadGate::default());
    let engine = file_engine(
        dir.path(),
        HookedProvider(BeforeRead::Gate(Arc::clone(&gate)), true),
    );
    engine.set_cache_limit(0);
    let spec = VolumeSpec {
        size: (1024 * BLOCK as u64).to_string(),
        block_size: Some("8K".into()),
        sparse: false,
    };
    let none: &[(String, String)] = &[];
    engine
        .create_volume("tank/v", &spec, none, false, "create")
        .unwrap();
    let v = engine.volume_stat("tank/v").unwrap();
    for block in 0..1024 {
        let offset = block * BLOCK as u64;
        (engine.volume_write(&v.pool, v.dataset, offset, &contents(block, 0), false)).unwrap();
    }
    engine.sync_pool("tank").unwrap();
    gate.set_armed(true);
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut data = vec![0u8; BLOCK];
            engine
                .volume_read(&v.pool, v.dataset, 3 * BLOCK as u64, &mut data)
                .map(|()| data)
        });
        gate.wait_for_a_held_read();
        let (done, finished) = std::sync::mpsc::channel();
        let engine = &engine;
        scope.spawn(move || done.send(engine.volume_stat("tank/v").is_ok()).unwrap());
        let other = finished.recv_timeout(std::time::Duration::from_secs(10));
        gate.set_armed(false);
        assert_eq!(
            other,
            Ok(true),
            "another request waited for the device read"
        );
        let data = reader.join().unwrap().unwrap();
        assert_eq!(version_of(3, &data), Some(0));
    });
}

/// An engine with `tank` on a raidz1 of four files of 64 MiB in `dir`, opened by `provider`.
fn file_engine<P: DeviceProvider + 'static>(dir: &std::path::Path, provider: P) -> Engine {
    let host = common::Host {
        seed: 3,
        ..common::PLAIN_NOV_22_2026
    };
    host.file_tank(&Arc::new(provider), dir, 64 << 20)
}

#[test]
fn reads_off_the_lock_see_only_written_blocks_while_space_is_reused() {
    let dir = tempfile::tempdir().unwrap();
    race(&file_engine(dir.path(), FileProvider { direct: false }));
}

#[test]
fn slow_reads_off_the_lock_span_many_txgs_and_still_see_only_written_blocks() {
    let dir = tempfile::tempdir().unwrap();
    race(&file_engine(
        dir.path(),
        HookedProvider(BeforeRead::Slow, true),
    ));
}

/// The writer, the two readers and the checks of the module docs.
fn race(engine: &Engine) {
    // The smallest cache (16 MiB), a quarter of the volume: most reads go to the devices.
    engine.set_cache_limit(0);
    let spec = VolumeSpec {
        size: (BLOCKS * BLOCK as u64).to_string(),
        block_size: Some("8K".into()),
        sparse: false,
    };
    let none: &[(String, String)] = &[];
    engine
        .create_volume("tank/v", &spec, none, false, "create")
        .unwrap();
    let v = engine.volume_stat("tank/v").unwrap();
    for block in 0..BLOCKS {
        let offset = block * BLOCK as u64;
        engine
            .volume_write(&v.pool, v.dataset, offset, &contents(block, 0), false)
            .unwrap();
    }
    engine.sync_pool("tank").unwrap();
    let latest = Mutex::new(vec![0u64; BLOCKS as usize]);
    let done = AtomicBool::new(false);
    let checked = AtomicU64::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            write_and_sync(engine, &v, &latest);
            done.store(true, Ordering::SeqCst);
        });
        for seed in [21, 22] {
            let (v, done, checked) = (&v, &done, &checked);
            scope.spawn(move || read_and_check(engine, v, seed, done, checked));
        }
    });
    assert!(checked.load(Ordering::Relaxed) > 100, "the readers ran");
    check_clean(engine, &v, &latest.into_inner().unwrap());
}

/// Overwrites random blocks with their next version, a txg every 40 writes.
fn write_and_sync(engine: &Engine, v: &VolumeStat, latest: &Mutex<Vec<u64>>) {
    let mut rng = SeededRng::new(11);
    for write in 1..=WRITES {
        let block = rng.below(BLOCKS);
        let offset = block * BLOCK as u64;
        engine
            .volume_write(&v.pool, v.dataset, offset, &contents(block, write), false)
            .unwrap();
        latest.lock().unwrap()[block as usize] = write;
        if write % 40 == 0 {
            engine.sync_pool("tank").unwrap();
        }
    }
}

/// Reads random runs of blocks until `done`; every block must be one its writes put there.
fn read_and_check(engine: &Engine, v: &VolumeStat, seed: u64, done: &AtomicBool, n: &AtomicU64) {
    let mut rng = SeededRng::new(seed);
    while !done.load(Ordering::SeqCst) {
        let first = rng.below(BLOCKS - 8);
        let count = 1 + rng.below(8);
        let mut buf = vec![0u8; count as usize * BLOCK];
        engine
            .volume_read(&v.pool, v.dataset, first * BLOCK as u64, &mut buf)
            .unwrap();
        for (i, data) in buf.chunks(BLOCK).enumerate() {
            let block = first + i as u64;
            assert!(
                version_of(block, data).is_some(),
                "block {block} read back bytes no write put there"
            );
        }
        n.fetch_add(count, Ordering::Relaxed);
    }
}

/// No error counted anywhere, a clean scrub, and every block at its last version.
fn check_clean(engine: &Engine, v: &VolumeStat, latest: &[u64]) {
    let mut counters = Vec::new();
    leaves(&engine.status("tank").unwrap().config, &mut counters);
    for (leaf, read, write, cksum) in &counters {
        assert_eq!((*read, *write, *cksum), (0, 0, 0), "{leaf}: errors counted");
    }
    engine.sync_pool("tank").unwrap();
    engine
        .scrub(&["tank".into()], ScrubAction::Start, "pool scrub tank")
        .unwrap();
    let progress = loop {
        let progress = engine.scrub_step("tank", 4 << 20).unwrap().unwrap();
        if progress.state != ScanState::Scanning {
            break progress;
        }
    };
    let found = (progress.repaired, progress.errors);
    assert_eq!(found, (0, 0), "scrub found damage");
    for block in 0..BLOCKS {
        let mut data = vec![0u8; BLOCK];
        engine
            .volume_read(&v.pool, v.dataset, block * BLOCK as u64, &mut data)
            .unwrap();
        assert_eq!(
            version_of(block, &data),
            Some(latest[block as usize]),
            "block {block}: the last write is what reads back"
        );
    }
}
