//! Seed to run configuration (swarm testing): the topology, the fault budget and which leaves
//! are faulty, each device's `FaultPlan`, the write properties and the workload weights. Every
//! choice is drawn from one `SeededRng` in a fixed order, so a seed names one configuration.

use std::fmt::Write as _;

use tarn_base::SeededRng;
use tarn_device::{FaultPlan, PER_MILLION};
use tarn_engine::TopLayout;
use tarn_format::{ChecksumKind, CompressSetting};
use tarn_objects::{CachePolicy, ObjsetWriteConfig};

use crate::Budget;

/// Directory every simulated device lives under (import scans it).
pub const DEVICE_DIR: &str = "/sim";
/// Most top-level vdevs a run creates.
pub const TOPS_MAX: u64 = 3;
/// Most hot spares a run creates (recorded in the config, never activated yet).
pub const SPARES_MAX: u64 = 2;

/// One top-level vdev: its layout, its leaves (device indices) and which of them are faulty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopPlan {
    /// Layout.
    pub layout: TopLayout,
    /// Device indices of its leaves, in child order.
    pub leaves: Vec<usize>,
    /// Device indices of the leaves that inject faults.
    pub faulty: Vec<usize>,
    /// A special allocation-class vdev (metadata and small blocks; always the last top of a
    /// pool with more than one, so data vdevs remain).
    pub special: bool,
}

impl TopPlan {
    /// Leaves this vdev can lose and still return every byte (mirror n-1, raidz p, disk 0).
    #[must_use]
    pub fn tolerated(&self) -> usize {
        match self.layout {
            TopLayout::Disk => 0,
            TopLayout::Mirror => self.leaves.len() - 1,
            TopLayout::Raidz(parity) | TopLayout::Draid { parity, .. } => usize::from(parity),
        }
    }
}

/// How often each workload operation is picked (relative weights).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Weights {
    /// Create an object.
    pub create: u64,
    /// Write random or zero bytes at a random offset.
    pub write: u64,
    /// Rewrite whole blocks.
    pub overwrite: u64,
    /// Write zeros over whole blocks (the engine's only punch).
    pub punch: u64,
    /// Read a random range and compare it with the open model.
    pub read: u64,
    /// Commit the open txg.
    pub sync: u64,
    /// Export and import again.
    pub export_import: u64,
    /// Cut the power at a random device operation, crash every device, reimport.
    pub crash: u64,
    /// Export, move devices to new paths, import by scanning.
    pub rename_import: u64,
    /// Rot sectors at rest on a faulty device.
    pub rot: u64,
    /// A faulty device vanishes, or a vanished one returns under a new path.
    pub vanish: u64,
    /// Create, destroy (`-r`) or rename a dataset (each commits a txg).
    pub dataset: u64,
    /// Replace a faulty leaf, activate hot spares, start a scrub, or advance a running
    /// scrub or resilver (heal.rs).
    pub heal: u64,
    /// POSIX layer, in a random dataset: create a regular file.
    pub fs_create: u64,
    /// Create a directory.
    pub fs_mkdir: u64,
    /// Create a symlink (short targets inline, long ones in a block).
    pub fs_symlink: u64,
    /// Write random bytes or zeros at a random offset of a file (small or large, past the
    /// end, across holes).
    pub fs_write: u64,
    /// Truncate a file (shrink or grow).
    pub fs_truncate: u64,
    /// fallocate PUNCH_HOLE|KEEP_SIZE.
    pub fs_punch: u64,
    /// rename(2), over an existing entry or to a fresh name.
    pub fs_rename: u64,
    /// Hard link.
    pub fs_link: u64,
    /// Unlink (the inode is reclaimed at once when its last link goes).
    pub fs_unlink: u64,
    /// rmdir.
    pub fs_rmdir: u64,
    /// Set or remove an extended attribute.
    pub fs_xattr: u64,
    /// Read a random range of a file and compare it with the open model.
    pub fs_read: u64,
    /// `fsync` a file of the dataset (the intent log; within budget only).
    pub fs_fsync: u64,
    /// Clone a range of whole blocks into a file of the same or another dataset
    /// (`copy_file_range`, sim/clones.rs).
    pub fs_clone: u64,
    /// An outage beyond a vdev's redundancy under `failmode=wait`, ended by `clear`
    /// (sim/outage.rs). Drawn from its own generator: seeds without it run as before.
    pub outage: u64,
    /// Take, destroy or roll back to a snapshot (sim/snapshots.rs). Off unless asked for
    /// (`--snapshots`): seeds without it run as before.
    pub snapshot: u64,
    /// Volumes (sim/volumes.rs): create, write, zero, read, flush, FUA write, grow. Drawn
    /// from its own generator (a quarter of the seeds, or `--volumes`): seeds without it
    /// run as before.
    pub volume: u64,
}

/// Everything a seed decides before the first operation.
#[derive(Clone, Debug)]
pub struct Config {
    /// The seed.
    pub seed: u64,
    /// Within or beyond the fault budget.
    pub budget: Budget,
    /// Sector shift of every vdev.
    pub ashift: u8,
    /// Virtual size of every device (sparse in memory).
    pub device_size: u64,
    /// Top-level vdevs.
    pub tops: Vec<TopPlan>,
    /// Device indices of the hot spares.
    pub spares: Vec<usize>,
    /// Device indices of the cache devices (L2ARC). Their fault plans are harsh in any
    /// budget: nothing on them may ever reach a reader unverified.
    pub caches: Vec<usize>,
    /// What the root dataset's in-memory cache keeps (`none` sends every read of its
    /// objects to the devices and the cache devices).
    pub primarycache: CachePolicy,
    /// Initial path of every device, by index.
    pub paths: Vec<String>,
    /// Fault plan of every device, by index.
    pub plans: Vec<FaultPlan>,
    /// How the root dataset writes blocks.
    pub write_config: ObjsetWriteConfig,
    /// Largest data block size shift an object may get (block sizes 512..=1 << shift).
    pub block_shift_max: u8,
    /// Bytes of each object the workload addresses (and the model holds).
    pub object_span: u64,
    /// Most objects alive at once.
    pub objects_max: usize,
    /// The workload writes more than the pool holds (`--fill`): running out of space is
    /// part of the run (writers must get ENOSPC and the pool must never suspend).
    pub fill: bool,
    /// Longest single write.
    pub write_len_max: u64,
    /// Most device operations before a power cut (the cut instant is drawn below this).
    pub power_ops_max: u64,
    /// Largest size a file of the POSIX workload grows to.
    pub fs_file_max: u64,
    /// Most entries (files, directories, symlinks, links) in one dataset's filesystem.
    pub fs_entries_max: usize,
    /// Names a directory entry may take (few, so creates collide and renames replace; more
    /// in a seed that grows big directories).
    pub fs_names: u64,
    /// Bytes of padding after every name (long names push directories out of the micro ZAP
    /// form into leaves that split and merge).
    pub fs_name_pad: usize,
    /// Operation weights.
    pub weights: Weights,
}

fn pick<T: Copy>(rng: &mut SeededRng, choices: &[T]) -> T {
    choices[rng.below(choices.len() as u64) as usize]
}

fn layout(rng: &mut SeededRng) -> (TopLayout, usize) {
    match rng.below(5) {
        0 => (TopLayout::Disk, 1),
        1 => (TopLayout::Mirror, 2 + rng.below(2) as usize),
        _ => {
            let parity = 1 + rng.below(3) as u8;
            let width = usize::from(parity) + 1 + rng.below(5) as usize;
            (TopLayout::Raidz(parity), width)
        }
    }
}

/// The top-level vdevs of a seed (the first one a dRAID with `draid`), their device paths
/// appended to `paths`.
fn top_plans(rng: &mut SeededRng, seed: u64, draid: bool, paths: &mut Vec<String>) -> Vec<TopPlan> {
    let mut tops = Vec::new();
    let mut draids = SeededRng::new(seed ^ DRAID_SALT);
    for index in 0..1 + rng.below(TOPS_MAX) {
        let (mut layout, mut width) = layout(rng);
        if draid && index == 0 {
            let (parity, data, spares, children) = pick(&mut draids, &DRAID_CHOICES);
            layout = TopLayout::Draid {
                parity,
                data,
                spares,
            };
            width = children;
        }
        let leaves: Vec<usize> = (paths.len()..paths.len() + width).collect();
        paths.extend(leaves.iter().map(|i| format!("{DEVICE_DIR}/d{i}")));
        tops.push(TopPlan {
            layout,
            leaves,
            faulty: Vec::new(),
            special: false,
        });
    }
    tops
}

/// Faults of a leaf that misbehaves: every kind the device model has, at seed-chosen rates.
fn faulty_plan(rng: &mut SeededRng, seed: u64, beyond: bool) -> FaultPlan {
    let scale = if beyond { 4 } else { 1 };
    FaultPlan {
        seed,
        read_eio: rng.below(30_000 * scale) as u32,
        write_eio: rng.below(5_000 * scale) as u32,
        flush_eio: rng.below(2_000) as u32,
        lost_write: rng.below(20_000 * scale) as u32,
        misdirected_write: rng.below(4_000 * scale) as u32,
        bitrot_on_write: rng.below(20_000 * scale) as u32,
        ..FaultPlan::seeded(seed)
    }
}

/// Mixed into the seed for the dRAID geometry's generator (`--draid`).
const DRAID_SALT: u64 = 0x64_7261_6964;
/// Mixed in (with [`DRAID_SALT`]) for whether a seed without `--draid` takes one anyway.
const DRAID_DEFAULT_SALT: u64 = 0x0064_6566_6175_6c74;

/// dRAID geometries `--draid` picks from: (parity, data, spares, children), small enough for
/// the simulator's devices (each holds at least one slice at every ashift it draws).
pub const DRAID_CHOICES: [(u8, u8, u8, usize); 5] = [
    (2, 4, 1, 11),
    (1, 2, 1, 5),
    (3, 3, 2, 9),
    (2, 4, 0, 6),
    (1, 4, 1, 8),
];

/// Mixed into the seed for the outage choice's generator.
const OUTAGE_SALT: u64 = 0x6f75_7461_6765;
/// Mixed into the seed for the volume choice's generator.
const VOLUME_SALT: u64 = 0x766f_6c75_6d65;

impl Config {
    /// The configuration of `seed`; `budget` overrides the seed's own choice.
    #[must_use]
    pub fn from_seed(seed: u64, budget: Option<Budget>) -> Config {
        Config::from_seed_choosing(seed, budget, None)
    }

    /// [`Config::from_seed`] with the dRAID choice overridden: `Some(true)` as `--draid`,
    /// `Some(false)` never (`--no-draid`, to replay seeds from before the seeds chose it).
    /// Left to the seed, one seed in eight makes its first top-level vdev a dRAID, decided
    /// by a generator of its own so that every other choice of a seed stays what it was; its
    /// geometry comes from another ([`DRAID_CHOICES`]), and the device plans follow the
    /// larger device count.
    #[must_use]
    pub fn from_seed_choosing(seed: u64, budget: Option<Budget>, draid: Option<bool>) -> Config {
        let draid = draid
            .unwrap_or_else(|| SeededRng::new(seed ^ DRAID_SALT ^ DRAID_DEFAULT_SALT).chance(1, 8));
        Config::from_seed_with(seed, budget, draid)
    }

    fn from_seed_with(seed: u64, budget: Option<Budget>, draid: bool) -> Config {
        let mut rng = SeededRng::new(seed);
        let seeded = if rng.chance(1, 6) {
            Budget::Beyond
        } else {
            Budget::Within
        };
        let budget = budget.unwrap_or(seeded);
        let ashift = 9 + rng.below(5) as u8;
        let device_size = (64 + 16 * rng.below(5)) << 20;
        let mut paths = Vec::new();
        let mut tops = top_plans(&mut rng, seed, draid, &mut paths);
        let spares: Vec<usize> =
            (paths.len()..paths.len() + rng.below(SPARES_MAX + 1) as usize).collect();
        paths.extend(spares.iter().map(|i| format!("{DEVICE_DIR}/s{i}")));
        choose_faulty(&mut rng, &mut tops, budget);
        let plans = device_plans(&mut rng, seed, &tops, paths.len(), budget);
        let write_config = write_config(&mut rng);
        let weights = weights(&mut rng, &tops);
        let mut config = Config {
            seed,
            budget,
            ashift,
            device_size,
            tops,
            spares,
            caches: Vec::new(),
            primarycache: CachePolicy::All,
            paths,
            plans,
            write_config,
            block_shift_max: 12 + rng.below(6) as u8,
            object_span: (256 << 10) << rng.below(3),
            objects_max: 2 + rng.below(5) as usize,
            fill: false,
            write_len_max: (16 << 10) << rng.below(4),
            power_ops_max: 50 + rng.below(2000),
            fs_file_max: 0,
            fs_entries_max: 0,
            fs_names: 0,
            fs_name_pad: 0,
            weights,
        };
        // Drawn last, so the POSIX workload left every earlier choice of a seed as it was.
        late_choices(&mut rng, &mut config);
        // Outages: a quarter of the seeds, from a generator of their own (every other choice
        // of a seed stays what it was).
        let mut outages = SeededRng::new(seed ^ OUTAGE_SALT);
        if outages.chance(1, 4) {
            config.weights.outage = 1 + outages.below(3);
        }
        // Volumes: a quarter of the seeds, from a generator of their own for the same reason.
        let mut volumes = SeededRng::new(seed ^ VOLUME_SALT);
        if volumes.chance(1, 4) {
            config.weights.volume = 2 + volumes.below(8);
        }
        config
    }

    /// Turns outages on (`--outages`: every seed of a soak runs them).
    pub fn force_outages(&mut self) {
        if self.weights.outage == 0 {
            self.weights.outage = 2;
        }
    }

    /// Makes the workload write several times what the pool holds (`--fill`): devices of
    /// the smallest size a pool takes, many objects of a few MiB (the model copies an
    /// object's bytes when a write follows a commit, so objects stay small) written in
    /// pieces of up to 4 MiB, records up to 128 KiB (a pool filled with tiny blocks is all
    /// metadata, and slow to check). Running out of space is then part of the run.
    pub fn force_fill(&mut self) {
        self.fill = true;
        self.device_size = 64 << 20;
        self.objects_max = 48;
        self.object_span = 8 << 20;
        self.write_len_max = 4 << 20;
        self.block_shift_max = self.block_shift_max.max(17);
    }

    /// Turns snapshots on (`--snapshots`).
    pub fn force_snapshots(&mut self) {
        if self.weights.snapshot == 0 {
            self.weights.snapshot = 3;
        }
    }

    /// Turns volumes on (`--volumes`).
    pub fn force_volumes(&mut self) {
        if self.weights.volume == 0 {
            self.weights.volume = 25;
        }
    }

    /// Device indices of every faulty leaf.
    #[must_use]
    pub fn faulty(&self) -> Vec<usize> {
        self.tops
            .iter()
            .flat_map(|t| t.faulty.iter().copied())
            .collect()
    }

    /// One line describing the configuration (printed at the start of a run).
    #[must_use]
    pub fn describe(&self) -> String {
        let mut out = format!(
            "budget {:?} ashift {} device {} MiB{}",
            self.budget,
            self.ashift,
            self.device_size >> 20,
            if self.fill { " fill" } else { "" }
        );
        for top in &self.tops {
            let _ = write!(
                out,
                " | {}{} x{} faulty {:?}",
                if top.special { "special " } else { "" },
                top.layout.name(),
                top.leaves.len(),
                top.faulty
            );
        }
        let c = &self.write_config;
        let _ = write!(
            out,
            " | spares {} caches {} primarycache {:?} | {:?} {:?} copies {}+{} \
             | span {} KiB objects {} blocks <= {} KiB | files <= {} KiB entries {} names {} +{}",
            self.spares.len(),
            self.caches.len(),
            self.primarycache,
            c.checksum,
            c.compression,
            c.copies,
            c.metadata_extra_copies,
            self.object_span >> 10,
            self.objects_max,
            (1u64 << self.block_shift_max) >> 10,
            self.fs_file_max >> 10,
            self.fs_entries_max,
            self.fs_names,
            self.fs_name_pad
        );
        out
    }
}

/// Checksum, compression and copies of the root dataset's writes.
fn write_config(rng: &mut SeededRng) -> ObjsetWriteConfig {
    ObjsetWriteConfig {
        checksum: pick(
            rng,
            &[
                ChecksumKind::Fletcher4,
                ChecksumKind::Sha256,
                ChecksumKind::Blake3,
            ],
        ),
        compression: pick(
            rng,
            &[
                CompressSetting::Off,
                CompressSetting::Lz4,
                CompressSetting::Zstd(3),
                CompressSetting::Zle,
            ],
        ),
        copies: pick(rng, &[1, 1, 1, 2, 3]),
        metadata_extra_copies: pick(rng, &[0, 1, 1]),
        // Not drawn (the seeds keep the configs they had); `metadata_extra_copies` 0 covers
        // metadata without extra copies.
        redundant_metadata: tarn_objects::RedundantMetadata::All,
        // Drawn in `late_choices`, and only for a pool with a special vdev.
        special_small_blocks: 0,
    }
}

/// Within budget: each vdev gets at most as many faulty leaves as it tolerates (often exactly
/// that many). Beyond: one vdev gets more than it tolerates, the others stay within.
fn choose_faulty(rng: &mut SeededRng, tops: &mut [TopPlan], budget: Budget) {
    let quiet = budget == Budget::Within && rng.chance(1, 8);
    let victim = rng.below(tops.len() as u64) as usize;
    for (index, top) in tops.iter_mut().enumerate() {
        let tolerated = top.tolerated();
        let count = if budget == Budget::Beyond && index == victim {
            let extra = 1 + rng.below((top.leaves.len() - tolerated) as u64) as usize;
            tolerated + extra.min(if rng.chance(1, 2) { 1 } else { extra })
        } else if quiet {
            0
        } else if rng.chance(1, 2) {
            tolerated
        } else {
            rng.below(tolerated as u64 + 1) as usize
        };
        let mut candidates = top.leaves.clone();
        for _ in 0..count {
            let at = rng.below(candidates.len() as u64) as usize;
            top.faulty.push(candidates.remove(at));
        }
        top.faulty.sort_unstable();
        assert!(
            budget == Budget::Beyond || top.faulty.len() <= tolerated,
            "within budget: {} faulty leaves > {tolerated} tolerated",
            top.faulty.len()
        );
    }
}

/// Every device drops or tears unflushed writes at a crash at the run's rates; faulty ones
/// also inject faults; some are slow (virtual latency).
fn device_plans(
    rng: &mut SeededRng,
    seed: u64,
    tops: &[TopPlan],
    count: usize,
    budget: Budget,
) -> Vec<FaultPlan> {
    let drop_on_crash = pick(rng, &[0, PER_MILLION / 2, PER_MILLION]);
    let torn_on_crash = pick(rng, &[0, PER_MILLION / 4, PER_MILLION / 2]);
    let faulty: Vec<usize> = tops.iter().flat_map(|t| t.faulty.iter().copied()).collect();
    (0..count)
        .map(|index| {
            let device_seed = seed.rotate_left(17) ^ (index as u64).wrapping_mul(0x9E37_79B9);
            let mut plan = if faulty.contains(&index) {
                faulty_plan(rng, device_seed, budget == Budget::Beyond)
            } else {
                FaultPlan::seeded(device_seed)
            };
            plan.drop_on_crash = drop_on_crash;
            plan.torn_on_crash = torn_on_crash;
            if rng.chance(1, 4) {
                plan.latency_ns = 100_000 + rng.below(20_000_000);
                plan.latency_jitter_ns = rng.below(5_000_000);
            }
            plan
        })
        .collect()
}

/// The choices added after the first configurations (POSIX workload, healing, fsync), drawn
/// after every earlier one so that a seed keeps the configuration it had.
fn late_choices(rng: &mut SeededRng, config: &mut Config) {
    config.fs_file_max = (64 << 10) << rng.below(3);
    config.fs_entries_max = 8 + rng.below(17) as usize;
    fs_weights(rng, &mut config.weights);
    config.fs_names = 8;
    if rng.chance(1, 4) {
        config.fs_names = 48;
        config.fs_entries_max = 32 + rng.below(33) as usize;
    }
    config.fs_name_pad = pick(rng, &[0, 0, 40, 200]);
    // Drawn after the POSIX choices for the same reason.
    config.weights.heal = if rng.chance(1, 4) {
        0
    } else {
        1 + rng.below(4)
    };
    // Beyond budget a replay may end early, which the model does not predict.
    let fsync = if rng.chance(1, 4) {
        0
    } else {
        1 + rng.below(4)
    };
    config.weights.fs_fsync = if config.budget == Budget::Within {
        fsync
    } else {
        0
    };
    if rng.chance(1, 3) {
        for _ in 0..1 + rng.below(2) {
            let index = config.paths.len();
            config.paths.push(format!("{DEVICE_DIR}/c{index}"));
            let device_seed = config.seed.rotate_left(29) ^ index as u64;
            let mut plan = faulty_plan(rng, device_seed, true);
            plan.drop_on_crash = config.plans[0].drop_on_crash;
            plan.torn_on_crash = config.plans[0].torn_on_crash;
            config.plans.push(plan);
            config.caches.push(index);
        }
    }
    config.primarycache = pick(
        rng,
        &[CachePolicy::All, CachePolicy::Metadata, CachePolicy::None],
    );
    // Drawn after the rest: one pool in four with two or more tops makes its last one special.
    if config.tops.len() > 1 && rng.chance(1, 4) {
        config.tops.last_mut().expect("more than one top").special = true;
        config.write_config.special_small_blocks = pick(rng, &[0, 512, 4096, 32768]);
    }
    // Block cloning came later still: one seed in eight leaves it out (swarm testing).
    config.weights.fs_clone = if rng.chance(1, 8) {
        0
    } else {
        1 + rng.below(4)
    };
}

fn weights(rng: &mut SeededRng, tops: &[TopPlan]) -> Weights {
    let any_faulty = tops.iter().any(|t| !t.faulty.is_empty());
    let mut w = |max: u64| 1 + rng.below(max);
    Weights {
        create: w(4),
        write: w(30),
        overwrite: w(10),
        punch: w(6),
        read: w(10),
        sync: w(8),
        export_import: w(2),
        crash: w(3),
        rename_import: w(2),
        rot: if any_faulty { w(4) } else { 0 },
        vanish: if any_faulty { w(2) } else { 0 },
        dataset: w(3),
        ..Weights::default()
    }
}

/// Weights of the POSIX workload: a seed may leave some operations out (swarm testing), but
/// never creation and writes.
fn fs_weights(rng: &mut SeededRng, weights: &mut Weights) {
    let mut w = |max: u64| {
        if rng.chance(1, 8) {
            0
        } else {
            1 + rng.below(max)
        }
    };
    weights.fs_create = 1 + w(4);
    weights.fs_mkdir = w(3);
    weights.fs_symlink = w(2);
    weights.fs_write = 1 + w(20);
    weights.fs_truncate = w(4);
    weights.fs_punch = w(4);
    weights.fs_rename = w(4);
    weights.fs_link = w(3);
    weights.fs_unlink = w(3);
    weights.fs_rmdir = w(2);
    weights.fs_xattr = w(4);
    weights.fs_read = w(8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_budget_never_exceeds_what_a_vdev_tolerates() {
        // Goal: the budget accounting holds for every seed's topology. Method: many seeds,
        // both budgets; beyond means exactly one vdev is over its tolerance.
        for seed in 0..2000 {
            let within = Config::from_seed(seed, Some(Budget::Within));
            assert!(
                within.tops.iter().all(|t| t.faulty.len() <= t.tolerated()),
                "seed {seed}"
            );
            let beyond = Config::from_seed(seed, Some(Budget::Beyond));
            let over = beyond
                .tops
                .iter()
                .filter(|t| t.faulty.len() > t.tolerated())
                .count();
            assert_eq!(over, 1, "seed {seed}: {}", beyond.describe());
            assert!(
                within.tops.len() as u64 <= TOPS_MAX && within.spares.len() as u64 <= SPARES_MAX
            );
        }
    }

    #[test]
    fn same_seed_same_config() {
        let a = Config::from_seed(77, None);
        let b = Config::from_seed(77, None);
        assert_eq!(a.describe(), b.describe());
        assert_eq!(a.plans, b.plans);
        assert_ne!(Config::from_seed(78, None).plans, a.plans);
    }
}
