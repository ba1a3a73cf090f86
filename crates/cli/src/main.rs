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
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
