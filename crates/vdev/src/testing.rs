//! An in-memory [`Device`] for this crate's tests, with switches that make reads, writes or
//! flushes fail, and direct access to the bytes for injecting corruption. A [`FlushMeter`]
//! shared by several devices records how many of their flushes were in progress at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tarn_device::{Device, DeviceError, check_range};

#[derive(Debug)]
pub(crate) struct MemDevice {
    name: String,
    bytes: Mutex<Vec<u8>>,
    pub(crate) fail_reads: AtomicBool,
    pub(crate) fail_writes: AtomicBool,
    pub(crate) fail_flush: AtomicBool,
    meter: Mutex<Option<Arc<FlushMeter>>>,
    /// Where every read put its bytes: the address and length of each destination.
    pub(crate) destinations: Mutex<Vec<(usize, usize)>>,
}

/// Flushes in progress at once over the devices that share it; each metered flush lasts
/// [`FlushMeter::HOLD`], so flushes issued together overlap and flushes issued one after
/// another do not.
#[derive(Debug, Default)]
pub(crate) struct FlushMeter {
    now: AtomicUsize,
    pub(crate) most: AtomicUsize,
}

impl FlushMeter {
    const HOLD: std::time::Duration = std::time::Duration::from_millis(50);
}

impl MemDevice {
    pub(crate) fn new(name: &str, size: usize) -> Arc<MemDevice> {
        Arc::new(MemDevice {
            name: name.to_string(),
            bytes: Mutex::new(vec![0u8; size]),
            fail_reads: AtomicBool::new(false),
            fail_writes: AtomicBool::new(false),
            fail_flush: AtomicBool::new(false),
            meter: Mutex::new(None),
            destinations: Mutex::new(Vec::new()),
        })
    }

    /// Makes every later flush of this device count in `meter`.
    pub(crate) fn meter_flushes(&self, meter: Arc<FlushMeter>) {
        *self.meter.lock().unwrap() = Some(meter);
    }

    /// A copy of `len` bytes at device offset `offset`, bypassing the fault switches.
    pub(crate) fn peek(&self, offset: u64, len: usize) -> Vec<u8> {
        let bytes = self.bytes.lock().unwrap();
        let start = offset as usize;
        bytes[start..start + len].to_vec()
    }

    /// XORs `pattern` into every byte of the range (silent corruption).
    pub(crate) fn corrupt(&self, offset: u64, len: usize, pattern: u8) {
        let mut bytes = self.bytes.lock().unwrap();
        let start = offset as usize;
        for byte in &mut bytes[start..start + len] {
            *byte ^= pattern;
        }
    }

    fn io_error(offset: u64) -> DeviceError {
        DeviceError::Io {
            offset,
            source: std::io::Error::other("injected fault"),
        }
    }
}

impl Device for MemDevice {
    fn size_bytes(&self) -> u64 {
        self.bytes.lock().unwrap().len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        let bytes = self.bytes.lock().unwrap();
        check_range(offset, buf.len() as u64, bytes.len() as u64)?;
        if self.fail_reads.load(Ordering::Relaxed) {
            return Err(MemDevice::io_error(offset));
        }
        let start = offset as usize;
        buf.copy_from_slice(&bytes[start..start + buf.len()]);
        let destination = (buf.as_ptr() as usize, buf.len());
        self.destinations.lock().unwrap().push(destination);
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let mut bytes = self.bytes.lock().unwrap();
        check_range(offset, data.len() as u64, bytes.len() as u64)?;
        if self.fail_writes.load(Ordering::Relaxed) {
            return Err(MemDevice::io_error(offset));
        }
        let start = offset as usize;
        bytes[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        let meter = self.meter.lock().unwrap().clone();
        if let Some(meter) = meter {
            let now = meter.now.fetch_add(1, Ordering::SeqCst) + 1;
            meter.most.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(FlushMeter::HOLD);
            meter.now.fetch_sub(1, Ordering::SeqCst);
        }
        if self.fail_flush.load(Ordering::Relaxed) {
            return Err(MemDevice::io_error(0));
        }
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        let bytes = self.bytes.lock().unwrap();
        check_range(offset, len, bytes.len() as u64)
    }

    fn path(&self) -> &str {
        &self.name
    }
}
