//! `TopVdev::placement` against the bytes a read really needs: with every byte of every
//! device outside the blocks' placements rotted, each block still reads back exactly; with
//! its placement rotted on as many children as the vdev tolerates it still does, and on one
//! more it is lost. The simulator trusts this map to tell a justified loss from a bug.

use crate::{Layout, Leaf, TopVdev};
use std::ops::Range;
use std::sync::Arc;
use tarn_base::{Guid, SeededRng, VdevId};
use tarn_device::{FaultPlan, SimDevice};
use tarn_format::label::DraidConfig;

const ASHIFT: u8 = 9;
const SECTOR: u64 = 1 << ASHIFT;
const DEVICE_SIZE: u64 = 24 << 20;

fn top(layout: Layout, children: usize) -> (TopVdev, Vec<Arc<SimDevice>>) {
    let devices: Vec<Arc<SimDevice>> = (0..children)
        .map(|i| SimDevice::new(&format!("p{i}"), DEVICE_SIZE, FaultPlan::seeded(i as u64)))
        .collect();
    let leaves = devices
        .iter()
        .enumerate()
        .map(|(i, d)| Arc::new(Leaf::new(Guid(300 + i as u64), Arc::clone(d) as _).unwrap()))
        .collect();
    // A disk vdev is its leaf: one GUID for both.
    let guid = if children == 1 { Guid(300) } else { Guid(9) };
    let top = TopVdev::new(VdevId(0), guid, ASHIFT, layout, leaves).unwrap();
    (top, devices)
}

fn layouts() -> Vec<(Layout, usize)> {
    let draid = DraidConfig {
        parity: 2,
        data: 4,
        spares: 1,
        seed: 0x5eed,
    };
    vec![
        (Layout::Disk, 1),
        (Layout::Mirror, 3),
        (Layout::Raidz { parity: 1 }, 5),
        (Layout::Raidz { parity: 2 }, 6),
        (Layout::Raidz { parity: 3 }, 8),
        (Layout::Draid(draid), 11),
    ]
}

/// A few random blocks that neither overlap nor cross a dRAID group: (offset, data, asize).
fn write_blocks(top: &TopVdev, rng: &mut SeededRng) -> Vec<(u64, Vec<u8>, u64)> {
    let align = top.allocation_align();
    let boundary = top.allocation_boundary().max(top.asize());
    let mut blocks: Vec<(u64, Vec<u8>, u64)> = Vec::new();
    while blocks.len() < 6 {
        let len = (1 + rng.below(64)) * SECTOR;
        let asize = top.allocation_size(len);
        let offset = rng.below(top.asize() / align) * align;
        let end = offset + asize;
        let crosses = offset / boundary != (end - 1) / boundary;
        let overlaps = blocks.iter().any(|&(o, _, a)| offset < o + a && o < end);
        if crosses || overlaps || end > top.asize() {
            continue;
        }
        let mut data = vec![0u8; len as usize];
        rng.fill(&mut data);
        top.write(offset, &data).unwrap();
        blocks.push((offset, data, asize));
    }
    blocks
}

fn reads_back(top: &TopVdev, offset: u64, data: &[u8]) -> bool {
    match top.read(offset, data.len() as u64, &|d| d == data) {
        Ok(report) => {
            assert_eq!(report.data, data, "never wrong bytes");
            true
        }
        Err(_) => false,
    }
}

/// Rots every byte of `device` outside `keep` (sorted, non-overlapping).
fn rot_outside(device: &SimDevice, keep: &[Range<u64>]) {
    let mut at = 0;
    for range in keep {
        if range.start > at {
            device.rot(at, range.start - at).unwrap();
        }
        at = at.max(range.end);
    }
    device.rot(at, DEVICE_SIZE - at).unwrap();
}

#[test]
fn a_block_needs_nothing_outside_its_placement() {
    for (layout, children) in layouts() {
        let (top, devices) = top(layout, children);
        let mut rng = SeededRng::new(children as u64);
        let blocks = write_blocks(&top, &mut rng);
        let mut keep: Vec<Vec<Range<u64>>> = vec![Vec::new(); children];
        for &(offset, _, asize) in &blocks {
            for (child, range) in top.placement(offset, asize).unwrap() {
                keep[child].push(range);
            }
        }
        for (device, keep) in devices.iter().zip(&mut keep) {
            keep.sort_by_key(|r| r.start);
            rot_outside(device, keep);
        }
        for (offset, data, _) in &blocks {
            assert!(
                reads_back(&top, *offset, data),
                "{layout:?} block at {offset}"
            );
        }
    }
}

#[test]
fn a_block_is_lost_only_past_the_children_its_vdev_tolerates() {
    for (layout, children) in layouts() {
        let tolerated = layout.tolerated(children);
        let (top, devices) = top(layout, children);
        let mut rng = SeededRng::new(40 + children as u64);
        for (offset, data, asize) in write_blocks(&top, &mut rng) {
            let placement = top.placement(offset, asize).unwrap();
            assert!(placement.len() > tolerated, "{layout:?}: {placement:?}");
            // A good read heals what it met, so each round rots its children afresh.
            for count in [tolerated, tolerated + 1] {
                for (child, range) in &placement[..count] {
                    devices[*child]
                        .rot(range.start, range.end - range.start)
                        .unwrap();
                }
                assert_eq!(
                    reads_back(&top, offset, &data),
                    count == tolerated,
                    "{layout:?} block at {offset} with {count} children rotted"
                );
            }
        }
    }
}

#[test]
fn a_placement_outside_the_vdev_is_an_error() {
    let (top, _) = top(Layout::Raidz { parity: 1 }, 5);
    assert!(top.placement(top.asize(), SECTOR).is_err());
    assert!(top.placement(0, 0).is_err());
    assert!(top.placement(1, SECTOR).is_err());
    assert!(top.placement(u64::MAX - SECTOR + 1, SECTOR).is_err());
}
