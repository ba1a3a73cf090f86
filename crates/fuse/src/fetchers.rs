//! Fetcher threads: reads whose blocks must come from the devices are finished here, so that
//! the session thread that took one goes back to taking requests instead of waiting for the
//! disk.
//!
//! Why: a mount has [`crate::SESSION_THREADS`] session threads. With every one of them
//! waiting for a device read, nothing else is served, and a cold random read of 4 KiB (a
//! whole record read from eight columns) kept at most four records in flight: 16 readers
//! after an import got 4-10k reads per second until the cache had the file, where the
//! devices could serve ten times that (docs/PERFORMANCE.md, "Cold reads off the session
//! threads"). Reads answered from the cache (the common case) stay on the session thread:
//! handing them on would cost a thread switch for nothing.
//!
//! # Model
//! One set of threads for the whole process, started on demand up to [`FETCHERS_MAX`], each
//! ending after [`IDLE_EXIT`] without work. [`Fetchers::offer`] gives a job to an idle
//! thread, or to a new one; when all [`FETCHERS_MAX`] are busy it hands the job back, and
//! the session thread runs it itself, as before: the number of device reads in flight for
//! requests stays bounded, and so does the memory they hold (a request's blocks, at most
//! [`crate::MAX_WRITE`] plus a record at each end).
//!
//! # Invariants
//! - F1: a job is queued only for an idle thread (`queued <= idle`): no job waits behind a
//!   busy one, and no job is ever left queued when the last thread ends.
//! - F2: at most [`FETCHERS_MAX`] threads.
//! - F3: the state's mutex is held for bookkeeping only, never while a job runs.
//!
//! # Failure model
//! A thread that cannot be started leaves the job to the caller. A job that panics ends its
//! thread (its reply is dropped unsent, which fuser answers with EIO, as on a session
//! thread); the count goes down as the thread unwinds (`Ending`), so another can start. A
//! poisoned mutex (a panic while holding it, which nothing here can cause) turns every
//! offer down.
//!
//! # Not here
//! Which reads are handed on (the caller decides: [`crate::ops`]'s READ), and any order among
//! them: FUSE answers may come in any order, and the kernel orders a read against a write of
//! the same pages by the page locks it holds until each reply.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

/// Most fetcher threads at once: sixteen requests' device reads in flight besides the
/// session threads' own, which is what sixteen concurrent readers need, and more than one
/// read per device thread of a ten-device pool (tarn-device `IO_THREADS`).
pub(crate) const FETCHERS_MAX: usize = 16;
/// How long a fetcher without work waits before it ends.
const IDLE_EXIT: Duration = Duration::from_secs(10);

/// Work for a fetcher: the rest of one request, its reply included.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct State {
    queued: VecDeque<Job>,
    /// Threads waiting for a job (those a queued job is for included).
    idle: usize,
    threads: usize,
}

/// The process's fetcher threads (module doc).
pub(crate) struct Fetchers {
    state: Mutex<State>,
    work: Condvar,
    max: usize,
}

impl Fetchers {
    fn new(max: usize) -> Fetchers {
        Fetchers {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            max,
        }
    }

    /// The process's set.
    pub(crate) fn global() -> &'static Fetchers {
        static GLOBAL: OnceLock<Fetchers> = OnceLock::new();
        GLOBAL.get_or_init(|| Fetchers::new(FETCHERS_MAX))
    }

    /// Runs `job` on a fetcher thread and returns at once, or gives it back when every
    /// fetcher is busy (or none could be started): the caller then runs it.
    pub(crate) fn offer(&'static self, job: Job) -> Result<(), Job> {
        let Ok(mut state) = self.state.lock() else {
            return Err(job);
        };
        if state.queued.len() < state.idle {
            state.queued.push_back(job);
            drop(state);
            self.work.notify_one();
            return Ok(());
        }
        if state.threads >= self.max {
            return Err(job);
        }
        // A new thread counts as idle from here, with the job queued for it (F1). Started
        // under the lock, so that a refusal takes back this very job; this happens at most
        // `max` times per idle period.
        state.threads += 1;
        state.idle += 1;
        state.queued.push_back(job);
        let started = std::thread::Builder::new()
            .name("fuse-fetch".into())
            .spawn(move || self.serve());
        if started.is_err() {
            state.threads -= 1;
            state.idle -= 1;
            if let Some(job) = state.queued.pop_back() {
                return Err(job);
            }
        }
        Ok(())
    }

    /// A fetcher's life (counted idle by whoever started it): the jobs queued, until none
    /// came for [`IDLE_EXIT`].
    fn serve(&self) {
        let _ending = Ending(self);
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        loop {
            let waited = self
                .work
                .wait_timeout_while(state, IDLE_EXIT, |state| state.queued.is_empty());
            let Ok((next, _)) = waited else {
                return;
            };
            state = next;
            state.idle -= 1;
            let Some(job) = state.queued.pop_front() else {
                // F1: with nothing queued no job can be waiting for this thread.
                state.threads -= 1;
                return;
            };
            drop(state);
            job();
            let Ok(again) = self.state.lock() else {
                return;
            };
            state = again;
            state.idle += 1;
        }
    }
}

/// Takes a thread whose job panicked out of the count (failure model), so that the set
/// can start another in its place.
struct Ending<'a>(&'a Fetchers);

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Ok(mut state) = self.0.state.lock()
        {
            state.threads -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    fn leaked(max: usize) -> &'static Fetchers {
        Box::leak(Box::new(Fetchers::new(max)))
    }

    /// Goal: up to the limit every job runs at once on a thread of its own, the next one
    /// is handed back, and a thread freed by its job takes the next offer.
    #[test]
    fn jobs_run_at_once_up_to_the_limit_then_are_handed_back() {
        let fetchers = leaked(3);
        let (started_tx, started) = mpsc::channel();
        let release = Arc::new((Mutex::new(false), Condvar::new()));
        let blocking = |id: usize| -> Job {
            let started_tx = started_tx.clone();
            let release = Arc::clone(&release);
            Box::new(move || {
                started_tx.send(id).unwrap();
                let (lock, cv) = &*release;
                let _unused = cv.wait_while(lock.lock().unwrap(), |go| !*go).unwrap();
            })
        };
        for id in 0..3 {
            assert!(fetchers.offer(blocking(id)).is_ok(), "job {id} refused");
        }
        let mut ids: Vec<usize> = (0..3).map(|_| started.recv().unwrap()).collect();
        ids.sort_unstable();
        assert_eq!(ids, [0, 1, 2], "all three run at the same time");
        assert!(
            fetchers.offer(blocking(3)).is_err(),
            "a fourth is handed back"
        );
        {
            let (lock, cv) = &*release;
            *lock.lock().unwrap() = true;
            cv.notify_all();
        }
        // Once a thread is idle again, an offer goes to it rather than a new thread.
        while fetchers.state.lock().unwrap().idle == 0 {
            std::thread::yield_now();
        }
        let ran = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&ran);
        let (done_tx, done) = mpsc::channel();
        let job: Job = Box::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            done_tx.send(()).unwrap();
        });
        assert!(fetchers.offer(job).is_ok());
        done.recv().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        let state = fetchers.state.lock().unwrap();
        assert!(state.threads <= 3, "F2: {} threads", state.threads);
        assert!(state.queued.len() <= state.idle, "F1");
    }

    /// Goal: a job that panics ends its thread and leaves room for another: with one
    /// thread allowed, the next offer after the panic is taken, not handed back. Negative
    /// control: without `Ending`, the count stayed at one and the offer was handed back.
    #[test]
    fn a_panicking_job_gives_its_place_back() {
        let fetchers = leaked(1);
        let (done_tx, done) = mpsc::channel::<()>();
        let job: Job = Box::new(move || {
            let _done = done_tx;
            panic!("a job's panic");
        });
        assert!(fetchers.offer(job).is_ok());
        // The sender drops as the job unwinds; the count drops just after.
        assert!(done.recv().is_err());
        for _ in 0..5000 {
            if fetchers.state.lock().unwrap().threads == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let (ran_tx, ran) = mpsc::channel();
        let job: Job = Box::new(move || ran_tx.send(()).unwrap());
        assert!(fetchers.offer(job).is_ok(), "the place was given back");
        ran.recv().unwrap();
    }
}
