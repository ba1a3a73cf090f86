//! A receive that does not fit: a stream larger than the destination pool, or than a quota
//! above the destination, fails with `out of space` (`disk quota exceeded`) before a txg
//! runs out of space (tarn-engine `receive_pipe`, I4), the partial receive is undone, and
//! the pool stays online and writable with its space as before. It used to be applied
//! unchecked: the txg that found no room suspended the pool.
//!
//! Method: host A sends a 64 MiB volume of noise (1 MiB pieces, 128K blocks); host B
//! receives it into a pool of two 64 MiB devices (a mirror, less its slop: less than the
//! stream), and host C into a dataset under a 16 MiB quota. After each refusal: the pool's
//! state, its `freeing` back to next to nothing through the txg timer's syncs alone (they
//! used to stop while only deferred frees were left, so a destroy's space stayed
//! `freeing` on an idle pool), the space of its datasets against before, a write that
//! still goes through, and a check of every block.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::replica::{host_of_size as host, into, receive, volume_stream};
use common::volume::noise;
use common::{dataset_bytes, dataset_exists as exists};
use tarn_engine::{Engine, VolumeSpec, check};

const MIB: usize = 64;

/// The stream of `tank/v@s`: a sparse volume of [`MIB`] MiB of noise in 128K blocks.
fn stream() -> Vec<u8> {
    volume_stream(MIB, |i| noise(1 << 20, 500 + i as u64))
}

/// After a refused receive: the pool online, `name` gone, its space allocatable again after
/// a few txgs of the timer, `used` of `parent` back to `before`, a new volume still
/// written, and every block checked.
fn still_fine(engine: &Engine, name: &str, parent: &str, before: u64) {
    assert_eq!(engine.status("tank").unwrap().state, "ONLINE");
    assert!(!exists(engine, name), "the partial receive {name} is gone");
    // The txg timer alone (no other change) brings the undone receive's space back.
    for _ in 0..4 {
        engine.sync_all();
    }
    let freeing = &engine.get_props("tank", &["freeing".into()]).unwrap()[0].value;
    // What is left is the last txgs' own rewritten metadata (txg::FREEING_SYNC, 1 MiB).
    assert!(
        freeing.parse::<u64>().unwrap() < 1 << 20,
        "freeing {freeing}"
    );
    assert_eq!(
        dataset_bytes(engine, parent, "used"),
        before,
        "{parent}: space as before"
    );
    let spec = VolumeSpec {
        size: "1M".into(),
        block_size: None,
        sparse: true,
    };
    let none: &[(String, String)] = &[];
    engine
        .create_volume("tank/after", &spec, none, false, "create")
        .unwrap();
    let stat = engine.volume_stat("tank/after").unwrap();
    engine
        .volume_write(&stat.pool, stat.dataset, 0, &noise(1 << 20, 9), false)
        .unwrap();
    engine.sync_pool("tank").unwrap();
    check::verify_pool(engine, "tank").unwrap();
}

#[test]
fn a_receive_larger_than_the_pool_is_refused_and_the_pool_stays_online() {
    let bytes = stream();
    let (_sims, b) = host(4, 64 << 20);
    let before = dataset_bytes(&b, "tank", "used");
    let refused = receive(&b, into("tank/v"), &bytes).unwrap_err();
    assert!(refused.contains("out of space"), "{refused}");
    still_fine(&b, "tank/v", "tank", before);
}

#[test]
fn a_receive_past_a_quota_is_refused_and_nothing_stays() {
    let bytes = stream();
    let (_sims, c) = host(5, 128 << 20);
    let none: &[(String, String)] = &[];
    c.create_dataset("tank/q", none, false, "create").unwrap();
    let quota = [("quota".to_string(), "16M".to_string())];
    c.set_dataset_props("tank/q", &quota, "set").unwrap();
    let before = dataset_bytes(&c, "tank/q", "used");
    let refused = receive(&c, into("tank/q/v"), &bytes).unwrap_err();
    assert!(refused.contains("disk quota exceeded"), "{refused}");
    still_fine(&c, "tank/q/v", "tank/q", before);
}
