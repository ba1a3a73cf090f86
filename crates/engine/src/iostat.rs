//! `tarn pool iostat`: per pool, top-level vdev, interior node and leaf, the counters since
//! import (operations, bytes, latency histograms, request sizes) and the queues now.
//!
//! The engine reports running totals; the front end turns two reports into rates over an
//! interval, as `zpool iostat` does (its first report is "since boot", ours since import).
//! Leaves are what is measured (tarn-vdev counts every access and times it with the pool's
//! `Clock`; a queued device times its own queue); every other row is the sum of the leaves
//! below it. Capacity (allocated, free) is known for pools and top-level vdevs only, as in
//! ZFS's layout.
//!
//! What each latency class means in tarn ([`Waits`]; `iostat -l` averages, `-w` histograms):
//! ```text
//!  class          device with a write-behind queue    device without (simulated)
//!  total_wait r   the leaf's read call: queue + disk  the leaf's read call
//!  total_wait w   acknowledged to applied, per write  the leaf's write call
//!  disk_wait r/w  backend time (pread/pwrite)         the same as total_wait
//!  syncq_wait r   waiting for queued writes to drain  0 (no queue)
//!  asyncq_wait w  waiting in the write-behind queue   0 (no queue)
//! ```
//! tarn has no separate sync-write, scrub, trim or rebuild queues: intent-log, scrub and
//! resilver accesses go through the same two paths, so ZFS's other classes do not exist.

use tarn_device::timing::Latencies;
use tarn_pool::Pool;
use tarn_vdev::stats::SIZE_BUCKETS;
use tarn_vdev::{Child, ChildKind, Layout, Leaf, TopVdev};

/// The latency classes of one row (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Waits {
    /// Reads, start to end as the leaf saw them.
    pub total_read: Latencies,
    /// Writes, acknowledged to applied.
    pub total_write: Latencies,
    /// Reads in the backend.
    pub disk_read: Latencies,
    /// Writes in the backend.
    pub disk_write: Latencies,
    /// Reads waiting for queued writes.
    pub syncq_read: Latencies,
    /// Writes waiting in the write-behind queue.
    pub asyncq_write: Latencies,
}

impl Waits {
    fn add(&mut self, other: &Waits) {
        self.total_read = self.total_read.plus(&other.total_read);
        self.total_write = self.total_write.plus(&other.total_write);
        self.disk_read = self.disk_read.plus(&other.disk_read);
        self.disk_write = self.disk_write.plus(&other.disk_write);
        self.syncq_read = self.syncq_read.plus(&other.syncq_read);
        self.asyncq_write = self.asyncq_write.plus(&other.asyncq_write);
    }
}

/// One row of `tarn pool iostat` and the rows below it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IostatNode {
    /// Pool name, `raidz2-0`, `mirror-1`, `spare-2`, or a device path.
    pub name: String,
    /// Allocated bytes (pool and top-level vdevs; `None` below).
    pub alloc: Option<u64>,
    /// Free bytes (pool and top-level vdevs; `None` below).
    pub free: Option<u64>,
    /// Reads issued since import.
    pub read_ops: u64,
    /// Writes issued since import.
    pub write_ops: u64,
    /// Bytes read since import.
    pub read_bytes: u64,
    /// Bytes written since import.
    pub write_bytes: u64,
    /// Sum of the latencies of the reads, in nanoseconds (average: divide by `read_ops`).
    pub read_wait_ns: u64,
    /// Sum of the latencies of the writes, in nanoseconds.
    pub write_wait_ns: u64,
    /// Latency histograms by class (module docs).
    pub waits: Waits,
    /// Reads per request size (`tarn_vdev::stats::size_bucket`).
    pub read_sizes: [u64; SIZE_BUCKETS],
    /// Writes per request size.
    pub write_sizes: [u64; SIZE_BUCKETS],
    /// Reads waiting for a device's write-behind queue to drain now.
    pub reads_pending: u64,
    /// Reads in a device now.
    pub reads_active: u64,
    /// Writes in a device now.
    pub writes_active: u64,
    /// Writes acknowledged and waiting in a device's write-behind queue now.
    pub writes_pending: u64,
    /// Rows below, in tree order.
    pub children: Vec<IostatNode>,
}

/// One pool's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolIostat {
    /// Pool name.
    pub name: String,
    /// The engine clock's monotonic time of the report, in nanoseconds.
    pub time_ns: u64,
    /// The same clock at import (or create): the totals cover `time_ns - imported_ns`.
    pub imported_ns: u64,
    /// The pool row, with its top-level vdevs as children.
    pub root: IostatNode,
}

impl IostatNode {
    fn summed(name: String, children: Vec<IostatNode>) -> IostatNode {
        let mut node = IostatNode {
            name,
            ..IostatNode::default()
        };
        for child in &children {
            node.read_ops += child.read_ops;
            node.write_ops += child.write_ops;
            node.read_bytes += child.read_bytes;
            node.write_bytes += child.write_bytes;
            node.read_wait_ns += child.read_wait_ns;
            node.write_wait_ns += child.write_wait_ns;
            node.waits.add(&child.waits);
            for (sum, more) in node.read_sizes.iter_mut().zip(&child.read_sizes) {
                *sum += more;
            }
            for (sum, more) in node.write_sizes.iter_mut().zip(&child.write_sizes) {
                *sum += more;
            }
            node.reads_pending += child.reads_pending;
            node.reads_active += child.reads_active;
            node.writes_active += child.writes_active;
            node.writes_pending += child.writes_pending;
        }
        node.children = children;
        node
    }
}

fn leaf_row(leaf: &Leaf) -> IostatNode {
    let stats = leaf.stats().snapshot();
    let timing = leaf.io_stats().snapshot();
    let read = Latencies {
        buckets: timing.read_histogram,
        total_ns: timing.read_latency_ns,
    };
    let write = Latencies {
        buckets: timing.write_histogram,
        total_ns: timing.write_latency_ns,
    };
    let device = leaf.device();
    let queue = device.as_ref().and_then(|d| d.queue_timing());
    let mut row = IostatNode {
        name: leaf.path(),
        read_ops: stats.read_ops,
        write_ops: stats.write_ops,
        read_bytes: stats.read_bytes,
        write_bytes: stats.write_bytes,
        read_sizes: timing.read_sizes,
        write_sizes: timing.write_sizes,
        ..IostatNode::default()
    };
    match queue {
        Some(queue) => {
            row.waits = Waits {
                total_read: read,
                total_write: queue.write_total,
                disk_read: queue.read_disk,
                disk_write: queue.write_disk,
                syncq_read: queue.read_queue,
                asyncq_write: queue.write_queue,
            };
            // Two looks at a live queue: the write in the backend may finish in between.
            let queued = device.as_ref().map_or(0, |d| d.queued_writes());
            row.reads_pending = queue.reads_waiting;
            row.reads_active = queue.reads_active;
            row.writes_pending = queued.saturating_sub(queue.writes_active);
            row.writes_active = queue.writes_active;
        }
        None => {
            row.waits = Waits {
                total_read: read,
                total_write: write,
                disk_read: read,
                disk_write: write,
                ..Waits::default()
            };
            row.reads_active = timing.reads_in_flight;
            row.writes_active = timing.writes_in_flight;
        }
    }
    row.read_wait_ns = row.waits.total_read.total_ns;
    row.write_wait_ns = row.waits.total_write.total_ns;
    row
}

fn child_row(index: usize, child: &Child) -> IostatNode {
    let members = child.members();
    let prefix = match child.kind() {
        ChildKind::Leaf => return leaf_row(&members[0]),
        ChildKind::Replacing => "replacing",
        ChildKind::Spare => "spare",
    };
    let rows = members.iter().map(|leaf| leaf_row(leaf)).collect();
    IostatNode::summed(format!("{prefix}-{index}"), rows)
}

fn top_row(top: &TopVdev, alloc: u64, free: u64) -> IostatNode {
    let positions = top.children();
    let rows: Vec<IostatNode> = positions
        .iter()
        .enumerate()
        .map(|(i, child)| child_row(i, child))
        .collect();
    let mut node = match top.layout() {
        Layout::Disk => rows.into_iter().next().unwrap_or_default(),
        layout => IostatNode::summed(layout.display_name(positions.len(), top.id().0), rows),
    };
    node.alloc = Some(alloc);
    node.free = Some(free);
    node
}

/// The report of one pool at `time_ns`.
pub(crate) fn pool_iostat(name: &str, pool: &Pool, imported_ns: u64, time_ns: u64) -> PoolIostat {
    let usage = pool.usage();
    assert_eq!(
        usage.len(),
        pool.tops().len(),
        "one usage row per top-level vdev"
    );
    let tops: Vec<IostatNode> = pool
        .tops()
        .iter()
        .zip(&usage)
        .map(|(top, u)| top_row(top, u.allocated, u.size - u.allocated))
        .collect();
    let mut root = IostatNode::summed(name.to_string(), tops);
    root.alloc = Some(usage.iter().map(|u| u.allocated).sum());
    root.free = Some(usage.iter().map(|u| u.size - u.allocated).sum());
    if let Some(caches) = cache_section(pool) {
        // After the sums: as in ZFS, the pool's row does not count its cache devices.
        root.children.push(caches);
    }
    PoolIostat {
        name: name.to_string(),
        time_ns,
        imported_ns,
        root,
    }
}

/// The `cache` heading (no capacity, no counters of its own) over one row per cache device,
/// whose ALLOC is what its ring holds now and FREE the rest of its data area.
fn cache_section(pool: &Pool) -> Option<IostatNode> {
    let l2 = pool.pipeline().l2();
    let rows: Vec<IostatNode> = pool
        .caches()
        .iter()
        .map(|leaf| {
            let held = l2.allocated_on(leaf.guid());
            IostatNode {
                alloc: Some(held),
                free: Some(leaf.asize().saturating_sub(held)),
                ..leaf_row(leaf)
            }
        })
        .collect();
    (!rows.is_empty()).then(|| IostatNode {
        name: "cache".into(),
        children: rows,
        ..IostatNode::default()
    })
}

impl crate::Engine {
    /// Counters of the cache devices (L2ARC) of `name` since import.
    pub fn l2_stats(&self, name: &str) -> Result<tarn_vdev::L2Stats, crate::EngineError> {
        let handle = self.pool(name)?;
        let inner = handle.lock();
        Ok(inner.pool.pipeline().l2().stats())
    }

    /// `tarn pool iostat`: the running totals of the named pools (every pool when `names` is
    /// empty), in name order.
    pub fn iostat(&self, names: &[String]) -> Result<Vec<PoolIostat>, crate::EngineError> {
        let handles = self.select(names)?;
        let time_ns = self.clock.monotonic_ns();
        Ok(handles
            .iter()
            .map(|h| pool_iostat(&h.name, &h.lock().pool, h.imported_ns, time_ns))
            .collect())
    }
}
