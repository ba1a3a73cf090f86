//! The few operating-system calls `std` does not wrap: block-device ioctls, `flock`, hole
//! punching, positioned vectored I/O (`preadv`, `pwritev`), and page-aligned buffers for
//! `O_DIRECT`. This and `split` (ranges of one buffer read into by I/O threads) are the
//! modules of tarn-device that may use `unsafe`; every block carries a `SAFETY:` comment
//! (STYLE.md §5).
#![allow(unsafe_code)]

use std::alloc::Layout;
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

/// `BLKGETSIZE64` from `<linux/fs.h>`: `_IOR(0x12, 114, size_t)`, the device size in bytes.
const BLKGETSIZE64: libc::Ioctl = libc::_IOR::<libc::size_t>(0x12, 114);
/// `BLKDISCARD` from `<linux/fs.h>`: `_IO(0x12, 119)`, takes `[start, length]` in bytes.
const BLKDISCARD: libc::Ioctl = libc::_IO(0x12, 119);

/// Alignment (bytes) of every buffer, offset and length handed to an `O_DIRECT` descriptor.
/// 4096 is a multiple of every logical block size Linux supports in practice (512 or 4096).
pub(crate) const DIRECT_ALIGN: usize = 4096;

fn to_off_t(value: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(value).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Size in bytes of the block device open as `file`.
pub(crate) fn block_device_size(file: &File) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes exactly one u64 through the pointer, which points to a live,
    // aligned, writable local; the descriptor stays open for the duration of the call because
    // `file` is borrowed.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &raw mut size) };
    if rc == 0 {
        Ok(size)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Takes a non-blocking exclusive `flock` on `file`. `WouldBlock` means another open file
/// description (this process or another) holds it.
pub(crate) fn flock_exclusive(file: &File) -> io::Result<()> {
    // SAFETY: flock only reads its two integer arguments; the descriptor is valid while `file`
    // is borrowed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Starts writeback of every dirty page of `file` without waiting for it
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`): the disk works while the caller computes the
/// next blocks, and the flush at the end of the txg has less left to do. Durability still
/// comes only from `fdatasync`.
pub(crate) fn start_writeback(file: &File) -> io::Result<()> {
    // SAFETY: sync_file_range takes only integers; the descriptor is valid while `file` is
    // borrowed.
    let rc = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel to read `[offset, offset + len)` of `file` into the page cache in the
/// background (`posix_fadvise(POSIX_FADV_WILLNEED)`).
pub(crate) fn will_need(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let (offset, len) = (to_off_t(offset)?, to_off_t(len)?);
    // SAFETY: posix_fadvise takes only integers; the descriptor is valid while `file` is
    // borrowed.
    let rc =
        unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Most buffers one `preadv`/`pwritev` takes (Linux's `UIO_MAXIOV`); longer lists go in
/// several calls.
const IOV_MAX: usize = 1024;

/// `preadv`: fills every buffer of `bufs` from `offset` on, the next buffer where the
/// previous ends, in as few system calls as the kernel allows (short reads go on where
/// they stopped). End of file before the last byte is `UnexpectedEof`.
pub(crate) fn read_vectored_at(
    file: &File,
    mut offset: u64,
    bufs: &mut [IoSliceMut<'_>],
) -> io::Result<()> {
    let mut bufs = bufs;
    IoSliceMut::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let count = bufs.len().min(IOV_MAX);
        // SAFETY: std guarantees `IoSliceMut` has the ABI of `struct iovec` on Unix; the first
        // `count` entries each describe a live buffer borrowed mutably for this call, and
        // `count` is within the slice. preadv writes only inside those buffers.
        let n = unsafe {
            libc::preadv(
                file.as_raw_fd(),
                bufs.as_ptr().cast::<libc::iovec>(),
                libc::c_int::try_from(count).unwrap_or(libc::c_int::MAX),
                to_off_t(offset)?,
            )
        };
        let n = match usize::try_from(n) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => n,
            Err(_) => match io::Error::last_os_error() {
                e if e.kind() == io::ErrorKind::Interrupted => continue,
                e => return Err(e),
            },
        };
        offset += n as u64;
        IoSliceMut::advance_slices(&mut bufs, n);
    }
    Ok(())
}

/// `pwritev`: writes every buffer of `data` from `offset` on, as [`read_vectored_at`] reads.
/// A write that makes no progress is `WriteZero`.
pub(crate) fn write_vectored_at(
    file: &File,
    mut offset: u64,
    data: &mut [IoSlice<'_>],
) -> io::Result<()> {
    let mut data = data;
    IoSlice::advance_slices(&mut data, 0);
    while !data.is_empty() {
        let count = data.len().min(IOV_MAX);
        // SAFETY: std guarantees `IoSlice` has the ABI of `struct iovec` on Unix; the first
        // `count` entries each describe a live buffer borrowed for this call, and `count` is
        // within the slice. pwritev only reads those buffers.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                data.as_ptr().cast::<libc::iovec>(),
                libc::c_int::try_from(count).unwrap_or(libc::c_int::MAX),
                to_off_t(offset)?,
            )
        };
        let n = match usize::try_from(n) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(_) => match io::Error::last_os_error() {
                e if e.kind() == io::ErrorKind::Interrupted => continue,
                e => return Err(e),
            },
        };
        offset += n as u64;
        IoSlice::advance_slices(&mut data, n);
    }
    Ok(())
}

/// Deallocates `[offset, offset + len)` of a regular file without changing its size.
pub(crate) fn punch_hole(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    let (offset, len) = (to_off_t(offset)?, to_off_t(len)?);
    // SAFETY: fallocate takes only integers; the descriptor is valid while `file` is borrowed.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Issues a discard (TRIM/UNMAP) for `[offset, offset + len)` of a block device.
pub(crate) fn block_discard(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let range: [u64; 2] = [offset, len];
    // SAFETY: BLKDISCARD reads two u64 values through the pointer, which points to a live local
    // array of exactly that shape; the descriptor is valid while `file` is borrowed.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKDISCARD, range.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A zeroed heap buffer whose address is aligned to [`DIRECT_ALIGN`], for bounce copies when
/// a caller's buffer cannot be handed to an `O_DIRECT` descriptor as is.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (`len` > 0, a multiple of [`DIRECT_ALIGN`]).
    pub(crate) fn zeroed(len: usize) -> AlignedBuf {
        assert!(len > 0, "AlignedBuf: length must be positive");
        assert!(
            len.is_multiple_of(DIRECT_ALIGN),
            "AlignedBuf: length {len} is not aligned"
        );
        let layout = Layout::from_size_align(len, DIRECT_ALIGN)
            .expect("AlignedBuf: a positive multiple of a power of two is a valid layout");
        // SAFETY: the layout has a nonzero size (asserted above).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout);
        };
        AlignedBuf { ptr, layout }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` owns `layout.size()` initialized (zeroed at allocation) bytes for as
        // long as `self` lives, and the shared borrow of `self` excludes writers.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; the exclusive borrow of `self` makes this the only
        // reference to the allocation.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with exactly this layout and is freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buf_is_aligned_and_zeroed() {
        // Goal: the bounce buffer satisfies O_DIRECT's address rule and starts zeroed.
        for pages in [1usize, 2, 17] {
            let mut buf = AlignedBuf::zeroed(pages * DIRECT_ALIGN);
            assert_eq!(buf.as_slice().as_ptr() as usize % DIRECT_ALIGN, 0);
            assert!(buf.as_slice().iter().all(|&b| b == 0));
            buf.as_mut_slice()[pages * DIRECT_ALIGN - 1] = 7;
            assert_eq!(buf.as_slice()[pages * DIRECT_ALIGN - 1], 7);
        }
    }

    #[test]
    fn block_ioctls_fail_cleanly_on_a_regular_file() {
        // Goal: the ioctl wrappers report the kernel's refusal as an error instead of garbage.
        let file = tempfile::tempfile().unwrap();
        assert!(block_device_size(&file).is_err());
        assert!(block_discard(&file, 0, 4096).is_err());
    }
}
