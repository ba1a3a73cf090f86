//! Event hooks, as ZED runs zedlets: every executable in the hook directory whose name starts
//! with the event's subclass and a dash (`statechange-notify.sh`, `checksum-log`) or with
//! `all-` is run for each event, in name order, with the event's fields in its environment
//! under ZED's names: `ZEVENT_EID`, `ZEVENT_CLASS`, `ZEVENT_SUBCLASS`, `ZEVENT_TIME`,
//! `ZEVENT_POOL`, `ZEVENT_VDEV_GUID`, `ZEVENT_VDEV_PATH`, and each payload field as
//! `ZEVENT_<FIELD>` (`ZEVENT_VDEV_STATE`, `ZEVENT_VDEV_LASTSTATE`, ...). So a zedlet written
//! for ZED (mail on a fault, a log line per checksum error) works with few changes.
//!
//! # Model
//! One thread per daemon asks the engine for events newer than the last one it handled, once
//! a second, and runs the hooks of each in turn. The directory is `TARN_ZEDLETS` when set,
//! else `<rundir>/zed.d`; one that does not exist runs nothing (and is looked for again at
//! every pass, so hooks can be added while the daemon runs).
//!
//! # Failure model
//! A hook that fails or cannot start is logged (stderr, the daemon log) and the next one
//! runs; one still running after [`HOOK_TIMEOUT`] is killed, so a stuck mail command never
//! stops the events behind it. Events the ring dropped before the thread saw them are not
//! run (the ring holds the last few thousand).
//!
//! # Not here
//! ZED's `zed.rc` settings and its rate limiting; hooks run as the daemon's user.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use tarn_engine::{Engine, Event};

/// How long a hook may run before it is killed.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// How often the thread looks for new events.
const POLL: Duration = Duration::from_secs(1);

/// Starts the hook thread for `engine` (module doc).
pub fn start(engine: &Arc<Engine>, rundir: &Path) -> Result<(), String> {
    let dir = std::env::var_os("TARN_ZEDLETS").map_or_else(|| rundir.join("zed.d"), PathBuf::from);
    let weak = Arc::downgrade(engine);
    std::thread::Builder::new()
        .name("zedlets".into())
        .spawn(move || {
            let mut last = 0;
            while let Some(engine) = weak.upgrade() {
                let events = engine.events(None, last, false);
                drop(engine);
                for event in events {
                    last = last.max(event.eid);
                    run_hooks(&dir, &event);
                }
                std::thread::sleep(POLL);
            }
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start the event hook thread: {e}"))
}

/// The subclass of a ZFS event class: `statechange` of `sysevent.fs.zfs.statechange`.
fn subclass(class: &str) -> &str {
    class.rsplit('.').next().unwrap_or(class)
}

/// The hooks of `dir` for `event`, in name order.
fn hooks_for(dir: &Path, event: &Event) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let own = format!("{}-", subclass(&event.class));
    let mut hooks: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("all-") || name.starts_with(&own)
        })
        .filter(|path| is_executable(path))
        .collect();
    hooks.sort();
    hooks
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The environment a hook gets for `event` (module doc).
fn environment(event: &Event) -> Vec<(String, String)> {
    let mut env = vec![
        ("ZEVENT_EID".to_string(), event.eid.to_string()),
        ("ZEVENT_CLASS".to_string(), event.class.clone()),
        (
            "ZEVENT_SUBCLASS".to_string(),
            subclass(&event.class).to_string(),
        ),
        ("ZEVENT_TIME".to_string(), event.time.to_string()),
        ("ZEVENT_POOL".to_string(), event.pool.clone()),
    ];
    if event.vdev_guid != 0 {
        env.push((
            "ZEVENT_VDEV_GUID".to_string(),
            format!("{:#x}", event.vdev_guid),
        ));
    }
    if !event.vdev_path.is_empty() {
        env.push(("ZEVENT_VDEV_PATH".to_string(), event.vdev_path.clone()));
    }
    for (name, value) in &event.payload {
        let name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect();
        env.push((format!("ZEVENT_{name}"), value.clone()));
    }
    env
}

fn run_hooks(dir: &Path, event: &Event) {
    for hook in hooks_for(dir, event) {
        if let Err(why) = run_hook(&hook, event) {
            eprintln!("event hook {}: {why}", hook.display());
        }
    }
}

fn run_hook(hook: &Path, event: &Event) -> Result<(), String> {
    let mut child = Command::new(hook)
        .envs(environment(event))
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start: {e}"))?;
    let clock = tarn_base::SystemClock::new();
    let deadline = u64::try_from(HOOK_TIMEOUT.as_nanos()).unwrap_or(u64::MAX);
    let start = tarn_base::Clock::monotonic_ns(&clock);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("exited with {status}")),
            Ok(None) if tarn_base::Clock::monotonic_ns(&clock) - start > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("killed after {} s", HOOK_TIMEOUT.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Event {
        Event {
            eid: 7,
            time: 1_700_000_000,
            class: "sysevent.fs.zfs.statechange".into(),
            pool: "tank".into(),
            vdev_guid: 0xabc,
            vdev_path: "/dev/sdb".into(),
            payload: vec![("vdev_state".into(), "FAULTED".into())],
        }
    }

    #[test]
    fn environment_uses_zeds_names() {
        let env = environment(&event());
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("ZEVENT_SUBCLASS"), Some("statechange"));
        assert_eq!(get("ZEVENT_CLASS"), Some("sysevent.fs.zfs.statechange"));
        assert_eq!(get("ZEVENT_VDEV_GUID"), Some("0xabc"));
        assert_eq!(get("ZEVENT_VDEV_PATH"), Some("/dev/sdb"));
        assert_eq!(get("ZEVENT_VDEV_STATE"), Some("FAULTED"));
        assert_eq!(get("ZEVENT_EID"), Some("7"));
    }
}
