//! The power switch: a [`DeviceProvider`] over the run's `SimProvider` whose devices share one
//! budget of writes and flushes. When it runs out the power is off: every later access fails
//! with `Gone`, so the crash lands at exactly that device operation (inside a data write, a
//! flush, a label or uberblock update), and the run then calls `SimDevice::crash` on all.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tarn_device::{Device, DeviceError, SimDevice};
use tarn_engine::{DeviceProvider, SimProvider};

/// The shared budget of device operations left before the power goes.
#[derive(Debug)]
pub(crate) struct PowerSwitch {
    remaining: AtomicI64,
}

impl PowerSwitch {
    pub(crate) fn new() -> Self {
        PowerSwitch {
            remaining: AtomicI64::new(i64::MAX),
        }
    }

    /// Power stays on for `ops` more writes and flushes.
    pub(crate) fn cut_after(&self, ops: u64) {
        let ops = i64::try_from(ops).unwrap_or(i64::MAX);
        self.remaining.store(ops, Ordering::SeqCst);
    }

    /// Power on for good (after the crash, for the reimport).
    pub(crate) fn restore(&self) {
        self.remaining.store(i64::MAX, Ordering::SeqCst);
    }

    pub(crate) fn is_off(&self) -> bool {
        self.remaining.load(Ordering::SeqCst) <= 0
    }

    /// Spends one operation; false once the power is off.
    fn spend(&self) -> bool {
        self.remaining.fetch_sub(1, Ordering::SeqCst) > 0
    }
}

/// A `SimDevice` behind the power switch.
#[derive(Debug)]
struct Powered {
    inner: Arc<SimDevice>,
    switch: Arc<PowerSwitch>,
}

impl Device for Powered {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn probe_gone(&self) -> bool {
        self.inner.probe_gone()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        if self.switch.is_off() {
            return Err(DeviceError::Gone);
        }
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        if !self.switch.spend() {
            return Err(DeviceError::Gone);
        }
        self.inner.write_at(offset, data)
    }

    fn flush(&self) -> Result<(), DeviceError> {
        if !self.switch.spend() {
            return Err(DeviceError::Gone);
        }
        self.inner.flush()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        if !self.switch.spend() {
            return Err(DeviceError::Gone);
        }
        self.inner.discard(offset, len)
    }

    fn path(&self) -> &str {
        self.inner.path()
    }
}

/// Opens the run's simulated devices behind the power switch.
#[derive(Debug)]
pub(crate) struct PoweredProvider {
    pub(crate) devices: Arc<SimProvider>,
    pub(crate) switch: Arc<PowerSwitch>,
}

impl DeviceProvider for PoweredProvider {
    fn open(&self, path: &str, _read_only: bool) -> Result<Arc<dyn Device>, DeviceError> {
        let Some(inner) = self.devices.get(path) else {
            return Err(DeviceError::Open {
                path: path.to_string(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        };
        Ok(Arc::new(Powered {
            inner,
            switch: Arc::clone(&self.switch),
        }))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, DeviceError> {
        self.devices.list(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_device::FaultPlan;

    #[test]
    fn power_cut_stops_every_access_after_the_budget() {
        // Goal: exactly `n` writes/flushes pass, then reads and writes fail until restored.
        let devices = Arc::new(SimProvider::new());
        devices.insert(
            "/sim/a",
            SimDevice::new("/sim/a", 1 << 20, FaultPlan::seeded(1)),
        );
        let switch = Arc::new(PowerSwitch::new());
        let provider = PoweredProvider {
            devices,
            switch: Arc::clone(&switch),
        };
        let device = provider.open("/sim/a", false).unwrap();
        switch.cut_after(2);
        device.write_at(0, &[1u8; 512]).unwrap();
        device.flush().unwrap();
        assert!(device.write_at(512, &[2u8; 512]).is_err());
        let mut buf = [0u8; 512];
        assert!(device.read_at(0, &mut buf).is_err());
        switch.restore();
        device.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, [1u8; 512]);
        assert!(provider.open("/sim/none", false).is_err());
    }
}
