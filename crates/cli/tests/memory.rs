//! The daemon's memory through the real binary and a FUSE mount (issue 15): with a small ARC
//! limit, a workload several times the ARC (writes, two read passes, overwrites, xattrs,
//! unlinks, a scrub) keeps RSS under the bound `tarn memory` states at every sample; the
//! categories it reports explain RSS to within a few percent (`other` is what they leave
//! unexplained); the ARC stays within its limit, shrinks at once when `memory set` lowers
//! it, refuses a floor above the maximum without changing anything, and the daemon gives its
//! memory back after `pool export`. Writes draw on the buffer stock (`buffer_stock`). This
//! is the short version of `bench/memory-soak` that CI runs.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;

const ARC_MAX: u64 = 32 << 20;

/// `tarn memory -H -p` as name -> value.
fn memory(rig: &Rig) -> BTreeMap<String, i64> {
    let text = run_tarn(&rig.rundir, rig.root(), "memory -H -p", &[]).ok("memory -H -p");
    text.lines()
        .map(|line| {
            let (name, value) = line.split_once('\t').unwrap();
            (name.to_string(), value.parse().unwrap())
        })
        .collect()
}

/// Checks one sample against the bound and the accounting; returns it.
fn sample(rig: &Rig, when: &str) -> BTreeMap<String, i64> {
    let m = memory(rig);
    let (rss, bound, other) = (m["rss"], m["bound"], m["other"]);
    eprintln!(
        "{when}: rss {} MiB, arc {} MiB, other {} MiB",
        rss >> 20,
        m["arc_size"] >> 20,
        other >> 20
    );
    assert!(
        rss <= bound,
        "{when}: RSS {rss} over the bound {bound}: {m:?}"
    );
    assert!(
        m["arc_size"] <= m["arc_target"] - m["arc_lent"],
        "{when}: ARC over its target less what it lent to dirty data: {m:?}"
    );
    // Within a few percent of RSS, and 12 MiB: `fuse_buffers` counts the pages requests of
    // MAX_WRITE touch in each session thread's buffer, which an idle mount has not touched.
    let slack = rss / 20 + (12 << 20);
    assert!(
        other.abs() <= slack,
        "{when}: categories miss RSS by {other}: {m:?}"
    );
    m
}

fn pattern(file: u64, len: usize) -> Vec<u8> {
    let mut x = file.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn read_all(dir: &Path, files: u64) {
    for i in 0..files {
        let bytes = std::fs::read(dir.join(format!("f{i}"))).unwrap();
        assert_eq!(bytes, pattern(i, bytes.len()), "file f{i}");
    }
}

/// Reads every file again with O_DIRECT: the kernel keeps the pages of the first pass, this
/// one reads around them, through the ARC.
fn read_direct(dir: &Path, files: u64) {
    for i in 0..files {
        let path = dir.join(format!("f{i}"));
        let status = std::process::Command::new("dd")
            .arg(format!("if={}", path.display()))
            .args(["of=/dev/null", "bs=1M", "iflag=direct", "status=none"])
            .status()
            .unwrap();
        assert!(status.success(), "dd iflag=direct of f{i}");
    }
}

// DESCRIPTION: RSS stays under the stated bound and the categories add up to RSS, through a
// workload of several times the ARC; the ARC follows `memory set`; export gives memory back.
// STRATEGY: a daemon with TARN_ARC_MAX=32M, raidz1 of 4 files, one mount; `tarn memory -H
// -p` sampled after each phase.
#[test]
fn rss_stays_within_the_bound_and_the_categories_explain_it() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP: /dev/fuse is absent");
        return;
    }
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", 4);
    let env = [("TARN_ARC_MAX", "32M")];
    let line = format!("pool create -m /tank tank raidz1 {}", join(&devices));
    run_tarn(&rig.rundir, rig.root(), &line, &env).ok(&line);
    let tank = rig.root().join("altroot/tank");
    let start = sample(&rig, "start");
    assert_eq!(start["arc_max"] as u64, ARC_MAX);

    let files = 24u64;
    let size = 6 << 20;
    for i in 0..files {
        std::fs::write(tank.join(format!("f{i}")), pattern(i, size)).unwrap();
    }
    let written = sample(&rig, "written");
    // The records were copied into stocked buffers, and the stock is counted (and
    // bounded by its share of the overhead).
    let populates = tarn_base::stock::populate_spare(&mut Vec::with_capacity(1 << 20));
    assert!(
        (written["buffer_stock"] > 0 || !populates) && written["buffer_stock"] <= 16 << 20,
        "{written:?}"
    );
    read_all(&tank, files);
    let read = sample(&rig, "read once");
    read_direct(&tank, files);
    let again = sample(&rig, "read twice");
    assert!(
        again["arc_misses"] > read["arc_misses"],
        "the second pass cannot all hit"
    );
    assert!(again["arc_evictions"] > 0, "a tree of 4.5x the ARC evicts");
    for i in (0..files).step_by(2) {
        let path = tank.join(format!("f{i}"));
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, pattern(i + 100, size / 3)).unwrap();
        xattr_set(&path, &format!("user.k{i}"), &pattern(i, 512));
    }
    sample(&rig, "rewritten");
    rig.ok("pool scrub -w tank");
    let scrubbed = sample(&rig, "scrubbed");

    memory_set_and_export(&rig, &scrubbed);
}

/// A lower maximum evicts at once; a floor above it is refused and changes nothing; after
/// export the daemon holds a fraction of what it held before (`before`).
fn memory_set_and_export(rig: &Rig, before: &BTreeMap<String, i64>) {
    rig.ok("memory set arc_max=16M");
    let lowered = sample(rig, "arc_max=16M");
    assert_eq!(lowered["arc_max"], 16 << 20);
    assert!(lowered["arc_size"] <= 16 << 20, "{lowered:?}");
    let refused = rig.run("memory set arc_min=1G");
    assert_eq!(refused.code, Some(1));
    assert_eq!(
        refused.stderr,
        "cannot set 'memory': arc_min must not be above arc_max\n"
    );
    assert_eq!(
        memory(rig)["arc_max"],
        16 << 20,
        "a refused set changes nothing"
    );
    let usage = rig.run("memory set arc_max=lots");
    assert_eq!(usage.code, Some(2));
    assert_eq!(
        usage.stderr,
        "cannot run 'memory': bad arc_max value 'lots': expected a size (512M, 4G, bytes)\n"
    );

    // Memory comes back after export: the ARC's domain goes with the pool, and the
    // allocator returns the freed pages within its decay time.
    rig.ok("pool export tank");
    let mut exported = memory(rig);
    for _ in 0..50 {
        if exported["rss"] < before["rss"] / 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        exported = memory(rig);
    }
    assert_eq!(exported["arc_size"], 0, "{exported:?}");
    assert!(
        exported["rss"] < before["rss"] / 2 || exported["rss"] < 48 << 20,
        "RSS after export {} (before {})",
        exported["rss"],
        before["rss"]
    );
    let json = run_tarn(&rig.rundir, rig.root(), "-j memory", &[]).ok("-j memory");
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["memory"]["arc_max"], 16 << 20, "{json}");
}

/// setfattr without the attr package: `user.` xattrs through the mount.
fn xattr_set(path: &Path, name: &str, value: &[u8]) {
    let output = std::process::Command::new("setfattr")
        .args(["-n", name, "-v"])
        .arg(format!(
            "0x{}",
            value.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ))
        .arg(path)
        .output()
        .unwrap();
    assert!(output.status.success(), "setfattr: {output:?}");
}
