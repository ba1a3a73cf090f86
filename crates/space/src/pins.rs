//! Pins that keep freed space from being reused while a reader without the pool lock may
//! still read it.
//!
//! A reader that found block pointers in the state of open txg T and reads them after
//! releasing the pool lock (tarn-engine's reads off the lock) must not find their space
//! reused meanwhile: a block it names can only be freed in txg T or later. While such a
//! reader holds a [`TxgPin`] of T, no free of txg T or later becomes allocatable
//! (`SpaceManager::txg_committed`), so every block it reads is the block its pointer names
//! or a copy a checksum rejects, never another block's bytes healed over. Frees of earlier
//! txgs name blocks that state no longer referenced, and are released as usual.
//!
//! # Invariants
//! - I1: [`TxgPins::oldest`] is the smallest txg of a live [`TxgPin`], or `None`.
//!
//! # Concurrency
//! Shared (`Arc`) between the space manager (syncing context, under the pool lock) and
//! readers on any thread; one short mutex, never held across I/O.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use tarn_base::Txg;

/// The live pins of one pool: txg -> how many readers hold it.
#[derive(Debug, Default)]
pub struct TxgPins {
    held: Mutex<BTreeMap<u64, usize>>,
}

impl TxgPins {
    /// Pins `txg` until the returned pin is dropped.
    pub fn pin(self: &Arc<Self>, txg: Txg) -> TxgPin {
        *self.lock().entry(txg.0).or_insert(0) += 1;
        TxgPin {
            pins: Arc::clone(self),
            txg,
        }
    }

    /// The oldest pinned txg (I1).
    #[must_use]
    pub fn oldest(&self) -> Option<Txg> {
        self.lock().keys().next().map(|&txg| Txg(txg))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, usize>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One reader's pin of a txg ([`TxgPins::pin`]); unpinned on drop.
#[derive(Debug)]
pub struct TxgPin {
    pins: Arc<TxgPins>,
    txg: Txg,
}

impl Drop for TxgPin {
    fn drop(&mut self) {
        let mut held = self.pins.lock();
        let count = held
            .get_mut(&self.txg.0)
            .expect("I1: a live pin is counted");
        *count -= 1;
        if *count == 0 {
            held.remove(&self.txg.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_is_the_smallest_live_pin() {
        let pins = Arc::new(TxgPins::default());
        assert_eq!(pins.oldest(), None);
        let seven = pins.pin(Txg(7));
        let five = pins.pin(Txg(5));
        let five_again = pins.pin(Txg(5));
        assert_eq!(pins.oldest(), Some(Txg(5)));
        drop(five);
        assert_eq!(pins.oldest(), Some(Txg(5)), "one reader of txg 5 remains");
        drop(five_again);
        assert_eq!(pins.oldest(), Some(Txg(7)));
        drop(seven);
        assert_eq!(pins.oldest(), None);
    }
}
