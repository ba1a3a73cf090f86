//! The parallel read path: top-level vdevs over `QueuedDevice`s (one I/O thread per device,
//! `Device::reads_in_parallel`), where a raidz block's columns and a mirror scrub's sides are
//! submitted together and then waited for. Every fault the serial path handles must be
//! handled the same way here: a column EIO among reads in flight, a device gone, silent
//! corruption, a slow-marked leaf read around, a device with real latency among fast ones.

use crate::testing::MemDevice;
use crate::{Layout, Leaf, LeafState, TopVdev};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tarn_base::{Guid, SeededRng, VdevId};
use tarn_device::{Device, FaultPlan, QueuedDevice, SimDevice};
use tarn_format::label::DATA_START;

const DEVICE_SIZE: usize = (4 << 20) + (512 << 10) + (512 << 10);

struct Rig {
    top: TopVdev,
    devices: Vec<Arc<MemDevice>>,
    blocks: Vec<(u64, Vec<u8>)>,
}

/// Each of `devices` behind a `QueuedDevice`, as a leaf with GUID `first_guid + i`.
fn queued_leaves<D: Device + 'static>(devices: &[Arc<D>], first_guid: u64) -> Vec<Arc<Leaf>> {
    devices
        .iter()
        .enumerate()
        .map(|(i, device)| {
            let queued = QueuedDevice::new(Arc::clone(device) as Arc<dyn Device>).unwrap();
            Arc::new(Leaf::new(Guid(first_guid + i as u64), Arc::new(queued)).unwrap())
        })
        .collect()
}

/// A vdev of `children` in-memory devices, each behind a `QueuedDevice`, holding random
/// blocks of 1..=24 sectors of 512 bytes.
fn rig(layout: Layout, children: usize, seed: u64) -> Rig {
    let devices: Vec<Arc<MemDevice>> = (0..children)
        .map(|i| MemDevice::new(&format!("mem{i}"), DEVICE_SIZE))
        .collect();
    let leaves = queued_leaves(&devices, 100);
    let top = TopVdev::new(VdevId(0), Guid(7), 9, layout, leaves).unwrap();
    assert!(top.reads_in_parallel(), "queued devices read in parallel");
    let mut rng = SeededRng::new(seed);
    let mut blocks = Vec::new();
    let mut offset = 0;
    while blocks.len() < 40 {
        let mut data = vec![0u8; (1 + rng.below(24) as usize) * 512];
        rng.fill(&mut data);
        top.write(offset, &data).unwrap();
        offset += top.allocation_size(data.len() as u64);
        blocks.push((offset - top.allocation_size(data.len() as u64), data));
    }
    // Writes are queued: apply them before a test corrupts the devices underneath.
    top.flush().unwrap();
    Rig {
        top,
        devices,
        blocks,
    }
}

impl Rig {
    fn read_all(&self) {
        for (offset, expected) in &self.blocks {
            let verify = |data: &[u8]| data == expected.as_slice();
            let report = self
                .top
                .read(*offset, expected.len() as u64, &verify)
                .unwrap();
            assert_eq!(&report.data, expected, "block at {offset}");
        }
    }

    fn scrub_all(&self) -> u64 {
        let mut repaired = 0;
        for (offset, expected) in &self.blocks {
            let verify = |data: &[u8]| data == expected.as_slice();
            let report = self
                .top
                .scrub(*offset, expected.len() as u64, &verify)
                .unwrap();
            repaired += report.healing.repaired_bytes;
        }
        repaired
    }

    fn leaf(&self, i: usize) -> Arc<Leaf> {
        self.top.leaf(Guid(100 + i as u64)).unwrap()
    }
}

/// Goal: the leaves of a vdev over queued devices are flushed together, not one after
/// another (ten `fdatasync`s in a row made each intent-log commit ten times one), and the
/// parallel flush keeps the serial one's verdict: a failed leaf counts a write error, and
/// more failed leaves than the parity tolerates fail the flush, naming them.
#[test]
fn leaves_are_flushed_together_with_the_same_redundancy_verdict() {
    let rig = rig(Layout::Raidz { parity: 1 }, 5, 3);
    let meter = Arc::new(crate::testing::FlushMeter::default());
    for device in &rig.devices {
        device.meter_flushes(Arc::clone(&meter));
    }
    rig.top.flush().unwrap();
    assert!(
        meter.most.load(Ordering::SeqCst) > 1,
        "flushes of different leaves overlapped"
    );
    rig.devices[1].fail_flush.store(true, Ordering::Relaxed);
    rig.top.flush().unwrap();
    assert_eq!(rig.leaf(1).stats().snapshot().write_errors, 1);
    assert_eq!(rig.leaf(0).stats().snapshot().write_errors, 0);
    rig.devices[2].fail_flush.store(true, Ordering::Relaxed);
    let result = rig.top.flush();
    assert!(
        matches!(result, Err(crate::VdevError::FlushFailed { ref failed, .. })
            if failed == &[Guid(101), Guid(102)]),
        "{result:?}"
    );
}

/// Goal: with up to `parity` devices failing every read, every block still reads back
/// correctly through reads in flight together, each failed column is counted once as a
/// read error on its own leaf, and healing rewrote it. Method: every set of failing devices
/// of size <= parity for raidz1-3 of 5-7 children.
#[test]
fn raidz_column_eio_among_parallel_reads() {
    for (parity, width) in [(1u8, 5usize), (2, 6), (3, 7)] {
        let rig = rig(Layout::Raidz { parity }, width, u64::from(parity));
        for set in 1u32..(1 << width) {
            if set.count_ones() > u32::from(parity) {
                continue;
            }
            let failing: Vec<usize> = (0..width).filter(|i| set & (1 << i) != 0).collect();
            let before: Vec<u64> = (0..width)
                .map(|i| rig.leaf(i).stats().snapshot().read_errors)
                .collect();
            for &i in &failing {
                rig.devices[i].fail_reads.store(true, Ordering::Relaxed);
            }
            rig.read_all();
            for &i in &failing {
                rig.devices[i].fail_reads.store(false, Ordering::Relaxed);
            }
            for (i, before) in before.iter().enumerate() {
                let errors = rig.leaf(i).stats().snapshot().read_errors - before;
                if !failing.contains(&i) {
                    assert_eq!(
                        errors, 0,
                        "raidz{parity} set {set:b}: leaf {i} had no fault"
                    );
                }
            }
            assert!(
                failing
                    .iter()
                    .any(|&i| rig.leaf(i).stats().snapshot().read_errors > before[i]),
                "raidz{parity} set {set:b}: some failed column was read and counted"
            );
        }
        // Healing rewrote what was unreadable: a scrub finds nothing left to repair.
        assert_eq!(rig.scrub_all(), 0, "raidz{parity}: healed by the reads");
    }
}

/// Goal: silently corrupt columns are found and repaired by a scrub whose columns are all
/// read in parallel, and a later read needs no reconstruction. Method: corrupt the data
/// area of one device (raidz1) and of two devices (raidz2), scrub, then compare devices.
#[test]
fn raidz_scrub_in_parallel_repairs_silent_corruption() {
    for (parity, bad) in [(1u8, vec![2usize]), (2, vec![0, 4])] {
        let rig = rig(Layout::Raidz { parity }, 6, 10 + u64::from(parity));
        for &i in &bad {
            rig.devices[i].corrupt(DATA_START, 64 << 10, 0x5a);
        }
        assert!(rig.scrub_all() > 0, "raidz{parity}: corruption repaired");
        for &i in &bad {
            assert!(rig.leaf(i).stats().snapshot().checksum_errors > 0);
        }
        assert_eq!(rig.scrub_all(), 0, "raidz{parity}: clean after repair");
        rig.read_all();
    }
}

/// Goal: a device that vanishes among parallel reads takes its leaf out of service
/// (Removed) and the block still reads from the others; a mirror scrub whose sides are read
/// in parallel repairs a bad side. Method: a mirror of three, one side returning EIO on
/// scrub, one side corrupted; then a raidz2 with one device gone.
#[test]
fn mirror_scrub_and_gone_device_among_parallel_reads() {
    let rig = rig(Layout::Mirror, 3, 21);
    rig.devices[1].corrupt(DATA_START, 32 << 10, 0xff);
    rig.devices[2].fail_reads.store(true, Ordering::Relaxed);
    assert!(rig.scrub_all() > 0, "bad sides rewritten");
    rig.devices[2].fail_reads.store(false, Ordering::Relaxed);
    assert!(rig.leaf(1).stats().snapshot().checksum_errors > 0);
    assert!(rig.leaf(2).stats().snapshot().read_errors > 0);
    assert_eq!(rig.scrub_all(), 0, "every side good again");

    let sims: Vec<Arc<SimDevice>> = (0..6)
        .map(|i| SimDevice::new(&format!("s{i}"), DEVICE_SIZE as u64, FaultPlan::default()))
        .collect();
    let leaves = queued_leaves(&sims, 200);
    let top = TopVdev::new(VdevId(0), Guid(8), 9, Layout::Raidz { parity: 2 }, leaves).unwrap();
    let data: Vec<u8> = (0..16 * 512).map(|i| (i * 7 % 251) as u8).collect();
    top.write(0, &data).unwrap();
    sims[3].set_gone(true);
    let report = top
        .read(0, data.len() as u64, &|d| d == data.as_slice())
        .unwrap();
    assert_eq!(report.data, data);
    let gone = top.leaf(Guid(203)).unwrap();
    assert_eq!(
        gone.state(),
        LeafState::Removed,
        "a gone device leaves service"
    );
}

/// Goal: a leaf marked slow is read around (its column reconstructed, the device not asked)
/// and a device with real latency among fast ones still gives correct bytes. Method: raidz2
/// of six simulated devices behind queues, device 1 sleeping 20 ms per access; first read
/// plainly, then with leaf 1 marked slow and its read count compared.
#[test]
fn slow_devices_among_parallel_reads() {
    let sims: Vec<Arc<SimDevice>> = (0..6)
        .map(|i| {
            let plan = FaultPlan {
                latency_ns: if i == 1 { 20_000_000 } else { 0 },
                ..FaultPlan::default()
            };
            SimDevice::new(&format!("s{i}"), DEVICE_SIZE as u64, plan)
        })
        .collect();
    let leaves = queued_leaves(&sims, 300);
    let top = TopVdev::new(VdevId(0), Guid(9), 9, Layout::Raidz { parity: 2 }, leaves).unwrap();
    let data: Vec<u8> = (0..40 * 512).map(|i| (i * 13 % 253) as u8).collect();
    top.write(0, &data).unwrap();
    let verify = |d: &[u8]| d == data.as_slice();
    assert_eq!(top.read(0, data.len() as u64, &verify).unwrap().data, data);
    let slow = top.leaf(Guid(301)).unwrap();
    slow.set_slow(true);
    let reads_before = slow.stats().snapshot().read_ops;
    assert_eq!(top.read(0, data.len() as u64, &verify).unwrap().data, data);
    assert_eq!(
        slow.stats().snapshot().read_ops,
        reads_before,
        "a slow-marked leaf is read around while parity covers it"
    );
    for leaf in top.leaves() {
        assert_eq!(
            leaf.io_stats().snapshot().reads_in_flight,
            0,
            "every read ended"
        );
    }
}

/// Goal: leaves flushed all at once (devices with I/O threads) keep the serial path's
/// verdict: failures within parity are tolerated and counted on their own leaves, beyond
/// it the flush fails naming every failed leaf. Method: raidz2 of 6 over queued devices;
/// every set of 0 to 3 leaves whose flush fails.
#[test]
fn parallel_flushes_count_failures_per_leaf() {
    let rig = rig(Layout::Raidz { parity: 2 }, 6, 9);
    for set in 0u32..64 {
        let failing: Vec<usize> = (0..6).filter(|i| set & (1 << i) != 0).collect();
        if failing.len() > 3 {
            continue;
        }
        let before: Vec<u64> = (0..6)
            .map(|i| rig.leaf(i).stats().snapshot().write_errors)
            .collect();
        for &i in &failing {
            rig.devices[i].fail_flush.store(true, Ordering::Relaxed);
        }
        let result = rig.top.flush();
        for &i in &failing {
            rig.devices[i].fail_flush.store(false, Ordering::Relaxed);
        }
        for (i, before) in before.iter().enumerate() {
            let errors = rig.leaf(i).stats().snapshot().write_errors - before;
            assert_eq!(
                errors,
                u64::from(failing.contains(&i)),
                "set {set:06b} leaf {i}"
            );
        }
        match result {
            Ok(()) => assert!(failing.len() <= 2, "set {set:06b}: beyond parity accepted"),
            Err(crate::VdevError::FlushFailed { failed, .. }) => {
                assert_eq!(failing.len(), 3, "set {set:06b}: within parity refused");
                let expected: Vec<Guid> = failing.iter().map(|i| Guid(100 + *i as u64)).collect();
                assert_eq!(failed, expected);
            }
            Err(e) => panic!("set {set:06b}: {e}"),
        }
    }
}

/// Goal: blocks whose reads were all started before any finished (`start_read`, as a batch
/// read keeps many in flight from one thread) read exactly as one at a time, through
/// reconstruction when a device fails every read and (beyond raidz1) healing of a corrupt
/// column, for raidz1, raidz2 and mirrors. Method: start every block of the rig, then finish
/// them in order and compare, then read them all again one at a time. Negative
/// control: `finish` skipping `finish_columns` (the columns never copied in) fails.
#[test]
fn blocks_started_together_finish_as_reads_one_at_a_time() {
    for (layout, width) in [
        (Layout::Raidz { parity: 1 }, 5),
        (Layout::Raidz { parity: 2 }, 7),
        (Layout::Mirror, 3),
    ] {
        let rig = rig(layout, width, 40 + width as u64);
        rig.devices[1].fail_reads.store(true, Ordering::Relaxed);
        if layout != (Layout::Raidz { parity: 1 }) {
            // A second fault, within the redundancy of raidz2 and a mirror of three.
            rig.devices[width - 1].corrupt(DATA_START + (8 << 10), 16 << 10, 0x3c);
        }
        let started: Vec<_> = rig
            .blocks
            .iter()
            .map(|(offset, data)| rig.top.start_read(*offset, data.len() as u64).unwrap())
            .collect();
        for ((offset, expected), started) in rig.blocks.iter().zip(started) {
            let verify = |data: &[u8]| data == expected.as_slice();
            let report = started.finish(&verify).unwrap();
            assert_eq!(&report.data, expected, "{layout:?}: block at {offset}");
        }
        rig.devices[1].fail_reads.store(false, Ordering::Relaxed);
        assert!(rig.leaf(1).stats().snapshot().read_errors > 0, "{layout:?}");
        rig.read_all();
    }
}

/// Goal: on devices with their own I/O thread, a raidz block's data columns are read
/// straight into the block's buffer (no column buffer, no copy) and a clean read allocates
/// no parity buffers; a read that needs parity (a device failing, a column silently
/// corrupt) still returns the right bytes and heals. Method: raidz2 of 6 over queued
/// in-memory devices that record where each read put its bytes; every destination of a
/// clean read lies inside the returned buffer. Negative control: data columns submitted
/// with `submit_read` (a buffer each, copied in) fail the first assertion.
#[test]
fn data_columns_are_read_into_the_block_and_parity_only_when_needed() {
    let rig = rig(Layout::Raidz { parity: 2 }, 6, 77);
    let take = |rig: &Rig| -> Vec<(usize, usize)> {
        let taken = rig
            .devices
            .iter()
            .map(|d| std::mem::take(&mut *d.destinations.lock().unwrap()));
        taken.flatten().collect()
    };
    let _ = take(&rig);
    for (offset, expected) in &rig.blocks {
        let verify = |data: &[u8]| data == expected.as_slice();
        let report = rig
            .top
            .read(*offset, expected.len() as u64, &verify)
            .unwrap();
        assert_eq!(&report.data, expected);
        let (start, end) = (report.data.as_ptr() as usize, report.data.as_ptr() as usize);
        let end = end + report.data.len();
        let destinations = take(&rig);
        assert!(!destinations.is_empty());
        for (at, len) in destinations {
            assert!(
                start <= at && at + len <= end,
                "block at {offset}: a column read outside the block's buffer"
            );
        }
    }
    assert_eq!(rig.top.raidz_read_counts().parity_buffers, 0, "clean reads");

    // A failing device and a silently corrupt one: parity is read, the bytes are right,
    // the corrupt columns that were read are counted and rewritten.
    rig.devices[1].fail_reads.store(true, Ordering::Relaxed);
    rig.devices[4].corrupt(DATA_START, 64 << 10, 0x77);
    rig.read_all();
    rig.devices[1].fail_reads.store(false, Ordering::Relaxed);
    assert!(
        rig.top.raidz_read_counts().parity_buffers > 0,
        "parity when needed"
    );
    let found = rig.leaf(4).stats().snapshot().checksum_errors;
    assert!(found > 0, "corruption found");
    rig.read_all();
    assert_eq!(
        rig.leaf(4).stats().snapshot().checksum_errors,
        found,
        "the corrupt data columns were rewritten by the first reads"
    );
}

/// A device that counts its write accesses (a vectored write of adjacent ranges is one).
#[derive(Debug)]
struct CountingDevice {
    inner: Arc<MemDevice>,
    writes: std::sync::atomic::AtomicU64,
}

impl Device for CountingDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), tarn_device::DeviceError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), tarn_device::DeviceError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.write_at(offset, data)
    }
    fn write_vectored_at(
        &self,
        offset: u64,
        data: &[&[u8]],
    ) -> Result<(), tarn_device::DeviceError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        tarn_device::write_each(self.inner.as_ref(), offset, data)
    }
    fn flush(&self) -> Result<(), tarn_device::DeviceError> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), tarn_device::DeviceError> {
        self.inner.discard(offset, len)
    }
    fn path(&self) -> &str {
        self.inner.path()
    }
}

/// Goal: on queued devices a raidz block's padding sectors (allocated, never read) are
/// written too, so that consecutive blocks' columns form one run per child and the queue
/// writes it as one access; the padding never lands outside its block's allocation.
/// Method: raidz2 of 10 at ashift 12 over counting devices behind `QueuedDevice`s; 32
/// blocks of 128 KiB (40 sectors written, 42 allocated) written in allocation order under a
/// plug, the write accesses counted; then 32 more written in reverse order (a stray padding
/// write would overwrite an earlier-written neighbour) and every block read back.
/// Negative control: without `write_padding` the run breaks every fifth block on each child
/// and the first part takes 72 accesses, not 10.
#[test]
fn raidz_padding_is_written_so_consecutive_columns_merge() {
    const BLOCK: usize = 128 << 10;
    let counting: Vec<Arc<CountingDevice>> = (0..10)
        .map(|i| {
            Arc::new(CountingDevice {
                inner: MemDevice::new(&format!("mem{i}"), (4 << 20) + (4 << 20) + (512 << 10)),
                writes: std::sync::atomic::AtomicU64::new(0),
            })
        })
        .collect();
    let leaves = queued_leaves(&counting, 100);
    let top = TopVdev::new(VdevId(0), Guid(7), 12, Layout::Raidz { parity: 2 }, leaves).unwrap();
    let asize = top.allocation_size(BLOCK as u64);
    assert_eq!(asize, 42 << 12, "two padding sectors per block");
    let mut rng = SeededRng::new(5);
    // The I/O threads started and asleep on their empty queues (a block the second part
    // writes again).
    top.write(40 * asize, &tarn_base::buf::zeroed(BLOCK))
        .unwrap();
    top.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let before: u64 = counting
        .iter()
        .map(|d| d.writes.load(Ordering::SeqCst))
        .sum();
    let mut blocks = Vec::new();
    let plug = tarn_device::plug();
    for i in 0..32u64 {
        let mut data = tarn_base::buf::zeroed(BLOCK);
        rng.fill(&mut data);
        top.write(i * asize, &data).unwrap();
        blocks.push((i * asize, data));
    }
    drop(plug);
    top.flush().unwrap();
    let accesses: u64 = counting
        .iter()
        .map(|d| d.writes.load(Ordering::SeqCst))
        .sum();
    assert_eq!(accesses - before, 10, "one run per child");
    for i in (32..64u64).rev() {
        let mut data = tarn_base::buf::zeroed(BLOCK);
        rng.fill(&mut data);
        top.write(i * asize, &data).unwrap();
        blocks.push((i * asize, data));
    }
    top.flush().unwrap();
    for (offset, expected) in &blocks {
        let verify = |data: &[u8]| data == expected.as_slice();
        let report = top.read(*offset, BLOCK as u64, &verify).unwrap();
        assert_eq!(&report.data, expected, "block at {offset}");
        assert!(
            report.healing.repaired.is_empty(),
            "block at {offset} was intact"
        );
    }
}
