//! tarn-device: every byte tarn reads or writes passes through the [`Device`] trait.
//!
//! # Purpose
//! The leaf layer. A leaf vdev is a [`Device`]: a fixed-size array of bytes with positioned
//! reads and writes, a flush that is the only durability promise, an advisory discard and an
//! advisory prefetch (read-ahead for scrub and resilver).
//! Two implementations: [`FileDevice`] for regular files and block devices (the daemon and
//! the CLI), and [`SimDevice`], an in-memory device with a seeded [`FaultPlan`] on which
//! unit tests and tarn-sim run the whole engine. This is the only crate that touches files.
//!
//! # Model
//! ```text
//!   tarn-vdev (mirror, raidz, dRAID)  ── Arc<dyn Device> per leaf
//!        │ read_at / write_at / flush / discard, byte offsets aligned to ashift
//!        ▼
//!   ┌──────────────┬────────────────────────────────────────────────────────┐
//!   │ FileDevice   │ pread/pwrite, fdatasync, hole punch or BLKDISCARD;     │
//!   │              │ O_DIRECT (aligned bounce buffer when still needed)     │
//!   ├──────────────┼────────────────────────────────────────────────────────┤
//!   │ SimDevice    │ sparse current + durable images, pending write list,   │
//!   │              │ faults drawn from SeededRng(FaultPlan::seed)           │
//!   └──────────────┴────────────────────────────────────────────────────────┘
//! ```
//! A write is *acknowledged* when `write_at` returns `Ok` and *durable* when a later `flush`
//! returns `Ok`. Between the two it may be read back but can still vanish or tear at a crash.
//! The sector (512 bytes in the simulator) is the unit of atomicity: a torn write never
//! leaves a sector half old and half new.
//!
//! # State
//! In memory only: a `FileDevice` holds its descriptor, size (fixed at open) and mode; a
//! `SimDevice` holds its images, pending operations, generator and counters. The bytes on a
//! device belong to the upper layers; their layout is docs/FORMAT.md ("Label layout",
//! "Assumptions about devices").
//!
//! # Invariants
//! - I1: every access is range-checked with [`check_range`] before it reaches the backend;
//!   an out-of-range access is [`DeviceError::OutOfRange`] and changes nothing.
//! - I2: `size_bytes` never changes for the life of a handle.
//! - I3: a write acknowledged before a successful `flush` survives any later crash
//!   (`FileDevice`: `fdatasync`; `SimDevice`: the durable image only changes at a flush, a
//!   crash, or explicit rot).
//! - I4: `SimDevice` draws every fault decision, in a fixed number of draws per operation,
//!   from one `SeededRng`: same plan seed and same operation sequence give the same faults.
//! - I5: `SimDevice` memory is proportional to data written (64 KiB chunks), never to the
//!   device size.
//! - I6: in direct mode every buffer, offset and length handed to the kernel is aligned to
//!   4096; unaligned requests go through a bounce buffer (counted:
//!   `FileDevice::bounces`), partial blocks through a read-modify-write serialized by one
//!   lock. Under `tarn_base::page_align::PageAligned` (the `tarn` binary's allocator) the
//!   pipeline's accesses at ashift 12 are aligned as they are, vectored ones included.
//!
//! # Concurrency and context
//! Devices are shared as `Arc<dyn Device>` and every method takes `&self`. `FileDevice` relies
//! on the kernel for concurrent positioned I/O; its only lock (`rmw`) covers direct-I/O
//! read-modify-write cycles. `SimDevice` has one state mutex taken for the whole of each
//! operation (so operations are atomic with respect to each other) and released before the
//! latency sleep. Lock order: `SimDevice` state, nothing below it. Callers decide ordering
//! between writes and flushes; a device never reorders an acknowledged write past a flush.
//! `QueuedDevice` runs two I/O threads per device that take queued writes and submitted
//! reads in submission order (FIFO; reads two at a time, a write alone), so a read submitted
//! after a write was acknowledged sees it; writes given as [`SharedBytes`]
//! ([`Device::write_shared`]) wait in its queue as references to their owner's buffer, not
//! copies; its submitters wait on a per-read slot (`pending`). Lock order: the queue's
//! state, then nothing (a read slot's lock is never held with the queue's; the shared
//! buffers it holds are `Arc`s, no lock).
//!
//! # Failure model
//! What a leaf can do to us, and where it is modelled (`FileDevice` passes real faults
//! through as [`DeviceError`]; `SimDevice` injects each one from its [`FaultPlan`]):
//! - EIO on read or write: [`DeviceError::Io`] with the offset. A failed read changes
//!   nothing; a failed simulated write changes nothing (a real one may leave the range with
//!   unspecified contents, which checksums catch). A failed flush (`flush_eio`) leaves the
//!   writes it covered pending, so a later crash can still lose them: the pool suspends.
//! - Bit rot at rest: bits flip in stored sectors long after they were written
//!   ([`SimDevice::rot`], [`SimDevice::rot_random`]), and a write can be stored with a
//!   flipped bit (`bitrot_on_write`). Reads return the bad bytes without error; only the
//!   checksum in the block pointer notices.
//! - Torn writes: at a crash a pending write may persist only a prefix of its sectors
//!   (`torn_on_crash`); sectors themselves are atomic.
//! - Lost writes: acknowledged, never persisted, reads keep returning old data
//!   (`lost_write`). Detected by checksums and birth txgs in block pointers.
//! - Misdirected writes: the data lands at another sector-aligned offset, corrupting
//!   whatever lived there, and the intended range keeps old data (`misdirected_write`).
//! - Latency and slow devices: every access can take `latency_ns` plus jitter, in virtual
//!   time when the device has a `ManualClock`.
//! - A device that vanishes: every access fails with [`DeviceError::Gone`]
//!   ([`SimDevice::set_gone`]); it may return, possibly under a new path
//!   ([`SimDevice::rename`]), and upper layers match it by label GUID, never by path.
//!   `FileDevice` reports `Gone` for ENODEV, ENXIO, ENOMEDIUM and ESHUTDOWN, and when the
//!   object behind its descriptor is gone (`FileDevice::vanished`: a regular file whose
//!   last name was deleted, checked at every flush because writes to it still succeed; a
//!   block device whose node no longer names it); `QueuedDevice` keeps `Gone` when it
//!   latches a failed write.
//! - A crash at any instant ([`SimDevice::crash`]): writes not yet flushed are dropped
//!   (`drop_on_crash`) or torn (`torn_on_crash`), the rest persist; flushed data survives.
//! - Caller mistakes: out-of-range access is refused (I1); a second exclusive opener of a
//!   file or block device is refused with "in use by another process".
//!
//! Discard is advisory: a backend that cannot discard (EOPNOTSUPP, EINVAL) succeeds anyway.
//! The simulator zeroes discarded ranges so that a wrong discard of live data shows up.
//!
//! # Not here
//! Labels, GUID matching and redundancy (tarn-vdev, tarn-pool); checksums and healing
//! (tarn-zio); error counters and latency per leaf (tarn-vdev) and slow-device detection
//! (tarn-engine); beyond [`Device::queued_writes`] and a queued device's own timing
//! (`timing.rs`), no statistics;
//! asynchronous I/O queues (io_uring): accesses are synchronous system calls; parallelism
//! comes from [`QueuedDevice`]'s per-device thread, which serves reads submitted with
//! [`Device::submit_read`] as well as writes, and from the callers' threads. `FileDevice` is
//! Linux-only (O_DIRECT, BLKGETSIZE64, hole punching).

/// The unit tests run under the wrapper the `tarn` binary puts around its allocator, so that
/// buffers of whole pages are page-aligned here as they are in the daemon.
#[cfg(test)]
#[global_allocator]
static TEST_ALLOCATOR: tarn_base::page_align::PageAligned<std::alloc::System> =
    tarn_base::page_align::PageAligned::new(std::alloc::System);

pub mod file;
pub mod pending;
mod plug;
pub mod queued;
pub mod shared;
pub mod sim;
pub mod split;
mod sys;
pub mod timing;

pub use file::{FileDevice, FileKind, FileOpenOptions, create_sparse_file, list_device_paths};
pub use pending::{PendingRead, ReadResult};
pub use plug::{Plug, plug};
pub use queued::QueuedDevice;
pub use shared::SharedBytes;
pub use sim::{FaultPlan, PER_MILLION, SIM_NAMES_MAX, SIM_SECTOR_SIZE, SimDevice, SimStats};
pub use split::{BufPart, SplitBuf};

/// What went wrong with one device access. Every variant names the offset involved so that
/// upper layers can count and report it per device.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The operating system (or an injected fault) reported an I/O error.
    #[error("I/O error at offset {offset}: {source}")]
    Io {
        /// Byte offset of the failed access.
        offset: u64,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The access does not fit inside the device.
    #[error("access of {len} bytes at offset {offset} is beyond the device size {size}")]
    OutOfRange {
        /// Byte offset of the access.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// Size of the device.
        size: u64,
    },
    /// The device is gone (removed, unplugged, or its file deleted and closed).
    #[error("device is not available")]
    Gone,
    /// The device could not be opened.
    #[error("cannot open '{path}': {source}")]
    Open {
        /// Path that was opened.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// Leaf I/O. Implementations are shared between threads (`&self` everywhere) and must make
/// a write durable only once `flush` returns `Ok` (that is the whole contract the txg commit
/// protocol relies on: see docs/FORMAT.md, "Assumptions about devices").
///
/// Offsets and lengths are in bytes. Callers align them to the pool's sector size (`ashift`);
/// implementations may refuse unaligned access only if they use direct I/O.
pub trait Device: Send + Sync + std::fmt::Debug {
    /// Size in bytes, fixed for the life of this handle.
    fn size_bytes(&self) -> u64;
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError>;
    /// Writes all of `data` at `offset`. Not durable until [`Device::flush`] returns.
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError>;
    /// [`Device::write_at`] of bytes the caller shares and will not change (`shared` I1): a
    /// device that acknowledges before it writes may keep them instead of a copy. The
    /// default writes them at once.
    fn write_shared(&self, offset: u64, data: SharedBytes) -> Result<(), DeviceError> {
        self.write_at(offset, &data)
    }
    /// Reads adjacent ranges as one access where the device can: the first buffer at
    /// `offset`, each next one where the previous ends (an I/O thread's aggregation of
    /// queued reads). On an error some buffers may be filled; the caller reads them one by
    /// one to learn which range failed. The default reads them one by one.
    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<(), DeviceError> {
        read_each(self, offset, bufs)
    }
    /// Writes adjacent ranges as one access where the device can (as
    /// [`Device::read_vectored_at`] reads them). The default writes them one by one.
    fn write_vectored_at(&self, offset: u64, data: &[&[u8]]) -> Result<(), DeviceError> {
        write_each(self, offset, data)
    }
    /// Makes every write acknowledged before this call durable.
    fn flush(&self) -> Result<(), DeviceError>;
    /// Tells the device that a range no longer holds data (TRIM / hole punch). Advisory:
    /// reading a discarded range returns unspecified (but not erroneous) bytes.
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError>;
    /// A name for messages: the path of a file or block device, or a simulator name.
    fn path(&self) -> &str;
    /// Writes acknowledged but not yet handed to the backend (a write-behind queue's depth,
    /// `tarn pool iostat -q`); 0 for devices that write before they acknowledge.
    fn queued_writes(&self) -> u64 {
        0
    }
    /// Advisory: the caller will read `[offset, offset + len)` soon, so a device with a cache
    /// may start reading it now (scrub and resilver announce each batch, which lets all
    /// leaves read at once although each block's columns are read one after another).
    /// Never fails and never changes data; the default does nothing.
    fn prefetch(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
    /// Whether the device is known to be gone without trying an access: a file whose last
    /// name was removed, a block device whose node no longer names it, a simulated device
    /// set gone. The engine's fault check polls this so that a disk pulled from an idle pool
    /// is noticed (as ZFS hears of it from udev) rather than at the next write. Cheap (one
    /// `fstat`) and never changes anything; the default knows nothing and says `false`.
    fn probe_gone(&self) -> bool {
        false
    }
    /// Gives the device the pool's clock, for devices that time their own queue (the pool
    /// sets it once per leaf; a second call keeps the first clock). The default ignores it.
    fn set_clock(&self, clock: std::sync::Arc<dyn tarn_base::Clock>) {
        let _ = clock;
    }
    /// What a device with its own queue measured: queue waits and backend times
    /// (`tarn pool iostat -l`, `-w`) and the reads waiting now (`-q`). `None` for devices
    /// that do the access in the caller's thread: for them the leaf's own timing is the
    /// backend time.
    fn queue_timing(&self) -> Option<timing::QueueTiming> {
        None
    }
    /// Starts reading `buf.len()` bytes at `offset` into `buf` and returns at once if the
    /// device has its own I/O thread; [`PendingRead::wait`] gives the buffer back filled. A
    /// read submitted after a write was acknowledged sees that write. The default reads
    /// synchronously (`read_at`) and returns a finished [`PendingRead`].
    fn submit_read(&self, offset: u64, buf: Vec<u8>) -> PendingRead {
        let mut buf = buf;
        PendingRead::done(self.read_at(offset, &mut buf).map(|()| buf))
    }
    /// [`Device::submit_read`] into a range of a caller's buffer (a raidz data column read
    /// straight into its block): the part is read into and dropped before the read
    /// completes, and [`PendingRead::wait`] gives an empty `Vec` or the error. The default
    /// reads synchronously.
    fn submit_read_into(&self, offset: u64, part: BufPart) -> PendingRead {
        let mut part = part;
        let result = self.read_at(offset, &mut part).map(|()| Vec::new());
        drop(part);
        PendingRead::done(result)
    }
    /// Whether [`Device::submit_read`] returns before the read is done, so that reads
    /// submitted together run in parallel. False for synchronous devices (the default):
    /// callers then read inline, in a fixed order, which keeps simulated runs deterministic.
    fn reads_in_parallel(&self) -> bool {
        false
    }
}

/// [`Device::read_vectored_at`] one buffer at a time (the default, and what devices that
/// cannot read them together fall back to).
pub fn read_each<D: Device + ?Sized>(
    device: &D,
    offset: u64,
    bufs: &mut [&mut [u8]],
) -> Result<(), DeviceError> {
    let mut at = offset;
    for buf in bufs {
        device.read_at(at, buf)?;
        at += buf.len() as u64;
    }
    Ok(())
}

/// [`Device::write_vectored_at`] one piece at a time.
pub fn write_each<D: Device + ?Sized>(
    device: &D,
    offset: u64,
    data: &[&[u8]],
) -> Result<(), DeviceError> {
    let mut at = offset;
    for piece in data {
        device.write_at(at, piece)?;
        at += piece.len() as u64;
    }
    Ok(())
}

/// Checks that an access of `len` bytes at `offset` fits a device of `size` bytes.
pub fn check_range(offset: u64, len: u64, size: u64) -> Result<(), DeviceError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::OutOfRange { offset, len, size }),
    }
}
