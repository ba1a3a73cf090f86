//! Round trips, bounds and malformed input for the codec functions.

use super::*;

fn leaf(name: &str) -> VdevStatus {
    VdevStatus {
        name: name.to_string(),
        kind: VdevNodeKind::Leaf,
        role: VdevRole::Data,
        state: "ONLINE".to_string(),
        read: 0,
        write: 1,
        cksum: 2,
        slow: 3,
        note: Some("was /dev/x".to_string()),
        guid: 0,
        space: None,
        device_sizes: None,
        children: vec![],
    }
}

/// `pool add` (a dry run) and `pool remove`.
fn topology_requests() -> Vec<Request> {
    vec![
        Request::PoolAdd(PoolAdd {
            name: "tank".into(),
            vdevs: vec![VdevGroupSpec {
                role: VdevRole::Special,
                kind: VdevKind::Mirror,
                devices: vec!["/d/s0".into(), "/d/s1".into()],
            }],
            force: false,
            dry_run: true,
        }),
        Request::PoolRemove {
            name: "tank".into(),
            device: "/d/log".into(),
        },
    ]
}

fn sample_requests() -> Vec<Request> {
    vec![
        Request::Ping,
        Request::Shutdown,
        Request::PoolCreate(PoolCreate {
            name: "tank".to_string(),
            vdevs: vec![
                VdevGroupSpec {
                    role: VdevRole::Data,
                    kind: VdevKind::Raidz(2),
                    devices: vec!["/d/a".into(), "/d/b".into(), "/d/c".into()],
                },
                VdevGroupSpec {
                    role: VdevRole::Spare,
                    kind: VdevKind::Disk,
                    devices: vec!["/d/new\nline".into()],
                },
            ],
            properties: vec![("ashift".into(), "12".into())],
            fs_properties: vec![("compression".into(), "lz4".into())],
            mountpoint: Some("/mnt/tank".into()),
            force: true,
            dry_run: false,
        }),
        Request::PoolDestroy {
            name: "tank".into(),
            force: false,
        },
        Request::PoolList { names: vec![] },
        Request::PoolStatus {
            names: vec!["a".into()],
            verbose: true,
            only_unhealthy: false,
        },
        Request::PoolGet {
            properties: vec!["all".into()],
            names: vec![],
        },
        Request::PoolSet {
            property: "comment".into(),
            value: "x=y".into(),
            name: "t".into(),
        },
        Request::PoolExport {
            name: "tank".into(),
            force: true,
        },
        Request::PoolImportList {
            dirs: vec!["/d".into()],
        },
        Request::PoolImport(PoolImport {
            dirs: vec![],
            pool: "1234".into(),
            new_name: Some("other".into()),
            force: false,
            rewind_txg: Some(7),
            rewind: true,
            readonly: true,
            extreme: true,
            dry_run: false,
        }),
    ]
    .into_iter()
    .chain(sample_maintenance_requests())
    .chain(sample_space_requests())
    .chain(topology_requests())
    .collect()
}

fn sample_maintenance_requests() -> Vec<Request> {
    vec![
        Request::PoolImportTxgs {
            dirs: vec![],
            pool: "tank".into(),
        },
        Request::PoolHistory {
            names: vec![],
            long: true,
            internal: true,
        },
        Request::PoolScrub {
            names: vec!["tank".into(), "pool2".into()],
            action: ScrubAction::Pause,
            wait: true,
        },
        Request::PoolClear {
            name: "tank".into(),
            device: Some("/d/a".into()),
        },
        Request::PoolOffline {
            name: "tank".into(),
            device: "12345".into(),
            temporary: true,
        },
        Request::PoolOnline {
            name: "tank".into(),
            device: "sdb".into(),
        },
        Request::PoolReplace {
            name: "tank".into(),
            old: "sdb".into(),
            new: Some("/dev/sdc".into()),
            sequential: true,
            force: true,
            wait: false,
        },
        Request::PoolWait {
            name: "tank".into(),
            activity: Some("resilver".into()),
        },
        Request::PoolAttach {
            name: "tank".into(),
            device: "sdb".into(),
            new: "/dev/sdc".into(),
        },
        Request::PoolDetach {
            name: "tank".into(),
            device: "sdb".into(),
        },
        Request::PoolIostat {
            names: vec!["tank".into()],
        },
        Request::PoolEvents {
            name: None,
            after: 3,
            clear: true,
        },
    ]
}

fn sample_space_requests() -> Vec<Request> {
    vec![
        Request::Userspace {
            name: "tank/home".into(),
            space: "group".into(),
        },
        Request::Project {
            path: "/tank/home/p".into(),
            id: Some(42),
            inherit: true,
            clear: false,
            keep: false,
            recursive: true,
        },
    ]
}

#[test]
fn requests_round_trip_as_single_lines() {
    // Goal: every request variant survives encode/decode unchanged and encodes to exactly one
    // line (I1), even with a newline inside a string.
    for request in sample_requests() {
        let line = encode_request(&request).expect("encodes");
        let text = String::from_utf8(line.clone()).expect("utf-8");
        assert!(
            text.contains(request.verb()),
            "verb {} is the wire tag: {text}",
            request.verb()
        );
        assert_eq!(
            line.iter().filter(|&&b| b == b'\n').count(),
            1,
            "{request:?}"
        );
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(decode_request(&line).expect("decodes"), request);
    }
}

#[test]
fn server_lines_round_trip() {
    let status = PoolStatusInfo {
        name: "tank".into(),
        guid: 42,
        state: "DEGRADED".into(),
        status: Some("one\ntwo".into()),
        action: None,
        see: Some("TARN-0001".into()),
        scan: None,
        config: VdevStatus {
            name: "tank".into(),
            kind: VdevNodeKind::Root,
            children: vec![leaf("/d/a")],
            ..leaf("tank")
        },
        spares: vec![leaf("/d/s")],
        errors: vec!["/tank/file".into()],
        error_count: 1,
        txg: 0,
        scan_stats: None,
    };
    let lines = vec![
        ServerLine::Progress(Progress {
            operation: "scrub".into(),
            done: 5,
            total: 10,
        }),
        ServerLine::Response(Response::Ok(ReplyPayload::PoolStatus(vec![status]))),
        ServerLine::Response(Response::error("no such pool 'x'")),
        ServerLine::Response(Response::Ok(ReplyPayload::Txgs(vec![TxgRow {
            txg: 9,
            timestamp: 1_700_000_000,
        }]))),
        ServerLine::Response(Response::Ok(ReplyPayload::Notice(vec!["a\nb".into()]))),
        ServerLine::Response(Response::Ok(ReplyPayload::Userspace(vec![UserspaceRow {
            id: 1000,
            used: 4096,
            quota: Some(1 << 30),
            objused: 1,
            objquota: None,
        }]))),
        ServerLine::Response(Response::Ok(ReplyPayload::Projects(vec![ProjectRow {
            path: "/tank/p".into(),
            id: 42,
            inherit: true,
        }]))),
        ServerLine::Response(Response::Ok(ReplyPayload::Iostat(vec![IostatPool {
            name: "tank".into(),
            time_ns: 5,
            imported_ns: 1,
            root: IostatRow {
                name: "tank".into(),
                alloc: Some(1),
                read_ops: 2,
                children: vec![IostatRow {
                    name: "/d/a".into(),
                    writes_pending: 3,
                    ..IostatRow::default()
                }],
                ..IostatRow::default()
            },
        }]))),
    ];
    for line in lines {
        let bytes = encode_server_line(&line).expect("encodes");
        assert_eq!(decode_server_line(&bytes).expect("decodes"), line);
    }
}

#[test]
fn crlf_and_missing_terminator_are_accepted() {
    assert_eq!(
        decode_request(b"\"ping\"\r\n").expect("crlf"),
        Request::Ping
    );
    assert_eq!(decode_request(b"\"ping\"").expect("bare"), Request::Ping);
}

#[test]
fn malformed_input_is_an_error() {
    for input in [
        &b""[..],
        b"\n",
        b"{",
        b"\"pong\"",
        b"{\"pool_destroy\":{\"name\":1,\"force\":false}}",
        b"{\"pool_create\":{}}",
        b"\xff\xfe",
        // Deeper than serde_json's recursion limit: refused, not a stack overflow.
        &[b'['; 10_000][..],
    ] {
        let err = decode_request(input).expect_err("must not decode");
        assert!(
            matches!(err, ProtoError::Malformed { .. }),
            "{input:?}: {err}"
        );
    }
}

#[test]
fn unknown_fields_are_ignored() {
    let line = b"{\"pool_destroy\":{\"name\":\"t\",\"force\":true,\"later\":1}}";
    assert_eq!(
        decode_request(line).expect("decodes"),
        Request::PoolDestroy {
            name: "t".into(),
            force: true
        }
    );
}

#[test]
fn over_long_lines_are_refused_both_ways() {
    let long = vec![b' '; MAX_LINE_BYTES + 1];
    assert!(
        matches!(decode_request(&long), Err(ProtoError::TooLong { len, .. }) if len == long.len())
    );
    let request = Request::PoolList {
        names: vec!["x".repeat(MAX_LINE_BYTES)],
    };
    assert!(matches!(
        encode_request(&request),
        Err(ProtoError::TooLong { .. })
    ));
}

#[test]
fn cache_file_round_trips_and_checks_version() {
    let pools = vec![CacheEntry {
        name: "tank".into(),
        guid: 7,
        devices: vec!["/d/a".into()],
    }];
    let bytes = encode_cache_file(&pools).expect("encodes");
    assert_eq!(decode_cache_file(&bytes).expect("decodes"), pools);
    let future = b"{\"version\":2,\"pools\":[]}";
    assert!(matches!(
        decode_cache_file(future),
        Err(ProtoError::CacheVersion {
            found: 2,
            expected: 1
        })
    ));
}

#[test]
fn group_check_enforces_device_counts() {
    let group = |kind, n: usize| VdevGroupSpec {
        role: VdevRole::Data,
        kind,
        devices: (0..n).map(|i| format!("/d/{i}")).collect(),
    };
    assert_eq!(group(VdevKind::Disk, 1).check(), Ok(()));
    assert!(group(VdevKind::Disk, 2).check().is_err());
    assert_eq!(
        group(VdevKind::Mirror, 1).check(),
        Err("mirror requires at least 2 devices".into())
    );
    assert_eq!(group(VdevKind::Mirror, 2).check(), Ok(()));
    assert_eq!(
        group(VdevKind::Raidz(3), 3).check(),
        Err("raidz3 requires at least 4 devices".into())
    );
    assert_eq!(group(VdevKind::Raidz(3), 4).check(), Ok(()));
    assert!(group(VdevKind::Raidz(4), 9).check().is_err());
    assert!(group(VdevKind::Raidz(0), 9).check().is_err());
    assert!(group(VdevKind::Mirror, 256).check().is_err());
}

#[test]
fn pool_set_changes_are_flagged() {
    assert!(
        Request::PoolDestroy {
            name: "t".into(),
            force: false
        }
        .changes_pool_set()
    );
    assert!(!Request::PoolList { names: vec![] }.changes_pool_set());
    let mut create = match &sample_requests()[2] {
        Request::PoolCreate(create) => create.clone(),
        other => panic!("sample 2 is {other:?}"),
    };
    assert!(Request::PoolCreate(create.clone()).changes_pool_set());
    create.dry_run = true;
    assert!(!Request::PoolCreate(create).changes_pool_set());
    let mut add = match &topology_requests()[0] {
        Request::PoolAdd(add) => add.clone(),
        other => panic!("topology sample 0 is {other:?}"),
    };
    assert!(!Request::PoolAdd(add.clone()).changes_pool_set());
    add.dry_run = false;
    assert!(Request::PoolAdd(add).changes_pool_set());
}

proptest::proptest! {
    // Goal: I3, arbitrary bytes never panic the decoders (the in-tree stand-in for the fuzz
    // target).
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)
    ) {
        let _ = decode_request(&bytes);
        let _ = decode_server_line(&bytes);
        let _ = decode_cache_file(&bytes);
    }
}
