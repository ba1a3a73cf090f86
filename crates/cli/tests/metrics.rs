//! Prometheus metrics (issue 21): the daemon's `/metrics` passes `promtool check metrics`, a
//! real Prometheus server scrapes it, and a query sees the pool's health change when a device
//! goes offline. Skips with a printed reason when `promtool` or `prometheus` is missing
//! (`.ci/run` installs Debian's `prometheus`).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Rig, join, run_tarn};

/// A TCP port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` over HTTP/1.0: the status line and the body.
fn http_get(address: &str, path: &str) -> std::io::Result<(String, String)> {
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n")?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head.lines().next().unwrap_or("").to_string();
    Ok((status, body.to_string()))
}

/// `expr` percent-encoded for a query string.
fn encode(expr: &str) -> String {
    expr.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value Prometheus has for `query` (an instant vector of one sample), if any.
fn query(prometheus: &str, query: &str) -> Option<String> {
    let path = format!("/api/v1/query?query={}", encode(query));
    let (_, body) = http_get(prometheus, &path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&body).ok()?;
    let value = &json["data"]["result"][0]["value"][1];
    value.as_str().map(str::to_string)
}

/// Prometheus's `status` for the instant query `expr` (`success`, or `error` with why).
fn query_status(prometheus: &str, expr: &str) -> String {
    let (_, body) = http_get(prometheus, &format!("/api/v1/query?query={}", encode(expr))).unwrap();
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    format!("{} {}", json["status"], json["error"])
}

/// Waits (up to 60 s) until Prometheus answers `query` with `want`.
fn wait_for(prometheus: &str, text: &str, want: &str) {
    for _ in 0..600 {
        if query(prometheus, text).as_deref() == Some(want) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{text} never became {want}: {:?}", query(prometheus, text));
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// DESCRIPTION: the metrics of a pool and its datasets under the ZFS exporter's names pass
// promtool's lint; a Prometheus server scraping the daemon every second sees the pool
// healthy (0), then degraded (1) once a device is taken offline; other paths get 404.
// tarn's own metrics (I/O totals, per-device latency histograms, ARC, txg phase times,
// intent-log commits, FUSE and NBD requests) are there too, Prometheus's queries see the
// new ones, and every query of the Grafana dashboard (contrib/grafana) is one it accepts.
// STRATEGY: the daemon started with TARN_METRICS_ADDR on a free loopback port; Prometheus
// in a temp dir on another; its HTTP query API polled.
#[test]
fn prometheus_scrapes_pool_and_dataset_metrics() {
    let tools = ["promtool", "prometheus"];
    if let Some(missing) = tools
        .iter()
        .find(|t| Command::new(t).arg("--version").output().is_err())
    {
        println!("prometheus_scrapes_pool_and_dataset_metrics: skipped: no {missing}");
        return;
    }
    let rig = Rig::new();
    let metrics = format!("127.0.0.1:{}", free_port());
    let devices = rig.devices("d", "disk", 3);
    let create = format!("pool create -m none tank raidz1 {}", join(&devices));
    let env = [("TARN_METRICS_ADDR", metrics.as_str())];
    run_tarn(&rig.rundir, rig.root(), &create, &env).ok(&create);
    rig.ok("create tank/a");
    let fuse = Path::new("/dev/fuse").exists();
    if fuse {
        front_end_requests(&rig);
    }

    let (status, body) = http_get(&metrics, "/metrics").unwrap();
    assert_eq!(status, "HTTP/1.0 200 OK");
    assert!(
        body.contains("\nzfs_pool_health{pool=\"tank\"} 0\n"),
        "{body}"
    );
    let used = "zfs_dataset_used_bytes{name=\"tank/a\",pool=\"tank\",type=\"filesystem\"} ";
    assert!(body.contains(used), "{body}");
    let lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .output_with(&body);
    assert!(lint.status.success(), "{lint:?}");
    assert_eq!(
        String::from_utf8_lossy(&lint.stdout),
        "",
        "promtool's lint found something"
    );
    tarn_metrics_are_there(&body, &devices[0]);
    if fuse {
        front_end_metrics_are_there(&body);
    }
    assert_eq!(http_get(&metrics, "/").unwrap().0, "HTTP/1.0 404 Not Found");

    let (web, _server) = start_prometheus(&rig, &metrics);
    wait_for(&web, "zfs_pool_health{pool=\"tank\"}", "0");
    wait_for(
        &web,
        "count(tarn_txg_commit_seconds_count{pool=\"tank\"} > 0)",
        "1",
    );
    if fuse {
        let writes = "count(tarn_fuse_request_seconds_count{dataset=\"tank/m\",op=\"write\"} > 0)";
        wait_for(&web, writes, "1");
        let log = "count(tarn_intent_log_commit_seconds_count{pool=\"tank\"} > 0)";
        wait_for(&web, log, "1");
    }
    dashboard_queries_are_valid(&web);
    rig.ok(&format!("pool offline tank {}", devices[1]));
    wait_for(&web, "zfs_pool_health{pool=\"tank\"}", "1");
    rig.ok("daemon --stop");
}

/// A Prometheus server scraping `metrics` every second, its data in the rig's directory;
/// returns its web address and the server (killed when dropped).
fn start_prometheus(rig: &Rig, metrics: &str) -> (String, Killed) {
    let web = format!("127.0.0.1:{}", free_port());
    let config = rig.root().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: tarn\n    \
             static_configs:\n      - targets: ['{metrics}']\n"
        ),
    )
    .unwrap();
    let server = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            rig.root().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (web, Killed(server))
}

/// tarn's own metrics: I/O totals, each device's latency histogram by operation, the ARC.
fn tarn_metrics_are_there(body: &str, device: &str) {
    let written = body
        .lines()
        .find_map(|l| l.strip_prefix("tarn_pool_write_bytes_total{pool=\"tank\"} "))
        .unwrap_or_else(|| panic!("{body}"));
    assert!(written.parse::<f64>().unwrap() > 0.0, "{written}");
    let histogram = format!(
        "tarn_vdev_latency_seconds_bucket{{pool=\"tank\",vdev=\"{device}\",op=\"write\",\
         le=\"+Inf\"}} "
    );
    assert!(body.contains(&histogram), "{body}");
    assert!(body.contains("\ntarn_arc_hits_total "), "{body}");
}

/// Requests through both front ends: a file written and fsync'd through a FUSE mount (an
/// intent-log commit), and a volume's block map read over NBD when `nbdinfo` is there.
fn front_end_requests(rig: &Rig) {
    rig.ok("create -o mountpoint=/m tank/m");
    let file = rig.root().join("altroot/m/f");
    let mut f = std::fs::File::create(&file).unwrap();
    f.write_all(&[7u8; 64 << 10]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    rig.ok("create -V 16M tank/v");
    let socket = rig.rundir.join("nbd/tank.sock");
    let uri = format!("nbd+unix:///tank/v?socket={}", socket.display());
    if let Ok(out) = Command::new("nbdinfo").args(["--map", &uri]).output() {
        assert!(out.status.success(), "{out:?}");
    }
}

/// What [`front_end_requests`] did, in the exposition: FUSE writes by dataset and opcode,
/// the intent-log commit, txg phase histograms, and NBD block-status requests.
fn front_end_metrics_are_there(body: &str) {
    let counter = |prefix: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix}: {body}"))
            .parse()
            .unwrap()
    };
    let labels = "pool=\"tank\",dataset=\"tank/m\",op=\"write\"";
    let writes = counter(&format!("tarn_fuse_request_seconds_count{{{labels}}} "));
    assert!(writes >= 1.0);
    assert!(counter(&format!("tarn_fuse_request_seconds_sum{{{labels}}} ")) > 0.0);
    // A histogram: every request is in the last bucket, and some in a finite one.
    let inf = format!("tarn_fuse_request_seconds_bucket{{{labels},le=\"+Inf\"}} ");
    assert_eq!(counter(&inf), writes);
    let second = format!("tarn_fuse_request_seconds_bucket{{{labels},le=\"1.073741824\"}} ");
    assert!(counter(&second) >= 1.0, "{body}");
    assert!(counter("tarn_intent_log_commit_seconds_count{pool=\"tank\"} ") >= 1.0);
    assert!(counter("tarn_txg_write_seconds_count{pool=\"tank\"} ") >= 1.0);
    if Command::new("nbdinfo").arg("--version").output().is_ok() {
        let status = "tarn_nbd_request_seconds_count{pool=\"tank\",op=\"block_status\"} ";
        assert!(counter(status) >= 1.0);
    }
}

/// Every query of the Grafana dashboard in contrib/ is one Prometheus accepts.
fn dashboard_queries_are_valid(prometheus: &str) {
    let dashboard = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/grafana");
    let text = std::fs::read_to_string(dashboard.join("tarn-pools.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    let exprs: Vec<&str> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["expr"].as_str().unwrap())
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");
    for expr in exprs {
        let expr = expr
            .replace("$pool", "tank")
            .replace("$__rate_interval", "1m");
        assert_eq!(
            query_status(prometheus, &expr),
            "\"success\" null",
            "{expr}"
        );
    }
}

/// `Command::output` with `input` written to the child's stdin.
trait OutputWith {
    fn output_with(&mut self, input: &str) -> std::process::Output;
}

impl OutputWith for Command {
    fn output_with(&mut self, input: &str) -> std::process::Output {
        let mut child = self
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }
}
