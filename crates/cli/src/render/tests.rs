//! Complete expected texts for every layout (goal: byte-identical to `zpool`'s layouts;
//! method: fixed replies in, whole strings compared, trailing spaces included).

use tarn_proto::{HistoryEntry, VdevNodeKind, VdevRole};

use super::*;

fn node(name: &str, kind: VdevNodeKind, role: VdevRole, children: Vec<VdevStatus>) -> VdevStatus {
    VdevStatus {
        name: name.to_string(),
        kind,
        role,
        state: "ONLINE".to_string(),
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

fn leaf(name: &str) -> VdevStatus {
    node(name, VdevNodeKind::Leaf, VdevRole::Data, vec![])
}

fn tree() -> VdevStatus {
    let mut bad = leaf("/d/b");
    bad.state = "FAULTED".to_string();
    bad.cksum = 2048;
    bad.read = 3;
    bad.note = Some("too many errors".to_string());
    let mut mirror = node(
        "mirror-0",
        VdevNodeKind::Mirror,
        VdevRole::Data,
        vec![leaf("/d/a"), bad],
    );
    mirror.state = "DEGRADED".to_string();
    let log = node("/d/log", VdevNodeKind::Leaf, VdevRole::Log, vec![]);
    let cache = node("/d/cache", VdevNodeKind::Leaf, VdevRole::Cache, vec![]);
    let special = node(
        "mirror-2",
        VdevNodeKind::Mirror,
        VdevRole::Special,
        vec![leaf("/d/s1"), leaf("/d/s2")],
    );
    let mut root = node(
        "tank",
        VdevNodeKind::Root,
        VdevRole::Data,
        vec![mirror, log, cache, special],
    );
    root.state = "DEGRADED".to_string();
    root
}

fn spare(state: &str) -> VdevStatus {
    let mut spare = leaf("/d/spare");
    spare.state = state.to_string();
    spare
}

fn degraded() -> PoolStatusInfo {
    PoolStatusInfo {
        name: "tank".into(),
        guid: 77,
        state: "DEGRADED".into(),
        status: Some("One or more devices are faulted.\nSufficient replicas exist.".into()),
        action: Some("Replace the faulted device.".into()),
        see: Some("TARN-0003".into()),
        scan: None,
        config: tree(),
        spares: vec![spare("AVAIL")],
        errors: vec!["/tank/a".into(), "/tank/b".into()],
        error_count: 2,
        txg: 0,
        scan_stats: None,
    }
}

fn healthy(name: &str) -> PoolStatusInfo {
    PoolStatusInfo {
        name: name.into(),
        guid: 1,
        state: "ONLINE".into(),
        status: None,
        action: None,
        see: None,
        scan: Some(
            "scrub repaired 0B in 00:00:01 with 0 errors on Tue Nov 14 22:13:20 2023".into(),
        ),
        config: node(name, VdevNodeKind::Root, VdevRole::Data, vec![leaf("/d/x")]),
        spares: vec![],
        errors: vec![],
        error_count: 0,
        txg: 0,
        scan_stats: None,
    }
}

#[test]
fn status_layout() {
    let expected = "  pool: tank
 state: DEGRADED
status: One or more devices are faulted.
\tSufficient replicas exist.
action: Replace the faulted device.
   see: TARN-0003
  scan: none requested
config:

\tNAME        STATE     READ WRITE CKSUM
\ttank        DEGRADED     0     0     0
\t  mirror-0  DEGRADED     0     0     0
\t    /d/a    ONLINE       0     0     0
\t    /d/b    FAULTED      3     0    2K  too many errors
\tspecial\t
\t  mirror-2  ONLINE       0     0     0
\t    /d/s1   ONLINE       0     0     0
\t    /d/s2   ONLINE       0     0     0
\tlogs\t
\t  /d/log    ONLINE       0     0     0
\tcache
\t  /d/cache  ONLINE       0     0     0
\tspares
\t  /d/spare  AVAIL   

errors: 2 data errors, use '-v' for a list
";
    assert_eq!(status(&[degraded()], false), expected);
}

/// Goal: `status -s` adds SLOW after CKSUM: a leaf's count, `-` for interior vdevs (as
/// ZFS prints it), nothing for spares.
#[test]
fn status_slow_column() {
    let mut pool = degraded();
    pool.config.children[0].children[1].slow = 1500;
    pool.config.children[0].slow = 1500;
    let text = status_with(&[pool], false, true);
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("NAME"))
        .take(5)
        .collect();
    assert_eq!(
        table,
        vec![
            "\tNAME        STATE     READ WRITE CKSUM  SLOW",
            "\ttank        DEGRADED     0     0     0     -",
            "\t  mirror-0  DEGRADED     0     0     0     -",
            "\t    /d/a    ONLINE       0     0     0     0",
            "\t    /d/b    FAULTED      3     0    2K 1.46K  too many errors",
        ]
    );
    assert!(
        text.contains("\t  /d/spare  AVAIL   \n"),
        "spares have no counters"
    );
}

#[test]
fn status_verbose_lists_damaged_files_and_separates_pools() {
    let expected = "  pool: a
 state: ONLINE
  scan: scrub repaired 0B in 00:00:01 with 0 errors on Tue Nov 14 22:13:20 2023
config:

\tNAME        STATE     READ WRITE CKSUM
\ta           ONLINE       0     0     0
\t  /d/x      ONLINE       0     0     0

errors: No known data errors

  pool: b
 state: ONLINE
  scan: scrub repaired 0B in 00:00:01 with 0 errors on Tue Nov 14 22:13:20 2023
config:

\tNAME        STATE     READ WRITE CKSUM
\tb           ONLINE       0     0     0
\t  /d/x      ONLINE       0     0     0

errors: No known data errors
";
    assert_eq!(status(&[healthy("a"), healthy("b")], true), expected);
    let text = status(&[degraded()], true);
    assert!(
        text.ends_with(
            "errors: Permanent errors have been detected in the following files:\n\n        \
             /tank/a\n        /tank/b\n"
        ),
        "{text}"
    );
}

#[test]
fn status_explain_shapes() {
    assert_eq!(
        status_explain(&[healthy("a")], &[], false, false),
        "all pools are healthy\n"
    );
    assert_eq!(
        status_explain(&[healthy("a")], &["a".to_string()], false, false),
        "pool 'a' is healthy\n"
    );
    let both = status_explain(&[healthy("a"), degraded()], &[], false, false);
    assert_eq!(both, status(&[degraded()], false));
}

fn list_row() -> PoolListRow {
    PoolListRow {
        name: "tank".into(),
        size: 1_992_864_825_344,
        alloc: 480 << 10,
        free: 1_992_864_825_344 - (480 << 10),
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

#[test]
fn pool_list_layouts() {
    let expected = "\
NAME   SIZE  ALLOC   FREE  CKPOINT  EXPANDSZ   FRAG    CAP  DEDUP    HEALTH  ALTROOT
tank  1.81T   480K  1.81T        -         -     0%     0%  1.00x    ONLINE  -
";
    assert_eq!(
        pool_list(&[list_row()], LIST_DEFAULT, false, false),
        expected
    );
    let scripted = "tank\t1992864825344\t491520\t1992864333824\t-\t-\t0\t0\t1.00\tONLINE\t-\n";
    assert_eq!(pool_list(&[list_row()], LIST_DEFAULT, true, true), scripted);
    let columns = list_columns("name,CAP,health,guid").expect("valid");
    let expected = "\
NAME    CAP    HEALTH   GUID
tank     0%    ONLINE    123
";
    assert_eq!(pool_list(&[list_row()], &columns, false, false), expected);
    assert_eq!(
        list_columns("name,bogus"),
        Err(
            "invalid property 'bogus': valid columns are name, size, allocated, free, \
             checkpoint, expandsize, fragmentation, capacity, dedupratio, health, altroot, guid"
                .to_string()
        )
    );
}

fn property(name: &str, property: &str, value: &str, source: &str) -> PropertyRow {
    PropertyRow {
        name: name.into(),
        property: property.into(),
        value: value.into(),
        source: source.into(),
    }
}

#[test]
fn pool_get_layouts() {
    let rows = vec![
        property("tank", "size", "1992864825344", "-"),
        property("tank", "capacity", "12", "-"),
        property("tank", "dedupratio", "1.00", "-"),
        property("tank", "comment", "-", "default"),
        property("tank", "ashift", "12", "local"),
    ];
    let expected = "\
NAME  PROPERTY    VALUE  SOURCE
tank  size        1.81T  -
tank  capacity    12%    -
tank  dedupratio  1.00x  -
tank  comment     -      default
tank  ashift      12     local
";
    assert_eq!(properties(&rows, GET_DEFAULT, false, false), expected);
    let fields = get_fields("property,value").expect("valid");
    assert_eq!(
        properties(&rows[..2], &fields, true, true),
        "size\t1992864825344\ncapacity\t12\n"
    );
    assert_eq!(
        get_fields("value,nope"),
        Err("invalid field 'nope': valid fields are name, property, value, source".to_string())
    );
}

#[test]
fn import_listing_layout() {
    let mut config = tree();
    config.children.retain(|c| c.role != VdevRole::Special);
    let pool = ImportablePool {
        name: "tank".into(),
        guid: 15_288_846_046_214_862_347,
        state: "DEGRADED".into(),
        status: Some("One or more devices are missing from the system.".into()),
        action: "The pool can be imported despite missing or damaged devices.  The\n\
                 fault tolerance of the pool may be compromised if imported."
            .into(),
        see: None,
        config,
        spares: vec![spare("AVAIL")],
    };
    let mut ok = pool.clone();
    ok.name = "data".into();
    ok.state = "ONLINE".into();
    ok.status = None;
    ok.action = "The pool can be imported using its name or numeric identifier.".into();
    ok.config = node(
        "data",
        VdevNodeKind::Root,
        VdevRole::Data,
        vec![leaf("/d/x")],
    );
    ok.spares = vec![];
    let expected = "   pool: tank
     id: 15288846046214862347
  state: DEGRADED
 status: One or more devices are missing from the system.
 action: The pool can be imported despite missing or damaged devices.  The
\tfault tolerance of the pool may be compromised if imported.
 config:

\ttank        DEGRADED
\t  mirror-0  DEGRADED
\t    /d/a    ONLINE
\t    /d/b    FAULTED  too many errors
\tcache
\t  /d/cache
\tspares
\t  /d/spare
\tlogs\t
\t  /d/log    ONLINE

   pool: data
     id: 15288846046214862347
  state: ONLINE
 action: The pool can be imported using its name or numeric identifier.
 config:

\tdata        ONLINE
\t  /d/x      ONLINE
";
    assert_eq!(importable(&[pool, ok]), expected);
}

#[test]
fn create_dry_run_layout() {
    let mut config = tree();
    config.children[0].name = "mirror".into();
    config.children[3].name = "mirror".into();
    let layout_text = layout(
        "tank",
        false,
        &PoolLayout {
            config,
            spares: vec![spare("")],
        },
    );
    let expected = "would create 'tank' with the following layout:

\ttank
\t  mirror
\t    /d/a
\t    /d/b
\tspecial
\t  mirror
\t    /d/s1
\t    /d/s2
\tlogs
\t  /d/log
\tcache
\t  /d/cache
\tspares
\t  /d/spare
";
    assert_eq!(layout_text, expected);
}

#[test]
fn history_layouts() {
    let entry = |time, command: &str| HistoryEntry {
        time,
        command: command.into(),
        internal: false,
        uid: 0,
        user: "root".into(),
        host: "node1".into(),
    };
    let pools = vec![HistoryPool {
        name: "tank".into(),
        entries: vec![
            entry(1_700_000_000, "tarn pool create tank /d/a"),
            entry(1_700_000_061, "tarn pool set comment=x tank"),
        ],
    }];
    let expected = "History for 'tank':
2023-11-14.22:13:20 tarn pool create tank /d/a
2023-11-14.22:14:21 tarn pool set comment=x tank

";
    assert_eq!(history(&pools, false), expected);
    let mut anonymous = pools.clone();
    anonymous[0].entries[1].user = String::new();
    anonymous[0].entries[1].uid = 1000;
    let expected = "History for 'tank':
2023-11-14.22:13:20 tarn pool create tank /d/a [user 0 (root) on node1]
2023-11-14.22:14:21 tarn pool set comment=x tank [user 1000 on node1]

";
    assert_eq!(history(&anonymous, true), expected);
}

#[test]
fn txg_table() {
    let rows = vec![
        TxgRow {
            txg: 9,
            timestamp: 1_700_000_000,
        },
        TxgRow {
            txg: 10,
            timestamp: 1_700_000_005,
        },
    ];
    let expected = "\
TXG   TIMESTAMP  DATE
  9  1700000000  2023-11-14.22:13:20
 10  1700000005  2023-11-14.22:13:25
";
    assert_eq!(txgs(&rows, false), expected);
}

#[test]
fn error_line_shapes() {
    assert_eq!(
        error_line("create", Some("tank"), "pool already exists"),
        "cannot create 'tank': pool already exists"
    );
    assert_eq!(
        error_line("list pools", None, "engine not available"),
        "cannot list pools: engine not available"
    );
}

#[test]
fn counters_use_nicenum() {
    assert_eq!(counter(0), "0");
    assert_eq!(counter(1023), "1023");
    assert_eq!(counter(1536), "1.50K");
}

#[test]
fn scan_in_progress_continues_on_tab_indented_lines() {
    let mut pool = healthy("tank");
    pool.scan = Some(
        "scrub in progress since Sun Nov 22 14:30:00 2026\n1.23G scanned at 400M/s, 1.10G \
         issued at 380M/s, 5G total\n0B repaired, 22.00% done, 00:00:10 to go"
            .into(),
    );
    let text = status(&[pool], false);
    let expected = "  scan: scrub in progress since Sun Nov 22 14:30:00 2026\n\
                    \t1.23G scanned at 400M/s, 1.10G issued at 380M/s, 5G total\n\
                    \t0B repaired, 22.00% done, 00:00:10 to go\nconfig:\n";
    assert!(text.contains(expected), "{text}");
}

#[test]
fn progress_lines() {
    let progress = |done, total| Progress {
        operation: "scrub".into(),
        done,
        total,
    };
    assert_eq!(progress_line(&progress(0, 0)), "scrub: 0B issued");
    assert_eq!(
        progress_line(&progress(11 << 29, 5 << 30)),
        "scrub: 5.50G issued of 5G, 100.00% done"
    );
    assert_eq!(
        progress_line(&progress(1 << 30, 4 << 30)),
        "scrub: 1G issued of 4G, 25.00% done"
    );
}

#[test]
fn notices_are_lines() {
    assert_eq!(notice(&["a".into(), "b".into()]), "a\nb\n");
    assert_eq!(notice(&[]), "");
}
