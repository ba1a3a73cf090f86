//! What an import rewound, and the recovery modes of `pool import`: `-F` (walk back through
//! the uberblock ring until the pool opens), `-X` (walk back until every metadata block the
//! candidate txg reaches reads back verified), and `-n` (say what `-F`/`-X`/`-T` would do,
//! importing nothing).
//!
//! # Model
//! A rewind discards every txg after the one it opens: the report names both txgs and their
//! times, so the admin knows exactly which changes are gone (ZFS says only "approximately N
//! minutes"). A preview opens the pool read-only with the same verification and drops it:
//! nothing is written, so it can be run as often as wanted before the real import.
//!
//! # Invariants
//! - A preview never writes a device (read-only open; no `Imported` is built, so no intent
//!   log is replayed and no txg is synced).
//! - `-X` accepts a txg only when the MOS, the dataset tree and the object sets of every
//!   dataset and snapshot walk without an unreadable metadata block; data blocks are not
//!   read (a scrub after the import finds those).
//!
//! # Failure model
//! A txg that fails verification is skipped; when none passes, the import fails naming the
//! oldest txg tried and why (tarn_pool `open_newest`).
//!
//! # Not here
//! The walk back itself (tarn_pool::Pool::import), the space-log rebuild of a damaged log
//! (`Imported::rebuild_space_if_lost`).

use tarn_base::Txg;
use tarn_objects::visit_object_set;
use tarn_pool::{Discovered, ImportOptions, Pool};

use crate::mos::Mos;
use crate::{Engine, EngineError};

/// How hard an import tries, beyond [`ImportOptions`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// `-X`: a candidate txg must have every metadata block readable.
    pub extreme: bool,
}

/// A txg and its uberblock's time (Unix seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxgTime {
    /// The txg.
    pub txg: Txg,
    /// When its uberblock was written.
    pub time: u64,
}

/// What an import opened, against the newest txg on the devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportReport {
    /// The pool's name as imported.
    pub name: String,
    /// The txg the import opened.
    pub opened: TxgTime,
    /// The newest txg any device holds an uberblock of.
    pub newest: TxgTime,
}

impl ImportReport {
    /// Whether the import discards committed txgs.
    #[must_use]
    pub fn rewound(&self) -> bool {
        self.opened.txg < self.newest.txg
    }

    pub(crate) fn of(found: &Discovered, pool: &Pool, name: String) -> Self {
        let newest = found.uberblocks.iter().max_by_key(|ub| ub.txg).map_or(
            TxgTime {
                txg: Txg(0),
                time: 0,
            },
            |ub| TxgTime {
                txg: ub.txg,
                time: ub.timestamp,
            },
        );
        let opened = pool.last_uberblock().map_or(newest, |ub| TxgTime {
            txg: ub.txg,
            time: ub.timestamp,
        });
        ImportReport {
            name,
            opened,
            newest,
        }
    }
}

/// The check a candidate txg must pass: its root opens (the MOS and the dataset tree), and
/// with `-X` every metadata block it reaches reads back verified.
fn verify(pool: &Pool, name: &str, recovery: Recovery) -> Result<(), String> {
    let reader = pool.reader();
    let root = pool.root().ok_or("no root block")?;
    let mut mos = Mos::open(&reader, &root).map_err(|e| e.to_string())?;
    let tree =
        crate::datasets::Tree::load(mos.objset(), &reader, name).map_err(|e| e.to_string())?;
    if !recovery.extreme {
        return Ok(());
    }
    let mut ignore = |_: &tarn_format::BlockPtr, _| {};
    visit_object_set(&reader, &root, &mut ignore).map_err(|e| format!("MOS: {e}"))?;
    for id in tree.all() {
        let node = tree.node(id);
        let roots = std::iter::once(node.objset.root())
            .chain(node.snapshots.iter().map(|s| s.header.objset));
        for objset in roots {
            visit_object_set(&reader, &objset, &mut ignore)
                .map_err(|e| format!("dataset '{}': {e}", node.name))?;
        }
    }
    Ok(())
}

impl Engine {
    /// Opens the pool `found` describes at the newest txg that passes [`verify`] under
    /// `recovery` (walking back with `-F`/`-X`, at most `-T`): the pool layer's import, for
    /// both the real import and the preview.
    pub(crate) fn open_found(
        &self,
        found: &Discovered,
        options: &ImportOptions,
        recovery: Recovery,
    ) -> Result<Pool, EngineError> {
        let check = |pool: &Pool| verify(pool, &found.config.name, recovery);
        Ok(Pool::import(
            found,
            self.provider.as_ref(),
            options,
            self.identity.clone(),
            std::sync::Arc::clone(&self.clock),
            &check,
        )?)
    }

    /// `import -n` with `-F`, `-X` or `-T`: which txg an import with `options` would open
    /// and what it would discard. Opens the pool read-only and drops it; nothing is written.
    pub fn import_preview(
        &self,
        dirs: &[String],
        which: &str,
        options: &ImportOptions,
        recovery: Recovery,
    ) -> Result<ImportReport, EngineError> {
        let _admin = self.admin();
        let found = self.find_importable(dirs, which)?;
        self.check_not_imported(&found)?;
        let options = ImportOptions {
            readonly: true,
            ..options.clone()
        };
        let name = options
            .new_name
            .clone()
            .unwrap_or_else(|| found.config.name.clone());
        let pool = self.open_found(&found, &options, recovery)?;
        Ok(ImportReport::of(&found, &pool, name))
    }
}
