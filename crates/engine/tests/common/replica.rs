//! Two hosts for send/receive tests: each an engine with a pool `tank` (a mirror of two
//! simulated devices), the streams one sends and the other receives, and both hosts' device
//! images to show a refusal changed nothing.

use std::sync::Arc;

use tarn_engine::{CreateSpec, Engine, ReceiveSpec, SendSpec, SimProvider, TopLayout};

use super::{Host, PLAIN, images, sim_devices};

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
    let sims = Arc::new(SimProvider::new());
    let names = sim_devices(&sims, "d", 0..2, 128 << 20);
    let spec = CreateSpec::one_top("tank", TopLayout::Mirror, names);
    let engine = Host { seed, ..PLAIN }.create_tank(&sims, &spec, &[]);
    (sims, engine)
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

/// Receives `bytes` with `spec`; a refusal as its one line.
pub(crate) fn receive(engine: &Engine, spec: ReceiveSpec, bytes: &[u8]) -> Result<(), String> {
    let mut input = bytes;
    engine
        .receive(&spec, &mut input, &mut |_| {})
        .map(|_| ())
        .map_err(|e| e.to_string())
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
