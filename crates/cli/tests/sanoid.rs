//! sanoid and syncoid (Debian's `sanoid` package, unpatched) against tarn pools through the
//! `zfs` and `zpool` entry points (issue 21): a directory of links named `zfs` and `zpool`
//! to the tarn binary goes first on their PATH, and `TARN_RUNDIR`/`TARN_ALTROOT` point them
//! at the rig's daemon, so they run tarn exactly as they run ZFS.
//!
//! These tests never skip for a missing sanoid: CI installs it (`.ci/run`), and a missing
//! tool must fail here rather than pass unseen. They skip only without /dev/fuse (syncoid's
//! data is written through a mount) or when not root.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::Rig;

fn host_or_skip(test: &str) -> bool {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP {test}: /dev/fuse is absent");
        return false;
    }
    // The effective uid, second of the `Uid:` line.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(str::to_string));
    if euid.as_deref() != Some("0") {
        eprintln!("SKIP {test}: not root");
        return false;
    }
    true
}

/// The Debian package's programs; a missing one fails the test (CI installs them).
fn require(tool: &str) -> PathBuf {
    let path = Path::new("/usr/sbin").join(tool);
    assert!(
        path.exists(),
        "{} is missing: install Debian's sanoid package (`apt-get install sanoid`, as .ci/run \
         does); this test does not skip without it",
        path.display()
    );
    path
}

/// The rig's world as sanoid and syncoid see it: `bin/zfs` and `bin/zpool` first on PATH.
struct Tools<'a> {
    rig: &'a Rig,
    path: String,
}

impl<'a> Tools<'a> {
    fn new(rig: &'a Rig) -> Tools<'a> {
        let bin = rig.root().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for name in ["zfs", "zpool"] {
            std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tarn"), bin.join(name)).unwrap();
        }
        let system = std::env::var("PATH").unwrap_or_default();
        let path = format!("{}:{system}", bin.display());
        Tools { rig, path }
    }

    fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command
            .current_dir(self.rig.root())
            .env("PATH", &self.path)
            .env("TARN_RUNDIR", &self.rig.rundir)
            .env("TARN_ALTROOT", self.rig.root().join("altroot"));
        command
    }

    /// `zfs ARGS` or `zpool ARGS` through the entry point, as the tools call them.
    fn zfs(&self, program: &str, line: &str) -> Output {
        let bin = self.rig.root().join("bin").join(program);
        self.command(&bin)
            .args(line.split(' ').filter(|w| !w.is_empty()))
            .output()
            .unwrap()
    }

    fn zfs_ok(&self, program: &str, line: &str) -> String {
        let out = self.zfs(program, line);
        assert!(out.status.success(), "`{program} {line}`: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }
}

/// stdout (then stderr) of a tool's run, and its exit status.
fn text(out: &Output) -> (Option<i32>, String) {
    let mut all = String::from_utf8_lossy(&out.stdout).into_owned();
    all.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code(), all)
}

/// sanoid's config directory: the package's defaults and a policy for `tank/data` that
/// keeps two hourly and one daily snapshot and no frequent ones (so existing frequent
/// snapshots are pruned at once), and is critical without an hourly snapshot.
fn sanoid_config(rig: &Rig) -> PathBuf {
    let dir = rig.root().join("sanoid");
    for sub in ["conf", "cache", "run"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let defaults = Path::new("/usr/share/sanoid/sanoid.defaults.conf");
    std::fs::copy(defaults, dir.join("conf/sanoid.defaults.conf")).unwrap();
    let policy = "\
[tank/data]
\tuse_template = test

[template_test]
\tfrequently = 0
\thourly = 2
\tdaily = 1
\tmonthly = 0
\tyearly = 0
\tautosnap = yes
\tautoprune = yes
\thourly_warn = 90m
\thourly_crit = 360m
\tdaily_warn = 48h
\tdaily_crit = 60h
";
    std::fs::write(dir.join("conf/sanoid.conf"), policy).unwrap();
    dir
}

/// The names of `tank/data`'s snapshots, oldest first, as sanoid lists them.
fn snapshots(tools: &Tools) -> Vec<String> {
    tools
        .zfs_ok(
            "zfs",
            "list -H -o name -t snapshot -s creation -d 1 tank/data",
        )
        .lines()
        .map(|name| name.trim_start_matches("tank/data@").to_string())
        .collect()
}

/// Waits (up to 60 s) for the pool's health to become `want` (the daemon's device check
/// runs in the background).
fn wait_health(tools: &Tools, want: &str) {
    for _ in 0..600 {
        if tools.zfs_ok("zpool", "list -H -o health tank").trim() == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("tank never became {want}");
}

// DESCRIPTION: sanoid's cron run with a policy takes the hourly and daily snapshots it
// lacks and prunes the frequent ones the policy no longer keeps, and a second run changes
// nothing; `--monitor-snapshots` is OK, then CRITICAL once the hourly snapshot is gone;
// `--monitor-health` is OK, WARNING with a device offline, CRITICAL when a second one of
// the raidz1 fails.
// STRATEGY: unpatched sanoid with `--configdir`, `--cache-dir`, `--run-dir` in the rig,
// `zfs`/`zpool` the entry points; its Nagios exit codes and first words checked.
#[test]
fn sanoid_takes_prunes_and_monitors() {
    if !host_or_skip("sanoid_takes_prunes_and_monitors") {
        return;
    }
    let rig = Rig::new();
    let tools = Tools::new(&rig);
    let sanoid = Sanoid {
        program: require("sanoid"),
        dir: sanoid_config(&rig),
        tools: &tools,
    };
    let devices = rig.devices("d", "disk", 3);
    tools.zfs_ok(
        "zpool",
        &format!("create tank raidz1 {}", devices.join(" ")),
    );
    tools.zfs_ok("zfs", "create tank/data");
    let taken = cron_takes_and_prunes(&sanoid);
    monitor_snapshots(&sanoid, &taken);
    monitor_health(&sanoid, &devices);
}

/// sanoid run with the rig's directories.
struct Sanoid<'a> {
    program: PathBuf,
    dir: PathBuf,
    tools: &'a Tools<'a>,
}

impl Sanoid<'_> {
    fn run(&self, args: &[&str]) -> (Option<i32>, String) {
        let out = self
            .tools
            .command(&self.program)
            .arg(format!("--configdir={}", self.dir.join("conf").display()))
            .arg(format!("--cache-dir={}", self.dir.join("cache").display()))
            .arg(format!("--run-dir={}", self.dir.join("run").display()))
            .args(args)
            .output()
            .unwrap();
        text(&out)
    }

    /// sanoid reads its cache before `--force-update` refreshes it: refresh in a run first.
    fn refresh(&self) {
        assert_eq!(self.run(&["--force-update"]).0, Some(0));
    }
}

/// Two old frequent snapshots, then `--cron` twice: the first takes an hourly and a daily
/// snapshot and prunes the frequent ones, the second changes nothing. Returns the names.
fn cron_takes_and_prunes(sanoid: &Sanoid) -> Vec<String> {
    let tools = sanoid.tools;
    let old = [
        "autosnap_2020-01-01_00:00:00_frequently",
        "autosnap_2020-01-01_00:15:00_frequently",
    ];
    for name in old {
        tools.zfs_ok("zfs", &format!("snapshot tank/data@{name}"));
    }
    // sanoid prunes what was created before the second it runs in; and its two cron runs
    // must not straddle a minute (an hour or its daily time may begin there).
    std::thread::sleep(Duration::from_millis(1100));
    #[allow(clippy::disallowed_methods)] // sanoid decides by the wall clock.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    if now % 60 >= 45 {
        std::thread::sleep(Duration::from_secs(61 - now % 60));
    }
    let (code, out) = sanoid.run(&["--cron", "--verbose"]);
    assert_eq!(code, Some(0), "{out}");
    let after = snapshots(tools);
    assert!(
        old.iter().all(|o| !after.iter().any(|s| s == o)),
        "frequent snapshots pruned: {after:?}\n{out}"
    );
    let kinds = |kind: &str| after.iter().filter(|s| s.ends_with(kind)).count();
    assert_eq!(
        (kinds("_hourly"), kinds("_daily")),
        (1, 1),
        "{after:?}\n{out}"
    );
    assert_eq!(after.len(), 2, "{after:?}");

    let (code, out) = sanoid.run(&["--cron", "--force-update"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        snapshots(tools),
        after,
        "a second run in the same hour: {out}"
    );
    after
}

/// `--monitor-snapshots`: OK, then CRITICAL once the hourly snapshot is destroyed.
fn monitor_snapshots(sanoid: &Sanoid, taken: &[String]) {
    sanoid.refresh();
    let (code, out) = sanoid.run(&["--monitor-snapshots"]);
    assert_eq!((code, out.starts_with("OK: ")), (Some(0), true), "{out}");
    let hourly = taken.iter().find(|s| s.ends_with("_hourly")).unwrap();
    sanoid
        .tools
        .zfs_ok("zfs", &format!("destroy tank/data@{hourly}"));
    sanoid.refresh();
    let (code, out) = sanoid.run(&["--monitor-snapshots"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("CRIT: tank/data has no hourly snapshots at all!"),
        "{out}"
    );
}

/// `--monitor-health`: OK, WARNING with one device of the raidz1 offline, CRITICAL once a
/// second one is gone.
fn monitor_health(sanoid: &Sanoid, devices: &[String]) {
    let (code, out) = sanoid.run(&["--monitor-health"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("OK ZPOOL tank : ONLINE {Size:"), "{out}");

    sanoid
        .tools
        .zfs_ok("zpool", &format!("offline tank {}", devices[0]));
    let (code, out) = sanoid.run(&["--monitor-health"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.starts_with("*** WARNING *** WARNING ZPOOL tank : DEGRADED"),
        "{out}"
    );
    assert!(out.contains(&format!("{}:OFFLINE", devices[0])), "{out}");

    std::fs::remove_file(&devices[1]).unwrap();
    wait_health(sanoid.tools, "FAULTED");
    let (code, out) = sanoid.run(&["--monitor-health"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.starts_with("*** CRITICAL *** CRITICAL ZPOOL tank : FAULTED"),
        "{out}"
    );
}

/// `n` pseudo-random bytes (a fixed xorshift, so the data does not compress away).
fn noise(n: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(n);
    out
}

/// The descendants of process `root` as (pid, command name), from /proc.
fn descendants(root: u32) -> Vec<(u32, String)> {
    let mut table = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split at the last ')'.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        if let Some(ppid) = ppid.and_then(|p| p.parse::<u32>().ok()) {
            table.push((pid, ppid, comm));
        }
    }
    let mut found = vec![root];
    let mut out = Vec::new();
    while let Some(parent) = found.pop() {
        for (pid, ppid, comm) in &table {
            if *ppid == parent {
                found.push(*pid);
                out.push((*pid, comm.clone()));
            }
        }
    }
    out
}

/// Bytes `pid` has read so far (`rchar` of /proc/PID/io).
fn bytes_read(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .find_map(|line| line.strip_prefix("rchar: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Runs syncoid at 1 MB/s and kills the middle of its pipe (its mbuffer, by pid) once
/// `after` bytes went through; returns syncoid's exit status and output.
fn syncoid_with_pipe_killed(tools: &Tools, syncoid: &Path, after: u64) -> (Option<i32>, String) {
    let child = tools
        .command(syncoid)
        .args(["--source-bwlimit=1m", "src/ds", "dst/ds"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut killed = false;
    for _ in 0..1200 {
        let buffer = descendants(child.id())
            .into_iter()
            .find(|(_, comm)| comm == "mbuffer");
        if let Some((pid, _)) = buffer.filter(|(pid, _)| bytes_read(*pid) >= after) {
            let status = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .unwrap();
            killed = status.success();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let (code, text) = text(&out);
    assert!(
        killed,
        "syncoid's mbuffer never moved {after} bytes: {code:?} {text}"
    );
    (code, text)
}

/// Pools `src` and `dst`, one device each, and the dataset `src/ds`.
fn two_pools(rig: &Rig, tools: &Tools) {
    let src = rig.devices("s", "disk", 1);
    let dst = rig.devices("t", "disk", 1);
    tools.zfs_ok("zpool", &format!("create src {}", src[0]));
    tools.zfs_ok("zpool", &format!("create dst {}", dst[0]));
    tools.zfs_ok("zfs", "create src/ds");
}

// DESCRIPTION: syncoid replicates a dataset between two tarn pools: the initial run creates
// the target from the oldest snapshot and brings it to a new sync snapshot, an incremental
// run carries new data, and when the pipe of a later run is killed mid-stream (the target
// keeps a partial receive and its `receive_resume_token`) the next run resumes it with
// `send -t` and finishes; every file on the target matches the source.
// STRATEGY: unpatched syncoid, local (`syncoid src/ds dst/ds`), through the entry points;
// data written through the FUSE mounts; the pipe broken by SIGKILL of syncoid's own mbuffer
// (at 1 MB/s, `--source-bwlimit`) once 2 MiB went through it.
#[test]
fn syncoid_replicates_and_resumes() {
    if !host_or_skip("syncoid_replicates_and_resumes") {
        return;
    }
    let syncoid = require("syncoid");
    let rig = Rig::new();
    let tools = Tools::new(&rig);
    two_pools(&rig, &tools);
    let mounted = rig.root().join("altroot/src/ds");
    let replica = rig.root().join("altroot/dst/ds");
    std::fs::write(mounted.join("one"), noise(1 << 20, 1)).unwrap();
    tools.zfs_ok("zfs", "snapshot src/ds@first");
    let sync = || {
        // syncoid names its sync snapshots to the second: never two runs in one second.
        std::thread::sleep(Duration::from_millis(1100));
        let out = tools
            .command(&syncoid)
            .args(["src/ds", "dst/ds"])
            .output()
            .unwrap();
        text(&out)
    };
    let same = |name: &str| {
        let a = std::fs::read(mounted.join(name)).unwrap();
        let b = std::fs::read(replica.join(name)).unwrap();
        assert!(a == b, "{name} differs on the target");
    };

    let (code, out) = sync();
    assert_eq!(code, Some(0), "initial: {out}");
    assert!(
        out.contains("Sending oldest full snapshot src/ds@first"),
        "{out}"
    );
    same("one");
    let target = tools.zfs_ok("zfs", "list -H -o name -t snapshot -d 1 dst/ds");
    assert!(
        target.starts_with("dst/ds@first\ndst/ds@syncoid_"),
        "{target}"
    );

    std::fs::write(mounted.join("two"), noise(2 << 20, 2)).unwrap();
    let (code, out) = sync();
    assert_eq!(code, Some(0), "incremental: {out}");
    assert!(out.contains("Sending incremental src/ds@syncoid_"), "{out}");
    same("two");

    std::fs::write(mounted.join("three"), noise(8 << 20, 3)).unwrap();
    tools.zfs_ok("zfs", "snapshot src/ds@third");
    std::thread::sleep(Duration::from_millis(1100));
    let (code, out) = syncoid_with_pipe_killed(&tools, &syncoid, 2 << 20);
    assert_ne!(code, Some(0), "the broken pipe is an error: {out}");
    assert!(out.contains("partially received stream is saved"), "{out}");
    let token = tools.zfs_ok("zfs", "get -H -o value receive_resume_token dst/ds");
    assert!(token.starts_with("1-"), "{token}");

    let (code, out) = sync();
    assert_eq!(code, Some(0), "resume: {out}");
    assert!(
        out.contains("Resuming interrupted zfs send/receive"),
        "{out}"
    );
    let token = tools.zfs_ok("zfs", "get -H -o value receive_resume_token dst/ds");
    assert_eq!(token, "-\n");
    for name in ["one", "two", "three"] {
        same(name);
    }
    let target = tools.zfs_ok("zfs", "list -H -o name -t snapshot -d 1 dst/ds");
    assert!(target.contains("dst/ds@third\n"), "{target}");
}
