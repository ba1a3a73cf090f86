//! tarn-zio: the I/O pipeline, one block at a time.
//!
//! # Purpose
//! Turns a logical block into durable, verifiable copies and back: compress, checksum,
//! allocate, write every copy; read a copy, verify, fall back to the other copies, heal the
//! bad ones, decompress. Everything above this crate sees only [`BlockStore`] and
//! [`tarn_format::BlockPtr`]s; everything below is the vdev tree.
//!
//! # Model
//! ```text
//!  write:  logical ─► all zero? ─► hole bp (no space)
//!                  └► compress (kept if it saves >= 12.5%) ─► pad to 512 = psize
//!                     ─► checksum(psize bytes) ─► Allocator: one DVA per copy, in the
//!                        class the block's write policy asks for (WriteProps::alloc_class)
//!                     ─► pad to the sector size ─► TopVdev::write per DVA ─► bp
//!  read:   bp ─► for each DVA: TopVdev::read(verify = checksum matches)
//!             ─► first copy that verifies wins; earlier bad copies are rewritten
//!             ─► decompress to lsize
//!  scrub:  bp ─► for EVERY DVA: TopVdev::scrub (every mirror side, every raidz column
//!             including parity, repaired in place) ─► copies that failed entirely are
//!             rewritten from one that verified ─► ScrubOutcome
//!  heal:   bp + bytes from a replica (`receive -c`) ─► scrub; a copy verified? done
//!             ─► else the bytes verify against bp? ─► write them at every DVA ─► read back
//!  check:  the same without writing (`receive -n -c`): read each copy, no repair
//! ```
//! The vdev layer does the per-copy work (mirror sides, raidz reconstruction by checksum);
//! this layer only chooses between copies (DVAs).
//!
//! Buffers on the write side: a block stored as it is (not compressed) whose size is
//! already whole sectors needs no padding, and when its caller shares it
//! ([`Pipeline::write_block_shared`]: the object layer's sync, which puts the same bytes
//! in its cache) the pipeline writes and journals that buffer itself. Every other block
//! is copied once into a padded buffer. A streaming write's level-0 blocks are the first
//! kind (incompressible records, or compression off), and the copy was a tenth of the
//! syncing thread's work (docs/PERFORMANCE.md, "Write CPU per byte").
//!
//! # Invariants
//! - I1: no byte is returned to a caller unless its checksum matched (the verify closure is
//!   the only way data leaves `read_block`).
//! - I2: a block pointer's `psize` is a multiple of 512 and `<= lsize`; the checksum covers
//!   exactly `psize` bytes.
//! - I3: every DVA of a block written here has the same physical content.
//! - I5: a scrub rewrites a copy only with bytes that verified against the block pointer.
//! - I6: a block served by a cache device ([`tarn_vdev::L2Cache`]) passed the same verify
//!   as one read from the pool; a cache device holds only copies of verified bytes, fed
//!   only when the reader says its `secondarycache` admits the block (`read_block_l2`).
//! - I7: bytes from outside the pool ([`Pipeline::heal_block`]) are written only when they
//!   hash to the block pointer's checksum, and only over a block no copy of which verifies.
//! - I4: a block read was born no later than the txg the caller is in (temporal incursion
//!   check, as ztest does): checked by callers that know the txg via [`BlockStore::txg`].
//!
//! # Concurrency and context
//! `Pipeline` is shared (`&self`); the allocator is passed in by the syncing context, which
//! is the only place blocks are written. A batch read ([`Pipeline::read_blocks`]: a file
//! read with its read-ahead) keeps up to `READS_IN_FLIGHT_MAX` blocks started
//! ([`TopVdev::start_read`]: every first device read submitted) ahead of the block it is
//! finishing (verify, reconstruct if needed, decompress), all from the caller's thread, and
//! starts them under a plug (`tarn_device::plug`) so that each device queue sees a batch's
//! column reads together and merges adjacent ones into one access. (It used to run its
//! blocks as jobs on reader threads; their idle spinning and hand-offs cost more than the
//! reads: docs/PERFORMANCE.md, "Batch reads from one thread".) The scans
//! ([`Pipeline::scan_blocks`]: scrub and resilver steps) run their blocks as up to
//! `BLOCKS_IN_FLIGHT_MAX` jobs on the process's reader threads ([`READER_THREADS`] of them,
//! started at the first parallel batch and kept), all finished before the call returns.
//! With simulated (synchronous) devices the blocks run in order on the caller's thread, so
//! simulated runs stay deterministic. [`Pipeline::write_blocks`] (the blocks a volume's
//! `logbias=throughput` commit writes ahead) runs on the reader threads too: compression
//! and checksums, then the device writes, each a batch, with the allocations between them
//! on the caller's thread in block order (the allocator is not shared). A read-ahead batch
//! that its reader does not wait for runs as one job on a read-ahead thread
//! ([`spawn_read_ahead`]).
//!
//! A block may also be written in three stages by a caller that holds its allocator only
//! for the middle one (the engine's pre-write, which holds the pool lock to allocate and
//! nothing else): [`Pipeline::encode_shared`] (compression, no allocator),
//! [`Pipeline::allocate_encoded`] (the allocator, in the caller's block order, so layouts
//! stay deterministic), [`Pipeline::write_encoded`] (checksum, parity, device writes, no
//! allocator, never journaled: such a block belongs to no syncing txg).
//!
//! # Failure model
//! A copy that fails to read or verify is skipped and healed from a good copy. A block none
//! of whose copies verify is [`ZioError::Unrecoverable`], naming the block. A write that
//! cannot reach enough devices is [`ZioError::WriteFailed`]; the pool layer then suspends.
//! While a txg syncs, the pool arms the pipeline's [`Journal`]: every block written keeps its
//! padded physical bytes and DVAs there until the txg commits, and a write that cannot reach
//! enough devices is recorded in the journal instead of failing the caller. The syncing txg
//! then completes in memory, the pool suspends without committing it, and `tarn pool clear`
//! writes the kept blocks again at the same DVAs ([`Pipeline::rewrite`]) once the devices are
//! back: OpenZFS reissues its suspended zios the same way. The cost is memory: the physical
//! blocks of one txg (at most its dirty data, compressed) stay allocated until it commits.
//!
//! # Not here
//! Space accounting (tarn-space), txgs (tarn-pool), in-memory caching (tarn-objects; the
//! second level on cache devices is looked up and fed here), parallel issue of copies over
//! worker threads (copies are written one after another, and the copies of one block are
//! scrubbed one after another, for now).

pub mod store;

pub use store::{AllocClass, Allocator, BlockStore, WriteProps, ZioError};

use std::sync::{Arc, Mutex, PoisonError};
use tarn_base::limits::{ASHIFT_DEFAULT, BLOCKS_IN_FLIGHT_MAX, READS_IN_FLIGHT_MAX};
use tarn_base::{Guid, Txg};
use tarn_device::SharedBytes;
use tarn_format::checksum::checksum;
use tarn_format::compress::{compress, decompress_owned, is_all_zero};
use tarn_format::{BlockPtr, CompressKind, Dva};
use tarn_vdev::{L2Cache, L2Key, StartedRead, TopVdev, VdevError};

/// Unit every physical size is padded to, whatever the sector size.
pub const PSIZE_UNIT: u64 = 512;

/// The pipeline over a pool's top-level vdevs (indexed by `VdevId`).
#[derive(Debug, Clone)]
pub struct Pipeline {
    vdevs: Vec<Arc<TopVdev>>,
    sector_size: u64,
    /// The pool's cache devices (empty without any): looked up before, fed after a read.
    l2: Arc<L2Cache>,
    /// The syncing txg's journal while one is armed (see the crate's failure model).
    journal: Arc<Mutex<Option<Journal>>>,
}

/// One block written while the journal was armed: its DVAs and its physical bytes padded to
/// the sector size, enough to write it again at the same place.
#[derive(Debug, Clone)]
pub struct KeptWrite {
    /// Where every copy went.
    pub dvas: Vec<Dva>,
    /// The bytes each copy holds (padded to the sector size); shared with the object
    /// layer's cache when the block is stored as it was given
    /// ([`Pipeline::write_block_shared`]).
    pub buffer: Arc<Vec<u8>>,
}

/// What the writes of one syncing txg did ([`Pipeline::journal_begin`]).
#[derive(Debug, Default)]
pub struct Journal {
    /// Every block written, in order.
    pub writes: Vec<KeptWrite>,
    /// The first write that did not reach enough devices, if any: the txg must not commit
    /// until its blocks are written again.
    pub failed: Option<String>,
}

/// Threads serving the scans and batch writes of every pool in the process: enough for
/// several callers (scrubs, throughput commits) each with [`BLOCKS_IN_FLIGHT_MAX`] blocks in
/// flight.
pub const READER_THREADS: usize = 2 * BLOCKS_IN_FLIGHT_MAX;

/// The reader threads, started on first use; `None` if they could not be started (then
/// batches run on the caller's thread, as with synchronous devices).
fn readers() -> Option<&'static rayon::ThreadPool> {
    static READERS: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    READERS
        .get_or_init(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(READER_THREADS)
                .thread_name(|i| format!("tarn-read-{i}"))
                .build()
                .ok()
        })
        .as_ref()
}

/// Threads that run read-ahead batches nobody waits for ([`spawn_read_ahead`]): few, since
/// each batch keeps its own blocks in flight, and asleep on their queue when idle (the
/// reader threads' pool spins before it sleeps, which a job every few requests would pay
/// for each time).
pub const READ_AHEAD_THREADS: usize = 4;

type AheadJob = Box<dyn FnOnce() + Send>;

/// The queue of the read-ahead threads, started on first use; `None` if they could not be
/// started.
fn read_ahead_queue() -> Option<&'static Mutex<std::sync::mpsc::Sender<AheadJob>>> {
    static QUEUE: std::sync::OnceLock<Option<Mutex<std::sync::mpsc::Sender<AheadJob>>>> =
        std::sync::OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (send, receive) = std::sync::mpsc::channel::<AheadJob>();
            let receive = Arc::new(Mutex::new(receive));
            for i in 0..READ_AHEAD_THREADS {
                let receive = Arc::clone(&receive);
                std::thread::Builder::new()
                    .name(format!("tarn-ahead-{i}"))
                    .spawn(move || {
                        loop {
                            // The lock is held only to take one job, never while running it.
                            let job = receive
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .recv();
                            match job {
                                Ok(job) => job(),
                                Err(_) => return,
                            }
                        }
                    })
                    .ok()?;
            }
            Some(Mutex::new(send))
        })
        .as_ref()
}

/// Runs `job` on a read-ahead thread and returns at once (on this thread, before returning,
/// when they could not be started): a read-ahead batch that its reader hands on without
/// waiting for it (tarn-objects `Ahead`, which any reader that needs it may also run).
pub fn spawn_read_ahead(job: impl FnOnce() + Send + 'static) {
    let Some(queue) = read_ahead_queue() else {
        return job();
    };
    let sent = queue
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send(Box::new(job));
    if let Err(std::sync::mpsc::SendError(job)) = sent {
        job();
    }
}

/// Whether `data` (a copy of `bp` as read, padded to whole sectors) is the block: its first
/// `psize` bytes match the checksum and the padding after them is zero, as every write pads.
/// Padding counts because the vdevs regenerate parity and compare mirror sides over whole
/// sectors: garbage in the padding of one column that passed the checksum would make the
/// vdev blame the parity or the other sides for it, and leave the garbage in place.
fn verifies(bp: &BlockPtr, data: &[u8]) -> bool {
    let psize = bp.psize as usize;
    data.get(..psize)
        .is_some_and(|d| checksum(bp.checksum_kind, d) == bp.checksum)
        && data[psize..].iter().all(|&b| b == 0)
}

/// A read of a block's physical bytes between [`Pipeline::start_physical`] and
/// [`Pipeline::finish_physical`].
enum PhysicalRead<'p> {
    /// A verified copy from a cache device.
    Cached(Vec<u8>),
    /// The first copy's read in flight; `None` when its vdev does not exist. (Boxed: a
    /// started read is a block's column map and buffers, most of a window's entries.)
    Started(Option<Result<Box<StartedRead<'p>>, VdevError>>),
}

/// A block of [`Pipeline::write_blocks`] after compression.
enum Encoded {
    Hole(BlockPtr),
    Data {
        buffer: Arc<Vec<u8>>,
        psize: u64,
        kind: CompressKind,
    },
}

/// A block compressed and padded for a write ahead of its txg ([`Pipeline::encode_shared`]),
/// not yet allocated: its physical bytes (the caller's own buffer when stored as it is).
#[derive(Debug)]
pub struct EncodedBlock {
    buffer: Arc<Vec<u8>>,
    psize: u64,
    lsize: u64,
    kind: CompressKind,
}

impl EncodedBlock {
    /// Bytes its copies take before allocation rounds them (the padded physical size).
    #[must_use]
    pub fn padded_size(&self) -> u64 {
        self.buffer.len() as u64
    }
}

/// A block of [`Pipeline::write_blocks`] after allocation.
enum Placed {
    Failed(ZioError),
    Hole(BlockPtr),
    Data {
        dvas: Vec<Dva>,
        buffer: Arc<Vec<u8>>,
        psize: u64,
        lsize: u64,
        kind: CompressKind,
    },
}

/// The logical bytes of a block handed to the write stage: borrowed, or shared with the
/// caller, who keeps them (so the pipeline may keep them too instead of a copy).
#[derive(Clone, Copy)]
enum Logical<'a> {
    Borrowed(&'a [u8]),
    Shared(&'a Arc<Vec<u8>>),
}

impl<'a> Logical<'a> {
    fn bytes(self) -> &'a [u8] {
        match self {
            Logical::Borrowed(bytes) => bytes,
            Logical::Shared(shared) => shared.as_slice(),
        }
    }
}

/// `bytes` followed by zeros up to `len` bytes, in a fresh buffer: filled once, without
/// zero-filling the part the copy overwrites.
fn padded_copy(bytes: &[u8], len: usize) -> Vec<u8> {
    assert!(bytes.len() <= len, "{} bytes padded to {len}", bytes.len());
    let mut buffer = Vec::with_capacity(len);
    buffer.extend_from_slice(bytes);
    buffer.resize(len, 0);
    buffer
}

impl Pipeline {
    /// A pipeline over `vdevs`; `vdevs[i]` must have id `i`.
    #[must_use]
    pub fn new(vdevs: Vec<Arc<TopVdev>>) -> Self {
        for (index, vdev) in vdevs.iter().enumerate() {
            assert_eq!(
                vdev.id().0 as usize,
                index,
                "top-level vdev ids must be dense"
            );
        }
        let sector_size = vdevs
            .iter()
            .map(|v| 1u64 << v.ashift())
            .max()
            .unwrap_or(PSIZE_UNIT);
        let no_pool = Guid(0);
        let l2 = Arc::new(L2Cache::new(no_pool, Vec::new(), ASHIFT_DEFAULT));
        Pipeline {
            vdevs,
            sector_size,
            l2,
            journal: Arc::new(Mutex::new(None)),
        }
    }

    fn journal(&self) -> std::sync::MutexGuard<'_, Option<Journal>> {
        self.journal.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Arms the journal: until [`Pipeline::journal_end`], every block written is kept and a
    /// failed write is recorded there rather than returned (the crate's failure model).
    pub fn journal_begin(&self) {
        let mut journal = self.journal();
        assert!(journal.is_none(), "a journal is already armed");
        *journal = Some(Journal::default());
    }

    /// Disarms the journal and returns what it kept (empty if none was armed).
    #[must_use]
    pub fn journal_end(&self) -> Journal {
        self.journal().take().unwrap_or_default()
    }

    /// Writes a kept block again at its DVAs (`tarn pool clear` retrying a txg).
    pub fn rewrite(&self, kept: &KeptWrite) -> Result<(), ZioError> {
        assert!(
            (kept.buffer.len() as u64).is_multiple_of(self.sector_size),
            "a kept block is padded to the sector size"
        );
        // Shared with the devices' queues, which keep the columns as ranges of this buffer.
        let shared = SharedBytes::new(Arc::clone(&kept.buffer));
        for dva in &kept.dvas {
            self.vdev(dva)?
                .write_shared(dva.offset, &shared)
                .map_err(|e| ZioError::WriteFailed(format!("{}: {e}", dva_name(dva))))?;
        }
        Ok(())
    }

    /// This pipeline with `l2` as its second-level read cache.
    #[must_use]
    pub fn with_l2(mut self, l2: Arc<L2Cache>) -> Self {
        self.l2 = l2;
        self
    }

    /// The second-level read cache (cache devices).
    #[must_use]
    pub fn l2(&self) -> &Arc<L2Cache> {
        &self.l2
    }

    /// The top-level vdevs.
    #[must_use]
    pub fn vdevs(&self) -> &[Arc<TopVdev>] {
        &self.vdevs
    }

    /// Largest sector size in the pool; physical buffers are padded to it.
    #[must_use]
    pub fn sector_size(&self) -> u64 {
        self.sector_size
    }

    fn vdev(&self, dva: &Dva) -> Result<&Arc<TopVdev>, ZioError> {
        self.vdevs
            .get(dva.vdev.0 as usize)
            .ok_or_else(|| ZioError::Unrecoverable {
                dva: dva_name(dva),
                birth: Txg(0),
                why: "block pointer names a vdev that does not exist".into(),
                copies: Box::default(),
            })
    }

    /// Compresses, checksums, allocates and writes one block born in `txg`.
    pub fn write_block(
        &self,
        allocator: &mut dyn Allocator,
        txg: Txg,
        data: &[u8],
        props: &WriteProps,
    ) -> Result<BlockPtr, ZioError> {
        self.write_block_from(allocator, txg, Logical::Borrowed(data), props)
    }

    /// [`Pipeline::write_block`] of bytes the caller shares: a block stored as it is (not
    /// compressed, its length whole sectors) is written and kept in the journal from
    /// `data` itself, without the copy into a padded buffer (the same bytes reach the
    /// devices either way).
    pub fn write_block_shared(
        &self,
        allocator: &mut dyn Allocator,
        txg: Txg,
        data: &Arc<Vec<u8>>,
        props: &WriteProps,
    ) -> Result<BlockPtr, ZioError> {
        self.write_block_from(allocator, txg, Logical::Shared(data), props)
    }

    fn write_block_from(
        &self,
        allocator: &mut dyn Allocator,
        txg: Txg,
        logical: Logical<'_>,
        props: &WriteProps,
    ) -> Result<BlockPtr, ZioError> {
        let data = logical.bytes();
        let (buffer, psize, kind) = match self.encode(txg, logical, props)? {
            Encoded::Hole(hole) => return Ok(hole),
            Encoded::Data {
                buffer,
                psize,
                kind,
            } => (buffer, psize, kind),
        };
        let class = props.alloc_class(psize);
        let dvas = allocator.allocate(buffer.len() as u64, props.copies.max(1), class)?;
        let result = self.write_physical(&dvas, txg, buffer, psize, data.len() as u64, kind, props);
        if result.is_err() {
            for dva in &dvas {
                allocator.free(dva, txg);
            }
        }
        result
    }

    /// [`Pipeline::write_block`] of several blocks born in `txg`, results in their order,
    /// each what `write_block` returns for it: compression, then allocation (in order, on
    /// the caller's thread), then the device writes, the first and last with up to
    /// [`BLOCKS_IN_FLIGHT_MAX`] blocks in flight when the devices allow it
    /// ([`Pipeline::reads_in_parallel`]; simulated devices run them in order). A block whose
    /// write failed gives its space back, as `write_block` does.
    pub fn write_blocks(
        &self,
        allocator: &mut dyn Allocator,
        txg: Txg,
        blocks: &[(&[u8], &WriteProps)],
    ) -> Vec<Result<BlockPtr, ZioError>> {
        let encoded = self.batch(blocks.len(), |i| {
            self.encode(txg, Logical::Borrowed(blocks[i].0), blocks[i].1)
        });
        let mut placed: Vec<Mutex<Option<Placed>>> = Vec::with_capacity(blocks.len());
        for (block, (data, props)) in encoded.into_iter().zip(blocks) {
            let block = block.and_then(|encoded| match encoded {
                Encoded::Hole(bp) => Ok(Placed::Hole(bp)),
                Encoded::Data {
                    buffer,
                    psize,
                    kind,
                } => {
                    let class = props.alloc_class(psize);
                    let dvas =
                        allocator.allocate(buffer.len() as u64, props.copies.max(1), class)?;
                    let lsize = data.len() as u64;
                    Ok(Placed::Data {
                        dvas,
                        buffer,
                        psize,
                        lsize,
                        kind,
                    })
                }
            });
            placed.push(Mutex::new(Some(block.unwrap_or_else(Placed::Failed))));
        }
        let written = self.batch(blocks.len(), |i| {
            let taken = placed[i]
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            match taken.expect("each block is written once") {
                Placed::Failed(e) => (Vec::new(), Err(e)),
                Placed::Hole(bp) => (Vec::new(), Ok(bp)),
                Placed::Data {
                    dvas,
                    buffer,
                    psize,
                    lsize,
                    kind,
                } => {
                    let props = blocks[i].1;
                    let result = self.write_physical(&dvas, txg, buffer, psize, lsize, kind, props);
                    (dvas, result)
                }
            }
        });
        written
            .into_iter()
            .map(|(dvas, result)| {
                if result.is_err() {
                    for dva in &dvas {
                        allocator.free(dva, txg);
                    }
                }
                result
            })
            .collect()
    }

    /// The compression stage of [`Pipeline::write_block`] and [`Pipeline::write_blocks`]: a
    /// hole for zeros, else the physical bytes padded to the sector size (`logical` itself
    /// when it is shared, stored as it is and already whole sectors).
    fn encode(
        &self,
        txg: Txg,
        logical: Logical<'_>,
        props: &WriteProps,
    ) -> Result<Encoded, ZioError> {
        let data = logical.bytes();
        assert!(!data.is_empty(), "write_block of an empty block");
        assert!(
            (data.len() as u64).is_multiple_of(PSIZE_UNIT),
            "logical size {} not 512-aligned",
            data.len()
        );
        if is_all_zero(data) {
            let mut hole = BlockPtr::hole(txg);
            hole.lsize = data.len() as u32;
            hole.block_type = props.block_type;
            hole.level = props.level;
            return Ok(Encoded::Hole(hole));
        }
        let pad = |len: usize| {
            let psize = (len as u64).next_multiple_of(PSIZE_UNIT);
            (psize, psize.next_multiple_of(self.sector_size) as usize)
        };
        let (buffer, psize, kind) = match compress(props.compression, data) {
            // The compressor's own buffer, padded in place (it leaves room for that).
            Some(mut bytes) => {
                let (psize, padded) = pad(bytes.len());
                bytes.resize(padded, 0);
                (Arc::new(bytes), psize, props.compression.kind())
            }
            None => {
                let (psize, padded) = pad(data.len());
                let buffer = match logical {
                    Logical::Shared(shared) if padded == data.len() => Arc::clone(shared),
                    _ => Arc::new(padded_copy(data, padded)),
                };
                (buffer, psize, CompressKind::Off)
            }
        };
        Ok(Encoded::Data {
            buffer,
            psize,
            kind,
        })
    }

    /// Writes already-encoded, uncompressed bytes at DVAs the caller allocated (the space log
    /// allocates its own blocks before it knows their contents). `data` must be 512-aligned.
    pub fn write_block_at(
        &self,
        dvas: &[Dva],
        txg: Txg,
        data: &[u8],
        props: &WriteProps,
    ) -> Result<BlockPtr, ZioError> {
        assert!(
            (data.len() as u64).is_multiple_of(PSIZE_UNIT),
            "physical size {} not 512-aligned",
            data.len()
        );
        let psize = data.len() as u64;
        let buffer = padded_copy(data, psize.next_multiple_of(self.sector_size) as usize);
        let buffer = Arc::new(buffer);
        self.write_physical(dvas, txg, buffer, psize, psize, CompressKind::Off, props)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_physical(
        &self,
        dvas: &[Dva],
        txg: Txg,
        buffer: Arc<Vec<u8>>,
        psize: u64,
        lsize: u64,
        compression: CompressKind,
        props: &WriteProps,
    ) -> Result<BlockPtr, ZioError> {
        assert!(
            !dvas.is_empty() && dvas.len() <= 3,
            "a block has 1..=3 copies, got {}",
            dvas.len()
        );
        assert!(psize <= lsize, "I2: psize {psize} > lsize {lsize}");
        let sum = checksum(props.checksum, &buffer[..psize as usize]);
        let kept = KeptWrite {
            dvas: dvas.to_vec(),
            buffer,
        };
        let written = self.rewrite(&kept);
        let mut journal = self.journal();
        match journal.as_mut() {
            // Armed: the block is kept, and a failure waits for the txg's retry.
            Some(journal) => {
                if let Err(e) = written {
                    journal.failed.get_or_insert(e.to_string());
                }
                journal.writes.push(kept);
            }
            None => written?,
        }
        drop(journal);
        Ok(block_pointer(
            dvas,
            txg,
            sum,
            psize,
            lsize,
            compression,
            props,
        ))
    }

    /// The compression stage alone, for a block written ahead of its txg without the pool
    /// lock (the engine's pre-write, in three steps: this, [`Pipeline::allocate_encoded`]
    /// under the lock, [`Pipeline::write_encoded`] without it). `None` for a block of zeros
    /// (a hole needs no write).
    pub fn encode_shared(
        &self,
        txg: Txg,
        data: &Arc<Vec<u8>>,
        props: &WriteProps,
    ) -> Result<Option<EncodedBlock>, ZioError> {
        Ok(match self.encode(txg, Logical::Shared(data), props)? {
            Encoded::Hole(_) => None,
            Encoded::Data {
                buffer,
                psize,
                kind,
            } => Some(EncodedBlock {
                buffer,
                psize,
                lsize: data.len() as u64,
                kind,
            }),
        })
    }

    /// The allocation stage for `block`: one DVA per copy, as [`Pipeline::write_block`]
    /// allocates them.
    pub fn allocate_encoded(
        &self,
        allocator: &mut dyn Allocator,
        block: &EncodedBlock,
        props: &WriteProps,
    ) -> Result<Vec<Dva>, ZioError> {
        let class = props.alloc_class(block.psize);
        allocator.allocate(block.buffer.len() as u64, props.copies.max(1), class)
    }

    /// The checksum and the device writes of `block` at `dvas`, born in `txg`. Never kept in
    /// the journal: a block written ahead is no syncing txg's, and a failed write is returned
    /// (its owner does not adopt it). Its space stays allocated either way; the caller
    /// frees it.
    pub fn write_encoded(
        &self,
        dvas: &[Dva],
        txg: Txg,
        block: &EncodedBlock,
        props: &WriteProps,
    ) -> Result<BlockPtr, ZioError> {
        assert!(
            !dvas.is_empty() && dvas.len() <= 3,
            "a block has 1..=3 copies, got {}",
            dvas.len()
        );
        let sum = checksum(props.checksum, &block.buffer[..block.psize as usize]);
        let kept = KeptWrite {
            dvas: dvas.to_vec(),
            buffer: Arc::clone(&block.buffer),
        };
        self.rewrite(&kept)?;
        let (psize, lsize) = (block.psize, block.lsize);
        Ok(block_pointer(
            dvas, txg, sum, psize, lsize, block.kind, props,
        ))
    }
}

/// The pointer of a block written at `dvas` (`Pipeline::write_physical`).
fn block_pointer(
    dvas: &[Dva],
    txg: Txg,
    sum: tarn_format::Checksum,
    psize: u64,
    lsize: u64,
    compression: CompressKind,
    props: &WriteProps,
) -> BlockPtr {
    let mut bp = BlockPtr {
        lsize: u32::try_from(lsize).expect("lsize bounded by BLOCK_SIZE_MAX"),
        psize: u32::try_from(psize).expect("psize bounded by BLOCK_SIZE_MAX"),
        compression,
        checksum_kind: props.checksum,
        block_type: props.block_type,
        level: props.level,
        birth: txg,
        birth_physical: Txg(0),
        fill: props.fill,
        checksum: sum,
        ..BlockPtr::default()
    };
    for (slot, dva) in bp.dvas.iter_mut().zip(dvas) {
        *slot = *dva;
    }
    bp
}

impl Pipeline {
    /// Writes `data` (512-aligned; padded here to the sector size) at one DVA the caller
    /// allocated, with no block pointer: for self-checksummed blocks no parent names, such as
    /// intent-log blocks. The caller flushes.
    pub fn write_raw(&self, dva: &Dva, data: &[u8]) -> Result<(), ZioError> {
        assert!(
            (data.len() as u64).is_multiple_of(PSIZE_UNIT),
            "raw write of {} bytes is not 512-aligned",
            data.len()
        );
        let padded = (data.len() as u64).next_multiple_of(self.sector_size);
        let buffer = SharedBytes::from(padded_copy(data, padded as usize));
        self.vdev(dva)?
            .write_shared(dva.offset, &buffer)
            .map_err(|e| ZioError::WriteFailed(format!("{}: {e}", dva_name(dva))))?;
        Ok(())
    }

    /// Reads `len` bytes written by [`Pipeline::write_raw`] at `dva`, returning only bytes
    /// `verify` accepts (a self-checksum; raidz reconstructs and mirrors try every side
    /// until one verifies). Nothing is healed: such blocks are short-lived.
    pub fn read_raw(
        &self,
        dva: &Dva,
        len: u64,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<Vec<u8>, ZioError> {
        let padded = len.next_multiple_of(self.sector_size);
        let check = |data: &[u8]| data.get(..len as usize).is_some_and(verify);
        let report = self
            .vdev(dva)?
            .read(dva.offset, padded, &check)
            .map_err(|e| ZioError::Unrecoverable {
                dva: dva_name(dva),
                birth: Txg(0),
                why: e.to_string(),
                copies: Box::new([*dva]),
            })?;
        let mut data = report.data;
        data.truncate(len as usize);
        Ok(data)
    }

    /// Reads, verifies and decompresses a block. A hole reads as `lsize` zeros.
    pub fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        self.read_block_l2(bp, true)
    }

    /// [`Pipeline::read_block`] that feeds the cache devices only with `feed_l2`
    /// ([`Pipeline::read_physical_l2`]).
    pub fn read_block_l2(&self, bp: &BlockPtr, feed_l2: bool) -> Result<Vec<u8>, ZioError> {
        if bp.is_hole() {
            return Ok(tarn_base::buf::zeroed(bp.lsize as usize));
        }
        self.finish_block(bp, self.start_physical(bp), feed_l2)
    }

    /// [`Pipeline::finish_physical`], then the block's logical bytes.
    fn finish_block(
        &self,
        bp: &BlockPtr,
        started: PhysicalRead<'_>,
        feed_l2: bool,
    ) -> Result<Vec<u8>, ZioError> {
        let physical = self.finish_physical(bp, started, feed_l2)?;
        Ok(decompress_owned(
            bp.compression,
            physical,
            bp.lsize as usize,
        )?)
    }

    /// Whether every top-level vdev serves reads in parallel
    /// ([`TopVdev::reads_in_parallel`]): then the batch methods run blocks on several
    /// threads; otherwise (simulated devices) one after another, in order, on the caller's.
    #[must_use]
    pub fn reads_in_parallel(&self) -> bool {
        !self.vdevs.is_empty() && self.vdevs.iter().all(|vdev| vdev.reads_in_parallel())
    }

    /// [`Pipeline::read_block`] of every block pointer, with up to
    /// [`BLOCKS_IN_FLIGHT_MAX`] blocks in flight when the devices allow it
    /// ([`Pipeline::reads_in_parallel`]). Results are in the order of `bps`; each is exactly
    /// what `read_block` returns for it (I1 holds per block).
    pub fn read_blocks(&self, bps: &[BlockPtr]) -> Vec<Result<Vec<u8>, ZioError>> {
        self.read_blocks_l2(bps, true)
    }

    /// [`Pipeline::read_blocks`] that feeds the cache devices only with `feed_l2`
    /// ([`Pipeline::read_block_l2`]).
    pub fn read_blocks_l2(
        &self,
        bps: &[BlockPtr],
        feed_l2: bool,
    ) -> Vec<Result<Vec<u8>, ZioError>> {
        let mut results = Vec::with_capacity(bps.len());
        self.read_blocks_each(bps, feed_l2, &mut |i, result| {
            assert_eq!(i, results.len(), "blocks are finished in order");
            results.push(result);
        });
        results
    }

    /// [`Pipeline::read_blocks_l2`] that hands each block's result to `each` (with its index
    /// in `bps`) as soon as that block is finished, in the order of `bps`, instead of
    /// returning them all at the end: a read-ahead batch caches its first blocks while its
    /// last are still on the devices, so a reader waiting for one of the first waits for
    /// that block, not for the batch.
    pub fn read_blocks_each(
        &self,
        bps: &[BlockPtr],
        feed_l2: bool,
        each: &mut dyn FnMut(usize, Result<Vec<u8>, ZioError>),
    ) {
        self.read_batch(bps, feed_l2, false, each);
    }

    /// [`Pipeline::read_physical_l2`] of every block pointer (`send -c`), in parallel and in
    /// order as [`Pipeline::read_blocks`]; no hole may be among them.
    pub fn read_physicals(
        &self,
        bps: &[BlockPtr],
        feed_l2: bool,
    ) -> Vec<Result<Vec<u8>, ZioError>> {
        let mut results = Vec::with_capacity(bps.len());
        self.read_batch(bps, feed_l2, true, &mut |i, result| {
            assert_eq!(i, results.len(), "blocks are finished in order");
            results.push(result);
        });
        results
    }

    /// The loop of [`Pipeline::read_blocks_each`]: each block's logical bytes, or with
    /// `physical` its bytes as stored.
    fn read_batch(
        &self,
        bps: &[BlockPtr],
        feed_l2: bool,
        physical: bool,
        each: &mut dyn FnMut(usize, Result<Vec<u8>, ZioError>),
    ) {
        assert!(
            !physical || bps.iter().all(|bp| !bp.is_hole()),
            "a hole has no stored bytes"
        );
        let finish = |bp: &BlockPtr, started: PhysicalRead<'_>| match physical {
            true => self.finish_physical(bp, started, feed_l2),
            false => self.finish_block(bp, started, feed_l2),
        };
        if bps.len() < 2 || !self.reads_in_parallel() {
            for (i, bp) in bps.iter().enumerate() {
                each(
                    i,
                    match bp.is_hole() {
                        true => self.read_block_l2(bp, feed_l2),
                        false => finish(bp, self.start_physical(bp)),
                    },
                );
            }
            return;
        }
        // Up to READS_IN_FLIGHT_MAX blocks started ahead of the one being finished, topped
        // up under a plug when half are done: their columns reach the device queues
        // together, where adjacent ones become one read.
        let mut started = std::collections::VecDeque::with_capacity(READS_IN_FLIGHT_MAX);
        let mut next = 0;
        for (i, bp) in bps.iter().enumerate() {
            if started.len() <= READS_IN_FLIGHT_MAX / 2 {
                let _plug = tarn_device::plug();
                while next < bps.len() && started.len() < READS_IN_FLIGHT_MAX {
                    let ahead = &bps[next];
                    started.push_back((!ahead.is_hole()).then(|| self.start_physical(ahead)));
                    next += 1;
                }
            }
            let read = started
                .pop_front()
                .expect("the block being finished was started");
            each(
                i,
                match read {
                    None => self.read_block_l2(bp, feed_l2),
                    Some(read) => finish(bp, read),
                },
            );
        }
    }

    /// [`Pipeline::scrub_block`] (or with `resilver`, [`Pipeline::resilver_block`]) of every
    /// block pointer, in parallel as [`Pipeline::read_blocks`]. Results are in the order of
    /// `bps`; the blocks are independent (distinct allocations), so their repairs are too.
    pub fn scan_blocks(
        &self,
        bps: &[BlockPtr],
        resilver: bool,
    ) -> Vec<Result<ScrubOutcome, ZioError>> {
        self.batch(bps.len(), |i| self.scan_block(&bps[i], resilver))
    }

    /// Runs `work(0..count)` and returns the results in index order: on the caller's thread
    /// in index order for synchronous devices, else as up to [`BLOCKS_IN_FLIGHT_MAX`] jobs on
    /// the reader threads (index `i` in job `i % jobs`), all done before return.
    fn batch<T: Send>(&self, count: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
        let jobs = count.min(BLOCKS_IN_FLIGHT_MAX);
        let readers = if jobs > 1 && self.reads_in_parallel() {
            readers()
        } else {
            None
        };
        let Some(readers) = readers else {
            return (0..count).map(work).collect();
        };
        let slots: Vec<Mutex<Option<T>>> = (0..count).map(|_| Mutex::new(None)).collect();
        // A panic in a job is a broken invariant there: the scope passes it on.
        readers.scope(|scope| {
            for first in 0..jobs {
                let (work, slots) = (&work, &slots);
                scope.spawn(move |_| {
                    for i in (first..count).step_by(jobs) {
                        let result = work(i);
                        *slots[i].lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
                    }
                });
            }
        });
        let results: Vec<T> = slots
            .into_iter()
            .filter_map(|slot| slot.into_inner().unwrap_or_else(PoisonError::into_inner))
            .collect();
        assert_eq!(results.len(), count, "every block of a batch has a result");
        results
    }

    /// Reads and verifies the physical bytes (`psize` of them) of a block, healing copies that
    /// fail from the first one that verifies.
    pub fn read_physical(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        self.read_physical_l2(bp, true)
    }

    /// [`Pipeline::read_physical`]; what it read from the pool's vdevs is copied to the cache
    /// devices only with `feed_l2` (the reader's `secondarycache` admits the block). The
    /// cache devices are asked first either way: a copy they hold is verified like any.
    pub fn read_physical_l2(&self, bp: &BlockPtr, feed_l2: bool) -> Result<Vec<u8>, ZioError> {
        let started = self.start_physical(bp);
        self.finish_physical(bp, started, feed_l2)
    }

    /// Where `bp`'s first copy is kept on the cache devices, when the pool has any.
    fn l2_key(&self, bp: &BlockPtr) -> Option<L2Key> {
        if self.l2.is_empty() {
            return None;
        }
        bp.copies().next().map(|dva| L2Key {
            vdev: dva.vdev.0,
            offset: dva.offset,
            birth: bp.birth.0,
            checksum: bp.checksum,
        })
    }

    /// The first half of [`Pipeline::read_physical_l2`]: the cache devices are asked, and
    /// without a verified copy there the first copy's device reads are submitted
    /// ([`TopVdev::start_read`]).
    fn start_physical(&self, bp: &BlockPtr) -> PhysicalRead<'_> {
        let psize = u64::from(bp.psize);
        let verify = |data: &[u8]| verifies(bp, data);
        if let Some(key) = self.l2_key(bp)
            && let Some(data) = self.l2.lookup(key, psize, &verify)
        {
            return PhysicalRead::Cached(data);
        }
        let padded = psize.next_multiple_of(self.sector_size);
        let first = bp.copies().next().and_then(|dva| {
            let vdev = self.vdev(dva).ok()?;
            Some(vdev.start_read(dva.offset, padded).map(Box::new))
        });
        PhysicalRead::Started(first)
    }

    /// The second half of [`Pipeline::read_physical_l2`]: the first copy's read finished
    /// (reconstructed and healed by its vdev as needed), then the other copies in order
    /// until one verifies; the copies that failed before it are rewritten from it.
    fn finish_physical(
        &self,
        bp: &BlockPtr,
        started: PhysicalRead<'_>,
        feed_l2: bool,
    ) -> Result<Vec<u8>, ZioError> {
        let mut first = match started {
            PhysicalRead::Cached(data) => return Ok(data),
            PhysicalRead::Started(first) => first,
        };
        let psize = u64::from(bp.psize);
        let padded = psize.next_multiple_of(self.sector_size);
        let verify = |data: &[u8]| verifies(bp, data);
        let mut failed: Vec<&Dva> = Vec::new();
        let mut last_error = String::from("no copies");
        for dva in bp.copies() {
            let vdev = match self.vdev(dva) {
                Ok(vdev) => vdev,
                Err(e) => {
                    last_error = e.to_string();
                    continue;
                }
            };
            let read = match first.take() {
                Some(started) => started.and_then(|started| started.finish(&verify)),
                None => vdev.read(dva.offset, padded, &verify),
            };
            match read {
                Ok(report) => {
                    let mut data = report.data;
                    assert!(verify(&data), "I1: vdev returned data that does not verify");
                    // Heal the copies that failed before this one; a failure to heal is
                    // counted by the vdev layer and retried by the next scrub.
                    for bad in failed {
                        if let Ok(bad_vdev) = self.vdev(bad) {
                            let _ = bad_vdev.write(bad.offset, &data);
                        }
                    }
                    data.truncate(psize as usize);
                    if let Some(key) = self.l2_key(bp).filter(|_| feed_l2) {
                        self.l2.feed(key, &data);
                    }
                    return Ok(data);
                }
                Err(e) => {
                    last_error = e.to_string();
                    failed.push(dva);
                }
            }
        }
        Err(ZioError::Unrecoverable {
            dva: bp.copies().next().map_or_else(|| "-".into(), dva_name),
            birth: bp.birth,
            why: last_error,
            copies: bp.copies().copied().collect(),
        })
    }

    /// Scrubs one block: checks EVERY copy with [`TopVdev::scrub`] (every mirror side and
    /// every raidz column including parity, repaired in place by the vdev layer, which also
    /// counts checksum errors per leaf), then rewrites each copy that failed entirely from
    /// one that verified (I5). A hole is nothing to do. Fails with
    /// [`ZioError::Unrecoverable`] only when no copy verifies; then nothing is rewritten.
    pub fn scrub_block(&self, bp: &BlockPtr) -> Result<ScrubOutcome, ZioError> {
        self.scan_block(bp, false)
    }

    /// Resilvers one block: [`Pipeline::scrub_block`] through [`TopVdev::resilver`], which
    /// also writes each copy's part onto the leaves being resilvered (counted in
    /// [`ScrubOutcome::resilvered_bytes`]). Copies on vdevs with nothing to resilver are
    /// left alone.
    pub fn resilver_block(&self, bp: &BlockPtr) -> Result<ScrubOutcome, ZioError> {
        self.scan_block(bp, true)
    }

    fn scan_block(&self, bp: &BlockPtr, resilver: bool) -> Result<ScrubOutcome, ZioError> {
        let mut outcome = ScrubOutcome::default();
        if bp.is_hole() {
            return Ok(outcome);
        }
        let psize = u64::from(bp.psize);
        let padded = psize.next_multiple_of(self.sector_size);
        let verify = |data: &[u8]| verifies(bp, data);
        let mut good: Option<&Dva> = None;
        for dva in bp.copies() {
            let scrubbed = self.vdev(dva).and_then(|vdev| {
                let report = if resilver {
                    vdev.resilver(dva.offset, padded, &verify)
                } else {
                    vdev.scrub(dva.offset, padded, &verify)
                };
                report.map_err(|e| ZioError::Unrecoverable {
                    dva: dva_name(dva),
                    birth: bp.birth,
                    why: e.to_string(),
                    copies: Box::new([*dva]),
                })
            });
            match scrubbed {
                Ok(report) => {
                    outcome.repaired_bytes += report.healing.repaired_bytes;
                    outcome.resilvered_bytes += report.healing.resilvered_bytes;
                    outcome.skipped.extend(report.skipped);
                    good = good.or(Some(dva));
                }
                Err(e) => outcome.copy_errors.push((*dva, e.to_string())),
            }
        }
        let Some(good) = good else {
            let why = outcome
                .copy_errors
                .last()
                .map_or_else(|| "no copies".into(), |e| e.1.clone());
            return Err(ZioError::Unrecoverable {
                dva: bp.copies().next().map_or_else(|| "-".into(), dva_name),
                birth: bp.birth,
                why,
                copies: bp.copies().copied().collect(),
            });
        };
        if !outcome.copy_errors.is_empty() {
            self.rewrite_copies(good, padded, &verify, &mut outcome);
        }
        Ok(outcome)
    }

    /// Rewrites every copy in `outcome.copy_errors` from the copy `good` (just scrubbed).
    fn rewrite_copies(
        &self,
        good: &Dva,
        padded: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        outcome: &mut ScrubOutcome,
    ) {
        // The good copy was just verified (and repaired) by its scrub; read it once more
        // through the verifying read so that only checked bytes are written elsewhere (I5).
        let read = self
            .vdev(good)
            .ok()
            .and_then(|vdev| vdev.read(good.offset, padded, verify).ok());
        let Some(data) = read.map(|report| report.data) else {
            outcome.unrepaired = outcome.copy_errors.iter().map(|(dva, _)| *dva).collect();
            return;
        };
        assert!(verify(&data), "I5: a rewrite source must verify");
        for (dva, _) in &outcome.copy_errors {
            let written = self
                .vdev(dva)
                .map(|vdev| vdev.write(dva.offset, &data).is_ok());
            if written.unwrap_or(false) {
                outcome.repaired_bytes += data.len() as u64;
            } else {
                outcome.unrepaired.push(*dva);
            }
        }
    }
}

impl Pipeline {
    /// Corrective write of one block (`tarn receive -c`): `stored` is what a replica says
    /// the block's physical bytes are (at most `psize` of them; the rest reads as zeros).
    /// Every copy is scrubbed first ([`Pipeline::scrub_block`]: damage within a copy's
    /// parity or covered by another copy is repaired from the pool itself, I5); only when no
    /// copy verifies are `stored`'s bytes checked against the block pointer's checksum and,
    /// if they match, written over every copy at its own DVA (as self-heal does), then read
    /// back through the verifying read. Bytes that do not match are never written.
    pub fn heal_block(&self, bp: &BlockPtr, stored: &[u8]) -> HealOutcome {
        if bp.is_hole() || self.scan_block(bp, false).is_ok() {
            return HealOutcome::Intact;
        }
        let psize = bp.psize as usize;
        if stored.len() > psize {
            return HealOutcome::Mismatch;
        }
        let mut buffer = vec![0u8; (psize as u64).next_multiple_of(self.sector_size) as usize];
        buffer[..stored.len()].copy_from_slice(stored);
        if !verifies(bp, &buffer) {
            return HealOutcome::Mismatch;
        }
        let mut written = 0u64;
        for dva in bp.copies() {
            let result = self.vdev(dva).map_err(|e| e.to_string()).and_then(|vdev| {
                vdev.write(dva.offset, &buffer)
                    .map_err(|e| format!("{}: {e}", dva_name(dva)))
            });
            match result {
                Ok(_) => written += buffer.len() as u64,
                Err(why) => return HealOutcome::Unwritten(why),
            }
        }
        // What was written must now read back as the block, through the same verify as
        // any read (I1); a device that dropped the write shows here, not at the next scrub.
        match self.read_physical_l2(bp, false) {
            Ok(data) => {
                assert!(
                    data.len() == psize,
                    "I1: a verified read returns psize bytes"
                );
                HealOutcome::Healed(written)
            }
            Err(e) => HealOutcome::Unwritten(e.to_string()),
        }
    }

    /// What [`Pipeline::heal_block`] would do with `stored`, with nothing written, not even
    /// a repair from the pool's own redundancy (`receive -n -c`): `Intact` when a copy
    /// reads and verifies (within its own parity or mirror sides), `Healed` with the bytes
    /// that would be written when none does and `stored` hashes to the block pointer,
    /// `Mismatch` when it does not.
    pub fn heal_check(&self, bp: &BlockPtr, stored: &[u8]) -> HealOutcome {
        if bp.is_hole() {
            return HealOutcome::Intact;
        }
        let psize = u64::from(bp.psize);
        let good = |data: &[u8]| checksum(bp.checksum_kind, data) == bp.checksum;
        if bp
            .copies()
            .any(|dva| self.read_raw(dva, psize, &good).is_ok())
        {
            return HealOutcome::Intact;
        }
        if stored.len() > psize as usize {
            return HealOutcome::Mismatch;
        }
        let mut buffer = vec![0u8; psize.next_multiple_of(self.sector_size) as usize];
        buffer[..stored.len()].copy_from_slice(stored);
        match verifies(bp, &buffer) {
            true => HealOutcome::Healed(buffer.len() as u64 * bp.copies().count() as u64),
            false => HealOutcome::Mismatch,
        }
    }
}

/// What a corrective write of one block found and did ([`Pipeline::heal_block`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HealOutcome {
    /// A copy verified (the scrub repaired the others from it): nothing from outside was
    /// written.
    Intact,
    /// No copy verified; the given bytes did and now hold every copy (bytes written).
    Healed(u64),
    /// No copy verified and the given bytes do not hash to the block pointer's checksum:
    /// nothing was written.
    Mismatch,
    /// The given bytes verified, but a copy could not be written or did not read back.
    Unwritten(String),
}

/// What a scrub of one block found and did ([`Pipeline::scrub_block`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubOutcome {
    /// Bytes rewritten: bad mirror sides and raidz columns, and whole copies rebuilt.
    pub repaired_bytes: u64,
    /// Copies (DVAs) that did not verify, with why; each was rewritten from a good copy
    /// unless its rewrite failed too (then it is also in `unrepaired`).
    pub copy_errors: Vec<(Dva, String)>,
    /// Copies whose rewrite failed; the next scrub tries again.
    pub unrepaired: Vec<Dva>,
    /// Leaves holding part of a copy that could not be checked (offline or missing).
    pub skipped: Vec<Guid>,
    /// Bytes written to leaves being resilvered.
    pub resilvered_bytes: u64,
}

/// The top-level vdev of each copy of `bp`.
/// `vdev:offset:asize` in hex, as zdb prints DVAs.
#[must_use]
pub fn dva_name(dva: &Dva) -> String {
    format!("{}:{:x}:{:x}", dva.vdev.0, dva.offset, dva.asize)
}

#[cfg(test)]
mod tests;
