//! Two hosts for send/receive tests: each an engine with a pool `tank` (a mirror of two
//! simulated devices), the streams one sends and the other receives, and both hosts' device
//! images to show a refusal changed nothing.

use std::sync::Arc;

use tarn_engine::{
    CreateSpec, Engine, FsOp, ReceiveReport, ReceiveSpec, SendSpec, SimProvider, TopLayout,
    VolumeSpec, check,
};
use tarn_posix::{Creds, FileKind};

use super::{Host, PLAIN, images, sim_devices};

/// A's `tank/p` with the volumes `k` (128 KiB written) and `m` (64 KiB), snapshotted
/// recursively at `@a`; returns `send -R tank/p@a`.
pub(crate) fn volumes_at_a(a: &Engine) -> Vec<u8> {
    use super::volume::{noise, snap_all, volume, write};
    a.create_dataset("tank/p", &[], false, "create").unwrap();
    volume(a, "tank/p/k");
    volume(a, "tank/p/m");
    write(a, "tank/p/k", 0, &noise(128 << 10, 1));
    write(a, "tank/p/m", 0, &noise(64 << 10, 2));
    snap_all(a, "tank/p@a");
    send(a, replicate(full("tank/p@a")))
}

/// Host A sends, host B receives; each with the simulated devices under it.
pub(crate) struct Hosts {
    pub(crate) a_sims: Arc<SimProvider>,
    pub(crate) b_sims: Arc<SimProvider>,
    pub(crate) a: Engine,
    pub(crate) b: Engine,
}

/// Every device image of one host.
pub(crate) type Images = Vec<(String, Vec<u8>)>;

impl Hosts {
    /// Both hosts' device images.
    pub(crate) fn images(&self) -> (Images, Images) {
        (images(&self.a_sims), images(&self.b_sims))
    }
}

/// An engine with a pool `tank` on two fresh simulated devices, its randomness from `seed`.
pub(crate) fn host(seed: u64) -> (Arc<SimProvider>, Engine) {
    host_of_size(seed, 128 << 20)
}

/// [`host`] on a mirror of two devices of `size` bytes.
pub(crate) fn host_of_size(seed: u64, size: u64) -> (Arc<SimProvider>, Engine) {
    let sims = Arc::new(SimProvider::new());
    let names = sim_devices(&sims, "d", 0..2, size);
    let spec = CreateSpec::one_top("tank", TopLayout::Mirror, names);
    let engine = Host { seed, ..PLAIN }.create_tank(&sims, &spec, &[]);
    (sims, engine)
}

/// The stream of `tank/v@s` from a host of its own: a sparse volume of `mib` MiB in 128K
/// blocks whose MiB `i` is `piece(i)`.
pub(crate) fn volume_stream(mib: usize, piece: impl Fn(usize) -> Vec<u8>) -> Vec<u8> {
    let (_, a) = volume_host(mib, piece);
    send(&a, full("tank/v@s"))
}

/// Volume `name` holds, MiB by MiB for its first `mib` MiB, `piece(i)`.
pub(crate) fn check_volume(
    engine: &Engine,
    name: &str,
    mib: usize,
    piece: impl Fn(usize) -> Vec<u8>,
) {
    let stat = engine.volume_stat(name).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..mib {
        engine
            .volume_read(&stat.pool, stat.dataset, (i << 20) as u64, &mut buf)
            .unwrap();
        assert!(buf == piece(i), "{name}: MiB {i} differs");
    }
}

/// A host with `tank/v@s`, the volume [`volume_stream`] sends.
pub(crate) fn volume_host(
    mib: usize,
    piece: impl Fn(usize) -> Vec<u8>,
) -> (Arc<SimProvider>, Engine) {
    let (sims, a) = host_of_size(3, (2 * mib as u64 + 64) << 20);
    let spec = VolumeSpec {
        size: format!("{mib}M"),
        block_size: Some("128K".into()),
        sparse: true,
    };
    let none: &[(String, String)] = &[];
    a.create_volume("tank/v", &spec, none, false, "create")
        .unwrap();
    let stat = a.volume_stat("tank/v").unwrap();
    for i in 0..mib {
        a.volume_write(&stat.pool, stat.dataset, (i << 20) as u64, &piece(i), false)
            .unwrap();
    }
    a.snapshot(&["tank/v@s".into()], false, &[], "snapshot")
        .unwrap();
    (sims, a)
}

/// The stream `spec` makes.
pub(crate) fn send(engine: &Engine, spec: SendSpec) -> Vec<u8> {
    let mut out = Vec::new();
    engine.send(&spec, &mut out, &mut |_| {}).unwrap();
    out
}

/// A full stream of `snapshot`.
pub(crate) fn full(snapshot: &str) -> SendSpec {
    SendSpec {
        snapshot: snapshot.into(),
        ..SendSpec::default()
    }
}

/// An incremental stream from `from` to `snapshot`.
pub(crate) fn incremental(from: &str, snapshot: &str) -> SendSpec {
    SendSpec {
        from: Some(from.into()),
        ..full(snapshot)
    }
}

/// `spec` with `-R`.
pub(crate) fn replicate(spec: SendSpec) -> SendSpec {
    SendSpec {
        replicate: true,
        ..spec
    }
}

/// Receives `bytes` with `spec`: the report, or the refusal's one line.
pub(crate) fn received(
    engine: &Engine,
    spec: &ReceiveSpec,
    bytes: &[u8],
) -> Result<ReceiveReport, String> {
    let mut input = bytes;
    engine
        .receive(spec, &mut input, &mut |_| {})
        .map_err(|e| e.to_string())
}

/// Receives `bytes` with `spec`; a refusal as its one line.
pub(crate) fn receive(engine: &Engine, spec: ReceiveSpec, bytes: &[u8]) -> Result<(), String> {
    received(engine, &spec, bytes).map(|_| ())
}

/// A plain receive into `target`.
pub(crate) fn into(target: &str) -> ReceiveSpec {
    ReceiveSpec {
        target: target.into(),
        ..ReceiveSpec::default()
    }
}

/// `spec` with `-F`.
pub(crate) fn forced(spec: ReceiveSpec) -> ReceiveSpec {
    ReceiveSpec {
        force: true,
        ..spec
    }
}

/// What a receiving host is, as a user and the space maps see it: every dataset and
/// snapshot under `tank` with `properties` (not `available`: each import's history record
/// takes pool space), every volume's bytes hashed, and every block of every dataset's object
/// sets, hidden ones included (DVAs: a hidden dataset left behind would hold some).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TankState {
    pub(crate) rows: Vec<Vec<String>>,
    pub(crate) volumes: Vec<(String, u64)>,
    pub(crate) data_blocks: Vec<(u64, u64, u64)>,
}

/// [`TankState`] of `engine` now.
pub(crate) fn tank_state(engine: &Engine, properties: &[&str]) -> TankState {
    let rows = super::tank_rows(engine, properties);
    let volumes = rows
        .iter()
        .filter(|row| row[1] == "volume")
        .map(|row| {
            (
                row[0].clone(),
                super::tree::fnv(&super::volume::read(engine, &row[0])),
            )
        })
        .collect();
    let mut data_blocks: Vec<(u64, u64, u64)> = check::dataset_blocks(engine, "tank")
        .unwrap()
        .into_iter()
        .flat_map(|bp| bp.dvas)
        .filter(|dva| dva.asize > 0)
        .map(|dva| (u64::from(dva.vdev.0), dva.offset, dva.asize))
        .collect();
    data_blocks.sort_unstable();
    TankState {
        rows,
        volumes,
        data_blocks,
    }
}

/// Writes `data` to the new file `name` in the root directory of the filesystem `dataset`.
pub(crate) fn write_file(engine: &Engine, dataset: &str, name: &[u8], data: &[u8]) {
    let (_, id) = engine.find_dataset(dataset).unwrap();
    let me = Creds { uid: 0, gid: 0 };
    engine
        .fs_op("tank", id, FsOp::Modify, |fs| {
            let root = fs.root()?;
            let ino = fs.mknod(root, name, FileKind::Regular, 0o644, 0, me)?.ino;
            fs.write(ino, 0, data).map(drop)
        })
        .unwrap();
}
