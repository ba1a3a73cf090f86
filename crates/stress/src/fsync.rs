//! Fsync'd file writes under `logbias=throughput` in the kill loop: every round makes
//! [`STEPS`] steps on the file `log` of `stress/sync` (a write derived from `(seed, step)`,
//! mostly whole records, some unaligned, then `fsync`), and records the step number in
//! `--dir/fstate` after the fsync returns. The fsync writes the whole records in place and
//! logs pointers to them (indirect records), so a kill between it and the round's txg
//! leaves them to the intent log's replay. Verification rebuilds the file from steps
//! `1..=F` and accepts `F` or `F + 1` (the kill may fall between an fsync and the state
//! update; a step's write is one engine call, whole or absent after the replay).
//!
//! Not here: other operations than writes (the engine tests cover truncate, unlink and
//! rename between an fsync and its txg).

use tarn_base::SeededRng;
use tarn_engine::posix::{Creds, FileKind, SetAttr};
use tarn_engine::{DatasetId, Engine, FsOp};

use crate::POOL;

/// The filesystem of the fsync'd file.
pub(crate) const DATASET: &str = "stress/sync";
/// Size of the file (set at create; writes stay inside it).
const SIZE: u64 = 4 << 20;
/// Record size (the dataset's default `recordsize`).
const BLOCK: u64 = 128 << 10;
/// Fsync'd writes per round.
pub(crate) const STEPS: u64 = 4;

const NAME: &[u8] = b"log";

/// Where step `step` writes: offset and length.
fn step_range(seed: u64, step: u64) -> (u64, u64) {
    let mut rng = SeededRng::new(seed ^ step.wrapping_mul(0xA076_1D64_78BD_642F));
    if rng.below(4) == 0 {
        // Unaligned and partial: logged as data.
        let offset = rng.below(SIZE - BLOCK);
        (offset, 1 + rng.below(BLOCK))
    } else {
        // Whole records: written ahead, logged as pointers.
        let records = 1 + rng.below(4);
        let first = rng.below(SIZE / BLOCK - records + 1);
        (first * BLOCK, records * BLOCK)
    }
}

/// Byte `i` of step `step`'s write.
fn step_byte(seed: u64, step: u64, i: u64) -> u8 {
    (seed ^ step.wrapping_mul(131) ^ i.wrapping_mul(2_654_435_761) >> 7) as u8
}

fn step_data(seed: u64, step: u64) -> Vec<u8> {
    let (_, len) = step_range(seed, step);
    (0..len).map(|i| step_byte(seed, step, i)).collect()
}

fn apply(model: &mut [u8], seed: u64, step: u64) {
    let (offset, len) = step_range(seed, step);
    let range = &mut model[offset as usize..(offset + len) as usize];
    range.copy_from_slice(&step_data(seed, step));
}

fn dataset(engine: &Engine) -> Result<DatasetId, String> {
    engine
        .find_dataset(DATASET)
        .map(|(_, id)| id)
        .map_err(|e| format!("cannot find {DATASET}: {e}"))
}

/// Creates the dataset (`logbias=throughput`) and its file of [`SIZE`] zeros (committed by
/// the caller's sync).
pub(crate) fn create(engine: &Engine) -> Result<(), String> {
    let props = [("logbias".to_string(), "throughput".to_string())];
    engine
        .create_dataset(DATASET, &props, false, "create (stress)")
        .map_err(|e| format!("cannot create {DATASET}: {e}"))?;
    let id = dataset(engine)?;
    engine
        .fs_op(POOL, id, FsOp::Modify, |fs| {
            let root = fs.root()?;
            let ino = fs.mknod(root, NAME, FileKind::Regular, 0o644, 0, Creds::default())?;
            let changes = SetAttr {
                size: Some(SIZE),
                ..SetAttr::default()
            };
            fs.setattr(ino.ino, &changes).map(drop)
        })
        .map_err(|e| format!("cannot create {DATASET}/log: {e}"))
}

/// Makes step `step`: its write, then an fsync.
pub(crate) fn step(engine: &Engine, seed: u64, step: u64) -> Result<(), String> {
    let id = dataset(engine)?;
    let (offset, _) = step_range(seed, step);
    let data = step_data(seed, step);
    engine
        .fs_op(POOL, id, FsOp::Write(data.len() as u64), |fs| {
            let root = fs.root()?;
            let ino = fs.lookup(root, NAME)?.ino;
            fs.write(ino, offset, &data).map(drop)
        })
        .and_then(|()| engine.fs_sync(POOL, id))
        .map_err(|e| format!("fsync step {step}: {e}"))
}

/// Checks the file against steps `1..=fsynced` (or one more); returns the steps it holds.
pub(crate) fn verify(engine: &Engine, seed: u64, fsynced: u64) -> Result<u64, String> {
    let id = dataset(engine)?;
    let actual = engine
        .fs_op(POOL, id, FsOp::Read, |fs| {
            let root = fs.root()?;
            let ino = fs.lookup(root, NAME)?.ino;
            fs.read(ino, 0, SIZE as u32 + 1)
        })
        .map_err(|e| format!("cannot read {DATASET}/log: {e}"))?;
    let mut model = vec![0u8; SIZE as usize];
    for step in 1..=fsynced {
        apply(&mut model, seed, step);
    }
    if model == actual {
        return Ok(fsynced);
    }
    apply(&mut model, seed, fsynced + 1);
    if model == actual {
        return Ok(fsynced + 1);
    }
    Err(format!(
        "LOST DATA: {DATASET}/log holds neither {fsynced} nor {} fsync'd steps",
        fsynced + 1
    ))
}
