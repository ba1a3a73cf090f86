//! `tarn pool replace -s` (sequential resilver), `replace -w` and `tarn pool wait` through the
//! real binary on sparse files. Stdout is a pipe here, so progress is plain lines.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::*;

/// A two-way mirror `tank` (no mounts) and a third device; the pool's own metadata is the
/// allocated space a resilver copies.
fn pool_with_mirror(rig: &Rig) -> Vec<String> {
    let devices = rig.devices("d", "disk", 3);
    rig.ok(&format!(
        "pool create -m none tank mirror {} {}",
        devices[0], devices[1]
    ));
    devices
}

// DESCRIPTION: `replace -s -w` on a mirror runs a sequential resilver, then the verifying
// scrub, and waits for both; status names both; the old device has left the pool.
// STRATEGY: progress lines in a pipe name the two phases; the status scan line is exact up
// to its times; the config lists the new device and not the old one.
#[test]
fn sequential_replace_of_a_mirror_then_verifying_scrub() {
    let rig = Rig::new();
    let devices = pool_with_mirror(&rig);
    let out = rig.ok(&format!(
        "pool replace -s -w tank {} {}",
        devices[1], devices[2]
    ));
    for line in out.lines() {
        assert!(
            line.starts_with("resilver (sequential): ")
                || line.starts_with("scrub (after a sequential resilver): "),
            "{out}"
        );
    }
    let status = rig.ok("pool status tank");
    assert!(
        status.contains("  scan: scrub (after a sequential resilver) repaired 0B in "),
        "{status}"
    );
    assert!(status.contains(" with 0 errors on "), "{status}");
    assert!(status.contains(&devices[2]), "{status}");
    assert!(!status.contains(&devices[1]), "{status}");
    let history = rig.ok("pool history tank");
    assert!(
        history.contains(&format!(
            " pool replace -s tank {} {}\n",
            devices[1], devices[2]
        )),
        "{history}"
    );
    // Nothing runs any more: wait returns at once without a report.
    assert_eq!(rig.ok("pool wait tank"), "");
    assert_eq!(rig.ok("pool wait -t replace tank"), "");
}

// DESCRIPTION: `replace -s` on raidz is refused with one line and changes nothing, as ZFS
// refuses sequential reconstruction there.
// STRATEGY: the rig's refusal check (exit 1, one `cannot` line, identical files).
#[test]
fn sequential_replace_is_refused_for_raidz() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 4);
    rig.ok(&format!(
        "pool create -m none tank raidz1 {} {} {}",
        devices[0], devices[1], devices[2]
    ));
    let line = rig.refused(&format!(
        "pool replace -s tank {} {}",
        devices[1], devices[3]
    ));
    assert_eq!(
        line,
        format!(
            "cannot replace '{}': sequential resilver (-s) is only supported for mirror and \
             single-disk vdevs; replace a raidz device without -s",
            devices[1]
        )
    );
}

// DESCRIPTION: `pool wait -t scrub` reports a running scrub until it ends; an unknown
// activity is a usage error; a missing pool is refused.
// STRATEGY: start a scrub without -w, wait for it, check status says it finished.
#[test]
fn wait_for_a_scrub() {
    let rig = Rig::new();
    pool_with_mirror(&rig);
    rig.ok("pool scrub tank");
    let out = rig.ok("pool wait -t scrub tank");
    assert!(out.lines().all(|l| l.starts_with("scrub: ")), "{out}");
    let status = rig.ok("pool status tank");
    assert!(status.contains("  scan: scrub repaired 0B in "), "{status}");
    let usage = rig.run("pool wait -t trim tank");
    assert_eq!(usage.code, Some(2), "{usage:?}");
    assert_eq!(
        rig.refused("pool wait nosuch"),
        "cannot wait for 'nosuch': no such pool"
    );
}
