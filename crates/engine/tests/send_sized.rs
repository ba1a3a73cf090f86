//! A sized send (`send -v` on a terminal, `send -P`: `SendSpec::stream_size` from
//! `Engine::send_size`) puts the stream's total bytes in its first BEGIN
//! (docs/FORMAT.md 21.4), and a receive of it tells its progress callback that total from
//! that BEGIN on, so that `receive -v` shows bytes of a total and the time left.
//!
//! Method: host A sends, host B receives; the totals B's progress callback saw are compared
//! with the real length of the stream, for a plain full stream and a `send -R` stream (a
//! manifest and several substreams per dataset). The dry run's size is also the sized
//! stream's length: the size takes bytes BEGIN already had.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::replica::{full, host, into, replicate, send, volume_host, volumes_at_a};
use common::volume::{noise, snap_all, write};
use tarn_engine::{Engine, ReceiveProgress, ReceiveSpec, SendSpec};

/// Sends `spec` sized as the daemon does (a dry run first); returns the stream, after
/// checking its length is the dry run's size.
fn sized_stream(a: &Engine, spec: SendSpec) -> Vec<u8> {
    let size = a.send_size(&spec).unwrap();
    let stream = send(
        a,
        SendSpec {
            stream_size: size,
            ..spec
        },
    );
    assert_eq!(
        stream.len() as u64,
        size,
        "the dry run sizes the sized stream"
    );
    stream
}

/// Receives `stream` on `b` with `spec`; returns every progress report.
fn reports(b: &Engine, spec: &ReceiveSpec, stream: &[u8]) -> Vec<ReceiveProgress> {
    let mut seen = Vec::new();
    let mut input = stream;
    b.receive(spec, &mut input, &mut |at| seen.push(at))
        .unwrap();
    seen
}

/// The totals a receive of `stream` reported are all its real length, the first report
/// already had it before the stream's end (the bar and ETA come early), and the bytes
/// reach the length.
fn assert_total_is_length(seen: &[ReceiveProgress], stream: &[u8]) {
    let len = stream.len() as u64;
    assert!(!seen.is_empty(), "a receive reports progress");
    assert!(seen.iter().all(|at| at.total == len), "{seen:?} of {len}");
    assert!(
        seen[0].bytes < len,
        "the total came before the end: {seen:?}"
    );
    assert_eq!(seen.last().map(|at| at.bytes), Some(len));
}

/// Goal: the receive of a sized full stream (a volume of 20 MiB: several batches) reports
/// the stream's real length as its total from its BEGIN on; the same stream unsized has
/// the same length and reports a total of 0 (unknown). Negative control: with `send`
/// leaving `stream_size` out of the first BEGIN (the substream's `Start` given 0), every
/// total was 0 and this failed.
#[test]
fn a_sized_full_stream_tells_its_receiver_its_real_length() {
    let (_, a) = volume_host(20, |i| noise(1 << 20, i as u64 + 1));
    let stream = sized_stream(&a, full("tank/v@s"));
    let (_, b) = host(5);
    assert_total_is_length(&reports(&b, &into("tank/w"), &stream), &stream);
    let plain = send(&a, full("tank/v@s"));
    assert_eq!(
        plain.len(),
        stream.len(),
        "the size takes no bytes of its own"
    );
    let (_, c) = host(6);
    let seen = reports(&c, &into("tank/w"), &plain);
    assert!(seen.iter().all(|at| at.total == 0), "{seen:?}");
}

/// Goal: the total of a sized `send -R` stream counts every substream (the manifest, each
/// dataset's full and incremental substreams), as the receive counts bytes: the receiver
/// reports the whole stream's length, from the manifest's BEGIN on. Negative control:
/// with `send` leaving the manifest's BEGIN unsized (so the size went into the first data
/// substream's BEGIN, after the manifest's bytes), the total was the length plus the
/// manifest's and this failed.
#[test]
fn a_sized_replication_stream_tells_the_size_of_all_its_substreams() {
    let (_, a) = host(9);
    volumes_at_a(&a);
    write(&a, "tank/p/k", 64 << 10, &noise(1 << 20, 3));
    snap_all(&a, "tank/p@b");
    let stream = sized_stream(&a, replicate(full("tank/p@b")));
    let (_, b) = host(99);
    let seen = reports(&b, &into("tank/q"), &stream);
    assert_total_is_length(&seen, &stream);
}
