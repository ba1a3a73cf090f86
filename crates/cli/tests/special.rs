//! System tests of special allocation-class vdevs, `tarn pool add` and `tarn pool remove`,
//! through the real `tarn` binary on sparse files (the rig of `system.rs`).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::*;

/// The rows of `pool status tank` after the `\t<section>\t` heading line, up to the next
/// section heading or blank line.
fn section_rows(status: &str, section: &str) -> Vec<Vec<String>> {
    let heading = format!("\t{section}\t\n");
    let Some(after) = status.split(&heading).nth(1) else {
        return Vec::new();
    };
    after
        .lines()
        .take_while(|l| l.starts_with("\t  "))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

// DESCRIPTION: `special` vdevs as ZFS makes them: `create ... special DEV` under raidz1 is
// refused for its mismatched replication level (exactly one line, nothing written) and
// taken with `-f`; `special mirror` needs no `-f`; status shows a `special` section, the
// import listing too, and the class survives export and import.
// STRATEGY: status sections parsed from the text; device files compared after refusals.
#[test]
fn special_vdevs_are_created_checked_and_shown() {
    let rig = Rig::new();
    let d = rig.devices("d", "disk", 6);
    let data = join(&d[..3]);
    let refused = rig.refused(&format!("pool create tank raidz1 {data} special {}", d[3]));
    assert_eq!(
        refused,
        "cannot create 'tank': mismatched replication level: pool uses raidz1 and new vdev is \
         disk (use -f to override)"
    );
    let dry = rig.ok(&format!(
        "pool create -n tank raidz1 {data} special mirror {} {}",
        d[3], d[4]
    ));
    let expected = format!("\tspecial\n\t  mirror\n\t    {}\n\t    {}\n", d[3], d[4]);
    assert!(dry.ends_with(&expected), "{dry}");
    rig.ok(&format!(
        "pool create tank raidz1 {data} special mirror {} {}",
        d[3], d[4]
    ));
    let status = rig.ok("pool status tank");
    assert!(status.contains(" state: ONLINE\n"), "{status}");
    let rows = section_rows(&status, "special");
    assert_eq!(rows[0][..2], ["mirror-1", "ONLINE"], "{status}");
    assert_eq!(rows[1][0], d[3], "{status}");
    rig.ok("pool export tank");
    let listing = rig.ok(&format!("pool import -d {}", rig.dir_of("d")));
    assert!(!section_rows(&listing, "special").is_empty(), "{listing}");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    let again = rig.ok("pool status tank");
    assert_eq!(section_rows(&again, "special"), rows);
    rig.ok("pool destroy tank");
    rig.ok(&format!(
        "pool create -f tank raidz1 {data} special {}",
        d[5]
    ));
    assert_eq!(
        section_rows(&rig.ok("pool status tank"), "special")[0][0],
        d[5]
    );
}

/// The refusals of [`add_and_remove_change_a_live_pool`]: one line each, nothing changed.
fn refused_adds(rig: &Rig, d: &[String], before: &Image) {
    for (line, expected) in [
        (
            format!("pool add tank {}", d[0]),
            format!(
                "cannot add 'tank': device '{}' is already in this pool",
                d[0]
            ),
        ),
        (
            format!("pool add tank mirror {} {}", d[2], d[2]),
            format!(
                "cannot add 'tank': invalid vdev specification: device '{}' is listed more \
                 than once",
                d[2]
            ),
        ),
        (
            format!("pool add tank {}", d[2]),
            "cannot add 'tank': mismatched replication level: pool uses 2-way mirror and new \
             vdev is disk (use -f to override)"
                .to_string(),
        ),
        (
            format!("pool add tank log {}/nothing", rig.dir_of("d")),
            format!(
                "cannot open '{}/nothing': no such file or directory",
                rig.dir_of("d")
            ),
        ),
    ] {
        assert_eq!(rig.refused_against(before, &line), expected, "{line}");
    }
}

// DESCRIPTION: `pool add` of a data mirror, a log device and a spare to a live pool:
// `-n` prints the resulting configuration and changes nothing; the add shows in status in
// the right sections, in history, and after export/import; refusals (a device already in
// the pool, the same device twice, a missing path, a weaker data vdev without -f) are one
// line and change nothing. `pool remove` then takes the spare and the log device and
// refuses a data vdev, saying evacuation is not supported yet.
// STRATEGY: status sections and history parsed from the text; device files compared.
#[test]
fn add_and_remove_change_a_live_pool() {
    let rig = Rig::new();
    let d = rig.devices("d", "disk", 8);
    rig.ok(&format!("pool create tank mirror {} {}", d[0], d[1]));
    let before = rig.image();
    let dry = rig.ok(&format!("pool add -n tank mirror {} {}", d[2], d[3]));
    assert!(
        dry.starts_with("would update 'tank' to the following configuration:\n\n\ttank\n"),
        "{dry}"
    );
    assert!(
        dry.contains(&format!("\t  mirror\n\t    {}\n\t    {}\n", d[2], d[3])),
        "{dry}"
    );
    assert_same_image(&before, &rig.image(), "add -n");
    refused_adds(&rig, &d, &before);
    rig.ok(&format!(
        "pool add tank mirror {} {} log {} spare {}",
        d[2], d[3], d[4], d[5]
    ));
    let status = rig.ok("pool status tank");
    assert!(
        status.contains("\t  mirror-1  ONLINE") || status.contains("mirror-1"),
        "{status}"
    );
    assert_eq!(section_rows(&status, "logs")[0][0], d[4], "{status}");
    assert!(
        status.contains(&format!("\t  {}", d[5])),
        "spare listed: {status}"
    );
    let history = history_commands(&rig.ok("pool history tank"), "tank");
    let added = format!(
        "tarn pool add tank mirror {} {} log {} spare {}",
        d[2], d[3], d[4], d[5]
    );
    assert!(history.contains(&added), "{history:?}");
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    let again = rig.ok("pool status tank");
    assert_eq!(section_rows(&again, "logs"), section_rows(&status, "logs"));

    let baseline = rig.image();
    let refused = rig.refused_against(&baseline, "pool remove tank mirror-0");
    assert_eq!(
        refused,
        "cannot remove 'mirror-0': removing a data top-level vdev needs device evacuation, \
         which is not supported yet (log and cache devices and unused spares can be removed)"
    );
    rig.ok(&format!("pool remove tank {}", d[5]));
    rig.ok(&format!("pool remove tank {}", d[4]));
    let status = rig.ok("pool status tank");
    assert!(section_rows(&status, "logs").is_empty(), "{status}");
    assert!(!status.contains(&d[5]), "{status}");
    // The removed devices are free again: a new pool takes them without -f.
    rig.ok(&format!("pool create other mirror {} {}", d[4], d[5]));
}

// DESCRIPTION: `special_small_blocks` is a dataset property with ZFS's values: default 0,
// inherited, `0` or a power of two from 512 to 1M.
// STRATEGY: `get` after `set` on parent and child; a bad value is one refused line.
#[test]
fn special_small_blocks_property() {
    let rig = Rig::new();
    let d = rig.devices("d", "disk", 2);
    rig.ok(&format!("pool create tank mirror {} {}", d[0], d[1]));
    assert_eq!(rig.ok("get -H -o value special_small_blocks tank"), "0\n");
    rig.ok("create tank/fs");
    rig.ok("set special_small_blocks=32K tank");
    assert_eq!(
        rig.ok("get -H -o value,source special_small_blocks tank/fs"),
        "32K\tinherited from tank\n"
    );
    let refused = rig.refused("set special_small_blocks=3K tank/fs");
    assert!(
        refused.contains("0 or a power of two from 512 to 1M"),
        "{refused}"
    );
}
