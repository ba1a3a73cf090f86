//! Shared rig for the CLI's system tests: a temporary directory with sparse device files, a
//! private daemon rundir, `tarn` invocations, and byte images of every file so a refused
//! command can be shown to change nothing.

#![allow(dead_code)] // Each test binary uses a different part of the rig.
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Size of every device file (sparse).
pub(crate) const DEVICE_SIZE: u64 = 128 << 20;
/// Two labels (L0+L1 at the front, L2+L3 at the back) of 256 KiB each.
pub(crate) const LABEL_PAIR: u64 = 512 << 10;
/// Granularity of a device image: chunks that are all zero are not stored.
pub(crate) const CHUNK: usize = 64 << 10;
pub(crate) static ZERO_CHUNK: [u8; CHUNK] = [0; CHUNK];

/// What one `tarn` invocation did.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Every regular file under the rig's directory (the rundir excluded), with its length and
/// its non-zero chunks: equal images mean byte-identical files.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Image(pub(crate) BTreeMap<PathBuf, FileImage>);

#[derive(PartialEq, Eq)]
pub(crate) struct FileImage {
    len: u64,
    chunks: BTreeMap<u64, Vec<u8>>,
}

impl std::fmt::Debug for FileImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes, {} non-zero chunks",
            self.len,
            self.chunks.len()
        )
    }
}

pub(crate) fn file_image(path: &Path) -> FileImage {
    let mut file = File::open(path).expect("open file for image");
    let mut chunks = BTreeMap::new();
    let mut buffer = vec![0u8; 16 * CHUNK];
    let mut offset = 0u64;
    loop {
        let mut filled = 0;
        while filled < buffer.len() {
            let n = file
                .read(&mut buffer[filled..])
                .expect("read file for image");
            if n == 0 {
                break;
            }
            filled += n;
        }
        for (i, chunk) in buffer[..filled].chunks(CHUNK).enumerate() {
            if chunk != &ZERO_CHUNK[..chunk.len()] {
                chunks.insert(offset + (i * CHUNK) as u64, chunk.to_vec());
            }
        }
        offset += filled as u64;
        if filled < buffer.len() {
            break;
        }
    }
    FileImage {
        len: offset,
        chunks,
    }
}

pub(crate) fn collect_files(dir: &Path, skip: &[&Path], out: &mut BTreeMap<PathBuf, FileImage>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|entry| entry.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if skip.contains(&path.as_path()) {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        if meta.is_dir() {
            collect_files(&path, skip, out);
        } else if meta.is_file() {
            out.insert(path.clone(), file_image(&path));
        }
    }
}

/// Panics with the names of the files (and chunk offsets) that differ.
pub(crate) fn assert_same_image(before: &Image, after: &Image, what: &str) {
    if before == after {
        return;
    }
    let mut differences = Vec::new();
    for (path, old) in &before.0 {
        match after.0.get(path) {
            None => differences.push(format!("{} was removed", path.display())),
            Some(new) if new.len != old.len => differences.push(format!(
                "{} changed length {} -> {}",
                path.display(),
                old.len,
                new.len
            )),
            Some(new) => {
                let offsets: Vec<u64> = old
                    .chunks
                    .keys()
                    .chain(new.chunks.keys())
                    .filter(|offset| old.chunks.get(offset) != new.chunks.get(offset))
                    .copied()
                    .collect();
                if !offsets.is_empty() {
                    differences.push(format!(
                        "{} changed at chunk offsets {offsets:?}",
                        path.display()
                    ));
                }
            }
        }
    }
    for path in after.0.keys().filter(|path| !before.0.contains_key(*path)) {
        differences.push(format!("{} was created", path.display()));
    }
    panic!("{what} changed files: {differences:?}");
}

/// Runs `tarn --rundir <rundir> <line>` (`line` split on spaces) in `root`, with datasets
/// mounted under `root/altroot` and the extra environment `env`.
pub(crate) fn run_tarn(rundir: &Path, root: &Path, line: &str, env: &[(&str, &str)]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .arg("--rundir")
        .arg(rundir)
        .args(line.split(' ').filter(|word| !word.is_empty()))
        .current_dir(root)
        .env_remove("TARN_RUNDIR")
        // Datasets mount under the rig's own directory, never at the host's /tank.
        .env("TARN_ALTROOT", root.join("altroot"))
        .envs(env.iter().copied())
        .output()
        .expect("tarn runs");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
    }
}

impl Run {
    /// The stdout of `tarn <line>`, which must have succeeded silently on stderr.
    pub(crate) fn ok(self, line: &str) -> String {
        assert_eq!(self.code, Some(0), "`tarn {line}` failed: {self:?}");
        assert_eq!(self.stderr, "", "`tarn {line}` wrote to stderr: {self:?}");
        self.stdout
    }
}

/// The rows of scripted (`-H`) output, split into their tab-separated cells.
pub(crate) fn tsv_rows(text: &str) -> Vec<Vec<&str>> {
    text.lines().map(|l| l.split('\t').collect()).collect()
}

/// The index of the `cache` heading among the rows of `pool iostat -v -H`.
pub(crate) fn cache_heading(rows: &[Vec<&str>]) -> usize {
    rows.iter()
        .position(|r| r[0] == "cache")
        .expect("cache row")
}

/// One test's world: a temporary directory with device files, and a daemon rundir in it.
pub(crate) struct Rig {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) rundir: PathBuf,
}

impl Drop for Rig {
    fn drop(&mut self) {
        // Stop the daemon this test may have autostarted; refused (no daemon) is fine.
        let _ = Command::new(env!("CARGO_BIN_EXE_tarn"))
            .arg("--rundir")
            .arg(&self.rundir)
            .args(["daemon", "--stop"])
            .output();
    }
}

impl Rig {
    pub(crate) fn new() -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_str().expect("utf-8 temp path");
        assert!(
            !root.contains(char::is_whitespace),
            "commands are split on spaces: {root}"
        );
        let rundir = dir.path().join("run");
        Rig { dir, rundir }
    }

    /// A rig whose directory is `/tmp/<prefix>` plus random letters (suites that must keep
    /// their files under a known prefix).
    pub(crate) fn with_prefix(prefix: &str) -> Rig {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in("/tmp")
            .expect("tempdir");
        let rundir = dir.path().join("run");
        Rig { dir, rundir }
    }

    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Creates `root/sub/` and `count` sparse device files `name0..` of [`DEVICE_SIZE`].
    pub(crate) fn devices(&self, sub: &str, name: &str, count: usize) -> Vec<String> {
        let dir = self.root().join(sub);
        std::fs::create_dir_all(&dir).expect("device dir");
        (0..count)
            .map(|i| {
                let path = dir.join(format!("{name}{i}"));
                sparse(&path, DEVICE_SIZE);
                path.to_str().expect("utf-8 path").to_string()
            })
            .collect()
    }

    /// Pool `tank`, a raidz1 of three disk files under `d`, mounted at `/tank` (under the
    /// rig's altroot).
    pub(crate) fn mounted_tank(&self) {
        let devices = self.devices("d", "disk", 3);
        self.ok(&format!(
            "pool create -m /tank tank raidz1 {}",
            join(&devices)
        ));
    }

    pub(crate) fn dir_of(&self, sub: &str) -> String {
        self.root().join(sub).to_str().expect("utf-8").to_string()
    }

    /// Runs `tarn --rundir <rundir> <line>`; `line` is split on spaces.
    pub(crate) fn run(&self, line: &str) -> Run {
        run_tarn(&self.rundir, self.root(), line, &[])
    }

    /// Runs a command that must succeed silently on stderr; returns its stdout. A failure
    /// shows the end of the daemon's log beside the command's output.
    pub(crate) fn ok(&self, line: &str) -> String {
        let run = self.run(line);
        if run.code != Some(0) || !run.stderr.is_empty() {
            let log = std::fs::read_to_string(self.rundir.join("daemon.log")).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(30)..].join("\n");
            panic!("`tarn {line}` failed: {run:?}\ndaemon.log, last lines:\n{tail}");
        }
        run.stdout
    }

    /// `count` device files `d/disk*`, the last `spares` of them hot spares of a new pool
    /// `tank` of `layout` (`raidz1`, `mirror`, ...) on the others; returns the pool's data
    /// devices and its spares.
    pub(crate) fn tank_with_spares(
        &self,
        layout: &str,
        count: usize,
        spares: usize,
    ) -> (Vec<String>, Vec<String>) {
        let mut data = self.devices("d", "disk", count);
        let spares = data.split_off(count - spares);
        self.ok(&format!(
            "pool create tank {layout} {} spare {}",
            join(&data),
            join(&spares)
        ));
        (data, spares)
    }

    pub(crate) fn image(&self) -> Image {
        let mut files = BTreeMap::new();
        // Not the mounts under the altroot: reading through them records access times
        // (relatime), which commits a txg; the image is of the device files.
        let altroot = self.root().join("altroot");
        collect_files(self.root(), &[&self.rundir, &altroot], &mut files);
        Image(files)
    }

    /// Runs a command that must be refused (exit 1, one `cannot ` line, empty stdout) and
    /// must leave every file as in `baseline`; returns the stderr line without its newline.
    pub(crate) fn refused_against(&self, baseline: &Image, line: &str) -> String {
        let run = self.run(line);
        assert_eq!(run.code, Some(1), "`tarn {line}` was not refused: {run:?}");
        assert_eq!(run.stdout, "", "`tarn {line}`: {run:?}");
        assert_eq!(
            run.stderr.lines().count(),
            1,
            "`tarn {line}`: one stderr line: {run:?}"
        );
        assert!(
            run.stderr.starts_with("cannot ") && run.stderr.ends_with('\n'),
            "`tarn {line}`: {run:?}"
        );
        assert_same_image(baseline, &self.image(), &format!("refused `tarn {line}`"));
        run.stderr.trim_end_matches('\n').to_string()
    }

    pub(crate) fn refused(&self, line: &str) -> String {
        let baseline = self.image();
        self.refused_against(&baseline, line)
    }
}

pub(crate) fn sparse(path: &Path, size: u64) {
    let file = File::create(path).expect("create device file");
    file.set_len(size).expect("set_len");
}

/// Overwrites `len` bytes at `offset` with zeros (an admin's `dd if=/dev/zero`).
pub(crate) fn zero(path: &str, offset: u64, len: u64) {
    let mut file = OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open device file");
    file.seek(SeekFrom::Start(offset)).expect("seek");
    file.write_all(&vec![0u8; len as usize])
        .expect("write zeros");
    file.sync_all().expect("sync");
}

/// Wipes all four labels of a device: the front pair and the back pair.
pub(crate) fn wipe_labels(path: &str) {
    zero(path, 0, LABEL_PAIR);
    zero(path, DEVICE_SIZE - LABEL_PAIR, LABEL_PAIR);
}

pub(crate) fn join(paths: &[String]) -> String {
    paths.join(" ")
}

/// `zpool status` of a healthy single-raidz pool, in ZFS's exact layout: the NAME column is
/// as wide as the widest indented name (at least 10), then `  STATE(8) READ WRITE CKSUM`
/// with counters right-aligned in 5; spares have no counters.
pub(crate) fn healthy_status(
    pool: &str,
    top: &str,
    leaves: &[String],
    spares: &[String],
) -> String {
    let width = leaves
        .iter()
        .map(|leaf| leaf.len() + 4)
        .chain(spares.iter().map(|spare| spare.len() + 2))
        .chain([pool.len(), top.len() + 2, 10])
        .max()
        .expect("non-empty");
    let row = |indent: usize, name: &str, state: &str| {
        let pad = width - indent;
        format!(
            "\t{}{name:<pad$}  {state:<8} {:>5} {:>5} {:>5}\n",
            " ".repeat(indent),
            0,
            0,
            0
        )
    };
    let mut out = format!(
        concat!(
            "  pool: {pool}\n state: ONLINE\n  scan: none requested\nconfig:\n\n",
            "\t{:<width$}  {:<8} {:>5} {:>5} {:>5}\n"
        ),
        "NAME",
        "STATE",
        "READ",
        "WRITE",
        "CKSUM",
        pool = pool,
        width = width,
    );
    out.push_str(&row(0, pool, "ONLINE"));
    out.push_str(&row(2, top, "ONLINE"));
    for leaf in leaves {
        out.push_str(&row(4, leaf, "ONLINE"));
    }
    if !spares.is_empty() {
        out.push_str("\tspares\n");
        for spare in spares {
            let pad = width - 2;
            out.push_str(&format!("\t  {spare:<pad$}  {:<8}\n", "AVAIL"));
        }
    }
    out.push_str("\nerrors: No known data errors\n");
    out
}

/// The `state:` of the first pool in a `pool status` text.
pub(crate) fn status_state(status: &str) -> &str {
    status
        .lines()
        .find_map(|line| line.strip_prefix(" state: "))
        .expect("a state line")
}

/// Name and state of the status/import row for `name` (`None` if there is no such row).
pub(crate) fn row_state<'a>(text: &'a str, name: &str) -> Option<Vec<&'a str>> {
    text.lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|words| words.first() == Some(&name))
        .map(|words| words[1..].to_vec())
}

/// Checks `YYYY-MM-DD.HH:MM:SS ` at the start of a history line; returns the rest.
pub(crate) fn history_command(line: &str) -> &str {
    let bytes = line.as_bytes();
    assert!(bytes.len() > 20, "history line too short: {line:?}");
    for (i, byte) in bytes[..20].iter().enumerate() {
        let expected_ok = match i {
            4 | 7 => *byte == b'-',
            10 => *byte == b'.',
            13 | 16 => *byte == b':',
            19 => *byte == b' ',
            _ => byte.is_ascii_digit(),
        };
        assert!(expected_ok, "history timestamp shape at {i}: {line:?}");
    }
    &line[20..]
}

/// The history lines of the single pool in `pool history <pool>` output.
pub(crate) fn history_commands(text: &str, pool: &str) -> Vec<String> {
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(format!("History for '{pool}':").as_str())
    );
    let commands: Vec<String> = lines
        .by_ref()
        .take_while(|line| !line.is_empty())
        .map(|line| history_command(line).to_string())
        .collect();
    assert_eq!(
        lines.next(),
        None,
        "one pool, ended by a blank line: {text:?}"
    );
    assert!(text.ends_with("\n\n"), "{text:?}");
    commands
}

/// Parses `pool import --list-txgs` output: TXG column, newest first.
pub(crate) fn listed_txgs(text: &str) -> Vec<u64> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(header, ["TXG", "TIMESTAMP", "DATE"], "{text}");
    lines
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(words.len(), 3, "{line:?}");
            let _: u64 = words[1].parse().expect("timestamp is a number");
            history_command(&format!("{} x", words[2]));
            words[0].parse().expect("txg is a number")
        })
        .collect()
}

// DESCRIPTION: a raidz2 pool over six files with one hot spare reports itself the way
// `zpool status` and `zpool list` do: the exact status block (pool/state/scan/config with
// raidz2-0, every file path, the spares section with AVAIL, the errors line), and list rows
// whose numbers are consistent with the devices.
// STRATEGY: build the expected status text from ZFS's format rules and compare it exactly;
// parse `list -H -p` and check every column against arithmetic on the device sizes.

/// Waits (up to 10 s) until every thread of process `pid` has exited: its /proc entry is
/// gone, or only the zombie leader is left. The leader turns zombie as soon as it exits,
/// while the other threads, which hold the process's files (the daemon's listening
/// socket), may still be dying; a connection the socket takes meanwhile is then reset.
pub(crate) fn wait_gone(pid: &str) {
    let zombie = |stat: &str| {
        stat.rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'))
    };
    for _ in 0..1000 {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return;
        };
        let exited = tasks.flatten().all(|task| {
            std::fs::read_to_string(task.path().join("stat")).map_or(true, |s| zombie(&s))
        });
        if exited {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("process {pid} still runs 10 s after SIGKILL");
}

/// The process id of the rig's daemon, from its pid file.
pub(crate) fn daemon_pid(rig: &Rig) -> String {
    let pid = std::fs::read_to_string(rig.rundir.join("tarn.pid")).expect("pid file");
    pid.trim().to_string()
}

/// SIGKILL to the rig's daemon, returning once it is gone (see [`wait_gone`]): kill(2)
/// returns before the process is.
pub(crate) fn kill_daemon(rig: &Rig) {
    let pid = daemon_pid(rig);
    let killed = Command::new("kill")
        .args(["-9", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    wait_gone(&pid);
}
