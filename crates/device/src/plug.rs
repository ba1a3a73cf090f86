//! Plugging: a thread that is about to submit many reads says so ([`plug`]), and the devices
//! it submits to do not wake their I/O threads until it is done ([`Plug`] dropped) or about
//! to wait for something. Each I/O thread then finds every read of the batch in its queue at
//! once and merges the adjacent ones into one access; woken at the first read, it would take
//! that read alone while the submitter was still queueing the next (the Linux block layer's
//! `blk_start_plug` for the same reason).
//!
//! # Invariants
//! - P1: a read deferred by a plug is never left behind: the plug's drop wakes every device
//!   it deferred, and every wait of this crate's devices (for a submitted read, for a queue
//!   to drain) flushes the waiting thread's plug first, so no thread waits for a read that
//!   only its own plug holds back.
//! - P2: only waking is deferred: a read is queued in order at submit time, so the order of
//!   a device's accesses (its queue's invariants) does not depend on plugging.
//!
//! # Not here
//! Writes are never deferred: the queue's write-behind already lets them pile up while the
//! I/O thread works, and a writer throttled on a full queue must not depend on a plug.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

/// A queue whose I/O thread a plug may have to wake.
pub(crate) trait Wake: Send + Sync {
    /// Wakes the I/O thread if it sleeps with work queued.
    fn wake(&self);
}

thread_local! {
    /// `Some` while this thread holds a plug: the queues with reads whose wake-up it holds.
    static PLUGGED: RefCell<Option<Vec<Arc<dyn Wake>>>> = const { RefCell::new(None) };
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
            *plugged = Some(Vec::new());
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
            wake_all(held.unwrap_or_default());
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
        if !held.iter().any(|q| Arc::ptr_eq(q, queue)) {
            held.push(Arc::clone(queue));
        }
        true
    })
}

/// Wakes every device this thread's plug holds back, and stays plugged (P1: called before
/// every wait).
pub(crate) fn flush() {
    let held = PLUGGED.with(|plugged| plugged.borrow_mut().as_mut().map(std::mem::take));
    wake_all(held.unwrap_or_default());
}

fn wake_all(queues: Vec<Arc<dyn Wake>>) {
    for queue in queues {
        queue.wake();
    }
}
