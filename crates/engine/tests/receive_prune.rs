//! `receive -R -F` of a replication stream destroys what the sender no longer has, as
//! OpenZFS's `zfs receive -F` does: snapshots of the received datasets whose GUIDs the
//! sender's manifest does not list, and datasets of the destination's tree that hold none of
//! its GUIDs; snapshots the sender renamed are renamed (matched by GUID). A held or cloned
//! snapshot to destroy refuses before any record with both hosts byte-identical; `-n` says
//! what would go and changes nothing; without `-F` nothing is destroyed; a stream without a
//! manifest (as builds before it sent) is received as before; a stream cut anywhere, or
//! refused at its end, leaves the receiver as it was (the substreams are held in hidden
//! datasets until the stream ends: `receive_atomic`).
//!
//! Method: two engines stand for two hosts, each with a pool `tank` on its own simulated
//! devices (tests/common/replica.rs). Host A's tree `tank/p` (a filesystem) with the volumes
//! `k` and `gone` is received by B as `tank/q`; then A destroys `tank/p@z` and `tank/p/gone`,
//! renames `tank/p/k@z` to `@zz`, writes to `k` and takes `@b` everywhere; the stream is
//! `send -R -i @a tank/p@b`. After each receive that succeeds `check::verify_pool` walks
//! every head, snapshot and dead list of the receiver.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::dataset_prop as prop;
use common::replica::{
    Hosts, forced, full, host, incremental, into, receive, received, replicate, send,
};
use common::volume::{noise, read, volume, write};
use tarn_engine::{Engine, ReceiveSpec, SendSpec, check};

/// The hosts after B received `tank/p@a` as `tank/q` and A moved on to `@b` (module doc);
/// the stream `send -R -i @a tank/p@b`.
fn setup() -> (Hosts, Vec<u8>) {
    let (a_sims, a) = host(7);
    let (b_sims, b) = host(77);
    a.create_dataset("tank/p", &[], false, "create").unwrap();
    volume(&a, "tank/p/k");
    volume(&a, "tank/p/gone");
    write(&a, "tank/p/k", 0, &noise(256 << 10, 1));
    write(&a, "tank/p/gone", 0, &noise(64 << 10, 2));
    common::volume::snap_all(&a, "tank/p@z");
    write(&a, "tank/p/k", 64 << 10, &noise(64 << 10, 3));
    common::volume::snap_all(&a, "tank/p@a");
    let first = send(&a, replicate(full("tank/p@a")));
    receive(&b, into("tank/q"), &first).unwrap();

    a.destroy_snapshots("tank/p@z", false, false, "destroy")
        .unwrap();
    a.destroy_dataset("tank/p/gone", true, "destroy -r")
        .unwrap();
    a.rename_dataset("tank/p/k@z", "tank/p/k@zz", "rename")
        .unwrap();
    write(&a, "tank/p/k", 512 << 10, &noise(128 << 10, 4));
    common::volume::snap_all(&a, "tank/p@b");
    let stream = send(&a, replicate(incremental("@a", "tank/p@b")));
    let hosts = Hosts {
        a_sims,
        b_sims,
        a,
        b,
    };
    (hosts, stream)
}

/// Every dataset and snapshot under `tank` of `engine`, with its GUID.
fn names(engine: &Engine) -> Vec<(String, String)> {
    let rows = common::tank_rows(engine, &["name", "guid"]).into_iter();
    rows.map(|row| (row[0].clone(), row[1].clone())).collect()
}

fn listed(engine: &Engine) -> Vec<String> {
    names(engine).into_iter().map(|(name, _)| name).collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// What B's tree is before the stream: A's `@z` and `@a` of `p`, `k` and `gone`.
const BEFORE: &[&str] = &[
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

// DESCRIPTION: -n -F says what would be destroyed and renamed and changes nothing (both
// hosts byte-identical); -F then destroys `tank/q@z` and `tank/q/gone`, renames
// `tank/q/k@z` to `@zz` (the same GUID), receives `@b` everywhere, and the pool verifies.
#[test]
fn receive_r_f_destroys_what_the_sender_no_longer_has() {
    let (hosts, stream) = setup();
    let (a, b) = (&hosts.a, &hosts.b);
    assert_eq!(listed(b), strings(BEFORE));
    let z_guid = prop(b, "tank/q/k@z", "guid");

    let images = hosts.images();
    let dry = ReceiveSpec {
        dry_run: true,
        ..forced(into("tank/q"))
    };
    let report = received(b, &dry, &stream).unwrap();
    assert_eq!(report.destroyed, strings(&["tank/q/gone", "tank/q@z"]));
    assert_eq!(
        report.renamed,
        vec![("tank/q/k@z".to_string(), "tank/q/k@zz".to_string())]
    );
    assert!(hosts.images() == images, "-n changes nothing");

    let report = received(b, &forced(into("tank/q")), &stream).unwrap();
    assert_eq!(report.destroyed, strings(&["tank/q/gone", "tank/q@z"]));
    assert_eq!(report.renamed.len(), 1);
    assert_eq!(
        listed(b),
        strings(&[
            "tank",
            "tank/q",
            "tank/q@a",
            "tank/q@b",
            "tank/q/k",
            "tank/q/k@zz",
            "tank/q/k@a",
            "tank/q/k@b",
        ])
    );
    assert_eq!(
        prop(b, "tank/q/k@zz", "guid"),
        z_guid,
        "renamed, not received"
    );
    assert_eq!(prop(b, "tank/q/k@b", "guid"), prop(a, "tank/p/k@b", "guid"));
    assert!(
        read(b, "tank/q/k") == read(a, "tank/p/k"),
        "the sender's @b"
    );
    check::verify_pool(b, "tank").unwrap();
}

// DESCRIPTION: without -F the stream is received and nothing is destroyed; the renamed
// snapshot is renamed all the same (as OpenZFS does).
#[test]
fn receive_r_without_f_destroys_nothing() {
    let (hosts, stream) = setup();
    let b = &hosts.b;
    let report = received(b, &into("tank/q"), &stream).unwrap();
    assert!(report.destroyed.is_empty(), "{:?}", report.destroyed);
    let now = listed(b);
    for kept in ["tank/q@z", "tank/q/gone", "tank/q/gone@z", "tank/q/k@zz"] {
        assert!(now.contains(&kept.to_string()), "{kept} in {now:?}");
    }
    assert!(!now.contains(&"tank/q/k@z".to_string()), "{now:?}");
    check::verify_pool(b, "tank").unwrap();
}

// DESCRIPTION: a snapshot to destroy with a user hold, a snapshot of a dataset to destroy
// with a hold, and one with a clone outside what goes, each refuse -F in one line before any
// record, both hosts byte-identical; released, the receive goes through.
#[test]
fn held_or_cloned_snapshots_to_destroy_refuse_and_change_nothing() {
    let (hosts, stream) = setup();
    let b = &hosts.b;
    let refuse = |needle: &str| {
        let images = hosts.images();
        let refused = received(b, &forced(into("tank/q")), &stream).unwrap_err();
        assert!(refused.contains(needle), "{needle}: {refused}");
        assert!(!refused.contains('\n'), "one line: {refused}");
        assert!(hosts.images() == images, "refused: {refused}");
    };
    b.hold("keep", &["tank/q@z".into()], false, "hold").unwrap();
    refuse("'tank/q@z' is not on the sender and is held");
    b.release("keep", &["tank/q@z".into()], false, "release")
        .unwrap();
    b.hold("keep", &["tank/q/gone@a".into()], false, "hold")
        .unwrap();
    refuse("'tank/q/gone@a' is not on the sender and is held");
    b.release("keep", &["tank/q/gone@a".into()], false, "release")
        .unwrap();
    b.clone_dataset("tank/q/gone@z", "tank/kid", &[], false, "clone")
        .unwrap();
    refuse("'tank/q/gone@z' is not on the sender and has dependent clones (eg. 'tank/kid')");
    b.destroy_dataset("tank/kid", false, "destroy").unwrap();

    received(b, &forced(into("tank/q")), &stream).unwrap();
    assert!(!listed(b).contains(&"tank/q/gone".to_string()));
    check::verify_pool(b, "tank").unwrap();
}

/// Bytes of the first substream of `stream` (its manifest): up to and with its END.
fn first_substream_len(stream: &[u8]) -> usize {
    let (mut at, mut sequence) = (0, 0);
    loop {
        let (record, len) = tarn_send::decode_frame(&stream[at..], sequence).unwrap();
        at += len;
        sequence += 1;
        if matches!(record, tarn_send::Record::End { .. }) {
            return at;
        }
    }
}

// DESCRIPTION: the stream as a build before the manifest sent it (the same substreams, no
// manifest substream) is received with -F: every `@b` arrives, nothing is destroyed or
// renamed (there is no list to go by). The manifest substream is the stream's first and
// carries the MANIFEST feature bit, which an older receiver refuses at that BEGIN.
#[test]
fn a_stream_without_a_manifest_is_received_as_before() {
    let (hosts, stream) = setup();
    let b = &hosts.b;
    let skip = first_substream_len(&stream);
    let (first, _) = tarn_send::decode_frame(&stream, 0).unwrap();
    let tarn_send::Record::Begin(begin) = first else {
        panic!("a BEGIN first")
    };
    assert_ne!(begin.features & tarn_send::FEATURE_MANIFEST, 0);
    let report = received(b, &forced(into("tank/q")), &stream[skip..]).unwrap();
    assert!(report.destroyed.is_empty() && report.renamed.is_empty());
    let now = listed(b);
    for kept in [
        "tank/q@z",
        "tank/q/gone@a",
        "tank/q/k@z",
        "tank/q/k@b",
        "tank/q@b",
    ] {
        assert!(now.contains(&kept.to_string()), "{kept} in {now:?}");
    }
    check::verify_pool(b, "tank").unwrap();
}

// DESCRIPTION: the stream cut inside its manifest, right after it, inside the first
// substream, right after the first substream's END, and inside the last is refused with -F
// and leaves every dataset and snapshot of the receiver as it was (GUIDs included): the
// substreams of a replication stream are held in hidden datasets until the whole stream
// has arrived (`receive_atomic`), and the prune comes after them.
#[test]
fn a_cut_stream_changes_nothing() {
    let (hosts, stream) = setup();
    let b = &hosts.b;
    let manifest = first_substream_len(&stream);
    let first = manifest + first_substream_len(&stream[manifest..]);
    let before = names(b);
    let data = read(b, "tank/q/k");
    for cut in [
        manifest / 2,
        manifest,
        manifest + 100,
        first - 1,
        first,
        first + 100,
        stream.len() - 1,
    ] {
        let refused = received(b, &forced(into("tank/q")), &stream[..cut]).unwrap_err();
        assert!(
            refused.contains("invalid stream"),
            "cut at {cut}: {refused}"
        );
        assert_eq!(names(b), before, "cut at {cut}");
        assert!(read(b, "tank/q/k") == data, "cut at {cut}");
        check::verify_pool(b, "tank").unwrap();
    }
    received(b, &forced(into("tank/q")), &stream).unwrap();
    assert!(read(b, "tank/q/k") == read(&hosts.a, "tank/p/k"));
}

// DESCRIPTION: a hold put on a snapshot to destroy while the substreams come in (from the
// progress callback, between batches) refuses the receive at the end in one line that says
// nothing was received; the receiver's datasets and snapshots are as they were.
#[test]
fn a_hold_made_during_the_receive_refuses_the_prune_at_the_end() {
    let (hosts, stream) = setup();
    let b = &hosts.b;
    let mut input = &stream[..];
    let mut held = false;
    let refused = b
        .receive(&forced(into("tank/q")), &mut input, &mut |_| {
            if !held {
                b.hold("keep", &["tank/q@z".into()], false, "hold").unwrap();
                held = true;
            }
        })
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("'tank/q@z' is not on the sender and is held")
            && refused.contains("nothing was received, destroyed or renamed")
            && !refused.contains('\n'),
        "{refused}"
    );
    assert_eq!(listed(b), strings(BEFORE));
    check::verify_pool(b, "tank").unwrap();
}

// DESCRIPTION: `send -R -I @a p@c` onto existing datasets (`@a..@b`, then `@b..@c` of each,
// the second on top of the first's hidden clone: `receive_atomic`) cut one byte before its
// end leaves B exactly as it was (no `@b` or `@c` anywhere); the whole stream then brings
// them all (-F). Before the `-R -I` atomicity (issue 16) the cut left `q@b`, `q@c` and
// `k@b` placed.
#[test]
fn a_cut_intermediate_replication_stream_changes_nothing() {
    let (hosts, _) = setup();
    let (a, b) = (&hosts.a, &hosts.b);
    common::volume::snap_all(a, "tank/p@c");
    let spec = SendSpec {
        intermediates: true,
        ..replicate(incremental("@a", "tank/p@c"))
    };
    let whole = send(a, spec);
    let before = listed(b);
    let refused = received(b, &forced(into("tank/q")), &whole[..whole.len() - 1]).unwrap_err();
    assert!(refused.contains("invalid stream"), "{refused}");
    assert_eq!(listed(b), before);
    check::verify_pool(b, "tank").unwrap();
    received(b, &forced(into("tank/q")), &whole).unwrap();
    let now = listed(b);
    for placed in ["tank/q@b", "tank/q@c", "tank/q/k@b", "tank/q/k@c"] {
        assert!(now.contains(&placed.to_string()), "{now:?}");
    }
    assert!(read(b, "tank/q/k") == read(a, "tank/p/k"));
    check::verify_pool(b, "tank").unwrap();
}

/// Hosts for the move tests: A's `tank/p` (a filesystem) with the volumes `k` and `m` and
/// the filesystem `d`, received by B as `tank/q` (`-R` of `@a`); then A renames `k` to `k2`,
/// moves `m` into `d`, writes to `k2` and takes `@b` everywhere. Returns the hosts and the
/// stream `send -R -i @a tank/p@b`.
fn moved_setup() -> (Hosts, Vec<u8>) {
    let (a_sims, a) = host(8);
    let (b_sims, b) = host(88);
    a.create_dataset("tank/p", &[], false, "create").unwrap();
    a.create_dataset("tank/p/d", &[], false, "create").unwrap();
    volume(&a, "tank/p/k");
    volume(&a, "tank/p/m");
    write(&a, "tank/p/k", 0, &noise(128 << 10, 11));
    write(&a, "tank/p/m", 0, &noise(64 << 10, 12));
    common::volume::snap_all(&a, "tank/p@a");
    receive(&b, into("tank/q"), &send(&a, replicate(full("tank/p@a")))).unwrap();
    a.rename_dataset("tank/p/k", "tank/p/k2", "rename").unwrap();
    a.rename_dataset("tank/p/m", "tank/p/d/m", "rename")
        .unwrap();
    write(&a, "tank/p/k2", 256 << 10, &noise(64 << 10, 13));
    common::volume::snap_all(&a, "tank/p@b");
    let stream = send(&a, replicate(incremental("@a", "tank/p@b")));
    let hosts = Hosts {
        a_sims,
        b_sims,
        a,
        b,
    };
    (hosts, stream)
}

// DESCRIPTION: datasets the sender renamed (`k` -> `k2`) or moved into another parent (`m`
// -> `d/m`) between two `send -R` are followed by their snapshots' GUIDs, as OpenZFS's
// receive of a replication stream does: -n -v says so and changes nothing; the receive
// (without -F) moves them and brings `@b` into them; GUIDs and bytes are the sender's.
#[test]
fn datasets_the_sender_renamed_or_moved_are_followed() {
    let (hosts, stream) = moved_setup();
    let (a, b) = (&hosts.a, &hosts.b);
    let k_guid = prop(b, "tank/q/k@a", "guid");
    let images = hosts.images();
    let dry = ReceiveSpec {
        dry_run: true,
        ..into("tank/q")
    };
    let report = received(b, &dry, &stream).unwrap();
    let moved = vec![
        ("tank/q/k".to_string(), "tank/q/k2".to_string()),
        ("tank/q/m".to_string(), "tank/q/d/m".to_string()),
    ];
    assert_eq!(report.renamed, moved);
    assert!(hosts.images() == images, "-n changes nothing");

    let report = received(b, &into("tank/q"), &stream).unwrap();
    assert_eq!(report.renamed, moved);
    assert!(report.destroyed.is_empty(), "{:?}", report.destroyed);
    assert_eq!(
        listed(b),
        strings(&[
            "tank",
            "tank/q",
            "tank/q@a",
            "tank/q@b",
            "tank/q/d",
            "tank/q/d@a",
            "tank/q/d@b",
            "tank/q/d/m",
            "tank/q/d/m@a",
            "tank/q/d/m@b",
            "tank/q/k2",
            "tank/q/k2@a",
            "tank/q/k2@b",
        ])
    );
    assert_eq!(
        prop(b, "tank/q/k2@a", "guid"),
        k_guid,
        "moved, not received"
    );
    assert!(read(b, "tank/q/k2") == read(a, "tank/p/k2"));
    assert!(read(b, "tank/q/d/m") == read(a, "tank/p/d/m"));
    check::verify_pool(b, "tank").unwrap();
}

// DESCRIPTION: a dataset of the receiver at the name a moved one takes (`tank/q/k2`, made
// here, none of the sender's GUIDs) refuses the receive without -F in one line before any
// record, both hosts byte-identical; with -F it is destroyed (the sender has no such
// dataset: its `k2` is the moved `k`) and the move is made.
#[test]
fn a_move_onto_a_taken_name_refuses_without_f_and_replaces_it_with_f() {
    let (hosts, stream) = moved_setup();
    let b = &hosts.b;
    volume(b, "tank/q/k2");
    let images = hosts.images();
    let refused = received(b, &into("tank/q"), &stream).unwrap_err();
    assert!(
        refused.contains("'tank/q/k' was renamed 'tank/q/k2' by the sender")
            && !refused.contains('\n'),
        "{refused}"
    );
    assert!(hosts.images() == images, "refused: {refused}");

    let report = received(b, &forced(into("tank/q")), &stream).unwrap();
    assert_eq!(report.destroyed, strings(&["tank/q/k2"]));
    assert!(read(b, "tank/q/k2") == read(&hosts.a, "tank/p/k2"));
    check::verify_pool(b, "tank").unwrap();
}

/// The first two steps of the test below: `receive -s -F` of `stream` cut inside `k`'s
/// substream, then `send -t` of `k`'s token; returns the `receive -s -F` spec.
fn cut_then_finish_k(hosts: &Hosts, stream: &[u8]) -> ReceiveSpec {
    let (a, b) = (&hosts.a, &hosts.b);
    let resumable = ReceiveSpec {
        resumable: true,
        ..forced(into("tank/q"))
    };
    let cut = received(b, &resumable, &stream[..stream.len() - 20_000]).unwrap_err();
    assert!(cut.contains("tarn send -t") && !cut.contains('\n'), "{cut}");
    let listed_cut = listed(b);
    assert!(
        listed_cut.contains(&"tank/q@b".to_string()),
        "{listed_cut:?}"
    );
    assert!(
        !listed_cut.contains(&"tank/q/k@b".to_string()),
        "{listed_cut:?}"
    );
    assert!(
        listed_cut.contains(&"tank/q/gone".to_string()),
        "no prune: {listed_cut:?}"
    );
    let token = prop(b, "tank/q/k", "receive_resume_token");
    assert_ne!(token, "-");

    let rest = send(
        a,
        SendSpec {
            token: Some(token),
            ..SendSpec::default()
        },
    );
    let finish = ReceiveSpec {
        resumable: true,
        ..into("tank/q/k")
    };
    received(b, &finish, &rest).unwrap();
    assert!(listed(b).contains(&"tank/q/k@b".to_string()));

    resumable
}

// DESCRIPTION: `receive -s -F` of the replication stream cut inside its last substream
// (`k`'s) keeps what came before the cut (each substream commits at its END under -s:
// `tank/q@b`), saves `k`'s partial receive (its token), and neither prunes nor renames;
// `send -t` of the token finishes `k`; the same stream received again (without -F, then
// with it) skips the substreams whose snapshot is here by GUID (reported as skipped, the
// snapshots kept), renames, then destroys what the sender no longer has, and the tree is
// the sender's. Regression: the stream
// again was refused (`tank/q` has `@b`, later than the stream's source), so a cut `-R -s`
// could only be finished dataset by dataset, without its prune (OpenZFS's limit too).
#[test]
fn a_cut_resumable_replication_stream_is_finished_by_its_token_and_the_stream_again() {
    let (hosts, stream) = setup();
    let (a, b) = (&hosts.a, &hosts.b);
    let resumable = cut_then_finish_k(&hosts, &stream);
    let createtxg = prop(b, "tank/q@b", "createtxg");
    let again = ReceiveSpec {
        force: false,
        ..resumable.clone()
    };
    let report = received(b, &again, &stream).unwrap();
    assert_eq!(report.skipped, strings(&["tank/q@b", "tank/q/k@b"]));
    assert!(report.snapshots.is_empty(), "{:?}", report.snapshots);
    assert!(
        report.destroyed.is_empty(),
        "without -F: {:?}",
        report.destroyed
    );
    assert_eq!(report.renamed.len(), 1);
    let report = received(b, &resumable, &stream).unwrap();
    assert_eq!(report.skipped, strings(&["tank/q@b", "tank/q/k@b"]));
    assert_eq!(report.destroyed, strings(&["tank/q/gone", "tank/q@z"]));
    assert_eq!(
        prop(b, "tank/q@b", "createtxg"),
        createtxg,
        "kept, not received again"
    );
    assert_eq!(
        listed(b),
        strings(&[
            "tank",
            "tank/q",
            "tank/q@a",
            "tank/q@b",
            "tank/q/k",
            "tank/q/k@zz",
            "tank/q/k@a",
            "tank/q/k@b",
        ])
    );
    assert_eq!(prop(b, "tank/q/k@b", "guid"), prop(a, "tank/p/k@b", "guid"));
    assert!(read(b, "tank/q/k") == read(a, "tank/p/k"));
    check::verify_pool(b, "tank").unwrap();
}
