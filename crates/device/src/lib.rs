//! tarn-device: every byte tarn reads or writes passes through the [`Device`] trait.
//!
//! (Theory block: see the module docs of `file` and `sim`; the full block is written with them.)

pub mod file;
pub mod sim;




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
    /// Makes every write acknowledged before this call durable.
    fn flush(&self) -> Result<(), DeviceError>;
    /// Tells the device that a range no longer holds data (TRIM / hole punch). Advisory:
    /// reading a discarded range returns unspecified (but not erroneous) bytes.
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError>;
    /// A name for messages: the path of a file or block device, or a simulator name.
    fn path(&self) -> &str;
}

/// Checks that an access of `len` bytes at `offset` fits a device of `size` bytes.
pub fn check_range(offset: u64, len: u64, size: u64) -> Result<(), DeviceError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::OutOfRange { offset, len, size }),
    }
}
