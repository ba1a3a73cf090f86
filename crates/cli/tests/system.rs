//! System tests (STYLE.md §8, level 8): shell-free scenarios that drive the real `tarn`
//! binary the way an administrator would, on 128 MiB sparse files in a temporary directory.
//!
//! Every test owns a [`Rig`]: a temporary directory for its device files and its own daemon
//! rundir. The rig's `Drop` runs `tarn daemon --stop`, so no daemon outlives its test, even
//! when an assertion fails. Every refused command is checked against the three parts of
//! the CLI's contract: exit status 1, exactly one stderr line starting with `cannot `, and
//! every file under the temporary directory byte-identical before and after ("a refused
//! command changes nothing", STYLE.md §5).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use common::*;

#[test]
fn create_raidz2_with_spare_status_and_list() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 7);
    let (data, spares) = devices.split_at(6);
    let out = rig.ok(&format!(
        "pool create tank raidz2 {} spare {}",
        join(data),
        join(spares)
    ));
    assert_eq!(out, "");

    let status = rig.ok("pool status");
    assert_eq!(status, healthy_status("tank", "raidz2-0", data, spares));
    assert_eq!(rig.ok("pool status tank"), status);

    let list = rig.ok("pool list -H -p");
    let rows: Vec<&str> = list.lines().collect();
    assert_eq!(rows.len(), 1, "{list}");
    let cells: Vec<&str> = rows[0].split('\t').collect();
    assert_eq!(
        cells.len(),
        11,
        "NAME SIZE ALLOC FREE CKPOINT EXPANDSZ FRAG CAP DEDUP HEALTH ALTROOT: {list:?}"
    );
    let number = |i: usize| -> u64 { cells[i].parse().expect("exact number with -p") };
    let (size, alloc, free) = (number(1), number(2), number(3));
    assert_eq!(cells[0], "tank");
    assert!(size > alloc && alloc > 0, "{list}");
    assert_eq!(free, size - alloc);
    // Raw size of six devices, parity included (as ZFS reports raidz), minus labels.
    assert!(
        (6 * DEVICE_SIZE * 9 / 10..=6 * DEVICE_SIZE).contains(&size),
        "{size}"
    );
    assert_eq!(cells[4], "-", "no checkpoint");
    assert_eq!(cells[5], "-", "no expandsize");
    assert!(number(6) <= 100, "fragmentation percent");
    assert_eq!(number(7), alloc * 100 / size, "capacity percent");
    assert_eq!(cells[8], "1.00");
    assert_eq!(cells[9], "ONLINE");
    assert_eq!(cells[10], "-");

    let human = rig.ok("pool list");
    let mut human_lines = human.lines();
    let header: Vec<&str> = human_lines
        .next()
        .expect("header")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME", "SIZE", "ALLOC", "FREE", "CKPOINT", "EXPANDSZ", "FRAG", "CAP", "DEDUP",
            "HEALTH", "ALTROOT"
        ]
    );
    let row: Vec<&str> = human_lines
        .next()
        .expect("row")
        .split_whitespace()
        .collect();
    assert_eq!(row[0], "tank");
    assert_eq!(row[8], "1.00x");
    assert_eq!(row[9], "ONLINE");

    assert_eq!(
        rig.ok("pool list -o name,health"),
        "NAME    HEALTH\ntank    ONLINE\n"
    );
    assert_eq!(rig.ok("pool list -H -o name,health"), "tank\tONLINE\n");
}

// DESCRIPTION: `pool get all` shows every property with ZFS's columns and sources (`-` for
// computed read-only values, `default` for unset settable ones); `pool set` makes a value
// `local`; `pool history` lists the create and the set with ZFS's timestamp format.
// STRATEGY: parse the tables; the read-only set is ZFS's; history lines are checked for
// the `YYYY-MM-DD.HH:MM:SS` prefix and the exact recorded command.
#[test]
fn properties_and_history() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 4);
    rig.ok(&format!("pool create tank raidz2 {}", join(&devices)));

    let all = rig.ok("pool get all tank");
    let mut lines = all.lines();
    let header = lines.next().expect("header");
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["NAME", "PROPERTY", "VALUE", "SOURCE"]
    );
    assert!(header.starts_with("NAME  PROPERTY"), "{header:?}");
    let read_only = [
        "size",
        "capacity",
        "health",
        "guid",
        "version",
        "dedupratio",
        "free",
        "allocated",
        "readonly",
        "expandsize",
        "freeing",
        "fragmentation",
        "leaked",
    ];
    let settable = [
        "altroot",
        "autoreplace",
        "cachefile",
        "failmode",
        "listsnapshots",
        "autoexpand",
        "ashift",
        "comment",
        "multihost",
        "autotrim",
    ];
    let mut seen = BTreeMap::new();
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.len(), 4, "{line:?}");
        assert_eq!(words[0], "tank");
        seen.insert(
            words[1].to_string(),
            (words[2].to_string(), words[3].to_string()),
        );
    }
    for property in read_only {
        let (_, source) = seen
            .get(property)
            .unwrap_or_else(|| panic!("{property} in {all}"));
        assert_eq!(source, "-", "{property} is read-only");
    }
    for property in settable {
        let (_, source) = seen
            .get(property)
            .unwrap_or_else(|| panic!("{property} in {all}"));
        assert_eq!(source, "default", "{property} is unset");
    }
    assert_eq!(seen["health"].0, "ONLINE");
    assert_eq!(seen["failmode"].0, "wait");
    assert_eq!(seen["readonly"].0, "off");
    assert_eq!(seen["ashift"].0, "12");
    assert_eq!(seen["capacity"].0, "0%");
    assert!(
        seen["size"].0.ends_with('M'),
        "human size: {}",
        seen["size"].0
    );
    let exact = rig.ok("pool get -H -p -o value size,guid tank");
    let exact: Vec<&str> = exact.lines().collect();
    let list_size = rig.ok("pool list -H -p -o size tank");
    assert_eq!(format!("{}\n", exact[0]), list_size);
    assert_eq!(exact[1], seen["guid"].0);
    let _: u64 = exact[1].parse().expect("guid is a number");

    assert_eq!(rig.ok("pool set failmode=continue tank"), "");
    assert_eq!(
        rig.ok("pool get -H -o value,source failmode tank"),
        "continue\tlocal\n"
    );
    assert_eq!(
        rig.ok("pool get -H failmode tank"),
        "tank\tfailmode\tcontinue\tlocal\n"
    );

    let history = history_commands(&rig.ok("pool history tank"), "tank");
    assert_eq!(
        history,
        [
            format!("tarn pool create tank raidz2 {}", join(&devices)),
            "tarn pool set failmode=continue tank".to_string(),
        ]
    );
}

// DESCRIPTION: an exported pool is found by `pool import -d DIR`, and still imports after
// its device files (hot spare included) were moved to another directory under new names in
// another order (as disks renumbered after a reboot); the listing and the status show the
// new paths in raidz order, the spare is AVAIL at its new path, and the history records the
// import.
// STRATEGY: map each old path to its new name with a fixed shuffle, then compare the
// listing rows and the whole status with the mapped order.
#[test]
fn export_then_import_from_moved_and_renamed_files() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 7);
    let (data, spares) = devices.split_at(6);
    rig.ok(&format!(
        "pool create tank raidz2 {} spare {}",
        join(data),
        join(spares)
    ));
    rig.ok("pool export tank");
    assert_eq!(rig.ok("pool list"), "no pools available\n");

    let listing = rig.ok(&format!("pool import -d {}", rig.dir_of("d")));
    assert!(listing.starts_with("   pool: tank\n     id: "), "{listing}");
    assert!(listing.contains("\n  state: ONLINE\n"), "{listing}");
    assert!(
        listing.contains(
            "\n action: The pool can be imported using its name or numeric identifier.\n"
        ),
        "{listing}"
    );
    assert_eq!(row_state(&listing, "tank"), Some(vec!["ONLINE"]));
    assert_eq!(row_state(&listing, "raidz2-0"), Some(vec!["ONLINE"]));
    for device in data {
        assert_eq!(
            row_state(&listing, device),
            Some(vec!["ONLINE"]),
            "{listing}"
        );
    }

    let new_dir = rig.root().join("moved");
    std::fs::create_dir(&new_dir).expect("mkdir");
    let order = [3usize, 0, 6, 5, 1, 4, 2];
    let mut moved = vec![String::new(); devices.len()];
    for (new_index, &old_index) in order.iter().enumerate() {
        let target = new_dir.join(format!("vol-{new_index}"));
        std::fs::rename(&devices[old_index], &target).expect("rename device file");
        moved[old_index] = target.to_str().expect("utf-8").to_string();
    }
    let (moved_data, moved_spares) = moved.split_at(6);
    let new_dir = new_dir.to_str().expect("utf-8").to_string();

    let listing = rig.ok(&format!("pool import -d {new_dir}"));
    assert!(listing.contains("\n  state: ONLINE\n"), "{listing}");
    for device in moved_data {
        assert_eq!(
            row_state(&listing, device),
            Some(vec!["ONLINE"]),
            "{listing}"
        );
    }
    rig.ok(&format!("pool import -d {new_dir} tank"));

    let status = rig.ok("pool status tank");
    assert_eq!(
        status,
        healthy_status("tank", "raidz2-0", moved_data, moved_spares)
    );
    let history = history_commands(&rig.ok("pool history tank"), "tank");
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[1], format!("tarn pool import -d {new_dir} tank"));

    let run = rig.run(&format!("pool import -d {new_dir}"));
    assert_eq!(run.code, Some(0));
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr, "no pools available to import\n",
        "imported pools are not importable"
    );
}

// DESCRIPTION: `pool import -d` of a directory that is not there, or of a plain file, is an
// error in one line (before, a missing directory was an empty search: "no pools available").
// STRATEGY: both refusals through the binary, exact stderr and exit status 1.
#[test]
fn import_from_a_missing_or_plain_directory_is_refused() {
    let rig = Rig::new();
    let missing = rig.root().join("nonexistent");
    let run = rig.run(&format!("pool import -d {}", missing.display()));
    assert_eq!(run.code, Some(1));
    assert_eq!(
        run.stderr,
        format!(
            "cannot import: directory '{}': no such file or directory\n",
            missing.display()
        )
    );
    let file = rig.root().join("plain");
    std::fs::write(&file, b"not a directory").unwrap();
    let run = rig.run(&format!("pool import -d {} tank", file.display()));
    assert_eq!(run.code, Some(1));
    assert_eq!(
        run.stderr,
        format!(
            "cannot import 'tank': '{}' is not a directory\n",
            file.display()
        )
    );
}

// DESCRIPTION: every refused command exits 1 with exactly one `cannot ...` line on stderr
// and changes no byte of any device file (of the imported pool, of an exported pool, or of
// the unused files); usage errors exit 2.
// STRATEGY: one baseline image of every file in the rig, compared after each refusal; the
// messages are asserted exactly where they are the contract.
#[test]
fn refused_commands_change_nothing() {
    let rig = Rig::new();
    let live = rig.devices("live", "a", 3);
    let old = rig.devices("old", "b", 3);
    let fresh = rig.devices("fresh", "c", 3);
    let small = rig.root().join("fresh").join("small");
    sparse(&small, 16 << 20);
    let small = small.to_str().expect("utf-8").to_string();
    let missing = rig.root().join("fresh").join("nosuch");
    let missing = missing.to_str().expect("utf-8").to_string();
    rig.ok(&format!("pool create old raidz2 {}", join(&old)));
    rig.ok("pool export old");
    rig.ok(&format!("pool create tank raidz2 {}", join(&live)));

    let baseline = rig.image();
    let refuse = |line: &str| rig.refused_against(&baseline, line);
    let (c0, c1, c2) = (&fresh[0], &fresh[1], &fresh[2]);

    assert_eq!(
        refuse(&format!("pool create p2 raidz2 {c0} {c1}")),
        "cannot create 'p2': invalid vdev specification: raidz2 requires at least 3 devices"
    );
    assert_eq!(
        refuse(&format!("pool create p2 raidz2 {c0} {c1} {c0}")),
        format!(
            "cannot create 'p2': invalid vdev specification: device '{c0}' is listed more than once"
        )
    );
    let busy = refuse(&format!("pool create p2 raidz2 {c0} {c1} {}", live[0]));
    assert!(
        busy.contains(&format!("'{}'", live[0])),
        "names the busy device: {busy}"
    );
    assert_eq!(
        refuse(&format!("pool create p2 raidz2 {c0} {c1} {}", old[1])),
        format!(
            "cannot create 'p2': device '{}' is part of exported pool 'old' (use -f to override)",
            old[1]
        )
    );
    assert_eq!(
        refuse(&format!("pool create p2 raidz2 {c0} {c1} {small}")),
        format!(
            "cannot create 'p2': device '{small}' is too small \
             (16777216 bytes; the minimum is 67108864 bytes)"
        )
    );
    assert_eq!(
        refuse(&format!("pool create p2 raidz2 {c0} {c1} {missing}")),
        format!("cannot open '{missing}': no such file or directory")
    );
    assert!(
        !Path::new(&missing).exists(),
        "a refused create makes no file"
    );
    let nosuch = refuse(&format!("pool create -o nosuch=1 p2 raidz2 {c0} {c1} {c2}"));
    assert!(
        nosuch.starts_with("cannot create 'p2': invalid property 'nosuch' (valid properties: "),
        "{nosuch}"
    );
    assert_eq!(
        refuse(&format!(
            "pool create -o failmode=sometimes p2 raidz2 {c0} {c1} {c2}"
        )),
        "cannot create 'p2': invalid value 'sometimes' for property 'failmode' \
         (valid values: wait, continue, panic)"
    );
    assert_eq!(
        refuse("pool set size=1G tank"),
        "cannot set property for 'tank': property 'size' is read-only"
    );
    assert_eq!(
        refuse(&format!("pool create tank raidz2 {c0} {c1} {c2}")),
        "cannot create 'tank': a pool with that name already exists"
    );
    assert_eq!(
        refuse(&format!("pool import -d {} tank", rig.dir_of("live"))),
        "cannot import 'tank': a pool with that GUID is already imported as 'tank'"
    );
    assert_eq!(
        refuse("pool status nosuch"),
        "cannot open 'nosuch': no such pool"
    );

    for usage in [
        "pool create",
        "pool create tank",
        "pool frobnicate",
        "pool set failmode tank",
    ] {
        let run = rig.run(usage);
        assert_eq!(
            run.code,
            Some(2),
            "`tarn {usage}` is a usage error: {run:?}"
        );
        assert_eq!(run.stdout, "");
        assert!(run.stderr.starts_with("error: "), "{run:?}");
    }
    assert_same_image(&baseline, &rig.image(), "usage errors");

    // Nothing was created, and the exported pool is still importable.
    assert_eq!(rig.ok("pool list -H -o name"), "tank\n");
    let listing = rig.ok(&format!("pool import -d {}", rig.dir_of("old")));
    assert!(listing.starts_with("   pool: old\n"), "{listing}");
    assert_same_image(&baseline, &rig.image(), "queries");
}

// DESCRIPTION: pools survive a daemon restart: after `daemon --stop`, the next command
// autostarts a new daemon that re-imports the pool from its cache file.
// STRATEGY: compare the status text and the pool GUID before the stop and after the
// restart; the socket disappears in between.
#[test]
fn daemon_restart_reimports_from_cache_file() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 4);
    rig.ok(&format!("pool create tank raidz2 {}", join(&devices)));
    let status = rig.ok("pool status tank");
    let guid = rig.ok("pool get -H -o value guid tank");
    assert!(rig.rundir.join("tarn.cache").exists(), "cache file written");

    assert_eq!(rig.ok("daemon --stop"), "");
    assert!(
        !rig.rundir.join("tarn.sock").exists(),
        "clean stop removes the socket"
    );

    assert_eq!(rig.ok("pool status tank"), status);
    assert_eq!(rig.ok("pool get -H -o value guid tank"), guid);
    assert_eq!(rig.ok("pool list -H -o name,health"), "tank\tONLINE\n");
}

// DESCRIPTION: labels are redundant. With L0/L1 of one device zeroed the pool imports
// ONLINE from L2/L3. With all four labels of one raidz2 device zeroed, the device is not
// recognized: the listing and the import say DEGRADED. With three of six devices unlabeled
// the import is refused with one line naming the missing devices, and nothing changes.
// STRATEGY: export between steps so the zeroing happens on a closed pool, as an admin's
// `dd` would.
#[test]
fn damaged_labels() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 6);
    let dir = rig.dir_of("d");
    rig.ok(&format!("pool create tank raidz2 {}", join(&devices)));
    rig.ok("pool export tank");

    zero(&devices[0], 0, LABEL_PAIR);
    let listing = rig.ok(&format!("pool import -d {dir}"));
    assert!(listing.contains("\n  state: ONLINE\n"), "{listing}");
    rig.ok(&format!("pool import -d {dir} tank"));
    let status = rig.ok("pool status tank");
    assert_eq!(status, healthy_status("tank", "raidz2-0", &devices, &[]));
    rig.ok("pool export tank");

    wipe_labels(&devices[1]);
    let listing = rig.ok(&format!("pool import -d {dir}"));
    assert!(listing.contains("\n  state: DEGRADED\n"), "{listing}");
    assert_eq!(row_state(&listing, "raidz2-0"), Some(vec!["DEGRADED"]));
    assert_eq!(
        row_state(&listing, &devices[1]),
        Some(vec!["UNAVAIL", "cannot", "open"]),
        "{listing}"
    );
    rig.ok(&format!("pool import -d {dir} tank"));
    let status = rig.ok("pool status tank");
    assert_eq!(status_state(&status), "DEGRADED", "{status}");
    assert!(status.contains("\n   see: TARN-0002\n"), "{status}");
    assert_eq!(
        row_state(&status, "raidz2-0"),
        Some(vec!["DEGRADED", "0", "0", "0"])
    );
    assert_eq!(
        row_state(&status, &devices[1]),
        Some(vec!["UNAVAIL", "0", "0", "0", "cannot", "open"]),
        "{status}"
    );
    for (i, device) in devices.iter().enumerate().filter(|(i, _)| *i != 1) {
        assert_eq!(
            row_state(&status, device),
            Some(vec!["ONLINE", "0", "0", "0"]),
            "{i}"
        );
    }
    assert_eq!(rig.ok("pool list -H -o health tank"), "DEGRADED\n");
    rig.ok("pool export tank");

    wipe_labels(&devices[2]);
    wipe_labels(&devices[3]);
    let listing = rig.ok(&format!("pool import -d {dir}"));
    assert!(listing.contains("\n  state: UNAVAIL\n"), "{listing}");
    assert!(listing.contains("\n    see: TARN-0001\n"), "{listing}");
    assert_eq!(
        rig.refused(&format!("pool import -d {dir} tank")),
        format!(
            "cannot import 'tank': one or more devices are missing beyond the pool's \
             redundancy: {}, {}, {}",
            devices[1], devices[2], devices[3]
        )
    );
    assert_eq!(rig.ok("pool list"), "no pools available\n");
}

// DESCRIPTION: one dataset whose object-set root is lost beyond its copies costs that
// dataset, not the pool: the pool imports and mounts the others (the notice of the one
// mount that failed names why), `status -v` names it,
// mounting or snapshotting it is refused in one line, and `destroy` takes it, `leaked`
// saying about how much space stayed behind; the pool imports again.
// STRATEGY: the root's copies are located by an engine in this process
// (`check::objset_root_places`) on the exported pool, then garbage is written there, as a
// failing controller would.
#[test]
fn a_dataset_with_a_lost_root_is_unavailable_and_the_pool_imports() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 2);
    let dir = rig.dir_of("d");
    rig.ok(&format!("pool create tank mirror {}", join(&devices)));
    let mnt = rig.root().join("altroot/tank");
    for name in ["a", "b"] {
        rig.ok(&format!("create tank/{name}"));
        std::fs::write(mnt.join(name).join("f"), name.repeat(70_000)).unwrap();
    }
    rig.ok("pool export tank");
    let engine = tarn_engine::Engine::new(
        std::sync::Arc::new(tarn_engine::FileProvider { direct: false }),
        tarn_engine::HostIdentity {
            hostid: 0x7e57,
            hostname: "test".into(),
        },
        std::sync::Arc::new(tarn_base::SystemClock::new()),
        1,
    );
    let options = tarn_engine::ImportOptions::default();
    engine
        .import_pool(std::slice::from_ref(&dir), "tank", &options, "import")
        .unwrap();
    let places = tarn_engine::check::objset_root_places(&engine, "tank/b").unwrap();
    engine.export_pool("tank", false).unwrap();
    assert_eq!(places.len(), 4, "two copies on both sides: {places:?}");
    for (leaf, range) in places {
        let mut file = OpenOptions::new().write(true).open(leaf).unwrap();
        file.seek(SeekFrom::Start(range.start)).unwrap();
        file.write_all(&vec![0x5a; (range.end - range.start) as usize])
            .unwrap();
        file.sync_all().unwrap();
    }

    // Imported, with the notice of a mount that failed (exit 1, as for any such mount).
    let import = rig.run(&format!("pool import -d {dir} tank"));
    assert_eq!(import.code, Some(1), "{import:?}");
    let lost = "is unavailable: its object set cannot be read";
    assert_eq!(import.stderr.lines().count(), 1, "{import:?}");
    assert!(
        import.stderr.starts_with("cannot mount 'tank/b'") && import.stderr.contains(lost),
        "{import:?}"
    );
    assert_eq!(std::fs::read(mnt.join("a/f")).unwrap(), b"a".repeat(70_000));
    let status = rig.ok("pool status -v tank");
    assert!(
        status.contains("tank/b:<object set: dataset unavailable>"),
        "{status}"
    );
    for line in ["mount tank/b", "snapshot tank/b@x"] {
        let refused = rig.refused(line);
        assert!(refused.contains(lost), "{line}: {refused}");
    }
    let referenced = rig.ok("get -H -p -o value referenced tank/b");
    assert_eq!(rig.ok("pool get -H -p -o value leaked tank"), "0\n");
    rig.ok("destroy tank/b");
    assert_eq!(rig.ok("pool get -H -p -o value leaked tank"), referenced);
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {dir} tank"));
    assert_eq!(std::fs::read(mnt.join("a/f")).unwrap(), b"a".repeat(70_000));
    assert_eq!(rig.ok("list -H -o name"), "tank\ntank/a\n");
}

// DESCRIPTION: `-j` prints OpenZFS 2.3's JSON for list, status and get, carrying the same
// facts as the tables; `--json-int` gives integers; a refusal under `-j` is a JSON `error`
// on stdout with exit 1.
// STRATEGY: a scrub, then `status -j --json-int`: the figures OpenZFS 2.3 prints for the
// pool (txg, scan_stats) and its vdevs (guid, space), against the pool's own numbers.
#[test]
fn json_status_has_scan_stats_and_vdev_space() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 4);
    rig.ok(&format!("pool create tank raidz2 {}", join(&devices)));
    let parse = |line: &str| -> serde_json::Value {
        let out = rig.ok(line);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("`tarn {line}`: {e}: {out}"))
    };
    let before = parse("pool status -j tank");
    assert!(
        before["pools"]["tank"].get("scan_stats").is_none(),
        "{before}"
    );
    rig.ok("pool scrub -w tank");
    let status = parse("-j --json-int pool status tank");
    let tank = &status["pools"]["tank"];
    let stats = &tank["scan_stats"];
    assert_eq!(
        (&stats["function"], &stats["state"]),
        (&"SCRUB".into(), &"FINISHED".into())
    );
    let issued = stats["issued"].as_u64().expect("issued");
    assert!(issued > 0 && issued == stats["to_examine"], "{stats}");
    assert!(
        stats["end_time"].as_u64() >= stats["start_time"].as_u64(),
        "{stats}"
    );
    assert!(tank["txg"].as_u64().expect("txg") > 1, "{tank}");
    let top = &tank["vdevs"]["tank"]["vdevs"]["raidz2-0"];
    assert!(top["guid"].as_u64().expect("guid") > 0, "{top}");
    let size: u64 = rig
        .ok("pool list -H -p -o size tank")
        .trim()
        .parse()
        .unwrap();
    assert_eq!(top["total_space"].as_u64(), Some(size), "{top}");
    // Leaves: the device file's size, and the smallest file that could replace it.
    let leaf = &top["vdevs"][devices[0].as_str()];
    let file = std::fs::metadata(&devices[0]).unwrap().len();
    assert_eq!(leaf["phys_space"].as_u64(), Some(file), "{leaf}");
    let needed = leaf["rep_dev_size"].as_u64().expect("rep_dev_size");
    assert!(needed <= file && needed > file - (1 << 20), "{leaf}");
}

// STRATEGY: parse with serde_json and check fields against the pool just created.
#[test]
fn json_output_parses() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 4);
    rig.ok(&format!("pool create tank raidz2 {}", join(&devices)));

    let parse = |line: &str| -> serde_json::Value {
        let out = rig.ok(line);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("`tarn {line}`: {e}: {out}"))
    };
    let list = parse("-j --json-int pool list -p");
    assert_eq!(list["output_version"]["command"], "zpool list");
    let tank = &list["pools"]["tank"];
    assert_eq!(tank["state"], "ONLINE");
    let size = tank["properties"]["size"]["value"].as_u64().expect("size");
    let alloc = tank["properties"]["allocated"]["value"]
        .as_u64()
        .expect("alloc");
    assert!(size > alloc && alloc > 0, "{list}");
    assert_eq!(
        format!("{size}\n"),
        rig.ok("pool list -H -p -o size tank"),
        "same size as the table"
    );

    let status = parse("pool status -j tank");
    assert_eq!(status["pools"]["tank"]["state"], "ONLINE");
    let top = &status["pools"]["tank"]["vdevs"]["tank"]["vdevs"]["raidz2-0"];
    assert_eq!(top["vdev_type"], "raidz");
    let leaves: Vec<&str> = top["vdevs"]
        .as_object()
        .expect("leaves")
        .values()
        .map(|leaf| leaf["path"].as_str().expect("leaf path"))
        .collect();
    assert_eq!(
        leaves,
        devices.iter().map(String::as_str).collect::<Vec<_>>()
    );
    let get = parse("-j pool get failmode,health tank");
    let props = &get["pools"]["tank"]["properties"];
    assert_eq!(props["failmode"]["value"], "wait");
    assert_eq!(props["failmode"]["source"]["type"], "DEFAULT");
    assert_eq!(props["health"]["value"], "ONLINE");
    assert_eq!(props["health"]["source"]["type"], "NONE");

    let refused = rig.run("-j pool status nope");
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert_eq!(refused.stderr, "", "{refused:?}");
    let error: serde_json::Value = serde_json::from_str(&refused.stdout).expect("JSON error");
    assert_eq!(error["output_version"]["command"], "zpool status");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot open 'nope': "),
        "{error}"
    );
    let usage = rig.run("--json-int pool list");
    assert_eq!(usage.code, Some(2), "--json-int without -j: {usage:?}");
}

// DESCRIPTION: `pool import --list-txgs` lists the txgs an exported pool can be imported
// at, newest first, and `import -T <txg>` opens the pool as it was at that older txg.
// STRATEGY: remember the newest txg after a first export (comment=first), change the
// comment and export again, then import at the remembered txg and read the comment back.
#[test]
fn rewind_import_to_older_txg() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 4);
    let dir = rig.dir_of("d");
    rig.ok(&format!("pool create tank raidz2 {}", join(&devices)));
    rig.ok("pool set comment=first tank");
    rig.ok("pool export tank");
    let first = listed_txgs(&rig.ok(&format!("pool import --list-txgs -d {dir} tank")));
    assert!(first.len() >= 2, "{first:?}");
    assert!(
        first.windows(2).all(|w| w[0] > w[1]),
        "newest first: {first:?}"
    );
    let remembered = first[0];

    rig.ok(&format!("pool import -d {dir} tank"));
    rig.ok("pool set comment=second tank");
    rig.ok("pool export tank");
    let second = listed_txgs(&rig.ok(&format!("pool import --list-txgs -d {dir} tank")));
    assert!(second.len() >= 3, "several txgs: {second:?}");
    assert!(
        second.windows(2).all(|w| w[0] > w[1]),
        "newest first: {second:?}"
    );
    assert!(second[0] > remembered, "{second:?}");
    assert!(second.contains(&remembered), "{second:?}");

    // -n alone has nothing to preview; with -T it says what the import would discard and
    // writes nothing.
    let image = rig.image();
    assert_eq!(
        rig.refused(&format!("pool import -n -d {dir} tank")),
        "cannot import 'tank': -n is used with -F, -X or -T"
    );
    let discarded = format!("txgs {} to {} (the last ", remembered + 1, second[0]);
    let preview = rig.ok(&format!("pool import -n -d {dir} -T {remembered} tank"));
    assert!(
        preview.starts_with("would return pool 'tank' to its state as of ")
            && preview.contains(&format!("(txg {remembered}), discarding {discarded}"))
            && preview.ends_with("nothing was imported\n"),
        "{preview}"
    );
    assert_same_image(&image, &rig.image(), "import -n");
    assert_eq!(rig.ok("pool list"), "no pools available\n");

    let imported = rig.ok(&format!("pool import -d {dir} -T {remembered} tank"));
    assert!(
        imported.starts_with("pool 'tank' returned to its state as of ")
            && imported.contains(&format!("(txg {remembered}); discarded {discarded}")),
        "{imported}"
    );
    assert_eq!(rig.ok("pool get -H -o value comment tank"), "first\n");
    assert_eq!(status_state(&rig.ok("pool status tank")), "ONLINE");
    let history = history_commands(&rig.ok("pool history tank"), "tank");
    assert_eq!(
        history.last().map(String::as_str),
        Some(format!("tarn pool import -d {dir} -T {remembered} tank").as_str()),
        "{history:?}"
    );
    assert!(
        !history.iter().any(|line| line.contains("comment=second")),
        "the rewound txgs are gone: {history:?}"
    );
}

// DESCRIPTION: `pool create -n` prints the layout the pool would have and changes nothing:
// no pool is listed or importable and the files are untouched.
// STRATEGY: exact layout text; an image of the files before and after.
#[test]
fn dry_run_create_changes_nothing() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 5);
    let (data, spares) = devices.split_at(4);
    let before = rig.image();
    let out = rig.ok(&format!(
        "pool create -n tank raidz2 {} spare {}",
        join(data),
        join(spares)
    ));
    let mut expected =
        String::from("would create 'tank' with the following layout:\n\n\ttank\n\t  raidz2\n");
    for device in data {
        expected.push_str(&format!("\t    {device}\n"));
    }
    expected.push_str(&format!("\tspares\n\t  {}\n", spares[0]));
    assert_eq!(out, expected);
    assert_same_image(&before, &rig.image(), "create -n");
    assert_eq!(rig.ok("pool list"), "no pools available\n");
    let run = rig.run(&format!("pool import -d {}", rig.dir_of("d")));
    assert_eq!(run.code, Some(0));
    assert_eq!(run.stderr, "no pools available to import\n");
}

// DESCRIPTION: a destroyed pool is gone: it is neither imported nor importable, and its
// devices can be used for a new pool without -f.
// STRATEGY: destroy, scan the directory, create a new pool on the same files.
#[test]
fn destroy_frees_the_devices() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 4);
    rig.ok(&format!("pool create tank raidz2 {}", join(&devices)));
    assert_eq!(rig.ok("pool destroy tank"), "");
    assert_eq!(rig.ok("pool list"), "no pools available\n");
    assert_eq!(
        rig.refused("pool status tank"),
        "cannot open 'tank': no such pool"
    );
    let run = rig.run(&format!("pool import -d {}", rig.dir_of("d")));
    assert_eq!(run.code, Some(0));
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr, "no pools available to import\n");

    rig.ok(&format!("pool create again raidz2 {}", join(&devices)));
    assert_eq!(
        rig.ok("pool status again"),
        healthy_status("again", "raidz2-0", &devices, &[])
    );
}

// DESCRIPTION: a hot spare stays a usable spare across export and import, as in ZFS: after
// `pool import -d DIR` the spare whose file is present and untouched is AVAIL again.
// STRATEGY: create with a spare (AVAIL), export, import from the same directory, and
// compare the whole status with the one before the export.
#[test]
fn spare_is_available_after_export_and_import() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 5);
    let (data, spares) = devices.split_at(4);
    rig.ok(&format!(
        "pool create tank raidz2 {} spare {}",
        join(data),
        join(spares)
    ));
    let status = rig.ok("pool status tank");
    assert_eq!(status, healthy_status("tank", "raidz2-0", data, spares));
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert_eq!(rig.ok("pool status tank"), status);
}

// DESCRIPTION: `pool import` without a name lists an exported pool's hot spares in a
// `spares` section, as `zpool import` does.
// STRATEGY: create with a spare, export, and look for the section in the listing.
#[test]
fn import_listing_shows_spares() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 5);
    let (data, spares) = devices.split_at(4);
    rig.ok(&format!(
        "pool create tank raidz2 {} spare {}",
        join(data),
        join(spares)
    ));
    rig.ok("pool export tank");
    let listing = rig.ok(&format!("pool import -d {}", rig.dir_of("d")));
    assert!(
        listing.ends_with(&format!("\tspares\n\t  {}\n", spares[0])),
        "{listing}"
    );
}

// DESCRIPTION: the harness itself: a device image notices one changed byte in a sparse
// file and a new file, so the "refused command changes nothing" checks can fail.
// STRATEGY: change one byte deep in the hole of a 128 MiB file, then add a file.
#[test]
fn image_detects_a_changed_byte_and_a_new_file() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 1);
    let before = rig.image();
    assert_eq!(before, rig.image());
    let mut file = OpenOptions::new()
        .write(true)
        .open(&devices[0])
        .expect("open");
    file.seek(SeekFrom::Start(100 << 20 | 3)).expect("seek");
    file.write_all(&[1]).expect("write");
    let changed = rig.image();
    assert_ne!(before, changed);
    file.seek(SeekFrom::Start(100 << 20 | 3)).expect("seek");
    file.write_all(&[0]).expect("write");
    assert_eq!(before, rig.image());
    sparse(&rig.root().join("d").join("extra"), 0);
    assert_ne!(before, rig.image());
}

/// Creates raidz2 `tank` over four files, exports it, and imports it with
/// `-o readonly=on`; returns the devices, their directory and the image taken after the
/// export (a read-only pool must never change it).
fn readonly_pool(rig: &Rig) -> (Vec<String>, String, Image) {
    let devices = rig.devices("d", "disk", 4);
    let dir = rig.dir_of("d");
    rig.ok(&format!("pool create tank raidz2 {}", join(&devices)));
    rig.ok("pool export tank");
    let exported = rig.image();
    rig.ok(&format!("pool import -d {dir} -o readonly=on tank"));
    assert_eq!(rig.ok("pool get -H -o value readonly tank"), "on\n");
    assert_same_image(&exported, &rig.image(), "read-only import");
    (devices, dir, exported)
}

// DESCRIPTION: a pool imported with `-o readonly=on` refuses changes and can be exported
// (as in ZFS) without writing anything: afterwards it is importable again.
// STRATEGY: an image taken before the read-only import must still hold after the refused
// set and after the export.
#[test]
fn readonly_pool_can_be_exported() {
    let rig = Rig::new();
    let (_, dir, exported) = readonly_pool(&rig);
    assert_eq!(
        rig.refused_against(&exported, "pool set comment=x tank"),
        "cannot set property for 'tank': pool is read-only"
    );
    let export = rig.run("pool export tank");
    assert_eq!(
        (export.code, export.stderr.as_str()),
        (Some(0), ""),
        "export of a read-only pool: {export:?}"
    );
    assert_eq!(rig.ok("pool list"), "no pools available\n");
    assert_same_image(&exported, &rig.image(), "export of a read-only pool");
    let listing = rig.ok(&format!("pool import -d {dir}"));
    assert!(listing.starts_with("   pool: tank\n"), "{listing}");
}

// DESCRIPTION: a read-only import stays read-only across a daemon restart: the restarted
// daemon either leaves the pool out (ZFS keeps read-only pools out of its cache file) or
// re-imports it read-only; in both cases no device byte changes.
// STRATEGY: image before the read-only import; stop the daemon; the next command
// autostarts a new one, which re-imports from its cache file before serving.
#[test]
fn readonly_pool_stays_unwritten_across_daemon_restart() {
    let rig = Rig::new();
    let (_, _, exported) = readonly_pool(&rig);
    rig.ok("daemon --stop");
    let names = rig.ok("pool list -H -o name");
    assert!(names.is_empty() || names == "tank\n", "{names:?}");
    if names == "tank\n" {
        assert_eq!(
            rig.ok("pool get -H -o value readonly tank"),
            "on\n",
            "re-imported from the cache file read-write"
        );
    }
    assert_same_image(
        &exported,
        &rig.image(),
        "daemon restart with a read-only pool",
    );
}

// DESCRIPTION: `pool destroy` of a read-only pool either destroys it or is refused; a
// refusal changes nothing, so the pool is still imported afterwards.
// STRATEGY: run the destroy and check the pool table against the exit status; the files
// must be unchanged when it is refused.
#[test]
fn readonly_pool_refused_destroy_keeps_the_pool() {
    let rig = Rig::new();
    let (_, _, exported) = readonly_pool(&rig);
    let destroy = rig.run("pool destroy tank");
    match destroy.code {
        Some(0) => assert_eq!(rig.ok("pool list"), "no pools available\n"),
        Some(1) => {
            assert_eq!(destroy.stderr.lines().count(), 1, "{destroy:?}");
            assert_same_image(&exported, &rig.image(), "refused destroy");
            assert_eq!(
                rig.ok("pool list -H -o name"),
                "tank\n",
                "a refused destroy ({}) must keep the pool imported",
                destroy.stderr.trim_end()
            );
        }
        _ => panic!("{destroy:?}"),
    }
}

/// Polls `pool status NAME` until its scan line starts with `prefix` (the daemon's
/// background thread runs the resilver); returns the status text.
fn wait_for_scan(rig: &Rig, name: &str, prefix: &str) -> String {
    for _ in 0..600 {
        let status = rig.ok(&format!("pool status {name}"));
        let scan = status
            .lines()
            .find_map(|line| line.strip_prefix("  scan: "))
            .unwrap_or("");
        if scan.starts_with(prefix) {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the scan of {name} never reached '{prefix}'");
}

// DESCRIPTION: `pool replace` puts a new file in an old one's place: the daemon resilvers it
// by itself, the scan line reports `resilvered ... with 0 errors`, the old file leaves the
// tree with its labels wiped, and the pool survives an export and import from the new set.
// STRATEGY: raidz1 of three files, replace one with a fourth, poll status, then check the
// rows, the old file's labels (zero) and an import.
#[test]
fn replace_resilvers_and_collapses() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 4);
    rig.ok(&format!("pool create tank raidz1 {}", join(&devices[..3])));
    rig.ok(&format!("pool replace tank {} {}", devices[1], devices[3]));
    let status = wait_for_scan(&rig, "tank", "resilvered ");
    assert!(
        status.contains(" with 0 errors on "),
        "finished line: {status}"
    );
    assert_eq!(row_state(&status, &devices[3]).unwrap()[0], "ONLINE");
    assert!(row_state(&status, &devices[1]).is_none(), "{status}");
    assert!(row_state(&status, "replacing-1").is_none(), "{status}");
    assert_eq!(status_state(&status), "ONLINE");
    let events = rig.ok("pool events tank");
    let classes: Vec<&str> = events
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(1))
        .collect();
    assert_eq!(
        classes,
        vec![
            "sysevent.fs.zfs.resilver_start",
            "sysevent.fs.zfs.resilver_finish"
        ],
        "{events}"
    );
    assert!(
        rig.ok("pool events -v tank")
            .contains("        pool = \"tank\"\n")
    );
    rig.ok("pool events -c tank");
    assert_eq!(rig.ok("pool events tank"), "TIME                 CLASS\n");
    let mut label = vec![0u8; LABEL_PAIR as usize];
    File::open(&devices[1])
        .unwrap()
        .read_exact(&mut label)
        .unwrap();
    assert!(
        label.iter().all(|&b| b == 0),
        "the old device's labels are wiped"
    );
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    let status = rig.ok("pool status tank");
    assert_eq!(row_state(&status, &devices[3]).unwrap()[0], "ONLINE");
    let history = rig.ok("pool history tank");
    assert!(history.contains(&format!("pool replace tank {} {}", devices[1], devices[3])));
}

// DESCRIPTION: `attach` makes a single disk a mirror (resilvered), `detach` takes the side
// away again, and the last copy cannot be detached.
// STRATEGY: single-file pool, attach a second file, wait, detach it, try to detach the last.
#[test]
fn attach_then_detach_and_last_copy_refused() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 2);
    rig.ok(&format!("pool create tank {}", devices[0]));
    rig.ok(&format!("pool attach tank {} {}", devices[0], devices[1]));
    let status = wait_for_scan(&rig, "tank", "resilvered ");
    assert_eq!(row_state(&status, "mirror-0").unwrap()[0], "ONLINE");
    rig.ok(&format!("pool detach tank {}", devices[1]));
    let status = rig.ok("pool status tank");
    assert!(row_state(&status, "mirror-0").is_none(), "{status}");
    assert_eq!(
        rig.refused(&format!("pool detach tank {}", devices[0])),
        format!(
            "cannot detach '{}': can only detach from mirrors, replacing and spare vdevs",
            devices[0]
        )
    );
}

// DESCRIPTION: every bad replace or attach is one line and changes no byte of any file:
// too small, the same device, a device of this pool, a device of another pool, a file that
// does not exist, a device not in the pool, attach to raidz.
// STRATEGY: compare full images before and after each refusal.
#[test]
fn refused_replace_changes_nothing() {
    let rig = Rig::new();
    let live = rig.devices("d", "disk", 3);
    let other = rig.devices("o", "other", 1);
    let fresh = rig.devices("f", "fresh", 1);
    let small = rig.root().join("f").join("small");
    sparse(&small, 16 << 20);
    let small = small.to_str().unwrap().to_string();
    let missing = rig.root().join("f").join("nosuch");
    let missing = missing.to_str().unwrap().to_string();
    rig.ok(&format!("pool create other {}", other[0]));
    rig.ok("pool export other");
    rig.ok(&format!("pool create tank raidz1 {}", join(&live)));
    let baseline = rig.image();
    let refuse = |line: &str| rig.refused_against(&baseline, line);
    let d1 = &live[1];
    let too_small = refuse(&format!("pool replace tank {d1} {small}"));
    assert!(too_small.starts_with(&format!(
        "cannot replace '{d1}': device '{small}' is too small"
    )));
    assert_eq!(
        refuse(&format!("pool replace tank {d1} {d1}")),
        format!("cannot replace '{d1}': cannot replace a device with itself")
    );
    assert_eq!(
        refuse(&format!("pool replace tank {d1} {}", live[2])),
        format!(
            "cannot replace '{d1}': '{}' is already in use by this pool",
            live[2]
        )
    );
    let in_use = refuse(&format!("pool replace tank {d1} {}", other[0]));
    assert!(
        in_use.contains("is part of exported pool 'other'"),
        "{in_use}"
    );
    let nonexistent = refuse(&format!("pool replace tank {d1} {missing}"));
    assert!(
        nonexistent.contains(&format!("cannot open '{missing}'")),
        "{nonexistent}"
    );
    assert_eq!(
        refuse(&format!("pool replace tank {} {d1}", fresh[0])),
        format!("cannot replace '{}': no such device in pool", fresh[0])
    );
    assert_eq!(
        refuse(&format!("pool attach tank {d1} {}", fresh[0])),
        format!(
            "cannot attach '{}': can only attach to mirrors and top-level disks",
            fresh[0]
        )
    );
}

/// `pool status tank` is ONLINE and lists `mirror-1` of `logs` in a `logs` section only.
fn assert_logs_section(rig: &Rig, logs: &[String], when: &str) {
    let status = rig.ok("pool status tank");
    assert!(status.contains(" state: ONLINE\n"), "{when}: {status}");
    let section = status.split("\tlogs\t\n").nth(1).expect("a logs section");
    let rows: Vec<Vec<&str>> = section
        .lines()
        .take(3)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][..2], ["mirror-1", "ONLINE"], "{when}: {status}");
    assert_eq!(
        rows[1][..2],
        [logs[0].as_str(), "ONLINE"],
        "{when}: {status}"
    );
    assert_eq!(
        rows[2][..2],
        [logs[1].as_str(), "ONLINE"],
        "{when}: {status}"
    );
    let data_part = status.split("\tlogs\t\n").next().unwrap_or("");
    assert!(
        !data_part.contains(&logs[0]),
        "{when}: logs listed with data: {status}"
    );
}

// DESCRIPTION: `log` devices are real: `pool create tank raidz1 ... log mirror L0 L1` makes a
// mirror log vdev that `pool status` shows in a `logs` section (as `zpool status` does), `-n`
// prints it under `logs`, the pool's SIZE leaves it out, and the class survives export and
// import (it is in the labels). A raidz log is refused, changing nothing.
// STRATEGY: the status lines from `logs` on; SIZE compared with the same data vdevs alone.
#[test]
fn log_vdevs_are_created_and_shown_in_a_logs_section() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 5);
    let (data, logs) = devices.split_at(3);
    let before = rig.image();
    let refused = rig.run(&format!(
        "pool create tank raidz1 {} log raidz {}",
        join(data),
        join(logs)
    ));
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert!(refused.stderr.starts_with("cannot "), "{refused:?}");
    assert_same_image(&before, &rig.image(), "refused raidz log");

    let dry = rig.ok(&format!(
        "pool create -n tank raidz1 {} log mirror {}",
        join(data),
        join(logs)
    ));
    let expected_dry = format!("\tlogs\n\t  mirror\n\t    {}\n\t    {}\n", logs[0], logs[1]);
    assert!(dry.ends_with(&expected_dry), "{dry}");

    rig.ok(&format!(
        "pool create tank raidz1 {} log mirror {}",
        join(data),
        join(logs)
    ));
    let check_status = |when: &str| assert_logs_section(&rig, logs, when);
    check_status("after create");
    let size = |rig: &Rig| -> u64 {
        let list = rig.ok("pool list -H -p -o size tank");
        list.trim().parse().unwrap()
    };
    let with_logs = size(&rig);

    rig.ok("pool export tank");
    let listing = rig.run(&format!("pool import -d {}", rig.dir_of("d")));
    let logs_part = listing.stdout.split("\tlogs\t\n").nth(1).unwrap_or("");
    assert!(
        logs_part.trim_start().starts_with("mirror-1"),
        "import listing: {listing:?}"
    );
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    check_status("after import");
    rig.ok("pool destroy tank");

    rig.ok(&format!("pool create tank raidz1 {}", join(data)));
    assert_eq!(size(&rig), with_logs, "log devices are not pool capacity");
}

/// `iostat -v`: a `cache` heading of dashes over the device's own row (capacity: what its
/// ring holds), outside the pool's sums.
fn assert_cache_iostat(rig: &Rig, cache: &str) {
    let iostat = rig.ok("pool iostat -v -H -p tank");
    let rows = tsv_rows(&iostat);
    let at = cache_heading(&rows);
    assert!(rows[at][1..].iter().all(|c| *c == "-"), "{iostat}");
    assert_eq!(rows[at + 1][0], cache, "{iostat}");
    let held: u64 = rows[at + 1][1].parse().unwrap();
    let free: u64 = rows[at + 1][2].parse().unwrap();
    assert!(held + free > 0, "{iostat}");
}

// DESCRIPTION: `cache` devices (L2ARC) are real: `pool create tank raidz1 ... cache C` puts C
// in a `cache` section of `status`, `-n` and the import listing, leaves it out of SIZE,
// `pool remove` and `pool add ... cache C` take it out and put it back, and a missing cache
// at import costs nothing: the pool imports ONLINE with the cache
// device UNAVAIL (it holds only copies of verified blocks).
// STRATEGY: the status lines after `cache`; the pool's state line after the cache file went.
#[test]
fn cache_devices_are_created_shown_and_optional_at_import() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 4);
    let (data, cache) = devices.split_at(3);
    let dry = rig.ok(&format!(
        "pool create -n tank raidz1 {} cache {}",
        join(data),
        cache[0]
    ));
    assert!(
        dry.ends_with(&format!("\tcache\n\t  {}\n", cache[0])),
        "{dry}"
    );
    rig.ok(&format!(
        "pool create tank raidz1 {} cache {}",
        join(data),
        cache[0]
    ));
    let status = rig.ok("pool status tank");
    let section = status.split("\tcache\n").nth(1).unwrap_or("");
    assert!(section.trim_start().starts_with(&cache[0]), "{status}");
    assert!(
        section.lines().next().unwrap_or("").contains("ONLINE"),
        "{status}"
    );
    let size_with: u64 = rig
        .ok("pool list -H -p -o size tank")
        .trim()
        .parse()
        .unwrap();

    assert_cache_iostat(&rig, &cache[0]);
    // Removed (its labels cleared) and added back, without -f.
    rig.ok(&format!("pool remove tank {}", cache[0]));
    assert!(!rig.ok("pool status tank").contains("\tcache\n"));
    rig.ok(&format!("pool add tank cache {}", cache[0]));
    assert!(
        rig.ok("pool status tank")
            .contains(&format!("\tcache\n\t  {}", cache[0]))
    );
    rig.ok("pool export tank");
    let listing = rig.ok(&format!("pool import -d {}", rig.dir_of("d")));
    assert!(
        listing.contains(&format!("\tcache\n\t  {}", cache[0])),
        "{listing}"
    );
    std::fs::remove_file(&cache[0]).unwrap();
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    let status = rig.ok("pool status tank");
    assert!(status.contains(" state: ONLINE"), "{status}");
    let section = status.split("\tcache\n").nth(1).unwrap_or("");
    assert!(
        section.lines().next().unwrap_or("").contains("UNAVAIL"),
        "{status}"
    );
    rig.ok("pool destroy tank");
    rig.ok(&format!("pool create tank raidz1 {}", join(data)));
    let size_without: u64 = rig
        .ok("pool list -H -p -o size tank")
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        size_with, size_without,
        "cache devices are not pool capacity"
    );
}

/// `(state, note)` of the status or import-preview line of `device`.
fn device_line(status: &str, device: &str) -> (String, String) {
    let line = status
        .lines()
        .find(|l| l.split_whitespace().next() == Some(device))
        .unwrap_or_else(|| panic!("{device} not in:\n{status}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let note = if words.len() > 5 {
        words[5..].join(" ")
    } else {
        words[2..].join(" ")
    };
    (words[1].to_string(), note)
}

fn shrink_then_regrow(path: &str, import: impl FnOnce()) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let size = file.metadata().unwrap().len();
    file.set_len(size / 2).unwrap();
    import();
    file.set_len(size).unwrap();
}

// DESCRIPTION: a device truncated (half its data and its back labels gone) and grown again
// is shown as too small by the import preview, comes back with `pool online` (which
// resilvers what it missed) or with an in-place `pool replace` (rebuilt whole), with no -f;
// a device of another, exported pool needs `replace -f`, and without it nothing changes.
// STRATEGY: raidz1 of three files; the preview's and status' lines of the device; scrubs
// afterwards find nothing to repair on the replaced device's pool.
#[test]
fn a_truncated_device_comes_back_with_online_or_replace_in_place() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 3);
    let dir = rig.dir_of("d");
    rig.ok(&format!(
        "pool create -m none tank raidz1 {}",
        join(&devices)
    ));
    rig.ok("pool export tank");
    shrink_then_regrow(&devices[1], || {
        let preview = rig.ok(&format!("pool import -d {dir}"));
        assert_eq!(
            device_line(&preview, &devices[1]),
            ("UNAVAIL".into(), "device too small".into()),
            "{preview}"
        );
        assert!(preview.contains("state: DEGRADED"), "{preview}");
        rig.ok(&format!("pool import -d {dir} tank"));
        assert_eq!(status_state(&rig.ok("pool status tank")), "DEGRADED");
    });
    rig.ok(&format!("pool online tank {}", devices[1]));
    rig.ok("pool wait -t resilver tank");
    assert_eq!(status_state(&rig.ok("pool status tank")), "ONLINE");

    rig.ok("pool export tank");
    shrink_then_regrow(&devices[2], || {
        rig.ok(&format!("pool import -d {dir} tank"));
    });
    rig.ok(&format!("pool replace -w tank {}", devices[2]));
    let status = rig.ok("pool status tank");
    assert_eq!(status_state(&status), "ONLINE", "{status}");
    assert_eq!(device_line(&status, &devices[2]).0, "ONLINE", "{status}");
    rig.ok("pool scrub -w tank");
    assert!(rig.ok("pool status tank").contains("with 0 errors"));

    let other = rig.devices("o", "disk", 1);
    rig.ok(&format!("pool create -m none other {}", other[0]));
    rig.ok("pool export other");
    let before = rig.image();
    let line = rig.refused_against(
        &before,
        &format!("pool replace tank {} {}", devices[0], other[0]),
    );
    assert!(
        line.ends_with("is part of exported pool 'other' (use -f to override)"),
        "{line}"
    );
    rig.ok(&format!(
        "pool replace -f -w tank {} {}",
        devices[0], other[0]
    ));
    assert_eq!(status_state(&rig.ok("pool status tank")), "ONLINE");
}

/// Runs the tarn binary through a link named `name` (`zpool`, `zfs`) in the rig's root.
fn run_as(rig: &Rig, name: &str, line: &str) -> std::process::Output {
    let link = rig.root().join(name);
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tarn"), &link).unwrap();
    }
    std::process::Command::new(&link)
        .arg("--rundir")
        .arg(&rig.rundir)
        .args(line.split(' '))
        .current_dir(rig.root())
        .env_remove("TARN_RUNDIR")
        .env("TARN_ALTROOT", rig.root().join("altroot"))
        .output()
        .unwrap()
}

// DESCRIPTION: the binary called as `zpool` takes `tarn pool`'s arguments and as `zfs` the
// dataset verbs, printing what `tarn` prints for the same request; a verb tarn lacks is one
// line on stderr and exit status 2, with nothing changed.
// STRATEGY: links named zpool and zfs to the test binary, their output compared with
// `tarn`'s; a refused verb against an image of the devices.
#[test]
fn zpool_and_zfs_entry_points() {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 3);
    let created = run_as(
        &rig,
        "zpool",
        &format!("create -m none tank raidz1 {}", join(&devices)),
    );
    assert!(created.status.success(), "{created:?}");
    let zfs = run_as(&rig, "zfs", "create tank/a");
    assert!(zfs.status.success(), "{zfs:?}");
    let stdout = |out: std::process::Output| String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout(run_as(&rig, "zpool", "status tank")),
        rig.ok("pool status tank")
    );
    assert_eq!(
        stdout(run_as(&rig, "zpool", "-j list tank")),
        rig.ok("-j pool list tank")
    );
    assert_eq!(
        stdout(run_as(&rig, "zfs", "list -H -p -o name,used")),
        rig.ok("list -H -p -o name,used")
    );
    assert_eq!(
        stdout(run_as(&rig, "zfs", "get -Hp -o value used tank/a")),
        { rig.ok("get -Hp -o value used tank/a") }
    );
    let before = rig.image();
    for (name, line, verb) in [
        ("zfs", "allow tank/a", "allow"),
        ("zpool", "checkpoint tank", "checkpoint"),
    ] {
        let out = run_as(&rig, name, line);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert_eq!(
            String::from_utf8(out.stderr).unwrap(),
            format!(
                "{name}: unsupported command '{verb}': tarn has no such verb (see 'tarn --help')\n"
            )
        );
        assert!(out.stdout.is_empty());
    }
    assert_same_image(&before, &rig.image(), "unsupported verbs");
}

/// An executable shell script `name` in `dir` running `body`.
fn hook(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

// DESCRIPTION: event hooks run as ZED runs zedlets: for each event every executable named
// `all-*` or `<subclass>-*` in the hook directory, with the event's fields in ZEVENT_*
// variables; files that are not executable, and hooks of other subclasses, do not run.
// STRATEGY: a daemon started with TARN_ZEDLETS; hooks that write their environment to files;
// a scrub (scrub_start, scrub_finish); the files polled for up to 20 s.
#[test]
fn event_hooks_run_like_zedlets() {
    use std::os::unix::fs::PermissionsExt;
    let rig = Rig::new();
    let hooks = rig.root().join("zed.d");
    let out = rig.root().join("out");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let out_dir = out.display();
    hook(
        &hooks,
        "all-log.sh",
        &format!("env | grep ^ZEVENT_ | sort > {out_dir}/all-$ZEVENT_EID"),
    );
    hook(
        &hooks,
        "scrub_finish-mark",
        &format!("echo \"$ZEVENT_POOL\" > {out_dir}/finished"),
    );
    hook(
        &hooks,
        "resilver_finish-other",
        &format!("touch {out_dir}/other"),
    );
    hook(
        &hooks,
        "scrub_start-not-executable",
        &format!("touch {out_dir}/wrong"),
    );
    let plain = hooks.join("scrub_start-not-executable");
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let devices = rig.devices("d", "disk", 3);
    let create = format!("pool create -m none tank raidz1 {}", join(&devices));
    let hook_dir = hooks.display().to_string();
    run_tarn(
        &rig.rundir,
        rig.root(),
        &create,
        &[("TARN_ZEDLETS", hook_dir.as_str())],
    )
    .ok(&create);
    rig.ok("pool scrub -w tank");
    let finished = out.join("finished");
    // The hooks run on the daemon's hook thread, within a second or so of the event.
    for _ in 0..200 {
        if !finished.exists() {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    assert_eq!(std::fs::read_to_string(&finished).unwrap(), "tank\n");
    let logged = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path());
    let finish = logged
        .filter(|path| path.to_string_lossy().contains("/all-"))
        .map(|path| std::fs::read_to_string(path).unwrap())
        .find(|env| env.contains("ZEVENT_SUBCLASS=scrub_finish\n"))
        .expect("the all- hook ran for scrub_finish");
    assert!(
        finish.contains("ZEVENT_CLASS=sysevent.fs.zfs.scrub_finish\n"),
        "{finish}"
    );
    assert!(finish.contains("ZEVENT_POOL=tank\n") && finish.contains("ZEVENT_SCAN_ERRORS=0\n"));
    assert!(
        !out.join("wrong").exists(),
        "a file that is not executable ran"
    );
    assert!(
        !out.join("other").exists(),
        "a hook of another subclass ran"
    );
}
