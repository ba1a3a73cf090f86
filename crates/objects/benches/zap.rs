//! ZAP micro-benchmarks: the directory operations of the metadata path (a lookup of a name
//! that exists, of one that does not, and an insert followed by its removal) in a fat ZAP of
//! 10,000 entries, clean (read through the block cache after a sync) and dirty (changed
//! since the last sync, read from the dirty buffers), over the in-memory store of the
//! `testing` feature. Per-operation times; a summary in ns/op is printed at the end.

use std::time::{Duration, Instant};

use criterion::{Criterion, black_box};
use tarn_base::ObjectId;
use tarn_objects::testing::MemStore;
use tarn_objects::{ObjectSet, ObjsetKind};

const ENTRIES: u64 = 10_000;

/// A set with one ZAP of `ENTRIES` names `file-NNNNNN`, synced when `clean`.
fn directory(clean: bool) -> (MemStore, ObjectSet, ObjectId) {
    let mut store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set.zap_create(&store, 20).expect("create");
    for i in 0..ENTRIES {
        set.zap_insert_u64(&store, id, format!("file-{i:06}"), i)
            .expect("insert");
    }
    if clean {
        let root = set.sync(&mut store).expect("sync");
        store.next_txg();
        set = ObjectSet::open(&store, &root).expect("open");
    }
    (store, set, id)
}

fn names() -> Vec<String> {
    (0..ENTRIES).map(|i| format!("file-{i:06}")).collect()
}

#[allow(clippy::disallowed_methods)] // A benchmark measures real time by definition.
fn bench(c: &mut Criterion, summary: &mut Vec<(String, f64)>) {
    for clean in [true, false] {
        let state = if clean { "clean" } else { "dirty" };
        let (store, mut set, id) = directory(clean);
        let present = names();
        let absent: Vec<String> = (0..ENTRIES).map(|i| format!("none-{i:06}")).collect();
        let mut next = 0usize;
        let mut group = c.benchmark_group(format!("zap/{state}"));
        group.measurement_time(Duration::from_secs(2));
        group.warm_up_time(Duration::from_millis(500));
        group.bench_function("lookup present", |b| {
            b.iter(|| {
                next = (next + 7919) % present.len();
                black_box(set.zap_lookup(&store, id, &present[next]).expect("lookup"))
            });
        });
        group.bench_function("lookup absent", |b| {
            b.iter(|| {
                next = (next + 7919) % absent.len();
                black_box(set.zap_lookup(&store, id, &absent[next]).expect("lookup"))
            });
        });
        group.bench_function("insert + remove", |b| {
            b.iter(|| {
                next = (next + 7919) % absent.len();
                set.zap_insert_u64(&store, id, &absent[next], 1)
                    .expect("insert");
                set.zap_remove(&store, id, &absent[next]).expect("remove");
            });
        });
        group.finish();
        for (what, keys) in [("lookup present", &present), ("lookup absent", &absent)] {
            let start = Instant::now();
            for key in keys {
                black_box(set.zap_lookup(&store, id, key).expect("lookup"));
            }
            let per = start.elapsed().as_nanos() as f64 / keys.len() as f64;
            summary.push((format!("{state} {what}"), per));
        }
        let start = Instant::now();
        for key in &absent {
            set.zap_insert_u64(&store, id, key, 1).expect("insert");
            set.zap_remove(&store, id, key).expect("remove");
        }
        let per = start.elapsed().as_nanos() as f64 / absent.len() as f64;
        summary.push((format!("{state} insert + remove"), per));
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let mut summary = Vec::new();
    bench(&mut criterion, &mut summary);
    criterion.final_summary();
    println!("ZAP of {ENTRIES} entries, ns per operation (one pass over every key):");
    for (what, ns) in summary {
        println!("  {what:<28} {ns:>10.0}");
    }
}
