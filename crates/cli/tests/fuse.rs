//! System tests of mounts through the real `tarn` binary, its daemon and the kernel's FUSE
//! driver: datasets mount at create and import and unmount at export, a busy export is
//! refused unless forced, and a daemon killed with SIGKILL mid-write comes back with its
//! dead mount cleaned up, the dataset remounted and every fsync'd byte in place. User and
//! project quotas give EDQUOT through the kernel; `tarn project` works on paths in a mount.
//!
//! Mountpoints are under the rig's directory: the rig runs the daemon with `TARN_ALTROOT`,
//! so `-m /tank` mounts at `<rig>/altroot/tank`. Each test skips (printing why) only when
//! /dev/fuse is absent.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;

fn fuse_or_skip(test: &str) -> bool {
    if Path::new("/dev/fuse").exists() {
        return true;
    }
    eprintln!("SKIP {test}: /dev/fuse is absent, no FUSE tests on this host");
    false
}

/// The filesystem type mounted at `path`, from /proc/self/mountinfo.
fn fstype_at(path: &Path) -> Option<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let wanted = path.to_str().unwrap();
    table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let dash = fields.iter().position(|f| *f == "-")?;
        (fields.get(4) == Some(&wanted)).then(|| fields[dash + 1].to_string())
    })
}

fn chunk(index: u64) -> Vec<u8> {
    (0..64 << 10)
        .map(|i: u64| (i.wrapping_mul(7) ^ index.wrapping_mul(131)) as u8)
        .collect()
}

fn pool_with_mount(rig: &Rig) -> PathBuf {
    rig.mounted_tank();
    rig.root().join("altroot/tank")
}

// DESCRIPTION: the mount life cycle through the daemon. A pool created with -m is
// mounted (type fuse.tarn), a new child dataset mounts inside it, data written through the
// mounts survives export (which unmounts both) and import (which mounts both again); a new
// mountpoint moves the mount; `tarn unmount` and `tarn mount` do what they say.
// STRATEGY: std::fs against the mountpoints, /proc/self/mountinfo for what is mounted.
#[test]
fn datasets_mount_at_create_and_import_and_unmount_at_export() {
    if !fuse_or_skip("datasets_mount_at_create_and_import_and_unmount_at_export") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    assert_eq!(fstype_at(&tank).as_deref(), Some("fuse.tarn"));
    std::fs::write(tank.join("top"), b"top data").unwrap();
    rig.ok("create tank/home");
    let home = tank.join("home");
    assert_eq!(fstype_at(&home).as_deref(), Some("fuse.tarn"));
    // create -p mounts the new parents first, the child inside them.
    rig.ok("create -p tank/a/b");
    assert_eq!(fstype_at(&tank.join("a")).as_deref(), Some("fuse.tarn"));
    assert_eq!(fstype_at(&tank.join("a/b")).as_deref(), Some("fuse.tarn"));
    rig.ok("destroy -r tank/a");
    assert_eq!(fstype_at(&tank.join("a")), None);
    std::fs::write(home.join("inner"), b"inner data").unwrap();
    let listed = rig.ok("mount");
    assert!(listed.contains("tank/home"), "{listed}");

    rig.ok("pool export tank");
    assert_eq!(fstype_at(&home), None);
    assert_eq!(fstype_at(&tank), None);
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert_eq!(std::fs::read(tank.join("top")).unwrap(), b"top data");
    assert_eq!(std::fs::read(home.join("inner")).unwrap(), b"inner data");

    rig.ok("set mountpoint=/elsewhere tank/home");
    let elsewhere = rig.root().join("altroot/elsewhere");
    assert_eq!(fstype_at(&home), None, "unmounted from the old mountpoint");
    assert_eq!(
        std::fs::read(elsewhere.join("inner")).unwrap(),
        b"inner data"
    );
    rig.ok("unmount tank/home");
    assert_eq!(fstype_at(&elsewhere), None);
    rig.ok("mount tank/home");
    assert_eq!(fstype_at(&elsewhere).as_deref(), Some("fuse.tarn"));
}

// DESCRIPTION: exporting a pool whose mount is busy is refused and leaves it mounted, and
// its child datasets too (they are unmounted first, before the busy parent stops the
// export), as does a refused `destroy -r`; `-f` detaches it lazily and exports.
// STRATEGY: hold a file open inside the mount across the export attempts.
#[test]
fn busy_export_is_refused_unless_forced() {
    if !fuse_or_skip("busy_export_is_refused_unless_forced") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    rig.ok("create tank/child");
    std::fs::write(tank.join("held"), b"x").unwrap();
    let held = std::fs::File::open(tank.join("held")).unwrap();
    let run = rig.run("pool export tank");
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stderr.contains("busy"), "{run:?}");
    assert_eq!(fstype_at(&tank).as_deref(), Some("fuse.tarn"));
    assert_eq!(fstype_at(&tank.join("child")).as_deref(), Some("fuse.tarn"));
    assert_eq!(rig.ok("get -H -o value mounted tank/child"), "yes\n");
    // The same for a refused `destroy -r`: the busy dataset's child goes first, comes back.
    rig.ok("create tank/child/sub");
    let busy = std::fs::File::create(tank.join("child/open")).unwrap();
    let run = rig.run("destroy -r tank/child");
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        fstype_at(&tank.join("child/sub")).as_deref(),
        Some("fuse.tarn")
    );
    drop(busy);
    rig.ok("pool export -f tank");
    assert_eq!(fstype_at(&tank), None);
    drop(held);
}

/// Writes 64 KiB chunks with an fsync after each until the mount dies; `synced` counts the
/// chunks whose fsync returned.
fn write_until_dead(path: PathBuf, synced: Arc<AtomicU64>) {
    let file = std::fs::File::create(path).expect("create the file in the mount");
    for index in 0.. {
        if file
            .write_all_at(&chunk(index), index * (64 << 10))
            .is_err()
        {
            return;
        }
        if file.sync_all().is_err() {
            return;
        }
        synced.store(index + 1, Ordering::SeqCst);
    }
}

// DESCRIPTION: SIGTERM (systemd's stop) stops the daemon cleanly, as `daemon --stop` does:
// the mount is unmounted (not left dead), the pool synced, the socket and pid file removed,
// the log says why; the next command's daemon imports the pool from its cache and mounts
// it, and data written without fsync before the signal is there.
// STRATEGY: a file written through the mount, no fsync; kill -TERM the pid in tarn.pid.
#[test]
fn sigterm_stops_the_daemon_cleanly() {
    if !fuse_or_skip("sigterm_stops_the_daemon_cleanly") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(tank.join("unsynced"), &data).unwrap();
    let pid = daemon_pid(&rig);
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    wait_gone(&pid);
    assert_eq!(fstype_at(&tank), None, "unmounted, not left dead");
    assert!(!rig.rundir.join("tarn.pid").exists());
    assert!(!rig.rundir.join("tarn.sock").exists());
    let log = std::fs::read_to_string(rig.rundir.join("daemon.log")).unwrap();
    assert!(
        log.contains("signal 15: stopping") && log.ends_with("daemon stopped\n"),
        "{log}"
    );
    assert!(rig.ok("pool list -H -o name").starts_with("tank"));
    assert_eq!(fstype_at(&tank).as_deref(), Some("fuse.tarn"));
    assert!(std::fs::read(tank.join("unsynced")).unwrap() == data);
}

// DESCRIPTION: SIGKILL of the daemon while a program writes through the mount. The writer
// sees its mount die; the dead mount ("Transport endpoint is not connected") stays until
// the next daemon, started by the next command, re-imports the pool from its cache file,
// detaches the stale mount and mounts the dataset again. Every chunk whose fsync returned
// before the kill is there byte for byte, and a scrub finds nothing wrong.
// STRATEGY: a writer thread fsyncs after every chunk and publishes how many were synced;
// the test kills the pid in tarn.pid after a while.
#[test]
fn daemon_killed_mid_write_remounts_with_fsynced_data() {
    if !fuse_or_skip("daemon_killed_mid_write_remounts_with_fsynced_data") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    let synced = Arc::new(AtomicU64::new(0));
    let writer = {
        let (path, synced) = (tank.join("log"), Arc::clone(&synced));
        std::thread::spawn(move || write_until_dead(path, synced))
    };
    assert_eq!(fstype_at(&tank).as_deref(), Some("fuse.tarn"));
    for _ in 0..600 {
        if synced.load(Ordering::SeqCst) >= 8 || writer.is_finished() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(synced.load(Ordering::SeqCst) >= 8, "the writer got going");
    kill_daemon(&rig);
    writer.join().unwrap();
    let synced = synced.load(Ordering::SeqCst);
    let dead = std::fs::metadata(tank.join("log")).unwrap_err();
    // ECONNABORTED when the stat was queued while the kernel still tore the connection
    // down: the daemon serves from several cloned /dev/fuse descriptors, and the writer
    // can see its request aborted when the first closes, before the last one does.
    assert!(
        matches!(
            dead.raw_os_error(),
            Some(libc::ENOTCONN | libc::ECONNABORTED)
        ),
        "{dead}"
    );

    let listed = rig.ok("pool list -H -o name,health");
    assert_eq!(listed, "tank\tONLINE\n");
    assert_eq!(fstype_at(&tank).as_deref(), Some("fuse.tarn"));
    let data = std::fs::read(tank.join("log")).unwrap();
    assert!(
        data.len() as u64 >= synced * (64 << 10),
        "{} < {synced} chunks",
        data.len()
    );
    for index in 0..synced {
        let at = (index * (64 << 10)) as usize;
        assert!(
            data[at..at + (64 << 10)] == chunk(index),
            "chunk {index} intact"
        );
    }
    rig.ok("pool scrub -w tank");
    let status = rig.ok("pool status tank");
    assert!(status.contains("with 0 errors"), "{status}");
    std::io::stdout().flush().unwrap();
}

// DESCRIPTION: the `mounted` property follows the mounts: yes after create, no after
// `tarn unmount`, yes after `tarn mount` and after export and import, in `get` and `list`;
// `canmount=noauto` leaves a mounted dataset mounted, `canmount=off` unmounts it.
// STRATEGY: `get -H -o value mounted` and `list -H -o name,mounted` after each step.
#[test]
fn the_mounted_property_follows_the_mounts() {
    if !fuse_or_skip("the_mounted_property_follows_the_mounts") {
        return;
    }
    let rig = Rig::new();
    pool_with_mount(&rig);
    rig.ok("create tank/home");
    let mounted = |name: &str| rig.ok(&format!("get -H -o value mounted {name}"));
    assert_eq!(mounted("tank"), "yes\n");
    assert_eq!(mounted("tank/home"), "yes\n");
    rig.ok("unmount tank/home");
    assert_eq!(mounted("tank/home"), "no\n");
    assert_eq!(
        rig.ok("list -H -o name,mounted"),
        "tank\tyes\ntank/home\tno\n"
    );
    rig.ok("mount tank/home");
    assert_eq!(mounted("tank/home"), "yes\n");
    // canmount=noauto only stops automatic mounts (ZFS): the mount stays; off unmounts.
    rig.ok("set canmount=noauto tank/home");
    assert_eq!(mounted("tank/home"), "yes\n");
    rig.ok("set canmount=off tank/home");
    assert_eq!(mounted("tank/home"), "no\n");
    rig.ok("set canmount=on tank/home");
    rig.ok("mount tank/home");
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert_eq!(
        rig.ok("list -H -o name,mounted"),
        "tank\tyes\ntank/home\tyes\n"
    );
}

// DESCRIPTION: `tarn pool sync` is the barrier for data written without fsync (a plain
// `sync` never reaches a FUSE server): a file written and closed, then `pool sync`, survives
// a SIGKILL of the daemon right after, byte for byte. A pool that does not exist is refused
// in one line.
// STRATEGY: 8 MiB written with std::fs::write (no fsync), `pool sync tank`, kill -9 of the
// pid in tarn.pid, the next command restarts the daemon and re-imports.
#[test]
fn pool_sync_makes_unsynced_writes_survive_a_crash() {
    if !fuse_or_skip("pool_sync_makes_unsynced_writes_survive_a_crash") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    let data: Vec<u8> = (0..8u64 << 20).map(|i| (i * 31 / 7) as u8).collect();
    std::fs::write(tank.join("unsynced"), &data).unwrap();
    rig.ok("pool sync tank");
    rig.ok("pool sync");
    let refused = rig.run("pool sync nosuch");
    assert_eq!(refused.code, Some(1));
    assert_eq!(refused.stderr, "cannot open 'nosuch': no such pool\n");
    kill_daemon(&rig);
    assert_eq!(rig.ok("pool list -H -o name"), "tank\n");
    assert!(
        std::fs::read(tank.join("unsynced")).unwrap() == data,
        "the synced file intact"
    );
}

// DESCRIPTION: a dataset whose mountpoint is a non-empty directory is created but not
// mounted, as on ZFS: the reason and "filesystem successfully created, but not mounted" go
// to stderr and the exit status is 1 (scripts notice); the files in the directory stay
// visible; `tarn mount` of it is refused with one line; emptied, it mounts.
// STRATEGY: a plain file in the would-be mountpoint, then the exit status, stderr and
// /proc/self/mountinfo.
#[test]
fn a_mount_over_a_non_empty_directory_fails_the_command_but_creates_the_dataset() {
    if !fuse_or_skip("a_mount_over_a_non_empty_directory_fails_the_command_but_creates_the_dataset")
    {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    let busy = tank.join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("keep"), b"mine").unwrap();
    let run = rig.run("create tank/busy");
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.stdout, "", "{run:?}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{run:?}");
    assert!(
        lines[0].starts_with("cannot mount 'tank/busy'") && lines[0].contains("not empty"),
        "{run:?}"
    );
    assert_eq!(lines[1], "filesystem successfully created, but not mounted");
    assert!(rig.ok("list -H -o name").lines().any(|l| l == "tank/busy"));
    assert_eq!(fstype_at(&busy), None);
    assert_eq!(std::fs::read(busy.join("keep")).unwrap(), b"mine");
    let line = rig.refused("mount tank/busy");
    assert!(line.starts_with("cannot mount 'tank/busy'"), "{line}");
    std::fs::remove_file(busy.join("keep")).unwrap();
    rig.ok("mount tank/busy");
    assert_eq!(fstype_at(&busy).as_deref(), Some("fuse.tarn"));
    // A destroy the engine refuses (children without -r) unmounts nothing.
    rig.ok("create tank/busy/child");
    let line = rig.refused("destroy tank/busy");
    assert!(line.contains("filesystem has children"), "{line}");
    assert_eq!(fstype_at(&busy).as_deref(), Some("fuse.tarn"));
    assert_eq!(fstype_at(&busy.join("child")).as_deref(), Some("fuse.tarn"));
}

// DESCRIPTION: `set mountpoint=PATH` where PATH cannot take the mount (a non-empty directory,
// a file) is refused with one line before anything changes: the property, the mounts and the
// devices stay as they were; a new directory is accepted and mounted there.
// STRATEGY: a mounted child; each refusal checked against an image of the devices, the
// property and /proc/self/mountinfo.
#[test]
fn set_mountpoint_to_an_unusable_path_is_refused_and_changes_nothing() {
    if !fuse_or_skip("set_mountpoint_to_an_unusable_path_is_refused_and_changes_nothing") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    rig.ok("create tank/a");
    // Mountpoints are under the daemon's altroot (TARN_ALTROOT).
    let altroot = rig.root().join("altroot");
    std::fs::create_dir_all(altroot.join("full")).unwrap();
    std::fs::write(altroot.join("full/keep"), b"mine").unwrap();
    std::fs::write(altroot.join("file"), b"plain").unwrap();
    let before = rig.image();
    let line = rig.refused_against(&before, "set mountpoint=/full tank/a");
    let full = altroot.join("full");
    assert_eq!(
        line,
        format!(
            "cannot set property for 'tank/a': mountpoint {} is not empty; use an empty or \
             new directory, 'legacy' or 'none'",
            full.display()
        )
    );
    let line = rig.refused_against(&before, "set mountpoint=/file tank/a");
    let expected = format!(
        "cannot set property for 'tank/a': cannot use mountpoint {}",
        altroot.join("file").display()
    );
    assert!(line.starts_with(&expected), "{line}");
    assert_eq!(
        rig.ok("get -H -o value,source mountpoint tank/a"),
        "/tank/a\tinherited from tank\n"
    );
    assert_eq!(fstype_at(&tank.join("a")).as_deref(), Some("fuse.tarn"));
    assert_eq!(std::fs::read(full.join("keep")).unwrap(), b"mine");
    rig.ok("set mountpoint=/fresh/a tank/a");
    assert_eq!(
        fstype_at(&altroot.join("fresh/a")).as_deref(),
        Some("fuse.tarn")
    );
    assert_eq!(fstype_at(&tank.join("a")), None);
}

// DESCRIPTION: a user quota enforced through the kernel: writes into a file owned by a
// user with `userquota@` fail with EDQUOT once the user's usage would pass the quota, while
// files of other owners still take writes; chown into the full user is allowed; `tarn get
// userused@` and `tarn userspace` show the usage. (The mount is not `allow_other`, so the
// writer is root: quotas charge the file's owner, as ZFS does, not the writer.)
// STRATEGY: 64 KiB writes with an fsync after each (an error may surface at either).
#[test]
fn user_quota_gives_edquot_through_the_mount() {
    if !fuse_or_skip("user_quota_gives_edquot_through_the_mount") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    rig.ok("create -o compression=off tank/home");
    let home = tank.join("home");
    let path = home.join("owned");
    std::fs::write(&path, b"").unwrap();
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    rig.ok("set userquota@65534=1M tank/home");
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let mut written = 0u64;
    let error = loop {
        let data = chunk(written);
        let result = file
            .write_all_at(&data, written)
            .and_then(|()| file.sync_all());
        match result {
            Ok(()) => written += data.len() as u64,
            Err(e) => break e,
        }
        assert!(written < 8 << 20, "no EDQUOT after {written} bytes");
    };
    assert_eq!(error.raw_os_error(), Some(libc::EDQUOT), "{error:?}");
    assert!(
        (512 << 10..=1 << 20).contains(&written),
        "EDQUOT after {written} bytes"
    );
    let used: u64 = rig
        .ok("get -H -p -o value userused@65534 tank/home")
        .trim()
        .parse()
        .unwrap();
    assert!(used >= written, "userused {used} for {written} written");
    // Another owner's file takes writes; chown into the full user is allowed.
    let other = home.join("root-owned");
    std::fs::write(&other, chunk(1)).unwrap();
    std::os::unix::fs::chown(&other, Some(65534), None).unwrap();
    let table = rig.ok("userspace -H -n -o name,quota tank/home");
    assert!(table.contains("65534\t1M"), "{table}");
    drop(file);
}

// DESCRIPTION: `tarn project` through a mount: `-s -p` gives a directory a project id that
// new files inherit, the project's usage shows in `projectobjused@`/`projectused@`, a
// `projectquota@` refuses writes with EDQUOT, `-C -r` clears the tree, and a path outside
// every mount is refused.
// STRATEGY: fsync to commit a txg before reading committed counts.
#[test]
fn project_ids_by_path_and_project_quotas() {
    if !fuse_or_skip("project_ids_by_path_and_project_quotas") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    rig.ok("create -o compression=off tank/home");
    let dir = tank.join("home/p");
    std::fs::create_dir(&dir).unwrap();
    let shown = dir.display().to_string();
    assert_eq!(
        rig.ok(&format!("project -s -p 42 {shown}")),
        format!("   42 P {shown}\n")
    );
    let path = dir.join("f");
    let file = std::fs::File::create(&path).unwrap();
    file.write_all_at(&chunk(0), 0).unwrap();
    file.sync_all().unwrap();
    assert_eq!(
        rig.ok(&format!("project {}", path.display())),
        format!("   42 - {}\n", path.display())
    );
    let objused = rig.ok("get -H -o value projectobjused@42 tank/home");
    assert_eq!(objused, "2\n");
    let used: u64 = rig
        .ok("get -H -p -o value projectused@42 tank/home")
        .trim()
        .parse()
        .unwrap();
    assert!(used >= 64 << 10, "{used}");
    rig.ok("set projectquota@42=128K tank/home");
    let refused = file.write_all_at(&[7u8; 256 << 10], 64 << 10).unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EDQUOT), "{refused:?}");
    let cleared = rig.ok(&format!("project -C -r {shown}"));
    assert_eq!(
        cleared,
        format!("    0 - {shown}\n    0 - {}\n", path.display())
    );
    let outside = rig.refused(&format!("project {}", rig.root().display()));
    assert!(
        outside.contains("not inside a mounted tarn dataset"),
        "{outside}"
    );
}

// DESCRIPTION: `tarn project` changes files behind the kernel's back (it sets their ctime
// through the engine); the daemon then drops the mount's kernel caches, so `stat` through the
// mount shows the new ctime at once, even for a file just created, whose attributes the
// kernel may keep for the entry TTL (10 s).
// STRATEGY: create and stat a file (attributes cached), wait past a second so the ctime
// differs, set its project id, stat again well within the TTL.
#[test]
fn project_changes_reach_the_kernels_caches() {
    if !fuse_or_skip("project_changes_reach_the_kernels_caches") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    let path = tank.join("fresh");
    std::fs::File::create(&path).unwrap();
    let before = std::fs::metadata(&path).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    rig.ok(&format!("project -p 9 {}", path.display()));
    let after = std::fs::metadata(&path).unwrap();
    assert!(
        after.ctime() > before.ctime(),
        "ctime {} then {}: the kernel kept stale attributes",
        before.ctime(),
        after.ctime()
    );
}

/// The mount options of what is mounted at `path` (mountinfo field 6).
fn options_at(path: &Path) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let wanted = path.to_str().unwrap();
    let line = table
        .lines()
        .find(|line| line.split(' ').nth(4) == Some(wanted))
        .unwrap();
    line.split(' ')
        .nth(5)
        .unwrap()
        .split(',')
        .map(String::from)
        .collect()
}

/// Which access-time flag the mount at `path` shows.
fn atime_flag_at(path: &Path) -> &'static str {
    let options = options_at(path);
    let has = |word: &str| options.iter().any(|o| o == word);
    match (has("noatime"), has("relatime")) {
        (true, _) => "noatime",
        (_, true) => "relatime",
        _ => "strictatime",
    }
}

// DESCRIPTION: `atime` and `relatime` change the mount's flags on the live mount, also when it
// is busy and for mounted children that inherit them: relatime by default, noatime for
// atime=off, strictatime for relatime=off, back to relatime when inherited again; and a
// read then records its access as the new setting says (atime=off: the atime stays).
// STRATEGY: a file held open in the pool's mount across the property changes (an unmount
// would be refused); /proc/self/mountinfo for the flags, stat for the atime.
#[test]
fn access_time_properties_change_live_mounts() {
    use std::os::unix::fs::MetadataExt;
    if !fuse_or_skip("access_time_properties_change_live_mounts") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    rig.ok("create tank/child");
    let child = tank.join("child");
    std::fs::write(tank.join("file"), b"contents").unwrap();
    let held = std::fs::File::open(tank.join("file")).unwrap();
    assert_eq!(atime_flag_at(&tank), "relatime");
    rig.ok("set atime=off tank");
    assert_eq!(atime_flag_at(&tank), "noatime");
    assert_eq!(atime_flag_at(&child), "noatime", "inherited");
    let before = std::fs::metadata(tank.join("file")).unwrap().atime_nsec();
    let mut buf = [0; 8];
    held.read_exact_at(&mut buf, 0).unwrap();
    let after = std::fs::metadata(tank.join("file")).unwrap().atime_nsec();
    assert_eq!(before, after, "atime=off: a read leaves the atime");
    rig.ok("set atime=on relatime=off tank");
    assert_eq!(atime_flag_at(&tank), "strictatime");
    assert_eq!(atime_flag_at(&child), "strictatime");
    rig.ok("inherit relatime tank");
    assert_eq!(atime_flag_at(&tank), "relatime");
    assert_eq!(fstype_at(&tank).as_deref(), Some("fuse.tarn"));
    drop(held);
}

/// The ALLOC of the pool's one cache device in `pool iostat -v -H -p`.
fn cache_alloc(rig: &Rig) -> u64 {
    let iostat = rig.ok("pool iostat -v -H -p tank");
    let rows = tsv_rows(&iostat);
    rows[cache_heading(&rows) + 1][1].parse().unwrap()
}

// DESCRIPTION: a cache device (L2ARC) keeps its content across export and import (persistent
// L2ARC): a file read after an import is copied to the cache device, and after the next
// export and import the cache device's ALLOC in `iostat -v` is at least what it was, with
// an `l2arc_rebuild` event saying what the rebuild restored; the file reads back right.
// STRATEGY: incompressible file data through the mount; `pool iostat -v -H -p` ALLOC of the
// cache row before the export and after the import; `pool events -v`.
#[test]
fn a_cache_device_keeps_its_content_across_export_and_import() {
    if !fuse_or_skip("a_cache_device_keeps_its_content_across_export_and_import") {
        return;
    }
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 3);
    let cache = rig.devices("d", "cache", 1);
    rig.ok(&format!(
        "pool create -m /tank tank raidz1 {} cache {}",
        join(&devices),
        cache[0]
    ));
    let tank = rig.root().join("altroot/tank");
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let data: Vec<u8> = (0..4 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(tank.join("file"), &data).unwrap();
    // Export and import: the in-memory caches are cold, so reading the file feeds the
    // cache device.
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert_eq!(std::fs::read(tank.join("file")).unwrap(), data);
    let before = cache_alloc(&rig);
    assert!(
        before >= data.len() as u64,
        "the file went to the cache: {before}"
    );
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    let after = cache_alloc(&rig);
    assert!(after >= before, "ALLOC after import {after} < {before}");
    let events = rig.ok("pool events -v tank");
    assert!(events.contains("l2arc_rebuild"), "{events}");
    assert!(events.contains("l2_rebuild_stopped"), "{events}");
    assert_eq!(std::fs::read(tank.join("file")).unwrap(), data);
    rig.ok("pool export tank");
}

/// Mounts an overlay of `lower` and the tarn directories `upper` and `work` at `merged`.
fn mount_overlay(lower: &Path, upper: &Path, work: &Path, merged: &Path) -> bool {
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    let status = std::process::Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &options])
        .arg(merged)
        .status();
    status.is_ok_and(|s| s.success())
}

// DESCRIPTION: a tarn dataset serves as overlayfs's upper directory (container image
// layers): rename(RENAME_WHITEOUT) leaves a whiteout (character device 0/0) under the old
// name, so deleting and renaming files of the lower layer through the overlay works.
// STRATEGY: renameat2 with RENAME_WHITEOUT on the mount itself; then an overlay of a lower
// directory outside tarn and upper/work directories inside it, a lower file removed and
// one renamed through the overlay, the whiteouts checked in the upper directory.
#[test]
fn rename_whiteout_makes_a_tarn_dataset_an_overlay_upper() {
    use std::os::unix::fs::FileTypeExt;
    if !fuse_or_skip("rename_whiteout_makes_a_tarn_dataset_an_overlay_upper") {
        return;
    }
    let rig = Rig::new();
    let mount = pool_with_mount(&rig);
    std::fs::write(mount.join("a"), b"data").unwrap();
    let dir = std::fs::File::open(&mount).unwrap();
    let whiteout = rustix::fs::RenameFlags::WHITEOUT;
    rustix::fs::renameat_with(&dir, "a", &dir, "b", whiteout).expect("renameat2 RENAME_WHITEOUT");
    assert_eq!(std::fs::read(mount.join("b")).unwrap(), b"data");
    let whiteout = std::fs::symlink_metadata(mount.join("a")).unwrap();
    assert!(whiteout.file_type().is_char_device() && whiteout.rdev() == 0);

    let lower = rig.root().join("lower");
    std::fs::create_dir_all(&lower).unwrap();
    for name in ["gone", "moved", "kept"] {
        std::fs::write(lower.join(name), name).unwrap();
    }
    let (upper, work, merged) = (
        mount.join("upper"),
        mount.join("work"),
        rig.root().join("m"),
    );
    for d in [&upper, &work, &merged] {
        std::fs::create_dir_all(d).unwrap();
    }
    if !mount_overlay(&lower, &upper, &work, &merged) {
        println!("skipped the overlay part: overlayfs is not available here");
        return;
    }
    std::fs::remove_file(merged.join("gone")).unwrap();
    std::fs::rename(merged.join("moved"), merged.join("there")).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&merged)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["kept", "there"]);
    assert_eq!(std::fs::read(merged.join("there")).unwrap(), b"moved");
    let _ = std::process::Command::new("umount").arg(&merged).status();
    let gone = std::fs::symlink_metadata(upper.join("gone")).unwrap();
    assert!(
        gone.file_type().is_char_device() && gone.rdev() == 0,
        "no whiteout"
    );
}
