//! FUSE front end through the real kernel driver, the parts that are about throughput and
//! caches: requests served on several threads at once, 1 MiB requests, the kernel's
//! attribute, entry and page caches (used, and invalidated for changes made behind its back)
//! and access times under each `atime`/`relatime` setting. Each test skips (with a printed
//! reason) only when /dev/fuse is absent.
//!
//! Where a test needs the engine busy, it holds the pool's lock itself through
//! `Engine::fs_op` with a closure that waits: requests that need the engine then wait, and
//! what the kernel serves from its caches must not.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use common::{Fixture, POOL, fuse_or_skip, pattern};
use tarn_engine::posix::RenameFlags;
use tarn_engine::{
    Device, DeviceError, DeviceProvider, Engine, FileDevice, FileOpenOptions, FsOp, QueuedDevice,
};

macro_rules! fixture_or_skip {
    ($name:expr) => {{
        if !fuse_or_skip($name) {
            return;
        }
        Fixture::new()
    }};
    ($name:expr, $properties:expr) => {{
        if !fuse_or_skip($name) {
            return;
        }
        Fixture::with($properties)
    }};
}

/// Holds the engine's pool lock on a thread of its own from when this returns until
/// `release` is set (or `limit` passes); the thread's handle says whether it let go
/// because it was told to.
fn hold_engine(
    fx: &Fixture,
    release: &Arc<AtomicBool>,
    limit: Duration,
) -> thread::JoinHandle<bool> {
    let engine: Arc<Engine> = Arc::clone(&fx.engine);
    let dataset = fx.spec().dataset;
    let release = Arc::clone(release);
    let (locked, wait) = mpsc::channel();
    let holder = thread::spawn(move || {
        engine
            .fs_op(POOL, dataset, FsOp::Read, |_| {
                locked.send(()).expect("the test waits for the lock");
                let tick = Duration::from_millis(5);
                let mut waited = Duration::ZERO;
                while !release.load(Ordering::SeqCst) && waited < limit {
                    thread::sleep(tick);
                    waited += tick;
                }
                Ok(release.load(Ordering::SeqCst))
            })
            .expect("holding the engine")
    });
    wait.recv().expect("the holder locked the engine");
    holder
}

fn remount(fx: &mut Fixture) {
    fx.unmount();
    fx.mount();
}

/// Goal: session threads that wait after their replies (module `pacer`: one thread reads
/// at a time) are called back as soon as the reading thread's request blocks, not when
/// their wait runs out. Method: a cold mount; eight lookups one after another leave three
/// of the four session threads waiting; the engine's lock is held and eight threads read
/// their files; two requests must be inside the engine within half a second, well inside
/// the one second a waiting thread waits by itself (`PARK_MAX`). Without the hint of a
/// contended pool lock (`tarn_base::wait`) the second request gets in only after that.
#[test]
fn a_blocked_request_calls_a_waiting_session_thread_back() {
    let mut fx = fixture_or_skip!("a_blocked_request_calls_a_waiting_session_thread_back");
    let files: Vec<Vec<u8>> = (0..8).map(|i| pattern(4096 + i * 100, i as u8)).collect();
    for (i, data) in files.iter().enumerate() {
        fs::write(fx.path(&format!("f{i}")), data).unwrap();
    }
    remount(&mut fx);
    for i in 0..files.len() {
        fs::metadata(fx.path(&format!("f{i}"))).unwrap();
    }
    let release = Arc::new(AtomicBool::new(false));
    let holder = hold_engine(&fx, &release, Duration::from_secs(60));
    let readers: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, data)| {
            let (path, data) = (fx.path(&format!("f{i}")), data.clone());
            thread::spawn(move || assert_eq!(fs::read(&path).unwrap(), data))
        })
        .collect();
    let mount = fx.mount.as_ref().unwrap();
    let mut ticks = 0;
    while mount.stats().in_flight_max < 2 && ticks < 50 {
        thread::sleep(Duration::from_millis(10));
        ticks += 1;
    }
    let inside = mount.stats().in_flight_max;
    release.store(true, Ordering::SeqCst);
    assert!(holder.join().unwrap());
    for reader in readers {
        reader.join().unwrap();
    }
    assert!(
        inside >= 2,
        "one request inside after {ticks} ticks of 10 ms"
    );
}

/// Goal: one mount serves several requests at once, and N threads reading and stat'ing
/// concurrently all get the right answers. Method: 8 files written, then remounted (cold
/// kernel caches); the engine's lock is held while 8 threads each stat and read their
/// file, so their requests pile up inside the server; once two are inside at once (or after
/// 30 s) the lock is let go, and each thread checks size and bytes. The mount's statistics
/// must show more than one request inside the engine at one instant (one session thread
/// would never show more than one).
#[test]
fn requests_are_served_on_several_threads_at_once() {
    let mut fx = fixture_or_skip!("requests_are_served_on_several_threads_at_once");
    let files: Vec<Vec<u8>> = (0..8)
        .map(|i| pattern(200_000 + i * 1000, i as u8))
        .collect();
    for (i, data) in files.iter().enumerate() {
        fs::write(fx.path(&format!("f{i}")), data).unwrap();
    }
    remount(&mut fx);
    let release = Arc::new(AtomicBool::new(false));
    let holder = hold_engine(&fx, &release, Duration::from_secs(60));
    let started = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, data)| {
            let (path, data, started) = (fx.path(&format!("f{i}")), data.clone(), started.clone());
            thread::spawn(move || {
                started.fetch_add(1, Ordering::SeqCst);
                assert_eq!(fs::metadata(&path).unwrap().len(), data.len() as u64);
                assert_eq!(fs::read(&path).unwrap(), data, "{}", path.display());
            })
        })
        .collect();
    // Let the readers' first requests reach the server and queue on the engine's lock:
    // wait until two are inside at once, or give up after 30 s (one session thread).
    let mount = fx.mount.as_ref().unwrap();
    for _ in 0..3000 {
        if started.load(Ordering::SeqCst) == 8 && mount.stats().in_flight_max >= 2 {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    release.store(true, Ordering::SeqCst);
    assert!(holder.join().unwrap());
    for reader in readers {
        reader.join().unwrap();
    }
    let stats = fx.mount.as_ref().unwrap().stats();
    assert!(
        stats.in_flight_max >= 2,
        "requests were served one at a time: {stats:?}"
    );
    // And again without the lock held: 8 threads, 20 rounds of stat + read each.
    let readers: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, data)| {
            let (path, data) = (fx.path(&format!("f{i}")), data.clone());
            thread::spawn(move || {
                for _ in 0..20 {
                    assert_eq!(fs::metadata(&path).unwrap().len(), data.len() as u64);
                    assert_eq!(fs::read(&path).unwrap(), data);
                }
            })
        })
        .collect();
    for reader in readers {
        reader.join().unwrap();
    }
}

/// A file whose every read takes [`SLOW_READ`] longer.
#[derive(Debug)]
struct SlowReads(FileDevice);

const SLOW_READ: Duration = Duration::from_millis(20);

impl Device for SlowReads {
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        thread::sleep(SLOW_READ);
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.0.write_at(offset, data)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        self.0.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.0.discard(offset, len)
    }
    fn path(&self) -> &str {
        self.0.path()
    }
}

/// Files opened as [`SlowReads`] behind the queue files get (which reads in parallel, so
/// that reads plan under the pool lock and read without it).
struct SlowProvider;

impl DeviceProvider for SlowProvider {
    fn open(&self, path: &str, read_only: bool) -> Result<Arc<dyn Device>, DeviceError> {
        let options = FileOpenOptions {
            direct: false,
            exclusive: !read_only,
            read_only,
        };
        let file = FileDevice::open(std::path::Path::new(path), options)?;
        Ok(Arc::new(QueuedDevice::new(Arc::new(SlowReads(file)))?))
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, DeviceError> {
        tarn_engine::list_device_paths(std::path::Path::new(dir))
    }
}

/// Goal: reads that wait for the devices do not hold the session threads (tarn-fuse
/// `fetchers`): while they wait, the session threads take the next requests. Method: twelve
/// files of 256 KiB written; the pool exported and imported again on devices whose every
/// read takes 20 ms (the cache cold); each file stat'ed (its metadata read); then twelve
/// threads read a file each and check its bytes. The mount's statistics must show more
/// requests inside the engine at one instant than there are session threads. Negative
/// control: with `FETCHERS_MAX` 0 (every read finished on its session thread) the most
/// inside at once was 4, and the test fails.
#[test]
fn reads_waiting_for_the_devices_leave_the_session_threads_free() {
    let mut fx = fixture_or_skip!("reads_waiting_for_the_devices_leave_the_session_threads_free");
    let files: Vec<Vec<u8>> = (0..12).map(|i| pattern(256 << 10, i as u8)).collect();
    for (i, data) in files.iter().enumerate() {
        fs::write(fx.path(&format!("f{i}")), data).unwrap();
    }
    fx.cycle_on(Arc::new(SlowProvider));
    for i in 0..files.len() {
        fs::metadata(fx.path(&format!("f{i}"))).unwrap();
    }
    let readers: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, data)| {
            let (path, data) = (fx.path(&format!("f{i}")), data.clone());
            thread::spawn(move || assert_eq!(fs::read(&path).unwrap(), data))
        })
        .collect();
    for reader in readers {
        reader.join().unwrap();
    }
    let stats = fx.mount.as_ref().unwrap().stats();
    assert!(
        stats.in_flight_max > tarn_fuse::SESSION_THREADS as u64,
        "no more requests inside than session threads: {stats:?}"
    );
}

/// Bytes read from the pool's devices so far (`iostat`'s pool row).
fn pool_read_bytes(fx: &Fixture) -> u64 {
    let report = fx.engine.iostat(&[POOL.to_string()]).expect("iostat");
    report[0].root.read_bytes
}

/// Goal: a hole reads without device I/O for its data (issue 18, "holes read at memory
/// speed"). Method: a file of 1 GiB that is all hole but for its last 128 KiB, and one of
/// 1 MiB of data; the pool exported and imported (cold cache); each file's attributes
/// read; then its first 255 MiB read through the mount (its read-ahead stays in the hole):
/// zeros, and the devices read only the file's indirect blocks (under 64 KiB), while
/// reading the data file reads its MiB. Negative control: a 256 MiB file, whose data block
/// the read-ahead reaches, failed with 136 KiB read.
#[test]
fn holes_read_through_the_mount_cost_no_device_read() {
    let mut fx = fixture_or_skip!("holes_read_through_the_mount_cost_no_device_read");
    let sparse = fx.path("sparse");
    let tail = pattern(128 << 10, 7);
    let file = File::create(&sparse).unwrap();
    file.write_all_at(&tail, (1 << 30) - (128 << 10)).unwrap();
    drop(file);
    fs::write(fx.path("data"), pattern(1 << 20, 8)).unwrap();
    fx.cycle();
    fs::metadata(&sparse).unwrap();
    fs::metadata(fx.path("data")).unwrap();
    let before = pool_read_bytes(&fx);
    let mut file = File::open(&sparse).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..255 {
        file.read_exact(&mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "a hole reads as zeros");
    }
    let hole = pool_read_bytes(&fx) - before;
    assert!(hole < 64 << 10, "reading 255 MiB of hole read {hole} bytes");
    assert_eq!(fs::read(fx.path("data")).unwrap(), pattern(1 << 20, 8));
    let data = pool_read_bytes(&fx) - before - hole;
    assert!(
        data >= 1 << 20,
        "the data file's read is counted: {data} bytes"
    );
}

/// Drops the kernel's cached pages of `file` (clean pages go; the next read asks the server).
fn drop_pages(file: &File) {
    use nix::fcntl::{PosixFadviseAdvice, posix_fadvise};
    posix_fadvise(file, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED).expect("fadvise");
}

/// Goal: a reader is not starved by a long sequence of writes to another file. Method: a
/// writer overwrites an 8 MiB region of one file in 1 MiB writes without pause until told
/// to stop; meanwhile a reader reads a 4 MiB file 5 times from the server (its pages dropped
/// before each pass) and checks the bytes. The reader must finish while the writer is still
/// writing; a reader blocked behind the writes would let the writer run into its limit.
#[test]
fn a_reader_progresses_during_a_long_sequence_of_writes() {
    let fx = fixture_or_skip!("a_reader_progresses_during_a_long_sequence_of_writes");
    let data = pattern(4 << 20, 3);
    fs::write(fx.path("read-me"), &data).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writer = {
        let (path, stop, writes) = (fx.path("written"), stop.clone(), writes.clone());
        thread::spawn(move || {
            let mut file = File::create(path).unwrap();
            let chunk = pattern(1 << 20, 9);
            // A bound instead of a clock: 50,000 MiB of writes is minutes on any machine.
            while !stop.load(Ordering::SeqCst) {
                let at = (writes.load(Ordering::SeqCst) % 8) << 20;
                file.write_all_at(&chunk, at).unwrap();
                if writes.fetch_add(1, Ordering::SeqCst) > 50_000 {
                    return false;
                }
            }
            file.flush().unwrap();
            true
        })
    };
    while writes.load(Ordering::SeqCst) < 4 {
        thread::sleep(Duration::from_millis(5));
    }
    let before = writes.load(Ordering::SeqCst);
    let file = File::open(fx.path("read-me")).unwrap();
    for pass in 0..5 {
        drop_pages(&file);
        let mut read = vec![0; data.len()];
        file.read_exact_at(&mut read, 0).unwrap();
        assert!(read == data, "pass {pass}: wrong bytes");
    }
    let during = writes.load(Ordering::SeqCst) - before;
    stop.store(true, Ordering::SeqCst);
    assert!(writer.join().unwrap(), "the writer was never told to stop");
    assert!(
        during > 0,
        "the writer made no progress while the reader read"
    );
}

/// Goal: requests are 1 MiB: writes, buffered reads (readahead raised to 4 MiB, so several
/// 1 MiB requests) and O_DIRECT reads. Method: one 8 MiB write(2), then (after a remount,
/// cold caches) one 8 MiB read(2) of the file, then the same through O_DIRECT; the mount's
/// largest read and write requests are 1 MiB after each, and the mount's readahead in sysfs
/// is `KERNEL_READAHEAD`.
#[test]
fn requests_are_one_mebibyte() {
    use std::os::unix::fs::OpenOptionsExt;
    let mut fx = fixture_or_skip!("requests_are_one_mebibyte");
    let data = pattern(8 << 20, 5);
    let mut file = File::create(fx.path("big")).unwrap();
    file.write_all(&data).unwrap();
    drop(file);
    let stats = fx.mount.as_ref().unwrap().stats();
    assert_eq!(stats.write_bytes_max, 1 << 20, "{stats:?}");
    remount(&mut fx);
    let mut read = vec![0; data.len()];
    File::open(fx.path("big"))
        .unwrap()
        .read_exact(&mut read)
        .unwrap();
    assert!(read == data);
    let buffered = fx.mount.as_ref().unwrap().stats();
    assert_eq!(buffered.read_bytes_max, 1 << 20, "readahead: {buffered:?}");
    let dev = std::os::unix::fs::MetadataExt::dev(&fs::metadata(fx.path("big")).unwrap());
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let knob = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    assert_eq!(
        fs::read_to_string(&knob).unwrap().trim(),
        (tarn_fuse::KERNEL_READAHEAD >> 10).to_string(),
        "{knob}"
    );
    let direct = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(fx.path("big"))
        .unwrap();
    // O_DIRECT wants an aligned buffer: the 4096-aligned part of a larger one.
    let mut buffer = vec![0u8; data.len() + 4096];
    let skip = buffer.as_ptr().align_offset(4096);
    let aligned = &mut buffer[skip..skip + data.len()];
    direct.read_exact_at(aligned, 0).unwrap();
    assert!(aligned == &data[..]);
    let stats = fx.mount.as_ref().unwrap().stats();
    assert_eq!(
        stats.read_bytes_max,
        1 << 20,
        "buffered {buffered:?}, then direct {stats:?}"
    );
}

/// Goal: what the kernel cached is served without the server: a stat within the attribute
/// TTL and a read of pages kept across opens (FOPEN_KEEP_CACHE) complete while the engine's
/// lock is held. Method: write and read a file, close, open again (its stamp is unchanged,
/// so the kernel keeps the pages), stat; hold the engine; stat and read the whole file
/// again; let go. The holder must still have been holding when both finished.
#[test]
fn cached_attributes_and_pages_need_no_engine() {
    let fx = fixture_or_skip!("cached_attributes_and_pages_need_no_engine");
    let data = pattern(3 << 20, 4);
    let path = fx.path("cached");
    fs::write(&path, &data).unwrap();
    assert!(fs::read(&path).unwrap() == data);
    let file = File::open(&path).unwrap();
    assert!(fx.mount.as_ref().unwrap().stats().keep_cache_opens >= 1);
    let mut read = vec![0; data.len()];
    file.read_exact_at(&mut read, 0).unwrap();
    let size = fs::metadata(&path).unwrap().len();
    let release = Arc::new(AtomicBool::new(false));
    let holder = hold_engine(&fx, &release, Duration::from_secs(20));
    let requests = fx.mount.as_ref().unwrap().stats().requests;
    assert_eq!(fs::metadata(&path).unwrap().len(), size);
    let mut again = vec![0; data.len()];
    file.read_exact_at(&mut again, 0).unwrap();
    assert!(again == data);
    let served = fx.mount.as_ref().unwrap().stats().requests - requests;
    release.store(true, Ordering::SeqCst);
    assert!(
        holder.join().unwrap(),
        "the cached stat and read waited for the engine"
    );
    assert_eq!(served, 0, "the cached stat and read reached the server");
}

/// The dataset's inode of `name` in its root, looked up through the engine.
fn engine_ino(fx: &Fixture, name: &str) -> u64 {
    let dataset = fx.spec().dataset;
    fx.engine
        .fs_op(POOL, dataset, FsOp::Read, |fs| {
            let root = fs.root()?;
            Ok(fs.lookup(root, name.as_bytes())?.ino)
        })
        .expect("lookup through the engine")
}

/// Goal: changes made behind the kernel's back (through the engine, as a rollback or a
/// receive into a mounted dataset would) are seen through the mount once the server
/// invalidates the kernel's caches. Method: a file read through an open handle (its pages
/// cached) and a name looked up; then, through the engine, the file's bytes rewritten in
/// place and the name renamed. First the negative control: the mount still shows the
/// cached bytes and the old name (so the caches are real). After `invalidate_all`, the
/// open handle reads the new bytes, the old name is gone, the new one is there. Then the
/// same for one inode with `invalidate_inode` and one name with `invalidate_entry`.
#[test]
fn changes_behind_the_kernels_back_are_invalidated() {
    let fx = fixture_or_skip!("changes_behind_the_kernels_back_are_invalidated");
    let mount = fx.mount.as_ref().unwrap();
    fs::write(fx.path("file"), b"old bytes, same length").unwrap();
    fs::write(fx.path("name"), b"x").unwrap();
    let file = File::open(fx.path("file")).unwrap();
    let mut buf = vec![0; 22];
    file.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(fs::metadata(fx.path("name")).unwrap().len(), 1);
    let (dataset, ino) = (fx.spec().dataset, engine_ino(&fx, "file"));
    let behind = |bytes: &'static [u8], from: &'static [u8], to: &'static [u8]| {
        fx.engine
            .fs_op(POOL, dataset, FsOp::Write(22), |fs| {
                let root = fs.root()?;
                fs.write(ino, 0, bytes)?;
                fs.rename(root, from, root, to, RenameFlags::default())
            })
            .unwrap();
    };
    behind(b"NEW BYTES, SAME LENGTH", b"name", b"renamed");
    file.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(
        buf, b"old bytes, same length",
        "negative control: pages cached"
    );
    assert!(fx.path("name").exists(), "negative control: name cached");
    assert!(mount.invalidate_all().unwrap() >= 3);
    file.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, b"NEW BYTES, SAME LENGTH");
    assert!(!fx.path("name").exists());
    assert_eq!(fs::read(fx.path("renamed")).unwrap(), b"x");
    // One inode and one name at a time.
    behind(b"third version, length!", b"renamed", b"again");
    assert!(fx.path("renamed").exists(), "negative control: name cached");
    mount.invalidate_inode(ino).unwrap();
    file.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, b"third version, length!");
    let root = fx
        .engine
        .fs_op(POOL, dataset, FsOp::Read, |fs| fs.root())
        .unwrap();
    mount
        .invalidate_entry(root, std::ffi::OsStr::new("renamed"))
        .unwrap();
    assert!(!fx.path("renamed").exists());
    assert!(fx.path("again").exists());
}

/// The mount options of the mount at `path` in /proc/self/mountinfo (field 6).
fn mount_options(path: &std::path::Path) -> Vec<String> {
    let table = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let wanted = path.display().to_string();
    let line = table
        .lines()
        .find(|line| line.split(' ').nth(4) == Some(wanted.as_str()))
        .expect("the mount is in mountinfo");
    let options = line.split(' ').nth(5).expect("options field");
    options.split(',').map(str::to_string).collect()
}

/// Atime of `path` in nanoseconds.
fn atime(path: &std::path::Path) -> i128 {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(path).expect("stat");
    i128::from(meta.atime()) * 1_000_000_000 + i128::from(meta.atime_nsec())
}

/// Remounts (cold kernel caches, so the next read reaches the server), commits the pool,
/// reads `file` whole and lists `dir`; returns the atimes after and whether the reads left
/// the pool dirty.
fn cold_access(fx: &mut Fixture, file: &str, dir: &str) -> (i128, i128, bool) {
    remount(fx);
    fx.engine.sync_pool(POOL).expect("sync");
    assert_eq!(fx.engine.pool_dirty_bytes(POOL).expect("dirty"), 0);
    fs::read(fx.path(file)).expect("read");
    fs::read_dir(fx.path(dir)).expect("list").for_each(drop);
    let dirty = fx.engine.pool_dirty_bytes(POOL).expect("dirty") > 0;
    (atime(&fx.path(file)), atime(&fx.path(dir)), dirty)
}

/// Goal: access times under each setting, seen through the mount, and the mount flags that
/// say so. Method: a file and a directory created and written (their atime before their
/// mtime); then twice: remount, commit, read the file and list the directory, stat.
/// relatime (the default): the first access updates both atimes, the second updates
/// nothing and leaves the pool clean. atime=on relatime=off: every access updates them.
/// atime=off: nothing ever changes and the pool stays clean.
#[test]
fn access_times_follow_atime_and_relatime() {
    if !fuse_or_skip("access_times_follow_atime_and_relatime") {
        return;
    }
    let settings: [(&[(&str, &str)], &str); 3] = [
        (&[], "relatime"),
        (&[("relatime", "off")], "strictatime"),
        (&[("atime", "off")], "noatime"),
    ];
    for (properties, flag) in settings {
        let mut fx = Fixture::with(properties);
        fs::create_dir(fx.path("dir")).unwrap();
        fs::write(fx.path("dir/file"), b"contents").unwrap();
        let (file0, dir0) = (atime(&fx.path("dir/file")), atime(&fx.path("dir")));
        let options = mount_options(&fx.mnt);
        let shown = |word: &str| options.iter().any(|o| o == word);
        assert_eq!(shown("relatime"), flag == "relatime", "{flag}: {options:?}");
        assert_eq!(shown("noatime"), flag == "noatime", "{flag}: {options:?}");
        let (file1, dir1, dirty1) = cold_access(&mut fx, "dir/file", "dir");
        let (file2, dir2, dirty2) = cold_access(&mut fx, "dir/file", "dir");
        match flag {
            "relatime" => {
                assert!(
                    file1 > file0 && dir1 > dir0 && dirty1,
                    "{flag}: first access"
                );
                assert_eq!(
                    (file2, dir2, dirty2),
                    (file1, dir1, false),
                    "{flag}: second"
                );
            }
            "strictatime" => {
                assert!(
                    file1 > file0 && dir1 > dir0 && dirty1,
                    "{flag}: first access"
                );
                assert!(
                    file2 > file1 && dir2 > dir1 && dirty2,
                    "{flag}: second access"
                );
            }
            _ => {
                assert_eq!((file1, dir1, dirty1), (file0, dir0, false), "{flag}: first");
                assert_eq!(
                    (file2, dir2, dirty2),
                    (file0, dir0, false),
                    "{flag}: second"
                );
            }
        }
    }
}

/// Goal: nothing is written on a read-only dataset, not even an access time. Method: a file
/// written and the pool committed, then `readonly=on` set and the dataset mounted again
/// (read-only); reading the file and listing the root leave the pool clean and the atime
/// as it was, although relatime would have updated it (atime before mtime).
#[test]
fn reads_of_a_readonly_dataset_write_nothing() {
    let mut fx = fixture_or_skip!("reads_of_a_readonly_dataset_write_nothing");
    fs::write(fx.path("file"), b"contents").unwrap();
    let before = atime(&fx.path("file"));
    fx.unmount();
    let readonly = [("readonly".to_string(), "on".to_string())];
    fx.engine.set_dataset_props(POOL, &readonly, "set").unwrap();
    fx.mount();
    assert!(mount_options(&fx.mnt).iter().any(|o| o == "ro"));
    fx.engine.sync_pool(POOL).unwrap();
    assert_eq!(fs::read(fx.path("file")).unwrap(), b"contents");
    fs::read_dir(&fx.mnt).unwrap().for_each(drop);
    assert_eq!(fx.engine.pool_dirty_bytes(POOL).unwrap(), 0);
    assert_eq!(atime(&fx.path("file")), before);
}

/// Requests that reached the engine so far.
fn requests(fx: &Fixture) -> u64 {
    fx.mount.as_ref().expect("mounted").stats().requests
}

/// Goal: a lookup of a missing name is answered with a negative entry the kernel keeps, so
/// asking again costs no request, and the name still appears at once when it is made,
/// through the mount (the kernel replaces the entry itself) or behind the kernel's back
/// (after `invalidate_all`, which knows the negative entries, or `invalidate_entry`).
/// Method: stat missing names twice and count requests; create one through the mount; create
/// two through the engine, checking first that the mount still says "missing" (negative
/// control: the entries are really cached), then invalidate.
#[test]
fn missing_names_are_cached_and_invalidated() {
    let fx = fixture_or_skip!("missing_names_are_cached_and_invalidated");
    let mount = fx.mount.as_ref().unwrap();
    for name in ["made-here", "made-behind", "made-behind-too"] {
        assert!(!fx.path(name).exists());
    }
    assert_eq!(mount.stats().negative_entries, 3);
    let before = requests(&fx);
    for name in ["made-here", "made-behind", "made-behind-too"] {
        assert!(!fx.path(name).exists());
    }
    assert_eq!(requests(&fx), before, "the second stats reached the server");
    fs::write(fx.path("made-here"), b"x").unwrap();
    assert_eq!(fs::read(fx.path("made-here")).unwrap(), b"x");
    let dataset = fx.spec().dataset;
    let creds = tarn_engine::posix::Creds::default();
    let root = fx
        .engine
        .fs_op(POOL, dataset, FsOp::Modify, |fs| {
            let root = fs.root()?;
            fs.mkdir(root, b"made-behind", 0o755, creds)?;
            fs.mkdir(root, b"made-behind-too", 0o755, creds)?;
            Ok(root)
        })
        .unwrap();
    assert!(
        !fx.path("made-behind").exists(),
        "negative control: entry cached"
    );
    assert!(
        !fx.path("made-behind-too").exists(),
        "negative control: entry cached"
    );
    mount
        .invalidate_entry(root, std::ffi::OsStr::new("made-behind-too"))
        .unwrap();
    assert!(fx.path("made-behind-too").is_dir());
    assert!(
        !fx.path("made-behind").exists(),
        "negative control: entry cached"
    );
    assert!(mount.invalidate_all().unwrap() >= 1);
    assert!(fx.path("made-behind").is_dir());
}

/// Goal: a file created through the mount keeps its name in the kernel for the entry TTL,
/// so unlinking it a few seconds later is one request (UNLINK), not a LOOKUP first. Method:
/// create a file, wait past the attribute TTL (1 s), stat the directory (the kernel needs
/// its fresh attributes for the permission check, and the create made them stale), count
/// the requests of the unlink. It removes the name and reclaims the inode (no handle holds
/// it) in one `fs_op`: one request into the engine, where a LOOKUP first, or a separate
/// reclaim, makes two.
#[test]
fn a_created_name_is_unlinked_in_one_request() {
    let fx = fixture_or_skip!("a_created_name_is_unlinked_in_one_request");
    File::create(fx.path("short-lived")).unwrap();
    thread::sleep(tarn_fuse::TTL + Duration::from_millis(500));
    fs::metadata(fx.mount.as_ref().unwrap().mountpoint()).unwrap();
    let before = requests(&fx);
    fs::remove_file(fx.path("short-lived")).unwrap();
    assert_eq!(
        requests(&fx) - before,
        1,
        "a lookup or a reclaim of its own"
    );
    assert!(!fx.path("short-lived").exists());
}

/// Goal: 4 KiB random reads through the mount are answered from the engine's clean-block
/// cache (no device read: the cache's hit counter moves, its miss counter does not), and
/// every change made through the mount (overwrite, punched hole, truncate and extend) is
/// what the next read returns, before and after its txg commits. Method: a 2 MiB file
/// written and committed, the mount cycled (cold kernel page cache, warm engine cache);
/// reads at scattered offsets through one handle, compared with a model; then each change
/// and a comparison of the whole file through a new handle, again after a pool sync.
#[test]
fn random_reads_hit_the_block_cache_and_follow_changes() {
    let mut fx = fixture_or_skip!("random_reads_hit_the_block_cache_and_follow_changes");
    let mut model = pattern(2 << 20, 9);
    let path = fx.path("random");
    fs::write(&path, &model).unwrap();
    fx.engine.sync_pool(POOL).unwrap();
    remount(&mut fx);
    let before = fx.engine.cache_stats();
    let file = File::open(&path).unwrap();
    let mut page = vec![0u8; 4096];
    for step in 0..64u64 {
        let at = (step * 7919 * 4096) % (model.len() as u64 - 4096);
        file.read_exact_at(&mut page, at).unwrap();
        let at = at as usize;
        assert!(page == model[at..at + 4096], "4 KiB at {at}");
    }
    let after = fx.engine.cache_stats();
    assert!(after.hits >= before.hits + 64, "{before:?} -> {after:?}");
    assert_eq!(after.misses, before.misses, "no record read from the pool");
    drop(file);
    let compare = |model: &[u8]| assert!(fs::read(&path).unwrap() == model);
    // Overwrite across a record boundary.
    let patch = pattern(8192, 10);
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&patch, (128 << 10) - 4096).unwrap();
    model[(128 << 10) - 4096..(128 << 10) + 4096].copy_from_slice(&patch);
    compare(&model);
    // Punch a hole (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE) over one and a half records.
    common::run(
        "fallocate",
        &["-p", "-o", "262144", "-l", "196608", path.to_str().unwrap()],
    );
    model[262_144..262_144 + 196_608].fill(0);
    compare(&model);
    // Truncate into a record, then extend: the tail reads as zeros.
    file.set_len(1_000_000).unwrap();
    model.truncate(1_000_000);
    compare(&model);
    file.set_len(1 << 20).unwrap();
    model.resize(1 << 20, 0);
    compare(&model);
    fx.engine.sync_pool(POOL).unwrap();
    compare(&model);
    drop(file);
    remount(&mut fx);
    compare(&model);
}
