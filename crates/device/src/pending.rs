//! Reads in flight: [`Device::submit_read`](crate::Device::submit_read) returns a
//! [`PendingRead`], and [`PendingRead::wait`] gives its bytes. A caller submits every read it
//! needs (the data columns of a raidz block, the sides of a mirror, the blocks of a scrub
//! batch) and then waits for them all, so a device with its own I/O thread
//! ([`QueuedDevice`](crate::QueuedDevice)) serves them in parallel with the other devices.
//!
//! A synchronous device reads at submit time and hands back a finished [`PendingRead`]; the
//! simulator's devices do, so runs stay deterministic.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

use crate::DeviceError;

/// The outcome of one read: the buffer filled, or why not.
pub type ReadResult = Result<Vec<u8>, DeviceError>;

/// Where an I/O thread puts a read's outcome and the submitter waits for it.
#[derive(Debug, Default)]
pub(crate) struct ReadSlot {
    state: Mutex<SlotState>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct SlotState {
    outcome: Option<ReadResult>,
    /// The submitter sleeps on `done`: only then does completing need a wake-up (a system
    /// call even when nobody waits, and most reads complete before their waiter asks).
    waiting: bool,
}

impl ReadSlot {
    /// Stores the outcome and wakes the waiter. Called once per slot.
    pub(crate) fn complete(&self, result: ReadResult) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(state.outcome.is_none(), "a read slot completes once");
        state.outcome = Some(result);
        if state.waiting {
            self.done.notify_all();
        }
    }

    fn wait(&self) -> ReadResult {
        crate::plug::flush();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.outcome.is_none() {
            tarn_base::wait::before_wait();
        }
        loop {
            if let Some(result) = state.outcome.take() {
                return result;
            }
            state.waiting = true;
            state = self
                .done
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// A read submitted to a device (see the module docs).
#[derive(Debug)]
pub struct PendingRead(Inner);

#[derive(Debug)]
enum Inner {
    Done(ReadResult),
    Queued(Arc<ReadSlot>),
}

impl PendingRead {
    /// A read that finished at submit time (synchronous devices).
    #[must_use]
    pub fn done(result: ReadResult) -> PendingRead {
        PendingRead(Inner::Done(result))
    }

    pub(crate) fn queued(slot: Arc<ReadSlot>) -> PendingRead {
        PendingRead(Inner::Queued(slot))
    }

    /// Whether the outcome was known at submit time (so waiting cannot block).
    #[must_use]
    pub fn is_done(&self) -> bool {
        matches!(self.0, Inner::Done(_))
    }

    /// Waits for the read and returns the filled buffer (the one given to `submit_read`).
    pub fn wait(self) -> ReadResult {
        match self.0 {
            Inner::Done(result) => result,
            Inner::Queued(slot) => slot.wait(),
        }
    }
}
