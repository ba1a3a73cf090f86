//! Prometheus metrics: the daemon answers `GET /metrics` over HTTP with the text format,
//! using the metric names and labels of the widely used ZFS exporter (`zfs_pool_*` with label
//! `pool`, `zfs_dataset_*` with `name`, `pool`, `type`; health codes 0 online, 1 degraded,
//! 2 faulted, 3 offline, 4 unavailable, 5 removed, 6 suspended), so that dashboards and alert
//! rules written for ZFS work unchanged, plus what tarn knows and that exporter does not
//! (`tarn_*`: per-device error counters, scan progress).
//!
//! # Model
//! One listener thread per address: always `<rundir>/metrics.sock` (mode 0600, like the
//! admin socket; `curl --unix-socket`), and TCP where `TARN_METRICS_ADDR` says
//! (`127.0.0.1:9134`, the exporter's port; loopback unless the admin names another address).
//! Each connection is one request, answered and closed (HTTP/1.0 semantics).
//!
//! # Failure model
//! A bad request gets 400 or 404 and the connection closes; a scrape reads the engine the
//! way `list` and `get` do and never changes anything. A listener that cannot be opened is
//! logged and the daemon runs without it.
//!
//! Also tarn's own: txg write and commit phase times and intent-log commits (histograms
//! per pool, from the engine's commit lane), FUSE requests by opcode per mounted dataset
//! (counts and summed server time, from the mounts' own counters) and NBD requests by
//! command per pool (histograms, timed by the daemon's NBD backend). The front ends are
//! reached through weak references ([`FrontEnds`]): a scrape never keeps them alive.
//!
//! # Not here
//! TLS and authentication (bind to loopback or a Unix socket; put a proxy in front); FUSE
//! latency histograms (the mounts count time per opcode, not its distribution).

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Weak};

use tarn_engine::{DatasetQuery, Engine};

use crate::mounts::MountTable;
use crate::nbd::{NBD_OPS, NbdTable};

/// Name of the metrics socket in the run directory.
pub const METRICS_SOCKET: &str = "metrics.sock";

/// Longest request head read (request line and headers).
const HEAD_MAX: usize = 8 << 10;

/// The daemon's front ends whose requests the metrics count (none in tests that serve
/// only the engine).
#[derive(Clone, Debug, Default)]
pub struct FrontEnds {
    /// The mount table (FUSE requests by opcode).
    pub mounts: Weak<MountTable>,
    /// The NBD listeners (NBD requests by command).
    pub nbd: Weak<NbdTable>,
}

/// Starts the listeners (module doc); a failure is returned as a line for the log.
pub fn start(engine: &Arc<Engine>, rundir: &std::path::Path, fronts: &FrontEnds) -> Vec<String> {
    let mut problems = Vec::new();
    let socket = rundir.join(METRICS_SOCKET);
    let _ = std::fs::remove_file(&socket);
    match std::os::unix::net::UnixListener::bind(&socket) {
        Ok(listener) => {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
            let fronts = fronts.clone();
            serve(engine, fronts, move || {
                listener.accept().map(|(stream, _)| stream)
            });
        }
        Err(e) => problems.push(format!("metrics socket {}: {e}", socket.display())),
    }
    if let Ok(address) = std::env::var("TARN_METRICS_ADDR") {
        match std::net::TcpListener::bind(&address) {
            Ok(listener) => serve(engine, fronts.clone(), move || {
                listener.accept().map(|(stream, _)| stream)
            }),
            Err(e) => problems.push(format!("metrics address {address}: {e}")),
        }
    }
    problems
}

/// A thread answering every connection `accept` takes, until the engine goes.
fn serve<S: Read + Write>(
    engine: &Arc<Engine>,
    fronts: FrontEnds,
    mut accept: impl FnMut() -> std::io::Result<S> + Send + 'static,
) {
    let weak = Arc::downgrade(engine);
    // Without the thread the daemon runs on, unwatched.
    let _ = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            loop {
                // A failed accept (a client gone before it was taken) only loses that one.
                let Ok(stream) = accept() else { continue };
                let Some(engine) = weak.upgrade() else { return };
                let _ = answer(&engine, &fronts, stream);
            }
        });
}

/// Reads one request from `stream` and answers it.
fn answer<S: std::io::Read + Write>(
    engine: &Engine,
    fronts: &FrontEnds,
    stream: S,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut head = 0;
    let mut first = None;
    loop {
        line.clear();
        let read = reader.by_ref().take(HEAD_MAX as u64).read_line(&mut line)?;
        head += read;
        if first.is_none() {
            first = Some(line.trim_end().to_string());
        }
        if read == 0 || line == "\r\n" || line == "\n" || head >= HEAD_MAX {
            break;
        }
    }
    let request = first.unwrap_or_default();
    let mut words = request.split_whitespace();
    let (status, body) = match (words.next(), words.next()) {
        (Some("GET"), Some("/metrics")) => ("200 OK", render(engine, fronts)),
        (Some("GET"), Some(_)) => ("404 Not Found", "only /metrics is served\n".to_string()),
        _ => ("400 Bad Request", "GET /metrics\n".to_string()),
    };
    let stream = reader.get_mut();
    write!(
        stream,
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

/// HELP text of every metric (the exporter's words for its own).
const HELP: &[(&str, &str)] = &[
    (
        "zfs_pool_health",
        "Health status code for the pool [0: online, 1: degraded, 2: faulted, 3: offline, \
         4: unavailable, 5: removed, 6: suspended].",
    ),
    (
        "zfs_pool_size_bytes",
        "Total size in bytes of the storage pool.",
    ),
    (
        "zfs_pool_allocated_bytes",
        "Amount of storage in bytes used within the pool.",
    ),
    (
        "zfs_pool_free_bytes",
        "The amount of free space in bytes available in the pool.",
    ),
    (
        "zfs_pool_fragmentation_ratio",
        "The fragmentation ratio of the pool.",
    ),
    ("zfs_pool_capacity_ratio", "Ratio of pool space used."),
    (
        "zfs_pool_deduplication_ratio",
        "The ratio of deduplicated size vs undeduplicated size for data in this pool.",
    ),
    (
        "zfs_pool_freeing_bytes",
        "The amount of space in bytes remaining to be freed following the destruction of a \
         file system or snapshot.",
    ),
    (
        "zfs_pool_leaked_bytes",
        "Number of leaked bytes in the pool.",
    ),
    (
        "zfs_pool_readonly",
        "Read-only status of the pool [0: read-write, 1: read-only].",
    ),
    (
        "zfs_dataset_used_bytes",
        "The amount of space in bytes consumed by this dataset and all its descendents.",
    ),
    (
        "zfs_dataset_available_bytes",
        "The amount of space in bytes available to the dataset and all its children.",
    ),
    (
        "zfs_dataset_referenced_bytes",
        "The amount of data in bytes that is accessible by this dataset.",
    ),
    (
        "zfs_dataset_logical_used_bytes",
        "The amount of space in bytes that is logically consumed by this dataset and all its \
         descendents.",
    ),
    (
        "zfs_dataset_quota_bytes",
        "The amount of space in bytes this dataset and its descendents can consume.",
    ),
    (
        "zfs_dataset_reservation_bytes",
        "The minimum amount of space in bytes guaranteed to a dataset and its descendants.",
    ),
    (
        "zfs_dataset_used_by_dataset_bytes",
        "The amount of space in bytes used by this dataset itself.",
    ),
    (
        "zfs_dataset_used_snapshot_bytes",
        "The amount of space in bytes consumed by snapshots of this dataset.",
    ),
    (
        "zfs_dataset_written_bytes",
        "The amount of referenced space in bytes written to this dataset since the previous \
         snapshot.",
    ),
    (
        "zfs_dataset_volume_size_bytes",
        "The logical size in bytes of this volume.",
    ),
    (
        "tarn_vdev_read_errors_total",
        "Read errors of the device since import or clear.",
    ),
    (
        "tarn_vdev_write_errors_total",
        "Write errors of the device since import or clear.",
    ),
    (
        "tarn_vdev_checksum_errors_total",
        "Checksum errors of the device since import or clear.",
    ),
    (
        "tarn_vdev_slow_ios_total",
        "I/Os of the device the slow-device detector counted.",
    ),
    (
        "tarn_scan_progress_ratio",
        "Part of the running or last scrub or resilver examined.",
    ),
    (
        "tarn_scan_errors_total",
        "Errors the running or last scrub or resilver found.",
    ),
    (
        "tarn_pool_read_ops_total",
        "Reads the pool's devices served since import.",
    ),
    (
        "tarn_pool_write_ops_total",
        "Writes the pool's devices took since import.",
    ),
    (
        "tarn_pool_read_bytes_total",
        "Bytes the pool's devices read since import.",
    ),
    (
        "tarn_pool_write_bytes_total",
        "Bytes the pool's devices wrote since import.",
    ),
    (
        "tarn_vdev_latency_seconds",
        "Latency of each device access, start to end as the leaf saw it.",
    ),
    ("tarn_arc_hits_total", "Block lookups the ARC answered."),
    (
        "tarn_arc_misses_total",
        "Block lookups the ARC did not (read from the pool).",
    ),
    ("tarn_arc_size_bytes", "Bytes of blocks the ARC holds."),
    ("tarn_arc_limit_bytes", "The ARC's byte limit."),
    (
        "tarn_l2arc_hits_total",
        "Reads the pool's cache devices served.",
    ),
    (
        "tarn_l2arc_misses_total",
        "Reads that looked in the cache devices and went on.",
    ),
    (
        "tarn_txg_write_seconds",
        "Txg write phases (every layer's dirty state and the space log, under the pool lock).",
    ),
    (
        "tarn_txg_commit_seconds",
        "Txg commit phases (flushes and uberblocks, off the pool lock).",
    ),
    (
        "tarn_intent_log_commit_seconds",
        "Intent-log commits (fsync, sync=always, NBD flush and FUA) until durable.",
    ),
    (
        "tarn_intent_log_commits_by_txg_total",
        "Intent-log commits made durable by syncing a txg instead of writing the log.",
    ),
    (
        "tarn_fuse_request_seconds",
        "FUSE requests of a mounted dataset by opcode since it was mounted, from the \
         handler's start to its reply.",
    ),
    (
        "tarn_nbd_request_seconds",
        "NBD requests of the pool's volumes by command, until the reply's data was ready.",
    ),
];

/// Latency histogram bounds: bucket b of the device layer's histograms holds [2^b, 2^(b+1))
/// ns; the exposition starts at 1 us (everything faster is in the first bound).
const LATENCY_FIRST_BUCKET: usize = 9;

/// The exposition text of every imported pool and dataset, and of the front ends' requests.
#[must_use]
pub fn render(engine: &Engine, fronts: &FrontEnds) -> String {
    let mut out = Metrics::default();
    for pool in engine.list(&[]).unwrap_or_default() {
        let labels = format!("pool=\"{}\"", escape(&pool.name));
        let ratio = |percent: u64| percent as f64 / 100.0;
        let health = f64::from(health_code(&pool.health));
        out.gauge("zfs_pool_health", &labels, health);
        out.gauge("zfs_pool_size_bytes", &labels, pool.size as f64);
        out.gauge("zfs_pool_allocated_bytes", &labels, pool.allocated as f64);
        out.gauge("zfs_pool_free_bytes", &labels, pool.free as f64);
        out.gauge(
            "zfs_pool_fragmentation_ratio",
            &labels,
            ratio(pool.fragmentation),
        );
        out.gauge("zfs_pool_capacity_ratio", &labels, ratio(pool.capacity));
        // tarn does not deduplicate.
        out.gauge("zfs_pool_deduplication_ratio", &labels, 1.0);
        let wanted = ["freeing".into(), "leaked".into(), "readonly".into()];
        let props = engine.get_props(&pool.name, &wanted).unwrap_or_default();
        let value = |name: &str| {
            let found = props.iter().find(|p| p.property == name);
            found.map_or(String::new(), |p| p.value.clone())
        };
        let number = |name: &str| value(name).parse::<f64>().unwrap_or(0.0);
        out.gauge("zfs_pool_freeing_bytes", &labels, number("freeing"));
        out.gauge("zfs_pool_leaked_bytes", &labels, number("leaked"));
        let readonly = f64::from(u8::from(value("readonly") == "on"));
        out.gauge("zfs_pool_readonly", &labels, readonly);
        devices(engine, &pool.name, &mut out);
        io(engine, &pool.name, &mut out);
        syncs(engine, &pool.name, &mut out);
        datasets(engine, &pool.name, &mut out);
    }
    front_ends(fronts, &mut out);
    let arc = engine.cache_stats();
    out.counter("tarn_arc_hits_total", "", arc.hits as f64);
    out.counter("tarn_arc_misses_total", "", arc.misses as f64);
    out.gauge("tarn_arc_size_bytes", "", arc.bytes as f64);
    out.gauge("tarn_arc_limit_bytes", "", arc.limit as f64);
    out.finish()
}

/// The pool's I/O totals (rates in PromQL give throughput), each leaf's latency histogram
/// by operation, and the cache devices' hits.
fn io(engine: &Engine, pool: &str, out: &mut Metrics) {
    let Ok(Some(report)) = engine
        .iostat(&[pool.to_string()])
        .map(|r| r.into_iter().next())
    else {
        return;
    };
    let labels = format!("pool=\"{}\"", escape(pool));
    let root = &report.root;
    out.counter("tarn_pool_read_ops_total", &labels, root.read_ops as f64);
    out.counter("tarn_pool_write_ops_total", &labels, root.write_ops as f64);
    out.counter(
        "tarn_pool_read_bytes_total",
        &labels,
        root.read_bytes as f64,
    );
    out.counter(
        "tarn_pool_write_bytes_total",
        &labels,
        root.write_bytes as f64,
    );
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        stack.extend(&node.children);
        if !node.children.is_empty() {
            continue;
        }
        for (op, latencies) in [
            ("read", &node.waits.total_read),
            ("write", &node.waits.total_write),
        ] {
            let labels = format!(
                "pool=\"{}\",vdev=\"{}\",op=\"{op}\"",
                escape(pool),
                escape(&node.name)
            );
            out.histogram("tarn_vdev_latency_seconds", &labels, latencies);
        }
    }
    if let Ok(l2) = engine.l2_stats(pool) {
        out.counter("tarn_l2arc_hits_total", &labels, l2.hits as f64);
        out.counter("tarn_l2arc_misses_total", &labels, l2.misses as f64);
    }
}

/// Txg phase times and intent-log commits of `pool`.
fn syncs(engine: &Engine, pool: &str, out: &mut Metrics) {
    let Ok(times) = engine.sync_times(pool) else {
        return;
    };
    let labels = format!("pool=\"{}\"", escape(pool));
    out.histogram("tarn_txg_write_seconds", &labels, &times.write);
    out.histogram("tarn_txg_commit_seconds", &labels, &times.commit);
    out.histogram(
        "tarn_intent_log_commit_seconds",
        &labels,
        &times.log_commits,
    );
    out.counter(
        "tarn_intent_log_commits_by_txg_total",
        &labels,
        times.log_commits_by_txg as f64,
    );
}

/// FUSE requests per mounted dataset and opcode; NBD requests per pool and command.
fn front_ends(fronts: &FrontEnds, out: &mut Metrics) {
    if let Some(mounts) = fronts.mounts.upgrade() {
        for (dataset, stats) in mounts.op_stats() {
            let pool = dataset.split('/').next().unwrap_or(&dataset).to_string();
            for stat in stats.iter().filter(|s| s.count > 0) {
                let labels = format!(
                    "pool=\"{}\",dataset=\"{}\",op=\"{}\"",
                    escape(&pool),
                    escape(&dataset),
                    stat.opcode.name().to_lowercase()
                );
                out.histogram("tarn_fuse_request_seconds", &labels, &stat.server);
            }
        }
    }
    if let Some(nbd) = fronts.nbd.upgrade() {
        for (pool, ops) in nbd.op_stats() {
            for (op, latencies) in NBD_OPS.iter().zip(&ops) {
                let labels = format!("pool=\"{}\",op=\"{op}\"", escape(&pool));
                out.histogram("tarn_nbd_request_seconds", &labels, latencies);
            }
        }
    }
}

/// Per-leaf error counters and scan progress (tarn's own).
fn devices(engine: &Engine, pool: &str, out: &mut Metrics) {
    if let Ok(status) = engine.status(pool) {
        let mut leaves = Vec::new();
        collect_leaves(&status.config, &mut leaves);
        for leaf in leaves {
            let labels = format!("pool=\"{}\",vdev=\"{}\"", escape(pool), escape(&leaf.name));
            out.counter("tarn_vdev_read_errors_total", &labels, leaf.read as f64);
            out.counter("tarn_vdev_write_errors_total", &labels, leaf.write as f64);
            out.counter(
                "tarn_vdev_checksum_errors_total",
                &labels,
                leaf.cksum as f64,
            );
            out.counter("tarn_vdev_slow_ios_total", &labels, leaf.slow as f64);
        }
    }
    if let Ok(Some(scan)) = engine.scan_progress(pool) {
        let function = format!("{:?}", scan.function).to_lowercase();
        let labels = format!("pool=\"{}\",function=\"{function}\"", escape(pool));
        let ratio = match scan.to_examine {
            0 => 0.0,
            total => (scan.examined as f64 / total as f64).min(1.0),
        };
        out.gauge("tarn_scan_progress_ratio", &labels, ratio);
        out.counter("tarn_scan_errors_total", &labels, scan.errors as f64);
    }
}

fn collect_leaves<'a>(node: &'a tarn_engine::VdevNode, out: &mut Vec<&'a tarn_engine::VdevNode>) {
    if node.children.is_empty() {
        out.push(node);
    }
    for child in &node.children {
        collect_leaves(child, out);
    }
}

/// The exporter's dataset metrics, for every filesystem and volume of `pool`: property,
/// metric.
const DATASET_METRICS: [(&str, &str); 10] = [
    ("used", "zfs_dataset_used_bytes"),
    ("available", "zfs_dataset_available_bytes"),
    ("referenced", "zfs_dataset_referenced_bytes"),
    ("logicalused", "zfs_dataset_logical_used_bytes"),
    ("quota", "zfs_dataset_quota_bytes"),
    ("reservation", "zfs_dataset_reservation_bytes"),
    ("usedbydataset", "zfs_dataset_used_by_dataset_bytes"),
    ("usedbysnapshots", "zfs_dataset_used_snapshot_bytes"),
    ("written", "zfs_dataset_written_bytes"),
    ("volsize", "zfs_dataset_volume_size_bytes"),
];

fn datasets(engine: &Engine, pool: &str, out: &mut Metrics) {
    let mut properties: Vec<String> = vec!["type".into()];
    properties.extend(DATASET_METRICS.iter().map(|(p, _)| p.to_string()));
    let query = DatasetQuery {
        names: vec![pool.to_string()],
        recursive: true,
        properties,
        types: vec!["filesystem".into(), "volume".into()],
        ..DatasetQuery::default()
    };
    let Ok(rows) = engine.dataset_props(&query) else {
        return;
    };
    for row in rows {
        let kind = row.props.first().map_or("filesystem", |p| p.value.as_str());
        let labels = format!(
            "name=\"{}\",pool=\"{}\",type=\"{}\"",
            escape(&row.name),
            escape(pool),
            escape(kind)
        );
        for (prop, (_, metric)) in row.props.iter().skip(1).zip(DATASET_METRICS) {
            // `-` (volsize of a filesystem, quota none as 0 is kept) is not a number.
            if let Ok(value) = prop.parsable.parse::<f64>() {
                out.gauge(metric, &labels, value);
            }
        }
    }
}

/// ZFS exporter's health codes.
fn health_code(health: &str) -> u8 {
    match health {
        "ONLINE" => 0,
        "DEGRADED" => 1,
        "FAULTED" => 2,
        "OFFLINE" => 3,
        "REMOVED" => 5,
        "SUSPENDED" => 6,
        _ => 4,
    }
}

/// A label value as the text format wants it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Samples grouped by metric name, each name with one HELP and TYPE line.
#[derive(Default)]
struct Metrics {
    families: Vec<(String, &'static str, Vec<String>)>,
}

impl Metrics {
    fn gauge(&mut self, name: &str, labels: &str, value: f64) {
        self.sample(name, "gauge", labels, value);
    }

    fn counter(&mut self, name: &str, labels: &str, value: f64) {
        self.sample(name, "counter", labels, value);
    }

    fn sample(&mut self, name: &str, kind: &'static str, labels: &str, value: f64) {
        let line = match labels {
            "" => format!("{name} {value}"),
            _ => format!("{name}{{{labels}}} {value}"),
        };
        self.line(name, kind, line);
    }

    fn line(&mut self, family: &str, kind: &'static str, line: String) {
        match self.families.iter_mut().find(|f| f.0 == family) {
            Some(family) => family.2.push(line),
            None => self.families.push((family.to_string(), kind, vec![line])),
        }
    }

    /// A Prometheus histogram in seconds from a log2 latency histogram in nanoseconds.
    fn histogram(&mut self, name: &str, labels: &str, latencies: &tarn_engine::Latencies) {
        let buckets = &latencies.buckets;
        let mut cumulative: u64 = buckets[..LATENCY_FIRST_BUCKET].iter().sum();
        for (b, count) in buckets.iter().enumerate().skip(LATENCY_FIRST_BUCKET) {
            if b + 1 == buckets.len() {
                break;
            }
            cumulative += count;
            let le = (1u64 << (b + 1)) as f64 / 1e9;
            let line = format!("{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
            self.line(name, "histogram", line);
        }
        let count: u64 = buckets.iter().sum();
        let lines = [
            format!("{name}_bucket{{{labels},le=\"+Inf\"}} {count}"),
            format!("{name}_sum{{{labels}}} {}", latencies.total_ns as f64 / 1e9),
            format!("{name}_count{{{labels}}} {count}"),
        ];
        for line in lines {
            self.line(name, "histogram", line);
        }
    }

    fn finish(self) -> String {
        let mut out = String::new();
        for (name, kind, lines) in self.families {
            let help = HELP.iter().find(|(n, _)| *n == name).map_or("", |(_, h)| h);
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for line in lines {
                let _ = writeln!(out, "{line}");
            }
        }
        out
    }
}
