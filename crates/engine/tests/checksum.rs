//! `tarn checksum` in the engine (`Engine::file_checksum`): the value is right, a second
//! call on an unchanged file reads no data (also after export and import, with a cold
//! block cache), and every change of the data (a write, a truncate, a punched hole, a
//! rollback) gives the new data's value.
//!
//! Method: files of random bytes on a raidz1 of simulated devices; the expected adler32 is
//! computed here by its definition (independent of the engine's crate), the others with
//! the hasher its test vectors check. "No data read" is counted twice: the call's own
//! `bytes_read`, and the pool's leaf read bytes (iostat) across a call right after import,
//! against a call of another algorithm in the same state, which must read the whole file.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::sync::Arc;

use tarn_base::SeededRng;
use tarn_engine::posix::filesum::{FileHasher, FileSumKind};
use tarn_engine::posix::{Creds, Fallocate, FileKind, SetAttr};
use tarn_engine::{Engine, EngineError, FileChecksum, FsOp, TopLayout};
use tarn_pool::{CreateSpec, ImportOptions, SimProvider};

mod common;
use common::{PLAIN, import_tank, sim_devices};

const LEN: usize = (3 << 20) + 12345;

fn setup() -> (Arc<SimProvider>, Engine) {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..4, 256 << 20);
    let spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), names);
    let engine = PLAIN.create_tank(&provider, &spec, &[]);
    engine.create_dataset("tank/a", &[], false, "c").unwrap();
    (provider, engine)
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut data = vec![0u8; len];
    SeededRng::new(seed).fill(&mut data);
    data
}

/// Adler-32 by its definition (RFC 1950): two sums modulo 65521.
fn adler32(data: &[u8]) -> Vec<u8> {
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    format!("{:08x}", (b << 16) | a)
        .as_bytes()
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

fn expected(kind: FileSumKind, data: &[u8]) -> Vec<u8> {
    if kind == FileSumKind::Adler32 {
        return adler32(data);
    }
    let mut hasher = FileHasher::new(kind);
    hasher.update(data);
    hasher.finish()
}

fn create(engine: &Engine, dataset: &str, name: &str, data: &[u8]) {
    let (pool, id) = engine.find_dataset(dataset).unwrap();
    engine
        .fs_op(&pool, id, FsOp::Write(data.len() as u64), |fs| {
            let root = fs.root()?;
            let creds = Creds::default();
            let attr = fs.mknod(root, name.as_bytes(), FileKind::Regular, 0o644, 0, creds)?;
            fs.write(attr.ino, 0, data)
        })
        .unwrap();
}

/// Runs `f` on the inode of `/name` of `dataset`.
fn change(
    engine: &Engine,
    dataset: &str,
    name: &str,
    f: impl Fn(&mut tarn_engine::posix::Fs<'_>, u64),
) {
    let (pool, id) = engine.find_dataset(dataset).unwrap();
    engine
        .fs_op(&pool, id, FsOp::Write(1 << 20), |fs| {
            let root = fs.root()?;
            let ino = fs.lookup(root, name.as_bytes())?.ino;
            f(fs, ino);
            Ok(())
        })
        .unwrap();
}

fn checksum(engine: &Engine, path: &str, kind: FileSumKind) -> Result<FileChecksum, EngineError> {
    let (pool, id) = engine.find_dataset("tank/a").unwrap();
    engine.file_checksum(&pool, id, path, kind)
}

fn leaf_read_bytes(engine: &Engine) -> u64 {
    engine.iostat(&[]).unwrap()[0].root.read_bytes
}

#[test]
fn a_second_checksum_reads_no_data_even_after_export_and_import() {
    let (_provider, engine) = setup();
    let data = random(LEN, 1);
    create(&engine, "tank/a", "f", &data);
    for kind in FileSumKind::ALL {
        let first = checksum(&engine, "f", kind).unwrap();
        assert_eq!(first.value, expected(kind, &data), "{kind:?}");
        assert!(!first.cached && first.stored, "{kind:?}: computed and kept");
        assert_eq!(first.bytes_read, LEN as u64);
        let second = checksum(&engine, "/f", kind).unwrap();
        assert_eq!(second.value, first.value);
        assert!(
            second.cached,
            "{kind:?}: the second call is answered from the cache"
        );
        assert_eq!(second.bytes_read, 0);
    }
    engine.sync_pool("tank").unwrap();
    engine.export_pool("tank", false).unwrap();
    import_tank(&engine, &ImportOptions::default()).unwrap();

    let before = leaf_read_bytes(&engine);
    let cached = checksum(&engine, "f", FileSumKind::Adler32).unwrap();
    let metadata = leaf_read_bytes(&engine) - before;
    assert!(cached.cached, "the cache survives export and import");
    assert_eq!(cached.value, adler32(&data));
    assert!(
        metadata < LEN as u64 / 16,
        "a cached answer reads metadata only ({metadata} bytes)"
    );
    // The control: a file not cached in the same cold state reads all of its data.
    create(&engine, "tank/a", "g", &data);
    engine.sync_pool("tank").unwrap();
    engine.export_pool("tank", false).unwrap();
    import_tank(&engine, &ImportOptions::default()).unwrap();
    let before = leaf_read_bytes(&engine);
    let computed = checksum(&engine, "g", FileSumKind::Adler32).unwrap();
    assert!(!computed.cached);
    assert!(leaf_read_bytes(&engine) - before >= LEN as u64);
}

#[test]
fn writes_truncates_holes_and_rollbacks_give_the_new_value() {
    let (_provider, engine) = setup();
    let mut data = random(LEN, 2);
    create(&engine, "tank/a", "f", &data);
    let kind = FileSumKind::Crc32c;
    let check = |data: &[u8], what: &str| {
        let sum = checksum(&engine, "f", kind).unwrap();
        assert!(!sum.cached, "{what}: recomputed");
        assert_eq!(sum.value, expected(kind, data), "{what}");
        assert!(
            checksum(&engine, "f", kind).unwrap().cached,
            "{what}: cached again"
        );
    };
    check(&data, "created");
    engine.sync_pool("tank").unwrap();
    engine
        .snapshot(&["tank/a@s".to_string()], false, &[], "snapshot")
        .unwrap();
    let at_snapshot = data.clone();

    change(&engine, "tank/a", "f", |fs, ino| {
        fs.write(ino, 1000, b"changed").map(|_| ()).unwrap();
    });
    data[1000..1007].copy_from_slice(b"changed");
    check(&data, "write");

    change(&engine, "tank/a", "f", |fs, ino| {
        let size = Some(LEN as u64 - 5000);
        fs.setattr(
            ino,
            &SetAttr {
                size,
                ..SetAttr::default()
            },
        )
        .map(|_| ())
        .unwrap();
    });
    data.truncate(LEN - 5000);
    check(&data, "truncate");

    change(&engine, "tank/a", "f", |fs, ino| {
        let punch = Fallocate {
            keep_size: true,
            punch_hole: true,
            zero_range: false,
        };
        fs.fallocate(ino, 200_000, 300_000, punch).unwrap();
    });
    data[200_000..500_000].fill(0);
    check(&data, "punched hole");

    engine.rollback("tank/a@s", false, "rollback").unwrap();
    let rolled = checksum(&engine, "f", kind).unwrap();
    assert_eq!(rolled.value, expected(kind, &at_snapshot), "rollback");
    assert!(rolled.cached, "the snapshot kept the cache of its own data");
}

#[test]
fn read_only_datasets_answer_uncached_and_bad_paths_are_errors() {
    let (_provider, engine) = setup();
    let data = random(100_000, 3);
    create(&engine, "tank/a", "f", &data);
    engine
        .set_dataset_props("tank/a", &[("readonly".into(), "on".into())], "set")
        .unwrap();
    for _ in 0..2 {
        let sum = checksum(&engine, "f", FileSumKind::Md5).unwrap();
        assert_eq!(sum.value, expected(FileSumKind::Md5, &data));
        assert!(
            !sum.cached && !sum.stored,
            "nothing is written to a read-only dataset"
        );
    }
    let errno = |path: &str| {
        checksum(&engine, path, FileSumKind::Md5)
            .unwrap_err()
            .errno()
    };
    assert_eq!(errno("/"), libc::EISDIR);
    assert_eq!(errno("missing"), libc::ENOENT);
    assert_eq!(errno("f/x"), libc::ENOTDIR);
}
