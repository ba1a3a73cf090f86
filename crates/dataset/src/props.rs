//! Dataset properties: names, kinds, defaults, inheritance and value validation, with ZFS's
//! names and value syntax (`zfs get`, `zfs set`, `zfs inherit`).

use tarn_base::units::{format_size, parse_size};
use tarn_format::{ChecksumKind, CompressSetting};
use tarn_objects::ObjsetWriteConfig;

use crate::DatasetError;

/// What values a property takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropKind {
    /// `on` or `off`.
    OnOff,
    /// One of a fixed list.
    Enum(&'static [&'static str]),
    /// A size in bytes, or `none` (stored as absent: the default).
    Quota,
    /// A power of two from 512 to 16M.
    Recordsize,
    /// 1, 2 or 3.
    Copies,
    /// 0 or a power of two from 512 to 1M (`special_small_blocks`).
    SmallBlocks,
    /// `off|on|lz4|zstd|zstd-N|zstd-fast|zstd-fast-N|zle`.
    Compression,
    /// `on|fletcher4|sha256|blake3`.
    Checksum,
    /// An absolute path, `none` or `legacy`.
    Mountpoint,
    /// A count, or `none` (stored as absent: no limit): `snapshot_limit`,
    /// `filesystem_limit`.
    Limit,
    /// Computed by the engine; never set.
    Stat,
}

/// One dataset property.
#[derive(Clone, Copy, Debug)]
pub struct PropDef {
    /// Name as the admin types it.
    pub name: &'static str,
    /// Its values.
    pub kind: PropKind,
    /// Children take the parent's value unless they set their own.
    pub inherit: bool,
    /// Default value, normalized (empty for statistics and computed defaults).
    pub default: &'static str,
}

const fn prop(name: &'static str, kind: PropKind, inherit: bool, default: &'static str) -> PropDef {
    PropDef {
        name,
        kind,
        inherit,
        default,
    }
}

const fn stat(name: &'static str) -> PropDef {
    prop(name, PropKind::Stat, false, "")
}

/// Where a property's value comes from: ZFS's SOURCE column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Set on this dataset.
    Local,
    /// Not set anywhere above: the default.
    Default,
    /// Set on the named ancestor.
    Inherited(String),
    /// A statistic (`-`).
    None,
}

impl Source {
    /// The SOURCE column text.
    #[must_use]
    pub fn text(&self) -> String {
        match self {
            Source::Local => "local".into(),
            Source::Default => "default".into(),
            Source::Inherited(from) => format!("inherited from {from}"),
            Source::None => "-".into(),
        }
    }

    /// The `-s` filter word this source matches (`local`, `default`, `inherited`, `none`).
    #[must_use]
    pub fn kind_word(&self) -> &'static str {
        match self {
            Source::Local => "local",
            Source::Default => "default",
            Source::Inherited(_) => "inherited",
            Source::None => "none",
        }
    }
}

const PRIMARYCACHE: &[&str] = &["all", "none", "metadata"];
const CANMOUNT: &[&str] = &["on", "off", "noauto"];
const SNAPDIR: &[&str] = &["hidden", "visible"];
const ACLTYPE: &[&str] = &["off", "posix"];
const SYNC: &[&str] = &["standard", "always", "disabled"];
const LOGBIAS: &[&str] = &["latency", "throughput"];
const REDUNDANT_METADATA: &[&str] = &["all", "most", "some", "none"];
const VOLMODE: &[&str] = &["default", "full", "geom", "dev", "none"];

/// Every dataset property, in `zfs get all` order.
pub const DATASET_PROPS: &[PropDef] = &[
    stat("type"),
    stat("creation"),
    stat("used"),
    stat("available"),
    stat("referenced"),
    stat("compressratio"),
    stat("mounted"),
    prop("quota", PropKind::Quota, false, ""),
    prop("reservation", PropKind::Quota, false, ""),
    prop("recordsize", PropKind::Recordsize, true, "131072"),
    prop("mountpoint", PropKind::Mountpoint, true, ""),
    prop("checksum", PropKind::Checksum, true, "on"),
    prop("compression", PropKind::Compression, true, "on"),
    prop("atime", PropKind::OnOff, true, "on"),
    prop("devices", PropKind::OnOff, true, "on"),
    prop("exec", PropKind::OnOff, true, "on"),
    prop("setuid", PropKind::OnOff, true, "on"),
    prop("readonly", PropKind::OnOff, true, "off"),
    prop("canmount", PropKind::Enum(CANMOUNT), false, "on"),
    prop("xattr", PropKind::OnOff, true, "on"),
    prop("snapdir", PropKind::Enum(SNAPDIR), true, "hidden"),
    prop("copies", PropKind::Copies, true, "1"),
    stat("guid"),
    prop("primarycache", PropKind::Enum(PRIMARYCACHE), true, "all"),
    prop("secondarycache", PropKind::Enum(PRIMARYCACHE), true, "all"),
    prop(
        "redundant_metadata",
        PropKind::Enum(REDUNDANT_METADATA),
        true,
        "all",
    ),
    stat("usedbysnapshots"),
    stat("usedbydataset"),
    stat("usedbychildren"),
    stat("usedbyrefreservation"),
    prop("refquota", PropKind::Quota, false, ""),
    prop("refreservation", PropKind::Quota, false, ""),
    stat("logicalused"),
    stat("logicalreferenced"),
    stat("written"),
    stat("createtxg"),
    stat("snapshot_count"),
    prop("snapshot_limit", PropKind::Limit, false, ""),
    stat("filesystem_count"),
    prop("filesystem_limit", PropKind::Limit, false, ""),
    stat("origin"),
    prop("acltype", PropKind::Enum(ACLTYPE), true, "off"),
    prop("relatime", PropKind::OnOff, true, "on"),
    prop("logbias", PropKind::Enum(LOGBIAS), true, "latency"),
    prop("sync", PropKind::Enum(SYNC), true, "standard"),
    prop("special_small_blocks", PropKind::SmallBlocks, true, "0"),
    // Volumes: `volsize` is set through the engine (it changes the object set), and
    // `volblocksize` only at create (module `volume`).
    stat("volsize"),
    stat("volblocksize"),
    prop("volmode", PropKind::Enum(VOLMODE), true, "default"),
];

/// Properties that do not apply to volumes (ZFS refuses them there too).
pub const FILESYSTEM_ONLY: &[&str] = &[
    "mountpoint",
    "recordsize",
    "atime",
    "relatime",
    "canmount",
    "xattr",
    "snapdir",
    "acltype",
    "devices",
    "exec",
    "setuid",
    "quota",
    "refquota",
];

/// Largest `special_small_blocks` (ZFS's limit, the largest default record size).
pub const SPECIAL_SMALL_BLOCKS_MAX: u64 = 1 << 20;

const SMALL_BLOCKS_VALID: &str = "0 or a power of two from 512 to 1M";

/// A `special_small_blocks` value normalized to bytes, if valid.
fn small_blocks(value: &str) -> Option<String> {
    let bytes = parse_size(value).ok()?;
    let power = bytes.is_power_of_two() && (512..=SPECIAL_SMALL_BLOCKS_MAX).contains(&bytes);
    (bytes == 0 || power).then(|| bytes.to_string())
}

/// The definition of `name`, if it is a native property.
#[must_use]
pub fn find(name: &str) -> Option<&'static PropDef> {
    DATASET_PROPS.iter().find(|p| p.name == name)
}

/// Every native property name, comma-separated (for error messages).
#[must_use]
pub fn names() -> String {
    DATASET_PROPS
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A user property: `module:name`, lowercase letters, digits and `-_.:`.
#[must_use]
pub fn is_user_prop(name: &str) -> bool {
    name.contains(':')
        && name.len() <= 256
        && !name.starts_with(':')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.:".contains(c))
}

/// Longest user property value (ZFS's `ZAP_MAXVALUELEN` limit for user properties).
pub const USER_VALUE_MAX: usize = 8192;

fn invalid(text: String) -> DatasetError {
    DatasetError::InvalidProperty(text)
}

/// Checks that `name` is a property that can be set, and normalizes `value`. Returns `None`
/// when the value equals the default of a non-inherited property (it is then stored as
/// absent, as ZFS does for `quota=none`).
pub fn validate(name: &str, value: &str) -> Result<Option<String>, DatasetError> {
    if is_user_prop(name) {
        if value.len() > USER_VALUE_MAX {
            return Err(invalid(format!(
                "property '{name}': value is too long (at most {USER_VALUE_MAX} bytes)"
            )));
        }
        return Ok(Some(value.to_string()));
    }
    if let Some(owner) = owner_prop(name)? {
        return owner.normalize(value);
    }
    let Some(def) = find(name) else {
        return Err(invalid(format!(
            "invalid property '{name}' (valid properties: {}; user properties are \
             'module:name')",
            names()
        )));
    };
    let normalized = normalize(def, value)?;
    if !def.inherit && normalized == def.default {
        return Ok(None);
    }
    Ok(Some(normalized))
}

fn normalize(def: &PropDef, value: &str) -> Result<String, DatasetError> {
    let name = def.name;
    let bad = |valid: &str| invalid(format!("'{name}' must be {valid}, not '{value}'"));
    match def.kind {
        PropKind::Stat => Err(invalid(format!(
            "cannot set property '{name}': read-only property"
        ))),
        PropKind::OnOff => match value {
            "on" | "off" => Ok(value.to_string()),
            _ => Err(bad("'on' or 'off'")),
        },
        PropKind::Enum(values) => {
            if values.contains(&value) {
                Ok(value.to_string())
            } else {
                Err(bad(&format!("one of {}", values.join(" | "))))
            }
        }
        PropKind::Quota => {
            if value == "none" {
                return Ok(String::new());
            }
            let bytes = parse_size(value).map_err(|_| bad("a size ('10G', '1.5T') or 'none'"))?;
            Ok(if bytes == 0 {
                String::new()
            } else {
                bytes.to_string()
            })
        }
        PropKind::Limit => limit_value(value).ok_or_else(|| bad("a count or 'none'")),
        PropKind::Recordsize => {
            let bytes = parse_size(value).map_err(|_| bad("a power of two from 512 to 16M"))?;
            if bytes.is_power_of_two() && (512..=16 << 20).contains(&bytes) {
                Ok(bytes.to_string())
            } else {
                Err(bad("a power of two from 512 to 16M"))
            }
        }
        PropKind::SmallBlocks => small_blocks(value).ok_or_else(|| bad(SMALL_BLOCKS_VALID)),
        PropKind::Copies => match value {
            "1" | "2" | "3" => Ok(value.to_string()),
            _ => Err(bad("1, 2 or 3")),
        },
        PropKind::Compression => {
            compression_setting(value).ok_or_else(|| {
                bad("off | on | lz4 | zstd | zstd-1..zstd-19 | zstd-fast | zstd-fast-1..1000 | zle")
            })?;
            Ok(value.to_string())
        }
        PropKind::Checksum => {
            if value == "off" {
                return Err(invalid(
                    "'checksum' cannot be 'off': tarn verifies every block (valid: on | \
                     fletcher4 | sha256 | blake3)"
                        .into(),
                ));
            }
            checksum_kind(value).ok_or_else(|| bad("on | fletcher4 | sha256 | blake3"))?;
            Ok(value.to_string())
        }
        PropKind::Mountpoint => match value {
            "none" | "legacy" => Ok(value.to_string()),
            path if path.starts_with('/') && !path.contains('\0') => {
                let trimmed = path.trim_end_matches('/');
                Ok(if trimmed.is_empty() { "/" } else { trimmed }.to_string())
            }
            _ => Err(bad("an absolute path, 'none' or 'legacy'")),
        },
    }
}

/// A limit's normalized value: empty for `none`, else the count in decimal.
fn limit_value(value: &str) -> Option<String> {
    match value {
        "none" => Some(String::new()),
        _ => value.parse::<u64>().ok().map(|n| n.to_string()),
    }
}

/// Whose usage an owner property is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OwnerSpace {
    /// `user...@UID`.
    User,
    /// `group...@GID`.
    Group,
    /// `project...@ID`.
    Project,
}

impl OwnerSpace {
    /// `user`, `group` or `project`.
    #[must_use]
    pub fn word(self) -> &'static str {
        match self {
            OwnerSpace::User => "user",
            OwnerSpace::Group => "group",
            OwnerSpace::Project => "project",
        }
    }
}

/// A per-owner property (`userquota@1000`, `groupobjused@100`, ...): not inherited, stored
/// locally by numeric id (the front end resolves names), its SOURCE always `local`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerProp {
    /// User, group or project.
    pub space: OwnerSpace,
    /// Counts inodes (`...obj...`) rather than bytes.
    pub objects: bool,
    /// Read-only usage (`...used@`) rather than a quota.
    pub used: bool,
    /// The numeric id.
    pub id: u32,
}

const OWNER_PREFIXES: &[(&str, OwnerSpace, bool, bool)] = &[
    ("userquota@", OwnerSpace::User, false, false),
    ("groupquota@", OwnerSpace::Group, false, false),
    ("projectquota@", OwnerSpace::Project, false, false),
    ("userobjquota@", OwnerSpace::User, true, false),
    ("groupobjquota@", OwnerSpace::Group, true, false),
    ("projectobjquota@", OwnerSpace::Project, true, false),
    ("userused@", OwnerSpace::User, false, true),
    ("groupused@", OwnerSpace::Group, false, true),
    ("projectused@", OwnerSpace::Project, false, true),
    ("userobjused@", OwnerSpace::User, true, true),
    ("groupobjused@", OwnerSpace::Group, true, true),
    ("projectobjused@", OwnerSpace::Project, true, true),
];

/// Parses a per-owner property name: `Ok(None)` when `name` is not one, an error when it
/// is one with an id that is not a number (names are resolved by the front end).
pub fn owner_prop(name: &str) -> Result<Option<OwnerProp>, DatasetError> {
    for (prefix, space, objects, used) in OWNER_PREFIXES {
        let Some(id) = name.strip_prefix(prefix) else {
            continue;
        };
        let id: u32 = id.parse().map_err(|_| {
            invalid(format!(
                "invalid {} '{id}' in '{name}' (a {} name or numeric id)",
                space.word(),
                space.word()
            ))
        })?;
        return Ok(Some(OwnerProp {
            space: *space,
            objects: *objects,
            used: *used,
            id,
        }));
    }
    Ok(None)
}

impl OwnerProp {
    /// The property's name with a numeric id (`userquota@1000`).
    #[must_use]
    pub fn name(&self) -> String {
        let kind = match (self.objects, self.used) {
            (false, false) => "quota",
            (true, false) => "objquota",
            (false, true) => "used",
            (true, true) => "objused",
        };
        format!("{}{kind}@{}", self.space.word(), self.id)
    }

    /// Validates a value to set: a size (or a count of inodes) or `none`; `None` removes.
    fn normalize(&self, value: &str) -> Result<Option<String>, DatasetError> {
        let name = self.name();
        if self.used {
            return Err(invalid(format!(
                "cannot set property '{name}': read-only property"
            )));
        }
        if value == "none" {
            return Ok(None);
        }
        let parsed = if self.objects {
            value.parse::<u64>().ok()
        } else {
            parse_size(value).ok()
        };
        match parsed {
            Some(0) => Ok(None),
            Some(n) => Ok(Some(n.to_string())),
            None if self.objects => Err(invalid(format!(
                "'{name}' must be a number of inodes or 'none', not '{value}'"
            ))),
            None => Err(invalid(format!(
                "'{name}' must be a size ('10G', '1.5T') or 'none', not '{value}'"
            ))),
        }
    }

    /// A value as `zfs get` prints it: sizes in the 5-character style (exact with
    /// `parsable`), counts as numbers, an unset quota `none` (`0` with `parsable`).
    #[must_use]
    pub fn display(&self, value: Option<u64>, parsable: bool) -> String {
        match value {
            None | Some(0) if !self.used => if parsable { "0" } else { "none" }.to_string(),
            None => "0".into(),
            Some(n) if parsable || self.objects => n.to_string(),
            Some(n) => format_size(n),
        }
    }
}

/// The compression a `compression` value selects (`None` if it is not a valid value).
#[must_use]
pub fn compression_setting(value: &str) -> Option<CompressSetting> {
    match value {
        "off" => Some(CompressSetting::Off),
        "on" | "lz4" => Some(CompressSetting::Lz4),
        "zle" => Some(CompressSetting::Zle),
        "zstd" => Some(CompressSetting::Zstd(3)),
        "zstd-fast" => Some(CompressSetting::Zstd(-1)),
        _ => {
            if let Some(level) = value.strip_prefix("zstd-fast-") {
                let level: i32 = level.parse().ok()?;
                return (1..=1000)
                    .contains(&level)
                    .then_some(CompressSetting::Zstd(-level));
            }
            let level: i32 = value.strip_prefix("zstd-")?.parse().ok()?;
            (1..=19)
                .contains(&level)
                .then_some(CompressSetting::Zstd(level))
        }
    }
}

/// The checksum a `checksum` value selects.
#[must_use]
pub fn checksum_kind(value: &str) -> Option<ChecksumKind> {
    match value {
        "on" | "fletcher4" => Some(ChecksumKind::Fletcher4),
        "sha256" => Some(ChecksumKind::Sha256),
        "blake3" => Some(ChecksumKind::Blake3),
        _ => None,
    }
}

/// How an object set with these (effective, normalized) values of `compression`,
/// `checksum`, `copies`, `special_small_blocks` and `redundant_metadata` writes its blocks.
#[must_use]
pub fn write_config(
    compression: &str,
    checksum: &str,
    copies: &str,
    special_small_blocks: &str,
    redundant_metadata: &str,
) -> ObjsetWriteConfig {
    ObjsetWriteConfig {
        redundant_metadata: tarn_objects::RedundantMetadata::parse(redundant_metadata),
        checksum: checksum_kind(checksum).unwrap_or(ChecksumKind::Fletcher4),
        compression: compression_setting(compression).unwrap_or(CompressSetting::Lz4),
        copies: copies.parse().unwrap_or(1).clamp(1, 3),
        special_small_blocks: special_small_blocks
            .parse()
            .unwrap_or(0)
            .min(SPECIAL_SMALL_BLOCKS_MAX),
        ..ObjsetWriteConfig::default()
    }
}

/// A normalized value as `zfs get` prints it (`-p` prints sizes as exact bytes).
#[must_use]
pub fn display(def: &PropDef, normalized: &str, parsable: bool) -> String {
    match def.kind {
        PropKind::Quota if normalized.is_empty() || normalized == "0" => {
            if parsable {
                "0".into()
            } else {
                "none".into()
            }
        }
        PropKind::SmallBlocks if normalized == "0" => "0".into(),
        // ZFS shows an unset limit as `none`, and as the largest count when parsable.
        PropKind::Limit if normalized.is_empty() => match parsable {
            true => u64::MAX.to_string(),
            false => "none".into(),
        },
        PropKind::Quota | PropKind::Recordsize | PropKind::SmallBlocks if !parsable => normalized
            .parse::<u64>()
            .map_or_else(|_| normalized.to_string(), format_size),
        _ => normalized.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_normalize_and_refuse() {
        assert_eq!(validate("snapshot_limit", "10").unwrap(), Some("10".into()));
        assert_eq!(validate("filesystem_limit", "none").unwrap(), None);
        assert!(validate("snapshot_limit", "-1").is_err());
        assert!(validate("filesystem_limit", "1G").is_err());
        assert_eq!(
            validate("quota", "10G").unwrap(),
            Some("10737418240".into())
        );
        assert_eq!(validate("quota", "none").unwrap(), None);
        assert_eq!(
            validate("recordsize", "1M").unwrap(),
            Some("1048576".into())
        );
        assert!(validate("recordsize", "3K").is_err());
        assert!(validate("recordsize", "32M").is_err());
        assert_eq!(
            validate("compression", "zstd-7").unwrap(),
            Some("zstd-7".into())
        );
        assert!(validate("compression", "zstd-20").is_err());
        assert!(validate("compression", "gzip").is_err());
        assert!(validate("checksum", "off").is_err());
        assert!(validate("copies", "4").is_err());
        assert!(validate("used", "1").is_err());
        assert!(validate("nosuch", "1").is_err());
        assert!(validate("atime", "ON").is_err());
        assert_eq!(
            validate("mountpoint", "/mnt/x/").unwrap(),
            Some("/mnt/x".into())
        );
        assert!(validate("mountpoint", "rel/path").is_err());
        assert_eq!(validate("com.example:tag", "x").unwrap(), Some("x".into()));
        assert!(validate("userquota@ann", "1G").is_err());
        assert_eq!(
            validate("userquota@1000", "10G").unwrap(),
            Some("10737418240".into())
        );
        assert_eq!(validate("groupquota@100", "none").unwrap(), None);
        assert_eq!(
            validate("projectobjquota@7", "5000").unwrap(),
            Some("5000".into())
        );
        assert!(validate("userobjquota@1", "10G").is_err());
        assert!(validate("userused@1000", "1").is_err());
        assert!(validate("groupquota@-1", "1G").is_err());
        assert!(validate("userquota@1000", "lots").is_err());
        assert_eq!(validate("canmount", "on").unwrap(), None);
    }

    #[test]
    fn owner_props_parse_and_display() {
        let p = owner_prop("groupobjused@42").unwrap().unwrap();
        assert_eq!(
            (p.space, p.objects, p.used, p.id),
            (OwnerSpace::Group, true, true, 42)
        );
        assert_eq!(p.name(), "groupobjused@42");
        assert_eq!(p.display(Some(3), false), "3");
        let q = owner_prop("userquota@0").unwrap().unwrap();
        assert_eq!(q.display(None, false), "none");
        assert_eq!(q.display(None, true), "0");
        assert_eq!(q.display(Some(10 << 30), false), "10G");
        assert_eq!(owner_prop("quota").unwrap(), None);
    }

    #[test]
    fn display_sizes() {
        let quota = find("quota").unwrap();
        assert_eq!(display(quota, "", false), "none");
        assert_eq!(display(quota, "10737418240", false), "10G");
        assert_eq!(display(quota, "10737418240", true), "10737418240");
        let rs = find("recordsize").unwrap();
        assert_eq!(display(rs, "131072", false), "128K");
    }

    #[test]
    fn write_configs() {
        let c = write_config("zstd-fast-5", "blake3", "2", "32768", "most");
        assert_eq!(c.compression, CompressSetting::Zstd(-5));
        assert_eq!(c.checksum, ChecksumKind::Blake3);
        assert_eq!(c.copies, 2);
        assert_eq!(c.special_small_blocks, 32768);
        assert_eq!(c.redundant_metadata, tarn_objects::RedundantMetadata::Most);
        assert!(validate("redundant_metadata", "some").is_ok());
        assert!(validate("redundant_metadata", "half").is_err());
        // A damaged stored value falls back to the default.
        assert_eq!(
            write_config("on", "on", "1", "junk", "all").special_small_blocks,
            0
        );
    }

    #[test]
    fn special_small_blocks_values() {
        assert_eq!(
            validate("special_small_blocks", "0").unwrap(),
            Some("0".into())
        );
        assert_eq!(
            validate("special_small_blocks", "32K").unwrap(),
            Some("32768".into())
        );
        assert_eq!(
            validate("special_small_blocks", "1M").unwrap(),
            Some("1048576".into())
        );
        for bad in ["256", "3K", "2M", "lots"] {
            let err = validate("special_small_blocks", bad)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("0 or a power of two from 512 to 1M"),
                "{bad}: {err}"
            );
        }
        let def = find("special_small_blocks").unwrap();
        assert!(def.inherit);
        assert_eq!(display(def, "32768", false), "32K");
        assert_eq!(display(def, "0", false), "0");
    }
}
