//! Block cloning under the kill loop: the files of `stress/fs` change by `copy_file_range`
//! (`Engine::fs_clone_range`, the verb a mount's `cp` reaches) in every round.
//!
//! Model: [`FILES`] files of [`FILE_BLOCKS`] whole records each. A file is a list of block
//! tags, and a block's bytes derive from `(seed, tag)`. At create, file `i` block `b` has tag
//! `i * FILE_BLOCKS + b`. Round `r` truncates file `r % FILES` to nothing, clones the whole
//! of file `(r - 1) % FILES` (committed by round `r - 1`) into it, and overwrites its block
//! `r % FILE_BLOCKS` with the tag `ROUND_TAG | r`, all in the round's txg, so a round both
//! shares blocks and drops a clone's reference (the truncate, the overwrite of a block
//! cloned in the same txg). Verification replays rounds `1..=R` on the tags and reads every
//! file: the pool must hold exactly the round the objects say it holds.
//!
//! Not here: partial-block clones (refused with EXDEV by the engine; the kernel copies).

use tarn_base::SeededRng;
use tarn_engine::posix::{Creds, FileKind, Fs, Ino, PosixError, SetAttr};
use tarn_engine::{DatasetId, Engine, FileRange, FsOp};

use crate::POOL;

/// The filesystem the files live in.
pub(crate) const DATASET: &str = "stress/fs";
/// Files cloned round after round.
const FILES: u64 = 4;
/// Records per file.
const FILE_BLOCKS: u64 = 8;
/// Record size (the dataset's default `recordsize`).
const BLOCK: u64 = 128 << 10;
/// Tags of blocks rounds wrote (above every tag create gives).
const ROUND_TAG: u64 = 1 << 63;

fn file_name(index: u64) -> String {
    format!("f{index}")
}

fn block_bytes(seed: u64, tag: u64) -> Vec<u8> {
    let mut data = vec![0u8; BLOCK as usize];
    SeededRng::new(seed ^ tag.wrapping_mul(0xD6E8_FEB8_6659_FD93)).fill(&mut data);
    data
}

/// The tags of every file after `rounds` rounds.
fn expected(rounds: u64) -> Vec<Vec<u64>> {
    let mut files: Vec<Vec<u64>> = (0..FILES)
        .map(|i| (0..FILE_BLOCKS).map(|b| i * FILE_BLOCKS + b).collect())
        .collect();
    for round in 1..=rounds {
        let (source, target) = (((round - 1) % FILES) as usize, (round % FILES) as usize);
        files[target] = files[source].clone();
        files[target][(round % FILE_BLOCKS) as usize] = ROUND_TAG | round;
    }
    files
}

fn dataset(engine: &Engine) -> Result<DatasetId, String> {
    engine
        .find_dataset(DATASET)
        .map(|(_, id)| id)
        .map_err(|e| format!("cannot find {DATASET}: {e}"))
}

fn lookup(fs: &mut Fs<'_>, index: u64) -> Result<Ino, PosixError> {
    let root = fs.root()?;
    Ok(fs.lookup(root, file_name(index).as_bytes())?.ino)
}

/// Creates the dataset and its files (committed by the caller's sync).
pub(crate) fn create(engine: &Engine, seed: u64) -> Result<(), String> {
    engine
        .create_dataset(DATASET, &[], false, "create (stress)")
        .map_err(|e| format!("cannot create {DATASET}: {e}"))?;
    let id = dataset(engine)?;
    for (index, tags) in expected(0).into_iter().enumerate() {
        let data: Vec<u8> = tags.iter().flat_map(|t| block_bytes(seed, *t)).collect();
        let op = FsOp::Write(data.len() as u64);
        engine
            .fs_op(POOL, id, op, |fs| {
                let root = fs.root()?;
                let name = file_name(index as u64);
                let kind = FileKind::Regular;
                let ino = fs.mknod(root, name.as_bytes(), kind, 0o644, 0, Creds::default())?;
                fs.write(ino.ino, 0, &data).map(drop)
            })
            .map_err(|e| format!("cannot write {DATASET}/{}: {e}", file_name(index as u64)))?;
    }
    Ok(())
}

/// Round `round`'s change of the files (module docs); the caller's sync commits it.
pub(crate) fn round(engine: &Engine, seed: u64, round: u64) -> Result<(), String> {
    let id = dataset(engine)?;
    let (source, target) = ((round - 1) % FILES, round % FILES);
    let inos = engine
        .fs_op(POOL, id, FsOp::Free, |fs| {
            let inos = (lookup(fs, source)?, lookup(fs, target)?);
            let empty = SetAttr {
                size: Some(0),
                ..SetAttr::default()
            };
            fs.setattr(inos.1, &empty)?;
            Ok(inos)
        })
        .map_err(|e| format!("cannot truncate {}: {e}", file_name(target)))?;
    let range = |ino| FileRange {
        dataset: id,
        ino,
        offset: 0,
    };
    let len = FILE_BLOCKS * BLOCK;
    let cloned = engine
        .fs_clone_range(POOL, range(inos.0), range(inos.1), len)
        .map_err(|e| format!("cannot clone {}: {e}", file_name(source)))?;
    if cloned != len {
        return Err(format!("cloned {cloned} bytes of {len}"));
    }
    let data = block_bytes(seed, ROUND_TAG | round);
    let offset = (round % FILE_BLOCKS) * BLOCK;
    engine
        .fs_op(POOL, id, FsOp::Write(BLOCK), |fs| {
            fs.write(inos.1, offset, &data).map(drop)
        })
        .map_err(|e| format!("cannot write {}: {e}", file_name(target)))
}

/// Every file holds exactly what `rounds` rounds leave (module docs).
pub(crate) fn verify(engine: &Engine, seed: u64, rounds: u64) -> Result<(), String> {
    let id = dataset(engine)?;
    for (index, tags) in expected(rounds).into_iter().enumerate() {
        let want: Vec<u8> = tags.iter().flat_map(|t| block_bytes(seed, *t)).collect();
        let read = engine
            .fs_op(POOL, id, FsOp::Read, |fs| {
                let ino = lookup(fs, index as u64)?;
                fs.read(ino, 0, (FILE_BLOCKS * BLOCK + 1) as u32)
            })
            .map_err(|e| format!("cannot read {}: {e}", file_name(index as u64)))?;
        if read != want {
            return Err(format!(
                "LOST DATA: {DATASET}/{} does not hold round {rounds}'s clones",
                file_name(index as u64)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_move_clones_and_overwrite_one_block() {
        // Goal: the model a verification replays: round r copies file (r-1)%4 into r%4 with
        // one block replaced, and leaves the others alone.
        let three = expected(3);
        assert_eq!(three[0], expected(0)[0]);
        assert_eq!(three[1][..1], expected(0)[0][..1]);
        assert_eq!(three[1][1], ROUND_TAG | 1);
        assert_eq!(three[2][1], ROUND_TAG | 1, "round 2 cloned round 1's block");
        assert_eq!(three[2][2], ROUND_TAG | 2);
        assert_eq!(three[3][3], ROUND_TAG | 3);
        assert_ne!(expected(4)[0], expected(0)[0]);
    }
}
