//! The daemon's mount table: which datasets are mounted through tarn-fuse, keyed by full
//! dataset name.
//!
//! ```text
//!  pool create / import / cache re-import  -> mount_pool   (clean stale, then mount each spec)
//!  pool export / destroy                   -> unmount_pool (children first; -f detaches)
//!  tarn create / destroy / mount / unmount -> handle       (one dataset, or a subtree)
//!  daemon shutdown                         -> unmount_all  (busy mounts are detached)
//! ```
//! `TARN_ALTROOT` in the daemon's environment is ZFS's altroot for every pool: mountpoints
//! are taken relative to it (`/tank` mounts at `$TARN_ALTROOT/tank`), so that tests and
//! rescue work never mount over the host's own directories.
//!
//! A failure to mount never fails the pool verb that caused it: the pool is imported and the
//! reply carries a notice (ZFS does the same: `cannot mount '/tank': directory is not
//! empty`). The table lock is held across a mount or unmount, so two requests never race
//! for one mountpoint; it is never held while waiting for the engine's pool lock from
//! another thread that itself needs the table.
//!
//! Datasets an admin took down (`tarn unmount`, `receive -u`) are *held*: the table's own
//! mounts of a whole pool (after an import, a clone, a rollback, a receive) pass them by,
//! as ZFS leaves such a dataset unmounted until `mount` names it or `mount -a` runs; the
//! hold goes with `mount`, `mount -a`, a destroy, and the pool's export (a rename carries
//! it to the new name). The hold set's mutex is never held with the table's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tarn_engine::{Engine, EngineError, MountSpec};
use tarn_fuse::{FuseError, Mount};
use tarn_proto::{MountRow, ReplyPayload, Request, Response};

/// Mounted datasets of every imported pool.
#[derive(Debug)]
pub struct MountTable {
    engine: Arc<Engine>,
    altroot: Option<PathBuf>,
    mounts: Mutex<BTreeMap<String, Mount>>,
    /// Datasets held unmounted (module docs).
    held: Mutex<BTreeSet<String>>,
}

/// The environment variable naming the altroot of every mount.
pub const ALTROOT_ENV: &str = "TARN_ALTROOT";

/// The pool a dataset name belongs to.
fn pool_of(name: &str) -> &str {
    name.split(['/', '@']).next().unwrap_or(name)
}

/// Whether `name` is `root` or below it.
fn within(name: &str, root: &str) -> bool {
    name == root
        || name
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn mount_notice(spec: &MountSpec, error: &FuseError) -> String {
    format!(
        "cannot mount '{}' at {}: {error}",
        spec.name,
        spec.mountpoint.display()
    )
}

impl MountTable {
    /// An empty table over `engine`.
    #[must_use]
    pub fn new(engine: Arc<Engine>) -> MountTable {
        let altroot = std::env::var_os(ALTROOT_ENV)
            .filter(|root| !root.is_empty())
            .map(PathBuf::from);
        MountTable {
            engine,
            altroot,
            mounts: Mutex::new(BTreeMap::new()),
            held: Mutex::new(BTreeSet::new()),
        }
    }

    fn held(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds every dataset at or below `root` that is not mounted now (`receive -u`).
    pub fn hold_unmounted_within(&self, root: &str) {
        let Ok(specs) = self.engine.mount_specs(pool_of(root)) else {
            return;
        };
        let mounted: Vec<String> = self.lock().keys().cloned().collect();
        self.held().extend(
            specs
                .into_iter()
                .map(|spec| spec.name)
                .filter(|name| within(name, root) && !mounted.contains(name)),
        );
    }

    /// The mounted dataset holding absolute `path` (the deepest mountpoint above it) and
    /// the path within that dataset (`tarn project`).
    pub fn locate(&self, path: &Path) -> Option<(String, String)> {
        let mounts = self.lock();
        let (name, mount) = mounts
            .iter()
            .filter(|(_, mount)| path.starts_with(mount.mountpoint()))
            .max_by_key(|(_, mount)| mount.mountpoint().components().count())?;
        let within = path.strip_prefix(mount.mountpoint()).ok()?;
        Some((name.clone(), within.to_str()?.to_string()))
    }

    /// Each mounted dataset's FUSE requests by opcode since it was mounted (the metrics).
    #[must_use]
    pub fn op_stats(&self) -> Vec<(String, Vec<tarn_fuse::OpStat>)> {
        let mounts = self.lock();
        mounts
            .iter()
            .filter(|(_, mount)| mount.is_mounted())
            .map(|(name, mount)| (name.clone(), mount.op_stats()))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Mount>> {
        self.mounts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the kernel to drop every name, negative entry and attribute it cached of the
    /// mount of dataset `name`: a `tarn` command (`project`) changed files there through the
    /// engine, behind the kernel's back. Sent from the daemon's request thread, never from a
    /// FUSE request (tarn-fuse's lock order). A dataset not mounted has nothing cached.
    pub fn invalidate(&self, name: &str) -> Result<(), FuseError> {
        let mounts = self.lock();
        match mounts.get(name) {
            Some(mount) if mount.is_mounted() => mount.invalidate_all().map(|_| ()),
            _ => Ok(()),
        }
    }

    /// Mounts one dataset (after lazily unmounting a stale tarn mount left at its
    /// mountpoint by a daemon that died). Already mounted: nothing to do.
    fn mount_spec(&self, spec: &MountSpec) -> Result<(), FuseError> {
        let spec = &self.rooted(spec);
        let mut mounts = self.lock();
        if mounts.contains_key(&spec.name) {
            return Ok(());
        }
        tarn_fuse::clean_stale(&spec.mountpoint)?;
        let mount = tarn_fuse::mount(Arc::clone(&self.engine), spec)?;
        mounts.insert(spec.name.clone(), mount);
        self.engine.set_mounted(&spec.pool, spec.dataset, true);
        Ok(())
    }

    /// Tells the engine that dataset `name` is no longer mounted (its `mounted` property).
    fn record_unmounted(&self, name: &str) {
        if let Ok((pool, dataset)) = self.engine.find_dataset(name) {
            self.engine.set_mounted(&pool, dataset, false);
        }
    }

    /// `spec` with its mountpoint under the altroot, if there is one.
    fn rooted(&self, spec: &MountSpec) -> MountSpec {
        let mut spec = spec.clone();
        if let Some(root) = &self.altroot {
            let relative = spec
                .mountpoint
                .strip_prefix("/")
                .unwrap_or(&spec.mountpoint);
            spec.mountpoint = root.join(relative);
        }
        spec
    }

    /// Mounts every dataset of `pool` that should be mounted; returns one notice line per
    /// dataset that could not be.
    pub fn mount_pool(&self, pool: &str) -> Vec<String> {
        if !tarn_fuse::fuse_available() {
            // A host without FUSE still serves pools; the log says why nothing is mounted.
            eprintln!("datasets of '{pool}' not mounted: {}", FuseError::NoDevice);
            return Vec::new();
        }
        let mut specs = match self.engine.mount_specs(pool) {
            Ok(specs) => specs,
            Err(error) => return vec![format!("cannot mount datasets of '{pool}': {error}")],
        };
        let held = self.held().clone();
        specs.retain(|spec| !held.contains(&spec.name));
        // Parents before children, so a child's mountpoint is created inside its parent.
        specs.sort_by_key(|spec| spec.mountpoint.components().count());
        specs
            .iter()
            .filter_map(|spec| {
                self.mount_spec(spec)
                    .err()
                    .map(|e| mount_notice(&self.rooted(spec), &e))
            })
            .collect()
    }

    /// Unmounts every dataset for which `select` says yes, children first. A busy mount is
    /// refused unless `force`, which detaches it lazily; the first refusal is returned after
    /// the others were tried, and what they unmounted is mounted again (a refused export,
    /// destroy or remount leaves every mount as it was).
    fn unmount_where(&self, force: bool, select: impl Fn(&str) -> bool) -> Result<(), FuseError> {
        let mut mounts = self.lock();
        let mut names: Vec<String> = mounts.keys().filter(|n| select(n)).cloned().collect();
        names.sort_by_key(|name| {
            let depth = mounts
                .get(name)
                .map_or(0, |m| m.mountpoint().components().count());
            std::cmp::Reverse(depth)
        });
        let mut refused = None;
        let mut taken = Vec::new();
        for name in names {
            let Some(mut mount) = mounts.remove(&name) else {
                continue;
            };
            match mount.unmount() {
                Ok(()) => {
                    self.record_unmounted(&name);
                    taken.push(name);
                }
                Err(_) if force => {
                    mount.detach();
                    self.record_unmounted(&name);
                }
                Err(error) => {
                    mounts.insert(name, mount);
                    refused.get_or_insert(error);
                }
            }
        }
        drop(mounts);
        match refused {
            None => Ok(()),
            Some(error) => {
                self.remount(&taken);
                Err(error)
            }
        }
    }

    /// Mounts datasets `names` again (parents first), as their specs now say; a dataset
    /// that cannot be is logged.
    fn remount(&self, names: &[String]) {
        let mut pools: Vec<&str> = names.iter().map(|n| pool_of(n)).collect();
        pools.sort_unstable();
        pools.dedup();
        for pool in pools {
            let Ok(mut specs) = self.engine.mount_specs(pool) else {
                continue;
            };
            specs.retain(|spec| names.contains(&spec.name));
            specs.sort_by_key(|spec| spec.mountpoint.components().count());
            for spec in &specs {
                if let Err(e) = self.mount_spec(spec) {
                    eprintln!("{}", mount_notice(&self.rooted(spec), &e));
                }
            }
        }
    }

    /// Unmounts every dataset of `pool` (before export or destroy).
    pub fn unmount_pool(&self, pool: &str, force: bool) -> Result<(), FuseError> {
        self.unmount_where(force, |name| pool_of(name) == pool)?;
        self.held().retain(|name| pool_of(name) != pool);
        Ok(())
    }

    /// Unmounts everything, detaching what is busy (daemon shutdown).
    pub fn unmount_all(&self) {
        let _ = self.unmount_where(true, |_| true);
    }

    /// Memory the mounts' session threads hold for requests: each thread's buffer as far as
    /// requests of up to [`tarn_fuse::MAX_WRITE`] bytes fill it.
    #[must_use]
    pub fn fuse_buffers(&self) -> u64 {
        let per_mount =
            tarn_fuse::SESSION_THREADS as u64 * (u64::from(tarn_fuse::MAX_WRITE) + 4096);
        self.lock().len() as u64 * per_mount
    }

    /// What is mounted where, sorted by dataset name.
    #[must_use]
    pub fn rows(&self) -> Vec<MountRow> {
        self.lock()
            .iter()
            .map(|(name, mount)| MountRow {
                name: name.clone(),
                mountpoint: mount.mountpoint().display().to_string(),
            })
            .collect()
    }

    /// Unmounts `name` and its descendants where mounted (a receive writes their heads).
    pub fn unmount_dataset(&self, name: &str) -> Result<(), FuseError> {
        self.unmount_where(false, |n| n == name || within(n, name))
    }

    /// The dataset verbs that involve mounts, run before (`destroy`, `unmount`) or after
    /// (`create`, `mount`) the engine's part. `None` for requests that are not about mounts.
    pub fn before(&self, request: &Request) -> Option<Response> {
        if let Some(refused) = self.check_new_mountpoint(request) {
            return Some(refused);
        }
        if let Some((verb, root)) = remounted(request) {
            let result = self.unmount_where(false, |n| within(n, root));
            if result.is_ok()
                && let Request::DatasetRename { old, new, .. } = request
            {
                self.carry_holds(old, new);
            }
            return result.err().map(|e| refusal(verb, root, &e));
        }
        match request {
            // Snapshots are never mounted; `-d` of a held one is not a refusal.
            Request::DatasetDestroy {
                name, defer: true, ..
            } if name.contains('@') => None,
            Request::DatasetDestroy {
                name,
                recursive,
                force,
                dependents,
                ..
            } => {
                // A destroy the engine would refuse must not unmount anything first; what it
                // would destroy (with -R clones elsewhere too) is unmounted.
                let doomed = match self.engine.destroy_targets(name, *recursive, *dependents) {
                    Ok(doomed) => doomed,
                    Err(error) => return Some(engine_refusal("destroy", name, &error)),
                };
                let result = self.unmount_where(*force, |n| doomed.iter().any(|d| d == n));
                self.held().retain(|n| !doomed.contains(n));
                result.err().map(|e| refusal("destroy", name, &e))
            }
            Request::Rollback {
                name,
                recursive,
                dependents,
                force,
            } => {
                // The mount must show the snapshot's content: unmount now, mount after; the
                // clones -R destroys are unmounted too.
                let clones = match self.engine.rollback_targets(name, *recursive, *dependents) {
                    Ok(clones) => clones,
                    Err(error) => return Some(engine_refusal("rollback to", name, &error)),
                };
                let dataset = name.split('@').next().unwrap_or(name);
                let result = self.unmount_where(false, |n| n == dataset);
                if let Err(e) = result {
                    return Some(refusal("rollback to", name, &e));
                }
                let result = self.unmount_where(*force, |n| clones.iter().any(|c| c == n));
                result.err().map(|e| refusal("rollback to", name, &e))
            }
            Request::Mount { name, all } => Some(self.mount_request(name.as_deref(), *all)),
            Request::Unmount { target, all, force } => {
                Some(self.unmount_request(target.as_deref(), *all, *force))
            }
            _ => None,
        }
    }

    /// `set mountpoint=PATH` of a dataset that mounts automatically is refused before
    /// anything changes when PATH cannot take the mount (not empty, a file, mounted on),
    /// rather than setting it and leaving the dataset unmounted.
    fn check_new_mountpoint(&self, request: &Request) -> Option<Response> {
        let Request::DatasetSet {
            name, assignments, ..
        } = request
        else {
            return None;
        };
        let (_, value) = assignments.iter().find(|(p, _)| p == "mountpoint")?;
        if !value.starts_with('/') || !tarn_fuse::fuse_available() {
            return None;
        }
        let specs = self.engine.mount_specs(pool_of(name)).ok()?;
        let spec = specs.into_iter().find(|spec| spec.name == *name)?;
        let target = self.rooted(&MountSpec {
            mountpoint: PathBuf::from(value),
            ..spec
        });
        let here = self.lock().get(name).map(|m| m.mountpoint().to_path_buf());
        if here.as_deref() == Some(target.mountpoint.as_path()) {
            return None;
        }
        let error = tarn_fuse::check_mountpoint(&target.mountpoint).err()?;
        Some(error_reply(
            "set property for",
            name,
            &format!("{error}; use an empty or new directory, 'legacy' or 'none'"),
        ))
    }

    /// After the engine's part (`succeeded` or not): mount a created dataset, or mount again
    /// what `before` unmounted for a rename or a property change. Returns notices.
    pub fn after(&self, request: &Request, succeeded: bool) -> Vec<String> {
        if let Some((_, root)) = remounted(request) {
            return self.mount_pool(pool_of(root));
        }
        if let Request::Rollback { name, .. } = request {
            return self.mount_pool(pool_of(name.split('@').next().unwrap_or(name)));
        }
        if let Request::Clone { name, .. } = request {
            return if succeeded {
                self.mount_pool(pool_of(name))
            } else {
                Vec::new()
            };
        }
        if let Some(root) = access_time_changed(request) {
            return if succeeded {
                self.refresh_access_time_flags(root)
            } else {
                Vec::new()
            };
        }
        let Request::DatasetCreate { name, parents, .. } = request else {
            return Vec::new();
        };
        if !succeeded || !tarn_fuse::fuse_available() {
            return Vec::new();
        }
        // With -p the parents may be new too: mount them first, so that a child's
        // mountpoint directory is made inside its parent's filesystem, not beneath it.
        let mut chain = vec![name.as_str()];
        while *parents
            && let Some((parent, _)) = chain[chain.len() - 1].rsplit_once('/')
            && parent.contains('/')
        {
            chain.push(parent);
        }
        chain
            .iter()
            .rev()
            .filter_map(|dataset| match self.engine.dataset_mount_spec(dataset) {
                Ok(Some(spec)) => self
                    .mount_spec(&spec)
                    .err()
                    .map(|e| mount_notice(&self.rooted(&spec), &e)),
                _ => None,
            })
            .collect()
    }

    /// Sets the access-time flags of every mount at or below `root` to the datasets'
    /// current `atime`/`relatime` (no unmount: a busy mount changes too). Returns notices.
    fn refresh_access_time_flags(&self, root: &str) -> Vec<String> {
        let mounts = self.lock();
        mounts
            .iter()
            .filter(|(name, _)| within(name, root))
            .filter_map(|(name, mount)| {
                let result = match self.engine.dataset_mount_spec(name) {
                    Ok(Some(spec)) => mount.set_access_time_flags(&spec).err(),
                    _ => None,
                };
                result.map(|e| format!("cannot change the access-time flags of '{name}': {e}"))
            })
            .collect()
    }

    fn mount_request(&self, name: Option<&str>, all: bool) -> Response {
        if all {
            self.held().clear();
            let notices: Vec<String> = self
                .engine
                .pool_names()
                .iter()
                .flat_map(|pool| self.mount_pool(pool))
                .collect();
            return notices_reply(notices);
        }
        let Some(name) = name else {
            return Response::Ok(ReplyPayload::Mounts(self.rows()));
        };
        let spec = match self.engine.dataset_mount_spec(name) {
            Ok(Some(spec)) => spec,
            Ok(None) => {
                return error_reply("mount", name, "no mountpoint set (mountpoint=none)");
            }
            Err(error) => return engine_refusal("mount", name, &error),
        };
        self.held().remove(name);
        match self.mount_spec(&spec) {
            Ok(()) => Response::Ok(ReplyPayload::Unit),
            Err(error) => refusal("mount", name, &error),
        }
    }

    /// A rename of `old` to `new`: what was held below `old` is held below `new`.
    fn carry_holds(&self, old: &str, new: &str) {
        let mut held = self.held();
        let moved: Vec<String> = held.iter().filter(|n| within(n, old)).cloned().collect();
        for name in moved {
            held.remove(&name);
            held.insert(format!("{new}{}", &name[old.len()..]));
        }
    }

    fn unmount_request(&self, target: Option<&str>, all: bool, force: bool) -> Response {
        let before: BTreeSet<String> = self.lock().keys().cloned().collect();
        let result = self.unmount_target(target, all, force);
        // What this request took down is held, even when it failed part way.
        let after: BTreeSet<String> = self.lock().keys().cloned().collect();
        self.held().extend(before.difference(&after).cloned());
        result
    }

    fn unmount_target(&self, target: Option<&str>, all: bool, force: bool) -> Response {
        let result = match target {
            _ if all => self.unmount_where(force, |_| true),
            Some(target) if target.starts_with('/') => {
                let path = Path::new(target);
                let names: Vec<String> = self
                    .lock()
                    .iter()
                    .filter(|(_, m)| m.mountpoint() == path)
                    .map(|(n, _)| n.clone())
                    .collect();
                if names.is_empty() {
                    return error_reply("unmount", target, "not a tarn mountpoint");
                }
                self.unmount_where(force, |n| names.iter().any(|m| m == n))
            }
            Some(name) => {
                if !self.lock().contains_key(name) {
                    return error_reply("unmount", name, "not currently mounted");
                }
                self.unmount_where(force, |n| n == name)
            }
            None => return Response::error("missing dataset name or mountpoint"),
        };
        match result {
            Ok(()) => Response::Ok(ReplyPayload::Unit),
            Err(error) => refusal("unmount", target.unwrap_or("-a"), &error),
        }
    }
}

/// Dataset properties whose change needs the dataset mounted again.
const REMOUNT_PROPERTIES: &[&str] = &[
    "mountpoint",
    "canmount",
    "readonly",
    "exec",
    "setuid",
    "devices",
    "acltype",
    "xattr",
];

/// The verb and the subtree a request unmounts before and mounts again after: a rename,
/// or a change of a property in [`REMOUNT_PROPERTIES`] (inherited by the whole subtree).
fn remounted(request: &Request) -> Option<(&'static str, &str)> {
    let remounts = |property: &str| REMOUNT_PROPERTIES.contains(&property);
    // `canmount=noauto` (or `on`) only decides what mounts automatically; as in ZFS, a
    // mounted dataset stays mounted. `off` unmounts it.
    let set_remounts = |(property, value): &(String, String)| {
        remounts(property) && (property != "canmount" || value == "off")
    };
    match request {
        // A snapshot is never mounted: its rename leaves the mounts alone.
        Request::DatasetRename { old, .. } if !old.contains('@') => Some(("rename", old)),
        Request::DatasetSet {
            name, assignments, ..
        } if assignments.iter().any(set_remounts) => Some(("set", name)),
        Request::DatasetInherit { name, property, .. } if remounts(property) => {
            Some(("inherit", name))
        }
        _ => None,
    }
}

/// The subtree whose access-time properties (`atime`, `relatime`) a request changes; the
/// server reads them at every access, only the mount flags need telling.
fn access_time_changed(request: &Request) -> Option<&str> {
    let changes = |property: &str| property == "atime" || property == "relatime";
    match request {
        Request::DatasetSet {
            name, assignments, ..
        } if assignments.iter().any(|(p, _)| changes(p)) => Some(name),
        Request::DatasetInherit { name, property, .. } if changes(property) => Some(name),
        _ => None,
    }
}

/// A reply of notices (or a plain success when there are none).
#[must_use]
pub fn notices_reply(notices: Vec<String>) -> Response {
    if notices.is_empty() {
        Response::Ok(ReplyPayload::Unit)
    } else {
        Response::Ok(ReplyPayload::Notice(notices))
    }
}

fn error_reply(verb: &str, object: &str, message: &str) -> Response {
    Response::Error(tarn_proto::ErrorReply {
        message: message.to_string(),
        verb: Some(verb.to_string()),
        object: Some(object.to_string()),
    })
}

fn refusal(verb: &str, object: &str, error: &FuseError) -> Response {
    error_reply(verb, object, &error.to_string())
}

fn engine_refusal(verb: &str, object: &str, error: &EngineError) -> Response {
    error_reply(verb, object, &error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_nest_by_slash_only() {
        assert!(within("tank/a/b", "tank/a"));
        assert!(within("tank/a", "tank/a"));
        assert!(!within("tank/ab", "tank/a"));
        assert_eq!(pool_of("tank/a/b"), "tank");
        assert_eq!(pool_of("tank"), "tank");
    }
}
