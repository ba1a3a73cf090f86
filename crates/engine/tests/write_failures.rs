//! Writes that fail for a while and then work again, on devices behind the write-behind
//! queue real files get (a host filesystem that filled up and was cleaned: ENOSPC on every
//! device, no device gone).
//!
//! Goal: the txg whose writes failed suspends the pool with nothing lost, and the reason
//! says what the devices said (ENOSPC, not just a count); once the writes
//! work again, `clear` writes the kept txg again, commits it and resumes; every byte written
//! before and after is there, also after a reimport. The queue latches a failed write's
//! error until the next flush (tarn-device `queued`, I2): those errors belong to the failed
//! attempt and must not fail the retry. Method: simulated devices behind `common::gate`'s
//! power cut (every write and flush fails while it lasts) and a `QueuedDevice` each.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;

use common::gate::GatedProvider;
use common::{PLAIN, check_objects, scrub_tank, seeded_bytes, sim_devices, spec_with_logs};
use tarn_engine::{Engine, EngineError, ImportOptions, PoolError, TopLayout, check};

fn setup() -> (Arc<GatedProvider>, Engine) {
    let provider = Arc::new(GatedProvider {
        queued: true,
        ..GatedProvider::default()
    });
    let names = sim_devices(&provider.sims, "d", 0..4, 64 << 20);
    let spec = spec_with_logs(TopLayout::Raidz(1), names, Vec::new());
    let engine = PLAIN.create_tank(&provider, &spec, &[("failmode", "continue")]);
    (provider, engine)
}

fn new_object(engine: &Engine, seed: u64) -> (tarn_base::ObjectId, Vec<u8>) {
    let object = engine.object_create("tank", 128 << 10).unwrap();
    let data = seeded_bytes(1 << 20, seed);
    engine.object_write("tank", object, 0, &data).unwrap();
    (object, data)
}

/// The writes of a txg fail (every device), the pool suspends; the writes work again and
/// `clear` commits the kept txg: nothing lost, scrub clean, reimport sees it all.
#[test]
fn clear_resumes_after_every_write_failed_for_a_while() {
    let (provider, engine) = setup();
    let mut objects = vec![new_object(&engine, 1)];
    engine.sync_pool("tank").unwrap();
    objects.push(new_object(&engine, 2));
    provider.gate.cut_after(Some(0));
    let failed = engine.sync_pool("tank");
    assert!(
        matches!(failed, Err(EngineError::Pool(PoolError::Suspended(_)))),
        "{failed:?}"
    );
    let status = engine.status("tank").unwrap();
    assert_eq!(status.state, "SUSPENDED");
    // The reason names what a device said, not only how many failed (how many more have
    // said it by then depends on the queues' timing: an error is seen at the next write).
    let why = status.status.unwrap();
    assert!(
        why.contains("; /sim/d") && why.contains("power cut") && why.contains(" more device"),
        "{why}"
    );

    provider.gate.cut_after(None);
    engine.clear("tank", None, "pool clear tank").unwrap();
    let status = engine.status("tank").unwrap();
    assert_eq!(status.state, "ONLINE", "{status:?}");
    check_objects(&engine, &objects);
    objects.push(new_object(&engine, 3));
    engine.sync_pool("tank").unwrap();
    check::verify_pool(&engine, "tank").unwrap();
    assert_eq!(scrub_tank(&engine, 1 << 20).errors, 0);

    engine.export_pool("tank", false).unwrap();
    let engine = PLAIN.import(&provider, &ImportOptions::default()).unwrap();
    check_objects(&engine, &objects);
    assert_eq!(scrub_tank(&engine, 1 << 20).errors, 0);
}
