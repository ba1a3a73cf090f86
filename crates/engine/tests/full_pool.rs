//! A full pool is an error for the writer, never an outage.
//!
//! Goal: whatever fills a pool (file data, small files with their metadata and extended
//! attributes, directories alone), writers get ENOSPC while the pool stays ONLINE, every
//! txg commits, and deletes still work on the full pool and give the space back. Method: a
//! raidz2 of six small simulated devices filled by each workload until the engine refuses,
//! then half of what was made removed and the pool synced, filled again, exported and
//! imported; the pool must never be suspended and every surviving file must read back.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::sync::Arc;

use tarn_base::SeededRng;
use tarn_engine::posix::{Creds, FileKind, Ino, XattrSet};
use tarn_engine::{DatasetId, Engine, EngineError, FsOp, TopLayout};
use tarn_pool::{CreateSpec, ImportOptions, SimProvider};

mod common;
use common::{PLAIN, import_tank, sim_devices};

const DEVICE: u64 = 64 << 20;

fn setup() -> (Arc<SimProvider>, Engine, String, DatasetId) {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..6, DEVICE);
    let spec = CreateSpec::one_top("tank", TopLayout::Raidz(2), names);
    let engine = PLAIN.create_tank(&provider, &spec, &[]);
    let (pool, id) = engine.find_dataset("tank").unwrap();
    (provider, engine, pool, id)
}

/// What one step of a filling workload makes in the root directory.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// A file of this many random bytes with a 200-byte extended attribute.
    File(usize),
    /// An empty directory.
    Dir,
}

/// Makes entry `n` of `shape`; returns its inode, or the error that refused it.
fn make(
    engine: &Engine,
    pool: &str,
    id: DatasetId,
    n: u64,
    shape: Shape,
) -> Result<Ino, EngineError> {
    let name = format!("e{n:06}");
    match shape {
        Shape::File(len) => {
            let mut data = vec![0u8; len];
            SeededRng::new(n).fill(&mut data);
            let ino = engine.fs_op(pool, id, FsOp::Write(len as u64), |fs| {
                let root = fs.root()?;
                let attr = fs.mknod(
                    root,
                    name.as_bytes(),
                    FileKind::Regular,
                    0o644,
                    0,
                    Creds::default(),
                )?;
                fs.write(attr.ino, 0, &data)?;
                Ok(attr.ino)
            })?;
            let value = [n as u8; 200];
            engine.fs_op(pool, id, FsOp::Write(value.len() as u64), |fs| {
                fs.setxattr(ino, b"user.tag", &value, XattrSet::Either)
            })?;
            Ok(ino)
        }
        Shape::Dir => engine.fs_op(pool, id, FsOp::Modify, |fs| {
            let root = fs.root()?;
            Ok(fs
                .mkdir(root, name.as_bytes(), 0o755, Creds::default())?
                .ino)
        }),
    }
}

/// Removes entry `n` as `rm`/`rmdir` would (unlink, then the last close's reclaim).
fn remove(engine: &Engine, pool: &str, id: DatasetId, n: u64, shape: Shape) {
    let name = format!("e{n:06}");
    engine
        .fs_op(pool, id, FsOp::Free, |fs| {
            let root = fs.root()?;
            match shape {
                Shape::File(_) => {
                    if let Some(ino) = fs.unlink(root, name.as_bytes())? {
                        fs.reclaim(ino)?;
                    }
                }
                Shape::Dir => {
                    let ino = fs.rmdir(root, name.as_bytes())?;
                    fs.reclaim(ino)?;
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("removing {name} from a full pool: {e}"));
}

fn assert_online(engine: &Engine, when: &str) {
    let status = engine.status("tank").unwrap();
    assert_eq!(status.state, "ONLINE", "{when}: pool is {}", status.state);
}

/// Fills the pool with `shape` from entry `first` on, syncing every `batch` entries, until
/// the engine refuses with ENOSPC; returns the entries made.
fn fill(
    engine: &Engine,
    pool: &str,
    id: DatasetId,
    first: u64,
    shape: Shape,
    batch: u64,
) -> Vec<u64> {
    let mut made = Vec::new();
    for n in first.. {
        match make(engine, pool, id, n, shape) {
            Ok(_) => made.push(n),
            Err(EngineError::NoSpace) => break,
            Err(other) => panic!("entry {n} ({shape:?}): expected ENOSPC, got {other}"),
        }
        if (made.len() as u64).is_multiple_of(batch) {
            engine
                .sync_pool(pool)
                .unwrap_or_else(|e| panic!("sync after {} entries: {e}", made.len()));
        }
        assert!(n - first < 1_000_000, "never ran out of space");
    }
    engine.sync_pool(pool).expect("a full pool still commits");
    assert_online(engine, "after filling");
    made
}

fn check_file(engine: &Engine, pool: &str, id: DatasetId, n: u64, len: usize) {
    let name = format!("e{n:06}");
    let mut want = vec![0u8; len];
    SeededRng::new(n).fill(&mut want);
    let got = engine
        .fs_op(pool, id, FsOp::Read, |fs| {
            let root = fs.root()?;
            let attr = fs.lookup(root, name.as_bytes())?;
            fs.read(attr.ino, 0, len as u32)
        })
        .unwrap();
    assert!(got == want, "{name} reads back changed");
}

fn fill_remove_refill(shape: Shape, batch: u64) {
    let (provider, engine, pool, id) = setup();
    let made = fill(&engine, &pool, id, 0, shape, batch);
    assert!(
        made.len() > 100,
        "{shape:?}: refused too early, after {}",
        made.len()
    );
    // Deletes work on the full pool and give the space back.
    for &n in made.iter().filter(|n| *n % 2 == 0) {
        remove(&engine, &pool, id, n, shape);
    }
    for _ in 0..4 {
        engine.sync_pool(&pool).expect("a txg of deletes commits");
    }
    assert_online(&engine, "after the deletes");
    let again = fill(&engine, &pool, id, made.len() as u64 + 1, shape, batch);
    assert!(
        again.len() * 4 > made.len(),
        "{shape:?}: only {} entries fit after deleting {} of {}",
        again.len(),
        made.len() / 2,
        made.len()
    );
    engine.export_pool(&pool, false).unwrap();
    let engine = PLAIN.engine(&provider);
    import_tank(&engine, &ImportOptions::default()).unwrap();
    let (pool, id) = engine.find_dataset("tank").unwrap();
    assert_online(&engine, "after import");
    if let Shape::File(len) = shape {
        for &n in made.iter().filter(|n| *n % 2 == 1).chain(&again).step_by(7) {
            check_file(&engine, &pool, id, n, len);
        }
    }
}

#[test]
fn small_files_with_xattrs_fill_the_pool_without_suspending_it() {
    fill_remove_refill(Shape::File(4096), 200);
}

#[test]
fn directories_alone_fill_the_pool_without_suspending_it() {
    fill_remove_refill(Shape::Dir, 500);
}

#[test]
fn large_files_fill_the_pool_without_suspending_it() {
    fill_remove_refill(Shape::File(1 << 20), 16);
}

/// The `freeing` property: bytes deletes gave back that are not allocatable yet.
fn freeing(engine: &Engine) -> u64 {
    let props = engine.get_props("tank", &["freeing".to_string()]).unwrap();
    props[0].value.parse().unwrap()
}

/// Goal: a writer refused for space while a delete's frees are still deferred waits for
/// the txgs that release them instead of failing (ZFS does the same), and `freeing` shows
/// the space on its way back. Method: fill with 1 MiB files, delete three of them and write
/// a new one at once, with no sync between.
#[test]
fn a_write_after_a_delete_on_a_full_pool_waits_for_the_freed_space() {
    let (_provider, engine, pool, id) = setup();
    let shape = Shape::File(1 << 20);
    let made = fill(&engine, &pool, id, 0, shape, 16);
    // Only the last txgs' rewritten metadata is on its way back.
    assert!(
        freeing(&engine) < 1 << 20,
        "freeing before: {}",
        freeing(&engine)
    );
    for &n in &made[..3] {
        remove(&engine, &pool, id, n, shape);
    }
    engine.sync_pool(&pool).unwrap();
    assert!(
        freeing(&engine) >= 3 << 20,
        "freeing after the deletes: {}",
        freeing(&engine)
    );
    let n = made.len() as u64 + 1;
    make(&engine, &pool, id, n, shape).expect("the write waits for the freed space");
    check_file(&engine, &pool, id, n, 1 << 20);
    assert_online(&engine, "after the write");
}
