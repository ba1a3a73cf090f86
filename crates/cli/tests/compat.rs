//! ZFS compatibility of the output layouts (issue 21): `tarn pool X` and `zpool X`, `tarn X`
//! and `zfs X` print the same bytes, and those bytes are the golden file's, for the `-H`,
//! `-p`, `-o` and `-j` layouts of `status`, `list` and `get` on a fixed pool.
//!
//! The golden file (tests/golden/compat.txt) holds each command line and its output with the
//! rig's directory's random letters written `_` (widths stay as printed) and the
//! values that change from run to run (GUIDs, creation times, createtxg) masked. After an
//! intended layout change, regenerate it with `TARN_BLESS=1 cargo test -p tarn-cli --test
//! compat` and review the diff.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Rig;

/// The layouts compared: `tarn` arguments (the `zpool`/`zfs` line drops `pool` or nothing).
const LINES: &[&str] = &[
    "pool status tank",
    "pool status -x",
    "pool status -x tank",
    "pool status -j tank",
    "pool status -j --json-int --json-flat-vdevs tank",
    "pool list -H -p -o name,size,health,altroot",
    "pool list -o name,size,cap,health tank",
    "pool list -j -o name,size,health,altroot",
    "pool list -j --json-int -p -o name,size,health",
    "pool get -H -p -o name,property,value,source size,health,failmode tank",
    "pool get -j size,health,failmode tank",
    "pool get -H -o property,value,source feature@extensible_dataset,feature@bookmarks tank",
    "list -H -o name,type,mountpoint -t all -s name",
    "list -p -o name,type,compression,mountpoint -r tank",
    "list -H -p -o name,creation -t snapshot -s creation -d 1 tank/a",
    "list -j -o name,compression,mountpoint -t all",
    "get -H -p -o name,property,value,source compression,mountpoint,readonly tank/a",
    "get compression,mountpoint,type -r tank",
    "get -j -p compression,mountpoint,guid tank/a",
    "get -j --json-int -s local compression,atime -r tank",
    "-j list nope",
    "-j list --bogus",
    "--json-int pool list",
];

/// The rig's pool: raidz1 over three files, two datasets and snapshots, local properties.
fn fixed_pool(rig: &Rig) {
    let devices = rig.devices("d", "disk", 3);
    rig.ok(&format!("pool create tank raidz1 {}", devices.join(" ")));
    rig.ok("create -o compression=lz4 tank/a");
    rig.ok("create -o atime=off tank/a/b");
    rig.ok("snapshot -r tank/a@one");
    rig.ok("snapshot tank/a@two");
}

/// `bin/zpool` and `bin/zfs` in the rig: links to the tarn binary, as packaging sets up.
fn entry_points(rig: &Rig) -> PathBuf {
    let bin = rig.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["zpool", "zfs"] {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tarn"), bin.join(name)).unwrap();
    }
    bin
}

/// Runs `program --rundir R args` in the rig; stdout, stderr and exit status as one text.
fn output(rig: &Rig, program: &Path, args: &[&str]) -> String {
    let out = Command::new(program)
        .arg("--rundir")
        .arg(&rig.rundir)
        .args(args)
        .current_dir(rig.root())
        .env_remove("TARN_RUNDIR")
        .env("TARN_ALTROOT", rig.root().join("altroot"))
        .output()
        .unwrap();
    let mut text = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    if !stderr.is_empty() {
        text.push_str(&format!("[stderr]\n{stderr}"));
    }
    if out.status.code() != Some(0) {
        text.push_str(&format!("[exit {:?}]\n", out.status.code()));
    }
    text
}

/// Masks what differs between runs: the rig's directory, GUIDs, creation times, createtxg.
fn mask(text: &str, dir: &str) -> String {
    // The random letters of the directory become `_`: the same length keeps tables aligned.
    let prefix = "/tmp/tarn-compat-";
    let fixed = format!(
        "{prefix}{}",
        "_".repeat(dir.len().saturating_sub(prefix.len()))
    );
    let text = text.replace(dir, &fixed);
    let mut out = String::new();
    for line in text.lines() {
        out.push_str(&mask_line(line));
        out.push('\n');
    }
    out
}

fn mask_line(line: &str) -> String {
    // JSON: `"pool_guid": "123"`, `"createtxg": 5`, a vdev's `"guid": "123"`, the pool's
    // `txg` and a vdev's `alloc_space` (both move with the txgs a run happens to commit), a
    // guid or creation property's value.
    let keys = [
        "\"pool_guid\": ",
        "\"createtxg\": ",
        "\"guid\": ",
        "\"txg\": ",
        "\"alloc_space\": ",
    ];
    for key in keys {
        // Not a property's `"guid": {` (its value is on the next line: mask_guid_values).
        if let Some(at) = line.find(key)
            && !line[at + key.len()..].starts_with('{')
        {
            let end = line.ends_with(',');
            return format!("{}{key}N{}", &line[..at], if end { "," } else { "" });
        }
    }
    // Tab-separated rows: a `guid`/`creation` value or a creation column of digits.
    let cells: Vec<&str> = line.split('\t').collect();
    if cells.len() >= 2 {
        let masked: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                let after = |word: &str| i >= 1 && cells[i - 1] == word;
                let digits = cell.len() >= 9 && cell.bytes().all(|b| b.is_ascii_digit());
                if after("guid") || after("creation") || (i == 1 && digits && cells.len() == 2) {
                    "N".to_string()
                } else {
                    (*cell).to_string()
                }
            })
            .collect();
        return masked.join("\t");
    }
    line.to_string()
}

/// The GUID property's JSON value spans lines: mask the line after `"guid": {`.
fn mask_guid_values(text: &str) -> String {
    let mut out = String::new();
    let mut in_guid = false;
    for line in text.lines() {
        if in_guid && line.trim_start().starts_with("\"value\": ") {
            let indent = &line[..line.len() - line.trim_start().len()];
            out.push_str(&format!("{indent}\"value\": N,\n"));
            in_guid = false;
            continue;
        }
        in_guid |= line.trim_start().starts_with("\"guid\": {");
        out.push_str(line);
        out.push('\n');
    }
    out
}

// DESCRIPTION: the layouts scripts parse are the same under `tarn` and under the `zpool`
// and `zfs` entry points, and are the golden file's: `status` (text, `-x`, `-j`, flat
// vdevs, integers), `pool list` and `pool get` (`-H -p -o`, table, `-j`), `list` and `get`
// (`-H`, `-p`, `-o`, `-t`, `-s`, `-r`, `-j`, `--json-int`), and a refusal under `-j`.
// STRATEGY: one fixed pool in a directory of fixed length; each line run three ways is
// compared byte for byte (tarn vs entry point) and, masked, against tests/golden/compat.txt.
#[test]
fn layouts_match_the_golden_file_under_every_entry_point() {
    let rig = Rig::with_prefix("tarn-compat-");
    fixed_pool(&rig);
    let bin = entry_points(&rig);
    let tarn = PathBuf::from(env!("CARGO_BIN_EXE_tarn"));
    let dir = rig.root().to_str().unwrap().to_string();
    let mut transcript = String::new();
    for line in LINES {
        let words: Vec<&str> = line.split(' ').collect();
        let by_tarn = output(&rig, &tarn, &words);
        let (program, rest) = match words.iter().position(|w| *w == "pool") {
            Some(at) => {
                let mut rest = words.clone();
                rest.remove(at);
                (bin.join("zpool"), rest)
            }
            None => (bin.join("zfs"), words.clone()),
        };
        let by_entry = output(&rig, &program, &rest);
        let name = program.file_name().unwrap().to_str().unwrap();
        assert_eq!(
            by_tarn,
            by_entry,
            "`tarn {line}` and `{name} {}`",
            rest.join(" ")
        );
        let masked = mask_guid_values(&mask(&by_tarn, &dir));
        transcript.push_str(&format!("$ tarn {line}\n{masked}\n"));
    }
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/compat.txt");
    if std::env::var_os("TARN_BLESS").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &transcript).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&golden).unwrap_or_default();
    if expected != transcript {
        let first = expected
            .lines()
            .zip(transcript.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(transcript.lines().count()));
        panic!(
            "layouts differ from {} at line {}:\n  golden: {:?}\n  now:    {:?}\n\
             (TARN_BLESS=1 regenerates it after an intended change)\n{transcript}",
            golden.display(),
            first + 1,
            expected.lines().nth(first),
            transcript.lines().nth(first),
        );
    }
}
