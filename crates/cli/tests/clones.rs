//! System tests of `tarn clone` through the real binary and daemon: a clone mounted with
//! its origin's files, written independently of the origin, snapshotted; `origin` and
//! `clones` shown by `get` and `list`; destroying the origin snapshot refused with one line
//! (no device byte changed) and `destroy -R` taking the clones (unmounting them); clones of
//! volumes; everything across export and import.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::*;

fn device_bytes(rig: &Rig) -> Vec<Vec<u8>> {
    let mut paths: Vec<_> = std::fs::read_dir(rig.root().join("d"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

// DESCRIPTION: clone a snapshot of a mounted filesystem. The clone is mounted at once and
// shows the snapshot's files; writes to the clone do not reach the origin and the other way
// round; `get origin`, `get clones`, `used` (0 for a new clone) and `list -t all` show the
// relationship; destroying the origin snapshot or its dataset is refused with one line and
// changes no device byte; `destroy -R` of the snapshot unmounts and destroys the clone;
// the clone and its snapshot survive export and import.
// STRATEGY: std::fs against the mountpoints under the rig's altroot; without /dev/fuse the
// file checks are skipped and the properties and refusals still run.
#[test]
fn a_clone_mounts_with_its_origins_files_and_refuses_to_lose_them() {
    let fuse = std::path::Path::new("/dev/fuse").exists();
    let rig = Rig::new();
    rig.mounted_tank();
    rig.ok("create tank/src");
    let (src, clone) = (
        rig.root().join("altroot/tank/src"),
        rig.root().join("altroot/tank/work"),
    );
    if fuse {
        std::fs::write(src.join("a"), vec![3u8; 400_000]).unwrap();
        std::fs::write(src.join("b"), b"monday").unwrap();
    }
    rig.ok("snapshot tank/src@monday");
    rig.ok("clone -o com.example:why=test tank/src@monday tank/work");
    assert_eq!(
        rig.ok("get -H -o value origin tank/work"),
        "tank/src@monday\n"
    );
    assert_eq!(
        rig.ok("get -H -o value clones tank/src@monday"),
        "tank/work\n"
    );
    assert_eq!(rig.ok("get -H -o value origin tank/src"), "-\n");
    assert_eq!(rig.ok("get -H -p -o value used tank/work"), "0\n");
    assert_eq!(
        rig.ok("get -H -o value,source com.example:why tank/work"),
        "test\tlocal\n"
    );
    if fuse {
        assert_eq!(std::fs::read(clone.join("b")).unwrap(), b"monday");
        std::fs::write(clone.join("b"), b"clone's").unwrap();
        std::fs::write(src.join("a"), b"origin's").unwrap();
        assert_eq!(std::fs::read(clone.join("a")).unwrap(), vec![3u8; 400_000]);
        assert_eq!(std::fs::read(src.join("b")).unwrap(), b"monday");
    }
    rig.ok("snapshot tank/work@edit");
    origin_destroy_is_refused(&rig);
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert_eq!(
        rig.ok("get -H -o value origin tank/work"),
        "tank/src@monday\n"
    );
    assert_eq!(
        rig.ok("list -H -o name -t all -r tank/work"),
        "tank/work\ntank/work@edit\n"
    );
    if fuse {
        assert_eq!(std::fs::read(clone.join("b")).unwrap(), b"clone's");
    }
    rig.ok("destroy -R tank/src@monday");
    assert_eq!(rig.ok("list -H -o name -t all"), "tank\ntank/src\n");
    if fuse {
        assert!(!clone.join("b").exists(), "the clone was unmounted");
        assert_eq!(std::fs::read(src.join("a")).unwrap(), b"origin's");
    }
}

/// Destroying the origin snapshot or its dataset is refused with one line naming the clone,
/// and no device byte changes.
fn origin_destroy_is_refused(rig: &Rig) {
    rig.ok("pool sync tank");
    let before = device_bytes(rig);
    for line in ["destroy tank/src@monday", "destroy -r tank/src"] {
        let refused = rig.run(line);
        assert_eq!(refused.code, Some(1), "{refused:?}");
        assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
        assert!(
            refused.stderr.contains("dependent clones") && refused.stderr.contains("tank/work"),
            "{refused:?}"
        );
    }
    assert!(device_bytes(rig) == before, "a refused destroy wrote");
}

// DESCRIPTION: a clone of a volume snapshot is a volume with the snapshot's size; bad
// clones (no snapshot, taken name, missing parent without -p) are refused with one line;
// `-p` makes the parents.
// STRATEGY: the binary against a daemon; `get` of the clone's properties.
#[test]
fn volume_clones_and_refusals() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 3);
    rig.ok(&format!(
        "pool create -m none tank raidz1 {}",
        join(&devices)
    ));
    rig.ok("create -s -V 32M tank/vol");
    rig.ok("snapshot tank/vol@s");
    for (line, says) in [
        ("clone tank/vol@nope tank/c", "does not exist"),
        ("clone tank/vol@s tank/vol", "already exists"),
        ("clone tank/vol@s tank/x/y", "parent does not exist"),
    ] {
        let refused = rig.run(line);
        assert_eq!(refused.code, Some(1), "{refused:?}");
        assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
        assert!(refused.stderr.contains(says), "{line}: {refused:?}");
    }
    rig.ok("clone -p tank/vol@s tank/x/y");
    assert_eq!(
        rig.ok("get -H -o value type,volsize tank/x/y"),
        "volume\n32M\n"
    );
    assert_eq!(rig.ok("get -H -o value type tank/x"), "filesystem\n");
}

// DESCRIPTION: promote through the binary. A clone of a mounted filesystem is promoted: the
// origin's snapshot moves to it (`list -t snapshot`), the old origin becomes its clone
// (`origin`, `clones`), a non-clone is refused with one line; then the old origin can be
// destroyed and the promoted dataset keeps its files and the snapshot, across export and
// import.
// STRATEGY: the binary against a daemon; file checks through the FUSE mount when present.
#[test]
fn promote_lets_the_origin_go() {
    let fuse = std::path::Path::new("/dev/fuse").exists();
    let rig = Rig::new();
    rig.mounted_tank();
    rig.ok("create tank/src");
    let work = rig.root().join("altroot/tank/work");
    if fuse {
        std::fs::write(rig.root().join("altroot/tank/src/f"), vec![5u8; 200_000]).unwrap();
    }
    rig.ok("snapshot tank/src@monday");
    rig.ok("clone tank/src@monday tank/work");
    let refused = rig.run("promote tank/src");
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert_eq!(
        refused.stderr,
        "cannot promote 'tank/src': not a cloned filesystem\n"
    );
    rig.ok("promote tank/work");
    assert_eq!(rig.ok("list -H -o name -t snapshot"), "tank/work@monday\n");
    assert_eq!(
        rig.ok("get -H -o value origin tank/src"),
        "tank/work@monday\n"
    );
    assert_eq!(rig.ok("get -H -o value origin tank/work"), "-\n");
    assert_eq!(
        rig.ok("get -H -o value clones tank/work@monday"),
        "tank/src\n"
    );
    rig.ok("destroy tank/src");
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert_eq!(
        rig.ok("list -H -o name -t all"),
        "tank\ntank/work\ntank/work@monday\n"
    );
    if fuse {
        assert_eq!(std::fs::read(work.join("f")).unwrap(), vec![5u8; 200_000]);
    }
}

// DESCRIPTION: `rollback -r` past a snapshot with a clone is refused with one line naming
// the clone; `rollback -R` destroys the later snapshot and its (mounted) clone and rolls
// back.
// STRATEGY: the binary against a daemon; `list -t all` before and after.
#[test]
fn rollback_r_past_an_origin_needs_capital_r() {
    let rig = Rig::new();
    rig.mounted_tank();
    rig.ok("create tank/src");
    rig.ok("snapshot tank/src@one");
    rig.ok("snapshot tank/src@two");
    rig.ok("clone tank/src@two tank/work");
    let refused = rig.run("rollback -r tank/src@one");
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert_eq!(
        refused.stderr,
        "cannot rollback to 'tank/src@one': snapshot has dependent clones (use -R to destroy \
         tank/work)\n"
    );
    rig.ok("rollback -R tank/src@one");
    assert_eq!(
        rig.ok("list -H -o name -t all"),
        "tank\ntank/src\ntank/src@one\n"
    );
}

// DESCRIPTION: `rollback -R -f` destroys a clone whose mount is busy (a file held open in
// it): without -f the rollback is refused with one line and the clone stays; with -f its
// mount is detached and the rollback goes through.
// STRATEGY: the binary against a daemon, a file held open in the clone's FUSE mount;
// skipped without /dev/fuse. Negative control: with the daemon ignoring -f for a
// rollback's clones, `rollback -R -f` is refused as busy.
#[test]
fn rollback_f_detaches_a_busy_clone() {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("SKIP rollback_f_detaches_a_busy_clone: /dev/fuse is absent");
        return;
    }
    let rig = Rig::new();
    rig.mounted_tank();
    rig.ok("create tank/src");
    rig.ok("snapshot tank/src@one");
    rig.ok("snapshot tank/src@two");
    rig.ok("clone tank/src@two tank/work");
    let work = rig.root().join("altroot/tank/work");
    std::fs::write(work.join("held"), b"x").unwrap();
    let held = std::fs::File::open(work.join("held")).unwrap();
    let refused = rig.run("rollback -R tank/src@one");
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
    assert!(refused.stderr.contains("busy"), "{refused:?}");
    assert_eq!(rig.ok("get -H -o value mounted tank/work"), "yes\n");
    rig.ok("rollback -R -f tank/src@one");
    assert_eq!(
        rig.ok("list -H -o name -t all"),
        "tank\ntank/src\ntank/src@one\n"
    );
    drop(held);
}
