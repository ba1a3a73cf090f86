//! System test: a device file deleted under a running daemon.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::*;

// DESCRIPTION: an admin (or a failing script) deletes one device file of an imported raidz1
// with a hot spare. The next txg's flush finds the file gone, the leaf goes REMOVED, the
// daemon's background thread activates the spare by itself and resilvers it; `status` shows
// `spare-2` with the old device REMOVED and the spare INUSE, the events name what happened,
// and a scrub afterwards finds nothing wrong.
// STRATEGY: `pool set` commits a txg at once; poll `status` (the background thread looks at
// least every 5 s) for at most 60 s.
#[test]
fn deleted_device_file_is_spared_by_the_daemon() {
    let rig = Rig::new();
    let (data, spares) = rig.tank_with_spares("raidz1", 5, 1);
    std::fs::remove_file(&data[2]).unwrap();
    rig.ok("pool set comment=after tank");
    let mut status = String::new();
    for _ in 0..120 {
        status = rig.ok("pool status tank");
        if status.contains("resilvered") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert!(status.contains("scan: resilvered"), "{status}");
    assert!(status.contains("spare-2"), "{status}");
    let line = |name: &str| -> Vec<String> {
        let row = status
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {status}"));
        row.split_whitespace().map(str::to_string).collect()
    };
    assert_eq!(line(&data[2])[1], "REMOVED");
    assert_eq!(line(&spares[0])[1], "ONLINE");
    let spare_rows: Vec<&str> = status.lines().filter(|l| l.contains(&spares[0])).collect();
    assert!(spare_rows[1].contains("INUSE"), "{status}");
    let events = rig.ok("pool events tank");
    for class in [
        "statechange",
        "vdev_spare",
        "resilver_start",
        "resilver_finish",
    ] {
        assert!(
            events.contains(&format!("sysevent.fs.zfs.{class}")),
            "{events}"
        );
    }
    rig.ok("pool scrub -w tank");
    assert!(rig.ok("pool status tank").contains("with 0 errors"));
}
