//! A first full `receive -R` (no `-s`) is atomic as a whole (`receive_atomic`): every
//! substream is held in a hidden dataset until the stream's last record, those that need
//! what a held one brings included (each dataset's second and later snapshots, received on
//! top of its held hidden dataset; datasets below a new dataset, received under its hidden
//! one; a clone whose origin the stream brings, a clone of the held origin snapshot), and
//! everything takes its place in one txg. So a stream cut anywhere, or refused at its end,
//! leaves the receiver byte-identical: every dataset and snapshot with its GUID and space
//! figures, every block of every dataset's object sets (a hidden dataset left behind would
//! hold some), nothing to abort.
//!
//! Method: host A's tree `tank/p` (a filesystem with a file) holds the volume `k`, the
//! filesystem `c` and its volume `c/v`, with `@1`, `@2`, `@3` everywhere and writes between
//! them (the clone test adds `cl`, a clone of `k@1`); B already has `tank/o` with a
//! snapshot. The stream is `send -R tank/p@3`, received by B as the new `tank/r`. It is cut
//! at every substream boundary, just after one and inside one, and refused at its end by a
//! `snapshot_limit` set from the progress callback; then it is received whole, and B's tree
//! is A's (names, GUIDs, space figures, bytes). On main before this change every cut after
//! the first dependent substream left part of the stream received.
//!
//! The same for `send -R -I @1 tank/p@4` onto B's existing `tank/r` (received from `-R` of
//! `@1`), with a clone of the intermediate `k@2` made since: every substream of an
//! existing dataset goes into its hidden clone (its snapshots taken there), the clone into
//! a hidden clone of the hidden `k@2`, and at the end each existing dataset adopts its
//! hidden clone with its snapshots. Cut at every substream boundary and at a seeded sample
//! of record boundaries, or refused at its end, B is byte-identical; whole, B's tree is A's
//! with every snapshot's `used`, `written`, `referenced` and each dataset's
//! `usedbysnapshots` equal, `tank/r/cl` a clone of `tank/r/k@2`, and `clones` of that
//! snapshot naming it. Before this, the second substream of each existing dataset placed
//! what was held early, so a later cut left part of the stream received.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::replica::{
    TankState as State, forced, full, host, incremental, into, received, replicate, send,
    tank_state, write_file,
};
use common::volume::{noise, volume, write};
use tarn_base::SeededRng;
use tarn_engine::{Engine, ReceiveSpec, SendSpec, check};

/// `snapshot -r tank/p@NAME` on A.
fn snapshot_all(a: &Engine, name: &str) {
    common::volume::snap_all(a, &format!("tank/p@{name}"));
}

/// A's tree (module doc); with `clone`, `tank/p/cl` is a clone of `tank/p/k@1` with writes
/// of its own. Returns A and the stream `send -R tank/p@3`.
fn sender(clone: bool) -> (Engine, Vec<u8>) {
    let (_, a) = host(7);
    a.create_dataset("tank/p", &[], false, "create").unwrap();
    a.create_dataset("tank/p/c", &[], false, "create").unwrap();
    volume(&a, "tank/p/k");
    volume(&a, "tank/p/c/v");
    write(&a, "tank/p/k", 0, &noise(192 << 10, 1));
    write(&a, "tank/p/c/v", 0, &noise(64 << 10, 2));
    write_file(&a, "tank/p", b"f1", &noise(48 << 10, 3));
    snapshot_all(&a, "1");
    write(&a, "tank/p/k", 64 << 10, &noise(96 << 10, 4));
    write(&a, "tank/p/c/v", 128 << 10, &noise(32 << 10, 5));
    write_file(&a, "tank/p/c", b"f2", &noise(40 << 10, 6));
    snapshot_all(&a, "2");
    if clone {
        a.clone_dataset("tank/p/k@1", "tank/p/cl", &[], false, "clone")
            .unwrap();
        write(&a, "tank/p/cl", 32 << 10, &noise(48 << 10, 9));
    }
    write(&a, "tank/p/k", 320 << 10, &noise(64 << 10, 7));
    write_file(&a, "tank/p", b"f3", &noise(24 << 10, 8));
    snapshot_all(&a, "3");
    let stream = send(&a, replicate(full("tank/p@3")));
    (a, stream)
}

/// Host B: `tank/o` (a volume with data and a snapshot) before any stream.
fn receiver() -> Engine {
    let (_, b) = host(77);
    volume(&b, "tank/o");
    write(&b, "tank/o", 0, &noise(80 << 10, 11));
    common::volume::snap(&b, "tank/o@s");
    write(&b, "tank/o", 256 << 10, &noise(16 << 10, 12));
    b.sync_pool("tank").unwrap();
    b
}

/// The figures of each dataset and snapshot a host's state shows (module doc).
const PROPERTIES: &[&str] = &[
    "name",
    "type",
    "guid",
    "origin",
    "used",
    "referenced",
    "usedbysnapshots",
    "usedbydataset",
    "usedbychildren",
    "written",
    "clones",
];

fn state(engine: &Engine) -> State {
    tank_state(engine, PROPERTIES)
}

/// The offset after every record of `stream`, each with whether it ends a substream.
fn record_ends(stream: &[u8]) -> Vec<(usize, bool)> {
    let (mut at, mut sequence, mut ends) = (0, 0, Vec::new());
    while at < stream.len() {
        let (record, len) = tarn_send::decode_frame(&stream[at..], sequence).unwrap();
        at += len;
        sequence += 1;
        let end = matches!(record, tarn_send::Record::End { .. });
        if end {
            sequence = 0;
        }
        ends.push((at, end));
    }
    ends
}

/// The offsets where each substream of `stream` ends (the manifest's first).
fn substream_ends(stream: &[u8]) -> Vec<usize> {
    record_ends(stream)
        .into_iter()
        .filter_map(|(at, end)| end.then_some(at))
        .collect()
}

/// Where to cut `stream`: inside the manifest, at every substream boundary, just after
/// each and in the middle of each, and one byte before its end.
fn cuts(stream: &[u8]) -> Vec<usize> {
    let ends = substream_ends(stream);
    assert!(ends.len() > 10, "substreams: {}", ends.len());
    let mut cuts = vec![ends[0] / 2];
    let mut start = ends[0];
    for &end in &ends[..ends.len() - 1] {
        cuts.extend([(start + end) / 2, end, end + 40]);
        start = end;
    }
    cuts.push(stream.len() - 1);
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// Receives `stream` with `spec` into B, `snapshot_limit=LIMIT` set on `tank` from the first
/// progress callback (while the stream is held), and asserts it is refused at its end in one
/// line with B as before and nothing to abort.
fn refused_at_its_end(b: &Engine, spec: &ReceiveSpec, stream: &[u8], limit: &str) {
    let before = state(b);
    let mut set = false;
    let mut input = stream;
    let refused = b
        .receive(spec, &mut input, &mut |_| {
            if !set {
                let limit = vec![("snapshot_limit".to_string(), limit.to_string())];
                b.set_dataset_props("tank", &limit, "set").unwrap();
                set = true;
            }
        })
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("snapshot limit exceeded") && !refused.contains('\n'),
        "{refused}"
    );
    assert_unchanged(b, &before, "refused at the end");
}

/// Asserts B is as `before` and has no partial receive to abort under `tank/r`.
fn assert_unchanged(b: &Engine, before: &State, what: &str) {
    assert_eq!(state(b), *before, "{what}");
    for target in ["tank/r", "tank/r/k", "tank/r/c", "tank/r/c/v", "tank/r/cl"] {
        let abort = b.receive_abort(target).unwrap_err().to_string();
        assert!(
            abort.contains("does not have any resumable"),
            "{what}: {abort}"
        );
    }
    check::verify_pool(b, "tank").unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// The rows of `tank/p`'s tree on A (as `tank/r`) and of `tank/r` on B, with the bytes of
/// every volume: equal once B received the whole stream.
fn assert_replica(a: &Engine, b: &Engine) {
    let tree = |engine: &Engine, root: &str| -> State {
        let mut got = state(engine);
        got.rows.retain(|row| row[0].starts_with(root));
        got.volumes.retain(|(name, _)| name.starts_with(root));
        for row in &mut got.rows {
            // A received dataset has a GUID of its own; its snapshots have the sender's.
            if row[1] != "snapshot" {
                row[2].clear();
            }
            for value in row.iter_mut() {
                *value = value.replace("tank/p", "tank/r");
            }
        }
        for (name, _) in &mut got.volumes {
            *name = name.replace("tank/p", "tank/r");
        }
        got.data_blocks.clear();
        got
    };
    assert_eq!(tree(b, "tank/r"), tree(a, "tank/p"));
    check::verify_pool(b, "tank").unwrap();
}

// DESCRIPTION: a first full `send -R` of a tree with three snapshots per dataset, a child
// and a grandchild under new parents, cut inside its manifest, at every substream boundary,
// just after each and inside each, and one byte before its end: every cut is refused and
// leaves B byte-identical (rows with GUIDs and space, volume bytes, every block's DVA),
// nothing to abort; then the whole stream gives B A's tree (names, GUIDs, space, bytes).
// Fails on main: there the second snapshot of `p` made what was held take its place.
#[test]
fn a_first_full_replication_stream_cut_anywhere_changes_nothing() {
    let (a, stream) = sender(false);
    let b = receiver();
    let before = state(&b);
    for cut in cuts(&stream) {
        let refused = received(&b, &into("tank/r"), &stream[..cut]).unwrap_err();
        assert!(
            refused.contains("invalid stream"),
            "cut at {cut}: {refused}"
        );
        assert_unchanged(&b, &before, &format!("cut at {cut}"));
    }
    let report = received(&b, &into("tank/r"), &stream).unwrap();
    assert_eq!(report.snapshots.len(), 12, "{:?}", report.snapshots);
    assert_replica(&a, &b);
}

// DESCRIPTION: a `snapshot_limit` on `tank` set from the progress callback (while the
// substreams come in) refuses the first full `-R` at its end, in one line: B is
// byte-identical and nothing is left to abort (on main the stream's early placement had
// already placed `p` and its first snapshot).
#[test]
fn a_first_full_replication_stream_refused_at_its_end_changes_nothing() {
    let (_, stream) = sender(false);
    let b = receiver();
    refused_at_its_end(&b, &into("tank/r"), &stream, "3");
}

// DESCRIPTION: a clone whose origin comes in the same first full `-R` (`cl`, a clone of
// `k@1`): cut at every boundary it is refused with B byte-identical; whole, `tank/r/cl`
// is a clone of `tank/r/k@1` (the held origin snapshot, now placed) with A's GUIDs,
// space and bytes, and destroying `k` needs `cl` gone first.
#[test]
fn a_clone_whose_origin_the_stream_brings_is_held_too() {
    let (a, stream) = sender(true);
    let b = receiver();
    let before = state(&b);
    for cut in cuts(&stream) {
        let refused = received(&b, &into("tank/r"), &stream[..cut]).unwrap_err();
        assert!(
            refused.contains("invalid stream"),
            "cut at {cut}: {refused}"
        );
        assert_unchanged(&b, &before, &format!("cut at {cut}"));
    }
    received(&b, &into("tank/r"), &stream).unwrap();
    assert_eq!(
        common::dataset_prop(&b, "tank/r/cl", "origin"),
        "tank/r/k@1"
    );
    assert_replica(&a, &b);
    assert!(b.destroy_dataset("tank/r/k", false, "destroy").is_err());
}

// DESCRIPTION: the parent of a first full `-R`'s destination destroyed (`destroy -r`) from
// the progress callback, once new datasets are held below the held hidden `tank/x/%r`:
// the receive is refused in one line, the destroy takes every held hidden dataset with it
// (those below the hidden parent first), and B is as it was without `tank/x` (fails when a
// hidden dataset's destroy leaves the hidden ones below it: the pool does not verify).
#[test]
fn a_destroy_of_the_destinations_parent_during_the_stream_takes_what_is_held() {
    let (_, stream) = sender(true);
    let b = receiver();
    let before = state(&b);
    b.create_dataset("tank/x", &[], false, "create").unwrap();
    let ends = substream_ends(&stream);
    let mut destroyed = false;
    let mut input = &stream[..];
    let mut read = 0u64;
    let refused = b.receive(&into("tank/x/r"), &mut input, &mut |at| {
        read = at.bytes;
        // After `p` and `k` (its three snapshots): new datasets below the held `%r`.
        if !destroyed && read as usize > ends[6] {
            b.destroy_dataset("tank/x", true, "destroy -r").unwrap();
            destroyed = true;
        }
    });
    assert!(destroyed, "the stream went on long enough: {read} bytes");
    let refused = refused.unwrap_err().to_string();
    assert!(!refused.contains('\n'), "{refused}");
    b.sync_pool("tank").unwrap();
    assert_unchanged(&b, &before, "destroyed during the stream");
}

/// A's tree for the `-R -I` tests (module doc): `tank/p` (a filesystem with files), the
/// volume `k` and the filesystem `c` with a file, snapshotted `@0`, then writes and `@1`
/// (so that the stream kills blocks older than its source, which the adoption files under
/// `@0`); then writes, `@2`, the
/// clone `cl` of `k@2` with writes of its own, writes, `@3`, writes, `@4`. Returns A, the
/// stream `send -R tank/p@1` and the stream `send -R -I @1 tank/p@4`.
fn intermediate_sender() -> (Engine, Vec<u8>, Vec<u8>) {
    let (_, a) = host(9);
    a.create_dataset("tank/p", &[], false, "create").unwrap();
    a.create_dataset("tank/p/c", &[], false, "create").unwrap();
    volume(&a, "tank/p/k");
    write(&a, "tank/p/k", 0, &noise(256 << 10, 1));
    write_file(&a, "tank/p", b"f1", &noise(48 << 10, 2));
    write_file(&a, "tank/p/c", b"f1", &noise(24 << 10, 3));
    snapshot_all(&a, "0");
    write(&a, "tank/p/k", 192 << 10, &noise(64 << 10, 12));
    write_file(&a, "tank/p/c", b"f0", &noise(8 << 10, 13));
    snapshot_all(&a, "1");
    let first = send(&a, replicate(full("tank/p@1")));
    write(&a, "tank/p/k", 64 << 10, &noise(128 << 10, 4));
    write_file(&a, "tank/p/c", b"f2", &noise(40 << 10, 5));
    snapshot_all(&a, "2");
    a.clone_dataset("tank/p/k@2", "tank/p/cl", &[], false, "clone")
        .unwrap();
    write(&a, "tank/p/cl", 32 << 10, &noise(48 << 10, 6));
    write(&a, "tank/p/k", 0, &noise(64 << 10, 7));
    write_file(&a, "tank/p", b"f3", &noise(24 << 10, 8));
    snapshot_all(&a, "3");
    write(&a, "tank/p/k", 128 << 10, &noise(96 << 10, 9));
    write(&a, "tank/p/cl", 256 << 10, &noise(32 << 10, 10));
    write_file(&a, "tank/p/c", b"f4", &noise(16 << 10, 11));
    snapshot_all(&a, "4");
    let spec = SendSpec {
        intermediates: true,
        ..replicate(incremental("@1", "tank/p@4"))
    };
    let second = send(&a, spec);
    (a, first, second)
}

/// Where to cut the `-R -I` stream: [`cuts`], and `n` record boundaries picked by a seeded
/// generator.
fn sampled_cuts(stream: &[u8], n: usize) -> Vec<usize> {
    let ends = record_ends(stream);
    let mut cuts = cuts(stream);
    let mut rng = SeededRng::new(0x5eed);
    for _ in 0..n {
        cuts.push(ends[rng.below(ends.len() as u64 - 1) as usize].0);
    }
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

// DESCRIPTION: `send -R -I @1 tank/p@4` (three snapshots of each existing dataset, a clone
// of the intermediate `k@2` made since) onto B's `tank/r`, cut at every substream boundary,
// inside each, and at 60 seeded record boundaries: each cut is refused and leaves B
// byte-identical (rows with GUIDs and space, every block's DVA), nothing to abort; the
// whole stream gives B A's tree: names, GUIDs, `used`, `written`, `referenced`,
// `usedbysnapshots` of every dataset and snapshot, volume bytes, `tank/r/cl` a clone of
// `tank/r/k@2` listed in its `clones`. Fails before the `-R -I` atomicity: the second
// snapshot of each existing dataset placed what was held early.
#[test]
fn an_intermediate_replication_stream_onto_existing_datasets_cut_anywhere_changes_nothing() {
    let (a, first, second) = intermediate_sender();
    let b = receiver();
    received(&b, &into("tank/r"), &first).unwrap();
    let before = state(&b);
    for cut in sampled_cuts(&second, 60) {
        let refused = received(&b, &into("tank/r"), &second[..cut]).unwrap_err();
        assert!(
            refused.contains("invalid stream"),
            "cut at {cut}: {refused}"
        );
        assert_unchanged(&b, &before, &format!("cut at {cut}"));
    }
    let report = received(&b, &into("tank/r"), &second).unwrap();
    assert_eq!(report.snapshots.len(), 11, "{:?}", report.snapshots);
    assert_eq!(
        common::dataset_prop(&b, "tank/r/cl", "origin"),
        "tank/r/k@2"
    );
    assert_eq!(
        common::dataset_prop(&b, "tank/r/k@2", "clones"),
        "tank/r/cl"
    );
    assert_replica(&a, &b);
    assert!(
        b.destroy_snapshots("tank/r/k@2", false, false, "destroy")
            .is_err()
    );
    // The adopted snapshots are the dataset's own, with A's dead lists: destroying the same
    // on both hosts leaves the same space figures.
    for (host, root) in [(&a, "tank/p"), (&b, "tank/r")] {
        host.destroy_dataset(&format!("{root}/cl"), true, "destroy -r")
            .unwrap();
        host.destroy_snapshots(&format!("{root}/k@2%3"), false, false, "destroy")
            .unwrap();
        host.destroy_snapshots(&format!("{root}@1"), false, false, "destroy")
            .unwrap();
    }
    assert_replica(&a, &b);
}

// DESCRIPTION: the same `-R -I` stream with -F, refused at its end by a `snapshot_limit`
// set from the progress callback: one line, B byte-identical, nothing to abort (before,
// the early placement had placed every dataset's `@2`).
#[test]
fn an_intermediate_replication_stream_refused_at_its_end_changes_nothing() {
    let (_, first, second) = intermediate_sender();
    let b = receiver();
    received(&b, &into("tank/r"), &first).unwrap();
    refused_at_its_end(&b, &forced(into("tank/r")), &second, "8");
}

/// A's volume `tank/v` at `@1`, then overwrites and new writes and one snapshot each up to
/// `@5`, and its clone `tank/c` of `v@2` with writes, `@c1`, `@c2`. Returns A, `send
/// tank/v@1` and the chain `send -I @1 tank/v@5` (four substreams, FEATURE_CHAIN).
fn chain_sender() -> (Engine, Vec<u8>, Vec<u8>) {
    let (_, a) = host(11);
    volume(&a, "tank/v");
    write(&a, "tank/v", 0, &noise(512 << 10, 1));
    common::volume::snap(&a, "tank/v@1");
    let first = send(&a, full("tank/v@1"));
    for i in 2..=5usize {
        // Each overwrites part of the one before (dead lists) and adds new blocks.
        write(
            &a,
            "tank/v",
            (i - 2) * (128 << 10),
            &noise(192 << 10, i as u64),
        );
        write(&a, "tank/v", i << 20, &noise(64 << 10, 10 + i as u64));
        common::volume::snap(&a, &format!("tank/v@{i}"));
    }
    a.clone_dataset("tank/v@2", "tank/c", &[], false, "clone")
        .unwrap();
    write(&a, "tank/c", 64 << 10, &noise(96 << 10, 21));
    common::volume::snap(&a, "tank/c@c1");
    write(&a, "tank/c", 3 << 20, &noise(32 << 10, 22));
    common::volume::snap(&a, "tank/c@c2");
    let chain = send(&a, chained("@1", "tank/v@5"));
    (a, first, chain)
}

/// `send -I FROM SNAPSHOT`.
fn chained(from: &str, snapshot: &str) -> SendSpec {
    SendSpec {
        intermediates: true,
        ..incremental(from, snapshot)
    }
}

/// Where to cut a chain: at every substream boundary before its end, just after each and
/// inside each, and `n` record boundaries picked by a seeded generator.
fn chain_cuts(stream: &[u8], n: usize) -> Vec<usize> {
    let ends = record_ends(stream);
    let (mut cuts, mut start) = (Vec::new(), 0);
    for &(at, end) in ends.iter().filter(|(_, end)| *end) {
        assert!(end);
        cuts.extend([(start + at) / 2, at, at + 40]);
        start = at;
    }
    let mut rng = SeededRng::new(0xc4a1);
    for _ in 0..n {
        cuts.push(ends[rng.below(ends.len() as u64 - 1) as usize].0);
    }
    cuts.retain(|&cut| cut < stream.len());
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// The rows of `from` and its snapshots on A as they are named at `to`, beside B's rows of
/// `to` and its snapshots, each without the datasets' own GUIDs and the DVAs: equal once B
/// received the whole stream.
fn chain_rows(a: &Engine, from: &str, b: &Engine, to: &str) -> (State, State) {
    let pick = |engine: &Engine, root: &str| -> State {
        let mut got = state(engine);
        let under = |n: &str| n == root || n.starts_with(&format!("{root}@"));
        got.rows.retain(|row| under(&row[0]));
        got.volumes.retain(|(n, _)| under(n));
        for row in &mut got.rows {
            if row[1] != "snapshot" {
                row[2].clear();
            }
            // `clones`: A's `v@2` has its clone `tank/c`, which B may not have.
            row[10].clear();
            for value in row.iter_mut() {
                // A clone's origin: A's `tank/v` is B's `tank/r`.
                *value = value.replace(root, to).replace("tank/v@", "tank/r@");
            }
        }
        for (n, _) in &mut got.volumes {
            *n = n.replace(root, to);
        }
        got.data_blocks.clear();
        got
    };
    (pick(b, to), pick(a, from))
}

// DESCRIPTION: a plain `send -I @1 tank/v@5` (a chain of four substreams, no -R) onto B's
// existing `tank/r` (received from `v@1`), cut at every substream boundary, just after and
// inside each, and at 40 seeded record boundaries: each cut is refused ("invalid stream")
// and leaves B byte-identical (rows with GUIDs and space, volume bytes, every block's
// DVA), nothing to abort; whole, B's `tank/r` is A's `tank/v`: snapshots with A's GUIDs,
// `used`, `written`, `referenced`, bytes. Negative controls: with the receiver not holding
// a chain, a cut after the first substream leaves `@2` received; with the sender not
// marking the chain, a cut at a substream boundary is received as a complete, shorter
// stream.
#[test]
fn a_plain_intermediate_stream_cut_anywhere_changes_nothing() {
    let (a, first, chain) = chain_sender();
    let b = receiver();
    received(&b, &into("tank/r"), &first).unwrap();
    let before = state(&b);
    for cut in chain_cuts(&chain, 40) {
        let refused = received(&b, &into("tank/r"), &chain[..cut]).unwrap_err();
        assert!(
            refused.contains("invalid stream"),
            "cut at {cut}: {refused}"
        );
        assert_unchanged(&b, &before, &format!("cut at {cut}"));
    }
    let report = received(&b, &into("tank/r"), &chain).unwrap();
    assert_eq!(report.snapshots.len(), 4, "{:?}", report.snapshots);
    let (got, want) = chain_rows(&a, "tank/v", &b, "tank/r");
    assert_eq!(got, want);
    check::verify_pool(&b, "tank").unwrap();
}

// DESCRIPTION: the same chain refused at its end by a `snapshot_limit` set from the
// progress callback, and with -F onto a `tank/r` that has a later snapshot of its own
// (which the chain's first substream takes back): one line, B byte-identical (the later
// snapshot still there), nothing to abort; whole with -F, `tank/r` is A's `tank/v`.
#[test]
fn a_plain_intermediate_stream_refused_at_its_end_changes_nothing() {
    let (a, first, chain) = chain_sender();
    let b = receiver();
    received(&b, &into("tank/r"), &first).unwrap();
    refused_at_its_end(&b, &into("tank/r"), &chain, "4");
    let b = receiver();
    received(&b, &into("tank/r"), &first).unwrap();
    write(&b, "tank/r", 0, &noise(16 << 10, 40));
    common::volume::snap(&b, "tank/r@x");
    b.sync_pool("tank").unwrap();
    refused_at_its_end(&b, &forced(into("tank/r")), &chain, "4");
    let limit = [("snapshot_limit".to_string(), "100".to_string())];
    b.set_dataset_props("tank", &limit, "set").unwrap();
    received(&b, &forced(into("tank/r")), &chain).unwrap();
    let (got, want) = chain_rows(&a, "tank/v", &b, "tank/r");
    assert_eq!(got, want);
    check::verify_pool(&b, "tank").unwrap();
}

// DESCRIPTION: a chain whose first substream makes a new dataset (`send -I tank/v@2
// tank/c@c2`: a clone stream of `c@c1` from its origin `v@2`, then `@c2` on top), cut at
// every boundary and at seeded records: refused, B byte-identical, nothing to abort;
// whole, `tank/c2` is a clone of B's `tank/r@2` with A's snapshots, space and bytes.
#[test]
fn a_plain_intermediate_clone_stream_cut_anywhere_changes_nothing() {
    let (a, first, chain) = chain_sender();
    let b = receiver();
    received(&b, &into("tank/r"), &first).unwrap();
    received(&b, &into("tank/r"), &chain).unwrap();
    let clone = send(&a, chained("tank/v@2", "tank/c@c2"));
    let before = state(&b);
    for cut in chain_cuts(&clone, 20) {
        let refused = received(&b, &into("tank/c2"), &clone[..cut]).unwrap_err();
        assert!(
            refused.contains("invalid stream"),
            "cut at {cut}: {refused}"
        );
        assert_unchanged(&b, &before, &format!("cut at {cut}"));
        let abort = b.receive_abort("tank/c2").unwrap_err().to_string();
        assert!(abort.contains("does not have any resumable"), "{abort}");
    }
    received(&b, &into("tank/c2"), &clone).unwrap();
    assert_eq!(common::dataset_prop(&b, "tank/c2", "origin"), "tank/r@2");
    let (got, want) = chain_rows(&a, "tank/c", &b, "tank/c2");
    assert_eq!(got, want);
    check::verify_pool(&b, "tank").unwrap();
}

/// B's snapshots of `tank/r`, short names.
fn snapshots_of_r(b: &Engine) -> Vec<String> {
    let rows = state(b).rows;
    let names = rows.iter().filter_map(|row| row[0].strip_prefix("tank/r@"));
    names.map(str::to_owned).collect()
}

// DESCRIPTION: `receive -s` of a chain keeps the per-substream placement (module doc of
// `receive_atomic`: its saved partial state is one substream): cut inside its third
// substream, `@2` and `@3` stay and `@4` is saved; `send -t` finishes `@4`, and the whole
// chain received again skips `@2`..`@4` (B has them, by GUID) and receives `@5`: B's
// `tank/r` is A's `tank/v` (GUIDs, space, bytes). Cut at its first boundary under -s, the
// cut is refused as truncated with `@2` kept and nothing saved; the chain received again
// (held, without -s) skips `@2` and gives the same result. Negative control: without the
// skip the chain received again is refused (`@2` is newer than its source).
#[test]
fn a_resumable_receive_of_a_cut_chain_finishes_identically() {
    let (a, first, chain) = chain_sender();
    let ends = substream_ends(&chain);
    assert_eq!(ends.len(), 4);
    let resumable = ReceiveSpec {
        resumable: true,
        ..into("tank/r")
    };
    let b = receiver();
    received(&b, &into("tank/r"), &first).unwrap();
    let refused = received(&b, &resumable, &chain[..(ends[1] + ends[2]) / 2]).unwrap_err();
    assert!(refused.contains("send -t"), "{refused}");
    assert_eq!(snapshots_of_r(&b), ["1", "2", "3"]);
    let token = common::dataset_prop(&b, "tank/r", "receive_resume_token");
    let rest = send(
        &a,
        SendSpec {
            token: Some(token),
            ..SendSpec::default()
        },
    );
    received(&b, &resumable, &rest).unwrap();
    let report = received(&b, &resumable, &chain).unwrap();
    assert_eq!((report.skipped.len(), report.snapshots.len()), (3, 1));
    let (got, want) = chain_rows(&a, "tank/v", &b, "tank/r");
    assert_eq!(got, want);
    check::verify_pool(&b, "tank").unwrap();

    let b = receiver();
    received(&b, &into("tank/r"), &first).unwrap();
    let refused = received(&b, &resumable, &chain[..ends[0]]).unwrap_err();
    assert!(refused.contains("truncated"), "{refused}");
    assert_eq!(snapshots_of_r(&b), ["1", "2"]);
    assert_eq!(
        common::dataset_prop(&b, "tank/r", "receive_resume_token"),
        "-"
    );
    let report = received(&b, &into("tank/r"), &chain).unwrap();
    assert_eq!((report.skipped.len(), report.snapshots.len()), (1, 3));
    let (got, want) = chain_rows(&a, "tank/v", &b, "tank/r");
    assert_eq!(got, want);
    check::verify_pool(&b, "tank").unwrap();
}

/// `stream` written again without the chain feature: a `send -I` stream of a build before
/// it.
fn unchained(stream: &[u8]) -> Vec<u8> {
    let mut input = stream;
    let mut reader = tarn_send::StreamReader::new(&mut input);
    let mut writer = tarn_send::StreamWriter::new(Vec::new());
    while let Some(record) = reader.next_record().unwrap() {
        match record {
            tarn_send::Record::Begin(mut begin) => {
                begin.features &= !tarn_send::FEATURE_CHAIN;
                begin.chain = 0;
                writer.write(&tarn_send::Record::Begin(begin)).unwrap();
            }
            tarn_send::Record::End { .. } => writer.end().unwrap(),
            other => writer.write(&other).unwrap(),
        }
    }
    writer.into_inner()
}

// DESCRIPTION: a `send -I` stream of a build before chains (no FEATURE_CHAIN) is received
// as before: whole it gives the same result, and cut at its second substream boundary it
// is received as the shorter stream it looks like (each substream placed at its END).
#[test]
fn a_plain_intermediate_stream_of_an_older_build_is_received_as_before() {
    let (a, first, chain) = chain_sender();
    let old = unchained(&chain);
    assert_eq!(old.len(), chain.len());
    let ends = substream_ends(&old);
    let b = receiver();
    received(&b, &into("tank/r"), &first).unwrap();
    let report = received(&b, &into("tank/r"), &old[..ends[1]]).unwrap();
    assert_eq!(report.snapshots, ["tank/r@2", "tank/r@3"]);
    let b = receiver();
    received(&b, &into("tank/r"), &first).unwrap();
    received(&b, &into("tank/r"), &old).unwrap();
    let (got, want) = chain_rows(&a, "tank/v", &b, "tank/r");
    assert_eq!(got, want);
}
