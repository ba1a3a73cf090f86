//! Permission checks by mode bits, owner and group: the rules Linux applies to a filesystem
//! that has no ACLs (`generic_permission`, `may_delete`, `setattr_prepare`, `chown_ok`,
//! `may_linkat` under `protected_hardlinks`), as pure functions of the attributes involved
//! and the [`Caller`]. A front end that does not let the kernel check permissions calls
//! them before each operation; nothing here reads or changes a filesystem.
//!
//! Rules, as Linux applies them:
//! - Classes: the owner's bits if the caller owns the inode, else the group's bits if the
//!   caller is in the inode's group (primary or supplementary), else the other bits. Group
//!   membership is asked for only when the group and other bits differ in what is wanted,
//!   so supplementary groups (which may cost a front end a system call) are rarely read.
//! - Root (uid 0) may read and write anything and search any directory; it may execute a
//!   file only if some execute bit is set.
//! - Creating or removing a name needs write and search permission on the directory. In a
//!   sticky directory (`S_ISVTX`) only the owner of the file or of the directory, or root,
//!   may remove or replace a name (EPERM). Moving a directory to another parent needs write
//!   permission on it (its `..` changes).
//! - chmod: the owner or root (EPERM); the setgid bit is dropped when a caller other than
//!   root is not in the file's group. A caller with write permission may clear the setuid
//!   and setgid bits and nothing else: that is the change the kernel sends after a write or
//!   truncate by someone else than the owner (`file_remove_privs`), as a plain mode change.
//! - chown: only root changes the owner (the owner may "change" it to itself); the owner
//!   may change the group to one it is in; EPERM otherwise.
//! - Times: explicit times need the owner or root (EPERM); "now" also write permission
//!   (EACCES). Truncate without an open handle needs write permission.
//! - Hard links (Linux's `protected_hardlinks=1`, the default): the owner or root, or a
//!   regular file that is neither setuid nor setgid-executable and that the caller may read
//!   and write (EPERM).
//! - Privileges dropped by a change ([`perm_without_set_id`]): a write or truncate by a
//!   caller without `CAP_FSETID`, and any chown, take the setuid bit from a non-directory,
//!   and the setgid bit if the group may execute.

use crate::fs::Result;
use crate::{Attr, FileKind, PosixError, SetAttr, TimeOrNow};

/// Read permission.
pub const MAY_READ: u32 = 4;
/// Write permission.
pub const MAY_WRITE: u32 = 2;
/// Execute (search, for a directory) permission.
pub const MAY_EXEC: u32 = 1;

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u16 = 0o1000;
const S_IXUGO: u16 = 0o111;
const S_IXGRP: u16 = 0o010;

/// The supplementary groups of a caller, asked one group at a time.
pub trait Groups {
    /// Whether `gid` is one of the caller's supplementary groups.
    fn contains(&self, gid: u32) -> bool;
}

impl Groups for Vec<u32> {
    fn contains(&self, gid: u32) -> bool {
        self.as_slice().contains(&gid)
    }
}

/// Who asks for an operation: the requesting process's filesystem ids.
#[derive(Clone, Copy)]
pub struct Caller<'a> {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: &'a dyn Groups,
}

impl std::fmt::Debug for Caller<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Caller {{ uid: {}, gid: {} }}", self.uid, self.gid)
    }
}

impl Caller<'_> {
    /// Whether the caller is root (every check but execute passes).
    #[must_use]
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether the caller is in group `gid`, primary or supplementary.
    #[must_use]
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(gid)
    }

    fn owns(&self, attr: &Attr) -> bool {
        self.uid == attr.uid
    }
}

/// Whether `caller` may access `attr`'s inode as `want` asks ([`MAY_READ`] | [`MAY_WRITE`]
/// | [`MAY_EXEC`]).
#[must_use]
pub fn permits(attr: &Attr, caller: &Caller<'_>, want: u32) -> bool {
    assert!(want & !7 == 0, "want {want:#o} is rwx bits only");
    if caller.is_root() {
        let exec_bit_needed = want & MAY_EXEC != 0 && attr.kind != FileKind::Directory;
        return !exec_bit_needed || attr.perm & S_IXUGO != 0;
    }
    let perm = u32::from(attr.perm);
    let bits = if caller.owns(attr) {
        (perm >> 6) & 7
    } else {
        let (group, other) = ((perm >> 3) & 7, perm & 7);
        if want & (group ^ other) != 0 && caller.in_group(attr.gid) {
            group
        } else {
            other
        }
    };
    want & !bits == 0
}

/// [`permits`] as a result: EACCES when not.
pub fn check(attr: &Attr, caller: &Caller<'_>, want: u32) -> Result<()> {
    if permits(attr, caller, want) {
        Ok(())
    } else {
        Err(PosixError::AccessDenied)
    }
}

/// Whether every caller may search directory `dir` (all three execute bits): then a name
/// in it may be cached by a kernel shared by all users without asking again.
#[must_use]
pub fn searchable_by_all(dir: &Attr) -> bool {
    dir.kind == FileKind::Directory && dir.perm & S_IXUGO == S_IXUGO
}

/// Creating a name in `dir`: write and search permission.
pub fn may_create(dir: &Attr, caller: &Caller<'_>) -> Result<()> {
    check(dir, caller, MAY_WRITE | MAY_EXEC)
}

/// Removing (or replacing) `victim`'s name in `dir`: write and search permission, and in a
/// sticky directory ownership of the file or the directory (EPERM).
pub fn may_delete(dir: &Attr, victim: &Attr, caller: &Caller<'_>) -> Result<()> {
    check(dir, caller, MAY_WRITE | MAY_EXEC)?;
    if sticky_applies(dir, caller) && !caller.owns(victim) {
        return Err(PosixError::NotPermitted);
    }
    Ok(())
}

/// Whether removing a name from `dir` depends on who owns the file: `dir` is sticky and
/// `caller` is neither root nor its owner (then [`may_delete`] needs the victim's
/// attributes; otherwise write and search permission on `dir` decide alone).
#[must_use]
pub fn sticky_applies(dir: &Attr, caller: &Caller<'_>) -> bool {
    dir.perm & S_ISVTX != 0 && !caller.is_root() && !caller.owns(dir)
}

/// Renaming `source` from `source_dir` to `target_dir`, over `target` if that name exists
/// (`exchange`: the two swap, so each is removed from its directory and created in the
/// other).
pub fn may_rename(
    source_dir: &Attr,
    source: &Attr,
    target_dir: &Attr,
    target: Option<&Attr>,
    exchange: bool,
    caller: &Caller<'_>,
) -> Result<()> {
    may_delete(source_dir, source, caller)?;
    match target {
        Some(target) => may_delete(target_dir, target, caller)?,
        None => may_create(target_dir, caller)?,
    }
    if source_dir.ino != target_dir.ino {
        // A directory that changes parent has its `..` rewritten.
        if source.kind == FileKind::Directory {
            check(source, caller, MAY_WRITE)?;
        }
        if let Some(target) = target.filter(|t| exchange && t.kind == FileKind::Directory) {
            check(target, caller, MAY_WRITE)?;
        }
    }
    Ok(())
}

/// A new hard link to `file` (`protected_hardlinks`).
pub fn may_link(file: &Attr, caller: &Caller<'_>) -> Result<()> {
    if caller.is_root() || caller.owns(file) {
        return Ok(());
    }
    let perm = file.perm;
    let setuid = u32::from(perm) & S_ISUID != 0;
    let setgid_exec = u32::from(perm) & S_ISGID != 0 && perm & S_IXGRP != 0;
    let safe = file.kind == FileKind::Regular && !setuid && !setgid_exec;
    if safe && permits(file, caller, MAY_READ | MAY_WRITE) {
        Ok(())
    } else {
        Err(PosixError::NotPermitted)
    }
}

/// Opening `attr`'s inode for reading and/or writing, or (`exec`) to run it.
pub fn may_open(
    attr: &Attr,
    caller: &Caller<'_>,
    read: bool,
    write: bool,
    exec: bool,
) -> Result<()> {
    let want = [(read, MAY_READ), (write, MAY_WRITE), (exec, MAY_EXEC)]
        .into_iter()
        .filter(|(wanted, _)| *wanted)
        .fold(0, |want, (_, bit)| want | bit);
    check(attr, caller, want)
}

/// Checks an attribute change of `attr`'s inode by `caller` and returns it as it may be
/// applied (a setgid bit the caller may not set is dropped). `handle`: the change comes
/// through an open file (ftruncate), whose open already checked write permission.
pub fn may_setattr(
    attr: &Attr,
    changes: &SetAttr,
    caller: &Caller<'_>,
    handle: bool,
) -> Result<SetAttr> {
    let mut changes = *changes;
    let owner_or_root = caller.is_root() || caller.owns(attr);
    let may_chown = |uid: u32| caller.owns(attr) && uid == attr.uid;
    if changes
        .uid
        .is_some_and(|uid| !(caller.is_root() || may_chown(uid)))
    {
        return Err(PosixError::NotPermitted);
    }
    let may_chgrp = |gid: u32| caller.owns(attr) && (gid == attr.gid || caller.in_group(gid));
    if changes
        .gid
        .is_some_and(|gid| !(caller.is_root() || may_chgrp(gid)))
    {
        return Err(PosixError::NotPermitted);
    }
    if let Some(mode) = changes.mode {
        changes.mode = Some(chmod_mode(attr, mode, changes.gid, caller)?);
    }
    if changes.size.is_some() && !handle {
        check(attr, caller, MAY_WRITE)?;
    }
    let explicit = |time: Option<TimeOrNow>| matches!(time, Some(TimeOrNow::At(_)));
    let now = |time: Option<TimeOrNow>| matches!(time, Some(TimeOrNow::Now));
    if (explicit(changes.atime) || explicit(changes.mtime)) && !owner_or_root {
        return Err(PosixError::NotPermitted);
    }
    if (now(changes.atime) || now(changes.mtime)) && !owner_or_root {
        check(attr, caller, MAY_WRITE)?;
    }
    Ok(changes)
}

/// The permission bits a non-directory keeps when a write, a truncate or a chown drops its
/// privileges (Linux's `should_remove_suid`, which a front end applies for callers without
/// `CAP_FSETID` on writes and truncates, and for every chown): the setuid bit goes, and the
/// setgid bit when the group may execute (without group execute it marks mandatory locking
/// and stays). `None` when there is nothing to drop, or for a directory.
pub fn perm_without_set_id(attr: &Attr) -> Option<u32> {
    if attr.kind == FileKind::Directory {
        return None;
    }
    let perm = u32::from(attr.perm);
    let mut drop = perm & S_ISUID;
    if perm & S_ISGID != 0 && attr.perm & S_IXGRP != 0 {
        drop |= S_ISGID;
    }
    (drop != 0).then_some(perm & !drop)
}

/// The mode a chmod to `mode` may set (see the module rules); `new_gid`: the group the same
/// change gives the inode.
fn chmod_mode(attr: &Attr, mode: u32, new_gid: Option<u32>, caller: &Caller<'_>) -> Result<u32> {
    let old = u32::from(attr.perm);
    let mode = mode & 0o7777;
    if caller.is_root() {
        return Ok(mode);
    }
    if !caller.owns(attr) {
        // Only the privilege bits cleared, nothing else: what a write by another user asks.
        let clears_privileges_only = mode & !old == 0 && (old & !mode) & !(S_ISUID | S_ISGID) == 0;
        if clears_privileges_only && permits(attr, caller, MAY_WRITE) {
            return Ok(mode);
        }
        return Err(PosixError::NotPermitted);
    }
    if mode & S_ISGID != 0 && !caller.in_group(new_gid.unwrap_or(attr.gid)) {
        return Ok(mode & !S_ISGID);
    }
    Ok(mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Timespec;

    fn e<T>(result: Result<T>) -> std::result::Result<T, i32> {
        result.map_err(|error| error.errno())
    }

    const ALICE: u32 = 1000;
    const BOB: u32 = 1001;
    const STAFF: u32 = 50;
    const USERS: u32 = 100;

    fn attr(kind: FileKind, perm: u16, uid: u32, gid: u32) -> Attr {
        Attr {
            ino: 7,
            kind,
            perm,
            nlink: 1,
            uid,
            gid,
            rdev: 0,
            size: 0,
            blocks: 0,
            blksize: 4096,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            crtime: Timespec::default(),
            generation: 1,
        }
    }

    fn file(perm: u16) -> Attr {
        attr(FileKind::Regular, perm, ALICE, STAFF)
    }

    fn dir(perm: u16, uid: u32) -> Attr {
        Attr {
            ino: 3,
            ..attr(FileKind::Directory, perm, uid, STAFF)
        }
    }

    fn caller(uid: u32, gid: u32, groups: &[u32]) -> Caller<'static> {
        // Leaked: a few bytes per test, for a caller that lives as long as the test.
        let groups: &'static Vec<u32> = Box::leak(Box::new(groups.to_vec()));
        Caller { uid, gid, groups }
    }

    /// A group list that fails the test if it is asked: proves membership is not read.
    struct NeverAsked;
    impl Groups for NeverAsked {
        fn contains(&self, gid: u32) -> bool {
            panic!("supplementary groups read for gid {gid}")
        }
    }

    #[test]
    fn owner_group_and_other_bits_are_chosen_by_class() {
        let f = file(0o640);
        let alice = caller(ALICE, USERS, &[]);
        assert!(permits(&f, &alice, MAY_READ | MAY_WRITE));
        assert!(!permits(&f, &alice, MAY_EXEC));
        let staff_member = caller(BOB, STAFF, &[]);
        assert!(permits(&f, &staff_member, MAY_READ));
        assert!(!permits(&f, &staff_member, MAY_WRITE));
        let supplementary = caller(BOB, USERS, &[9, STAFF]);
        assert!(permits(&f, &supplementary, MAY_READ));
        let stranger = caller(BOB, USERS, &[9]);
        assert!(!permits(&f, &stranger, MAY_READ));
        assert_eq!(e(check(&f, &stranger, MAY_READ)), Err(libc::EACCES));
    }

    #[test]
    fn the_owner_class_wins_even_when_it_grants_less() {
        // 0047: the owner may do nothing, the group read, everyone else everything.
        let f = file(0o047);
        assert!(!permits(&f, &caller(ALICE, STAFF, &[]), MAY_READ));
        assert!(permits(&f, &caller(BOB, STAFF, &[]), MAY_READ));
        assert!(!permits(&f, &caller(BOB, STAFF, &[]), MAY_WRITE));
        assert!(permits(&f, &caller(BOB, USERS, &[]), MAY_WRITE));
    }

    #[test]
    fn groups_are_asked_only_when_group_and_other_bits_differ() {
        let f = file(0o644);
        let bob = Caller {
            uid: BOB,
            gid: USERS,
            groups: &NeverAsked,
        };
        assert!(permits(&f, &bob, MAY_READ));
        assert!(!permits(&f, &bob, MAY_WRITE));
    }

    #[test]
    fn root_bypasses_all_but_execute_bits_of_files() {
        let root = caller(0, 0, &[]);
        assert!(permits(&file(0o000), &root, MAY_READ | MAY_WRITE));
        assert!(!permits(&file(0o600), &root, MAY_EXEC));
        assert!(permits(&file(0o001), &root, MAY_EXEC));
        assert!(permits(&dir(0o000, ALICE), &root, MAY_EXEC | MAY_WRITE));
    }

    #[test]
    fn creating_needs_write_and_search_on_the_directory() {
        let bob = caller(BOB, USERS, &[]);
        assert!(may_create(&dir(0o777, ALICE), &bob).is_ok());
        assert_eq!(e(may_create(&dir(0o775, ALICE), &bob)), Err(libc::EACCES));
        assert_eq!(
            e(may_create(&dir(0o776, ALICE), &bob)),
            Err(libc::EACCES),
            "write without search"
        );
    }

    #[test]
    fn sticky_directories_let_only_owners_remove() {
        let tmp = dir(0o1777, 0);
        let bob = caller(BOB, USERS, &[]);
        let alices = file(0o666);
        assert_eq!(e(may_delete(&tmp, &alices, &bob)), Err(libc::EPERM));
        assert!(may_delete(&tmp, &alices, &caller(ALICE, USERS, &[])).is_ok());
        assert!(
            may_delete(&dir(0o1777, BOB), &alices, &bob).is_ok(),
            "dir owner"
        );
        assert!(may_delete(&tmp, &alices, &caller(0, 0, &[])).is_ok());
        assert!(
            may_delete(&dir(0o777, 0), &alices, &bob).is_ok(),
            "not sticky"
        );
        assert!(sticky_applies(&tmp, &bob));
        assert!(!sticky_applies(&dir(0o1777, BOB), &bob));
        assert!(!sticky_applies(&dir(0o777, 0), &bob));
        assert_eq!(
            e(may_delete(
                &dir(0o755, 0),
                &alices,
                &caller(ALICE, USERS, &[])
            )),
            Err(libc::EACCES),
            "owning the file is not enough without write on the directory"
        );
    }

    #[test]
    fn renames_check_both_directories_and_a_moved_directorys_dotdot() {
        let bob = caller(BOB, USERS, &[]);
        let open_dir = dir(0o777, ALICE);
        let other_dir = Attr {
            ino: 4,
            ..dir(0o777, ALICE)
        };
        let closed_dir = Attr {
            ino: 5,
            ..dir(0o755, ALICE)
        };
        let subdir = attr(FileKind::Directory, 0o755, ALICE, STAFF);
        let own_subdir = attr(FileKind::Directory, 0o755, BOB, USERS);
        let f = file(0o644);
        assert!(may_rename(&open_dir, &f, &other_dir, None, false, &bob).is_ok());
        assert!(may_rename(&open_dir, &f, &closed_dir, None, false, &bob).is_err());
        assert!(may_rename(&closed_dir, &f, &open_dir, None, false, &bob).is_err());
        assert!(may_rename(&open_dir, &subdir, &open_dir, None, false, &bob).is_ok());
        assert_eq!(
            e(may_rename(
                &open_dir, &subdir, &other_dir, None, false, &bob
            )),
            Err(libc::EACCES),
            "moving someone else's directory rewrites its .."
        );
        assert!(may_rename(&open_dir, &own_subdir, &other_dir, None, false, &bob).is_ok());
        let sticky = Attr {
            ino: 6,
            ..dir(0o1777, 0)
        };
        assert_eq!(
            e(may_rename(
                &open_dir,
                &f,
                &sticky,
                Some(&file(0o666)),
                false,
                &bob
            )),
            Err(libc::EPERM),
            "replacing someone else's file in a sticky directory"
        );
        assert_eq!(
            e(may_rename(
                &open_dir,
                &own_subdir,
                &other_dir,
                Some(&subdir),
                true,
                &bob
            )),
            Err(libc::EACCES),
            "an exchange moves the other directory too"
        );
    }

    #[test]
    fn hard_links_follow_protected_hardlinks() {
        let bob = caller(BOB, USERS, &[]);
        assert!(may_link(&file(0o666), &bob).is_ok());
        assert_eq!(e(may_link(&file(0o644), &bob)), Err(libc::EPERM));
        assert_eq!(e(may_link(&file(0o4666), &bob)), Err(libc::EPERM));
        assert_eq!(e(may_link(&file(0o2676), &bob)), Err(libc::EPERM));
        assert!(
            may_link(&file(0o2666), &bob).is_ok(),
            "setgid without group exec"
        );
        assert!(may_link(&file(0o000), &caller(ALICE, USERS, &[])).is_ok());
        assert!(may_link(&file(0o000), &caller(0, 0, &[])).is_ok());
        let fifo = attr(FileKind::Fifo, 0o666, ALICE, STAFF);
        assert_eq!(e(may_link(&fifo, &bob)), Err(libc::EPERM));
    }

    #[test]
    fn opens_need_the_access_they_ask_for() {
        let bob = caller(BOB, USERS, &[]);
        let f = file(0o645);
        assert!(may_open(&f, &bob, true, false, false).is_ok());
        assert!(may_open(&f, &bob, false, false, true).is_ok());
        assert_eq!(e(may_open(&f, &bob, true, true, false)), Err(libc::EACCES));
        assert!(
            may_open(&file(0o600), &bob, false, false, false).is_ok(),
            "no access"
        );
    }

    #[test]
    fn chown_is_roots_and_chgrp_the_owners_within_its_groups() {
        let f = file(0o644);
        let alice = caller(ALICE, USERS, &[STAFF, 9]);
        let to = |uid, gid| SetAttr {
            uid,
            gid,
            ..SetAttr::default()
        };
        assert!(may_setattr(&f, &to(Some(BOB), None), &caller(0, 0, &[]), false).is_ok());
        assert_eq!(
            e(may_setattr(&f, &to(Some(BOB), None), &alice, false)),
            Err(libc::EPERM)
        );
        assert!(may_setattr(&f, &to(Some(ALICE), None), &alice, false).is_ok());
        assert!(may_setattr(&f, &to(None, Some(9)), &alice, false).is_ok());
        assert!(may_setattr(&f, &to(None, Some(USERS)), &alice, false).is_ok());
        assert_eq!(
            e(may_setattr(&f, &to(None, Some(77)), &alice, false)),
            Err(libc::EPERM)
        );
        let bob = caller(BOB, STAFF, &[]);
        assert_eq!(
            e(may_setattr(&f, &to(None, Some(STAFF)), &bob, false)),
            Err(libc::EPERM),
            "a group member who does not own the file"
        );
    }

    #[test]
    fn chmod_is_the_owners_and_drops_setgid_outside_the_group() {
        let mode = |mode| SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        let f = file(0o644);
        let alice_in_staff = caller(ALICE, STAFF, &[]);
        let alice_outside = caller(ALICE, USERS, &[]);
        let applied = |attr: &Attr, change: &SetAttr, who: &Caller<'_>| {
            may_setattr(attr, change, who, false).map(|c| c.mode)
        };
        assert_eq!(
            e(applied(&f, &mode(0o2755), &alice_in_staff)),
            Ok(Some(0o2755))
        );
        assert_eq!(
            e(applied(&f, &mode(0o2755), &alice_outside)),
            Ok(Some(0o755))
        );
        assert_eq!(
            e(applied(&f, &mode(0o2755), &caller(0, 0, &[]))),
            Ok(Some(0o2755))
        );
        assert_eq!(
            e(applied(&f, &mode(0o600), &caller(BOB, STAFF, &[]))),
            Err(libc::EPERM)
        );
        let with_group = SetAttr {
            gid: Some(USERS),
            ..mode(0o2755)
        };
        assert_eq!(
            e(applied(&f, &with_group, &caller(ALICE, STAFF, &[USERS]))),
            Ok(Some(0o2755)),
            "the new group decides"
        );
    }

    #[test]
    fn a_writer_may_clear_privilege_bits_and_nothing_else() {
        let mode = |mode| SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        let setuid = file(0o6666);
        let bob = caller(BOB, USERS, &[]);
        let applied = |change: &SetAttr| may_setattr(&setuid, change, &bob, false);
        assert!(applied(&mode(0o0666)).is_ok());
        assert!(applied(&mode(0o2666)).is_ok());
        assert_eq!(e(applied(&mode(0o0644))), Err(libc::EPERM));
        assert_eq!(e(applied(&mode(0o6667))), Err(libc::EPERM));
        let unwritable = file(0o6644);
        assert_eq!(
            e(may_setattr(&unwritable, &mode(0o644), &bob, false)),
            Err(libc::EPERM)
        );
    }

    #[test]
    fn truncate_and_times_follow_write_permission_and_ownership() {
        let bob = caller(BOB, USERS, &[]);
        let size = SetAttr {
            size: Some(0),
            ..SetAttr::default()
        };
        assert_eq!(
            e(may_setattr(&file(0o644), &size, &bob, false)),
            Err(libc::EACCES)
        );
        assert!(
            may_setattr(&file(0o644), &size, &bob, true).is_ok(),
            "open handle"
        );
        assert!(may_setattr(&file(0o646), &size, &bob, false).is_ok());
        let now = SetAttr {
            atime: Some(TimeOrNow::Now),
            mtime: Some(TimeOrNow::Now),
            ..SetAttr::default()
        };
        assert!(may_setattr(&file(0o646), &now, &bob, false).is_ok());
        assert_eq!(
            e(may_setattr(&file(0o644), &now, &bob, false)),
            Err(libc::EACCES)
        );
        let explicit = SetAttr {
            mtime: Some(TimeOrNow::At(Timespec { secs: 5, nsecs: 0 })),
            ..SetAttr::default()
        };
        assert_eq!(
            e(may_setattr(&file(0o666), &explicit, &bob, false)),
            Err(libc::EPERM)
        );
        assert!(may_setattr(&file(0o600), &explicit, &caller(ALICE, 1, &[]), false).is_ok());
    }

    #[test]
    fn only_directories_with_every_search_bit_are_searchable_by_all() {
        assert!(searchable_by_all(&dir(0o755, ALICE)));
        assert!(searchable_by_all(&dir(0o1711, ALICE)));
        assert!(!searchable_by_all(&dir(0o750, ALICE)));
        assert!(!searchable_by_all(&dir(0o754, ALICE)));
        assert!(!searchable_by_all(&file(0o755)));
    }

    /// Goal: the bits a write, truncate or chown drops are Linux's: setuid always, setgid
    /// only with group execute, nothing on a directory or a plain file.
    #[test]
    fn privileges_dropped_as_linux_drops_them() {
        assert_eq!(perm_without_set_id(&file(0o4755)), Some(0o755));
        assert_eq!(perm_without_set_id(&file(0o6755)), Some(0o755));
        assert_eq!(perm_without_set_id(&file(0o2755)), Some(0o755));
        // setgid without group execute: mandatory locking, kept.
        assert_eq!(perm_without_set_id(&file(0o2745)), None);
        assert_eq!(perm_without_set_id(&file(0o6745)), Some(0o2745));
        assert_eq!(perm_without_set_id(&file(0o1755)), None);
        assert_eq!(perm_without_set_id(&file(0o644)), None);
        assert_eq!(perm_without_set_id(&dir(0o6755, ALICE)), None);
    }
}
