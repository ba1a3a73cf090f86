//! Rewind at import (issue 17): `-F` walks back past a txg whose root cannot be read and says
//! exactly which txgs it discards; `-n` previews that without writing a byte; `-X` also
//! walks back past a txg whose dataset metadata cannot be read, which `-F` accepts.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{PLAIN, check_objects, committed, exported_tank, images, sim_devices, write_object};
use tarn_base::ManualClock;
use tarn_engine::{CreateSpec, Engine, ImportOptions, Recovery, SimProvider, TopLayout};
use tarn_format::BlockPtr;

const DEVICE: u64 = 64 << 20;

/// Garbage over every copy of `bp` on both sides of the mirror (a DVA's offset is the same
/// on both).
fn destroy(provider: &SimProvider, bp: &BlockPtr) {
    for dva in bp.copies() {
        for side in ["/sim/d0", "/sim/d1"] {
            let device = provider.get(side).unwrap();
            device
                .rot(tarn_format::label::DATA_START + dva.offset, dva.asize)
                .unwrap();
        }
    }
}

fn mirror_tank() -> (Arc<SimProvider>, Engine, Arc<ManualClock>) {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..2, DEVICE);
    let spec = CreateSpec::one_top("tank", TopLayout::Mirror, names);
    let clock = Arc::new(ManualClock::new(PLAIN.secs));
    let engine = Engine::new(
        provider.clone(),
        PLAIN.identity(),
        clock.clone(),
        PLAIN.seed,
    );
    engine
        .create_pool(&spec, &tarn_engine::CreateOptions::default())
        .unwrap();
    (provider, engine, clock)
}

fn rewind() -> ImportOptions {
    ImportOptions {
        rewind: true,
        ..ImportOptions::default()
    }
}

const EXTREME: Recovery = Recovery { extreme: true };

fn dirs() -> Vec<String> {
    vec!["/sim".into()]
}

// DESCRIPTION: every copy of the newest txg's root destroyed: a plain import fails; `-F -n`
// names the txg it would open, the newest one and their times, writes nothing and imports
// nothing; `-F` opens that txg and reports the same, and the data committed by then reads
// back.
// STRATEGY: a mirror of two sim devices, two objects committed 90 s apart by the engine's
// clock, export, the newest uberblock's root found by discovery and destroyed on both sides.
#[test]
fn rewind_reports_what_it_discards_and_a_preview_changes_nothing() {
    let (provider, engine, clock) = mirror_tank();
    let kept = write_object(&engine, 128 << 10, 1, 256 << 10);
    clock.advance_ns(90_000_000_000);
    write_object(&engine, 128 << 10, 2, 256 << 10);
    engine.export_pool("tank", false).unwrap();
    let found = tarn_pool::discover(provider.as_ref(), &dirs());
    let newest = found[0].uberblock_history()[0];
    destroy(&provider, &newest.root);

    let engine = PLAIN.engine(&provider);
    let refused = engine.import_pool(&dirs(), "tank", &ImportOptions::default(), "import");
    assert!(refused.is_err(), "the newest root is gone: {refused:?}");
    let before = images(&provider);
    let preview = engine
        .import_preview(&dirs(), "tank", &rewind(), Recovery::default())
        .unwrap();
    assert!(preview.rewound(), "{preview:?}");
    assert_eq!(preview.newest.txg, newest.txg);
    assert_eq!(preview.newest.time, newest.timestamp);
    assert!(preview.opened.txg < newest.txg, "{preview:?}");
    assert!(preview.opened.time <= preview.newest.time, "{preview:?}");
    assert!(
        before == images(&provider),
        "a preview wrote to the devices"
    );
    assert!(
        engine.pool_names().is_empty(),
        "a preview imported the pool"
    );

    let report = engine
        .import_pool_with(&dirs(), "tank", &rewind(), Recovery::default(), "import -F")
        .unwrap();
    assert_eq!(
        (report.opened, report.newest),
        (preview.opened, preview.newest)
    );
    check_objects(&engine, &[kept]);
}

// DESCRIPTION: the indirect blocks of the newest object destroyed in every copy, the MOS and
// the dataset tree intact: `-F` opens the newest txg (its root and dataset tree read), `-X`
// walks back to a txg from before those blocks were born, where the data committed by then
// reads back.
// STRATEGY: two objects committed, the second of 4 KiB blocks (so it has indirect blocks);
// its indirect blocks found by walking the exported data root read-only; previews of both
// modes, then `import -X`.
#[test]
fn extreme_rewind_skips_txgs_whose_dataset_metadata_is_unreadable() {
    let (provider, engine, _clock) = mirror_tank();
    let kept = write_object(&engine, 128 << 10, 3, 256 << 10);
    let before_damage = committed(&engine);
    let (object, _) = write_object(&engine, 4096, 4, 1 << 20);
    engine.export_pool("tank", false).unwrap();
    let (pool, data_root) = exported_tank(&provider, &PLAIN);
    let mut indirect = Vec::new();
    let mut visit = |bp: &BlockPtr, at: tarn_objects::BlockContext| {
        if at.object == object
            && at.level >= 1
            && at.level != tarn_objects::BlockContext::ROOT_LEVEL
        {
            indirect.push(*bp);
        }
    };
    tarn_objects::visit_object_set(&pool.reader(), &data_root, &mut visit).unwrap();
    drop(pool);
    assert!(
        !indirect.is_empty(),
        "a 1 MiB object of 4 KiB blocks has indirect blocks"
    );
    for bp in &indirect {
        assert!(bp.birth > before_damage, "{bp:?}");
        destroy(&provider, bp);
    }

    let engine = PLAIN.engine(&provider);
    let plain = engine
        .import_preview(&dirs(), "tank", &rewind(), Recovery::default())
        .unwrap();
    assert!(!plain.rewound(), "-F needs no rewind here: {plain:?}");
    let deep = engine
        .import_preview(&dirs(), "tank", &rewind(), EXTREME)
        .unwrap();
    assert!(
        deep.opened.txg <= before_damage,
        "-X opened txg {} (the damaged blocks were born after {before_damage})",
        deep.opened.txg,
    );
    let report = engine
        .import_pool_with(&dirs(), "tank", &rewind(), EXTREME, "import -X")
        .unwrap();
    assert_eq!(report.opened, deep.opened);
    check_objects(&engine, &[kept]);
}
