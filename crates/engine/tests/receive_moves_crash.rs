//! The early moves of `receive -s -R` (`receive_moves::apply_early`) cut by a power cut.
//! Under `-s` a replication stream whose new dataset takes a name a move vacates has its
//! moves applied when the manifest arrives, in a txg of their own, before any substream;
//! each substream is then placed at its END. A power cut anywhere in that receive must
//! leave the receiver either as it was, or with the moves made, all of them and never
//! some, plus whole substreams placed and at most the saved partial state of `-s`; every
//! dataset and snapshot keeps its GUID and its bytes. From every cut, `send -t` (where a
//! token was saved) and the same stream again finish to what an uncut receive gives.
//!
//! Method: host A's `tank/p` (the volumes `k` and `m`) is received by B as `tank/q` (`send
//! -R` of `@a`); A then renames `k` to `k2` (and writes to it) and `m` to `m2`, makes a
//! new volume `k` and takes `@b` everywhere; the stream is `send -R -i @a p@b`. B's
//! devices (a mirror) sit behind `common::CutProvider` and are restored from their images
//! before each cut: for k = 0, 1, 2, ... the power goes after k device writes or flushes
//! of the receive (each device then drops or tears what it had not flushed), a new engine
//! imports B, the state is checked, the receive is finished, and the result is compared
//! with the uncut one; the loop ends at the first k at which the receive returns.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::replica::{host, incremental, into, received, replicate, send, volumes_at_a};
use common::volume::{noise, read, volume, write};
use common::{CutProvider, Host, PLAIN, crash_all, sim_devices_with};
use tarn_device::{FaultPlan, SimDevice};
use tarn_engine::{CreateSpec, Engine, ImportOptions, ReceiveSpec, SendSpec, TopLayout, check};

const B: Host = Host {
    hostid: 8,
    seed: 77,
    ..PLAIN
};

/// The fault plan of B's device `i`: unflushed writes dropped or torn at a crash.
fn plan(i: usize) -> FaultPlan {
    FaultPlan {
        seed: 500 + i as u64,
        drop_on_crash: 500_000,
        torn_on_crash: 300_000,
        ..FaultPlan::default()
    }
}

/// Every device's path and durable bytes.
type Images = Vec<(String, Vec<u8>)>;

/// B as `images` left it: its devices behind a new cut, and an engine that imported them.
fn restore(images: &Images) -> (Arc<CutProvider>, Engine) {
    let provider = Arc::new(CutProvider::default());
    for (i, (path, image)) in images.iter().enumerate() {
        let device = SimDevice::from_image(path, image, plan(i));
        provider.sims.insert(path, device);
    }
    let engine = B.import(&provider, &ImportOptions::default()).unwrap();
    (provider, engine)
}

/// A's tree and the two streams (module doc); B's images with `tank/q` received from the
/// first.
fn hosts() -> (Engine, Vec<u8>, Images) {
    let (_, a) = host(9);
    let first = volumes_at_a(&a);
    a.rename_dataset("tank/p/k", "tank/p/k2", "rename").unwrap();
    a.rename_dataset("tank/p/m", "tank/p/m2", "rename").unwrap();
    write(&a, "tank/p/k2", 64 << 10, &noise(96 << 10, 3));
    volume(&a, "tank/p/k");
    write(&a, "tank/p/k", 0, &noise(96 << 10, 4));
    common::volume::snap_all(&a, "tank/p@b");
    let second = send(&a, replicate(incremental("@a", "tank/p@b")));

    let provider = Arc::new(CutProvider::default());
    let names = sim_devices_with(&provider.sims, "d", 0..2, 64 << 20, plan);
    let spec = CreateSpec::one_top("tank", TopLayout::Mirror, names);
    let b = B.create_tank(&provider, &spec, &[("failmode", "continue")]);
    received(&b, &into("tank/q"), &first).unwrap();
    b.sync_pool("tank").unwrap();
    let images = common::images(&provider.sims);
    (a, second, images)
}

/// What B is: every dataset and snapshot under `tank` by name, with its GUID (a snapshot's
/// is the sender's, a dataset's its own, kept by a move) and, for a volume, its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    guids: BTreeMap<String, String>,
    bytes: BTreeMap<String, Vec<u8>>,
}

fn seen(engine: &Engine) -> Seen {
    let rows = common::tank_rows(engine, &["name", "type", "guid"]);
    let guids = rows.iter().map(|r| (r[0].clone(), r[2].clone())).collect();
    let volumes = rows.iter().filter(|r| r[1] == "volume");
    let bytes = volumes
        .map(|r| (r[0].clone(), read(engine, &r[0])))
        .collect();
    Seen { guids, bytes }
}

/// `before` as the moves leave it: `q/k` and `q/m` (and their snapshots) at `q/k2`, `q/m2`.
fn moved(before: &Seen) -> Seen {
    let rename = |name: &String| {
        for (old, new) in [("tank/q/k", "tank/q/k2"), ("tank/q/m", "tank/q/m2")] {
            if let Some(rest) = name.strip_prefix(old)
                && (rest.is_empty() || rest.starts_with('@'))
            {
                return format!("{new}{rest}");
            }
        }
        name.clone()
    };
    Seen {
        guids: before
            .guids
            .iter()
            .map(|(n, g)| (rename(n), g.clone()))
            .collect(),
        bytes: before
            .bytes
            .iter()
            .map(|(n, b)| (rename(n), b.clone()))
            .collect(),
    }
}

/// The saved partial receives of `-s` on B: (target to resume into, token). The new `k`'s
/// is on its hidden dataset `q/%k`, the others' on the dataset itself.
fn tokens(engine: &Engine) -> Vec<(String, String)> {
    let places = [
        ("tank/q", "tank/q"),
        ("tank/q/k2", "tank/q/k2"),
        ("tank/q/m2", "tank/q/m2"),
        ("tank/q/k", "tank/q/k"),
        ("tank/q/%k", "tank/q/k"),
    ];
    places
        .into_iter()
        .filter(|(at, _)| common::dataset_exists(engine, at))
        .map(|(at, target)| {
            let token = common::dataset_prop(engine, at, "receive_resume_token");
            (target.to_string(), token)
        })
        .filter(|(_, token)| token != "-")
        .collect()
}

/// `receive -s -R` of `stream` into `tank/q`, with a sync after each batch of records (as
/// the daemon's syncer commits while a stream arrives).
fn receive_s(engine: &Engine, target: &str, stream: &[u8]) -> Result<(), String> {
    let spec = ReceiveSpec {
        resumable: true,
        ..into(target)
    };
    let mut input = stream;
    let mut sync = |_| drop(engine.sync_pool("tank"));
    engine
        .receive(&spec, &mut input, &mut sync)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// What a cut left, checked against `before` and the uncut result `want` (module doc):
/// `Some(false)` for B as before, `Some(true)` for the moves made; panics otherwise.
fn check_cut(now: &Seen, before: &Seen, want: &Seen, partial: bool, k: u64) -> bool {
    if now == before {
        assert!(!partial, "k={k}: a partial state before the moves");
        return false;
    }
    let moved = moved(before);
    for (name, guid) in &moved.guids {
        assert_eq!(
            now.guids.get(name),
            Some(guid),
            "k={k}: {name}: {:?}",
            now.guids
        );
    }
    for (name, guid) in &now.guids {
        assert_eq!(
            want.guids.get(name),
            Some(guid),
            "k={k}: {name}: {:?}",
            now.guids
        );
    }
    // A volume holds the sender's `@b` once its substream was placed, its old bytes before
    // (the partial state of `-s` aside).
    for (name, bytes) in &now.bytes {
        let placed = now.guids.contains_key(&format!("{name}@b"));
        if placed {
            assert!(*bytes == want.bytes[name], "k={k}: {name}");
        } else if !partial {
            assert!(*bytes == moved.bytes[name], "k={k}: {name}");
        }
    }
    true
}

// DESCRIPTION: a power cut after k device operations of `receive -s -R` whose moves are
// applied early (A renamed `k` to `k2` and `m` to `m2` and made a new `k`), for every k
// until the receive returns: B imports with a clean pool and is either as before (names,
// GUIDs, bytes) or has both moves with every GUID and byte kept, whole substreams placed
// and at most a saved partial state; `send -t` where a token was saved, then the stream
// again, finish each to the uncut receive's names, GUIDs and bytes. Negative control: with
// the second move committed in a txg of its own, a cut between them leaves `q/m` beside
// `q/k2` and the test fails.
#[test]
fn a_power_cut_at_any_instant_of_the_early_moves_of_s_r_leaves_old_or_moved() {
    let (a, stream, images) = hosts();
    let (_, b) = restore(&images);
    let before = seen(&b);
    receive_s(&b, "tank/q", &stream).unwrap();
    let want = seen(&b);
    assert_eq!(
        want.guids.keys().collect::<Vec<_>>(),
        [
            "tank",
            "tank/q",
            "tank/q/k",
            "tank/q/k2",
            "tank/q/k2@a",
            "tank/q/k2@b",
            "tank/q/k@b",
            "tank/q/m2",
            "tank/q/m2@a",
            "tank/q/m2@b",
            "tank/q@a",
            "tank/q@b",
        ]
    );
    assert!(want.bytes["tank/q/k"] == read(&a, "tank/p/k"));
    assert!(want.bytes["tank/q/k2"] == read(&a, "tank/p/k2"));
    drop(b);
    let (mut as_before, mut with_moves) = (0, 0);
    for k in 0.. {
        let (provider, b) = restore(&images);
        *provider.cut.0.lock().unwrap() = Some(k);
        let returned = receive_s(&b, "tank/q", &stream).is_ok();
        drop(b);
        crash_all(&provider.sims);
        *provider.cut.0.lock().unwrap() = None;
        let b = B.import(&provider, &ImportOptions::default()).unwrap();
        check::verify_pool(&b, "tank").unwrap_or_else(|e| panic!("k={k}: {e}"));
        let saved = tokens(&b);
        assert!(saved.len() <= 1, "k={k}: {saved:?}");
        let now = seen(&b);
        if returned {
            assert!(now == want, "k={k}: a receive that returned is durable");
            break;
        }
        match check_cut(&now, &before, &want, !saved.is_empty(), k) {
            false => as_before += 1,
            true => with_moves += 1,
        }
        for (target, token) in saved {
            let spec = SendSpec {
                token: Some(token),
                ..SendSpec::default()
            };
            let rest = send(&a, spec);
            receive_s(&b, &target, &rest).unwrap_or_else(|e| panic!("k={k}: {e}"));
        }
        receive_s(&b, "tank/q", &stream).unwrap_or_else(|e| panic!("k={k}: {e}"));
        let again = seen(&b);
        assert_eq!(again.guids, want.guids, "k={k}");
        assert!(again.bytes == want.bytes, "k={k}");
        check::verify_pool(&b, "tank").unwrap_or_else(|e| panic!("k={k}: {e}"));
    }
    assert!(
        as_before > 10 && with_moves > 10,
        "cuts before the moves: {as_before}, after: {with_moves}"
    );
}
