//! Sequential resilver (`tarn pool replace -s`, ZFS's "rebuild"): instead of walking block
//! pointers, copy the allocated ranges of the metaslabs' space maps, in address order, from a
//! complete side of each mirror (or disk vdev being replaced) to the leaves being resilvered,
//! then verify everything with a scrub that starts by itself.
//!
//! ```text
//!  replace -s ─► scan record: resilver, sequential ─► steps (one batch each, pool lock held):
//!     first step: list SpaceManager::allocated_ranges of every top-level vdev with a leaf
//!                 being resilvered, skipping what `rebuilt` says is done
//!     each step:  copy chunks of REBUILD_CHUNK bytes (TopVdev::rebuild_range) until
//!                 max_bytes; `rebuilt` = (vdev, end of the last chunk)
//!     last chunk: resilver finished (replace::resilver_done detaches the old leaves), then
//!                 a scrub with `sequential` set starts: it reads every block with its
//!                 checksum and repairs what the raw copy carried over from a bad sector
//! ```
//! Why it is safe without checksums: the copy is of the bytes a complete side holds now,
//! under the pool lock, so no txg interleaves with a chunk; blocks written later reached the
//! new leaf as a member of the tree; ranges allocated after the listing were written to it the
//! same way; ranges freed meanwhile are copied needlessly, which is harmless. Silent damage on
//! the source is copied too, and the scrub that follows finds and repairs it from the other
//! copies: that is the trade (speed for a window of single-copy checksum trust) ZFS makes too.
//!
//! Raidz is refused: a column's bytes depend on where each block's stripe starts, which only
//! block pointers tell. dRAID is rebuilt row by row (`TopVdev::rebuild_range`): every block
//! fills whole rows of its group, so each row is a stripe of its own; a distributed spare
//! stepping in is rebuilt this way, every child reading its share at once. Chunks are whole
//! dRAID rows (`TopVdev::allocation_align`).
//!
//! A build without sequential resilver reading the record sees a plain resilver without a
//! bookmark (`rebuilt` is a field of its own) and resilvers every block again: slower, never
//! wrong.

use tarn_vdev::{Layout, TopVdev};

use crate::scrub::{self, ScanFunction, ScanProgress, ScanState};
use crate::{EngineError, Imported};

/// Bytes copied per range access: large sequential I/O, small enough to keep a batch short.
pub(crate) const REBUILD_CHUNK: u64 = 1 << 20;

/// The ranges of a sequential resilver, in (vdev, offset) order, and where it is.
#[derive(Debug)]
pub(crate) struct RebuildQueue {
    /// (top-level vdev index, offset, length).
    ranges: Vec<(u32, u64, u64)>,
    next: usize,
    /// Bytes of `ranges[next]` already copied.
    within: u64,
    pass_start: u64,
    pass_issued: u64,
}

impl RebuildQueue {
    /// Memory the ranges take.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.ranges.capacity() * size_of::<(u32, u64, u64)>()
    }

    /// When this pass started and the bytes issued before it (for the rate in status).
    pub(crate) fn pass(&self) -> (u64, u64) {
        (self.pass_start, self.pass_issued)
    }

    fn finished(&self) -> bool {
        self.next == self.ranges.len()
    }
}

/// Whether `top` can be resilvered sequentially (mirrors, and disk vdevs, which a replace
/// turns into a two-way `replacing` node).
pub(crate) fn check_layout(top: &TopVdev) -> Result<(), EngineError> {
    match top.layout() {
        Layout::Mirror | Layout::Disk | Layout::Draid(_) => Ok(()),
        Layout::Raidz { .. } => Err(EngineError::InvalidArgument(
            "sequential resilver (-s) is only supported for mirror and single-disk vdevs; \
             replace a raidz device without -s"
                .into(),
        )),
    }
}

/// Lists the ranges left to copy and sets the totals (first step after start or import).
fn build(inner: &mut Imported, progress: &mut ScanProgress, now: u64) {
    let pool = &inner.pool;
    let mut ranges = Vec::new();
    for (index, top) in pool.tops().iter().enumerate() {
        if !top.needs_resilver() || check_layout(top).is_err() {
            continue;
        }
        let vdev = u32::try_from(index).expect("top-level vdev index fits u32");
        for (offset, len) in pool.space().allocated_ranges(index) {
            let (start, end) = match progress.rebuilt {
                Some((done, _)) if vdev < done => continue,
                Some((done, below)) if vdev == done => (offset.max(below), offset + len),
                _ => (offset, offset + len),
            };
            if start < end {
                ranges.push((vdev, start, end - start));
            }
        }
    }
    let remaining: u64 = ranges.iter().map(|&(_, _, len)| len).sum();
    progress.to_examine = progress.issued + remaining;
    progress.examined = progress.to_examine;
    inner.scan.rebuild = Some(RebuildQueue {
        ranges,
        next: 0,
        within: 0,
        pass_start: now,
        pass_issued: progress.issued,
    });
}

/// Announces the next `budget` bytes of ranges to their vdevs, so the source side reads
/// ahead while chunks are copied (`TopVdev::prefetch`).
fn prefetch(pool: &tarn_pool::Pool, queue: &RebuildQueue, budget: u64) {
    let mut left = budget;
    let mut within = queue.within;
    for &(vdev, offset, len) in &queue.ranges[queue.next..] {
        if left == 0 {
            break;
        }
        let take = (len - within).min(left);
        pool.tops()[vdev as usize].prefetch(offset + within, take);
        left -= take;
        within = 0;
    }
}

/// One batch of a sequential resilver (called by `scrub::step` for a scan record with
/// `sequential` set): copies chunks until `max_bytes` (at least one chunk). When the last one
/// is done the resilver finishes and the verifying scrub starts; the finished resilver's
/// record is returned then, so the caller reports its end.
pub(crate) fn step(
    inner: &mut Imported,
    max_bytes: u64,
    now: u64,
) -> Result<Option<ScanProgress>, EngineError> {
    let Some(mut progress) = inner.scan.progress else {
        return Ok(None);
    };
    assert!(
        progress.function == ScanFunction::Resilver && progress.sequential,
        "a sequential resilver step runs only for a sequential resilver"
    );
    if inner.scan.rebuild.is_none() {
        build(inner, &mut progress, now);
    }
    let Imported { pool, scan, .. } = &mut *inner;
    let queue = scan.rebuild.as_mut().expect("built above");
    prefetch(pool, queue, 2 * max_bytes.max(1));
    let mut done = 0u64;
    while done < max_bytes.max(1) && !queue.finished() {
        let (vdev, offset, len) = queue.ranges[queue.next];
        let top = &pool.tops()[vdev as usize];
        // dRAID rows are not powers of two: chunks stay whole rows.
        let align = top.allocation_align();
        let chunk = (len - queue.within).min(REBUILD_CHUNK / align * align);
        let at = offset + queue.within;
        // `errors` counts ranges that could not be read (data lost). A write the member
        // being resilvered missed is no loss: the verifying scrub rewrites it (a dRAID
        // distributed spare's space lies on children that may fail writes).
        match top.rebuild_range(at, usize::try_from(chunk).expect("a chunk fits usize")) {
            Ok(report) => progress.repaired += report.written,
            Err(_) => progress.errors += 1,
        }
        queue.within += chunk;
        if queue.within == len {
            queue.next += 1;
            queue.within = 0;
        }
        progress.rebuilt = Some((vdev, at + chunk));
        progress.issued += chunk;
        done += chunk;
    }
    assert!(
        progress.issued <= progress.to_examine,
        "S3: issued {} > listed {}",
        progress.issued,
        progress.to_examine
    );
    let finished = queue.finished();
    inner.scan.progress = Some(progress);
    if !finished {
        scrub::persist(inner)?;
        return Ok(Some(progress));
    }
    progress.state = ScanState::Finished;
    progress.end_time = now;
    inner.scan.rebuild = None;
    inner.scan.progress = Some(progress);
    crate::replace::resilver_done(inner);
    scrub::restart(inner, ScanFunction::Scrub, now);
    if let Some(verify) = &mut inner.scan.progress {
        verify.sequential = true;
    }
    scrub::persist(inner)?;
    inner.sync()?;
    Ok(Some(progress))
}
