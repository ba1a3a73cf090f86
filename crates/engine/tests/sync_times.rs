//! `Engine::sync_times` (the daemon's txg and intent-log metrics): every txg adds one write
//! phase and one commit phase, every `fsync` with records pending adds one intent-log
//! commit (counted as served by a txg when the dataset had no log chain yet), and an
//! `fsync` with nothing pending adds none.
//!
//! Method: a raidz1 of simulated devices; counts read before and after each step.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::sync::Arc;

use tarn_engine::posix::{Creds, FileKind};
use tarn_engine::{Engine, FsOp, SyncTimes, TopLayout};
use tarn_pool::{CreateSpec, SimProvider};

mod common;
use common::{PLAIN, sim_devices};

fn counts(times: &SyncTimes) -> [u64; 4] {
    [
        times.write.count(),
        times.commit.count(),
        times.log_commits.count(),
        times.log_commits_by_txg,
    ]
}

#[test]
fn txg_phases_and_intent_log_commits_are_counted() {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..3, 256 << 20);
    let spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), names);
    let engine: Engine = PLAIN.create_tank(&provider, &spec, &[]);
    engine.create_dataset("tank/a", &[], false, "c").unwrap();
    let (pool, id) = engine.find_dataset("tank/a").unwrap();
    let now = |engine: &Engine| counts(&engine.sync_times("tank").unwrap());

    let before = now(&engine);
    engine.sync_pool("tank").unwrap();
    let after = now(&engine);
    assert_eq!(
        [after[0] - before[0], after[1] - before[1]],
        [1, 1],
        "one txg"
    );

    let write = |at: u64| {
        engine
            .fs_op(&pool, id, FsOp::Write(4096), |fs| {
                let root = fs.root()?;
                let name = format!("f{at}");
                let creds = Creds::default();
                let f = fs.mknod(root, name.as_bytes(), FileKind::Regular, 0o644, 0, creds)?;
                fs.write(f.ino, 0, &[1u8; 4096])
            })
            .unwrap();
    };
    let before = now(&engine);
    for at in 0..3 {
        write(at);
        engine.fs_sync(&pool, id).unwrap();
    }
    engine.fs_sync(&pool, id).unwrap();
    let after = now(&engine);
    assert_eq!(
        after[2] - before[2],
        3,
        "three fsyncs had records; the fourth none"
    );
    assert!(after[3] - before[3] <= 3, "{before:?} {after:?}");
    assert!(engine.sync_times("nope").is_err());
}
