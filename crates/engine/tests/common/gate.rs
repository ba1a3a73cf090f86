//! Simulated devices behind a gate a test controls: their flushes (or writes) can be held
//! until the test opens the gate (to hold a commit phase or an intent-log commit open while
//! other threads work), and the power can be cut after a number of device operations (every
//! later write and flush fails, as in the simulator); `SimDevice::crash` then drops or tears
//! what was not flushed. A gate may apply to some devices only (`only`: a path fragment), and
//! the devices may be opened behind the write-behind queue real files get (`queued`), so
//! that a failed write is latched and reported later as on a real pool. The gate counts the
//! write accesses to the data area and their bytes (a vectored write, one access of adjacent
//! ranges, counts once), so that a test can tell how a queue merged its writes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use tarn_device::{Device, DeviceError, QueuedDevice, SimDevice};
use tarn_engine::{DeviceProvider, SimProvider};

#[derive(Debug, Default)]
struct GateState {
    /// Flushes wait at the gate.
    closed: bool,
    /// Writes wait at the gate.
    writes_closed: bool,
    waiting: usize,
    /// Device operations (writes and flushes) left before the power goes; `None`: no cut.
    budget: Option<u64>,
}

/// Shared by every wrapped device of a test.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
    /// Write accesses to the data area (gated devices only).
    accesses: AtomicU64,
    /// Their bytes.
    bytes: AtomicU64,
}

impl Gate {
    /// Holds (`true`) or lets through every flush.
    pub(crate) fn set_closed(&self, closed: bool) {
        self.state.lock().unwrap().closed = closed;
        self.changed.notify_all();
    }

    /// Holds (`true`) or lets through every write to the data area (labels and their
    /// uberblock rings, the first 4 MiB and the last 1 MiB, pass: a txg's commit phase is
    /// held by the flush gate, not this one).
    pub(crate) fn set_writes_closed(&self, closed: bool) {
        self.state.lock().unwrap().writes_closed = closed;
        self.changed.notify_all();
    }

    pub(crate) fn cut_after(&self, ops: Option<u64>) {
        self.state.lock().unwrap().budget = ops;
    }

    /// Waits until some flush or write is held at the closed gate.
    pub(crate) fn wait_for_a_held_flush(&self) {
        let mut state = self.state.lock().unwrap();
        while state.waiting == 0 {
            state = self.changed.wait(state).unwrap();
        }
    }

    /// Write accesses to the data area so far, and their bytes (module docs).
    pub(crate) fn data_writes(&self) -> (u64, u64) {
        let accesses = self.accesses.load(Ordering::SeqCst);
        (accesses, self.bytes.load(Ordering::SeqCst))
    }

    /// One write or flush: fails once the power is cut.
    fn spend(&self) -> Result<(), DeviceError> {
        let mut state = self.state.lock().unwrap();
        match &mut state.budget {
            Some(0) => Err(DeviceError::Io {
                offset: 0,
                source: std::io::Error::other("power cut"),
            }),
            Some(left) => {
                *left -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn hold(&self, write: bool) {
        let mut state = self.state.lock().unwrap();
        let closed = |s: &GateState| if write { s.writes_closed } else { s.closed };
        if closed(&state) {
            state.waiting += 1;
            self.changed.notify_all();
            while closed(&state) {
                state = self.changed.wait(state).unwrap();
            }
            state.waiting -= 1;
        }
    }
}

#[derive(Debug)]
struct Gated {
    inner: Arc<SimDevice>,
    gate: Arc<Gate>,
    gated: bool,
}

impl Gated {
    /// Whether `offset` is in the data area (not a label, nor its uberblock ring).
    fn in_data_area(&self, offset: u64) -> bool {
        offset >= 4 << 20 && offset < self.inner.size_bytes().saturating_sub(1 << 20)
    }

    /// Counts one write access of `len` bytes at `offset` (module docs).
    fn count(&self, offset: u64, len: usize) {
        if self.gated && self.in_data_area(offset) {
            self.gate.accesses.fetch_add(1, Ordering::SeqCst);
            self.gate.bytes.fetch_add(len as u64, Ordering::SeqCst);
        }
    }

    /// One write at the gate: held while writes are closed, failed once the power is cut.
    fn write_piece(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        if self.gated {
            if self.in_data_area(offset) {
                self.gate.hold(true);
            }
            self.gate.spend()?;
        }
        self.inner.write_at(offset, data)
    }
}

impl Device for Gated {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.count(offset, data.len());
        self.write_piece(offset, data)
    }
    fn write_vectored_at(&self, offset: u64, data: &[&[u8]]) -> Result<(), DeviceError> {
        self.count(offset, data.iter().map(|piece| piece.len()).sum());
        let mut at = offset;
        for piece in data {
            self.write_piece(at, piece)?;
            at += piece.len() as u64;
        }
        Ok(())
    }
    fn flush(&self) -> Result<(), DeviceError> {
        if self.gated {
            self.gate.hold(false);
            self.gate.spend()?;
        }
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.discard(offset, len)
    }
    fn path(&self) -> &str {
        self.inner.path()
    }
}

/// Simulated devices, each opened behind the provider's gate (those whose path contains
/// `only`, when set), and behind a `QueuedDevice` when `queued`.
#[derive(Debug, Default)]
pub(crate) struct GatedProvider {
    pub(crate) sims: SimProvider,
    pub(crate) gate: Arc<Gate>,
    pub(crate) only: Option<String>,
    pub(crate) queued: bool,
}

impl DeviceProvider for GatedProvider {
    fn open(&self, path: &str, read_only: bool) -> Result<Arc<dyn Device>, DeviceError> {
        self.sims.open(path, read_only)?;
        let inner = self.sims.get(path).unwrap();
        let gated = self.only.as_ref().is_none_or(|only| path.contains(only));
        let device = Arc::new(Gated {
            inner,
            gate: Arc::clone(&self.gate),
            gated,
        });
        if self.queued && !read_only {
            return Ok(Arc::new(QueuedDevice::new(device)?));
        }
        Ok(device)
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, DeviceError> {
        self.sims.list(dir)
    }
}
