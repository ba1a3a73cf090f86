//! `tarn send` and `tarn receive`: thin verbs over `tarn_dataset::send` (the object-set
//! walk and apply) and tarn-send (the stream). The engine's part is choosing snapshots,
//! the checks of the destination, batching, and making a receive all-or-nothing:
//!
//! - A send walks in batches of [`BATCH_BYTES`]: each batch is planned under the pool lock
//!   (the snapshot is checked to still exist, so its blocks are still allocated), its data
//!   blocks are read without it by the send's readers (pinned: `Planned`), and the stream
//!   is written to the caller's writer in order (`send_pipe`).
//! - A full receive writes into a hidden dataset `PARENT/%LEAF` (not listed, mounted or
//!   selected; no per-owner counts while it fills); at END it is synced, its counts are
//!   recounted, it is renamed to its name and snapshotted, in one txg. With `-F` over an
//!   existing destination, and for `-o origin=`, see `receive_new`.
//! - An incremental receive writes into the destination's head, which the caller keeps
//!   unmounted, after checking its latest snapshot is the stream's source (and rolling back
//!   changes that are only access times), marked from before its first record to END so
//!   that a crash in between rolls it back at import (`receive_head`); at END the snapshot
//!   is taken. With `-F` a
//!   destination with later snapshots or real changes is taken back to the source only at
//!   END, the stream going into a hidden clone meanwhile (`receive_rollback`).
//! - Any refusal or bad record before END undoes the receive: the hidden dataset is
//!   destroyed, or the head rolled back to the snapshot it started from, so the destination
//!   is as it was.
//!
//! Records are read from the stream without the pool lock, in batches of about
//! [`BATCH_BYTES`], and applied under it by another thread while the next batch is read,
//! on the write throttle (`receive_pipe`).
//!
//! Resuming (`receive -s`, `send -t`): after each applied record the receive knows the first
//! object and offset not yet received (the order rule makes that exact). A stream that stops
//! early under `-s` keeps what was applied (committed) and records a resume token among the
//! local properties of the dataset written ([`TOKEN_KEY`]: the hidden one, or the head); a
//! `send -t` stream starts there with the RESUMING feature, and a receive takes it only
//! when its point is exactly the token's. `receive -A` discards the partial state.
//!
//! Chains (`send -I` of two or more snapshots without `-R`): every substream has the CHAIN
//! feature and counts the substreams left in its BEGIN, so the reader refuses an input cut
//! at a substream boundary; the receiver holds the chain in a hidden clone until its last
//! substream and the destination adopts it then (`receive_atomic`), so a cut or refused
//! chain changes nothing. Under `-s` each substream still commits at its END, and a chain
//! received again skips the snapshots the destination has (by GUID), so a chain cut under
//! `-s` is finished by `send -t` and the same `send -I` again.
//!
//! Replication (`send -R`): a manifest substream listing the tree's datasets and snapshots
//! (`receive_prune`: with `-F` the receiver destroys what the sender no longer has, after
//! the last substream), then one substream per dataset and snapshot, parents first, with
//! the dataset's local properties; the receiver names each dataset by its path below the
//! stream's root, and holds every substream in a hidden dataset until the stream ends
//! (`receive_atomic`). Clones go after their origins as clone streams, and a clone stream
//! received makes a clone (`clone_stream`); `receive -c` is `corrective`.

use std::io::{Read, Write};

use tarn_base::{Guid, ObjectId};
use tarn_dataset::name as dsname;
use tarn_dataset::node;
use tarn_dataset::send::{self as dsend, Cursor, Source};
use tarn_dataset::snapshot::{self, NewSnapshot, Snapshot};
use tarn_objects::{ObjectSet, ObjsetKind};
use tarn_send::{Begin, Record, StreamReader, StreamWriter};

use crate::dataset_ops::{invalid, pool_of};
use crate::datasets::Node;
use crate::receive_atomic::{self, Held, Within};
use crate::receive_pipe::{Progressed, receive_records};
use crate::{DatasetId, Engine, EngineError, Imported, PoolHandle};

/// Stream bytes produced or applied per hold of the pool lock.
pub const BATCH_BYTES: u64 = 8 << 20;

/// What `tarn send` sends.
#[derive(Clone, Debug, Default)]
pub struct SendSpec {
    /// The snapshot (`pool/ds@snap`).
    pub snapshot: String,
    /// `-i`/`-I`: the source snapshot (`@a`, `a` or `pool/ds@a`).
    pub from: Option<String>,
    /// `-I`: every snapshot between the source and the snapshot, one substream each.
    pub intermediates: bool,
    /// `-t TOKEN`: resume a partial receive (`snapshot` and `from` are then ignored).
    pub token: Option<String>,
    /// `-n`: only size the stream (no data block is read; `out` gets nothing).
    pub dry_run: bool,
    /// `-p`: PROPERTY records with the dataset's local properties.
    pub properties: bool,
    /// `-c`: compressed blocks as stored.
    pub compressed: bool,
    /// `-L`, `-e`: recorded in the stream's features (tarn never splits a block, and keeps
    /// no data in block pointers).
    pub large_blocks: bool,
    /// `-e`.
    pub embedded: bool,
    /// `-R`: the dataset and its descendants, each with its snapshots up to the one named
    /// (from the source with `-i`/`-I`) and its properties.
    pub replicate: bool,
    /// The size of the whole stream, as [`Engine::send_size`] found it (0: not sized): put
    /// in the stream's first BEGIN (`tarn_send::FEATURE_STREAM_SIZE`) so that a receiver
    /// shows bytes of a total and the time left. Left out when it does not fit the field.
    /// Never checked against what is sent: a wrong size only makes the ETA wrong.
    pub stream_size: u64,
}

/// What a send sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendReport {
    /// (source, snapshot) of each substream, full names (source empty for a full one).
    pub streams: Vec<(String, String)>,
    /// The bytes of each substream.
    pub sizes: Vec<u64>,
    /// Stream bytes written.
    pub bytes: u64,
}

/// What `tarn receive` does with a stream.
#[derive(Clone, Debug, Default)]
pub struct ReceiveSpec {
    /// The destination dataset (or `ds@snap`: the received snapshot's name).
    pub target: String,
    /// `-F`: roll the destination back to the stream's source snapshot first.
    pub force: bool,
    /// `-s`: a stream that stops early leaves the partial receive for `send -t`.
    pub resumable: bool,
    /// `-n`: read and check the whole stream, change nothing.
    pub dry_run: bool,
    /// `-d` (`Some(true)`): the destination is `target` plus the sent name without its
    /// pool; `-e` (`Some(false)`): plus the sent name's last component.
    pub append: Option<bool>,
    /// `-o prop=val`: set on the received dataset (over what the stream carries).
    pub set: Vec<(String, String)>,
    /// `-x prop`: not taken from the stream.
    pub exclude: Vec<String>,
    /// `-o origin=POOL/FS@SNAP`: the stream is received as a clone of this snapshot, which
    /// must be its source (`receive_new`). An `origin` among `set` is taken here.
    pub origin: Option<String>,
}

/// Key of a partial receive's resume token among the local properties of the dataset it
/// writes (the hidden one or the head): no property can have a `%` in its name.
pub(crate) const TOKEN_KEY: &str = "%receive_resume_token";

/// Features of an interrupted substream its resume token leaves out: a resumed substream
/// goes alone (docs/FORMAT.md 21.5).
const TOKEN_FEATURES_DROPPED: u64 =
    tarn_send::FEATURE_RESUMING | tarn_send::FEATURE_CHAIN | tarn_send::FEATURE_STREAM_SIZE;

/// What a receive received.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiveReport {
    /// Full names of the snapshots received, in order.
    pub snapshots: Vec<String>,
    /// Stream bytes read.
    pub bytes: u64,
    /// `receive -R -F`: the datasets and snapshots (full names) of the destination's tree
    /// destroyed because the sender no longer has them (with `-n`: that would be).
    pub destroyed: Vec<String>,
    /// `receive -R`: snapshots renamed as the sender renamed them (old, new full names).
    pub renamed: Vec<(String, String)>,
    /// `receive -R`: the snapshots (full names) whose substreams were skipped because the
    /// destination already has them, by GUID (a cut `receive -s` received them).
    pub skipped: Vec<String>,
}

/// How far a receive has read its stream, as its progress callback is told after each
/// batch, and once when a BEGIN announces the stream's size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiveProgress {
    /// Stream bytes read so far.
    pub bytes: u64,
    /// The stream's size as its sender put it in its first BEGIN
    /// (`tarn_send::FEATURE_STREAM_SIZE`, a sized send); 0 when it did not. A hint for an
    /// ETA only: nothing checks it, so `bytes` may pass it.
    pub total: u64,
}

impl ReceiveProgress {
    /// Where `reader` stands.
    pub(crate) fn of<R: Read>(reader: &StreamReader<R>) -> ReceiveProgress {
        ReceiveProgress {
            bytes: reader.bytes(),
            total: reader.stream_size(),
        }
    }
}

/// A stream's failure as the refusal line says it.
pub(crate) fn stream_error(error: tarn_send::StreamError) -> EngineError {
    invalid(format!("invalid stream: {error}"))
}

impl Engine {
    /// The bytes of the stream `spec` would send (`send -n`: from block pointers, no data
    /// block read). A size put in BEGIN takes no bytes of its own, so it is also the size
    /// of the stream sent with `stream_size` set to it.
    pub fn send_size(&self, spec: &SendSpec) -> Result<u64, EngineError> {
        let dry = SendSpec {
            dry_run: true,
            ..spec.clone()
        };
        Ok(self.send(&dry, &mut std::io::sink(), &mut |_| {})?.bytes)
    }

    /// `tarn send [-i|-I SNAP] SNAP`: writes the stream to `out`; `progress` gets the bytes
    /// written so far after each batch.
    pub fn send(
        &self,
        spec: &SendSpec,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<SendReport, EngineError> {
        if let Some(token) = &spec.token {
            return self.send_resume(spec, token, out, progress);
        }
        let (root, snap) = snapshot::split_name(&spec.snapshot)?;
        let handle = self.pool(pool_of(root))?;
        let (plan, clones, manifest) = {
            let inner = handle.lock();
            let plan = send_plan(&inner, spec, root, snap)?;
            let datasets: Vec<&str> = plan.iter().map(|(d, _, _)| d.as_str()).collect();
            let manifest = match spec.replicate {
                true => Some(manifest_records(&inner, (root, snap), &datasets)?),
                false => None,
            };
            let clones: Vec<bool> = plan
                .iter()
                .map(|(dataset, from, _)| {
                    let node = inner
                        .datasets
                        .by_name(dataset)
                        .map(|id| inner.datasets.node(id));
                    node.is_some_and(|n| crate::clone_stream::is_origin(n, from.as_ref()))
                })
                .collect();
            (plan, clones, manifest)
        };
        let mut report = SendReport::default();
        let mut sink = std::io::sink();
        let out: &mut dyn Write = if spec.dry_run { &mut sink } else { out };
        let mut writer = StreamWriter::new(out);
        // Only the stream's first BEGIN carries its size (docs/FORMAT.md 21.4).
        let mut size = announced(spec.stream_size);
        if let Some(manifest) = manifest {
            write_manifest(&mut writer, manifest, std::mem::take(&mut size))?;
        }
        let mut left = chain_length(spec, plan.len())?;
        for ((dataset, from, to), clone) in plan.into_iter().zip(clones) {
            let dataset = dataset.as_str();
            let names = (
                from.as_ref()
                    .map_or(String::new(), |s| format!("{dataset}@{}", s.name)),
                format!("{dataset}@{}", to.name),
            );
            let start = Start {
                from: from.as_ref(),
                to: &to,
                names: &names,
                resume: None,
                clone,
                chain: left,
                stream_size: std::mem::take(&mut size),
                spec,
            };
            left = left.saturating_sub(1);
            let before = writer.bytes();
            send_one(&handle, dataset, &start, &mut writer, progress)?;
            report.streams.push(names);
            report.sizes.push(writer.bytes() - before);
        }
        writer.flush().map_err(stream_error)?;
        report.bytes = writer.bytes();
        Ok(report)
    }
}

impl Engine {
    /// `tarn send -t TOKEN`: the rest of the stream a partial receive stopped in.
    fn send_resume(
        &self,
        spec: &SendSpec,
        text: &str,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<SendReport, EngineError> {
        let token = tarn_send::ResumeToken::decode(text).map_err(stream_error)?;
        let (dataset, snap) = snapshot::split_name(&token.to_name)?;
        let handle = self.pool(pool_of(dataset))?;
        let (from, to) = resume_sides(&handle.lock(), &token, (dataset, snap))?;
        let names = (token.from_name.clone(), token.to_name.clone());
        let start = Start {
            from: from.as_ref(),
            to: &to,
            names: &names,
            resume: Some((token.object, token.offset)),
            clone: token.features & tarn_send::FEATURE_CLONE != 0,
            // A resumed substream goes alone, never as part of a chain; sized, its size is
            // its own: the rest of the substream, what its receive reads.
            chain: 0,
            stream_size: announced(spec.stream_size),
            spec: &SendSpec {
                large_blocks: token.features & tarn_send::FEATURE_LARGE_BLOCKS != 0,
                compressed: token.features & tarn_send::FEATURE_COMPRESSED != 0,
                embedded: token.features & tarn_send::FEATURE_EMBEDDED != 0,
                dry_run: spec.dry_run,
                ..SendSpec::default()
            },
        };
        // A dry run (`send -n -t`, or sizing it) reads no data block and writes nothing.
        let mut sink = std::io::sink();
        let out: &mut dyn Write = if spec.dry_run { &mut sink } else { out };
        let mut writer = StreamWriter::new(out);
        send_one(&handle, dataset, &start, &mut writer, progress)?;
        writer.flush().map_err(stream_error)?;
        Ok(SendReport {
            streams: vec![names],
            sizes: vec![writer.bytes()],
            bytes: writer.bytes(),
        })
    }
}

/// The source (if any) and the snapshot of a resume token: they must still exist, the
/// snapshot under its name, the source as a snapshot, a bookmark or the origin (by GUID).
fn resume_sides(
    inner: &Imported,
    token: &tarn_send::ResumeToken,
    (dataset, snap): (&str, &str),
) -> Result<(Option<Snapshot>, Snapshot), EngineError> {
    let id = inner.datasets.lookup(dataset)?;
    let node = inner.datasets.node(id);
    let by_guid = |guid: u64| {
        node.snapshots
            .iter()
            .find(|s| s.header.guid.0 == guid)
            .cloned()
            .or_else(|| crate::bookmark_ops::source_by_guid(node, guid))
            .or_else(|| {
                let origin = crate::clone_stream::origin_of(inner, node);
                origin.map(|(_, s)| s).filter(|s| s.header.guid.0 == guid)
            })
    };
    let gone = |name: &str| invalid(format!("snapshot '{name}' of the token no longer exists"));
    let to = by_guid(token.to_guid).filter(|s| s.name == snap);
    let to = to.ok_or_else(|| gone(&token.to_name))?;
    let from = match token.from_guid {
        0 => None,
        guid => Some(by_guid(guid).ok_or_else(|| gone(&token.from_name))?),
    };
    Ok((from, to))
}

/// Writes the manifest substream `records`, its BEGIN with the stream's size `size` (0:
/// unsized) as the stream's first.
fn write_manifest(
    writer: &mut StreamWriter<&mut dyn Write>,
    mut records: Vec<Record>,
    size: u64,
) -> Result<(), EngineError> {
    if let Some(Record::Begin(begin)) = records.first_mut() {
        begin.stream_size = size;
        begin.features |= sized_feature(size);
    }
    for record in records {
        writer.write(&record).map_err(stream_error)?;
    }
    writer.end().map_err(stream_error)
}

/// The manifest substream of `send -R` of `root@snap` (docs/FORMAT.md 21): its BEGIN, then
/// one MANIFEST record per dataset of the tree (`receive_prune`).
fn manifest_records(
    inner: &Imported,
    (root, snap): (&str, &str),
    plan: &[&str],
) -> Result<Vec<Record>, EngineError> {
    let id = inner.datasets.lookup(root)?;
    let node = inner.datasets.node(id);
    let (_, to) = node
        .snapshot(snap)
        .ok_or_else(|| invalid(format!("snapshot '{root}@{snap}' does not exist")))?;
    let begin = Begin {
        features: tarn_send::FEATURE_REPLICATED | tarn_send::FEATURE_MANIFEST,
        from_guid: 0,
        to_guid: to.header.guid.0,
        to_txg: to.header.txg.0,
        creation_time: to.header.creation_time,
        objset_kind: stream_kind(node.objset.kind()),
        stream_size: 0,
        chain: 0,
        resume_object: 0,
        resume_offset: 0,
        from_name: String::new(),
        to_name: format!("{root}@{snap}"),
    };
    let mut records = vec![Record::Begin(Box::new(begin))];
    let listed = crate::receive_prune::manifest(inner, id, snap, plan);
    records.extend(listed.into_iter().map(Record::Manifest));
    Ok(records)
}

/// The substreams of the chain a send of `substreams` sends (0: not a chain): `send -I` of
/// two or more snapshots without -R is one (FEATURE_CHAIN), each BEGIN counting the
/// substreams left, so a receiver tells a cut at a boundary from the end, and holds them
/// all until the last (`receive_atomic`).
fn chain_length(spec: &SendSpec, substreams: usize) -> Result<u32, EngineError> {
    if spec.replicate || !spec.intermediates || substreams < 2 {
        return Ok(0);
    }
    u32::try_from(substreams).map_err(|_| invalid("too many snapshots for one stream"))
}

/// Where one substream starts: its snapshots, their full names, and a resume point.
struct Start<'a> {
    from: Option<&'a Snapshot>,
    to: &'a Snapshot,
    names: &'a (String, String),
    resume: Option<(u64, u64)>,
    /// The source is the dataset's origin (a clone stream, FEATURE_CLONE).
    clone: bool,
    /// In a chain (FEATURE_CHAIN), the substreams of the chain from this one on; else 0.
    chain: u32,
    /// The stream's size, in its first BEGIN only (FEATURE_STREAM_SIZE); else 0.
    stream_size: u64,
    spec: &'a SendSpec,
}

impl Start<'_> {
    fn features(&self) -> u64 {
        let flag = |on: bool, bit: u64| if on { bit } else { 0 };
        flag(self.resume.is_some(), tarn_send::FEATURE_RESUMING)
            | flag(self.spec.properties, tarn_send::FEATURE_PROPERTIES)
            | flag(self.spec.replicate, tarn_send::FEATURE_REPLICATED)
            | flag(self.spec.compressed, tarn_send::FEATURE_COMPRESSED)
            | flag(self.spec.large_blocks, tarn_send::FEATURE_LARGE_BLOCKS)
            | flag(self.spec.embedded, tarn_send::FEATURE_EMBEDDED)
            | flag(self.clone, tarn_send::FEATURE_CLONE)
            | flag(self.chain > 0, tarn_send::FEATURE_CHAIN)
            | sized_feature(self.stream_size)
    }
}

/// The size a BEGIN can carry of a stream of `bytes`: 0 (unsized) when it does not fit the
/// 56-bit field, rather than a wrong size.
fn announced(bytes: u64) -> u64 {
    match bytes <= tarn_send::STREAM_SIZE_MAX {
        true => bytes,
        false => 0,
    }
}

/// The feature bit of a BEGIN that carries a stream size of `size` (0: none).
fn sized_feature(size: u64) -> u64 {
    match size {
        0 => 0,
        _ => tarn_send::FEATURE_STREAM_SIZE,
    }
}

/// Every substream a send sends, in order: (dataset, source, snapshot). With `-R` each
/// dataset of the subtree that has the snapshot, parents first, with all its snapshots up to
/// it (a full stream of the oldest, then one per snapshot), or from the source with `-i`/`-I`.
fn send_plan(
    inner: &Imported,
    spec: &SendSpec,
    root: &str,
    snap: &str,
) -> Result<Vec<(String, Option<Snapshot>, Snapshot)>, EngineError> {
    if !spec.replicate {
        let pairs = send_pairs(inner, spec)?;
        return Ok(pairs
            .into_iter()
            .map(|(from, to)| (root.to_string(), from, to))
            .collect());
    }
    let id = inner.datasets.lookup(root)?;
    let mut plan = Vec::new();
    let members = crate::clone_stream::replication_order(inner, id, snap);
    for &at in &members {
        let node = inner.datasets.node(at);
        let Some((to_index, _)) = node.snapshot(snap) else {
            continue;
        };
        let name = node.name.clone();
        let mut each = SendSpec {
            snapshot: format!("{name}@{snap}"),
            intermediates: true,
            ..spec.clone()
        };
        let clone_pairs = match spec.from {
            Some(_) => crate::clone_stream::new_clone_pairs(inner, node, spec, to_index)?,
            None => None,
        };
        if let Some(pairs) = clone_pairs {
            plan.extend(pairs.into_iter().map(|(from, to)| (name.clone(), from, to)));
            continue;
        }
        // A dataset made since the source (it lacks it) goes whole, as in a full `-R`.
        if spec.from.is_none() || lacks_source(node, spec) {
            let oldest = &node.snapshots[0];
            // A clone goes as a clone of its origin (module doc of `clone_stream`), after
            // it when the origin is sent too: `replication_order`.
            let origin = crate::clone_stream::replicated_origin(inner, node);
            plan.push((name.clone(), origin, oldest.clone()));
            if to_index == 0 {
                continue;
            }
            each.from = Some(oldest.name.clone());
        }
        for (from, to) in send_pairs(inner, &each)? {
            plan.push((name.clone(), from, to));
        }
    }
    Ok(plan)
}

/// Whether `node`, in a `send -R -i|-I FROM`, lacks the snapshot FROM (it was made since).
fn lacks_source(node: &Node, spec: &SendSpec) -> bool {
    let Some(from) = spec.from.as_deref().filter(|from| !from.contains('#')) else {
        return false;
    };
    let from_snap = from.rsplit('@').next().unwrap_or(from);
    node.snapshot(from_snap).is_none()
}

/// The (source, snapshot) pairs a send sends, oldest first.
fn send_pairs(
    inner: &Imported,
    spec: &SendSpec,
) -> Result<Vec<(Option<Snapshot>, Snapshot)>, EngineError> {
    let (dataset, snap) = snapshot::split_name(&spec.snapshot)?;
    let id = inner.datasets.lookup(dataset)?;
    let node = inner.datasets.node(id);
    let (to_index, to) = node
        .snapshot(snap)
        .ok_or_else(|| invalid(format!("snapshot '{}' does not exist", spec.snapshot)))?;
    let Some(from) = &spec.from else {
        return Ok(vec![(None, to.clone())]);
    };
    if from.contains('#') {
        if spec.intermediates {
            return Err(invalid("-I takes a snapshot, not a bookmark"));
        }
        let source = crate::bookmark_ops::source(node, dataset, from)?;
        if source.header.txg >= to.header.txg {
            return Err(invalid(
                "incremental source must be earlier than the snapshot sent",
            ));
        }
        return Ok(vec![(Some(source), to.clone())]);
    }
    let from_name = match from.split_once('@') {
        Some((ds, name)) if ds.is_empty() || ds == dataset => name,
        Some(_) => {
            return crate::clone_stream::origin_pairs(
                inner,
                node,
                from,
                to_index,
                spec.intermediates,
            );
        }
        None => from.as_str(),
    };
    let (from_index, _) = node
        .snapshot(from_name)
        .ok_or_else(|| invalid(format!("snapshot '{dataset}@{from_name}' does not exist")))?;
    if from_index >= to_index {
        return Err(invalid(
            "incremental source must be earlier than the snapshot sent",
        ));
    }
    let snaps = &node.snapshots;
    Ok(match spec.intermediates {
        true => (from_index..to_index)
            .map(|i| (Some(snaps[i].clone()), snaps[i + 1].clone()))
            .collect(),
        false => vec![(Some(snaps[from_index].clone()), to.clone())],
    })
}

/// BEGIN's object-set kind: 1 a filesystem, 2 a volume (docs/FORMAT.md 21.3).
fn stream_kind(kind: ObjsetKind) -> u8 {
    match kind {
        ObjsetKind::Volume => 2,
        _ => 1,
    }
}

/// The object-set kind a stream's BEGIN kind makes (`None`: not one this build receives).
fn objset_kind_of(stream: u8) -> Option<ObjsetKind> {
    match stream {
        1 => Some(ObjsetKind::Filesystem),
        2 => Some(ObjsetKind::Volume),
        _ => None,
    }
}

fn kind_name(kind: ObjsetKind) -> &'static str {
    match kind {
        ObjsetKind::Volume => "a volume",
        _ => "a filesystem",
    }
}

/// The object sets of a substream's snapshot and source. A bookmark source
/// (`crate::bookmark_ops`) names no object set: only its txg is used.
fn open_sides(
    handle: &PoolHandle,
    from: Option<&Snapshot>,
    to: &Snapshot,
) -> Result<(ObjectSet, Option<ObjectSet>), EngineError> {
    let inner = handle.lock();
    let reader = inner.pool.reader();
    let to_os = ObjectSet::open(&reader, &to.header.objset)?;
    let from_os = match from {
        Some(f) if !f.header.objset.is_hole() => Some(ObjectSet::open(&reader, &f.header.objset)?),
        _ => None,
    };
    Ok((to_os, from_os))
}

/// Sends one substream: `to`, relative to `from` when given.
fn send_one(
    handle: &PoolHandle,
    dataset: &str,
    start: &Start<'_>,
    writer: &mut StreamWriter<&mut dyn Write>,
    progress: &mut dyn FnMut(u64),
) -> Result<(), EngineError> {
    let (from, to, names) = (start.from, start.to, start.names);
    let (resume_object, resume_offset) = start.resume.unwrap_or((0, 0));
    let (mut to_os, mut from_os) = open_sides(handle, from, to)?;
    let begin = Begin {
        features: start.features(),
        from_guid: from.map_or(0, |f| f.header.guid.0),
        to_guid: to.header.guid.0,
        to_txg: to.header.txg.0,
        creation_time: to.header.creation_time,
        objset_kind: stream_kind(to_os.kind()),
        stream_size: start.stream_size,
        chain: start.chain,
        resume_object,
        resume_offset,
        from_name: names.0.clone(),
        to_name: names.1.clone(),
    };
    writer
        .write(&Record::Begin(Box::new(begin)))
        .map_err(stream_error)?;
    if (start.spec.properties || start.spec.replicate) && start.resume.is_none() {
        for (name, value) in local_props(handle, dataset)? {
            writer
                .write(&Record::Property { name, value })
                .map_err(stream_error)?;
        }
    }
    let cursor = Cursor::at(resume_object, resume_offset);
    let walk = Walk {
        handle,
        dataset,
        start,
        to_os: &mut to_os,
        from_os: from_os.as_mut(),
    };
    // The walk plans the next batches while readers read the planned ones' data blocks
    // and this thread writes the read ones (`send_pipe`): device reads, verification and
    // the stream's writing overlap, and the walk stops when a stage fails.
    crate::send_pipe::run(
        crate::send_pipe::READERS,
        move |hand| walk.run(cursor, hand),
        Planned::read,
        &mut |batch: Vec<Record>| {
            for record in batch {
                writer.write(&record).map_err(stream_error)?;
            }
            progress(writer.bytes());
            Ok(())
        },
    )?;
    writer.end().map_err(stream_error)?;
    Ok(())
}

/// What the send's walk thread needs: the snapshots' object sets and the checks that they
/// are still there before each batch.
struct Walk<'a> {
    handle: &'a PoolHandle,
    dataset: &'a str,
    start: &'a Start<'a>,
    to_os: &'a mut ObjectSet,
    from_os: Option<&'a mut ObjectSet>,
}

impl Walk<'_> {
    /// Walks batch by batch, each under the pool lock, handing each on; stops at the
    /// walk's end, at an error (handed on, for the writer to return) or when the batches
    /// are no longer taken (a later stage failed; its error is the send's).
    fn run(
        mut self,
        mut cursor: Cursor,
        hand: &mut dyn FnMut(Result<Planned, EngineError>) -> bool,
    ) {
        while !cursor.done {
            let batch = self.batch(&mut cursor);
            let failed = batch.is_err();
            if !hand(batch) || failed {
                break;
            }
        }
    }

    /// The next batch. Where the pool's devices read in parallel its data blocks are left
    /// to a reader (`Planned`), which reads them without the lock; otherwise (simulated
    /// devices) they are read here.
    fn batch(&mut self, cursor: &mut Cursor) -> Result<Planned, EngineError> {
        let (from, to) = (self.start.from, self.start.to);
        let inner = self.handle.lock();
        check_still_there(&inner, self.dataset, to, from)?;
        let reader = inner.pool.reader();
        let defer = !self.start.spec.dry_run && tarn_zio::BlockStore::reads_in_parallel(&reader);
        let mut deferred = dsend::Deferred::default();
        let mut source = Source {
            to: &mut *self.to_os,
            from: from.map(|f| (self.from_os.as_deref_mut(), f.header.txg)),
            recomputed: tarn_posix::RECOMPUTED_TYPES,
            compressed: self.start.spec.compressed,
            dry_run: self.start.spec.dry_run,
            deferred: defer.then_some(&mut deferred),
        };
        let mut records = Vec::new();
        dsend::send_some(&mut source, &reader, cursor, BATCH_BYTES, &mut |r| {
            records.push(r);
            Ok(())
        })?;
        // Made under the lock: it pins the open txg, so the blocks found here keep their
        // space until they are read, even if the snapshot is destroyed meanwhile.
        let detached = (!deferred.reads.is_empty()).then(|| inner.pool.detached_reader());
        Ok(Planned {
            records,
            reads: deferred.reads,
            reader: detached,
        })
    }
}

/// A batch as the walk planned it: its records, and the data blocks of the WRITE records
/// that went out without them (`tarn_dataset::send::Deferred`), with a reader that pins
/// them.
struct Planned {
    records: Vec<Record>,
    reads: Vec<dsend::DeferredRead>,
    reader: Option<tarn_pool::DetachedReader>,
}

impl Planned {
    /// Reads the batch's deferred blocks (without the pool lock, several in flight) into
    /// their WRITE records; the results are those the walk's own reads would have had
    /// (`tarn_objects::data_block_read`), and the first failed block fails the batch.
    fn read(self) -> Result<Vec<Record>, EngineError> {
        let Planned {
            mut records,
            reads,
            reader,
        } = self;
        let Some(reader) = reader else {
            return Ok(records);
        };
        let (stored, logical): (Vec<_>, Vec<_>) = reads.iter().partition(|read| read.stored);
        let bps = |reads: &[&dsend::DeferredRead]| reads.iter().map(|r| r.bp).collect::<Vec<_>>();
        let mut stored_data = reader.read_physicals(&bps(&stored)).into_iter();
        let mut logical_data = reader.read_blocks(&bps(&logical), true).into_iter();
        let mut reads = reads.into_iter();
        let writes = records.iter_mut().filter_map(|record| match record {
            Record::Write(write) if write.data.is_empty() => Some(write),
            _ => None,
        });
        for write in writes {
            let read = reads
                .next()
                .expect("a deferred read for every WRITE without data");
            assert_eq!(
                (read.object, read.offset),
                (write.object, write.offset),
                "deferred reads are in the order of their WRITE records"
            );
            let id = tarn_base::ObjectId(read.object);
            let data = match read.stored {
                true => stored_data.next().expect("one result per block"),
                false => logical_data.next().expect("one result per block"),
            };
            write.data = match read.stored {
                true => tarn_objects::stored_block_read(id, data),
                false => tarn_objects::data_block_read(id, u64::from(write.logical_size), data),
            }
            .map_err(tarn_dataset::DatasetError::from)?;
        }
        assert!(reads.next().is_none(), "every deferred read has its WRITE");
        Ok(records)
    }
}

/// The local properties `send -p` carries (not statistics, not a partial receive's).
fn local_props(handle: &PoolHandle, dataset: &str) -> Result<Vec<(String, String)>, EngineError> {
    let inner = handle.lock();
    let id = inner.datasets.lookup(dataset)?;
    let local = &inner.datasets.node(id).local;
    Ok(local
        .iter()
        .filter(|(name, _)| !name.starts_with('%') && name.len() <= tarn_send::NAME_MAX)
        .filter(|(_, value)| value.len() <= tarn_send::VALUE_MAX)
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect())
}

/// Refuses a send whose snapshots went away meanwhile (their blocks may be reused).
fn check_still_there(
    inner: &Imported,
    dataset: &str,
    to: &Snapshot,
    from: Option<&Snapshot>,
) -> Result<(), EngineError> {
    let id = inner.datasets.lookup(dataset)?;
    let node = inner.datasets.node(id);
    let there = |s: &Snapshot| {
        node.snapshots
            .iter()
            .any(|n| n.header.guid == s.header.guid)
    };
    // A bookmark source holds no blocks: its going away changes nothing read here. A
    // clone's origin cannot go while the clone exists.
    let from = from.filter(|f| !f.header.objset.is_hole());
    let from = from.filter(|f| !crate::clone_stream::is_origin(node, Some(f)));
    if !there(to) || from.is_some_and(|f| !there(f)) {
        return Err(invalid(
            "a snapshot of the stream was destroyed during the send",
        ));
    }
    Ok(())
}

/// Where a receive writes.
pub(crate) enum Destination {
    /// A full or clone stream: the hidden dataset, its parent, the name it will take, and
    /// the existing dataset of that name it replaces at END (`receive -F`, `receive_new`).
    New {
        id: DatasetId,
        parent: DatasetId,
        name: String,
        replaces: Option<DatasetId>,
    },
    /// An incremental stream: the destination's head (rolled back on failure).
    Head { id: DatasetId },
    /// An incremental stream with `-F` onto a destination that goes back to the stream's
    /// source at END (`receive_rollback`): the hidden clone of the source, the destination
    /// and its name.
    Rollback {
        id: DatasetId,
        target: DatasetId,
        name: String,
    },
    /// An incremental substream of a held replication receive whose source is the latest
    /// snapshot of a held hidden dataset (`receive_atomic`): received into that dataset's
    /// head, and placed with it: published with a dataset the stream makes, or adopted
    /// (with the snapshots taken on it) by `adopter`, the existing dataset whose hidden
    /// clone it is.
    Chained {
        id: DatasetId,
        adopter: Option<DatasetId>,
    },
}

impl Engine {
    /// `tarn receive [-F] DS`: reads substreams from `input` until it ends; `progress`
    /// gets the bytes read after each batch, and the stream's size from the BEGIN that
    /// announces it (a sized send's first). The caller keeps the destination unmounted.
    pub fn receive(
        &self,
        spec: &ReceiveSpec,
        input: &mut dyn Read,
        progress: &mut dyn FnMut(ReceiveProgress),
    ) -> Result<ReceiveReport, EngineError> {
        let spec = &crate::receive_new::with_origin(spec);
        for (property, value) in &spec.set {
            crate::dataset_ops::validate_prop(property, value)?;
        }
        let mut reader = StreamReader::new(input);
        let mut report = ReceiveReport::default();
        // Substreams received into hidden datasets, waiting for the stream's end
        // (`receive_atomic`), and the sender's tree (a replication stream's manifest).
        let mut held = Vec::new();
        let mut sent = None;
        let read = self.receive_substreams(
            spec,
            (&mut reader, progress),
            &mut report,
            (&mut sent, &mut held),
        );
        if let Err(error) = read {
            self.receive_discard(spec, &held)?;
            return Err(error);
        }
        if let Some(sent) = &sent {
            self.receive_prune(spec, sent, &held, &mut report)?;
        } else if !held.is_empty() {
            self.receive_held_end(spec, &held)?;
        }
        report.bytes = reader.bytes();
        Ok(report)
    }

    /// Reads substreams until the input ends (see [`Engine::receive`]).
    fn receive_substreams(
        &self,
        spec: &ReceiveSpec,
        (reader, progress): (
            &mut StreamReader<&mut dyn Read>,
            &mut dyn FnMut(ReceiveProgress),
        ),
        report: &mut ReceiveReport,
        (sent, held): (&mut Option<crate::receive_prune::Sent>, &mut Vec<Held>),
    ) -> Result<(), EngineError> {
        let mut replicated_root: Option<String> = None;
        let mut told = 0;
        loop {
            let begin = match reader.next_record().map_err(stream_error)? {
                None if report.snapshots.is_empty() && report.skipped.is_empty() => {
                    return Err(invalid("invalid stream: it is empty"));
                }
                None => {
                    let got = report.snapshots.len() + report.skipped.len();
                    return check_count(sent.as_ref(), got);
                }
                Some(Record::Begin(begin)) => begin,
                Some(_) => return Err(invalid("invalid stream: no BEGIN record")),
            };
            // The total as soon as a BEGIN announces it, not a batch later: a bar and ETA.
            if reader.stream_size() != told {
                told = reader.stream_size();
                progress(ReceiveProgress::of(reader));
            }
            crate::receive_new::check_origin_for(spec, &begin)?;
            if begin.features & tarn_send::FEATURE_MANIFEST != 0 {
                let first = report.snapshots.is_empty() && sent.is_none();
                let tree = self.receive_manifest(spec, &begin, reader, first)?;
                replicated_root = Some(tree.root.clone());
                *sent = Some(tree);
                continue;
            }
            let each = replicated_spec(spec, &begin, &mut replicated_root, sent.as_ref())?;
            let spec = each.as_ref().unwrap_or(spec);
            // A substream a cut `receive -s` received already (`receive_prune`); of a chain,
            // only before anything else of the stream was received (`receive_atomic`).
            let (target, _) = target_names(spec, &begin)?;
            let chained = begin.features & tarn_send::FEATURE_CHAIN != 0;
            let skips = sent.is_some() || (chained && report.snapshots.is_empty());
            if skips && self.already_received(&target, &begin)? {
                report.skipped.push(receive_dry(spec, &begin, reader)?);
                continue;
            }
            if spec.dry_run {
                report.snapshots.push(receive_dry(spec, &begin, reader)?);
                continue;
            }
            let within = self.receive_within(spec, (&begin, &target), sent.as_ref(), held)?;
            let holding = within.map(|within| (&mut *held, within));
            let name = self.receive_one(spec, &begin, reader, progress, holding)?;
            report.snapshots.push(name);
        }
    }

    /// Whether the substream `begin` into `target` is held (`receive_atomic`: not under -s,
    /// in a replication stream with a manifest `sent`, in a chain, or after a held one),
    /// and where: `None` when it is not. One that needs what a held one brings but cannot
    /// be received on top of it is refused (`receive_atomic::check_order`).
    fn receive_within(
        &self,
        spec: &ReceiveSpec,
        (begin, target): (&Begin, &str),
        sent: Option<&crate::receive_prune::Sent>,
        held: &[Held],
    ) -> Result<Option<Within>, EngineError> {
        let chained = begin.features & tarn_send::FEATURE_CHAIN != 0;
        if spec.resumable || (sent.is_none() && !chained && held.is_empty()) {
            return Ok(None);
        }
        // A new dataset at a name a moved one still has here (`receive_moves`).
        let vacated = sent.is_some_and(|sent| sent.vacated(target));
        let within = {
            let handle = self.pool(pool_of(target))?;
            let inner = handle.lock();
            crate::receive_atomic::within(&inner, held, begin, target, vacated)
        };
        crate::receive_atomic::check_order(held, begin, target, &within)?;
        Ok(Some(within))
    }

    /// Receives one substream whose BEGIN was read; returns the snapshot's full name.
    fn receive_one(
        &self,
        spec: &ReceiveSpec,
        begin: &Begin,
        reader: &mut StreamReader<&mut dyn Read>,
        progress: &mut dyn FnMut(ReceiveProgress),
        holding: Option<(&mut Vec<Held>, Within)>,
    ) -> Result<String, EngineError> {
        let (held, within) = holding.map_or((None, None), |(h, w)| (Some(h), Some(w)));
        let (target, snap) = target_names(spec, begin)?;
        let handle = self.pool(pool_of(&target))?;
        let (into, made) = self.receive_setup(&handle, spec, begin, (&target, &snap), within)?;
        let mut position = (begin.resume_object, begin.resume_offset);
        let mut props = Vec::new();
        let mut at = Progressed {
            progress,
            position: &mut position,
            props: &mut props,
        };
        let outcome = receive_records(self, &handle, destination_id(&into), reader, &mut at);
        let _admin = self.admin();
        let mut inner = handle.lock();
        let saving = spec.resumable && outcome.is_err();
        let ended = outcome.and_then(|()| {
            still_there(&inner, destination_id(&into))?;
            match held.is_some() {
                true => receive_atomic::end_held(&mut inner, &into, begin, &snap, &props, spec),
                false => self.receive_end(&mut inner, &into, begin, (&snap, &props, spec)),
            }
        });
        let Err(error) = ended else {
            let name = format!("{target}@{snap}");
            if let Some(held) = held {
                held.push(Held {
                    into,
                    begin: begin.clone(),
                    snap,
                    props,
                    spec: spec.clone(),
                });
            }
            return Ok(name);
        };
        if saving && inner.datasets.contains(destination_id(&into)) {
            let token = tarn_send::ResumeToken {
                features: begin.features & !TOKEN_FEATURES_DROPPED,
                from_guid: begin.from_guid,
                to_guid: begin.to_guid,
                object: position.0,
                offset: position.1,
                bytes: reader.bytes(),
                from_name: begin.from_name.clone(),
                to_name: begin.to_name.clone(),
            };
            set_token(&mut inner, destination_id(&into), Some(&token.encode()))?;
            inner.sync()?;
            return Err(invalid(format!(
                "{error}; the partially received stream is saved: resume it with \
                 'tarn send -t {}' (or abort it with 'tarn receive -A {target}')",
                token.encode()
            )));
        }
        receive_undo(&mut inner, &into)?;
        unmake_parents(&mut inner, &made)?;
        Err(error)
    }

    /// [`Engine::receive_prepare`] under the admin and pool locks, after making the missing
    /// filesystems between `receive -d`'s target and the new dataset's parent (as ZFS does);
    /// returns the destination and those filesystems, which a failed receive destroys again.
    fn receive_setup(
        &self,
        handle: &PoolHandle,
        spec: &ReceiveSpec,
        begin: &Begin,
        (target, snap): (&str, &str),
        within: Option<Within>,
    ) -> Result<(Destination, Vec<DatasetId>), EngineError> {
        let _admin = self.admin();
        let mut inner = handle.lock();
        inner.check_writable()?;
        let made = match within.is_none() && new_below_missing(&inner, spec, begin, target) {
            true => self.make_parents(&mut inner, spec, target)?,
            false => Vec::new(),
        };
        match self.receive_prepare(&mut inner, spec, begin, (target, snap), within) {
            Ok(into) => Ok((into, made)),
            Err(error) => {
                unmake_parents(&mut inner, &made)?;
                Err(error)
            }
        }
    }

    /// Makes the filesystems missing between `receive -d`'s existing target (`spec`) and the
    /// parent of the new dataset `target`, outermost first, counted against the limits as
    /// `create -p` counts them.
    fn make_parents(
        &self,
        inner: &mut Imported,
        spec: &ReceiveSpec,
        target: &str,
    ) -> Result<Vec<DatasetId>, EngineError> {
        let (mut parent, missing) = crate::dataset_ops::new_dataset_parent(inner, target, true)?;
        let base = spec.target.split('@').next().unwrap_or_default();
        if inner.datasets.node(parent).name.len() < base.len() {
            // The target itself is missing: refused as before (`receive_atomic::place`).
            return Ok(Vec::new());
        }
        crate::limits::check_filesystems(&inner.datasets, parent, missing.len() as u64 + 1)?;
        let mut made = Vec::new();
        for name in &missing {
            parent = self.create_one(inner, parent, name, &[], None)?;
            made.push(parent);
        }
        Ok(made)
    }

    /// The checks and setup before any record is applied (module doc). `within`: the
    /// substream is held (`receive_atomic`), and where.
    fn receive_prepare(
        &self,
        inner: &mut Imported,
        spec: &ReceiveSpec,
        begin: &Begin,
        (target, snap): (&str, &str),
        within: Option<Within>,
    ) -> Result<Destination, EngineError> {
        let hidden = within.is_some();
        let within = within.unwrap_or_default();
        let Some(kind) = objset_kind_of(begin.objset_kind) else {
            return Err(invalid(format!(
                "the stream holds an object set of kind {}; this build receives \
                 filesystems and volumes",
                begin.objset_kind
            )));
        };
        if begin.features & tarn_send::FEATURE_RESUMING != 0 {
            return resumed_destination(inner, spec, begin, target);
        }
        if let Some(into) =
            self.held_destination(inner, spec, begin, (target, snap, kind), &within)?
        {
            return Ok(into);
        }
        check_no_partial(inner, target)?;
        let existing = inner.datasets.by_name(target);
        // A stream makes a new dataset when it is full, a clone stream, or `-o origin=`
        // makes it one (`receive_new`); any other goes into the existing head.
        let new_dataset = begin.from_guid == 0
            || begin.features & tarn_send::FEATURE_CLONE != 0
            || spec.origin.is_some();
        if !new_dataset {
            let id = existing
                .ok_or_else(|| invalid(format!("destination '{target}' does not exist")))?;
            let have = inner.datasets.node(id).objset.kind();
            if have != kind {
                return Err(invalid(format!(
                    "the stream holds {} but '{target}' is {}",
                    kind_name(kind),
                    kind_name(have)
                )));
            }
            let rollback = check_incremental(inner, id, spec.force, begin, target)?;
            // Held (`receive_atomic`): into a hidden clone of the source even without -F,
            // and counted at the stream's end with everything else.
            if !hidden {
                check_incremental_limits(inner, id, begin, rollback)?;
            }
            if rollback || hidden {
                return self.receive_rollback_prepare(inner, id, begin, snap);
            }
            // Before the first record: a crash from here on rolls the head back at import.
            crate::receive_head::mark(inner, id, begin.from_guid)?;
            return Ok(Destination::Head { id });
        }
        let replaces = match existing {
            Some(id) => Some(crate::receive_new::check_overwrite(
                inner, id, target, spec.force,
            )?),
            None => None,
        };
        check_new_limits(inner, target, replaces, hidden)?;
        let place = crate::receive_atomic::place(inner, target, within.parent, false)?;
        if begin.from_guid != 0 || spec.origin.is_some() {
            let (origin, at) = (spec.origin.as_deref(), (target, replaces, place));
            return self.receive_clone_prepare(inner, begin, at, kind, origin);
        }
        self.full_destination(inner, target, place, kind, replaces)
    }

    /// The destinations only a held substream has (`receive_atomic`), or `None`: the head of
    /// the held hidden dataset whose latest snapshot is its source, or, for a full stream at
    /// a name a move vacates (`receive_moves`), a hidden dataset of its own beside the old.
    fn held_destination(
        &self,
        inner: &mut Imported,
        spec: &ReceiveSpec,
        begin: &Begin,
        (target, snap, kind): (&str, &str, ObjsetKind),
        within: &Within,
    ) -> Result<Option<Destination>, EngineError> {
        if let Some(chain) = within.chain {
            return crate::receive_atomic::chained(inner, chain, begin, kind, snap).map(Some);
        }
        let full = begin.from_guid == 0 && begin.features & tarn_send::FEATURE_CLONE == 0;
        if !(within.vacated && full && spec.origin.is_none()) {
            return Ok(None);
        }
        let place = crate::receive_atomic::place(inner, target, within.parent, true)?;
        self.full_destination(inner, target, place, kind, None)
            .map(Some)
    }

    /// A full stream's hidden dataset `hidden` under `parent` (the target's, or the held
    /// hidden dataset of a new parent: `receive_atomic::place`), replacing `replaces` at
    /// END; the caller checked the limits.
    fn full_destination(
        &self,
        inner: &mut Imported,
        target: &str,
        (parent, hidden): (DatasetId, String),
        kind: ObjsetKind,
        replaces: Option<DatasetId>,
    ) -> Result<Destination, EngineError> {
        let id = self.create_hidden(inner, parent, (target, &hidden), kind)?;
        Ok(Destination::New {
            id,
            parent,
            name: target.to_string(),
            replaces,
        })
    }

    /// Creates the hidden dataset a full receive writes into (module doc).
    fn create_hidden(
        &self,
        inner: &mut Imported,
        parent: DatasetId,
        (target, name): (&str, &str),
        kind: ObjsetKind,
    ) -> Result<DatasetId, EngineError> {
        let name = name.to_string();
        let leaf = dsname::leaf_name(&name).to_string();
        if inner.datasets.by_name(&name).is_some() {
            return Err(invalid(format!("a receive into '{target}' is in progress")));
        }
        let header = self.new_header(&inner.pool, parent);
        let Imported {
            pool,
            mos,
            datasets,
            ..
        } = inner;
        let reader = pool.reader();
        let object = node::create_node(mos.objset(), &reader, None, header)?;
        let parent_header = datasets.node(parent).header;
        node::set_child(mos.objset(), &reader, &parent_header, &leaf, Some(object))?;
        let header = node::read_header(mos.objset(), &reader, object)?;
        let id = DatasetId(object.0);
        let objset = ObjectSet::create(kind);
        let mut new = Node::new(name, Some(parent), header, objset);
        new.header_dirty = true;
        new.receiving = true;
        datasets.insert(id, new);
        datasets.apply_objset_config(id)?;
        Ok(id)
    }

    /// END: the received object set becomes the destination and gets its snapshot, in one
    /// txg.
    /// `tarn receive -A DS`: discards the partial receive saved for `DS` (`receive -s`).
    pub fn receive_abort(&self, target: &str) -> Result<(), EngineError> {
        let _admin = self.admin();
        dsname::validate_name(target)?;
        let handle = self.pool(pool_of(target))?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        if let Some(id) = inner.datasets.by_name(&hidden_name(target)) {
            crate::dataset_ops::destroy_hidden(&mut inner, id)?;
        } else {
            let id = inner.datasets.by_name(target);
            let id = id.filter(|id| inner.datasets.node(*id).local.contains_key(TOKEN_KEY));
            let Some(id) = id else {
                return Err(invalid(format!(
                    "'{target}' does not have any resumable receive state to abort"
                )));
            };
            crate::snapshot_ops::rollback_head(&mut inner, id)?;
            set_token(&mut inner, id, None)?;
            crate::receive_head::unmark(&mut inner, id)?;
        }
        inner
            .history
            .push(self.history_record(&format!("receive -A {target}"), false));
        inner.sync()?;
        Ok(())
    }

    fn receive_end(
        &self,
        inner: &mut Imported,
        into: &Destination,
        begin: &Begin,
        (snap, props, spec): (&str, &[(String, String)], &ReceiveSpec),
    ) -> Result<(), EngineError> {
        let id = match into {
            Destination::New {
                id,
                parent,
                name,
                replaces,
            } => {
                inner.sync()?;
                apply_props(inner, *id, props, spec)?;
                recount(inner, *id)?;
                if let Some(old) = replaces {
                    crate::receive_new::replace_at_end(inner, *old, *id, name)?;
                }
                publish(inner, *id, *parent, name)?;
                *id
            }
            Destination::Head { id } => {
                // Checked before the properties change: a refusal leaves them as they were.
                if inner.datasets.node(*id).snapshot(snap).is_some() {
                    return Err(invalid(format!(
                        "destination already has a snapshot '{snap}'"
                    )));
                }
                apply_props(inner, *id, props, spec)?;
                *id
            }
            Destination::Rollback { id, target, name } => {
                // Every check before the first change; the received data committed (still
                // hidden) before the destination changes, which then happens in one txg.
                crate::receive_rollback::check_at_end(inner, *id, *target, name, snap)?;
                inner.sync()?;
                crate::receive_rollback::recount_partial(inner, *id)?;
                // Read before the destination's properties change: a failed read beyond
                // parity leaves it exactly as it was.
                adopt_at_end(inner, (*id, *target), props, spec)?;
                *target
            }
            Destination::Chained { .. } => unreachable!("a chained receive is held"),
        };
        set_token(inner, id, None)?;
        crate::receive_head::unmark(inner, id)?;
        let node = inner.datasets.node_mut(id);
        if node.snapshot(snap).is_some() {
            return Err(invalid(format!(
                "destination already has a snapshot '{snap}'"
            )));
        }
        node.snapshot_pending = Some(NewSnapshot {
            name: snap.to_string(),
            creation_time: begin.creation_time,
            guid: Guid(begin.to_guid),
            props: Vec::new(),
        });
        let command = format!("receive {}@{snap}", inner.datasets.node(id).name);
        inner.history.push(self.history_record(&command, false));
        inner.sync()?;
        Ok(())
    }
}

/// Refuses a receive into `target` while it holds a partial receive (`receive -s`) or one
/// is in progress into its head (`receive_head`).
fn check_no_partial(inner: &Imported, target: &str) -> Result<(), EngineError> {
    let existing = inner.datasets.by_name(target);
    let partial = existing.is_some_and(|id| inner.datasets.node(id).local.contains_key(TOKEN_KEY))
        || inner.datasets.by_name(&hidden_name(target)).is_some();
    if partial {
        return Err(invalid(format!(
            "destination '{target}' contains partially-complete state from 'tarn receive \
             -s' (resume it with 'tarn send -t', or abort it with 'tarn receive -A')"
        )));
    }
    if existing.is_some_and(|id| crate::receive_head::in_progress(inner, id)) {
        return Err(invalid(format!("a receive into '{target}' is in progress")));
    }
    Ok(())
}

/// The hidden dataset a full receive into `target` writes (`PARENT/%LEAF`).
pub(crate) fn hidden_name(target: &str) -> String {
    match target.rsplit_once('/') {
        Some((parent, leaf)) => format!("{parent}/%{leaf}"),
        None => format!("{target}/%"),
    }
}

fn destination_id(into: &Destination) -> DatasetId {
    match into {
        Destination::New { id, .. }
        | Destination::Head { id }
        | Destination::Rollback { id, .. }
        | Destination::Chained { id, .. } => *id,
    }
}

/// Records (`Some`) or clears the resume token of a partial receive into `id`.
fn set_token(inner: &mut Imported, id: DatasetId, token: Option<&str>) -> Result<(), EngineError> {
    if token.is_none() && !inner.datasets.node(id).local.contains_key(TOKEN_KEY) {
        return Ok(());
    }
    inner.set_local(id, TOKEN_KEY, token)
}

/// Where a resuming stream goes: the partial receive its token describes, which must be
/// exactly where this stream starts.
fn resumed_destination(
    inner: &Imported,
    spec: &ReceiveSpec,
    begin: &Begin,
    target: &str,
) -> Result<Destination, EngineError> {
    // A clone stream's partial receive (CLONE or `-o origin=`) is a hidden clone, as a full
    // one's is a hidden dataset; an incremental into a head never has one.
    let hidden = inner.datasets.by_name(&hidden_name(target));
    let clone = hidden.is_some();
    let (id, new) = match begin.from_guid {
        0 => (hidden, true),
        _ if clone => (hidden, true),
        _ => (inner.datasets.by_name(target), false),
    };
    // A forced receive's hidden clone of the destination's own snapshot (`receive_rollback`).
    let rollback = hidden.and_then(|h| crate::receive_rollback::resumed_target(inner, h, target));
    let node = id.map(|id| (id, inner.datasets.node(id)));
    let saved = node.and_then(|(id, n)| Some((id, n.local.get(TOKEN_KEY)?.clone())));
    let Some((id, text)) = saved else {
        return Err(invalid(format!(
            "'{target}' has no partially received stream to resume"
        )));
    };
    let token = tarn_send::ResumeToken::decode(&text).map_err(stream_error)?;
    let matches = token.to_guid == begin.to_guid
        && token.from_guid == begin.from_guid
        && (token.object, token.offset) == (begin.resume_object, begin.resume_offset);
    if !matches {
        return Err(invalid(
            "the stream does not resume the partial receive saved here (use the token of \
             'tarn get receive_resume_token')",
        ));
    }
    Ok(match new {
        true if rollback.is_some() => Destination::Rollback {
            id,
            target: rollback.expect("matched"),
            name: target.to_string(),
        },
        true => {
            let parent = inner
                .datasets
                .node(id)
                .parent
                .expect("a hidden dataset has a parent");
            // The destination made since the partial receive began, or replaced by it.
            let replaces = match inner.datasets.by_name(target) {
                Some(old) => Some(crate::receive_new::check_overwrite(
                    inner, old, target, spec.force,
                )?),
                None => None,
            };
            Destination::New {
                id,
                parent,
                name: target.to_string(),
                replaces,
            }
        }
        false => Destination::Head { id },
    })
}

/// At the end of the input: a replication stream cut at a substream's boundary is refused
/// (its manifest counts the substreams).
fn check_count(sent: Option<&crate::receive_prune::Sent>, got: usize) -> Result<(), EngineError> {
    match sent {
        Some(sent) if sent.substreams > got as u64 => Err(invalid(format!(
            "invalid stream: it is truncated (after {got} of {} substreams)",
            sent.substreams
        ))),
        _ => Ok(()),
    }
}

/// For a substream of a `send -R` stream, the receive of its dataset: the destination plus
/// the dataset's path below the stream's first (root) dataset (before the moves of `tree`,
/// the sender's manifest). `None` for other streams.
fn replicated_spec(
    spec: &ReceiveSpec,
    begin: &Begin,
    root: &mut Option<String>,
    tree: Option<&crate::receive_prune::Sent>,
) -> Result<Option<ReceiveSpec>, EngineError> {
    if begin.features & tarn_send::FEATURE_REPLICATED == 0 {
        return Ok(None);
    }
    let sent = begin
        .to_name
        .split('@')
        .next()
        .unwrap_or_default()
        .to_string();
    let root = root.get_or_insert_with(|| sent.clone());
    let Some(rest) = sent.strip_prefix(root.as_str()) else {
        return Err(invalid(format!(
            "invalid stream: '{sent}' is not below the stream's first dataset '{root}'"
        )));
    };
    if !(rest.is_empty() || rest.starts_with('/')) || spec.target.contains('@') {
        return Err(invalid(
            "invalid stream: a replication stream names datasets outside its root",
        ));
    }
    // A dataset the sender renamed is written under its local name until the stream ends
    // (`receive_moves`).
    let rest = tree.map_or_else(|| rest.to_string(), |tree| tree.local_path(rest));
    Ok(Some(ReceiveSpec {
        target: format!("{}{rest}", spec.target),
        append: None,
        ..spec.clone()
    }))
}

/// `receive -n`: reads and checks the substream to its END; returns the snapshot's name.
fn receive_dry(
    spec: &ReceiveSpec,
    begin: &Begin,
    reader: &mut StreamReader<&mut dyn Read>,
) -> Result<String, EngineError> {
    let (target, snap) = target_names(spec, begin)?;
    loop {
        match reader.next_record().map_err(stream_error)? {
            Some(Record::End { .. }) => return Ok(format!("{target}@{snap}")),
            Some(_) => {}
            None => {
                let record = reader.sequence();
                return Err(stream_error(tarn_send::StreamError::Truncated { record }));
            }
        }
    }
}

/// Sets the properties a stream carried (`send -p`) on the received dataset, except those
/// `-x` excludes or `-o` sets, then the `-o` ones (checked before the receive began). A
/// carried value this build refuses is skipped: the data is worth more than the setting.
pub(crate) fn apply_props(
    inner: &mut Imported,
    id: DatasetId,
    carried: &[(String, String)],
    spec: &ReceiveSpec,
) -> Result<(), EngineError> {
    let overridden =
        |name: &String| spec.exclude.contains(name) || spec.set.iter().any(|(set, _)| set == name);
    let mut values = Vec::new();
    for (name, value) in carried.iter().filter(|(name, _)| !overridden(name)) {
        if let Ok(value) = crate::dataset_ops::validate_prop(name, value) {
            values.push((name.clone(), value));
        }
    }
    for (name, value) in &spec.set {
        values.push((
            name.clone(),
            crate::dataset_ops::validate_prop(name, value)?,
        ));
    }
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    let reader = pool.reader();
    for (name, value) in values {
        datasets.set_local(mos.objset(), &reader, id, &name, value.as_deref())?;
    }
    Ok(())
}

/// The destination dataset and snapshot names for a stream.
pub(crate) fn target_names(
    spec: &ReceiveSpec,
    begin: &Begin,
) -> Result<(String, String), EngineError> {
    let sent = begin
        .to_name
        .split_once('@')
        .map(|(_, snap)| snap.to_string())
        .ok_or_else(|| invalid("invalid stream: snapshot name without '@'"))?;
    let (target, snap) = match spec.target.split_once('@') {
        Some((ds, snap)) => (ds.to_string(), snap.to_string()),
        None => (spec.target.clone(), sent),
    };
    let sent_dataset = begin.to_name.split('@').next().unwrap_or_default();
    let target = match spec.append {
        None => target,
        Some(true) => match sent_dataset.split_once('/') {
            Some((_, rest)) => format!("{target}/{rest}"),
            None => target,
        },
        Some(false) => format!("{target}/{}", dsname::leaf_name(sent_dataset)),
    };
    dsname::validate_name(&target)?;
    snapshot::validate_snapshot_name(&snap)?;
    Ok((target, snap))
}

/// The END of a forced receive that is not held: the hidden clone `id` becomes the head of
/// `target` with the stream's properties (`receive_rollback::adopt`), after every read it
/// needs (`adopt_reads`, `receive_atomic::read_ahead`): a failed read changes nothing.
fn adopt_at_end(
    inner: &mut Imported,
    (id, target): (DatasetId, DatasetId),
    props: &[(String, String)],
    spec: &ReceiveSpec,
) -> Result<(), EngineError> {
    let reads = crate::receive_rollback::adopt_reads(inner, id, target)?;
    let mut change = crate::limits::Change::default();
    crate::receive_atomic::adopting(inner, id, target, &mut change);
    let walked = crate::receive_atomic::read_ahead(inner, &change)?;
    crate::receive_atomic::with_read_ahead(inner, walked, |inner| {
        apply_props(inner, target, props, spec)?;
        crate::receive_rollback::adopt(inner, id, target, reads)
    })
}

/// The limits of a substream into the existing `id` that is not held: one snapshot more,
/// and under `-F` (`rollback`) without the snapshots after the source, which go first.
fn check_incremental_limits(
    inner: &Imported,
    id: DatasetId,
    begin: &Begin,
    rollback: bool,
) -> Result<(), EngineError> {
    let snapshots = &inner.datasets.node(id).snapshots;
    let source = snapshots
        .iter()
        .position(|s| s.header.guid.0 == begin.from_guid);
    let later = match (rollback, source) {
        (true, Some(index)) => snapshots[index + 1..].iter().map(|s| s.id).collect(),
        _ => std::collections::BTreeSet::new(),
    };
    let mut change = crate::limits::Change {
        snapshotted: vec![id],
        ..crate::limits::Change::default()
    };
    change.snapshots.insert(id, later);
    crate::limits::check_change(&inner.datasets, &change)
}

/// The limits of a substream that makes the new dataset `target`, as `create` and
/// `snapshot`: a replacement leaves the dataset count as it was. A missing parent is refused
/// later, by the setup. Nothing when it is `held` (`receive_atomic`): the stream's end
/// counts it with everything else.
fn check_new_limits(
    inner: &Imported,
    target: &str,
    replaces: Option<DatasetId>,
    held: bool,
) -> Result<(), EngineError> {
    if held {
        return Ok(());
    }
    let parent_name = dsname::parent_name(target).unwrap_or(target);
    let Some(parent) = inner.datasets.by_name(parent_name) else {
        return Ok(());
    };
    if replaces.is_none() {
        crate::limits::check_filesystems(&inner.datasets, parent, 1)?;
    }
    crate::limits::check_snapshots(&inner.datasets, &[parent])
}

/// An incremental stream's checks on the destination `id`: its latest snapshot is the
/// stream's source, and its head has no changes since (changes that are only access times
/// are rolled back). With `force` a destination with later snapshots or real changes is
/// taken back to the source at END instead: `Ok(true)` (`receive_rollback`).
fn check_incremental(
    inner: &mut Imported,
    id: DatasetId,
    force: bool,
    begin: &Begin,
    target: &str,
) -> Result<bool, EngineError> {
    let node = inner.datasets.node(id);
    let Some(index) = node
        .snapshots
        .iter()
        .position(|s| s.header.guid.0 == begin.from_guid)
    else {
        return Err(invalid(format!(
            "local fs '{target}' does not have fromsnap ({})",
            begin.from_name
        )));
    };
    if index + 1 != node.snapshots.len() {
        if force {
            return Ok(true);
        }
        let later = &node.snapshots[index + 1].name;
        return Err(invalid(format!(
            "destination has snapshots (eg. '{target}@{later}') more recent than the \
             stream's source; must destroy them to receive (-F destroys them)"
        )));
    }
    // Committed first, so the comparison sees every change; a clean pool writes nothing
    // (a refusal below must leave the devices as they were).
    if inner.dirty_bytes() > 0 {
        inner.sync()?;
    }
    let changes = head_changes(inner, id)?;
    if !changes.real.is_empty() && force {
        return Ok(true);
    }
    if !changes.real.is_empty() {
        return Err(modified_refusal(inner, id, target, &changes.real));
    }
    if changes.any {
        crate::snapshot_ops::rollback_head(inner, id)?;
        inner.sync()?;
    }
    Ok(false)
}

/// Whether substream `begin` makes the new dataset `target` (not resumed) under `receive
/// -d`, whose parent is missing: the case for `Engine::make_parents`.
fn new_below_missing(inner: &Imported, spec: &ReceiveSpec, begin: &Begin, target: &str) -> bool {
    let new = begin.from_guid == 0
        || begin.features & tarn_send::FEATURE_CLONE != 0
        || spec.origin.is_some();
    let resumed = begin.features & tarn_send::FEATURE_RESUMING != 0;
    let parent = dsname::parent_name(target);
    spec.append == Some(true)
        && new
        && !resumed
        && parent.is_some_and(|p| inner.datasets.by_name(p).is_none())
}

/// Destroys the filesystems `Engine::make_parents` made for a receive that failed (those
/// still there and empty, innermost first), and commits that.
fn unmake_parents(inner: &mut Imported, made: &[DatasetId]) -> Result<(), EngineError> {
    if made.is_empty() {
        return Ok(());
    }
    for &id in made.iter().rev() {
        let empty = inner.datasets.contains(id)
            && inner.datasets.children(id).is_empty()
            && inner.datasets.hidden_children(id).is_empty()
            && inner.datasets.node(id).snapshots.is_empty();
        if empty {
            crate::clone_ops::destroy_set(inner, &std::collections::BTreeSet::from([id]), false)?;
        }
    }
    inner.sync()?;
    Ok(())
}

/// Changed paths a refusal of a modified destination names.
const CHANGED_NAMED: usize = 3;

/// The refusal of an incremental receive into `target` (`id`), whose head has the `real`
/// changed objects since its latest snapshot: one line naming the first few by path (files
/// before directories, whose entries changing is implied) and counting the others. An
/// object no path names (a volume's, an unlinked file's) is only counted.
fn modified_refusal(inner: &Imported, id: DatasetId, target: &str, real: &[u64]) -> EngineError {
    let node = inner.datasets.node(id);
    let latest = &node
        .snapshots
        .last()
        .expect("checked: a snapshot exists")
        .name;
    // The paths are a courtesy: a read failing here leaves the objects counted.
    let named = changed_paths(inner, id, real).unwrap_or_default();
    let more = real.len() - named.len();
    let what = match (named.is_empty(), more) {
        (true, _) => format!("{} object(s) changed", real.len()),
        (false, 0) => format!("changed: {}", named.join(", ")),
        // `head_changes` stops counting at HEAD_CHANGES_MAX.
        (false, _) if real.len() >= HEAD_CHANGES_MAX => {
            format!("changed: {} and more objects", named.join(", "))
        }
        (false, _) => format!("changed: {} and {more} more object(s)", named.join(", ")),
    };
    invalid(format!(
        "destination '{target}' has been modified since most recent snapshot '{latest}' \
         ({what}); use -F to discard the changes"
    ))
}

/// The paths (from the dataset's root, escaped as `diff` prints them) of up to
/// [`CHANGED_NAMED`] of the `real` changed objects of head `id`, files first.
fn changed_paths(
    inner: &Imported,
    id: DatasetId,
    real: &[u64],
) -> Result<Vec<String>, EngineError> {
    let node = inner.datasets.node(id);
    if node.objset.kind() == ObjsetKind::Volume {
        return Ok(Vec::new());
    }
    let latest = node.snapshots.last().expect("checked: a snapshot exists");
    let reader = inner.pool.reader();
    let mut then = ObjectSet::open(&reader, &latest.header.objset)?;
    let mut now = ObjectSet::open(&reader, &node.objset.root())?;
    let mut found = Vec::new();
    for &object in real {
        let named = tarn_posix::diff::changed_path(&mut then, &mut now, &reader, object)?;
        found.extend(named);
    }
    // Stable: in object order within each kind.
    found.sort_by_key(|(kind, _)| *kind == tarn_posix::FileKind::Directory);
    let shown = found.iter().take(CHANGED_NAMED);
    Ok(shown
        .map(|(_, path)| format!("/{}", crate::diff_ops::escape(path)))
        .collect())
}

/// Most changed objects [`head_changes`] lists.
const HEAD_CHANGES_MAX: usize = 64;

/// What changed in a head since its latest snapshot.
pub(crate) struct HeadChanges {
    /// Anything at all (access times included).
    pub(crate) any: bool,
    /// Objects changed beyond their access time.
    pub(crate) real: Vec<u64>,
}

/// Compares the head of `id` with its latest snapshot, dnode by dnode over the dnode blocks
/// born since it (tarn can tell an access-time update from a change: only the inode's
/// atime differs).
pub(crate) fn head_changes(
    inner: &mut Imported,
    id: DatasetId,
) -> Result<HeadChanges, EngineError> {
    let Imported { pool, datasets, .. } = inner;
    let reader = pool.reader();
    let node = datasets.node_mut(id);
    let latest = node
        .snapshots
        .last()
        .expect("checked: a snapshot exists")
        .clone();
    let mut changes = HeadChanges {
        any: node.objset.root() != latest.header.objset,
        real: Vec::new(),
    };
    if !changes.any {
        return Ok(changes);
    }
    let mut then = ObjectSet::open(&reader, &latest.header.objset)?;
    let mut blocks = Vec::new();
    node.objset.visit_changes(
        &reader,
        ObjectId(0),
        Some(latest.header.txg),
        0,
        &mut |change| {
            blocks.push(change);
            Ok(blocks.len() < 4096)
        },
    )?;
    let per_block = tarn_format::objset::DNODES_PER_BLOCK;
    for change in blocks {
        let (first, count) = match change {
            tarn_objects::BlockChange::Data { blkid, .. } => (blkid, 1),
            tarn_objects::BlockChange::Hole { blkid, count } => (blkid, count.min(1 << 20)),
        };
        for object in first * per_block..(first + count) * per_block {
            if object == 0 || changes.real.len() >= HEAD_CHANGES_MAX {
                continue;
            }
            let now = node.objset.dnode(&reader, ObjectId(object))?;
            let before = then.dnode(&reader, ObjectId(object))?;
            if !only_access_time(now.as_ref(), before.as_ref()) {
                changes.real.push(object);
            }
        }
    }
    Ok(changes)
}

/// Whether two versions of a dnode differ at most in the inode's access time.
fn only_access_time(
    now: Option<&tarn_format::dnode::Dnode>,
    before: Option<&tarn_format::dnode::Dnode>,
) -> bool {
    match (now, before) {
        (None, None) => true,
        (Some(now), Some(before)) => {
            let mut same = now.clone();
            same.bonus = before.bonus;
            same.bonus_len = before.bonus_len;
            same == *before
                && tarn_posix::same_but_access_time(now.bonus_bytes(), before.bonus_bytes())
        }
        _ => false,
    }
}

/// Refuses to go on when the dataset a receive writes was destroyed meanwhile.
pub(crate) fn still_there(inner: &Imported, id: DatasetId) -> Result<(), EngineError> {
    match inner.datasets.contains(id) {
        true => Ok(()),
        false => Err(invalid("the destination was destroyed during the receive")),
    }
}

/// Undoes a receive that did not reach its END (module doc) and commits that.
///
/// A receive whose END made its change (published the new dataset, or set the head's
/// snapshot pending) and then failed can only have failed to commit, which suspends the
/// pool: its change stands in memory, as any change whose commit failed, and is committed
/// when the pool resumes, or lost whole at a power cut. Undoing it here would destroy a
/// dataset that is no longer hidden.
pub(crate) fn receive_undo(inner: &mut Imported, into: &Destination) -> Result<(), EngineError> {
    if !inner.datasets.contains(destination_id(into)) {
        return Ok(());
    }
    let node = inner.datasets.node(destination_id(into));
    if !crate::datasets::is_hidden(&node.name) && !matches!(into, Destination::Head { .. })
        || node.snapshot_pending.is_some()
    {
        return Ok(());
    }
    match into {
        Destination::New { id, .. } | Destination::Rollback { id, .. } => {
            crate::dataset_ops::destroy_hidden(inner, *id)?;
        }
        Destination::Head { id } => {
            crate::snapshot_ops::rollback_head(inner, *id)?;
            set_token(inner, *id, None)?;
            crate::receive_head::unmark(inner, *id)?;
        }
        // Its hidden dataset is held: the stream's discard destroys it.
        Destination::Chained { .. } => return Ok(()),
    }
    inner.sync()?;
    Ok(())
}

/// Sets the per-owner counts of a received filesystem to a scan of its inodes (a volume
/// has none).
pub(crate) fn recount(inner: &mut Imported, id: DatasetId) -> Result<(), EngineError> {
    if inner.datasets.node(id).objset.kind() == ObjsetKind::Volume {
        inner.datasets.node_mut(id).receiving = false;
        return Ok(());
    }
    let config = inner.datasets.fs_config(id);
    let scale = crate::datasets::used_scale(&crate::datasets::deflate_table(&inner.pool));
    let Imported { pool, datasets, .. } = inner;
    let reader = pool.reader();
    let node = datasets.node_mut(id);
    let now = tarn_posix::Timespec::default();
    tarn_posix::Fs::new(&mut node.objset, &reader, now, config).recount_usedby(scale)?;
    node.receiving = false;
    Ok(())
}

/// Gives the hidden dataset `id` its name `name` under `parent`.
pub(crate) fn publish(
    inner: &mut Imported,
    id: DatasetId,
    parent: DatasetId,
    name: &str,
) -> Result<(), EngineError> {
    if inner.datasets.by_name(name).is_some() {
        return Err(invalid(format!("destination '{name}' exists")));
    }
    crate::dataset_ops::move_dataset(inner, id, parent, name)
}
