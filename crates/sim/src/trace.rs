//! The run's trace: every operation and its result folded into one 64-bit FNV-1a hash, so two
//! runs of a seed can be compared with one number, plus the last few lines kept in a bounded
//! ring for the failure report.

use std::collections::VecDeque;

/// Lines of the trace kept for a failure report.
pub const TRACE_TAIL_LINES: usize = 24;

/// FNV-1a, 64 bit: tiny, deterministic, and good enough to tell two traces apart.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fnv(u64);

impl Fnv {
    pub(crate) fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    pub(crate) fn add(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub(crate) fn finish(self) -> u64 {
        self.0
    }
}

/// The hash of every line so far and the last [`TRACE_TAIL_LINES`] lines.
#[derive(Debug)]
pub(crate) struct Trace {
    hash: Fnv,
    tail: VecDeque<String>,
    lines: u64,
    echo: bool,
}

impl Trace {
    pub(crate) fn new(echo: bool) -> Self {
        Trace {
            hash: Fnv::new(),
            tail: VecDeque::new(),
            lines: 0,
            echo,
        }
    }

    pub(crate) fn line(&mut self, line: String) {
        self.hash.add(line.as_bytes());
        self.hash.add(b"\n");
        self.lines += 1;
        if self.echo {
            println!("{line}");
        }
        if self.tail.len() == TRACE_TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line);
    }

    pub(crate) fn hash(&self) -> u64 {
        self.hash.finish()
    }

    pub(crate) fn lines(&self) -> u64 {
        self.lines
    }

    pub(crate) fn tail(&self) -> Vec<String> {
        self.tail.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_depends_on_every_line_and_tail_is_bounded() {
        let mut a = Trace::new(false);
        let mut b = Trace::new(false);
        for i in 0..100 {
            a.line(format!("op {i}"));
            b.line(format!("op {i}"));
        }
        assert_eq!(a.hash(), b.hash());
        b.line("one more".into());
        assert_ne!(a.hash(), b.hash());
        assert_eq!(a.tail().len(), TRACE_TAIL_LINES);
        assert_eq!(a.tail().last().map(String::as_str), Some("op 99"));
        assert_eq!(a.lines(), 100);
    }
}
