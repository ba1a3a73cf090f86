//! From argv to request and from response to outcome, without a daemon.

use clap::Parser;
use tarn_proto::ErrorReply;

use super::*;

fn plan_of(argv: &str) -> Result<Plan, Outcome> {
    let cli = Cli::try_parse_from(argv.split_whitespace()).expect("argv parses");
    let Command::Pool(command) = cli.command else {
        panic!("not a pool command: {argv}")
    };
    plan(command, Path::new("/work"))
}

fn refusal(argv: &str) -> Outcome {
    plan_of(argv).expect_err("refused")
}

#[test]
fn create_plans_absolute_devices_and_properties() {
    let plan =
        plan_of("tarn pool create -n -o ashift=12 -O compression=lz4 -m /mnt tank mirror a /d/b")
            .expect("plans");
    assert_eq!(plan.verb, "create");
    assert_eq!(plan.object.as_deref(), Some("tank"));
    assert_eq!(
        plan.view,
        View::Layout {
            name: "tank".into(),
            update: false
        }
    );
    let Request::PoolCreate(create) = plan.request else {
        panic!("{:?}", plan.request)
    };
    assert_eq!(create.vdevs[0].devices, ["/work/a", "/d/b"]);
    assert_eq!(
        create.properties,
        [("ashift".to_string(), "12".to_string())]
    );
    assert_eq!(
        create.fs_properties,
        [("compression".to_string(), "lz4".to_string())]
    );
    assert_eq!(create.mountpoint.as_deref(), Some("/mnt"));
    assert!(create.dry_run && !create.force);
}

#[test]
fn refusals_found_by_the_cli_are_one_line() {
    let outcome = refusal("tarn pool create tank raidz2 /a /b");
    assert_eq!(
        outcome,
        Outcome {
            stdout: String::new(),
            stderr: "cannot create 'tank': invalid vdev specification: raidz2 requires at \
                     least 3 devices\n"
                .into(),
            code: 1,
        }
    );
    let outcome = refusal("tarn pool import -o cachefile=none tank");
    assert_eq!(
        outcome.stderr,
        "cannot import 'tank': property 'cachefile' cannot be set at import; valid: \
         readonly=on|off\n"
    );
    assert_eq!(outcome.code, 1);
    let outcome = refusal("tarn pool list -o name,sise");
    assert_eq!(outcome.code, 2);
    assert!(
        outcome
            .stderr
            .starts_with("invalid property 'sise': valid columns are name,")
    );
}

#[test]
fn usage_errors_come_from_clap() {
    for argv in [
        "tarn pool create tank",
        "tarn pool set readonly tank",
        "tarn pool import --list-txgs",
        "tarn pool import -T notanumber tank",
        "tarn pool frobnicate",
    ] {
        let error = Cli::try_parse_from(argv.split_whitespace()).expect_err(argv);
        assert_eq!(error.exit_code(), 2, "{argv}");
    }
}

#[test]
fn import_forms() {
    let plan = plan_of("tarn pool import -d devs -d /abs").expect("plans");
    assert_eq!(
        plan.request,
        Request::PoolImportList {
            dirs: vec!["/work/devs".into(), "/abs".into()]
        }
    );
    assert_eq!(plan.object, None);
    let plan = plan_of("tarn pool import --list-txgs tank").expect("plans");
    assert_eq!(
        plan.request,
        Request::PoolImportTxgs {
            dirs: vec![],
            pool: "tank".into()
        }
    );
    let plan = plan_of("tarn pool import -f -F -T 42 -o readonly=on 123 newtank").expect("plans");
    assert_eq!(
        plan.request,
        Request::PoolImport(PoolImport {
            dirs: vec![],
            pool: "123".into(),
            new_name: Some("newtank".into()),
            force: true,
            rewind_txg: Some(42),
            rewind: true,
            readonly: true,
            extreme: false,
            dry_run: false,
        })
    );
    let plan = plan_of("tarn pool import -n -X tank").expect("plans");
    let Request::PoolImport(import) = plan.request else {
        panic!("{:?}", plan.request);
    };
    assert!(
        import.extreme && import.dry_run && !import.rewind,
        "{import:?}"
    );
}

#[test]
fn other_verbs_plan_their_requests() {
    let check = |argv: &str, request: Request, verb: &str, object: Option<&str>| {
        let plan = plan_of(argv).expect("plans");
        assert_eq!(plan.request, request, "{argv}");
        assert_eq!(plan.verb, verb, "{argv}");
        assert_eq!(plan.object.as_deref(), object, "{argv}");
    };
    check(
        "tarn pool destroy -f tank",
        Request::PoolDestroy {
            name: "tank".into(),
            force: true,
        },
        "destroy",
        Some("tank"),
    );
    check(
        "tarn pool list",
        Request::PoolList { names: vec![] },
        "list pools",
        None,
    );
    check(
        "tarn pool list tank",
        Request::PoolList {
            names: vec!["tank".into()],
        },
        "open",
        Some("tank"),
    );
    check(
        "tarn pool status -x -v a b",
        Request::PoolStatus {
            names: vec!["a".into(), "b".into()],
            verbose: true,
            only_unhealthy: true,
        },
        "get pool status",
        None,
    );
    check(
        "tarn pool get -H size,free tank",
        Request::PoolGet {
            properties: vec!["size".into(), "free".into()],
            names: vec!["tank".into()],
        },
        "get property for",
        Some("tank"),
    );
    check(
        "tarn pool set comment=a=b tank",
        Request::PoolSet {
            property: "comment".into(),
            value: "a=b".into(),
            name: "tank".into(),
        },
        "set property for",
        Some("tank"),
    );
    check(
        "tarn pool export tank",
        Request::PoolExport {
            name: "tank".into(),
            force: false,
        },
        "export",
        Some("tank"),
    );
    check(
        "tarn pool history -i -l",
        Request::PoolHistory {
            names: vec![],
            long: true,
            internal: true,
        },
        "get history",
        None,
    );
}

#[test]
fn daemon_errors_become_one_line_with_overrides() {
    let plan = plan_of("tarn pool destroy tank").expect("plans");
    let outcome = finish(&plan, Response::error("pool is busy"), None);
    assert_eq!(outcome.stderr, "cannot destroy 'tank': pool is busy\n");
    assert_eq!((outcome.code, outcome.stdout.as_str()), (1, ""));
    let plan = plan_of("tarn pool get size,bogus tank").expect("plans");
    let reply = Response::Error(ErrorReply {
        message: "invalid property; valid properties are size, free".into(),
        verb: Some("get".into()),
        object: Some("bogus".into()),
    });
    assert_eq!(
        finish(&plan, reply, None).stderr,
        "cannot get 'bogus': invalid property; valid properties are size, free\n"
    );
    let plan = plan_of("tarn pool list").expect("plans");
    assert_eq!(
        finish(&plan, Response::error("engine not available"), None).stderr,
        "cannot list pools: engine not available\n"
    );
}

#[test]
fn replies_render_or_are_refused() {
    let plan = plan_of("tarn pool destroy tank").expect("plans");
    assert_eq!(
        finish(&plan, Response::Ok(ReplyPayload::Unit), None),
        Outcome::ok(String::new())
    );
    let wrong = finish(&plan, Response::Ok(ReplyPayload::PoolList(vec![])), None);
    assert_eq!(
        wrong.stderr,
        "cannot destroy 'tank': unexpected reply from the daemon (is it another version?)\n"
    );
    let plan = plan_of("tarn pool list").expect("plans");
    let empty = Response::Ok(ReplyPayload::PoolList(vec![]));
    assert_eq!(
        finish(&plan, empty.clone(), None).stdout,
        "no pools available\n"
    );
    let json = crate::json::JsonOptions {
        command: "zpool list".into(),
        ..Default::default()
    };
    let document: serde_json::Value =
        serde_json::from_str(&finish(&plan, empty, Some(&json)).stdout).expect("JSON");
    assert_eq!(document["pools"], serde_json::json!({}));
    let plan = plan_of("tarn pool status").expect("plans");
    let none = finish(&plan, Response::Ok(ReplyPayload::PoolStatus(vec![])), None);
    assert_eq!(
        (none.stderr.as_str(), none.code),
        ("no pools available\n", 0)
    );
    let plan = plan_of("tarn pool status -x").expect("plans");
    let none = finish(&plan, Response::Ok(ReplyPayload::PoolStatus(vec![])), None);
    assert_eq!(none.stdout, "all pools are healthy\n");
    let plan = plan_of("tarn pool import").expect("plans");
    let none = finish(&plan, Response::Ok(ReplyPayload::Importable(vec![])), None);
    assert_eq!(
        (none.stderr.as_str(), none.code),
        ("no pools available to import\n", 0)
    );
}

#[test]
fn scrub_and_device_verbs_plan_their_requests() {
    let plan = plan_of("tarn pool scrub -w tank").expect("plans");
    assert_eq!((plan.verb, plan.object.as_deref()), ("scrub", Some("tank")));
    assert_eq!(
        plan.request,
        Request::PoolScrub {
            names: vec!["tank".into()],
            action: ScrubAction::Start,
            wait: true
        }
    );
    let plan = plan_of("tarn pool scrub -p a b").expect("plans");
    assert_eq!(
        plan.object, None,
        "two pools: the daemon names the failing one"
    );
    assert!(matches!(
        plan.request,
        Request::PoolScrub {
            action: ScrubAction::Pause,
            wait: false,
            ..
        }
    ));
    let plan = plan_of("tarn pool scrub -s tank").expect("plans");
    assert!(matches!(
        plan.request,
        Request::PoolScrub {
            action: ScrubAction::Stop,
            ..
        }
    ));
    let plan = plan_of("tarn pool offline -t tank d/b").expect("plans");
    assert_eq!(
        (plan.verb, plan.object.as_deref()),
        ("offline", Some("d/b"))
    );
    assert_eq!(
        plan.request,
        Request::PoolOffline {
            name: "tank".into(),
            device: "/work/d/b".into(),
            temporary: true
        }
    );
    let plan = plan_of("tarn pool online tank 1234").expect("plans");
    assert_eq!(
        plan.request,
        Request::PoolOnline {
            name: "tank".into(),
            device: "1234".into()
        }
    );
    let plan = plan_of("tarn pool clear tank").expect("plans");
    assert_eq!(plan.verb, "clear errors for");
    assert_eq!(
        plan.request,
        Request::PoolClear {
            name: "tank".into(),
            device: None
        }
    );
}

#[test]
fn scrub_usage_and_refusals() {
    assert!(
        Cli::try_parse_from(["tarn", "pool", "scrub"]).is_err(),
        "a pool is required"
    );
    assert!(Cli::try_parse_from(["tarn", "pool", "scrub", "-s", "-p", "t"]).is_err());
    let plan = plan_of("tarn pool scrub tank").expect("plans");
    let reply = Response::Error(ErrorReply {
        message: "currently scrubbing; use 'tarn pool scrub -s' to cancel the current scrub".into(),
        verb: None,
        object: Some("tank".into()),
    });
    let outcome = finish(&plan, reply, None);
    assert_eq!(
        outcome.stderr,
        "cannot scrub 'tank': currently scrubbing; use 'tarn pool scrub -s' to cancel the \
         current scrub\n"
    );
    assert_eq!(outcome.code, 1);
    let plan = plan_of("tarn pool offline tank /d/b").expect("plans");
    let reply = Response::Error(ErrorReply {
        message: "no valid replicas".into(),
        verb: None,
        object: None,
    });
    assert_eq!(
        finish(&plan, reply, None).stderr,
        "cannot offline '/d/b': no valid replicas\n"
    );
    // A dataset that could not be mounted: the verb did its work, the reason goes to stderr
    // and the exit status is 1, with -j too (after `create`, crates/cli/tests/fuse.rs).
    let plan = plan_of("tarn pool import tank").expect("plans");
    let notice = ReplyPayload::Notice(vec!["cannot mount 'tank' at /tank: busy".into()]);
    let outcome = finish(&plan, Response::Ok(notice.clone()), None);
    assert_eq!((outcome.stdout.as_str(), outcome.code), ("", 1));
    assert_eq!(outcome.stderr, "cannot mount 'tank' at /tank: busy\n");
    let json = crate::json::JsonOptions::default();
    assert_eq!(finish(&plan, Response::Ok(notice), Some(&json)).code, 1);
}

#[test]
fn add_and_remove_plan_their_requests() {
    let plan = plan_of("tarn pool add -n -f tank special raidz2 a b c log /d/l").expect("plans");
    assert_eq!(plan.verb, "add");
    assert_eq!(
        plan.view,
        View::Layout {
            name: "tank".into(),
            update: true
        }
    );
    let Request::PoolAdd(add) = plan.request else {
        panic!("{:?}", plan.request)
    };
    assert!(add.force && add.dry_run);
    assert_eq!(add.vdevs.len(), 2);
    assert_eq!(add.vdevs[0].devices, ["/work/a", "/work/b", "/work/c"]);
    let bad = refusal("tarn pool add tank log raidz a b");
    assert_eq!(
        bad.stderr,
        "cannot add 'tank': invalid vdev specification: 'raidz' is not allowed in a log \
         section; use mirror or plain devices\n"
    );
    let plan = plan_of("tarn pool remove tank /d/l").expect("plans");
    assert_eq!(
        (plan.verb, plan.object.as_deref()),
        ("remove", Some("/d/l"))
    );
    assert!(matches!(plan.request, Request::PoolRemove { .. }));
}

/// `receive -c`: `-v` lists what was healed; a block the stream did not heal fails the
/// command in one line naming it, after what was healed; `-c` takes no receive options.
#[test]
fn corrective_receive_renders_healed_and_refuses_unhealed() {
    let cli = Cli::try_parse_from(["tarn", "receive", "-v", "-c", "tank/a@one"]).expect("parses");
    let plan = crate::datasets::plan(cli.command, Path::new("/work")).expect("plans");
    let reply = |unhealed: Vec<String>| {
        Response::Ok(ReplyPayload::Corrected {
            snapshot: "tank/a@one".into(),
            checked: 8,
            healed: vec!["object 7 offset 131072".into()],
            unhealed,
            bytes: 2048,
        })
    };
    let healed = finish(&plan, reply(vec![]), None);
    assert_eq!(healed.code, 0);
    assert_eq!(
        healed.stdout,
        "healed tank/a@one object 7 offset 131072\n\
         corrective receive of tank/a@one: 8 blocks checked, 1 healed, 2K stream\n"
    );
    let why = "object 7 offset 0: the stream's data does not match the block's checksum";
    let partial = finish(&plan, reply(vec![why.into()]), None);
    assert_eq!(partial.code, 1);
    assert!(partial.stdout.contains("1 healed"), "{partial:?}");
    assert_eq!(
        partial.stderr,
        format!("cannot receive 'tank/a@one': 1 damaged block not healed: {why}\n")
    );
    for refused in ["-F", "-s", "-u", "-d", "-o", "-x"] {
        let mut argv = vec!["tarn", "receive", "-c", refused];
        if matches!(refused, "-o" | "-x") {
            argv.push("compression=off");
        }
        argv.push("tank/a@one");
        assert!(Cli::try_parse_from(argv).is_err(), "receive -c {refused}");
    }
}

/// `receive -n -c` says what it would heal, and that an unhealable block would not be.
#[test]
fn corrective_dry_run_renders_what_would_be_healed() {
    let argv = ["tarn", "receive", "-n", "-v", "-c", "tank/a@one"];
    let cli = Cli::try_parse_from(argv).expect("parses");
    let plan = crate::datasets::plan(cli.command, Path::new("/work")).expect("plans");
    assert!(matches!(
        plan.request,
        Request::Receive {
            dry_run: true,
            corrective: true,
            ..
        }
    ));
    let reply = |unhealed: Vec<String>| {
        Response::Ok(ReplyPayload::Corrected {
            snapshot: "tank/a@one".into(),
            checked: 8,
            healed: vec!["object 7 offset 131072".into()],
            unhealed,
            bytes: 2048,
        })
    };
    let would = finish(&plan, reply(vec![]), None);
    assert_eq!(would.code, 0);
    assert_eq!(
        would.stdout,
        "would heal tank/a@one object 7 offset 131072\n\
         dry run of a corrective receive of tank/a@one: 8 blocks checked, 1 would be healed, \
         2K stream\n"
    );
    let why = "an indirect block of object 7 stays lost";
    let partial = finish(&plan, reply(vec![why.into()]), None);
    assert_eq!(partial.code, 1);
    assert_eq!(
        partial.stderr,
        format!("cannot receive 'tank/a@one': 1 damaged block would not be healed: {why}\n")
    );
}
