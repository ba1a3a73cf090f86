//! Plugging: a thread that is about to submit many reads says so ([`plug`]), and the devices
//! it submits to do not wake their I/O threads until it is done ([`Plug`] dropped) or about
//! to wait for something. Each I/O thread then finds every read of the batch in its queue at
//! once and merges the adjacent ones into one access; woken at the first read, it would take
//! that read alone while the submitter was still queueing the next (the Linux block layer's
//! `blk_start_plug` for the same reason).
//!
//! Writes are deferred the same way, in batches: a plugged thread's writes wake no I/O
//! thread until [`PLUG_WRITE_BYTES`] of them are queued, then every device it deferred is
//! woken and the count starts again. A txg's write phase runs plugged (tarn-pool
//! `Pool::sync_write`): woken at every column, each I/O thread wrote one column and slept
//! again, a futex wake and two context switches per column (82,000 per GiB through a raidz2
//! of 10); woken per batch, it finds a run of adjacent columns and writes them as one
//! `pwritev`.
//!
//! # Invariants
//! - P1: an access deferred by a plug is never left behind: the plug's drop wakes every
//!   device it deferred, and every wait of this crate's devices (for a submitted read, for a
//!   queue to drain) flushes the waiting thread's plug first, so no thread waits for an
//!   access that only its own plug holds back.
//! - P2: only waking is deferred: an access is queued in order when it is made, so the
//!   order of a device's accesses (its queue's invariants) does not depend on plugging.
//! - P3: a thread waiting for a queue that another thread's plug holds back is not stuck
//!   behind that plug: every wait on a queue's progress (drain, room in a full queue) wakes
//!   the queue's I/O thread first (`QueuedDevice`), and at most [`PLUG_WRITE_BYTES`] of one
//!   thread's writes wait for a wake-up.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

/// A queue whose I/O thread a plug may have to wake.
pub(crate) trait Wake: Send + Sync {
    /// Wakes the I/O thread if it sleeps with work queued.
    fn wake(&self);
}

/// Bytes of writes a plugged thread queues before it wakes the devices it deferred (P3):
/// a run of about 1 MiB per device of a raidz2 of 10 (half the queue's `AGGREGATE_MAX`), and a
/// bound on how long another thread's drain waits for it.
pub(crate) const PLUG_WRITE_BYTES: u64 = 8 << 20;

/// What a plugged thread holds back.
#[derive(Default)]
struct Held {
    /// The queues whose wake-up it holds.
    queues: Vec<Arc<dyn Wake>>,
    /// Bytes written to them since they were last woken.
    write_bytes: u64,
}

thread_local! {
    /// `Some` while this thread holds a plug.
    static PLUGGED: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// This thread's plug, from [`plug`]; dropping it wakes the devices it held back.
#[must_use = "the plug ends when dropped"]
pub struct Plug {
    /// This plug started plugging (an inner plug of a plugged thread changes nothing).
    outer: bool,
    /// A plug belongs to the thread that made it.
    _thread: PhantomData<*const ()>,
}

/// Plugs this thread until the returned guard is dropped (module docs).
pub fn plug() -> Plug {
    let outer = PLUGGED.with(|plugged| {
        let mut plugged = plugged.borrow_mut();
        let outer = plugged.is_none();
        if outer {
            *plugged = Some(Held::default());
        }
        outer
    });
    Plug {
        outer,
        _thread: PhantomData,
    }
}

impl Drop for Plug {
    fn drop(&mut self) {
        if self.outer {
            let held = PLUGGED.with(|plugged| plugged.borrow_mut().take());
            wake_all(held.map(|held| held.queues).unwrap_or_default());
        }
    }
}

/// Whether this thread is plugged; if so, `queue`'s wake-up is held until the plug ends.
pub(crate) fn defer(queue: &Arc<dyn Wake>) -> bool {
    PLUGGED.with(|plugged| {
        let mut plugged = plugged.borrow_mut();
        let Some(held) = plugged.as_mut() else {
            return false;
        };
        if !held.queues.iter().any(|q| Arc::ptr_eq(q, queue)) {
            held.queues.push(Arc::clone(queue));
        }
        true
    })
}

/// What a write's push must do about its queue's I/O thread ([`defer_write`]).
pub(crate) enum WriteWake {
    /// This thread is not plugged: wake the queue as usual.
    Now,
    /// Deferred by this thread's plug.
    Deferred,
    /// Deferred, and the plug's writes reached [`PLUG_WRITE_BYTES`]: wake these queues
    /// (taken from the plug, which stays plugged) once the queue's lock is let go
    /// ([`wake_all`]).
    Due(Vec<Arc<dyn Wake>>),
}

/// [`defer`] for a write of `bytes` to `queue`.
pub(crate) fn defer_write(queue: &Arc<dyn Wake>, bytes: u64) -> WriteWake {
    PLUGGED.with(|plugged| {
        let mut plugged = plugged.borrow_mut();
        let Some(held) = plugged.as_mut() else {
            return WriteWake::Now;
        };
        if !held.queues.iter().any(|q| Arc::ptr_eq(q, queue)) {
            held.queues.push(Arc::clone(queue));
        }
        held.write_bytes += bytes;
        if held.write_bytes < PLUG_WRITE_BYTES {
            return WriteWake::Deferred;
        }
        held.write_bytes = 0;
        WriteWake::Due(std::mem::take(&mut held.queues))
    })
}

/// Wakes every device this thread's plug holds back, and stays plugged (P1: called before
/// every wait).
pub(crate) fn flush() {
    let held = PLUGGED.with(|plugged| {
        plugged.borrow_mut().as_mut().map(|held| {
            held.write_bytes = 0;
            std::mem::take(&mut held.queues)
        })
    });
    wake_all(held.unwrap_or_default());
}

/// Wakes `queues` (each that sleeps with work queued).
pub(crate) fn wake_all(queues: Vec<Arc<dyn Wake>>) {
    for queue in queues {
        queue.wake();
    }
}
