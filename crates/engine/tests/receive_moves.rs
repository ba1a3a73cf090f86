//! Edge cases of `receive -R` following the datasets the sender renamed or moved
//! (`receive_moves`): a new dataset of the stream at a moved dataset's old name, a stream
//! that would pass the destination's `filesystem_limit`, and `receive -n` of a move into a
//! parent the stream itself makes. Each is received as the sender's tree or refused in one
//! line with the receiver as it was (every dataset and snapshot, GUID and space figure);
//! `-n` changes no device byte.
//!
//! Method: two engines stand for two hosts; A's `tank/p` (a filesystem with the volumes `k`
//! and `m`) is received by B as `tank/q` (`send -R` of `@a`); A then changes its tree, takes
//! `@b` everywhere, and B receives `send -R -i @a tank/p@b`.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::dataset_prop as prop;
use common::replica::{Hosts, host, incremental, into, received, replicate, send, volumes_at_a};
use common::volume::{noise, read, volume, write};
use tarn_engine::{Engine, ReceiveSpec, check};

/// A's `tank/p` with `k` and `m` at `@a`, received by B as `tank/q`; `change` then
/// changes A's tree before `@b`. Returns the hosts and `send -R -i @a tank/p@b`.
fn setup(change: impl Fn(&Engine)) -> (Hosts, Vec<u8>) {
    let (a_sims, a) = host(9);
    let (b_sims, b) = host(99);
    let first = volumes_at_a(&a);
    received(&b, &into("tank/q"), &first).unwrap();
    change(&a);
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

/// Every dataset and snapshot under `tank`: name, GUID, used, referenced.
fn rows(engine: &Engine) -> Vec<Vec<String>> {
    common::tank_rows(engine, &["name", "guid", "used", "referenced"])
}

fn names(engine: &Engine) -> Vec<String> {
    rows(engine).into_iter().map(|row| row[0].clone()).collect()
}

fn dry(spec: ReceiveSpec) -> ReceiveSpec {
    ReceiveSpec {
        dry_run: true,
        ..spec
    }
}

// DESCRIPTION: B's `tank/q` has `filesystem_limit` 3 (it holds 2); the stream brings two
// new datasets (`n1`, `n2`), each of which alone would fit: the receive is refused in one
// line naming the limit, B's datasets, snapshots and space as they were, nothing held left
// to abort. With the limit raised to 4 it is received. Regression: each new dataset was
// checked against the tree without the others the stream held, so both were placed.
#[test]
fn a_replication_stream_past_filesystem_limit_is_refused_whole() {
    let (hosts, stream) = setup(|a| {
        volume(a, "tank/p/n1");
        volume(a, "tank/p/n2");
    });
    let b = &hosts.b;
    let limit = |n: &str| vec![("filesystem_limit".to_string(), n.to_string())];
    b.set_dataset_props("tank/q", &limit("3"), "set").unwrap();
    let before = rows(b);
    let refused = received(b, &into("tank/q"), &stream).unwrap_err();
    assert!(
        refused.contains("filesystem limit exceeded (filesystem_limit=3 on 'tank/q')")
            && !refused.contains('\n'),
        "{refused}"
    );
    assert_eq!(rows(b), before, "{refused}");
    for target in ["tank/q", "tank/q/n1", "tank/q/n2"] {
        let abort = b.receive_abort(target).unwrap_err().to_string();
        assert!(abort.contains("does not have any resumable"), "{abort}");
    }
    check::verify_pool(b, "tank").unwrap();

    b.set_dataset_props("tank/q", &limit("4"), "set").unwrap();
    received(b, &into("tank/q"), &stream).unwrap();
    assert_eq!(prop(b, "tank/q", "filesystem_count"), "4");
    check::verify_pool(b, "tank").unwrap();
}

// DESCRIPTION: the sender made the filesystem `e` and moved `m` into it: `receive -n`
// reports the move into the parent the stream itself makes (the real receive's order),
// changing no byte on either host; the receive then does it.
#[test]
fn a_dry_run_of_a_move_into_a_parent_the_stream_makes_reports_it() {
    let (hosts, stream) = setup(|a| {
        a.create_dataset("tank/p/e", &[], false, "create").unwrap();
        a.rename_dataset("tank/p/m", "tank/p/e/m", "rename")
            .unwrap();
    });
    let b = &hosts.b;
    let images = hosts.images();
    let moved = vec![("tank/q/m".to_string(), "tank/q/e/m".to_string())];
    let report = received(b, &dry(into("tank/q")), &stream).unwrap();
    assert_eq!(report.renamed, moved);
    assert!(
        report.snapshots.iter().any(|s| s == "tank/q/e@b"),
        "{report:?}"
    );
    assert!(hosts.images() == images, "-n changes nothing");

    let report = received(b, &into("tank/q"), &stream).unwrap();
    assert_eq!(report.renamed, moved);
    assert!(read(b, "tank/q/e/m") == read(&hosts.a, "tank/p/e/m"));
    check::verify_pool(b, "tank").unwrap();
}
// DESCRIPTION: the sender renamed `k` to `k2` and made a new `k`: the stream's new `k`
// takes the old name once the moved one has left it. `-n` reports the move and changes no
// byte; the receive (without -F) moves B's `k` to `k2` (its GUIDs kept) and makes the new
// `k`, both with the sender's bytes, and the pool verifies.
#[test]
fn a_new_dataset_at_a_moved_datasets_old_name_is_received() {
    let (hosts, stream) = setup(|a| {
        a.rename_dataset("tank/p/k", "tank/p/k2", "rename").unwrap();
        volume(a, "tank/p/k");
        write(a, "tank/p/k", 0, &noise(96 << 10, 3));
    });
    let (a, b) = (&hosts.a, &hosts.b);
    let k_guid = prop(b, "tank/q/k@a", "guid");
    let images = hosts.images();
    let report = received(b, &dry(into("tank/q")), &stream).unwrap();
    let moved = vec![("tank/q/k".to_string(), "tank/q/k2".to_string())];
    assert_eq!(report.renamed, moved);
    assert!(hosts.images() == images, "-n changes nothing");

    let report = received(b, &into("tank/q"), &stream).unwrap();
    assert_eq!(report.renamed, moved);
    assert_eq!(
        names(b),
        [
            "tank",
            "tank/q",
            "tank/q@a",
            "tank/q@b",
            "tank/q/k",
            "tank/q/k@b",
            "tank/q/k2",
            "tank/q/k2@a",
            "tank/q/k2@b",
            "tank/q/m",
            "tank/q/m@a",
            "tank/q/m@b",
        ]
    );
    assert_eq!(
        prop(b, "tank/q/k2@a", "guid"),
        k_guid,
        "moved, not received"
    );
    assert_eq!(prop(b, "tank/q/k@b", "guid"), prop(a, "tank/p/k@b", "guid"));
    assert!(read(b, "tank/q/k") == read(a, "tank/p/k"));
    assert!(read(b, "tank/q/k2") == read(a, "tank/p/k2"));
    check::verify_pool(b, "tank").unwrap();
}

/// Where the substream whose BEGIN names `to_name` (a full one) starts and ends in `stream`.
fn substream_of(stream: &[u8], to_name: &str) -> (usize, usize) {
    let (mut at, mut sequence, mut start) = (0, 0, None);
    while at < stream.len() {
        let (record, len) = tarn_send::decode_frame(&stream[at..], sequence).unwrap();
        sequence += 1;
        match record {
            tarn_send::Record::Begin(begin) if begin.to_name == to_name => start = Some(at),
            tarn_send::Record::End { .. } => {
                sequence = 0;
                if let Some(start) = start {
                    return (start, at + len);
                }
            }
            _ => {}
        }
        at += len;
    }
    panic!("no substream of {to_name}");
}

/// Names, and snapshot GUIDs, of every dataset and snapshot under `tank/q`, with the bytes
/// of its volumes: what two receives of the same stream must agree on.
fn outcome(engine: &Engine) -> (Vec<Vec<String>>, Vec<Vec<u8>>) {
    let mut rows = rows(engine);
    rows.retain(|row| row[0].starts_with("tank/q"));
    for row in &mut rows {
        row.truncate(2);
        if !row[0].contains('@') {
            row[1].clear();
        }
    }
    let volumes = ["tank/q/k", "tank/q/k2", "tank/q/m"];
    (rows, volumes.iter().map(|v| read(engine, v)).collect())
}

// DESCRIPTION: the same stream (the sender renamed `k` to `k2` and made a new `k`) under
// `receive -s`: nothing is held, so the moves are applied when the manifest arrives
// (OpenZFS renames before the substreams too) and the new `k` is received at its name; the
// report names the move. Cut inside the new `k`'s substream, the move and the substreams
// before stay, and `k` has the partial state: `send -t` finishes `k@b`, the stream again
// skips what is there and B ends as the receive without -s leaves it (names, snapshot
// GUIDs, bytes), the pool verifies. Negative control: before, the stream was refused at
// the new `k`'s substream under -s.
#[test]
fn a_new_dataset_at_a_moved_datasets_old_name_is_received_under_s_and_resumes() {
    let change = |a: &Engine| {
        a.rename_dataset("tank/p/k", "tank/p/k2", "rename").unwrap();
        volume(a, "tank/p/k");
        write(a, "tank/p/k", 0, &noise(96 << 10, 3));
    };
    let (plain, stream) = setup(change);
    received(&plain.b, &into("tank/q"), &stream).unwrap();
    let want = outcome(&plain.b);
    let resumable = ReceiveSpec {
        resumable: true,
        ..into("tank/q")
    };
    let moved = vec![("tank/q/k".to_string(), "tank/q/k2".to_string())];

    let (whole, stream) = setup(change);
    let report = received(&whole.b, &resumable, &stream).unwrap();
    assert_eq!(report.renamed, moved);
    assert_eq!(outcome(&whole.b), want);
    check::verify_pool(&whole.b, "tank").unwrap();

    let (cut, stream) = setup(change);
    let (start, end) = substream_of(&stream, "tank/p/k@b");
    let refused = received(&cut.b, &resumable, &stream[..(start + end) / 2]).unwrap_err();
    assert!(refused.contains("send -t"), "{refused}");
    assert_eq!(
        prop(&cut.b, "tank/q/k2@a", "guid"),
        prop(&cut.a, "tank/p/k2@a", "guid")
    );
    // The new `k`'s partial state is its hidden dataset's: the refusal names the token.
    let token = refused.split("send -t ").nth(1).unwrap();
    let token = token.split('\'').next().unwrap().to_string();
    let rest = send(
        &cut.a,
        tarn_engine::SendSpec {
            token: Some(token),
            ..tarn_engine::SendSpec::default()
        },
    );
    received(
        &cut.b,
        &ReceiveSpec {
            resumable: true,
            ..into("tank/q/k")
        },
        &rest,
    )
    .unwrap();
    received(&cut.b, &resumable, &stream).unwrap();
    assert_eq!(outcome(&cut.b), want);
    check::verify_pool(&cut.b, "tank").unwrap();
}
