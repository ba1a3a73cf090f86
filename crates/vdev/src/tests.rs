//! Behaviour tests of top-level vdevs on in-memory devices: round trips, degraded reads,
//! silent corruption and healing, failure beyond parity, scrub, counters, tree form.

use crate::testing::MemDevice;
use crate::{Health, Layout, Leaf, LeafState, LeafStatsSnapshot, RaidzMap, TopVdev, VdevError};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tarn_base::{Guid, SeededRng, VdevId};
use tarn_device::Device;
use tarn_format::label::DATA_START;

/// Data area of every test device: 512 KiB after the 4 MiB front, 512 KiB of end labels.
const DEVICE_SIZE: usize = (4 << 20) + (512 << 10) + (512 << 10);
const TOP_GUID: u64 = 7;

struct Rig {
    top: TopVdev,
    devices: Vec<Arc<MemDevice>>,
}

fn rig(layout: Layout, children: usize, ashift: u8) -> Rig {
    let devices: Vec<Arc<MemDevice>> = (0..children)
        .map(|i| MemDevice::new(&format!("mem{i}"), DEVICE_SIZE))
        .collect();
    let leaves = devices
        .iter()
        .enumerate()
        .map(|(i, device)| {
            let guid = if layout == Layout::Disk {
                TOP_GUID
            } else {
                100 + i as u64
            };
            Arc::new(Leaf::new(Guid(guid), Arc::clone(device) as Arc<dyn Device>).unwrap())
        })
        .collect();
    let top = TopVdev::new(VdevId(0), Guid(TOP_GUID), ashift, layout, leaves).unwrap();
    Rig { top, devices }
}

fn raidz(parity: u8) -> Layout {
    Layout::Raidz { parity }
}

impl Rig {
    /// Writes `count` blocks of random sizes (1..=max_sectors sectors) back to back.
    fn fill(&self, rng: &mut SeededRng, count: usize, max_sectors: u64) -> Vec<(u64, Vec<u8>)> {
        let sector = 1u64 << self.top.ashift();
        let mut offset = 0;
        let mut blocks = Vec::new();
        for _ in 0..count {
            let len = (1 + rng.below(max_sectors)) * sector;
            let alloc = self.top.allocation_size(len);
            if offset + alloc > self.top.asize() {
                break;
            }
            let mut data = vec![0u8; len as usize];
            rng.fill(&mut data);
            let report = self.top.write(offset, &data).unwrap();
            assert!(report.missed.is_empty());
            blocks.push((offset, data));
            offset += alloc;
        }
        assert!(!blocks.is_empty());
        blocks
    }

    fn read(&self, offset: u64, expected: &[u8]) -> Result<crate::ReadReport, VdevError> {
        let result = self
            .top
            .read(offset, expected.len() as u64, &|data| data == expected);
        if let Ok(report) = &result {
            assert_eq!(report.data, expected, "read returned wrong bytes");
        }
        result
    }

    fn map(&self, offset: u64, len: usize) -> RaidzMap {
        let Layout::Raidz { parity } = self.top.layout() else {
            panic!("not raidz")
        };
        let n = self.top.leaves().len();
        RaidzMap::new(
            n,
            usize::from(parity),
            self.top.ashift(),
            offset,
            len as u64,
        )
    }

    /// (device index, leaf byte offset, length) of column `c`.
    fn column(&self, map: &RaidzMap, c: usize) -> (usize, u64, usize) {
        (
            map.columns[c].child,
            map.leaf_offset(c),
            map.column_bytes(c),
        )
    }

    fn stats(&self) -> Vec<LeafStatsSnapshot> {
        self.top
            .leaves()
            .iter()
            .map(|leaf| leaf.stats().snapshot())
            .collect()
    }

    fn guid(&self, child: usize) -> Guid {
        self.top.leaves()[child].guid()
    }
}

fn all_layouts() -> Vec<(Layout, usize)> {
    vec![
        (Layout::Disk, 1),
        (Layout::Mirror, 2),
        (Layout::Mirror, 3),
        (raidz(1), 2),
        (raidz(1), 5),
        (raidz(2), 3),
        (raidz(2), 6),
        (raidz(3), 4),
        (raidz(3), 9),
    ]
}

/// Goal: what is written reads back, at many offsets and sizes, for every layout and two
/// sector sizes, without touching parity or healing. Method: random blocks back to back.
#[test]
fn round_trip_every_layout() {
    let mut rng = SeededRng::new(11);
    for (layout, children) in all_layouts() {
        for ashift in [9u8, 12] {
            let rig = rig(layout, children, ashift);
            for (offset, data) in rig.fill(&mut rng, 40, 24) {
                let report = rig.read(offset, &data).unwrap();
                assert_eq!(report.healing, crate::Healing::default(), "{layout:?}");
            }
            assert_eq!(rig.top.health(), Health::Online);
        }
    }
}

/// Goal: with 1..=parity failed devices (read errors, or leaves offline) every block still
/// reads; I/O-error columns are rewritten. Method: every subset of failed children.
#[test]
fn degraded_reads_within_parity() {
    let mut rng = SeededRng::new(12);
    for (parity, children) in [(1u8, 4usize), (2, 5), (3, 6)] {
        let rig = rig(raidz(parity), children, 9);
        let blocks = rig.fill(&mut rng, 12, 20);
        for mask in 1u32..(1 << children) {
            if mask.count_ones() > u32::from(parity) {
                continue;
            }
            let failed: Vec<usize> = (0..children).filter(|&i| mask & (1 << i) != 0).collect();
            for &i in &failed {
                rig.devices[i].fail_reads.store(true, Ordering::Relaxed);
            }
            rig.top.leaves()[failed[0]].set_state(LeafState::Offline);
            assert_eq!(rig.top.health(), Health::Degraded);
            for (offset, data) in &blocks {
                let report = rig.read(*offset, data).unwrap();
                assert!(
                    report
                        .healing
                        .repaired
                        .iter()
                        .all(|g| failed.iter().any(|&i| rig.guid(i) == *g))
                );
            }
            for &i in &failed {
                rig.devices[i].fail_reads.store(false, Ordering::Relaxed);
            }
            rig.top.leaves()[failed[0]].set_state(LeafState::Online);
        }
        for (offset, data) in &blocks {
            assert_eq!(
                rig.read(*offset, data).unwrap().healing,
                crate::Healing::default()
            );
        }
    }
}

/// Goal: silent corruption of up to `parity` columns of a block is found, the data returned
/// is right, exactly the corrupt leaves are rewritten (their bytes are really back) and each
/// gets one checksum error. Method: flip bytes on the devices behind chosen columns.
#[test]
fn silent_corruption_is_located_and_healed() {
    let mut rng = SeededRng::new(13);
    for (parity, children) in [(1u8, 3usize), (1, 6), (2, 4), (2, 7), (3, 5), (3, 8)] {
        let rig = rig(raidz(parity), children, 9);
        for (offset, data) in rig.fill(&mut rng, 10, 30) {
            let map = rig.map(offset, data.len());
            let count = 1 + rng.below(u64::from(parity)) as usize;
            let mut picked: Vec<usize> = Vec::new();
            while picked.len() < count.min(map.columns.len()) {
                let c = rng.below(map.columns.len() as u64) as usize;
                if !picked.contains(&c) {
                    picked.push(c);
                }
            }
            let before = rig.stats();
            let mut originals = Vec::new();
            for &c in &picked {
                let (dev, at, len) = rig.column(&map, c);
                originals.push(rig.devices[dev].peek(at, len));
                rig.devices[dev].corrupt(at, len, 0x5a);
            }
            // A scrub is the reliable way to find corrupt parity; a read finds data damage.
            let report = rig
                .top
                .scrub(offset, data.len() as u64, &|d| d == data.as_slice())
                .unwrap();
            let mut repaired = report.healing.repaired.clone();
            repaired.sort();
            let mut expected: Vec<Guid> = picked
                .iter()
                .map(|&c| rig.guid(map.columns[c].child))
                .collect();
            expected.sort();
            assert_eq!(
                repaired, expected,
                "p{parity} n{children} columns {picked:?}"
            );
            for (&c, original) in picked.iter().zip(&originals) {
                let (dev, at, len) = rig.column(&map, c);
                assert_eq!(
                    &rig.devices[dev].peek(at, len),
                    original,
                    "column {c} rewritten"
                );
                let delta = rig.stats()[dev].checksum_errors - before[dev].checksum_errors;
                assert_eq!(delta, 1, "one checksum error on the corrupt leaf");
            }
            rig.read(offset, &data).unwrap();
        }
    }
}

/// Goal: a read (not only a scrub) of a block with corrupt data columns returns the right
/// bytes and heals them. Method: corrupt `parity` data columns, read, check leaf bytes.
#[test]
fn read_heals_corrupt_data_columns() {
    let mut rng = SeededRng::new(14);
    for parity in 1u8..=3 {
        let rig = rig(raidz(parity), 7, 9);
        let offset = 5 * 512;
        let mut data = vec![0u8; 40 * 512];
        rng.fill(&mut data);
        rig.top.write(offset, &data).unwrap();
        let map = rig.map(offset, data.len());
        let victims: Vec<usize> = (0..usize::from(parity))
            .map(|i| map.parity + 1 + i)
            .collect();
        let originals: Vec<Vec<u8>> = victims
            .iter()
            .map(|&c| {
                let (dev, at, len) = rig.column(&map, c);
                let bytes = rig.devices[dev].peek(at, len);
                rig.devices[dev].corrupt(at, len, 0xff);
                bytes
            })
            .collect();
        let report = rig.read(offset, &data).unwrap();
        assert_eq!(report.healing.repaired.len(), victims.len());
        for (&c, original) in victims.iter().zip(&originals) {
            let (dev, at, len) = rig.column(&map, c);
            assert_eq!(&rig.devices[dev].peek(at, len), original);
        }
        assert_eq!(
            rig.read(offset, &data).unwrap().healing,
            crate::Healing::default()
        );
    }
}

/// Goal: beyond the parity budget the result is an error, never wrong bytes. Method: corrupt
/// parity+1 data columns; separately fail parity+1 devices.
#[test]
fn beyond_parity_is_unrecoverable() {
    let mut rng = SeededRng::new(15);
    for parity in 1u8..=3 {
        let rig = rig(raidz(parity), 8, 9);
        let mut data = vec![0u8; 60 * 512];
        rng.fill(&mut data);
        rig.top.write(0, &data).unwrap();
        let map = rig.map(0, data.len());
        for i in 0..=usize::from(parity) {
            let (dev, at, len) = rig.column(&map, map.parity + i);
            rig.devices[dev].corrupt(at, len, 0x01);
        }
        let result = rig.read(0, &data);
        assert!(
            matches!(result, Err(VdevError::Unrecoverable { .. })),
            "{result:?}"
        );
        let scrub = rig
            .top
            .scrub(0, data.len() as u64, &|d| d == data.as_slice());
        assert!(matches!(scrub, Err(VdevError::Unrecoverable { .. })));

        let rig2 = self::rig(raidz(parity), 8, 9);
        rig2.top.write(0, &data).unwrap();
        for dev in &rig2.devices[..=usize::from(parity)] {
            dev.fail_reads.store(true, Ordering::Relaxed);
        }
        let result = rig2.read(0, &data);
        assert!(
            matches!(result, Err(VdevError::Unrecoverable { .. })),
            "{result:?}"
        );
    }
}

/// Goal: a corrupt parity column goes unnoticed by a clean read (parity is not read) but a
/// scrub finds it, rewrites it and counts it; a second scrub is clean.
#[test]
fn scrub_repairs_corrupt_parity() {
    let mut rng = SeededRng::new(16);
    for parity in 1u8..=3 {
        let rig = rig(raidz(parity), 6, 9);
        let mut data = vec![0u8; 33 * 512];
        rng.fill(&mut data);
        rig.top.write(512 * 3, &data).unwrap();
        let map = rig.map(512 * 3, data.len());
        let victim = usize::from(parity) - 1;
        let (dev, at, len) = rig.column(&map, victim);
        let original = rig.devices[dev].peek(at, len);
        rig.devices[dev].corrupt(at, len, 0x80);
        let read = rig.read(512 * 3, &data).unwrap();
        assert_eq!(read.healing, crate::Healing::default());
        let verify = |d: &[u8]| d == data.as_slice();
        let report = rig.top.scrub(512 * 3, data.len() as u64, &verify).unwrap();
        assert_eq!(report.healing.repaired, vec![rig.guid(dev)]);
        assert_eq!(report.healing.repaired_bytes, len as u64);
        assert_eq!(rig.devices[dev].peek(at, len), original);
        assert_eq!(rig.stats()[dev].checksum_errors, 1);
        let again = rig.top.scrub(512 * 3, data.len() as u64, &verify).unwrap();
        assert_eq!(again, crate::ScrubReport::default());
    }
}

/// Goal: mirror reads survive a corrupt copy and an unreadable copy, heal both, and count
/// exactly one checksum error and one read error. Method: 3-way mirror, read until each
/// child has been first in the rotation.
#[test]
fn mirror_heals_bad_copies() {
    let mut rng = SeededRng::new(17);
    let rig = rig(Layout::Mirror, 3, 9);
    let mut data = vec![0u8; 8 * 512];
    rng.fill(&mut data);
    rig.top.write(4096, &data).unwrap();
    rig.devices[0].corrupt(DATA_START + 4096, 512, 0x33);
    rig.devices[1].fail_reads.store(true, Ordering::Relaxed);
    let report = rig.read(4096, &data).unwrap();
    // Rotation starts at child 0: child 0 is corrupt, child 1 fails, child 2 is good.
    assert_eq!(report.healing.repaired, vec![rig.guid(0), rig.guid(1)]);
    assert_eq!(rig.devices[0].peek(DATA_START + 4096, data.len()), data);
    let stats = rig.stats();
    assert_eq!((stats[0].checksum_errors, stats[0].read_errors), (1, 0));
    assert_eq!((stats[1].checksum_errors, stats[1].read_errors), (0, 1));
    assert_eq!((stats[2].checksum_errors, stats[2].read_errors), (0, 0));
    assert_eq!(
        stats.iter().map(|s| s.write_ops).collect::<Vec<_>>(),
        vec![2, 2, 1]
    );
    rig.devices[1].fail_reads.store(false, Ordering::Relaxed);
    rig.devices[2].corrupt(DATA_START + 4096, 512, 0x01);
    let scrub = rig
        .top
        .scrub(4096, data.len() as u64, &|d| d == data.as_slice())
        .unwrap();
    assert_eq!(scrub.healing.repaired, vec![rig.guid(2)]);
    assert_eq!(rig.stats()[2].checksum_errors, 1);
    for dev in &rig.devices {
        dev.corrupt(DATA_START + 4096, 512, 0x01);
    }
    assert!(matches!(
        rig.read(4096, &data),
        Err(VdevError::Unrecoverable { .. })
    ));
}

/// Goal: counters are exact through a write, a clean read and a healing read on raidz2.
#[test]
fn raidz_counters_are_exact() {
    let rig = rig(raidz(2), 4, 9);
    let data: Vec<u8> = (0..6 * 512).map(|i| (i * 7 + 3) as u8).collect();
    rig.top.write(0, &data).unwrap();
    let map = rig.map(0, data.len());
    assert_eq!(map.columns.len(), 4);
    let stats = rig.stats();
    for (c, column) in map.columns.iter().enumerate() {
        let s = stats[column.child];
        assert_eq!(
            (s.write_ops, s.write_bytes),
            (1, map.column_bytes(c) as u64)
        );
        assert_eq!(
            (s.read_ops, s.read_errors, s.write_errors, s.checksum_errors),
            (0, 0, 0, 0)
        );
    }
    rig.read(0, &data).unwrap();
    let stats = rig.stats();
    for (c, column) in map.columns.iter().enumerate() {
        let expected = if c < 2 {
            (0, 0)
        } else {
            (1, map.column_bytes(c) as u64)
        };
        assert_eq!(
            (stats[column.child].read_ops, stats[column.child].read_bytes),
            expected
        );
    }
    let (dev, at, len) = rig.column(&map, 3);
    rig.devices[dev].corrupt(at, len, 0x10);
    rig.read(0, &data).unwrap();
    let stats = rig.stats();
    for (c, column) in map.columns.iter().enumerate() {
        let s = stats[column.child];
        let victim = u64::from(c == 3);
        assert_eq!(s.read_ops, if c < 2 { 1 } else { 2 }, "column {c}");
        assert_eq!(
            (s.checksum_errors, s.write_ops),
            (victim, 1 + victim),
            "column {c}"
        );
    }
    rig.top.leaves()[dev].clear();
    assert_eq!(rig.stats()[dev].checksum_errors, 0);
    assert_eq!(rig.stats()[dev].read_ops, 2);
}

/// Goal: writes tolerate up to `parity` failing children, report them, count write errors,
/// and the block still reads (stale columns found by the combinatorial search); more
/// failures refuse the write; more unusable leaves refuse it before any I/O.
#[test]
fn raidz_write_failures() {
    let mut rng = SeededRng::new(18);
    let rig = rig(raidz(2), 5, 9);
    let mut data = vec![0u8; 24 * 512];
    rng.fill(&mut data);
    rig.devices[1].fail_writes.store(true, Ordering::Relaxed);
    rig.devices[3].fail_writes.store(true, Ordering::Relaxed);
    let report = rig.top.write(0, &data).unwrap();
    assert_eq!(report.missed, vec![rig.guid(1), rig.guid(3)]);
    assert_eq!(
        (rig.stats()[1].write_errors, rig.stats()[0].write_errors),
        (1, 0)
    );
    let read = rig.read(0, &data).unwrap();
    assert_eq!(read.healing.heal_failed.len(), 2, "healing writes fail too");
    rig.devices[4].fail_writes.store(true, Ordering::Relaxed);
    let result = rig.top.write(12288, &data);
    assert!(matches!(result, Err(VdevError::WriteFailed { ref failed, .. }) if failed.len() == 3));
    for i in [1, 3, 4] {
        rig.devices[i].fail_writes.store(false, Ordering::Relaxed);
        rig.top.leaves()[i].set_state(LeafState::Offline);
    }
    let ops_before: u64 = rig.stats().iter().map(|s| s.write_ops).sum();
    assert!(matches!(
        rig.top.write(12288, &data),
        Err(VdevError::WriteFailed { .. })
    ));
    assert_eq!(
        rig.stats().iter().map(|s| s.write_ops).sum::<u64>(),
        ops_before
    );
    assert_eq!(rig.top.health(), Health::Faulted);
}

/// Goal: a mirror write succeeds while one child takes it, and fails when none does.
#[test]
fn mirror_write_failures() {
    let rig = rig(Layout::Mirror, 2, 9);
    let data = vec![9u8; 1024];
    rig.devices[0].fail_writes.store(true, Ordering::Relaxed);
    assert_eq!(rig.top.write(0, &data).unwrap().missed, vec![rig.guid(0)]);
    rig.read(0, &data).unwrap();
    rig.top.leaves()[1].set_state(LeafState::Removed);
    assert_eq!(rig.top.health(), Health::Degraded);
    assert!(matches!(
        rig.top.write(0, &data),
        Err(VdevError::WriteFailed { .. })
    ));
    rig.top.leaves()[0].set_state(LeafState::Faulted);
    assert_eq!(rig.top.health(), Health::Faulted);
    rig.top.leaves()[0].set_state(LeafState::Unavail);
    assert_eq!(rig.top.health(), Health::Unavail);
}

/// Goal: the label form round-trips, and import with a device missing gives an Unavail leaf
/// and a degraded vdev that still reads; an offline flag is kept.
#[test]
fn tree_round_trip_and_missing_devices() {
    let mut rng = SeededRng::new(19);
    let rig = rig(raidz(2), 4, 12);
    rig.top.set_metaslab_shift(17);
    let blocks = rig.fill(&mut rng, 5, 8);
    let tree = rig.top.to_tree();
    assert_eq!(tree.children.len(), 4);
    assert_eq!(tree.asize, rig.top.asize());
    let mut devices: HashMap<Guid, Arc<dyn Device>> = HashMap::new();
    for (i, dev) in rig.devices.iter().enumerate().skip(1) {
        devices.insert(rig.guid(i), Arc::clone(dev) as Arc<dyn Device>);
    }
    let mut offline_tree = tree.clone();
    offline_tree.children[3].offline = true;
    let top = TopVdev::from_tree(&offline_tree, &devices).unwrap();
    assert_eq!(top.leaves()[0].state(), LeafState::Unavail);
    assert_eq!(top.leaves()[3].state(), LeafState::Offline);
    assert_eq!(top.health(), Health::Degraded);
    assert_eq!(top.to_tree(), offline_tree);
    for (offset, data) in &blocks {
        let report = top
            .read(*offset, data.len() as u64, &|d| d == data.as_slice())
            .unwrap();
        assert_eq!(&report.data, data);
    }
    let (offset, data) = &blocks[0];
    let scrub = top
        .scrub(*offset, data.len() as u64, &|d| d == data.as_slice())
        .unwrap();
    let map = rig.map(*offset, data.len());
    let expected: Vec<Guid> = map
        .columns
        .iter()
        .filter(|column| column.child == 0 || column.child == 3)
        .map(|column| rig.guid(column.child))
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(scrub.skipped, expected, "unusable leaves are not checked");
    assert_eq!(scrub.healing, crate::Healing::default());
    devices.insert(rig.guid(0), Arc::clone(&rig.devices[0]) as Arc<dyn Device>);
    let full = TopVdev::from_tree(&tree, &devices).unwrap();
    assert_eq!(full.health(), Health::Online);
    assert_eq!(full.to_tree(), tree);

    let disk = self::rig(Layout::Disk, 1, 9);
    let disk_tree = disk.top.to_tree();
    assert!(disk_tree.children.is_empty());
    let devices = HashMap::from([(
        Guid(TOP_GUID),
        Arc::clone(&disk.devices[0]) as Arc<dyn Device>,
    )]);
    assert_eq!(
        TopVdev::from_tree(&disk_tree, &devices).unwrap().to_tree(),
        disk_tree
    );
}

/// Goal: widths, ashift and duplicate leaves are validated as OpenZFS does.
#[test]
fn construction_validates_width() {
    let leaves = |n: usize| -> Vec<Arc<Leaf>> {
        (0..n)
            .map(|i| {
                let dev = MemDevice::new("v", DEVICE_SIZE) as Arc<dyn Device>;
                Arc::new(Leaf::new(Guid(50 + i as u64), dev).unwrap())
            })
            .collect()
    };
    let make = |layout, children| TopVdev::new(VdevId(1), Guid(9), 9, layout, children);
    assert!(matches!(
        make(Layout::Mirror, leaves(1)),
        Err(VdevError::InvalidConfig { .. })
    ));
    assert!(make(Layout::Mirror, leaves(2)).is_ok());
    for parity in 1u8..=3 {
        let min = usize::from(parity) + 1;
        assert!(
            make(raidz(parity), leaves(min - 1)).is_err(),
            "raidz{parity}"
        );
        assert!(make(raidz(parity), leaves(min)).is_ok(), "raidz{parity}");
    }
    assert!(make(raidz(4), leaves(8)).is_err());
    assert!(
        make(Layout::Disk, leaves(1)).is_err(),
        "disk GUID must match its leaf"
    );
    let mut twice = leaves(3);
    twice.push(Arc::clone(&twice[0]));
    assert!(make(raidz(1), twice).is_err());
    assert!(TopVdev::new(VdevId(1), Guid(9), 8, Layout::Mirror, leaves(2)).is_err());
    let small = MemDevice::new("small", 1 << 20) as Arc<dyn Device>;
    assert!(matches!(
        Leaf::new(Guid(3), small),
        Err(VdevError::DeviceTooSmall { .. })
    ));
    let top = make(raidz(2), leaves(5)).unwrap();
    assert_eq!(top.asize(), 5 * (512 << 10));
}

/// Goal: misaligned and out-of-range accesses are errors, not panics (offsets come from
/// block pointers, which are input).
#[test]
fn bad_addresses_are_errors() {
    for (layout, children) in all_layouts() {
        let rig = rig(layout, children, 9);
        let asize = rig.top.asize();
        let verify = |_: &[u8]| true;
        assert!(matches!(
            rig.top.write(100, &[0u8; 512]),
            Err(VdevError::Misaligned { .. })
        ));
        assert!(matches!(
            rig.top.write(0, &[0u8; 100]),
            Err(VdevError::Misaligned { .. })
        ));
        assert!(matches!(
            rig.top.read(0, 0, &verify),
            Err(VdevError::Misaligned { .. })
        ));
        assert!(matches!(
            rig.top.read(asize, 512, &verify),
            Err(VdevError::OutOfRange { .. })
        ));
        assert!(matches!(
            rig.top.scrub(u64::MAX - 511, 512, &verify),
            Err(VdevError::OutOfRange { .. })
        ));
        assert!(matches!(
            rig.top.read(0, 1 << 30, &verify),
            Err(VdevError::OutOfRange { .. })
        ));
        let last = asize - rig.top.allocation_size(512);
        rig.top.write(last, &[1u8; 512]).unwrap();
        rig.read(last, &[1u8; 512]).unwrap();
    }
}

/// Goal: flush fails only when more leaves failed than the layout tolerates, and counts.
#[test]
fn flush_respects_redundancy() {
    let rig = rig(raidz(1), 3, 9);
    rig.top.flush().unwrap();
    rig.devices[0].fail_flush.store(true, Ordering::Relaxed);
    rig.top.flush().unwrap();
    assert_eq!(rig.stats()[0].write_errors, 1);
    rig.devices[2].fail_flush.store(true, Ordering::Relaxed);
    let result = rig.top.flush();
    assert!(matches!(result, Err(VdevError::FlushFailed { ref failed, .. }) if failed.len() == 2));
}

/// Goal: reads avoid a leaf marked slow. Method: raidz2 of 6, mark leaf 3 slow, read every
/// block: leaf 3's read count must not move, data must be right, nothing is healed; with
/// three slow leaves (beyond parity) the reads go to all of them again.
#[test]
fn raidz_reads_around_a_slow_leaf() {
    let rig = rig(raidz(2), 6, 9);
    let mut rng = SeededRng::new(41);
    let blocks = rig.fill(&mut rng, 40, 12);
    let slow = &rig.top.leaves()[3];
    slow.set_slow(true);
    let before = rig.stats();
    for (offset, data) in &blocks {
        let report = rig.read(*offset, data).unwrap();
        assert!(
            report.healing.repaired.is_empty(),
            "read-around heals nothing"
        );
    }
    let after = rig.stats();
    assert_eq!(
        after[3].read_ops, before[3].read_ops,
        "the slow leaf is not read"
    );
    assert!(after[0].read_ops > before[0].read_ops);
    for leaf in &rig.top.leaves()[4..6] {
        leaf.set_slow(true);
    }
    let (offset, data) = &blocks[0];
    rig.read(*offset, data).unwrap();
    let beyond = rig.stats();
    let touched: u64 = (3..6).map(|i| beyond[i].read_ops - after[i].read_ops).sum();
    assert!(touched > 0, "beyond parity, slow leaves are read");
}

/// Goal: a slow leaf whose column is needed after all is read. Method: raidz1 of 4, leaf 1
/// slow, leaf 2's column of a block silently corrupt: the reconstruction around leaf 1 fails
/// to verify, so leaf 1 is read and leaf 2's column is found and healed.
#[test]
fn raidz_reads_a_slow_leaf_when_reconstruction_needs_it() {
    let rig = rig(raidz(1), 4, 9);
    let data = vec![0x5au8; 6 * 512];
    rig.top.write(0, &data).unwrap();
    let map = rig.map(0, data.len());
    let column = (0..map.columns.len())
        .find(|&c| c >= map.parity && map.columns[c].child == 2)
        .unwrap();
    let (device, at, len) = rig.column(&map, column);
    rig.devices[device].corrupt(at, len, 0xff);
    rig.top.leaves()[1].set_slow(true);
    let before = rig.stats();
    let report = rig.read(0, &data).unwrap();
    let after = rig.stats();
    assert_eq!(after[1].read_ops, before[1].read_ops + 1, "read after all");
    assert_eq!(after[2].checksum_errors, before[2].checksum_errors + 1);
    assert_eq!(report.healing.repaired, vec![rig.guid(2)]);
}

/// Goal: a mirror reads its slow side only when the other side fails.
#[test]
fn mirror_reads_the_slow_side_last() {
    let rig = rig(Layout::Mirror, 2, 9);
    let mut rng = SeededRng::new(42);
    let blocks = rig.fill(&mut rng, 10, 4);
    rig.top.leaves()[0].set_slow(true);
    for (offset, data) in &blocks {
        rig.read(*offset, data).unwrap();
    }
    let stats = rig.stats();
    assert_eq!(stats[0].read_ops, 0);
    assert_eq!(stats[1].read_ops, blocks.len() as u64);
    rig.devices[1].fail_reads.store(true, Ordering::Relaxed);
    rig.read(blocks[0].0, &blocks[0].1).unwrap();
    assert_eq!(rig.stats()[0].read_ops, 1);
}

/// Goal: a leaf with a clock records the latency of each access in its histogram.
#[test]
fn leaf_latency_is_timed_by_its_clock() {
    let rig = rig(Layout::Disk, 1, 9);
    let clock = Arc::new(tarn_base::ManualClock::new(0));
    rig.top.leaves()[0].set_clock(clock);
    rig.top.write(0, &[1u8; 512]).unwrap();
    let snapshot = rig.top.leaves()[0].io_stats().snapshot();
    assert_eq!(
        snapshot.write_histogram[0], 1,
        "no time passed on the manual clock"
    );
    assert_eq!(snapshot.writes_in_flight, 0);
}
