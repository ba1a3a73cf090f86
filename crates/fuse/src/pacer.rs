//! Pacing of a mount's session threads: one thread reads requests at a time, and it keeps
//! looking for the next request for a moment after each reply instead of going to sleep.
//!
//! Why: a program that works through files (create, stat, unlink, one after another) sends
//! its next request microseconds after our reply. With every session thread asleep in
//! `read(2)`, each request wakes one, and the kernel picks the thread that has slept longest,
//! so every request pays a wakeup of a cold thread, often on the other CPU (on a virtual
//! machine, an idle virtual CPU that must be woken by the host). Measured in
//! docs/PERFORMANCE.md ("Session-thread pacing"): creates went from about 10k to 14k per
//! second on the benchmark host.
//!
//! # Model
//! Each session thread is reading (in fuser's loop: in or on its way to `read(2)`), serving
//! (inside a handler, between [`Pacer::enter`] and [`Pacer::leave`]) or parked (at the end
//! of a handler, after its reply, waiting for a turn). Rules:
//! - A thread that replied parks when another thread is reading; otherwise it goes back to
//!   reading, and when it is the only reader it first polls the device for up to [`SPIN`]
//!   (without reading: the request stays queued for `read(2)` to take at once).
//! - A serving thread that is about to block (the `tarn_base::wait` hint: a contended pool
//!   lock, a txg commit, a device read, a suspended pool) wakes one parked thread when no
//!   thread is reading, so requests keep flowing while it waits, as before pacing.
//! - A parked thread waits at most [`PARK_MAX`] and then reads again, whatever happened:
//!   a connection that ends (unmount, abort) finds every thread in `read(2)` soon, and
//!   fuser's threads end there.
//!
//! # Invariants
//! - P1: a thread parks only while another thread reads (or is on its way to).
//! - P2: no thread parks longer than [`PARK_MAX`]; unmount wakes them all at once.
//! - P3: the state's mutex is never held while anything else is locked or waited for.
//!
//! # Failure model
//! A poisoned mutex (a panic while holding it, which nothing here can cause) disables
//! pacing: threads then read as fuser runs them. A failed poll ends the spin.
//!
//! # Not here
//! Parking after a FORGET: it has no reply, and fuser delivers a batch of them as one
//! handler call per inode, between which a thread must not park (it still spins when it
//! reads alone, as after any request; between the items of a batch that is at most
//! [`SPIN`] each, and none while requests are queued). Waits nobody hints at (a short
//! mutex of the front end) keep the other requests waiting for their length; they are
//! held for microseconds.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// How long the only reading thread polls for the next request after a reply before it
/// sleeps in `read(2)`: longer than a program's turnaround between two requests on the
/// benchmark host (spins of 20 to 300 us measured the same; 64 polls, about 13 us there,
/// lost most of the gain), short enough that a mount with rare requests spends next to
/// nothing.
pub(crate) const SPIN: Duration = Duration::from_micros(50);
/// Polls between two looks at the clock during the spin.
const POLLS_PER_CLOCK: u32 = 8;
/// Longest a thread stays parked.
pub(crate) const PARK_MAX: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct State {
    /// Threads reading or on their way to it.
    reading: usize,
    parked: usize,
    /// Parked threads told to read that have not woken yet.
    called: usize,
    /// Unmounting: nobody parks.
    closed: bool,
}

/// The pacing of one mount's session threads (module doc).
#[derive(Debug)]
pub(crate) struct Pacer {
    /// A duplicate of the session's /dev/fuse descriptor, polled during the spin (unset:
    /// no spin).
    device: OnceLock<OwnedFd>,
    state: Mutex<State>,
    turn: Condvar,
}

impl Pacer {
    /// Pacing for `threads` session threads, all reading at first.
    pub(crate) fn new(threads: usize) -> Pacer {
        Pacer {
            device: OnceLock::new(),
            state: Mutex::new(State {
                reading: threads,
                parked: 0,
                called: 0,
                closed: false,
            }),
            turn: Condvar::new(),
        }
    }

    /// Gives the session's device descriptor for the spin (duplicated).
    pub(crate) fn watch(&self, device: impl AsFd) {
        if let Ok(device) = device.as_fd().try_clone_to_owned() {
            let _ = self.device.set(device);
        }
    }

    /// A thread starts serving a request (registers the wait hint on its first).
    pub(crate) fn enter(self: &Arc<Self>) {
        if !tarn_base::wait::has_hint() {
            tarn_base::wait::set_hint(Some(Arc::clone(self) as Arc<dyn tarn_base::wait::WaitHint>));
        }
        if let Ok(mut state) = self.state.lock() {
            state.reading = state.reading.saturating_sub(1);
        }
    }

    /// A thread replied: parks while another reads (unless `park` is false), then reads
    /// (spinning first when alone).
    pub(crate) fn leave(&self, park: bool) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if park && state.reading > 0 && !state.closed {
            state.parked += 1;
            let waited = self
                .turn
                .wait_timeout_while(state, PARK_MAX, |state| state.called == 0 && !state.closed);
            let Ok((next, _)) = waited else {
                return;
            };
            state = next;
            state.called = state.called.saturating_sub(1);
            state.parked -= 1;
        }
        state.reading += 1;
        let alone = state.reading == 1;
        drop(state);
        if alone {
            self.spin();
        }
    }

    /// Polls the device until a request is queued, the connection ends or [`SPIN`] passed.
    // The clock only bounds the spin: nothing is decided by the time beyond stopping.
    #[allow(clippy::disallowed_methods)]
    fn spin(&self) {
        let Some(device) = self.device.get() else {
            return;
        };
        let start = std::time::Instant::now();
        loop {
            for _ in 0..POLLS_PER_CLOCK {
                let mut fds = [PollFd::new(device.as_fd(), PollFlags::POLLIN)];
                if poll(&mut fds, PollTimeout::ZERO) != Ok(0) {
                    return;
                }
            }
            if start.elapsed() >= SPIN {
                return;
            }
        }
    }

    /// Unmounting: parked threads go back to reading now and nobody parks again.
    pub(crate) fn close(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.closed = true;
            self.turn.notify_all();
        }
    }
}

impl tarn_base::wait::WaitHint for Pacer {
    fn before_wait(&self) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if state.reading == 0 && state.parked > state.called {
            state.called += 1;
            self.turn.notify_one();
        }
    }
}

// The tests measure how long a thread stayed parked.
#[allow(clippy::disallowed_methods)]
#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tarn_base::wait::WaitHint;

    /// Goal: with two threads, the second to finish parks while the first reads, and a
    /// serving thread about to wait calls it back; unmount frees every parked thread.
    #[test]
    fn a_thread_parks_while_another_reads_and_a_wait_calls_it_back() {
        let pacer = Arc::new(Pacer::new(2));
        pacer.enter();
        pacer.enter();
        let first = {
            let pacer = Arc::clone(&pacer);
            std::thread::spawn(move || pacer.leave(true))
        };
        first.join().unwrap();
        let parked = {
            let pacer = Arc::clone(&pacer);
            std::thread::spawn(move || {
                let start = Instant::now();
                pacer.leave(true);
                start.elapsed()
            })
        };
        while pacer.state.lock().unwrap().parked == 0 {
            std::thread::yield_now();
        }
        // The reader takes a request and is about to block: the parked thread reads.
        pacer.enter();
        pacer.before_wait();
        let waited = parked.join().unwrap();
        assert!(
            waited < PARK_MAX,
            "woken by the hint, not the timeout: {waited:?}"
        );
        let state = pacer.state.lock().unwrap();
        assert_eq!((state.reading, state.parked, state.called), (1, 0, 0));
    }

    /// One request served on this thread: how long its leave took.
    fn serve_one(pacer: &Arc<Pacer>, park: bool) -> std::time::Duration {
        pacer.enter();
        let start = Instant::now();
        pacer.leave(park);
        start.elapsed()
    }

    /// Goal: the guard of a FORGET (one call per inode of a batch) never parks, even while
    /// another thread reads.
    #[test]
    fn leaving_without_parking_goes_straight_back_to_reading() {
        let pacer = Arc::new(Pacer::new(2));
        assert!(serve_one(&pacer, false) < PARK_MAX);
        let state = pacer.state.lock().unwrap();
        assert_eq!((state.reading, state.parked), (2, 0));
    }

    #[test]
    fn no_thread_parks_after_close_or_longer_than_the_limit() {
        let pacer = Arc::new(Pacer::new(2));
        let waited = serve_one(&pacer, true);
        assert!(waited >= PARK_MAX, "parked while another read: {waited:?}");
        pacer.close();
        assert!(serve_one(&pacer, true) < PARK_MAX);
        assert_eq!(pacer.state.lock().unwrap().reading, 2);
    }
}
