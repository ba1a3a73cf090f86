//! The snapshot directory through the real kernel driver: `<mnt>/.tarn/snapshot/<snap>`
//! shows each snapshot's files, directories, symlinks and xattrs as they were when it was
//! taken, refuses every change with EROFS, follows `snapdir=hidden|visible` in the root's
//! listing, loses a snapshot's directory when the snapshot is destroyed, and follows a rename.

mod common;

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt, symlink};
use std::path::Path;

use nix::unistd::{Whence, lseek};

use common::{Fixture, POOL, fuse_or_skip, pattern, run};

fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let name = e.expect("entry").file_name();
            name.into_string().expect("UTF-8 name")
        })
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_string()).collect()
}

fn errno<T: std::fmt::Debug>(result: std::io::Result<T>) -> i32 {
    result
        .expect_err("refused")
        .raw_os_error()
        .expect("an errno")
}

fn getfattr(path: &Path) -> String {
    run(
        "getfattr",
        &[
            "--only-values",
            "-n",
            "user.k",
            path.to_str().expect("UTF-8 path"),
        ],
    )
}

fn setfattr(path: &Path, value: &str) {
    run(
        "setfattr",
        &[
            "-n",
            "user.k",
            "-v",
            value,
            path.to_str().expect("UTF-8 path"),
        ],
    );
}

/// Goal: a snapshot reads back exactly as it was after the head changed, and is read-only.
/// Method: files, a directory, a symlink and an xattr; snapshot; change each of them in the
/// head; read them under `.tarn/snapshot/a`; try every kind of change there.
#[test]
fn snapshots_read_as_taken_and_refuse_changes() {
    if !fuse_or_skip("snapshots_read_as_taken_and_refuse_changes") {
        return;
    }
    let fx = Fixture::new();
    let data = pattern(300_000, 3);
    fs::write(fx.path("f"), b"before").unwrap();
    fs::create_dir(fx.path("d")).unwrap();
    fs::write(fx.path("d/inner"), &data).unwrap();
    symlink("f", fx.path("l")).unwrap();
    setfattr(&fx.path("f"), "one");
    fx.engine
        .snapshot(&[format!("{POOL}@a")], false, &[], "snapshot")
        .unwrap();

    fs::write(fx.path("f"), b"after, and longer").unwrap();
    fs::remove_file(fx.path("d/inner")).unwrap();
    fs::remove_file(fx.path("l")).unwrap();
    symlink("elsewhere", fx.path("l")).unwrap();
    setfattr(&fx.path("f"), "two");
    fs::write(fx.path("n"), b"new").unwrap();

    let snap = fx.path(".tarn/snapshot/a");
    assert_eq!(fs::read(snap.join("f")).unwrap(), b"before");
    assert_eq!(fs::read(snap.join("d/inner")).unwrap(), data);
    assert_eq!(fs::read_link(snap.join("l")).unwrap(), Path::new("f"));
    assert_eq!(getfattr(&snap.join("f")), "one");
    assert_eq!(getfattr(&fx.path("f")), "two");
    assert_eq!(names(&snap), set(&["d", "f", "l"]));
    assert_eq!(names(&snap.join("d")), set(&["inner"]));
    assert_eq!(fs::read(fx.path("f")).unwrap(), b"after, and longer");
    assert!(fs::metadata(snap.join("n")).is_err());
    // The snapshot's inodes have numbers of their own.
    let (head, old) = (
        fs::metadata(fx.path("f")).unwrap(),
        fs::metadata(snap.join("f")).unwrap(),
    );
    assert_ne!(head.ino(), old.ino());
    assert_eq!(old.len(), 6);

    let erofs = libc::EROFS;
    assert_eq!(
        errno(OpenOptions::new().write(true).open(snap.join("f"))),
        erofs
    );
    assert_eq!(errno(File::create(snap.join("new"))), erofs);
    assert_eq!(errno(fs::remove_file(snap.join("f"))), erofs);
    assert_eq!(errno(fs::remove_dir(snap.join("d"))), erofs);
    assert_eq!(errno(fs::create_dir(snap.join("d/sub"))), erofs);
    assert_eq!(errno(symlink("x", snap.join("s"))), erofs);
    assert_eq!(errno(fs::rename(snap.join("f"), snap.join("g"))), erofs);
    assert_eq!(errno(fs::hard_link(snap.join("f"), fx.path("h"))), erofs);
    let mode = fs::Permissions::from_mode(0o600);
    assert_eq!(errno(fs::set_permissions(snap.join("f"), mode)), erofs);
    assert_eq!(errno(fs::create_dir(fx.path(".tarn/snapshot/b"))), erofs);
    assert_eq!(errno(fs::remove_dir(fx.path(".tarn"))), erofs);
    let set_xattr = std::process::Command::new("setfattr")
        .args(["-n", "user.k", "-v", "three"])
        .arg(snap.join("f"))
        .output()
        .unwrap();
    assert!(!set_xattr.status.success());
    assert_eq!(getfattr(&snap.join("f")), "one");
    assert_eq!(fs::read(snap.join("f")).unwrap(), b"before");
}

/// Goal: SEEK_DATA and SEEK_HOLE in a snapshot's sparse file find its data as it was.
/// Method: a file with data at 0 and at 1 MiB, a snapshot, the hole filled in the head.
#[test]
fn holes_of_a_snapshot_file_are_found() {
    if !fuse_or_skip("holes_of_a_snapshot_file_are_found") {
        return;
    }
    let fx = Fixture::new();
    let file = File::create(fx.path("sparse")).unwrap();
    file.write_all_at(&pattern(4096, 1), 0).unwrap();
    file.write_all_at(&pattern(4096, 2), 1 << 20).unwrap();
    drop(file);
    fx.engine
        .snapshot(&[format!("{POOL}@a")], false, &[], "snapshot")
        .unwrap();
    let head = OpenOptions::new()
        .write(true)
        .open(fx.path("sparse"))
        .unwrap();
    head.write_all_at(&pattern(1 << 20, 3), 0).unwrap();
    drop(head);
    let snap = File::open(fx.path(".tarn/snapshot/a/sparse")).unwrap();
    let hole = lseek(&snap, 0, Whence::SeekHole).unwrap();
    let data = lseek(&snap, hole, Whence::SeekData).unwrap();
    assert!(hole > 0 && hole < 1 << 20, "hole at {hole}");
    assert_eq!(data, 1 << 20);
    let mut buf = vec![0u8; 4096];
    snap.read_exact_at(&mut buf, 1 << 20).unwrap();
    assert_eq!(buf, pattern(4096, 2));
}

/// Goal: `snapdir` decides whether the root lists `.tarn`; it is reachable either way, and a
/// destroyed snapshot's directory is gone. Method: list the root under both settings, then
/// destroy the snapshot and look for its directory.
#[test]
fn snapdir_hidden_or_visible_and_destroyed_snapshots_vanish() {
    if !fuse_or_skip("snapdir_hidden_or_visible_and_destroyed_snapshots_vanish") {
        return;
    }
    let fx = Fixture::new();
    fs::write(fx.path("f"), b"x").unwrap();
    for name in ["a", "b"] {
        fx.engine
            .snapshot(&[format!("{POOL}@{name}")], false, &[], "snapshot")
            .unwrap();
    }
    assert_eq!(names(&fx.mnt), set(&["f"]));
    assert!(fs::metadata(fx.path(".tarn")).unwrap().is_dir());
    assert_eq!(names(&fx.path(".tarn")), set(&["snapshot"]));
    assert_eq!(names(&fx.path(".tarn/snapshot")), set(&["a", "b"]));
    let assignment = [("snapdir".to_string(), "visible".to_string())];
    fx.engine
        .set_dataset_props(POOL, &assignment, "set")
        .unwrap();
    assert_eq!(names(&fx.mnt), set(&[".tarn", "f"]));
    let listed = run("ls", &["-a", fx.mnt.to_str().unwrap()]);
    assert_eq!(
        listed.lines().filter(|l| *l == ".tarn").count(),
        1,
        "{listed}"
    );

    assert_eq!(fs::read(fx.path(".tarn/snapshot/a/f")).unwrap(), b"x");
    fx.engine
        .destroy_snapshots(&format!("{POOL}@a"), false, false, "destroy")
        .unwrap();
    assert_eq!(
        errno(fs::metadata(fx.path(".tarn/snapshot/a"))),
        libc::ENOENT
    );
    assert_eq!(names(&fx.path(".tarn/snapshot")), set(&["b"]));
    assert_eq!(fs::read(fx.path(".tarn/snapshot/b/f")).unwrap(), b"x");
    // A renamed snapshot shows under its new name only.
    let (b, c) = (format!("{POOL}@b"), format!("{POOL}@c"));
    fx.engine.rename_dataset(&b, &c, "rename").unwrap();
    assert_eq!(names(&fx.path(".tarn/snapshot")), set(&["c"]));
    assert_eq!(
        errno(fs::metadata(fx.path(".tarn/snapshot/b"))),
        libc::ENOENT
    );
    assert_eq!(fs::read(fx.path(".tarn/snapshot/c/f")).unwrap(), b"x");
}
