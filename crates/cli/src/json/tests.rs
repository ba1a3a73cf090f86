//! The JSON layer on fixed replies (no daemon): OpenZFS 2.3's keys and nesting, `--json-int`,
//! `--json-flat-vdevs`, `--json-pool-key-guid`, `-x`, and refusals.

use serde_json::json;
use tarn_proto::{DatasetProp, DatasetRow, PoolListRow, PropertyRow, VdevNodeKind, VdevRole};

use super::*;
use crate::render::GetField;

fn options(command: &str) -> JsonOptions {
    JsonOptions {
        command: command.into(),
        ..JsonOptions::default()
    }
}

fn node(name: &str, kind: VdevNodeKind, role: VdevRole, children: Vec<VdevStatus>) -> VdevStatus {
    VdevStatus {
        name: name.into(),
        kind,
        role,
        state: "ONLINE".into(),
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

fn leaf(name: &str, role: VdevRole) -> VdevStatus {
    node(name, VdevNodeKind::Leaf, role, vec![])
}

/// A degraded raidz1 pool with a special mirror, a log, a cache and a spare.
fn pool() -> PoolStatusInfo {
    let mut bad = leaf("/d/b", VdevRole::Data);
    bad.state = "UNAVAIL".into();
    bad.read = 1500;
    bad.note = Some("cannot open".into());
    bad.device_sizes = Some((0, 1 << 30));
    let mut good = leaf("/d/a", VdevRole::Data);
    good.device_sizes = Some((2 << 30, 1 << 30));
    let mut raidz = node(
        "raidz1-0",
        VdevNodeKind::Raidz(1),
        VdevRole::Data,
        vec![good, bad],
    );
    raidz.state = "DEGRADED".into();
    raidz.guid = 4242;
    raidz.space = Some((3 << 30, 12 << 30));
    let special = node(
        "mirror-1",
        VdevNodeKind::Mirror,
        VdevRole::Special,
        vec![leaf("/d/s1", VdevRole::Data), leaf("/d/s2", VdevRole::Data)],
    );
    let children = vec![
        raidz,
        special,
        leaf("/d/log", VdevRole::Log),
        leaf("/dev/sdc", VdevRole::Cache),
    ];
    let mut spare = leaf("/d/spare", VdevRole::Spare);
    spare.state = "AVAIL".into();
    PoolStatusInfo {
        name: "tank".into(),
        guid: 77,
        state: "DEGRADED".into(),
        status: Some("One or more devices could not be opened.".into()),
        action: Some("Attach the missing device.".into()),
        see: Some("TARN-0002".into()),
        scan: None,
        config: node("tank", VdevNodeKind::Root, VdevRole::Data, children),
        spares: vec![spare],
        errors: vec!["/tank/f".into()],
        error_count: 1,
        txg: 19,
        scan_stats: Some(ScanStats {
            function: "SCRUB".into(),
            state: "FINISHED".into(),
            start_time: 1_800_000_000,
            end_time: 1_800_000_060,
            pause_time: 0,
            to_examine: 2 << 30,
            examined: 2 << 30,
            issued: 2 << 30,
            processed: 4096,
            errors: 0,
            pass_start: 1_800_000_030,
            pass_examined: 1 << 30,
            pass_issued: 512 << 20,
        }),
    }
}

fn status_view(explain: bool) -> View {
    View::Status {
        verbose: true,
        explain,
        slow: false,
        names: vec![],
    }
}

// OpenZFS's nesting: pools by name, the root vdev under `vdevs` with the data vdevs nested,
// classes in their own maps, vdev states as vdev_state_t names, counters as nicenum strings.
#[test]
fn status_nests_vdevs_and_classes() {
    let payload = ReplyPayload::PoolStatus(vec![pool()]);
    let doc = reply(&options("zpool status"), &status_view(false), &payload);
    assert_eq!(
        doc["output_version"],
        json!({"command": "zpool status", "vers_major": 0, "vers_minor": 1})
    );
    let tank = &doc["pools"]["tank"];
    assert_eq!(tank["state"], "DEGRADED");
    assert_eq!(tank["pool_guid"], "77");
    assert_eq!(tank["msgid"], "TARN-0002");
    assert_eq!(tank["error_count"], "1");
    assert_eq!(tank["errlist"], json!(["/tank/f"]));
    assert_eq!(tank["scan"], "none requested");
    let root = &tank["vdevs"]["tank"];
    assert_eq!(root["vdev_type"], "root");
    let raidz = &root["vdevs"]["raidz1-0"];
    assert_eq!(raidz["vdev_type"], "raidz");
    assert_eq!(raidz["state"], "DEGRADED");
    assert_eq!(raidz["guid"], "4242");
    assert_eq!(raidz["alloc_space"], "3G");
    assert_eq!(raidz["total_space"], "12G");
    assert_eq!(tank["txg"], "19");
    let stats = &tank["scan_stats"];
    assert_eq!(
        (&stats["function"], &stats["state"]),
        (&json!("SCRUB"), &json!("FINISHED"))
    );
    assert_eq!(stats["end_time"], "1800000060");
    assert_eq!(
        (&stats["pass_start"], &stats["bytes_per_scan"]),
        (&json!("1800000030"), &json!("1G"))
    );
    assert_eq!(stats["issued_bytes_per_scan"], "512M");
    assert_eq!(stats["scrub_spent_paused"], "0");
    assert_eq!(
        (&stats["issued"], &stats["processed"]),
        (&json!("2G"), &json!("4K"))
    );
    let bad = &raidz["vdevs"]["/d/b"];
    assert!(
        bad.get("guid").is_none() && bad.get("alloc_space").is_none(),
        "{doc:#}"
    );
    assert_eq!(bad["state"], "CANT_OPEN");
    assert_eq!(bad["read_errors"], "1.46K");
    assert_eq!(bad["vdev_type"], "file");
    assert_eq!(bad["path"], "/d/b");
    assert_eq!(bad["note"], "cannot open");
    assert_eq!(raidz["vdevs"]["/d/a"]["state"], "HEALTHY");
    assert_eq!(raidz["vdevs"]["/d/a"]["phys_space"], "2G");
    assert_eq!(raidz["vdevs"]["/d/a"]["rep_dev_size"], "1G");
    assert_eq!(bad["rep_dev_size"], "1G");
    assert!(
        bad.get("phys_space").is_none(),
        "no device, no size: {doc:#}"
    );
    assert!(raidz.get("rep_dev_size").is_none(), "{doc:#}");
    assert!(root["vdevs"].get("mirror-1").is_none(), "{doc:#}");
    assert_eq!(tank["special"]["mirror-1"]["class"], "special");
    assert_eq!(
        tank["special"]["mirror-1"]["vdevs"]["/d/s1"]["class"],
        "special"
    );
    assert_eq!(tank["logs"]["/d/log"]["class"], "log");
    assert_eq!(tank["l2cache"]["/dev/sdc"]["vdev_type"], "disk");
    let spare = &tank["spares"]["/d/spare"];
    assert_eq!(spare["state"], "AVAIL");
    assert!(spare.get("read_errors").is_none(), "{doc:#}");
}

// --json-int makes counters and the GUID integers; --json-flat-vdevs puts every vdev in
// one map naming its parent; --json-pool-key-guid keys the pool by GUID.
#[test]
fn status_flags() {
    let payload = ReplyPayload::PoolStatus(vec![pool()]);
    let flags = JsonOptions {
        int: true,
        flat_vdevs: true,
        pool_key_guid: true,
        ..options("zpool status")
    };
    let doc = reply(&flags, &status_view(false), &payload);
    let tank = &doc["pools"]["77"];
    assert_eq!(tank["name"], "tank");
    assert_eq!(tank["pool_guid"], 77);
    assert_eq!(tank["error_count"], 1);
    assert_eq!(tank["txg"], 19);
    assert_eq!(tank["scan_stats"]["to_examine"], 2u64 << 30);
    assert_eq!(tank["vdevs"]["raidz1-0"]["total_space"], 12u64 << 30);
    let vdevs = tank["vdevs"].as_object().expect("flat map");
    let names: Vec<&str> = vdevs.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "tank", "raidz1-0", "/d/a", "/d/b", "mirror-1", "/d/s1", "/d/s2", "/d/log", "/dev/sdc",
            "/d/spare"
        ]
    );
    assert_eq!(vdevs["/d/b"]["parent"], "raidz1-0");
    assert_eq!(vdevs["/d/b"]["read_errors"], 1500);
    assert_eq!(vdevs["raidz1-0"]["parent"], "tank");
    assert!(vdevs["mirror-1"].get("parent").is_none());
    assert_eq!(vdevs["/d/s1"]["parent"], "mirror-1");
    assert!(vdevs.values().all(|v| v.get("vdevs").is_none()), "{doc:#}");
    assert!(tank.get("special").is_none() && tank.get("spares").is_none());
}

// `-x` shows only pools with a problem: an empty `pools` when all are healthy.
#[test]
fn status_explain_keeps_only_unhealthy_pools() {
    let mut fine = pool();
    fine.name = "fine".into();
    fine.status = None;
    let payload = ReplyPayload::PoolStatus(vec![fine, pool()]);
    let doc = reply(&options("zpool status"), &status_view(true), &payload);
    let names: Vec<&String> = doc["pools"].as_object().expect("pools").keys().collect();
    assert_eq!(names, ["tank"]);
}

fn list_row() -> PoolListRow {
    PoolListRow {
        name: "tank".into(),
        size: 3 << 30,
        alloc: 480 << 10,
        free: (3 << 30) - (480 << 10),
        checkpoint: None,
        expandsize: None,
        frag: Some(0),
        cap: 0,
        dedup_hundredths: 100,
        health: "ONLINE".into(),
        altroot: None,
        guid: 123,
    }
}

// `zpool list -j`: columns under their property names, values as the table shows them,
// `--json-int` turning only all-digit values into integers.
#[test]
fn pool_list_properties() {
    let view = |parsable| View::List {
        columns: crate::render::list_columns("name,size,alloc,cap,health,altroot").unwrap(),
        scripted: false,
        parsable,
        all: true,
    };
    let payload = ReplyPayload::PoolList(vec![list_row()]);
    let doc = reply(&options("zpool list"), &view(false), &payload);
    let tank = &doc["pools"]["tank"];
    assert_eq!(tank["type"], "POOL");
    assert_eq!(tank["state"], "ONLINE");
    let props = tank["properties"].as_object().unwrap();
    let keys: Vec<&String> = props.keys().collect();
    assert_eq!(keys, ["size", "allocated", "capacity", "health", "altroot"]);
    assert_eq!(
        props["size"],
        json!({"value": "3G", "source": {"type": "NONE", "data": "-"}})
    );
    assert_eq!(props["capacity"]["value"], "0%");
    assert_eq!(props["altroot"]["source"]["type"], "DEFAULT");
    let int = JsonOptions {
        int: true,
        ..options("zpool list")
    };
    assert_eq!(
        reply(&int, &view(false), &payload)["pools"]["tank"]["properties"]["size"]["value"],
        "3G"
    );
    let exact = reply(&int, &view(true), &payload);
    assert_eq!(
        exact["pools"]["tank"]["properties"]["size"]["value"],
        3u64 << 30
    );
    assert_eq!(
        exact["pools"]["tank"]["properties"]["health"]["value"],
        "ONLINE"
    );
}

#[test]
fn pool_get_groups_by_pool() {
    let row = |property: &str, value: &str, source: &str| PropertyRow {
        name: "tank".into(),
        property: property.into(),
        value: value.into(),
        source: source.into(),
    };
    let payload = ReplyPayload::Properties(vec![
        row("size", "1073741824", "-"),
        row("failmode", "wait", "default"),
        row("comment", "hi", "local"),
    ]);
    let view = View::Properties {
        fields: crate::render::GET_DEFAULT.to_vec(),
        scripted: false,
        parsable: false,
    };
    let doc = reply(&options("zpool get"), &view, &payload);
    let props = &doc["pools"]["tank"]["properties"];
    assert_eq!(props["size"]["value"], "1G");
    assert_eq!(props["failmode"]["source"]["type"], "DEFAULT");
    assert_eq!(props["comment"]["source"]["type"], "LOCAL");
}

fn prop(property: &str, value: &str, parsable: &str, source: &str, kind: &str) -> DatasetProp {
    DatasetProp {
        property: property.into(),
        value: value.into(),
        parsable: parsable.into(),
        source: source.into(),
        source_kind: kind.into(),
    }
}

fn datasets() -> Vec<DatasetRow> {
    let head = |kind: &str, txg: &str| {
        vec![
            prop("type", kind, kind, "-", "none"),
            prop("createtxg", txg, txg, "-", "none"),
        ]
    };
    let mut fs = head("filesystem", "9");
    fs.push(prop("used", "1K", "1024", "-", "none"));
    fs.push(prop(
        "compression",
        "lz4",
        "lz4",
        "inherited from tank",
        "inherited",
    ));
    fs.push(prop("refer", "1K", "1024", "-", "none"));
    let mut snap = head("snapshot", "12");
    snap.push(prop("used", "0B", "0", "-", "none"));
    vec![
        DatasetRow {
            name: "tank/fs".into(),
            props: fs,
        },
        DatasetRow {
            name: "tank/fs@s".into(),
            props: snap,
        },
    ]
}

// `zfs list -j`: datasets by name with OpenZFS's head (type, pool, createtxg, a snapshot's
// dataset and name) and the columns under their full names, sources typed.
#[test]
fn dataset_list_head_and_properties() {
    let view = View::DatasetList(ListView {
        columns: vec![
            "name".into(),
            "used".into(),
            "refer".into(),
            "compression".into(),
        ],
        scripted: false,
        parsable: false,
        sort: vec![("used".into(), false)],
    });
    let payload = ReplyPayload::Datasets(datasets());
    let doc = reply(&options("zfs list"), &view, &payload);
    let names: Vec<&String> = doc["datasets"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["tank/fs@s", "tank/fs"], "sorted by used");
    let fs = &doc["datasets"]["tank/fs"];
    assert_eq!(fs["type"], "FILESYSTEM");
    assert_eq!(fs["pool"], "tank");
    assert_eq!(fs["createtxg"], "9");
    let keys: Vec<&String> = fs["properties"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["used", "referenced", "compression"]);
    assert_eq!(
        fs["properties"]["compression"],
        json!({"value": "lz4", "source": {"type": "INHERITED", "data": "tank"}})
    );
    let snap = &doc["datasets"]["tank/fs@s"];
    assert_eq!(snap["type"], "SNAPSHOT");
    assert_eq!(snap["dataset"], "tank/fs");
    assert_eq!(snap["snapshot_name"], "s");
    assert_eq!(snap["properties"]["compression"]["value"], "-");
}

// `zfs get -j`: the properties asked (not the head the plan added), `-s` filtering, and a
// dataset left with none left out.
#[test]
fn dataset_get_hides_the_head_and_filters_sources() {
    let view = |sources: Option<Vec<String>>| {
        View::DatasetGet(GetView {
            fields: vec![GetField::Value],
            scripted: false,
            parsable: true,
            sources,
            aliases: vec![],
            hidden: vec!["type".into(), "createtxg".into()],
        })
    };
    let payload = ReplyPayload::Datasets(datasets());
    let int = JsonOptions {
        int: true,
        ..options("zfs get")
    };
    let doc = reply(&int, &view(None), &payload);
    let fs = &doc["datasets"]["tank/fs"];
    assert_eq!(fs["createtxg"], 9);
    let keys: Vec<&String> = fs["properties"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["used", "compression", "refer"]);
    assert_eq!(fs["properties"]["used"]["value"], 1024);
    let inherited = reply(&int, &view(Some(vec!["inherited".into()])), &payload);
    let names: Vec<&String> = inherited["datasets"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["tank/fs"]);
}

// A reply without an OpenZFS schema keeps its own key beside `output_version`; a refusal
// is `error` with the line and the exit status.
#[test]
fn other_replies_and_errors() {
    let doc = reply(
        &options("zpool history"),
        &View::History { long: false },
        &ReplyPayload::History(vec![]),
    );
    assert_eq!(doc["history"], json!([]));
    assert_eq!(doc["output_version"]["command"], "zpool history");
    let unit = reply(&options("zfs set"), &View::Silent, &ReplyPayload::Unit);
    assert_eq!(unit.as_object().unwrap().len(), 1, "{unit}");
    let error = error(&options("zfs list"), "cannot open 'x': no such pool\n", 1);
    assert_eq!(
        error["error"],
        json!({"message": "cannot open 'x': no such pool", "code": 1})
    );
}
