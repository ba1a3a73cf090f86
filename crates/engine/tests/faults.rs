//! Goal: within the fault budget, faults cost nothing. A raidz2 pool on six simulated devices,
//! two of which inject every kind of fault (read EIO, lost writes, misdirected writes, bit rot
//! on write, rot at rest), runs a random workload of object writes, overwrites and punches
//! against an in-memory model, with syncs, export/import and power cuts at random points.
//! Method: after every step that reads, the bytes must equal the model exactly; any error is
//! a failure, because two faulty devices never exceed raidz2's parity.

// Helpers outside `#[test]` functions fail the test on any error, exactly like the tests.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{Host, PLAIN, crash_all, import_tank, sim_devices_with};
use tarn_base::{ObjectId, SeededRng};
use tarn_device::FaultPlan;
use tarn_engine::{CreateSpec, Engine, ImportOptions, SimProvider, TopLayout};

const DEVICES: usize = 6;
const OBJECT_SIZE: u64 = 4 << 20;

fn faulty_plan(seed: u64) -> FaultPlan {
    FaultPlan {
        seed,
        read_eio: 20_000,
        lost_write: 10_000,
        misdirected_write: 2_000,
        bitrot_on_write: 10_000,
        ..crash_plan(seed)
    }
}

/// Every device, faulty or not, loses or tears unflushed writes when the power goes.
fn crash_plan(seed: u64) -> FaultPlan {
    FaultPlan {
        seed,
        drop_on_crash: 500_000,
        torn_on_crash: 250_000,
        ..FaultPlan::default()
    }
}

/// Host 1 ("sim"); every engine of a run takes its seed from the run's generator.
const HOST: Host = Host {
    hostid: 1,
    hostname: "sim",
    ..PLAIN
};

struct Run {
    rng: SeededRng,
    provider: Arc<SimProvider>,
    engine: Engine,
    model: BTreeMap<ObjectId, Vec<u8>>,
    committed: BTreeMap<ObjectId, Vec<u8>>,
    faulty: Vec<String>,
}

impl Run {
    fn new(seed: u64) -> Run {
        let mut rng = SeededRng::new(seed);
        let provider = Arc::new(SimProvider::new());
        let first = rng.below(DEVICES as u64) as usize;
        let second = (first + 1 + rng.below(DEVICES as u64 - 1) as usize) % DEVICES;
        let names = sim_devices_with(&provider, "d", 0..DEVICES, 256 << 20, |i| {
            if i == first || i == second {
                faulty_plan(seed ^ i as u64)
            } else {
                crash_plan(seed ^ i as u64)
            }
        });
        let faulty = vec![names[first].clone(), names[second].clone()];
        let spec = CreateSpec {
            ashift: 9 + rng.below(4) as u8,
            ..CreateSpec::one_top("tank", TopLayout::Raidz(2), names)
        };
        let engine = Host { seed, ..HOST }.create_tank(&provider, &spec, &[]);
        Run {
            rng,
            provider,
            engine,
            model: BTreeMap::new(),
            committed: BTreeMap::new(),
            faulty,
        }
    }

    fn check_object(&self, id: ObjectId) {
        let expected = &self.model[&id];
        let mut actual = vec![0u8; expected.len()];
        self.engine
            .object_read("tank", id, 0, &mut actual)
            .expect("read within budget");
        assert!(&actual == expected, "object {id:?} differs from the model");
    }

    fn step(&mut self) {
        match self.rng.below(10) {
            0 if self.model.len() < 6 => {
                let block = 512u32 << self.rng.below(9);
                let id = self
                    .engine
                    .object_create("tank", block)
                    .expect("create object");
                self.model.insert(id, vec![0u8; OBJECT_SIZE as usize]);
            }
            1..=5 if !self.model.is_empty() => {
                let id = *self
                    .model
                    .keys()
                    .nth(self.rng.below(self.model.len() as u64) as usize)
                    .unwrap();
                let offset = self.rng.below(OBJECT_SIZE - 1);
                let len = (1 + self.rng.below(300_000)).min(OBJECT_SIZE - offset) as usize;
                let mut data = vec![0u8; len];
                if self.rng.chance(3, 4) {
                    self.rng.fill(&mut data);
                }
                self.engine
                    .object_write("tank", id, offset, &data)
                    .expect("write within budget");
                self.model.get_mut(&id).unwrap()[offset as usize..offset as usize + len]
                    .copy_from_slice(&data);
            }
            6 => {
                self.engine.sync_pool("tank").expect("sync within budget");
                self.committed = self.model.clone();
            }
            7 if !self.model.is_empty() => {
                let id = *self
                    .model
                    .keys()
                    .nth(self.rng.below(self.model.len() as u64) as usize)
                    .unwrap();
                self.check_object(id);
            }
            8 => {
                self.engine
                    .export_pool("tank", false)
                    .expect("export within budget");
                self.committed = self.model.clone();
                self.reimport();
            }
            9 => {
                // Power cut: whatever was not committed is gone, from the model too.
                self.engine = self.next_engine();
                crash_all(&self.provider);
                self.model = self.committed.clone();
                self.reimport();
            }
            _ => {}
        }
    }

    /// A new engine (nothing imported) whose seed is the run generator's next number.
    fn next_engine(&mut self) -> Engine {
        Host {
            seed: self.rng.next_u64(),
            ..HOST
        }
        .engine(&self.provider)
    }

    fn reimport(&mut self) {
        self.engine = self.next_engine();
        import_tank(&self.engine, &ImportOptions::default()).expect("import within budget");
        for id in self.model.keys().copied().collect::<Vec<_>>() {
            self.check_object(id);
        }
    }
}

#[test]
fn faults_within_parity_cost_nothing() {
    for seed in 0..10u64 {
        let mut run = Run::new(seed);
        for _ in 0..60 {
            run.step();
        }
        // Verification phase without new faults: every object equals the model.
        for name in &run.faulty {
            run.provider.get(name).unwrap().set_plan(crash_plan(seed));
        }
        run.engine.sync_pool("tank").unwrap();
        for id in run.model.keys().copied().collect::<Vec<_>>() {
            run.check_object(id);
        }
        let injected: u64 = run
            .faulty
            .iter()
            .map(|name| {
                let stats = run.provider.get(name).unwrap().stats();
                stats.injected_read_eio + stats.lost_writes + stats.bitrot_writes
            })
            .sum();
        assert!(
            injected > 0,
            "seed {seed}: the faulty devices injected nothing"
        );
    }
}

/// Goal: beyond the fault budget, the loss is reported and wrong bytes are never returned.
/// Method: rot many sectors at rest on three devices of a raidz2 (one more than parity), then
/// import and read everything: each read either fails with an error or returns exactly the
/// model's bytes; nothing panics.
#[test]
fn beyond_parity_never_returns_wrong_bytes() {
    let mut errors_seen = 0;
    for seed in 0..6u64 {
        let mut run = Run::new(seed);
        for _ in 0..3 {
            let id = run.engine.object_create("tank", 16 << 10).unwrap();
            let mut data = vec![0u8; OBJECT_SIZE as usize];
            run.rng.fill(&mut data);
            run.engine.object_write("tank", id, 0, &data).unwrap();
            run.model.insert(id, data);
        }
        run.engine.export_pool("tank", false).unwrap();
        for name in run.faulty.clone() {
            run.provider
                .get(&name)
                .unwrap()
                .set_plan(FaultPlan::default());
        }
        let victims: Vec<String> = (0..3)
            .map(|i| format!("/sim/d{}", (seed as usize + i) % DEVICES))
            .collect();
        for name in &victims {
            run.provider.get(name).unwrap().rot_random(4000);
        }
        let Ok(engine) = Host { seed, ..HOST }.import(&run.provider, &ImportOptions::default())
        else {
            errors_seen += 1;
            continue;
        };
        for (id, expected) in &run.model {
            for chunk in 0..(OBJECT_SIZE / (256 << 10)) {
                let offset = chunk * (256 << 10);
                let mut actual = vec![0u8; 256 << 10];
                match engine.object_read("tank", *id, offset, &mut actual) {
                    Ok(()) => assert!(
                        actual[..] == expected[offset as usize..offset as usize + actual.len()],
                        "seed {seed}: wrong bytes returned for object {id:?} at {offset}"
                    ),
                    Err(_) => errors_seen += 1,
                }
            }
        }
    }
    assert!(
        errors_seen > 0,
        "three rotten devices of a raidz2 should cost some data"
    );
}
