//! A send from devices that serve reads in parallel (files behind `QueuedDevice`): its walk
//! leaves each batch's data blocks to the send's readers, which read them without the pool
//! lock, two batches at once (`send_pipe`), and fill them into their WRITE records.
//!
//! Goal: the stream is still exactly the snapshot: received again, full, incremental and
//! `send -c` (blocks stored compressed sent as stored, the others as logical bytes, in the
//! same batches), the volume reads back as written, in several batches of the walk. (The
//! simulated devices of the other send tests read in the walk itself; the stages' order,
//! overlap, memory bound and stopping are unit-tested in `send_pipe`.)
//!
//! Negative control: filling each batch's WRITE records from its logical reads in reverse
//! order fails the first check (the full stream received).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;

use common::replica::{full, incremental, into, receive, send};
use tarn_engine::{Engine, FileProvider, SendSpec, VolumeSpec};

/// MiB of the volume: three and a half of the walk's 8 MiB batches.
const MIB: usize = 28;

/// MiB `i` of version `version` of the volume: half noise, half a repeated byte, so that
/// under `compression=lz4` about half of its 128K blocks are stored compressed.
fn piece(i: usize, version: u64) -> Vec<u8> {
    let mut data = common::volume::noise(1 << 20, 7000 + i as u64 * 31 + version);
    if i % 2 == 1 {
        data[..(768 << 10)].fill(i as u8);
    }
    data
}

/// An engine with `tank` on a raidz1 of four files of 160 MiB in `dir`.
fn file_engine(dir: &std::path::Path) -> Engine {
    let host = common::Host {
        seed: 3,
        ..common::PLAIN_NOV_22_2026
    };
    host.file_tank(&Arc::new(FileProvider { direct: false }), dir, 160 << 20)
}

/// Writes version `version` of the MiB in `which` to volume `name`.
fn write(engine: &Engine, name: &str, which: impl Iterator<Item = usize>, version: u64) {
    let stat = engine.volume_stat(name).unwrap();
    for i in which {
        let offset = (i << 20) as u64;
        engine
            .volume_write(&stat.pool, stat.dataset, offset, &piece(i, version), false)
            .unwrap();
    }
}

/// Volume `name` holds, MiB by MiB, the version `version_of(i)`.
fn check(engine: &Engine, name: &str, version_of: impl Fn(usize) -> u64) {
    common::replica::check_volume(engine, name, MIB, |i| piece(i, version_of(i)));
}

/// Sparse volume `tank/v` of `mib` MiB in 128K blocks under lz4.
fn lz4_volume(engine: &Engine, mib: usize) {
    let spec = VolumeSpec {
        size: format!("{mib}M"),
        block_size: Some("128K".into()),
        sparse: true,
    };
    let props = [("compression".to_string(), "lz4".to_string())];
    engine
        .create_volume("tank/v", &spec, &props, false, "create")
        .unwrap();
}

#[test]
fn a_send_read_by_its_readers_is_the_snapshot_full_incremental_and_compressed() {
    let dir = tempfile::tempdir().unwrap();
    let engine = file_engine(dir.path());
    lz4_volume(&engine, MIB);
    write(&engine, "tank/v", 0..MIB, 0);
    engine
        .snapshot(&["tank/v@s".into()], false, &[], "snapshot")
        .unwrap();
    write(&engine, "tank/v", (0..MIB).step_by(5), 1);
    engine
        .snapshot(&["tank/v@t".into()], false, &[], "snapshot")
        .unwrap();
    let changed = |i: usize| u64::from(i.is_multiple_of(5));

    let stream = send(&engine, full("tank/v@s"));
    assert!(stream.len() > MIB << 20, "a short stream: {}", stream.len());
    receive(&engine, into("tank/copy"), &stream).unwrap();
    check(&engine, "tank/copy", |_| 0);

    let stream = send(&engine, incremental("@s", "tank/v@t"));
    receive(&engine, into("tank/copy"), &stream).unwrap();
    check(&engine, "tank/copy", changed);

    let compressed = SendSpec {
        compressed: true,
        ..full("tank/v@t")
    };
    let stream = send(&engine, compressed);
    assert!(
        stream.len() < (MIB << 20) * 7 / 8,
        "-c: {} bytes",
        stream.len()
    );
    receive(&engine, into("tank/packed"), &stream).unwrap();
    check(&engine, "tank/packed", changed);
}

/// Goal: `send -n -c` (what `-nvP -c` prints) sizes the stream from block pointers alone:
/// after a cold import it reads no data block, and its size is the real `-c` stream's.
/// Method: a volume of 8 MiB under lz4, each block stored compressed; export and
/// import, then the dry run's device bytes read from the pool's iostat counters, against
/// the compressed blocks' size. Negative control: with `read_block` reading a compressed
/// block as stored before its `dry_run` check (as it did), the dry run read 4.3 MiB.
#[test]
fn a_compressed_dry_run_reads_no_data_block() {
    const SMALL: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let engine = file_engine(dir.path());
    lz4_volume(&engine, SMALL);
    // Half of every 4K zeros: each block stored compressed, at about half its size.
    let mut data = common::volume::noise(SMALL << 20, 11);
    for piece in data.chunks_mut(4096) {
        piece[..2048].fill(0);
    }
    let stat = engine.volume_stat("tank/v").unwrap();
    engine
        .volume_write(&stat.pool, stat.dataset, 0, &data, false)
        .unwrap();
    engine
        .snapshot(&["tank/v@s".into()], false, &[], "snapshot")
        .unwrap();
    engine.export_pool("tank", false).unwrap();
    let dirs = [dir.path().display().to_string()];
    let options = tarn_engine::ImportOptions::default();
    engine
        .import_pool(&dirs, "tank", &options, "import")
        .unwrap();
    let read_bytes = |engine: &Engine| engine.iostat(&[]).unwrap()[0].root.read_bytes;
    let spec = SendSpec {
        compressed: true,
        ..full("tank/v@s")
    };
    let before = read_bytes(&engine);
    let dry = SendSpec {
        dry_run: true,
        ..spec.clone()
    };
    let sized = engine
        .send(&dry, &mut std::io::sink(), &mut |_| {})
        .unwrap();
    let read = read_bytes(&engine) - before;
    assert!(read < 256 << 10, "the dry run read {read} bytes");
    let stream = send(&engine, spec);
    assert!(stream.len() < (SMALL << 20) * 7 / 8, "-c: {}", stream.len());
    assert_eq!(sized.bytes, stream.len() as u64, "-n sizes the real stream");
}
