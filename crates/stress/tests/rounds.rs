//! The stress program's own promise, checked without a kill: after a few rounds (fewer than it
//! has objects, so some objects were never written) and a clean export, a restart verifies
//! every round, every file its clones changed and every flushed volume step. A restart that
//! found "lost data" here would make every kill-loop failure meaningless (it once did: the
//! program wrote to hard-coded object ids that belong to the root filesystem).

use std::process::Command;

fn stress(dir: &std::path::Path, rounds: u64) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tarn-stress"))
        .arg("--dir")
        .arg(dir)
        .args(["--seed", "25548", "--rounds", &rounds.to_string()])
        .output()
        .expect("tarn-stress runs")
}

#[test]
fn a_restart_verifies_rounds_that_left_objects_unwritten() {
    let dir = tempfile::tempdir().unwrap();
    for (rounds, verified) in [(3, None), (0, Some(3)), (9, Some(3)), (0, Some(12))] {
        let out = stress(dir.path(), rounds);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "--rounds {rounds}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(n) = verified {
            // Four flushed volume steps per round.
            let want = format!(
                "verified {n} committed rounds (files and clones), {} flushed volume steps",
                n * 4
            );
            assert!(stdout.contains(&want), "--rounds {rounds}: {stdout}");
        }
    }
}
