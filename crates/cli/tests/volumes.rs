//! System tests of volumes through the real `tarn` binary and daemon, driven by real NBD
//! clients: `create -V` and its refusals (each leaving every device byte as it was),
//! `nbdinfo` (capabilities, `--map` holes), `qemu-img convert`/`compare` round trips,
//! `nbdcopy` both ways with several connections, ext4 on `nbdfuse` + a loop device across
//! export/import, a SIGKILL of the daemon during writes, protocol errors from a raw
//! socket client, `volmode=none` keeping a volume off NBD, a pool exported under its
//! clients, WRITE_ZEROES holes, a flush across connections, `tarn nbd` counts and the
//! socket's mode, properties given at create and a parent's quota. A test whose tool is
//! missing prints why and passes.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.
#![allow(clippy::big_endian_bytes)] // The raw client speaks NBD, which is big-endian.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// Whether `tool` runs here; prints why a test is skipped when it does not.
fn have(tool: &str, test: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        println!("skipped {test}: '{tool}' is not installed");
    }
    found
}

/// Whether the TLS tests' clients (nbdinfo, nbdcopy) and openssl (their certificates) are
/// installed; if not, says which is missing and that `test` is skipped.
fn have_tls_tools(test: &str) -> bool {
    if !have("nbdinfo", test) || !have("nbdcopy", test) {
        return false;
    }
    let openssl = succeeds("openssl", &["version"]);
    if !openssl {
        println!("skipped {test}: 'openssl' is not installed");
    }
    openssl
}

/// A rig under /tmp/vol-* with pool `tank` (raidz1 of 4 files, nothing mounted).
fn tank() -> Rig {
    let rig = Rig::with_prefix("vol-");
    let devices = rig.devices("d", "disk", 4);
    rig.ok(&format!(
        "pool create -m none tank raidz1 {}",
        join(&devices)
    ));
    rig
}

fn socket(rig: &Rig) -> PathBuf {
    rig.rundir.join("nbd").join("tank.sock")
}

fn uri(rig: &Rig, volume: &str) -> String {
    format!("nbd+unix:///{volume}?socket={}", socket(rig).display())
}

/// Runs a client tool that must succeed; returns its stdout.
fn tool(program: &str, args: &[&str]) -> String {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A file of `size` bytes: pseudo-random data in `[0, 4M)` and `[20M, 21M)`, holes elsewhere.
fn image(path: &Path, size: u64) {
    let mut file = std::fs::File::create(path).unwrap();
    file.set_len(size).unwrap();
    file.write_all(&noise(4 << 20, 0)).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &noise(1 << 20, 1), 20 << 20).unwrap();
}

// DESCRIPTION: `create -V` makes a volume with ZFS's properties (type, volsize,
// volblocksize, refreservation unless -s), `list -t volume` lists only volumes, `set
// volsize` grows, and every refusal (bad size, bad block size, missing pool, shrink without
// -f, a filesystem property) is one `cannot` line that leaves every device byte as it was.
// STRATEGY: scripted output (-H -p) compared exactly; refusals through `Rig::refused`.
#[test]
fn create_list_set_and_refusals() {
    let rig = tank();
    rig.ok("create -V 64M tank/thick");
    rig.ok("create -s -b 16K -V 1G tank/thin");
    rig.ok("create tank/fs");
    assert_eq!(
        rig.ok("list -H -o name -t volume"),
        "tank/thick\ntank/thin\n"
    );
    let row = rig.ok("get -H -p -o value type,volsize,volblocksize,refreservation tank/thick");
    assert_eq!(row, "volume\n67108864\n65536\n67108864\n");
    let row = rig.ok("get -H -p -o value volsize,volblocksize,refreservation tank/thin");
    assert_eq!(row, "1073741824\n16384\n0\n");
    rig.ok("set volsize=128M tank/thick");
    assert_eq!(
        rig.ok("get -H -p -o value volsize tank/thick"),
        "134217728\n"
    );
    rig.ok("snapshot tank/thick@s");
    rig.ok("pool sync");
    let baseline = rig.image();
    for line in [
        "create -V 1000 tank/bad",
        "create -V lots tank/bad",
        "create -b 3K -V 8M tank/bad",
        "create -V 8M nope/bad",
        "create -V 8M tank/thin/bad",
        "create -V 8M -o mountpoint=/x tank/bad",
        "create -V 100T tank/bad",
        "set volsize=64M tank/thick",
        "set volsize=0 tank/thick",
        "set volblocksize=8K tank/thick",
        "set volsize=8M tank/fs",
    ] {
        let line_out = rig.refused_against(&baseline, line);
        assert!(line_out.starts_with("cannot "), "{line_out}");
    }
    rig.ok("set -f volsize=64M tank/thick");
    assert_eq!(
        rig.ok("get -H -p -o value volsize tank/thick"),
        "67108864\n"
    );
    rig.ok("rename tank/thin tank/thin2");
    rig.ok("destroy tank/thin2");
    assert_eq!(rig.ok("list -H -o name -t volume"), "tank/thick\n");
}

// DESCRIPTION: nbdinfo sees the export with the capabilities tarn offers (flush, FUA,
// trim, zero, fast zero, multi-conn, cache, block sizes, base:allocation) and `--map`
// shows holes where nothing was written, data where nbdcopy wrote.
// STRATEGY: nbdcopy a half-sparse image in, then parse nbdinfo's text.
#[test]
fn nbdinfo_shows_capabilities_and_holes() {
    if !have("nbdinfo", "nbdinfo_shows_capabilities_and_holes")
        || !have("nbdcopy", "nbdinfo_shows_capabilities_and_holes")
    {
        return;
    }
    let rig = tank();
    rig.ok("create -s -V 32M tank/vol");
    let info = tool("nbdinfo", &[&uri(&rig, "tank/vol")]);
    for want in [
        "export-size: 33554432",
        "base:allocation",
        "can_flush: true",
        "can_fua: true",
        "can_trim: true",
        "can_zero: true",
        "can_fast_zero: true",
        "can_multi_conn: true",
        "can_cache: true",
        "block_size_preferred: 65536",
    ] {
        assert!(info.contains(want), "{want} in {info}");
    }
    let map = tool("nbdinfo", &["--map", &uri(&rig, "tank/vol")]);
    assert_eq!(map.lines().count(), 1, "all one hole: {map}");
    assert!(map.contains("hole,zero"), "{map}");
    let source = rig.root().join("src.raw");
    image(&source, 32 << 20);
    tool(
        "nbdcopy",
        &[source.to_str().unwrap(), &uri(&rig, "tank/vol")],
    );
    let map = tool("nbdinfo", &["--map", &uri(&rig, "tank/vol")]);
    let kinds: Vec<&str> = map
        .lines()
        .map(|l| l.split_whitespace().last().unwrap())
        .collect();
    assert_eq!(kinds, ["data", "hole,zero", "data", "hole,zero"], "{map}");
}

// DESCRIPTION: an image goes in with `qemu-img convert`, compares equal, comes back out
// with nbdcopy over four connections byte for byte, and goes in again with nbdcopy over
// four connections; the copy survives export and import of the pool.
// STRATEGY: qemu-img compare and byte comparison of files.
#[test]
fn qemu_img_and_nbdcopy_round_trips() {
    let test = "qemu_img_and_nbdcopy_round_trips";
    if !have("qemu-img", test) || !have("nbdcopy", test) {
        return;
    }
    let rig = tank();
    rig.ok("create -V 64M tank/vol");
    let source = rig.root().join("src.raw");
    image(&source, 64 << 20);
    let src = source.to_str().unwrap();
    let target = uri(&rig, "tank/vol");
    tool(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", src, &target],
    );
    tool(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "raw", src, &target],
    );
    let back = rig.root().join("back.raw");
    tool("nbdcopy", &["-C", "4", &target, back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&source).unwrap());
    rig.ok("create -V 64M tank/vol2");
    tool("nbdcopy", &["-C", "4", src, &uri(&rig, "tank/vol2")]);
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    tool(
        "qemu-img",
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            src,
            &uri(&rig, "tank/vol2"),
        ],
    );
    let status = rig.ok("nbd");
    assert!(status.contains("tank/vol2"), "{status}");
}

// DESCRIPTION: ext4 on a volume: nbdfuse exposes the export as a file, a loop device over it
// takes mkfs.ext4, a mount, a tree of files, an unmount and a clean `e2fsck -f`; after the
// pool is exported and imported the filesystem mounts again with the same files.
// STRATEGY: needs root, /dev/fuse and loop devices; skips with a reason otherwise.
#[test]
fn ext4_on_nbdfuse_and_loop_survives_export_import() {
    let test = "ext4_on_nbdfuse_and_loop_survives_export_import";
    if !have("nbdfuse", test) || !have("mkfs.ext4", test) || !Path::new("/dev/fuse").exists() {
        return;
    }
    let rig = tank();
    rig.ok("create -V 128M tank/fsvol");
    let fuse = rig.root().join("fuse");
    let mnt = rig.root().join("mnt");
    std::fs::create_dir_all(&fuse).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let Some(looped) = attach(&rig, &fuse) else {
        println!("skipped {test}: no loop device");
        return;
    };
    tool("mkfs.ext4", &["-q", &looped.device]);
    tool("mount", &[&looped.device, mnt.to_str().unwrap()]);
    for i in 0..50 {
        let dir = mnt.join(format!("d{}", i % 5));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}")), vec![i as u8; 1000 * i]).unwrap();
    }
    tool("umount", &[mnt.to_str().unwrap()]);
    tool("e2fsck", &["-f", "-n", &looped.device]);
    drop(looped);
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    let looped = attach(&rig, &fuse).unwrap();
    tool("e2fsck", &["-f", "-n", &looped.device]);
    tool("mount", &[&looped.device, mnt.to_str().unwrap()]);
    let file = std::fs::read(mnt.join("d3").join("f48")).unwrap();
    assert_eq!(file, vec![48u8; 48_000]);
    tool("umount", &[mnt.to_str().unwrap()]);
}

/// nbdfuse serving `tank/fsvol` at `fuse/vol` with a loop device over it; undone on drop.
struct Looped {
    device: String,
    fuse: PathBuf,
    nbdfuse: std::process::Child,
}

impl Drop for Looped {
    fn drop(&mut self) {
        if !self.device.is_empty() {
            let _ = Command::new("losetup").args(["-d", &self.device]).status();
        }
        let _ = Command::new("umount").arg(&self.fuse).status();
        let _ = self.nbdfuse.wait();
    }
}

fn attach(rig: &Rig, fuse: &Path) -> Option<Looped> {
    let nbdfuse = Command::new("nbdfuse")
        .arg(fuse.join("vol"))
        .arg(uri(rig, "tank/fsvol"))
        .spawn()
        .unwrap();
    // From here on the drop unmounts and waits for nbdfuse, whatever happens.
    let mut looped = Looped {
        device: String::new(),
        fuse: fuse.to_path_buf(),
        nbdfuse,
    };
    for _ in 0..100 {
        if fuse.join("vol").exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(fuse.join("vol"))
        .output()
        .ok()?;
    looped.device = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !looped.device.is_empty()).then_some(looped)
}

// DESCRIPTION: SIGKILL of the daemon while a client writes: after the restart (the next
// command starts a daemon that imports the pool from its cache file) everything written
// before a FLUSH, and the FUA write, is there, and a scrub finds nothing to repair.
// STRATEGY: qemu-io writes patterns, flushes, writes FUA, then a background qemu-io keeps
// writing elsewhere while the daemon is killed; qemu-io verifies the patterns after.
#[test]
fn sigkill_during_writes_keeps_flushed_and_fua_writes() {
    let test = "sigkill_during_writes_keeps_flushed_and_fua_writes";
    if !have("qemu-io", test) {
        return;
    }
    let rig = tank();
    rig.ok("create -V 64M tank/vol");
    let target = uri(&rig, "tank/vol");
    let wrote = tool(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0xab 0 4M",
            "-c",
            "flush",
            "-c",
            "write -f -P 0xcd 4M 1M",
            &target,
        ],
    );
    assert!(!wrote.contains("failed"), "{wrote}");
    let mut busy = Command::new("qemu-io")
        .args([
            "-f",
            "raw",
            "-c",
            "write -P 0x11 8M 32M",
            "-c",
            "write -P 0x22 8M 32M",
        ])
        .arg(&target)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    kill_daemon(&rig);
    let _ = busy.wait();
    rig.ok("pool status tank");
    let read = tool(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "read -P 0xab 0 4M",
            "-c",
            "read -P 0xcd 4M 1M",
            &target,
        ],
    );
    assert!(!read.contains("failed"), "flushed data lost: {read}");
    rig.ok("pool scrub -w tank");
    let status = rig.ok("pool status tank");
    assert!(status.contains("with 0 errors"), "{status}");
}

/// Sends raw bytes and reads `n` bytes back.
fn exchange(stream: &mut UnixStream, send: &[u8], n: usize) -> Vec<u8> {
    stream.write_all(send).unwrap();
    let mut buf = vec![0u8; n];
    stream.read_exact(&mut buf).unwrap();
    buf
}

/// The fixed-newstyle handshake up to the option phase, then `EXPORT_NAME tank/vol`.
fn connect(rig: &Rig) -> UnixStream {
    connect_to(rig, "tank/vol")
}

/// [`connect`] to the 8M volume `volume` of pool `tank`.
fn connect_to(rig: &Rig, volume: &str) -> UnixStream {
    let (stream, size) = connect_via(&socket(rig), volume);
    assert_eq!(size, 8 << 20);
    stream
}

/// [`connect`] to `volume` through the Unix socket `socket`; returns the export's size too.
fn connect_via(socket: &Path, volume: &str) -> (UnixStream, u64) {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let greeting = exchange(&mut stream, &[], 18);
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    stream.write_all(&3u32.to_be_bytes()).unwrap();
    let mut unknown = b"IHAVEOPT".to_vec();
    unknown.extend_from_slice(&77u32.to_be_bytes());
    unknown.extend_from_slice(&0u32.to_be_bytes());
    let reply = exchange(&mut stream, &unknown, 20);
    assert_eq!(
        u32::from_be_bytes(reply[12..16].try_into().unwrap()),
        (1 << 31) + 1
    );
    let message = u32::from_be_bytes(reply[16..20].try_into().unwrap()) as usize;
    exchange(&mut stream, &[], message);
    let mut go = b"IHAVEOPT".to_vec();
    go.extend_from_slice(&1u32.to_be_bytes());
    go.extend_from_slice(&u32::try_from(volume.len()).unwrap().to_be_bytes());
    go.extend_from_slice(volume.as_bytes());
    let export = exchange(&mut stream, &go, 10);
    (stream, u64::from_be_bytes(export[..8].try_into().unwrap()))
}

fn request(kind: u16, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
    request_flagged(kind, 0, cookie, offset, len)
}

/// [`request`] with command flags.
fn request_flagged(kind: u16, flags: u16, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
    let mut out = 0x2560_9513u32.to_be_bytes().to_vec();
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out
}

fn errno_of(reply: &[u8], cookie: u64) -> u32 {
    assert_eq!(&reply[..4], &0x6744_6698u32.to_be_bytes());
    assert_eq!(u64::from_be_bytes(reply[8..16].try_into().unwrap()), cookie);
    u32::from_be_bytes(reply[4..8].try_into().unwrap())
}

// DESCRIPTION: protocol errors from a raw client: an unknown option is ERR_UNSUP, a read
// past the end EINVAL, a write past the end ENOSPC, an unknown command EINVAL; a client
// that vanishes mid-request leaves the daemon serving others; destroying a volume ends the
// connections to it; a new volume of the same name is served again.
// STRATEGY: hand-made simple-reply requests over the Unix socket.
#[test]
fn protocol_errors_and_vanishing_clients() {
    let rig = tank();
    rig.ok("create -V 8M tank/vol");
    let mut a = connect(&rig);
    assert_eq!(
        errno_of(&exchange(&mut a, &request(0, 1, 8 << 20, 512), 16), 1),
        22
    );
    let mut write = request(1, 2, (8 << 20) - 512, 1024);
    write.extend_from_slice(&[7u8; 1024]);
    assert_eq!(errno_of(&exchange(&mut a, &write, 16), 2), 28);
    assert_eq!(
        errno_of(&exchange(&mut a, &request(42, 3, 0, 0), 16), 3),
        22
    );
    let mut ok = request(1, 4, 0, 4096);
    ok.extend_from_slice(&[9u8; 4096]);
    assert_eq!(errno_of(&exchange(&mut a, &ok, 16), 4), 0);
    let reply = exchange(&mut a, &request(0, 5, 0, 4096), 16 + 4096);
    assert_eq!(errno_of(&reply, 5), 0);
    assert!(reply[16..].iter().all(|b| *b == 9));
    // A client that sends half a write and vanishes.
    let mut b = connect(&rig);
    b.write_all(&request(1, 6, 0, 65536)).unwrap();
    b.write_all(&[1u8; 100]).unwrap();
    drop(b);
    rig.ok("destroy tank/vol");
    // The connection to the destroyed volume is ended (its dataset id may be reused).
    let _ = a.write_all(&request(0, 7, 0, 512));
    let mut rest = Vec::new();
    let ended = a.read_to_end(&mut rest);
    assert!(ended.is_err() || rest.is_empty(), "{rest:?}");
    rig.ok("create -V 8M tank/vol");
    let mut c = connect(&rig);
    assert_eq!(
        errno_of(&exchange(&mut c, &request(3, 8, 0, 0), 16), 8),
        0,
        "flush"
    );
    c.write_all(&request(2, 9, 0, 0)).unwrap();
}

/// Whether `EXPORT_NAME volume` is answered with the export's size: an unknown export has
/// no error reply in that option, so the server ends the connection instead.
fn export_name_opens(rig: &Rig, volume: &str) -> bool {
    let mut stream = UnixStream::connect(socket(rig)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    exchange(&mut stream, &3u32.to_be_bytes(), 18);
    let mut go = b"IHAVEOPT".to_vec();
    go.extend_from_slice(&1u32.to_be_bytes());
    go.extend_from_slice(&u32::try_from(volume.len()).unwrap().to_be_bytes());
    go.extend_from_slice(volume.as_bytes());
    stream.write_all(&go).unwrap();
    let mut answer = Vec::new();
    let _ = stream.take(10).read_to_end(&mut answer);
    answer.len() == 10
}

/// Whether the server ended `client`'s connection: a read request gets no reply but the
/// end of the stream (or a reset), not the read timeout of a connection still open.
fn ended(client: &mut UnixStream) -> bool {
    let _ = client.write_all(&request(0, 7, 0, 512));
    let mut rest = Vec::new();
    match client.read_to_end(&mut rest) {
        Ok(_) => rest.is_empty(),
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

// DESCRIPTION: `volmode=none` keeps a volume off NBD as ZFS keeps it out of /dev: not in
// NBD_OPT_LIST or `tarn nbd`, GO refused as an unknown export, EXPORT_NAME ended; setting it
// on a served volume ends that volume's connections (as `destroy` does) and leaves the
// other volume's alone; set back, the volume is served again with its bytes; inherited
// from the root it hides every volume.
// STRATEGY: nbdinfo --list and nbdinfo (GO) against the Unix socket, a raw EXPORT_NAME, and
// the raw client of `protocol_errors_and_vanishing_clients` for the open connections.
// Negative control: with the daemon's `exposed` filter made to keep every volume, the
// connection to tank/vol stayed open after `set volmode=none` and the test failed there.
#[test]
fn volmode_none_keeps_a_volume_off_nbd() {
    let test = "volmode_none_keeps_a_volume_off_nbd";
    if !have("nbdinfo", test) {
        return;
    }
    let rig = tank();
    rig.ok("create -V 8M tank/vol");
    rig.ok("create -V 8M tank/other");
    let mut served = connect(&rig);
    write_4k(&mut served, 0, 9);
    let mut other = connect_to(&rig, "tank/other");
    rig.ok("set volmode=none tank/vol");
    assert_eq!(rig.ok("get -H -o value volmode tank/vol"), "none\n");
    assert!(ended(&mut served), "the volume's connection is ended");
    assert!(
        read_4k(&mut other, 0) == vec![0u8; 4096],
        "the other volume stays"
    );
    let listed = |rig: &Rig| {
        let all = format!("nbd+unix://?socket={}", socket(rig).display());
        let list = tool("nbdinfo", &["--list", "--json", &all]);
        (
            list.contains("\"tank/vol\""),
            list.contains("\"tank/other\""),
        )
    };
    assert_eq!(listed(&rig), (false, true));
    let rows = rig.ok("nbd -H");
    let volumes: Vec<&str> = rows
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(volumes, ["tank/other"], "{rows}");
    let go = Command::new("nbdinfo")
        .arg(uri(&rig, "tank/vol"))
        .output()
        .unwrap();
    assert!(!go.status.success(), "GO of a volmode=none volume");
    assert!(!export_name_opens(&rig, "tank/vol"));
    rig.ok("set volmode=default tank/vol");
    assert_eq!(listed(&rig), (true, true));
    assert!(
        read_4k(&mut connect(&rig), 0) == vec![9u8; 4096],
        "served again"
    );
    rig.ok("set volmode=none tank");
    assert_eq!(listed(&rig), (true, false), "tank/vol's own value wins");
    rig.ok("inherit volmode tank/vol");
    assert_eq!(listed(&rig), (false, false));
    assert_eq!(rig.ok("nbd -H"), "");
}

/// A port nothing listens on, below Linux's ephemeral range (32768 and up), so that no
/// client connection of a test running alongside takes it as its own port between this
/// probe and the daemon's bind (a port from `bind(0)` is an ephemeral one, and the listener
/// then failed now and then in full runs); each call of this test binary gets its own.
fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 1000) as u16 * 10;
    loop {
        let port = base + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The TCP sockets the rig's daemon listens on, as (local address in /proc/net's hex,
/// port). Asked of the daemon's own descriptors, not of the port: a probe by connecting
/// also sees whatever else on the machine holds the port, and a CI run once found a port
/// that was free a moment before answering ("no TCP by default" failed).
fn daemon_listeners(rig: &Rig) -> Vec<(String, u16)> {
    let sockets: std::collections::HashSet<String> =
        std::fs::read_dir(format!("/proc/{}/fd", daemon_pid(rig)))
            .expect("the daemon's descriptors")
            .filter_map(|fd| {
                let target = std::fs::read_link(fd.ok()?.path()).ok()?;
                let inode = target
                    .to_str()?
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?;
                Some(inode.to_string())
            })
            .collect();
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let Some((addr, hex_port)) = local.split_once(':') else {
                continue;
            };
            if *state == "0A" && sockets.contains(*inode) {
                let port = u16::from_str_radix(hex_port, 16).unwrap();
                found.push((addr.to_string(), port));
            }
        }
    }
    found
}

/// Whether the rig's daemon listens on TCP `port`.
fn listening(rig: &Rig, port: u16) -> bool {
    daemon_listeners(rig).iter().any(|(_, p)| *p == port)
}

/// The local addresses (hex, as /proc/net/tcp shows them) the daemon listens on at `port`.
fn listen_addresses(rig: &Rig, port: u16) -> Vec<String> {
    let listeners = daemon_listeners(rig).into_iter();
    listeners
        .filter(|(_, p)| *p == port)
        .map(|(addr, _)| addr)
        .collect()
}

// DESCRIPTION: NBD over TCP only when the pool's root asks for it with the user property
// `org.tarn:nbd_listen`: nothing listens by default; `ADDRESS:PORT` serves the pool's
// volumes there (nbdinfo, `--list`, qemu-img convert and compare over `nbd://`); a bare
// port binds loopback only and moves the listener; a value that does not parse serves
// nothing and the daemon goes on; `inherit` stops it.
// STRATEGY: real clients against 127.0.0.1; the bound address read from /proc/net/tcp.
#[test]
fn tcp_listener_follows_the_pool_property() {
    let test = "tcp_listener_follows_the_pool_property";
    if !have("nbdinfo", test) || !have("qemu-img", test) {
        return;
    }
    let rig = tank();
    rig.ok("create -V 32M tank/vol");
    let port = free_port();
    assert_eq!(daemon_listeners(&rig), [], "no TCP by default");
    assert!(rig.ok("nbd -H").trim_end().ends_with("\t-"), "no TCP URI");
    rig.ok(&format!("set org.tarn:nbd_listen=127.0.0.1:{port} tank"));
    let target = format!("nbd://127.0.0.1:{port}/tank/vol");
    let row = rig.ok("nbd -H");
    assert!(row.trim_end().ends_with(&format!("\t{target}")), "{row}");
    let info = tool("nbdinfo", &[&target]);
    assert!(info.contains("export-size: 33554432"), "{info}");
    let list = tool("nbdinfo", &["--list", &format!("nbd://127.0.0.1:{port}")]);
    assert!(list.contains("tank/vol"), "{list}");
    let source = rig.root().join("src.raw");
    image(&source, 32 << 20);
    let src = source.to_str().unwrap();
    tool(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", src, &target],
    );
    tool(
        "qemu-img",
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            src,
            &uri(&rig, "tank/vol"),
        ],
    );
    let moved = free_port();
    rig.ok(&format!("set org.tarn:nbd_listen={moved} tank"));
    assert!(!listening(&rig, port), "the old port is closed");
    assert_eq!(listen_addresses(&rig, moved), ["0100007F"], "loopback only");
    tool(
        "qemu-img",
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            src,
            &format!("nbd://127.0.0.1:{moved}/tank/vol"),
        ],
    );
    rig.ok("set org.tarn:nbd_listen=nowhere tank");
    assert!(!listening(&rig, moved), "a bad value serves nothing");
    rig.ok("list tank/vol");
    rig.ok(&format!("set org.tarn:nbd_listen=127.0.0.1:{port} tank"));
    assert!(listening(&rig, port));
    rig.ok("inherit org.tarn:nbd_listen tank");
    assert!(!listening(&rig, port), "inherit stops the listener");
}

/// The TCP column of `tarn nbd -H` for `volume`.
fn tcp_uri(rig: &Rig, volume: &str) -> String {
    let rows = rig.ok("nbd -H");
    let row = rows
        .lines()
        .find(|line| line.split('\t').next() == Some(volume))
        .unwrap_or_else(|| panic!("no row for {volume}: {rows}"));
    row.rsplit('\t').next().unwrap().to_string()
}

// DESCRIPTION: the TCP listener settings are read per volume, inherited as user properties
// are: `org.tarn:nbd_listen` on one volume serves it over TCP while the pool's other
// volumes stay Unix-only (not listed there, refused by name, `-` in `tarn nbd`); set on a
// filesystem it serves the volumes below it on a listener of their own; `off` on one of
// them keeps that one off; `inherit` on the volume closes its port.
// STRATEGY: nbdinfo (`--list`, and by export name) against 127.0.0.1; `tarn nbd -H`.
#[test]
fn tcp_listener_per_volume_and_inherited() {
    let test = "tcp_listener_per_volume_and_inherited";
    if !have("nbdinfo", test) {
        return;
    }
    let rig = tank();
    rig.ok("create -V 32M tank/a");
    rig.ok("create -V 32M tank/b");
    rig.ok("create tank/fs");
    rig.ok("create -V 16M tank/fs/c");
    rig.ok("create -V 16M tank/fs/d");
    let (one, two) = (free_port(), free_port());
    rig.ok(&format!("set org.tarn:nbd_listen={one} tank/a"));
    let at = |port: u16, volume: &str| format!("nbd://127.0.0.1:{port}/{volume}");
    assert_eq!(tcp_uri(&rig, "tank/a"), at(one, "tank/a"));
    assert_eq!(tcp_uri(&rig, "tank/b"), "-");
    assert!(tool("nbdinfo", &[&at(one, "tank/a")]).contains("export-size: 33554432"));
    assert!(
        !succeeds("nbdinfo", &[&at(one, "tank/b")]),
        "b is Unix-only"
    );
    let list = tool("nbdinfo", &["--list", &format!("nbd://127.0.0.1:{one}")]);
    assert!(
        list.contains("tank/a") && !list.contains("tank/b"),
        "{list}"
    );
    assert!(
        succeeds("nbdinfo", &[&uri(&rig, "tank/b")]),
        "b on the Unix socket"
    );
    rig.ok(&format!("set org.tarn:nbd_listen={two} tank/fs"));
    for volume in ["tank/fs/c", "tank/fs/d"] {
        assert_eq!(tcp_uri(&rig, volume), at(two, volume));
        assert!(tool("nbdinfo", &[&at(two, volume)]).contains("export-size: 16777216"));
    }
    assert!(
        !succeeds("nbdinfo", &[&at(two, "tank/a")]),
        "a is on its own port"
    );
    assert!(!succeeds("nbdinfo", &[&at(one, "tank/fs/c")]));
    rig.ok("set org.tarn:nbd_listen=off tank/fs/d");
    assert_eq!(tcp_uri(&rig, "tank/fs/d"), "-");
    assert!(
        !succeeds("nbdinfo", &[&at(two, "tank/fs/d")]),
        "off below an inherited on"
    );
    assert!(succeeds("nbdinfo", &[&at(two, "tank/fs/c")]));
    rig.ok("inherit org.tarn:nbd_listen tank/a");
    assert!(
        !listening(&rig, one),
        "no volume wants the first port any more"
    );
    assert!(listening(&rig, two));
    assert_eq!(tcp_uri(&rig, "tank/a"), "-");
}

/// A CA and a server certificate for 127.0.0.1 signed by it, made by openssl in `dir`:
/// `ca-cert.pem` (what libnbd's `tls-certificates` directory needs), `server-cert.pem` and
/// `server-key.pem` (what the server's directory needs).
fn certificates(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let at = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=tarn test CA"];
    ca.extend(ec);
    let (ca_key, ca_cert) = (at("ca-key.pem"), at("ca-cert.pem"));
    ca.extend(["-keyout", &ca_key, "-out", &ca_cert]);
    ca.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
    ca.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
    tool("openssl", &ca);
    let (key, csr) = (at("server-key.pem"), at("server.csr"));
    let mut request = vec![
        "req",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &key,
        "-out",
        &csr,
    ];
    request.extend(ec);
    tool("openssl", &request);
    let ext = at("server.ext");
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n\
         keyUsage=critical,digitalSignature\n",
    )
    .unwrap();
    let cert = at("server-cert.pem");
    tool(
        "openssl",
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            &csr,
            "-CA",
            &ca_cert,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-extfile",
            &ext,
            "-out",
            &cert,
        ],
    );
}

/// A client certificate directory `out` as libnbd's `tls-certificates` wants it:
/// `ca-cert.pem` (the CA of `server`, to check the server) and, unless `signer` is `None`,
/// `client-cert.pem` (naming the client `name` in its subjectAltName) and
/// `client-key.pem` signed by the CA in `signer` (made by openssl).
fn client_certificates(server: &Path, signer: Option<&Path>, out: &Path, name: &str) {
    std::fs::create_dir_all(out).unwrap();
    std::fs::copy(server.join("ca-cert.pem"), out.join("ca-cert.pem")).unwrap();
    let Some(signer) = signer else { return };
    let at = |dir: &Path, name: &str| dir.join(name).to_str().unwrap().to_string();
    let (key, csr) = (at(out, "client-key.pem"), at(out, "client.csr"));
    tool(
        "openssl",
        &[
            "req",
            "-subj",
            "/CN=tarn test client",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
        ],
    );
    let ext = at(out, "client.ext");
    std::fs::write(
        &ext,
        format!(
            "subjectAltName=DNS:{name}\nextendedKeyUsage=clientAuth\n\
             keyUsage=critical,digitalSignature\n"
        ),
    )
    .unwrap();
    let (ca_cert, ca_key) = (at(signer, "ca-cert.pem"), at(signer, "ca-key.pem"));
    tool(
        "openssl",
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            &csr,
            "-CA",
            &ca_cert,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-extfile",
            &ext,
            "-out",
            &at(out, "client-cert.pem"),
        ],
    );
}

/// Whether `program args` succeeds.
fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

// DESCRIPTION: NBD over TLS on the TCP listener: `org.tarn:nbd_tls=require` with
// `org.tarn:nbd_tls_certificates=DIR` serves `nbds://` (STARTTLS, the certificate checked
// by libnbd against a test CA) and refuses clients in the clear (NBD_REP_ERR_TLS_REQD);
// data written over TLS by nbdcopy compares equal over the Unix socket; `=on` serves both;
// a certificate directory without certificates serves nothing and the daemon goes on.
// STRATEGY: certificates made by openssl; real clients (nbdinfo, nbdcopy, qemu-img with
// tls-creds-x509).
#[test]
fn tls_over_tcp_required_and_offered() {
    let test = "tls_over_tcp_required_and_offered";
    if !have_tls_tools(test) {
        return;
    }
    let rig = tank();
    rig.ok("create -V 32M tank/vol");
    let certs = rig.root().join("certs");
    certificates(&certs);
    let dir = certs.to_str().unwrap();
    let port = free_port();
    rig.ok(&format!("set org.tarn:nbd_tls_certificates={dir} tank"));
    rig.ok("set org.tarn:nbd_tls=require tank");
    rig.ok(&format!("set org.tarn:nbd_listen={port} tank"));
    let tls = format!("nbds://127.0.0.1:{port}/tank/vol?tls-certificates={dir}");
    let clear = format!("nbd://127.0.0.1:{port}/tank/vol");
    let row = rig.ok("nbd -H");
    let want = format!("\tnbds://127.0.0.1:{port}/tank/vol");
    assert!(row.trim_end().ends_with(&want), "{row}");
    let info = tool("nbdinfo", &[&tls]);
    assert!(info.contains("export-size: 33554432"), "{info}");
    assert!(
        !succeeds("nbdinfo", &[&clear]),
        "TLS required: the clear is refused"
    );
    let source = rig.root().join("src.raw");
    image(&source, 32 << 20);
    let src = source.to_str().unwrap();
    tool("nbdcopy", &["-C", "2", src, &tls]);
    tool(
        "qemu-img",
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            src,
            &uri(&rig, "tank/vol"),
        ],
    );
    let creds = format!("tls-creds-x509,id=tls0,endpoint=client,dir={dir}");
    let opts = format!(
        "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port={port},\
         export=tank/vol,tls-creds=tls0"
    );
    let info = tool(
        "qemu-img",
        &["info", "--object", &creds, "--image-opts", &opts],
    );
    assert!(info.contains("virtual size: 32 MiB"), "{info}");
    let back = rig.root().join("back.raw");
    tool("nbdcopy", &[&tls, back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&source).unwrap());
    rig.ok("set org.tarn:nbd_tls=on tank");
    assert!(tool("nbdinfo", &[&clear]).contains("export-size: 33554432"));
    assert!(tool("nbdinfo", &[&tls]).contains("export-size: 33554432"));
    let empty = rig.root().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    rig.ok(&format!(
        "set org.tarn:nbd_tls_certificates={} tank",
        empty.display()
    ));
    assert!(!listening(&rig, port), "no certificate: nothing served");
    rig.ok("list tank/vol");
}

// DESCRIPTION: TLS client certificates: `org.tarn:nbd_tls_verify=require` (with
// `nbd_tls=require`) admits only clients presenting a certificate signed by `ca-cert.pem` in
// the server's certificate directory: nbdinfo and nbdcopy (both directions, two
// connections) with such a certificate work; a client with no certificate and one whose
// certificate another CA signed are refused in the handshake; `=none` admits the client
// without one again (so the refusal was the certificate's); `require` with TLS only offered
// serves nothing (a client in the clear would need no certificate) and the daemon goes on.
// STRATEGY: a CA, server and client certificates made by openssl; libnbd's
// `tls-certificates` directories holding ca-cert.pem and, for the clients that have one,
// client-cert.pem and client-key.pem.
#[test]
fn tls_client_certificates_required() {
    let test = "tls_client_certificates_required";
    if !have_tls_tools(test) {
        return;
    }
    let rig = tank();
    rig.ok("create -V 32M tank/vol");
    let root = rig.root();
    let (server, other) = (root.join("server"), root.join("other-ca"));
    certificates(&server);
    certificates(&other);
    let (good, bare, stranger) = (root.join("good"), root.join("bare"), root.join("stranger"));
    client_certificates(&server, Some(&server), &good, "good.client");
    client_certificates(&server, None, &bare, "bare.client");
    client_certificates(&server, Some(&other), &stranger, "stranger.client");
    let port = free_port();
    rig.ok(&format!(
        "set org.tarn:nbd_tls_certificates={} tank",
        server.display()
    ));
    rig.ok("set org.tarn:nbd_tls=require tank");
    rig.ok("set org.tarn:nbd_tls_verify=require tank");
    rig.ok(&format!("set org.tarn:nbd_listen={port} tank"));
    let with = |dir: &Path| {
        format!(
            "nbds://127.0.0.1:{port}/tank/vol?tls-certificates={}",
            dir.display()
        )
    };
    assert!(tool("nbdinfo", &[&with(&good)]).contains("export-size: 33554432"));
    let source = root.join("src.raw");
    image(&source, 32 << 20);
    tool(
        "nbdcopy",
        &["-C", "2", source.to_str().unwrap(), &with(&good)],
    );
    let back = root.join("back.raw");
    tool(
        "nbdcopy",
        &["-C", "2", &with(&good), back.to_str().unwrap()],
    );
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&source).unwrap());
    assert!(
        !succeeds("nbdinfo", &[&with(&bare)]),
        "no client certificate"
    );
    assert!(
        !succeeds("nbdinfo", &[&with(&stranger)]),
        "another CA's certificate"
    );
    assert!(!succeeds(
        "nbdcopy",
        &[&with(&bare), back.to_str().unwrap()]
    ));
    rig.ok("set org.tarn:nbd_tls_verify=none tank");
    assert!(tool("nbdinfo", &[&with(&bare)]).contains("export-size: 33554432"));
    rig.ok("set org.tarn:nbd_tls_verify=require tank");
    assert!(!succeeds("nbdinfo", &[&with(&bare)]));
    rig.ok("set org.tarn:nbd_tls=on tank");
    assert!(
        !listening(&rig, port),
        "verify without required TLS: nothing served"
    );
    rig.ok("list tank/vol");
}

/// Revokes the client certificate `cert` with the CA in `ca` (openssl's `ca` database,
/// kept in `ca`) and writes the CA's revocation list to `out` (PEM, version 2).
fn revoke(ca: &Path, cert: &Path, out: &Path) {
    let at = |name: &str| ca.join(name).to_str().unwrap().to_string();
    let config = at("ca.cnf");
    std::fs::write(
        &config,
        format!(
            "[ca]\ndefault_ca = tarn\n[tarn]\ndatabase = {}\ncrlnumber = {}\n\
             default_md = sha256\ndefault_crl_days = 2\n",
            at("index.txt"),
            at("crlnumber")
        ),
    )
    .unwrap();
    std::fs::write(at("index.txt"), "").unwrap();
    std::fs::write(at("crlnumber"), "01\n").unwrap();
    let (key, ca_cert) = (at("ca-key.pem"), at("ca-cert.pem"));
    let common = [
        "ca", "-batch", "-config", &config, "-keyfile", &key, "-cert", &ca_cert,
    ];
    let mut revoke = common.to_vec();
    revoke.extend(["-revoke", cert.to_str().unwrap()]);
    tool("openssl", &revoke);
    let mut list = common.to_vec();
    list.extend(["-gencrl", "-out", out.to_str().unwrap()]);
    tool("openssl", &list);
}

/// A server certificate directory `out` with the certificates of `from` and `crl` as its
/// `ca-crl.pem`.
fn with_crl(from: &Path, out: &Path, crl: &[u8]) {
    std::fs::create_dir_all(out).unwrap();
    for name in ["ca-cert.pem", "server-cert.pem", "server-key.pem"] {
        std::fs::copy(from.join(name), out.join(name)).unwrap();
    }
    std::fs::write(out.join("ca-crl.pem"), crl).unwrap();
}

/// Whether the daemon's log has a line containing each of `words`.
fn logged(rig: &Rig, words: &[&str]) -> bool {
    let log = std::fs::read_to_string(rig.rundir.join("daemon.log")).unwrap_or_default();
    log.lines()
        .any(|line| words.iter().all(|w| line.contains(w)))
}

// DESCRIPTION: who may connect with a client certificate, beyond "the CA signed it": a
// revocation list (`ca-crl.pem` in the server's certificate directory) refuses a revoked
// certificate in the handshake and admits the others; `org.tarn:nbd_tls_clients` (names
// in the certificate's subjectAltName) admits only the listed clients; `none` admits any
// again; a revocation list that does not parse, a name that is not one, and a list without
// `nbd_tls_verify=require` each keep the listener from starting with a one-line reason in
// the daemon's log, and the daemon goes on.
// STRATEGY: a CA, server and two client certificates made by openssl, one of them revoked
// by `openssl ca`; real clients (nbdinfo, nbdcopy) with libnbd's `tls-certificates`
// directories. Switching the certificate directory restarts the listener.
#[test]
fn tls_revocation_list_and_client_allow_list() {
    let test = "tls_revocation_list_and_client_allow_list";
    if !have_tls_tools(test) {
        return;
    }
    let rig = tank();
    rig.ok("create -V 8M tank/vol");
    let root = rig.root();
    let server = root.join("server");
    certificates(&server);
    let (alice, bob) = (root.join("alice"), root.join("bob"));
    client_certificates(&server, Some(&server), &alice, "alice.example");
    client_certificates(&server, Some(&server), &bob, "bob.example");
    let port = free_port();
    let set_dir = |dir: &Path| {
        rig.ok(&format!(
            "set org.tarn:nbd_tls_certificates={} tank",
            dir.display()
        ));
    };
    set_dir(&server);
    rig.ok("set org.tarn:nbd_tls=require tank");
    rig.ok("set org.tarn:nbd_tls_verify=require tank");
    rig.ok(&format!("set org.tarn:nbd_listen={port} tank"));
    let with = |dir: &Path| {
        format!(
            "nbds://127.0.0.1:{port}/tank/vol?tls-certificates={}",
            dir.display()
        )
    };
    let admitted = |dir: &Path| succeeds("nbdinfo", &[&with(dir)]);
    assert!(admitted(&alice) && admitted(&bob), "no list yet: both");
    // Bob's certificate revoked: refused at the handshake; Alice's still admitted.
    let revoked = root.join("revoked");
    let crl = root.join("crl.pem");
    revoke(&server, &bob.join("client-cert.pem"), &crl);
    with_crl(&server, &revoked, &std::fs::read(&crl).unwrap());
    set_dir(&revoked);
    assert!(admitted(&alice), "not revoked");
    assert!(!admitted(&bob), "revoked");
    let back = root.join("back.raw");
    assert!(!succeeds("nbdcopy", &[&with(&bob), back.to_str().unwrap()]));
    tool("nbdcopy", &[&with(&alice), back.to_str().unwrap()]);
    // The allow-list, without the revocation list.
    set_dir(&server);
    rig.ok("set org.tarn:nbd_tls_clients=alice.example,127.0.0.9 tank");
    assert!(admitted(&alice), "listed");
    assert!(!admitted(&bob), "not listed");
    rig.ok("set org.tarn:nbd_tls_clients=bob.example tank");
    assert!(!admitted(&alice) && admitted(&bob), "the list decides");
    rig.ok("set org.tarn:nbd_tls_clients=none tank");
    assert!(
        admitted(&alice) && admitted(&bob),
        "none: any the CA signed"
    );
    refusals_keep_the_listener_down(&rig, port, &server);
    let admitted = |dir: &Path| succeeds("nbdinfo", &[&with(dir)]);
    assert!(admitted(&alice) && !admitted(&bob));
    rig.ok("list tank/vol");
}

/// The refusals of `tls_revocation_list_and_client_allow_list` (listener on `port`, the
/// good certificate directory `server`): each keeps the listener from starting and says
/// why in one line of the daemon's log; the last setting admits Alice alone.
fn refusals_keep_the_listener_down(rig: &Rig, port: u16, server: &Path) {
    let set_dir = |dir: &Path| {
        rig.ok(&format!(
            "set org.tarn:nbd_tls_certificates={} tank",
            dir.display()
        ));
    };
    let broken = rig.root().join("broken");
    with_crl(
        server,
        &broken,
        b"-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n",
    );
    set_dir(&broken);
    assert!(
        !listening(rig, port),
        "a bad revocation list: nothing served"
    );
    assert!(
        logged(
            rig,
            &[
                "ca-crl.pem: not a usable revocation list",
                "no NBD over TCP"
            ]
        ),
        "the reason is logged"
    );
    set_dir(server);
    assert!(listening(rig, port));
    rig.ok("set org.tarn:nbd_tls_clients=not/a/name tank");
    assert!(!listening(rig, port), "a bad name: nothing served");
    assert!(logged(rig, &["'not/a/name' is not a DNS name"]));
    rig.ok("set org.tarn:nbd_tls_clients=alice.example tank");
    rig.ok("set org.tarn:nbd_tls_verify=none tank");
    assert!(
        !listening(rig, port),
        "a list without verify: nothing served"
    );
    assert!(logged(rig, &["nbd_tls_clients=alice.example needs"]));
    rig.ok("set org.tarn:nbd_tls_verify=require tank");
}

fn tarn_command(rig: &Rig, line: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tarn"));
    command
        .arg("--rundir")
        .arg(&rig.rundir)
        .args(line.split(' ').filter(|w| !w.is_empty()))
        .current_dir(rig.root())
        .env_remove("TARN_RUNDIR");
    command
}

/// The stream `tarn SEND` writes.
fn send_stream(rig: &Rig, send: &str) -> Vec<u8> {
    let out = tarn_command(rig, send).output().unwrap();
    assert!(out.status.success(), "`tarn {send}`: {out:?}");
    out.stdout
}

/// `tarn RECEIVE` of `bytes`: whether it succeeded, and its stderr.
fn receive_stream(rig: &Rig, line: &str, bytes: &[u8]) -> (bool, String) {
    let path = rig.root().join("stream.bin");
    std::fs::write(&path, bytes).unwrap();
    let out = tarn_command(rig, line)
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8(out.stderr).unwrap())
}

/// The volume's bytes, read over NBD from its pool's socket.
fn volume_bytes(rig: &Rig, pool: &str, volume: &str) -> Vec<u8> {
    let path = rig.root().join(format!("{}.raw", volume.replace('/', "_")));
    let socket = rig.rundir.join("nbd").join(format!("{pool}.sock"));
    let uri = format!("nbd+unix:///{volume}?socket={}", socket.display());
    let _ = std::fs::remove_file(&path);
    tool("nbdcopy", &[&uri, path.to_str().unwrap()]);
    std::fs::read(&path).unwrap()
}

/// `nbdinfo --map` of a volume: its runs of data and holes.
fn volume_map(rig: &Rig, pool: &str, volume: &str) -> String {
    let socket = rig.rundir.join("nbd").join(format!("{pool}.sock"));
    let uri = format!("nbd+unix:///{volume}?socket={}", socket.display());
    tool("nbdinfo", &["--map", &uri])
}

// DESCRIPTION: volumes take part in send and receive: a full stream of a sparse volume
// received into another pool reads back byte for byte over NBD with the same holes (block
// status map); an incremental (-i) after writes and a TRIM brings the same bytes and holes;
// a full stream cut in the middle and received with -s resumes with `send -t` to the same
// bytes; an incremental of a volume into a filesystem is refused with one line.
// STRATEGY: qemu-io writes and discards through NBD; nbdcopy reads both sides whole;
// nbdinfo --map compares holes.
#[test]
fn send_receive_of_volumes_keeps_bytes_and_holes() {
    let test = "send_receive_of_volumes_keeps_bytes_and_holes";
    if !have("nbdcopy", test) || !have("qemu-io", test) || !have("nbdinfo", test) {
        return;
    }
    let rig = tank();
    let b = rig.devices("b", "disk", 1);
    rig.ok(&format!("pool create -m none pb {}", join(&b)));
    rig.ok("create -s -V 32M -b 16K tank/vol");
    let source = rig.root().join("src.raw");
    image(&source, 32 << 20);
    tool(
        "qemu-img",
        &[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            source.to_str().unwrap(),
            &uri(&rig, "tank/vol"),
        ],
    );
    rig.ok("snapshot tank/vol@one");
    let full = send_stream(&rig, "send tank/vol@one");
    let (ok, err) = receive_stream(&rig, "receive pb/vol", &full);
    assert!(ok, "{err}");
    assert!(volume_bytes(&rig, "pb", "pb/vol") == std::fs::read(&source).unwrap());
    assert_eq!(
        volume_map(&rig, "pb", "pb/vol"),
        volume_map(&rig, "tank", "tank/vol")
    );
    let listed = rig.ok("list -H -p -o name,type,volsize,volblocksize pb/vol");
    assert_eq!(listed.trim(), "pb/vol\tvolume\t33554432\t16384");

    tool(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0x5a 24M 1M",
            "-c",
            "discard 0 1M",
            &uri(&rig, "tank/vol"),
        ],
    );
    rig.ok("snapshot tank/vol@two");
    let incremental = send_stream(&rig, "send -i @one tank/vol@two");
    let (ok, err) = receive_stream(&rig, "receive pb/vol", &incremental);
    assert!(ok, "{err}");
    let now = volume_bytes(&rig, "tank", "tank/vol");
    assert!(now[..1 << 20].iter().all(|b| *b == 0) && now[24 << 20] == 0x5a);
    assert!(
        volume_bytes(&rig, "pb", "pb/vol") == now,
        "incremental bytes"
    );
    assert_eq!(
        volume_map(&rig, "pb", "pb/vol"),
        volume_map(&rig, "tank", "tank/vol"),
        "the trimmed range is a hole on both sides"
    );

    resumed_and_refused(&rig, &now, &incremental);
}

/// The rest of `send_receive_of_volumes_keeps_bytes_and_holes`: a full stream of
/// tank/vol@two (which reads `now`) cut and resumed; `incremental` into a filesystem.
fn resumed_and_refused(rig: &Rig, now: &[u8], incremental: &[u8]) {
    let whole = send_stream(rig, "send tank/vol@two");
    let (ok, err) = receive_stream(rig, "receive -s pb/copy", &whole[..whole.len() / 2]);
    assert!(!ok && err.lines().count() == 1, "{err}");
    let at = err.find("send -t ").unwrap() + 8;
    let token = err[at..].split('\'').next().unwrap();
    let rest = send_stream(rig, &format!("send -t {token}"));
    let (ok, err) = receive_stream(rig, "receive -s pb/copy", &rest);
    assert!(ok, "{err}");
    assert!(volume_bytes(rig, "pb", "pb/copy") == *now, "resumed bytes");

    rig.ok("create pb/fs");
    rig.ok("snapshot pb/fs@one");
    let (ok, err) = receive_stream(rig, "receive -F pb/fs", incremental);
    assert!(!ok, "a volume stream into a filesystem");
    assert!(
        err.starts_with("cannot receive") && err.lines().count() == 1,
        "{err}"
    );
    assert!(
        err.contains("holds a volume but 'pb/fs' is a filesystem"),
        "{err}"
    );
}

/// Writes 4K of `byte` at `offset` through `client` (then FLUSH): both must succeed.
fn write_4k(client: &mut UnixStream, offset: u64, byte: u8) {
    let mut write = request(1, 1, offset, 4096);
    write.extend_from_slice(&[byte; 4096]);
    assert_eq!(errno_of(&exchange(client, &write, 16), 1), 0, "write");
    assert_eq!(
        errno_of(&exchange(client, &request(3, 2, 0, 0), 16), 2),
        0,
        "flush"
    );
}

/// The 4K at `offset` read through `client`, which must still be served.
fn read_4k(client: &mut UnixStream, offset: u64) -> Vec<u8> {
    let reply = exchange(client, &request(0, 3, offset, 4096), 16 + 4096);
    assert_eq!(errno_of(&reply, 3), 0, "read at {offset}");
    reply[16..].to_vec()
}

// DESCRIPTION: `receive -F` of an incremental stream onto a volume a client has open, with
// a snapshot later than the stream's source and writes since: the client stays connected,
// as through `rollback -r` of a served volume (the volume keeps its dataset, so the
// daemon's NBD table keeps its connections), sees the old bytes while the stream is
// received and after a cut one, and the received bytes after END (the later snapshot's and
// the head's writes gone, nothing stale from a cache); its next write lands on them.
// STRATEGY: hand-made simple-reply requests over the Unix socket; the stream comes from a
// copy of the volume in the same pool (same snapshot GUID), changed and snapshotted.
#[test]
fn receive_f_onto_a_served_volume_keeps_its_clients_on_the_new_bytes() {
    let rig = tank();
    rig.ok("create -V 8M tank/vol");
    let mut client = connect(&rig);
    write_4k(&mut client, 0, 9);
    rig.ok("snapshot tank/vol@one");
    let full = send_stream(&rig, "send tank/vol@one");
    let (ok, err) = receive_stream(&rig, "receive tank/src", &full);
    assert!(ok, "{err}");
    let mut source = connect_to(&rig, "tank/src");
    write_4k(&mut source, 0, 5);
    rig.ok("snapshot tank/src@two");
    let incremental = send_stream(&rig, "send -i @one tank/src@two");

    // Today's rollback of a served volume: the client stays and reads the snapshot.
    write_4k(&mut client, 8192, 7);
    rig.ok("snapshot tank/vol@later");
    write_4k(&mut client, 16384, 3);
    rig.ok("rollback tank/vol@later");
    assert!(
        read_4k(&mut client, 16384) == vec![0u8; 4096],
        "rolled back"
    );
    write_4k(&mut client, 16384, 3);

    let (ok, err) = receive_stream(&rig, "receive -F tank/vol", &incremental[..100]);
    assert!(!ok, "a cut stream: {err}");
    assert!(read_4k(&mut client, 0) == vec![9u8; 4096], "as it was");
    assert!(read_4k(&mut client, 8192) == vec![7u8; 4096], "as it was");
    assert!(read_4k(&mut client, 16384) == vec![3u8; 4096], "as it was");

    let (ok, err) = receive_stream(&rig, "receive -F tank/vol", &incremental);
    assert!(ok, "{err}");
    assert_eq!(
        rig.ok("list -H -o name -t snapshot tank/vol"),
        "tank/vol@one\ntank/vol@two\n"
    );
    assert!(
        read_4k(&mut client, 0) == vec![5u8; 4096],
        "the received bytes"
    );
    assert!(
        read_4k(&mut client, 8192) == vec![0u8; 4096],
        "the later snapshot's went"
    );
    assert!(
        read_4k(&mut client, 16384) == vec![0u8; 4096],
        "the head's write went"
    );
    write_4k(&mut client, 8192, 1);
    assert!(read_4k(&mut client, 8192) == vec![1u8; 4096]);
    assert!(read_4k(&mut client, 0) == vec![5u8; 4096]);
}

/// A second pool `other` (one device file) with the 8M volume `other/vol`.
fn other_pool(rig: &Rig) -> PathBuf {
    let devices = rig.devices("e", "disk", 1);
    rig.ok(&format!("pool create -m none other {}", devices[0]));
    rig.ok("create -V 8M other/vol");
    rig.rundir.join("nbd").join("other.sock")
}

// DESCRIPTION: exporting a pool while a client is connected to one of its volumes ends that
// connection cleanly (the stream ends, no reply to the next request) and leaves another
// pool's listener and clients served as before.
// STRATEGY: raw simple-reply clients on both pools' Unix sockets; `tarn nbd` after.
#[test]
fn pool_export_ends_its_clients_and_spares_other_pools() {
    let rig = tank();
    rig.ok("create -V 8M tank/vol");
    let other_socket = other_pool(&rig);
    let mut client = connect(&rig);
    write_4k(&mut client, 0, 4);
    let (mut bystander, _) = connect_via(&other_socket, "other/vol");
    write_4k(&mut bystander, 0, 6);
    rig.ok("pool export tank");
    assert!(
        ended(&mut client),
        "the exported pool's client is disconnected"
    );
    assert!(!socket(&rig).exists(), "its socket is gone");
    assert!(
        read_4k(&mut bystander, 0) == vec![6u8; 4096],
        "the other pool serves on"
    );
    let (mut fresh, _) = connect_via(&other_socket, "other/vol");
    assert!(
        read_4k(&mut fresh, 0) == vec![6u8; 4096],
        "and takes new clients"
    );
    let rows = rig.ok("nbd -H");
    assert!(
        rows.starts_with("other/vol\t") && !rows.contains("tank/"),
        "{rows}"
    );
}

// DESCRIPTION: WRITE_ZEROES over the wire (with FAST_ZERO, which tarn always accepts since
// zeroing writes no data) frees the blocks: block status shows a hole where data was, and
// the range reads as zeros.
// STRATEGY: a raw client writes 128K and zeroes it with FAST_ZERO; nbdinfo --map before and
// after.
#[test]
fn write_zeroes_with_fast_zero_leaves_a_hole() {
    if !have("nbdinfo", "write_zeroes_with_fast_zero_leaves_a_hole") {
        return;
    }
    let rig = tank();
    rig.ok("create -s -V 8M tank/vol");
    let mut client = connect(&rig);
    let mut write = request(1, 1, 0, 128 << 10);
    write.extend_from_slice(&[3u8; 128 << 10]);
    assert_eq!(errno_of(&exchange(&mut client, &write, 16), 1), 0);
    let map = volume_map(&rig, "tank", "tank/vol");
    assert!(map.lines().next().unwrap().ends_with("data"), "{map}");
    let fast_zero = 1 << 4;
    let zero = request_flagged(6, fast_zero, 2, 0, 128 << 10);
    assert_eq!(
        errno_of(&exchange(&mut client, &zero, 16), 2),
        0,
        "FAST_ZERO"
    );
    assert!(read_4k(&mut client, 64 << 10) == vec![0u8; 4096]);
    let map = volume_map(&rig, "tank", "tank/vol");
    assert_eq!(map.lines().count(), 1, "one hole: {map}");
    assert!(map.contains("hole,zero"), "{map}");
}

// DESCRIPTION: multi-conn: a FLUSH on one connection makes a write acknowledged on another
// connection to the same volume durable (the spec's promise behind NBD_FLAG_CAN_MULTI_CONN):
// it is there after a SIGKILL of the daemon and the restart's import.
// STRATEGY: two raw clients; A writes without flushing, B flushes, B reads A's bytes; the
// daemon is killed as in `sigkill_during_writes_keeps_flushed_and_fua_writes` and a new
// connection reads them back.
// Negative control: with the daemon's `Backend::flush` made to return at once, the bytes
// were gone after the restart and the test failed.
#[test]
fn a_flush_on_one_connection_makes_anothers_writes_durable() {
    let rig = tank();
    rig.ok("create -V 8M tank/vol");
    let (mut a, mut b) = (connect(&rig), connect(&rig));
    let mut write = request(1, 1, 65536, 4096);
    write.extend_from_slice(&[8u8; 4096]);
    assert_eq!(errno_of(&exchange(&mut a, &write, 16), 1), 0, "write on A");
    assert_eq!(
        errno_of(&exchange(&mut b, &request(3, 2, 0, 0), 16), 2),
        0,
        "flush on B"
    );
    assert!(read_4k(&mut b, 65536) == vec![8u8; 4096], "visible on B");
    kill_daemon(&rig);
    rig.ok("pool status tank");
    assert!(
        read_4k(&mut connect(&rig), 65536) == vec![8u8; 4096],
        "durable"
    );
}

/// Whether `tarn nbd` comes to show `want` connections to `volume` within five seconds: a
/// connection is counted by its thread just after the handshake's last reply and uncounted
/// after its socket closes, so the count may trail the client by a moment.
fn connections_reach(rig: &Rig, volume: &str, want: &str) -> bool {
    for _ in 0..100 {
        let rows = rig.ok("nbd -H");
        let row = rows.lines().find(|l| l.starts_with(&format!("{volume}\t")));
        if row.unwrap().split('\t').nth(1) == Some(want) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

// DESCRIPTION: `tarn nbd` counts a volume's connections: 0, 1 while a client is in
// transmission, 0 again once it disconnects.
// STRATEGY: a raw client that connects, then sends DISC and closes; the counts polled.
#[test]
fn nbd_counts_connections_as_clients_come_and_go() {
    let rig = tank();
    rig.ok("create -V 8M tank/vol");
    assert!(connections_reach(&rig, "tank/vol", "0"));
    let mut client = connect(&rig);
    assert!(connections_reach(&rig, "tank/vol", "1"), "while connected");
    client.write_all(&request(2, 1, 0, 0)).unwrap();
    drop(client);
    assert!(connections_reach(&rig, "tank/vol", "0"), "after DISC");
}

// DESCRIPTION: a pool's Unix socket is its owner's alone: mode 0600 in a directory of mode
// 0700, both owned by the daemon's user (root in production), as issue 19 asks.
// STRATEGY: stat the socket and its directory.
#[test]
fn nbd_socket_is_owner_only() {
    use std::os::unix::fs::MetadataExt;
    let rig = tank();
    let me = std::fs::metadata(rig.root()).unwrap().uid();
    let socket = std::fs::metadata(socket(&rig)).unwrap();
    let dir = std::fs::metadata(rig.rundir.join("nbd")).unwrap();
    assert_eq!(socket.mode() & 0o7777, 0o600, "socket");
    assert_eq!(dir.mode() & 0o7777, 0o700, "directory");
    assert_eq!((socket.uid(), dir.uid()), (me, me), "owner");
}

// DESCRIPTION: volume properties given at create are the volume's: `create -V -o
// compression=zstd -o copies=2` and `get` shows them set locally; `primarycache` and
// `written` are readable on a volume, `written` counting what a client wrote.
// STRATEGY: scripted `get`; a raw client writes 1M and the pool syncs.
#[test]
fn create_v_with_properties_and_get() {
    let rig = tank();
    rig.ok("create -V 8M -o compression=zstd -o copies=2 tank/vol");
    let got = rig.ok("get -H -o property,value,source compression,copies,primarycache tank/vol");
    assert_eq!(
        got,
        "compression\tzstd\tlocal\ncopies\t2\tlocal\nprimarycache\tall\tdefault\n"
    );
    let written = |rig: &Rig| {
        let value = rig.ok("get -H -p -o value written tank/vol");
        value.trim_end().parse::<u64>().unwrap()
    };
    let before = written(&rig);
    let mut client = connect(&rig);
    let mut write = request(1, 1, 0, 1 << 20);
    write.extend_from_slice(&noise(1 << 20, 1));
    assert_eq!(errno_of(&exchange(&mut client, &write, 16), 1), 0);
    rig.ok("pool sync");
    assert!(
        written(&rig) > before,
        "written counts the client's megabyte"
    );
}

/// `len` pseudo-random bytes from `seed` (incompressible, so they take their size).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    tarn_base::SeededRng::new(seed).fill(&mut bytes);
    bytes
}

// DESCRIPTION: a parent's quota covers its volumes: `create -V` of a volume whose
// refreservation is over the quota is refused with one line and creates nothing; a sparse
// volume under it takes NBD writes until the quota is used up, then a write is refused with
// ENOSPC (the NBD errno for EDQUOT too) and the bytes written before still read back.
// STRATEGY: `Rig::refused` (no device byte changes); a raw client writes 1M requests of
// incompressible bytes, each flushed, into a 64M sparse volume under a 16M quota.
// Negative control: with the daemon's `backend_error` mapping QuotaExceeded to EIO, the
// write at 15M got 5 and the test failed.
#[test]
fn parent_quota_limits_volume_creates_and_writes() {
    let rig = tank();
    rig.ok("create -o quota=16M tank/fs");
    let line = rig.refused("create -V 32M tank/fs/big");
    assert!(line.starts_with("cannot create 'tank/fs/big': "), "{line}");
    assert_eq!(rig.ok("list -H -o name -r tank/fs"), "tank/fs\n");
    rig.ok("create -s -V 64M tank/fs/vol");
    let (mut client, _) = connect_via(&socket(&rig), "tank/fs/vol");
    let mut refused = None;
    for i in 0..48u64 {
        let mut write = request(1, i, i << 20, 1 << 20);
        write.extend_from_slice(&noise(1 << 20, i));
        let errno = errno_of(&exchange(&mut client, &write, 16), i);
        let flush = errno_of(&exchange(&mut client, &request(3, 99, 0, 0), 16), 99);
        if errno != 0 || flush != 0 {
            refused = Some((i, errno, flush));
            break;
        }
    }
    let (at, errno, flush) = refused.expect("a write over the quota is refused");
    assert_eq!((errno, flush), (28, 0), "the write gets ENOSPC, at {at}M");
    assert!((8..=24).contains(&at), "refused near 16M, at {at}M");
    let first = noise(1 << 20, 0);
    assert!(
        read_4k(&mut client, 0) == first[..4096],
        "earlier bytes stay"
    );
    assert!(read_4k(&mut client, 4096) == first[4096..8192]);
}
