//! A receive whose stream arrived whole but whose last step cannot read a block it needs
//! (beyond parity: every copy rotten) fails in one line and leaves the destination exactly
//! as it was: every dataset and snapshot with its GUID, space figures and properties; no
//! partial state to abort; the pool imports again; the unreadable block reads as an error,
//! never as other bytes.
//!
//! Method: two engines stand for two hosts, each a pool `tank` on a mirror of two simulated
//! devices. The receiver's destination has changes in its head since the stream's source
//! (so `receive -F` must roll it back at END, which reads the head's blocks born since the
//! source: `receive_rollback::adopt_reads`); those blocks are found as the DVAs the write
//! added, and the receiver is exported and imported so that no cache holds them. When the
//! progress callback reports the whole stream read (the next step is END), garbage is
//! written over every copy of those blocks on both sides of the mirror.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::replica::{forced, full, host, incremental, into, receive, send};
use common::volume::{LEN, noise, snap, volume, write};
use tarn_engine::{Engine, ImportOptions, ReceiveSpec, SendSpec, SimProvider, check};
use tarn_format::BlockType;

/// (device offset, bytes) of every DVA of the dataset blocks of `tank` whose type is one of
/// `types`.
fn dvas(engine: &Engine, types: &[BlockType]) -> BTreeSet<(u64, u64)> {
    check::dataset_blocks(engine, "tank")
        .unwrap()
        .into_iter()
        .filter(|bp| types.contains(&bp.block_type))
        .flat_map(|bp| bp.dvas)
        .filter(|dva| dva.asize > 0)
        .map(|dva| (tarn_format::label::DATA_START + dva.offset, dva.asize))
        .collect()
}

/// Writes 128K of noise at `offset` of the receiver's head `name` and commits it; returns
/// the indirect and data blocks that write added (the head's alone: born after every
/// snapshot; not its dnode or object-set blocks, which an import reads).
fn head_write(engine: &Engine, name: &str, offset: usize) -> BTreeSet<(u64, u64)> {
    let types = [BlockType::Indirect, BlockType::Data];
    let before = dvas(engine, &types);
    write(engine, name, offset, &noise(128 << 10, 9));
    engine.sync_pool("tank").unwrap();
    let added: BTreeSet<(u64, u64)> = dvas(engine, &types).difference(&before).copied().collect();
    assert!(
        added.iter().any(|(_, len)| *len < 16 << 10),
        "an indirect block: {added:?}"
    );
    added
}

/// Export and import: no cache holds a block afterwards.
fn reimport(engine: &Engine) {
    engine.export_pool("tank", false).unwrap();
    common::import_tank(engine, &ImportOptions::default()).unwrap();
}

/// Every dataset and snapshot of `tank` with what a user sees of it.
fn rows(engine: &Engine) -> Vec<Vec<String>> {
    common::tank_rows(
        engine,
        &[
            "name",
            "type",
            "guid",
            "used",
            "referenced",
            "usedbysnapshots",
            "written",
            "org.test:note",
        ],
    )
}

/// Receives `stream` with `spec`; when the whole stream has been read, garbage goes over
/// every block of `doomed` on both devices. Returns the refusal (a receive must fail).
fn receive_rotting(
    engine: &Engine,
    sims: &Arc<SimProvider>,
    (spec, stream): (ReceiveSpec, &[u8]),
    doomed: &BTreeSet<(u64, u64)>,
) -> String {
    let mut rotted = false;
    let mut input = stream;
    let mut at_end = |at: tarn_engine::ReceiveProgress| {
        if at.bytes == stream.len() as u64 && !rotted {
            for (offset, len) in doomed {
                for side in ["/sim/d0", "/sim/d1"] {
                    sims.get(side).unwrap().rot(*offset, *len).unwrap();
                }
            }
            rotted = true;
        }
    };
    let refused = engine.receive(&spec, &mut input, &mut at_end);
    assert!(rotted, "the progress callback saw the whole stream");
    refused.unwrap_err().to_string()
}

/// The checks after a refused receive: one line, the same rows, nothing to abort at
/// `targets`, the same rows after an import, the head `unreadable` an error to read.
fn unchanged(engine: &Engine, refused: &str, before: &[Vec<String>], targets: &[&str]) {
    assert!(!refused.contains('\n'), "one line: {refused}");
    assert!(refused.starts_with("cannot read 'tank/"), "{refused}");
    assert!(refused.contains("unrecoverable"), "{refused}");
    assert_eq!(rows(engine), before, "{refused}");
    for target in targets {
        let abort = engine.receive_abort(target).unwrap_err().to_string();
        assert!(abort.contains("does not have any resumable"), "{abort}");
    }
    reimport(engine);
    assert_eq!(rows(engine), before, "after import");
}

/// The head of volume `name` cannot be read (its indirect block is rotten): an error, not
/// bytes.
fn reads_fail(engine: &Engine, name: &str) {
    let stat = engine.volume_stat(name).unwrap();
    let mut buf = vec![0u8; LEN];
    let read = engine.volume_read(&stat.pool, stat.dataset, 0, &mut buf);
    assert!(read.is_err(), "a rotten head reads as an error");
}

// DESCRIPTION: `receive -F` of a `-p` incremental (carrying a changed property) onto a
// destination with its own changes: END cannot read the head's blocks it rolls back. The
// receive fails in one line, the destination keeps its data, snapshots and its own value of
// the property, and the hidden clone is gone. Regression: the stream's properties were set
// on the destination before the read, and the undo's commit kept them.
#[test]
fn a_forced_receive_that_cannot_read_the_head_at_end_changes_nothing() {
    let (_, a) = host(7);
    let (b_sims, b) = host(77);
    volume(&a, "tank/v");
    write(&a, "tank/v", 0, &noise(LEN, 1));
    snap(&a, "tank/v@a");
    let note = |value: &str| vec![("org.test:note".to_string(), value.to_string())];
    a.set_dataset_props("tank/v", &note("sent"), "set").unwrap();
    write(&a, "tank/v", 0, &noise(256 << 10, 2));
    snap(&a, "tank/v@b");
    let stream = send(
        &a,
        SendSpec {
            properties: true,
            ..incremental("@a", "tank/v@b")
        },
    );
    receive(&b, into("tank/dst"), &send(&a, full("tank/v@a"))).unwrap();
    b.set_dataset_props("tank/dst", &note("mine"), "set")
        .unwrap();
    let doomed = head_write(&b, "tank/dst", 512 << 10);
    assert!(!doomed.is_empty());
    reimport(&b);
    let before = rows(&b);
    let spec = forced(into("tank/dst"));
    let refused = receive_rotting(&b, &b_sims, (spec, &stream), &doomed);
    unchanged(&b, &refused, &before, &["tank/dst"]);
    reads_fail(&b, "tank/dst");
}

// DESCRIPTION: `receive -R -F` of `send -R -i @a p@b` (a filesystem `p` and its volume
// `p/k`), whose substreams are held until the stream's end; `k` has changes of its own,
// and at the end its head's blocks cannot be read. The receive fails in one line and
// neither dataset changed (no `@b`, the same GUIDs and space), nothing held is left.
// Regression: `p` took its place and snapshot before `k`'s read failed, in the open txg,
// which the next commit made durable: half a replication stream received.
#[test]
fn a_replication_receive_that_cannot_read_a_head_at_end_changes_nothing() {
    let (_, a) = host(7);
    let (b_sims, b) = host(77);
    a.create_dataset("tank/p", &[], false, "create").unwrap();
    volume(&a, "tank/p/k");
    write(&a, "tank/p/k", 0, &noise(LEN, 1));
    common::volume::snap_all(&a, "tank/p@a");
    let replicate = |spec: SendSpec| SendSpec {
        replicate: true,
        ..spec
    };
    let first = send(&a, replicate(full("tank/p@a")));
    write(&a, "tank/p/k", 0, &noise(256 << 10, 2));
    common::volume::snap_all(&a, "tank/p@b");
    let second = send(&a, replicate(incremental("@a", "tank/p@b")));
    receive(&b, into("tank/q"), &first).unwrap();
    let doomed = head_write(&b, "tank/q/k", 512 << 10);
    reimport(&b);
    let before = rows(&b);
    assert_eq!(before.len(), 5, "{before:?}");
    let spec = forced(into("tank/q"));
    let refused = receive_rotting(&b, &b_sims, (spec, &second), &doomed);
    unchanged(&b, &refused, &before, &["tank/q", "tank/q/k"]);
    assert!(refused.contains("nothing was received"), "{refused}");
    reads_fail(&b, "tank/q/k");
}

// DESCRIPTION: `receive -R -F` of `send -R -i @a p@b` after the sender destroyed its volume
// `p/gone`: the end destroys the receiver's `q/gone`, whose head has changes of its own,
// and every block of that head's new indirect and data blocks is rotten when the stream has
// been read. The receive fails in one line and neither `q` nor `q/k` nor `q/gone` changed
// (no `@b`, the same GUIDs and space), nothing held is left. Regression: the held
// substreams took their places, then the destroy of `q/gone` walked its blocks and failed,
// in the open txg, which the next commit made durable.
#[test]
fn a_replication_receive_that_cannot_walk_a_dataset_it_destroys_changes_nothing() {
    let (_, a) = host(8);
    let (b_sims, b) = host(88);
    a.create_dataset("tank/p", &[], false, "create").unwrap();
    for name in ["tank/p/k", "tank/p/gone"] {
        volume(&a, name);
        write(&a, name, 0, &noise(LEN, 1));
    }
    common::volume::snap_all(&a, "tank/p@a");
    let replicate = |spec: SendSpec| SendSpec {
        replicate: true,
        ..spec
    };
    let first = send(&a, replicate(full("tank/p@a")));
    a.destroy_dataset("tank/p/gone", true, "destroy -r")
        .unwrap();
    write(&a, "tank/p/k", 0, &noise(256 << 10, 2));
    common::volume::snap_all(&a, "tank/p@b");
    let second = send(&a, replicate(incremental("@a", "tank/p@b")));
    receive(&b, into("tank/q"), &first).unwrap();
    let doomed = head_write(&b, "tank/q/gone", 512 << 10);
    reimport(&b);
    let before = rows(&b);
    assert_eq!(before.len(), 7, "{before:?}");
    let spec = forced(into("tank/q"));
    let refused = receive_rotting(&b, &b_sims, (spec, &second), &doomed);
    assert!(refused.contains("'tank/q/gone' to destroy it"), "{refused}");
    unchanged(&b, &refused, &before, &["tank/q", "tank/q/k"]);
    assert!(refused.contains("nothing was received"), "{refused}");
    reads_fail(&b, "tank/q/gone");
}

// DESCRIPTION: `receive -F` of `@a..@b` onto a destination with its own later snapshots
// `@x` (whose dead list holds the `@a` blocks the destination overwrote before it) and
// `@y`: END destroys `@y`, then `@x`, whose dead list is rotten by then (every copy of its
// list blocks, MOS blocks). The receive fails in one line, the destination keeps `@x`, `@y`
// and its space figures. Regression: `@y` was destroyed and merged into the head's dead
// list before `@x`'s dead list was read, in the open txg, which the next commit made
// durable.
#[test]
fn a_forced_receive_that_cannot_read_a_later_snapshots_dead_list_changes_nothing() {
    let (_, a) = host(9);
    let (b_sims, b) = host(99);
    volume(&a, "tank/v");
    write(&a, "tank/v", 0, &noise(LEN, 1));
    snap(&a, "tank/v@a");
    write(&a, "tank/v", 0, &noise(256 << 10, 2));
    snap(&a, "tank/v@b");
    let stream = send(&a, incremental("@a", "tank/v@b"));
    receive(&b, into("tank/dst"), &send(&a, full("tank/v@a"))).unwrap();
    write(&b, "tank/dst", 0, &noise(256 << 10, 3));
    snap(&b, "tank/dst@x");
    write(&b, "tank/dst", 0, &noise(256 << 10, 4));
    snap(&b, "tank/dst@y");
    b.sync_pool("tank").unwrap();
    let lists = tarn_engine::check::deadlist_blocks(&b, "tank/dst@x").unwrap();
    assert!(
        !lists.is_empty(),
        "@x's dead list holds the overwritten @a blocks"
    );
    let doomed: BTreeSet<(u64, u64)> = lists
        .iter()
        .flat_map(|bp| bp.dvas)
        .filter(|dva| dva.asize > 0)
        .map(|dva| (tarn_format::label::DATA_START + dva.offset, dva.asize))
        .collect();
    reimport(&b);
    let before = rows(&b);
    let refused = receive_rotting(&b, &b_sims, (forced(into("tank/dst")), &stream), &doomed);
    assert!(
        refused.contains("'tank/dst' to destroy its snapshots"),
        "{refused}"
    );
    unchanged(&b, &refused, &before, &["tank/dst"]);
}
