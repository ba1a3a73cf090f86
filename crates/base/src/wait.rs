//! A hint from code about to block: "this thread is going to wait now".
//!
//! A thread that serves requests one at a time for others (a FUSE session thread) may be the
//! only one reading new requests; before it blocks on the pool lock, a txg commit, a device
//! or a suspended pool, it should hand that duty to another thread, or every request behind
//! it waits as long as it does. Such a thread registers a [`WaitHint`] with [`set_hint`];
//! code in any layer calls [`before_wait`] right before a wait that can last (a contended
//! lock, a condition variable, an I/O completion). Threads without a hint pay one
//! thread-local read.

use std::cell::RefCell;
use std::sync::Arc;

/// What a thread does when it is about to wait (see the module).
pub trait WaitHint: Send + Sync {
    /// Called on the waiting thread, before it waits; must not block.
    fn before_wait(&self);
}

thread_local! {
    static HINT: RefCell<Option<Arc<dyn WaitHint>>> = const { RefCell::new(None) };
}

/// Registers `hint` for this thread (`None` removes it).
pub fn set_hint(hint: Option<Arc<dyn WaitHint>>) {
    HINT.with(|slot| *slot.borrow_mut() = hint);
}

/// Whether this thread has a hint registered.
#[must_use]
pub fn has_hint() -> bool {
    HINT.with(|slot| slot.borrow().is_some())
}

/// Tells this thread's hint, if any, that the thread is about to wait.
pub fn before_wait() {
    let hint = HINT.with(|slot| slot.borrow().clone());
    if let Some(hint) = hint {
        hint.before_wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Count(AtomicUsize);

    impl WaitHint for Count {
        fn before_wait(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn only_the_registering_thread_is_told() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        before_wait();
        set_hint(Some(count.clone()));
        assert!(has_hint());
        before_wait();
        std::thread::spawn(before_wait).join().unwrap();
        before_wait();
        set_hint(None);
        before_wait();
        assert_eq!(count.0.load(Ordering::Relaxed), 2);
    }
}
