//! Space and inodes used by each user, group and project (ZFS's `userused@`, `groupused@`,
//! `projectused@`, `userobjused@`), the project id of an inode, and the admission checks
//! behind `userquota@` and friends.
//!
//! ```text
//!  master node: "userused" -> U, "groupused" -> G, "projectused" -> P   (type-40 ZAPs)
//!  U: "<uid>" -> (bytes u64, inodes u64)      bytes = allocated bytes of the inode's
//!  G: "<gid>" -> (bytes u64, inodes u64)      object as its committed dnode counts them
//!  P: "<project>" -> (bytes u64, inodes u64)  (all copies), scaled by [`UsedScale`]
//! ```
//! The counts change only at sync ([`UsedByHook`], a [`SyncHook`]): the object layer reports
//! every inode whose committed dnode changed (bonus: owner and project; used bytes), and the
//! hook moves the difference between owners in the same txg. So the counts are exact after
//! any crash, chown moves an inode's whole usage at once, and nothing in open context
//! touches the three ZAPs. An entry falling to (0, 0) is removed.
//!
//! Quotas are checked in open context ([`Fs::with_quotas`]): a write is refused (EDQUOT)
//! when an owner's committed bytes plus what was admitted since the last sync ([`Pending`])
//! plus the write pass that owner's quota; an inode is refused when committed plus pending
//! inodes reach the object quota. The engine syncs first when pending counts alone would
//! refuse, as ZFS replaces dirty estimates by real sizes before it says EDQUOT.
//!
//! Filesystems formatted before these objects existed get them from [`Fs::upgrade_usedby`],
//! a scan of every inode's committed dnode, run on a clean object set (at import).

use std::collections::BTreeMap;

use tarn_base::ObjectId;
use tarn_objects::{ObjectError, ObjectSet, SyncHook, UsedChange, UsedState};
use tarn_zio::BlockStore;

use crate::fs::{Fs, MASTER, Result};
use crate::inode::{self, FLAG_PROJECT_INHERIT, Inode, TYPE_USEDBY};
use crate::{Attr, FileKind, Ino, PosixError};

/// Whose usage a count is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OwnerKind {
    /// A uid.
    User,
    /// A gid.
    Group,
    /// A project id.
    Project,
}

impl OwnerKind {
    /// All three, in master-node order.
    pub const ALL: [OwnerKind; 3] = [OwnerKind::User, OwnerKind::Group, OwnerKind::Project];

    fn master_key(self) -> &'static str {
        match self {
            OwnerKind::User => "userused",
            OwnerKind::Group => "groupused",
            OwnerKind::Project => "projectused",
        }
    }

    fn index(self) -> usize {
        match self {
            OwnerKind::User => 0,
            OwnerKind::Group => 1,
            OwnerKind::Project => 2,
        }
    }
}

/// A user, group or project.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner {
    /// Which id space.
    pub kind: OwnerKind,
    /// The uid, gid or project id.
    pub id: u32,
}

/// What one owner uses in a filesystem (as of the last sync).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Allocated bytes of the owner's inodes.
    pub bytes: u64,
    /// The owner's inodes.
    pub objects: u64,
}

/// How allocated bytes become charged bytes: `used * numerator / denominator` per inode.
/// The engine passes 128 KiB over what 128 KiB of data allocates on the pool's first
/// top-level vdev (parity and padding), so a raidz pool charges about the data written, as
/// ZFS deflates. It must never change for a pool (the first vdev stays), or counts drift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsedScale {
    /// Multiplier.
    pub numerator: u64,
    /// Divisor (never zero).
    pub denominator: u64,
}

impl UsedScale {
    /// Charges allocated bytes as they are.
    pub const ONE: UsedScale = UsedScale {
        numerator: 1,
        denominator: 1,
    };

    /// The charged size of `used` allocated bytes.
    #[must_use]
    pub fn apply(self, used: u64) -> u64 {
        let scaled =
            u128::from(used) * u128::from(self.numerator) / u128::from(self.denominator.max(1));
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }
}

/// The per-owner quotas of a dataset (`userquota@`, `userobjquota@`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quotas {
    /// Byte limits.
    pub bytes: BTreeMap<Owner, u64>,
    /// Inode limits.
    pub objects: BTreeMap<Owner, u64>,
}

impl Quotas {
    /// No quota at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty() && self.objects.is_empty()
    }
}

/// What was admitted since the last sync (written bytes, created inodes), by owner; the
/// engine clears it when the sync has replaced it by committed counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    /// Bytes written.
    pub bytes: BTreeMap<Owner, u64>,
    /// Inodes created.
    pub objects: BTreeMap<Owner, u64>,
}

impl Pending {
    /// Forgets everything (after a sync).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.objects.clear();
    }
}

/// The owners an inode is charged to.
pub(crate) fn owners_of(inode: &Inode) -> [Owner; 3] {
    [
        Owner {
            kind: OwnerKind::User,
            id: inode.uid,
        },
        Owner {
            kind: OwnerKind::Group,
            id: inode.gid,
        },
        Owner {
            kind: OwnerKind::Project,
            id: inode.project,
        },
    ]
}

fn is_inode_type(object_type: u8) -> bool {
    [
        inode::TYPE_DIRECTORY,
        inode::TYPE_FILE,
        inode::TYPE_SYMLINK,
        inode::TYPE_SPECIAL,
    ]
    .contains(&object_type)
}

fn encode_usage(usage: Usage) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&usage.bytes.to_le_bytes());
    out[8..].copy_from_slice(&usage.objects.to_le_bytes());
    out
}

fn decode_usage(zap: ObjectId, bytes: &[u8]) -> std::result::Result<Usage, ObjectError> {
    let word = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    match (bytes.len(), word(0), word(8)) {
        (16, Some(bytes), Some(objects)) => Ok(Usage { bytes, objects }),
        _ => Err(ObjectError::Corrupt {
            object: zap,
            why: "used-by entry is not two u64s",
            source: None,
        }),
    }
}

fn lookup_usage(
    os: &mut ObjectSet,
    store: &dyn BlockStore,
    zap: ObjectId,
    id: u32,
) -> std::result::Result<Usage, ObjectError> {
    match os.zap_lookup(store, zap, id.to_string())? {
        Some(bytes) => decode_usage(zap, &bytes),
        None => Ok(Usage::default()),
    }
}

/// Adds signed deltas to one owner's entry (removed when it falls to nothing).
fn apply_usage(
    os: &mut ObjectSet,
    store: &dyn BlockStore,
    zap: ObjectId,
    id: u32,
    delta: (i128, i128),
) -> std::result::Result<(), ObjectError> {
    let old = lookup_usage(os, store, zap, id)?;
    let add = |value: u64, delta: i128| {
        u64::try_from((i128::from(value) + delta).max(0)).unwrap_or(u64::MAX)
    };
    let new = Usage {
        bytes: add(old.bytes, delta.0),
        objects: add(old.objects, delta.1),
    };
    if new == Usage::default() {
        if old != Usage::default() {
            os.zap_remove(store, zap, id.to_string())?;
        }
        return Ok(());
    }
    os.zap_update(store, zap, id.to_string(), &encode_usage(new))
}

/// The sync hook that keeps the used-by ZAPs of one filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsedByHook {
    zaps: [ObjectId; 3],
    scale: UsedScale,
}

impl UsedByHook {
    /// The hook of the filesystem in `os`; `None` when `os` holds no filesystem or one whose
    /// used-by objects do not exist yet (see [`Fs::upgrade_usedby`]).
    pub fn load(
        os: &mut ObjectSet,
        store: &dyn BlockStore,
        scale: UsedScale,
    ) -> Result<Option<UsedByHook>> {
        let mut zaps = [ObjectId(0); 3];
        for kind in OwnerKind::ALL {
            match os.zap_lookup_u64(store, MASTER, kind.master_key()) {
                Ok(Some(zap)) => zaps[kind.index()] = ObjectId(zap),
                Ok(None) | Err(ObjectError::NoSuchObject { .. }) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Some(UsedByHook { zaps, scale }))
    }
}

/// Adds what `state` charges (sign +1 or -1) to `deltas`.
fn charge(
    deltas: &mut BTreeMap<Owner, (i128, i128)>,
    scale: UsedScale,
    state: Option<&UsedState>,
    sign: i128,
) {
    let Some(state) = state.filter(|s| is_inode_type(s.object_type)) else {
        return;
    };
    // Bonus bytes from disk are input: one that does not decode is charged to nobody.
    let Ok(inode) = Inode::decode(0, &state.bonus) else {
        return;
    };
    for owner in owners_of(&inode) {
        let entry = deltas.entry(owner).or_default();
        entry.0 += sign * i128::from(scale.apply(state.used_bytes));
        entry.1 += sign;
    }
}

impl SyncHook for UsedByHook {
    fn is_deferred(&self, object: ObjectId) -> bool {
        self.zaps.contains(&object)
    }

    fn account(
        &mut self,
        os: &mut ObjectSet,
        store: &dyn BlockStore,
        changes: &[UsedChange],
    ) -> std::result::Result<(), ObjectError> {
        let mut deltas: BTreeMap<Owner, (i128, i128)> = BTreeMap::new();
        for change in changes {
            charge(&mut deltas, self.scale, change.before.as_ref(), -1);
            charge(&mut deltas, self.scale, change.after.as_ref(), 1);
        }
        for (owner, delta) in deltas {
            if delta != (0, 0) {
                apply_usage(os, store, self.zaps[owner.kind.index()], owner.id, delta)?;
            }
        }
        Ok(())
    }
}

impl<'a> Fs<'a> {
    /// Checks writes and creates against `quotas`, counting what it admits in `pending`.
    #[must_use]
    pub fn with_quotas(mut self, quotas: &'a Quotas, pending: &'a mut Pending) -> Self {
        self.quotas = Some((quotas, pending));
        self
    }
}

impl Fs<'_> {
    /// Creates the three used-by ZAPs (a new filesystem: nothing to count yet).
    pub(crate) fn usedby_format(&mut self) -> Result<[ObjectId; 3]> {
        let mut zaps = [ObjectId(0); 3];
        for kind in OwnerKind::ALL {
            let zap = self.os.zap_create(self.store, TYPE_USEDBY)?;
            self.os
                .zap_insert_u64(self.store, MASTER, kind.master_key(), zap.0)?;
            zaps[kind.index()] = zap;
        }
        Ok(zaps)
    }

    /// Gives a filesystem formatted without used-by objects its three ZAPs, filled by a scan
    /// of every inode's committed dnode. Returns whether it did (false: already there). The
    /// object set must have no changes since its last sync (the scan reads committed sizes).
    pub fn upgrade_usedby(&mut self, scale: UsedScale) -> Result<bool> {
        self.root()?;
        if UsedByHook::load(self.os, self.store, scale)?.is_some() {
            return Ok(false);
        }
        let deltas = self.scan_usedby(scale)?;
        let zaps = self.usedby_format()?;
        for (owner, delta) in deltas {
            apply_usage(
                self.os,
                self.store,
                zaps[owner.kind.index()],
                owner.id,
                delta,
            )?;
        }
        Ok(true)
    }

    /// Sets the used-by counts to a scan of every inode's committed dnode, whatever they
    /// held: a received filesystem's counts are the sender's, in the sender's allocation
    /// sizes (`tarn receive` calls this once the received object set is synced).
    pub fn recount_usedby(&mut self, scale: UsedScale) -> Result<()> {
        let Some(hook) = UsedByHook::load(self.os, self.store, scale)? else {
            self.upgrade_usedby(scale)?;
            return Ok(());
        };
        let deltas = self.scan_usedby(scale)?;
        for zap in hook.zaps {
            loop {
                let (entries, _) = self.os.zap_list(self.store, zap, None, 256)?;
                if entries.is_empty() {
                    break;
                }
                for (key, _) in entries {
                    self.os.zap_remove(self.store, zap, key)?;
                }
            }
        }
        for (owner, delta) in deltas {
            let zap = hook.zaps[owner.kind.index()];
            apply_usage(self.os, self.store, zap, owner.id, delta)?;
        }
        Ok(())
    }

    /// Every owner's charge from a scan of every inode's committed dnode.
    fn scan_usedby(&mut self, scale: UsedScale) -> Result<BTreeMap<Owner, (i128, i128)>> {
        if self.os.dirty_bytes() != 0 {
            return Err(PosixError::Invalid(
                "used-by scan needs a synced object set",
            ));
        }
        let mut deltas: BTreeMap<Owner, (i128, i128)> = BTreeMap::new();
        let mut at = ObjectId(0);
        while let Some(object) = self.os.next_object(self.store, at)? {
            at = object;
            let info = self.os.object_info(self.store, object)?;
            if !is_inode_type(info.object_type) {
                continue;
            }
            let state = UsedState {
                object_type: info.object_type,
                bonus: self.os.bonus(self.store, object)?,
                used_bytes: info.used_bytes,
            };
            charge(&mut deltas, scale, Some(&state), 1);
        }
        Ok(deltas)
    }

    /// For checkers, on an object set with no changes since its sync: `None` when the
    /// used-by counts equal a scan of the inodes (or do not exist), else what differs.
    pub fn usedby_mismatch(&mut self, scale: UsedScale) -> Result<Option<String>> {
        if UsedByHook::load(self.os, self.store, scale)?.is_none() {
            return Ok(None);
        }
        let mut counted = BTreeMap::new();
        for kind in OwnerKind::ALL {
            for (id, usage) in self.usage_list(kind)? {
                counted.insert(Owner { kind, id }, usage);
            }
        }
        let clamp = |v: i128| u64::try_from(v.max(0)).unwrap_or(u64::MAX);
        let scanned: BTreeMap<Owner, Usage> = self
            .scan_usedby(scale)?
            .into_iter()
            .filter(|(_, delta)| *delta != (0, 0))
            .map(|(owner, (bytes, objects))| {
                let usage = Usage {
                    bytes: clamp(bytes),
                    objects: clamp(objects),
                };
                (owner, usage)
            })
            .collect();
        Ok((counted != scanned).then(|| {
            format!("used-by counts {counted:?} differ from a scan of the inodes {scanned:?}")
        }))
    }

    fn usedby_zap(&mut self, kind: OwnerKind) -> Result<ObjectId> {
        match UsedByHook::load(self.os, self.store, UsedScale::ONE)? {
            Some(hook) => Ok(hook.zaps[kind.index()]),
            None => Err(PosixError::NotSupported),
        }
    }

    /// What `owner` uses as of the last sync (EOPNOTSUPP before [`Fs::upgrade_usedby`]).
    pub fn usage(&mut self, owner: Owner) -> Result<Usage> {
        let zap = self.usedby_zap(owner.kind)?;
        Ok(lookup_usage(self.os, self.store, zap, owner.id)?)
    }

    /// Every owner of `kind` with a count, by id.
    pub fn usage_list(&mut self, kind: OwnerKind) -> Result<Vec<(u32, Usage)>> {
        let zap = self.usedby_zap(kind)?;
        let (entries, _) = self.os.zap_list_bytes(self.store, zap, None, usize::MAX)?;
        let mut out = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            let id = std::str::from_utf8(&key)
                .ok()
                .and_then(|k| k.parse::<u32>().ok())
                .ok_or_else(|| inode::corrupt(zap.0, "used-by key is not an id"))?;
            out.push((id, decode_usage(zap, &value)?));
        }
        out.sort_unstable_by_key(|(id, _)| *id);
        Ok(out)
    }

    /// Whether a write of `len` bytes by an owner with pending bytes would be refused only
    /// because of what is pending (the engine then syncs first).
    pub fn quota_needs_sync(
        &mut self,
        quotas: &Quotas,
        pending: &Pending,
        len: u64,
    ) -> Result<bool> {
        for (owner, pending_bytes) in &pending.bytes {
            if let Some(limit) = quotas.bytes.get(owner) {
                let used = match self.usage(*owner) {
                    Ok(usage) => usage.bytes,
                    Err(PosixError::NotSupported) => return Ok(false),
                    Err(e) => return Err(e),
                };
                if used.saturating_add(*pending_bytes).saturating_add(len) > *limit {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Admits `count` more of bytes (`objects` false) or inodes for `owners`: EDQUOT if one
    /// would pass its quota; otherwise counts them as pending.
    pub(crate) fn admit(&mut self, owners: [Owner; 3], count: u64, objects: bool) -> Result<()> {
        let limits: Vec<(Owner, u64, u64)> = match &self.quotas {
            Some((quotas, pending)) => {
                let (limits, pending) = if objects {
                    (&quotas.objects, &pending.objects)
                } else {
                    (&quotas.bytes, &pending.bytes)
                };
                owners
                    .iter()
                    .filter_map(|o| {
                        let waiting = pending.get(o).copied().unwrap_or(0);
                        limits.get(o).map(|limit| (*o, *limit, waiting))
                    })
                    .collect()
            }
            None => return Ok(()),
        };
        for (owner, limit, waiting) in limits {
            let usage = match self.usage(owner) {
                Ok(usage) => usage,
                // No counts (a filesystem the upgrade scan could not reach): nothing to
                // enforce against, and a write must not fail for want of them.
                Err(PosixError::NotSupported) => return Ok(()),
                Err(e) => return Err(e),
            };
            let used = if objects { usage.objects } else { usage.bytes };
            if used.saturating_add(waiting).saturating_add(count) > limit {
                return Err(PosixError::QuotaExceeded);
            }
        }
        if let Some((_, pending)) = &mut self.quotas {
            let map = if objects {
                &mut pending.objects
            } else {
                &mut pending.bytes
            };
            for owner in owners {
                *map.entry(owner).or_default() += count;
            }
        }
        Ok(())
    }

    /// Admits `len` bytes written to `inode`.
    pub(crate) fn admit_bytes(&mut self, inode: &Inode, len: u64) -> Result<()> {
        self.admit(owners_of(inode), len, false)
    }

    /// ZFS's rule for rename and link into a project-inherit directory: the inode must
    /// already have that directory's project, else EXDEV (so `mv` copies, and the copies
    /// take the project: a tree cannot slip past a project quota by being moved in).
    pub(crate) fn check_project_move(&mut self, ino: Ino, newparent: Ino) -> Result<()> {
        let dir = self.inode(newparent)?;
        if dir.flags & FLAG_PROJECT_INHERIT != 0 && self.inode(ino)?.project != dir.project {
            return Err(PosixError::CrossProject);
        }
        Ok(())
    }

    /// [`Fs::check_project_move`] for a rename of `ino` from `parent` to `newparent`, and
    /// of `swapped` the other way (RENAME_EXCHANGE).
    pub(crate) fn check_rename_projects(
        &mut self,
        ino: Ino,
        parent: Ino,
        newparent: Ino,
        swapped: Option<Ino>,
    ) -> Result<()> {
        self.check_project_move(ino, newparent)?;
        match swapped {
            Some(other) => self.check_project_move(other, parent),
            None => Ok(()),
        }
    }

    /// The project id of `ino` and whether new entries of the directory inherit it.
    pub fn project(&mut self, ino: Ino) -> Result<(u32, bool)> {
        let inode = self.inode(ino)?;
        Ok((inode.project, inode.flags & FLAG_PROJECT_INHERIT != 0))
    }

    /// Sets the project id of `ino` (its usage moves to the project at the next sync) and,
    /// for a directory, whether new entries inherit it (ZFS's `chattr -p ID [+P]`).
    pub fn set_project(&mut self, ino: Ino, project: u32, inherit: bool) -> Result<Attr> {
        let mut inode = self.inode(ino)?;
        if inherit && inode.kind != FileKind::Directory {
            return Err(PosixError::Invalid(
                "project inheritance on a non-directory",
            ));
        }
        inode.project = project;
        // Only the inherit bit is this verb's; the others (the checksum cache's) stay.
        inode.flags &= !FLAG_PROJECT_INHERIT;
        if inherit {
            inode.flags |= FLAG_PROJECT_INHERIT;
        }
        inode.ctime = self.now;
        self.put(ino, &inode)?;
        self.record(|| crate::intent::LogOp::SetProject {
            ino,
            project,
            inherit,
        });
        self.attr_of(ino, &inode)
    }
}
