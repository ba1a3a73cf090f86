//! Write data a device may keep without copying it: a range of a reference-counted buffer.
//!
//! # Why
//! A txg writes its blocks from `Arc<Vec<u8>>` buffers that the pipeline's journal (and for
//! level-0 blocks the object cache) keep until the txg commits, and a raidz data column is a
//! range of such a block. A write-behind queue ([`crate::QueuedDevice`]) that took the
//! column as `&[u8]` had to copy it before acknowledging, which for a streaming write was
//! one more `memcpy` of every byte and the page faults of a fresh buffer per column
//! (docs/PERFORMANCE.md, "Write CPU per byte"). A [`SharedBytes`] hands the queue a
//! reference instead ([`crate::Device::write_shared`]); the queue keeps it until the I/O
//! thread has written it.
//!
//! # Invariants
//! - I1: the bytes a `SharedBytes` names never change while it exists: the buffer sits behind
//!   an `Arc`, and nothing here hands out a mutable reference to it (an owner that wants to
//!   change its block must `Arc::make_mut`, which copies while a queue still holds it).
//! - I2: the range lies inside the buffer (asserted where a range is made).
//!
//! # Failure model
//! None: a range outside the buffer is a caller's bug and panics (I2).

use std::ops::{Deref, Range};
use std::sync::Arc;

/// `O_DIRECT`'s memory alignment, and the page size of the allocator wrapper that aligns
/// whole-page buffers (`tarn_base::page_align`).
const PAGE: usize = 4096;

/// Bytes `start..end` of a shared buffer (module docs).
#[derive(Clone, Debug)]
pub struct SharedBytes {
    buf: Arc<Vec<u8>>,
    start: usize,
    end: usize,
}

impl SharedBytes {
    /// The whole of `buf`.
    #[must_use]
    pub fn new(buf: Arc<Vec<u8>>) -> SharedBytes {
        let end = buf.len();
        SharedBytes { buf, start: 0, end }
    }

    /// Bytes `range` of these bytes, sharing the same buffer (I2).
    #[must_use]
    pub fn slice(&self, range: Range<usize>) -> SharedBytes {
        assert!(
            range.start <= range.end && range.end <= self.len(),
            "I2: range {range:?} of {} shared bytes",
            self.len()
        );
        SharedBytes {
            buf: Arc::clone(&self.buf),
            start: self.start + range.start,
            end: self.start + range.end,
        }
    }

    /// Whether these bytes start on a page boundary in memory, or could not gain from a copy
    /// that would (their length is not whole pages): what a queue checks before it keeps
    /// them for a device that may be open `O_DIRECT` (tarn-device I6).
    #[must_use]
    pub fn aligned_enough(&self) -> bool {
        (self.as_ptr() as usize).is_multiple_of(PAGE) || !self.len().is_multiple_of(PAGE)
    }

    /// The buffer these bytes are part of.
    #[must_use]
    pub fn buffer(&self) -> &Arc<Vec<u8>> {
        &self.buf
    }
}

impl From<Vec<u8>> for SharedBytes {
    fn from(buf: Vec<u8>) -> SharedBytes {
        SharedBytes::new(Arc::new(buf))
    }
}

impl Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_names_its_range_of_the_same_buffer() {
        let mut bytes = tarn_base::buf::zeroed(3 * PAGE);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = i as u8;
        }
        let buf = Arc::new(bytes);
        let whole = SharedBytes::new(Arc::clone(&buf));
        let column = whole.slice(PAGE..2 * PAGE);
        assert_eq!(&*column, &buf[PAGE..2 * PAGE]);
        let inner = column.slice(10..20);
        assert_eq!(&*inner, &buf[PAGE + 10..PAGE + 20]);
        assert!(Arc::ptr_eq(inner.buffer(), &buf), "no copy");
        assert_eq!(Arc::strong_count(&buf), 4);
        // Whole pages of a page-aligned buffer (the unit tests run under PageAligned).
        assert!(whole.aligned_enough() && column.aligned_enough());
        assert!(!whole.slice(8..8 + PAGE).aligned_enough());
        assert!(whole.slice(8..16).aligned_enough(), "not whole pages");
    }

    #[test]
    #[should_panic(expected = "I2")]
    fn a_range_past_the_end_is_refused() {
        let whole = SharedBytes::from(vec![0u8; 16]);
        let _ = whole.slice(8..17);
    }
}
