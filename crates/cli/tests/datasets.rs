//! System tests of the dataset verbs through the real `tarn` binary and daemon: `create`,
//! `list` (default columns, `-H -p -o`, `-r -d`, `-s`), `get` with its SOURCE column and
//! `-s` filter, `set`, `inherit`, `rename`, `destroy`, JSON, persistence across export and
//! import, per-owner quotas (`userquota@root`, `userspace`), and refusals that change
//! nothing. Datasets here have `mountpoint=none` (inherited from the pool's `-m none`), so
//! nothing is mounted: the FUSE tests cover mounts.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::*;

fn pool(rig: &Rig) -> Vec<String> {
    let devices = rig.devices("d", "disk", 4);
    rig.ok(&format!(
        "pool create -m none tank raidz1 {}",
        join(&devices)
    ));
    devices
}

/// `tarn get -H -o value,source PROP NAME` as (value, source).
fn value(rig: &Rig, property: &str, name: &str) -> (String, String) {
    let out = rig.ok(&format!("get -H -o value,source {property} {name}"));
    let (value, source) = out.trim_end().split_once('\t').unwrap();
    (value.to_string(), source.to_string())
}

#[test]
fn create_list_get_set_inherit() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("create -o compression=zstd -o com.example:owner=ann tank/home");
    rig.ok("create -p tank/home/ann/src");
    let names = rig.ok("list -H -o name");
    assert_eq!(names, "tank\ntank/home\ntank/home/ann\ntank/home/ann/src\n");
    let table = rig.ok("list");
    let header = table.lines().next().unwrap();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["NAME", "USED", "AVAIL", "REFER", "MOUNTPOINT"]
    );
    assert!(table.contains("tank/home/ann/src"), "{table}");
    assert_eq!(
        value(&rig, "compression", "tank/home/ann/src"),
        ("zstd".into(), "inherited from tank/home".into())
    );
    assert_eq!(
        value(&rig, "mountpoint", "tank/home"),
        ("none".into(), "inherited from tank".into())
    );
    assert_eq!(
        value(&rig, "recordsize", "tank"),
        ("128K".into(), "default".into())
    );
    rig.ok("set quota=1G recordsize=1M tank/home/ann");
    assert_eq!(
        value(&rig, "quota", "tank/home/ann"),
        ("1G".into(), "local".into())
    );
    let exact = rig.ok("get -H -p -o value quota tank/home/ann");
    assert_eq!(exact, format!("{}\n", 1u64 << 30));
    // -s local: only what was set here.
    let local = rig.ok("get -H -s local -o property all tank/home");
    assert_eq!(local, "compression\ncom.example:owner\n");
    // -d 1 stops one level down; -r without it goes all the way.
    assert_eq!(
        rig.ok("list -H -o name -d 1 tank/home"),
        "tank/home\ntank/home/ann\n"
    );
    assert_eq!(
        rig.ok("list -H -o name -r tank/home/ann").lines().count(),
        2
    );
    rig.ok("inherit -r compression tank/home");
    assert_eq!(
        value(&rig, "compression", "tank/home/ann"),
        ("on".into(), "default".into())
    );
    // Sorting by a numeric property, descending.
    let sorted = rig.ok("list -H -p -o name,recordsize -S recordsize");
    assert!(sorted.starts_with("tank/home/ann\t1048576\n"), "{sorted}");
    let json: serde_json::Value = serde_json::from_str(&rig.ok("-j list")).unwrap();
    assert_eq!(json["datasets"].as_object().unwrap().len(), 4, "{json}");
    assert_eq!(
        json["datasets"]["tank/home/ann"]["type"], "FILESYSTEM",
        "{json}"
    );
}

#[test]
fn rename_destroy_and_persistence() {
    let rig = Rig::new();
    let devices = pool(&rig);
    rig.ok("create -p -o atime=off tank/a/b/c");
    rig.ok("rename tank/a/b tank/moved");
    assert_eq!(
        rig.ok("list -H -o name"),
        "tank\ntank/a\ntank/moved\ntank/moved/c\n"
    );
    let refused = rig.refused("destroy tank/moved");
    assert!(refused.contains("has children"), "{refused}");
    rig.ok("destroy -r tank/moved");
    rig.ok("create -o com.example:x=1 tank/kept");
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert_eq!(rig.ok("list -H -o name"), "tank\ntank/a\ntank/kept\n");
    assert_eq!(
        value(&rig, "com.example:x", "tank/kept"),
        ("1".into(), "local".into())
    );
    let history = rig.ok("pool history tank");
    for command in [
        "tarn create -p -o atime=off tank/a/b/c",
        "tarn destroy -r tank/moved",
    ] {
        assert!(history.contains(command), "{history}");
    }
    assert_eq!(devices.len(), 4);
}

#[test]
fn refused_dataset_commands_change_nothing() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("create tank/a");
    rig.ok("create tank/a/b");
    let baseline = rig.image();
    for (line, expect) in [
        (
            "create tank//x",
            "cannot create 'tank//x': invalid dataset name",
        ),
        (
            "create tank/a@s",
            "cannot create 'tank/a@s': invalid dataset name",
        ),
        (
            "create tank/a",
            "cannot create 'tank/a': dataset already exists",
        ),
        (
            "create tank/x/y",
            "cannot create 'tank/x/y': parent does not exist",
        ),
        ("create nosuch/x", "cannot create 'nosuch/x': no such pool"),
        (
            "create -o nosuch=1 tank/x",
            "cannot create 'tank/x': invalid property 'nosuch'",
        ),
        (
            "create -o compression=gzip tank/x",
            "cannot create 'tank/x': 'compression' must be",
        ),
        (
            "set atime=off copies=9 tank/a",
            "cannot set property for 'tank/a': 'copies' must be",
        ),
        ("set used=1 tank/a", "read-only property"),
        (
            "set reservation=100T tank/a",
            "size is greater than available space",
        ),
        ("destroy tank/a", "filesystem has children"),
        ("destroy -r tank", "operation does not apply to pools"),
        (
            "destroy tank/zz",
            "cannot destroy 'tank/zz': dataset does not exist",
        ),
        ("rename tank/a other/a", "must remain in the same pool"),
        ("rename tank/a tank/a/b/c", "cannot be moved under itself"),
        ("inherit quota tank/a", "cannot be inherited"),
    ] {
        let line_out = rig.refused_against(&baseline, line);
        assert!(line_out.contains(expect), "`tarn {line}`: {line_out}");
    }
    // A usage error (exit 2) for an unknown -t type, before anything is sent.
    let run = rig.run("list -t bookmarks");
    assert_eq!(run.code, Some(2), "{run:?}");
    assert_eq!(
        value(&rig, "atime", "tank/a"),
        ("on".into(), "default".into())
    );
}

#[test]
fn user_group_and_project_quotas_and_userspace() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("create tank/home");
    rig.ok("set userquota@root=10G groupquota@0=1.5G projectquota@7=1M tank/home");
    rig.ok("set userobjquota@4242=100 tank/home");
    assert_eq!(
        rig.ok("get -H userquota@root tank/home"),
        "tank/home\tuserquota@root\t10G\tlocal\n"
    );
    assert_eq!(
        rig.ok("get -H -p -o value userquota@0 tank/home"),
        format!("{}\n", 10u64 << 30)
    );
    assert_eq!(value(&rig, "groupquota@root", "tank/home").0, "1.50G");
    assert_eq!(value(&rig, "userquota@4242", "tank/home").0, "none");
    // Not inherited, not in `get all`.
    rig.ok("create tank/home/sub");
    assert_eq!(value(&rig, "userquota@root", "tank/home/sub").0, "none");
    assert!(!rig.ok("get all tank/home").contains("userquota"));
    // The root directory belongs to uid 0: its inode is counted.
    assert_eq!(value(&rig, "userobjused@root", "tank/home").0, "1");
    let table = rig.ok("userspace tank/home");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["TYPE", "NAME", "USED", "QUOTA"]
    );
    // Sorted by type, then name as text.
    assert!(lines[1].starts_with("POSIX User  4242"), "{table}");
    assert!(lines[1].ends_with("none"), "{table}");
    assert!(lines[2].starts_with("POSIX User  root"), "{table}");
    assert!(lines[2].ends_with("10G"), "{table}");
    let scripted = rig.ok("userspace -H -p -n -o name,objused,objquota -S objused tank/home");
    assert_eq!(scripted, "0\t1\t0\n4242\t0\t100\n");
    assert_eq!(
        rig.ok("projectspace -H -o name,quota tank/home"),
        "0\tnone\n7\t1M\n"
    );
    let groups = rig.ok("groupspace -H -o type,name tank/home");
    assert_eq!(groups, "POSIX Group\troot\n");
    let json = rig.ok("-j userspace tank/home");
    assert!(json.contains("\"objquota\": 100"), "{json}");
    rig.ok("set userquota@root=none tank/home");
    assert_eq!(value(&rig, "userquota@root", "tank/home").0, "none");
    let usage = rig.run("userspace -o name,size tank/home");
    assert_eq!(usage.code, Some(2), "{usage:?}");
    let baseline = rig.image();
    for (line, expect) in [
        (
            "set userquota@no-such-user-x=1G tank/home",
            "cannot set property for 'tank/home': invalid user 'no-such-user-x'",
        ),
        (
            "set groupquota@root=lots tank/home",
            "'groupquota@0' must be a size",
        ),
        ("set userused@0=1G tank/home", "read-only property"),
        ("set projectquota@p1=1G tank/home", "invalid project 'p1'"),
        ("inherit userquota@root tank/home", "cannot be inherited"),
        (
            "userspace tank/zz",
            "cannot get space for 'tank/zz': dataset does not exist",
        ),
    ] {
        let line_out = rig.refused_against(&baseline, line);
        assert!(line_out.contains(expect), "`tarn {line}`: {line_out}");
    }
}
