//! Tests for the layering rule: the edge table, manifest line lookup, and a synthetic
//! workspace run through the real `cargo metadata`.

use super::{LineKey, check_layering, declares_key, edge_problem, manifest_line};
use crate::{Rule, fixture};

/// Asserts whether the edge `from -> to` is allowed.
fn check(from: &str, to: &str, allowed: bool) {
    let problem = edge_problem(from, to);
    assert_eq!(problem.is_none(), allowed, "{from} -> {to}: {problem:?}");
}

#[test]
fn engine_crates_depend_only_downward() {
    check("tarn-pool", "tarn-zio", true);
    check("tarn-pool", "tarn-base", true);
    check("tarn-space", "tarn-zio", true);
    check("tarn-zio", "tarn-pool", false);
    check("tarn-base", "tarn-format", false);
    check("tarn-engine", "tarn-objects", true);
    check("tarn-engine", "tarn-proto", false);
    check("tarn-pool", "thiserror", true);
}

#[test]
fn front_ends_use_only_the_boundary() {
    check("tarn-daemon", "tarn-engine", true);
    check("tarn-daemon", "tarn-proto", true);
    check("tarn-cli", "tarn-daemon", true);
    check("tarn-cli", "tarn-base", true);
    check("tarn-daemon", "tarn-cli", false);
    check("tarn-daemon", "tarn-pool", false);
    check("tarn-cli", "tarn-vdev", false);
    check("tarn-fuse", "tarn-posix", false);
    // The one exception, for the in-process demo.
    check("tarn-cli", "tarn-pool", true);
}

#[test]
fn proto_sim_tools_and_unknown_crates() {
    check("tarn-proto", "tarn-base", true);
    check("tarn-proto", "tarn-format", false);
    check("tarn-proto", "tarn-engine", false);
    check("tarn-sim", "tarn-cli", true);
    check("tarn-sim", "tarn-vdev", true);
    check("xtask", "tarn-engine", true);
    check("tarn-pool", "tarn-extra", false);
}

#[test]
fn manifest_lines_are_found_in_the_right_table() {
    let manifest = "[package]\nname = \"tarn-x\"\n\n[dependencies]\ntarn-base = { path = \"b\" }\n\
                    tarn-zio.workspace = true\n\n[dev-dependencies]\ntarn-base = \"1\"\n\
                    [target.'cfg(unix)'.build-dependencies]\n\"tarn-vdev\" = \"1\"\n\
                    [dev-dependencies.tarn-pool]\npath = \"p\"\n";
    let line = |table, key: &str| {
        manifest_line(
            manifest,
            &LineKey {
                table,
                key: key.into(),
            },
        )
    };
    assert_eq!(line("package", "name"), 2);
    assert_eq!(line("dependencies", "tarn-base"), 5);
    assert_eq!(line("dependencies", "tarn-zio"), 6);
    assert_eq!(line("dev-dependencies", "tarn-base"), 9);
    assert_eq!(line("build-dependencies", "tarn-vdev"), 11);
    assert_eq!(line("dev-dependencies", "tarn-pool"), 12);
    assert_eq!(line("dependencies", "tarn-absent"), 1);
    assert!(declares_key("tarn-base = \"1\"", "tarn-base"));
    assert!(!declares_key("tarn-base-extra = \"1\"", "tarn-base"));
}

/// A manifest for a library crate called `name` with the given dependency tables.
fn manifest(name: &str, tables: &str) -> String {
    format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n{tables}")
}

#[test]
fn finds_upward_front_end_unplaced_and_serde_edges_in_a_workspace() {
    let members = "[workspace]\nresolver = \"3\"\nmembers = [\"crates/*\"]\n";
    let pool = manifest(
        "tarn-pool",
        "[dependencies]\ntarn-base = { path = \"../base\" }\n\n\
         [dev-dependencies]\ntarn-objects = { path = \"../objects\" }\n",
    );
    let cli = manifest(
        "tarn-cli",
        "[dependencies]\ntarn-vdev = { path = \"../vdev\" }\n",
    );
    let format = manifest(
        "tarn-format",
        "[dependencies]\nserde_local = { path = \"../serde\" }\n",
    );
    let lib = "//! A crate.\n";
    let (dir, _tree) = fixture::tree(&[
        ("Cargo.toml", members),
        ("crates/base/Cargo.toml", &manifest("tarn-base", "")),
        ("crates/base/src/lib.rs", lib),
        ("crates/pool/Cargo.toml", &pool),
        ("crates/pool/src/lib.rs", lib),
        ("crates/objects/Cargo.toml", &manifest("tarn-objects", "")),
        ("crates/objects/src/lib.rs", lib),
        ("crates/vdev/Cargo.toml", &manifest("tarn-vdev", "")),
        ("crates/vdev/src/lib.rs", lib),
        ("crates/cli/Cargo.toml", &cli),
        ("crates/cli/src/lib.rs", lib),
        ("crates/format/Cargo.toml", &format),
        ("crates/format/src/lib.rs", lib),
        ("crates/serde/Cargo.toml", &manifest("serde_local", "")),
        ("crates/serde/src/lib.rs", lib),
    ]);
    let mut found = check_layering(dir.path()).expect("cargo metadata runs");
    found.sort();
    let places: Vec<_> = found
        .iter()
        .map(|v| (v.path.as_str(), v.line, v.rule))
        .collect();
    assert_eq!(
        places,
        [
            ("crates/cli/Cargo.toml", 7, Rule::Layering),
            ("crates/format/Cargo.toml", 7, Rule::Layering),
            ("crates/pool/Cargo.toml", 10, Rule::Layering),
            ("crates/serde/Cargo.toml", 2, Rule::Layering),
        ],
        "{found:#?}"
    );
    assert!(
        found[0].message.contains("front end tarn-cli"),
        "{}",
        found[0].message
    );
    assert!(found[1].message.contains("serde"), "{}", found[1].message);
    assert!(
        found[2].message.contains("tarn-objects is not below"),
        "{}",
        found[2].message
    );
    assert!(
        found[3].message.contains("serde_local is not in the layer"),
        "{}",
        found[3].message
    );
}
