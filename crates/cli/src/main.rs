//! tarn-cli: the `tarn` command, a ZFS admin's habits over the tarn daemon.
//!
//! # Purpose
//! Parse the command line, turn it into one tarn-proto request, hand it to the daemon
//! (starting it when needed), and print the reply in the layout `zpool` prints: tables for
//! `list`/`get`, the `status` and `import` blocks, `history` lines. `tarn daemon` runs the
//! daemon itself.
//!
//! # Model
//! ```text
//!   argv --clap--> args::Cli --run::plan--> Plan { request, verb, object, view }
//!        --tarn_daemon::Client--> Response --render::*--> stdout   (or -j: JSON)
//!                                          \-> Error: "cannot <verb> '<object>': <why>" on stderr
//! ```
//! Everything between argv and text is pure (`run::plan`, `render`), so it is tested
//! without a daemon; only `run::execute` talks to the socket.
//!
//! # State
//! None. The CLI keeps nothing between invocations; the daemon owns pools.
//!
//! # Invariants
//! - I1: a refused or failed command prints exactly one line to stderr, in the shape
//!   `cannot <verb> '<object>': <message>` (or `cannot <verb>: <message>` when no single
//!   object is involved), and exits 1; usage errors exit 2; success exits 0.
//! - I2: every device path and `-d` directory sent to the daemon is absolute (the daemon's
//!   working directory is `/`).
//! - I3: the vdev grammar is checked here; a request that reaches the daemon satisfies I4 of
//!   tarn-proto.
//!
//! # Concurrency and context
//! Single-threaded: one request, one connection.
//!
//! # Failure model
//! An unreachable daemon is `cannot connect to tarn daemon at <socket>: <why>`. A reply of
//! the wrong kind for the command (a daemon of another version) is reported as a refusal;
//! the CLI never panics on a reply.
//!
//! # Not here
//! The stream of `send`/`receive`: the CLI passes its stdout or stdin to the daemon
//! (tarn-daemon, "Streams") and never touches the bytes. Verbs without engine support yet
//! (clones, bookmarks, `send -R`) are not offered.
//! The meaning of properties and their validation belong to the engine; the CLI only knows
//! which ones print as sizes or percentages.

mod args;
mod checksum;
mod datasets;
mod demo;
mod demo_fs;
mod iostat;
mod json;
mod manual;
mod memory;
mod progress;
mod render;
mod run;
mod userspace;
mod vdevspec;

/// jemalloc, for the daemon above all: it hands freed pages back to the system after a few
/// seconds and keeps a bounded number of arenas, so the daemon's RSS follows what it holds
/// (glibc's malloc kept freed ARC blocks resident in every thread's arena: issue 15 and
/// docs/PERFORMANCE.md "Memory"). Its statistics feed `tarn memory` (tarn-daemon `memory`).
/// Wrapped so that every buffer of whole pages is page-aligned (jemalloc alone starts large
/// ones at a random offset inside their first page): the device files' `O_DIRECT` accesses
/// then take the pipeline's buffers as they are (tarn-base `page_align`).
#[global_allocator]
static ALLOCATOR: tarn_base::page_align::PageAligned<tikv_jemallocator::Jemalloc> =
    tarn_base::page_align::PageAligned::new(tikv_jemallocator::Jemalloc);

fn main() {
    let argv = args::entry_point(std::env::args_os().collect());
    let cli = args::parse(&argv);
    let outcome = run::run(cli);
    // A reader that went away (`tarn list | head`) is not an error worth a panic: the
    // command's work is done and its status stands.
    use std::io::Write;
    let _ = std::io::stdout().write_all(outcome.stdout.as_bytes());
    let _ = std::io::stderr().write_all(outcome.stderr.as_bytes());
    std::process::exit(outcome.code);
}

#[cfg(test)]
mod allocator_tests {
    /// Goal: under the binary's allocator (jemalloc wrapped by `PageAligned`), buffers of
    /// whole pages are page-aligned at every size class the I/O path uses, also after a
    /// `Vec` grew into the rule, and other sizes still work. Negative control: with the bare
    /// `Jemalloc` as the global allocator the large sizes start inside their first page.
    #[test]
    fn whole_page_buffers_are_page_aligned_under_jemalloc() {
        let page = tarn_base::page_align::PAGE;
        let mut kept = Vec::new();
        for pages in [1usize, 2, 3, 4, 5, 16, 32, 33, 64, 256, 1024] {
            for _ in 0..8 {
                let buffer = tarn_base::buf::zeroed(pages * page);
                assert_eq!(buffer.as_ptr() as usize % page, 0, "{pages} pages");
                kept.push(buffer);
            }
        }
        let mut grown: Vec<u8> = (0..100u8).collect();
        grown.reserve_exact(128 * 1024 - grown.len());
        assert_eq!(grown.capacity(), 128 * 1024);
        assert_eq!(grown.as_ptr() as usize % page, 0, "grown into the rule");
        assert!(
            grown.iter().copied().eq(0..100u8),
            "bytes kept across the rule"
        );
        let odd = vec![7u8; 5000];
        assert!(odd.iter().all(|&b| b == 7));
    }

    /// Minor page faults of the calling thread so far (/proc/thread-self/stat, field 10).
    fn thread_minor_faults() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        // The fields after the command name, which is in parentheses and may hold spaces.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        rest.split(' ').nth(7).unwrap().parse().unwrap()
    }

    /// Goal: record buffers freed in the order they were made, as the ARC evicts written
    /// records, are used again without page faults under the binary's allocator as the
    /// daemon sets it up (tarn-daemon `heap`, .cargo/config.toml): 48 MiB of 128 KiB
    /// buffers in flight, then 256 MiB more made by copying (as `tree::write` does) while the
    /// oldest go, 32 MiB at a time. Negative control: with jemalloc's default
    /// `lg_extent_max_active_fit` and `oversize_threshold` the freed neighbours coalesce into
    /// runs that are purged or never split again, and nearly every page written faults.
    #[test]
    fn record_buffers_freed_in_allocation_order_are_reused_without_faults() {
        const RECORD: usize = 128 << 10;
        tarn_daemon::heap::take_over();
        let source: Vec<u8> = (0..RECORD).map(|i| (i * 31 + 7) as u8).collect();
        let mut in_flight: std::collections::VecDeque<Vec<u8>> =
            (0..384).map(|_| source.to_vec()).collect();
        let before = thread_minor_faults();
        // As a txg's sync evicts: 32 MiB of the oldest freed at once, then made again.
        let (bursts, burst) = (8, 256);
        for _ in 0..bursts {
            in_flight.drain(..burst);
            in_flight.extend((0..burst).map(|_| source.to_vec()));
        }
        let rounds = bursts * burst;
        let faults = thread_minor_faults() - before;
        let pages = (rounds * RECORD / tarn_base::page_align::PAGE) as u64;
        assert!(
            faults * 20 < pages,
            "{faults} page faults writing {pages} pages into reused buffers"
        );
        assert!(in_flight.iter().all(|b| b[..] == source[..]));
    }
}
