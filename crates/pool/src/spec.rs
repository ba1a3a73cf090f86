//! What `tarn pool create` asks for, and the checks that run before anything is written
//! (the "check" half of a synctask: no side effects).

use crate::PoolError;
use tarn_base::limits;

/// Layout of one top-level vdev.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopLayout {
    /// A single device.
    Disk,
    /// An N-way mirror.
    Mirror,
    /// raidz with this many parity columns (1..=3).
    Raidz(u8),
    /// dRAID: groups of `data + parity` columns and `spares` distributed spares over all
    /// the devices (the permutation seed is drawn when the vdev is created).
    Draid {
        /// Parity columns per group (1..=3).
        parity: u8,
        /// Data columns per group.
        data: u8,
        /// Distributed spares.
        spares: u8,
    },
}

impl TopLayout {
    /// Fewest children this layout accepts.
    #[must_use]
    pub fn min_children(self) -> usize {
        match self {
            TopLayout::Disk => 1,
            TopLayout::Mirror => 2,
            TopLayout::Raidz(parity) => usize::from(parity) + 1,
            TopLayout::Draid {
                parity,
                data,
                spares,
            } => usize::from(parity) + usize::from(data) + usize::from(spares),
        }
    }

    /// Name as ZFS prints it.
    #[must_use]
    pub fn name(self) -> String {
        match self {
            TopLayout::Disk => "disk".into(),
            TopLayout::Mirror => "mirror".into(),
            TopLayout::Raidz(parity) => format!("raidz{parity}"),
            TopLayout::Draid {
                parity,
                data,
                spares,
            } => format!("draid{parity}:{data}d:{spares}s"),
        }
    }
}

/// One top-level vdev to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopSpec {
    /// Its layout.
    pub layout: TopLayout,
    /// Device paths, in order.
    pub devices: Vec<String>,
}

/// Everything `tarn pool create` needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateSpec {
    /// Pool name.
    pub name: String,
    /// Top-level data vdevs.
    pub tops: Vec<TopSpec>,
    /// Hot spares.
    pub spares: Vec<String>,
    /// Cache devices (L2ARC): a second level of read cache, holding nothing the pool needs.
    pub caches: Vec<String>,
    /// Log devices (`log DEV` / `log mirror DEV DEV`): top-level vdevs that hold only
    /// intent-log blocks. Disk or mirror layouts.
    pub logs: Vec<TopSpec>,
    /// Special allocation-class vdevs (`special DEV` / `special mirror ...` / `special
    /// raidz ...`): metadata and small file blocks go there.
    pub specials: Vec<TopSpec>,
    /// Sector size shift for every vdev.
    pub ashift: u8,
    /// Use devices that belong to another (exported or destroyed) pool.
    pub force: bool,
}

const RESERVED_NAMES: &[&str] = &[
    "mirror", "raidz", "spare", "log", "cache", "special", "draid",
];

/// Checks a pool name against ZFS's rules: starts with a letter, then letters, digits and
/// `_ - . :`, at most 255 bytes, not a vdev keyword, and not starting with `c[0-9]`.
pub fn validate_pool_name(name: &str) -> Result<(), PoolError> {
    let invalid = |why: &str| PoolError::InvalidName {
        name: name.to_string(),
        why: why.to_string(),
    };
    if name.is_empty() {
        return Err(invalid("name is empty"));
    }
    if name.len() > limits::POOL_NAME_MAX {
        return Err(invalid("name is too long"));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(invalid("name must begin with a letter"));
    }
    if let Some(bad) = name
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || "_-.:".contains(c)))
    {
        return Err(invalid(&format!(
            "invalid character '{bad}' in pool name (letters, digits, '_', '-', '.', ':' are valid)"
        )));
    }
    if RESERVED_NAMES.iter().any(|r| name.starts_with(r)) {
        return Err(invalid("name is reserved (it starts with a vdev keyword)"));
    }
    Ok(())
}

impl CreateSpec {
    /// A pool of one top-level vdev with no spares or log devices at the default ashift: the
    /// common case, and a base for struct-update syntax (`..CreateSpec::one_top(..)`), so
    /// that callers name only what differs and a new field changes no caller.
    #[must_use]
    pub fn one_top(name: &str, layout: TopLayout, devices: Vec<String>) -> CreateSpec {
        CreateSpec {
            name: name.to_string(),
            tops: vec![TopSpec { layout, devices }],
            spares: Vec::new(),
            caches: Vec::new(),
            logs: Vec::new(),
            specials: Vec::new(),
            ashift: limits::ASHIFT_DEFAULT,
            force: false,
        }
    }

    /// Log vdevs are disks or mirrors (a raidz log is refused, as ZFS refuses it).
    fn validate_logs(&self) -> Result<(), PoolError> {
        match self
            .logs
            .iter()
            .find(|l| matches!(l.layout, TopLayout::Raidz(_) | TopLayout::Draid { .. }))
        {
            Some(log) => Err(PoolError::InvalidSpec(format!(
                "'{}' is not allowed in a log section; use mirror or plain devices",
                log.layout.name()
            ))),
            None => Ok(()),
        }
    }

    /// Every top-level vdev of the spec: data, then log, then special (the order their ids
    /// are given in).
    pub fn all_tops(&self) -> impl Iterator<Item = &TopSpec> {
        self.tops.iter().chain(&self.logs).chain(&self.specials)
    }

    /// Every device path of the spec, spares and cache devices included.
    pub fn all_devices(&self) -> impl Iterator<Item = &String> {
        self.all_tops()
            .flat_map(|t| &t.devices)
            .chain(&self.spares)
            .chain(&self.caches)
    }

    /// Checks the spec's shape (name, widths, parity, duplicates, ashift) and its
    /// replication levels ([`check_replication`]).
    pub fn validate(&self) -> Result<(), PoolError> {
        validate_pool_name(&self.name)?;
        if self.tops.is_empty() {
            return Err(PoolError::InvalidSpec("no data vdevs given".into()));
        }
        self.validate_shape(0)?;
        check_replication(&[], self)
    }

    /// Checks a spec of vdevs to add to a pool that has `existing` top-level vdevs: the same
    /// checks as create, but data vdevs are optional (something must be given).
    pub fn validate_add(&self, existing: usize) -> Result<(), PoolError> {
        if self.all_tops().next().is_none() && self.spares.is_empty() && self.caches.is_empty() {
            return Err(PoolError::InvalidSpec("no vdevs given to add".into()));
        }
        self.validate_shape(existing)
    }

    fn validate_shape(&self, existing: usize) -> Result<(), PoolError> {
        if existing + self.all_tops().count() > limits::TOP_VDEVS_MAX {
            return Err(PoolError::InvalidSpec(format!(
                "too many top-level vdevs (at most {})",
                limits::TOP_VDEVS_MAX
            )));
        }
        if !(limits::ASHIFT_MIN..=limits::ASHIFT_MAX).contains(&self.ashift) {
            return Err(PoolError::InvalidSpec(format!(
                "ashift {} is out of range (valid: {} to {})",
                self.ashift,
                limits::ASHIFT_MIN,
                limits::ASHIFT_MAX
            )));
        }
        let mut seen = std::collections::HashSet::new();
        self.validate_logs()?;
        for top in self.all_tops() {
            if let TopLayout::Raidz(parity) = top.layout
                && !(1..=limits::RAIDZ_PARITY_MAX as u8).contains(&parity)
            {
                return Err(PoolError::InvalidSpec(format!(
                    "raidz{parity} is not a vdev type"
                )));
            }
            top.check_draid()?;
            let need = top.layout.min_children();
            if top.devices.len() < need {
                return Err(PoolError::InvalidSpec(format!(
                    "{} requires at least {need} devices, {} given",
                    top.layout.name(),
                    top.devices.len()
                )));
            }
            if top.layout == TopLayout::Disk && top.devices.len() != 1 {
                return Err(PoolError::InvalidSpec(
                    "a disk vdev has exactly one device".into(),
                ));
            }
            if top.devices.len() > limits::VDEV_CHILDREN_MAX {
                return Err(PoolError::InvalidSpec(format!(
                    "{} has more than {} devices",
                    top.layout.name(),
                    limits::VDEV_CHILDREN_MAX
                )));
            }
        }
        if self.spares.len() > limits::VDEV_CHILDREN_MAX {
            return Err(PoolError::InvalidSpec(format!(
                "more than {} spares",
                limits::VDEV_CHILDREN_MAX
            )));
        }
        for path in self.all_devices() {
            if !seen.insert(path.as_str()) {
                return Err(PoolError::DuplicateDevice { path: path.clone() });
            }
        }
        Ok(())
    }
}

impl TopSpec {
    /// A dRAID layout fits its devices (parity, data width, spares, child limit).
    fn check_draid(&self) -> Result<(), PoolError> {
        let TopLayout::Draid {
            parity,
            data,
            spares,
        } = self.layout
        else {
            return Ok(());
        };
        let (p, d, s) = (parity.into(), data.into(), spares.into());
        tarn_vdev::draid_map::check_config(self.devices.len(), p, d, s).map_err(|why| {
            PoolError::InvalidSpec(format!(
                "{} of {} devices: {why}",
                self.layout.name(),
                self.devices.len()
            ))
        })
    }

    /// Device failures this vdev survives: ZFS's replication level (disk 0, N-way mirror
    /// N-1, raidzP P).
    #[must_use]
    pub fn redundancy(&self) -> usize {
        match self.layout {
            TopLayout::Disk => 0,
            TopLayout::Mirror => self.devices.len().saturating_sub(1),
            TopLayout::Raidz(parity) | TopLayout::Draid { parity, .. } => usize::from(parity),
        }
    }

    /// The replication level as `zpool` names it in its mismatch message.
    #[must_use]
    pub fn replication_name(&self) -> String {
        match self.layout {
            TopLayout::Disk => "disk".into(),
            TopLayout::Mirror => format!("{}-way mirror", self.devices.len()),
            TopLayout::Raidz(parity) => format!("raidz{parity}"),
            TopLayout::Draid { parity, .. } => format!("draid{parity}"),
        }
    }
}

/// ZFS's "mismatched replication level" check: a data or special vdev of `spec` that
/// survives fewer device failures than the most redundant data vdev (of `existing`, the
/// pool's data vdevs, and of the spec) is refused unless `spec.force`. A special vdev holds
/// the pool's metadata, so less redundancy there loses the whole pool sooner. Log devices
/// are not checked (ZFS does not either: losing one loses at most the last seconds).
pub fn check_replication(existing: &[TopSpec], spec: &CreateSpec) -> Result<(), PoolError> {
    if spec.force {
        return Ok(());
    }
    let Some(strongest) = existing
        .iter()
        .chain(&spec.tops)
        .max_by_key(|t| t.redundancy())
    else {
        return Ok(());
    };
    match spec
        .tops
        .iter()
        .chain(&spec.specials)
        .find(|t| t.redundancy() < strongest.redundancy())
    {
        Some(weak) => Err(PoolError::MismatchedReplication {
            pool: strongest.replication_name(),
            new: weak.replication_name(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(tops: Vec<TopSpec>) -> CreateSpec {
        CreateSpec {
            name: "tank".into(),
            tops,
            spares: vec![],
            caches: vec![],
            logs: Vec::new(),
            specials: Vec::new(),
            ashift: 12,
            force: false,
        }
    }

    fn top(layout: TopLayout, n: usize) -> TopSpec {
        TopSpec {
            layout,
            devices: (0..n).map(|i| format!("/d{i}")).collect(),
        }
    }

    #[test]
    fn names() {
        for good in ["tank", "a", "t-1_2.3:4"] {
            assert!(validate_pool_name(good).is_ok(), "{good}");
        }
        for bad in ["", "1tank", "mirror1", "raidz", "ta nk", "tank/a", "spare"] {
            assert!(validate_pool_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn widths_and_duplicates() {
        assert!(spec(vec![top(TopLayout::Raidz(2), 3)]).validate().is_ok());
        assert!(spec(vec![top(TopLayout::Raidz(2), 2)]).validate().is_err());
        assert!(spec(vec![top(TopLayout::Mirror, 1)]).validate().is_err());
        assert!(spec(vec![top(TopLayout::Raidz(4), 8)]).validate().is_err());
        assert!(spec(vec![]).validate().is_err());
        let mut dup = spec(vec![top(TopLayout::Mirror, 2)]);
        dup.spares = vec!["/d1".into()];
        assert!(matches!(
            dup.validate(),
            Err(PoolError::DuplicateDevice { .. })
        ));
    }

    /// Goal: dRAID specs are checked before anything is written: parity, width against
    /// data + parity + spares, the child limit, and no dRAID log.
    #[test]
    fn draid_specs_are_validated() {
        let draid = |parity, data, spares| TopLayout::Draid {
            parity,
            data,
            spares,
        };
        assert!(spec(vec![top(draid(2, 4, 1), 11)]).validate().is_ok());
        assert!(spec(vec![top(draid(2, 8, 2), 90)]).validate().is_ok());
        let err = spec(vec![top(draid(2, 8, 2), 11)]).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "draid2:8d:2s of 11 devices: draid needs at least data + parity + spares children"
        );
        assert!(spec(vec![top(draid(4, 4, 0), 11)]).validate().is_err());
        assert!(spec(vec![top(draid(1, 0, 0), 11)]).validate().is_err());
        assert!(spec(vec![top(draid(1, 8, 0), 256)]).validate().is_err());
        let mut log = spec(vec![top(TopLayout::Mirror, 2)]);
        log.logs = vec![TopSpec {
            layout: draid(1, 1, 0),
            devices: vec!["/l0".into(), "/l1".into()],
        }];
        assert!(log.validate().is_err());
        assert_eq!(top(draid(2, 8, 2), 90).redundancy(), 2);
    }

    #[test]
    fn specials_are_checked_like_data_vdevs() {
        let mut good = spec(vec![top(TopLayout::Mirror, 2)]);
        good.specials = vec![TopSpec {
            layout: TopLayout::Raidz(1),
            devices: vec!["/s0".into(), "/s1".into()],
        }];
        assert!(good.validate().is_ok());
        let mut dup = good.clone();
        dup.specials[0].devices[1] = "/d0".into();
        assert!(matches!(
            dup.validate(),
            Err(PoolError::DuplicateDevice { .. })
        ));
        let mut short = good.clone();
        short.specials[0].layout = TopLayout::Raidz(2);
        assert!(short.validate().is_err());
    }

    #[test]
    fn replication_levels() {
        let data = |layout, n| spec(vec![top(layout, n)]);
        let special = |layout, n| TopSpec {
            layout,
            devices: (0..n).map(|i| format!("/s{i}")).collect(),
        };
        // Create: a disk beside a mirror, or a disk special under a mirror, needs -f.
        let mixed = spec(vec![top(TopLayout::Mirror, 2), top(TopLayout::Disk, 1)]);
        let err = check_replication(&[], &mixed).unwrap_err().to_string();
        assert_eq!(
            err,
            "mismatched replication level: pool uses 2-way mirror and new vdev is disk \
             (use -f to override)"
        );
        let mut weak_special = data(TopLayout::Raidz(2), 4);
        weak_special.specials = vec![special(TopLayout::Mirror, 2)];
        assert!(check_replication(&[], &weak_special).is_err());
        weak_special.force = true;
        assert!(check_replication(&[], &weak_special).is_ok());
        let mut strong_special = data(TopLayout::Mirror, 2);
        strong_special.specials = vec![special(TopLayout::Mirror, 3)];
        assert!(check_replication(&[], &strong_special).is_ok());
        // Add: against the pool's data vdevs; logs are not checked.
        let pool = [top(TopLayout::Mirror, 2)];
        assert!(check_replication(&pool, &data(TopLayout::Disk, 1)).is_err());
        assert!(check_replication(&pool, &data(TopLayout::Raidz(1), 3)).is_ok());
        let mut log = spec(vec![]);
        log.logs = vec![top(TopLayout::Disk, 1)];
        assert!(check_replication(&pool, &log).is_ok());
    }
}
