//! Readers beside the writer: [`READERS`] threads read random ranges of the objects while
//! the main thread writes rounds, syncs txgs and is killed, and check every byte they get.
//!
//! Why: the rounds alone have one thread; issue 18's promise is that concurrent readers and
//! writers, crashes included, never see wrong bytes (reads plan under the pool lock and read
//! the devices without it, beside the writes and syncs of the same objects set).
//!
//! Model: the writer publishes the round it is writing ([`Progress::writing`]) before it
//! touches anything of that round. A reader picks an object that round does not write,
//! reads a range of it, and reads `writing` again: when a round that writes the object began
//! meanwhile, the read raced it and is not checked (a seqlock's retry); otherwise the object
//! held, throughout the read, what the last round before `writing` that wrote it put there
//! (or zeros, before any), and the range must be exactly that. A wrong byte is fatal at once:
//! the process exits 1, which the kill loop counts as a failure.
//!
//! Not here: reads of the volumes, the clone files and the fsync'd file (their steps change
//! within a round, and the rounds' own verification after each restart checks them).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tarn_base::{ObjectId, SeededRng};
use tarn_engine::Engine;

use crate::{OBJECTS, Objects, POOL, last_round_for, round_data};

/// Reader threads.
pub(crate) const READERS: u64 = 2;
/// Longest range a reader reads at once.
const READ_MAX: u64 = 256 << 10;
/// An object's bytes: a round's data, then zeros to this length.
const OBJECT_LEN: u64 = (4 << 20) + 1;

/// What the writer tells the readers.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The round being written (rounds up to it less one are committed or on their way).
    pub(crate) writing: AtomicU64,
    pub(crate) stop: AtomicBool,
    /// Ranges read and checked.
    pub(crate) checked: AtomicU64,
}

/// One reader until `progress.stop`; exits the process on a wrong byte or a failed read.
pub(crate) fn run(engine: &Engine, seed: u64, objects: Objects, progress: &Progress, me: u64) {
    let mut rng = SeededRng::new(seed ^ (me + 1).wrapping_mul(0xA076_1D64_78BD_642F));
    // The last round's bytes, kept: a check compares against them again and again.
    let mut expected: Option<(u64, Vec<u8>)> = None;
    while !progress.stop.load(Ordering::SeqCst) {
        let before = progress.writing.load(Ordering::SeqCst);
        let object = ObjectId(objects.first + rng.below(OBJECTS));
        if before == 0 || object == objects.of(before) {
            std::thread::yield_now();
            continue;
        }
        let offset = rng.below(OBJECT_LEN);
        let len = (1 + rng.below(READ_MAX)).min(OBJECT_LEN - offset);
        let mut got = vec![0u8; len as usize];
        if let Err(e) = engine.object_read(POOL, object, offset, &mut got) {
            fail(&format!(
                "reader {me}: cannot read object {}: {e}",
                object.0
            ));
        }
        let after = progress.writing.load(Ordering::SeqCst);
        if (before + 1..=after).any(|round| objects.of(round) == object) {
            continue;
        }
        let round = last_round_for(objects, object, before - 1);
        let data = match &expected {
            Some((r, data)) if *r == round => data,
            _ => &expected.insert((round, round_bytes(seed, round))).1,
        };
        let want = |i: u64| data.get((offset + i) as usize).copied().unwrap_or(0);
        if let Some(i) = (0..len).find(|&i| got[i as usize] != want(i)) {
            fail(&format!(
                "WRONG BYTES: reader {me}, object {} byte {} is {:#04x}, round {round} wrote \
                 {:#04x} (rounds being written: {before} to {after})",
                object.0,
                offset + i,
                got[i as usize],
                want(i)
            ));
        }
        progress.checked.fetch_add(1, Ordering::Relaxed);
    }
}

/// The bytes round `round` wrote before its zeros (none for round 0: all zeros).
fn round_bytes(seed: u64, round: u64) -> Vec<u8> {
    if round == 0 {
        return Vec::new();
    }
    round_data(seed, round)
}

fn fail(message: &str) -> ! {
    eprintln!("tarn-stress: {message}");
    std::process::exit(1);
}
