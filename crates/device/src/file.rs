//! `FileDevice`: a leaf backed by a regular file or a block device, read and written with
//! `pread`/`pwrite` (optionally through `O_DIRECT`) and made durable with `fdatasync`.
//!
//! Direct I/O needs the buffer address, the offset and the length aligned to the logical
//! block size. Callers align offsets to the pool's `ashift` (4096 by default, but it may be
//! 512) and hand us ordinary `Vec`s; in a process whose global allocator is
//! `tarn_base::page_align::PageAligned` (the `tarn` binary) every buffer of whole pages is
//! page-aligned, so at ashift 12 the pipeline's accesses go to the kernel as they are, one
//! vectored call for an aggregated run of them too. Every access that still breaks the
//! 4096-byte rule goes through an aligned bounce buffer, counted ([`FileDevice::bounces`]);
//! a write whose ends are not aligned becomes a read-modify-write of the partial blocks at
//! its ends, serialized by `FileDevice::rmw` so that two writers of different sectors in
//! one 4096-byte block cannot undo each other.
//!
//! A flush with no write or discard since the previous flush began skips its `fdatasync`:
//! there is nothing to make durable, and on a file device each call costs a journal commit
//! of the host filesystem (about 4 ms here). An intent-log commit writes a few columns of a
//! raidz and flushes the whole top-level vdev; the columns it did not write are skipped.
//! The flag is set after each write returns (failed or not) and cleared before the
//! `fdatasync` starts, so a write that lands during a flush is flushed by the next one.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, IoSliceMut, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::sys::{self, AlignedBuf, DIRECT_ALIGN};
use crate::{Device, DeviceError, check_range};

/// [`DIRECT_ALIGN`] as a byte offset.
const ALIGN: u64 = DIRECT_ALIGN as u64;

/// How to open a [`FileDevice`]. The default is buffered, shared, read-write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileOpenOptions {
    /// Bypass the page cache with `O_DIRECT`. Falls back to buffered I/O when the filesystem
    /// refuses it (tmpfs) or when a regular file's size is not a multiple of 4096 (its last
    /// partial block could not be written directly); [`FileDevice::is_direct`] tells.
    pub direct: bool,
    /// Refuse to share: take `flock(LOCK_EX | LOCK_NB)`, and for block devices also open with
    /// `O_EXCL` (which the kernel refuses while the device is mounted or claimed).
    pub exclusive: bool,
    /// Open without write access; writes and discards are refused.
    pub read_only: bool,
}

/// What kind of object a [`FileDevice`] is backed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file; discard punches holes.
    Regular,
    /// A block device; size from `BLKGETSIZE64`, discard is `BLKDISCARD`.
    BlockDevice,
}

/// A leaf device on a regular file or a block device.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    path: String,
    size: u64,
    kind: FileKind,
    direct: bool,
    read_only: bool,
    /// Serializes read-modify-write cycles of partial direct-I/O blocks. Holds no data.
    rmw: Mutex<()>,
    /// Bytes written through the page cache since writeback was last started.
    unsubmitted: AtomicU64,
    /// A write or discard happened since the last flush began (module docs).
    unflushed: AtomicBool,
    /// `fdatasync` calls made, for tests and diagnostics.
    syncs: AtomicU64,
    /// Direct accesses copied through an aligned bounce buffer (module docs).
    bounces: AtomicU64,
}

/// Buffered bytes after which writeback is started early (see `sys::start_writeback`).
const WRITEBACK_BATCH: u64 = 8 << 20;

fn in_use(path: &str) -> DeviceError {
    DeviceError::Open {
        path: path.to_owned(),
        source: io::Error::new(io::ErrorKind::WouldBlock, "in use by another process"),
    }
}

fn open_raw(path: &Path, read_only: bool, flags: libc::c_int) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(!read_only)
        .custom_flags(flags)
        .open(path)
}

fn kind_of(path: &Path) -> io::Result<FileKind> {
    let file_type = std::fs::metadata(path)?.file_type();
    if file_type.is_file() {
        Ok(FileKind::Regular)
    } else if file_type.is_block_device() {
        Ok(FileKind::BlockDevice)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file or block device",
        ))
    }
}

fn size_of(file: &File, kind: FileKind) -> io::Result<u64> {
    match kind {
        FileKind::Regular => Ok(file.metadata()?.len()),
        // Some drivers lack BLKGETSIZE64; seeking to the end works on any block device.
        FileKind::BlockDevice => sys::block_device_size(file).or_else(|_| {
            let mut handle = file;
            handle.seek(SeekFrom::End(0))
        }),
    }
}

/// Candidate device paths in `dir` for an import scan: regular files and block devices,
/// sorted by name. Symbolic links are followed (as `/dev/disk/by-id` needs); entries that
/// cannot be inspected are skipped rather than failing the scan.
pub fn list_device_paths(dir: &Path) -> Result<Vec<String>, DeviceError> {
    use std::os::unix::fs::FileTypeExt;
    let entries = std::fs::read_dir(dir).map_err(|source| DeviceError::Open {
        path: dir.display().to_string(),
        source,
    })?;
    let mut paths = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(metadata) = std::fs::metadata(&path) else {
            continue;
        };
        let kind = metadata.file_type();
        if kind.is_file() || kind.is_block_device() {
            paths.push(path.display().to_string());
        }
    }
    paths.sort();
    Ok(paths)
}

/// Creates a new sparse file of `size` bytes for use as a file vdev. Refuses to touch an
/// existing path, so a typo cannot overwrite someone's data.
pub fn create_sparse_file(path: &Path, size: u64) -> Result<(), DeviceError> {
    let open_error = |source| DeviceError::Open {
        path: path.display().to_string(),
        source,
    };
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(open_error)?;
    file.set_len(size).map_err(open_error)
}

impl FileDevice {
    /// Opens `path`, which must be a regular file or a block device.
    pub fn open(path: &Path, options: FileOpenOptions) -> Result<FileDevice, DeviceError> {
        let name = path.display().to_string();
        let open_error = |source| DeviceError::Open {
            path: name.clone(),
            source,
        };
        let kind = kind_of(path).map_err(open_error)?;
        let mut flags = 0;
        if options.exclusive && kind == FileKind::BlockDevice {
            flags |= libc::O_EXCL;
        }
        let open = |flags| match open_raw(path, options.read_only, flags) {
            Err(e) if options.exclusive && e.raw_os_error() == Some(libc::EBUSY) => {
                Err(in_use(&name))
            }
            other => other.map_err(open_error),
        };
        let (mut file, mut direct) = match options.direct.then(|| open(flags | libc::O_DIRECT)) {
            Some(Ok(file)) => (file, true),
            // EINVAL at open is how Linux says "this filesystem has no O_DIRECT".
            Some(Err(DeviceError::Open { source, .. }))
                if source.raw_os_error() == Some(libc::EINVAL) =>
            {
                (open(flags)?, false)
            }
            Some(Err(error)) => return Err(error),
            None => (open(flags)?, false),
        };
        let size = size_of(&file, kind).map_err(open_error)?;
        if direct && !size.is_multiple_of(ALIGN) {
            // The last partial block cannot be written with O_DIRECT without growing the
            // file, so this device runs buffered. Close first: an O_EXCL block device
            // refuses a second exclusive open even from us.
            drop(file);
            file = open(flags)?;
            direct = false;
        }
        if options.exclusive {
            sys::flock_exclusive(&file).map_err(|e| {
                if e.kind() == io::ErrorKind::WouldBlock {
                    in_use(&name)
                } else {
                    open_error(e)
                }
            })?;
        }
        Ok(FileDevice {
            file,
            path: name.clone(),
            size,
            kind,
            direct,
            read_only: options.read_only,
            rmw: Mutex::new(()),
            unsubmitted: AtomicU64::new(0),
            // Conservative: what an earlier opener wrote may not be durable yet.
            unflushed: AtomicBool::new(true),
            syncs: AtomicU64::new(0),
            bounces: AtomicU64::new(0),
        })
    }

    /// True if I/O bypasses the page cache (`O_DIRECT` was asked for and accepted).
    #[must_use]
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// `fdatasync` calls this device has made: flushes with nothing written since the
    /// previous one make none (module docs).
    #[must_use]
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Direct accesses that went through an aligned bounce buffer because the buffer's
    /// address, the offset or the length was not aligned (always 0 when buffered). The
    /// pipeline's reads and writes at ashift 12 make none when the process's allocator is
    /// `tarn_base::page_align::PageAligned`.
    #[must_use]
    pub fn bounces(&self) -> u64 {
        self.bounces.load(Ordering::Relaxed)
    }

    /// Whether this is a regular file or a block device.
    #[must_use]
    pub fn kind(&self) -> FileKind {
        self.kind
    }

    /// True if the device was opened read-only.
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn refuse_if_read_only(&self, offset: u64) -> Result<(), DeviceError> {
        if self.read_only {
            let source = io::Error::new(io::ErrorKind::PermissionDenied, "opened read-only");
            return Err(DeviceError::Io { offset, source });
        }
        Ok(())
    }

    /// Whether what the descriptor refers to is gone: a regular file whose last name was
    /// removed (its link count is 0), or a block device whose path no longer names it (the
    /// disk was pulled and its node removed, or another disk took the name). A file that was
    /// only renamed or moved is not gone: the pool finds it again by label at import.
    pub fn vanished(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(open) = self.file.metadata() else {
            return true;
        };
        match self.kind {
            FileKind::Regular => open.nlink() == 0,
            FileKind::BlockDevice => {
                std::fs::metadata(&self.path).map_or(true, |named| named.rdev() != open.rdev())
            }
        }
    }

    /// An I/O error as the pool should see it: [`DeviceError::Gone`] when the device went
    /// away (ENODEV, ENXIO, ENOMEDIUM, ESHUTDOWN, or [`FileDevice::vanished`]), otherwise
    /// [`DeviceError::Io`] at `offset`.
    fn io_error(&self, offset: u64, source: io::Error) -> DeviceError {
        let gone_errno = matches!(
            source.raw_os_error(),
            Some(libc::ENODEV | libc::ENXIO | libc::ENOMEDIUM | libc::ESHUTDOWN)
        );
        if gone_errno || self.vanished() {
            DeviceError::Gone
        } else {
            DeviceError::Io { offset, source }
        }
    }

    /// After a write of `len` bytes (done or failed): the next flush syncs, and a long run of
    /// buffered writes starts its writeback early.
    fn written(&self, len: u64, written: Result<(), DeviceError>) -> Result<(), DeviceError> {
        // Even a failed write may have changed some bytes: the next flush syncs.
        self.unflushed.store(true, Ordering::Release);
        written?;
        if !self.direct {
            let pending = self.unsubmitted.fetch_add(len, Ordering::Relaxed);
            if pending + len >= WRITEBACK_BATCH {
                self.unsubmitted.store(0, Ordering::Relaxed);
                // Advisory: a failure here only means writeback starts later, at the flush.
                let _ = sys::start_writeback(&self.file);
            }
        }
        Ok(())
    }

    /// True if `buf` at `offset` can be handed to an `O_DIRECT` descriptor unchanged.
    fn direct_ok(offset: u64, buf: &[u8]) -> bool {
        offset.is_multiple_of(ALIGN)
            && buf.len().is_multiple_of(DIRECT_ALIGN)
            && (buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN)
    }

    /// True if every piece of a vectored access from `offset` can be handed to an `O_DIRECT`
    /// descriptor unchanged (each piece starts where the previous ends).
    fn direct_ok_all<'a>(offset: u64, pieces: impl Iterator<Item = &'a [u8]>) -> bool {
        let mut at = offset;
        for piece in pieces {
            if !Self::direct_ok(at, piece) {
                return false;
            }
            at += piece.len() as u64;
        }
        true
    }

    /// The aligned span `[start, end)` covering `len` bytes at `offset`, and the position of
    /// `offset` inside it.
    fn span(offset: u64, len: usize) -> (u64, usize, usize) {
        let start = offset - offset % ALIGN;
        let head = usize::try_from(offset - start).expect("head < 4096 fits usize");
        let span_len = (head + len).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        (start, head, span_len)
    }

    fn read_bounced(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.bounces.fetch_add(1, Ordering::Relaxed);
        let (start, head, span_len) = Self::span(offset, buf.len());
        let mut bounce = AlignedBuf::zeroed(span_len);
        self.file
            .read_exact_at(bounce.as_mut_slice(), start)
            .map_err(|source| self.io_error(offset, source))?;
        buf.copy_from_slice(&bounce.as_slice()[head..head + buf.len()]);
        Ok(())
    }

    fn write_bounced(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.bounces.fetch_add(1, Ordering::Relaxed);
        let io_error = |source| self.io_error(offset, source);
        let (start, head, span_len) = Self::span(offset, data.len());
        let mut bounce = AlignedBuf::zeroed(span_len);
        let partial = head != 0 || !(head + data.len()).is_multiple_of(DIRECT_ALIGN);
        // Only writes with partial blocks need the lock; the guard lives to the end.
        let _guard = partial.then(|| self.rmw.lock().unwrap_or_else(PoisonError::into_inner));
        if head != 0 {
            let first = &mut bounce.as_mut_slice()[..DIRECT_ALIGN];
            self.file.read_exact_at(first, start).map_err(io_error)?;
        }
        let tail_block = span_len - DIRECT_ALIGN;
        if !(head + data.len()).is_multiple_of(DIRECT_ALIGN) && (tail_block != 0 || head == 0) {
            let last_offset = start + u64::try_from(tail_block).expect("span fits u64");
            let last = &mut bounce.as_mut_slice()[tail_block..];
            self.file
                .read_exact_at(last, last_offset)
                .map_err(io_error)?;
        }
        bounce.as_mut_slice()[head..head + data.len()].copy_from_slice(data);
        self.file
            .write_all_at(bounce.as_slice(), start)
            .map_err(io_error)
    }
}

impl Device for FileDevice {
    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn probe_gone(&self) -> bool {
        self.vanished()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size)?;
        if buf.is_empty() {
            return Ok(());
        }
        if self.direct && !Self::direct_ok(offset, buf) {
            return self.read_bounced(offset, buf);
        }
        self.file
            .read_exact_at(buf, offset)
            .map_err(|source| self.io_error(offset, source))
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.refuse_if_read_only(offset)?;
        check_range(offset, data.len() as u64, self.size)?;
        if data.is_empty() {
            return Ok(());
        }
        let written = if self.direct && !Self::direct_ok(offset, data) {
            self.write_bounced(offset, data)
        } else {
            self.file
                .write_all_at(data, offset)
                .map_err(|source| self.io_error(offset, source))
        };
        self.written(data.len() as u64, written)
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<(), DeviceError> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        check_range(offset, total, self.size)?;
        if self.direct && !Self::direct_ok_all(offset, bufs.iter().map(|b| &b[..])) {
            // O_DIRECT wants each buffer aligned; the one-by-one reads bounce where needed.
            return crate::read_each(self, offset, bufs);
        }
        let mut slices: Vec<IoSliceMut<'_>> = bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        sys::read_vectored_at(&self.file, offset, &mut slices)
            .map_err(|source| self.io_error(offset, source))
    }

    fn write_vectored_at(&self, offset: u64, data: &[&[u8]]) -> Result<(), DeviceError> {
        self.refuse_if_read_only(offset)?;
        let total: u64 = data.iter().map(|d| d.len() as u64).sum();
        check_range(offset, total, self.size)?;
        if self.direct && !Self::direct_ok_all(offset, data.iter().copied()) {
            return crate::write_each(self, offset, data);
        }
        let mut slices: Vec<IoSlice<'_>> = data.iter().map(|d| IoSlice::new(d)).collect();
        let written = sys::write_vectored_at(&self.file, offset, &mut slices)
            .map_err(|source| self.io_error(offset, source));
        self.written(total, written)
    }

    fn flush(&self) -> Result<(), DeviceError> {
        // Writes to a deleted file succeed and go nowhere anyone can find: the flush, which
        // every txg does, is where that is noticed.
        if self.vanished() {
            return Err(DeviceError::Gone);
        }
        if !self.unflushed.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let synced = self.file.sync_data();
        if synced.is_err() {
            // Reported once by the kernel; the next flush tries again rather than skipping.
            self.unflushed.store(true, Ordering::Release);
        }
        synced.map_err(|source| self.io_error(0, source))
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.refuse_if_read_only(offset)?;
        check_range(offset, len, self.size)?;
        if len == 0 {
            return Ok(());
        }
        let result = match self.kind {
            FileKind::Regular => sys::punch_hole(&self.file, offset, len),
            FileKind::BlockDevice => sys::block_discard(&self.file, offset, len),
        };
        self.unflushed.store(true, Ordering::Release);
        match result {
            Ok(()) => Ok(()),
            // Discard is advisory: a filesystem or disk that cannot do it loses nothing.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => Ok(()),
            Err(source) => Err(self.io_error(offset, source)),
        }
    }

    fn path(&self) -> &str {
        &self.path
    }

    fn prefetch(&self, offset: u64, len: u64) {
        // O_DIRECT reads bypass the page cache, so there is nothing to fill.
        if !self.direct && check_range(offset, len, self.size).is_ok() {
            let _ = sys::will_need(&self.file, offset, len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZE: u64 = 1 << 20;

    fn new_file(dir: &tempfile::TempDir) -> std::path::PathBuf {
        let path = dir.path().join("leaf");
        create_sparse_file(&path, SIZE).unwrap();
        path
    }

    fn pattern(len: usize, salt: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
            .collect()
    }

    /// Writes and reads back through `device`, at offsets and with buffers that are
    /// deliberately aligned and misaligned (memory, offset and length each on their own).
    fn check_round_trips(device: &FileDevice) {
        let cases: [(u64, usize, usize); 7] = [
            (0, 4096, 0),
            (8192, 8192, 1),
            (4096, 4096, 3),
            (513, 1000, 0),
            (4095, 2, 5),
            (12288 + 512, 3 * 4096, 7),
            (SIZE - 700, 700, 2),
        ];
        for (i, &(offset, len, misalign)) in cases.iter().enumerate() {
            let data = pattern(len, i as u8);
            let mut staging = tarn_base::buf::zeroed(len + misalign);
            staging[misalign..].copy_from_slice(&data);
            device.write_at(offset, &staging[misalign..]).unwrap();
            let mut back = tarn_base::buf::zeroed(len + misalign);
            device.read_at(offset, &mut back[misalign..]).unwrap();
            assert_eq!(
                back[misalign..],
                data[..],
                "case {i}: offset {offset} len {len}"
            );
        }
    }

    /// Goal: a file deleted while open reports itself gone at the next flush (its writes
    /// would be lost), a moved one does not. Method: real files in a temporary directory.
    #[test]
    fn deleted_file_is_gone_and_moved_file_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = new_file(&dir);
        let device = FileDevice::open(&path, FileOpenOptions::default()).unwrap();
        device.write_at(0, &[7u8; 512]).unwrap();
        device.flush().unwrap();
        let moved = dir.path().join("moved");
        std::fs::rename(&path, &moved).unwrap();
        assert!(!device.vanished());
        assert!(!device.probe_gone(), "a moved file is not gone");
        device.flush().unwrap();
        std::fs::remove_file(&moved).unwrap();
        assert!(device.vanished());
        assert!(matches!(device.flush(), Err(DeviceError::Gone)));
        let queued = crate::QueuedDevice::new(std::sync::Arc::new(device)).unwrap();
        assert!(
            queued.probe_gone(),
            "the probe sees through the queue, without an access"
        );
        queued.write_at(512, &[1u8; 512]).unwrap();
        assert!(matches!(queued.flush(), Err(DeviceError::Gone)));
    }

    #[test]
    fn a_flush_with_nothing_written_since_the_last_makes_no_fdatasync() {
        // Goal: an intent-log commit flushes a whole raidz; the columns it did not write cost
        // no fdatasync (a journal commit of the host filesystem each), while every write or
        // discard, also through the queue, is still followed by one.
        let dir = tempfile::tempdir().unwrap();
        let path = new_file(&dir);
        let device =
            std::sync::Arc::new(FileDevice::open(&path, FileOpenOptions::default()).unwrap());
        device.flush().unwrap();
        assert_eq!(device.syncs(), 1, "a freshly opened device syncs once");
        device.flush().unwrap();
        assert_eq!(device.syncs(), 1, "nothing written: no fdatasync");
        device.write_at(0, &[7u8; 512]).unwrap();
        device.flush().unwrap();
        assert_eq!(device.syncs(), 2);
        device.discard(4096, 4096).unwrap();
        device.flush().unwrap();
        assert_eq!(device.syncs(), 3, "a discard is flushed too");
        let queued = crate::QueuedDevice::new(device.clone()).unwrap();
        queued.flush().unwrap();
        assert_eq!(device.syncs(), 3);
        queued.write_at(8192, &[1u8; 512]).unwrap();
        queued.flush().unwrap();
        assert_eq!(
            device.syncs(),
            4,
            "a queued write is on the device when the flush asks"
        );
        // The skip never hides a vanished file.
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(device.flush(), Err(DeviceError::Gone)));
    }

    #[test]
    fn round_trip_buffered() {
        // Goal: bytes written come back unchanged, and survive close and reopen after flush.
        let dir = tempfile::tempdir().unwrap();
        let path = new_file(&dir);
        let device = FileDevice::open(&path, FileOpenOptions::default()).unwrap();
        assert_eq!(device.size_bytes(), SIZE);
        assert_eq!(device.kind(), FileKind::Regular);
        assert_eq!(device.path(), path.display().to_string());
        assert!(!device.is_direct());
        check_round_trips(&device);
        device.write_at(4096, b"durable").unwrap();
        device.flush().unwrap();
        drop(device);
        let device = FileDevice::open(&path, FileOpenOptions::default()).unwrap();
        let mut back = [0u8; 7];
        device.read_at(4096, &mut back).unwrap();
        assert_eq!(&back, b"durable");
    }

    /// Goal: vectored reads and writes (`preadv`/`pwritev`, what the I/O thread's
    /// aggregation uses) place each piece right after the previous one, with pieces of odd
    /// lengths and more pieces than one system call takes, buffered and direct; a range past
    /// the end is refused and writes nothing.
    #[test]
    fn vectored_access_places_each_piece_after_the_last() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let path = dir.path().join(format!("v{direct}"));
            create_sparse_file(&path, SIZE).unwrap();
            let options = FileOpenOptions {
                direct,
                ..FileOpenOptions::default()
            };
            let device = FileDevice::open(&path, options).unwrap();
            let pieces: Vec<Vec<u8>> = (0..1500).map(|i| pattern(1 + i % 300, i as u8)).collect();
            let whole = pieces.concat();
            let slices: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
            device.write_vectored_at(4096, &slices).unwrap();
            let mut back = vec![0u8; whole.len()];
            device.read_at(4096, &mut back).unwrap();
            assert_eq!(back, whole, "direct {direct}");
            let mut outs: Vec<Vec<u8>> = pieces.iter().map(|p| vec![0u8; p.len()]).collect();
            let mut bufs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
            device.read_vectored_at(4096, &mut bufs).unwrap();
            assert_eq!(outs, pieces, "direct {direct}");
            let tail: [&[u8]; 2] = [&[1; 512], &[2; 512]];
            assert!(device.write_vectored_at(SIZE - 512, &tail).is_err());
            let mut last = [0u8; 512];
            device.read_at(SIZE - 512, &mut last).unwrap();
            assert_eq!(last, [0; 512], "a refused range writes nothing");
        }
    }

    #[test]
    fn direct_mode_handles_unaligned_buffers() {
        // Goal: O_DIRECT (or its recorded fallback) accepts any buffer, offset and length, and
        // neighbouring bytes of a partial block survive a read-modify-write.
        let dir = tempfile::tempdir().unwrap();
        let path = new_file(&dir);
        let options = FileOpenOptions {
            direct: true,
            ..FileOpenOptions::default()
        };
        let device = FileDevice::open(&path, options).unwrap();
        check_round_trips(&device);
        let around = pattern(8192, 9);
        device.write_at(65536, &around).unwrap();
        device.write_at(65536 + 100, b"middle").unwrap();
        let mut expected = around.clone();
        expected[100..106].copy_from_slice(b"middle");
        device.flush().unwrap();
        drop(device);
        // A buffered reader sees exactly what the direct writer wrote.
        let plain = FileDevice::open(&path, FileOpenOptions::default()).unwrap();
        let mut back = vec![0u8; 8192];
        plain.read_at(65536, &mut back).unwrap();
        assert_eq!(back, expected);
    }

    /// Goal: in direct mode, the accesses the pipeline makes at ashift 12 (buffers of whole
    /// pages from `tarn_base::buf::zeroed` or copied by the device queue, offsets on page
    /// boundaries; alone, vectored, and aggregated by a `QueuedDevice` with a hole between
    /// reads) reach the kernel without a bounce, and return the right bytes; an unaligned
    /// access is still served, and counted. Method: real files in a temporary directory on
    /// a file system with O_DIRECT, under the page-aligning test allocator (lib.rs).
    /// Negative control: with the test allocator removed, every one of them bounces.
    #[test]
    fn direct_mode_makes_no_bounce_for_whole_page_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let path = new_file(&dir);
        let options = FileOpenOptions {
            direct: true,
            ..FileOpenOptions::default()
        };
        let device = std::sync::Arc::new(FileDevice::open(&path, options).unwrap());
        assert!(
            device.is_direct(),
            "the temporary directory must take O_DIRECT"
        );
        let page = |i: u64| {
            let mut buf = tarn_base::buf::zeroed(4096);
            buf.copy_from_slice(&pattern(4096, i as u8));
            buf
        };
        device.write_at(0, &page(0)).unwrap();
        let mut back = tarn_base::buf::zeroed(4096);
        device.read_at(0, &mut back).unwrap();
        assert_eq!(back, page(0));
        let pieces: Vec<Vec<u8>> = (1..4).map(page).collect();
        let slices: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
        device.write_vectored_at(4096, &slices).unwrap();
        let mut outs: Vec<Vec<u8>> = (1..4).map(|_| tarn_base::buf::zeroed(4096)).collect();
        let mut bufs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
        device.read_vectored_at(4096, &mut bufs).unwrap();
        assert_eq!(outs, pieces);
        let queued = crate::QueuedDevice::new(device.clone()).unwrap();
        for i in 0..32u64 {
            queued.write_at(65536 + i * 4096, &page(i)).unwrap();
        }
        let plug = crate::plug();
        // Every third page left out: the holes are read into the queue's scratch buffer.
        let reads: Vec<_> = (0..32u64)
            .filter(|i| i % 3 != 1)
            .map(|i| {
                (
                    i,
                    queued.submit_read(65536 + i * 4096, tarn_base::buf::zeroed(4096)),
                )
            })
            .collect();
        drop(plug);
        for (i, read) in reads {
            assert_eq!(read.wait().unwrap(), page(i), "queued read {i}");
        }
        queued.flush().unwrap();
        assert_eq!(device.bounces(), 0, "whole-page accesses bounced");
        let mut odd = [0u8; 10];
        device.read_at(65536 + 100, &mut odd).unwrap();
        assert_eq!(odd[..], page(0)[100..110]);
        assert_eq!(device.bounces(), 1, "an unaligned access is counted");
    }

    #[test]
    fn direct_mode_falls_back_for_unaligned_file_size() {
        // Goal: a file whose size is not a multiple of 4096 runs buffered and still works up
        // to its last byte.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("odd");
        create_sparse_file(&path, SIZE + 512).unwrap();
        let options = FileOpenOptions {
            direct: true,
            ..FileOpenOptions::default()
        };
        let device = FileDevice::open(&path, options).unwrap();
        assert!(!device.is_direct());
        device.write_at(SIZE, &[0xAB; 512]).unwrap();
        let mut back = [0u8; 512];
        device.read_at(SIZE, &mut back).unwrap();
        assert_eq!(back, [0xAB; 512]);
    }

    #[test]
    fn out_of_range_is_refused() {
        // Goal: accesses past the end, or whose end overflows u64, fail with OutOfRange and
        // leave the file untouched.
        let dir = tempfile::tempdir().unwrap();
        let device = FileDevice::open(&new_file(&dir), FileOpenOptions::default()).unwrap();
        let mut buf = [0u8; 16];
        for offset in [SIZE - 15, SIZE, u64::MAX - 3] {
            let read = device.read_at(offset, &mut buf);
            assert!(
                matches!(read, Err(DeviceError::OutOfRange { .. })),
                "read at {offset}"
            );
            let write = device.write_at(offset, &buf);
            assert!(
                matches!(write, Err(DeviceError::OutOfRange { .. })),
                "write at {offset}"
            );
        }
        let discard = device.discard(SIZE - 4096, 8192);
        assert!(matches!(discard, Err(DeviceError::OutOfRange { .. })));
        assert_eq!(std::fs::metadata(device.path()).unwrap().len(), SIZE);
    }

    #[test]
    fn discard_keeps_size_and_neighbours() {
        // Goal: discarding a range succeeds, keeps the file size, leaves the data around it
        // intact, and the discarded range stays readable.
        let dir = tempfile::tempdir().unwrap();
        let device = FileDevice::open(&new_file(&dir), FileOpenOptions::default()).unwrap();
        let data = pattern(3 * 65536, 1);
        device.write_at(0, &data).unwrap();
        device.discard(65536, 65536).unwrap();
        device.discard(0, 0).unwrap();
        assert_eq!(std::fs::metadata(device.path()).unwrap().len(), SIZE);
        let mut back = vec![0u8; 3 * 65536];
        device.read_at(0, &mut back).unwrap();
        assert_eq!(back[..65536], data[..65536]);
        assert_eq!(back[2 * 65536..], data[2 * 65536..]);
        // ext4, xfs, btrfs and tmpfs all punch holes; a hole reads as zeros there.
        assert!(back[65536..2 * 65536].iter().all(|&b| b == 0));
    }

    #[test]
    fn exclusive_open_refuses_a_second_opener() {
        // Goal: a second exclusive open fails with a clear message while the first handle
        // lives, and succeeds once it is closed.
        let dir = tempfile::tempdir().unwrap();
        let path = new_file(&dir);
        let options = FileOpenOptions {
            exclusive: true,
            ..FileOpenOptions::default()
        };
        let first = FileDevice::open(&path, options).unwrap();
        let second = FileDevice::open(&path, options);
        match second {
            Err(error @ DeviceError::Open { .. }) => {
                let message = error.to_string();
                assert!(message.contains("in use by another process"), "{message}");
            }
            other => panic!("second exclusive open: {other:?}"),
        }
        drop(first);
        FileDevice::open(&path, options).unwrap();
    }

    #[test]
    fn read_only_refuses_writes_and_discards() {
        // Goal: a read-only handle reads but never changes the file.
        let dir = tempfile::tempdir().unwrap();
        let path = new_file(&dir);
        let options = FileOpenOptions {
            read_only: true,
            ..FileOpenOptions::default()
        };
        let device = FileDevice::open(&path, options).unwrap();
        assert!(device.is_read_only());
        let mut buf = [1u8; 512];
        device.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, [0u8; 512]);
        assert!(matches!(
            device.write_at(0, &buf),
            Err(DeviceError::Io { offset: 0, .. })
        ));
        assert!(matches!(
            device.discard(0, 4096),
            Err(DeviceError::Io { .. })
        ));
        device.flush().unwrap();
    }

    #[test]
    fn open_refuses_missing_paths_and_directories() {
        // Goal: opening something that is not a file or block device names the path.
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        for path in [missing.as_path(), dir.path()] {
            match FileDevice::open(path, FileOpenOptions::default()) {
                Err(DeviceError::Open { path: named, .. }) => {
                    assert_eq!(named, path.display().to_string());
                }
                other => panic!("open {}: {other:?}", path.display()),
            }
        }
    }

    #[test]
    fn create_sparse_file_refuses_existing_path() {
        // Goal: creating a file vdev never overwrites an existing file.
        let dir = tempfile::tempdir().unwrap();
        let path = new_file(&dir);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), SIZE);
        let again = create_sparse_file(&path, 2 * SIZE);
        assert!(matches!(again, Err(DeviceError::Open { .. })));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), SIZE);
    }
}
