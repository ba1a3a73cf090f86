//! A receive on the write throttle (tarn-engine `receive_pipe`): its records are applied in
//! the open txg while a sync thread writes and commits txgs of it, as the daemon's does for
//! file writes, and the result is the sent data exactly; a power cut in the middle of such
//! a receive, after the sync thread committed part of it, leaves a pool that imports and
//! checks clean, the partial receive destroyed by the import (it has no resume token:
//! nothing is left to abort with `receive -A`), after which the same stream is received
//! whole.
//!
//! Method: host A holds a volume of more than `DIRTY_SYNC` of noise (1 MiB pieces of
//! distinct seeds, 128K blocks) and sends its snapshot once; host B (a mirror of two
//! simulated devices) receives the stream with a sync thread of the test's own standing in
//! for the daemon's (woken through `TxgSyncer`, it calls `Engine::sync_wanted_pools` and
//! counts the txgs it committed). The power cut is taken from the stream's side: once the
//! receive has read most of the stream and the sync thread has committed a txg, every
//! device of B goes away (`set_gone`), so nothing B's engine does after that instant
//! reaches them, and drops or tears its unflushed writes (`SimDevice::crash`); a new engine
//! then imports the devices as they were at the cut.
//!
//! The send side is pipelined too (`send_ops::send_one`): a walk thread reads the next
//! batch of blocks while the caller's thread writes the last one to the stream.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use common::replica::{full, host_of_size, into, volume_host, volume_stream};
use common::volume::noise;
use common::{Host, PLAIN, crash_all};
use tarn_engine::{Engine, ImportOptions, ReceiveSpec, SimProvider, TxgSyncer, check};

/// MiB of noise in the sent volume: past `DIRTY_SYNC` (128 MiB) with room to spare, so the
/// receive wakes the sync thread well before its END.
const MIB: usize = 176;

/// An engine with a pool `tank` on a mirror of two fresh simulated devices.
fn host(seed: u64) -> (Arc<SimProvider>, Engine) {
    host_of_size(seed, 320 << 20)
}

/// Piece `i` (1 MiB) of the volume's bytes.
fn piece(i: usize) -> Vec<u8> {
    noise(1 << 20, 1000 + i as u64)
}

/// The stream of `tank/v@s`: a volume of [`MIB`] pieces in 128K blocks.
fn stream() -> Vec<u8> {
    volume_stream(MIB, piece)
}

/// Every piece of volume `name` is the sent one.
fn check_volume(engine: &Engine, name: &str) {
    common::replica::check_volume(engine, name, MIB, piece);
}

/// The test's stand-in for the daemon's txg sync thread.
struct Syncer {
    wake: Mutex<Sender<()>>,
}

impl TxgSyncer for Syncer {
    fn sync_wanted(&self) {
        let _ = self.wake.lock().unwrap().send(());
    }
}

/// A running sync thread: the txgs it committed, and how to stop it.
struct SyncThread {
    committed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl SyncThread {
    fn start(engine: &Arc<Engine>) -> SyncThread {
        let (wake, woken): (Sender<()>, Receiver<()>) = channel();
        engine.set_txg_syncer(Arc::new(Syncer {
            wake: Mutex::new(wake),
        }));
        let committed = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (engine, committed, stop) = (engine.clone(), committed.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if woken.recv_timeout(Duration::from_millis(20)).is_err() {
                        continue;
                    }
                    // As the daemon's loop: again while writers keep the pool past the mark.
                    while engine.sync_wanted_pools() {
                        committed.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        };
        SyncThread {
            committed,
            stop,
            thread,
        }
    }

    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap();
        self.committed.load(Ordering::SeqCst)
    }
}

/// The stream, with a hook run once when `at` bytes of it have been read.
struct Feed<'a> {
    bytes: &'a [u8],
    read: usize,
    at: usize,
    hook: Option<Box<dyn FnOnce() + 'a>>,
}

impl Read for Feed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.read >= self.at
            && let Some(hook) = self.hook.take()
        {
            hook();
        }
        let end = (self.read + buf.len())
            .min(self.bytes.len())
            .min(if self.hook.is_some() {
                self.at
            } else {
                usize::MAX
            });
        let n = end - self.read;
        buf[..n].copy_from_slice(&self.bytes[self.read..end]);
        self.read = end;
        Ok(n)
    }
}

fn receive_from(engine: &Engine, spec: &ReceiveSpec, feed: &mut Feed<'_>) -> Result<(), String> {
    engine
        .receive(spec, feed, &mut |_| {})
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn a_receive_past_dirty_sync_is_committed_by_the_sync_thread_and_lands_whole() {
    // Goal: the receive passes the write throttle as file writes do: past DIRTY_SYNC the
    // sync thread is woken and commits txgs of the receive while the stream goes on (before,
    // the receive synced every txg on its own thread and nothing woke the sync thread), and
    // the received volume is the sent one, byte for byte, with exact space.
    let stream = stream();
    let (_, b) = host(4);
    let b = Arc::new(b);
    let syncer = SyncThread::start(&b);
    let mut feed = Feed {
        bytes: &stream,
        read: 0,
        at: usize::MAX,
        hook: None,
    };
    receive_from(&b, &into("tank/copy"), &mut feed).unwrap();
    let committed = syncer.finish();
    assert!(
        committed >= 1,
        "the sync thread committed no txg of a {MIB} MiB receive"
    );
    check_volume(&b, "tank/copy");
    check::verify_pool(&b, "tank").unwrap();
}

#[test]
fn a_power_cut_in_a_pipelined_receive_is_cleaned_up_at_import_and_received_again() {
    // Goal: a crash while the sync thread commits txgs of a receive leaves a pool that
    // imports and checks clean, the partial receive gone (the import destroyed it: nothing to
    // abort), and the same stream then received whole. Method: the cut comes once most of
    // the stream was read and the sync thread committed at least one txg (module doc).
    let stream = stream();
    let (b_sims, b) = host(5);
    let b = Arc::new(b);
    let syncer = SyncThread::start(&b);
    let committed = syncer.committed.clone();
    let cut = {
        let b_sims = b_sims.clone();
        move || {
            // Up to two minutes, in 10 ms naps.
            for nap in 0.. {
                if committed.load(Ordering::SeqCst) > 0 {
                    break;
                }
                assert!(
                    nap < 12_000,
                    "no txg of the receive committed by the sync thread"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            // Gone first: nothing lands after the instant of the cut.
            for (_, device) in b_sims.all() {
                device.set_gone(true);
            }
            crash_all(&b_sims);
        }
    };
    let mut feed = Feed {
        bytes: &stream,
        read: 0,
        at: stream.len() - (8 << 20),
        hook: Some(Box::new(cut)),
    };
    // The engine of the cut goes on without its devices: whatever it says is moot.
    let _ = receive_from(&b, &into("tank/copy"), &mut feed);
    syncer.finish();
    drop(b);
    for (_, device) in b_sims.all() {
        device.set_gone(false);
    }
    let b = Host { seed: 6, ..PLAIN }
        .import(&b_sims, &ImportOptions::default())
        .unwrap();
    check::verify_pool(&b, "tank").unwrap();
    // Nothing named, and the partial receive (a txg of it committed) gone.
    assert!(
        b.volume_stat("tank/copy").is_err(),
        "a partial receive named"
    );
    let abort = b.receive_abort("tank/copy").unwrap_err().to_string();
    assert!(abort.contains("does not have any resumable"), "{abort}");
    check::verify_pool(&b, "tank").unwrap();
    let mut feed = Feed {
        bytes: &stream,
        read: 0,
        at: usize::MAX,
        hook: None,
    };
    receive_from(&b, &into("tank/copy"), &mut feed).unwrap();
    check_volume(&b, "tank/copy");
    check::verify_pool(&b, "tank").unwrap();
}

/// A stream sink whose first write past 1 MiB (inside the first batch) waits, up to a
/// minute, until the sending host's devices are read again: the send's next batch is
/// being read while this one is written.
struct WaitingSink<'a> {
    sims: &'a SimProvider,
    reads_at_first: Option<u64>,
    overlapped: bool,
    bytes: usize,
}

fn device_reads(sims: &SimProvider) -> u64 {
    sims.all()
        .iter()
        .map(|(_, device)| device.stats().reads)
        .sum()
}

impl Write for WaitingSink<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.reads_at_first.is_none() && self.bytes >= 1 << 20 {
            let before = device_reads(self.sims);
            self.reads_at_first = Some(before);
            for _ in 0..6000 {
                if device_reads(self.sims) > before {
                    self.overlapped = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.bytes += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_send_reads_its_next_batch_while_the_last_one_is_written() {
    // Goal: a send's device reads and its stream writes overlap (before, each 8 MiB batch
    // was read, then written, in turn, so the devices idled while the stream was written).
    // Method: a cold cache (export, import), a volume of several batches, and a sink whose
    // first write waits for the devices to be read again. (Every send test goes through the
    // same walk: they show the stream is unchanged.)
    let (sims, a) = volume_host(40, piece);
    a.export_pool("tank", false).unwrap();
    drop(a);
    let a = PLAIN.import(&sims, &ImportOptions::default()).unwrap();
    let mut sink = WaitingSink {
        sims: &sims,
        reads_at_first: None,
        overlapped: false,
        bytes: 0,
    };
    a.send(&full("tank/v@s"), &mut sink, &mut |_| {}).unwrap();
    assert!(
        sink.overlapped,
        "no device read while the first batch was written"
    );
    assert!(
        sink.bytes > 40 << 20,
        "a short stream: {} bytes",
        sink.bytes
    );
}

/// A stream sink that fails every write once `limit` bytes went through.
struct FailingSink {
    limit: usize,
    bytes: usize,
}

impl Write for FailingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes >= self.limit {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        self.bytes += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_send_whose_stream_breaks_returns_the_error_and_stops_its_walk() {
    // Goal: a reader that goes away mid-send (a broken pipe) ends the send with that error,
    // the walk thread stopped (the call returns at all), and the pool still usable: a
    // second send of the same snapshot is whole.
    let (_, a) = volume_host(24, piece);
    let mut broken = FailingSink {
        limit: 3 << 20,
        bytes: 0,
    };
    let error = a
        .send(&full("tank/v@s"), &mut broken, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(error.contains("pipe"), "{error}");
    let mut whole = FailingSink {
        limit: usize::MAX,
        bytes: 0,
    };
    a.send(&full("tank/v@s"), &mut whole, &mut |_| {}).unwrap();
    assert!(
        whole.bytes > 24 << 20,
        "a short stream: {} bytes",
        whole.bytes
    );
}
