//! The reference model: what every object must contain. A snapshot is cheap (object bytes are
//! shared until written), so the run keeps one per recent committed txg as well as the open
//! one, and after a crash the model goes back to whichever txg the import found.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tarn_base::ObjectId;

use crate::fsmodel::FsModel;

/// One object of the model.
#[derive(Clone, Debug)]
pub(crate) struct ModelObject {
    /// Every byte of the addressed span (never-written bytes are zeros).
    pub(crate) bytes: Arc<Vec<u8>>,
    /// Data block size the object was created with.
    pub(crate) block_size: u32,
    /// Ranges whose contents are unknown: a write there failed half-way (beyond budget only).
    pub(crate) unknown: Vec<(u64, u64)>,
}

/// A volume of the model: every byte up to its `volsize` (never-written and zeroed bytes are
/// zeros; the engine's holes read as zeros too).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VolumeModel {
    /// The volume's bytes; the length is its `volsize`.
    pub(crate) bytes: Arc<Vec<u8>>,
    /// `volblocksize`.
    pub(crate) block_size: u32,
}

impl VolumeModel {
    /// A volume of `size` zero bytes.
    pub(crate) fn new(size: u64, block_size: u32) -> VolumeModel {
        let size = usize::try_from(size).expect("a simulated volume fits in memory");
        VolumeModel {
            bytes: Arc::new(vec![0u8; size]),
            block_size,
        }
    }

    /// Writes `data` at `offset` (inside the volume: the run draws ranges inside it).
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) {
        let start = usize::try_from(offset).expect("offset inside the volume");
        Arc::make_mut(&mut self.bytes)[start..start + data.len()].copy_from_slice(data);
    }

    /// Zeroes `len` bytes at `offset` (trim, write-zeroes).
    pub(crate) fn zero(&mut self, offset: u64, len: u64) {
        let start = usize::try_from(offset).expect("offset inside the volume");
        let end = start + usize::try_from(len).expect("length inside the volume");
        Arc::make_mut(&mut self.bytes)[start..end].fill(0);
    }

    /// Grows the volume to `size` bytes (the new part reads as zeros) or shrinks it (the
    /// bytes past `size` are gone).
    pub(crate) fn resize(&mut self, size: u64) {
        let size = usize::try_from(size).expect("a simulated volume fits in memory");
        Arc::make_mut(&mut self.bytes).resize(size, 0);
    }

    /// The first offset at or after `offset` where `actual` (read at `offset`) differs.
    pub(crate) fn compare(&self, offset: u64, actual: &[u8]) -> Option<Mismatch> {
        let start = usize::try_from(offset).expect("offset inside the volume");
        let expected = &self.bytes[start..start + actual.len()];
        expected
            .iter()
            .zip(actual)
            .position(|(e, a)| e != a)
            .map(|i| Mismatch {
                offset: offset + i as u64,
                expected: expected[i],
                actual: actual[i],
            })
    }
}

/// Objects by id, and the datasets below the pool's root dataset.
#[derive(Clone, Debug, Default)]
pub(crate) struct Model {
    pub(crate) objects: BTreeMap<ObjectId, ModelObject>,
    /// Dataset names relative to the pool (`d3/d7` for `tank/d3/d7`).
    pub(crate) datasets: BTreeSet<String>,
    /// The filesystem of every dataset by relative name (`""`: the root dataset `tank`).
    pub(crate) fs: BTreeMap<String, FsModel>,
    /// Volumes by relative name (also in `datasets`, never in `fs`).
    pub(crate) volumes: BTreeMap<String, VolumeModel>,
    /// Snapshots by dataset (relative name), oldest first.
    pub(crate) snapshots: BTreeMap<String, Vec<SnapshotModel>>,
    /// Clones (relative name) and their origin snapshot: (dataset, snapshot name).
    pub(crate) origins: BTreeMap<String, (String, String)>,
}

/// A snapshot as the model took it: the dataset's filesystem and, of the root dataset, its
/// objects (the raw objects live in the root dataset's object set).
#[derive(Clone, Debug)]
pub(crate) struct SnapshotModel {
    /// The part after `@`.
    pub(crate) name: String,
    /// The root dataset's objects when it was taken (empty for other datasets).
    pub(crate) objects: BTreeMap<ObjectId, ModelObject>,
    /// The dataset's filesystem when it was taken (empty for a volume).
    pub(crate) fs: FsModel,
    /// A volume's bytes when it was taken (`None` for a filesystem).
    pub(crate) volume: Option<VolumeModel>,
}

/// Where a read disagreed with the model.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Mismatch {
    pub(crate) offset: u64,
    pub(crate) expected: u8,
    pub(crate) actual: u8,
}

impl Model {
    /// The model of a fresh pool: no objects, the root dataset's empty filesystem.
    pub(crate) fn new() -> Model {
        Model {
            fs: BTreeMap::from([(String::new(), FsModel::new())]),
            ..Model::default()
        }
    }

    /// A new dataset `name` with an empty filesystem.
    pub(crate) fn create_dataset(&mut self, name: &str) {
        self.datasets.insert(name.to_string());
        self.fs.insert(name.to_string(), FsModel::new());
    }

    pub(crate) fn create(&mut self, id: ObjectId, block_size: u32, span: u64) {
        let span = usize::try_from(span).expect("object span fits in memory");
        let object = ModelObject {
            bytes: Arc::new(vec![0u8; span]),
            block_size,
            unknown: Vec::new(),
        };
        let previous = self.objects.insert(id, object);
        assert!(
            previous.is_none(),
            "the engine handed out live object {id:?} again"
        );
    }

    pub(crate) fn write(&mut self, id: ObjectId, offset: u64, data: &[u8]) {
        let object = self
            .objects
            .get_mut(&id)
            .expect("writes go to model objects");
        let start = usize::try_from(offset).expect("offset inside the span");
        Arc::make_mut(&mut object.bytes)[start..start + data.len()].copy_from_slice(data);
    }

    /// A write of `len` bytes at `offset` failed: those bytes may be old or new.
    pub(crate) fn forget(&mut self, id: ObjectId, offset: u64, len: u64) {
        let object = self
            .objects
            .get_mut(&id)
            .expect("writes go to model objects");
        object.unknown.push((offset, len));
    }

    /// Compares `actual`, read at `offset`, with the model; bytes in unknown ranges match
    /// anything.
    pub(crate) fn compare(&self, id: ObjectId, offset: u64, actual: &[u8]) -> Option<Mismatch> {
        let object = &self.objects[&id];
        let start = usize::try_from(offset).expect("offset inside the span");
        let expected = &object.bytes[start..start + actual.len()];
        if expected == actual {
            return None;
        }
        let known = |at: u64| !object.unknown.iter().any(|&(o, l)| at >= o && at < o + l);
        expected
            .iter()
            .zip(actual)
            .enumerate()
            .map(|(i, (&e, &a))| (offset + i as u64, e, a))
            .find(|&(at, e, a)| e != a && known(at))
            .map(|(offset, expected, actual)| Mismatch {
                offset,
                expected,
                actual,
            })
    }

    /// A 64-bit digest of the contents (for the trace).
    pub(crate) fn digest(&self) -> u64 {
        let mut hash = crate::trace::Fnv::new();
        for (id, object) in &self.objects {
            hash.add(&id.0.to_le_bytes());
            hash.add(&object.bytes);
        }
        for name in &self.datasets {
            hash.add(name.as_bytes());
        }
        for (name, fs) in &self.fs {
            hash.add(name.as_bytes());
            fs.digest(&mut hash);
        }
        for (name, volume) in &self.volumes {
            hash.add(name.as_bytes());
            hash.add(&volume.bytes);
        }
        for name in self.snapshot_names() {
            hash.add(name.as_bytes());
        }
        hash.finish()
    }

    /// Whether destroying `name` with its descendants would take an origin snapshot from
    /// under a clone outside them (the engine refuses that without -R).
    pub(crate) fn destroy_blocked(&self, name: &str) -> bool {
        let prefix = format!("{name}/");
        let inside = |d: &str| d == name || d.starts_with(&prefix);
        self.origins
            .iter()
            .any(|(clone, (origin, _))| inside(origin) && !inside(clone))
    }

    /// Whether snapshot `snap` of `dataset` is some clone's origin.
    pub(crate) fn has_clones(&self, dataset: &str, snap: &str) -> bool {
        self.origins
            .values()
            .any(|(d, s)| d == dataset && s == snap)
    }

    /// Clone `name` (a new top-level dataset) of snapshot `snap` of `dataset`.
    pub(crate) fn clone_snapshot(&mut self, dataset: &str, snap: &str, name: &str) {
        let list = &self.snapshots[dataset];
        let taken = list.iter().find(|s| s.name == snap).expect("a snapshot");
        match &taken.volume {
            Some(volume) => {
                self.volumes.insert(name.to_string(), volume.clone());
            }
            None => {
                self.fs.insert(name.to_string(), taken.fs.clone());
            }
        }
        self.datasets.insert(name.to_string());
        self.origins
            .insert(name.to_string(), (dataset.to_string(), snap.to_string()));
    }

    /// Promotes clone `name` (ZFS's promote): its origin dataset's snapshots up to the
    /// origin move to it, the origin dataset becomes its clone, other clones of the moved
    /// snapshots follow them.
    pub(crate) fn promote(&mut self, name: &str) {
        let (dataset, snap) = self.origins.remove(name).expect("a clone");
        let list = self.snapshots.entry(dataset.clone()).or_default();
        let at = list
            .iter()
            .position(|s| s.name == snap)
            .expect("its origin");
        let moved: Vec<SnapshotModel> = list.drain(..=at).collect();
        let names: Vec<String> = moved.iter().map(|s| s.name.clone()).collect();
        let own = self.snapshots.entry(name.to_string()).or_default();
        own.splice(0..0, moved);
        if let Some(up) = self.origins.remove(&dataset) {
            self.origins.insert(name.to_string(), up);
        }
        for origin in self.origins.values_mut() {
            if origin.0 == dataset && names.contains(&origin.1) {
                origin.0 = name.to_string();
            }
        }
        self.origins.insert(dataset, (name.to_string(), snap));
    }

    /// What `destroy -R name` would destroy ([`Model::destroy_dependents`]), or `None` when
    /// the engine refuses it: the set takes the root dataset, or holds a cycle (a promoted
    /// clone inside its old origin: the origin must go before it, as its parent after it).
    pub(crate) fn dependents(&self, name: &str) -> Option<Vec<String>> {
        let gone = self.clone().destroy_dependents(name);
        if gone.iter().any(String::is_empty) {
            return None;
        }
        let inside = |d: &str| {
            gone.iter()
                .any(|g| d == g || d.starts_with(&format!("{g}/")))
        };
        let mut left: Vec<&String> = self.datasets.iter().filter(|d| inside(d)).collect();
        let parent = |d: &str| d.rsplit_once('/').map_or("", |(p, _)| p).to_string();
        let blocks = |o: &str, d: &str| {
            parent(o) == d || self.origins.get(o).is_some_and(|(origin, _)| origin == d)
        };
        while !left.is_empty() {
            let free = left
                .iter()
                .position(|d| !left.iter().any(|o| blocks(o, d)))?;
            left.remove(free);
        }
        Some(gone)
    }

    /// `destroy -R name`: `name`, its descendants and, over and over, every clone of a
    /// snapshot among them with its own descendants (their snapshots go with them).
    /// Returns the datasets destroyed.
    pub(crate) fn destroy_dependents(&mut self, name: &str) -> Vec<String> {
        let mut gone: Vec<String> = vec![name.to_string()];
        let inside = |gone: &[String], d: &str| {
            gone.iter()
                .any(|g| d == g || d.starts_with(&format!("{g}/")))
        };
        loop {
            let more: Vec<String> = self
                .origins
                .iter()
                .filter(|(clone, (origin, _))| inside(&gone, origin) && !inside(&gone, clone))
                .map(|(clone, _)| clone.clone())
                .collect();
            if more.is_empty() {
                break;
            }
            gone.extend(more);
        }
        for dataset in &gone {
            self.destroy_dataset(dataset);
        }
        gone
    }

    /// Whether the engine refuses `destroy -R dataset@snap` ([`Model::dependents`] of one of
    /// its clones is refused).
    pub(crate) fn snapshot_dependents_refused(&self, dataset: &str, snap: &str) -> bool {
        self.origins
            .iter()
            .filter(|(_, (d, s))| d == dataset && s == snap)
            .any(|(clone, _)| self.dependents(clone).is_none())
    }

    /// `destroy -R dataset@snap`: the snapshot and every clone of it, with their dependents.
    pub(crate) fn destroy_snapshot_dependents(&mut self, dataset: &str, snap: &str) {
        let clones: Vec<String> = self
            .origins
            .iter()
            .filter(|(_, (d, s))| d == dataset && s == snap)
            .map(|(clone, _)| clone.clone())
            .collect();
        for clone in clones {
            self.destroy_dependents(&clone);
        }
        self.destroy_snapshot(dataset, snap);
    }

    /// Removes `name` and its descendants (with their snapshots).
    pub(crate) fn destroy_dataset(&mut self, name: &str) {
        let prefix = format!("{name}/");
        self.origins
            .retain(|d, _| d != name && !d.starts_with(&prefix));
        self.datasets
            .retain(|d| d != name && !d.starts_with(&prefix));
        self.fs.retain(|d, _| d != name && !d.starts_with(&prefix));
        self.volumes
            .retain(|d, _| d != name && !d.starts_with(&prefix));
        self.snapshots
            .retain(|d, _| d != name && !d.starts_with(&prefix));
    }

    /// Snapshot `snap` of `dataset` (and with `recursive` of its descendants) as they are.
    pub(crate) fn snapshot(&mut self, dataset: &str, snap: &str, recursive: bool) {
        let prefix = format!("{dataset}/");
        let targets: Vec<String> = self
            .fs
            .keys()
            .chain(self.volumes.keys())
            .filter(|d| {
                *d == dataset || (recursive && (dataset.is_empty() || d.starts_with(&prefix)))
            })
            .cloned()
            .collect();
        for target in targets {
            let objects = if target.is_empty() {
                self.objects.clone()
            } else {
                BTreeMap::new()
            };
            let taken = SnapshotModel {
                name: snap.to_string(),
                objects,
                fs: self.fs.get(&target).cloned().unwrap_or_else(FsModel::new),
                volume: self.volumes.get(&target).cloned(),
            };
            self.snapshots.entry(target).or_default().push(taken);
        }
    }

    /// Drops snapshot `snap` of `dataset`.
    pub(crate) fn destroy_snapshot(&mut self, dataset: &str, snap: &str) {
        if let Some(list) = self.snapshots.get_mut(dataset) {
            list.retain(|s| s.name != snap);
        }
    }

    /// Rolls `dataset` back to its snapshot `index` (later ones go): its filesystem and, for
    /// the root dataset, the objects become the snapshot's.
    pub(crate) fn rollback(&mut self, dataset: &str, index: usize) {
        let list = self
            .snapshots
            .get_mut(dataset)
            .expect("rollback of a snapshot");
        list.truncate(index + 1);
        let snapshot = list[index].clone();
        if dataset.is_empty() {
            self.objects = snapshot.objects;
        }
        match snapshot.volume {
            Some(volume) => {
                self.volumes.insert(dataset.to_string(), volume);
            }
            None => {
                self.fs.insert(dataset.to_string(), snapshot.fs);
            }
        }
    }

    /// Every snapshot's full name relative to the pool (`d1@s3`, `@s2` for the root),
    /// datasets in name order, snapshots oldest first.
    pub(crate) fn snapshot_names(&self) -> Vec<String> {
        self.snapshots
            .iter()
            .flat_map(|(d, list)| list.iter().map(move |s| format!("{d}@{}", s.name)))
            .collect()
    }

    /// Renames `old` (and its descendants) to `new`.
    pub(crate) fn rename_dataset(&mut self, old: &str, new: &str) {
        let prefix = format!("{old}/");
        let moved: Vec<String> = self
            .datasets
            .iter()
            .filter(|d| *d == old || d.starts_with(&prefix))
            .cloned()
            .collect();
        for name in moved {
            self.datasets.remove(&name);
            let renamed = format!("{new}{}", &name[old.len()..]);
            if let Some(fs) = self.fs.remove(&name) {
                self.fs.insert(renamed.clone(), fs);
            }
            if let Some(volume) = self.volumes.remove(&name) {
                self.volumes.insert(renamed.clone(), volume);
            }
            if let Some(list) = self.snapshots.remove(&name) {
                self.snapshots.insert(renamed.clone(), list);
            }
            if let Some(origin) = self.origins.remove(&name) {
                self.origins.insert(renamed.clone(), origin);
            }
            for origin in self.origins.values_mut() {
                if origin.0 == name {
                    origin.0.clone_from(&renamed);
                }
            }
            self.datasets.insert(renamed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_share_until_written_and_unknown_matches_anything() {
        let mut model = Model::default();
        model.create(ObjectId(1), 4096, 8192);
        let snapshot = model.clone();
        model.write(ObjectId(1), 10, &[7, 7]);
        assert_eq!(snapshot.objects[&ObjectId(1)].bytes[10], 0);
        assert_eq!(model.compare(ObjectId(1), 10, &[7, 7]), None);
        let bad = model.compare(ObjectId(1), 8, &[0, 0, 7, 8]);
        assert_eq!(
            bad,
            Some(Mismatch {
                offset: 11,
                expected: 7,
                actual: 8
            })
        );
        model.forget(ObjectId(1), 11, 1);
        assert_eq!(model.compare(ObjectId(1), 8, &[0, 0, 7, 8]), None);
        assert_ne!(model.digest(), snapshot.digest());
    }

    /// `destroy -R` takes a dataset's descendants, the clones of its snapshots, the clones
    /// of theirs, and their descendants; nothing else. Of a snapshot, only its clones'.
    #[test]
    fn destroy_dependents_takes_clones_of_clones_and_nothing_else() {
        let mut model = Model::default();
        for name in ["d1", "d1/x", "d2"] {
            model.create_dataset(name);
        }
        model.snapshot("d1", "s1", true);
        model.snapshot("d2", "s1", false);
        model.clone_snapshot("d1/x", "s1", "c1");
        model.snapshot("c1", "s2", false);
        model.clone_snapshot("c1", "s2", "c2");
        model.create_dataset("c2/kid");
        model.clone_snapshot("d2", "s1", "c3");
        let mut snap = model.clone();
        snap.destroy_snapshot_dependents("c1", "s2");
        let left: Vec<&String> = snap.datasets.iter().collect();
        assert_eq!(left, ["c1", "c3", "d1", "d1/x", "d2"]);
        assert!(snap.snapshots["c1"].is_empty());
        let gone = model.destroy_dependents("d1");
        assert_eq!(gone, ["d1", "c1", "c2"]);
        let left: Vec<&String> = model.datasets.iter().collect();
        assert_eq!(left, ["c3", "d2"]);
        assert_eq!(model.origins.keys().collect::<Vec<_>>(), ["c3"]);
    }
}
