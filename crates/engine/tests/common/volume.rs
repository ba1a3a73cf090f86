//! Volumes as the tests' data: an 8M sparse volume of 16K blocks (`volume`), written in
//! whole blocks of noise that does not compress, its first [`LEN`] bytes read back whole,
//! snapshots and properties by name. Volume verbs read and write any dataset of the pool,
//! which is what the clone and send/receive tests need, without a file layer between.

use tarn_engine::{Engine, VolumeSpec};

/// Bytes of a volume the tests write and compare (its first MiB).
pub(crate) const LEN: usize = 1 << 20;

/// Bytes that do not compress.
pub(crate) fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed * 2 + 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Creates `name`: an 8M sparse volume of 16K blocks.
pub(crate) fn volume(engine: &Engine, name: &str) {
    let spec = VolumeSpec {
        size: "8M".into(),
        block_size: Some("16K".into()),
        sparse: true,
    };
    let none: &[(String, String)] = &[];
    engine
        .create_volume(name, &spec, none, false, "create")
        .unwrap();
}

/// Writes `data` at `offset` of the volume `name`.
pub(crate) fn write(engine: &Engine, name: &str, offset: usize, data: &[u8]) {
    let stat = engine.volume_stat(name).unwrap();
    engine
        .volume_write(&stat.pool, stat.dataset, offset as u64, data, false)
        .unwrap();
}

/// The first [`LEN`] bytes of the volume `name`.
pub(crate) fn read(engine: &Engine, name: &str) -> Vec<u8> {
    let stat = engine.volume_stat(name).unwrap();
    let mut buf = vec![0u8; LEN];
    engine
        .volume_read(&stat.pool, stat.dataset, 0, &mut buf)
        .unwrap();
    buf
}

/// Takes the snapshot `name`.
pub(crate) fn snap(engine: &Engine, name: &str) {
    engine
        .snapshot(&[name.into()], false, &[], "snapshot")
        .unwrap();
}

/// Takes the snapshot `name` of a dataset and of every descendant (`snapshot -r`).
pub(crate) fn snap_all(engine: &Engine, name: &str) {
    engine
        .snapshot(&[name.into()], true, &[], "snapshot -r")
        .unwrap();
}
