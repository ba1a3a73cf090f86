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
];

/// Looks a property up by name.
#[must_use]
pub fn find(name: &str) -> Option<&'static PropDef> {
    POOL_PROPS.iter().find(|p| p.name == name)
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
