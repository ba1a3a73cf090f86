//! Leaf vdevs: one device each, with its state and per-leaf I/O and error counters.

use crate::error::VdevError;
use crate::stats::{IoKind, IoStats};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use tarn_base::{Clock, Guid, Txg};
use tarn_device::{BufPart, Device, DeviceError, PendingRead, SharedBytes};
use tarn_format::label::{DATA_START, data_area};

/// A read issued with [`Leaf::submit_read`]: in flight, or (on a synchronous device)
/// already done. Finish it with [`Leaf::finish_read`] on the same leaf.
#[derive(Debug)]
pub(crate) struct LeafRead {
    pending: Option<PendingRead>,
    outcome: Option<Result<Vec<u8>, DeviceError>>,
    start: Option<u64>,
}

/// Administrative and health state of a leaf, as `tarn pool status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LeafState {
    /// Usable (if it has a device).
    Online = 0,
    /// Taken offline by the administrator.
    Offline = 1,
    /// Too many errors; taken out of service by the pool.
    Faulted = 2,
    /// Missing or cannot be opened.
    Unavail = 3,
    /// The device was removed while in use.
    Removed = 4,
}

impl LeafState {
    fn from_u8(value: u8) -> LeafState {
        match value {
            0 => LeafState::Online,
            1 => LeafState::Offline,
            2 => LeafState::Faulted,
            3 => LeafState::Unavail,
            _ => LeafState::Removed,
        }
    }

    /// Uppercase name as `zpool status` prints it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            LeafState::Online => "ONLINE",
            LeafState::Offline => "OFFLINE",
            LeafState::Faulted => "FAULTED",
            LeafState::Unavail => "UNAVAIL",
            LeafState::Removed => "REMOVED",
        }
    }
}

/// Live counters of one leaf. Operation and byte counts include every access issued to the
/// device, failed or not; error counts say how many of them failed (read, write) or returned
/// data that proved wrong (checksum).
#[derive(Debug, Default)]
pub struct LeafStats {
    read_ops: AtomicU64,
    read_bytes: AtomicU64,
    write_ops: AtomicU64,
    write_bytes: AtomicU64,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    checksum_errors: AtomicU64,
}

/// A copy of [`LeafStats`] at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeafStatsSnapshot {
    /// Reads issued.
    pub read_ops: u64,
    /// Bytes asked for by reads.
    pub read_bytes: u64,
    /// Writes issued (including healing writes).
    pub write_ops: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Reads the device failed.
    pub read_errors: u64,
    /// Writes and flushes the device failed.
    pub write_errors: u64,
    /// Reads that returned wrong data (found by checksum or parity).
    pub checksum_errors: u64,
}

impl LeafStats {
    /// The counters now.
    #[must_use]
    pub fn snapshot(&self) -> LeafStatsSnapshot {
        LeafStatsSnapshot {
            read_ops: self.read_ops.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            write_ops: self.write_ops.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            read_errors: self.read_errors.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            checksum_errors: self.checksum_errors.load(Ordering::Relaxed),
        }
    }

    /// Resets the error counters (`tarn pool clear`); operation counts keep running.
    pub fn clear_errors(&self) {
        self.read_errors.store(0, Ordering::Relaxed);
        self.write_errors.store(0, Ordering::Relaxed);
        self.checksum_errors.store(0, Ordering::Relaxed);
    }

    pub(crate) fn add_checksum_error(&self) {
        self.checksum_errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// A leaf vdev: a device (absent when it could not be found or opened), its GUID, its last
/// known path, its state and its counters. Shared between threads through `Arc`.
#[derive(Debug)]
pub struct Leaf {
    guid: Guid,
    asize: u64,
    path: RwLock<String>,
    device: RwLock<Option<Arc<dyn Device>>>,
    state: AtomicU8,
    /// Its data is incomplete (a replace, spare or attach is resilvering it): it takes writes
    /// but is never read. The one-flag form of ZFS's dirty-time log.
    resilvering: AtomicBool,
    /// Newest txg whose uberblock this leaf took (at import: the newest in its own labels, at
    /// most the txg imported). A leaf out of service takes none, so after it returns only
    /// blocks born later can be missing from it (what `online` resilvers).
    synced_txg: AtomicU64,
    /// The engine found it slow against its siblings: reads avoid it where redundancy allows
    /// (raidz reconstructs its column, a mirror reads another side first).
    slow: AtomicBool,
    /// A dRAID distributed spare (`draid_spare`): no labels, no device of its own.
    distributed_spare: AtomicBool,
    stats: LeafStats,
    io_stats: IoStats,
    /// What the device said at its last failed write or flush since the last `clear`: the
    /// cause a suspension names (a full host filesystem, a device gone), not just a count.
    last_write_error: Mutex<Option<String>>,
    /// Time source for latencies, set once by the pool (tests may leave it unset).
    clock: OnceLock<Arc<dyn Clock>>,
}

impl Leaf {
    /// An online leaf on `device`; its allocatable size is the device's data area.
    pub fn new(guid: Guid, device: Arc<dyn Device>) -> Result<Leaf, VdevError> {
        let size = device.size_bytes();
        let (start, end) = data_area(size).ok_or(VdevError::DeviceTooSmall { guid, size })?;
        assert_eq!(start, DATA_START, "data area starts at DATA_START");
        let leaf = Leaf::missing(guid, device.path().to_string(), end - start);
        leaf.set_device(Some(device))?;
        leaf.set_state(LeafState::Online);
        Ok(leaf)
    }

    /// A leaf whose device is not available, with the data-area size recorded for it
    /// (from the vdev tree). Its state is [`LeafState::Unavail`].
    #[must_use]
    pub fn missing(guid: Guid, path: String, asize: u64) -> Leaf {
        assert!(guid.0 != 0, "leaf GUID must not be zero");
        Leaf {
            guid,
            asize,
            path: RwLock::new(path),
            device: RwLock::new(None),
            state: AtomicU8::new(LeafState::Unavail as u8),
            resilvering: AtomicBool::new(false),
            synced_txg: AtomicU64::new(0),
            slow: AtomicBool::new(false),
            distributed_spare: AtomicBool::new(false),
            stats: LeafStats::default(),
            io_stats: IoStats::default(),
            last_write_error: Mutex::new(None),
            clock: OnceLock::new(),
        }
    }

    /// The leaf's GUID.
    #[must_use]
    pub fn guid(&self) -> Guid {
        self.guid
    }

    /// Allocatable bytes: the size of the data area this leaf was created with.
    #[must_use]
    pub fn asize(&self) -> u64 {
        self.asize
    }

    /// Last known path.
    #[must_use]
    pub fn path(&self) -> String {
        self.path
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records a new path (devices move between boots; GUIDs do not).
    pub fn set_path(&self, path: String) {
        *self.path.write().unwrap_or_else(PoisonError::into_inner) = path;
    }

    /// The device, if one is attached.
    #[must_use]
    pub fn device(&self) -> Option<Arc<dyn Device>> {
        self.device
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Attaches (or with `None`, detaches) the device. The state is not changed: the pool
    /// decides when a returning device is [`LeafState::Online`] again. A device whose data
    /// area is smaller than the leaf's recorded size is refused (and nothing changes).
    pub fn set_device(&self, device: Option<Arc<dyn Device>>) -> Result<(), VdevError> {
        if let Some(device) = &device {
            let size = device.size_bytes();
            let area = data_area(size).map_or(0, |(start, end)| end - start);
            if area < self.asize {
                return Err(VdevError::DeviceTooSmall {
                    guid: self.guid,
                    size,
                });
            }
            self.set_path(device.path().to_string());
            if let Some(clock) = self.clock.get() {
                device.set_clock(Arc::clone(clock));
            }
        }
        *self.device.write().unwrap_or_else(PoisonError::into_inner) = device;
        Ok(())
    }

    /// Whether this leaf is a dRAID distributed spare (its device is spare space on the other
    /// children: it carries no labels and is never looked for at import).
    #[must_use]
    pub fn is_distributed_spare(&self) -> bool {
        self.distributed_spare.load(Ordering::Relaxed)
    }

    pub(crate) fn set_distributed_spare(&self) {
        self.distributed_spare.store(true, Ordering::Relaxed);
    }

    /// Current state.
    #[must_use]
    pub fn state(&self) -> LeafState {
        LeafState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Changes the state.
    pub fn set_state(&self, state: LeafState) {
        self.state.store(state as u8, Ordering::Release);
    }

    /// Whether the leaf's data is incomplete (it is being resilvered; see the field).
    #[must_use]
    pub fn is_resilvering(&self) -> bool {
        self.resilvering.load(Ordering::Acquire)
    }

    /// Marks the leaf's data incomplete (a resilver will fill it) or complete.
    pub fn set_resilvering(&self, resilvering: bool) {
        self.resilvering.store(resilvering, Ordering::Release);
    }

    /// Newest txg whose uberblock this leaf holds (0: none known).
    #[must_use]
    pub fn synced_txg(&self) -> Txg {
        Txg(self.synced_txg.load(Ordering::Acquire))
    }

    /// Records that the uberblock of `txg` reached this leaf.
    pub fn set_synced_txg(&self, txg: Txg) {
        self.synced_txg.store(txg.0, Ordering::Release);
    }

    /// Whether reads may use this leaf: usable and not resilvering.
    #[must_use]
    pub fn is_readable(&self) -> bool {
        !self.is_resilvering() && self.is_usable()
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> &LeafStats {
        &self.stats
    }

    /// The timing counters (latency histograms, in-flight accesses, slow count).
    #[must_use]
    pub fn io_stats(&self) -> &IoStats {
        &self.io_stats
    }

    /// Gives the leaf its time source for latencies, and its device too (a queued device
    /// times its own queue: `Device::set_clock`); a second call keeps the first clock.
    pub fn set_clock(&self, clock: Arc<dyn Clock>) {
        if let Some(device) = self.device() {
            device.set_clock(Arc::clone(&clock));
        }
        let _ = self.clock.set(clock);
    }

    /// Whether the engine marked the leaf slow (see the field).
    #[must_use]
    pub fn is_slow(&self) -> bool {
        self.slow.load(Ordering::Acquire)
    }

    /// Marks the leaf slow (reads avoid it where redundancy allows) or not.
    pub fn set_slow(&self, slow: bool) {
        self.slow.store(slow, Ordering::Release);
    }

    /// Runs one access, counting it in flight and timing it with the leaf's clock.
    fn timed<T>(&self, kind: IoKind, len: usize, access: impl FnOnce() -> T) -> T {
        let clock = self.clock.get();
        let start = clock.map(|c| c.monotonic_ns());
        self.io_stats.begin(kind, len as u64);
        let result = access();
        let latency = clock
            .zip(start)
            .map(|(c, start)| c.monotonic_ns().saturating_sub(start));
        self.io_stats.end(kind, latency);
        result
    }

    /// Resets the error counters (`tarn pool clear`).
    pub fn clear(&self) {
        self.stats.clear_errors();
        self.io_stats.clear_slow_ios();
        *self.last_error_slot() = None;
    }

    /// What the device said at its last failed write or flush since the last
    /// [`Leaf::clear`], if any.
    #[must_use]
    pub fn last_write_error(&self) -> Option<String> {
        self.last_error_slot().clone()
    }

    fn last_error_slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.last_write_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a failed write or flush and keeps what the device said.
    fn write_failed(&self, error: &DeviceError) {
        self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error_slot() = Some(error.to_string());
        self.note_error(error);
    }

    /// The device if the leaf is online and has one: only such leaves take I/O.
    #[must_use]
    pub fn usable_device(&self) -> Option<Arc<dyn Device>> {
        if self.state() == LeafState::Online {
            self.device()
        } else {
            None
        }
    }

    /// Whether the leaf takes I/O.
    #[must_use]
    pub fn is_usable(&self) -> bool {
        self.usable_device().is_some()
    }

    fn check_range(&self, data_offset: u64, len: usize) {
        let end = data_offset
            .checked_add(len as u64)
            .expect("leaf access end overflows");
        assert!(
            end <= self.asize,
            "leaf {}: access to {end} beyond asize {}",
            self.guid,
            self.asize
        );
    }

    /// Reads `buf` at `data_offset` bytes into the data area, counting the access.
    pub(crate) fn read(
        &self,
        device: &dyn Device,
        data_offset: u64,
        buf: &mut [u8],
    ) -> Result<(), DeviceError> {
        self.check_range(data_offset, buf.len());
        self.stats.read_ops.fetch_add(1, Ordering::Relaxed);
        self.stats
            .read_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        let result = self.timed(IoKind::Read, buf.len(), || {
            device.read_at(DATA_START + data_offset, buf)
        });
        if let Err(e) = &result {
            self.stats.read_errors.fetch_add(1, Ordering::Relaxed);
            self.note_error(e);
        }
        result
    }

    /// Submits a read of `len` bytes at `data_offset` into the data area, counting it as
    /// issued and in flight; [`Leaf::finish_read`] waits for it. On a synchronous device the
    /// read is done (timed, and its error counted) before this returns, exactly as
    /// [`Leaf::read`] would do it.
    pub(crate) fn submit_read(
        &self,
        device: &dyn Device,
        data_offset: u64,
        len: usize,
    ) -> LeafRead {
        self.counted_submit(data_offset, len, |at| {
            device.submit_read(at, tarn_base::buf::zeroed(len))
        })
    }

    /// [`Leaf::submit_read`] into `part`, a range of the caller's buffer
    /// (`Device::submit_read_into`): [`Leaf::finish_read`] then gives an empty `Vec` or the
    /// error, and the part is back with its buffer's owner by then.
    pub(crate) fn submit_read_into(
        &self,
        device: &dyn Device,
        data_offset: u64,
        part: BufPart,
    ) -> LeafRead {
        self.counted_submit(data_offset, part.len(), |at| {
            device.submit_read_into(at, part)
        })
    }

    /// A read of `len` bytes at `data_offset` submitted by `submit` (given the device
    /// offset): range-checked, counted, timed; completed at once if the device finished it.
    fn counted_submit(
        &self,
        data_offset: u64,
        len: usize,
        submit: impl FnOnce(u64) -> PendingRead,
    ) -> LeafRead {
        self.check_range(data_offset, len);
        self.stats.read_ops.fetch_add(1, Ordering::Relaxed);
        self.stats
            .read_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        let start = self.clock.get().map(|c| c.monotonic_ns());
        self.io_stats.begin(IoKind::Read, len as u64);
        let pending = submit(DATA_START + data_offset);
        let mut read = LeafRead {
            pending: Some(pending),
            outcome: None,
            start,
        };
        if read.pending.as_ref().is_some_and(PendingRead::is_done) {
            self.complete(&mut read);
        }
        read
    }

    /// Waits for a read from [`Leaf::submit_read`] and returns its bytes or its error.
    pub(crate) fn finish_read(&self, mut read: LeafRead) -> Result<Vec<u8>, DeviceError> {
        if read.outcome.is_none() {
            self.complete(&mut read);
        }
        read.outcome
            .take()
            .expect("complete() leaves an outcome in every read")
    }

    /// Waits for the device, ends the timing and counts an error.
    fn complete(&self, read: &mut LeafRead) {
        let pending = read.pending.take().expect("a read completes once");
        let result = pending.wait();
        let latency = self
            .clock
            .get()
            .zip(read.start)
            .map(|(c, start)| c.monotonic_ns().saturating_sub(start));
        self.io_stats.end(IoKind::Read, latency);
        if let Err(e) = &result {
            self.stats.read_errors.fetch_add(1, Ordering::Relaxed);
            self.note_error(e);
        }
        read.outcome = Some(result);
    }

    /// Writes `data` at `data_offset` bytes into the data area, counting the access.
    pub(crate) fn write(
        &self,
        device: &dyn Device,
        data_offset: u64,
        data: &[u8],
    ) -> Result<(), DeviceError> {
        self.counted_write(data_offset, data.len(), || {
            device.write_at(DATA_START + data_offset, data)
        })
    }

    /// [`Leaf::write`] of shared bytes, which a queued device keeps without a copy
    /// (`Device::write_shared`).
    pub(crate) fn write_shared(
        &self,
        device: &dyn Device,
        data_offset: u64,
        data: &SharedBytes,
    ) -> Result<(), DeviceError> {
        self.counted_write(data_offset, data.len(), || {
            device.write_shared(DATA_START + data_offset, data.clone())
        })
    }

    /// A write of `len` bytes at `data_offset` done by `access`: range-checked, counted,
    /// timed, and a failure noted.
    fn counted_write(
        &self,
        data_offset: u64,
        len: usize,
        access: impl FnOnce() -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        self.check_range(data_offset, len);
        self.stats.write_ops.fetch_add(1, Ordering::Relaxed);
        self.stats
            .write_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        let result = self.timed(IoKind::Write, len, access);
        if let Err(e) = &result {
            self.write_failed(e);
        }
        result
    }

    /// Flushes the device; a failure counts as a write error (acknowledged writes may be lost).
    pub(crate) fn flush(&self, device: &dyn Device) -> Result<(), DeviceError> {
        let result = device.flush();
        if let Err(e) = &result {
            self.write_failed(e);
        }
        result
    }

    /// Asks an online leaf's device whether it is gone without an access
    /// ([`Device::probe_gone`]); one that is becomes [`LeafState::Removed`], as a failed
    /// access would make it. Returns whether this call took the leaf out of service.
    pub fn probe(&self) -> bool {
        let Some(device) = self.usable_device() else {
            return false;
        };
        if !device.probe_gone() {
            return false;
        }
        self.set_state(LeafState::Removed);
        assert!(!self.is_usable(), "a leaf found gone takes no more I/O");
        true
    }

    /// A device that reports itself gone is out of service at once ([`LeafState::Removed`]):
    /// every later access would fail the same way. Other errors only count; the engine
    /// decides when a leaf with too many of them is faulted.
    fn note_error(&self, error: &DeviceError) {
        if matches!(error, DeviceError::Gone) && self.state() == LeafState::Online {
            self.set_state(LeafState::Removed);
        }
    }
}
