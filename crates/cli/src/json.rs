//! `-j`: every command's reply as one JSON document, in OpenZFS 2.3's schema where OpenZFS
//! has one (docs/JSON.md).
//!
//! # Purpose
//! Programs written for `zpool status -j`, `zpool list -j`, `zpool get -j`, `zfs list -j`
//! and `zfs get -j` parse tarn unchanged. This module is the one JSON layer of the CLI: it
//! turns a reply (or a refusal) into the document, whatever the command and entry point.
//!
//! # Model
//! ```text
//!   { "output_version": { "command": "zpool status", "vers_major": 0, "vers_minor": 1 },
//!     "pools":    { NAME: { name, state, pool_guid, ..., "vdevs": { ... } } }   zpool *
//!     "datasets": { NAME: { name, type, pool, createtxg, "properties": { ... } } } zfs *
//!     "error":    { "message": "cannot ...", "code": 1 }                         refusals
//!   }
//! ```
//! A property is `{ "value": V, "source": { "type": "LOCAL", "data": "-" } }`. Numbers are
//! strings, as OpenZFS prints them, unless `--json-int`: then a value made only of digits is
//! a JSON integer (OpenZFS's rule, so `10G` stays a string without `-p`). Commands without
//! an OpenZFS schema print their reply under its own key (`"history": [...]`) beside
//! `output_version`.
//!
//! # Invariants
//! - J1: every document has `output_version`, and at most one of `pools`, `datasets`,
//!   `error` or a tarn reply key besides it.
//! - J2: the document of a command is the same under `tarn`, `zpool` and `zfs` (the command
//!   is named the ZFS way, `zpool status`, whichever name ran it).
//! - J3: tarn's own facts are extra keys (`note`, `scan`); no OpenZFS key changes meaning.
//!
//! # Failure model
//! Pure: data in, a `serde_json::Value` out. A reply that does not fit the command's view
//! falls back to the reply under its own key, never a panic.
//!
//! # Not here
//! OpenZFS keys tarn has no fact for (`spa_version`, `def_space`, `ex_dev_size`) are left
//! out rather than invented; `pool iostat -j` and `memory -j` keep
//! their own shapes (no OpenZFS schema) and `pool events -f -j` prints one event per line.

use serde_json::{Map, Value, json};
use tarn_proto::{
    DatasetProp, DatasetRow, PoolListRow, PoolStatusInfo, PropertyRow, ReplyPayload, ScanStats,
    VdevNodeKind, VdevRole, VdevStatus,
};

use crate::datasets::{GetView, ListView};
use crate::render::{self, ListColumn};
use crate::run::View;

/// OpenZFS 2.3's schema version for every command.
const VERS_MAJOR: u32 = 0;
const VERS_MINOR: u32 = 1;

/// How `-j` prints: the command's name and the `--json-*` flags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct JsonOptions {
    /// `zpool status`, `zfs list`, `tarn memory` (J2).
    pub(crate) command: String,
    /// `--json-int`: all-digit values as integers.
    pub(crate) int: bool,
    /// `--json-flat-vdevs`: every vdev of `pool status` in one map.
    pub(crate) flat_vdevs: bool,
    /// `--json-pool-key-guid`: pools keyed by GUID instead of name.
    pub(crate) pool_key_guid: bool,
}

impl JsonOptions {
    /// A number as OpenZFS prints it: a string, or with `--json-int` an integer.
    fn number(&self, value: u64) -> Value {
        match self.int {
            true => Value::from(value),
            false => Value::from(value.to_string()),
        }
    }

    /// A counter: `--json-int` an integer, else the exact digits when `literal`, else
    /// ZFS's nicenum (`1.50K`).
    fn counter(&self, value: u64, literal: bool) -> Value {
        match (self.int, literal) {
            (true, _) => Value::from(value),
            (false, true) => Value::from(value.to_string()),
            (false, false) => Value::from(render::counter(value)),
        }
    }

    /// A size in bytes: `--json-int` an integer, else ZFS's `1.50G`.
    fn bytes(&self, value: u64) -> Value {
        match self.int {
            true => Value::from(value),
            false => Value::from(tarn_base::format_size(value)),
        }
    }

    /// A property value: all-digit text becomes an integer under `--json-int`.
    fn value(&self, text: &str) -> Value {
        let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        match (self.int && digits, text.parse::<u64>()) {
            (true, Ok(number)) => Value::from(number),
            _ => Value::from(text),
        }
    }

    /// `{ value, source: { type, data } }`.
    fn property(&self, value: &str, source_type: &str, source_data: &str) -> Value {
        json!({
            "value": self.value(value),
            "source": { "type": source_type, "data": source_data },
        })
    }

    fn key(&self, name: &str, guid: u64) -> String {
        match self.pool_key_guid {
            true => guid.to_string(),
            false => name.to_string(),
        }
    }
}

/// [`document`] for commands that build their own document (`tarn checksum`).
pub(crate) fn head(options: &JsonOptions) -> Map<String, Value> {
    document(options)
}

/// `{ "output_version": ... }`, the head of every document (J1).
fn document(options: &JsonOptions) -> Map<String, Value> {
    let mut document = Map::new();
    document.insert(
        "output_version".into(),
        json!({
            "command": options.command,
            "vers_major": VERS_MAJOR,
            "vers_minor": VERS_MINOR,
        }),
    );
    document
}

/// The document of a refusal: its one line and exit status.
pub(crate) fn error(options: &JsonOptions, line: &str, code: i32) -> Value {
    let mut document = document(options);
    document.insert(
        "error".into(),
        json!({ "message": line.trim_end(), "code": code }),
    );
    Value::Object(document)
}

/// The document of a successful reply shown through `view`.
pub(crate) fn reply(options: &JsonOptions, view: &View, payload: &ReplyPayload) -> Value {
    let mut document = document(options);
    let (key, body) = match (view, payload) {
        (
            View::Status {
                verbose, explain, ..
            },
            ReplyPayload::PoolStatus(pools),
        ) => {
            // `-x`: only pools with a problem, as the text shows them.
            let shown: Vec<&PoolStatusInfo> = pools
                .iter()
                .filter(|pool| !explain || pool.status.is_some())
                .collect();
            ("pools", pool_status(options, &shown, *verbose))
        }
        (
            View::List {
                columns, parsable, ..
            },
            ReplyPayload::PoolList(rows),
        ) => ("pools", pool_list(options, rows, columns, *parsable)),
        (View::Properties { parsable, .. }, ReplyPayload::Properties(rows)) => {
            ("pools", pool_get(options, rows, *parsable))
        }
        (View::DatasetList(view), ReplyPayload::Datasets(rows)) => {
            ("datasets", dataset_list(options, rows, view))
        }
        (View::DatasetGet(view), ReplyPayload::Datasets(rows)) => {
            ("datasets", dataset_get(options, rows, view))
        }
        _ => return other(document, payload),
    };
    document.insert(key.into(), body);
    Value::Object(document)
}

/// A reply without an OpenZFS schema: its own key (`"history": [...]`) beside the head.
fn other(mut document: Map<String, Value>, payload: &ReplyPayload) -> Value {
    match serde_json::to_value(payload) {
        Ok(Value::Object(fields)) => document.extend(fields),
        // `Unit` serializes as a bare word: the head alone says the command succeeded.
        Ok(Value::String(_)) => {}
        Ok(value) => {
            document.insert("reply".into(), value);
        }
        Err(error) => {
            document.insert("reply_error".into(), Value::from(error.to_string()));
        }
    }
    Value::Object(document)
}

/// `zpool status -j`.
fn pool_status(options: &JsonOptions, pools: &[&PoolStatusInfo], verbose: bool) -> Value {
    let mut out = Map::new();
    for pool in pools {
        let mut item = Map::new();
        item.insert("name".into(), Value::from(pool.name.as_str()));
        item.insert("state".into(), Value::from(pool.state.as_str()));
        item.insert("pool_guid".into(), options.number(pool.guid));
        item.insert("txg".into(), options.number(pool.txg));
        for (key, text) in [
            ("status", &pool.status),
            ("action", &pool.action),
            ("msgid", &pool.see),
        ] {
            if let Some(text) = text {
                item.insert(key.into(), Value::from(text.as_str()));
            }
        }
        // tarn's extra: the scan line as `status` prints it; `scan_stats` its figures.
        let scan = pool.scan.as_deref().unwrap_or("none requested");
        item.insert("scan".into(), Value::from(scan));
        if let Some(stats) = &pool.scan_stats {
            item.insert("scan_stats".into(), scan_stats(options, stats));
        }
        vdev_sections(options, pool, &mut item);
        if verbose && !pool.errors.is_empty() {
            item.insert("errlist".into(), json!(pool.errors));
        }
        item.insert(
            "error_count".into(),
            options.counter(pool.error_count, false),
        );
        out.insert(options.key(&pool.name, pool.guid), Value::Object(item));
    }
    Value::Object(out)
}

/// `scan_stats` as OpenZFS names its keys: times in Unix seconds, sizes as sizes.
fn scan_stats(options: &JsonOptions, stats: &ScanStats) -> Value {
    json!({
        "function": stats.function,
        "state": stats.state,
        "start_time": options.number(stats.start_time),
        "end_time": options.number(stats.end_time),
        "scrub_pause": options.number(stats.pause_time),
        "to_examine": options.bytes(stats.to_examine),
        "examined": options.bytes(stats.examined),
        "issued": options.bytes(stats.issued),
        "processed": options.bytes(stats.processed),
        "errors": options.counter(stats.errors, false),
        "bytes_per_scan": options.bytes(stats.pass_examined),
        "pass_start": options.number(stats.pass_start),
        // A pass ends at a pause (the resume starts the next), so no pass spends time paused.
        "scrub_spent_paused": options.number(0),
        "issued_bytes_per_scan": options.bytes(stats.pass_issued),
    })
}

/// The class of a top-level vdev and the key its section has in OpenZFS.
fn class_of(role: VdevRole) -> (&'static str, &'static str) {
    match role {
        VdevRole::Data => ("normal", "vdevs"),
        VdevRole::Special => ("special", "special"),
        VdevRole::Log => ("log", "logs"),
        VdevRole::Cache => ("l2cache", "l2cache"),
        VdevRole::Spare => ("spare", "spares"),
    }
}

/// The pool's `vdevs` (the root and its data vdevs, nested), then one map per class
/// (`special`, `logs`, `l2cache`, `spares`); with `--json-flat-vdevs` all of them in `vdevs`,
/// each naming its `parent`.
fn vdev_sections(options: &JsonOptions, pool: &PoolStatusInfo, item: &mut Map<String, Value>) {
    let mut root = pool.config.clone();
    let classes: Vec<VdevStatus> = root
        .children
        .iter()
        .filter(|child| child.role != VdevRole::Data)
        .cloned()
        .collect();
    root.children.retain(|child| child.role == VdevRole::Data);
    let mut sections: Vec<(&str, Map<String, Value>)> = vec![("vdevs", Map::new())];
    let mut add = |key: &'static str, node: &VdevStatus, class: &str, spare: bool| {
        let at = match sections.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => {
                sections.push((key, Map::new()));
                sections.len() - 1
            }
        };
        let map = &mut sections[at].1;
        match options.flat_vdevs {
            true => flat_vdev(options, node, class, spare, None, map),
            false => {
                let value = vdev(options, node, class, spare);
                map.insert(node.name.clone(), value);
            }
        }
    };
    add("vdevs", &root, "normal", false);
    for node in &classes {
        let (class, key) = class_of(node.role);
        add(
            if options.flat_vdevs { "vdevs" } else { key },
            node,
            class,
            false,
        );
    }
    for spare in &pool.spares {
        add(
            if options.flat_vdevs {
                "vdevs"
            } else {
                "spares"
            },
            spare,
            "spare",
            true,
        );
    }
    for (key, map) in sections {
        if !map.is_empty() {
            item.insert(key.into(), Value::Object(map));
        }
    }
}

/// One vdev's own fields (no children).
fn vdev_fields(options: &JsonOptions, node: &VdevStatus, class: &str, spare: bool) -> Value {
    let mut fields = Map::new();
    fields.insert("name".into(), Value::from(node.name.as_str()));
    let vdev_type = match node.kind {
        VdevNodeKind::Root => "root",
        VdevNodeKind::Leaf if node.name.starts_with("/dev/") => "disk",
        VdevNodeKind::Leaf => "file",
        VdevNodeKind::Mirror => "mirror",
        VdevNodeKind::Raidz(_) => "raidz",
        VdevNodeKind::Draid(_) => "draid",
        VdevNodeKind::Replacing => "replacing",
        VdevNodeKind::Spare => "spare",
        _ => "unknown",
    };
    fields.insert("vdev_type".into(), Value::from(vdev_type));
    if node.guid != 0 {
        fields.insert("guid".into(), options.number(node.guid));
    }
    if node.kind == VdevNodeKind::Leaf {
        fields.insert("path".into(), Value::from(node.name.as_str()));
    }
    fields.insert("class".into(), Value::from(class));
    // OpenZFS names vdev states by vdev_state_t (`HEALTHY`, `CANT_OPEN`), pools by health.
    let state = match node.state.as_str() {
        "ONLINE" => "HEALTHY",
        "UNAVAIL" => "CANT_OPEN",
        other => other,
    };
    fields.insert("state".into(), Value::from(state));
    if let Some((allocated, total)) = node.space {
        fields.insert("alloc_space".into(), options.bytes(allocated));
        fields.insert("total_space".into(), options.bytes(total));
    }
    if let Some((physical, replaceable)) = node.device_sizes.filter(|_| !spare) {
        fields.insert("rep_dev_size".into(), options.bytes(replaceable));
        // OpenZFS leaves out a zero size (no device open), as it does every zero space key.
        if physical != 0 {
            fields.insert("phys_space".into(), options.bytes(physical));
        }
    }
    if !spare {
        fields.insert("read_errors".into(), options.counter(node.read, false));
        fields.insert("write_errors".into(), options.counter(node.write, false));
        fields.insert("checksum_errors".into(), options.counter(node.cksum, false));
        if node.children.is_empty() {
            fields.insert("slow_ios".into(), options.counter(node.slow, false));
        }
    }
    if let Some(note) = &node.note {
        fields.insert("note".into(), Value::from(note.as_str()));
    }
    Value::Object(fields)
}

/// A vdev with its children nested under `vdevs`.
fn vdev(options: &JsonOptions, node: &VdevStatus, class: &str, spare: bool) -> Value {
    let mut value = vdev_fields(options, node, class, spare);
    if !node.children.is_empty() {
        let children: Map<String, Value> = node
            .children
            .iter()
            .map(|child| (child.name.clone(), vdev(options, child, class, spare)))
            .collect();
        value["vdevs"] = Value::Object(children);
    }
    value
}

/// A vdev and, after it, its descendants, all in `map`, each child naming its `parent`.
fn flat_vdev(
    options: &JsonOptions,
    node: &VdevStatus,
    class: &str,
    spare: bool,
    parent: Option<&str>,
    map: &mut Map<String, Value>,
) {
    let mut value = vdev_fields(options, node, class, spare);
    if let Some(parent) = parent {
        value["parent"] = Value::from(parent);
    }
    map.insert(node.name.clone(), value);
    for child in &node.children {
        flat_vdev(options, child, class, spare, Some(&node.name), map);
    }
}

/// The property name OpenZFS uses for a `pool list` column.
fn list_property(column: ListColumn) -> &'static str {
    match column {
        ListColumn::Name => "name",
        ListColumn::Size => "size",
        ListColumn::Alloc => "allocated",
        ListColumn::Free => "free",
        ListColumn::Checkpoint => "checkpoint",
        ListColumn::Expandsize => "expandsize",
        ListColumn::Frag => "fragmentation",
        ListColumn::Cap => "capacity",
        ListColumn::Dedup => "dedupratio",
        ListColumn::Health => "health",
        ListColumn::Altroot => "altroot",
        ListColumn::Guid => "guid",
    }
}

/// `zpool list -j`: each pool with the `-o` columns as properties.
fn pool_list(
    options: &JsonOptions,
    rows: &[PoolListRow],
    columns: &[ListColumn],
    parsable: bool,
) -> Value {
    let mut out = Map::new();
    for row in rows {
        let mut properties = Map::new();
        for column in columns.iter().filter(|c| **c != ListColumn::Name) {
            let value = column.value(row, parsable);
            let source = match (column, row.altroot.is_some()) {
                (ListColumn::Altroot, true) => "LOCAL",
                (ListColumn::Altroot, false) => "DEFAULT",
                _ => "NONE",
            };
            let property = options.property(&value, source, "-");
            properties.insert(list_property(*column).into(), property);
        }
        let item = json!({
            "name": row.name,
            "type": "POOL",
            "state": row.health,
            "pool_guid": options.number(row.guid),
            "properties": properties,
        });
        out.insert(options.key(&row.name, row.guid), item);
    }
    Value::Object(out)
}

/// The JSON source type of a SOURCE column word (`local`, `default`, `-`).
fn source_type(source: &str) -> String {
    match source {
        "-" | "none" | "" => "NONE".to_string(),
        other => other
            .split_whitespace()
            .next()
            .unwrap_or("NONE")
            .to_ascii_uppercase(),
    }
}

/// `zpool get -j`: the rows grouped by pool.
fn pool_get(options: &JsonOptions, rows: &[PropertyRow], parsable: bool) -> Value {
    let mut out = Map::new();
    for row in rows {
        let entry = out
            .entry(row.name.clone())
            .or_insert_with(|| json!({ "name": row.name, "type": "POOL", "properties": {} }));
        let value = match parsable {
            true => row.value.clone(),
            false => render::human_value(&row.property, &row.value),
        };
        let property = options.property(&value, &source_type(&row.source), "-");
        entry["properties"][row.property.as_str()] = property;
    }
    Value::Object(out)
}

/// The JSON of one dataset property: value as `-p` asks, source as OpenZFS types it.
fn dataset_property(options: &JsonOptions, prop: &DatasetProp, parsable: bool) -> Value {
    let value = match parsable {
        true => &prop.parsable,
        false => &prop.value,
    };
    let (kind, data) = match prop.source_kind.as_str() {
        "inherited" => (
            "INHERITED",
            prop.source.strip_prefix("inherited from ").unwrap_or("-"),
        ),
        "local" => ("LOCAL", "-"),
        "default" => ("DEFAULT", "-"),
        "received" => ("RECEIVED", "-"),
        "temporary" => ("TEMPORARY", "-"),
        _ => ("NONE", "-"),
    };
    options.property(value, kind, data)
}

/// OpenZFS's per-dataset head: name, type, pool, createtxg (and for a snapshot its dataset
/// and snapshot name), from the row's `type` and `createtxg` (asked for by the plan).
fn dataset_item(options: &JsonOptions, row: &DatasetRow) -> Map<String, Value> {
    let prop = |name: &str| row.props.iter().find(|p| p.property == name);
    let mut item = Map::new();
    item.insert("name".into(), Value::from(row.name.as_str()));
    let kind = match prop("type") {
        Some(p) => p.parsable.to_ascii_uppercase(),
        None if row.name.contains('@') => "SNAPSHOT".into(),
        None if row.name.contains('#') => "BOOKMARK".into(),
        None => "FILESYSTEM".into(),
    };
    item.insert("type".into(), Value::from(kind));
    let pool = row.name.split(['/', '@', '#']).next().unwrap_or("");
    item.insert("pool".into(), Value::from(pool));
    if let Some(txg) = prop("createtxg") {
        item.insert("createtxg".into(), options.value(&txg.parsable));
    }
    if let Some((dataset, snapshot)) = row.name.split_once('@') {
        item.insert("dataset".into(), Value::from(dataset));
        item.insert("snapshot_name".into(), Value::from(snapshot));
    }
    item
}

/// `zfs list -j`: the `-o` columns of each dataset, in `-s`/`-S` order.
fn dataset_list(options: &JsonOptions, rows: &[DatasetRow], view: &ListView) -> Value {
    let mut out = Map::new();
    for row in crate::datasets::sorted(rows, view) {
        let mut properties = Map::new();
        for column in view.columns.iter().filter(|c| *c != "name") {
            let canonical = crate::datasets::canonical(column);
            let value = match crate::datasets::prop_of(row, column) {
                Some(prop) => dataset_property(options, prop, view.parsable),
                None => options.property("-", "NONE", "-"),
            };
            properties.insert(canonical.to_string(), value);
        }
        let mut item = dataset_item(options, row);
        item.insert("properties".into(), Value::Object(properties));
        out.insert(row.name.clone(), Value::Object(item));
    }
    Value::Object(out)
}

/// `zfs get -j`: the properties of each dataset that pass `-s`; datasets with none left
/// out, as OpenZFS does.
fn dataset_get(options: &JsonOptions, rows: &[DatasetRow], view: &GetView) -> Value {
    let mut out = Map::new();
    for row in rows {
        let mut properties = Map::new();
        for prop in crate::datasets::shown_props(row, view) {
            let name = view
                .aliases
                .iter()
                .find(|(sent, _)| *sent == prop.property)
                .map_or(prop.property.as_str(), |(_, typed)| typed.as_str());
            let value = dataset_property(options, prop, view.parsable);
            properties.insert(name.to_string(), value);
        }
        if properties.is_empty() {
            continue;
        }
        let mut item = dataset_item(options, row);
        item.insert("properties".into(), Value::Object(properties));
        out.insert(row.name.clone(), Value::Object(item));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests;
