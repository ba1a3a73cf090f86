//! What `status`, `list`, `get` and `import` report, computed from a pool's state. These are
//! the engine's own types; the daemon converts them to protocol messages.

use tarn_base::format_size;
use tarn_format::label::{VdevKind, VdevTree};
use tarn_pool::{CreateSpec, Discovered, Pool, TopLayout};
use tarn_vdev::{Child, ChildKind, Health, Layout, Leaf, LeafState, TopVdev};

use crate::props::{POOL_PROPS, PropAccess};

/// One row of the status config table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VdevNode {
    /// Name as shown: pool name, `raidz2-0`, `mirror-1`, or a device path.
    pub name: String,
    /// Kind (`root`, `disk`, `mirror`, `raidz2`, `spare`).
    pub kind: String,
    /// State: ONLINE, DEGRADED, FAULTED, OFFLINE, UNAVAIL, REMOVED, AVAIL, INUSE.
    pub state: String,
    /// Read errors.
    pub read: u64,
    /// Write errors.
    pub write: u64,
    /// Checksum errors.
    pub cksum: u64,
    /// Slow I/Os counted by the slow-device detector (`status -s`).
    pub slow: u64,
    /// Note after the counters (`was /dev/sdb`, `(resilvering)`, why unavailable).
    pub note: Option<String>,
    /// GUID (0 for grouping rows and layouts not yet created).
    pub guid: u64,
    /// Allocated and total bytes of a top-level vdev, and of the pool at the root.
    pub space: Option<(u64, u64)>,
    /// A leaf's device: its physical size (0 while no device is attached) and the smallest
    /// device that can replace it (`status -j`'s `phys_space` and `rep_dev_size`).
    pub device_sizes: Option<(u64, u64)>,
    /// Children.
    pub children: Vec<VdevNode>,
}

/// `zpool status` of one pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolStatus {
    /// Pool name.
    pub name: String,
    /// Pool GUID.
    pub guid: u64,
    /// The last committed txg.
    pub txg: u64,
    /// The scan record behind `scan` (`None` if the pool never scanned).
    pub scan_progress: Option<crate::ScanProgress>,
    /// The running pass of that scan: its start (Unix seconds) and the bytes issued before
    /// it (a pass starts at the scan's start, resume and each import).
    pub scan_pass: Option<(u64, u64)>,
    /// Overall state.
    pub state: String,
    /// What is wrong, if anything.
    pub status: Option<String>,
    /// What to do about it.
    pub action: Option<String>,
    /// Message page (`TARN-NNNN`).
    pub see: Option<String>,
    /// Scan line.
    pub scan: Option<String>,
    /// The vdev tree.
    pub config: VdevNode,
    /// Hot spares.
    pub spares: Vec<VdevNode>,
    /// Files with permanent errors (paths).
    pub errors: Vec<String>,
}

/// `zpool list` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSummary {
    /// Pool name.
    pub name: String,
    /// Pool GUID.
    pub guid: u64,
    /// Raw size of all top-level vdevs (parity included, as ZFS reports it).
    pub size: u64,
    /// Allocated bytes.
    pub allocated: u64,
    /// Free bytes.
    pub free: u64,
    /// Fragmentation of the free space, percent.
    pub fragmentation: u64,
    /// Allocated percentage.
    pub capacity: u64,
    /// Health.
    pub health: String,
}

/// A property value with its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PropValue {
    /// Object (pool) name.
    pub name: String,
    /// Property name.
    pub property: String,
    /// Exact value (`-p`).
    pub value: String,
    /// Human value (`10.5G`).
    pub display: String,
    /// `default`, `local` or `-`.
    pub source: String,
}

/// A pool that could be imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Importable {
    /// Pool name.
    pub name: String,
    /// Pool GUID.
    pub guid: u64,
    /// ONLINE, DEGRADED or UNAVAIL.
    pub state: String,
    /// What is wrong, if anything.
    pub status: Option<String>,
    /// What import will do.
    pub action: String,
    /// Message page (`TARN-NNNN`) when the pool cannot be imported as it is.
    pub see: Option<String>,
    /// The vdev tree with found/missing devices.
    pub config: VdevNode,
}

fn health_name(health: Health) -> &'static str {
    match health {
        Health::Online => "ONLINE",
        Health::Degraded => "DEGRADED",
        Health::Faulted => "FAULTED",
        Health::Unavail => "UNAVAIL",
    }
}

fn top_name(top: &TopVdev) -> String {
    match top.layout() {
        Layout::Disk => top.leaves().first().map(|l| l.path()).unwrap_or_default(),
        layout => layout.display_name(top.width(), top.id().0),
    }
}

/// The kind `status -j` names: `draid<parity>` without the rest of its geometry (the name
/// carries that).
fn kind_name(kind: VdevKind) -> String {
    match kind {
        VdevKind::Draid(c) => format!("draid{}", c.parity),
        kind => kind.name(),
    }
}

fn leaf_node(leaf: &Leaf) -> VdevNode {
    let stats = leaf.stats().snapshot();
    let state = leaf.state();
    let note = match state {
        LeafState::Unavail => Some("cannot open".to_string()),
        LeafState::Removed => Some("was removed".to_string()),
        _ if leaf.is_resilvering() && leaf.is_usable() => Some("(resilvering)".to_string()),
        _ => None,
    };
    VdevNode {
        name: leaf.path(),
        kind: "disk".into(),
        state: state.name().to_ascii_uppercase(),
        read: stats.read_errors,
        write: stats.write_errors,
        cksum: stats.checksum_errors,
        slow: leaf.io_stats().snapshot().slow_ios,
        note,
        guid: leaf.guid().0,
        space: None,
        // A distributed spare is space on its siblings, not a device.
        device_sizes: (!leaf.is_distributed_spare()).then(|| {
            (
                leaf.device().map_or(0, |d| d.size_bytes()),
                tarn_format::label::min_device_size(leaf.asize()),
            )
        }),
        children: Vec::new(),
    }
}

/// A child position: a leaf row, or `replacing-N` / `spare-N` with its two leaves.
fn child_node(index: usize, child: &Child) -> VdevNode {
    let members = child.members();
    let (prefix, kind) = match child.kind() {
        ChildKind::Leaf => return leaf_node(&members[0]),
        ChildKind::Replacing => ("replacing", "replacing"),
        ChildKind::Spare => ("spare", "spare"),
    };
    let state = if !child.is_readable() {
        "UNAVAIL"
    } else if members.iter().all(|l| l.is_usable()) {
        "ONLINE"
    } else {
        "DEGRADED"
    };
    VdevNode {
        name: format!("{prefix}-{index}"),
        kind: kind.into(),
        state: state.into(),
        read: 0,
        write: 0,
        cksum: 0,
        slow: 0,
        note: None,
        guid: child.guid().0,
        space: None,
        device_sizes: None,
        children: members.iter().map(|l| leaf_node(l)).collect(),
    }
    .with_slow_summed()
}

/// The row of top-level vdev `top`, which has `space` (allocated, total bytes).
fn top_node(top: &TopVdev, space: Option<(u64, u64)>) -> VdevNode {
    let positions = top.children();
    if top.layout() == Layout::Disk
        && let Some(child) = positions.first()
    {
        let mut node = child_node(top.id().0 as usize, child);
        if child.kind() != ChildKind::Leaf {
            node.state = health_name(top.health()).into();
        }
        node.space = space;
        return node;
    }
    let children: Vec<VdevNode> = positions
        .iter()
        .enumerate()
        .map(|(i, c)| child_node(i, c))
        .collect();
    VdevNode {
        name: top_name(top),
        kind: kind_name(top.layout().kind()),
        state: health_name(top.health()).into(),
        read: 0,
        write: 0,
        cksum: 0,
        slow: 0,
        note: None,
        guid: top.guid().0,
        space,
        device_sizes: None,
        children,
    }
    .with_slow_summed()
}

impl VdevNode {
    /// This interior node with SLOW the sum of its children's (ZFS counts slow I/Os at
    /// every level; tarn times leaves only).
    fn with_slow_summed(mut self) -> VdevNode {
        self.slow = self.children.iter().map(|c| c.slow).sum();
        self
    }
}

/// Overall pool health: the worst of its top-level vdevs, or SUSPENDED.
#[must_use]
pub fn pool_health(pool: &Pool) -> String {
    if pool.suspended().is_some() {
        return "SUSPENDED".into();
    }
    // A lost log device degrades the pool (ZFS: the pool stays usable, without its log
    // device); a lost data vdev makes it unavailable.
    let worst = pool
        .tops()
        .iter()
        .enumerate()
        .map(|(i, t)| match t.health() {
            Health::Faulted | Health::Unavail if pool.is_log_vdev(i) => Health::Degraded,
            health => health,
        })
        .max_by_key(|h| match h {
            Health::Online => 0,
            Health::Degraded => 1,
            Health::Faulted => 2,
            Health::Unavail => 3,
        });
    health_name(worst.unwrap_or(Health::Online)).into()
}

/// The `status:`, `action:` and `see:` of a pool, in ZFS's order of priority: suspended,
/// devices missing, data corrupted, device errors, devices taken offline.
fn problem(
    pool: &Pool,
    state: &str,
    children: &[VdevNode],
    errlog_count: usize,
) -> (Option<String>, Option<&'static str>, Option<&'static str>) {
    let all: Vec<std::sync::Arc<Leaf>> = pool.tops().iter().flat_map(|t| t.leaves()).collect();
    let leaves = || all.iter();
    let offline = leaves().any(|l| l.state() == LeafState::Offline);
    let missing = leaves().any(|l| !l.is_usable() && l.state() != LeafState::Offline);
    if let Some(why) = pool.suspended() {
        (
            Some(format!("The pool is suspended: {why}.")),
            Some(concat!(
                "Make the devices available again, then run 'tarn pool clear' to\n",
                "write the failed txg again and resume; 'tarn pool export -f' ends it."
            )),
            Some("TARN-0004"),
        )
    } else if state == "DEGRADED" && missing {
        (
            Some(
                concat!(
                    "One or more devices could not be used. Sufficient replicas exist for\n",
                    "the pool to continue functioning in a degraded state."
                )
                .to_string(),
            ),
            Some("Make the device available again, then export and import the pool."),
            Some("TARN-0002"),
        )
    } else if errlog_count > 0 {
        (
            Some(
                concat!(
                    "One or more devices has experienced an error resulting in data\n",
                    "corruption. Applications may be affected."
                )
                .to_string(),
            ),
            Some(concat!(
                "Restore the file in question if possible. Otherwise restore the\n",
                "entire pool from backup."
            )),
            Some("TARN-0005"),
        )
    } else {
        device_problem(children, offline)
    }
}

/// The lower-priority problems of [`problem`]: device errors, then devices taken offline.
fn device_problem(
    children: &[VdevNode],
    offline: bool,
) -> (Option<String>, Option<&'static str>, Option<&'static str>) {
    let errors_seen = children
        .iter()
        .flat_map(|c| std::iter::once(c).chain(c.children.iter()))
        .any(|n| n.read + n.write + n.cksum > 0);
    if errors_seen {
        (
            Some(
                concat!(
                    "One or more devices has experienced an unrecoverable error. An\n",
                    "attempt was made to correct the error. Applications are unaffected."
                )
                .to_string(),
            ),
            Some(concat!(
                "Determine if the device needs to be replaced, and clear the errors\n",
                "using 'tarn pool clear'."
            )),
            Some("TARN-0003"),
        )
    } else if offline {
        (
            Some(
                concat!(
                    "One or more devices has been taken offline by the administrator.\n",
                    "Sufficient replicas exist for the pool to continue functioning in a\n",
                    "degraded state."
                )
                .to_string(),
            ),
            Some("Online the device using 'tarn pool online'."),
            Some("TARN-0006"),
        )
    } else {
        (None, None, None)
    }
}

/// `zpool status` for `pool`, whose error log has `errlog_count` entries. Problems are
/// reported in ZFS's order: suspended, devices missing, data corrupted, device errors,
/// devices taken offline.
#[must_use]
pub fn pool_status(name: &str, pool: &Pool, errlog_count: usize) -> PoolStatus {
    let state = pool_health(pool);
    let usage = pool.usage();
    let mut children: Vec<VdevNode> = Vec::new();
    let mut logs: Vec<VdevNode> = Vec::new();
    let mut specials: Vec<VdevNode> = Vec::new();
    for (index, top) in pool.tops().iter().enumerate() {
        let list = if pool.is_log_vdev(index) {
            &mut logs
        } else if pool.is_special_vdev(index) {
            &mut specials
        } else {
            &mut children
        };
        let space = usage.get(index).map(|u| (u.allocated, u.size));
        list.push(top_node(top, space));
    }
    let (status, action, see) = problem(pool, &state, &children, errlog_count);
    push_classes(&mut children, specials, logs);
    let caches = pool.caches();
    if !caches.is_empty() {
        // A cache device's state never changes the pool's: it holds nothing the pool needs.
        children.push(class_node(
            "cache",
            caches.iter().map(|c| leaf_node(c)).collect(),
        ));
    }
    let action = action.map(str::to_string);
    let see = see.map(str::to_string);
    let config = VdevNode {
        name: name.to_string(),
        kind: "root".into(),
        state: state.clone(),
        read: 0,
        write: 0,
        cksum: 0,
        slow: 0,
        note: None,
        // The root vdev's GUID is the pool's, as in ZFS.
        guid: pool.guid().0,
        space: Some(
            usage
                .iter()
                .fold((0, 0), |(a, t), u| (a + u.allocated, t + u.size)),
        ),
        device_sizes: None,
        children,
    }
    .with_slow_summed();
    let spares = spare_nodes(pool);
    PoolStatus {
        name: name.to_string(),
        guid: pool.guid().0,
        txg: pool.last_uberblock().map_or(0, |ub| ub.txg.0),
        scan_progress: None,
        scan_pass: None,
        state,
        status,
        action,
        see,
        scan: None,
        config,
        spares,
        errors: Vec::new(),
    }
}

/// The spares section: dRAID's distributed spares first (ZFS lists them before the
/// traditional ones), each AVAIL or INUSE.
fn spare_nodes(pool: &Pool) -> Vec<VdevNode> {
    let distributed = pool
        .tops()
        .iter()
        .flat_map(|t| t.distributed_spares().to_vec());
    distributed
        .chain(pool.spares().iter().cloned())
        .map(|s| {
            let mut node = leaf_node(&s);
            if pool
                .tops()
                .iter()
                .any(|t| t.distributed_spare_in_use(s.guid()))
                || (!s.is_distributed_spare() && pool.spare_in_use(s.guid()))
            {
                node.state = "INUSE".into();
                node.note = Some("currently in use".to_string());
            } else if s.is_usable() {
                node.state = "AVAIL".into();
            }
            node
        })
        .collect()
}

/// `zpool list` row for `pool`.
#[must_use]
pub fn summary(name: &str, pool: &Pool) -> PoolSummary {
    let usage = pool.usage();
    let size: u64 = usage.iter().map(|u| u.size).sum();
    let allocated: u64 = usage.iter().map(|u| u.allocated).sum();
    let free = size - allocated;
    let weighted: u64 = usage
        .iter()
        .map(|u| u.fragmentation * (u.size - u.allocated))
        .sum();
    let fragmentation = weighted.checked_div(free).unwrap_or(0);
    PoolSummary {
        name: name.to_string(),
        guid: pool.guid().0,
        size,
        allocated,
        free,
        fragmentation,
        capacity: (allocated * 100).checked_div(size).unwrap_or(0),
        health: pool_health(pool),
    }
}

/// Block cloning's pool properties (tarn-space `brt`), exact value and display: the space
/// of the cloned blocks, counted once (`bcloneused`); what their clones would have taken as
/// copies (`bclonesaved`); ZFS's `bcloneratio`, (used + saved) / used with two decimals,
/// 1.00 when nothing is cloned.
fn clone_prop(name: &str, pool: &Pool) -> (String, String) {
    let brt = pool.space().brt();
    match name {
        "bcloneused" => (brt.used().to_string(), format_size(brt.used())),
        "bclonesaved" => (brt.saved().to_string(), format_size(brt.saved())),
        _ => {
            let hundredths = ((brt.used() + brt.saved()) * 100)
                .checked_div(brt.used())
                .unwrap_or(100);
            let ratio = format!("{}.{:02}", hundredths / 100, hundredths % 100);
            (ratio.clone(), format!("{ratio}x"))
        }
    }
}

/// What the engine recorded as `leaked` in the pool's properties: set when a destroy could
/// not find every block it freed (`datasets`, "Unavailable datasets"); 0 when absent.
fn leaked(local: &[(String, String)]) -> u64 {
    let stored = local.iter().find(|(n, _)| n == crate::mos::LEAKED);
    stored.and_then(|(_, v)| v.parse().ok()).unwrap_or(0)
}

/// Every pool property with value and source; `local` holds the values set by the admin.
#[must_use]
pub fn properties(name: &str, pool: &Pool, local: &[(String, String)]) -> Vec<PropValue> {
    let summary = summary(name, pool);
    let ashift = pool.tops().iter().map(|t| t.ashift()).max().unwrap_or(0);
    let size_prop = |value: u64| (value.to_string(), format_size(value));
    POOL_PROPS
        .iter()
        .map(|def| {
            let computed = match def.name {
                "size" => Some(size_prop(summary.size)),
                "free" => Some(size_prop(summary.free)),
                "allocated" => Some(size_prop(summary.allocated)),
                "capacity" => Some((
                    summary.capacity.to_string(),
                    format!("{}%", summary.capacity),
                )),
                "fragmentation" => Some((
                    summary.fragmentation.to_string(),
                    format!("{}%", summary.fragmentation),
                )),
                "health" => Some((summary.health.clone(), summary.health.clone())),
                "guid" => Some((summary.guid.to_string(), summary.guid.to_string())),
                "version" => Some(("-".into(), "-".into())),
                "dedupratio" => Some(("1.00".into(), "1.00x".into())),
                "bcloneused" | "bclonesaved" | "bcloneratio" => Some(clone_prop(def.name, pool)),
                "readonly" => {
                    let value = if pool.readonly() { "on" } else { "off" };
                    Some((value.into(), value.into()))
                }
                "expandsize" => Some(("-".into(), "-".into())),
                // Space deletes gave back that the next txgs make allocatable again.
                "freeing" => Some(size_prop(pool.freeing_bytes())),
                "leaked" => Some(size_prop(leaked(local))),
                _ => None,
            };
            let (value, display, source) = if let Some((value, display)) = computed {
                (value, display, "-".to_string())
            } else if let Some((_, value)) = local.iter().find(|(n, _)| n == def.name) {
                (value.clone(), value.clone(), "local".to_string())
            } else if def.name == "ashift" {
                (
                    ashift.to_string(),
                    ashift.to_string(),
                    "default".to_string(),
                )
            } else {
                let source = if def.access == PropAccess::ReadOnly {
                    "-"
                } else {
                    "default"
                };
                (
                    def.default.to_string(),
                    def.default.to_string(),
                    source.to_string(),
                )
            };
            PropValue {
                name: name.to_string(),
                property: def.name.to_string(),
                value,
                display,
                source,
            }
        })
        .collect()
}

/// A node of an importable pool's tree. `found` gives a leaf's device path now and whether
/// the device is big enough for it (a truncated device is found but cannot be used).
fn tree_node(tree: &VdevTree, found: &dyn Fn(&VdevTree) -> Option<(String, bool)>) -> VdevNode {
    let (state, children) = match tree.kind {
        VdevKind::Disk => {
            let ok = found(tree).is_some_and(|(_, fits)| fits);
            (
                if ok { "ONLINE" } else { "UNAVAIL" }.to_string(),
                Vec::new(),
            )
        }
        _ => {
            let children: Vec<VdevNode> =
                tree.children.iter().map(|c| tree_node(c, found)).collect();
            let missing = children.iter().filter(|c| c.state != "ONLINE").count();
            let tolerated = match tree.kind {
                VdevKind::Mirror => children.len().saturating_sub(1),
                VdevKind::Raidz { parity } => usize::from(parity),
                VdevKind::Draid(c) => usize::from(c.parity),
                _ => 0,
            };
            let state = if missing == 0 {
                "ONLINE"
            } else if missing <= tolerated {
                "DEGRADED"
            } else {
                "UNAVAIL"
            };
            (state.to_string(), children)
        }
    };
    let name = match tree.kind {
        // Where the device is now; the label's path is only where it was last time.
        VdevKind::Disk => found(tree).map_or_else(|| tree.path.clone(), |(path, _)| path),
        VdevKind::Raidz { parity } => format!("raidz{parity}-{}", tree.id),
        VdevKind::Mirror => format!("mirror-{}", tree.id),
        VdevKind::Draid(c) => {
            tarn_vdev::Layout::Draid(c).display_name(tree.children.len(), tree.id)
        }
        kind => kind.name(),
    };
    let small = found(tree).is_some_and(|(_, fits)| !fits);
    let note = (state == "UNAVAIL" && tree.kind == VdevKind::Disk).then(|| {
        match small {
            true => "device too small",
            false => "cannot open",
        }
        .to_string()
    });
    VdevNode {
        name,
        kind: kind_name(tree.kind),
        state,
        read: 0,
        write: 0,
        cksum: 0,
        slow: 0,
        note,
        guid: 0,
        space: None,
        device_sizes: None,
        children,
    }
}

/// The import listing's `status:` and `action:` for a pool in `state`.
fn import_advice(state: &str) -> (Option<String>, String) {
    match state {
        "UNAVAIL" => (
            Some("One or more devices are missing from the system.".to_string()),
            "The pool cannot be imported. Attach the missing devices and try again.".to_string(),
        ),
        "DEGRADED" => (
            Some("One or more devices are missing from the system.".to_string()),
            concat!(
                "The pool can be imported despite missing or damaged devices. The fault ",
                "tolerance of the pool may be compromised if imported."
            )
            .to_string(),
        ),
        _ => (
            None,
            "The pool can be imported using its name or numeric identifier.".to_string(),
        ),
    }
}

/// What `tarn pool import` (no name) shows for a discovered pool.
#[must_use]
pub fn importable(found: &Discovered) -> Importable {
    let is_found = |leaf: &VdevTree| {
        let path = found.found.get(&leaf.guid)?;
        let fits = found
            .areas
            .get(&leaf.guid)
            .is_none_or(|&area| area >= leaf.asize);
        Some((path.clone(), fits))
    };
    let (mut tops, mut logs, mut specials) = (Vec::new(), Vec::new(), Vec::new());
    let mut caches = Vec::new();
    for child in &found.config.vdev_tree.children {
        if child.kind == tarn_format::label::VdevKind::L2cache {
            caches.extend(child.children.iter().map(|c| tree_node(c, &is_found)));
            continue;
        }
        let list = if child.log {
            &mut logs
        } else if child.special {
            &mut specials
        } else {
            &mut tops
        };
        list.push(tree_node(child, &is_found));
    }
    let data = || tops.iter().filter(|t| t.kind != "spares").chain(&specials);
    let unavailable = data().any(|t| t.state == "UNAVAIL");
    // A missing log device does not stop the import; the pool comes up degraded.
    let degraded =
        data().any(|t| t.state == "DEGRADED") || logs.iter().any(|l| l.state != "ONLINE");
    let state = if unavailable {
        "UNAVAIL"
    } else if degraded {
        "DEGRADED"
    } else {
        "ONLINE"
    };
    let (status, action) = import_advice(state);
    let status = special_lost(&specials).or(status);
    push_classes(&mut tops, specials, logs);
    if !caches.is_empty() {
        tops.push(class_node("cache", caches));
    }
    let config = VdevNode {
        name: found.config.name.clone(),
        kind: "root".into(),
        state: state.into(),
        read: 0,
        write: 0,
        cksum: 0,
        slow: 0,
        note: None,
        guid: 0,
        space: None,
        device_sizes: None,
        children: tops,
    };
    let see = (state == "UNAVAIL").then(|| "TARN-0001".to_string());
    Importable {
        name: found.config.name.clone(),
        guid: found.config.pool_guid.0,
        state: state.into(),
        status,
        action,
        see,
        config,
    }
}

/// What `create -n` shows for one top-level vdev: a disk, or the bare kind over its disks.
fn top_layout(top: &tarn_pool::TopSpec, leaf: &dyn Fn(&String) -> VdevNode) -> VdevNode {
    match top.layout {
        TopLayout::Disk => leaf(&top.devices[0]),
        layout => VdevNode {
            name: layout.name(),
            kind: layout.name(),
            children: top.devices.iter().map(leaf).collect(),
            ..leaf(&String::new())
        },
    }
}

/// The import listing's `status:` when a special vdev is missing beyond its redundancy.
fn special_lost(specials: &[VdevNode]) -> Option<String> {
    specials.iter().any(|t| t.state == "UNAVAIL").then(|| {
        "The special vdev holding the pool's metadata is missing devices beyond its \
         redundancy; the pool cannot be imported."
            .to_string()
    })
}

/// Appends the allocation-class sections that are not empty, in `zpool status` order:
/// `special`, then `logs`.
fn push_classes(children: &mut Vec<VdevNode>, specials: Vec<VdevNode>, logs: Vec<VdevNode>) {
    if !specials.is_empty() {
        children.push(class_node("special", specials));
    }
    if !logs.is_empty() {
        children.push(class_node("logs", logs));
    }
}

/// A pseudo-node grouping the top-level vdevs of an allocation class (`logs`) or the cache
/// devices (`cache`), as the
/// `spares` node groups the hot spares; front ends print it as a section of its own.
fn class_node(name: &str, children: Vec<VdevNode>) -> VdevNode {
    VdevNode {
        name: name.into(),
        kind: name.into(),
        state: String::new(),
        read: 0,
        write: 0,
        cksum: 0,
        slow: 0,
        note: None,
        guid: 0,
        space: None,
        device_sizes: None,
        children,
    }
}

/// The layout a create would build (`create -n`).
#[must_use]
pub fn layout_of(spec: &CreateSpec) -> VdevNode {
    let leaf = |path: &String| VdevNode {
        kind: "disk".into(),
        ..class_node(path, Vec::new())
    };
    // `zpool create -n` prints the bare kind: the vdevs have no ids yet.
    let mut children: Vec<VdevNode> = spec.tops.iter().map(|t| top_layout(t, &leaf)).collect();
    let specials = spec.specials.iter().map(|t| top_layout(t, &leaf)).collect();
    let logs = spec.logs.iter().map(|top| top_layout(top, &leaf)).collect();
    push_classes(&mut children, specials, logs);
    if !spec.caches.is_empty() {
        children.push(class_node("cache", spec.caches.iter().map(leaf).collect()));
    }
    if !spec.spares.is_empty() {
        children.push(class_node("spares", spec.spares.iter().map(leaf).collect()));
    }
    VdevNode {
        kind: "root".into(),
        ..class_node(&spec.name, children)
    }
}

/// What `add -n` shows: the pool's configuration as `status` prints it, with the vdevs of
/// `spec` added to their sections (new top-level vdevs with the bare kind, as `create -n`).
#[must_use]
pub fn add_layout(name: &str, pool: &Pool, spec: &CreateSpec) -> VdevNode {
    let current = pool_status(name, pool, 0);
    let added = layout_of(spec);
    let mut config = current.config;
    let section = |node: &VdevNode| match node.kind.as_str() {
        "special" | "logs" | "spares" => Some(node.kind.clone()),
        _ => None,
    };
    for node in added.children {
        match section(&node) {
            None => {
                let at = config.children.iter().position(|c| section(c).is_some());
                let at = at.unwrap_or(config.children.len());
                config.children.insert(at, node);
            }
            Some(kind) => match config.children.iter_mut().find(|c| c.kind == kind) {
                Some(existing) => existing.children.extend(node.children),
                None => config.children.push(node),
            },
        }
    }
    // Sections in status order: data, special, logs (spares are shown apart).
    let rank = |node: &VdevNode| match section(node).as_deref() {
        None => 0,
        Some("special") => 1,
        Some("logs") => 2,
        _ => 3,
    };
    config.children.sort_by_key(rank);
    let spares = current.spares;
    if !spares.is_empty() {
        match config.children.iter_mut().find(|c| c.kind == "spares") {
            Some(node) => {
                let mut all = spares;
                all.extend(std::mem::take(&mut node.children));
                node.children = all;
            }
            None => config.children.push(class_node("spares", spares)),
        }
    }
    config
}
