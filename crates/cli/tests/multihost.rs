//! Multihost protection through the real binary: two daemons with two host ids (two rundirs,
//! `TARN_HOSTID`) on the same device files, as two hosts on shared disks would be.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// One host: a daemon rundir and a host id. Stops its daemon when dropped.
struct Host {
    rundir: PathBuf,
    hostid: &'static str,
    root: PathBuf,
}

impl Host {
    fn new(rig: &Rig, name: &str, hostid: &'static str) -> Host {
        Host {
            rundir: rig.root().join(name),
            hostid,
            root: rig.root().to_path_buf(),
        }
    }

    fn run(&self, line: &str) -> Run {
        let env = [
            ("TARN_HOSTID", self.hostid),
            ("TARN_MULTIHOST_INTERVAL_MS", "100"),
        ];
        run_tarn(&self.rundir, &self.root, line, &env)
    }

    fn ok(&self, line: &str) -> String {
        self.run(line).ok(line)
    }

    /// The host dies: SIGKILL to its daemon, no export, nothing flushed.
    fn kill(&self) {
        let pid = std::fs::read_to_string(self.rundir.join("tarn.pid")).unwrap();
        let status = Command::new("kill")
            .args(["-9", pid.trim()])
            .status()
            .unwrap();
        assert!(status.success());
        wait_for_unlock(&self.rundir.join("tarn.pid"));
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.run("daemon --stop");
    }
}

/// Waits (up to 10 s) until the killed daemon's pid lock is released.
fn wait_for_unlock(pid_file: &Path) {
    for _ in 0..100 {
        let file = std::fs::File::open(pid_file).unwrap();
        if file.try_lock().is_ok() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the killed daemon still holds {}", pid_file.display());
}

// DESCRIPTION: a pool with multihost=on, owned by host 0xa, cannot be imported by host 0xb
// (even with -f) while 0xa's daemon runs; when that daemon dies, 0xb imports it without -f
// after watching the heartbeat stand still.
// STRATEGY: two daemons on the same files; the refusal is one `cannot import` line naming
// the owner; after SIGKILL of the owner, the import succeeds and status shows the pool. On a
// mirror and on a dRAID (whose heartbeat labels are on every child as on any vdev).
#[test]
fn a_second_host_is_refused_while_the_owner_lives_and_imports_after_it_died() {
    second_host_refused_then_imports("mirror", 2);
    second_host_refused_then_imports("draid1:2d:1s:5c", 5);
}

fn second_host_refused_then_imports(layout: &str, count: usize) {
    let rig = Rig::new();
    let devices = rig.devices("d", "disk", count);
    let dir = rig.dir_of("d");
    let owner = Host::new(&rig, "run-a", "0xa");
    let other = Host::new(&rig, "run-b", "0xb");
    owner.ok(&format!(
        "pool create -o multihost=on -m none tank {layout} {}",
        join(&devices)
    ));
    assert!(
        owner
            .ok("pool get -H -o value multihost tank")
            .starts_with("on")
    );

    for line in [
        format!("pool import -d {dir} tank"),
        format!("pool import -f -d {dir} tank"),
    ] {
        let run = other.run(&line);
        assert_eq!(run.code, Some(1), "{run:?}");
        assert_eq!(run.stdout, "", "{run:?}");
        assert!(
            run.stderr
                .starts_with("cannot import 'tank': pool is in use by host 0xa (multihost=on); "),
            "{run:?}"
        );
        assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
    }
    assert_eq!(other.ok("pool list -H -o name"), "");
    assert_eq!(owner.ok("pool list -H -o name,health"), "tank\tONLINE\n");

    owner.kill();
    other.ok(&format!("pool import -d {dir} tank"));
    assert_eq!(other.ok("pool list -H -o name,health"), "tank\tONLINE\n");
    let status = other.ok("pool status tank");
    assert!(status.contains(" state: ONLINE\n"), "{status}");
}
