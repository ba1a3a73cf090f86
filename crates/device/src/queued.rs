//! Write-behind for real devices: a [`QueuedDevice`] hands writes to one I/O thread per
//! device and returns at once, so the column writes of a raidz block go to all its devices in
//! parallel while the caller computes the next block (OpenZFS issues vdev I/O from taskqs for
//! the same reason).
//!
//! ```text
//!  write_at ──► bounded queue (QUEUE_BYTES) ──► I/O thread ──► inner.write_at
//!  read_at  ──► waits until the queue is empty, then reads (never sees stale bytes)
//!  flush    ──► waits until the queue is empty, then inner.flush; reports the first error
//!               any queued write hit since the last flush
//! ```
//!
//! Invariants:
//! - I1: a write acknowledged here is applied before any later read or flush of this device
//!   returns (reads and flushes drain the queue first).
//! - I2: an error of a queued write is never lost: it is latched and returned by the next
//!   `flush` (and by every write until then), so a txg whose writes failed cannot commit.
//! - I3: at most `QUEUE_BYTES` of data wait in memory per device; writers block beyond that.
//!
//! The simulator uses `SimDevice` directly (no thread), so runs stay deterministic.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::{Device, DeviceError};

/// Bytes that may wait in one device's queue.
pub const QUEUE_BYTES: u64 = 32 << 20;

/// The latched message of a write that found the device gone.
const GONE: &str = "device is gone";

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<(u64, Vec<u8>)>,
    queued_bytes: u64,
    busy: bool,
    error: Option<(u64, String)>,
    closing: bool,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until every queued write has been applied.
    fn drain(&self) -> MutexGuard<'_, State> {
        let mut state = self.lock();
        while !state.queue.is_empty() || state.busy {
            state = self.wait(state);
        }
        state
    }
}

/// A device whose writes are applied by a background thread (see the module docs).
#[derive(Debug)]
pub struct QueuedDevice {
    inner: Arc<dyn Device>,
    shared: Arc<Shared>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn latched(offset: u64, message: &str) -> DeviceError {
    if message == GONE {
        return DeviceError::Gone;
    }
    DeviceError::Io {
        offset,
        source: std::io::Error::other(message.to_string()),
    }
}

impl QueuedDevice {
    /// Wraps `inner` and starts its I/O thread.
    pub fn new(inner: Arc<dyn Device>) -> Result<QueuedDevice, DeviceError> {
        let shared = Arc::new(Shared::default());
        let worker_shared = Arc::clone(&shared);
        let worker_device = Arc::clone(&inner);
        let worker = std::thread::Builder::new()
            .name("tarn-io".into())
            .spawn(move || run_queue(&worker_shared, worker_device.as_ref()))
            .map_err(|source| DeviceError::Open {
                path: inner.path().to_string(),
                source,
            })?;
        Ok(QueuedDevice {
            inner,
            shared,
            worker: Mutex::new(Some(worker)),
        })
    }
}

fn run_queue(shared: &Shared, device: &dyn Device) {
    let mut state = shared.lock();
    loop {
        let Some((offset, data)) = state.queue.pop_front() else {
            if state.closing {
                return;
            }
            state = shared.wait(state);
            continue;
        };
        state.busy = true;
        drop(state);
        let result = device.write_at(offset, &data);
        state = shared.lock();
        state.busy = false;
        state.queued_bytes -= data.len() as u64;
        if let (Err(error), None) = (&result, &state.error) {
            let message = match error {
                // A vanished device stays vanished: keep the kind, not only the text.
                DeviceError::Gone => GONE.to_string(),
                other => other.to_string(),
            };
            state.error = Some((offset, message));
        }
        shared.changed.notify_all();
    }
}

impl Drop for QueuedDevice {
    fn drop(&mut self) {
        let mut state = self.shared.drain();
        state.closing = true;
        self.shared.changed.notify_all();
        drop(state);
        // Joining makes the close synchronous: once the device is dropped, the file is closed
        // and its lock released, so another process can import the pool at once.
        let worker = self
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(worker) = worker {
            let _ = worker.join();
        }
    }
}

impl Device for QueuedDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        drop(self.shared.drain());
        self.inner.read_at(offset, buf)
    }

    fn prefetch(&self, offset: u64, len: u64) {
        self.inner.prefetch(offset, len);
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        crate::check_range(offset, data.len() as u64, self.inner.size_bytes())?;
        let mut state = self.shared.lock();
        if let Some((at, message)) = &state.error {
            return Err(latched(*at, message));
        }
        while state.queued_bytes > 0 && state.queued_bytes + data.len() as u64 > QUEUE_BYTES {
            state = self.shared.wait(state);
        }
        state.queued_bytes += data.len() as u64;
        state.queue.push_back((offset, data.to_vec()));
        self.shared.changed.notify_all();
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        let mut state = self.shared.drain();
        if let Some((at, message)) = state.error.take() {
            return Err(latched(at, &message));
        }
        drop(state);
        self.inner.flush()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        drop(self.shared.drain());
        self.inner.discard(offset, len)
    }

    fn path(&self) -> &str {
        self.inner.path()
    }

    fn probe_gone(&self) -> bool {
        self.inner.probe_gone()
    }

    fn queued_writes(&self) -> u64 {
        let state = self.shared.lock();
        state.queue.len() as u64 + u64::from(state.busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FaultPlan, PER_MILLION, SimDevice};

    #[test]
    fn reads_see_queued_writes_and_flush_makes_them_durable() {
        let sim = SimDevice::new(
            "q",
            1 << 20,
            FaultPlan {
                drop_on_crash: PER_MILLION,
                ..FaultPlan::default()
            },
        );
        let device = QueuedDevice::new(sim.clone()).unwrap();
        for i in 0..100u64 {
            device.write_at(i * 512, &[i as u8; 512]).unwrap();
        }
        let mut buf = [0u8; 512];
        device.read_at(99 * 512, &mut buf).unwrap();
        assert_eq!(buf, [99u8; 512]);
        assert_eq!(device.queued_writes(), 0, "a read drains the queue");
        device.flush().unwrap();
        sim.crash();
        let mut durable = [0u8; 512];
        sim.read_at(42 * 512, &mut durable).unwrap();
        assert_eq!(durable, [42u8; 512]);
    }

    #[test]
    fn a_failed_queued_write_fails_the_next_flush() {
        let sim = SimDevice::new("q", 1 << 20, FaultPlan::default());
        let device = QueuedDevice::new(sim.clone()).unwrap();
        device.write_at(0, &[1u8; 512]).unwrap();
        device.flush().unwrap();
        sim.set_gone(true);
        device.write_at(512, &[2u8; 512]).unwrap_or(());
        assert!(
            matches!(device.flush(), Err(DeviceError::Gone)),
            "the queued write's error must surface at flush, still saying gone"
        );
        sim.set_gone(false);
        device.write_at(1024, &[3u8; 512]).unwrap();
        device.flush().unwrap();
    }

    #[test]
    fn out_of_range_writes_are_refused_at_once() {
        let sim = SimDevice::new("q", 4096, FaultPlan::default());
        let device = QueuedDevice::new(sim).unwrap();
        assert!(matches!(
            device.write_at(4096, &[0u8; 512]),
            Err(DeviceError::OutOfRange { .. })
        ));
    }
}
