//! Reading and writing the four labels of a leaf device: the config region and the uberblock
//! ring (layout in tarn_format::label and docs/FORMAT.md "Labels").

use tarn_base::Txg;
use tarn_device::{Device, DeviceError};
use tarn_format::label::{
    CONFIG_OFFSET, CONFIG_SIZE, LABEL_COUNT, PoolConfig, RING_OFFSET, RING_SIZE, label_offsets,
    uberblock_slot_offset, uberblock_slot_size,
};
use tarn_format::uberblock::{UBERBLOCK_SIZE, Uberblock};

/// What a device's labels say, as far as they could be read.
#[derive(Clone, Debug)]
pub struct LabelScan {
    /// The config with the highest txg among the label copies that decoded, if any.
    pub config: Option<PoolConfig>,
    /// How many of the four config copies decoded.
    pub configs_valid: usize,
    /// Every uberblock that decoded, from every copy of the ring.
    pub uberblocks: Vec<Uberblock>,
}

/// Which copies of a label write: the even ones (L0, L2) go before the uberblock and the odd
/// ones (L1, L3) after, so a crash in between always leaves one consistent pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelHalf {
    /// L0 and L2.
    Even,
    /// L1 and L3.
    Odd,
}

/// Reads all four labels. Never fails: unreadable or corrupt copies are simply not counted.
#[must_use]
pub fn read_labels(device: &dyn Device) -> LabelScan {
    let size = device.size_bytes();
    let mut scan = LabelScan {
        config: None,
        configs_valid: 0,
        uberblocks: Vec::new(),
    };
    if size < 4 * tarn_format::label::LABEL_SIZE {
        return scan;
    }
    for offset in label_offsets(size) {
        let mut region = vec![0u8; CONFIG_SIZE as usize];
        if device.read_at(offset + CONFIG_OFFSET, &mut region).is_ok()
            && let Ok(config) = PoolConfig::decode_region(&region)
        {
            scan.configs_valid += 1;
            if scan.config.as_ref().is_none_or(|c| config.txg > c.txg) {
                scan.config = Some(config);
            }
        }
        let mut ring = vec![0u8; RING_SIZE as usize];
        if device.read_at(offset + RING_OFFSET, &mut ring).is_ok() {
            // Slots are at least 1 KiB; trying every 1 KiB boundary finds them for any ashift.
            for slot in ring.chunks_exact(UBERBLOCK_SIZE) {
                if let Ok(uberblock) = Uberblock::decode(slot) {
                    scan.uberblocks.push(uberblock);
                }
            }
        }
    }
    scan
}

/// Writes the config region of the chosen half of the labels.
pub fn write_config(
    device: &dyn Device,
    config: &PoolConfig,
    half: LabelHalf,
) -> Result<(), DeviceError> {
    let region = config.encode_region().map_err(|e| DeviceError::Io {
        offset: 0,
        source: std::io::Error::other(e.to_string()),
    })?;
    for (index, offset) in label_offsets(device.size_bytes()).into_iter().enumerate() {
        if (index % 2 == 0) == (half == LabelHalf::Even) {
            device.write_at(offset + CONFIG_OFFSET, &region)?;
        }
    }
    Ok(())
}

/// Writes `uberblock` into its ring slot in all four labels. Succeeds if at least one copy
/// was written; the error of the last failure otherwise.
pub fn write_uberblock(
    device: &dyn Device,
    uberblock: &Uberblock,
    ashift: u8,
) -> Result<usize, DeviceError> {
    let mut slot = uberblock.encode();
    slot.resize(uberblock_slot_size(ashift) as usize, 0);
    let mut written = 0;
    let mut last_error = None;
    for offset in label_offsets(device.size_bytes()) {
        match device.write_at(offset + uberblock_slot_offset(ashift, uberblock.txg), &slot) {
            Ok(()) => written += 1,
            Err(e) => last_error = Some(e),
        }
    }
    match (written, last_error) {
        (0, Some(e)) => Err(e),
        _ => Ok(written),
    }
}

/// Overwrites every label with zeros (`tarn pool destroy` keeps labels but marks them; this is
/// for `labelclear`-style wiping in tests and tools).
pub fn clear_labels(device: &dyn Device) -> Result<(), DeviceError> {
    let zeros = vec![0u8; tarn_format::label::LABEL_SIZE as usize];
    for offset in label_offsets(device.size_bytes()) {
        device.write_at(offset, &zeros)?;
    }
    device.flush()
}

/// The newest uberblock of `pool_guid` with txg at most `max_txg`, from a set of scans.
#[must_use]
pub fn best_uberblock(
    uberblocks: &[Uberblock],
    pool_guid: tarn_base::Guid,
    max_txg: Option<Txg>,
) -> Option<Uberblock> {
    uberblocks
        .iter()
        .filter(|ub| ub.pool_guid == pool_guid)
        .filter(|ub| max_txg.is_none_or(|max| ub.txg <= max))
        .max_by_key(|ub| (ub.txg, ub.timestamp))
        .copied()
}

const _: () = assert!(LABEL_COUNT == 4);
