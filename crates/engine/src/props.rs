//! Pool properties: names, defaults, what values are valid, and which are read-only, with
//! ZFS's names and value syntax (`zpool get`/`zpool set`).

use crate::EngineError;

/// How a property can be changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropAccess {
    /// Computed; never set.
    ReadOnly,
    /// Settable only at create (`-o ashift=12`).
    CreateOnly,
    /// Settable at any time.
    Settable,
}

/// One pool property's definition.
#[derive(Clone, Copy, Debug)]
pub struct PropDef {
    /// Name as the admin types it.
    pub name: &'static str,
    /// Who may change it.
    pub access: PropAccess,
    /// Default value (for settable ones), as printed.
    pub default: &'static str,
    /// Valid values, for enumerated properties (empty: free-form or computed).
    pub values: &'static [&'static str],
}

const ON_OFF: &[&str] = &["on", "off"];

/// Every pool property, in `zpool get all` order.
pub const POOL_PROPS: &[PropDef] = &[
    PropDef {
        name: "size",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "capacity",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "altroot",
        access: PropAccess::CreateOnly,
        default: "-",
        values: &[],
    },
    PropDef {
        name: "health",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "guid",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "version",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "autoreplace",
        access: PropAccess::Settable,
        default: "off",
        values: ON_OFF,
    },
    PropDef {
        name: "cachefile",
        access: PropAccess::Settable,
        default: "-",
        values: &[],
    },
    PropDef {
        name: "failmode",
        access: PropAccess::Settable,
        default: "wait",
        values: &["wait", "continue", "panic"],
    },
    PropDef {
        name: "listsnapshots",
        access: PropAccess::Settable,
        default: "off",
        values: ON_OFF,
    },
    PropDef {
        name: "autoexpand",
        access: PropAccess::Settable,
        default: "off",
        values: ON_OFF,
    },
    PropDef {
        name: "dedupratio",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "bcloneused",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "bclonesaved",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "bcloneratio",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "free",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "allocated",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "readonly",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "ashift",
        access: PropAccess::CreateOnly,
        default: "12",
        values: &[],
    },
    PropDef {
        name: "comment",
        access: PropAccess::Settable,
        default: "-",
        values: &[],
    },
    PropDef {
        name: "expandsize",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "freeing",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "fragmentation",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "leaked",
        access: PropAccess::ReadOnly,
        default: "",
        values: &[],
    },
    PropDef {
        name: "multihost",
        access: PropAccess::Settable,
        default: "off",
        values: ON_OFF,
    },
    PropDef {
        name: "autotrim",
        access: PropAccess::Settable,
        default: "off",
        values: ON_OFF,
    },
    PropDef {
        name: "io_n",
        access: PropAccess::Settable,
        default: "10",
        values: &[],
    },
    PropDef {
        name: "io_t",
        access: PropAccess::Settable,
        default: "600",
        values: &[],
    },
    PropDef {
        name: "slow_io_ratio",
        access: PropAccess::Settable,
        default: "8",
        values: &[],
    },
    PropDef {
        name: "slow_io_period",
        access: PropAccess::Settable,
        default: "60",
        values: &[],
    },
    PropDef {
        name: "slow_io_n",
        access: PropAccess::Settable,
        default: "10",
        values: &[],
    },
    PropDef {
        name: "slow_io_t",
        access: PropAccess::Settable,
        default: "5",
        values: &[],
    },
    PropDef {
        name: "slow_io_ms",
        access: PropAccess::Settable,
        default: "10",
        values: &[],
    },
];

/// Default `slow_io_ratio`: a leaf whose p99 latency exceeds this many times the median p99
/// of its siblings is slow.
pub const SLOW_IO_RATIO_DEFAULT: u64 = 8;
/// Range of `slow_io_ratio` (besides `off`).
pub const SLOW_IO_RATIO_RANGE: std::ops::RangeInclusive<u64> = 2..=1000;
/// Default `slow_io_period` in seconds: how long a leaf stays slow before it is faulted.
pub const SLOW_IO_PERIOD_DEFAULT: u64 = 60;
/// Range of `slow_io_period` in seconds (one second to one week).
pub const SLOW_IO_PERIOD_RANGE: std::ops::RangeInclusive<u64> = 1..=604_800;
/// Range of `io_n` (read plus write errors that fault a leaf).
pub const IO_N_RANGE: std::ops::RangeInclusive<u64> = 1..=1_000_000;
/// Default `io_t` in seconds: `io_n` errors must fall within this long (ZFS's default).
pub const IO_T_DEFAULT: u64 = 600;
/// Range of `io_t` in seconds (one second to one week).
pub const IO_T_RANGE: std::ops::RangeInclusive<u64> = 1..=604_800;
/// Default `slow_io_n`: slow I/Os one window must hold for its leaf to be slow (ZFS's 10).
pub const SLOW_IO_N_DEFAULT: u64 = 10;
/// Range of `slow_io_n`.
pub const SLOW_IO_N_RANGE: std::ops::RangeInclusive<u64> = 1..=1_000_000;
/// Default `slow_io_t` in seconds: the length of one measuring window. Shorter than ZFS's
/// 30 s because a window is judged by its p99 against the siblings', which a few seconds of
/// traffic already show, and `slow_io_period` then asks for the condition to last.
pub const SLOW_IO_T_DEFAULT: u64 = 5;
/// Range of `slow_io_t` in seconds (one second to one hour).
pub const SLOW_IO_T_RANGE: std::ops::RangeInclusive<u64> = 1..=3600;
/// Default `slow_io_ms`: no access faster than this is a slow I/O, whatever the siblings
/// do (ZFS's `zio_slow_io_ms` tunable sets its fixed limit; here it is only the floor).
pub const SLOW_IO_MS_DEFAULT: u64 = 10;
/// Range of `slow_io_ms` (one millisecond to ten minutes).
pub const SLOW_IO_MS_RANGE: std::ops::RangeInclusive<u64> = 1..=600_000;

const _: () = assert!(SLOW_IO_RATIO_DEFAULT >= 2 && SLOW_IO_RATIO_DEFAULT <= 1000);
const _: () = assert!(SLOW_IO_PERIOD_DEFAULT >= 1 && SLOW_IO_PERIOD_DEFAULT <= 604_800);
const _: () = assert!(crate::replace::IO_ERRORS_FAULT >= 1);
const _: () = assert!(IO_T_DEFAULT >= 1 && IO_T_DEFAULT <= 604_800);
const _: () = assert!(SLOW_IO_N_DEFAULT >= 1 && SLOW_IO_N_DEFAULT <= 1_000_000);
const _: () = assert!(SLOW_IO_T_DEFAULT >= 1 && SLOW_IO_T_DEFAULT <= 3600);
const _: () = assert!(SLOW_IO_MS_DEFAULT >= 1 && SLOW_IO_MS_DEFAULT <= 600_000);

/// Checks a whole number in `range` for property `name` (`off` too when `off_ok`).
fn validate_number(
    name: &str,
    value: &str,
    range: &std::ops::RangeInclusive<u64>,
    off_ok: bool,
) -> Result<(), EngineError> {
    if off_ok && value == "off" {
        return Ok(());
    }
    let valid = value.bytes().all(|b| b.is_ascii_digit())
        && value.parse::<u64>().is_ok_and(|n| range.contains(&n));
    if valid {
        return Ok(());
    }
    let off = if off_ok { " or 'off'" } else { "" };
    Err(EngineError::InvalidProperty(format!(
        "invalid value '{value}' for property '{name}' (a whole number from {} to {}{off})",
        range.start(),
        range.end()
    )))
}

/// Looks a property up by name.
#[must_use]
pub fn find(name: &str) -> Option<&'static PropDef> {
    POOL_PROPS.iter().find(|p| p.name == name)
}

/// The `feature@NAME` pool properties tarn answers, with their state: ZFS feature flags whose
/// capability tarn has, so that tools that test for a capability by its feature (syncoid
/// reads `feature@extensible_dataset` before using resumable receive) find it. tarn has no
/// feature flags on disk; these are capabilities of every tarn pool.
pub const FEATURES: &[(&str, &str)] = &[
    // Resumable receive (`receive -s`, `receive_resume_token`, `send -t`).
    ("extensible_dataset", "active"),
    // `tarn bookmark` and `send -i DS#BOOKMARK`.
    ("bookmarks", "enabled"),
    // `copy_file_range` by cloning (on disk: `org.tarn:block_cloning`, active once a block
    // was cloned: `feature_state`).
    ("block_cloning", "enabled"),
];

/// The state of `feature@NAME` on `pool`: `state` from [`FEATURES`], except that
/// `block_cloning` is `active` once the pool has cloned a block (its labels list
/// `org.tarn:block_cloning`), as OpenZFS reports it.
#[must_use]
pub fn feature_state(property: &str, state: &'static str, pool: &tarn_pool::Pool) -> &'static str {
    if property == "feature@block_cloning" && pool.space().cloned() {
        "active"
    } else {
        state
    }
}

/// The state of `feature@NAME` (`None`: not a feature tarn answers).
#[must_use]
pub fn feature(property: &str) -> Option<&'static str> {
    let name = property.strip_prefix("feature@")?;
    FEATURES.iter().find(|(f, _)| *f == name).map(|(_, s)| *s)
}

/// Comma-separated list of the property names, for "valid properties are" messages.
#[must_use]
pub fn names() -> String {
    POOL_PROPS
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks `name=value` for `set` (or for create when `creating`), returning the value to
/// store in canonical form.
pub fn validate(name: &str, value: &str, creating: bool) -> Result<String, EngineError> {
    let def = find(name).ok_or_else(|| {
        EngineError::InvalidProperty(format!(
            "invalid property '{name}' (valid properties: {})",
            names()
        ))
    })?;
    match def.access {
        PropAccess::ReadOnly => {
            return Err(EngineError::InvalidProperty(format!(
                "property '{name}' is read-only"
            )));
        }
        PropAccess::CreateOnly if !creating => {
            return Err(EngineError::InvalidProperty(format!(
                "property '{name}' can only be set at pool creation"
            )));
        }
        _ => {}
    }
    if !def.values.is_empty() && !def.values.contains(&value) {
        return Err(EngineError::InvalidProperty(format!(
            "invalid value '{value}' for property '{name}' (valid values: {})",
            def.values.join(", ")
        )));
    }
    match name {
        "ashift" => {
            let ashift: u8 = value.parse().map_err(|_| {
                EngineError::InvalidProperty(format!(
                    "invalid value '{value}' for property 'ashift' (9 to 16)"
                ))
            })?;
            if !(tarn_base::limits::ASHIFT_MIN..=tarn_base::limits::ASHIFT_MAX).contains(&ashift) {
                return Err(EngineError::InvalidProperty(format!(
                    "invalid value '{value}' for property 'ashift' (9 to 16)"
                )));
            }
        }
        "io_n" => validate_number(name, value, &IO_N_RANGE, false)?,
        "slow_io_ratio" => validate_number(name, value, &SLOW_IO_RATIO_RANGE, true)?,
        "slow_io_period" => validate_number(name, value, &SLOW_IO_PERIOD_RANGE, false)?,
        "io_t" => validate_number(name, value, &IO_T_RANGE, false)?,
        "slow_io_n" => validate_number(name, value, &SLOW_IO_N_RANGE, false)?,
        "slow_io_t" => validate_number(name, value, &SLOW_IO_T_RANGE, false)?,
        "slow_io_ms" => validate_number(name, value, &SLOW_IO_MS_RANGE, false)?,
        "comment" if value.len() > 32 || value.chars().any(|c| c.is_control()) => {
            return Err(EngineError::InvalidProperty(
                "comment must be at most 32 printable characters".into(),
            ));
        }
        "cachefile" | "altroot" if value != "-" && value != "none" && !value.starts_with('/') => {
            return Err(EngineError::InvalidProperty(format!(
                "{name} must be an absolute path, 'none' or '-'"
            )));
        }
        _ => {}
    }
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, value: &str, creating: bool, ok: bool) {
        assert_eq!(
            validate(name, value, creating).is_ok(),
            ok,
            "{name}={value} creating={creating}"
        );
    }

    #[test]
    fn validation() {
        check("failmode", "continue", false, true);
        check("failmode", "maybe", false, false);
        check("autoreplace", "on", false, true);
        check("autoreplace", "yes", false, false);
        check("size", "10G", false, false);
        check("ashift", "12", true, true);
        check("ashift", "12", false, false);
        check("ashift", "17", true, false);
        check("nosuch", "1", false, false);
        check("comment", "rack 4", false, true);
        check("comment", &"x".repeat(40), false, false);
        check("io_n", "3", false, true);
        check("io_n", "0", false, false);
        check("io_n", "-1", false, false);
        check("io_n", "ten", false, false);
        check("slow_io_ratio", "off", false, true);
        check("slow_io_ratio", "2", true, true);
        check("slow_io_ratio", "1", false, false);
        check("slow_io_ratio", "1001", false, false);
        check("slow_io_ratio", "+4", false, false);
        check("slow_io_period", "600", false, true);
        check("slow_io_period", "0", false, false);
        check("slow_io_period", "off", false, false);
        check("slow_io_period", "10s", false, false);
        check("io_t", "1", false, true);
        check("io_t", "0", false, false);
        check("io_t", "604801", false, false);
        check("slow_io_n", "1", false, true);
        check("slow_io_n", "0", false, false);
        check("slow_io_t", "3600", false, true);
        check("slow_io_t", "3601", false, false);
        check("slow_io_t", "off", false, false);
        check("slow_io_ms", "30000", false, true);
        check("slow_io_ms", "0", false, false);
        check("slow_io_ms", "1.5", false, false);
    }

    #[test]
    fn number_messages_name_the_range() {
        let message = validate("slow_io_ratio", "1", false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            "invalid value '1' for property 'slow_io_ratio' (a whole number from 2 to 1000 or \
             'off')"
        );
    }

    #[test]
    fn messages_name_what_is_valid() {
        let message = validate("failmode", "maybe", false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            "invalid value 'maybe' for property 'failmode' (valid values: wait, continue, panic)"
        );
    }
}
