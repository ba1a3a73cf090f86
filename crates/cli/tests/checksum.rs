//! `tarn checksum` through the real binary, its daemon and a FUSE mount: values agree with
//! `sha256sum`/`md5sum` and with adler32 by its definition, a second call is answered from
//! the cache (also after export and import), writes, appends and truncates through the
//! mount give the new data's value, `--xattr` writes the value where StoRM reads it, the
//! cache attribute is invisible through the mount, and every refusal is one line that
//! changes nothing. Skips (printing why) only when /dev/fuse is absent.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn fuse_or_skip(test: &str) -> bool {
    if Path::new("/dev/fuse").exists() {
        return true;
    }
    eprintln!("SKIP {test}: /dev/fuse is absent, no FUSE tests on this host");
    false
}

fn pool_with_mount(rig: &Rig) -> PathBuf {
    rig.mounted_tank();
    rig.root().join("altroot/tank")
}

fn data(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2654435761) >> 7 ^ seed.wrapping_mul(97)) as u8)
        .collect()
}

/// Adler-32 by its definition (RFC 1950), as 8 hex digits.
fn adler32(data: &[u8]) -> String {
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    format!("{:08x}", (b << 16) | a)
}

/// The first word `tool FILE` prints (`sha256sum`, `md5sum`), reading through the mount.
fn peer(tool: &str, file: &Path) -> String {
    let output = Command::new(tool).arg(file).output().unwrap();
    assert!(output.status.success(), "{tool}: {output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    text.split_whitespace().next().unwrap().to_string()
}

/// `checksum -H -v -a ALG FILE` as (value, source).
fn sum(rig: &Rig, algorithm: &str, file: &Path) -> (String, String) {
    let out = rig.ok(&format!("checksum -H -v -a {algorithm} {}", file.display()));
    let rows = tsv_rows(&out);
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(rows[0][0], algorithm);
    assert_eq!(rows[0][3], file.display().to_string());
    (rows[0][1].to_string(), rows[0][2].to_string())
}

// DESCRIPTION: the values, the cache and its invalidation through the mount.
// STRATEGY: a 3 MiB file written through the mount; each algorithm twice (computed, then
// cached); peers read the same file through the mount; then an overwrite, an append and a
// truncate through the mount, each followed by a recomputed, correct value; export and
// import keep the cache.
#[test]
fn values_match_peers_and_the_cache_follows_every_change() {
    if !fuse_or_skip("values_match_peers_and_the_cache_follows_every_change") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    let path = tank.join("f");
    let mut model = data(3 << 20, 1);
    std::fs::write(&path, &model).unwrap();
    for (algorithm, expected) in [
        ("adler32", adler32(&model)),
        ("sha256", peer("sha256sum", &path)),
        ("md5", peer("md5sum", &path)),
    ] {
        assert_eq!(
            sum(&rig, algorithm, &path),
            (expected.clone(), "computed".into())
        );
        assert_eq!(sum(&rig, algorithm, &path), (expected, "cached".into()));
    }
    let (crc, _) = sum(&rig, "crc32c", &path);
    assert_eq!(crc.len(), 8);

    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(b"changed", 4096).unwrap();
    model[4096..4103].copy_from_slice(b"changed");
    assert_eq!(
        sum(&rig, "adler32", &path),
        (adler32(&model), "computed".into())
    );
    file.write_all_at(b"tail", model.len() as u64).unwrap();
    model.extend_from_slice(b"tail");
    assert_eq!(
        sum(&rig, "adler32", &path),
        (adler32(&model), "computed".into())
    );
    file.set_len(1000).unwrap();
    model.truncate(1000);
    assert_eq!(
        sum(&rig, "adler32", &path),
        (adler32(&model), "computed".into())
    );
    drop(file);
    assert_eq!(sum(&rig, "sha256", &path).0, peer("sha256sum", &path));

    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert_eq!(
        sum(&rig, "adler32", &path),
        (adler32(&model), "cached".into())
    );

    let json = rig.ok(&format!(
        "checksum -j --json-int -a adler32 {}",
        path.display()
    ));
    let document: serde_json::Value = serde_json::from_str(&json).unwrap();
    let entry = &document["checksums"][path.display().to_string()];
    assert_eq!(entry["value"], adler32(&model).as_str(), "{document}");
    assert_eq!(entry["size"], 1000);
    assert_eq!(entry["cached"], true);
    assert_eq!(document["output_version"]["command"], "tarn checksum");
}

/// `getfattr` of `name` on `file` (the value), or `None` when it has none.
fn getfattr(file: &Path, name: &str) -> Option<String> {
    let output = Command::new("getfattr")
        .args(["--only-values", "-n", name])
        .arg(file)
        .output()
        .expect("getfattr (package attr) runs");
    output
        .status
        .success()
        .then(|| String::from_utf8(output.stdout).unwrap())
}

// DESCRIPTION: `--xattr` writes the hex value where StoRM reads it; the cache attribute
// itself cannot be seen or forged through the mount.
// STRATEGY: getfattr/setfattr through the kernel, as a middleware would.
#[test]
fn xattr_copy_for_middlewares_and_a_hidden_cache() {
    if !fuse_or_skip("xattr_copy_for_middlewares_and_a_hidden_cache") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    let path = tank.join("g");
    let model = data(100_000, 2);
    std::fs::write(&path, &model).unwrap();
    let name = "user.storm.checksum.adler32";
    let out = rig.ok(&format!("checksum -H --xattr {name} {}", path.display()));
    assert_eq!(
        out,
        format!("adler32\t{}\t{}\n", adler32(&model), path.display())
    );
    assert_eq!(getfattr(&path, name), Some(adler32(&model)));
    let listed = Command::new("getfattr")
        .args(["-d", "-m", "-"])
        .arg(&path)
        .output()
        .unwrap();
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(listed.contains(name), "{listed}");
    assert!(
        !listed.contains("tarn."),
        "the cache attribute is hidden: {listed}"
    );
    // The kernel refuses a name outside its namespaces before tarn sees it.
    assert_eq!(getfattr(&path, "tarn.checksums"), None);
}

/// `name` of `file` as hex (`getfattr -e hex`), or `None` when it has none.
fn xattr_hex(file: &Path, name: &str) -> Option<String> {
    let output = Command::new("getfattr")
        .args(["-e", "hex", "-n", name])
        .arg(file)
        .output()
        .expect("getfattr (package attr) runs");
    let text = String::from_utf8(output.stdout).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=0x")))
        .map(str::to_string)
}

/// `xrdadler32 FILE` (XRootD's client tools): its printed value.
fn xrdadler32(file: &Path) -> String {
    let output = Command::new("xrdadler32").arg(file).output().unwrap();
    assert!(output.status.success(), "xrdadler32: {output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    assert_eq!(text, format!("{} {}\n", &text[..8], file.display()));
    text[..8].to_string()
}

// DESCRIPTION: XRootD's own tool trusts tarn's binary record in `user.XrdCks.adler32`.
// STRATEGY: `tarn checksum --xattr user.XrdCks.adler32`, then `xrdadler32` (Debian's
// xrootd-client) on the mount: it prints the value and leaves the record as tarn wrote it
// (a record it rejects, it replaces with its own). The control: after the file's mtime
// moves, the same tool finds tarn's record stale and replaces it. Skips without
// xrdadler32 (CI installs it).
#[test]
fn xrootd_trusts_the_record() {
    if !fuse_or_skip("xrootd_trusts_the_record") {
        return;
    }
    if Command::new("xrdadler32").arg("-h").output().is_err() {
        eprintln!("SKIP xrootd_trusts_the_record: no xrdadler32 (package xrootd-client)");
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    let path = tank.join("x");
    let model = data(300_000, 5);
    std::fs::write(&path, &model).unwrap();
    let name = "user.XrdCks.adler32";
    rig.ok(&format!("checksum --xattr {name} {}", path.display()));
    let written = xattr_hex(&path, name).expect("the record");
    assert_eq!(written.len(), 2 * 96, "{written}");
    assert_eq!(xrdadler32(&path), adler32(&model));
    assert_eq!(
        xattr_hex(&path, name),
        Some(written.clone()),
        "XRootD kept it"
    );

    let touched = Command::new("touch")
        .args(["-m", "-d", "@1000000000"])
        .arg(&path)
        .status()
        .unwrap();
    assert!(touched.success());
    assert_eq!(xrdadler32(&path), adler32(&model));
    let replaced = xattr_hex(&path, name).expect("XRootD's own record");
    assert_ne!(replaced, written, "a stale record is replaced");

    let line = rig.refused(&format!(
        "checksum -a md5 --xattr {name} {}",
        path.display()
    ));
    assert!(
        line.contains("XRootD keeps a md5 value in user.XrdCks.md5"),
        "{line}"
    );
}

// DESCRIPTION: files under `.tarn/snapshot/SNAP/`: a value the file carried into the snapshot
// is answered from it; otherwise the snapshot's (old) data is read and hashed, nothing kept.
// STRATEGY: one file checksummed before its snapshot, one overwritten after it; values
// against adler32 of the model and `sha256sum` reading the snapshot through the mount;
// refusals for --xattr in a snapshot, a missing snapshot and the snapshot's root.
#[test]
fn files_in_snapshots() {
    if !fuse_or_skip("files_in_snapshots") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    let (f, g) = (data(2 << 20, 3), data(1 << 20, 4));
    std::fs::write(tank.join("f"), &f).unwrap();
    std::fs::write(tank.join("g"), &g).unwrap();
    assert_eq!(sum(&rig, "adler32", &tank.join("f")).1, "computed");
    rig.ok("snapshot tank@a");
    std::fs::write(tank.join("g"), b"new").unwrap();
    let snap = tank.join(".tarn/snapshot/a");
    assert_eq!(
        sum(&rig, "adler32", &snap.join("f")),
        (adler32(&f), "cached".into())
    );
    for _ in 0..2 {
        assert_eq!(
            sum(&rig, "adler32", &snap.join("g")),
            (adler32(&g), "computed".into()),
            "the snapshot's data, and nothing kept"
        );
    }
    let through_mount = peer("sha256sum", &snap.join("g"));
    assert_eq!(sum(&rig, "sha256", &snap.join("g")).0, through_mount);
    assert_eq!(sum(&rig, "adler32", &tank.join("g")).0, adler32(b"new"));

    let line = rig.refused(&format!(
        "checksum --xattr user.x {}",
        snap.join("f").display()
    ));
    assert!(line.contains("snapshots are read-only"), "{line}");
    assert!(getfattr(&snap.join("f"), "user.x").is_none());
    let missing = tank.join(".tarn/snapshot/zzz/f");
    let line = rig.refused(&format!("checksum {}", missing.display()));
    assert!(line.ends_with("': no such file or directory"), "{line}");
    let line = rig.refused(&format!("checksum {}", snap.display()));
    assert!(
        line.ends_with("not a regular file (checksums are of regular files)"),
        "{line}"
    );
}

// DESCRIPTION: refusals: a directory, a path outside any tarn mount, a missing file, an
// unknown algorithm, a bad --xattr name. Each is one line naming what is valid, and
// changes nothing; a good file beside a bad one is still answered, with exit status 1.
#[test]
fn refusals_are_one_line_and_change_nothing() {
    if !fuse_or_skip("refusals_are_one_line_and_change_nothing") {
        return;
    }
    let rig = Rig::new();
    let tank = pool_with_mount(&rig);
    let good = tank.join("good");
    std::fs::write(&good, b"Wikipedia").unwrap();
    let outside = rig.root().join("outside");
    std::fs::write(&outside, b"x").unwrap();

    let line = rig.refused(&format!("checksum {}", tank.display()));
    let expected = format!(
        "cannot checksum '{}': not a regular file (checksums are of regular files)",
        tank.display()
    );
    assert_eq!(line, expected);
    let line = rig.refused(&format!("checksum {}", outside.display()));
    assert!(line.contains("not inside a mounted tarn dataset"), "{line}");
    let line = rig.refused(&format!("checksum {}", tank.join("missing").display()));
    assert!(line.ends_with("': no such file or directory"), "{line}");
    let line = rig.refused(&format!("checksum --xattr trusted.x {}", good.display()));
    assert!(line.contains("(valid: user.NAME"), "{line}");

    let run = rig.run(&format!("checksum -a sha1 {}", good.display()));
    assert_eq!(run.code, Some(2), "{run:?}");
    assert_eq!(
        run.stderr,
        "cannot checksum 'sha1': unknown algorithm (valid: adler32, md5, sha256, crc32c)\n"
    );

    let run = rig.run(&format!(
        "checksum -H {} {}",
        tank.display(),
        good.display()
    ));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.stdout,
        format!("adler32\t11e60398\t{}\n", good.display())
    );
    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
}
