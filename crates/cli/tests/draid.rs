//! dRAID through the real binary and daemon on sparse files: the seed's `draid2:8d:2s:90c`.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::*;

/// Polls `pool status tank` (0.5 s apart, at most a minute) until it contains `text`.
fn status_until(rig: &Rig, text: &str) -> String {
    let mut status = String::new();
    for _ in 0..120 {
        status = rig.ok("pool status tank");
        if status.contains(text) {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("no '{text}' in {status}");
}

/// The state column of the spares-section row of `name`.
fn spare_row(status: &str, name: &str) -> String {
    let spares = status
        .split("spares")
        .nth(1)
        .unwrap_or_else(|| panic!("{status}"));
    let row = spares
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("{name} in {status}"));
    row.split_whitespace().nth(1).unwrap().to_string()
}

fn contents(i: usize) -> Vec<u8> {
    (0..300_000 + i * 7919)
        .map(|b| (b * 31 + i * 17) as u8)
        .collect()
}

// DESCRIPTION: the seed's layout end to end: draid2:8d:2s:90c on 90 sparse files takes and
// returns data; a device file deleted under the daemon is replaced by a distributed spare
// (INUSE), rebuilt sequentially and scrubbed clean by itself; the pool exports and imports
// with the spare in use; replacing the failed device with a new file frees the spare (AVAIL)
// and a scrub finds nothing wrong.
// STRATEGY: files written and read back through the mount (skipped without /dev/fuse),
// status polled for each phase, exact rows of the spares section.
#[test]
fn draid_90_children_spare_rebuild_and_release() {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("SKIP draid_90_children_spare_rebuild_and_release: /dev/fuse is absent");
        return;
    }
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 90);
    let fresh = rig.devices("n", "new", 1);
    rig.ok(&format!(
        "pool create -m /tank tank draid2:8d:2s:90c {}",
        join(&devices)
    ));
    let status = rig.ok("pool status tank");
    assert!(status.contains("\t  draid2:8d:90c:2s-0 "), "{status}");
    assert_eq!(spare_row(&status, "draid2-0-0"), "AVAIL");
    assert_eq!(spare_row(&status, "draid2-0-1"), "AVAIL");
    let tank = rig.root().join("altroot/tank");
    for i in 0..12 {
        std::fs::write(tank.join(format!("f{i}")), contents(i)).unwrap();
    }
    rig.ok("pool sync tank");
    std::fs::remove_file(&devices[17]).unwrap();
    rig.ok("pool set comment=after tank");
    let status = status_until(&rig, "scrub (after a sequential resilver) repaired");
    assert!(status.contains(" with 0 errors on "), "{status}");
    assert_eq!(spare_row(&status, "draid2-0-0"), "INUSE");
    assert_eq!(spare_row(&status, "draid2-0-1"), "AVAIL");
    for i in 0..12 {
        assert!(std::fs::read(tank.join(format!("f{i}"))).unwrap() == contents(i));
    }
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    let status = rig.ok("pool status tank");
    assert_eq!(spare_row(&status, "draid2-0-0"), "INUSE", "after import");
    rig.ok(&format!("pool replace tank {} {}", devices[17], fresh[0]));
    let status = status_until(&rig, "scan: resilvered");
    assert_eq!(spare_row(&status, "draid2-0-0"), "AVAIL");
    assert!(
        status.contains(&fresh[0]) && !status.contains(&devices[17]),
        "{status}"
    );
    rig.ok("pool scrub -w tank");
    let status = rig.ok("pool status tank");
    assert!(
        status.contains("scrub repaired 0B") && status.contains(" with 0 errors"),
        "{status}"
    );
    for i in 0..12 {
        assert!(std::fs::read(tank.join(format!("f{i}"))).unwrap() == contents(i));
    }
    rig.ok("pool export tank");
}

// DESCRIPTION: a dRAID added to a pool of a mirror (`pool add`) takes data beside it; after
// export, every device file moved to another directory under another name, in another
// order, the pool imports by GUID, ONLINE, every file reads back, and a scrub finds nothing.
// STRATEGY: files written and read through the mount (skipped without /dev/fuse); status
// rows for the added vdev and its distributed spare.
#[test]
fn an_added_draid_imports_from_moved_and_renamed_device_files() {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("SKIP an_added_draid_imports_from_moved_and_renamed_device_files: no /dev/fuse");
        return;
    }
    let rig = Rig::new();
    let mirror = rig.devices("d", "m", 2);
    let draid = rig.devices("d", "r", 5);
    rig.ok(&format!(
        "pool create -m /tank tank mirror {}",
        join(&mirror)
    ));
    rig.ok(&format!("pool add tank draid1:2d:1s:5c {}", join(&draid)));
    let status = rig.ok("pool status tank");
    assert!(status.contains("draid1:2d:5c:1s-1"), "{status}");
    assert_eq!(spare_row(&status, "draid1-1-0"), "AVAIL");
    let tank = rig.root().join("altroot/tank");
    for i in 0..8 {
        std::fs::write(tank.join(format!("f{i}")), contents(i)).unwrap();
    }
    rig.ok("pool export tank");
    let moved = rig.root().join("moved");
    std::fs::create_dir(&moved).unwrap();
    for (i, path) in mirror.iter().chain(&draid).enumerate() {
        std::fs::rename(path, moved.join(format!("disk-{}", 6 - i))).unwrap();
    }
    rig.ok(&format!("pool import -d {} tank", moved.display()));
    let status = rig.ok("pool status tank");
    assert!(status.contains(" state: ONLINE\n"), "{status}");
    for i in 0..8 {
        assert_eq!(
            std::fs::read(tank.join(format!("f{i}"))).unwrap(),
            contents(i)
        );
    }
    rig.ok("pool scrub -w tank");
    let status = rig.ok("pool status tank");
    assert!(status.contains("with 0 errors"), "{status}");
}
