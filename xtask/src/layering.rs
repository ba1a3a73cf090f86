//! Rule `layering`: crate dependencies follow the layer order of STYLE.md §1, read from
//! `cargo metadata --no-deps` (normal, dev and build dependencies all count: a test that
//! reaches upward couples the layers just as well).
//!
//! ```text
//!   tarn-sim, tarn-stress             test drivers: may depend on everything
//!   tarn-cli > tarn-daemon > tarn-nbd > tarn-fuse
//!        front ends: only tarn-engine, tarn-proto, tarn-base and earlier front ends
//!        (plus FRONT_END_EXCEPTIONS)
//!   tarn-proto                        only tarn-base
//!   tarn-engine > tarn-posix > ... > tarn-format > tarn-base
//!        each may depend only on crates below it
//! ```
//! Every workspace member must appear in [`LAYERS`] (or be a tool in `TOOLS`), so adding a
//! crate forces a decision about where it sits (I4). serde, which makes types serializable,
//! is limited to `SERDE_USERS` ("only tarn-proto types are serializable"; the daemon and CLI
//! read and write JSON).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::{Rule, TidyError, Violation};

/// The layer order, lowest first. A crate may depend only on crates before it, subject to the
/// front-end and tarn-proto rules below.
pub const LAYERS: [&str; 19] = [
    "tarn-base",
    "tarn-format",
    "tarn-send",
    "tarn-device",
    "tarn-vdev",
    "tarn-zio",
    "tarn-space",
    "tarn-pool",
    "tarn-objects",
    "tarn-dataset",
    "tarn-posix",
    "tarn-engine",
    "tarn-proto",
    "tarn-fuse",
    "tarn-nbd",
    "tarn-daemon",
    "tarn-cli",
    "tarn-sim",
    "tarn-stress",
];

/// Front ends: thin layers over the engine boundary.
const FRONT_ENDS: [&str; 4] = ["tarn-fuse", "tarn-nbd", "tarn-daemon", "tarn-cli"];

/// What a front end may use besides earlier front ends: the engine boundary, the protocol
/// and the shared vocabulary.
const FRONT_END_TARGETS: [&str; 3] = ["tarn-base", "tarn-engine", "tarn-proto"];

/// Front-end edges into inner crates that are allowed anyway: (from, to). Keep this tiny;
/// each entry is a hole in the engine boundary and says why it is worth it.
const FRONT_END_EXCEPTIONS: [(&str, &str); 1] = [
    // `tarn demo` runs the engine in process on sparse files it creates itself, so it needs
    // tarn-pool's DeviceProvider for files; the daemon path goes through tarn-engine alone.
    ("tarn-cli", "tarn-pool"),
];

/// The one crate below the front ends that is not an engine crate: it may use only tarn-base.
const PROTO: &str = "tarn-proto";

/// Workspace members that are tools, not layers: they may depend on anything.
const TOOLS: [&str; 1] = ["xtask"];

/// The crates that may depend on serde (or any `serde_*` crate).
const SERDE_USERS: [&str; 4] = ["tarn-proto", "tarn-cli", "tarn-daemon", "xtask"];

/// Checks the dependency edges of the workspace at `root`.
///
/// # Errors
/// [`TidyError::Tool`] when `cargo metadata` cannot run or fails; [`TidyError::Metadata`]
/// when its output is not what cargo documents; [`TidyError::Io`] when a manifest cannot be
/// read.
pub fn check_layering(root: &Path) -> Result<Vec<Violation>, TidyError> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let metadata = cargo_metadata(&root)?;
    let packages = parse_packages(&metadata)?;
    let mut found = Vec::new();
    for package in &packages {
        let manifest =
            std::fs::read_to_string(&package.manifest_path).map_err(|source| TidyError::Io {
                path: package.manifest_path.clone(),
                source,
            })?;
        let path = relative(&root, &package.manifest_path);
        for (line_key, message) in package_problems(package) {
            let line = manifest_line(&manifest, &line_key);
            found.push(Violation::new(&path, line, Rule::Layering, message));
        }
    }
    Ok(found)
}

/// A workspace member as `cargo metadata` describes it.
#[derive(Clone, Debug)]
struct Package {
    name: String,
    manifest_path: PathBuf,
    dependencies: Vec<Dependency>,
}

#[derive(Clone, Debug)]
struct Dependency {
    /// The depended-on package's name.
    name: String,
    /// The name it is imported under in the manifest, when renamed.
    rename: Option<String>,
    kind: DependencyKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DependencyKind {
    Normal,
    Dev,
    Build,
}

impl DependencyKind {
    /// The manifest table that declares this kind.
    fn table(self) -> &'static str {
        match self {
            DependencyKind::Normal => "dependencies",
            DependencyKind::Dev => "dev-dependencies",
            DependencyKind::Build => "build-dependencies",
        }
    }
}

/// Where in a manifest a problem is declared: a key in a table.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LineKey {
    table: &'static str,
    key: String,
}

fn cargo_metadata(root: &Path) -> Result<Value, TidyError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let program = cargo.to_string_lossy().into_owned();
    let output = Command::new(&cargo)
        .current_dir(root)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--manifest-path",
        ])
        .arg(root.join("Cargo.toml"))
        .output()
        .map_err(|error| TidyError::Tool {
            program: program.clone(),
            detail: error.to_string(),
        })?;
    if !output.status.success() {
        let detail = String::from_utf8_lossy(&output.stderr).trim().to_string();
        return Err(TidyError::Tool {
            program: format!("{program} metadata"),
            detail,
        });
    }
    serde_json::from_slice(&output.stdout).map_err(|error| TidyError::Metadata {
        detail: error.to_string(),
    })
}

fn parse_packages(metadata: &Value) -> Result<Vec<Package>, TidyError> {
    let missing = |what: &str| TidyError::Metadata {
        detail: format!("missing {what}"),
    };
    let packages = metadata["packages"]
        .as_array()
        .ok_or_else(|| missing("packages"))?;
    let mut parsed = Vec::new();
    for package in packages {
        let name = package["name"]
            .as_str()
            .ok_or_else(|| missing("package name"))?;
        let manifest = package["manifest_path"]
            .as_str()
            .ok_or_else(|| missing("manifest"))?;
        let dependencies = package["dependencies"]
            .as_array()
            .ok_or_else(|| missing("deps"))?;
        let mut deps = Vec::new();
        for dependency in dependencies {
            let dep_name = dependency["name"]
                .as_str()
                .ok_or_else(|| missing("dep name"))?;
            let kind = match dependency["kind"].as_str() {
                None => DependencyKind::Normal,
                Some("dev") => DependencyKind::Dev,
                Some("build") => DependencyKind::Build,
                Some(other) => {
                    let detail = format!("unknown dependency kind {other:?} in {name}");
                    return Err(TidyError::Metadata { detail });
                }
            };
            let rename = dependency["rename"].as_str().map(str::to_string);
            deps.push(Dependency {
                name: dep_name.to_string(),
                rename,
                kind,
            });
        }
        parsed.push(Package {
            name: name.to_string(),
            manifest_path: PathBuf::from(manifest),
            dependencies: deps,
        });
    }
    Ok(parsed)
}

/// Every problem with one package: where it is declared and what is wrong.
fn package_problems(package: &Package) -> Vec<(LineKey, String)> {
    let mut problems = Vec::new();
    let placed = LAYERS.contains(&package.name.as_str()) || TOOLS.contains(&package.name.as_str());
    if !placed {
        let key = LineKey {
            table: "package",
            key: "name".into(),
        };
        let message = format!(
            "crate {} is not in the layer order; place it in LAYERS in xtask/src/layering.rs \
             (STYLE.md section 1)",
            package.name
        );
        problems.push((key, message));
    }
    for dependency in &package.dependencies {
        let key = || LineKey {
            table: dependency.kind.table(),
            key: dependency
                .rename
                .clone()
                .unwrap_or_else(|| dependency.name.clone()),
        };
        // An unplaced crate is reported once above; its edges cannot be judged.
        let edge = placed
            .then(|| edge_problem(&package.name, &dependency.name))
            .flatten();
        if let Some(message) = edge {
            problems.push((key(), message));
        }
        if is_serde(&dependency.name) && !SERDE_USERS.contains(&package.name.as_str()) {
            let message = format!(
                "{} depends on {}; only {} may use serde (only tarn-proto types are serializable)",
                package.name,
                dependency.name,
                SERDE_USERS.join(", ")
            );
            problems.push((key(), message));
        }
    }
    problems
}

fn is_serde(name: &str) -> bool {
    name == "serde" || name.starts_with("serde_")
}

/// Why the edge `from -> to` is forbidden, or `None` when it is allowed. `from` is a placed
/// crate (in [`LAYERS`] or `TOOLS`).
fn edge_problem(from: &str, to: &str) -> Option<String> {
    if !to.starts_with("tarn-") || TOOLS.contains(&from) {
        return None;
    }
    let position = |name: &str| LAYERS.iter().position(|layer| *layer == name);
    let Some(to_index) = position(to) else {
        return Some(format!(
            "{from} depends on {to}, which is not in the layer order"
        ));
    };
    let from_index = position(from)?;
    if from == "tarn-sim" || from == "tarn-stress" {
        return None;
    }
    if to_index >= from_index {
        return Some(format!(
            "{from} must not depend on {to}: {to} is not below {from} in the layer order"
        ));
    }
    if FRONT_ENDS.contains(&from) {
        let allowed = FRONT_END_TARGETS.contains(&to)
            || FRONT_ENDS.contains(&to)
            || FRONT_END_EXCEPTIONS.contains(&(from, to));
        return (!allowed).then(|| {
            format!(
                "front end {from} must not depend on inner crate {to}: front ends use only \
                 tarn-engine, tarn-proto, tarn-base and earlier front ends"
            )
        });
    }
    if from == PROTO && to != "tarn-base" {
        return Some(format!(
            "{PROTO} must not depend on engine crate {to}; only on tarn-base"
        ));
    }
    None
}

/// The 1-based line declaring `key` in `table` (`[dependencies]`, `[target.*.dependencies]`,
/// or `[dependencies.key]`); 1 when it cannot be found.
fn manifest_line(manifest: &str, key: &LineKey) -> usize {
    let mut in_table = false;
    for (index, line) in manifest.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(header) = trimmed.strip_prefix('[') {
            let header = header.trim_start_matches('[').trim_end_matches(']').trim();
            let dotted = format!("{}.{}", key.table, key.key);
            if header == dotted || header.ends_with(&format!(".{dotted}")) {
                return index + 1;
            }
            in_table = header == key.table || header.ends_with(&format!(".{}", key.table));
            continue;
        }
        if in_table && declares_key(trimmed, &key.key) {
            return index + 1;
        }
    }
    1
}

/// Whether a manifest line assigns `key` (bare, quoted, or dotted as in `key.workspace`).
fn declares_key(line: &str, key: &str) -> bool {
    let quoted = format!("\"{key}\"");
    let rest = line
        .strip_prefix(quoted.as_str())
        .or_else(|| line.strip_prefix(key));
    rest.is_some_and(|rest| rest.trim_start().starts_with(['=', '.']))
}

/// `path` relative to `root` with `/` separators, or in full when it is outside.
fn relative(root: &Path, path: &Path) -> String {
    let shown = path.strip_prefix(root).unwrap_or(path);
    shown.to_string_lossy().replace('\\', "/")
}

#[cfg(test)]
mod tests;
