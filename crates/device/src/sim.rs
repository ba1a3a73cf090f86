//! `SimDevice`: an in-memory leaf with a seeded [`FaultPlan`], on which tests and tarn-sim run
//! the whole engine. Every fault decision is drawn from one `SeededRng`, so the same seed and
//! the same sequence of operations give the same faults.
//!
//! The device keeps two sparse images that share unchanged chunks (copy on write):
//!
//! ```text
//!   write_at ──► current image ◄── read_at        pending: writes and discards
//!                     │                           acknowledged since the last flush,
//!            flush:   │ durable := current        as stored (after bit rot and
//!                     ▼                           misdirection), in order
//!               durable image
//!            crash:   current := durable + each pending op persisted whole,
//!                     torn to a sector prefix, or dropped (FaultPlan rates)
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tarn_base::{ManualClock, SeededRng};

use crate::{Device, DeviceError, check_range};

/// Sector size of a simulated device: the unit of torn writes, misdirection and bit rot.
pub const SIM_SECTOR_SIZE: u64 = 512;
/// Denominator of every rate in a [`FaultPlan`].
pub const PER_MILLION: u32 = 1_000_000;
/// Bytes per chunk of the sparse images; unwritten chunks take no memory and read as zeros.
const CHUNK_SIZE: u64 = 64 << 10;
/// How many names a device can have over its life ([`SimDevice::rename`] may be called one
/// time less than this). Names are kept so that `path()` can hand out `&str` without a lock.
pub const SIM_NAMES_MAX: usize = 64;

const _: () = assert!(
    CHUNK_SIZE.is_multiple_of(SIM_SECTOR_SIZE),
    "a sector never spans chunks"
);

/// Which faults a [`SimDevice`] injects, and how often. Rates are per million operations of
/// the kind named (values above [`PER_MILLION`] act as always). The default injects nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Seed of the device's generator; every fault decision is drawn from it.
    pub seed: u64,
    /// Per million reads: the read fails with EIO (the data stays intact).
    pub read_eio: u32,
    /// Per million writes: the write fails with EIO and changes nothing.
    pub write_eio: u32,
    /// Per million flushes: the flush fails with EIO; pending writes stay pending (volatile).
    pub flush_eio: u32,
    /// Per million writes: the write is acknowledged but never applied; reads keep
    /// returning the old data.
    pub lost_write: u32,
    /// Per million writes: the data lands at another sector-aligned offset of the device,
    /// and the intended range keeps its old data.
    pub misdirected_write: u32,
    /// Per million writes: the stored copy has one random bit flipped.
    pub bitrot_on_write: u32,
    /// Per million pending writes at a crash: only a random prefix of its sectors persists.
    pub torn_on_crash: u32,
    /// Per million pending writes or discards at a crash: it is dropped entirely.
    pub drop_on_crash: u32,
    /// Fixed latency of every access, in nanoseconds.
    pub latency_ns: u64,
    /// Extra latency drawn uniformly from `0..=latency_jitter_ns` per access.
    pub latency_jitter_ns: u64,
}

impl FaultPlan {
    /// A plan with `seed` and no faults; set the rates with struct update syntax.
    #[must_use]
    pub fn seeded(seed: u64) -> FaultPlan {
        FaultPlan {
            seed,
            ..FaultPlan::default()
        }
    }
}

/// Counters of a [`SimDevice`], for tests that check a fault was actually exercised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Reads attempted while present (including failed ones).
    pub reads: u64,
    /// Writes attempted while present (including failed and lost ones).
    pub writes: u64,
    /// Flushes attempted while present.
    pub flushes: u64,
    /// Discards attempted while present.
    pub discards: u64,
    /// Bytes returned by successful reads.
    pub bytes_read: u64,
    /// Bytes acknowledged by successful writes (including lost ones).
    pub bytes_written: u64,
    /// Reads failed with an injected EIO.
    pub injected_read_eio: u64,
    /// Writes failed with an injected EIO.
    pub injected_write_eio: u64,
    /// Flushes failed with an injected EIO.
    pub injected_flush_eio: u64,
    /// Writes acknowledged but dropped.
    pub lost_writes: u64,
    /// Writes stored at the wrong offset.
    pub misdirected_writes: u64,
    /// Writes stored with one bit flipped.
    pub bitrot_writes: u64,
    /// Accesses refused because the device was gone.
    pub gone_refusals: u64,
    /// Calls to [`SimDevice::crash`].
    pub crashes: u64,
    /// Pending writes that a crash persisted only partly.
    pub torn_on_crash: u64,
    /// Pending writes or discards that a crash dropped.
    pub dropped_on_crash: u64,
    /// Sectors rotted at rest by [`SimDevice::rot`] or [`SimDevice::rot_random`].
    pub rotted_sectors: u64,
    /// Latency injected, in nanoseconds.
    pub latency_ns_total: u64,
}

/// A sparse byte image: chunk index to chunk, shared between images until written.
#[derive(Clone, Default)]
struct Image {
    chunks: BTreeMap<u64, Arc<Vec<u8>>>,
}

/// Splits `[offset, offset + len)` into pieces that each stay inside one chunk:
/// `(chunk index, offset in chunk, offset in the caller's buffer, length)`.
fn pieces(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    let mut done = 0usize;
    std::iter::from_fn(move || {
        if done >= len {
            return None;
        }
        let at = offset + done as u64;
        let in_chunk = usize::try_from(at % CHUNK_SIZE).expect("chunk offset fits usize");
        let piece = (CHUNK_SIZE as usize - in_chunk).min(len - done);
        let item = (at / CHUNK_SIZE, in_chunk, done, piece);
        done += piece;
        Some(item)
    })
}

impl Image {
    fn from_bytes(bytes: &[u8]) -> Image {
        let mut image = Image::default();
        for (index, chunk) in bytes.chunks(CHUNK_SIZE as usize).enumerate() {
            if chunk.iter().any(|&b| b != 0) {
                let mut stored = vec![0u8; CHUNK_SIZE as usize];
                stored[..chunk.len()].copy_from_slice(chunk);
                image.chunks.insert(index as u64, Arc::new(stored));
            }
        }
        image
    }

    fn chunk_mut(&mut self, index: u64) -> &mut Vec<u8> {
        let chunk = self
            .chunks
            .entry(index)
            .or_insert_with(|| Arc::new(vec![0u8; CHUNK_SIZE as usize]));
        Arc::make_mut(chunk)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) {
        for (index, in_chunk, at, len) in pieces(offset, buf.len()) {
            let target = &mut buf[at..at + len];
            match self.chunks.get(&index) {
                Some(chunk) => target.copy_from_slice(&chunk[in_chunk..in_chunk + len]),
                None => target.fill(0),
            }
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        for (index, in_chunk, at, len) in pieces(offset, data.len()) {
            self.chunk_mut(index)[in_chunk..in_chunk + len].copy_from_slice(&data[at..at + len]);
        }
    }

    /// Zeroes a range, giving whole chunks back to the allocator. Visits only chunks that
    /// exist, so discarding a whole huge device is cheap.
    fn zero(&mut self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let end = offset + len;
        let (first, last) = (offset / CHUNK_SIZE, (end - 1) / CHUNK_SIZE);
        let present: Vec<u64> = self
            .chunks
            .range(first..=last)
            .map(|(&index, _)| index)
            .collect();
        for index in present {
            let chunk_start = index * CHUNK_SIZE;
            let low = offset.max(chunk_start) - chunk_start;
            let high = end.min(chunk_start + CHUNK_SIZE) - chunk_start;
            if low == 0 && high == CHUNK_SIZE {
                self.chunks.remove(&index);
            } else {
                let range = usize::try_from(low).expect("chunk offset fits usize")
                    ..usize::try_from(high).expect("chunk offset fits usize");
                self.chunk_mut(index)[range].fill(0);
            }
        }
    }

    fn flip_bit(&mut self, bit: u64) {
        let byte = bit / 8;
        let in_chunk = usize::try_from(byte % CHUNK_SIZE).expect("chunk offset fits usize");
        self.chunk_mut(byte / CHUNK_SIZE)[in_chunk] ^= 1 << (bit % 8);
    }

    fn resident_bytes(&self) -> u64 {
        self.chunks.len() as u64 * CHUNK_SIZE
    }
}

/// An operation acknowledged since the last flush, as it would reach the media.
enum PendingOp {
    Write { offset: u64, data: Vec<u8> },
    Discard { offset: u64, len: u64 },
}

struct SimState {
    plan: FaultPlan,
    rng: SeededRng,
    current: Image,
    durable: Image,
    pending: Vec<PendingOp>,
    stats: SimStats,
    gone: bool,
    /// Every range a fault touched, for [`SimDevice::scarred`].
    scars: Vec<(u64, u64)>,
}

impl SimState {
    /// One fault decision. Always draws, so that enabling one fault does not shift the
    /// decisions of the others.
    fn roll(&mut self, rate: u32) -> bool {
        self.rng.below(u64::from(PER_MILLION)) < u64::from(rate)
    }

    fn latency(&mut self) -> u64 {
        let jitter = match self.plan.latency_jitter_ns {
            0 => 0,
            max => self.rng.below(max.saturating_add(1)),
        };
        let total = self.plan.latency_ns.saturating_add(jitter);
        self.stats.latency_ns_total = self.stats.latency_ns_total.saturating_add(total);
        total
    }

    /// Remembers that a fault touched `[offset, offset + len)`.
    fn scar(&mut self, offset: u64, len: u64) {
        if len > 0 {
            self.scars.push((offset, len));
        }
    }

    /// Refuses an access of `[offset, offset + len)` while the device is gone; the range
    /// then misses what the access would have read or written.
    fn refuse_if_gone(&mut self, offset: u64, len: u64) -> Result<(), DeviceError> {
        if self.gone {
            self.stats.gone_refusals += 1;
            self.scar(offset, len);
            return Err(DeviceError::Gone);
        }
        Ok(())
    }

    /// A sector-aligned offset for `len` bytes other than `offset`, if the device has one.
    fn misdirect(&mut self, offset: u64, len: u64, size: u64) -> Option<u64> {
        let slots = (size - len) / SIM_SECTOR_SIZE + 1;
        let pick = self.rng.below(slots);
        [pick, (pick + 1) % slots]
            .into_iter()
            .map(|slot| slot * SIM_SECTOR_SIZE)
            .find(|&target| target != offset)
    }

    /// Flips one random bit inside `[offset, offset + len)` in both images.
    fn rot_within(&mut self, offset: u64, len: u64) {
        assert!(
            len > 0 && len <= SIM_SECTOR_SIZE,
            "rot_within: {len} bytes is not one sector"
        );
        let bit = offset * 8 + self.rng.below(len * 8);
        self.durable.flip_bit(bit);
        self.current.flip_bit(bit);
        self.stats.rotted_sectors += 1;
        self.scar(offset, len);
    }
}

/// An in-memory leaf device with seeded fault injection. See the module docs for the model
/// and [`FaultPlan`] for the faults.
pub struct SimDevice {
    size: u64,
    state: Mutex<SimState>,
    names: [OnceLock<Box<str>>; SIM_NAMES_MAX],
    name_index: AtomicUsize,
    clock: Option<Arc<ManualClock>>,
}

impl std::fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDevice")
            .field("name", &self.path())
            .field("size", &self.size)
            .finish()
    }
}

fn injected_eio(offset: u64) -> DeviceError {
    DeviceError::Io {
        offset,
        source: std::io::Error::from_raw_os_error(libc::EIO),
    }
}

impl SimDevice {
    fn build(
        name: &str,
        size: u64,
        image: Image,
        plan: FaultPlan,
        clock: Option<Arc<ManualClock>>,
    ) -> Arc<SimDevice> {
        let names: [OnceLock<Box<str>>; SIM_NAMES_MAX] = std::array::from_fn(|_| OnceLock::new());
        names[0]
            .set(name.into())
            .expect("a fresh name slot is empty");
        let state = SimState {
            rng: SeededRng::new(plan.seed),
            plan,
            current: image.clone(),
            durable: image,
            pending: Vec::new(),
            stats: SimStats::default(),
            gone: false,
            scars: Vec::new(),
        };
        Arc::new(SimDevice {
            size,
            state: Mutex::new(state),
            names,
            name_index: AtomicUsize::new(0),
            clock,
        })
    }

    /// A zero-filled device of `size` bytes; latency, if any, is real sleeping.
    #[must_use]
    pub fn new(name: &str, size: u64, plan: FaultPlan) -> Arc<SimDevice> {
        SimDevice::build(name, size, Image::default(), plan, None)
    }

    /// Like [`SimDevice::new`], but latency advances `clock` instead of sleeping.
    #[must_use]
    pub fn with_clock(
        name: &str,
        size: u64,
        plan: FaultPlan,
        clock: Arc<ManualClock>,
    ) -> Arc<SimDevice> {
        SimDevice::build(name, size, Image::default(), plan, Some(clock))
    }

    /// A device whose durable contents are `bytes` (for example a saved [`SimDevice::image`]).
    #[must_use]
    pub fn from_image(name: &str, bytes: &[u8], plan: FaultPlan) -> Arc<SimDevice> {
        SimDevice::build(
            name,
            bytes.len() as u64,
            Image::from_bytes(bytes),
            plan,
            None,
        )
    }

    fn state(&self) -> MutexGuard<'_, SimState> {
        self.state
            .lock()
            .expect("SimDevice state lock poisoned: a thread panicked inside it")
    }

    /// Lets `ns` of latency pass, outside the state lock.
    fn wait(&self, ns: u64) {
        match &self.clock {
            Some(clock) => clock.advance_ns(ns),
            None if ns > 0 => std::thread::sleep(Duration::from_nanos(ns)),
            None => {}
        }
    }

    /// Simulates power loss: each write or discard acknowledged since the last flush
    /// persists whole, is torn to a prefix of its sectors, or is dropped, as the plan's crash
    /// rates decide; everything else pending is gone. Afterwards reads see only what is
    /// durable. A gone device stays gone.
    pub fn crash(&self) {
        let mut state = self.state();
        let state = &mut *state;
        state.stats.crashes += 1;
        let mut image = state.durable.clone();
        for op in std::mem::take(&mut state.pending) {
            let torn = state.roll(state.plan.torn_on_crash);
            let dropped = state.roll(state.plan.drop_on_crash);
            match op {
                PendingOp::Write { offset, data } if torn => {
                    let first_sector = offset - offset % SIM_SECTOR_SIZE;
                    let end = offset + data.len() as u64;
                    let sectors = (end - first_sector).div_ceil(SIM_SECTOR_SIZE);
                    let kept = state.rng.below(sectors);
                    let cut = if kept == 0 {
                        offset
                    } else {
                        first_sector + kept * SIM_SECTOR_SIZE
                    };
                    assert!(cut < end, "a torn write keeps less than all of itself");
                    let len = usize::try_from(cut - offset).expect("prefix fits usize");
                    image.write(offset, &data[..len]);
                    state.stats.torn_on_crash += 1;
                    state.scar(offset, data.len() as u64);
                }
                PendingOp::Write { offset, ref data } if dropped => {
                    state.stats.dropped_on_crash += 1;
                    state.scar(offset, data.len() as u64);
                }
                PendingOp::Discard { offset, len } if dropped => {
                    state.stats.dropped_on_crash += 1;
                    state.scar(offset, len);
                }
                PendingOp::Write { offset, data } => image.write(offset, &data),
                PendingOp::Discard { offset, len } => image.zero(offset, len),
            }
        }
        state.current = image.clone();
        state.durable = image;
    }

    /// Makes the device vanish (`true`: every access fails with [`DeviceError::Gone`]) or
    /// return (`false`). Contents, pending writes included, are kept; call
    /// [`SimDevice::crash`] as well to model a disk that lost power when it was pulled.
    pub fn set_gone(&self, gone: bool) {
        self.state().gone = gone;
    }

    /// True while the device is gone.
    #[must_use]
    pub fn is_gone(&self) -> bool {
        self.state().gone
    }

    /// Bit rot at rest: flips one random bit in every sector that `[offset, offset + len)`
    /// touches (only inside the range), in both the durable and the current contents.
    pub fn rot(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(offset, len, self.size)?;
        let mut state = self.state();
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let sector_end = (at - at % SIM_SECTOR_SIZE + SIM_SECTOR_SIZE).min(end);
            state.rot_within(at, sector_end - at);
            at = sector_end;
        }
        Ok(())
    }

    /// Rots `count` random sectors among those that hold durable data (never in regions
    /// that were never written, where rot would be invisible). Returns the sectors' offsets.
    pub fn rot_random(&self, count: usize) -> Vec<u64> {
        let mut state = self.state();
        let chunks: Vec<u64> = state.durable.chunks.keys().copied().collect();
        let mut rotted = Vec::with_capacity(count);
        if chunks.is_empty() {
            return rotted;
        }
        for _ in 0..count {
            let chunk = chunks[usize::try_from(state.rng.below(chunks.len() as u64))
                .expect("an index below a usize length fits usize")];
            let chunk_start = chunk * CHUNK_SIZE;
            let sectors = CHUNK_SIZE
                .min(self.size - chunk_start)
                .div_ceil(SIM_SECTOR_SIZE);
            let sector = chunk_start + state.rng.below(sectors) * SIM_SECTOR_SIZE;
            let len = SIM_SECTOR_SIZE.min(self.size - sector);
            state.rot_within(sector, len);
            rotted.push(sector);
        }
        rotted
    }

    /// Replaces the fault rates mid-run (for example all zeros before a verification
    /// phase). The generator continues its stream unless `plan.seed` differs from the
    /// current seed, in which case it is reseeded.
    pub fn set_plan(&self, plan: FaultPlan) {
        let mut state = self.state();
        if plan.seed != state.plan.seed {
            state.rng = SeededRng::new(plan.seed);
        }
        state.plan = plan;
    }

    /// The fault plan in force.
    #[must_use]
    pub fn plan(&self) -> FaultPlan {
        self.state().plan.clone()
    }

    /// The durable contents, as a crash right now followed by perfect persistence of nothing
    /// would leave them. Allocates the full device size: meant for small devices.
    #[must_use]
    pub fn image(&self) -> Vec<u8> {
        let len = usize::try_from(self.size).expect("SimDevice::image: device fits in memory");
        let mut bytes = vec![0u8; len];
        self.state().durable.read(0, &mut bytes);
        bytes
    }

    /// Reads the durable contents of a range, bypassing faults, latency and counters.
    pub fn read_durable_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size)?;
        self.state().durable.read(offset, buf);
        Ok(())
    }

    /// Whether a fault ever touched any byte of `[offset, offset + len)`: an injected
    /// EIO, a lost, misdirected (either end) or rotten write, a write torn or dropped by a
    /// crash, an access refused while gone, or rot at rest. A block no fault touched on
    /// enough of its devices must never be reported lost (tarn-sim checks this).
    #[must_use]
    pub fn scarred(&self, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        self.state()
            .scars
            .iter()
            .any(|&(at, n)| at < end && offset < at.saturating_add(n))
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> SimStats {
        self.state().stats
    }

    /// Writes and discards acknowledged since the last successful flush.
    #[must_use]
    pub fn pending_ops(&self) -> usize {
        self.state().pending.len()
    }

    /// Memory held by the contents (current and durable chunks, shared ones counted once
    /// per image), to check that a huge device stays sparse.
    #[must_use]
    pub fn resident_bytes(&self) -> u64 {
        let state = self.state();
        state.current.resident_bytes() + state.durable.resident_bytes()
    }

    /// Gives the device a new name, as when a disk returns under another path. Panics after
    /// [`SIM_NAMES_MAX`]` - 1` renames (a bound on a test harness, not on input).
    pub fn rename(&self, new_name: &str) {
        // The state lock serializes renames; readers of `path` need no lock.
        let _state = self.state();
        let next = self.name_index.load(Ordering::Acquire) + 1;
        assert!(
            next < SIM_NAMES_MAX,
            "SimDevice renamed more than {} times",
            SIM_NAMES_MAX - 1
        );
        self.names[next]
            .set(new_name.into())
            .expect("renames are serialized by the state lock");
        self.name_index.store(next, Ordering::Release);
    }
}

impl Device for SimDevice {
    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn probe_gone(&self) -> bool {
        self.state().gone
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size)?;
        let mut state = self.state();
        state.refuse_if_gone(offset, buf.len() as u64)?;
        state.stats.reads += 1;
        let rate = state.plan.read_eio;
        let eio = state.roll(rate);
        let latency = state.latency();
        let result = if eio {
            state.stats.injected_read_eio += 1;
            state.scar(offset, buf.len() as u64);
            Err(injected_eio(offset))
        } else {
            state.current.read(offset, buf);
            state.stats.bytes_read += buf.len() as u64;
            Ok(())
        };
        drop(state);
        self.wait(latency);
        result
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_range(offset, data.len() as u64, self.size)?;
        let mut state = self.state();
        let state_ref = &mut *state;
        state_ref.refuse_if_gone(offset, data.len() as u64)?;
        state_ref.stats.writes += 1;
        let plan = state_ref.plan.clone();
        let eio = state_ref.roll(plan.write_eio);
        let lost = state_ref.roll(plan.lost_write);
        let misdirected = state_ref.roll(plan.misdirected_write);
        let rotten = state_ref.roll(plan.bitrot_on_write);
        let latency = state_ref.latency();
        if eio || lost || misdirected || rotten {
            state_ref.scar(offset, data.len() as u64);
        }
        let result = if eio {
            state_ref.stats.injected_write_eio += 1;
            Err(injected_eio(offset))
        } else if lost || data.is_empty() {
            state_ref.stats.lost_writes += u64::from(lost);
            state_ref.stats.bytes_written += data.len() as u64;
            Ok(())
        } else {
            let len = data.len() as u64;
            let mut target = offset;
            if misdirected && let Some(elsewhere) = state_ref.misdirect(offset, len, self.size) {
                target = elsewhere;
                state_ref.stats.misdirected_writes += 1;
                state_ref.scar(target, len);
            }
            let mut stored = data.to_vec();
            if rotten {
                let bit = state_ref.rng.below(len * 8);
                stored[usize::try_from(bit / 8).expect("bit of a slice fits usize")] ^=
                    1 << (bit % 8);
                state_ref.stats.bitrot_writes += 1;
            }
            state_ref.current.write(target, &stored);
            state_ref.pending.push(PendingOp::Write {
                offset: target,
                data: stored,
            });
            state_ref.stats.bytes_written += len;
            Ok(())
        };
        drop(state);
        self.wait(latency);
        result
    }

    fn flush(&self) -> Result<(), DeviceError> {
        let mut state = self.state();
        // Pending writes stay pending: a crash decides what they become.
        state.refuse_if_gone(0, 0)?;
        state.stats.flushes += 1;
        let rate = state.plan.flush_eio;
        let eio = state.roll(rate);
        let latency = state.latency();
        let result = if eio {
            state.stats.injected_flush_eio += 1;
            Err(injected_eio(0))
        } else {
            state.durable = state.current.clone();
            state.pending.clear();
            Ok(())
        };
        drop(state);
        self.wait(latency);
        result
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(offset, len, self.size)?;
        let mut state = self.state();
        state.refuse_if_gone(offset, len)?;
        state.stats.discards += 1;
        let latency = state.latency();
        if len > 0 {
            // Zeroing (rather than keeping old bytes) makes a wrong discard of live data
            // visible to checksums at once.
            state.current.zero(offset, len);
            state.pending.push(PendingOp::Discard { offset, len });
        }
        drop(state);
        self.wait(latency);
        Ok(())
    }

    fn path(&self) -> &str {
        let index = self.name_index.load(Ordering::Acquire);
        self.names[index]
            .get()
            .expect("a name slot is set before its index is published")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn pattern(len: usize, salt: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(37).wrapping_add(salt) | 1)
            .collect()
    }

    fn read(device: &SimDevice, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        device.read_at(offset, &mut buf).unwrap();
        buf
    }

    fn bits_different(a: &[u8], b: &[u8]) -> u32 {
        a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
    }

    fn noisy_plan(seed: u64) -> FaultPlan {
        FaultPlan {
            seed,
            read_eio: 50_000,
            write_eio: 50_000,
            flush_eio: 50_000,
            lost_write: 50_000,
            misdirected_write: 50_000,
            bitrot_on_write: 50_000,
            torn_on_crash: 300_000,
            drop_on_crash: 300_000,
            latency_ns: 100,
            latency_jitter_ns: 1000,
        }
    }

    /// A fixed script of operations; returns every outcome and everything read.
    fn run_script(device: &SimDevice) -> Vec<String> {
        let mut log = Vec::new();
        for round in 0..40u64 {
            let offset = (round * 7919 * 512) % (4 * MIB - 8192);
            let write = device.write_at(offset, &pattern(4096 + 512 * (round as usize % 5), 3));
            log.push(format!("w{round}:{:?}", write.is_ok()));
            let mut buf = vec![0u8; 2048];
            match device.read_at(offset, &mut buf) {
                Ok(()) => log.push(format!("r{round}:{buf:?}")),
                Err(e) => log.push(format!("r{round}:{e}")),
            }
            if round % 7 == 6 {
                log.push(format!("f{round}:{:?}", device.flush().is_ok()));
            }
            if round % 13 == 12 {
                device.crash();
                log.push(format!("c{round}"));
            }
        }
        log.push(format!("{:?}", device.rot_random(3)));
        log
    }

    #[test]
    fn same_seed_same_faults() {
        // Goal: the whole fault stream is a function of (seed, operations). Method: run one
        // script on two devices with the same noisy plan and compare every outcome, counter,
        // clock and image; a different seed must diverge.
        let run = |seed| {
            let clock = Arc::new(ManualClock::new(0));
            let device = SimDevice::with_clock("d", 4 * MIB, noisy_plan(seed), clock.clone());
            let log = run_script(&device);
            (
                log,
                device.stats(),
                device.image(),
                tarn_base::Clock::monotonic_ns(&*clock),
            )
        };
        let first = run(7);
        assert_eq!(first, run(7));
        let stats = first.1;
        assert!(
            stats.injected_read_eio > 0 && stats.injected_write_eio > 0,
            "{stats:?}"
        );
        assert!(stats.lost_writes + stats.misdirected_writes + stats.bitrot_writes > 0);
        assert_eq!(stats.latency_ns_total, first.3);
        assert_ne!(first, run(8));
    }

    #[test]
    fn crash_drops_unflushed_and_keeps_flushed() {
        // Goal: a crash that drops every pending write leaves exactly the flushed state.
        // Method: flush A, then overwrite part of it and write B without flushing, crash,
        // read back.
        let plan = FaultPlan {
            drop_on_crash: PER_MILLION,
            ..FaultPlan::seeded(1)
        };
        let device = SimDevice::new("d", MIB, plan);
        let a = pattern(8192, 1);
        device.write_at(0, &a).unwrap();
        device.flush().unwrap();
        device.write_at(4096, &pattern(4096, 2)).unwrap();
        device.write_at(65536, &pattern(4096, 3)).unwrap();
        assert_eq!(device.pending_ops(), 2);
        device.crash();
        assert_eq!(device.pending_ops(), 0);
        assert_eq!(read(&device, 0, 8192), a);
        assert_eq!(read(&device, 65536, 4096), vec![0u8; 4096]);
        assert_eq!(device.image()[..8192], a[..]);
    }

    #[test]
    fn crash_persists_pending_writes_without_crash_faults() {
        // Goal: with zero crash rates, pending writes survive a crash whole and in order.
        let device = SimDevice::new("d", MIB, FaultPlan::seeded(1));
        device.write_at(0, &pattern(4096, 1)).unwrap();
        device.write_at(1024, &pattern(1024, 2)).unwrap();
        device.discard(65536, 65536).unwrap();
        let expected = read(&device, 0, 4096);
        device.crash();
        assert_eq!(read(&device, 0, 4096), expected);
        assert_eq!(
            device.stats().torn_on_crash + device.stats().dropped_on_crash,
            0
        );
    }

    #[test]
    fn torn_writes_tear_at_sector_boundaries() {
        // Goal: a torn write persists a strict prefix that ends on a sector boundary (or
        // nothing). Method: many seeds, one unaligned pending write each, crash, inspect.
        let (offset, len) = (700u64, 3000usize);
        let mut prefixes = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let plan = FaultPlan {
                torn_on_crash: PER_MILLION,
                ..FaultPlan::seeded(seed)
            };
            let device = SimDevice::new("d", MIB, plan);
            device.write_at(offset, &vec![0xFF; len]).unwrap();
            device.crash();
            assert_eq!(device.stats().torn_on_crash, 1);
            let back = read(&device, offset, len);
            let kept = back.iter().take_while(|&&b| b == 0xFF).count();
            assert!(
                back[kept..].iter().all(|&b| b == 0),
                "seed {seed}: not a prefix"
            );
            assert!(kept < len, "seed {seed}: a torn write kept everything");
            let end = offset + kept as u64;
            assert!(
                kept == 0 || end.is_multiple_of(SIM_SECTOR_SIZE),
                "seed {seed}: cut at {end}"
            );
            prefixes.insert(kept);
        }
        // 3000 bytes from offset 700 touch 7 sectors: cuts at 0 and six boundaries.
        assert!(prefixes.len() > 3, "{prefixes:?}");
    }

    #[test]
    fn drop_on_crash_drops_pending_ops() {
        // Goal: with drop certain, nothing pending survives, a discard included.
        let plan = FaultPlan {
            drop_on_crash: PER_MILLION,
            ..FaultPlan::seeded(3)
        };
        let device = SimDevice::new("d", MIB, plan);
        device.write_at(0, &pattern(65536, 1)).unwrap();
        device.flush().unwrap();
        device.discard(0, 65536).unwrap();
        device.write_at(65536, &pattern(512, 2)).unwrap();
        device.crash();
        assert_eq!(device.stats().dropped_on_crash, 2);
        assert_eq!(read(&device, 0, 65536), pattern(65536, 1));
        assert_eq!(read(&device, 65536, 512), vec![0u8; 512]);
    }

    #[test]
    fn lost_write_returns_old_data() {
        // Goal: a lost write is acknowledged, yet reads (and durable state) keep old data.
        let device = SimDevice::new("d", MIB, FaultPlan::seeded(4));
        let old = pattern(4096, 1);
        device.write_at(8192, &old).unwrap();
        device.set_plan(FaultPlan {
            lost_write: PER_MILLION,
            ..FaultPlan::seeded(4)
        });
        device.write_at(8192, &pattern(4096, 2)).unwrap();
        assert_eq!(read(&device, 8192, 4096), old);
        device.flush().unwrap();
        assert_eq!(read(&device, 8192, 4096), old);
        assert_eq!(device.stats().lost_writes, 1);
    }

    #[test]
    fn misdirected_write_lands_elsewhere() {
        // Goal: a misdirected write leaves its target untouched and appears, whole, at
        // another sector-aligned offset.
        let plan = FaultPlan {
            misdirected_write: PER_MILLION,
            ..FaultPlan::seeded(5)
        };
        let device = SimDevice::new("d", MIB, plan);
        let data = pattern(4096, 9);
        device.write_at(8192, &data).unwrap();
        assert_eq!(read(&device, 8192, 4096), vec![0u8; 4096]);
        assert_eq!(device.stats().misdirected_writes, 1);
        device.flush().unwrap();
        let image = device.image();
        let found: Vec<usize> = (0..image.len() - 4096)
            .step_by(SIM_SECTOR_SIZE as usize)
            .filter(|&at| image[at..at + 4096] == data[..])
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_ne!(found[0], 8192);
    }

    #[test]
    fn bitrot_on_write_flips_one_bit() {
        // Goal: a rotten write stores the data with exactly one bit flipped.
        let plan = FaultPlan {
            bitrot_on_write: PER_MILLION,
            ..FaultPlan::seeded(6)
        };
        let device = SimDevice::new("d", MIB, plan);
        let data = pattern(4096, 1);
        device.write_at(0, &data).unwrap();
        assert_eq!(bits_different(&read(&device, 0, 4096), &data), 1);
        assert_eq!(device.stats().bitrot_writes, 1);
    }

    #[test]
    fn rot_flips_one_bit_per_sector_inside_the_range() {
        // Goal: rot at rest flips one bit per touched sector, only inside the range, in the
        // current and the durable contents alike.
        let device = SimDevice::new("d", MIB, FaultPlan::seeded(7));
        let data = pattern(4096, 1);
        device.write_at(0, &data).unwrap();
        device.flush().unwrap();
        device.rot(512, 2048).unwrap();
        let back = read(&device, 0, 4096);
        for sector in 0..8 {
            let range = sector * 512..(sector + 1) * 512;
            let flips = bits_different(&back[range.clone()], &data[range]);
            assert_eq!(
                flips,
                u32::from((1..5).contains(&sector)),
                "sector {sector}"
            );
        }
        let mut durable = vec![0u8; 4096];
        device.read_durable_at(0, &mut durable).unwrap();
        assert_eq!(durable, back);
        device.rot(100, 50).unwrap();
        let again = read(&device, 0, 4096);
        assert_eq!(bits_different(&again[100..150], &back[100..150]), 1);
        assert_eq!(again[..100], back[..100]);
        assert_eq!(again[150..], back[150..]);
        assert_eq!(device.stats().rotted_sectors, 5);
        assert!(matches!(
            device.rot(MIB - 10, 20),
            Err(DeviceError::OutOfRange { .. })
        ));
    }

    #[test]
    fn rot_random_hits_written_sectors() {
        // Goal: random rot lands only where durable data lives, and does nothing on an
        // empty device.
        let device = SimDevice::new("d", 64 * MIB, FaultPlan::seeded(8));
        assert!(device.rot_random(4).is_empty());
        device.write_at(10 * MIB, &pattern(65536, 1)).unwrap();
        device.flush().unwrap();
        let rotted = device.rot_random(4);
        assert_eq!(rotted.len(), 4);
        for offset in rotted {
            assert!((10 * MIB..10 * MIB + 65536).contains(&offset), "{offset}");
            assert_eq!(offset % SIM_SECTOR_SIZE, 0);
        }
        assert_eq!(device.stats().rotted_sectors, 4);
    }

    #[test]
    fn injected_eio_fails_the_access_only() {
        // Goal: read EIO keeps data intact, write EIO changes nothing, flush EIO leaves
        // writes pending (so a crash loses them).
        let device = SimDevice::new("d", MIB, FaultPlan::seeded(9));
        let data = pattern(4096, 1);
        device.write_at(0, &data).unwrap();
        device.flush().unwrap();
        let always = FaultPlan {
            read_eio: PER_MILLION,
            write_eio: PER_MILLION,
            flush_eio: PER_MILLION,
            ..FaultPlan::seeded(9)
        };
        device.set_plan(always);
        let mut buf = vec![0u8; 4096];
        assert!(matches!(
            device.read_at(0, &mut buf),
            Err(DeviceError::Io { offset: 0, .. })
        ));
        assert!(device.write_at(0, &pattern(4096, 2)).is_err());
        device.set_plan(FaultPlan {
            write_eio: 0,
            ..device.plan()
        });
        device.write_at(8192, &data).unwrap();
        assert!(device.flush().is_err());
        assert_eq!(device.pending_ops(), 1);
        device.set_plan(FaultPlan {
            drop_on_crash: PER_MILLION,
            ..FaultPlan::seeded(9)
        });
        assert_eq!(read(&device, 0, 4096), data);
        device.crash();
        assert_eq!(read(&device, 8192, 4096), vec![0u8; 4096]);
        let stats = device.stats();
        assert_eq!((stats.injected_read_eio, stats.injected_write_eio), (1, 1));
        assert_eq!(stats.injected_flush_eio, 1);
    }

    #[test]
    fn every_fault_scars_exactly_the_range_it_touched() {
        // Goal: the ranges tarn-sim blames a loss on are the ones faults touched, no more.
        let device = SimDevice::new("d", MIB, FaultPlan::seeded(3));
        device.write_at(0, &pattern(65536, 1)).unwrap();
        device.flush().unwrap();
        assert!(!device.scarred(0, MIB), "clean I/O scars nothing");
        device.set_plan(FaultPlan {
            read_eio: PER_MILLION,
            ..FaultPlan::seeded(3)
        });
        let mut buf = vec![0u8; 1024];
        assert!(device.read_at(4096, &mut buf).is_err());
        assert!(device.scarred(5119, 1) && !device.scarred(5120, 4096));
        device.set_plan(FaultPlan {
            lost_write: PER_MILLION,
            ..FaultPlan::seeded(3)
        });
        device.write_at(16384, &pattern(512, 2)).unwrap();
        assert!(device.scarred(16384, 1) && !device.scarred(16896, 512));
        device.set_plan(FaultPlan {
            drop_on_crash: PER_MILLION,
            ..FaultPlan::seeded(3)
        });
        device.write_at(32768, &pattern(512, 3)).unwrap();
        assert!(!device.scarred(32768, 512), "pending is not yet damage");
        device.crash();
        assert!(device.scarred(32768, 512));
        device.rot(40960, 1).unwrap();
        assert!(device.scarred(40960, 1) && !device.scarred(41472, 512));
        device.set_gone(true);
        assert!(device.write_at(49152, &pattern(512, 4)).is_err());
        assert!(device.scarred(49152, 512) && !device.scarred(49664, 1024));
    }

    #[test]
    fn gone_device_refuses_everything_until_it_returns_renamed() {
        // Goal: a pulled device fails every access with Gone, keeps its contents, and can
        // come back under another name.
        let device = SimDevice::new("/dev/sim0", MIB, FaultPlan::seeded(10));
        device.write_at(0, &pattern(512, 1)).unwrap();
        device.set_gone(true);
        assert!(device.is_gone());
        let mut buf = [0u8; 512];
        assert!(matches!(
            device.read_at(0, &mut buf),
            Err(DeviceError::Gone)
        ));
        assert!(matches!(device.write_at(0, &buf), Err(DeviceError::Gone)));
        assert!(matches!(device.flush(), Err(DeviceError::Gone)));
        assert!(matches!(device.discard(0, 512), Err(DeviceError::Gone)));
        assert_eq!(device.stats().gone_refusals, 4);
        device.set_gone(false);
        device.rename("/dev/sim7");
        assert_eq!(device.path(), "/dev/sim7");
        assert_eq!(read(&device, 0, 512), pattern(512, 1));
    }

    #[test]
    fn huge_device_stays_sparse() {
        // Goal: a 100 GiB device with a few writes uses a few chunks of memory.
        let size = 100 << 30;
        let device = SimDevice::new("big", size, FaultPlan::seeded(11));
        for offset in [0, 50 << 30, size - 4096] {
            device.write_at(offset, &pattern(4096, 5)).unwrap();
        }
        device.flush().unwrap();
        device.crash();
        assert_eq!(read(&device, size - 4096, 4096), pattern(4096, 5));
        assert_eq!(read(&device, 70 << 30, 4096), vec![0u8; 4096]);
        assert!(
            device.resident_bytes() <= 6 * CHUNK_SIZE,
            "{}",
            device.resident_bytes()
        );
        device.discard(0, size).unwrap();
        device.flush().unwrap();
        assert_eq!(device.resident_bytes(), 0);
    }

    #[test]
    fn latency_advances_the_manual_clock() {
        // Goal: with a ManualClock each access costs latency plus bounded jitter in virtual
        // time.
        let clock = Arc::new(ManualClock::new(0));
        let plan = FaultPlan {
            latency_ns: 1000,
            latency_jitter_ns: 500,
            ..FaultPlan::seeded(2)
        };
        let device = SimDevice::with_clock("d", MIB, plan, clock.clone());
        device.write_at(0, &[1u8; 512]).unwrap();
        read(&device, 0, 512);
        device.flush().unwrap();
        let elapsed = tarn_base::Clock::monotonic_ns(&*clock);
        assert!((3000..=4500).contains(&elapsed), "{elapsed}");
        assert_eq!(device.stats().latency_ns_total, elapsed);
    }

    #[test]
    fn image_round_trips_through_from_image() {
        // Goal: a saved durable image rebuilds an identical device (a reimport after crash).
        let device = SimDevice::new("d", MIB, FaultPlan::seeded(12));
        device.write_at(4096, &pattern(70_000, 1)).unwrap();
        device.flush().unwrap();
        device.write_at(0, &pattern(512, 2)).unwrap();
        let image = device.image();
        assert_eq!(image[..512], [0u8; 512]);
        let copy = SimDevice::from_image("copy", &image, FaultPlan::default());
        assert_eq!(copy.size_bytes(), MIB);
        assert_eq!(copy.image(), image);
        assert_eq!(read(&copy, 4096, 70_000), pattern(70_000, 1));
    }

    #[test]
    fn shared_between_threads_as_dyn_device() {
        // Goal: the device works as Arc<dyn Device> from several threads at once.
        let device: Arc<dyn Device> = SimDevice::new("d", MIB, FaultPlan::seeded(13));
        std::thread::scope(|scope| {
            for t in 0..4u8 {
                let device = Arc::clone(&device);
                scope.spawn(move || {
                    for i in 0..16u64 {
                        let offset = (u64::from(t) * 16 + i) * 4096;
                        device.write_at(offset, &pattern(4096, t)).unwrap();
                    }
                });
            }
        });
        device.flush().unwrap();
        for t in 0..4u8 {
            let mut buf = vec![0u8; 4096];
            device.read_at(u64::from(t) * 16 * 4096, &mut buf).unwrap();
            assert_eq!(buf, pattern(4096, t));
        }
        let mut buf = [0u8; 8];
        assert!(matches!(
            device.read_at(MIB - 4, &mut buf),
            Err(DeviceError::OutOfRange { .. })
        ));
    }
}
