//! Mirror (and single-disk) I/O: every usable child holds the whole block at the same offset.

use crate::error::VdevError;
use crate::top::{Healing, ReadReport, ScrubReport, TopVdev, WriteReport};

/// Writes the block to every usable child; succeeds if at least one took it.
pub(crate) fn write(vdev: &TopVdev, offset: u64, data: &[u8]) -> Result<WriteReport, VdevError> {
    let mut missed = Vec::new();
    let mut written = 0usize;
    for leaf in vdev.leaves() {
        let ok = match leaf.usable_device() {
            Some(device) => leaf.write(device.as_ref(), offset, data).is_ok(),
            None => false,
        };
        if ok {
            written += 1;
        } else {
            missed.push(leaf.guid());
        }
    }
    assert_eq!(
        written + missed.len(),
        vdev.leaves().len(),
        "every child accounted for"
    );
    if written == 0 {
        let tolerated = vdev.layout().tolerated(vdev.leaves().len());
        return Err(VdevError::WriteFailed {
            guid: vdev.guid(),
            offset,
            len: data.len() as u64,
            failed: missed,
            tolerated,
        });
    }
    Ok(WriteReport { missed })
}

/// Reads children in rotating order until one copy verifies, then rewrites the children that
/// failed or returned bad data.
pub(crate) fn read(
    vdev: &TopVdev,
    offset: u64,
    len: usize,
    verify: &dyn Fn(&[u8]) -> bool,
) -> Result<ReadReport, VdevError> {
    let children = vdev.leaves().len();
    let start = vdev.next_child();
    let mut bad = Vec::new();
    let mut buf = vec![0u8; len];
    for step in 0..children {
        let child = (start + step) % children;
        let leaf = &vdev.leaves()[child];
        let Some(device) = leaf.usable_device() else {
            continue;
        };
        if leaf.read(device.as_ref(), offset, &mut buf).is_err() {
            bad.push(child);
        } else if verify(&buf) {
            let mut healing = Healing::default();
            let targets: Vec<(usize, u64, &[u8])> =
                bad.iter().map(|&c| (c, offset, buf.as_slice())).collect();
            vdev.heal(&targets, &mut healing);
            return Ok(ReadReport { data: buf, healing });
        } else {
            leaf.stats().add_checksum_error();
            bad.push(child);
        }
    }
    Err(VdevError::Unrecoverable {
        guid: vdev.guid(),
        offset,
        len: len as u64,
        why: "no copy verified",
    })
}

/// Reads and verifies every usable child, and rewrites every bad one from a good copy.
pub(crate) fn scrub(
    vdev: &TopVdev,
    offset: u64,
    len: usize,
    verify: &dyn Fn(&[u8]) -> bool,
) -> Result<ScrubReport, VdevError> {
    let mut report = ScrubReport::default();
    let mut good: Option<Vec<u8>> = None;
    let mut bad = Vec::new();
    let mut buf = vec![0u8; len];
    for (child, leaf) in vdev.leaves().iter().enumerate() {
        let Some(device) = leaf.usable_device() else {
            report.skipped.push(leaf.guid());
            continue;
        };
        if leaf.read(device.as_ref(), offset, &mut buf).is_err() {
            bad.push(child);
        } else if verify(&buf) {
            if good.is_none() {
                good = Some(buf.clone());
            }
        } else {
            leaf.stats().add_checksum_error();
            bad.push(child);
        }
    }
    let Some(good) = good else {
        return Err(VdevError::Unrecoverable {
            guid: vdev.guid(),
            offset,
            len: len as u64,
            why: "no copy verified",
        });
    };
    let targets: Vec<(usize, u64, &[u8])> =
        bad.iter().map(|&c| (c, offset, good.as_slice())).collect();
    vdev.heal(&targets, &mut report.healing);
    Ok(report)
}
