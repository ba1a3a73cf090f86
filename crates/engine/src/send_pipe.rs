//! The send's three stages (`send_ops::send_one`): a walk that plans batches under the pool
//! lock, [`READERS`] threads that read the planned batches' data blocks without it, and the
//! caller's thread, which writes the read batches to the stream in order.
//!
//! ```text
//!  walk ──batch 0, N, 2N..──► reader 0 ──┐
//!       ──batch 1, N+1, ..──► reader 1 ──┼──► writer (batch 0, 1, 2, ... in order)
//!       ──...               ► reader N-1─┘
//! ```
//!
//! Why several readers: one thread reading a batch waits for the devices, then verifies
//! and copies while they idle, then hands the batch on, so the devices were busy about half
//! the time (docs/PERFORMANCE.md, "Send at the read's rate"). With several, one batch's
//! blocks are on the devices while another's are verified, as the mount's read-ahead
//! threads keep them busy for `cat`.
//!
//! Invariants:
//! - I1: the writer gets the batches in the walk's order: batch `k` goes to reader
//!   `k % READERS` and is taken from it in turn; a reader keeps its batches in order.
//! - I2: the first error (the walk's, a reader's or the writer's) ends the send with it,
//!   and every thread stops: a walk error is handed on in its place and returned by the
//!   writer; a failed writer drops its receivers, so each reader's next hand-over fails,
//!   and each reader gone fails the walk's next hand-over to it.
//! - I3: memory: every channel is a rendezvous (capacity 0), so a batch is held by exactly
//!   one stage: at most one planned batch in the walk, one per reader (being read, or read
//!   and waiting for the writer) and one being written: `READERS + 2` batches in all. A
//!   planned batch holds no data where the readers read it (`send_ops`), so a send holds
//!   the data of `READERS + 1` batches of about `BATCH_BYTES`: 24 MiB, as before the
//!   readers (one more where the walk reads its own, on simulated devices).
//!
//! Failure model: the stages share nothing but the channels; a panic in one is resumed on
//! the caller's thread when the scope joins it.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use crate::EngineError;
use crate::dataset_ops::invalid;

/// Reader threads of one send: two keep the devices busy on the 2-core hosts measured
/// (docs/PERFORMANCE.md, "Send at the read's rate"), and each holds one batch.
pub(crate) const READERS: usize = 2;

/// Runs the stages: `walk` hands on each planned batch through its argument, which says
/// `false` once nobody takes batches any more (then the walk stops); `fill` reads one; `write`
/// writes one. Returns the first error (I2).
pub(crate) fn run<P, F>(
    readers: usize,
    walk: impl FnOnce(&mut dyn FnMut(Result<P, EngineError>) -> bool) + Send,
    fill: impl Fn(P) -> Result<F, EngineError> + Sync,
    write: &mut dyn FnMut(F) -> Result<(), EngineError>,
) -> Result<(), EngineError>
where
    P: Send,
    F: Send,
{
    assert!(readers > 0, "a send has a reader");
    std::thread::scope(|scope| {
        let fill = &fill;
        let mut inputs = Vec::with_capacity(readers);
        let mut outputs = Vec::with_capacity(readers);
        for index in 0..readers {
            let (input, planned) = sync_channel::<Result<P, EngineError>>(0);
            let (output, read) = sync_channel::<Result<F, EngineError>>(0);
            std::thread::Builder::new()
                .name(format!("tarn-send-read-{index}"))
                .spawn_scoped(scope, move || read_batches(&planned, &output, fill))
                .map_err(|e| invalid(format!("cannot start the send's reader thread: {e}")))?;
            inputs.push(input);
            outputs.push(read);
        }
        std::thread::Builder::new()
            .name("tarn-send-walk".into())
            .spawn_scoped(scope, move || {
                let mut next = 0;
                walk(&mut |batch| {
                    let taken = inputs[next % inputs.len()].send(batch).is_ok();
                    next += 1;
                    taken
                });
                // Dropping the inputs here ends each reader after its last batch.
            })
            .map_err(|e| invalid(format!("cannot start the send's walk thread: {e}")))?;
        let written = write_in_order(&outputs, write);
        // A failed write lets go of the readers' outputs, which stops them, and through
        // them the walk (I2), before the scope joins them.
        drop(outputs);
        written
    })
}

/// A reader: fills each batch it is given and hands it on; stops after an error or when
/// the writer is gone (I2).
fn read_batches<P, F>(
    planned: &Receiver<Result<P, EngineError>>,
    output: &SyncSender<Result<F, EngineError>>,
    fill: &(impl Fn(P) -> Result<F, EngineError> + Sync),
) {
    for batch in planned {
        let read = batch.and_then(fill);
        let failed = read.is_err();
        if output.send(read).is_err() || failed {
            break;
        }
    }
}

/// The writer: batch `k` from reader `k % readers` (I1) until the walk's batches run out
/// (the next reader's channel closes).
fn write_in_order<F>(
    outputs: &[Receiver<Result<F, EngineError>>],
    write: &mut dyn FnMut(F) -> Result<(), EngineError>,
) -> Result<(), EngineError> {
    let mut next = 0;
    loop {
        let Ok(batch) = outputs[next % outputs.len()].recv() else {
            return Ok(());
        };
        write(batch?)?;
        next += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    /// Batch `k` of a walk of `count`.
    fn walk_of(count: usize) -> impl FnOnce(&mut dyn FnMut(Result<usize, EngineError>) -> bool) {
        move |hand: &mut dyn FnMut(Result<usize, EngineError>) -> bool| {
            for k in 0..count {
                if !hand(Ok(k)) {
                    return;
                }
            }
        }
    }

    #[test]
    fn batches_are_written_in_the_walks_order() {
        for readers in 1..=4 {
            let mut written = Vec::new();
            let fill = |k: usize| {
                // Later batches finish first: the order comes from I1, not from timing.
                std::thread::sleep(Duration::from_millis(((k * 7) % 5) as u64));
                Ok(k)
            };
            run(readers, walk_of(23), fill, &mut |k| {
                written.push(k);
                Ok(())
            })
            .unwrap();
            assert_eq!(written, (0..23).collect::<Vec<_>>(), "{readers} readers");
        }
    }

    /// Fills started so far, and a wake-up for fills that wait for others.
    struct Started {
        count: Mutex<usize>,
        changed: Condvar,
    }

    #[test]
    fn the_next_batch_is_read_while_one_is_still_being_read() {
        // Goal: two batches' reads overlap (the devices get the next batch's blocks while
        // the last one's are verified). Batch 0's fill waits until batch 1's has started:
        // with one reader at a time it never does, and the wait times out.
        let started = Started {
            count: Mutex::new(0),
            changed: Condvar::new(),
        };
        let fill = |k: usize| {
            let mut count = started.count.lock().unwrap();
            *count += 1;
            started.changed.notify_all();
            if k == 0 {
                let (count, timeout) = started
                    .changed
                    .wait_timeout_while(count, Duration::from_secs(10), |n| *n < 2)
                    .unwrap();
                assert!(!timeout.timed_out(), "batch 1 was not read during batch 0");
                drop(count);
            }
            Ok(k)
        };
        run(READERS, walk_of(6), fill, &mut |_| Ok(())).unwrap();
    }

    #[test]
    fn a_failed_write_stops_the_readers_and_the_walk() {
        // Goal: a broken stream returns its error, and the walk stops soon after (it is
        // not walked to its end): I2. The scope's join would hang if a stage did not stop.
        let planned = AtomicUsize::new(0);
        let walk = |hand: &mut dyn FnMut(Result<usize, EngineError>) -> bool| {
            for k in 0..1000 {
                planned.fetch_add(1, Ordering::SeqCst);
                if !hand(Ok(k)) {
                    return;
                }
            }
        };
        let mut writes = 0;
        let result = run(READERS, walk, Ok, &mut |_| {
            writes += 1;
            match writes {
                3 => Err(invalid("broken pipe")),
                _ => Ok(()),
            }
        });
        assert_eq!(result.unwrap_err().to_string(), "broken pipe");
        // Written 3, one per reader held, one in the walk, and the hand-overs that failed.
        assert!(planned.load(Ordering::SeqCst) <= 3 + 2 * READERS + 2);
    }

    #[test]
    fn a_walk_error_is_returned_after_the_batches_before_it() {
        let walk = |hand: &mut dyn FnMut(Result<usize, EngineError>) -> bool| {
            for k in 0..5 {
                hand(Ok(k));
            }
            hand(Err(invalid("snapshot destroyed")));
            // A walk that went on after its error would not get this written.
            let _ = hand(Ok(99));
        };
        let mut written = Vec::new();
        let result = run(READERS, walk, Ok, &mut |k| {
            written.push(k);
            Ok(())
        });
        assert_eq!(result.unwrap_err().to_string(), "snapshot destroyed");
        assert_eq!(written, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn at_most_one_batch_per_stage_is_held() {
        // Goal: I3, memory in flight bounded: filled batches that exist at once (made by a
        // reader, not yet dropped by the writer) never exceed one per reader plus the one
        // being written, however slow the writer is.
        struct Held<'a>(&'a AtomicUsize);
        impl Drop for Held<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let live = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let fill = |_: usize| {
            let now = live.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            Ok(Held(&live))
        };
        run(READERS, walk_of(40), fill, &mut |held| {
            std::thread::sleep(Duration::from_millis(2));
            drop(held);
            Ok(())
        })
        .unwrap();
        let most = most.load(Ordering::SeqCst);
        assert!(most <= READERS + 1, "{most} filled batches at once");
        assert!(most >= 2, "the readers ran ahead of the writer");
    }
}
