//! System tests of `tarn send | tarn receive` between two pools through the real binary and
//! daemon: full, incremental (`-i`, `-I`) round trips compared through FUSE mounts (contents,
//! modes, owners, times, symlinks, xattrs, POSIX ACLs), the modified-destination check
//! (access times pass, real changes are refused naming the changed files, `-F` rolls
//! back), streams cut or damaged at many points refused with one line, the destination as
//! it was, and the flags `receive -d -e -u` and `send -L -e`.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;

fn fuse_ok(test: &str) -> bool {
    if Path::new("/dev/fuse").exists() {
        return true;
    }
    eprintln!("SKIP {test}: /dev/fuse is absent, no FUSE tests on this host");
    false
}

fn tarn(rig: &Rig, line: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tarn"));
    command
        .arg("--rundir")
        .arg(&rig.rundir)
        .args(line.split(' ').filter(|w| !w.is_empty()))
        .current_dir(rig.root())
        .env_remove("TARN_RUNDIR")
        .env("TARN_ALTROOT", rig.root().join("altroot"));
    command
}

/// `tarn SEND | tarn RECEIVE`; both must succeed.
fn pipe(rig: &Rig, send: &str, receive: &str) -> String {
    let mut sender = tarn(rig, send).stdout(Stdio::piped()).spawn().unwrap();
    let out = sender.stdout.take().unwrap();
    let received = tarn(rig, receive).stdin(Stdio::from(out)).output().unwrap();
    let sent = sender.wait_with_output().unwrap();
    assert!(sent.status.success(), "`tarn {send}`: {sent:?}");
    assert!(received.status.success(), "`tarn {receive}`: {received:?}");
    String::from_utf8(received.stdout).unwrap()
}

/// The stream of `tarn SEND` as bytes.
fn stream(rig: &Rig, send: &str) -> Vec<u8> {
    let out = tarn(rig, send).output().unwrap();
    assert!(out.status.success(), "`tarn {send}`: {out:?}");
    out.stdout
}

/// `tarn RECEIVE` of `bytes`: (exit code, stderr).
/// `tarn LINE` with `bytes` on its standard input, from a file (as a shell redirect).
fn receive_output(rig: &Rig, line: &str, bytes: &[u8]) -> std::process::Output {
    let path = rig.root().join("stream.bin");
    std::fs::write(&path, bytes).unwrap();
    tarn(rig, line)
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap()
}

fn receive(rig: &Rig, line: &str, bytes: &[u8]) -> (Option<i32>, String) {
    let out = receive_output(rig, line, bytes);
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Everything a tree shows: per path (sorted) type, mode, owner, size, mtime, link target,
/// contents hash; then every xattr and ACL.
fn tree(dir: &Path) -> String {
    let listing = sh(
        dir,
        "find . -path ./.tarn -prune -o -print | sort | while read -r p; do \
         stat -c '%n %F %a %u %g %s %Y' \"$p\"; \
         if [ -L \"$p\" ]; then readlink \"$p\"; elif [ -f \"$p\" ]; then cksum < \"$p\"; fi; \
         done",
    );
    let xattrs = sh(
        dir,
        "getfattr -R -h -d -m - . 2>/dev/null | grep -v '^$' || true",
    );
    let acls = sh(dir, "getfacl -R -P . 2>/dev/null || true");
    format!("{listing}\n{xattrs}\n{acls}")
}

fn mount(rig: &Rig, dataset: &str) -> PathBuf {
    rig.root().join("altroot").join(dataset)
}

fn two_pools(rig: &Rig) {
    let a = rig.devices("a", "disk", 1);
    let b = rig.devices("b", "disk", 1);
    rig.ok(&format!("pool create -O acltype=posix pa {}", join(&a)));
    rig.ok(&format!("pool create -O acltype=posix pb {}", join(&b)));
    rig.ok("create pa/src");
}

/// The pools `pa` and `pb`, one file each, without mountpoints (no FUSE).
fn bare_pools(rig: &Rig) {
    let a = rig.devices("a", "disk", 1);
    let b = rig.devices("b", "disk", 1);
    rig.ok(&format!("pool create -m none pa {}", join(&a)));
    rig.ok(&format!("pool create -m none pb {}", join(&b)));
}

/// `send -c` of `pa/src@one` (which has 2 MB of compressible text) sends its blocks as
/// stored: much less than the plain stream.
fn compressed_is_smaller(rig: &Rig) {
    let (plain, stored) = (
        stream(rig, "send pa/src@one"),
        stream(rig, "send -c pa/src@one"),
    );
    assert!(
        stored.len() + 1_500_000 < plain.len(),
        "-c sends compressed blocks as stored: {} against {}",
        stored.len(),
        plain.len()
    );
}

#[test]
fn full_and_incremental_round_trips_give_identical_trees() {
    if !fuse_ok("full_and_incremental_round_trips_give_identical_trees") {
        return;
    }
    let rig = Rig::new();
    two_pools(&rig);
    let src = mount(&rig, "pa/src");
    sh(
        &src,
        "mkdir -p dir/sub && head -c 3000000 /dev/urandom > dir/big && echo hello > small && \
         ln -s small link && setfattr -n user.k -v val small && \
         setfacl -m u:1234:rw small && chmod 640 dir/big && chown 7:8 dir/sub && \
         truncate -s 10M sparse && echo x | dd of=sparse bs=1 seek=5000000 conv=notrunc && \
         mkfifo fifo && yes compressible | head -c 2000000 > text && \
         touch -h -d 2020-01-02 small link dir/big dir",
    );
    rig.ok("snapshot pa/src@one");
    compressed_is_smaller(&rig);
    let out = pipe(&rig, "send -c pa/src@one", "receive -v pb/dst");
    assert!(out.contains("received pb/dst@one"), "{out}");
    let dst = mount(&rig, "pb/dst");
    let listed = tree(&src);
    assert!(listed.contains("./dir/big regular file 640"), "{listed}");
    assert!(
        listed.contains("user.k=\"val\"") && listed.contains("user:1234:rw-"),
        "{listed}"
    );
    assert_eq!(listed, tree(&dst), "full round trip");
    assert_eq!(rig.ok("list -H -o name -t snapshot pb/dst"), "pb/dst@one\n");
    let guid = |name: &str| rig.ok(&format!("get -H -o value guid {name}"));
    assert_eq!(
        guid("pa/src@one"),
        guid("pb/dst@one"),
        "the snapshot keeps its GUID"
    );

    // Changes of every kind, sent incrementally.
    sh(
        &src,
        "dd if=/dev/urandom of=dir/big bs=4096 count=3 seek=100 conv=notrunc && \
         rm small && echo new > new && setfattr -n user.k -v changed link -h 2>/dev/null; \
         truncate -s 100 sparse && truncate -s 6M sparse && rmdir dir/sub && \
         mkdir other && chmod 700 other && setfacl -m g:99:r new",
    );
    rig.ok("snapshot pa/src@two");
    pipe(&rig, "send -i @one pa/src@two", "receive pb/dst");
    assert_eq!(tree(&src), tree(&dst), "incremental round trip");

    // -I: two more snapshots in one stream.
    sh(&src, "echo three > three");
    rig.ok("snapshot pa/src@three");
    sh(&src, "rm three && echo four > dir/four");
    rig.ok("snapshot pa/src@four");
    // Reading the destination only records access times: not a modification.
    sh(&dst, "cat new dir/big > /dev/null && ls -R > /dev/null");
    let out = pipe(&rig, "send -I pa/src@two pa/src@four", "receive -v pb/dst");
    assert!(
        out.contains("pb/dst@three") && out.contains("pb/dst@four"),
        "{out}"
    );
    assert_eq!(tree(&src), tree(&dst), "-I round trip");
    assert_eq!(
        rig.ok("list -H -o name -t snapshot pb/dst"),
        "pb/dst@one\npb/dst@two\npb/dst@three\npb/dst@four\n"
    );
}

/// A file written into the destination after its snapshot makes an incremental receive
/// refuse with one line naming the file by path (the directory it is in comes after it),
/// and `-F` rolls it back. Negative control: with the refusal listing object numbers (as
/// it did), the path check fails.
#[test]
fn a_modified_destination_is_refused_by_name_and_rolled_back_with_force() {
    if !fuse_ok("a_modified_destination_is_refused_by_name_and_rolled_back_with_force") {
        return;
    }
    let rig = Rig::new();
    two_pools(&rig);
    let src = mount(&rig, "pa/src");
    sh(&src, "echo one > f");
    rig.ok("snapshot pa/src@one");
    pipe(&rig, "send pa/src@one", "receive pb/dst");
    sh(&src, "echo two > f");
    rig.ok("snapshot pa/src@two");
    let dst = mount(&rig, "pb/dst");
    sh(&dst, "echo local > g");
    rig.ok("pool sync pb");
    let incremental = stream(&rig, "send -i @one pa/src@two");
    let (code, err) = receive(&rig, "receive pb/dst", &incremental);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("has been modified since most recent snapshot") && err.contains("-F"),
        "{err}"
    );
    assert!(
        err.contains("(changed: /g, / and "),
        "the file by path: {err}"
    );
    assert_eq!(sh(&dst, "cat g"), "local\n", "a refusal changes nothing");
    let (code, err) = receive(&rig, "receive -F pb/dst", &incremental);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(tree(&src), tree(&dst));
    // Wrong source: the stream's source snapshot is not the destination's latest.
    let again = stream(&rig, "send -i @one pa/src@two");
    let (code, err) = receive(&rig, "receive pb/dst", &again);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("cannot receive 'pb/dst': "), "{err}");
}

#[test]
fn cut_and_damaged_streams_are_refused_and_change_nothing() {
    let rig = Rig::new();
    bare_pools(&rig);
    rig.ok("create pa/src");
    rig.ok("snapshot pa/src@one");
    let full = stream(&rig, "send pa/src@one");
    let listing = || rig.ok("list -H -p -o name,used -t all -r pb");
    let before = listing();
    let cuts = [
        1,
        23,
        24,
        100,
        full.len() / 3,
        full.len() / 2,
        full.len() - 49,
        full.len() - 1,
    ];
    for cut in cuts {
        let (code, err) = receive(&rig, "receive pb/dst", &full[..cut]);
        assert_eq!(code, Some(1), "cut at {cut}: {err}");
        assert_eq!(err.lines().count(), 1, "cut at {cut}: {err}");
        assert!(err.contains("truncated"), "cut at {cut}: {err}");
        assert_eq!(listing(), before, "cut at {cut} left pb changed");
    }
    for at in (0..full.len()).step_by(full.len() / 40 + 1) {
        let mut bad = full.clone();
        bad[at] ^= 0x20;
        let (code, err) = receive(&rig, "receive pb/dst", &bad);
        assert_eq!(code, Some(1), "flip at {at}: {err}");
        assert!(
            err.starts_with("cannot receive 'pb/dst': invalid stream"),
            "{err}"
        );
        assert_eq!(listing(), before, "flip at {at} left pb changed");
    }
    let (code, err) = receive(&rig, "receive pb/dst", b"");
    assert_eq!(
        (code, err.trim_end()),
        (
            Some(1),
            "cannot receive 'pb/dst': invalid stream: it is empty"
        )
    );
    let (code, _) = receive(&rig, "receive pb/dst", &full);
    assert_eq!(code, Some(0));
    assert_eq!(rig.ok("list -H -o name -t snapshot pb/dst"), "pb/dst@one\n");
}

/// The token a `receive -s` refusal names.
fn token_of(err: &str) -> String {
    let at = err
        .find("send -t ")
        .unwrap_or_else(|| panic!("no token in {err}"))
        + 8;
    err[at..].split('\'').next().unwrap().to_string()
}

#[test]
fn streams_cut_at_random_points_resume_to_identical_trees() {
    if !fuse_ok("streams_cut_at_random_points_resume_to_identical_trees") {
        return;
    }
    let rig = Rig::new();
    two_pools(&rig);
    let src = mount(&rig, "pa/src");
    sh(
        &src,
        "for i in 1 2 3 4 5 6; do head -c 300000 /dev/urandom > f$i; done && \
         setfattr -n user.a -v b f3 && mkdir d && echo x > d/y",
    );
    rig.ok("snapshot pa/src@one");
    let full = stream(&rig, "send pa/src@one");
    let dst = mount(&rig, "pb/dst");
    // A fixed sequence of cut points (a tiny LCG): the same run every time.
    let mut seed = 0x2545_f491_u64;
    let mut next_cut = |len: usize| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        100 + (seed >> 33) as usize % (len - 200)
    };
    for round in 0..5 {
        let cut = next_cut(full.len());
        let (code, err) = receive(&rig, "receive -s pb/dst", &full[..cut]);
        assert_eq!(code, Some(1), "round {round} cut {cut}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        let mut token = token_of(&err);
        // Resume once cut again, then to the end.
        let rest = stream(&rig, &format!("send -t {token}"));
        if rest.len() > 300 {
            let (code, err) = receive(&rig, "receive -s pb/dst", &rest[..rest.len() / 2]);
            assert_eq!(code, Some(1), "{err}");
            token = token_of(&err);
        }
        let rest = stream(&rig, &format!("send -t {token}"));
        let (code, err) = receive(&rig, "receive -s pb/dst", &rest);
        assert_eq!(code, Some(0), "round {round} cut {cut}: {err}");
        assert_eq!(tree(&src), tree(&dst), "round {round}, cut at {cut}");
        rig.ok("destroy -r pb/dst");
    }
    incremental_resumed_and_aborted(&rig, &full);
}

/// An incremental stream cut and resumed; then a partial full one aborted with -A.
fn incremental_resumed_and_aborted(rig: &Rig, full: &[u8]) {
    let (src, dst) = (mount(rig, "pa/src"), mount(rig, "pb/dst"));
    pipe(rig, "send pa/src@one", "receive pb/dst");
    sh(
        &src,
        "head -c 200000 /dev/urandom > f2 && rm f5 && echo z > d/z",
    );
    rig.ok("snapshot pa/src@two");
    let incremental = stream(rig, "send -i @one pa/src@two");
    let (code, err) = receive(
        rig,
        "receive -s pb/dst",
        &incremental[..incremental.len() / 2],
    );
    assert_eq!(code, Some(1), "{err}");
    let token = token_of(&err);
    assert_eq!(
        rig.ok("get -H -o value receive_resume_token pb/dst")
            .trim_end(),
        token
    );
    let rest = stream(rig, &format!("send -t {token}"));
    let (code, err) = receive(rig, "receive -s pb/dst", &rest);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(tree(&src), tree(&dst), "incremental resumed");
    assert_eq!(rig.ok("get -H -o value receive_resume_token pb/dst"), "-\n");
    let (code, err) = receive(rig, "receive -s pb/new", &full[..full.len() / 2]);
    assert_eq!(code, Some(1), "{err}");
    let (code, err) = receive(rig, "receive pb/new", full);
    assert_eq!(code, Some(1), "a partial receive blocks a new one: {err}");
    assert!(err.contains("receive -A"), "{err}");
    rig.ok("receive -A pb/new");
    let (code, err) = receive(rig, "receive pb/new", full);
    assert_eq!(code, Some(0), "{err}");
    let refused = rig.run("receive -A pb/new");
    assert_eq!(refused.code, Some(1), "{refused:?}");
}

/// The stream size `bytes` (a stream) carries in its first BEGIN (docs/FORMAT.md 21.3,
/// 21.4) is `size`, with the STREAM_SIZE feature bit; 0 and no bit for `size` 0.
fn assert_sized(bytes: &[u8], size: u64) {
    const STREAM_SIZE: u64 = 1 << 9;
    // The first record's payload starts after its 24-byte header.
    let field = |at: usize, len: usize| {
        let mut le = [0u8; 8];
        le[..len].copy_from_slice(&bytes[24 + at..24 + at + len]);
        u64::from_le_bytes(le)
    };
    assert_eq!(
        field(16, 8) & STREAM_SIZE != 0,
        size != 0,
        "the feature bit"
    );
    assert_eq!(field(57, 7), size, "BEGIN's stream size");
}

/// Goal: `send -nvP` prints the stream's exact size; `send -P` (like `-v` on a terminal)
/// sizes its stream and carries that size in its first BEGIN, the stream as long as `-n`
/// said, received like any other, while a plain `send` to a pipe is not sized; `-n` of
/// a receive changes nothing; `-p`, `-x`, `-o`, `-d` and `-e` as ZFS's. Negative control:
/// with `execute_stream` asking for a sized send only for a bar (not for `-P`), the `-P`
/// stream carried no size and `assert_sized` failed.
#[test]
fn dry_runs_sizes_properties_and_names() {
    let rig = Rig::new();
    bare_pools(&rig);
    rig.ok("create -o compression=zle -o com.example:tag=blue -o atime=off pa/src");
    rig.ok("snapshot pa/src@one");
    rig.ok("snapshot pa/src@two");
    // -nvP: the exact size, without a stream (stdout may be anything).
    let sized = rig.ok("send -nvP -p pa/src@one");
    let full = stream(&rig, "send -p pa/src@one");
    assert_eq!(
        sized,
        format!("full\tpa/src@one\t{0}\nsize\t{0}\n", full.len())
    );
    let sized_stream = stream(&rig, "send -P -p pa/src@one");
    assert_sized(&sized_stream, full.len() as u64);
    assert_sized(&full, 0);
    let (code, err) = receive(&rig, "receive -v pb/sized", &sized_stream);
    assert_eq!(code, Some(0), "{err}");
    rig.ok("destroy -r pb/sized");
    let sized = rig.ok("send -nv -I @one pa/src@two");
    assert!(
        sized.contains("send from pa/src@one to pa/src@two estimated size is"),
        "{sized}"
    );
    // -n of a receive reads the stream and changes nothing.
    let before = rig.ok("list -H -t all -r -o name pb");
    let (code, err) = receive(&rig, "receive -n pb/x", &full);
    assert_eq!((code, err.as_str()), (Some(0), ""));
    assert_eq!(rig.ok("list -H -t all -r -o name pb"), before);
    // -p carries properties; -x keeps one out, -o sets another; -d appends the name.
    rig.ok("create pb/into");
    let (code, err) = receive(
        &rig,
        "receive -d -x compression -o com.example:more=yes pb/into",
        &full,
    );
    assert_eq!(code, Some(0), "{err}");
    let get = |what: &str| rig.ok(&format!("get -H -o value,source {what} pb/into/src"));
    assert_eq!(get("com.example:tag"), "blue\tlocal\n");
    assert_eq!(get("com.example:more"), "yes\tlocal\n");
    assert_eq!(get("atime"), "off\tlocal\n");
    assert_eq!(get("compression"), "on\tdefault\n", "-x compression");
    let (code, err) = receive(&rig, "receive -e -o compression=bogus pb/into", &full);
    assert_eq!(code, Some(1), "an invalid -o is refused first: {err}");
    assert_eq!(
        rig.ok("list -H -o name -r pb/into"),
        "pb/into\npb/into/src\n"
    );
}

#[test]
fn a_replication_stream_brings_children_snapshots_and_properties() {
    if !fuse_ok("a_replication_stream_brings_children_snapshots_and_properties") {
        return;
    }
    let rig = Rig::new();
    two_pools(&rig);
    rig.ok("create -o com.example:tag=kid -o atime=off pa/src/kid");
    let (src, kid) = (mount(&rig, "pa/src"), mount(&rig, "pa/src/kid"));
    sh(&src, "echo top > top && mkdir d && echo deep > d/f");
    sh(
        &kid,
        "head -c 100000 /dev/urandom > k && setfattr -n user.x -v y k",
    );
    rig.ok("snapshot -r pa/src@one");
    sh(&kid, "echo more > more");
    rig.ok("snapshot -r pa/src@two");
    let out = pipe(&rig, "send -R pa/src@two", "receive -v pb/copy");
    for name in [
        "pb/copy@one",
        "pb/copy@two",
        "pb/copy/kid@one",
        "pb/copy/kid@two",
    ] {
        assert!(out.contains(name), "{name} in {out}");
    }
    assert_eq!(
        rig.ok("list -H -o name -t all -r pb/copy"),
        "pb/copy\npb/copy@one\npb/copy@two\npb/copy/kid\npb/copy/kid@one\npb/copy/kid@two\n"
    );
    assert_eq!(
        rig.ok("get -H -o value,source com.example:tag,atime pb/copy/kid"),
        "kid\tlocal\noff\tlocal\n"
    );
    let tree_of = |d: &str| tree(&mount(&rig, d));
    assert_eq!(tree_of("pa/src/kid"), tree_of("pb/copy/kid"));
    assert_eq!(
        tree(&src).replace("./kid", ""),
        tree_of("pb/copy").replace("./kid", "")
    );
    // And on from there: -R -I sends every dataset's later snapshots.
    sh(&kid, "rm more");
    rig.ok("snapshot -r pa/src@three");
    pipe(&rig, "send -R -I @two pa/src@three", "receive pb/copy");
    assert_eq!(tree_of("pa/src/kid"), tree_of("pb/copy/kid"));
}

/// `tarn LINE` with `bytes` on stdin must be refused in one line and leave every device
/// file byte-identical.
fn refused_with_stream(rig: &Rig, line: &str, bytes: &[u8]) -> String {
    let path = rig.root().join("stream.bin");
    std::fs::write(&path, bytes).unwrap();
    let baseline = rig.image();
    let out = tarn(rig, line)
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "`tarn {line}`: {err}");
    assert_eq!(err.lines().count(), 1, "`tarn {line}`: {err}");
    assert_same_image(&baseline, &rig.image(), &format!("refused `tarn {line}`"));
    err
}

#[test]
fn refusals_before_any_record_leave_every_device_byte_identical() {
    let rig = Rig::new();
    bare_pools(&rig);
    rig.ok("create pa/src");
    rig.ok("snapshot pa/src@one");
    rig.ok("snapshot pa/src@two");
    rig.ok("snapshot pa/src@three");
    let full = stream(&rig, "send pa/src@one");
    let (code, err) = receive(&rig, "receive pb/dst", &full);
    assert_eq!(code, Some(0), "{err}");
    let skipping = stream(&rig, "send -i @two pa/src@three");
    let err = refused_with_stream(&rig, "receive pb/dst", &skipping);
    assert!(err.contains("does not have fromsnap (pa/src@two)"), "{err}");
    let err = refused_with_stream(
        &rig,
        "receive pb/nosuch",
        &stream(&rig, "send -i @one pa/src@two"),
    );
    assert!(err.contains("does not exist"), "{err}");
    let err = refused_with_stream(&rig, "receive pb/dst", &full);
    assert!(
        err.contains("exists"),
        "a full stream onto an existing dataset: {err}"
    );
    let err = refused_with_stream(&rig, "receive nopool/x", &full);
    assert!(err.contains("no such pool"), "{err}");
    let err = refused_with_stream(&rig, "receive pb/dst", b"not a stream at all, just text");
    assert!(err.contains("invalid stream"), "{err}");
    // The count limits bind a receive as they bind `create` and `snapshot`.
    rig.ok("set filesystem_limit=1 pb");
    let err = refused_with_stream(&rig, "receive pb/other", &full);
    assert!(err.contains("filesystem limit exceeded"), "{err}");
    rig.ok("set filesystem_limit=none snapshot_limit=1 pb");
    let err = refused_with_stream(
        &rig,
        "receive pb/dst",
        &stream(&rig, "send -i @one pa/src@two"),
    );
    assert!(err.contains("snapshot limit exceeded"), "{err}");
}

// DESCRIPTION: bookmarks. `bookmark pa/src@one pa/src#one` keeps what an incremental send
// needs of `@one`; after `@one` is destroyed on the source, `send -i #one pa/src@two` (and
// `-i pa/src#one`) brings the destination, which still has `@one`, to a tree identical to
// the source's. `list -t bookmark|all` shows the bookmark with the snapshot's GUID and txg,
// a bookmark copies another, bad bookmarks are refused with one line, `destroy DS#BM`
// removes it, and it survives export and import.
// STRATEGY: two pools, trees compared through FUSE mounts (skipped without /dev/fuse).
#[test]
fn an_incremental_from_a_bookmark_after_the_snapshot_is_gone() {
    if !fuse_ok("an_incremental_from_a_bookmark_after_the_snapshot_is_gone") {
        return;
    }
    let rig = Rig::new();
    two_pools(&rig);
    let (src, dst) = (mount(&rig, "pa/src"), mount(&rig, "pb/dst"));
    sh(
        &src,
        "head -c 300000 /dev/urandom > f1 && mkdir d && echo a > d/a && echo b > f2",
    );
    rig.ok("snapshot pa/src@one");
    pipe(&rig, "send pa/src@one", "receive pb/dst");
    rig.ok("bookmark pa/src@one pa/src#one");
    rig.ok("bookmark pa/src#one pa/src#copy");
    for (line, says) in [
        ("bookmark pa/src@one pa/src#one", "bookmark exists"),
        ("bookmark pa/src@nope pa/src#x", "does not exist"),
        ("bookmark pa/src@one pa#x", "same dataset"),
        ("bookmark pa/src@one pa/src#a@b", "invalid"),
    ] {
        let refused = rig.run(line);
        assert_eq!(refused.code, Some(1), "{line}: {refused:?}");
        assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
        assert!(refused.stderr.contains(says), "{line}: {refused:?}");
    }
    let guid = rig.ok("get -H -o value guid pa/src@one");
    assert_eq!(
        rig.ok("get -H -o value guid,type pa/src#one"),
        format!("{guid}bookmark\n")
    );
    assert_eq!(
        rig.ok("list -H -o name -t bookmark"),
        "pa/src#copy\npa/src#one\n"
    );
    rig.ok("destroy pa/src#copy");
    sh(
        &src,
        "head -c 100000 /dev/urandom > f1 && rm d/a && echo c > f3",
    );
    rig.ok("snapshot pa/src@two");
    rig.ok("destroy pa/src@one");
    rig.ok("pool export pa");
    rig.ok(&format!("pool import -d {} pa", rig.dir_of("a")));
    assert_eq!(
        rig.ok("list -H -o name -t all -r pa/src"),
        "pa/src\npa/src@two\npa/src#one\n"
    );
    let refused = rig.run("send -I #one pa/src@two");
    assert_eq!(refused.code, Some(1), "{refused:?}");
    pipe(&rig, "send -i #one pa/src@two", "receive pb/dst");
    assert_eq!(tree(&src), tree(&dst), "incremental from a bookmark");
    rig.ok("destroy pa/src#one");
    assert_eq!(rig.ok("list -H -o name -t bookmark"), "");
}

/// Every place `needle` starts in `haystack`.
fn places(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    haystack
        .windows(needle.len())
        .enumerate()
        .filter(|(_, window)| *window == needle)
        .map(|(at, _)| at)
        .collect()
}

// DESCRIPTION: corrective receive. A file of pa/src whose records are overwritten on its
// pool's only disk (beyond any redundancy) reads as an I/O error and `status -v` names it;
// `send pb/dst@one | receive -c pa/src@one`, the replica's stream of the same snapshot,
// heals it in place: the file, the snapshot's copy and a clone's copy read back identical,
// a scrub is clean and the error list empty. A stream of another snapshot and a stream
// with a flipped byte are refused in one line, every device file byte-identical.
// STRATEGY: two pools on one file each; the file's 128K records are found on pa's device
// file by their bytes (urandom: stored uncompressed) while pa is exported; trees read
// through FUSE mounts (skipped without /dev/fuse).
#[test]
fn corrective_receive_heals_a_lost_file_from_the_replica() {
    if !fuse_ok("corrective_receive_heals_a_lost_file_from_the_replica") {
        return;
    }
    let rig = Rig::new();
    two_pools(&rig);
    let src = mount(&rig, "pa/src");
    sh(
        &src,
        "head -c 1048576 /dev/urandom > lost && echo kept > small",
    );
    rig.ok("snapshot pa/src@one");
    rig.ok("clone pa/src@one pa/clone");
    pipe(&rig, "send pa/src@one", "receive pb/dst");
    let want = std::fs::read(src.join("lost")).unwrap();
    rig.ok("pool export pa");
    let device = Path::new(&rig.dir_of("a")).join("disk0");
    let mut image = std::fs::read(&device).unwrap();
    for record in [2usize, 5] {
        let start = record * (128 << 10);
        let found = places(&image, &want[start..start + 4096]);
        assert!(!found.is_empty(), "record {record} is on the device");
        for at in found {
            image[at..at + 4096].fill(0x5a);
        }
    }
    std::fs::write(&device, &image).unwrap();
    drop(image);
    rig.ok(&format!("pool import -d {} pa", rig.dir_of("a")));
    assert!(
        std::fs::read(src.join("lost")).is_err(),
        "lost bytes are never returned"
    );
    let status = rig.ok("pool status -v pa");
    assert!(
        status.contains("Permanent errors") && status.contains("lost"),
        "{status}"
    );
    rig.ok("pool sync pa");

    rig.ok("snapshot pb/dst@two");
    let other = stream(&rig, "send pb/dst@two");
    let err = refused_with_stream(&rig, "receive -c pa/src@one", &other);
    assert!(
        err.contains("the stream is of snapshot 'pb/dst@two'"),
        "{err}"
    );
    let good = stream(&rig, "send pb/dst@one");
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 1;
    let err = refused_with_stream(&rig, "receive -c pa/src@one", &flipped);
    assert!(err.contains("invalid stream"), "{err}");

    let out = pipe(&rig, "send pb/dst@one", "receive -v -c pa/src@one");
    assert_eq!(out.matches("healed pa/src@one object").count(), 2, "{out}");
    assert!(out.contains(", 2 healed,"), "{out}");
    assert!(std::fs::read(src.join("lost")).unwrap() == want, "the file");
    let frozen = src.join(".tarn/snapshot/one/lost");
    assert!(
        std::fs::read(frozen).unwrap() == want,
        "the snapshot's copy"
    );
    let clone = mount(&rig, "pa/clone").join("lost");
    assert!(std::fs::read(clone).unwrap() == want, "the clone's copy");
    rig.ok("pool scrub -w pa");
    let status = rig.ok("pool status -v pa");
    assert!(status.contains("errors: No known data errors"), "{status}");
    assert!(status.contains("with 0 errors"), "{status}");
}

fn get(rig: &Rig, property: &str, name: &str) -> String {
    rig.ok(&format!("get -H -o value {property} {name}"))
        .trim_end()
        .to_string()
}

// DESCRIPTION: clones in streams. `send -i pa/src@one pa/clone@c1` (the clone's origin, a
// snapshot of another dataset) received where `pb/src@one` exists makes `pb/clone` a clone
// of it (found by GUID): `origin` and `clones` say so, it shares the origin's blocks (its
// `used` is what the clone wrote), its tree is the sender's byte for byte; `-I` from the
// origin brings the clone's later snapshots too. A pool without the origin refuses the
// stream in one line, every device file byte-identical. `send -R` of a tree whose clone
// sorts before its origin sends the origin first and keeps the clone a clone, and a clone
// made since then goes from its origin in `send -R -I`.
// STRATEGY: two pools (and a third, empty, for the refusal); trees compared through FUSE
// mounts (skipped without /dev/fuse).
#[test]
fn clones_are_received_as_clones_of_their_origin() {
    if !fuse_ok("clones_are_received_as_clones_of_their_origin") {
        return;
    }
    let rig = Rig::new();
    two_pools(&rig);
    let src = mount(&rig, "pa/src");
    sh(
        &src,
        "head -c 2000000 /dev/urandom > big && echo a > small && mkdir d && echo b > d/f",
    );
    rig.ok("snapshot pa/src@one");
    rig.ok("clone pa/src@one pa/clone");
    let clone = mount(&rig, "pa/clone");
    sh(
        &clone,
        "echo more >> small && rm d/f && echo new > d/g && head -c 600000 /dev/urandom > grown",
    );
    rig.ok("snapshot pa/clone@c1");
    sh(&clone, "head -c 5000 /dev/urandom > later");
    rig.ok("snapshot pa/clone@c2");
    pipe(&rig, "send pa/src@one", "receive pb/src");
    let clone_stream = stream(&rig, "send -i pa/src@one pa/clone@c1");
    let c = rig.devices("c", "disk", 1);
    rig.ok(&format!("pool create -m none pc {}", join(&c)));
    let err = refused_with_stream(&rig, "receive pc/clone", &clone_stream);
    assert!(
        err.contains("local origin for clone 'pc/clone' does not exist"),
        "{err}"
    );
    // Cut halfway under -s: the partial clone is kept and `send -t` finishes it.
    let half = &clone_stream[..clone_stream.len() / 2];
    let (code, err) = receive(&rig, "receive -s pb/clone", half);
    assert_eq!(code, Some(1), "{err}");
    let rest = stream(&rig, &format!("send -t {}", token_of(&err)));
    let (code, err) = receive(&rig, "receive -s pb/clone", &rest);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(get(&rig, "origin", "pb/clone"), "pb/src@one");
    assert_eq!(get(&rig, "clones", "pb/src@one"), "pb/clone");
    assert_eq!(
        get(&rig, "guid", "pb/clone@c1"),
        get(&rig, "guid", "pa/clone@c1")
    );
    let used: u64 = get(&rig, "-p used", "pb/clone").parse().unwrap();
    // The clone wrote about 600 KB; a full copy would hold 2.6 MB.
    assert!(
        used < 1_000_000,
        "the clone shares its origin's blocks: used {used}"
    );
    let copy = mount(&rig, "pb/clone");
    let at_c1 = clone.join(".tarn/snapshot/c1");
    assert_eq!(tree(&copy), tree(&at_c1), "byte for byte as at c1");
    pipe(&rig, "send -I pa/src@one pa/clone@c2", "receive pb/clone2");
    assert_eq!(get(&rig, "origin", "pb/clone2"), "pb/src@one");
    assert_eq!(
        rig.ok("list -H -o name -t snapshot pb/clone2"),
        "pb/clone2@c1\npb/clone2@c2\n"
    );
    assert_eq!(tree(&mount(&rig, "pb/clone2")), tree(&clone));
    replicated_tree_keeps_its_clone(&rig);
}

/// `send -R` of `pa/tree`, whose `a-clone` (listed first) is a clone of `z-base@o`.
fn replicated_tree_keeps_its_clone(rig: &Rig) {
    rig.ok("create pa/tree");
    rig.ok("create pa/tree/z-base");
    let base = mount(rig, "pa/tree/z-base");
    sh(&base, "head -c 1000000 /dev/urandom > data && echo x > x");
    rig.ok("snapshot pa/tree/z-base@o");
    rig.ok("clone pa/tree/z-base@o pa/tree/a-clone");
    sh(&mount(rig, "pa/tree/a-clone"), "echo y > x && echo z > z");
    sh(&base, "echo w > x");
    rig.ok("snapshot -r pa/tree@r");
    pipe(rig, "send -R pa/tree@r", "receive pb/tree");
    assert_eq!(get(rig, "origin", "pb/tree/a-clone"), "pb/tree/z-base@o");
    assert_eq!(get(rig, "clones", "pb/tree/z-base@o"), "pb/tree/a-clone");
    assert_eq!(get(rig, "origin", "pb/tree/z-base"), "-");
    for dataset in ["tree/a-clone", "tree/z-base"] {
        let (sent, received) = (
            mount(rig, &format!("pa/{dataset}")),
            mount(rig, &format!("pb/{dataset}")),
        );
        assert_eq!(tree(&sent), tree(&received), "{dataset}");
    }
    // A clone made since @r goes from its origin in `-R -I @r`.
    rig.ok("clone pa/tree/z-base@r pa/tree/b-clone");
    sh(&mount(rig, "pa/tree/b-clone"), "echo v > v");
    rig.ok("snapshot -r pa/tree@s");
    pipe(rig, "send -R -I @r pa/tree@s", "receive pb/tree");
    assert_eq!(get(rig, "origin", "pb/tree/b-clone"), "pb/tree/z-base@r");
    let (sent, received) = (mount(rig, "pa/tree/b-clone"), mount(rig, "pb/tree/b-clone"));
    assert_eq!(tree(&sent), tree(&received), "tree/b-clone");
}

// DESCRIPTION: through the binary, `receive -o origin=pb/dst@one pb/copy` of a plain
// incremental stream makes `pb/copy` a clone of that snapshot; a missing origin, a
// dataset named as origin and a snapshot of another GUID are refused in one line with
// every device file of both pools byte-identical; `receive -F` of a full stream replaces
// a dataset without snapshots (refused in one line without `-F`); `receive -n -v -c`
// reports what it would heal (nothing here) and changes no byte.
// STRATEGY: two pools on one file each, `-m none` (no mounts needed).
#[test]
fn receive_as_a_clone_of_a_named_origin_and_over_an_empty_destination() {
    let rig = Rig::new();
    bare_pools(&rig);
    rig.ok("create pa/src");
    rig.ok("snapshot pa/src@one");
    rig.ok("set org.test:step=two pa/src");
    rig.ok("snapshot pa/src@two");
    rig.ok("create pb/other");
    rig.ok("snapshot pb/other@x");
    pipe(&rig, "send pa/src@one", "receive pb/dst");
    let incremental = stream(&rig, "send -i @one pa/src@two");
    for (origin, expected) in [
        ("pb/dst@nope", "origin 'pb/dst@nope' does not exist"),
        ("pb/dst", "origin 'pb/dst' is not a snapshot"),
        ("pb/other@x", "is not the stream's source 'pa/src@one'"),
    ] {
        let line = format!("receive -o origin={origin} pb/copy");
        let err = refused_with_stream(&rig, &line, &incremental);
        assert!(err.contains(expected), "{line}: {err}");
    }
    let (code, err) = receive(&rig, "receive -o origin=pb/dst@one pb/copy", &incremental);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(get(&rig, "origin", "pb/copy"), "pb/dst@one");
    assert_eq!(
        get(&rig, "guid", "pb/copy@two"),
        get(&rig, "guid", "pa/src@two")
    );

    rig.ok("create pb/empty");
    let full = stream(&rig, "send pa/src@one");
    let err = refused_with_stream(&rig, "receive pb/empty", &full);
    assert!(err.contains("must specify -F to overwrite it"), "{err}");
    let (code, err) = receive(&rig, "receive -F pb/empty", &full);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        get(&rig, "guid", "pb/empty@one"),
        get(&rig, "guid", "pa/src@one")
    );

    let path = rig.root().join("stream.bin");
    std::fs::write(&path, stream(&rig, "send pb/dst@one")).unwrap();
    let baseline = rig.image();
    let out = tarn(&rig, "receive -n -v -c pa/src@one")
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("dry run of a corrective receive of pa/src@one:")
            && text.contains("0 would be healed"),
        "{text}"
    );
    assert_same_image(&baseline, &rig.image(), "receive -n -c");
}

// DESCRIPTION: `receive -F` of an incremental stream onto a destination that has a snapshot
// later than the stream's source and local changes (OpenZFS rolls it back and destroys the
// later snapshots): without `-F`, with the later snapshot held, or cloned, it is refused in
// one line with every device file byte-identical; a cut stream with `-F` leaves the
// destination's files and snapshots as they were; with `-F` the later snapshot is gone,
// the stream's snapshot taken (its GUID) and the tree is the sender's.
// STRATEGY: two pools on one file each, trees compared through FUSE mounts (skipped
// without /dev/fuse).
#[test]
fn receive_f_destroys_later_snapshots_of_the_destination() {
    if !fuse_ok("receive_f_destroys_later_snapshots_of_the_destination") {
        return;
    }
    let rig = Rig::new();
    two_pools(&rig);
    let src = mount(&rig, "pa/src");
    sh(&src, "echo one > f && seq 1 20000 > big");
    rig.ok("snapshot pa/src@one");
    pipe(&rig, "send pa/src@one", "receive pb/dst");
    sh(&src, "echo two > f && seq 5 30000 > big && echo new > n");
    rig.ok("snapshot pa/src@two");
    let dst = mount(&rig, "pb/dst");
    sh(&dst, "echo mine > m");
    rig.ok("snapshot pb/dst@mine");
    sh(&dst, "echo later > l");
    rig.ok("pool sync pb");
    let incremental = stream(&rig, "send -i @one pa/src@two");
    let listing = || rig.ok("list -H -o name,guid -t snapshot -r pb");
    let before = (listing(), tree(&dst));

    let err = refused_with_stream(&rig, "receive pb/dst", &incremental);
    assert!(
        err.contains("more recent than the stream's source"),
        "{err}"
    );
    rig.ok("hold keep pb/dst@mine");
    let err = refused_with_stream(&rig, "receive -F pb/dst", &incremental);
    assert!(
        err.starts_with("cannot receive 'pb/dst': ") && err.contains("is held"),
        "{err}"
    );
    rig.ok("release keep pb/dst@mine");
    rig.ok("clone pb/dst@mine pb/kid");
    let err = refused_with_stream(&rig, "receive -F pb/dst", &incremental);
    assert!(err.contains("dependent clones (eg. 'pb/kid')"), "{err}");
    rig.ok("destroy pb/kid");

    let (code, err) = receive(
        &rig,
        "receive -F pb/dst",
        &incremental[..incremental.len() / 2],
    );
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        (listing(), tree(&dst)),
        before,
        "a cut stream changes nothing"
    );

    let (code, err) = receive(&rig, "receive -F pb/dst", &incremental);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        rig.ok("list -H -o name -t snapshot pb/dst"),
        "pb/dst@one\npb/dst@two\n"
    );
    assert_eq!(
        get(&rig, "guid", "pb/dst@two"),
        get(&rig, "guid", "pa/src@two")
    );
    assert_eq!(tree(&src), tree(&dst), "the sender's @two");
}

// DESCRIPTION: `receive -F` of a replication stream destroys what the sender no longer has
// and renames what it renamed (by GUID), as `zfs receive -F` does: after `pa/src@z` and
// `pa/src/gone` are destroyed and `pa/src/kid@z` renamed `@zz` on the sender, `send -R -i`
// piped into `receive -v -F` names each destroyed dataset and snapshot and the rename, and
// the receiver's tree lists what the sender's does. A held snapshot to destroy refuses in
// one line with every device file byte-identical; `-n -v` prints what would go and changes
// nothing.
// STRATEGY: two pools without mountpoints (no FUSE), the real binary and daemon.
#[test]
fn receive_r_f_destroys_what_the_sender_no_longer_has() {
    let rig = Rig::new();
    bare_pools(&rig);
    for dataset in ["pa/src", "pa/src/kid", "pa/src/gone"] {
        rig.ok(&format!("create {dataset}"));
    }
    rig.ok("snapshot -r pa/src@z");
    rig.ok("snapshot -r pa/src@a");
    pipe(&rig, "send -R pa/src@a", "receive pb/dst");
    rig.ok("destroy pa/src@z");
    rig.ok("destroy -r pa/src/gone");
    rig.ok("rename pa/src/kid@z pa/src/kid@zz");
    rig.ok("snapshot -r pa/src@b");
    let incremental = stream(&rig, "send -R -i @a pa/src@b");

    rig.ok("hold keep pb/dst@z");
    let err = refused_with_stream(&rig, "receive -F pb/dst", &incremental);
    assert!(
        err.starts_with("cannot receive 'pb/dst': ")
            && err.contains("'pb/dst@z' is not on the sender and is held"),
        "{err}"
    );
    rig.ok("release keep pb/dst@z");

    let path = rig.root().join("stream.bin");
    std::fs::write(&path, &incremental).unwrap();
    let baseline = rig.image();
    let out = tarn(&rig, "receive -n -v -F pb/dst")
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8(out.stdout).unwrap();
    for line in [
        "would destroy pb/dst/gone\n",
        "would destroy pb/dst@z\n",
        "would rename pb/dst/kid@z to pb/dst/kid@zz\n",
    ] {
        assert!(said.contains(line), "{line:?} in {said}");
    }
    assert_same_image(&baseline, &rig.image(), "receive -n");

    let said = pipe(&rig, "send -R -i @a pa/src@b", "receive -v -F pb/dst");
    for line in [
        "destroyed pb/dst/gone\n",
        "destroyed pb/dst@z\n",
        "renamed pb/dst/kid@z to pb/dst/kid@zz\n",
    ] {
        assert!(said.contains(line), "{line:?} in {said}");
    }
    // The same datasets, and the same snapshots by name and GUID.
    let tree = |root: &str| {
        let datasets = rig.ok(&format!("list -H -o name -r {root}"));
        let snapshots = rig.ok(&format!("list -H -o name,guid -t snapshot -r {root}"));
        (datasets + &snapshots).replace(root, "ROOT")
    };
    assert_eq!(tree("pb/dst"), tree("pa/src"));
}

// DESCRIPTION: `receive -v` of a `send -R` stream again, after a `receive -s` of it was cut
// in its last substream (`pb/dst/kid`'s) and `send -t` of the token finished that one,
// prints `skipped DS@SNAP: already received` for each substream whose snapshot the
// destination has by GUID, and receives nothing twice; the trees then list the same
// snapshots by name and GUID.
// STRATEGY: two pools without mountpoints (no FUSE), the real binary and daemon; the cut is
// the stream without its last bytes.
#[test]
fn receive_v_of_a_replication_stream_again_names_what_it_skips() {
    let rig = Rig::new();
    bare_pools(&rig);
    rig.ok("create pa/src");
    rig.ok("create pa/src/kid");
    rig.ok("snapshot -r pa/src@a");
    pipe(&rig, "send -R pa/src@a", "receive pb/dst");
    rig.ok("snapshot -r pa/src@b");
    let incremental = stream(&rig, "send -R -i @a pa/src@b");

    let cut = &incremental[..incremental.len() - 16];
    let (code, err) = receive(&rig, "receive -s pb/dst", cut);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("receive -A pb/dst/kid"),
        "the last substream is cut: {err}"
    );
    let token = token_of(&err);
    pipe(&rig, &format!("send -t {token}"), "receive -s pb/dst/kid");

    let out = receive_output(&rig, "receive -v -s pb/dst", &incremental);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8(out.stdout).unwrap();
    for line in [
        "skipped pb/dst@b: already received\n",
        "skipped pb/dst/kid@b: already received\n",
    ] {
        assert!(said.contains(line), "{line:?} in {said}");
    }
    assert!(!said.contains("received pb/dst"), "nothing twice: {said}");
    let tree = |root: &str| {
        let snapshots = rig.ok(&format!("list -H -o name,guid -t snapshot -r {root}"));
        snapshots.replace(root, "ROOT")
    };
    assert_eq!(tree("pb/dst"), tree("pa/src"));
}

// DESCRIPTION: a plain `send -I @1 pa/src@4` (a chain of three substreams) cut exactly at
// its first substream boundary is refused in one line as truncated, with the destination's
// snapshots, GUIDs and space as they were (before the chain it was received as a complete
// one-substream stream: `pb/dst@2` alone); whole, `receive -v` names `@2`, `@3`, `@4`, and
// the destination lists the sender's snapshots by name and GUID.
// STRATEGY: two pools without mountpoints (no FUSE), the real binary and daemon; the
// boundary is found as the second BEGIN's payload magic `TARNSEND` less a record header.
#[test]
fn a_plain_intermediate_stream_cut_at_a_substream_boundary_changes_nothing() {
    let rig = Rig::new();
    bare_pools(&rig);
    rig.ok("create pa/src");
    rig.ok("snapshot pa/src@1");
    pipe(&rig, "send pa/src@1", "receive pb/dst");
    for snap in ["2", "3", "4"] {
        rig.ok(&format!("snapshot pa/src@{snap}"));
    }
    let chain = stream(&rig, "send -I @1 pa/src@4");
    let begins = places(&chain, b"TARNSEND");
    assert_eq!(begins.len(), 3, "three substreams");
    let listing = || rig.ok("list -H -o name,guid,used,referenced -t all -r pb");
    let before = listing();
    let (code, err) = receive(&rig, "receive pb/dst", &chain[..begins[1] - 24]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("cannot receive 'pb/dst': invalid stream: stream is truncated")
            && err.contains("after 1 of the 3 substreams"),
        "{err}"
    );
    assert_eq!(listing(), before, "a cut chain changes nothing");
    let out = receive_output(&rig, "receive -v pb/dst", &chain);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8(out.stdout).unwrap();
    for snap in ["2", "3", "4"] {
        assert!(said.contains(&format!("pb/dst@{snap}")), "{said}");
    }
    let tree = |root: &str| {
        let snapshots = rig.ok(&format!("list -H -o name,guid -t snapshot -r {root}"));
        snapshots.replace(root, "ROOT")
    };
    assert_eq!(tree("pb/dst"), tree("pa/src"));
}

/// `tarn VERB --help`, run without a daemon: its stdout.
fn help(verb: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args([verb, "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

// DESCRIPTION: the help of `send` says that `-I` of two or more snapshots is a chain a
// receive applies all or nothing, and what `receive -s` does with it; the help of
// `receive` says it where it speaks of `-s`. Whitespace is folded (clap wraps lines to the
// terminal). Negative control: the help texts before this change fail both.
#[test]
fn send_and_receive_help_say_a_chain_is_all_or_nothing() {
    let fold = |text: String| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let send = fold(help("send"));
    assert!(
        send.contains(
            "Two or more snapshots make a chain, which a receive applies all or nothing \
             (under `receive -s`, snapshot by snapshot"
        ),
        "{send}"
    );
    let receive = fold(help("receive"));
    assert!(
        receive.contains(
            "A chain (`send -I` of two or more snapshots) or a `send -R` stream is then \
             received snapshot by snapshot, not all or nothing"
        ),
        "{receive}"
    );
}

/// `receive -d` makes the filesystems missing between its target and the new dataset, as
/// ZFS does (`send pa/x/y@s1 | receive -d pb/e` gives `pb/e/x/y`, `pb/e/x` made); a cut
/// stream leaves none of them. Negative control: without `make_parents`, the receive is
/// refused with `parent of 'pb/e/x/y' does not exist`.
#[test]
fn receive_d_makes_the_missing_intermediate_filesystems() {
    let rig = Rig::new();
    bare_pools(&rig);
    rig.ok("create -p pa/x/y");
    rig.ok("snapshot pa/x/y@s1");
    rig.ok("create pb/e");
    let full = stream(&rig, "send pa/x/y@s1");
    let names = || rig.ok("list -H -o name,type -t all -r pb/e");
    let (code, err) = receive(&rig, "receive -d pb/e", &full[..full.len() / 2]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        names(),
        "pb/e\tfilesystem\n",
        "a cut stream leaves no parent"
    );
    let (code, err) = receive(&rig, "receive -d pb/e", &full);
    assert_eq!((code, err.as_str()), (Some(0), ""));
    assert_eq!(
        names(),
        "pb/e\tfilesystem\npb/e/x\tfilesystem\npb/e/x/y\tfilesystem\npb/e/x/y@s1\tsnapshot\n"
    );
    let (code, err) = receive(&rig, "receive -d pb/none", &full);
    assert_eq!(code, Some(1), "a missing target is not made: {err}");
}

/// `receive -e` names the new dataset by the target plus the last element of the sent
/// name: `send pa/x/y@s1 | receive -e pb/into` gives `pb/into/y`. Negative control: with
/// -e appending the sent name without its pool (as -d), the receive wants `pb/into/x/y`.
#[test]
fn receive_e_appends_the_last_element_of_the_sent_name() {
    let rig = Rig::new();
    bare_pools(&rig);
    rig.ok("create -p pa/x/y");
    rig.ok("snapshot pa/x/y@s1");
    rig.ok("create pb/into");
    let (code, err) = receive(&rig, "receive -e pb/into", &stream(&rig, "send pa/x/y@s1"));
    assert_eq!((code, err.as_str()), (Some(0), ""));
    assert_eq!(
        rig.ok("list -H -o name -t all -r pb/into"),
        "pb/into\npb/into/y\npb/into/y@s1\n"
    );
}

/// `send -e` is accepted (tarn keeps no data in block pointers) and its stream received.
/// Negative control: with FEATURE_EMBEDDED not among the receiver's known features, the
/// stream is refused.
#[test]
fn send_e_round_trips() {
    let rig = Rig::new();
    bare_pools(&rig);
    rig.ok("create pa/src");
    rig.ok("snapshot pa/src@one");
    let (code, err) = receive(&rig, "receive pb/dst", &stream(&rig, "send -e pa/src@one"));
    assert_eq!((code, err.as_str()), (Some(0), ""));
    assert_eq!(
        rig.ok("get -H -o value guid pa/src@one"),
        rig.ok("get -H -o value guid pb/dst@one")
    );
}

/// `receive -u` leaves the received filesystem unmounted (a plain receive mounts it), and it
/// stays so through later receives, clones and a dry-run receive (which unmounts nothing)
/// until `mount` names it; `tarn unmount` holds a dataset the same way. Negative controls:
/// with the daemon mounting after a receive whatever `-u` says, `mounted` of the `-u` one
/// is `yes`; without the hold (module `mounts`), the later plain receive mounted it; with
/// a dry run unmounting its destination as before, `pb/loud` was left unmounted.
#[test]
fn receive_u_leaves_the_filesystem_unmounted() {
    if !fuse_ok("receive_u_leaves_the_filesystem_unmounted") {
        return;
    }
    let rig = Rig::new();
    two_pools(&rig);
    rig.ok("snapshot pa/src@one");
    pipe(&rig, "send pa/src@one", "receive -u pb/quiet");
    pipe(&rig, "send pa/src@one", "receive pb/loud");
    let mounted = |name: &str| rig.ok(&format!("get -H -o value mounted {name}"));
    assert_eq!(mounted("pb/quiet"), "no\n");
    assert_eq!(mounted("pb/loud"), "yes\n");
    rig.ok("unmount pb/loud");
    rig.ok("clone pb/quiet@one pb/copy");
    pipe(&rig, "send pa/src@one", "receive pb/more");
    assert_eq!(
        (mounted("pb/quiet"), mounted("pb/loud")),
        ("no\n".into(), "no\n".into())
    );
    rig.ok("mount pb/loud");
    assert_eq!(mounted("pb/loud"), "yes\n");
    pipe(&rig, "send pa/src@one", "receive -n -F pb/loud");
    assert_eq!(mounted("pb/loud"), "yes\n", "a dry run unmounts nothing");
    rig.ok("mount -a");
    assert_eq!(mounted("pb/quiet"), "yes\n");
}

/// `send -L` of a dataset of 1M records: the stream carries them whole (its size is about
/// the data's), and the received file has the same bytes in 1M blocks (`stat`'s block
/// size is the file's data block size). Negative control: with FEATURE_LARGE_BLOCKS not
/// among the receiver's known features, the stream is refused.
#[test]
fn send_large_blocks_keeps_one_megabyte_records() {
    if !fuse_ok("send_large_blocks_keeps_one_megabyte_records") {
        return;
    }
    let rig = Rig::new();
    two_pools(&rig);
    rig.ok("set recordsize=1M compression=off pa/src");
    let src = mount(&rig, "pa/src");
    sh(&src, "head -c 3145728 /dev/urandom > big");
    rig.ok("snapshot pa/src@one");
    let large = stream(&rig, "send -L pa/src@one");
    assert!(large.len() > 3 << 20 && large.len() < (3 << 20) + (256 << 10));
    let (code, err) = receive(&rig, "receive pb/dst", &large);
    assert_eq!((code, err.as_str()), (Some(0), ""));
    let dst = mount(&rig, "pb/dst");
    assert_eq!(sh(&dst, "stat -c %o big"), "1048576\n");
    assert_eq!(
        std::fs::read(src.join("big")).unwrap(),
        std::fs::read(dst.join("big")).unwrap()
    );
}
