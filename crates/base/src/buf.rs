//! Byte buffers for the I/O paths: zero-filled without asking the allocator for zeroed memory.
//!
//! `vec![0u8; n]` asks the allocator for *zeroed* memory. jemalloc (the daemon's allocator)
//! answers a zeroed request for a large size class from a recycled extent by handing its
//! pages back to the kernel (`madvise(MADV_DONTNEED)`) so that they fault in as fresh zero
//! pages: a system call, a TLB shootdown on every other CPU running the process, and then
//! one page fault and one kernel page clear per 4 KiB when the buffer is filled. A block read
//! or written makes several such buffers, so in profiles of streaming reads through NBD
//! about half of the serving threads' time went to those faults and shootdowns
//! (docs/PERFORMANCE.md, "Allocation on the I/O path"). [`zeroed`] asks for plain memory and
//! fills it with zeros itself: a recycled extent's pages are still resident, so that is one
//! `memset`. A buffer of the size the stock keeps (`stock::take_ready`) comes from it,
//! pages resident: block buffers are new memory while the ARC grows, and their first fill
//! took a fault per page on the reading thread.
//!
//! # Invariants
//! - I1: [`zeroed`]`(n)` is `n` zero bytes, exactly as `vec![0u8; n]`.
//!
//! # Not here
//! Buffer pools: a buffer goes back to the allocator when dropped; jemalloc's per-thread
//! caches and dirty extents already recycle it (the stock only makes new ones ready).

/// `len` zero bytes in a fresh vector (I1), filled by the program rather than by zeroed
/// pages from the allocator (see the module).
#[must_use]
pub fn zeroed(len: usize) -> Vec<u8> {
    // Hidden from the optimiser: it folds "allocate, then fill with zeros" back into a
    // zeroed allocation, which is exactly what this avoids.
    let mut buffer = std::hint::black_box(crate::stock::take_ready(len));
    buffer.resize(len, 0);
    buffer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_is_len_zero_bytes() {
        for len in [0, 1, 4095, 4096, 131_072, 1 << 20] {
            let buffer = zeroed(len);
            assert_eq!(buffer.len(), len);
            assert!(buffer.iter().all(|&b| b == 0));
        }
        // Memory handed back dirty and asked for again is still zero-filled.
        let mut dirty = zeroed(1 << 20);
        dirty.fill(0xa5);
        drop(dirty);
        assert!(zeroed(1 << 20).iter().all(|&b| b == 0));
    }
}
