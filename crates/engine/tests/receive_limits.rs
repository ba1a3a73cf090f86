//! `filesystem_limit` and `snapshot_limit` of a receive counted as ZFS counts them: what
//! `receive -F` destroys (a forced receive's snapshots after its source, the snapshots a
//! `-R -F` prune destroys) is subtracted before what the stream brings is added, and the
//! datasets a `-R` receive moves count in their new parents. A receive that ends within the
//! limits is received; one that ends past a limit it adds to is refused in one line, with
//! the receiver's datasets, snapshots and space as they were and nothing held left.
//!
//! Method: two engines stand for two hosts (tests/common/replica.rs); host B receives host
//! A's datasets, changes its side, sets a limit, and receives A's next stream.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::dataset_prop as prop;
use common::replica::{
    Hosts, forced, full, host, incremental, into, receive, received, replicate, send,
};
use common::volume::{noise, read, volume, write};
use tarn_engine::{Engine, check};

/// Every dataset and snapshot under `tank`: name, GUID, used, referenced.
fn rows(engine: &Engine) -> Vec<Vec<String>> {
    common::tank_rows(engine, &["name", "guid", "used", "referenced"])
}

fn set(engine: &Engine, dataset: &str, property: &str, value: &str) {
    let props = vec![(property.to_string(), value.to_string())];
    engine.set_dataset_props(dataset, &props, "set").unwrap();
}

/// Receives `stream` with `spec`, expecting a refusal in one line containing `expected`
/// that leaves B's tree as it was and nothing to abort under `targets`.
fn refused(
    b: &Engine,
    spec: &tarn_engine::ReceiveSpec,
    stream: &[u8],
    expected: &str,
    targets: &[&str],
) {
    let before = rows(b);
    let error = received(b, spec, stream).unwrap_err();
    assert!(error.contains(expected) && !error.contains('\n'), "{error}");
    assert_eq!(rows(b), before, "{error}");
    for target in targets {
        let abort = b.receive_abort(target).unwrap_err().to_string();
        assert!(abort.contains("does not have any resumable"), "{abort}");
    }
    check::verify_pool(b, "tank").unwrap();
}

/// A's volume `tank/v@a` received by B as `tank/w`; B then takes `@x` and `@y`, A writes
/// and takes `@b`. Returns the hosts and `send -i @a tank/v@b`.
fn forced_setup() -> (Hosts, Vec<u8>) {
    let (a_sims, a) = host(5);
    let (b_sims, b) = host(55);
    volume(&a, "tank/v");
    write(&a, "tank/v", 0, &noise(128 << 10, 1));
    a.snapshot(&["tank/v@a".into()], false, &[], "snapshot")
        .unwrap();
    receive(&b, into("tank/w"), &send(&a, full("tank/v@a"))).unwrap();
    for snap in ["tank/w@x", "tank/w@y"] {
        b.snapshot(&[snap.into()], false, &[], "snapshot").unwrap();
    }
    write(&a, "tank/v", 64 << 10, &noise(64 << 10, 2));
    a.snapshot(&["tank/v@b".into()], false, &[], "snapshot")
        .unwrap();
    let stream = send(&a, incremental("@a", "tank/v@b"));
    let hosts = Hosts {
        a_sims,
        b_sims,
        a,
        b,
    };
    (hosts, stream)
}

// DESCRIPTION: B's `tank/w` holds @a @x @y with `snapshot_limit` 2; `receive -F` of A's
// `@a..@b` destroys @x and @y and adds @b: 2 snapshots, within the limit, received (ZFS
// rolls back before it receives). Regression: the check counted 3 + 1 and refused. With
// the limit at 1 it ends past it and is refused, B as it was.
#[test]
fn a_forced_receive_subtracts_the_later_snapshots_it_destroys() {
    let (hosts, stream) = forced_setup();
    let b = &hosts.b;
    set(b, "tank/w", "snapshot_limit", "1");
    let message = "snapshot limit exceeded (snapshot_limit=1 on 'tank/w')";
    refused(b, &forced(into("tank/w")), &stream, message, &["tank/w"]);

    set(b, "tank/w", "snapshot_limit", "2");
    received(b, &forced(into("tank/w")), &stream).unwrap();
    assert_eq!(prop(b, "tank/w", "snapshot_count"), "2");
    assert!(read(b, "tank/w") == read(&hosts.a, "tank/v"));
    check::verify_pool(b, "tank").unwrap();
}

/// A's `tank/p` with the volume `k`, at `@z` and `@a`, received by B as `tank/q` (`-R`);
/// A then destroys `@z` everywhere and takes `@b`. Returns the hosts and
/// `send -R -i @a tank/p@b`.
fn pruned_setup() -> (Hosts, Vec<u8>) {
    let (a_sims, a) = host(6);
    let (b_sims, b) = host(66);
    a.create_dataset("tank/p", &[], false, "create").unwrap();
    volume(&a, "tank/p/k");
    write(&a, "tank/p/k", 0, &noise(128 << 10, 1));
    for snap in ["tank/p@z", "tank/p@a"] {
        common::volume::snap_all(&a, snap);
    }
    receive(&b, into("tank/q"), &send(&a, replicate(full("tank/p@a")))).unwrap();
    a.destroy_snapshots("tank/p@z", true, false, "destroy -r")
        .unwrap();
    write(&a, "tank/p/k", 64 << 10, &noise(64 << 10, 2));
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

// DESCRIPTION: B's `tank/q` tree holds 4 snapshots (@z @a of `q` and `q/k`) with
// `snapshot_limit` 4; `receive -R -F` destroys both @z and adds both @b: 4, received.
// Regression: each substream was checked as it began, and the end again, without the
// prune's destroys (4 + 1 > 4: refused). With the limit at 3 it is refused, B as it was.
#[test]
fn receive_r_f_subtracts_what_its_prune_destroys() {
    let (hosts, stream) = pruned_setup();
    let b = &hosts.b;
    set(b, "tank/q", "snapshot_limit", "3");
    let message = "snapshot limit exceeded (snapshot_limit=3 on 'tank/q')";
    let targets = ["tank/q", "tank/q/k"];
    refused(b, &forced(into("tank/q")), &stream, message, &targets);

    set(b, "tank/q", "snapshot_limit", "4");
    let report = received(b, &forced(into("tank/q")), &stream).unwrap();
    assert_eq!(report.destroyed, ["tank/q@z", "tank/q/k@z"], "{report:?}");
    assert_eq!(prop(b, "tank/q", "snapshot_count"), "4");
    assert!(read(b, "tank/q/k") == read(&hosts.a, "tank/p/k"));
    check::verify_pool(b, "tank").unwrap();
}

/// A's `tank/p` with the filesystem `e` and the volume `m`, at `@a`, received by B as
/// `tank/q`; `change` changes A's tree (moving `m` into `e`) before `@b` everywhere.
/// Returns the hosts and `send -R -i @a tank/p@b`.
fn moved_setup(change: impl Fn(&Engine)) -> (Hosts, Vec<u8>) {
    let (a_sims, a) = host(8);
    let (b_sims, b) = host(88);
    a.create_dataset("tank/p", &[], false, "create").unwrap();
    a.create_dataset("tank/p/e", &[], false, "create").unwrap();
    volume(&a, "tank/p/m");
    write(&a, "tank/p/m", 0, &noise(64 << 10, 1));
    common::volume::snap_all(&a, "tank/p@a");
    receive(&b, into("tank/q"), &send(&a, replicate(full("tank/p@a")))).unwrap();
    a.rename_dataset("tank/p/m", "tank/p/e/m", "rename")
        .unwrap();
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

// DESCRIPTION: the sender moved `m` into `e`; B's `tank/q/e` has `filesystem_limit` 0:
// the move would put a dataset under it, so the receive is refused in one line when the
// manifest arrives, before any substream, both hosts byte-identical. Regression: moves were
// not counted and `m` was moved in. With the limit at 1 it is received.
#[test]
fn a_move_into_a_parent_past_its_filesystem_limit_is_refused() {
    let (hosts, stream) = moved_setup(|_| {});
    let b = &hosts.b;
    set(b, "tank/q/e", "filesystem_limit", "0");
    let images = hosts.images();
    let message = "filesystem limit exceeded (filesystem_limit=0 on 'tank/q/e')";
    refused(
        b,
        &into("tank/q"),
        &stream,
        message,
        &["tank/q", "tank/q/m"],
    );
    assert!(hosts.images() == images, "refused before any change");

    set(b, "tank/q/e", "filesystem_limit", "1");
    received(b, &into("tank/q"), &stream).unwrap();
    assert_eq!(prop(b, "tank/q/e", "filesystem_count"), "1");
    assert!(read(b, "tank/q/e/m") == read(&hosts.a, "tank/p/e/m"));
    check::verify_pool(b, "tank").unwrap();
}

// DESCRIPTION: the same move with `snapshot_limit` 3 on B's `tank/q/e`: `e` ends with @a
// @b and `m` brings @a @b, 4 > 3, refused, B as it was; at 4 it is received.
#[test]
fn a_move_into_a_parent_past_its_snapshot_limit_is_refused() {
    let (hosts, stream) = moved_setup(|_| {});
    let b = &hosts.b;
    set(b, "tank/q/e", "snapshot_limit", "3");
    let message = "snapshot limit exceeded (snapshot_limit=3 on 'tank/q/e')";
    refused(
        b,
        &into("tank/q"),
        &stream,
        message,
        &["tank/q", "tank/q/m"],
    );

    set(b, "tank/q/e", "snapshot_limit", "4");
    received(b, &into("tank/q"), &stream).unwrap();
    assert_eq!(prop(b, "tank/q/e", "snapshot_count"), "4");
    check::verify_pool(b, "tank").unwrap();
}

// DESCRIPTION: the sender moved `m` into `e` and made `e/n`: the move alone fits
// `filesystem_limit` 1 (checked when the manifest arrives), the move and the new dataset
// together do not: refused at the stream's end in one line, the held substreams discarded,
// B as it was. At 2 it is received.
#[test]
fn a_move_and_a_new_dataset_past_a_limit_together_are_refused_at_the_end() {
    let (hosts, stream) = moved_setup(|a| {
        a.create_dataset("tank/p/e/n", &[], false, "create")
            .unwrap();
    });
    let b = &hosts.b;
    set(b, "tank/q/e", "filesystem_limit", "1");
    let message = "filesystem limit exceeded (filesystem_limit=1 on 'tank/q/e')";
    let targets = ["tank/q", "tank/q/m", "tank/q/e/n"];
    refused(b, &into("tank/q"), &stream, message, &targets);

    set(b, "tank/q/e", "filesystem_limit", "2");
    received(b, &into("tank/q"), &stream).unwrap();
    assert_eq!(prop(b, "tank/q/e", "filesystem_count"), "2");
    check::verify_pool(b, "tank").unwrap();
}
