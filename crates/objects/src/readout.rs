//! A read's bytes as the blocks they lie in ([`ObjectSet::read_out`]): the caller copies
//! them into one buffer after it let go of whatever lock guards the object set.
//!
//! # Purpose
//! A read of a cached record used to copy it into the caller's buffer while the object set
//! was borrowed, which for the engine means under the pool lock: a 1 MiB read held the lock
//! for a 1 MiB copy, and zero-filled its buffer first. [`ReadOut`] holds the clean blocks
//! themselves (shared with the cache, so no copy is made while the lock is held) and copies
//! only what can change once the lock is gone: dirty data and records kept as pieces.
//!
//! # Invariants
//! - R1: [`ReadOut::into_vec`] is exactly what [`ObjectSet::read`] would have written into a
//!   buffer of [`ReadOut::len`] bytes at the time `read_out` ran: a clean block never
//!   changes (a block pointer names fixed bytes), and every other part was copied then.
//! - R2: the parts cover the range in order, without gaps or overlaps.
//!
//! # Failure model
//! Errors are those of the read (the first block that cannot be read fails it); nothing
//! here can fail afterwards.
//!
//! # Replies made of several buffers
//! The FUSE reply takes one slice, so a file read is joined once, outside the lock, into a
//! buffer that is not zero-filled first ([`ReadOut::into_vec`]). The NBD server writes a
//! reply from several (`writev`), so a volume read hands over [`ReadOut::runs`] instead and
//! its bytes go from the cache's blocks to the socket without any copy of ours.
//!
//! [`ObjectSet::read_out`]: crate::ObjectSet::read_out
//! [`ObjectSet::read`]: crate::ObjectSet::read

use std::sync::Arc;

/// One run of a read's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    /// `len` bytes at `start` of a clean block, shared with the cache.
    Block {
        block: Arc<Vec<u8>>,
        start: usize,
        len: usize,
    },
    /// Bytes copied when the read ran (dirty data, pieces laid over their record).
    Copied(Vec<u8>),
    /// A hole or a never-written range.
    Zeros(usize),
}

impl Part {
    fn len(&self) -> usize {
        match self {
            Part::Block { len, .. } | Part::Zeros(len) => *len,
            Part::Copied(bytes) => bytes.len(),
        }
    }
}

/// One run of a read's bytes ([`ReadOut::runs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run<'a> {
    /// These bytes.
    Bytes(&'a [u8]),
    /// This many zero bytes (a hole or a never-written range), not stored anywhere.
    Zeros(usize),
}

/// The bytes of one read, by the blocks they lie in (module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadOut {
    parts: Vec<Part>,
    len: usize,
}

impl ReadOut {
    /// Bytes read.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if nothing was read.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The read's bytes as runs, in order and covering it (R1, R2), without copying
    /// them: a clean block's run borrows the cached block itself.
    pub fn runs(&self) -> impl Iterator<Item = Run<'_>> {
        self.parts.iter().map(|part| match part {
            Part::Block { block, start, len } => Run::Bytes(&block[*start..*start + *len]),
            Part::Copied(bytes) => Run::Bytes(bytes),
            Part::Zeros(len) => Run::Zeros(*len),
        })
    }

    /// The read's bytes without copying them, when they lie in one run of bytes (a read
    /// inside one block: most reads); `None` when a caller must join them.
    #[must_use]
    pub fn contiguous(&self) -> Option<&[u8]> {
        match self.parts.as_slice() {
            [] => Some(&[]),
            [Part::Block { block, start, len }] => Some(&block[*start..*start + *len]),
            [Part::Copied(bytes)] => Some(bytes),
            _ => None,
        }
    }

    /// Bytes this read copied while it ran (dirty data, pieces), as against bytes shared
    /// with the cache or zeros that exist nowhere: what a reply made of [`ReadOut::runs`]
    /// cost in copies.
    #[must_use]
    pub fn copied_len(&self) -> usize {
        self.parts
            .iter()
            .map(|part| match part {
                Part::Copied(bytes) => bytes.len(),
                Part::Block { .. } | Part::Zeros(_) => 0,
            })
            .sum()
    }

    /// The bytes in one buffer (R1). A read of one copied part is returned as it is.
    #[must_use]
    pub fn into_vec(mut self) -> Vec<u8> {
        if let [Part::Copied(bytes)] = self.parts.as_mut_slice() {
            return std::mem::take(bytes);
        }
        // Not zero-filled first: every byte comes from a part (R2).
        let mut out = Vec::with_capacity(self.len);
        for part in &self.parts {
            match part {
                Part::Block { block, start, len } => {
                    out.extend_from_slice(&block[*start..*start + *len]);
                }
                Part::Copied(bytes) => out.extend_from_slice(bytes),
                Part::Zeros(len) => out.resize(out.len() + *len, 0),
            }
        }
        assert_eq!(out.len(), self.len, "R2: the parts cover the read");
        out
    }

    pub(crate) fn push_block(&mut self, block: Arc<Vec<u8>>, start: usize, len: usize) {
        assert!(start + len <= block.len(), "a part lies inside its block");
        self.push(Part::Block { block, start, len });
    }

    pub(crate) fn push_copied(&mut self, bytes: Vec<u8>) {
        self.push(Part::Copied(bytes));
    }

    pub(crate) fn push_zeros(&mut self, len: usize) {
        if let Some(Part::Zeros(last)) = self.parts.last_mut() {
            *last += len;
            self.len += len;
            return;
        }
        self.push(Part::Zeros(len));
    }

    fn push(&mut self, part: Part) {
        self.len += part.len();
        self.parts.push(part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_joined_in_order_and_zeros_merge() {
        let block = Arc::new((0u8..16).collect::<Vec<_>>());
        let mut out = ReadOut::default();
        out.push_block(Arc::clone(&block), 12, 4);
        out.push_zeros(2);
        out.push_zeros(1);
        out.push_copied(vec![7, 7]);
        out.push_block(block, 0, 3);
        assert_eq!(out.len(), 12);
        assert_eq!(out.parts.len(), 4, "adjacent zeros are one part");
        let runs: Vec<Run<'_>> = out.runs().collect();
        assert_eq!(
            runs,
            vec![
                Run::Bytes(&[12, 13, 14, 15]),
                Run::Zeros(3),
                Run::Bytes(&[7, 7]),
                Run::Bytes(&[0, 1, 2]),
            ]
        );
        assert_eq!(out.copied_len(), 2, "only the copied part was copied");
        assert_eq!(out.into_vec(), vec![12, 13, 14, 15, 0, 0, 0, 7, 7, 0, 1, 2]);
    }

    #[test]
    fn a_single_copied_part_is_handed_over_and_empty_reads_are_empty() {
        let mut out = ReadOut::default();
        assert!(out.is_empty());
        assert!(out.clone().into_vec().is_empty());
        out.push_copied(vec![1, 2, 3]);
        assert_eq!(out.into_vec(), vec![1, 2, 3]);
    }
}
