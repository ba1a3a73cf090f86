//! [`PageAligned`]: a global-allocator wrapper that places every allocation of whole 4 KiB
//! pages at a page-aligned address, so that the buffers the I/O path hands to an `O_DIRECT`
//! device file need no aligned bounce copy.
//!
//! # Purpose
//! A device file opened with `O_DIRECT` takes only buffers whose address, offset and length
//! are aligned to the logical block size (tarn-device uses 4096). The pipeline's column
//! buffers, the device queue's copies of written columns and the label and uberblock
//! buffers are ordinary `Vec<u8>`s whose lengths are multiples of the sector size (ashift 12
//! by default), but their addresses are whatever the allocator chose: jemalloc (the `tarn`
//! binary's allocator) deliberately starts a large allocation at a random cache-line offset
//! inside its first page ("cache-oblivious" placement), and glibc's malloc puts its 16-byte
//! chunk header in front of every allocation. Either way `FileDevice` had to copy each
//! access through an aligned bounce buffer (docs/PERFORMANCE.md, "O_DIRECT for the device
//! files, again").
//!
//! Why an allocator rule rather than an aligned buffer type: the buffers are created and
//! handed on in many places (zio, vdev, the device queue, labels, the L2ARC) and travel as
//! `Vec<u8>` through `Device::submit_read`, `PendingRead` and the reconstruction code; a
//! separate type would change every one of those signatures for one property that the
//! allocator can give all of them at once. The cost is small: an allocation of whole pages
//! is at least a page, so asking for page alignment wastes nothing in jemalloc (its page
//! size classes are page-aligned once asked; only the random in-page offset goes away).
//!
//! # Model
//! ```text
//!   Layout { size, align }  ──rule──►  Layout { size, align: max(align, 4096) }
//!        if size >= 4096 and size % 4096 == 0; otherwise unchanged
//! ```
//! The rule is a pure function of the layout, applied in `alloc`, `alloc_zeroed`, `dealloc`
//! and `realloc`. Rust passes `dealloc` exactly the layout the block was allocated (or last
//! reallocated) with, so the inner allocator always frees a block with the layout it
//! allocated it with. A `realloc` whose old and new sizes fall on the same side of the rule
//! is the inner allocator's `realloc` (in place where it can); one that crosses the rule
//! allocates with the new layout, copies, and frees the old block with the old layout.
//!
//! # Invariants
//! - I1: every block allocated through [`PageAligned`] with a size that is a positive
//!   multiple of [`PAGE`] starts at a multiple of [`PAGE`]; every block keeps at least the
//!   alignment its caller asked for.
//! - I2: the inner allocator frees and reallocates each block with exactly the layout it
//!   gave it out with.
//! - I3: a `realloc` keeps the first `min(old, new)` bytes, whichever path it takes.
//!
//! # Failure model
//! The inner allocator's null (out of memory) is passed through unchanged; a `realloc` that
//! crosses the rule and cannot allocate returns null and leaves the old block untouched, as
//! `GlobalAlloc::realloc` requires.
//!
//! # Not here
//! Which allocator is below (the binary chooses: jemalloc for `tarn`, `System` in tests);
//! the `O_DIRECT` decision and the bounce path for what still arrives unaligned
//! (tarn-device `file`).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};

/// The alignment (and size granule) of the rule: the host's page, and a multiple of every
/// logical block size `O_DIRECT` asks for (512 or 4096).
pub const PAGE: usize = 4096;

/// A global allocator that aligns allocations of whole pages to [`PAGE`] (module docs).
#[derive(Debug, Default)]
pub struct PageAligned<A> {
    inner: A,
}

impl<A> PageAligned<A> {
    /// Wraps `inner` (usable in a `static`, as `#[global_allocator]` needs).
    pub const fn new(inner: A) -> PageAligned<A> {
        PageAligned { inner }
    }
}

/// The layout the inner allocator sees for `layout` (the module's rule).
#[must_use]
#[inline]
pub fn adjusted(layout: Layout) -> Layout {
    let size = layout.size();
    if size < PAGE || !size.is_multiple_of(PAGE) || layout.align() >= PAGE {
        return layout;
    }
    // A size that is a multiple of PAGE needs no padding to PAGE, so this layout is valid
    // whenever `layout` is; the fallback is never taken, and would be applied identically
    // at allocation and at deallocation anyway.
    Layout::from_size_align(size, PAGE).unwrap_or(layout)
}

// SAFETY: every method forwards to `inner`, a `GlobalAlloc`, with a layout derived by
// `adjusted`, which keeps the size and never lowers the alignment, so each block satisfies
// the caller's layout (I1). `adjusted` is a pure function of the caller's layout, and the
// caller must pass `dealloc`/`realloc` the layout the block was allocated with, so `inner`
// frees and resizes each block with the layout it allocated it with (I2). `realloc` across
// the rule allocates anew, copies min(old, new) bytes (both blocks are at least that long
// and distinct) and frees the old block only after the new one exists (I3, failure model).
unsafe impl<A: GlobalAlloc> GlobalAlloc for PageAligned<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `adjusted` keeps the nonzero size the caller guarantees.
        unsafe { self.inner.alloc(adjusted(layout)) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe { self.inner.alloc_zeroed(adjusted(layout)) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `inner` with `adjusted(layout)` (I2).
        unsafe { self.inner.dealloc(ptr, adjusted(layout)) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = adjusted(layout);
        // SAFETY: the caller guarantees that `new_size` rounded up to `layout.align()` does
        // not overflow isize, which is what makes this layout valid.
        let asked = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new = adjusted(asked);
        if new.align() == old.align() {
            // SAFETY: `ptr` came from `inner` with `old`; the new block keeps `old.align()`,
            // which is `adjusted(asked)`'s alignment, so a later dealloc with `asked` matches.
            return unsafe { self.inner.realloc(ptr, old, new_size) };
        }
        // SAFETY: `new` has the caller's nonzero new size.
        let fresh = unsafe { self.inner.alloc(new) };
        if !fresh.is_null() {
            // SAFETY: both blocks hold at least min(old, new) bytes and are distinct live
            // allocations; the old block is freed with the layout it was allocated with.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(new_size));
                self.inner.dealloc(ptr, old);
            }
        }
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// An inner allocator that records the layout of every live block and checks that each
    /// free and resize names the layout the block was given out with (I2).
    #[derive(Default)]
    struct Ledger {
        live: Mutex<Option<HashMap<usize, Layout>>>,
    }

    impl Ledger {
        fn record(&self, ptr: *mut u8, layout: Layout) {
            let mut live = self.live.lock().unwrap();
            let previous = live.get_or_insert_default().insert(ptr as usize, layout);
            assert!(previous.is_none(), "a block handed out twice");
        }

        fn release(&self, ptr: *mut u8, layout: Layout) {
            let mut live = self.live.lock().unwrap();
            let given = live.get_or_insert_default().remove(&(ptr as usize));
            assert_eq!(
                given,
                Some(layout),
                "I2: freed with the layout it was given"
            );
        }

        fn live_blocks(&self) -> usize {
            self.live.lock().unwrap().as_ref().map_or(0, HashMap::len)
        }
    }

    unsafe impl GlobalAlloc for Ledger {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let ptr = unsafe { System.alloc(layout) };
            self.record(ptr, layout);
            ptr
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            self.release(ptr, layout);
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            self.release(ptr, layout);
            let fresh = unsafe { System.realloc(ptr, layout, new_size) };
            let kept = Layout::from_size_align(new_size, layout.align()).unwrap();
            self.record(fresh, kept);
            fresh
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn the_rule_aligns_whole_pages_only() {
        // Goal: the rule touches exactly the sizes that are positive multiples of a page,
        // keeps every size and never lowers an alignment; a zero size is left alone.
        let cases = [
            (0, 1, 1),
            (1, 1, 1),
            (4095, 8, 8),
            (4096, 1, PAGE),
            (8192, 16, PAGE),
            (12_288, 8, PAGE),
            (4097, 8, 8),
            (1 << 20, 8, PAGE),
            (3 << 20, 1, PAGE),
            (4096, 8192, 8192),
        ];
        for (size, align, expected) in cases {
            let layout = adjusted(Layout::from_size_align(size, align).unwrap());
            assert_eq!(layout.size(), size, "size {size}");
            assert_eq!(layout.align(), expected, "size {size} align {align}");
        }
    }

    #[test]
    fn whole_page_blocks_are_aligned_and_freed_with_their_layout() {
        // Goal: I1 and I2 through the GlobalAlloc methods themselves, including realloc
        // within the rule, across it in both directions, and of a zero-filled block.
        let ledger = PageAligned::new(Ledger::default());
        unsafe {
            let small = Layout::from_size_align(3000, 8).unwrap();
            let ptr = ledger.alloc(small);
            std::ptr::copy_nonoverlapping(pattern(3000).as_ptr(), ptr, 3000);
            // Across the rule upward: a new aligned block with the old bytes.
            let grown = ledger.realloc(ptr, small, 8192);
            assert_eq!(grown as usize % PAGE, 0, "I1 after growing into the rule");
            assert_eq!(std::slice::from_raw_parts(grown, 3000), &pattern(3000)[..]);
            let whole = Layout::from_size_align(8192, 8).unwrap();
            // Within the rule: stays aligned.
            let bigger = ledger.realloc(grown, whole, 1 << 20);
            assert_eq!(
                bigger as usize % PAGE,
                0,
                "I1 after growing within the rule"
            );
            assert_eq!(std::slice::from_raw_parts(bigger, 3000), &pattern(3000)[..]);
            // Across the rule downward: keeps the first bytes (I3).
            let big = Layout::from_size_align(1 << 20, 8).unwrap();
            let shrunk = ledger.realloc(bigger, big, 100);
            assert_eq!(std::slice::from_raw_parts(shrunk, 100), &pattern(100)[..]);
            ledger.dealloc(shrunk, Layout::from_size_align(100, 8).unwrap());
            let zeroed_layout = Layout::from_size_align(4096 * 3, 1).unwrap();
            let zeroed = ledger.alloc_zeroed(zeroed_layout);
            assert_eq!(zeroed as usize % PAGE, 0);
            assert!(
                std::slice::from_raw_parts(zeroed, 4096 * 3)
                    .iter()
                    .all(|&b| b == 0)
            );
            ledger.dealloc(zeroed, zeroed_layout);
        }
        assert_eq!(ledger.inner.live_blocks(), 0, "every block freed");
    }
}
