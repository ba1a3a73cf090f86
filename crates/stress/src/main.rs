//! `tarn-stress`: the process the kill loop (`scripts/kill-loop`) starts and kills.
//!
//! It runs the real engine on real files (like ztest under zloop): it imports the pool `stress`
//! from `--dir` (creating it on first use), verifies every object against what it had
//! committed before, then writes rounds of data and commits them until it is killed. The
//! promise under test: every round whose commit returned is there after a SIGKILL at any
//! instant, byte for byte.
//!
//! Model: the pool is created with `OBJECTS` raw objects whose ids (consecutive, after the
//! root filesystem's own objects) are recorded in `--dir/objects`; round `r` rewrites object
//! `first + r % OBJECTS` entirely with bytes derived from `(seed, r)`. After each commit the
//! round number is recorded in `--dir/state` (written to a temporary file, fsynced, renamed).
//! Because the kill can fall between a commit and the state update, the pool may be one
//! round ahead of the state file: verification accepts
//! round `R` or `R + 1` for the object that round `R + 1` wrote, and exactly the recorded
//! rounds for every other object.
//!
//! Volumes: the pool also holds two sparse volumes, `stress/lat` (`logbias=latency`) and
//! `stress/thr` (`logbias=throughput`). Before its objects, each round makes
//! [`VOLUME_STEPS`] volume steps, each a write (every fifth a zero) of a range derived from
//! `(seed, step)` on one volume followed by a volume flush, and records the step number in
//! `--dir/vstate` after the flush returned. No txg commits between the steps of a round, so a
//! kill there leaves flushed writes only in the intent logs. Verification rebuilds both
//! volumes' expected bytes from steps `1..=V` and accepts `V` or `V + 1` (the kill may fall
//! between a flush and the state update; a step's change is one engine call, whole or
//! absent).
//!
//! Clones: each round also changes the files of `stress/fs` by block cloning (module
//! `files`: a whole file cloned into another with `copy_file_range`'s verb, one block of
//! the copy overwritten), committed by the round's sync; verification replays the rounds
//! and reads every file.
//!
//! Fsync: each round also makes fsync'd writes to a file of `stress/sync`
//! (`logbias=throughput`: whole records written in place and logged as pointers), counted
//! in `--dir/fstate` (module `fsync`), verified as the volume steps are.
//!
//! Readers: beside the rounds, [`readers::READERS`] threads read random ranges of the objects
//! and check every byte against the rounds that wrote them (module `readers`), so that each
//! kill also lands among concurrent reads; a wrong byte exits 1.

mod files;
mod fsync;
mod readers;

/// The wrapper the `tarn` binary puts around its allocator: whole-page buffers page-aligned,
/// so that the direct device accesses need no bounce copy (tarn-base `page_align`).
#[global_allocator]
static ALLOCATOR: tarn_base::page_align::PageAligned<std::alloc::System> =
    tarn_base::page_align::PageAligned::new(std::alloc::System);

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tarn_base::{ObjectId, SeededRng, SystemClock};
use tarn_engine::{
    CreateOptions, CreateSpec, DatasetId, Engine, FileProvider, HostIdentity, ImportOptions,
    TopLayout, VolumeSpec,
};

const POOL: &str = "stress";
const OBJECTS: u64 = 8;
const DEVICES: usize = 6;
const DEVICE_SIZE: u64 = 512 << 20;
/// The volumes: name and `logbias`.
const VOLUMES: [(&str, &str); 2] = [("stress/lat", "latency"), ("stress/thr", "throughput")];
/// Size of each volume.
const VOLUME_SIZE: usize = 8 << 20;
/// Volume steps (a write or zero, then a flush) per round.
const VOLUME_STEPS: u64 = 4;
/// Longest write or zero of a volume step.
const VOLUME_CHANGE_MAX: u64 = 256 << 10;

struct Args {
    dir: PathBuf,
    seed: u64,
    rounds: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut dir = None;
    let mut seed = 1;
    let mut rounds = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--dir" => dir = Some(PathBuf::from(value()?)),
            "--seed" => {
                seed = value()?
                    .parse()
                    .map_err(|_| "--seed takes a number".to_string())?
            }
            "--rounds" => {
                rounds = Some(
                    value()?
                        .parse()
                        .map_err(|_| "--rounds takes a number".to_string())?,
                );
            }
            _ => {
                return Err(format!(
                    "unknown argument '{arg}' (valid: --dir DIR --seed N --rounds N)"
                ));
            }
        }
    }
    Ok(Args {
        dir: dir.ok_or("--dir DIR is required")?,
        seed,
        rounds,
    })
}

/// Size of round `round`'s object contents (varies so that trees grow and shrink).
fn round_len(seed: u64, round: u64) -> usize {
    let mut rng = SeededRng::new(seed ^ round.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    (1 + rng.below(4 << 20)) as usize
}

fn round_data(seed: u64, round: u64) -> Vec<u8> {
    let len = round_len(seed, round);
    let mut data = vec![0u8; len];
    let mut rng = SeededRng::new(seed ^ round.rotate_left(17));
    rng.fill(&mut data[..len / 2]);
    data
}

/// The raw objects under test: `OBJECTS` consecutive ids starting at `first`, as the engine
/// handed them out at create (the root dataset's filesystem owns the ids before them, so a
/// hard-coded id would overwrite its master node).
#[derive(Clone, Copy)]
struct Objects {
    first: u64,
}

impl Objects {
    fn of(self, round: u64) -> ObjectId {
        ObjectId(self.first + round % OBJECTS)
    }

    fn all(self) -> impl Iterator<Item = ObjectId> {
        (self.first..self.first + OBJECTS).map(ObjectId)
    }

    fn load(dir: &Path) -> Result<Objects, String> {
        let text = std::fs::read_to_string(dir.join("objects"))
            .map_err(|e| format!("cannot read {}: {e}", dir.join("objects").display()))?;
        let first = text
            .trim()
            .parse()
            .map_err(|_| format!("{} does not hold a number", dir.join("objects").display()))?;
        Ok(Objects { first })
    }
}

fn read_state(dir: &Path) -> Option<u64> {
    read_number(dir, "state")
}

fn read_number(dir: &Path, name: &str) -> Option<u64> {
    std::fs::read_to_string(dir.join(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Writes `value` to `dir/name` atomically (temporary file, fsync, rename).
fn write_number(dir: &Path, name: &str, value: u64) -> Result<(), String> {
    let temp = dir.join(format!("{name}.tmp"));
    let mut file = std::fs::File::create(&temp).map_err(|e| format!("cannot write {name}: {e}"))?;
    writeln!(file, "{value}").map_err(|e| format!("cannot write {name}: {e}"))?;
    file.sync_all()
        .map_err(|e| format!("cannot sync {name}: {e}"))?;
    std::fs::rename(&temp, dir.join(name)).map_err(|e| format!("cannot rename {name}: {e}"))
}

fn write_state(dir: &Path, round: u64) -> Result<(), String> {
    write_number(dir, "state", round)
}

/// What volume step `step` does: the volume (index into [`VOLUMES`]), the offset, the length
/// and whether it zeroes (else it writes [`step_byte`]s).
fn volume_step(seed: u64, step: u64) -> (usize, usize, usize, bool) {
    let mut rng = SeededRng::new(seed ^ step.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let len = 1 + rng.below(VOLUME_CHANGE_MAX) as usize;
    let offset = rng.below((VOLUME_SIZE - len) as u64) as usize;
    ((step % 2) as usize, offset, len, step.is_multiple_of(5))
}

/// Byte `i` of volume step `step`'s write (cheap to make, different per step and position).
fn step_byte(step: u64, i: usize) -> u8 {
    (step as u8).wrapping_mul(31) ^ ((i / 511) as u8) | 1
}

/// Applies volume step `step` to the model of both volumes.
fn apply_step(model: &mut [Vec<u8>], seed: u64, step: u64) {
    let (volume, offset, len, zero) = volume_step(seed, step);
    let range = &mut model[volume][offset..offset + len];
    for (i, byte) in range.iter_mut().enumerate() {
        *byte = if zero { 0 } else { step_byte(step, i) };
    }
}

/// The datasets of the volumes, in [`VOLUMES`] order.
fn volume_ids(engine: &Engine) -> Result<Vec<DatasetId>, String> {
    VOLUMES
        .iter()
        .map(|(name, _)| {
            engine
                .volume_stat(name)
                .map(|stat| stat.dataset)
                .map_err(|e| format!("cannot find volume {name}: {e}"))
        })
        .collect()
}

/// Makes volume step `step` and flushes it.
fn do_step(engine: &Engine, ids: &[DatasetId], seed: u64, step: u64) -> Result<(), String> {
    let (volume, offset, len, zero) = volume_step(seed, step);
    let id = ids[volume];
    let done = if zero {
        engine.volume_zero(POOL, id, offset as u64, len as u64, false)
    } else {
        let data: Vec<u8> = (0..len).map(|i| step_byte(step, i)).collect();
        engine.volume_write(POOL, id, offset as u64, &data, false)
    };
    done.and_then(|()| engine.volume_flush(POOL, id))
        .map_err(|e| format!("volume step {step}: {e}"))
}

/// Checks both volumes against the model after `flushed` steps (or one more); returns the
/// steps they hold.
fn verify_volumes(engine: &Engine, seed: u64, flushed: u64) -> Result<u64, String> {
    let ids = volume_ids(engine)?;
    let mut actual = Vec::new();
    for id in &ids {
        let mut buf = vec![0u8; VOLUME_SIZE];
        engine
            .volume_read(POOL, *id, 0, &mut buf)
            .map_err(|e| format!("cannot read a volume: {e}"))?;
        actual.push(buf);
    }
    let mut model = vec![vec![0u8; VOLUME_SIZE]; VOLUMES.len()];
    for step in 1..=flushed {
        apply_step(&mut model, seed, step);
    }
    if model == actual {
        return Ok(flushed);
    }
    apply_step(&mut model, seed, flushed + 1);
    if model == actual {
        return Ok(flushed + 1);
    }
    let bad: Vec<&str> = (0..VOLUMES.len())
        .filter(|&v| model[v] != actual[v])
        .map(|v| VOLUMES[v].0)
        .collect();
    Err(format!(
        "LOST DATA: volume {bad:?} holds neither {flushed} nor {} flushed steps",
        flushed + 1
    ))
}

fn engine() -> Engine {
    let identity = HostIdentity {
        hostid: 0x57e5,
        hostname: "stress".into(),
    };
    let seed = SeededRng::from_entropy().next_u64();
    Engine::new(
        // The daemon's device mode (O_DIRECT where the file system has it), so that the kill
        // loop drives the path the daemon takes.
        Arc::new(FileProvider { direct: true }),
        identity,
        Arc::new(SystemClock::new()),
        seed,
    )
}

fn create(engine: &Engine, dir: &Path, seed: u64) -> Result<Objects, String> {
    let mut devices = Vec::new();
    for i in 0..DEVICES {
        let path = dir.join(format!("disk{i}"));
        let file =
            std::fs::File::create(&path).map_err(|e| format!("cannot create device: {e}"))?;
        file.set_len(DEVICE_SIZE)
            .map_err(|e| format!("cannot size device: {e}"))?;
        devices.push(path.display().to_string());
    }
    let spec = CreateSpec::one_top(POOL, TopLayout::Raidz(2), devices);
    engine
        .create_pool(&spec, &CreateOptions::default())
        .map_err(|e| format!("cannot create pool: {e}"))?;
    let mut ids = Vec::new();
    for _ in 0..OBJECTS {
        let id = engine
            .object_create(POOL, 128 << 10)
            .map_err(|e| format!("cannot create object: {e}"))?;
        ids.push(id.0);
    }
    let objects = Objects { first: ids[0] };
    if !ids.iter().copied().eq(objects.all().map(|id| id.0)) {
        return Err(format!(
            "the engine handed out non-consecutive object ids {ids:?}"
        ));
    }
    files::create(engine, seed)?;
    fsync::create(engine)?;
    for (name, logbias) in VOLUMES {
        let spec = VolumeSpec {
            size: VOLUME_SIZE.to_string(),
            block_size: None,
            sparse: true,
        };
        let props = [("logbias".to_string(), logbias.to_string())];
        engine
            .create_volume(name, &spec, &props, false, "create -V (stress)")
            .map_err(|e| format!("cannot create volume {name}: {e}"))?;
    }
    engine
        .sync_pool(POOL)
        .map_err(|e| format!("cannot sync: {e}"))?;
    // The ids first, then the states: a state file always has its objects file.
    write_number(dir, "objects", objects.first)?;
    write_number(dir, "vstate", 0)?;
    write_number(dir, "fstate", 0)?;
    write_state(dir, 0)?;
    Ok(objects)
}

fn read_object(engine: &Engine, object: ObjectId, len: usize) -> Result<Vec<u8>, String> {
    let mut data = vec![0u8; len];
    engine
        .object_read(POOL, object, 0, &mut data)
        .map_err(|e| format!("cannot read {object:?}: {e}"))?;
    Ok(data)
}

/// The round whose data object `object` must hold after `committed` rounds (0: never written).
fn last_round_for(objects: Objects, object: ObjectId, committed: u64) -> u64 {
    (1..=committed)
        .rev()
        .find(|&r| objects.of(r) == object)
        .unwrap_or(0)
}

fn matches_round(engine: &Engine, seed: u64, object: ObjectId, round: u64) -> Result<bool, String> {
    if round == 0 {
        return Ok(read_object(engine, object, 4 << 20)?
            .iter()
            .all(|&b| b == 0));
    }
    let expected = round_data(seed, round);
    // The object is rewritten whole each round and its tail zeroed, so also check that the
    // bytes after this round's length are zero up to the longest possible round.
    let actual = read_object(engine, object, (4 << 20) + 1)?;
    Ok(
        actual[..expected.len()] == expected[..]
            && actual[expected.len()..].iter().all(|&b| b == 0),
    )
}

fn verify(engine: &Engine, seed: u64, objects: Objects, committed: u64) -> Result<u64, String> {
    let pending = committed + 1;
    let mut ahead = false;
    for object in objects.all() {
        let expected = last_round_for(objects, object, committed);
        if matches_round(engine, seed, object, expected)? {
            continue;
        }
        if object == objects.of(pending) && matches_round(engine, seed, object, pending)? {
            ahead = true;
            continue;
        }
        return Err(format!(
            "LOST DATA: object {} does not hold round {expected} (committed rounds: {committed})",
            object.0
        ));
    }
    Ok(if ahead { pending } else { committed })
}

/// Verifies the steps counted in the state file `name` with `verify` (which returns the
/// steps found: the count or one more) and records what it found.
fn verify_steps(
    dir: &Path,
    name: &str,
    verify: impl FnOnce(u64) -> Result<u64, String>,
) -> Result<u64, String> {
    let counted = read_number(dir, name).unwrap_or(0);
    let found = verify(counted)?;
    if found != counted {
        write_number(dir, name, found)?;
    }
    Ok(found)
}

fn run(args: &Args) -> Result<(), String> {
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| format!("cannot create {}: {e}", args.dir.display()))?;
    let engine = engine();
    let (objects, committed) = match read_state(&args.dir) {
        None => (create(&engine, &args.dir, args.seed)?, 0),
        Some(committed) => {
            let objects = Objects::load(&args.dir)?;
            let dirs = vec![args.dir.display().to_string()];
            engine
                .import_pool(&dirs, POOL, &ImportOptions::default(), "import (stress)")
                .map_err(|e| format!("IMPORT FAILED: {e}"))?;
            let found = verify(&engine, args.seed, objects, committed)?;
            files::verify(&engine, args.seed, found)?;
            if found != committed {
                write_state(&args.dir, found)?;
            }
            let steps = verify_steps(&args.dir, "vstate", |n| {
                verify_volumes(&engine, args.seed, n)
            })?;
            let fsteps = verify_steps(&args.dir, "fstate", |n| {
                fsync::verify(&engine, args.seed, n)
            })?;
            println!(
                "verified {found} committed rounds (files and clones), {steps} flushed volume \
                 steps, {fsteps} fsync'd file steps"
            );
            (objects, found)
        }
    };
    let progress = readers::Progress::default();
    std::thread::scope(|scope| {
        for me in 0..readers::READERS {
            let (engine, progress) = (&engine, &progress);
            scope.spawn(move || readers::run(engine, args.seed, objects, progress, me));
        }
        let written = write_rounds(&engine, args, objects, committed, &progress);
        progress.stop.store(true, Ordering::SeqCst);
        written
    })?;
    let checked = progress.checked.load(Ordering::SeqCst);
    println!("readers checked {checked} ranges beside the writes");
    engine
        .export_pool(POOL, false)
        .map_err(|e| format!("cannot export: {e}"))
}

/// The rounds from `committed + 1` on (until `--rounds` of them are done, or forever),
/// each published to the readers before it changes anything.
fn write_rounds(
    engine: &Engine,
    args: &Args,
    objects: Objects,
    committed: u64,
    progress: &readers::Progress,
) -> Result<(), String> {
    let ids = volume_ids(engine)?;
    let mut step = read_number(&args.dir, "vstate").unwrap_or(0);
    let mut fstep = read_number(&args.dir, "fstate").unwrap_or(0);
    let mut round = committed;
    loop {
        if args.rounds.is_some_and(|limit| round >= committed + limit) {
            return Ok(());
        }
        round += 1;
        progress.writing.store(round, Ordering::SeqCst);
        for _ in 0..VOLUME_STEPS {
            step += 1;
            do_step(engine, &ids, args.seed, step)?;
            write_number(&args.dir, "vstate", step)?;
        }
        for _ in 0..fsync::STEPS {
            fstep += 1;
            fsync::step(engine, args.seed, fstep)?;
            write_number(&args.dir, "fstate", fstep)?;
        }
        files::round(engine, args.seed, round)?;
        let object = objects.of(round);
        let data = round_data(args.seed, round);
        engine
            .object_write(POOL, object, 0, &data)
            .map_err(|e| format!("cannot write: {e}"))?;
        let tail = vec![0u8; (4 << 20) + 1 - data.len()];
        engine
            .object_write(POOL, object, data.len() as u64, &tail)
            .map_err(|e| format!("cannot write: {e}"))?;
        engine
            .sync_pool(POOL)
            .map_err(|e| format!("cannot sync: {e}"))?;
        write_state(&args.dir, round)?;
    }
}

fn main() {
    let result = parse_args().and_then(|args| run(&args));
    if let Err(message) = result {
        eprintln!("tarn-stress: {message}");
        std::process::exit(1);
    }
}
