//! System tests of the snapshot verbs through the real `tarn` binary and daemon:
//! `snapshot -r -o`, `list -t snapshot|all` (`-H -p -o`, `-s creation`, `-j`), `get` and
//! `set` on snapshots, `destroy -nv` and ranges, `rollback` refused past later snapshots,
//! persistence across export and import, and refusals that change no device byte; bookmarks
//! in listings, `release -r`, several snapshots in one txg, `logicalreferenced`. Datasets
//! have `mountpoint=none` (but in the FUSE tests), so nothing is mounted.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::*;

fn pool(rig: &Rig) {
    let devices = rig.devices("d", "disk", 4);
    rig.ok(&format!(
        "pool create -m none tank raidz1 {}",
        join(&devices)
    ));
    rig.ok("create tank/a");
}

#[test]
fn snapshot_list_get_set_destroy_through_the_binary() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("snapshot -r -o com.example:why=test tank@one");
    rig.ok("snapshot tank/a@two");
    let names = rig.ok("list -H -o name -t snapshot");
    assert_eq!(names, "tank@one\ntank/a@one\ntank/a@two\n");
    let all = rig.ok("list -H -o name,type -t all");
    assert_eq!(
        all,
        "tank\tfilesystem\ntank@one\tsnapshot\ntank/a\tfilesystem\ntank/a@one\tsnapshot\n\
         tank/a@two\tsnapshot\n"
    );
    let sorted = rig.ok("list -H -o name -t snapshot -s creation tank/a");
    assert_eq!(sorted, "tank/a@one\ntank/a@two\n");
    let rows = rig.ok("list -H -p -o name,used,createtxg -t snapshot tank/a");
    let rows = tsv_rows(&rows);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0][1], "0", "nothing overwritten: used 0");
    let one: u64 = rows[0][2].parse().unwrap();
    let two: u64 = rows[1][2].parse().unwrap();
    assert!(one < two, "createtxg grows: {one} {two}");
    assert_eq!(
        rig.ok("get -H -o value,source com.example:why tank/a@one"),
        "test\tlocal\n"
    );
    rig.ok("set com.example:why=kept tank/a@one");
    assert_eq!(
        rig.ok("get -H -o value com.example:why tank/a@one"),
        "kept\n"
    );
    assert_eq!(rig.ok("get -H -o value type tank/a@two"), "snapshot\n");
    let json = rig.ok("-j list -t snapshot tank/a");
    assert!(json.contains("tank/a@two"), "{json}");
    let dry = rig.ok("destroy -nv tank/a@one%two");
    assert_eq!(
        dry.lines().collect::<Vec<_>>()[..2],
        ["would destroy tank/a@one", "would destroy tank/a@two"]
    );
    assert!(
        dry.lines().nth(2).unwrap().starts_with("would reclaim "),
        "{dry}"
    );
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert_eq!(
        rig.ok("list -H -o name -t snapshot"),
        "tank@one\ntank/a@one\ntank/a@two\n"
    );
    rig.ok("pool set listsnapshots=on tank");
    assert_eq!(
        rig.ok("list -H -o name"),
        "tank\ntank@one\ntank/a\ntank/a@one\ntank/a@two\n",
        "listsnapshots=on lists snapshots without -t"
    );
    get_types_as_zfs(&rig);
    rig.ok("destroy tank/a@one,two");
    rig.ok("destroy -r tank@one");
    assert_eq!(rig.ok("list -H -o name -t snapshot"), "");
}

/// `get -r` shows every type, as ZFS's does, whatever listsnapshots; `-t` narrows it, and
/// `-t snapshot` alone on a named dataset shows its snapshots.
fn get_types_as_zfs(rig: &Rig) {
    assert_eq!(
        rig.ok("get -H -o name -r type tank"),
        "tank\ntank@one\ntank/a\ntank/a@one\ntank/a@two\n"
    );
    assert_eq!(
        rig.ok("get -H -o name -r -t filesystem type tank"),
        "tank\ntank/a\n"
    );
    assert_eq!(
        rig.ok("get -H -o name -t snapshot type tank/a"),
        "tank/a@one\ntank/a@two\n"
    );
    assert_eq!(rig.ok("get -H -o name type tank/a"), "tank/a\n");
}

#[test]
fn snapshot_refusals_change_nothing() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("snapshot tank/a@one");
    rig.ok("snapshot tank/a@two");
    let cases = [
        (
            "snapshot tank/a@one",
            "cannot create snapshot 'tank/a@one': dataset already exists",
        ),
        (
            "snapshot tank/nope@x",
            "cannot create snapshot 'tank/nope@x': dataset does not exist",
        ),
        (
            "destroy tank/a@nope",
            "cannot destroy 'tank/a@nope': could not find any snapshots to destroy",
        ),
        (
            "destroy tank/a",
            "cannot destroy 'tank/a': filesystem has children (use -r to destroy tank/a@one",
        ),
        (
            "rollback tank/a@one",
            "cannot rollback to 'tank/a@one': more recent snapshots or bookmarks exist",
        ),
        (
            "set compression=off tank/a@one",
            "cannot set property for 'tank/a@one': this property can not be modified",
        ),
    ];
    for (line, want) in cases {
        let got = rig.refused(line);
        assert!(got.starts_with(want), "`tarn {line}`: {got}");
    }
    rig.ok("rollback -r tank/a@one");
    assert_eq!(rig.ok("list -H -o name -t snapshot"), "tank/a@one\n");
}

// DESCRIPTION: rollback through a mounted dataset. Files written through the FUSE mount are
// snapshotted, changed, deleted and added to; after `tarn rollback` the mount shows exactly
// the snapshot's files (the daemon unmounted and mounted the dataset again), and writes go
// on from there. A refused rollback leaves the mount alone.
// STRATEGY: std::fs against the mountpoint under the rig's altroot; skipped without
// /dev/fuse.
#[test]
fn rollback_shows_the_snapshot_in_the_mount() {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("SKIP rollback_shows_the_snapshot_in_the_mount: /dev/fuse is absent");
        return;
    }
    let rig = Rig::new();
    rig.mounted_tank();
    let tank = rig.root().join("altroot/tank");
    std::fs::write(tank.join("kept"), b"monday").unwrap();
    std::fs::write(tank.join("changed"), vec![7u8; 300_000]).unwrap();
    rig.ok("snapshot tank@monday");
    std::fs::write(tank.join("changed"), b"tuesday").unwrap();
    std::fs::remove_file(tank.join("kept")).unwrap();
    std::fs::write(tank.join("new"), b"tuesday").unwrap();
    rig.ok("snapshot tank@tuesday");
    let refused = rig.run("rollback tank@monday");
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert_eq!(std::fs::read(tank.join("new")).unwrap(), b"tuesday");
    rig.ok("rollback -r tank@monday");
    assert_eq!(std::fs::read(tank.join("kept")).unwrap(), b"monday");
    assert_eq!(
        std::fs::read(tank.join("changed")).unwrap(),
        vec![7u8; 300_000]
    );
    assert!(
        !tank.join("new").exists(),
        "a file made after the snapshot is gone"
    );
    std::fs::write(tank.join("after"), b"wednesday").unwrap();
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert_eq!(std::fs::read(tank.join("after")).unwrap(), b"wednesday");
    assert_eq!(rig.ok("list -H -o name -t snapshot"), "tank@monday\n");
}

// DESCRIPTION: user holds through the binary. `hold -r` holds every descendant's snapshot,
// `holds` prints ZFS's NAME TAG TIMESTAMP table (`-H` tab-separated, `-p` Unix seconds),
// `userrefs` counts holds; destroying a held snapshot is refused with one line and changes
// no device byte, as are bad holds and releases; `destroy -d` marks a held snapshot
// (`defer_destroy=on`) and its last `release` destroys it; holds survive export and import.
// STRATEGY: the binary against a daemon; device images compared around each refusal.
#[test]
fn holds_list_and_refuse_destroy_through_the_binary() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("snapshot -r tank@one");
    rig.ok("hold -r keep tank@one");
    rig.ok("hold other tank@one");
    let table = rig.ok("holds -r tank@one");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["NAME", "TAG", "TIMESTAMP"]);
    assert!(lines[1].starts_with("tank@one    keep   "), "{table}");
    let scripted = rig.ok("holds -r -H -p tank@one");
    let rows = tsv_rows(&scripted);
    let got: Vec<(&str, &str)> = rows.iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(
        got,
        [
            ("tank@one", "keep"),
            ("tank@one", "other"),
            ("tank/a@one", "keep")
        ]
    );
    assert!(rows[0][2].parse::<u64>().unwrap() > 1_600_000_000);
    assert_eq!(rig.ok("holds -H tank/a@one").lines().count(), 1);
    assert_eq!(rig.ok("get -H -o value userrefs tank@one"), "2\n");
    assert_eq!(rig.ok("get -H -o value userrefs tank/a@one"), "1\n");

    let cases = [
        (
            "destroy tank@one",
            "cannot destroy 'tank@one': dataset is busy",
        ),
        (
            "destroy -r tank@one",
            "cannot destroy 'tank@one': dataset is busy",
        ),
        (
            "destroy -r tank/a",
            "cannot destroy 'tank/a': dataset is busy",
        ),
        (
            "hold keep tank@one",
            "cannot hold snapshot 'tank@one': tag already exists on this dataset",
        ),
        (
            "release nope tank@one",
            "cannot release hold from snapshot 'tank@one': no such tag on this dataset",
        ),
        (
            "hold x tank@nope",
            "cannot hold snapshot 'tank@nope': dataset does not exist",
        ),
        (
            "release -r other tank@one",
            "cannot release hold from snapshot 'tank@one': no such tag on this dataset",
        ),
        (
            "destroy -d tank/a",
            "cannot destroy 'tank/a': -d is supported for snapshots only",
        ),
    ];
    for (line, want) in cases {
        let got = rig.refused(line);
        assert_eq!(got, want, "`tarn {line}`");
    }
}

// DESCRIPTION: `destroy -d` of a held snapshot marks it (`defer_destroy=on`), the mark and
// the holds survive export and import, and the last `release` destroys it.
// STRATEGY: the binary against a daemon.
#[test]
fn destroy_d_waits_for_the_last_release_through_the_binary() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("snapshot -r tank@one");
    rig.ok("hold -r keep tank@one");
    rig.ok("hold other tank@one");
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert_eq!(rig.ok("get -H -o value userrefs tank@one"), "2\n");
    rig.ok("destroy -d tank@one");
    assert_eq!(rig.ok("get -H -o value defer_destroy tank@one"), "on\n");
    rig.ok("release keep tank@one");
    assert_eq!(
        rig.ok("list -H -o name -t snapshot"),
        "tank@one\ntank/a@one\n"
    );
    rig.ok("release other tank@one");
    assert_eq!(rig.ok("list -H -o name -t snapshot"), "tank/a@one\n");
    rig.ok("release keep tank/a@one");
    assert_eq!(rig.ok("holds -H tank/a@one"), "");
    rig.ok("destroy tank/a@one");
    assert_eq!(rig.ok("list -H -o name -t snapshot"), "");
}

// DESCRIPTION: `rename DS@A DS@B` renames a snapshot in place: its GUID and holds follow,
// the old name is gone, across export and import; renaming to another dataset or to a
// taken name is refused with one line and changes no device byte.
// STRATEGY: the binary against a daemon.
#[test]
fn snapshot_rename_through_the_binary() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("snapshot tank/a@one");
    rig.ok("snapshot tank/a@two");
    rig.ok("hold keep tank/a@one");
    let guid = rig.ok("get -H -o value guid tank/a@one");
    rig.ok("rename tank/a@one tank/a@first");
    assert_eq!(
        rig.ok("list -H -o name -t snapshot"),
        "tank/a@first\ntank/a@two\n"
    );
    assert_eq!(rig.ok("get -H -o value guid tank/a@first"), guid);
    assert_eq!(rig.ok("get -H -o value userrefs tank/a@first"), "1\n");
    let cases = [
        (
            "rename tank/a@first tank@first",
            "cannot rename 'tank/a@first': snapshots must be part of same dataset",
        ),
        (
            "rename tank/a@first tank/a@two",
            "cannot rename 'tank/a@first': dataset already exists",
        ),
        (
            "rename tank/a@one tank/a@three",
            "cannot rename 'tank/a@one': dataset does not exist",
        ),
        (
            "rename tank/a@first tank/a@bad*",
            "cannot rename 'tank/a@first': invalid dataset name: invalid character '*'",
        ),
    ];
    for (line, want) in cases {
        let got = rig.refused(line);
        assert!(got.starts_with(want), "`tarn {line}`: {got}");
    }
    rig.ok("pool export tank");
    rig.ok(&format!("pool import -d {} tank", rig.dir_of("d")));
    assert_eq!(
        rig.ok("list -H -o name -t snapshot"),
        "tank/a@first\ntank/a@two\n"
    );
    rig.ok("release keep tank/a@first");
    rig.ok("destroy tank/a@first");
    assert_eq!(rig.ok("list -H -o name -t snapshot"), "tank/a@two\n");
}

// DESCRIPTION: `rename -r` of a snapshot renames it in every descendant that has it, in one
// command (`@NEW` is short for the same dataset); a descendant already holding the new name
// refuses the whole rename with one line and nothing is renamed or written; `-r` of a
// dataset (not a snapshot) is refused.
// STRATEGY: the binary against a daemon; device bytes compared around the refusals.
#[test]
fn rename_r_renames_the_snapshot_of_every_descendant() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("create tank/a/b");
    rig.ok("snapshot -r tank@one");
    rig.ok("rename -r tank@one @two");
    assert_eq!(
        rig.ok("list -H -o name -t snapshot"),
        "tank@two\ntank/a@two\ntank/a/b@two\n"
    );
    rig.ok("snapshot tank/a/b@three");
    rig.ok("pool sync tank");
    let before = devices_bytes(&rig);
    let refused = rig.run("rename -r tank@two tank@three");
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert_eq!(
        refused.stderr,
        "cannot rename 'tank@two': dataset already exists: 'tank/a/b@three'\n"
    );
    let refused = rig.run("rename -r tank/a tank/c");
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert!(devices_bytes(&rig) == before, "a refused rename wrote");
    rig.ok("rename -r tank/a@two tank/a@four");
    assert_eq!(
        rig.ok("list -H -o name -t snapshot"),
        "tank@two\ntank/a@four\ntank/a/b@four\ntank/a/b@three\n"
    );
}

fn devices_bytes(rig: &Rig) -> Vec<Vec<u8>> {
    let mut paths: Vec<_> = std::fs::read_dir(rig.root().join("d"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

// DESCRIPTION: `tarn diff` through a mounted filesystem. Files added, removed, renamed,
// written and chmod-ed after a snapshot come out as `+`, `-`, `R`, `M` lines with full paths
// under the mountpoint (`-F`: a type column; `-t`: the change time first; a new hard link
// `(+1)` after the file; `-H`: a rename's paths parted by a tab); a file only read
// is not reported; between two snapshots the later one's changes are left out; bad
// arguments are refused with one line.
// STRATEGY: std::fs against the mountpoint under the rig's altroot; skipped without
// /dev/fuse.
#[test]
fn diff_names_every_change_by_path() {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("SKIP diff_names_every_change_by_path: /dev/fuse is absent");
        return;
    }
    let rig = Rig::new();
    rig.mounted_tank();
    let tank = rig.root().join("altroot/tank");
    std::fs::create_dir(tank.join("dir")).unwrap();
    for name in ["dir/edit", "gone", "old", "read", "mode"] {
        std::fs::write(tank.join(name), name).unwrap();
    }
    rig.ok("snapshot tank@one");
    std::fs::write(tank.join("dir/edit"), b"changed").unwrap();
    std::fs::remove_file(tank.join("gone")).unwrap();
    std::fs::rename(tank.join("old"), tank.join("new")).unwrap();
    std::fs::write(tank.join("added"), b"+").unwrap();
    let _ = std::fs::read(tank.join("read")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::Permissions::from_mode(0o600);
    std::fs::set_permissions(tank.join("mode"), mode).unwrap();
    rig.ok("snapshot tank@two");
    std::fs::write(tank.join("later"), b"after two").unwrap();
    std::fs::hard_link(tank.join("added"), tank.join("dir/twin")).unwrap();
    std::fs::rename(tank.join("new"), tank.join("renamed")).unwrap();
    let lines = rig.ok("diff -F tank@one tank@two");
    assert_eq!(
        lines,
        "M\t/\t/tank/\n+\tF\t/tank/added\nM\tF\t/tank/dir/edit\n-\tF\t/tank/gone\n\
         M\tF\t/tank/mode\nR\tF\t/tank/old -> /tank/new\n"
    );
    // ZFS's forms: a file that gained a link ends with `(+1)`; `-H` parts a rename's paths
    // with a tab instead of an arrow.
    let now = rig.ok("diff tank@two");
    assert_eq!(
        now,
        "M\t/tank/\nM\t/tank/added\t(+1)\nM\t/tank/dir\n+\t/tank/later\n\
         R\t/tank/new -> /tank/renamed\n"
    );
    let scripted = rig.ok("diff -H tank@two");
    assert!(
        scripted.contains("R\t/tank/new\t/tank/renamed\n") && !scripted.contains(" -> "),
        "{scripted}"
    );
    let timed = rig.ok("diff -t -H tank@two tank");
    let first = timed.lines().next().unwrap();
    let (time, rest) = first.split_once('\t').unwrap();
    assert!(time.split_once('.').unwrap().0.parse::<i64>().unwrap() > 1_600_000_000);
    assert_eq!(rest, "M\t/tank/");
    for (line, says) in [
        ("diff tank@two tank@one", "not an earlier snapshot"),
        ("diff tank@nope", "does not exist"),
        ("diff tank", "missing '@'"),
    ] {
        let refused = rig.run(line);
        assert_eq!(refused.code, Some(1), "{line}: {refused:?}");
        assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
        assert!(refused.stderr.contains(says), "{line}: {refused:?}");
    }
}

// DESCRIPTION: the count limits and `written@SNAP` through the binary. `set
// snapshot_limit=1` lets one snapshot in the subtree and refuses the next with one line
// naming the limit (no device byte changed); `filesystem_limit` refuses a create past it;
// `get` shows counts and limits (`none`, or the largest count with -p); `written@one` is a
// valid `get`/`list -o` column.
// STRATEGY: the binary against a daemon; device bytes compared around the refusals.
#[test]
fn count_limits_refuse_and_written_at_a_snapshot_shows() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("set snapshot_limit=1 filesystem_limit=1 tank");
    rig.ok("snapshot tank/a@one");
    rig.ok("pool sync tank");
    let before = devices_bytes(&rig);
    for (line, says) in [
        (
            "snapshot tank@two",
            "snapshot limit exceeded (snapshot_limit=1 on 'tank')",
        ),
        (
            "create tank/b",
            "filesystem limit exceeded (filesystem_limit=1 on 'tank')",
        ),
    ] {
        let refused = rig.run(line);
        assert_eq!(refused.code, Some(1), "{refused:?}");
        assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
        assert!(refused.stderr.contains(says), "{line}: {refused:?}");
    }
    assert!(devices_bytes(&rig) == before, "a refusal wrote");
    assert_eq!(
        rig.ok("get -H -o value snapshot_count,filesystem_count,snapshot_limit tank"),
        "1\n1\n1\n"
    );
    assert_eq!(rig.ok("get -H -o value filesystem_limit tank/a"), "none\n");
    assert_eq!(
        rig.ok("get -H -p -o value filesystem_limit tank/a"),
        format!("{}\n", u64::MAX)
    );
    let written = rig.ok("list -H -p -o name,written@one tank/a");
    assert!(written.starts_with("tank/a\t"), "{written}");
    rig.ok("set snapshot_limit=none tank");
    rig.ok("snapshot tank@two");
}

// DESCRIPTION: a bookmark in `list -t all`, `-t bookmark` and `-t snapshot,bookmark` with
// the default columns (name, used, avail, refer, mountpoint): the columns a bookmark lacks
// show `-`, as in ZFS; `creation`, `createtxg` and `guid` are its snapshot's.
// STRATEGY: the binary against a daemon. Negative control: with `bookmark_prop` rejecting
// `avail` again, every listing fails with `invalid property 'avail'`.
#[test]
fn bookmarks_list_with_the_default_columns() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("snapshot tank/a@one");
    rig.ok("bookmark tank/a@one tank/a#mark");
    let all = rig.ok("list -H -t all");
    let rows = tsv_rows(&all);
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(
        names,
        ["tank", "tank/a", "tank/a@one", "tank/a#mark"],
        "{all}"
    );
    assert_eq!(rows[3], ["tank/a#mark", "-", "-", "-", "-"], "{all}");
    assert_eq!(rig.ok("list -H -t bookmark"), "tank/a#mark\t-\t-\t-\t-\n");
    let both = rig.ok("list -H -o name -t snapshot,bookmark");
    assert_eq!(both, "tank/a@one\ntank/a#mark\n");
    let facts = "list -H -o createtxg,guid -t";
    assert_eq!(
        rig.ok(&format!("{facts} bookmark")),
        rig.ok(&format!("{facts} snapshot"))
    );
    let header = rig.ok("list -t bookmark");
    assert!(header.starts_with("NAME"), "{header}");
}

// DESCRIPTION: `list -s creation` orders snapshots by their creation time across datasets,
// unlike the default listing (dataset by dataset) and `-s name`.
// STRATEGY: snapshots a second apart (creation has whole seconds), made in an order that is
// neither their datasets' order nor their names'. Negative control: with `-s` ignored
// (`sorted` returning the rows as they came) the creation order fails.
#[test]
fn list_s_creation_orders_snapshots_by_creation_time() {
    let rig = Rig::new();
    pool(&rig);
    for (i, snap) in ["tank/a@b", "tank@c", "tank/a@a"].into_iter().enumerate() {
        if i > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1100));
        }
        rig.ok(&format!("snapshot {snap}"));
    }
    let list = |sort: &str| rig.ok(&format!("list -H -o name -t snapshot {sort}"));
    assert_eq!(list(""), "tank@c\ntank/a@b\ntank/a@a\n");
    assert_eq!(list("-s creation"), "tank/a@b\ntank@c\ntank/a@a\n");
    assert_eq!(list("-S creation"), "tank/a@a\ntank@c\ntank/a@b\n");
    assert_eq!(list("-s name"), "tank/a@a\ntank/a@b\ntank@c\n");
}

// DESCRIPTION: `release -r` releases the tag from the snapshot of every descendant: no
// holds remain, `userrefs` is 0 and `destroy -r` goes through.
// STRATEGY: the binary against a daemon. Negative control: with `release` taking only the
// first of its targets, tank/a@one keeps its hold and the test fails.
#[test]
fn release_r_releases_every_descendants_hold() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("snapshot -r tank@one");
    rig.ok("hold -r keep tank@one");
    rig.ok("release -r keep tank@one");
    assert_eq!(rig.ok("holds -r -H tank@one"), "");
    assert_eq!(
        rig.ok("get -H -o value userrefs tank@one tank/a@one"),
        "0\n0\n"
    );
    rig.ok("destroy -r tank@one");
    assert_eq!(rig.ok("list -H -o name -t snapshot"), "");
}

// DESCRIPTION: `snapshot a@s b@s` takes both snapshots in one txg, as ZFS does: they share
// their createtxg.
// STRATEGY: the binary against a daemon; a snapshot taken alone afterwards has a later one.
// Negative control: with `Engine::snapshot` committing after each name, the txgs differ.
#[test]
fn snapshots_named_in_one_command_share_a_createtxg() {
    let rig = Rig::new();
    pool(&rig);
    rig.ok("create tank/b");
    rig.ok("snapshot tank/a@s tank/b@s");
    rig.ok("snapshot tank@later");
    let txgs = rig.ok("list -H -p -o createtxg tank/a@s tank/b@s tank@later");
    let txgs: Vec<u64> = txgs.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(txgs[0], txgs[1], "{txgs:?}");
    assert!(txgs[2] > txgs[0], "{txgs:?}");
}

// DESCRIPTION: a snapshot's `logicalreferenced` counts its data before compression: with
// compression on, compressible files make it larger than `referenced`.
// STRATEGY: text written through the FUSE mount; skipped without /dev/fuse. Negative
// control: with a snapshot's `logicalreferenced` showing its physical bytes, the test fails.
#[test]
fn logicalreferenced_of_a_snapshot_counts_before_compression() {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("SKIP logicalreferenced_of_a_snapshot_counts_before_compression: no fuse");
        return;
    }
    let rig = Rig::new();
    rig.mounted_tank();
    rig.ok("create -o compression=lz4 tank/c");
    let text = "a line of text that compresses well\n".repeat(30_000);
    std::fs::write(rig.root().join("altroot/tank/c/text"), text).unwrap();
    rig.ok("snapshot tank/c@s");
    let values = rig.ok("get -H -p -o value logicalreferenced,referenced tank/c@s");
    let values: Vec<u64> = values.lines().map(|l| l.parse().unwrap()).collect();
    assert!(values[0] >= 1_000_000, "{values:?}");
    assert!(values[0] > 4 * values[1], "{values:?}");
}
