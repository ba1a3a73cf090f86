//! Streams that make a new dataset, through the engine on simulated devices: `receive -o
//! origin=SNAP` lands an incremental stream as a clone of the named snapshot; bad origins
//! (missing, not a snapshot, another snapshot's GUID, a full stream, a replication stream,
//! another pool) are refused in one line with both hosts' devices byte-identical;
//! `receive -F` of a clone stream or a full stream replaces a destination without
//! snapshots or children (keeping its local properties), a cut one leaves it as it was, one
//! with snapshots or children is refused unchanged; a full `send -R` sends a clone whose
//! origin is outside the tree from that origin (OpenZFS's rule), received as a clone where
//! the origin exists and refused in one line where it does not.
//!
//! Method: two engines stand for two hosts, each with a pool `tank` on its own simulated
//! devices; volumes carry the data (whole 16K blocks of noise). After each receive that
//! succeeds `check::verify_pool` walks every head, snapshot and dead list of the receiver.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::dataset_exists as exists;
use common::dataset_prop as prop;
use common::replica::{Hosts, forced, full, host, incremental, into, receive, send};
use common::volume::{LEN, noise, read, snap, volume, write};
use tarn_engine::{ReceiveSpec, SendSpec, check};
use tarn_send::{Record, StreamReader};

/// `into(target)` with `-o origin=ORIGIN`, as the CLI passes it (among the properties).
fn with_origin(target: &str, origin: &str) -> ReceiveSpec {
    ReceiveSpec {
        set: vec![("origin".into(), origin.into())],
        ..into(target)
    }
}

/// Host A: `tank/v` (1 MiB at `@one`, 256K rewritten at `@two`) and its clone `tank/c` of
/// `@one` (128K written, `@c1`). Host B: A's `tank/v@one` received as `tank/dst` (same
/// GUID) and an unrelated `tank/other@x`.
fn setup() -> Hosts {
    let (a_sims, a) = host(7);
    let (b_sims, b) = host(77);
    volume(&a, "tank/v");
    write(&a, "tank/v", 0, &noise(LEN, 1));
    snap(&a, "tank/v@one");
    write(&a, "tank/v", 64 << 10, &noise(256 << 10, 2));
    snap(&a, "tank/v@two");
    a.clone_dataset("tank/v@one", "tank/c", &[], false, "clone")
        .unwrap();
    write(&a, "tank/c", 512 << 10, &noise(128 << 10, 3));
    snap(&a, "tank/c@c1");
    receive(&b, into("tank/dst"), &send(&a, full("tank/v@one"))).unwrap();
    volume(&b, "tank/other");
    snap(&b, "tank/other@x");
    Hosts {
        a_sims,
        b_sims,
        a,
        b,
    }
}

// DESCRIPTION: `-o origin=` makes a plain incremental stream (no CLONE feature) a clone of
// the named snapshot, and names the origin of a clone stream too.
#[test]
fn an_incremental_stream_lands_as_a_clone_of_the_named_origin() {
    let hosts = setup();
    let (a, b) = (&hosts.a, &hosts.b);
    let stream = send(a, incremental("@one", "tank/v@two"));
    let refused = receive(b, into("tank/copy"), &stream).unwrap_err();
    assert!(refused.contains("does not exist"), "{refused}");
    receive(b, with_origin("tank/copy", "tank/dst@one"), &stream).unwrap();
    assert_eq!(prop(b, "tank/copy", "origin"), "tank/dst@one");
    assert_eq!(prop(b, "tank/dst@one", "clones"), "tank/copy");
    assert_eq!(
        prop(b, "tank/copy@two", "guid"),
        prop(a, "tank/v@two", "guid")
    );
    assert!(
        read(b, "tank/copy") == read(a, "tank/v"),
        "the sender's @two"
    );
    let used: u64 = prop(b, "tank/copy", "used").parse().unwrap();
    assert!(used < 512 << 10, "shares its origin's blocks: used {used}");

    let clone_stream = send(a, incremental("tank/v@one", "tank/c@c1"));
    receive(b, with_origin("tank/c", "tank/dst@one"), &clone_stream).unwrap();
    assert_eq!(prop(b, "tank/c", "origin"), "tank/dst@one");
    assert!(read(b, "tank/c") == read(a, "tank/c"));
    check::verify_pool(b, "tank").unwrap();
}

// DESCRIPTION: every bad origin is refused in one line before anything changes, on either
// host, and the destination does not appear.
#[test]
fn bad_origins_are_refused_in_one_line_and_change_neither_pool() {
    let hosts = setup();
    let (a, b) = (&hosts.a, &hosts.b);
    let stream = send(a, incremental("@one", "tank/v@two"));
    let whole = send(a, full("tank/v@one"));
    let replicated = send(
        a,
        SendSpec {
            replicate: true,
            ..full("tank/v@two")
        },
    );
    let cases: [(&str, &[u8], &str); 6] = [
        (
            "tank/dst@nope",
            &stream,
            "origin 'tank/dst@nope' does not exist",
        ),
        ("tank/dst", &stream, "origin 'tank/dst' is not a snapshot"),
        ("tank/other@x", &stream, "origin 'tank/other@x' (guid"),
        ("other/dst@one", &stream, "is not in the destination's pool"),
        (
            "tank/dst@one",
            &whole,
            "a full stream cannot be received as a clone",
        ),
        ("tank/dst@one", &replicated, "not a replication stream"),
    ];
    for (origin, bytes, expected) in cases {
        let before = hosts.images();
        let refused = receive(b, with_origin("tank/copy", origin), bytes).unwrap_err();
        assert!(refused.contains(expected), "origin={origin}: {refused}");
        assert!(!refused.contains('\n'), "one line: {refused}");
        assert!(hosts.images() == before, "origin={origin} changed a pool");
        assert!(!exists(b, "tank/copy"), "origin={origin}");
    }
}

// DESCRIPTION: `receive -F` of a clone stream replaces a destination without snapshots or
// children; without -F, or when it has snapshots or children, it is refused unchanged; a
// cut stream leaves the destination as it was.
#[test]
fn receive_f_replaces_a_destination_without_snapshots() {
    let hosts = setup();
    let (a, b) = (&hosts.a, &hosts.b);
    volume(b, "tank/c");
    let mine = noise(LEN, 9);
    write(b, "tank/c", 0, &mine);
    let keep = vec![("org.test:keep".to_string(), "yes".to_string())];
    b.set_dataset_props("tank/c", &keep, "set").unwrap();
    b.sync_pool("tank").unwrap();
    let clone_stream = send(a, incremental("tank/v@one", "tank/c@c1"));

    let before = hosts.images();
    let refused = receive(b, into("tank/c"), &clone_stream).unwrap_err();
    assert!(
        refused.contains("destination 'tank/c' exists (must specify -F to overwrite it)"),
        "{refused}"
    );
    assert!(hosts.images() == before, "a refusal changes nothing");

    let cut = &clone_stream[..clone_stream.len() / 2];
    let refused = receive(b, forced(into("tank/c")), cut).unwrap_err();
    assert!(refused.contains("invalid stream"), "{refused}");
    assert!(
        read(b, "tank/c") == mine,
        "a cut stream leaves it as it was"
    );
    assert_eq!(prop(b, "tank/c", "origin"), "-");

    receive(b, forced(into("tank/c")), &clone_stream).unwrap();
    assert_eq!(prop(b, "tank/c", "origin"), "tank/dst@one");
    assert!(read(b, "tank/c") == read(a, "tank/c"), "the sender's clone");
    assert_eq!(
        prop(b, "tank/c", "org.test:keep"),
        "yes",
        "local properties stay"
    );
    check::verify_pool(b, "tank").unwrap();

    // Now it has a snapshot: -F refuses to lose it.
    let before = hosts.images();
    let refused = receive(b, forced(into("tank/c")), &clone_stream).unwrap_err();
    assert!(
        refused.contains("destination has snapshots (eg. 'tank/c@c1')"),
        "{refused}"
    );
    assert!(hosts.images() == before, "a refusal changes nothing");

    // A full stream with -F replaces too; a destination with children is refused.
    volume(b, "tank/full");
    write(b, "tank/full", 0, &mine);
    receive(b, forced(into("tank/full")), &send(a, full("tank/v@one"))).unwrap();
    assert!(
        read(b, "tank/full") == read(b, "tank/dst"),
        "the sender's @one"
    );
    b.create_dataset("tank/par", &[], false, "create").unwrap();
    b.create_dataset("tank/par/kid", &[], false, "create")
        .unwrap();
    let before = hosts.images();
    let refused = receive(b, forced(into("tank/par")), &send(a, full("tank/v@one"))).unwrap_err();
    assert!(
        refused.contains("destination has children (eg. 'tank/par/kid')"),
        "{refused}"
    );
    assert!(hosts.images() == before, "a refusal changes nothing");
    check::verify_pool(b, "tank").unwrap();
}

/// The BEGIN records of a stream: (to_name, from_guid, features).
fn begins(bytes: &[u8]) -> Vec<(String, u64, u64)> {
    let mut reader = StreamReader::new(bytes);
    let mut out = Vec::new();
    while let Some(record) = reader.next_record().unwrap() {
        if let Record::Begin(begin) = record {
            out.push((begin.to_name.clone(), begin.from_guid, begin.features));
        }
    }
    out
}

// DESCRIPTION: a full `send -R` of a tree whose clone's origin lies outside it sends the
// clone from that origin (a clone stream, OpenZFS's rule), not as a full copy; a pool that
// has the origin (same GUID) receives it as a clone of it, one that has not refuses that
// substream in one line, and with it the whole stream: the datasets before it were held
// (`receive_atomic`) and are discarded.
#[test]
fn a_replicated_clone_whose_origin_is_outside_goes_from_its_origin() {
    let hosts = setup();
    let (a, b) = (&hosts.a, &hosts.b);
    a.create_dataset("tank/tree", &[], false, "create").unwrap();
    a.clone_dataset("tank/v@one", "tank/tree/kid", &[], false, "clone")
        .unwrap();
    write(a, "tank/tree/kid", 0, &noise(64 << 10, 5));
    common::volume::snap_all(a, "tank/tree@s");
    let stream = send(
        a,
        SendSpec {
            replicate: true,
            ..full("tank/tree@s")
        },
    );
    let origin_guid: u64 = prop(a, "tank/v@one", "guid").parse().unwrap();
    let kid = begins(&stream)
        .into_iter()
        .find(|(name, _, _)| name == "tank/tree/kid@s")
        .unwrap();
    assert_eq!(kid.1, origin_guid, "the clone goes from its origin");
    assert!(kid.2 & tarn_send::FEATURE_CLONE != 0, "{kid:?}");

    // B has the origin (tank/dst@one, same GUID): the clone is a clone there.
    receive(b, into("tank/tree"), &stream).unwrap();
    assert_eq!(prop(b, "tank/tree/kid", "origin"), "tank/dst@one");
    assert!(read(b, "tank/tree/kid") == read(a, "tank/tree/kid"));
    let used: u64 = prop(b, "tank/tree/kid", "used").parse().unwrap();
    assert!(used < 256 << 10, "shares its origin's blocks: used {used}");
    check::verify_pool(b, "tank").unwrap();

    // A pool without the origin refuses the clone's substream in one line.
    let (_sims, c) = host(99);
    let refused = receive(&c, into("tank/tree"), &stream).unwrap_err();
    assert!(
        refused.contains("local origin for clone 'tank/tree/kid' does not exist"),
        "{refused}"
    );
    assert!(!refused.contains('\n'), "{refused}");
    assert!(!exists(&c, "tank/tree") && !exists(&c, "tank/tree/kid"));
}
