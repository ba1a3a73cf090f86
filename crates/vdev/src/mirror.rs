//! Mirror (and single-disk) I/O: every usable child holds the whole block at the same offset.
//! A child position may be a `replacing` or `spare` node (see `child`); it is read through its
//! first readable member and written on all of them. Reads go to sides on slow leaves only
//! after every other side failed. A read asks one side at a time (one verified copy is
//! enough); a scrub reads every side, in parallel on devices with their own I/O thread.

use std::sync::Arc;

use tarn_device::SharedBytes;

use crate::child::Child;
use crate::error::VdevError;
use crate::leaf::{Leaf, LeafRead};
use crate::top::{Healing, ReadReport, ScrubReport, TopVdev, WriteReport};

/// Writes the block to every usable child; succeeds if at least one took it.
pub(crate) fn write(
    vdev: &TopVdev,
    offset: u64,
    data: &SharedBytes,
) -> Result<WriteReport, VdevError> {
    let children = vdev.children();
    let mut missed = Vec::new();
    let mut written = 0usize;
    for child in &children {
        if child.write(offset, data, &mut missed) {
            written += 1;
        }
    }
    assert!(written <= children.len(), "every child counted once");
    if written == 0 {
        let tolerated = vdev.layout().tolerated(children.len());
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

/// A block read whose first side is submitted ([`start`]); [`Started::finish`] does the rest.
pub(crate) struct Started<'v> {
    vdev: &'v TopVdev,
    offset: u64,
    len: usize,
    children: Vec<Arc<Child>>,
    /// The children in the order they are tried.
    order: Vec<usize>,
    /// The first side to try, when its device has its own I/O thread: submitted at start.
    first: Option<(usize, Arc<Leaf>, LeafRead)>,
}

/// Chooses the order of the sides (rotating, slow leaves last: they are read only when no
/// other side gives a copy that verifies) and submits the read of the first readable one.
pub(crate) fn start(vdev: &TopVdev, offset: u64, len: usize) -> Started<'_> {
    let children = vdev.children();
    let rotation = vdev.next_child(children.len());
    let mut order: Vec<usize> = (0..children.len())
        .map(|step| (rotation + step) % children.len())
        .collect();
    order.sort_by_key(|&c| children[c].read_leaf().is_some_and(|leaf| leaf.is_slow()));
    let first = order.iter().find_map(|&c| {
        let leaf = children[c].read_leaf()?;
        let device = leaf.usable_device()?;
        let read = device
            .reads_in_parallel()
            .then(|| leaf.submit_read(device.as_ref(), offset, len))?;
        Some((c, Arc::clone(leaf), read))
    });
    Started {
        vdev,
        offset,
        len,
        children,
        order,
        first,
    }
}

impl Started<'_> {
    /// Tries the sides in order (the first one's read already submitted) until one copy
    /// verifies, then rewrites the sides that failed or returned bad data.
    pub(crate) fn finish(self, verify: &dyn Fn(&[u8]) -> bool) -> Result<ReadReport, VdevError> {
        let Started {
            vdev,
            offset,
            len,
            children,
            order,
            mut first,
        } = self;
        let mut bad = Vec::new();
        for child in order {
            let side = match first.take_if(|(c, ..)| *c == child) {
                Some((_, leaf, read)) => leaf.finish_read(read).map(|buf| (leaf, buf)),
                None => {
                    let Some(leaf) = children[child].read_leaf() else {
                        continue;
                    };
                    let Some(device) = leaf.usable_device() else {
                        continue;
                    };
                    let mut buf = tarn_base::buf::zeroed(len);
                    leaf.read(device.as_ref(), offset, &mut buf)
                        .map(|()| (Arc::clone(leaf), buf))
                }
            };
            match side {
                Err(_) => bad.push(child),
                Ok((_, buf)) if verify(&buf) => {
                    let mut healing = Healing::default();
                    let targets: Vec<(usize, u64, &[u8])> =
                        bad.iter().map(|&c| (c, offset, buf.as_slice())).collect();
                    TopVdev::heal(&children, &targets, &mut healing);
                    return Ok(ReadReport { data: buf, healing });
                }
                Ok((leaf, _)) => {
                    leaf.stats().add_checksum_error();
                    bad.push(child);
                }
            }
        }
        Err(VdevError::Unrecoverable {
            guid: vdev.guid(),
            offset,
            len: len as u64,
            why: "no copy verified",
        })
    }
}

/// Reads and verifies every readable child, and rewrites every bad one from a good copy.
/// With `resilver`, also writes the good copy to every member being resilvered. The sides
/// on devices with their own I/O thread are read in parallel (`side_reads`).
pub(crate) fn scrub(
    vdev: &TopVdev,
    offset: u64,
    len: usize,
    verify: &dyn Fn(&[u8]) -> bool,
    resilver: bool,
) -> Result<ScrubReport, VdevError> {
    let children = vdev.children();
    let mut report = ScrubReport::default();
    let mut good: Option<Vec<u8>> = None;
    let mut bad = Vec::new();
    for (index, side) in side_reads(&children, offset, len, &mut report) {
        match side {
            Side::Failed => bad.push(index),
            Side::Read(leaf, buf) => {
                if verify(&buf) {
                    if good.is_none() {
                        good = Some(buf);
                    }
                } else {
                    leaf.stats().add_checksum_error();
                    bad.push(index);
                }
            }
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
    TopVdev::heal(&children, &targets, &mut report.healing);
    if resilver {
        for (index, child) in children.iter().enumerate() {
            if !bad.contains(&index) {
                child.resilver(offset, &good, &mut report.healing);
            }
        }
    }
    Ok(report)
}

/// What reading one mirror side gave.
enum Side {
    /// The bytes, from this leaf (not yet verified).
    Read(Arc<Leaf>, Vec<u8>),
    /// The device returned an error.
    Failed,
}

/// Reads `len` bytes at `offset` from every readable child, in child order; children with
/// no readable leaf or device are added to `report.skipped`. Reads on devices with their own
/// I/O thread are all submitted before any is waited for; synchronous devices are read
/// inline, in child order.
fn side_reads(
    children: &[Arc<Child>],
    offset: u64,
    len: usize,
    report: &mut ScrubReport,
) -> Vec<(usize, Side)> {
    let mut issued = Vec::new();
    for (index, child) in children.iter().enumerate() {
        let Some(leaf) = child.read_leaf().cloned() else {
            report
                .skipped
                .extend(child.members().iter().map(|leaf| leaf.guid()));
            continue;
        };
        let Some(device) = leaf.usable_device() else {
            report.skipped.push(leaf.guid());
            continue;
        };
        if device.reads_in_parallel() {
            let read = leaf.submit_read(device.as_ref(), offset, len);
            issued.push((index, leaf, Err(read)));
        } else {
            let mut buf = tarn_base::buf::zeroed(len);
            let result = leaf.read(device.as_ref(), offset, &mut buf).map(|()| buf);
            issued.push((index, leaf, Ok(result)));
        }
    }
    issued
        .into_iter()
        .map(|(index, leaf, read)| {
            let result = match read {
                Ok(done) => done,
                Err(in_flight) => leaf.finish_read(in_flight),
            };
            let side = match result {
                Ok(buf) => Side::Read(leaf, buf),
                Err(_) => Side::Failed,
            };
            (index, side)
        })
        .collect()
}
