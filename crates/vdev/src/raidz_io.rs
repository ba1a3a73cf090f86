//! Raidz I/O: writing a block as parity and data columns, and reading it back through
//! reconstruction and combinatorial search for silently corrupt columns.
//!
//! Write: parity, then every column to its child; on devices with a write-behind queue, then
//! the block's padding sectors as zeros ([`write_padding`]), so that each child's columns
//! of consecutive blocks form one run that its queue writes as one access.
//!
//! Read, in the order OpenZFS's `vdev_raidz_io_done` tries things:
//! ```text
//!  1. read the data columns --------------------- all read and verify(data)? -> done
//!  2. read the parity columns; lost = columns with I/O errors or unusable leaves
//!  3. for extra in 0 ..= parity - |lost|:
//!       for every set C of `extra` readable columns (C must add a data column unless lost
//!       already holds one, otherwise the data would not change):
//!         reconstruct lost + C from the remaining parity; verify(data)? -> found
//!  4. found: regenerate parity from the verified data; every column read with bytes that
//!     differ from this truth is corrupt (checksum error on its leaf); rewrite corrupt and
//!     unreadable columns on their leaves. Nothing verified: Unrecoverable.
//! ```
//! A column on a leaf the engine marked slow is not read in step 1 when parity covers every
//! such column of the block: it counts as lost and is reconstructed (read around), and it
//! is read after all only if no reconstruction verifies.
//!
//! Scrub reads every column first and also applies step 4 when the data verified directly,
//! so corrupt parity is found even though the data is fine.
//!
//! Each step's columns are read together (`Stripe::read_columns`): on devices with their own
//! I/O thread (`Device::reads_in_parallel`) every column of the step is submitted before any
//! is waited for, so a block costs one device round trip per step instead of one per column;
//! on synchronous devices (the simulator) they are read inline in column order.
//!
//! Where the bytes go: the data columns are consecutive ranges of the block's one buffer,
//! and on devices with their own I/O thread each is read straight into its range (a
//! `tarn_device::BufPart` of the buffer, which is page-aligned at ashift 12 wherever a
//! column starts, as `O_DIRECT` needs), so a clean read copies nothing and allocates no
//! column buffer. Parity buffers exist only once a step needs parity (step 2, scrub); they
//! are counted ([`ReadCounts`]) so that tests can tell an allocation that should not be
//! there.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tarn_device::{SharedBytes, SplitBuf};

use crate::child::Child;
use crate::error::VdevError;
use crate::leaf::{Leaf, LeafRead};
use crate::raidz_map::RaidzMap;
use crate::raidz_math;
use crate::top::{Healing, ReadReport, ScrubReport, TopVdev, WriteReport};

/// What raidz reads of one top-level vdev allocated besides the block's buffer (module
/// docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadCounts {
    /// Block reads and scrubs whose parity buffers were allocated (a step that needed
    /// parity); a clean read allocates none.
    pub parity_buffers: u64,
}

/// The live counters behind [`ReadCounts`].
#[derive(Debug, Default)]
pub(crate) struct ReadCounters {
    parity_buffers: AtomicU64,
}

impl ReadCounters {
    pub(crate) fn snapshot(&self) -> ReadCounts {
        ReadCounts {
            parity_buffers: self.parity_buffers.load(Ordering::Relaxed),
        }
    }
}

/// Writes the parity and data columns of one block to their children.
pub(crate) fn write(
    vdev: &TopVdev,
    parity: usize,
    offset: u64,
    data: &SharedBytes,
) -> Result<WriteReport, VdevError> {
    let children = vdev.children();
    let map = vdev.column_map(parity, offset, data.len() as u64);
    let child_of = |c: usize| &children[map.columns[c].child];
    let failed = |missed: Vec<_>| VdevError::WriteFailed {
        guid: vdev.guid(),
        offset,
        len: data.len() as u64,
        failed: missed,
        tolerated: parity,
    };
    let unusable: Vec<_> = (0..map.columns.len())
        .filter(|&c| !child_of(c).is_writable())
        .map(|c| child_of(c).guid())
        .collect();
    if unusable.len() > parity {
        // Refuse before writing anything: the block could not be read back.
        return Err(failed(unusable));
    }
    let lens: Vec<usize> = (0..map.columns.len())
        .map(|c| map.column_bytes(c))
        .collect();
    let mut parity_bufs: Vec<Vec<u8>> = lens[..parity]
        .iter()
        .map(|&len| tarn_base::buf::zeroed(len))
        .collect();
    generate_parity(vdev.parity_impl(), &lens, data, &mut parity_bufs);
    // The columns go to the devices shared: parity in its own buffers, each data column a
    // range of the block's (a queued device keeps them without a copy).
    let mut parity_bufs = parity_bufs.into_iter().map(SharedBytes::from);
    let mut missed = Vec::new();
    let mut lost = Vec::new();
    let mut data_at = 0;
    for (c, column) in map.columns.iter().enumerate() {
        let bytes = if c < parity {
            parity_bufs.next().expect("one buffer per parity column")
        } else {
            data_at += lens[c];
            data.slice(data_at - lens[c]..data_at)
        };
        let child = child_of(c);
        if !child.write(column.child_sector << map.ashift, &bytes, &mut missed) {
            lost.push(child.guid());
        }
    }
    if lost.len() > parity {
        return Err(failed(missed));
    }
    if matches!(vdev.layout(), crate::Layout::Raidz { .. }) && vdev.reads_in_parallel() {
        write_padding(&children, &map, offset);
    }
    Ok(WriteReport { missed })
}

/// Largest sector size [`write_padding`] has zeros for (ashift 16).
const PADDING_MAX: usize = 64 << 10;

/// Writes the padding sectors of a raidz block (allocated to it, never read: raidz_map)
/// with zeros, each right after the column that ends next to it on its child. A block of
/// 128 KiB on raidz2 of 10 is 40 written sectors and 42 allocated: without the padding
/// written, each child's run of consecutive blocks' columns broke every fifth block, and
/// the devices' queues, which merge only adjacent writes, wrote 80 KiB per access instead
/// of up to `AGGREGATE_MAX` (OpenZFS issues such writes as optional I/O for the same
/// reason). Only on devices with a write-behind queue (`reads_in_parallel`), which merge;
/// the simulator's synchronous devices write exactly the columns. A padding write that
/// fails changes nothing the block needs: its outcome is not the block's (a queued device
/// latches it for its next flush like any write).
fn write_padding(children: &[Arc<Child>], map: &RaidzMap, offset: u64) {
    static ZEROS: std::sync::OnceLock<SharedBytes> = std::sync::OnceLock::new();
    let sector = 1usize << map.ashift;
    if sector > PADDING_MAX {
        return;
    }
    let zeros = ZEROS.get_or_init(|| SharedBytes::from(tarn_base::buf::zeroed(PADDING_MAX)));
    let n = children.len() as u64;
    let first = offset >> map.ashift;
    let mut ignored = Vec::new();
    for k in map.written_sectors..map.allocated_sectors {
        // Top-level sector s lives on child s % n at child sector s / n (raidz_map).
        let at = first + k;
        let child = &children[usize::try_from(at % n).expect("a child index")];
        let _ = child.write(
            (at / n) << map.ashift,
            &zeros.slice(0..sector),
            &mut ignored,
        );
    }
}

/// A block read whose step 1 is submitted ([`start`]): its data columns are in flight on
/// devices with their own I/O thread (read already on synchronous ones).
pub(crate) struct Started<'v> {
    stripe: Stripe<'v>,
    in_flight: Vec<InFlight>,
    avoided: bool,
}

/// One column read in flight: the column, the leaf it was submitted to, and the read.
type InFlight = (usize, Arc<Leaf>, LeafRead);

/// Submits step 1 of a read of one block (module docs); [`Started::finish`] does steps 2-4,
/// reconstructing and healing as needed.
pub(crate) fn start(vdev: &TopVdev, parity: usize, offset: u64, len: usize) -> Started<'_> {
    let mut stripe = Stripe::new(vdev, parity, offset, len);
    let avoided = stripe.avoid_slow();
    let in_flight = stripe.submit_columns(parity..stripe.map.columns.len());
    Started {
        stripe,
        in_flight,
        avoided,
    }
}

impl Started<'_> {
    /// Waits for step 1's columns and goes on with steps 2-4 (module docs).
    pub(crate) fn finish(self, verify: &dyn Fn(&[u8]) -> bool) -> Result<ReadReport, VdevError> {
        let Started {
            mut stripe,
            in_flight,
            avoided,
        } = self;
        stripe.finish_columns(in_flight);
        stripe.after_data_columns(avoided, verify)
    }
}

impl Stripe<'_> {
    /// Steps 1 (its check) to 4 of a read, once the data columns were read.
    fn after_data_columns(
        mut self,
        avoided: bool,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<ReadReport, VdevError> {
        if self.data_readable() && verify(self.columns.data()) {
            return Ok(ReadReport {
                data: std::mem::take(&mut self.columns.data),
                healing: Healing::default(),
            });
        }
        self.read_columns(0..self.map.parity);
        let truth = match self.search(verify) {
            Some(truth) => truth,
            None if avoided => {
                // Reconstruction around the slow leaves did not verify: read them after all.
                self.read_avoided();
                self.search(verify).ok_or_else(|| self.unrecoverable())?
            }
            None => return Err(self.unrecoverable()),
        };
        let (healing, _) = self.heal(&truth);
        Ok(ReadReport {
            data: truth.data,
            healing,
        })
    }
}

/// Reads every column of one block, checks data and parity, and repairs what is wrong.
pub(crate) fn scrub(
    vdev: &TopVdev,
    parity: usize,
    offset: u64,
    len: usize,
    verify: &dyn Fn(&[u8]) -> bool,
    resilver: bool,
) -> Result<ScrubReport, VdevError> {
    let mut stripe = Stripe::new(vdev, parity, offset, len);
    stripe.read_columns(0..stripe.map.columns.len());
    let truth = if stripe.data_readable() && verify(stripe.columns.data()) {
        let mut truth = stripe.columns.clone();
        truth.generate_parity(vdev.parity_impl());
        truth
    } else {
        stripe
            .search(verify)
            .ok_or_else(|| stripe.unrecoverable())?
    };
    let (mut healing, skipped) = stripe.heal(&truth);
    if resilver {
        stripe.resilver(&truth, &mut healing);
    }
    Ok(ScrubReport { healing, skipped })
}

/// The columns of one block in memory: parity buffers, and the data as one buffer that the
/// data columns are consecutive ranges of (so a clean read needs no copying).
#[derive(Clone, Debug)]
struct Columns {
    parity: Vec<Vec<u8>>,
    data: Vec<u8>,
    /// Length of every column in bytes, parity first.
    lens: Vec<usize>,
}

impl Columns {
    fn from_data(map: &RaidzMap, data: Vec<u8>) -> Columns {
        let lens: Vec<usize> = (0..map.columns.len())
            .map(|c| map.column_bytes(c))
            .collect();
        assert_eq!(
            lens[map.parity..].iter().sum::<usize>(),
            data.len(),
            "data fills its columns"
        );
        // Allocated when a step needs parity (`with_parity`): a clean read never does.
        let parity = vec![Vec::new(); map.parity];
        Columns { parity, data, lens }
    }

    /// Allocates the parity buffers (zero-filled) unless they are; true if it did.
    fn with_parity(&mut self) -> bool {
        let mut allocated = false;
        for (c, buf) in self.parity.iter_mut().enumerate() {
            if buf.len() != self.lens[c] {
                *buf = tarn_base::buf::zeroed(self.lens[c]);
                allocated = true;
            }
        }
        allocated
    }

    fn has_parity(&self) -> bool {
        (0..self.parity.len()).all(|c| self.parity[c].len() == self.lens[c])
    }

    fn data(&self) -> &[u8] {
        &self.data
    }

    fn get(&self, c: usize) -> &[u8] {
        let p = self.parity.len();
        if c < p {
            assert_eq!(
                self.parity[c].len(),
                self.lens[c],
                "parity allocated before use"
            );
            return &self.parity[c];
        }
        let start: usize = self.lens[p..c].iter().sum();
        &self.data[start..start + self.lens[c]]
    }

    fn get_mut(&mut self, c: usize) -> &mut [u8] {
        let p = self.parity.len();
        if c < p {
            assert_eq!(
                self.parity[c].len(),
                self.lens[c],
                "parity allocated before use"
            );
            return &mut self.parity[c];
        }
        let start: usize = self.lens[p..c].iter().sum();
        &mut self.data[start..start + self.lens[c]]
    }

    /// Every column as a mutable slice, parity first (the form `reconstruct` takes).
    fn all_mut(&mut self) -> Vec<&mut [u8]> {
        assert!(self.has_parity(), "parity allocated before reconstruction");
        let p = self.parity.len();
        let mut out: Vec<&mut [u8]> = self.parity.iter_mut().map(Vec::as_mut_slice).collect();
        let mut rest = self.data.as_mut_slice();
        for &len in &self.lens[p..] {
            let (column, tail) = rest.split_at_mut(len);
            out.push(column);
            rest = tail;
        }
        assert!(rest.is_empty(), "data columns cover the data exactly");
        out
    }

    fn generate_parity(&mut self, imp: raidz_math::Impl) {
        self.with_parity();
        generate_parity(imp, &self.lens, &self.data, &mut self.parity);
    }
}

/// Computes the parity columns of `data`, whose data columns have the lengths
/// `lens[parity.len()..]` (all column lengths, parity first).
fn generate_parity(imp: raidz_math::Impl, lens: &[usize], data: &[u8], parity: &mut [Vec<u8>]) {
    let p = parity.len();
    assert_eq!(
        lens[p..].iter().sum::<usize>(),
        data.len(),
        "data fills its columns"
    );
    let mut columns: Vec<&[u8]> = Vec::with_capacity(lens.len() - p);
    let mut rest = data;
    for &len in &lens[p..] {
        let (column, tail) = rest.split_at(len);
        columns.push(column);
        rest = tail;
    }
    let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    raidz_math::generate(imp, p, &columns, &mut outs);
}

/// What is known about one column of a block being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ColumnState {
    /// Not read (yet).
    Unread,
    /// Read without an I/O error (its bytes may still be wrong).
    Read,
    /// The device returned an error.
    IoError,
    /// The leaf is missing or not online.
    Unusable,
    /// Not read because its leaf is slow; reconstructed from parity unless that fails.
    Avoided,
}

/// One block being read: its map, the bytes read so far and each column's state.
struct Stripe<'v> {
    vdev: &'v TopVdev,
    /// The child positions when the read began (the tree may change meanwhile).
    children: Vec<Arc<Child>>,
    offset: u64,
    map: RaidzMap,
    columns: Columns,
    state: Vec<ColumnState>,
    /// The leaf each column was read from.
    read_from: Vec<Option<Arc<Leaf>>>,
    /// The block's buffer while data columns are read into it (`columns.data` is empty
    /// meanwhile).
    split: Option<SplitBuf>,
}

impl<'v> Stripe<'v> {
    fn new(vdev: &'v TopVdev, parity: usize, offset: u64, len: usize) -> Stripe<'v> {
        let children = vdev.children();
        let map = vdev.column_map(parity, offset, len as u64);
        let columns = Columns::from_data(&map, tarn_base::buf::zeroed(len));
        let state = vec![ColumnState::Unread; map.columns.len()];
        let read_from = vec![None; map.columns.len()];
        Stripe {
            vdev,
            children,
            offset,
            map,
            columns,
            state,
            read_from,
            split: None,
        }
    }

    /// Reads the unread columns `cs`: columns on devices with their own I/O thread are all
    /// submitted first and then waited for (so they are read in parallel); columns on
    /// synchronous devices are read inline, in column order, as they always were.
    fn read_columns(&mut self, cs: std::ops::Range<usize>) {
        let in_flight = self.submit_columns(cs);
        self.finish_columns(in_flight);
    }

    /// The first half of [`Stripe::read_columns`]: submits (or, on synchronous devices,
    /// reads) the unread columns `cs`; returns the reads in flight. Data columns in flight
    /// are read straight into their ranges of the block's buffer (module docs), which is
    /// split until [`Stripe::finish_columns`] takes it back.
    fn submit_columns(&mut self, cs: std::ops::Range<usize>) -> Vec<InFlight> {
        assert!(self.split.is_none(), "one step's reads in flight at a time");
        if cs.start < self.map.parity {
            self.need_parity();
        }
        let mut into_block = Vec::new();
        let mut in_flight = Vec::new();
        for c in cs {
            if self.state[c] != ColumnState::Unread {
                continue;
            }
            let column = self.map.columns[c];
            let Some(leaf) = self.children[column.child].read_leaf().cloned() else {
                self.state[c] = ColumnState::Unusable;
                continue;
            };
            self.read_from[c] = Some(Arc::clone(&leaf));
            let Some(device) = leaf.usable_device() else {
                self.state[c] = ColumnState::Unusable;
                continue;
            };
            let at = column.child_sector << self.map.ashift;
            if !device.reads_in_parallel() {
                self.state[c] = match leaf.read(device.as_ref(), at, self.columns.get_mut(c)) {
                    Ok(()) => ColumnState::Read,
                    Err(_) => ColumnState::IoError,
                };
            } else if c < self.map.parity {
                let read = leaf.submit_read(device.as_ref(), at, self.columns.lens[c]);
                in_flight.push((c, leaf, read));
            } else {
                into_block.push((c, leaf, device, at));
            }
        }
        if !into_block.is_empty() {
            let ranges: Vec<_> = into_block
                .iter()
                .map(|&(c, ..)| self.data_range(c))
                .collect();
            let data = std::mem::take(&mut self.columns.data);
            let (split, parts) = SplitBuf::split(data, &ranges);
            self.split = Some(split);
            for ((c, leaf, device, at), part) in into_block.into_iter().zip(parts) {
                let read = leaf.submit_read_into(device.as_ref(), at, part);
                in_flight.push((c, leaf, read));
            }
        }
        in_flight
    }

    /// The second half of [`Stripe::read_columns`]: waits for the reads in flight and takes
    /// the block's buffer back (every part of it is back once its read is done).
    fn finish_columns(&mut self, in_flight: Vec<InFlight>) {
        for (c, leaf, read) in in_flight {
            self.state[c] = match leaf.finish_read(read) {
                Ok(bytes) if c >= self.map.parity => {
                    assert!(bytes.is_empty(), "a data column is read into the block");
                    ColumnState::Read
                }
                Ok(bytes) => {
                    assert_eq!(bytes.len(), self.columns.lens[c], "I4: a column read whole");
                    self.columns.get_mut(c).copy_from_slice(&bytes);
                    ColumnState::Read
                }
                Err(_) => ColumnState::IoError,
            };
        }
        if let Some(split) = self.split.take() {
            self.columns.data = split.into_vec();
        }
    }

    /// The range of data column `c` in the block's buffer.
    fn data_range(&self, c: usize) -> std::ops::Range<usize> {
        let p = self.map.parity;
        let start: usize = self.columns.lens[p..c].iter().sum();
        start..start + self.columns.lens[c]
    }

    /// Allocates the parity buffers for a step that reads or rebuilds parity (counted).
    fn need_parity(&mut self) {
        if self.columns.with_parity() {
            let counters = self.vdev.raidz_counters();
            counters.parity_buffers.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Marks the columns on slow leaves [`ColumnState::Avoided`] when parity covers all of
    /// them; returns whether any was.
    fn avoid_slow(&mut self) -> bool {
        let slow: Vec<usize> = (0..self.map.columns.len())
            .filter(|&c| {
                self.children[self.map.columns[c].child]
                    .read_leaf()
                    .is_some_and(|leaf| leaf.is_slow())
            })
            .collect();
        if slow.is_empty() || slow.len() > self.map.parity {
            return false;
        }
        for &c in &slow {
            assert_eq!(
                self.state[c],
                ColumnState::Unread,
                "avoided before any read"
            );
            self.state[c] = ColumnState::Avoided;
        }
        true
    }

    /// Reads the columns [`Stripe::avoid_slow`] skipped.
    fn read_avoided(&mut self) {
        for c in 0..self.state.len() {
            if self.state[c] == ColumnState::Avoided {
                self.state[c] = ColumnState::Unread;
            }
        }
        self.read_columns(0..self.state.len());
    }

    fn data_readable(&self) -> bool {
        self.state[self.map.parity..]
            .iter()
            .all(|&s| s == ColumnState::Read)
    }

    /// The block cannot be read. Every column that was read is suspect (one of them, at
    /// least, returned wrong bytes without an error), so each leaf that served one counts a
    /// checksum error, as `status` must show damage when it is met, not only after a scrub.
    fn unrecoverable(&self) -> VdevError {
        for (c, state) in self.state.iter().enumerate() {
            if let (ColumnState::Read, Some(leaf)) = (state, &self.read_from[c]) {
                leaf.stats().add_checksum_error();
            }
        }
        let lost = self
            .state
            .iter()
            .filter(|&&s| s != ColumnState::Read)
            .count();
        VdevError::Unrecoverable {
            guid: self.vdev.guid(),
            offset: self.offset,
            len: self.columns.data.len() as u64,
            why: if lost > self.map.parity {
                "more columns unreadable than parity"
            } else {
                "no reconstruction verified"
            },
        }
    }

    /// Steps 2-3 of the module docs: the verified columns (parity regenerated), if any
    /// combination of lost and assumed-corrupt columns verifies.
    fn search(&self, verify: &dyn Fn(&[u8]) -> bool) -> Option<Columns> {
        let parity = self.map.parity;
        let lost: Vec<usize> = (0..self.state.len())
            .filter(|&c| self.state[c] != ColumnState::Read)
            .collect();
        if lost.len() > parity {
            return None;
        }
        let lost_data = lost.iter().any(|&c| c >= parity);
        let readable: Vec<usize> = (0..self.state.len())
            .filter(|&c| self.state[c] == ColumnState::Read)
            .collect();
        let mut work = self.columns.clone();
        let imp = self.vdev.parity_impl();
        for extra in 0..=parity - lost.len() {
            let mut picks: Vec<usize> = (0..extra).collect();
            if extra > readable.len() {
                break;
            }
            loop {
                let suspects: Vec<usize> = picks.iter().map(|&i| readable[i]).collect();
                if lost_data || suspects.iter().any(|&c| c >= parity) {
                    let mut missing: Vec<usize> = lost.iter().chain(&suspects).copied().collect();
                    missing.sort_unstable();
                    raidz_math::reconstruct(imp, parity, &mut work.all_mut(), &missing);
                    if verify(work.data()) {
                        work.generate_parity(imp);
                        return Some(work);
                    }
                    for &c in &suspects {
                        work.get_mut(c).copy_from_slice(self.columns.get(c));
                    }
                }
                if !next_combination(&mut picks, readable.len()) {
                    break;
                }
            }
        }
        None
    }

    /// Step 4: compares every column read with `truth` and rewrites the wrong and unreadable
    /// ones. Returns the healing done and the leaves that could not be checked.
    fn heal(&self, truth: &Columns) -> (Healing, Vec<tarn_base::Guid>) {
        let mut skipped = Vec::new();
        let mut targets = Vec::new();
        for (c, column) in self.map.columns.iter().enumerate() {
            let child = &self.children[column.child];
            let rewrite = match self.state[c] {
                ColumnState::Unread | ColumnState::Avoided => false,
                ColumnState::Unusable => {
                    skipped.extend(child.members().iter().map(|leaf| leaf.guid()));
                    false
                }
                ColumnState::IoError => true,
                ColumnState::Read if self.columns.get(c) != truth.get(c) => {
                    if let Some(leaf) = &self.read_from[c] {
                        leaf.stats().add_checksum_error();
                    }
                    true
                }
                ColumnState::Read => false,
            };
            if rewrite {
                targets.push((
                    column.child,
                    column.child_sector << self.map.ashift,
                    truth.get(c),
                ));
            }
        }
        let mut healing = Healing::default();
        TopVdev::heal(&self.children, &targets, &mut healing);
        (healing, skipped)
    }

    /// Writes every column whose child has a member being resilvered, from `truth`. Columns
    /// already rewritten by healing reached those members too.
    fn resilver(&self, truth: &Columns, healing: &mut Healing) {
        for (c, column) in self.map.columns.iter().enumerate() {
            let healed = matches!(self.state[c], ColumnState::IoError)
                || (self.state[c] == ColumnState::Read && self.columns.get(c) != truth.get(c));
            if !healed {
                let at = column.child_sector << self.map.ashift;
                self.children[column.child].resilver(at, truth.get(c), healing);
            }
        }
    }
}

/// Advances `picks` (a strictly increasing k-subset of `0..n`) to the next one in
/// lexicographic order; false when it was the last (the empty subset has no successor).
fn next_combination(picks: &mut [usize], n: usize) -> bool {
    let k = picks.len();
    for i in (0..k).rev() {
        if picks[i] < n - k + i {
            picks[i] += 1;
            for j in i + 1..k {
                picks[j] = picks[j - 1] + 1;
            }
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::next_combination;

    /// Goal: the combination walk visits every k-subset once, in order.
    #[test]
    fn combinations_are_complete() {
        for n in 0..7usize {
            for k in 0..=n.min(3) {
                let mut picks: Vec<usize> = (0..k).collect();
                let mut count = 1;
                while next_combination(&mut picks, n) {
                    assert!(picks.windows(2).all(|w| w[0] < w[1]) && picks.iter().all(|&p| p < n));
                    count += 1;
                }
                let expected = (0..k).fold(1usize, |acc, i| acc * (n - i) / (i + 1));
                assert_eq!(count, expected, "C({n},{k})");
            }
        }
    }
}
