//! Per-user, group and project space (ZFS's `zfs userspace`, `userquota@`, `userused@`):
//! quotas from the dataset's local properties, usage from the POSIX layer's used-by
//! counts (tarn_posix `usedby`), admission of writes, and the upgrade scan at import.
//!
//! Quotas are local properties keyed by numeric id (`userquota@1000` -> bytes), never
//! inherited; the front end turns names into ids. A write is admitted by the POSIX layer
//! against committed usage plus what it admitted since the last sync; when that pending
//! part alone would refuse it, [`Imported::admit_owner`] syncs first so the refusal is
//! decided on committed counts (what ZFS does by replacing dirty estimates with real sizes).

use tarn_dataset::props::{OwnerProp, OwnerSpace, owner_prop};
use tarn_posix::{Fs, Owner, OwnerKind, Pending, PosixError, Quotas, Usage};

use crate::dataset_ops::DatasetProp;
use crate::datasets::Node;
use crate::{DatasetId, Engine, EngineError, Imported};

/// One line of `tarn userspace`: an owner with usage or a quota.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserspaceRow {
    /// The uid, gid or project id.
    pub id: u32,
    /// Allocated bytes charged to it (as of the last sync).
    pub used: u64,
    /// Its byte quota (`None`: none).
    pub quota: Option<u64>,
    /// Inodes it owns.
    pub objused: u64,
    /// Its inode quota.
    pub objquota: Option<u64>,
}

fn kind_of(space: OwnerSpace) -> OwnerKind {
    match space {
        OwnerSpace::User => OwnerKind::User,
        OwnerSpace::Group => OwnerKind::Group,
        OwnerSpace::Project => OwnerKind::Project,
    }
}

/// The per-owner quotas set on `node`.
pub(crate) fn quotas_of(node: &Node) -> Quotas {
    let mut quotas = Quotas::default();
    for (name, value) in &node.local {
        if !name.contains('@') {
            continue;
        }
        let (Ok(Some(prop)), Ok(limit)) = (owner_prop(name), value.parse::<u64>()) else {
            continue;
        };
        let owner = Owner {
            kind: kind_of(prop.space),
            id: prop.id,
        };
        match (prop.used, prop.objects) {
            (false, false) => quotas.bytes.insert(owner, limit),
            (false, true) => quotas.objects.insert(owner, limit),
            _ => None,
        };
    }
    quotas
}

impl Imported {
    /// A view of `dataset`'s filesystem for reading counts.
    fn with_fs<R>(
        &mut self,
        dataset: DatasetId,
        f: impl FnOnce(&mut Fs<'_>) -> Result<R, PosixError>,
    ) -> Result<R, EngineError> {
        let config = self.datasets.fs_config(dataset);
        let Imported { pool, datasets, .. } = self;
        let reader = pool.reader();
        let objset = &mut datasets.node_mut(dataset).objset;
        Ok(f(&mut Fs::new(
            objset,
            &reader,
            tarn_posix::Timespec::default(),
            config,
        ))?)
    }

    /// Before a write of `len` bytes: syncs when what was admitted since the last sync
    /// would make some owner's quota refuse it (see the module doc).
    pub(crate) fn admit_owner(&mut self, dataset: DatasetId, len: u64) -> Result<(), EngineError> {
        let node = self.datasets.node(dataset);
        if node.pending.bytes.is_empty() {
            return Ok(());
        }
        let quotas = quotas_of(node);
        if quotas.bytes.is_empty() {
            return Ok(());
        }
        let pending: Pending = node.pending.clone();
        if self.with_fs(dataset, |fs| fs.quota_needs_sync(&quotas, &pending, len))? {
            self.sync()?;
        }
        Ok(())
    }

    /// Gives every filesystem formatted without used-by counts its counts (a scan; at
    /// import of a writable pool, before anything changes). A dataset that holds no
    /// filesystem, or whose filesystem cannot be read, is left as it is: the import goes on
    /// and its `userspace` says the counts are not there.
    pub(crate) fn upgrade_usedby(&mut self) {
        let scale = crate::datasets::used_scale(&crate::datasets::deflate_table(&self.pool));
        for id in self.datasets.all() {
            if self.datasets.node(id).receiving {
                continue;
            }
            let _ = self.with_fs(id, |fs| fs.upgrade_usedby(scale));
        }
    }

    /// `userused@`, `userquota@` and the rest for `tarn get`.
    pub(crate) fn owner_prop_value(
        &mut self,
        dataset: DatasetId,
        prop: OwnerProp,
        property: &str,
    ) -> Result<DatasetProp, EngineError> {
        let value = if prop.used {
            let owner = Owner {
                kind: kind_of(prop.space),
                id: prop.id,
            };
            let usage = self.with_fs(dataset, |fs| fs.usage(owner))?;
            Some(if prop.objects {
                usage.objects
            } else {
                usage.bytes
            })
        } else {
            let node = self.datasets.node(dataset);
            node.local
                .get(&prop.name())
                .and_then(|v| v.parse::<u64>().ok())
        };
        Ok(DatasetProp {
            property: property.to_string(),
            value: prop.display(value, false),
            parsable: prop.display(value, true),
            source: "local".into(),
            source_kind: "local".into(),
        })
    }
}

impl Engine {
    /// `tarn userspace` / `groupspace` / `projectspace`: every owner of `space` in dataset
    /// `name` with usage or a quota, by id.
    pub fn userspace(
        &self,
        name: &str,
        space: OwnerSpace,
    ) -> Result<Vec<UserspaceRow>, EngineError> {
        let (pool, id) = self.find_dataset(name)?;
        let handle = self.pool(&pool)?;
        let mut inner = handle.lock();
        let kind = kind_of(space);
        let used = inner.with_fs(id, |fs| fs.usage_list(kind))?;
        let quotas = quotas_of(inner.datasets.node(id));
        let mut rows: std::collections::BTreeMap<u32, UserspaceRow> = used
            .into_iter()
            .map(|(owner, usage): (u32, Usage)| {
                let row = UserspaceRow {
                    id: owner,
                    used: usage.bytes,
                    quota: None,
                    objused: usage.objects,
                    objquota: None,
                };
                (owner, row)
            })
            .collect();
        let blank = |id| UserspaceRow {
            id,
            used: 0,
            quota: None,
            objused: 0,
            objquota: None,
        };
        for (owner, limit) in quotas.bytes.iter().filter(|(o, _)| o.kind == kind) {
            rows.entry(owner.id)
                .or_insert_with(|| blank(owner.id))
                .quota = Some(*limit);
        }
        for (owner, limit) in quotas.objects.iter().filter(|(o, _)| o.kind == kind) {
            rows.entry(owner.id)
                .or_insert_with(|| blank(owner.id))
                .objquota = Some(*limit);
        }
        Ok(rows.into_values().collect())
    }
}
