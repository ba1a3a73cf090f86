//! Goal: the real `tarn` binary starts its daemon on demand, reaches it, and stops it.
//! Method: a temporary rundir; assertions avoid what the engine answers (it may refuse or
//! serve the request) and check only the front-end contract around it.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::path::Path;
use std::process::{Command, Output};

fn tarn(rundir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tarn"))
        .arg("--rundir")
        .arg(rundir)
        .args(args)
        .output()
        .expect("tarn runs")
}

#[test]
fn autostart_serve_and_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rundir = dir.path().join("run");
    let socket = rundir.join("tarn.sock");

    let stop = tarn(&rundir, &["daemon", "--stop"]);
    assert_eq!(stop.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&stop.stderr),
        format!(
            "cannot connect to tarn daemon at {}: no such file or directory\n",
            socket.display()
        )
    );

    let list = tarn(&rundir, &["pool", "list", "-H"]);
    let stderr = String::from_utf8_lossy(&list.stderr);
    assert!(matches!(list.status.code(), Some(0 | 1)), "{list:?}");
    assert!(!stderr.contains("cannot connect"), "{stderr}");
    assert!(stderr.lines().count() <= 1, "one line at most: {stderr}");
    assert!(socket.exists(), "daemon autostarted");

    let second = tarn(&rundir, &["daemon"]);
    assert_eq!(second.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&second.stderr)
            .starts_with("cannot start tarn daemon: a tarn daemon is already running for "),
        "{second:?}"
    );

    let stop = tarn(&rundir, &["daemon", "--stop"]);
    assert_eq!(stop.status.code(), Some(0), "{stop:?}");
    assert!(!socket.exists(), "socket removed by a clean stop");
}

#[test]
fn grammar_errors_need_no_daemon() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rundir = dir.path().join("run");
    let out = tarn(&rundir, &["pool", "create", "tank", "mirror", "/d/a"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "cannot create 'tank': invalid vdev specification: mirror requires at least 2 devices\n"
    );
    assert!(
        !rundir.exists(),
        "no daemon was started for a refused command"
    );
}
