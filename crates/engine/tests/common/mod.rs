//! Helpers shared by the engine's integration tests (each test file that needs them says
//! `mod common;`): the engine every plain test runs on.

use std::sync::Arc;

use tarn_base::ManualClock;
use tarn_engine::Engine;
use tarn_pool::{HostIdentity, SimProvider};

/// An engine over `provider` as host 7 ("host"), with a manual clock at 2023-11-14 and
/// seed 42: the same start for every test that does not care about identity or time.
pub(crate) fn engine_on(provider: &Arc<SimProvider>) -> Engine {
    let identity = HostIdentity {
        hostid: 7,
        hostname: "host".into(),
    };
    Engine::new(
        provider.clone(),
        identity,
        Arc::new(ManualClock::new(1_700_000_000)),
        42,
    )
}
