//! tarn-sim: the deterministic simulator. The real engine runs on `SimDevice`s in one process
//! and one thread; a seed decides everything, and the checkers run after every commit and
//! every import.
//!
//! # Purpose
//! Find the bugs no hand-written test thinks of, and make every one of them replayable with
//! one number: `cargo run -p tarn-sim -- --seed N` repeats a run exactly and prints the seed
//! first. It generalizes the randomized tests of tarn-pool and tarn-engine (one fixed
//! topology each) into swarm testing over topologies, properties, workloads and faults.
//!
//! # Model
//! ```text
//!  seed ─► Config (config.rs)                         ─► SeededRng for the workload (sim.rs)
//!          topology: 1-3 top-level vdevs, each disk,      create / write / overwrite / punch
//!            mirror 2-3 or raidz1-3 of p+1..p+5 leaves    read / sync / export+import
//!            (the first a small dRAID: 1 in 8, --draid)
//!            ashift 9-13, 0-2 spares, 64-128 MiB leaves   crash at any device operation
//!          budget: within (default 5 in 6) or beyond      rename devices + import
//!          faulty leaves per vdev, each FaultPlan         rot at rest / vanish and return
//!          checksum, compression, copies, block sizes
//!          0-2 cache devices (L2ARC) with every fault at beyond-budget rates
//!
//!  Engine ── PoweredProvider (power.rs: shared write budget = the crash instant)
//!               └─ SimProvider ─ SimDevice x N (ManualClock: latency is virtual time)
//!
//!          healing (sim/heal.rs): replace a faulty leaf with a fresh device, spare the
//!            leaves out of service (Engine::fault_check), offline and online a faulty
//!            leaf (online resilvers what it missed), start a scrub, advance a running
//!            scrub or resilver a batch at a time (writes, crashes, renames land mid-scan)
//!
//!          outages (sim/outage.rs, a quarter of the seeds or --outages): failmode=wait,
//!            every leaf of one top-level vdev goes away, a sync suspends the pool, a
//!            write blocks on a second thread, the devices come back, `clear` resumes, the
//!            write completes, failmode=continue again, the checkers run
//!
//!          full pools (--fill): writes of several times what the pool holds; writers get
//!            ENOSPC, the pool never suspends, deletes and punches give the space back
//!
//!          snapshots (sim/snapshots.rs, --snapshots): take (-r), destroy (-R with clones),
//!            roll back (-r), clone (nested: of a clone's snapshot), promote, destroy -R
//!            of datasets; the snapshot list, every clone's files and every root
//!            snapshot's objects checked against the model, dead lists, sharing and space
//!            by check::verify_pool
//!
//!          volumes (sim/volumes.rs, a quarter of the seeds or --volumes): create -V
//!            (logbias latency or throughput), write, FUA write, trim, read, flush (then
//!            sometimes a crash at once), set volsize growth; snapshots, rollback and
//!            clones of volumes with --snapshots; a crash before the next commit brings
//!            back each flushed volume exactly as flushed, a failed flush whole or not
//!
//!          POSIX layer in a random dataset (sim/fsops.rs, through Engine::fs_op):
//!            create / mkdir / symlink / write / truncate / punch / rename / link / unlink
//!            rmdir / set or remove xattr / read / fsync (intent log: a crash before the
//!            next commit brings back each fsync'd dataset as it was; datasets draw
//!            logbias latency or throughput, whose fsync writes whole records ahead and
//!            logs pointers to them); bounded by the seed
//!
//!          block cloning (sim/clones.rs): copy_file_range of whole blocks within a file,
//!            across files and datasets (Engine::fs_clone_range); a clone reads as a copy,
//!            EXDEV changes nothing; verify_pool counts the clones and their space
//!
//!  after every sync and import:   check::verify_pool (tarn-engine)   model == engine bytes
//!                                 every dataset's tree == its model (fsmodel.rs)
//! ```
//! The reference model (model.rs) keeps the open state, the committed state and the states
//! of recent txgs. After a crash the import decides which txg survived: the last committed
//! one, or the one whose commit was in flight when the power went (its uberblock may have
//! reached a disk); the model goes back to exactly that state. The model holds one filesystem
//! per dataset (paths to nodes; hard links are paths naming one node), which follows the
//! dataset through create, destroy and rename and the txg states like every object. Each
//! POSIX operation is predicted by the model: success, or the errno of a refusal (which must
//! change nothing).
//!
//! # State
//! Everything is in memory: the devices (sparse), the engine, the model and the trace (a
//! running hash of every operation and result, `Summary::trace_hash`). On a failure the
//! durable image of every device is written to `--images DIR/<device>.img` (sparse files).
//!
//! # Invariants
//! - I1: same seed (and same code) ⇒ same configuration, same operations, same faults, same
//!   trace hash. Time comes from a `ManualClock`, randomness from `SeededRng`s derived from
//!   the seed, and nothing iterates a randomly seeded map.
//! - I2: within budget, no top-level vdev ever has more faulty leaves than it tolerates
//!   (mirror n-1, raidz p, disk 0): only leaves chosen faulty at the start inject faults, rot
//!   at rest, or vanish, and vanished devices are faulty ones. Healthy leaves keep every
//!   label and uberblock copy good. Fresh devices (replace) and spares are healthy; a
//!   replaced faulty leaf still injects faults while the resilver reads it, but is no longer
//!   rotted or made to vanish.
//! - I3: within budget every operation succeeds, every read equals the model, and after every
//!   sync and import: every reachable block verifies, no block is born after the committed
//!   txg, space closes (allocated = referenced + deferred frees, nothing leaked, nothing
//!   allocated twice), and committed txgs only go forward.
//! - I4: beyond budget a read either returns exactly the model's bytes or fails; an import
//!   either succeeds or fails with an error; nothing panics. A POSIX operation that fails
//!   with EIO (or suspends the pool) may leave its txg half changed, so the run restarts the
//!   engine and the model goes back to the txg the import opened.
//! - I5: after every sync and import, walking every dataset's tree through the engine
//!   (`readdir` pages, `lookup`, `getattr`, `read`, `readlink`, `listxattr`, `getxattr`)
//!   finds exactly the model: names (each once), types, sizes, link counts, shared inodes of
//!   hard links, bytes, symlink targets, xattrs; and `inode_count` equals the live nodes.
//! - I6: beyond budget every loss the engine reports (a block no copy of which verifies)
//!   lies where faults touched more of each copy's children than its vdev tolerates
//!   (sim/losses.rs): only what a damaged region holds is ever reported lost.
//!
//! # Concurrency and context
//! One thread, but for the blocked write of an outage: a scoped thread that the run joins
//! before its next step, and that cannot return before `clear` (or `export -f`) on the run's
//! thread, so the order of every change stays the seed's. The engine's locks are taken by
//! its own calls; the simulator holds nothing across them.
//!
//! # Failure model
//! A broken invariant ends the run with [`Failure`]: the seed, the step, the invariant, the
//! last lines of the trace, and where the device images were written. An engine panic is a
//! broken invariant too (caught, reported the same way).
//!
//! # Not here
//! Attach and detach (replace and spares cover the resilver paths); send/receive; files
//! held open across an unlink
//! (the workload reclaims at once, so the unlinked set stays empty); POSIX operations other
//! than file writes inside the burst before a power cut (the cut lands in syncs that carry
//! them); dataset properties
//! (`check::set_data_write_config` sets the root dataset's checksum, compression and copies).

pub mod config;
mod fsmodel;
mod model;
mod power;
mod sim;
mod trace;

use std::io::{Seek, SeekFrom, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

pub use config::{Config, TopPlan, Weights};
pub use trace::TRACE_TAIL_LINES;

use sim::{Flow, Sim};

/// Which fault budget a run keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// No vdev loses more leaves than it tolerates: every byte must survive.
    Within,
    /// One vdev has more faulty leaves than it tolerates: losses must be reported, never
    /// turned into wrong bytes.
    Beyond,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The seed: decides everything else.
    pub seed: u64,
    /// Workload operations before the final check.
    pub steps: u64,
    /// Override the seed's choice of budget.
    pub budget: Option<Budget>,
    /// Where device images go on failure (default: a directory under the system temp dir).
    pub images: Option<PathBuf>,
    /// Print every operation as it runs.
    pub verbose: bool,
    /// Run outages ended by `clear` whatever the seed chose (`--outages`).
    pub outages: bool,
    /// Take, destroy and roll back to snapshots among the writes (`--snapshots`).
    pub snapshots: bool,
    /// Volumes among the writes whatever the seed chose (`--volumes`).
    pub volumes: bool,
    /// Whether the first top-level vdev is a small dRAID: `Some(true)` always (`--draid`),
    /// `Some(false)` never (`--no-draid`), `None` as the seed decides (one in eight).
    pub draid: Option<bool>,
    /// Write several times what the pool holds (`--fill`, `Config::force_fill`).
    pub fill: bool,
}

/// Default number of workload operations per run.
pub const STEPS_DEFAULT: u64 = 300;

/// Counters of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Txgs the run saw commit.
    pub txgs: u64,
    /// Imports (after export, crash, rename, suspension).
    pub imports: u64,
    /// Power cuts and restarts.
    pub crashes: u64,
    /// Checker passes.
    pub checks: u64,
    /// Errors the engine reported (beyond budget: losses reported instead of wrong bytes).
    pub errors_reported: u64,
    /// Lost blocks whose placement I6 checked against the damage the devices took.
    pub losses_placed: u64,
    /// Faults the devices injected: EIO, lost, misdirected and rotten writes, sectors rotted
    /// at rest, writes torn or dropped at a crash, accesses refused while gone.
    pub faults_injected: u64,
    /// Replaces the engine accepted (heal.rs).
    pub replaces: u64,
    /// Spare activations (`fault_check` started a resilver).
    pub spares: u64,
    /// Scrubs and resilvers that finished while the workload ran (the final scrub aside).
    pub scans_finished: u64,
    /// Reads the cache devices served (seen at checks; a lower bound).
    pub l2_hits: u64,
    /// Cache entries the imports' rebuilds restored (persistent L2ARC).
    pub l2_restored: u64,
    /// Reads served by restored entries (seen at checks; a lower bound).
    pub l2_restored_hits: u64,
    /// Outages that suspended the pool (sim/outage.rs).
    pub suspensions: u64,
    /// Outages `clear` ended (the pool resumed, the blocked write went ahead).
    pub clears: u64,
    /// Snapshot verbs that committed (sim/snapshots.rs).
    pub snapshot_ops: u64,
    /// Writes and changes refused for lack of space (ENOSPC; the pool stayed available).
    pub no_space: u64,
    /// Volume operations that succeeded (sim/volumes.rs).
    pub volume_ops: u64,
    /// Volume flushes and FUA writes acknowledged (their bytes must survive any crash).
    pub volume_flushes: u64,
    /// Imports after which a flushed volume's bytes were checked against its last flush.
    pub volume_replays: u64,
    /// Volumes shrunk (`set volsize -f` to a smaller size).
    pub volume_shrinks: u64,
    /// Volume flushes acknowledged between a txg's write and commit phases.
    pub volume_split_flushes: u64,
    /// Block clones (`copy_file_range`) that succeeded (sim/clones.rs).
    pub clones: u64,
    /// Clones the engine refused with EXDEV (a range it cannot clone; nothing changed).
    pub clones_refused: u64,
    /// Blocks the engine's pre-writes wrote ahead of their txg (tarn-engine `prewrite`).
    pub prewritten: u64,
}

/// A run that broke no invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The seed.
    pub seed: u64,
    /// The configuration, in one line.
    pub config: String,
    /// Budget kept.
    pub budget: Budget,
    /// Workload operations run.
    pub steps: u64,
    /// Hash of every operation and its result (equal for equal seeds).
    pub trace_hash: u64,
    /// Lines in the trace.
    pub trace_lines: u64,
    /// Counters.
    pub counts: Counts,
    /// Why a beyond-budget run stopped early (the engine refused to go on, with an error).
    pub ended: Option<String>,
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The step at which it broke (0: pool creation; steps + 1: the final check).
    pub step: u64,
    /// The first broken invariant.
    pub invariant: String,
    /// The configuration, in one line.
    pub config: String,
    /// The last lines of the trace.
    pub trace_tail: Vec<String>,
    /// Where the device images were written (or why they could not be).
    pub images: Result<PathBuf, String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "FAILED seed {} at step {}: {}",
            self.seed, self.step, self.invariant
        )?;
        writeln!(f, "config: {}", self.config)?;
        writeln!(f, "last operations:")?;
        for line in &self.trace_tail {
            writeln!(f, "  {line}")?;
        }
        match &self.images {
            Ok(dir) => writeln!(f, "device images: {}", dir.display())?,
            Err(why) => writeln!(f, "device images not written: {why}")?,
        }
        write!(f, "replay: cargo run -p tarn-sim -- --seed {}", self.seed)
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        return (*text).to_string();
    }
    payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_else(|| "non-string panic".into())
}

/// Creates the pool, runs `steps` operations and the final check.
fn drive(sim: &mut Sim, steps: u64) -> Result<Option<String>, String> {
    if let Flow::End(why) = sim.create()? {
        return Ok(Some(why));
    }
    for _ in 0..steps {
        if let Flow::End(why) = sim.step()? {
            return Ok(Some(why));
        }
    }
    sim.step = steps + 1;
    match sim.finish()? {
        Flow::End(why) => Ok(Some(why)),
        Flow::Continue => Ok(None),
    }
}

/// Runs one seed. `Err` is a broken invariant (device images already written).
pub fn run(options: &Options) -> Result<Summary, Failure> {
    let mut config = Config::from_seed_choosing(options.seed, options.budget, options.draid);
    if options.outages {
        config.force_outages();
    }
    if options.snapshots {
        config.force_snapshots();
    }
    if options.fill {
        config.force_fill();
    }
    if options.volumes {
        config.force_volumes();
    }
    let described = config.describe();
    let budget = config.budget;
    let mut sim = Sim::new(config, options.verbose);
    let outcome = catch_unwind(AssertUnwindSafe(|| drive(&mut sim, options.steps)));
    let broken = match outcome {
        Ok(Ok(ended)) => {
            sim.counts.faults_injected = sim.faults_injected();
            return Ok(Summary {
                seed: options.seed,
                config: described,
                budget,
                steps: sim.step.min(options.steps),
                trace_hash: sim.trace.hash(),
                trace_lines: sim.trace.lines(),
                counts: sim.counts,
                ended,
            });
        }
        Ok(Err(invariant)) => invariant,
        Err(payload) => format!("engine panicked: {}", panic_message(payload.as_ref())),
    };
    let dir = options
        .images
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("tarn-sim-{}", options.seed)));
    let images = write_images(&sim, &dir)
        .map(|()| dir)
        .map_err(|e| e.to_string());
    Err(Failure {
        seed: options.seed,
        step: sim.step,
        invariant: broken,
        config: described,
        trace_tail: sim.trace.tail(),
        images,
    })
}

/// Bytes per piece when copying a durable image out (zero pieces are skipped: the files are
/// sparse, like the devices).
const IMAGE_PIECE: usize = 1 << 20;

/// Writes every device's durable image to `dir/<name>.img`, named by its original path.
fn write_images(sim: &Sim, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut piece = vec![0u8; IMAGE_PIECE];
    for (index, device) in sim.devices.iter().enumerate() {
        // Fresh devices a replace added are named by the path they were created at.
        let original = sim.cfg.paths.get(index).map_or_else(
            || tarn_device::Device::path(device.as_ref()).to_string(),
            Clone::clone,
        );
        let name = original.rsplit('/').next().unwrap_or(&original);
        let mut file = std::fs::File::create(dir.join(format!("{name}.img")))?;
        let size = tarn_device::Device::size_bytes(device.as_ref());
        file.set_len(size)?;
        let mut offset = 0u64;
        while offset < size {
            let len = usize::try_from((size - offset).min(IMAGE_PIECE as u64))
                .expect("a piece fits in memory");
            device
                .read_durable_at(offset, &mut piece[..len])
                .map_err(std::io::Error::other)?;
            if piece[..len].iter().any(|&b| b != 0) {
                file.seek(SeekFrom::Start(offset))?;
                file.write_all(&piece[..len])?;
            }
            offset += len as u64;
        }
    }
    Ok(())
}
