//! Read destinations that are ranges of one buffer: a raidz block's data columns read
//! straight into the block's buffer by the devices' I/O threads.
//!
//! # Why
//! A raidz block's data columns are consecutive ranges of the block. Read as separate
//! buffers, every column cost a fresh buffer (zero-filled, page faults of its fresh pages)
//! and a copy into the block once it arrived: in profiles of a cold sequential read about a
//! sixth of the daemon's time (docs/PERFORMANCE.md, "Reads with less CPU per byte"). A
//! [`SplitBuf`] hands out each column as a [`BufPart`], an owned, writable range of the
//! block's buffer that can travel to a device's I/O thread
//! ([`crate::Device::submit_read_into`]) and back; once every part is back, the buffer is a
//! `Vec` again ([`SplitBuf::into_vec`]), with no copy. The buffer's own allocation is kept,
//! so a page-aligned buffer (`tarn_base::page_align`) gives page-aligned parts wherever the
//! ranges start at multiples of the page size, as `O_DIRECT` needs.
//!
//! # Invariants
//! - S1: the parts of one buffer are disjoint ranges inside it (asserted where they are
//!   made), so each part is the only access to its bytes; nothing else reads or writes the
//!   buffer while any part exists ([`SplitBuf`] gives no access to its bytes).
//! - S2: the buffer is freed once, with the layout it was allocated with: by
//!   [`SplitBuf::into_vec`]'s `Vec`, or by the last of the split and its parts dropped.
//!
//! # Failure model
//! None at run time: overlapping or out-of-range parts, and taking the buffer back while a
//! part is still out, are callers' bugs and panic (S1).
//!
//! This module uses `unsafe` (the raw parts of the buffer, and a slice per part); every
//! block carries a `SAFETY:` comment (STYLE.md §5).
#![allow(unsafe_code)]

use std::ops::{Deref, DerefMut, Range};
use std::ptr::NonNull;
use std::sync::Arc;

/// The buffer's raw parts, owned here while it is split (S2).
#[derive(Debug)]
struct Whole {
    ptr: NonNull<u8>,
    len: usize,
    capacity: usize,
}

// SAFETY: `Whole` owns its allocation like the `Vec<u8>` it was made from; it is only
// ever read through its parts (disjoint, S1) and freed once (S2), so sharing the owner
// between threads shares no bytes.
unsafe impl Send for Whole {}
// SAFETY: as for `Send`; `Whole` has no method that touches the bytes through `&self`.
unsafe impl Sync for Whole {}

impl Drop for Whole {
    fn drop(&mut self) {
        // SAFETY: the raw parts of a `Vec<u8>` not freed yet (S2: `into_vec` forgets the
        // `Whole` it takes them from).
        drop(unsafe { Vec::from_raw_parts(self.ptr.as_ptr(), self.len, self.capacity) });
    }
}

/// A buffer split into [`BufPart`]s (module docs).
#[derive(Debug)]
pub struct SplitBuf {
    whole: Arc<Whole>,
}

/// One range of a [`SplitBuf`]'s buffer, writable by whoever holds it.
#[derive(Debug)]
pub struct BufPart {
    /// Keeps the allocation alive while the part exists (S2).
    _whole: Arc<Whole>,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a part is the only access to its range (S1), like a `&mut [u8]` it owns.
unsafe impl Send for BufPart {}

impl SplitBuf {
    /// Splits `buf` into one part per range of `ranges`, which must be in increasing order,
    /// disjoint and inside the buffer (S1).
    #[must_use]
    pub fn split(buf: Vec<u8>, ranges: &[Range<usize>]) -> (SplitBuf, Vec<BufPart>) {
        let mut end = 0;
        for range in ranges {
            assert!(
                end <= range.start && range.start <= range.end && range.end <= buf.len(),
                "S1: part {range:?} of a {}-byte buffer after byte {end}",
                buf.len()
            );
            end = range.end;
        }
        let mut buf = std::mem::ManuallyDrop::new(buf);
        let whole = Arc::new(Whole {
            ptr: NonNull::new(buf.as_mut_ptr()).expect("a Vec's pointer is not null"),
            len: buf.len(),
            capacity: buf.capacity(),
        });
        let parts = ranges
            .iter()
            .map(|range| BufPart {
                _whole: Arc::clone(&whole),
                // SAFETY: `range.start <= len` (asserted above): inside the allocation or
                // one past its end.
                ptr: unsafe { NonNull::new_unchecked(whole.ptr.as_ptr().add(range.start)) },
                len: range.len(),
            })
            .collect();
        (SplitBuf { whole }, parts)
    }

    /// The buffer again, once every part was dropped (S1; panics otherwise).
    #[must_use]
    pub fn into_vec(self) -> Vec<u8> {
        let whole = Arc::try_unwrap(self.whole)
            .unwrap_or_else(|_| panic!("S1: a part of the buffer is still out"));
        let whole = std::mem::ManuallyDrop::new(whole);
        // SAFETY: the raw parts of the `Vec` the split took; `whole` is not dropped, so the
        // allocation is freed once, by this `Vec` (S2).
        unsafe { Vec::from_raw_parts(whole.ptr.as_ptr(), whole.len, whole.capacity) }
    }
}

impl Deref for BufPart {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the range lies inside the live allocation (S1, S2) and nothing else
        // accesses it while the part exists (S1).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for BufPart {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: parts written on other threads are the buffer's bytes afterwards, in place (the
    /// same allocation, so no copy), and untouched bytes keep their values.
    #[test]
    fn parts_written_elsewhere_are_the_buffer_in_place() {
        let buf = tarn_base::buf::zeroed(3 * 4096);
        let at = buf.as_ptr();
        let (split, parts) = SplitBuf::split(buf, &[0..4096, 8192..12288]);
        assert_eq!(parts[1].as_ptr() as usize - at as usize, 8192);
        let threads: Vec<_> = parts
            .into_iter()
            .enumerate()
            .map(|(i, mut part)| std::thread::spawn(move || part.fill(i as u8 + 1)))
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let buf = split.into_vec();
        assert_eq!(buf.as_ptr(), at);
        assert!(buf[..4096].iter().all(|&b| b == 1));
        assert!(buf[4096..8192].iter().all(|&b| b == 0));
        assert!(buf[8192..].iter().all(|&b| b == 2));
    }

    #[test]
    #[should_panic(expected = "S1")]
    fn overlapping_parts_are_refused() {
        let _ = SplitBuf::split(vec![0; 100], &[0..50, 40..60]);
    }

    #[test]
    #[should_panic(expected = "S1: a part of the buffer is still out")]
    fn the_buffer_does_not_come_back_while_a_part_is_out() {
        let (split, parts) = SplitBuf::split(vec![0; 100], &[0..50, 60..70]);
        let _kept = parts;
        let _ = split.into_vec();
    }

    /// A split dropped before its parts frees the buffer once, with the last part (S2).
    #[test]
    fn the_last_owner_frees_the_buffer() {
        let (split, parts) = SplitBuf::split(vec![7; 100], &[0..10, 10..20]);
        drop(split);
        assert!(parts.iter().all(|part| part.iter().all(|&b| b == 7)));
    }
}
