//! Dataset verbs (`tarn create`, `destroy`, `rename`, `list`, `get`, `set`, `inherit`): each
//! checks everything first and only then changes the tree, so a refused command changes
//! nothing, and commits its change in a txg of its own before it returns.

use tarn_base::{Clock, Guid, ObjectId};
use tarn_dataset::node::{self, DatasetHeader};
use tarn_dataset::props::{self, PropKind, Source};
use tarn_dataset::{DatasetError, name as dsname, volume};
use tarn_objects::{ObjectSet, ObjsetKind};
use tarn_posix::{Creds, Fs};

use crate::datasets::{Node, Tree};
use crate::volume::VolumeSpec;
use crate::{DatasetId, Engine, EngineError, Imported, PoolHandle, ROOT_DATASET_ID};

/// One property of one dataset, as `tarn get` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatasetProp {
    /// Property name.
    pub property: String,
    /// Value for humans (`10G`, `none`).
    pub value: String,
    /// Exact value (`-p`: bytes, seconds).
    pub parsable: String,
    /// The SOURCE column (`local`, `default`, `inherited from tank`, `-`).
    pub source: String,
    /// The `-s` filter word of the source (`local`, `default`, `inherited`, `none`).
    pub source_kind: String,
}

/// One dataset's requested properties.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatasetRow {
    /// Full name.
    pub name: String,
    /// Its properties, in the order asked.
    pub props: Vec<DatasetProp>,
}

/// What `tarn list` / `tarn get` select.
#[derive(Clone, Debug, Default)]
pub struct DatasetQuery {
    /// Datasets named on the command line (empty: every pool's root).
    pub names: Vec<String>,
    /// Include descendants (`-r`, or implied by `depth`).
    pub recursive: bool,
    /// Descend at most this many levels (`-d N`).
    pub depth: Option<usize>,
    /// Properties (`all` for every one).
    pub properties: Vec<String>,
    /// Types listed (`filesystem`, `volume`, `snapshot`, `all`; empty: filesystems and
    /// volumes, and snapshots too when the pool's `listsnapshots` is on, as `zfs list`
    /// without `-t`).
    pub types: Vec<String>,
}

impl DatasetQuery {
    /// Whether rows of `kind` are listed; `list_snapshots` is the pool's `listsnapshots`.
    fn wants(&self, kind: &str, list_snapshots: bool) -> bool {
        if self.types.is_empty() {
            return kind == "filesystem"
                || kind == "volume"
                || (kind == "snapshot" && list_snapshots);
        }
        self.types.iter().any(|t| t == kind || t == "all")
    }
}

/// Refuses a property that does not apply to a dataset of this type (volume or not).
pub(crate) fn check_applies(is_volume: bool, property: &str) -> Result<(), EngineError> {
    let refused = if is_volume {
        props::FILESYSTEM_ONLY.contains(&property)
    } else {
        matches!(property, "volsize" | "volblocksize")
    };
    if refused {
        return Err(EngineError::InvalidProperty(format!(
            "'{property}' does not apply to datasets of this type"
        )));
    }
    if property == "volblocksize" {
        return Err(EngineError::InvalidProperty(
            "'volblocksize' is set only when the volume is created".into(),
        ));
    }
    Ok(())
}

/// Validates a property assignment; `None` means "store as absent" (a non-inherited
/// property set to its default).
pub(crate) fn validate_prop(name: &str, value: &str) -> Result<Option<String>, EngineError> {
    Ok(props::validate(name, value)?)
}

/// Makes the (empty) object set of `id` a filesystem: master node and root directory.
pub(crate) fn format_filesystem(
    inner: &mut Imported,
    id: DatasetId,
    clock: &dyn Clock,
) -> Result<(), EngineError> {
    let config = inner.datasets.fs_config(id);
    let Imported { pool, datasets, .. } = inner;
    let reader = pool.reader();
    let now = crate::fs::now_of(clock);
    Fs::new(&mut datasets.node_mut(id).objset, &reader, now, config).format(Creds::default())?;
    Ok(())
}

/// Where a new dataset `name` goes: the nearest existing ancestor (a filesystem) and, with
/// `parents` (`-p`), the missing ones between, outermost first; checks `name` is free.
pub(crate) fn new_dataset_parent(
    inner: &Imported,
    name: &str,
    parents: bool,
) -> Result<(DatasetId, Vec<String>), EngineError> {
    if inner.datasets.by_name(name).is_some() {
        return Err(invalid("dataset already exists"));
    }
    let mut missing = Vec::new();
    let mut at = dsname::parent_name(name);
    let parent = loop {
        let Some(candidate) = at else {
            return Err(invalid("missing pool name"));
        };
        if let Some(id) = inner.datasets.by_name(candidate) {
            break id;
        }
        if !parents {
            return Err(invalid("parent does not exist (use -p to create it)"));
        }
        missing.push(candidate.to_string());
        at = dsname::parent_name(candidate);
    };
    if inner.datasets.node(parent).objset.kind() == ObjsetKind::Volume {
        return Err(invalid("parent is not a filesystem"));
    }
    missing.reverse();
    Ok((parent, missing))
}

/// A refusal of the arguments (`cannot <verb> '<obj>': <text>`).
pub(crate) fn invalid(text: impl Into<String>) -> EngineError {
    EngineError::InvalidArgument(text.into())
}

/// The pool part of a dataset or snapshot name.
pub(crate) fn pool_of(name: &str) -> &str {
    name.split('/').next().unwrap_or(name)
}

impl Engine {
    /// The pool and dataset called `name`.
    fn dataset(&self, name: &str) -> Result<(std::sync::Arc<PoolHandle>, DatasetId), EngineError> {
        dsname::validate_name(name)?;
        let handle = self.pool(pool_of(name))?;
        let id = handle.lock().datasets.lookup(name)?;
        Ok((handle, id))
    }

    /// The id of dataset `name` and its pool's name.
    pub fn find_dataset(&self, name: &str) -> Result<(String, DatasetId), EngineError> {
        let (handle, id) = self.dataset(name)?;
        Ok((handle.name.clone(), id))
    }

    /// `name` and its descendants (ids and names), parents first.
    pub fn dataset_subtree(&self, name: &str) -> Result<Vec<(DatasetId, String)>, EngineError> {
        let (handle, id) = self.dataset(name)?;
        let inner = handle.lock();
        Ok(inner
            .datasets
            .subtree(id)
            .into_iter()
            .map(|(d, _)| (d, inner.datasets.node(d).name.clone()))
            .collect())
    }

    /// The row of one snapshot (`DS@SNAP`) or bookmark (`DS#BM`) named on the command line.
    fn named_rows(
        &self,
        root: &str,
        properties: &[String],
    ) -> Result<Vec<DatasetRow>, EngineError> {
        let found = if let Some((dataset, mark)) = root.split_once('#') {
            tarn_dataset::bookmark::split_name(root)?;
            let (handle, id) = self.dataset(dataset)?;
            let inner = handle.lock();
            crate::bookmark_ops::bookmark_rows(&inner, id, properties, Some(mark))?
        } else {
            let (dataset, snap) = tarn_dataset::snapshot::split_name(root)?;
            let (handle, id) = self.dataset(dataset)?;
            let mut inner = handle.lock();
            crate::snapshot_ops::snapshot_rows(&mut inner, id, properties, Some(snap))?
        };
        match found.is_empty() {
            true => Err(EngineError::NoSuchDataset),
            false => Ok(found),
        }
    }

    /// `tarn create [-p] [-o prop=value]... NAME`.
    pub fn create_dataset(
        &self,
        name: &str,
        properties: &[(String, String)],
        parents: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        self.create_any(name, properties, parents, None, command)
    }

    /// `tarn create -V SIZE [-s] [-b BLOCKSIZE] [-p] [-o prop=value]... NAME`: a volume
    /// (`-o volblocksize=` and `-o volsize=` are taken too, as ZFS does).
    pub fn create_volume(
        &self,
        name: &str,
        spec: &VolumeSpec,
        properties: &[(String, String)],
        parents: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        let mut rest = Vec::new();
        let mut block_text = spec.block_size.clone();
        let mut size_text = spec.size.clone();
        for (property, value) in properties {
            match property.as_str() {
                "volblocksize" => block_text = Some(value.clone()),
                "volsize" => size_text.clone_from(value),
                _ => rest.push((property.clone(), value.clone())),
            }
        }
        let block_size = match &block_text {
            Some(text) => volume::parse_block_size(text)?,
            None => volume::VOLBLOCKSIZE_DEFAULT,
        };
        let size = volume::parse_size_for(&size_text, block_size)?;
        for (property, _) in &rest {
            if props::FILESYSTEM_ONLY.contains(&property.as_str()) {
                return Err(EngineError::InvalidProperty(format!(
                    "'{property}' does not apply to datasets of this type"
                )));
            }
        }
        let explicit = rest.iter().any(|(p, _)| p == "refreservation");
        if !spec.sparse && !explicit {
            rest.push(("refreservation".into(), size.to_string()));
        }
        self.create_any(name, &rest, parents, Some((size, block_size)), command)
    }

    /// [`Engine::create_dataset`] and [`Engine::create_volume`] (`volume`: size and block
    /// size).
    fn create_any(
        &self,
        name: &str,
        properties: &[(String, String)],
        parents: bool,
        volume: Option<(u64, u32)>,
        command: &str,
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        dsname::validate_name(name)?;
        let handle = self.pool(pool_of(name))?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let (parent, missing) = new_dataset_parent(&inner, name, parents)?;
        crate::limits::check_filesystems(&inner.datasets, parent, missing.len() as u64 + 1)?;
        let mut values = Vec::new();
        for (property, value) in properties {
            values.push((property.clone(), validate_prop(property, value)?));
        }
        if volume.is_some() {
            let pool_free = pool_free_deflated(&inner);
            let avail = inner.datasets.available(parent, pool_free);
            let reserved = values
                .iter()
                .find(|(p, _)| p == "refreservation")
                .and_then(|(_, v)| v.as_deref()?.parse::<u64>().ok())
                .unwrap_or(0);
            if reserved > avail {
                return Err(EngineError::NoSpace);
            }
        }
        let mut chain = missing;
        chain.push(name.to_string());
        let mut parent = parent;
        let last = chain.len() - 1;
        for (index, full) in chain.iter().enumerate() {
            let own: &[(String, Option<String>)] = if index == last { &values } else { &[] };
            let kind = if index == last { volume } else { None };
            parent = self.create_one(&mut inner, parent, full, own, kind)?;
        }
        self.commit(&mut inner, command)?;
        Ok(())
    }

    /// The header of a new dataset under `parent`: created now, in the open txg, with a
    /// fresh GUID (create, clone and receive).
    pub(crate) fn new_header(&self, pool: &tarn_pool::Pool, parent: DatasetId) -> DatasetHeader {
        DatasetHeader {
            parent: ObjectId(parent.0),
            creation_time: self.clock.now_unix_secs(),
            creation_txg: pool.txg(),
            guid: Guid(self.rng.lock().expect("rng lock poisoned").next_u64()),
            ..DatasetHeader::default()
        }
    }

    /// Adds one dataset under `parent` (its properties already validated).
    pub(crate) fn create_one(
        &self,
        inner: &mut Imported,
        parent: DatasetId,
        name: &str,
        values: &[(String, Option<String>)],
        volume: Option<(u64, u32)>,
    ) -> Result<DatasetId, EngineError> {
        let header = self.new_header(&inner.pool, parent);
        let Imported {
            pool,
            mos,
            datasets,
            ..
        } = &mut *inner;
        let reader = pool.reader();
        let object = node::create_node(mos.objset(), &reader, None, header)?;
        let parent_header = datasets.node(parent).header;
        node::set_child(
            mos.objset(),
            &reader,
            &parent_header,
            dsname::leaf_name(name),
            Some(object),
        )?;
        let id = DatasetId(object.0);
        let header = node::read_header(mos.objset(), &reader, object)?;
        datasets.insert(
            id,
            Node {
                header_dirty: true,
                ..Node::new(
                    name.to_string(),
                    Some(parent),
                    header,
                    ObjectSet::create(if volume.is_some() {
                        ObjsetKind::Volume
                    } else {
                        ObjsetKind::Filesystem
                    }),
                )
            },
        );
        for (property, value) in values {
            datasets.set_local(mos.objset(), &reader, id, property, value.as_deref())?;
        }
        datasets.apply_objset_config(id)?;
        match volume {
            Some((size, block_size)) => {
                let objset = &mut datasets.node_mut(id).objset;
                volume::create(objset, &reader, size, block_size)?;
            }
            None => format_filesystem(inner, id, self.clock.as_ref())?,
        }
        Ok(id)
    }

    /// `tarn destroy [-r] NAME`. The caller has unmounted what it mounted.
    pub fn destroy_dataset(
        &self,
        name: &str,
        recursive: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        self.destroy_dataset_with(name, recursive, false, command)
    }

    /// `tarn destroy [-r] [-R] NAME`: with `dependents` (`-R`, which implies `-r`) the clones
    /// of its snapshots (and theirs, and their descendants) go too, in the same txg.
    pub fn destroy_dataset_with(
        &self,
        name: &str,
        recursive: bool,
        dependents: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        if name.contains('@') {
            self.destroy_snapshots_with(name, recursive, false, false, dependents, command)?;
            return Ok(());
        }
        if name.contains('#') {
            return self.destroy_bookmark(name, false, command);
        }
        let _admin = self.admin();
        let (handle, id) = self.dataset(name)?;
        let mut inner = handle.lock();
        let doomed = destroy_check(&inner, id, recursive || dependents, dependents)?;
        crate::clone_ops::destroy_set(&mut inner, &doomed, true)?;
        self.commit(&mut inner, command)?;
        Ok(())
    }

    /// Whether `tarn destroy [-r] NAME` would be refused, without changing anything: front
    /// ends ask before they unmount, so a refused destroy leaves its mounts alone.
    pub fn destroy_dataset_check(&self, name: &str, recursive: bool) -> Result<(), EngineError> {
        self.destroy_targets(name, recursive, false).map(|_| ())
    }

    /// The full names of the datasets `tarn destroy [-r] [-R] NAME` would destroy (a
    /// snapshot destroy: the clones `-R` takes with it), or why it is refused; front ends
    /// unmount them first.
    pub fn destroy_targets(
        &self,
        name: &str,
        recursive: bool,
        dependents: bool,
    ) -> Result<Vec<String>, EngineError> {
        if name.contains('@') {
            let report =
                self.destroy_snapshots_with(name, recursive, true, false, dependents, "")?;
            return Ok(report.datasets);
        }
        if name.contains('#') {
            return self.destroy_bookmark(name, true, "").map(|()| Vec::new());
        }
        let (handle, id) = self.dataset(name)?;
        let inner = handle.lock();
        let doomed = destroy_check(&inner, id, recursive || dependents, dependents)?;
        Ok(doomed
            .into_iter()
            .map(|d| inner.datasets.node(d).name.clone())
            .collect())
    }

    /// `tarn rename OLD NEW`. The caller remounts what moved.
    pub fn rename_dataset(&self, old: &str, new: &str, command: &str) -> Result<(), EngineError> {
        if old.contains('@') || new.contains('@') {
            return self.rename_snapshot(old, new, command);
        }
        let _admin = self.admin();
        let (handle, id) = self.dataset(old)?;
        dsname::validate_name(new)?;
        if pool_of(new) != handle.name {
            return Err(invalid("datasets must remain in the same pool"));
        }
        let mut inner = handle.lock();
        inner.check_writable()?;
        if id == ROOT_DATASET_ID {
            return Err(invalid(
                "operation does not apply to pools (use 'tarn pool import OLD NEW')",
            ));
        }
        if inner.datasets.by_name(new).is_some() {
            return Err(invalid("dataset already exists"));
        }
        if new.starts_with(&format!("{old}/")) {
            return Err(invalid("a dataset cannot be moved under itself"));
        }
        let parent_name = dsname::parent_name(new).unwrap_or(new);
        let new_parent = inner
            .datasets
            .by_name(parent_name)
            .ok_or_else(|| invalid("parent does not exist"))?;
        crate::limits::check_move(&inner.datasets, id, new_parent)?;
        move_dataset(&mut inner, id, new_parent, new)?;
        self.commit(&mut inner, command)?;
        Ok(())
    }

    /// `tarn set PROP=VALUE... NAME`: every assignment is checked before any is applied.
    pub fn set_dataset_props(
        &self,
        name: &str,
        assignments: &[(String, String)],
        command: &str,
    ) -> Result<(), EngineError> {
        if name.contains('@') {
            return self.set_snapshot_props(name, assignments, command);
        }
        let _admin = self.admin();
        let (handle, id) = self.dataset(name)?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let is_volume = inner.datasets.node(id).objset.kind() == ObjsetKind::Volume;
        let mut volsize = None;
        let mut values = Vec::new();
        for (property, value) in assignments {
            check_applies(is_volume, property)?;
            if property == "volsize" {
                let info = inner.volume_info(id)?;
                let size = volume::parse_size_for(value, info.block_size)?;
                if size < info.size {
                    return Err(invalid(
                        "shrinking a volume destroys the data past its new end (use \
                         'tarn set -f volsize=...' to shrink)",
                    ));
                }
                volsize = Some(value.clone());
                continue;
            }
            let property = &match props::owner_prop(property)? {
                Some(owner) => owner.name(),
                None => property.clone(),
            };
            let normalized = validate_prop(property, value)?;
            check_space_prop(&inner, id, property, normalized.as_deref())?;
            values.push((property.clone(), normalized));
        }
        if let Some(size) = volsize {
            if !values.is_empty() {
                return Err(invalid("set 'volsize' on its own"));
            }
            drop(inner);
            return self.set_volsize_locked(name, &size, false, command);
        }
        for (property, value) in &values {
            inner.set_local(id, property, value.as_deref())?;
        }
        self.commit(&mut inner, command)?;
        Ok(())
    }

    /// `tarn inherit [-r] PROP NAME`.
    pub fn inherit_prop(
        &self,
        name: &str,
        property: &str,
        recursive: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        let (handle, id) = self.dataset(name)?;
        if props::owner_prop(property)?.is_some() {
            return Err(EngineError::InvalidProperty(format!(
                "'{property}' property cannot be inherited (set it to 'none' instead)"
            )));
        }
        if !props::is_user_prop(property) {
            let def = props::find(property).ok_or_else(|| {
                EngineError::InvalidProperty(format!(
                    "invalid property '{property}' (valid properties: {})",
                    props::names()
                ))
            })?;
            if def.kind == PropKind::Stat {
                return Err(EngineError::InvalidProperty(format!(
                    "'{property}' is a read-only property"
                )));
            }
            if !def.inherit {
                return Err(EngineError::InvalidProperty(format!(
                    "'{property}' property cannot be inherited (set it to its default instead)"
                )));
            }
        }
        let mut inner = handle.lock();
        inner.check_writable()?;
        let targets = inner.datasets.selected(id, recursive);
        for target in targets {
            inner.set_local(target, property, None)?;
        }
        self.commit(&mut inner, command)?;
        Ok(())
    }

    /// `tarn list` / `tarn get`: the requested properties of the selected datasets, parents
    /// before children.
    pub fn dataset_props(&self, query: &DatasetQuery) -> Result<Vec<DatasetRow>, EngineError> {
        let roots: Vec<String> = if query.names.is_empty() {
            self.pool_names()
        } else {
            query.names.clone()
        };
        let recursive = query.recursive || query.names.is_empty() || query.depth.is_some();
        let mut rows = Vec::new();
        for root in &roots {
            if root.contains(['@', '#']) {
                rows.extend(self.named_rows(root, &query.properties)?);
                continue;
            }
            let (handle, id) = self.dataset(root)?;
            let mut inner = handle.lock();
            let pool_free = pool_free_deflated(&inner);
            let listed = crate::slow::pool_prop(&mut inner, "listsnapshots") == "on";
            let wants = |kind| query.wants(kind, listed);
            // ZFS's special case: `-t snapshot` (or `-t bookmark`) alone on a named dataset
            // without -r or -d lists that dataset's snapshots (bookmarks).
            let only = |kind: &str| query.types.len() == 1 && query.types[0] == kind;
            let plain = !query.names.is_empty() && !query.recursive && query.depth.is_none();
            let snapshots_of_root = plain && only("snapshot");
            for (at, depth) in inner.datasets.subtree(id) {
                if depth > 0 && !recursive {
                    break;
                }
                if query.depth.is_some_and(|max| depth > max) {
                    continue;
                }
                let kind = if inner.datasets.node(at).objset.kind() == ObjsetKind::Volume {
                    "volume"
                } else {
                    "filesystem"
                };
                if wants(kind) {
                    let props = dataset_row_props(&mut inner, at, query, pool_free)?;
                    rows.push(DatasetRow {
                        name: inner.datasets.node(at).name.clone(),
                        props,
                    });
                }
                // A snapshot or bookmark is one level below its dataset (`-d 1` lists the
                // named dataset's snapshots, not its children's), as ZFS counts depth.
                let within = query.depth.is_none_or(|max| depth < max);
                let snapshots_here = wants("snapshot")
                    && ((recursive && within) || (snapshots_of_root && depth == 0));
                if snapshots_here {
                    rows.extend(crate::snapshot_ops::snapshot_rows(
                        &mut inner,
                        at,
                        &query.properties,
                        None,
                    )?);
                }
                let named_root = plain && only("bookmark") && depth == 0;
                if wants("bookmark") && ((recursive && within) || named_root) {
                    let marks = &query.properties;
                    rows.extend(crate::bookmark_ops::bookmark_rows(&inner, at, marks, None)?);
                }
            }
        }
        Ok(rows)
    }

    /// Records whether the front end has `dataset` mounted (the `mounted` property).
    pub fn set_mounted(&self, pool: &str, dataset: DatasetId, mounted: bool) {
        if let Ok(handle) = self.pool(pool) {
            let mut inner = handle.lock();
            if mounted {
                inner.mounted.insert(dataset);
            } else {
                inner.mounted.remove(&dataset);
            }
        }
    }
}

impl Engine {
    /// Records `command` in the pool's history and commits the change in a txg of its own.
    pub(crate) fn commit(&self, inner: &mut Imported, command: &str) -> Result<(), EngineError> {
        inner.history.push(self.history_record(command, false));
        inner.sync()?;
        Ok(())
    }
}

impl Imported {
    /// Sets (`Some`) or removes (`None`) a local property of dataset `id`.
    pub(crate) fn set_local(
        &mut self,
        id: DatasetId,
        property: &str,
        value: Option<&str>,
    ) -> Result<(), EngineError> {
        let Imported {
            pool,
            mos,
            datasets,
            ..
        } = self;
        datasets.set_local(mos.objset(), &pool.reader(), id, property, value)
    }
}

/// The checks of `destroy`: the datasets it would destroy (with `dependents`, the clones
/// depending on their snapshots too).
fn destroy_check(
    inner: &Imported,
    id: DatasetId,
    recursive: bool,
    dependents: bool,
) -> Result<std::collections::BTreeSet<DatasetId>, EngineError> {
    inner.check_writable()?;
    if id == ROOT_DATASET_ID {
        return Err(invalid(
            "operation does not apply to pools (use 'tarn pool destroy')",
        ));
    }
    let subtree = inner.datasets.subtree(id);
    let ids: Vec<DatasetId> = subtree.iter().map(|(d, _)| *d).collect();
    let snapshots = crate::snapshot_ops::snapshot_names(inner, &ids);
    if (subtree.len() > 1 || !snapshots.is_empty()) && !recursive {
        let mut children: Vec<String> = subtree[1..]
            .iter()
            .map(|(d, _)| inner.datasets.node(*d).name.clone())
            .collect();
        children.extend(snapshots);
        return Err(invalid(format!(
            "filesystem has children (use -r to destroy {})",
            children.join(", ")
        )));
    }
    let tree = &inner.datasets;
    let mut doomed: std::collections::BTreeSet<DatasetId> = ids.iter().copied().collect();
    let roots = crate::clone_ops::snapshots_of(tree, &ids);
    if dependents {
        doomed.extend(crate::clone_ops::dependents(tree, &roots));
    } else {
        crate::clone_ops::refuse_dependents(tree, &roots, &doomed, "filesystem")?;
    }
    let held = doomed
        .iter()
        .any(|d| tree.node(*d).snapshots.iter().any(|s| !s.holds.is_empty()));
    if held {
        return Err(invalid("dataset is busy"));
    }
    Ok(doomed)
}

/// Destroys dataset `id` (its children already gone) with its snapshots and a partial
/// receive below it.
pub(crate) fn destroy_with_snapshots(
    inner: &mut Imported,
    id: DatasetId,
) -> Result<(), EngineError> {
    // A partial receive below it (`receive -s`) goes with it.
    for hidden in inner.datasets.hidden_children(id) {
        destroy_hidden(inner, hidden)?;
    }
    let kept = crate::snapshot_ops::destroy_all_snapshots(inner, id)?;
    inner.destroyed.extend(kept);
    destroy_one(inner, id)
}

/// Gives dataset `id` (not the root) the name `new` under `new_parent`, its descendants
/// going with it, in open context (the caller checked the name is free and commits).
pub(crate) fn move_dataset(
    inner: &mut Imported,
    id: DatasetId,
    new_parent: DatasetId,
    new: &str,
) -> Result<(), EngineError> {
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    let reader = pool.reader();
    let old = datasets.node(id).name.clone();
    let old_parent = datasets.node(id).parent.expect("not the root");
    let old_header = datasets.node(old_parent).header;
    let new_header = datasets.node(new_parent).header;
    node::set_child(
        mos.objset(),
        &reader,
        &old_header,
        dsname::leaf_name(&old),
        None,
    )?;
    let object = Some(ObjectId(id.0));
    node::set_child(
        mos.objset(),
        &reader,
        &new_header,
        dsname::leaf_name(new),
        object,
    )?;
    datasets.rename_subtree(id, new_parent, &old, new);
    for (at, _) in datasets.subtree(id) {
        datasets.apply_objset_config(at)?;
    }
    Ok(())
}

/// Destroys the hidden dataset of a receive that did not finish or whose head a forced
/// receive adopted, with its snapshots (a held replication receive takes them at each
/// substream's END: `receive_atomic`) and, first, the hidden datasets below it and the
/// hidden clones of its snapshots; a hidden clone's snapshot structures (its head dead
/// list) go with it.
pub(crate) fn destroy_hidden(inner: &mut Imported, id: DatasetId) -> Result<(), EngineError> {
    assert!(
        crate::datasets::is_hidden(&inner.datasets.node(id).name),
        "only a receive's hidden dataset is destroyed this way"
    );
    // What a held replication receive made below it or from its snapshots goes first
    // (`receive_atomic`): when a destroy of its parent comes before the receive's discard.
    let node = inner.datasets.node(id);
    let roots: Vec<_> = node.snapshots.iter().map(|s| (id, s.id)).collect();
    let mut first = inner.datasets.hidden_children(id);
    first.extend(crate::clone_ops::dependents(&inner.datasets, &roots));
    for below in first {
        let hidden = inner.datasets.contains(below)
            && crate::datasets::is_hidden(&inner.datasets.node(below).name);
        if hidden {
            destroy_hidden(inner, below)?;
        }
    }
    let kept = crate::snapshot_ops::destroy_all_snapshots(inner, id)?;
    inner.destroyed.extend(kept);
    destroy_one(inner, id)
}

/// Destroys the destination a `receive -F` replaces at its END (`receive_new`): it has
/// no snapshots and no children (checked there), so every block it holds beyond a clone's
/// origin is its own.
pub(crate) fn destroy_replaced(inner: &mut Imported, id: DatasetId) -> Result<(), EngineError> {
    let node = inner.datasets.node(id);
    assert!(
        node.snapshots.is_empty() && inner.datasets.children(id).is_empty(),
        "a replaced destination has no snapshots and no children"
    );
    destroy_one(inner, id)
}

/// The blocks the destroy of dataset `id` frees with its node: every block of its object set
/// (a clone's born up to its origin's txg are the origin's: not walked, not freed).
pub(crate) fn destroy_walk(
    inner: &Imported,
    id: DatasetId,
) -> Result<Vec<tarn_format::BlockPtr>, EngineError> {
    let node = inner.datasets.node(id);
    node.head_blocks_born_after(&inner.pool.reader(), node.origin.map(|o| o.txg))
}

/// Frees one dataset (no children left): its committed blocks (walked now, or before by
/// `receive_atomic::read_ahead`) go to the next sync's frees, its node leaves the MOS and
/// the tree.
fn destroy_one(inner: &mut Imported, id: DatasetId) -> Result<(), EngineError> {
    let blocks = match inner.read_ahead.remove(&id) {
        Some(blocks) => blocks,
        None => destroy_walk(inner, id)?,
    };
    let Imported {
        pool,
        mos,
        datasets,
        destroyed,
        mounted,
        ..
    } = inner;
    let reader = pool.reader();
    let node = datasets.node(id);
    if node.objset.unavailable_reason().is_some() {
        // What lay below the lost root stays allocated: about the head's own bytes.
        let leaked = mos.leaked(&reader)? + node.header.referenced;
        mos.set_leaked(&reader, leaked)?;
    }
    let parent = node.parent.expect("not the root");
    let header = node.header;
    let leaf = dsname::leaf_name(&node.name).to_string();
    let parent_header = datasets.node(parent).header;
    node::set_child(mos.objset(), &reader, &parent_header, &leaf, None)?;
    node::free_node(mos.objset(), &reader, ObjectId(id.0), &header)?;
    destroyed.extend(blocks);
    datasets.remove(id);
    mounted.remove(&id);
    Ok(())
}

/// Refuses a quota below what is used, or a reservation larger than what is available.
fn check_space_prop(
    inner: &Imported,
    id: DatasetId,
    property: &str,
    value: Option<&str>,
) -> Result<(), EngineError> {
    let bytes: u64 = value.and_then(|v| v.parse().ok()).unwrap_or(0);
    if bytes == 0 {
        return Ok(());
    }
    let tree = &inner.datasets;
    match property {
        "quota" if bytes < tree.used(id) => {
            Err(invalid("size is less than current used or reserved space"))
        }
        "refquota" if bytes < tree.node(id).header.referenced => {
            Err(invalid("size is less than current referenced space"))
        }
        "reservation" | "refreservation" => {
            let current = tree.size_prop(id, property);
            let avail = tree.available(id, pool_free_deflated(inner));
            if bytes > current && bytes - current > avail {
                Err(invalid("size is greater than available space"))
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

/// Free space of the pool as datasets see it: slop kept back, deflated by parity. The
/// special class is left out (file data goes there only up to `special_small_blocks`), as
/// ZFS leaves it out of a dataset's `available`.
pub(crate) fn pool_free_deflated(inner: &Imported) -> u64 {
    let deflate = crate::datasets::deflate_table(&inner.pool);
    let (size, _) = inner.pool.normal_space();
    let slop = crate::admission::slop(size);
    inner
        .pool
        .allocation()
        .iter()
        .zip(&deflate)
        .enumerate()
        .filter(|(i, _)| !inner.pool.is_special_vdev(*i))
        .map(|(_, (&(vdev_size, allocated), alloc))| {
            // Each data vdev keeps its share of the pool's slop.
            let share = u128::from(slop) * u128::from(vdev_size) / u128::from(size.max(1));
            let usable = vdev_size.saturating_sub(u64::try_from(share).unwrap_or(vdev_size));
            let free = usable.saturating_sub(allocated);
            u64::try_from(u128::from(free) * u128::from(128u64 << 10) / u128::from(*alloc))
                .unwrap_or(u64::MAX)
        })
        .sum()
}

/// The requested properties of dataset `id` (`written` reads the MOS, hence `&mut`).
fn dataset_row_props(
    inner: &mut Imported,
    at: DatasetId,
    query: &DatasetQuery,
    pool_free: u64,
) -> Result<Vec<DatasetProp>, EngineError> {
    let mut props = if query.properties.iter().any(|p| p == "all") {
        all_props(inner, at, pool_free)
    } else {
        let mut props = Vec::with_capacity(query.properties.len());
        for p in &query.properties {
            props.push(match props::owner_prop(p)? {
                Some(owner) => inner.owner_prop_value(at, owner, p)?,
                None => prop_value(inner, at, p, pool_free)?,
            });
        }
        props
    };
    let is_volume = inner.datasets.node(at).objset.kind() == ObjsetKind::Volume;
    for prop in &mut props {
        if prop.property == "written" {
            let bytes = crate::snapshot_ops::written_of_head(inner, at)?;
            *prop = size_stat("written", bytes);
        }
        if let Some(since) = prop.property.strip_prefix("written@") {
            let bytes = crate::snapshot_ops::written_since(inner, at, since, None)?;
            *prop = size_stat(&prop.property.clone(), bytes);
        }
        if is_volume && prop.property == "volsize" {
            // Set at create or by `set volsize`: ZFS shows it as a local value.
            *prop = DatasetProp {
                source: "local".into(),
                source_kind: "local".into(),
                ..size_stat("volsize", inner.volume_info(at)?.size)
            };
        }
        if is_volume && prop.property == "volblocksize" {
            let bytes = u64::from(inner.volume_info(at)?.block_size);
            *prop = size_stat("volblocksize", bytes);
        }
    }
    Ok(props)
}

fn all_props(inner: &Imported, id: DatasetId, pool_free: u64) -> Vec<DatasetProp> {
    let is_volume = inner.datasets.node(id).objset.kind() == ObjsetKind::Volume;
    let applies = |name: &str| {
        if is_volume {
            !props::FILESYSTEM_ONLY.contains(&name) && name != "mounted"
        } else {
            !matches!(name, "volsize" | "volblocksize" | "volmode")
        }
    };
    let mut out: Vec<DatasetProp> = props::DATASET_PROPS
        .iter()
        .filter(|def| applies(def.name))
        .filter_map(|def| prop_value(inner, id, def.name, pool_free).ok())
        .collect();
    for (name, _) in user_props_in_effect(&inner.datasets, id) {
        if let Ok(prop) = prop_value(inner, id, &name, pool_free) {
            out.push(prop);
        }
    }
    out
}

/// User properties set on `id` or inherited by it, sorted by name.
fn user_props_in_effect(tree: &Tree, id: DatasetId) -> std::collections::BTreeMap<String, ()> {
    tree.lineage(id)
        .into_iter()
        .flat_map(|at| tree.node(at).local.keys().cloned().collect::<Vec<_>>())
        .filter(|name| props::is_user_prop(name))
        .map(|name| (name, ()))
        .collect()
}

fn stat_prop(property: &str, value: String, parsable: String) -> DatasetProp {
    DatasetProp {
        property: property.to_string(),
        value,
        parsable,
        source: Source::None.text(),
        source_kind: Source::None.kind_word().to_string(),
    }
}

fn size_stat(property: &str, bytes: u64) -> DatasetProp {
    stat_prop(
        property,
        tarn_base::units::format_size(bytes),
        bytes.to_string(),
    )
}

/// One property of `id` (a statistic, a native property or a user property).
fn prop_value(
    inner: &Imported,
    id: DatasetId,
    property: &str,
    pool_free: u64,
) -> Result<DatasetProp, EngineError> {
    if let Some(stat) = stat_value(inner, id, property, pool_free) {
        return Ok(stat);
    }
    if property.starts_with("written@") {
        // Computed by `dataset_row_props`, which may read the MOS.
        return Ok(size_stat(property, 0));
    }
    let tree = &inner.datasets;
    let def = props::find(property);
    if def.is_none() && !props::is_user_prop(property) {
        return Err(EngineError::Dataset(DatasetError::InvalidProperty(
            format!(
                "invalid property '{property}' (valid properties: {})",
                props::names()
            ),
        )));
    }
    let (value, source) = tree.effective(id, property);
    let (shown, parsable) = match def {
        Some(def) => (
            props::display(def, &value, false),
            props::display(def, &value, true),
        ),
        None => (value.clone(), value),
    };
    Ok(DatasetProp {
        property: property.to_string(),
        value: shown,
        parsable,
        source: source.text(),
        source_kind: source.kind_word().to_string(),
    })
}

/// Names `get` and `list -o` accept for some dataset besides the property table's: the
/// short columns `avail` and `refer`, the resume token and the snapshot-only statistics.
const LISTABLE_EXTRA: &[&str] = &[
    "name",
    "avail",
    "refer",
    "receive_resume_token",
    "userrefs",
    "defer_destroy",
    "clones",
];

/// Whether `property` names a property of some kind of dataset (native, user, a short
/// column name or `written@SNAP`): a row of another kind answers `-` for it, not an error.
pub(crate) fn is_dataset_property(property: &str) -> bool {
    props::find(property).is_some()
        || props::is_user_prop(property)
        || LISTABLE_EXTRA.contains(&property)
        || property.starts_with("written@")
}

/// `filesystem` or `volume`: the `type` of a dataset.
fn kind_of(node: &crate::datasets::Node) -> &'static str {
    if node.objset.kind() == ObjsetKind::Volume {
        "volume"
    } else {
        "filesystem"
    }
}

/// A statistic (`None` if `property` is not one).
fn stat_value(
    inner: &Imported,
    id: DatasetId,
    property: &str,
    pool_free: u64,
) -> Option<DatasetProp> {
    let tree = &inner.datasets;
    let node = tree.node(id);
    let subtree = || tree.subtree(id).into_iter().map(|(d, _)| tree.node(d));
    match property {
        "name" => Some(stat_prop(property, node.name.clone(), node.name.clone())),
        "type" => Some(stat_prop(
            property,
            kind_of(node).into(),
            kind_of(node).into(),
        )),
        // Filled in by `dataset_row_props` for volumes (it may read the object set).
        "volsize" | "volblocksize" => Some(stat_prop(property, "-".into(), "-".into())),
        "creation" => {
            let secs = node.header.creation_time;
            Some(stat_prop(
                property,
                crate::scrub::ctime(secs),
                secs.to_string(),
            ))
        }
        "used" => Some(size_stat(property, tree.used(id))),
        "available" | "avail" => Some(size_stat("available", tree.available(id, pool_free))),
        "referenced" | "refer" => Some(size_stat(property, node.header.referenced)),
        "usedbydataset" => Some(size_stat(property, node.usedbydataset())),
        "usedbychildren" => Some(size_stat(property, tree.usedbychildren(id))),

        "usedbyrefreservation" => Some(size_stat(
            property,
            tree.size_prop(id, "refreservation")
                .saturating_sub(node.usedbydataset()),
        )),
        "logicalused" => Some(size_stat(
            property,
            subtree().map(|n| n.header.logical).sum(),
        )),
        "logicalreferenced" => Some(size_stat(property, node.header.logical)),
        "compressratio" => {
            let logical: u64 = subtree().map(|n| n.header.logical).sum();
            let physical: u64 = subtree().map(|n| n.header.physical).sum();
            let ratio = if physical == 0 {
                1.0
            } else {
                logical as f64 / physical as f64
            };
            let text = format!("{ratio:.2}x");
            Some(stat_prop(property, text.clone(), format!("{ratio:.2}")))
        }
        "origin" => {
            let origin = crate::clone_ops::origin_name(tree, id).unwrap_or_else(|| "-".into());
            Some(stat_prop(property, origin.clone(), origin))
        }
        "mounted" => {
            let yes = if inner.mounted.contains(&id) {
                "yes"
            } else {
                "no"
            };
            Some(stat_prop(property, yes.into(), yes.into()))
        }
        _ => snapshot_stat(tree, id, property),
    }
}

/// The statistics a dataset has because of its snapshots (`None` if `property` is none).
/// `written` is completed by `dataset_row_props`, which may read the MOS.
fn snapshot_stat(tree: &Tree, id: DatasetId, property: &str) -> Option<DatasetProp> {
    let node = tree.node(id);
    match property {
        "receive_resume_token" => {
            let token = node.local.get(crate::send_ops::TOKEN_KEY);
            let token = token.map_or("-".to_string(), Clone::clone);
            Some(stat_prop(property, token.clone(), token))
        }
        "usedbysnapshots" => Some(size_stat(property, node.header.snap.used)),
        "guid" => {
            let guid = node.header.guid.0.to_string();
            Some(stat_prop(property, guid.clone(), guid))
        }
        "written" => Some(size_stat(property, node.header.referenced)),
        "createtxg" => {
            let txg = node.header.creation_txg.0.to_string();
            Some(stat_prop(property, txg.clone(), txg))
        }
        "snapshot_count" | "filesystem_count" => {
            let count = crate::limits::count(tree, id, property).to_string();
            Some(stat_prop(property, count.clone(), count))
        }
        // Snapshot-only properties (holds): a dash on a dataset, as in ZFS.
        "userrefs" | "defer_destroy" | "clones" => {
            Some(stat_prop(property, "-".into(), "-".into()))
        }
        _ => None,
    }
}
