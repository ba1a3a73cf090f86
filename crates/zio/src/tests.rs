//! Unit tests of the pipeline's scrub: every copy is checked, bad copies are rebuilt from a
//! good one, and a block with no good copy is an error that changes nothing.

use super::*;
use std::sync::Arc;
use tarn_base::{Guid, VdevId};
use tarn_device::{FaultPlan, SimDevice};
use tarn_format::label::DATA_START;
use tarn_format::{BlockType, ChecksumKind, CompressSetting};
use tarn_vdev::{Layout, Leaf, TopVdev};

const DEVICE_SIZE: u64 = 64 << 20;

/// Hands out space from the start of each vdev, one copy per vdev in turn.
struct Bump {
    next: Vec<u64>,
}

impl Allocator for Bump {
    fn allocate(
        &mut self,
        psize: u64,
        copies: u8,
        _class: AllocClass,
    ) -> Result<Vec<Dva>, ZioError> {
        let mut dvas = Vec::new();
        for copy in 0..usize::from(copies) {
            let vdev = copy % self.next.len();
            let offset = self.next[vdev];
            self.next[vdev] += psize;
            dvas.push(Dva {
                vdev: VdevId(vdev as u32),
                offset,
                asize: psize,
            });
        }
        Ok(dvas)
    }

    fn free(&mut self, _dva: &Dva, _birth: Txg) {}
}

struct Rig {
    pipeline: Pipeline,
    devices: Vec<Vec<Arc<SimDevice>>>,
}

fn rig(layouts: &[(Layout, usize)]) -> Rig {
    let mut tops = Vec::new();
    let mut devices = Vec::new();
    let mut guid = 100;
    for (id, &(layout, width)) in layouts.iter().enumerate() {
        let mut sims = Vec::new();
        let mut leaves = Vec::new();
        for child in 0..width {
            guid += 1;
            let sim = SimDevice::new(
                &format!("/sim/{id}-{child}"),
                DEVICE_SIZE,
                FaultPlan::default(),
            );
            leaves.push(Arc::new(Leaf::new(Guid(guid), sim.clone()).unwrap()));
            sims.push(sim);
        }
        let top_guid = if layout == Layout::Disk {
            Guid(guid)
        } else {
            Guid(1000 + id as u64)
        };
        tops.push(Arc::new(
            TopVdev::new(VdevId(id as u32), top_guid, 9, layout, leaves).unwrap(),
        ));
        devices.push(sims);
    }
    Rig {
        pipeline: Pipeline::new(tops),
        devices,
    }
}

fn props(copies: u8) -> WriteProps {
    WriteProps {
        block_type: BlockType::Data,
        level: 0,
        checksum: ChecksumKind::Fletcher4,
        compression: CompressSetting::Off,
        copies,
        fill: 1,
        special_small_blocks: 0,
    }
}

fn write(rig: &Rig, copies: u8) -> (BlockPtr, Vec<u8>) {
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 + i / 13) as u8).collect();
    let mut allocator = Bump {
        next: vec![0; rig.devices.len()],
    };
    let bp = rig
        .pipeline
        .write_block(&mut allocator, Txg(1), &data, &props(copies))
        .unwrap();
    (bp, data)
}

fn rot_copy(rig: &Rig, dva: &Dva, child: usize) {
    rig.devices[dva.vdev.0 as usize][child]
        .rot(DATA_START + dva.offset, dva.asize)
        .unwrap();
}

#[test]
fn healthy_block_scrubs_clean() {
    let rig = rig(&[(Layout::Disk, 1), (Layout::Disk, 1)]);
    let (bp, _) = write(&rig, 2);
    let outcome = rig.pipeline.scrub_block(&bp).unwrap();
    assert_eq!(outcome, ScrubOutcome::default());
}

#[test]
fn bad_copy_is_rebuilt_from_the_good_one() {
    let rig = rig(&[(Layout::Disk, 1), (Layout::Disk, 1)]);
    let (bp, data) = write(&rig, 2);
    let bad = bp.dvas[1];
    rot_copy(&rig, &bad, 0);
    let outcome = rig.pipeline.scrub_block(&bp).unwrap();
    assert_eq!(outcome.copy_errors.len(), 1, "{outcome:?}");
    assert_eq!(outcome.copy_errors[0].0, bad);
    assert!(outcome.unrepaired.is_empty());
    assert_eq!(outcome.repaired_bytes, bad.asize);
    // The rebuilt copy now verifies on its own: a second scrub finds nothing.
    assert_eq!(
        rig.pipeline.scrub_block(&bp).unwrap(),
        ScrubOutcome::default()
    );
    assert_eq!(rig.pipeline.read_block(&bp).unwrap(), data);
}

#[test]
fn mirror_side_is_repaired_in_place() {
    let rig = rig(&[(Layout::Mirror, 2)]);
    let (bp, _) = write(&rig, 1);
    rot_copy(&rig, &bp.dvas[0], 1);
    let outcome = rig.pipeline.scrub_block(&bp).unwrap();
    assert!(
        outcome.copy_errors.is_empty(),
        "the copy as a whole verified"
    );
    assert_eq!(outcome.repaired_bytes, bp.dvas[0].asize);
    let leaf = &rig.pipeline.vdevs()[0].leaves()[1];
    assert_eq!(leaf.stats().snapshot().checksum_errors, 1);
    assert_eq!(
        rig.pipeline.scrub_block(&bp).unwrap(),
        ScrubOutcome::default()
    );
}

#[test]
fn no_good_copy_is_unrecoverable_and_rewrites_nothing() {
    let rig = rig(&[(Layout::Disk, 1), (Layout::Disk, 1)]);
    let (bp, _) = write(&rig, 2);
    rot_copy(&rig, &bp.dvas[0], 0);
    rot_copy(&rig, &bp.dvas[1], 0);
    let before: Vec<Vec<u8>> = rig.devices.iter().map(|d| d[0].image()).collect();
    let error = rig.pipeline.scrub_block(&bp).unwrap_err();
    assert!(matches!(error, ZioError::Unrecoverable { .. }), "{error}");
    let after: Vec<Vec<u8>> = rig.devices.iter().map(|d| d[0].image()).collect();
    assert!(before == after, "a failed scrub must not write");
}

#[test]
fn hole_is_nothing_to_scrub() {
    let rig = rig(&[(Layout::Disk, 1)]);
    let hole = BlockPtr::hole(Txg(1));
    assert_eq!(
        rig.pipeline.scrub_block(&hole).unwrap(),
        ScrubOutcome::default()
    );
}

/// The write policy: metadata always asks for the special class, level-0 data only up to
/// `special_small_blocks` (inclusive, by physical size), and never when it is 0.
#[test]
fn alloc_class_follows_block_type_level_and_small_blocks() {
    let special = |small_data| AllocClass::Special { small_data };
    let check = |block_type, level, small: u64, psize: u64, expected: AllocClass| {
        let props = WriteProps {
            block_type,
            level,
            special_small_blocks: small,
            ..props(1)
        };
        assert_eq!(
            props.alloc_class(psize),
            expected,
            "{block_type:?} level {level} small {small} psize {psize}"
        );
    };
    check(BlockType::Data, 0, 0, 512, AllocClass::Normal);
    check(BlockType::Data, 0, 4096, 4096, special(true));
    check(BlockType::Data, 0, 4096, 4608, AllocClass::Normal);
    check(BlockType::Data, 1, 0, 4096, special(false));
    check(BlockType::Indirect, 1, 0, 4096, special(false));
    check(BlockType::Dnode, 0, 0, 16384, special(false));
    check(BlockType::ObjectSet, 0, 0, 1024, special(false));
    check(BlockType::Metadata, 0, 0, 131072, special(false));
    check(BlockType::SpaceLog, 0, 0, 4096, special(false));
}

/// Goal: garbage in the padding after a block's last byte (inside its last sector, where the
/// checksum does not reach) is the fault of the device that holds it, found and rewritten
/// by a scrub; before, the data verified, parity regenerated over the whole sector differed
/// from the parity on disk, and the parity's device was blamed (CKSUM on a healthy disk).
/// Method: a compressed block of less than one 4 KiB sector on a raidz1 of three (one data
/// column and its parity), the bytes after it rotted on the data column's device.
#[test]
fn rotten_padding_is_blamed_on_its_own_device() {
    let sims: Vec<_> = (0..3)
        .map(|c| SimDevice::new(&format!("/sim/z{c}"), DEVICE_SIZE, FaultPlan::default()))
        .collect();
    let leaves = (0..3)
        .map(|c| Arc::new(Leaf::new(Guid(200 + c as u64), sims[c].clone()).unwrap()))
        .collect();
    let layout = Layout::Raidz { parity: 1 };
    let top = TopVdev::new(VdevId(0), Guid(300), 12, layout, leaves).unwrap();
    let pipeline = Pipeline::new(vec![Arc::new(top)]);
    let data: Vec<u8> = (0..16384u32).map(|i| (i % 7) as u8).collect();
    let mut allocator = Bump { next: vec![0] };
    let props = WriteProps {
        compression: CompressSetting::Lz4,
        ..props(1)
    };
    let bp = pipeline
        .write_block(&mut allocator, Txg(1), &data, &props)
        .unwrap();
    let psize = u64::from(bp.psize);
    assert!(
        psize < 4096,
        "the block fits one sector with room after it: {psize}"
    );
    let map = tarn_vdev::raidz_map::RaidzMap::new(3, 1, 12, bp.dvas[0].offset, 4096);
    let column = &map.columns[1];
    let at = DATA_START + (column.child_sector << 12);
    sims[column.child].rot(at + psize, 4096 - psize).unwrap();
    let outcome = pipeline.scrub_block(&bp).unwrap();
    assert!(outcome.copy_errors.is_empty(), "{outcome:?}");
    assert_eq!(
        outcome.repaired_bytes, 4096,
        "the data column's sector rewritten"
    );
    let cksum: Vec<u64> = pipeline.vdevs()[0]
        .leaves()
        .iter()
        .map(|l| l.stats().snapshot().checksum_errors)
        .collect();
    let mut expected = vec![0; 3];
    expected[column.child] = 1;
    assert_eq!(
        cksum, expected,
        "only the device with the garbage is blamed"
    );
    assert_eq!(pipeline.scrub_block(&bp).unwrap(), ScrubOutcome::default());
    assert_eq!(pipeline.read_block(&bp).unwrap(), data);
}

/// Goal: a corrective write (`receive -c`) heals a block lost beyond its copies from outside
/// bytes that verify, writes nothing for bytes that do not, and leaves a readable block
/// alone. Method: two copies both rotted; wrong bytes first (nothing written), then the
/// right ones (healed at the same DVAs, a scrub clean), then again (intact).
#[test]
fn heal_block_writes_only_bytes_that_verify() {
    let rig = rig(&[(Layout::Disk, 1), (Layout::Disk, 1)]);
    let (bp, data) = write(&rig, 2);
    rot_copy(&rig, &bp.dvas[0], 0);
    rot_copy(&rig, &bp.dvas[1], 0);
    assert!(rig.pipeline.read_block(&bp).is_err());
    let before: Vec<Vec<u8>> = rig.devices.iter().map(|d| d[0].image()).collect();
    let mut wrong = data.clone();
    wrong[100] ^= 1;
    assert_eq!(rig.pipeline.heal_block(&bp, &wrong), HealOutcome::Mismatch);
    let too_long = [data.as_slice(), &[0u8; 512]].concat();
    assert_eq!(
        rig.pipeline.heal_block(&bp, &too_long),
        HealOutcome::Mismatch
    );
    let after: Vec<Vec<u8>> = rig.devices.iter().map(|d| d[0].image()).collect();
    assert!(
        before == after,
        "bytes that do not verify are never written"
    );
    let outcome = rig.pipeline.heal_block(&bp, &data);
    assert_eq!(outcome, HealOutcome::Healed(2 * 8192));
    assert_eq!(rig.pipeline.read_block(&bp).unwrap(), data);
    assert_eq!(
        rig.pipeline.scrub_block(&bp).unwrap(),
        ScrubOutcome::default()
    );
    assert_eq!(rig.pipeline.heal_block(&bp, &wrong), HealOutcome::Intact);
}

/// Mirrors of 3 and of 2 (`Bump` knows no raidz sizes), every leaf a `QueuedDevice` over a
/// `SimDevice`: the pipeline runs its batches on the reader threads.
fn queued_rig() -> Pipeline {
    let mut tops = Vec::new();
    for (id, (layout, width)) in [(Layout::Mirror, 3), (Layout::Mirror, 2)]
        .into_iter()
        .enumerate()
    {
        let leaves = (0..width)
            .map(|child| {
                let sim = SimDevice::new(
                    &format!("/sim/q{id}-{child}"),
                    DEVICE_SIZE,
                    FaultPlan::default(),
                );
                let device: Arc<dyn tarn_device::Device> = sim;
                let queued = tarn_device::QueuedDevice::new(device).unwrap();
                Arc::new(Leaf::new(Guid(200 + (id * 10 + child) as u64), Arc::new(queued)).unwrap())
            })
            .collect();
        let top = TopVdev::new(VdevId(id as u32), Guid(3000 + id as u64), 9, layout, leaves);
        tops.push(Arc::new(top.unwrap()));
    }
    Pipeline::new(tops)
}

#[test]
fn a_batch_of_writes_is_what_the_writes_one_by_one_are() {
    // Goal: `write_blocks` (the batch a throughput commit writes ahead: compression and
    // device writes on several threads) gives each block exactly the block pointer
    // `write_block` gives it, allocations in block order, and the blocks read back. Method:
    // the same 40 blocks (random, compressible, all zeros; one and two copies) through each
    // on two fresh pools over queued devices, compared pointer by pointer, then read.
    // Negative control: one more allocation per block in `write_blocks` (so its DVAs are
    // not `write_block`'s) fails the comparison at block 0.
    let mut rng = tarn_base::SeededRng::new(19);
    let mut blocks: Vec<(Vec<u8>, WriteProps)> = Vec::new();
    for i in 0..40u32 {
        let len = 512 * (1 + rng.below(64) as usize);
        let mut data = vec![0u8; len];
        match i % 4 {
            0 => rng.fill(&mut data),
            1 => data
                .iter_mut()
                .enumerate()
                .for_each(|(j, b)| *b = (j / 100) as u8),
            2 => {}
            _ => rng.fill(&mut data[..len / 2]),
        }
        let mut block_props = props(1 + (i % 2) as u8);
        block_props.compression = CompressSetting::Lz4;
        blocks.push((data, block_props));
    }
    let refs: Vec<(&[u8], &WriteProps)> = blocks.iter().map(|(d, p)| (d.as_slice(), p)).collect();
    let batched = queued_rig();
    assert!(
        batched.reads_in_parallel(),
        "queued devices take I/O in parallel"
    );
    let mut allocator = Bump { next: vec![0; 2] };
    let got = batched.write_blocks(&mut allocator, Txg(5), &refs);
    let single = queued_rig();
    let mut allocator = Bump { next: vec![0; 2] };
    for (index, ((data, props), result)) in blocks.iter().zip(&got).enumerate() {
        let expected = single
            .write_block(&mut allocator, Txg(5), data, props)
            .unwrap();
        let bp = result.as_ref().unwrap();
        assert_eq!(*bp, expected, "block {index}");
        assert_eq!(
            batched.read_block(bp).unwrap(),
            *data,
            "block {index} reads back"
        );
    }
    assert!(got.iter().any(|r| r.as_ref().unwrap().is_hole()));
}

#[test]
fn a_batch_of_reads_is_what_the_reads_one_by_one_are() {
    // Goal: `read_blocks` (up to READS_IN_FLIGHT_MAX blocks started together under a plug,
    // finished in order) gives each block what `read_block` gives it: its bytes, zeros for
    // a hole, the second copy's bytes when the first copy is bad (and the first rewritten
    // from it), an error for a block no copy of which verifies. Method: 3 x
    // READS_IN_FLIGHT_MAX blocks over queued devices, every fifth first copy overwritten with
    // garbage, every seventh one-copy block too, holes among them; one batch, then each
    // block's first copy read raw. Negative control: finishing the started reads out of
    // order (a reversed window) fails at the first block.
    let pipeline = queued_rig();
    let mut allocator = Bump { next: vec![0; 2] };
    let mut rng = tarn_base::SeededRng::new(23);
    let count = 3 * READS_IN_FLIGHT_MAX;
    let mut expected: Vec<Option<Vec<u8>>> = Vec::new();
    let mut bps = Vec::new();
    for i in 0..count {
        let mut data = vec![0u8; 512 * (1 + rng.below(16) as usize)];
        if i % 11 != 3 {
            rng.fill(&mut data);
        }
        let copies = 1 + u8::from(i % 2 == 0);
        let bp = pipeline
            .write_block(&mut allocator, Txg(5), &data, &props(copies))
            .unwrap();
        let lost = copies == 1 && i % 7 == 0 && !bp.is_hole();
        if (i % 5 == 0 && copies == 2 && !bp.is_hole()) || lost {
            let garbage = vec![0xa5u8; bp.psize as usize];
            let dva = bp.copies().next().unwrap();
            pipeline.write_raw(dva, &garbage).unwrap();
        }
        expected.push((!lost).then_some(data));
        bps.push(bp);
    }
    assert!(bps.iter().any(BlockPtr::is_hole));
    let got = pipeline.read_blocks(&bps);
    assert_eq!(got.len(), count);
    for (i, (result, want)) in got.iter().zip(&expected).enumerate() {
        match (result, want) {
            (Ok(data), Some(want)) => assert_eq!(data, want, "block {i}"),
            (Err(ZioError::Unrecoverable { .. }), None) => {}
            (other, _) => panic!("block {i}: {other:?}"),
        }
    }
    for (i, bp) in bps.iter().enumerate() {
        if bp.is_hole() || expected[i].is_none() {
            continue;
        }
        let dva = bp.copies().next().unwrap();
        let first = pipeline.read_raw(dva, u64::from(bp.psize), &|d: &[u8]| {
            checksum(bp.checksum_kind, d) == bp.checksum
        });
        assert!(first.is_ok(), "block {i}: its first copy verifies (healed)");
    }
}

#[test]
fn a_batch_of_stored_reads_is_what_the_stored_reads_one_by_one_are() {
    // Goal: `read_physicals` (`send -c` reading ahead) gives each block what
    // `read_physical` gives it: its bytes as stored, from the second copy when the first is
    // bad (and the first rewritten), an error when no copy verifies. Method: compressible
    // and random blocks over queued devices, every fourth first copy garbage, every
    // ninth one-copy block lost; one batch against the reads one by one after it.
    // Negative control: finishing the batch's blocks as logical bytes (`finish_block`)
    // fails at the first compressed block.
    let pipeline = queued_rig();
    let mut allocator = Bump { next: vec![0; 2] };
    let mut rng = tarn_base::SeededRng::new(29);
    let mut bps = Vec::new();
    for i in 0..2 * READS_IN_FLIGHT_MAX {
        let mut data = vec![(i % 7) as u8 + 1; 512 * (2 + rng.below(16) as usize)];
        if i % 3 == 0 {
            rng.fill(&mut data);
        }
        let copies = 1 + u8::from(i % 2 == 0);
        let mut block_props = props(copies);
        block_props.compression = CompressSetting::Lz4;
        let bp = pipeline
            .write_block(&mut allocator, Txg(5), &data, &block_props)
            .unwrap();
        if (i % 4 == 0 && copies == 2) || (i % 9 == 0 && copies == 1) {
            let garbage = vec![0x5au8; bp.psize as usize];
            pipeline
                .write_raw(bp.copies().next().unwrap(), &garbage)
                .unwrap();
        }
        bps.push(bp);
    }
    assert!(bps.iter().any(|bp| bp.psize < bp.lsize), "some compressed");
    let batch = pipeline.read_physicals(&bps, false);
    for (i, (bp, got)) in bps.iter().zip(batch).enumerate() {
        match (got, pipeline.read_physical(bp)) {
            (Ok(got), Ok(alone)) => {
                assert_eq!(got, alone, "block {i}");
                assert_eq!(got.len(), bp.psize as usize, "block {i} as stored");
            }
            (Err(ZioError::Unrecoverable { .. }), Err(ZioError::Unrecoverable { .. })) => {}
            (got, alone) => panic!("block {i}: {got:?} against {alone:?}"),
        }
    }
}

/// Hands out space far apart (four times the physical size, whole 64 KiB), so that raidz
/// blocks, whose allocated size exceeds their physical size, never overlap.
struct Spread {
    next: u64,
}

impl Allocator for Spread {
    fn allocate(
        &mut self,
        psize: u64,
        copies: u8,
        _class: AllocClass,
    ) -> Result<Vec<Dva>, ZioError> {
        assert_eq!(copies, 1, "one top-level vdev");
        let offset = self.next;
        self.next += (4 * psize).next_multiple_of(64 << 10);
        Ok(vec![Dva {
            vdev: VdevId(0),
            offset,
            asize: psize,
        }])
    }

    fn free(&mut self, _dva: &Dva, _birth: Txg) {}
}

/// A raidz2 of 10 simulated leaves with 4 KiB sectors, and its devices.
fn raidz2_rig() -> (Pipeline, Vec<Arc<SimDevice>>) {
    let mut leaves = Vec::new();
    let mut sims = Vec::new();
    for child in 0..10u64 {
        let sim = SimDevice::new(&format!("/sim/z{child}"), DEVICE_SIZE, FaultPlan::default());
        leaves.push(Arc::new(Leaf::new(Guid(300 + child), sim.clone()).unwrap()));
        sims.push(sim);
    }
    let layout = Layout::Raidz { parity: 2 };
    let top = TopVdev::new(VdevId(0), Guid(4000), 12, layout, leaves).unwrap();
    (Pipeline::new(vec![Arc::new(top)]), sims)
}

#[test]
fn a_shared_write_stores_what_a_borrowed_write_stores() {
    // Goal: `write_block_shared` (the sync's level-0 writes: an uncompressed block of whole
    // sectors is written and kept in the journal without the padded copy) gives every
    // block the block pointer `write_block` gives it, leaves the devices byte for byte as
    // `write_block` leaves them, keeps the same bytes in the journal, and keeps the
    // caller's buffer itself exactly when the block is stored as it is and fills whole
    // sectors. Method: 60 blocks (random and compressible, lz4 and off, sizes from 512 bytes
    // to 128 KiB, some not whole 4 KiB sectors, all-zero ones) through each on two raidz2
    // rigs of 4 KiB sectors with the journal armed; pointers, journals, every device image
    // and the read-back bytes compared. Negative control: taking the shared buffer also for
    // compressed blocks (dropping `compressed.is_none()` in `encode`) fails at the first
    // compressed block whose padded size is its logical size (block 8: its checksum is
    // then computed over the logical bytes).
    let mut rng = tarn_base::SeededRng::new(31);
    let (borrowed, borrowed_sims) = raidz2_rig();
    let (shared, shared_sims) = raidz2_rig();
    borrowed.journal_begin();
    shared.journal_begin();
    let mut alloc_borrowed = Spread { next: 0 };
    let mut alloc_shared = Spread { next: 0 };
    let mut kept_as_is = 0;
    for i in 0..60u32 {
        let (data, block_props) = mixed_block(&mut rng, i);
        let len = data.len();
        let expected = borrowed
            .write_block(&mut alloc_borrowed, Txg(7), &data, &block_props)
            .unwrap();
        let data = Arc::new(data);
        let bp = shared
            .write_block_shared(&mut alloc_shared, Txg(7), &data, &block_props)
            .unwrap();
        assert_eq!(bp, expected, "block {i}");
        let as_is = !bp.is_hole()
            && bp.compression == tarn_format::CompressKind::Off
            && (len as u64).is_multiple_of(4096);
        if as_is {
            let journal = shared.journal.lock().unwrap();
            let kept = journal.as_ref().unwrap().writes.last().unwrap();
            assert!(
                Arc::ptr_eq(&kept.buffer, &data),
                "block {i} kept without a copy"
            );
            kept_as_is += 1;
        }
        if !bp.is_hole() {
            assert_eq!(
                shared.read_block(&bp).unwrap(),
                *data,
                "block {i} reads back"
            );
        }
    }
    assert!(
        kept_as_is >= 10,
        "only {kept_as_is} blocks took the shared path"
    );
    let (want, got) = (borrowed.journal_end(), shared.journal_end());
    assert_eq!(want.writes.len(), got.writes.len());
    for (index, (w, g)) in want.writes.iter().zip(&got.writes).enumerate() {
        assert_eq!(w.dvas, g.dvas, "journal entry {index}");
        assert_eq!(w.buffer, g.buffer, "journal entry {index}");
    }
    borrowed.vdevs()[0].flush().unwrap();
    shared.vdevs()[0].flush().unwrap();
    for (child, (w, g)) in borrowed_sims.iter().zip(&shared_sims).enumerate() {
        assert!(w.image() == g.image(), "device {child} differs");
    }
}

/// Block `i` of a mixed set: 128 KiB, 8 KiB, or a random size (whole 512-byte units or
/// whole 4 KiB sectors); random, compressible, half random or all zeros; lz4 or off.
fn mixed_block(rng: &mut tarn_base::SeededRng, i: u32) -> (Vec<u8>, WriteProps) {
    let len = match i % 5 {
        1 => 512 * (1 + rng.below(255) as usize),
        2 => 4096 * (1 + rng.below(31) as usize),
        3 => 8192,
        _ => 128 << 10,
    };
    let mut data = vec![0u8; len];
    match i % 3 {
        0 => rng.fill(&mut data),
        1 => data
            .iter_mut()
            .enumerate()
            .for_each(|(j, b)| *b = (j / 64) as u8),
        _ if i % 7 == 2 => {}
        _ => rng.fill(&mut data[..len / 2]),
    }
    let mut block_props = props(1);
    if i.is_multiple_of(2) {
        block_props.compression = CompressSetting::Lz4;
    }
    (data, block_props)
}
