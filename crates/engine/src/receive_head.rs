//! A plain incremental receive (`send -i @a ds@b | receive dst`, no `-F`) writes the
//! stream into the destination's head (`send_ops`, `Destination::Head`), whose txgs commit
//! while the stream arrives. This module makes that all-or-nothing across a crash: the head
//! carries a mark (a local property no user property can name, [`MARK_KEY`], whose value is
//! the GUID of the stream's source snapshot) from before its first record to its END.
//!
//! ```text
//!  prepare:  mark set in the open txg         (committed with or before any record)
//!  records:  applied to the head; txgs commit partial data, always with the mark
//!  END:      snapshot taken and mark cleared, one txg
//!  refused:  head rolled back and mark cleared, one txg (send_ops::receive_undo)
//!  -s cut:   the resume token is saved beside the mark: the partial state is kept
//!  import:   a mark without a token = a receive cut by a crash: head rolled back to the
//!            source, mark cleared (as `receive_atomic` destroys a cut hidden dataset)
//! ```
//!
//! Invariants:
//! - I1: every committed txg in which the head holds records of a stream not yet received
//!   whole has the mark on the head (it is set in the open txg before the first record is
//!   applied, and cleared only in the txg that takes the snapshot or rolls the head back).
//! - I2: a head with a mark and no resume token is a receive in progress (this engine) or
//!   one a crash cut (read at import); a second receive into it is refused.
//!
//! Failure model: a power cut or SIGKILL at any point leaves, after the next writable
//! import, the destination at its source snapshot with no block of the stream, or (once the
//! END txg is durable) at the received snapshot. A `receive -s` cut by a crash before its
//! stream stopped has no token yet, so it is rolled back too: its partial state is lost, as
//! for a full stream's hidden dataset. The rollback at import reads the head's blocks born
//! since the source; if that read fails beyond parity the import goes on, the mark stays
//! (the next writable import tries again) and the head keeps the partial stream until
//! then. A read-only import rolls nothing back. A snapshot taken of the head during the
//! receive (the head is unmounted, so only by an admin) is not rolled back at import: the
//! rollback goes only to the mark's source, when it is still the latest snapshot.

use crate::send_ops::TOKEN_KEY;
use crate::{DatasetId, EngineError, Imported};

/// Key of the mark among the head's local properties (`%`: no property has it).
pub(crate) const MARK_KEY: &str = "%receive_into_head";

/// Whether `id` is being received into (or was, until a crash): a mark and no token (I2).
pub(crate) fn in_progress(inner: &Imported, id: DatasetId) -> bool {
    let local = &inner.datasets.node(id).local;
    local.contains_key(MARK_KEY) && !local.contains_key(TOKEN_KEY)
}

/// Marks the head `id` before its first record (I1); `source` is the stream's source GUID.
/// In the open txg: nothing is written until the records are.
pub(crate) fn mark(inner: &mut Imported, id: DatasetId, source: u64) -> Result<(), EngineError> {
    let value = source.to_string();
    if inner.datasets.node(id).local.get(MARK_KEY) == Some(&value) {
        return Ok(());
    }
    inner.set_local(id, MARK_KEY, Some(&value))
}

/// Clears the mark of `id`, if it has one (in the open txg of END or of the rollback).
pub(crate) fn unmark(inner: &mut Imported, id: DatasetId) -> Result<(), EngineError> {
    if !inner.datasets.node(id).local.contains_key(MARK_KEY) {
        return Ok(());
    }
    inner.set_local(id, MARK_KEY, None)
}

/// At a writable import, before anything else changes: every head a crash cut in a receive
/// (I2) is rolled back to the stream's source and unmarked; the caller commits. Returns the
/// names of the heads rolled back. A head whose rollback cannot read its blocks is left
/// marked (module doc): the import does not fail for it.
pub(crate) fn discard_at_import(inner: &mut Imported) -> Result<Vec<String>, EngineError> {
    let cut: Vec<DatasetId> = inner
        .datasets
        .all()
        .into_iter()
        .filter(|id| in_progress(inner, *id))
        .collect();
    let mut names = Vec::new();
    for id in cut {
        let node = inner.datasets.node(id);
        let source = node.local.get(MARK_KEY).and_then(|v| v.parse::<u64>().ok());
        let latest = node.snapshots.last().map(|s| s.header.guid.0);
        if latest.is_some() && latest == source {
            let reads = crate::snapshot_ops::rollback_reads(inner, id, node.snapshots.len() - 1);
            let Ok(reads) = reads else {
                continue;
            };
            crate::snapshot_ops::rollback_apply(inner, id, reads)?;
        }
        unmark(inner, id)?;
        names.push(inner.datasets.node(id).name.clone());
    }
    Ok(names)
}
