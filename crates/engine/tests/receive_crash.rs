//! A replication receive (`receive -R`) cut by a power cut: the hidden datasets it was
//! filling (`receive_atomic`) are never listed, and the next import destroys them by itself
//! (none has a resume token), so the receiver is exactly as it was before the stream:
//! every dataset and snapshot with its GUID and space figures, the bytes of every volume,
//! and the blocks of every dataset's object sets; and no partial state is left to abort.
//!
//! Method: host A's tree `tank/p` (volumes `k` and `gone`) is received by host B as `tank/q`
//! (`send -R` of `@a`); A then destroys `p@z` and `p/gone`, renames `k@z`, writes to `k`
//! and a file into `p`, makes the volume `p/n` and takes `@b` everywhere; the stream is
//! `send -R -i @a p@b`, whose substreams are an incremental of `p` and of `k` (each into a
//! hidden clone) and a full one of `n` (into a hidden dataset), all held until the
//! stream's end. B's devices sit behind `common::CutProvider`: for k = 0, 1, 2, ... the
//! power goes after k device writes or flushes of the receive (every later one fails, then
//! each device drops or tears what it had not flushed), a new engine imports B, and B must
//! be as before; from the k at which the final txg reached the disks, B must hold the
//! stream's result instead, and the loop ends.
//!
//! The first, full `send -R` of `@z` and `@a` (each dataset's `@a` on top of its held hidden
//! dataset, the volumes below the hidden `q`) is cut the same way: B stays as it was (an
//! empty pool) until the final txg, then holds the whole tree.
//!
//! And `send -R -I @a p@c` onto B's `tank/q` (`-R` of `@a`), with `cl`, a clone of the
//! intermediate `k@b` made since: each existing dataset's `@b` and `@c` go into its hidden
//! clone, `cl` into a hidden clone of the hidden `k@b`, and at the end each existing dataset
//! adopts its hidden clone with its snapshots, in one txg. Cut the same way, B is as it was
//! until that txg, then holds A's tree, whole.
//!
//! Also: a resumed `receive -s` cut by a power cut after some of its records were committed
//! applies them again from the older saved token, with a byte-identical result.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;

use common::replica::{
    TankState as State, forced, full, host, incremental, into, receive, replicate, send,
    tank_state, write_file,
};
use common::volume::{noise, read, volume, write};
use common::{CutProvider, Host, PLAIN, crash_all, sim_devices_with};
use tarn_device::FaultPlan;
use tarn_engine::{CreateSpec, Engine, ImportOptions, ReceiveSpec, TopLayout, check};

const B: Host = Host {
    hostid: 8,
    seed: 77,
    ..PLAIN
};

/// Host B: pool `tank` (failmode continue) on a mirror of two devices behind a cut, whose
/// unflushed writes are dropped or torn at a crash.
fn host_b() -> (Arc<CutProvider>, Engine) {
    let provider = Arc::new(CutProvider::default());
    let names = sim_devices_with(&provider.sims, "d", 0..2, 128 << 20, |i| FaultPlan {
        seed: 500 + i as u64,
        drop_on_crash: 500_000,
        torn_on_crash: 300_000,
        ..FaultPlan::default()
    });
    let spec = CreateSpec::one_top("tank", TopLayout::Mirror, names);
    let engine = B.create_tank(&provider, &spec, &[("failmode", "continue")]);
    (provider, engine)
}

/// A's tree after `@a` was sent, moved on to `@b` (module doc); returns A, the first
/// stream (`-R` of `@a`) and the second (`-R -i @a` of `@b`).
fn sender() -> (Engine, Vec<u8>, Vec<u8>) {
    let (_, a) = host(7);
    a.create_dataset("tank/p", &[], false, "create").unwrap();
    volume(&a, "tank/p/k");
    volume(&a, "tank/p/gone");
    write(&a, "tank/p/k", 0, &noise(256 << 10, 1));
    write(&a, "tank/p/gone", 0, &noise(64 << 10, 2));
    common::volume::snap_all(&a, "tank/p@z");
    write(&a, "tank/p/k", 64 << 10, &noise(64 << 10, 3));
    common::volume::snap_all(&a, "tank/p@a");
    let first = send(&a, replicate(full("tank/p@a")));
    a.destroy_snapshots("tank/p@z", false, false, "destroy")
        .unwrap();
    a.destroy_dataset("tank/p/gone", true, "destroy -r")
        .unwrap();
    a.rename_dataset("tank/p/k@z", "tank/p/k@zz", "rename")
        .unwrap();
    write(&a, "tank/p/k", 512 << 10, &noise(128 << 10, 4));
    write_file(&a, "tank/p", b"f", &noise(96 << 10, 6));
    volume(&a, "tank/p/n");
    write(&a, "tank/p/n", 0, &noise(96 << 10, 5));
    common::volume::snap_all(&a, "tank/p@b");
    let second = send(&a, replicate(incremental("@a", "tank/p@b")));
    (a, first, second)
}

/// What B is (`TankState`), with each dataset's and snapshot's GUID and space figures.
fn state(engine: &Engine) -> State {
    tank_state(
        engine,
        &[
            "name",
            "type",
            "guid",
            "used",
            "referenced",
            "usedbysnapshots",
            "usedbydataset",
            "usedbychildren",
            "written",
        ],
    )
}

/// Names of the datasets and snapshots listed under `tank`.
fn names(state: &State) -> Vec<&str> {
    state.rows.iter().map(|row| row[0].as_str()).collect()
}

/// Power cut and a new engine importing B's devices as they were at the cut.
fn crash_and_import(provider: &Arc<CutProvider>) -> Engine {
    crash_all(&provider.sims);
    *provider.cut.0.lock().unwrap() = None;
    B.import(provider, &ImportOptions::default()).unwrap()
}

/// A power cut after k device operations of a receive into B, for k = 0, 1, ... below
/// `limit`: after each, B is imported again, its pool checks clean and none of `targets`
/// has a partial receive to abort. While B lists the names it had before, the receive did
/// not return and `unchanged` holds; the first time it does not, the final txg is durable:
/// `whole` holds, and more than `min_before` cuts came before it.
struct PowerCuts<'a> {
    targets: &'a [&'a str],
    limit: u64,
    min_before: u64,
}

impl PowerCuts<'_> {
    /// `attempt` runs the receive on B and says whether it returned; `unchanged` and
    /// `whole` get B, its state now and k.
    fn run(
        &self,
        provider: &Arc<CutProvider>,
        mut b: Engine,
        mut attempt: impl FnMut(&Engine) -> bool,
        unchanged: impl Fn(&Engine, &State, u64),
        whole: impl Fn(&Engine, &State, u64),
    ) {
        let before: Vec<String> = names(&state(&b)).into_iter().map(str::to_owned).collect();
        let mut cut_before = 0;
        for k in 0..self.limit {
            *provider.cut.0.lock().unwrap() = Some(k);
            let returned = attempt(&b);
            drop(b);
            b = crash_and_import(provider);
            check::verify_pool(&b, "tank").unwrap_or_else(|e| panic!("k={k}: {e}"));
            for target in self.targets {
                let abort = b.receive_abort(target).unwrap_err().to_string();
                assert!(
                    abort.contains("does not have any resumable"),
                    "k={k}: {abort}"
                );
            }
            let now = state(&b);
            if names(&now) == before {
                unchanged(&b, &now, k);
                assert!(!returned, "k={k}: a receive that returned is durable");
                cut_before += 1;
                continue;
            }
            whole(&b, &now, k);
            assert!(
                cut_before > self.min_before,
                "cuts before the end: {cut_before}"
            );
            return;
        }
        panic!("the receive never completed");
    }
}

// DESCRIPTION: a power cut after k device operations of a `receive -R -F`, for every k,
// leaves B after import exactly as before the stream (module doc), with no partial receive
// to abort and a clean pool; once the final txg is durable, B holds the sender's tree.
#[test]
fn a_power_cut_at_any_instant_of_an_atomic_r_receive_leaves_nothing_behind() {
    let (a, first, second) = sender();
    let (provider, b) = host_b();
    receive(&b, into("tank/q"), &first).unwrap();
    let before = state(&b);
    assert_eq!(names(&before).len(), 10, "{:?}", names(&before));
    let spec: ReceiveSpec = forced(into("tank/q"));
    let cuts = PowerCuts {
        targets: &["tank/q", "tank/q/k", "tank/q/n", "tank/q/gone"],
        limit: 3_000,
        min_before: 20,
    };
    cuts.run(
        &provider,
        b,
        |b| receive(b, spec.clone(), &second).is_ok(),
        |_, now, k| {
            for (row, was) in now.rows.iter().zip(&before.rows) {
                assert_eq!(row, was, "k={k}");
            }
            assert_eq!(now.volumes, before.volumes, "k={k}");
            assert_eq!(now.data_blocks, before.data_blocks, "k={k}");
        },
        |b, now, k| {
            // The final txg reached the disks: the sender's tree, whole.
            assert_eq!(
                names(now),
                [
                    "tank",
                    "tank/q",
                    "tank/q@a",
                    "tank/q@b",
                    "tank/q/k",
                    "tank/q/k@zz",
                    "tank/q/k@a",
                    "tank/q/k@b",
                    "tank/q/n",
                    "tank/q/n@b",
                ],
                "k={k}"
            );
            assert!(read(b, "tank/q/k") == read(&a, "tank/p/k"), "k={k}");
            assert!(read(b, "tank/q/n") == read(&a, "tank/p/n"), "k={k}");
        },
    );
}

// DESCRIPTION: a power cut after k device operations of the first, full `receive -R` of A's
// tree (each dataset's `@a` received on top of its held hidden dataset, `k` and `gone`
// below the hidden `q`: `receive_atomic`), for every k, leaves B after import exactly as
// before the stream (rows with GUIDs and space, every block's DVA) with no hidden dataset
// left to abort and a clean pool; once the final txg is durable, the sender's tree, whole.
// Fails on main: there `q@a` made what was held take its place early.
#[test]
fn a_power_cut_at_any_instant_of_a_full_r_receive_leaves_nothing_behind() {
    let (a, first, _) = sender();
    let result = [
        "tank",
        "tank/q",
        "tank/q@z",
        "tank/q@a",
        "tank/q/gone",
        "tank/q/gone@z",
        "tank/q/gone@a",
        "tank/q/k",
        "tank/q/k@z",
        "tank/q/k@a",
    ];
    let (provider, b) = host_b();
    let before = state(&b);
    let cuts = PowerCuts {
        targets: &["tank/q", "tank/q/k", "tank/q/gone"],
        limit: 3_000,
        min_before: 20,
    };
    cuts.run(
        &provider,
        b,
        |b| receive(b, into("tank/q"), &first).is_ok(),
        |_, now, k| {
            for (row, was) in now.rows.iter().zip(&before.rows) {
                assert_eq!(row, was, "k={k}");
            }
            assert_eq!(now.data_blocks, before.data_blocks, "k={k}");
        },
        |b, now, k| {
            assert_eq!(names(now), result, "k={k}");
            for name in ["tank/p@a", "tank/p/k@a"] {
                let here = name.replace("tank/p", "tank/q");
                assert_eq!(
                    common::dataset_prop(b, &here, "guid"),
                    common::dataset_prop(&a, name, "guid"),
                    "k={k}"
                );
            }
        },
    );
}

/// A's `tank/p` (a filesystem with a file) and its volume `k` at `@a`; then writes, `@b`,
/// the clone `cl` of `k@b` with writes, writes, `@c`. Returns A, `send -R p@a` and `send -R
/// -I @a p@c`.
fn intermediate_sender() -> (Engine, Vec<u8>, Vec<u8>) {
    let (_, a) = host(9);
    a.create_dataset("tank/p", &[], false, "create").unwrap();
    volume(&a, "tank/p/k");
    write(&a, "tank/p/k", 0, &noise(256 << 10, 1));
    write_file(&a, "tank/p", b"f1", &noise(32 << 10, 2));
    common::volume::snap_all(&a, "tank/p@a");
    let first = send(&a, replicate(full("tank/p@a")));
    write(&a, "tank/p/k", 64 << 10, &noise(128 << 10, 3));
    common::volume::snap_all(&a, "tank/p@b");
    a.clone_dataset("tank/p/k@b", "tank/p/cl", &[], false, "clone")
        .unwrap();
    write(&a, "tank/p/cl", 0, &noise(64 << 10, 4));
    write(&a, "tank/p/k", 192 << 10, &noise(64 << 10, 5));
    write_file(&a, "tank/p", b"f2", &noise(48 << 10, 6));
    common::volume::snap_all(&a, "tank/p@c");
    let spec = tarn_engine::SendSpec {
        intermediates: true,
        ..replicate(incremental("@a", "tank/p@c"))
    };
    let second = send(&a, spec);
    (a, first, second)
}

// DESCRIPTION: a power cut after k device operations of `receive -R` of `send -R -I @a
// p@c` onto B's existing `tank/q` (each dataset's `@b` and `@c` on its hidden clone, a
// clone of the intermediate `k@b` on a hidden clone of it: `receive_atomic`), for every k,
// leaves B after import exactly as before the stream (rows with GUIDs and space, volume
// bytes, every block's DVA), nothing to abort, a clean pool; once the final txg is durable,
// A's tree whole (names, GUIDs and space of every dataset and snapshot, `cl` a clone of
// `q/k@b`). Fails before the `-R -I` atomicity: there `@b` of each dataset was placed
// before its `@c` came, so a cut between them left `@b`.
#[test]
fn a_power_cut_at_any_instant_of_an_intermediate_r_receive_leaves_old_or_new() {
    let (a, first, second) = intermediate_sender();
    let (provider, b) = host_b();
    receive(&b, into("tank/q"), &first).unwrap();
    let before = state(&b);
    let cuts = PowerCuts {
        targets: &["tank/q", "tank/q/k", "tank/q/cl"],
        limit: 5_000,
        min_before: 20,
    };
    cuts.run(
        &provider,
        b,
        |b| receive(b, into("tank/q"), &second).is_ok(),
        |_, now, k| assert_eq!(*now, before, "k={k}"),
        |b, now, k| {
            // The final txg reached the disks: the sender's tree, whole, with its space.
            let mut sent = state(&a);
            for row in &mut sent.rows {
                for value in row.iter_mut() {
                    *value = value.replace("tank/p", "tank/q");
                }
            }
            let (mut got, mut want) = (now.rows.clone(), sent.rows);
            for row in got.iter_mut().chain(want.iter_mut()) {
                // A dataset's own GUID is the receiver's; a snapshot's is the sender's.
                if !row[0].contains('@') {
                    row[2].clear();
                }
            }
            got.retain(|row| row[0] != "tank");
            want.retain(|row| row[0] != "tank");
            assert_eq!(got, want, "k={k}");
            assert_eq!(common::dataset_prop(b, "tank/q/cl", "origin"), "tank/q/k@b");
            assert!(read(b, "tank/q/k") == read(&a, "tank/p/k"), "k={k}");
            assert!(read(b, "tank/q/cl") == read(&a, "tank/p/cl"), "k={k}");
        },
    );
}

/// Bytes of the volume the plain incremental test sends: more than two receive batches of
/// 8 MiB, so that the receive commits txgs before its END.
const PLAIN_LEN: usize = 20 << 20;

/// The whole of the volume `name` (the plain incremental test's [`PLAIN_LEN`]).
fn read_all(engine: &Engine, name: &str) -> Vec<u8> {
    let stat = engine.volume_stat(name).unwrap();
    let mut buf = vec![0u8; PLAIN_LEN];
    engine
        .volume_read(&stat.pool, stat.dataset, 0, &mut buf)
        .unwrap();
    buf
}

/// A's volume `tank/v` (128K blocks): 1 MiB at `@a`, [`PLAIN_LEN`] less 1 MiB more at
/// `@b`; returns A, the full stream of `@a` and the plain incremental `-i @a` of `@b`.
fn plain_sender() -> (Engine, Vec<u8>, Vec<u8>) {
    let (_, a) = common::replica::host_of_size(7, 256 << 20);
    let spec = tarn_engine::VolumeSpec {
        size: format!("{PLAIN_LEN}"),
        block_size: Some("128K".into()),
        sparse: true,
    };
    let none: &[(String, String)] = &[];
    a.create_volume("tank/v", &spec, none, false, "create")
        .unwrap();
    write(&a, "tank/v", 0, &noise(1 << 20, 1));
    common::volume::snap(&a, "tank/v@a");
    let first = send(&a, full("tank/v@a"));
    write(&a, "tank/v", 1 << 20, &noise(PLAIN_LEN - (1 << 20), 2));
    common::volume::snap(&a, "tank/v@b");
    let second = send(&a, incremental("@a", "tank/v@b"));
    assert!(second.len() > 16 << 20, "{}", second.len());
    (a, first, second)
}

// DESCRIPTION: a power cut after k device operations of a plain incremental receive (`send
// -i @a v@b | receive w`, no -s, no -F), for every k, leaves B after import exactly at
// `w@a`: no block of the partial stream in the head (the receive commits txgs before its
// END: the progress callback syncs after each batch, as the daemon's syncer does while a
// long stream arrives), no partial state to abort, a clean pool; once the final txg is
// durable, `w@b` with A's bytes. Regression: the head kept the committed records of a cut
// receive, unlisted as partial and with no snapshot, so `w` held half a stream.
#[test]
fn a_power_cut_at_any_instant_of_a_plain_incremental_receive_leaves_the_head_at_its_source() {
    let (a, first, second) = plain_sender();
    let (provider, b) = host_b();
    receive(&b, into("tank/w"), &first).unwrap();
    let before = state(&b);
    let bytes_before = read_all(&b, "tank/w");
    let cuts = PowerCuts {
        targets: &["tank/w"],
        limit: 5_000,
        min_before: 100,
    };
    cuts.run(
        &provider,
        b,
        |b| {
            let mut input = &second[..];
            let mut sync = |_| drop(b.sync_pool("tank"));
            b.receive(&into("tank/w"), &mut input, &mut sync).is_ok()
        },
        |b, now, k| {
            assert_eq!(*now, before, "k={k}");
            assert!(read_all(b, "tank/w") == bytes_before, "k={k}");
        },
        |b, now, k| {
            assert_eq!(
                names(now),
                ["tank", "tank/w", "tank/w@a", "tank/w@b"],
                "k={k}"
            );
            assert!(read_all(b, "tank/w") == read_all(&a, "tank/v"), "k={k}");
        },
    );
}

/// `receive -s` of `bytes` into `tank/w` with a sync after each batch of records (as the
/// daemon's syncer commits while a long stream arrives).
fn receive_resumable(engine: &Engine, bytes: &[u8]) -> Result<(), String> {
    let spec = ReceiveSpec {
        resumable: true,
        ..into("tank/w")
    };
    let mut input = bytes;
    let mut sync = |_| drop(engine.sync_pool("tank"));
    engine
        .receive(&spec, &mut input, &mut sync)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The stream `send -t TOKEN` of A for `tank/w`'s saved partial receive on `engine`.
fn resumed(a: &Engine, engine: &Engine) -> (String, Vec<u8>) {
    let token = common::dataset_prop(engine, "tank/w", "receive_resume_token");
    assert_ne!(token, "-", "a partial receive is saved");
    let spec = tarn_engine::SendSpec {
        token: Some(token.clone()),
        ..tarn_engine::SendSpec::default()
    };
    (token, send(a, spec))
}

// DESCRIPTION: a resumed receive (`send -t TOKEN | receive -s`) cut by a power cut after k
// device operations, for sampled k, commits some of its records while the saved token
// still names where the first receive stopped (the token is written only when a receive
// stops by itself): the next resume from that older token applies those records again.
// That is harmless: each WRITE and FREE record sets the same bytes again, each OBJECT
// record describes the object as it is; finishing from the token gives `w@b` with A's
// bytes, a clean pool, and the same result as a resume that was never cut.
#[test]
fn a_power_cut_during_a_resumed_receive_reapplies_records_harmlessly() {
    let (a, first, second) = plain_sender();
    let mut older_than_data = 0;
    for k in [40u64, 120, 300, 700, 1500, 3000] {
        let (provider, b) = host_b();
        receive(&b, into("tank/w"), &first).unwrap();
        let cut = receive_resumable(&b, &second[..second.len() / 3]).unwrap_err();
        assert!(cut.contains("send -t"), "{cut}");
        let (token, rest) = resumed(&a, &b);
        let txg = check::committed_txg(&b, "tank").unwrap();
        *provider.cut.0.lock().unwrap() = Some(k);
        let outcome = receive_resumable(&b, &rest);
        drop(b);
        let b = crash_and_import(&provider);
        check::verify_pool(&b, "tank").unwrap_or_else(|e| panic!("k={k}: {e}"));
        if outcome.is_ok() && common::dataset_prop(&b, "tank/w", "receive_resume_token") == "-" {
            assert!(read_all(&b, "tank/w") == read_all(&a, "tank/v"), "k={k}");
            continue;
        }
        let (now, rest) = resumed(&a, &b);
        if now == token && check::committed_txg(&b, "tank").unwrap() > txg {
            older_than_data += 1;
        }
        receive_resumable(&b, &rest).unwrap_or_else(|e| panic!("k={k}: {e}"));
        assert_eq!(
            common::dataset_prop(&b, "tank/w", "receive_resume_token"),
            "-",
            "k={k}"
        );
        assert_eq!(
            common::dataset_prop(&b, "tank/w@b", "guid"),
            common::dataset_prop(&a, "tank/v@b", "guid"),
            "k={k}"
        );
        assert!(read_all(&b, "tank/w") == read_all(&a, "tank/v"), "k={k}");
        check::verify_pool(&b, "tank").unwrap_or_else(|e| panic!("k={k}: {e}"));
    }
    assert!(
        older_than_data >= 2,
        "cuts after records committed beyond the token: {older_than_data}"
    );
}

/// A's volume `tank/v` at `@a`, then overwrites and new blocks and one snapshot each for
/// `@b`, `@c`, `@d`; returns A, `send v@a` and the chain `send -I @a v@d` (FEATURE_CHAIN).
fn chain_sender() -> (Engine, Vec<u8>, Vec<u8>) {
    let (_, a) = host(13);
    volume(&a, "tank/v");
    write(&a, "tank/v", 0, &noise(384 << 10, 1));
    common::volume::snap(&a, "tank/v@a");
    let first = send(&a, full("tank/v@a"));
    for (i, name) in ["b", "c", "d"].into_iter().enumerate() {
        write(
            &a,
            "tank/v",
            i * (128 << 10),
            &noise(160 << 10, 2 + i as u64),
        );
        write(&a, "tank/v", (2 + i) << 20, &noise(96 << 10, 9 + i as u64));
        common::volume::snap(&a, &format!("tank/v@{name}"));
    }
    let spec = tarn_engine::SendSpec {
        intermediates: true,
        ..incremental("@a", "tank/v@d")
    };
    let chain = send(&a, spec);
    (a, first, chain)
}

// DESCRIPTION: a power cut after k device operations of a plain `receive` of a chain
// (`send -I @a v@d`, no -R: held in a hidden clone of `w@a`, `receive_atomic`), for every
// k, leaves B after import exactly as before the stream (rows with GUIDs and space, volume
// bytes, every block's DVA), nothing to abort, a clean pool; once the final txg is
// durable, `w@b`, `w@c`, `w@d` with A's GUIDs and A's bytes. Negative control: with the
// chain not held (each substream placed at its END), a cut between two ENDs leaves `w@b`.
#[test]
fn a_power_cut_at_any_instant_of_a_plain_chain_receive_leaves_old_or_new() {
    let (a, first, chain) = chain_sender();
    let (provider, b) = host_b();
    receive(&b, into("tank/w"), &first).unwrap();
    let before = state(&b);
    let cuts = PowerCuts {
        targets: &["tank/w"],
        limit: 5_000,
        min_before: 20,
    };
    cuts.run(
        &provider,
        b,
        |b| receive(b, into("tank/w"), &chain).is_ok(),
        |_, now, k| assert_eq!(*now, before, "k={k}"),
        |b, now, k| {
            let result = [
                "tank", "tank/w", "tank/w@a", "tank/w@b", "tank/w@c", "tank/w@d",
            ];
            assert_eq!(names(now), result, "k={k}");
            for snap in ["b", "c", "d"] {
                assert_eq!(
                    common::dataset_prop(b, &format!("tank/w@{snap}"), "guid"),
                    common::dataset_prop(&a, &format!("tank/v@{snap}"), "guid"),
                    "k={k}"
                );
            }
            assert!(read(b, "tank/w") == read(&a, "tank/v"), "k={k}");
        },
    );
}

// DESCRIPTION: a power cut after k device operations of a plain full receive into a new
// dataset (`send v@a | receive w`: received into the hidden `%w`, published at END), for
// every k, leaves B after import exactly as before (an empty pool: rows, space, every
// block's DVA), nothing to abort, a clean pool; once the final txg is durable, `w@a` with
// A's GUID and bytes. Regression: a cut in END's last commit, after the publish, made the
// undo destroy the published `w` as a hidden dataset, an engine panic.
#[test]
fn a_power_cut_at_any_instant_of_a_full_receive_leaves_nothing_or_the_snapshot() {
    let (a, first, _) = plain_sender();
    let (provider, b) = host_b();
    let before = state(&b);
    let mut sent = noise(1 << 20, 1);
    sent.resize(PLAIN_LEN, 0);
    let cuts = PowerCuts {
        targets: &["tank/w"],
        limit: 3_000,
        min_before: 20,
    };
    cuts.run(
        &provider,
        b,
        |b| receive(b, into("tank/w"), &first).is_ok(),
        |_, now, k| assert_eq!(*now, before, "k={k}"),
        |b, now, k| {
            assert_eq!(names(now), ["tank", "tank/w", "tank/w@a"], "k={k}");
            assert_eq!(
                common::dataset_prop(b, "tank/w@a", "guid"),
                common::dataset_prop(&a, "tank/v@a", "guid"),
                "k={k}"
            );
            assert!(read_all(b, "tank/w") == sent, "k={k}");
        },
    );
}
