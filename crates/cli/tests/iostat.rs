//! System tests of `tarn pool iostat`, `tarn pool status -s` and the slow-device and fault
//! threshold properties, through the real binary and daemon on sparse files.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::*;

/// A raidz1 pool `tank` on three devices plus a spare, scrubbed once so every device has
/// served reads.
fn scrubbed_pool(rig: &Rig) -> Vec<String> {
    let (data, _) = rig.tank_with_spares("raidz1", 4, 1);
    rig.ok("pool scrub -w tank");
    data
}

fn cells(line: &str) -> Vec<&str> {
    line.split('\t').collect()
}

// DESCRIPTION: the layouts of `pool iostat`: the pool row under ZFS's two header lines and a
// dashed line; `-v` adds the raidz vdev and its devices (capacity `-` below top level) and a
// dashed line after the pool; `-H -p` gives tab-separated exact numbers without headers;
// `-l` adds two latency columns, `-q` four queue columns.
// STRATEGY: compare header lines exactly, count rows and cells, parse the exact numbers
// and check that alloc + free is the pool's size from `pool list`.
#[test]
fn iostat_layouts() {
    let rig = Rig::new();
    let data = scrubbed_pool(&rig);

    let plain = rig.ok("pool iostat");
    let lines: Vec<&str> = plain.lines().collect();
    assert_eq!(lines.len(), 4, "{plain}");
    assert_eq!(
        lines[0],
        "              capacity     operations     bandwidth "
    );
    assert_eq!(
        lines[1],
        "pool        alloc   free   read  write   read  write"
    );
    assert_eq!(
        lines[2],
        "----------  -----  -----  -----  -----  -----  -----"
    );
    assert!(lines[3].starts_with("tank  "), "{plain}");
    assert_eq!(lines[3].split_whitespace().count(), 7, "{plain}");

    let verbose = rig.ok("pool iostat -v tank");
    let names: Vec<&str> = verbose
        .lines()
        .skip(3)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let dashes = names[5];
    assert!(dashes.chars().all(|c| c == '-'), "{verbose}");
    assert_eq!(
        names[..5],
        ["tank", "raidz1-0", &data[0], &data[1], &data[2]]
    );
    assert_eq!(names.len(), 6, "{verbose}");
    let leaf_row: Vec<&str> = verbose.lines().nth(5).unwrap().split_whitespace().collect();
    assert_eq!(
        leaf_row[1..3],
        ["-", "-"],
        "devices have no capacity: {verbose}"
    );

    let exact = rig.ok("pool iostat -H -p -v tank");
    let rows: Vec<Vec<&str>> = exact.lines().map(cells).collect();
    assert_eq!(rows.len(), 5, "{exact}");
    assert!(rows.iter().all(|r| r.len() == 7), "{exact}");
    assert_eq!(rows[0][0], "tank");
    assert_eq!(rows[2][0], data[0]);
    let number = |cell: &str| -> u64 { cell.parse().expect("exact number") };
    let size = number(rig.ok("pool list -H -p -o size tank").trim());
    assert_eq!(number(rows[0][1]) + number(rows[0][2]), size);
    assert!(number(rows[0][1]) > 0, "the pool has metadata");
    assert_eq!(
        rows[0][1..3],
        rows[1][1..3],
        "one top-level vdev holds it all"
    );
    let reads: u64 = rows[2..].iter().map(|r| number(r[3])).sum();
    assert!(
        reads > 0 || number(rows[1][5]) > 0,
        "the scrub read: {exact}"
    );
    assert_eq!(rows[2][1], "-");
}

// DESCRIPTION: `-l` adds ZFS's four latency groups (total_wait, disk_wait, syncq_wait,
// asyncq_wait; `-` where tarn has no such queue) and `-q` the four queue columns, with
// ZFS's group titles; with `-p` the numbers are exact. The latencies of the real
// write-behind queue are sane: a write's total is its queue wait plus its device time, so
// its average is at least each of them; a read's total is at least its device time.
#[test]
fn iostat_latency_and_queue_columns() {
    let rig = Rig::new();
    scrubbed_pool(&rig);
    let latency = rig.ok("pool iostat -H -l tank");
    assert_eq!(cells(latency.trim_end()).len(), 15, "{latency}");
    let queues = rig.ok("pool iostat -H -q tank");
    assert_eq!(cells(queues.trim_end()).len(), 11, "{queues}");
    let both = rig.ok("pool iostat -H -p -l -q tank");
    let both = cells(both.trim_end());
    assert_eq!(both.len(), 19);
    assert!(
        both[15..].iter().all(|c| c.parse::<u64>().is_ok()),
        "{both:?}"
    );
    assert_eq!((both[12], both[13]), ("-", "-"), "{both:?}");
    let ns = |i: usize| both[i].parse::<u64>().unwrap();
    let (total_read, total_write, disk_read, disk_write) = (ns(7), ns(8), ns(9), ns(10));
    let (syncq_read, asyncq_write) = (ns(11), ns(14));
    assert!(
        total_write >= disk_write && total_write >= asyncq_write,
        "{both:?}"
    );
    assert!(
        disk_write > 0,
        "the scrubbed pool's writes were timed: {both:?}"
    );
    assert!(total_read >= disk_read && disk_read > 0, "{both:?}");
    assert!(total_read >= syncq_read, "{both:?}");
    let header = rig.ok("pool iostat -l -q tank");
    assert_eq!(
        header.lines().next().unwrap(),
        "              capacity     operations     bandwidth    total_wait     disk_wait    \
         syncq_wait    asyncq_wait   syncq_read   asyncq_write"
    );
}

// DESCRIPTION: `-w` prints a latency histogram per row (37 buckets, 1ns to 137s, the -l
// classes as columns) and `-r` request sizes (16 rows, 512 to 16M); `-v` adds a table per
// vdev and device; combining -w or -r with each other, -l or -q is a usage error. The
// counts are the accesses: the histogram of device reads of a device adds up to its reads
// (the JSON of -w -v), the request sizes of the pool to its operations.
// STRATEGY: count lines and cells of -H -p output; compare sums with the -j totals.
#[test]
fn iostat_histograms_and_request_sizes() {
    let rig = Rig::new();
    let data = scrubbed_pool(&rig);
    let histograms = rig.ok("pool iostat -w tank");
    let lines: Vec<&str> = histograms.lines().collect();
    assert_eq!(lines.len(), 41, "{histograms}");
    assert!(
        lines[0].starts_with("tank ") && lines[0].contains("disk_wait"),
        "{histograms}"
    );
    assert!(lines[1].starts_with("latency "), "{histograms}");
    assert!(lines[3].starts_with("1ns "), "{histograms}");
    assert!(lines[39].starts_with("137s "), "{histograms}");
    let exact = rig.ok("pool iostat -H -p -w tank");
    assert_eq!(exact.lines().count(), 37);
    assert!(exact.lines().all(|l| cells(l).len() == 9), "{exact}");
    let sizes = rig.ok("pool iostat -H -p -r -v tank");
    assert_eq!(
        sizes.lines().count(),
        16 * 5,
        "pool, raidz1-0 and three devices"
    );
    let json: serde_json::Value =
        serde_json::from_str(&rig.ok("pool iostat -j -v -w tank")).unwrap();
    let device = &json["pools"][0]["children"][0]["children"][0];
    assert_eq!(device["name"], data[0].as_str());
    let sum = |v: &serde_json::Value| -> u64 {
        v.as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .sum()
    };
    let disk_reads = sum(&device["latency_histograms"]["disk_read"]);
    let total_reads = sum(&device["latency_histograms"]["total_read"]);
    assert_eq!(disk_reads, total_reads, "every read timed in both classes");
    assert!(disk_reads > 0, "the scrub read every device");
    let json: serde_json::Value =
        serde_json::from_str(&rig.ok("pool iostat -j -p -r tank")).unwrap();
    let tank = &json["pools"][0];
    assert!(sum(&tank["request_sizes"]["read"]) > 0, "{tank}");
    assert_eq!(tank["request_size_floor_bytes"][0], 512);
    for line in [
        "pool iostat -w -r tank",
        "pool iostat -w -l tank",
        "pool iostat -r -q",
    ] {
        let run = rig.run(line);
        assert_eq!(run.code, Some(2), "{run:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
        assert!(run.stderr.contains("-w and -r each stand alone"), "{run:?}");
    }
}

// DESCRIPTION: `-j` prints the rates as JSON (pools only, or the whole tree with -v);
// `interval count` prints count reports a second apart, the header once without -v and
// with every report with -v, as zpool iostat does.
// STRATEGY: parse the JSON; count the pool rows and header lines of the repeated reports.
#[test]
fn iostat_json_and_intervals() {
    let rig = Rig::new();
    let data = scrubbed_pool(&rig);
    let json: serde_json::Value = serde_json::from_str(&rig.ok("pool iostat -j tank")).unwrap();
    assert_eq!(json["pools"][0]["name"], "tank");
    assert!(json["pools"][0]["children"].is_null(), "{json}");
    assert!(json["pools"][0]["alloc"].as_u64().unwrap() > 0);
    let json: serde_json::Value = serde_json::from_str(&rig.ok("pool iostat -j -v tank")).unwrap();
    let top = &json["pools"][0]["children"][0];
    assert_eq!(top["name"], "raidz1-0");
    assert_eq!(top["children"][2]["name"], data[2].as_str());
    assert!(top["children"][0]["alloc"].is_null());

    let repeated = rig.ok("pool iostat tank 1 2");
    let lines: Vec<&str> = repeated.lines().collect();
    assert_eq!(
        lines.len(),
        5,
        "header once, then a row per report: {repeated}"
    );
    assert_eq!(lines.iter().filter(|l| l.starts_with("tank ")).count(), 2);
    let repeated = rig.ok("pool iostat -v tank 1 2");
    let headers = repeated.lines().filter(|l| l.starts_with("pool ")).count();
    assert_eq!(headers, 2, "-v repeats the header: {repeated}");
    let scripted = rig.ok("pool iostat -H tank 1 3");
    assert_eq!(scripted.lines().count(), 3, "{scripted}");
}

// DESCRIPTION: without pools, `no pools available`; an unknown pool is refused with one
// line; a zero interval or count is a usage error (exit 2), as zpool's are.
#[test]
fn iostat_refusals() {
    let rig = Rig::new();
    assert_eq!(rig.ok("pool iostat"), "no pools available\n");
    scrubbed_pool(&rig);
    assert_eq!(
        rig.refused("pool iostat nosuch"),
        "cannot open 'nosuch': no such pool"
    );
    for line in ["pool iostat tank 0", "pool iostat tank 1 0"] {
        let run = rig.run(line);
        assert_eq!(run.code, Some(2), "{run:?}");
        assert_eq!(run.stdout, "");
        assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
    }
}

// DESCRIPTION: `pool status -s` adds the SLOW column after CKSUM: `-` for the pool and the
// raidz vdev, a count for each device, none for spares; without -s the table is unchanged.
// STRATEGY: compare the config table rows exactly.
#[test]
fn status_slow_column() {
    let rig = Rig::new();
    let data = scrubbed_pool(&rig);
    let status = rig.ok("pool status -s tank");
    let table: Vec<&str> = status
        .lines()
        .skip_while(|l| !l.contains("NAME"))
        .take(7)
        .collect();
    let width = data[0].len() + 4;
    let row = |indent: usize, name: &str, slow: &str| {
        let pad = width - indent;
        format!(
            "\t{}{name:<pad$}  ONLINE       0     0     0 {slow:>5}",
            " ".repeat(indent)
        )
    };
    assert_eq!(
        table[0],
        format!("\t{:<width$}  STATE     READ WRITE CKSUM  SLOW", "NAME")
    );
    assert_eq!(table[1], row(0, "tank", "-"));
    assert_eq!(table[2], row(2, "raidz1-0", "-"));
    for (i, device) in data.iter().enumerate() {
        assert_eq!(table[3 + i], row(4, device, "0"));
    }
    assert_eq!(table[6], "\tspares");
    let plain = rig.ok("pool status tank");
    assert!(!plain.contains("SLOW"), "{plain}");
}

// DESCRIPTION: the thresholds are pool properties with defaults; bad values are refused
// with one line naming the valid range and change no byte; good ones become `local`.
#[test]
fn threshold_properties() {
    let rig = Rig::new();
    scrubbed_pool(&rig);
    assert_eq!(
        rig.ok("pool get -H -o property,value,source io_n,slow_io_ratio,slow_io_period tank"),
        "io_n\t10\tdefault\nslow_io_ratio\t8\tdefault\nslow_io_period\t60\tdefault\n"
    );
    assert_eq!(
        rig.ok("pool get -H -o property,value,source io_t,slow_io_n,slow_io_t,slow_io_ms tank"),
        "io_t\t600\tdefault\nslow_io_n\t10\tdefault\nslow_io_t\t5\tdefault\n\
         slow_io_ms\t10\tdefault\n"
    );
    assert_eq!(
        rig.refused("pool set slow_io_t=0 tank"),
        "cannot set property for 'tank': invalid value '0' for property 'slow_io_t' (a \
         whole number from 1 to 3600)"
    );
    rig.ok("pool iostat tank");
    assert_eq!(
        rig.refused("pool set slow_io_ratio=1 tank"),
        "cannot set property for 'tank': invalid value '1' for property 'slow_io_ratio' (a \
         whole number from 2 to 1000 or 'off')"
    );
    assert_eq!(
        rig.refused("pool set io_n=0 tank"),
        "cannot set property for 'tank': invalid value '0' for property 'io_n' (a whole \
         number from 1 to 1000000)"
    );
    assert_eq!(
        rig.refused("pool set slow_io_period=1m tank"),
        "cannot set property for 'tank': invalid value '1m' for property 'slow_io_period' (a \
         whole number from 1 to 604800)"
    );
    rig.ok("pool set slow_io_ratio=off tank");
    rig.ok("pool set io_n=20 tank");
    rig.ok("pool set slow_io_ms=30 tank");
    assert_eq!(
        rig.ok("pool get -H -o value,source slow_io_ms tank"),
        "30\tlocal\n"
    );
    assert_eq!(
        rig.ok("pool get -H -o value,source slow_io_ratio,io_n tank"),
        "off\tlocal\n20\tlocal\n"
    );
}
