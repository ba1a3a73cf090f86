//! `copy_file_range` through a real mount is served by block cloning: Python's
//! `os.copy_file_range` and coreutils `cp` (which uses `copy_file_range`) copy a large file
//! inside the dataset while the pool's allocated space barely moves (no data block is
//! written), the copies read back identical, also after an export and import, and the
//! pool's `bcloneused`/`bclonesaved` count the shared blocks.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::fs;

use common::{Fixture, POOL, fuse_or_skip, pattern, run};

/// The source: 24 MiB of records that do not compress and a partial last record.
const LEN: usize = (24 << 20) + 1000;

fn pool_bytes(fx: &Fixture, property: &str) -> u64 {
    fx.engine.get_props(POOL, &[property.into()]).unwrap()[0]
        .value
        .parse()
        .unwrap()
}

/// Commits everything and lets deferred frees settle, so `allocated` is stable.
fn settle(fx: &Fixture) -> u64 {
    for _ in 0..4 {
        fx.engine.sync_pool(POOL).unwrap();
    }
    pool_bytes(fx, "allocated")
}

/// Goal: a copy inside the pool is a metadata operation. Method: copy a 24 MiB file with
/// `os.copy_file_range` (the loop a program writes) and with `cp`; the pool allocated less
/// than a sixteenth of one copy for both, the copies are identical to the source before and
/// after an export and import, and the clone counts say both share the source's blocks.
#[test]
fn copy_file_range_clones_instead_of_copying() {
    if !fuse_or_skip("copy_file_range_clones_instead_of_copying") {
        return;
    }
    let mut fx = Fixture::new();
    let data = pattern(LEN, 9);
    fs::write(fx.path("src"), &data).unwrap();
    let before = settle(&fx);
    let script = "import os, sys\n\
        s = os.open(sys.argv[1], os.O_RDONLY)\n\
        d = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n\
        n = os.fstat(s).st_size\n\
        done = 0\n\
        while done < n:\n\
        \x20   got = os.copy_file_range(s, d, n - done, done, done)\n\
        \x20   assert got > 0, 'copy_file_range made no progress'\n\
        \x20   done += got\n";
    let (src, copy) = (fx.path("src"), fx.path("copy"));
    let args = [src.to_str().unwrap(), copy.to_str().unwrap()];
    run("python3", &["-c", script, args[0], args[1]]);
    let by_cp = fx.path("by-cp");
    run("cp", &[args[0], by_cp.to_str().unwrap()]);
    assert_eq!(fs::read(&copy).unwrap(), data);
    assert_eq!(fs::read(&by_cp).unwrap(), data);
    let after = settle(&fx);
    let grown = after.saturating_sub(before);
    assert!(
        grown < LEN as u64 / 16,
        "two copies of {LEN} bytes allocated {grown} bytes"
    );
    let used = pool_bytes(&fx, "bcloneused");
    assert!(used >= 24 << 20, "bcloneused {used}");
    assert_eq!(pool_bytes(&fx, "bclonesaved"), 2 * used);

    fx.cycle();
    assert_eq!(fs::read(fx.path("copy")).unwrap(), data);
    assert_eq!(fs::read(fx.path("by-cp")).unwrap(), data);
    assert_eq!(pool_bytes(&fx, "bcloneused"), used);
    // Removing the source and one copy leaves the last one whole.
    fs::remove_file(fx.path("src")).unwrap();
    fs::remove_file(fx.path("copy")).unwrap();
    settle(&fx);
    assert_eq!(pool_bytes(&fx, "bcloneused"), 0);
    assert_eq!(fs::read(fx.path("by-cp")).unwrap(), data);
}

/// Goal: what `cp` can and cannot do on a mount, as README says. `cp --reflink=always` asks
/// for FICLONE, an ioctl the kernel serves through a file system's `remap_file_range`, which
/// its FUSE driver does not implement (and no FUSE request carries), so it fails with
/// EOPNOTSUPP before tarn sees anything; `cp --reflink=auto` then falls back to
/// `copy_file_range`, which tarn serves by cloning. Method: both on a 4 MiB file; the first
/// must fail saying so (should a kernel ever forward it, this fails and the docs change),
/// the second must share the source's blocks (`bcloneused`).
#[test]
fn reflink_always_is_refused_by_the_kernel_and_auto_clones() {
    if !fuse_or_skip("reflink_always_is_refused_by_the_kernel_and_auto_clones") {
        return;
    }
    let fx = Fixture::new();
    let data = pattern(4 << 20, 3);
    fs::write(fx.path("src"), &data).unwrap();
    settle(&fx);
    let (src, always, auto) = (fx.path("src"), fx.path("always"), fx.path("auto"));
    let output = std::process::Command::new("cp")
        .arg("--reflink=always")
        .arg(&src)
        .arg(&always)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "cp --reflink=always succeeded");
    assert!(stderr.contains("Operation not supported"), "{stderr}");
    run(
        "cp",
        &[
            "--reflink=auto",
            src.to_str().unwrap(),
            auto.to_str().unwrap(),
        ],
    );
    assert_eq!(fs::read(&auto).unwrap(), data);
    settle(&fx);
    let used = pool_bytes(&fx, "bcloneused");
    assert!(used >= 4 << 20, "bcloneused {used}");
}
