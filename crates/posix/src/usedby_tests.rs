//! Tests of per-owner accounting and quotas: counts after write, truncate, punch, unlink,
//! chown, hard links and project changes equal a recount of every committed inode (checked
//! at every sync of `tests.rs`'s world, the random workload included); a crash loses
//! uncommitted changes and their counts together; quotas refuse at the right byte and inode;
//! the upgrade scan of a filesystem formatted without the counts.

use std::collections::BTreeMap;

use tarn_base::{ObjectId, SeededRng};

use crate::fs::MASTER;
use crate::inode::{self, Inode};
use crate::tests::{ME, World};
use crate::usedby::owners_of;
use crate::{
    Creds, Fallocate, FileKind, Fs, Owner, OwnerKind, Pending, PosixError, Quotas, RenameFlags,
    SetAttr, Usage,
};

fn user(id: u32) -> Owner {
    Owner {
        kind: OwnerKind::User,
        id,
    }
}

fn group(id: u32) -> Owner {
    Owner {
        kind: OwnerKind::Group,
        id,
    }
}

fn project(id: u32) -> Owner {
    Owner {
        kind: OwnerKind::Project,
        id,
    }
}

/// Every owner's usage from a scan of the committed inodes (call on a synced set).
fn recount(fs: &mut Fs<'_>) -> BTreeMap<Owner, Usage> {
    let mut out: BTreeMap<Owner, Usage> = BTreeMap::new();
    let mut at = ObjectId(0);
    while let Some(object) = fs.os.next_object(fs.store, at).unwrap() {
        at = object;
        let info = fs.os.object_info(fs.store, object).unwrap();
        let is_inode = [
            inode::TYPE_DIRECTORY,
            inode::TYPE_FILE,
            inode::TYPE_SYMLINK,
            inode::TYPE_SPECIAL,
        ]
        .contains(&info.object_type);
        if !is_inode {
            continue;
        }
        let inode = Inode::decode(object.0, &fs.os.bonus(fs.store, object).unwrap()).unwrap();
        for owner in owners_of(&inode) {
            let usage = out.entry(owner).or_default();
            usage.bytes += info.used_bytes;
            usage.objects += 1;
        }
    }
    out
}

/// What the used-by ZAPs say, every kind.
fn counted(fs: &mut Fs<'_>) -> BTreeMap<Owner, Usage> {
    let mut out = BTreeMap::new();
    for kind in OwnerKind::ALL {
        for (id, usage) in fs.usage_list(kind).unwrap() {
            out.insert(Owner { kind, id }, usage);
        }
    }
    out
}

/// The used-by counts equal a recount (the world calls this after every sync).
pub(crate) fn check_counts(fs: &mut Fs<'_>) {
    assert_eq!(
        counted(fs),
        recount(fs),
        "used-by counts differ from a recount"
    );
}

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = SeededRng::new(seed);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

#[test]
fn counts_follow_writes_truncates_punches_chowns_and_links() {
    let mut w = World::new();
    let root = w.fs().root().unwrap();
    let file = w
        .fs()
        .mknod(root, b"f", FileKind::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    w.fs().write(file, 0, &noise(1 << 20, 1)).unwrap();
    w.sync_and_reopen();
    let used = w.fs().usage(user(1000)).unwrap();
    assert_eq!(used.objects, 1);
    assert!(used.bytes >= 1 << 20, "1 MiB of noise charged: {used:?}");
    assert_eq!(w.fs().usage(group(100)).unwrap(), used);
    assert_eq!(w.fs().usage(project(0)).unwrap().objects, 2, "root and f");

    let mut fs = w.fs();
    let mut inode = fs.inode(file).unwrap();
    fs.truncate(file, &mut inode, 512 << 10).unwrap();
    fs.put(file, &inode).unwrap();
    w.sync_and_reopen();
    let half = w.fs().usage(user(1000)).unwrap().bytes;
    assert!(half < used.bytes && half >= 512 << 10, "{half}");

    let punch = Fallocate {
        keep_size: true,
        punch_hole: true,
        zero_range: false,
    };
    w.fs().fallocate(file, 0, 256 << 10, punch).unwrap();
    w.sync_and_reopen();
    let quarter = w.fs().usage(user(1000)).unwrap().bytes;
    assert!(quarter < half && quarter >= 256 << 10, "{quarter}");

    w.fs().link(file, root, b"g").unwrap();
    w.sync_and_reopen();
    assert_eq!(
        w.fs().usage(user(1000)).unwrap().objects,
        1,
        "one inode, two names"
    );

    let chown = SetAttr {
        uid: Some(2000),
        ..SetAttr::default()
    };
    w.fs().setattr(file, &chown).unwrap();
    w.sync_and_reopen();
    assert_eq!(w.fs().usage(user(1000)).unwrap(), Usage::default());
    assert_eq!(w.fs().usage(user(2000)).unwrap().bytes, quarter);
    assert_eq!(w.fs().usage(group(100)).unwrap().bytes, quarter);

    w.fs().unlink(root, b"f").unwrap();
    assert_eq!(w.fs().unlink(root, b"g").unwrap(), Some(file));
    w.fs().reclaim(file).unwrap();
    w.sync_and_reopen();
    assert_eq!(w.fs().usage(user(2000)).unwrap(), Usage::default());
    assert_eq!(
        w.fs().usage_list(OwnerKind::User).unwrap().len(),
        1,
        "root's uid 0 only"
    );
}

#[test]
fn a_crash_loses_changes_and_their_counts_together() {
    let mut w = World::new();
    let root = w.fs().root().unwrap();
    let file = w
        .fs()
        .mknod(root, b"f", FileKind::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    w.fs().write(file, 0, &noise(200_000, 2)).unwrap();
    w.sync_and_reopen();
    let before = counted(&mut w.fs());
    // Changes that never commit: the reopen from the last root is the crash.
    w.fs().write(file, 200_000, &noise(300_000, 3)).unwrap();
    let chown = SetAttr {
        gid: Some(7),
        ..SetAttr::default()
    };
    w.fs().setattr(file, &chown).unwrap();
    let root_bp = w.os.root();
    w.os = tarn_objects::ObjectSet::open(&w.store, &root_bp).unwrap();
    assert_eq!(counted(&mut w.fs()), before);
    check_counts(&mut w.fs());
}

#[test]
fn byte_and_inode_quotas_refuse_at_the_limit() {
    let mut w = World::new();
    let root = w.fs().root().unwrap();
    let file = w
        .fs()
        .mknod(root, b"f", FileKind::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    w.fs().write(file, 0, &noise(128 << 10, 4)).unwrap();
    w.sync_and_reopen();
    let used = w.fs().usage(user(1000)).unwrap();
    let mut quotas = Quotas::default();
    quotas.bytes.insert(user(1000), used.bytes + 4096);
    quotas.objects.insert(group(100), 2);
    let mut pending = Pending::default();
    {
        let mut fs = w.fs().with_quotas(&quotas, &mut pending);
        let refused = fs.write(file, 1 << 20, &noise(4097, 5));
        assert!(matches!(refused, Err(PosixError::QuotaExceeded)));
        assert_eq!(refused.unwrap_err().errno(), libc::EDQUOT);
        assert_eq!(fs.getattr(file).unwrap().size, 128 << 10, "nothing written");
        fs.write(file, 1 << 20, &noise(4096, 5)).unwrap();
        assert!(matches!(
            fs.write(file, 2 << 20, b"x"),
            Err(PosixError::QuotaExceeded)
        ));
        // Another user is not limited; a third inode of group 100 is.
        let other = Creds { uid: 5, gid: 100 };
        let g = fs
            .mknod(root, b"g", FileKind::Regular, 0o644, 0, other)
            .unwrap()
            .ino;
        fs.write(g, 0, &noise(10_000, 6)).unwrap();
        let refused = fs.mkdir(root, b"d", 0o755, other);
        assert!(matches!(refused, Err(PosixError::QuotaExceeded)));
        assert_eq!(
            fs.lookup(root, b"d").unwrap_err().errno(),
            libc::ENOENT,
            "a refused create leaves no entry"
        );
    }
    assert!(w.fs().quota_needs_sync(&quotas, &pending, 1).unwrap());
    // Chown into an owner over quota is allowed; that owner's writes are not.
    let chown = SetAttr {
        uid: Some(1000),
        ..SetAttr::default()
    };
    let g = w.fs().lookup(root, b"g").unwrap().ino;
    w.fs()
        .with_quotas(&quotas, &mut pending)
        .setattr(g, &chown)
        .unwrap();
    w.sync_and_reopen();
    pending.clear();
    let refused = w.fs().with_quotas(&quotas, &mut pending).write(g, 0, b"y");
    assert!(matches!(refused, Err(PosixError::QuotaExceeded)));
}

#[test]
fn projects_inherit_and_move_usage() {
    let mut w = World::new();
    let root = w.fs().root().unwrap();
    let dir = w.fs().mkdir(root, b"p", 0o755, ME).unwrap().ino;
    w.fs().set_project(dir, 42, true).unwrap();
    assert!(matches!(
        w.fs().set_project(root, 1, true).map(|_| ()),
        Ok(())
    ));
    w.fs().set_project(root, 0, false).unwrap();
    let sub = w.fs().mkdir(dir, b"sub", 0o755, ME).unwrap().ino;
    let file = w
        .fs()
        .mknod(sub, b"f", FileKind::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    assert_eq!(w.fs().project(sub).unwrap(), (42, true));
    assert_eq!(w.fs().project(file).unwrap(), (42, false));
    assert!(
        w.fs().set_project(file, 1, true).is_err(),
        "inherit is for directories"
    );
    w.fs().write(file, 0, &noise(100_000, 7)).unwrap();
    w.sync_and_reopen();
    let usage = w.fs().usage(project(42)).unwrap();
    assert_eq!(usage.objects, 3);
    assert!(usage.bytes >= 100_000);
    // Moving or linking a file of another project into an inheriting directory is EXDEV.
    let stray = w
        .fs()
        .mknod(root, b"stray", FileKind::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    let moved = w
        .fs()
        .rename(root, b"stray", dir, b"stray", RenameFlags::default());
    assert_eq!(moved.unwrap_err().errno(), libc::EXDEV);
    assert_eq!(
        w.fs().link(stray, dir, b"l").unwrap_err().errno(),
        libc::EXDEV
    );
    w.fs().set_project(stray, 42, false).unwrap();
    w.fs()
        .rename(root, b"stray", dir, b"stray", RenameFlags::default())
        .unwrap();
    w.fs().unlink(dir, b"stray").unwrap();
    w.fs().reclaim(stray).unwrap();
    w.fs().set_project(file, 9, false).unwrap();
    w.sync_and_reopen();
    assert_eq!(w.fs().usage(project(42)).unwrap().objects, 2);
    assert_eq!(w.fs().usage(project(9)).unwrap().objects, 1);
}

#[test]
fn a_filesystem_without_counts_is_upgraded_by_a_scan() {
    let mut w = World::new();
    let root = w.fs().root().unwrap();
    for (i, uid) in [1000u32, 1001, 1000].iter().enumerate() {
        let creds = Creds { uid: *uid, gid: 50 };
        let name = format!("f{i}");
        let f = w
            .fs()
            .mknod(root, name.as_bytes(), FileKind::Regular, 0o644, 0, creds)
            .unwrap()
            .ino;
        w.fs().write(f, 0, &noise(50_000, i as u64)).unwrap();
    }
    // Make it a filesystem of the first format: no used-by objects.
    let mut fs = w.fs();
    for key in ["userused", "groupused", "projectused"] {
        let zap = fs
            .os
            .zap_lookup_u64(fs.store, MASTER, key)
            .unwrap()
            .unwrap();
        fs.os.zap_remove(fs.store, MASTER, key).unwrap();
        fs.os.free_object(fs.store, ObjectId(zap)).unwrap();
    }
    assert_eq!(fs.usage(user(1000)).unwrap_err().errno(), libc::EOPNOTSUPP);
    let root_bp = w.os.sync(&mut w.store).unwrap();
    w.store.next_txg();
    w.os = tarn_objects::ObjectSet::open(&w.store, &root_bp).unwrap();
    assert!(w.fs().upgrade_usedby(crate::UsedScale::ONE).unwrap());
    assert!(
        !w.fs().upgrade_usedby(crate::UsedScale::ONE).unwrap(),
        "once"
    );
    assert_eq!(w.fs().usage(user(1000)).unwrap().objects, 2);
    assert_eq!(w.fs().usage(group(50)).unwrap().objects, 3);
    w.sync_and_reopen();
}

#[test]
fn the_checker_sees_a_wrong_count() {
    let mut w = World::new();
    let root = w.fs().root().unwrap();
    let f = w
        .fs()
        .mknod(root, b"f", FileKind::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    w.fs().write(f, 0, &noise(10_000, 9)).unwrap();
    w.sync_and_reopen();
    let scale = crate::UsedScale::ONE;
    assert_eq!(w.fs().usedby_mismatch(scale).unwrap(), None);
    // A count off by one byte, committed (the hook sees no inode change for it).
    let fs = w.fs();
    let zap = fs
        .os
        .zap_lookup_u64(fs.store, MASTER, "userused")
        .unwrap()
        .unwrap();
    let mut value = fs
        .os
        .zap_lookup(fs.store, ObjectId(zap), "1000")
        .unwrap()
        .unwrap();
    value[0] ^= 1;
    fs.os
        .zap_update(fs.store, ObjectId(zap), "1000", &value)
        .unwrap();
    let root_bp = w.os.sync(&mut w.store).unwrap();
    w.store.next_txg();
    w.os = tarn_objects::ObjectSet::open(&w.store, &root_bp).unwrap();
    let why = w.fs().usedby_mismatch(scale).unwrap();
    assert!(why.is_some_and(|w| w.contains("differ")));
}
