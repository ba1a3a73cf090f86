//! System test: a pool suspended by device files deleted beyond its redundancy, resumed by
//! `tarn pool clear` once they are back.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use common::*;

/// Copies `from` to `to` keeping it sparse (only non-zero chunks are written).
fn sparse_copy(from: &Path, to: &Path) {
    let source = std::fs::File::open(from).unwrap();
    let len = source.metadata().unwrap().len();
    let target = std::fs::File::create(to).unwrap();
    target.set_len(len).unwrap();
    let mut buffer = vec![0u8; CHUNK];
    let mut offset = 0;
    while offset < len {
        let n = usize::try_from((len - offset).min(CHUNK as u64)).unwrap();
        source.read_exact_at(&mut buffer[..n], offset).unwrap();
        if buffer[..n] != ZERO_CHUNK[..n] {
            target.write_all_at(&buffer[..n], offset).unwrap();
        }
        offset += n as u64;
    }
    target.sync_all().unwrap();
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// Incompressible bytes (xorshift), so that every block spans all columns of a raidz.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// A rig with a raidz1 of four files mounted at `<rig>/altroot/tank`, and the files.
fn mounted_raidz1() -> (Rig, Vec<String>) {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 4);
    rig.ok(&format!(
        "pool create -m /tank tank raidz1 {}",
        join(&devices)
    ));
    (rig, devices)
}

/// A thread that creates `path`, writes `data` and fsyncs it; returns the fsync's result.
fn spawn_fsync_writer(
    path: std::path::PathBuf,
    data: Vec<u8>,
) -> std::thread::JoinHandle<std::io::Result<()>> {
    std::thread::spawn(move || {
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(&data).unwrap();
        file.sync_all()
    })
}

/// Polls `status` until the pool is SUSPENDED (at most 30 s; the txg timer runs every 5 s).
fn wait_suspended(rig: &Rig) {
    for _ in 0..120 {
        if state(rig) == "SUSPENDED" {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("not suspended: {}", rig.ok("pool status tank"));
}

fn state(rig: &Rig) -> String {
    let status = rig.ok("pool status tank");
    status
        .lines()
        .find_map(|l| l.trim().strip_prefix("state: "))
        .unwrap()
        .to_string()
}

// DESCRIPTION: two device files of a mounted raidz1 (failmode=wait, the default) are deleted
// while a file is being written and fsync'd: the commit cannot reach enough devices, the
// pool goes SUSPENDED (status says why, see TARN-0004) and the fsync waits, while the
// daemon keeps answering. `tarn pool clear` refuses, naming the missing files and changing
// no byte, until the files are restored; then it prints nothing, the pool is ONLINE, the
// fsync returns, and every byte written before and during the failure reads back, with a
// clean scrub.
// STRATEGY: copy the two files right after a committed txg (`pool set` commits at once),
// delete them, write and fsync from a thread, poll `status` for SUSPENDED, move the copies
// back. Skips only when /dev/fuse is absent.
#[test]
fn deleted_devices_suspend_and_clear_resumes() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP deleted_devices_suspend_and_clear_resumes: /dev/fuse is absent");
        return;
    }
    let (rig, devices) = mounted_raidz1();
    let tank = rig.root().join("altroot/tank");
    let before = pattern(1, 3 << 20);
    std::fs::write(tank.join("before"), &before).unwrap();
    rig.ok("pool set comment=committed tank");
    let saved = rig.root().join("saved");
    std::fs::create_dir(&saved).unwrap();
    for device in &devices[1..3] {
        let name = Path::new(device).file_name().unwrap();
        sparse_copy(Path::new(device), &saved.join(name));
        std::fs::remove_file(device).unwrap();
    }
    let during = pattern(2, 2 << 20);
    let writer = spawn_fsync_writer(tank.join("during"), during.clone());
    wait_suspended(&rig);
    let status = rig.ok("pool status tank");
    assert!(status.contains("see: TARN-0004"), "{status}");
    assert!(status.contains("tarn pool clear"), "{status}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !writer.is_finished(),
        "fsync waits for clear (failmode=wait)"
    );
    rig.ok("pool list");

    let refused = rig.refused("pool clear tank");
    assert!(
        refused.starts_with("cannot clear errors for 'tank': the pool is still suspended: "),
        "{refused}"
    );
    assert!(
        refused.contains(&devices[1]) && refused.contains(&devices[2]),
        "{refused}"
    );
    assert!(!refused.contains(&devices[0]), "{refused}");

    for device in &devices[1..3] {
        let name = Path::new(device).file_name().unwrap();
        std::fs::rename(saved.join(name), device).unwrap();
    }
    assert_eq!(rig.ok("pool clear tank"), "");
    writer.join().unwrap().unwrap();
    assert_eq!(state(&rig), "ONLINE");
    assert!(std::fs::read(tank.join("before")).unwrap() == before);
    assert!(std::fs::read(tank.join("during")).unwrap() == during);
    rig.ok("pool scrub -w tank");
    let status = rig.ok("pool status tank");
    assert!(status.contains("with 0 errors"), "{status}");
    assert!(status.contains("state: ONLINE"), "{status}");
    let events = rig.ok("pool events tank");
    assert!(events.contains("sysevent.fs.zfs.resume"), "{events}");
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert!(std::fs::read(tank.join("during")).unwrap() == during);
}

// DESCRIPTION: the same failure, but the devices never come back: `tarn pool export -f`
// succeeds while the fsync is blocked in the daemon (failmode=wait), the fsync then fails
// with EIO, and the daemon serves other commands afterwards.
// STRATEGY: as above up to SUSPENDED, then `export -f` from the main thread; the writer's
// result is joined with the export done.
#[test]
fn export_force_ends_a_suspended_pool_with_a_waiting_writer() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP export_force_ends_a_suspended_pool_with_a_waiting_writer: no /dev/fuse");
        return;
    }
    let (rig, devices) = mounted_raidz1();
    let tank = rig.root().join("altroot/tank");
    std::fs::write(tank.join("before"), pattern(3, 1 << 20)).unwrap();
    rig.ok("pool set comment=committed tank");
    for device in &devices[1..3] {
        std::fs::remove_file(device).unwrap();
    }
    let writer = spawn_fsync_writer(tank.join("during"), pattern(4, 1 << 20));
    wait_suspended(&rig);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!writer.is_finished(), "fsync waits (failmode=wait)");
    rig.ok("pool export -f tank");
    let failed = writer.join().unwrap();
    assert!(
        failed.is_err(),
        "the waiting fsync fails once the pool is gone"
    );
    assert!(rig.ok("pool list").contains("no pools available"));
}

// DESCRIPTION: `tarn pool export -f` of a suspended pool whose mount has no open file and no
// request waiting: it returns, and the daemon serves other commands afterwards. It used to
// hang: the unmount waited for the mount's session to end, whose last act, a sync, waited
// for `clear` (failmode=wait); the waits that `export -f` ends were ended only after it.
// STRATEGY: delete two device files after a committed txg, write a file without fsync and
// close it, poll `status` until the txg timer's commit suspended the pool, then `export -f`
// on a thread of its own, given 60 s.
#[test]
fn export_force_of_a_suspended_pool_with_nothing_open_returns() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP export_force_of_a_suspended_pool_with_nothing_open_returns: no /dev/fuse");
        return;
    }
    let (rig, devices) = mounted_raidz1();
    let tank = rig.root().join("altroot/tank");
    rig.ok("pool set comment=committed tank");
    for device in &devices[1..3] {
        std::fs::remove_file(device).unwrap();
    }
    std::fs::write(tank.join("unsynced"), pattern(5, 1 << 20)).unwrap();
    wait_suspended(&rig);
    let (rundir, root) = (rig.rundir.clone(), rig.root().to_path_buf());
    let (done, exported) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(common::run_tarn(&rundir, &root, "pool export -f tank", &[]));
    });
    let run = exported
        .recv_timeout(Duration::from_secs(60))
        .expect("export -f returns");
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(rig.ok("pool list").contains("no pools available"));
}

// DESCRIPTION: under failmode=wait a read through the FUSE mount that needs two deleted
// device files of a raidz1 (more than its parity) blocks in the daemon instead of failing
// with EIO, while the daemon keeps answering `status` and `list`; the pool is SUSPENDED.
// Once the files are back, `tarn pool clear` resumes the pool and the blocked read returns
// the file's bytes; a scrub is clean.
// STRATEGY: primarycache=metadata, write a file of incompressible bytes (every block spans
// all four devices), export and import (none of its data cached in the daemon or the
// kernel), copy two device files aside, then delete both, poll `status` until the fault
// check has taken both out of service (a deleted file's open descriptor still reads), read the
// file from a thread, poll for SUSPENDED, move the copies back, clear, join the reader.
// Before the change the read failed at once with EIO. Skips only when /dev/fuse is absent.
#[test]
fn a_read_of_deleted_devices_waits_for_clear() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP a_read_of_deleted_devices_waits_for_clear: /dev/fuse is absent");
        return;
    }
    let (rig, devices) = mounted_raidz1();
    let tank = rig.root().join("altroot/tank");
    rig.ok("set primarycache=metadata tank");
    let data = noise(5, 3 << 20);
    std::fs::write(tank.join("file"), &data).unwrap();
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    let saved = rig.root().join("saved");
    std::fs::create_dir(&saved).unwrap();
    // Both copies first: a copy can take seconds on a busy disk, and the read must not
    // start while one deleted file is still in service (its descriptor still reads).
    for device in &devices[1..3] {
        let name = Path::new(device).file_name().unwrap();
        sparse_copy(Path::new(device), &saved.join(name));
    }
    for device in &devices[1..3] {
        std::fs::remove_file(device).unwrap();
    }
    let out_of_service = |status: &str| {
        devices[1..3].iter().all(|device| {
            row_state(status, device).is_some_and(|row| row.first() != Some(&"ONLINE"))
        })
    };
    for _ in 0..120 {
        if out_of_service(&rig.ok("pool status tank")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let status = rig.ok("pool status tank");
    assert!(out_of_service(&status), "{status}");
    let path = tank.join("file");
    let reader = std::thread::spawn(move || std::fs::read(&path));
    wait_suspended(&rig);
    std::thread::sleep(Duration::from_millis(500));
    if reader.is_finished() {
        let read = reader.join().unwrap().map(|bytes| bytes == data);
        panic!("the read waits for clear (failmode=wait); it returned {read:?}");
    }
    rig.ok("pool list");
    assert!(rig.refused("pool clear tank").contains(&devices[1]));
    assert!(
        !reader.is_finished(),
        "a refused clear does not end the wait"
    );
    for device in &devices[1..3] {
        let name = Path::new(device).file_name().unwrap();
        std::fs::rename(saved.join(name), device).unwrap();
    }
    assert_eq!(rig.ok("pool clear tank"), "");
    let read = reader.join().unwrap().unwrap();
    assert!(read == data, "the waiting read returns the file's bytes");
    assert_eq!(state(&rig), "ONLINE");
    rig.ok("pool scrub -w tank");
    let status = rig.ok("pool status tank");
    assert!(status.contains("with 0 errors"), "{status}");
}

/// A tmpfs of `size` mounted at `dir` for one test, lazily unmounted when dropped (the
/// daemon may still hold the device files open then).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount a tmpfs at {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

// DESCRIPTION: the filesystem holding the device files fills up while a file is written and
// fsync'd (the device files are sparse): every device write fails with ENOSPC, the pool is
// SUSPENDED and `status` says "No space left on device"; the fsync waits (failmode=wait).
// Once space is freed on that filesystem, `tarn pool clear` resumes the pool, the fsync
// returns, and every byte reads back, with a clean scrub and after export/import. Before
// the fix `clear` failed again ("a block could not be written again"): each device's
// write-behind queue handed the failed attempt's error to the retry.
// STRATEGY: a 96 MiB tmpfs holds the four 128 MiB sparse device files of a raidz1 and a
// 40 MiB filler; 48 MiB of incompressible bytes need 64 MiB of it; the filler is deleted
// once the pool is SUSPENDED. Skips only when /dev/fuse is absent.
#[test]
fn a_full_host_filesystem_suspends_and_clear_resumes_once_space_is_freed() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP a_full_host_filesystem_suspends_and_clear_resumes: /dev/fuse is absent");
        return;
    }
    let rig = Rig::new();
    let host = Tmpfs::mount(&rig.root().join("d"), "96M");
    let devices = rig.devices("d", "disk", 4);
    let filler = host.0.join("filler");
    std::fs::write(&filler, vec![1u8; 40 << 20]).unwrap();
    rig.ok(&format!(
        "pool create -m /tank -O compression=off tank raidz1 {}",
        join(&devices)
    ));
    let tank = rig.root().join("altroot/tank");
    let before = noise(7, 4 << 20);
    std::fs::write(tank.join("before"), &before).unwrap();
    rig.ok("pool set comment=committed tank");
    let big = noise(8, 48 << 20);
    let writer = spawn_fsync_writer(tank.join("big"), big.clone());
    wait_suspended(&rig);
    let status = rig.ok("pool status tank");
    assert!(status.contains("No space left on device"), "{status}");
    assert!(
        !writer.is_finished(),
        "fsync waits for clear (failmode=wait)"
    );

    std::fs::remove_file(&filler).unwrap();
    assert_eq!(rig.ok("pool clear tank"), "");
    writer.join().unwrap().unwrap();
    assert_eq!(state(&rig), "ONLINE");
    assert!(std::fs::read(tank.join("before")).unwrap() == before);
    assert!(std::fs::read(tank.join("big")).unwrap() == big);
    rig.ok("pool scrub -w tank");
    let status = rig.ok("pool status tank");
    assert!(status.contains("with 0 errors"), "{status}");
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert!(std::fs::read(tank.join("big")).unwrap() == big);
    rig.ok("pool export tank");
}
