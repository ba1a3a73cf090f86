//! Device providers: real files and block devices (`FileProvider`), and simulated devices
//! held in memory (`SimProvider`, used by the simulator and by tests of every layer above).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use tarn_device::{
    Device, DeviceError, FaultPlan, FileDevice, FileOpenOptions, QueuedDevice, SimDevice,
};

use crate::DeviceProvider;

/// Opens files and block devices by path. Writable opens are exclusive (a `flock`, and
/// `O_EXCL` for block devices) so that two processes never drive the same device.
#[derive(Debug, Default)]
pub struct FileProvider {
    /// Use O_DIRECT where the filesystem allows it.
    pub direct: bool,
}

impl DeviceProvider for FileProvider {
    fn open(&self, path: &str, read_only: bool) -> Result<Arc<dyn Device>, DeviceError> {
        let options = FileOpenOptions {
            direct: self.direct,
            exclusive: !read_only,
            read_only,
        };
        let file = Arc::new(FileDevice::open(Path::new(path), options)?);
        if read_only {
            return Ok(file);
        }
        Ok(Arc::new(QueuedDevice::new(file)?))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, DeviceError> {
        tarn_device::list_device_paths(Path::new(dir))
    }
}

/// Simulated devices addressed by name; a "directory" is a name prefix ending in `/`.
#[derive(Debug, Default)]
pub struct SimProvider {
    devices: Mutex<BTreeMap<String, Arc<SimDevice>>>,
}

impl SimProvider {
    /// An empty provider.
    #[must_use]
    pub fn new() -> Self {
        SimProvider::default()
    }

    fn devices(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<SimDevice>>> {
        self.devices.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A provider of fresh simulated devices without faults, `size` bytes each, one at
    /// each of `paths` (the start of most engine tests).
    #[must_use]
    pub fn with_devices<S: AsRef<str>>(paths: &[S], size: u64) -> Arc<Self> {
        let provider = Arc::new(SimProvider::new());
        for path in paths {
            let path = path.as_ref();
            provider.insert(path, SimDevice::new(path, size, FaultPlan::default()));
        }
        provider
    }

    /// Makes `device` available at `path`.
    pub fn insert(&self, path: &str, device: Arc<SimDevice>) {
        self.devices().insert(path.to_string(), device);
    }

    /// Moves a device to another path (device names that change between boots).
    pub fn rename(&self, from: &str, to: &str) -> bool {
        let mut devices = self.devices();
        let Some(device) = devices.remove(from) else {
            return false;
        };
        device.rename(to);
        devices.insert(to.to_string(), device);
        true
    }

    /// Takes a device away (pulled disk); returns it.
    pub fn remove(&self, path: &str) -> Option<Arc<SimDevice>> {
        self.devices().remove(path)
    }

    /// The device at `path`.
    #[must_use]
    pub fn get(&self, path: &str) -> Option<Arc<SimDevice>> {
        self.devices().get(path).cloned()
    }

    /// Every device, by path.
    #[must_use]
    pub fn all(&self) -> Vec<(String, Arc<SimDevice>)> {
        self.devices()
            .iter()
            .map(|(p, d)| (p.clone(), Arc::clone(d)))
            .collect()
    }
}

impl DeviceProvider for SimProvider {
    fn open(&self, path: &str, _read_only: bool) -> Result<Arc<dyn Device>, DeviceError> {
        match self.get(path) {
            Some(device) => Ok(device),
            None => Err(DeviceError::Open {
                path: path.to_string(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            }),
        }
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, DeviceError> {
        let prefix = if dir.ends_with('/') {
            dir.to_string()
        } else {
            format!("{dir}/")
        };
        Ok(self
            .devices()
            .keys()
            .filter(|p| p.starts_with(&prefix))
            .cloned()
            .collect())
    }
}
