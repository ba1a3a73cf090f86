//! POSIX ACLs as FUSE leaves them to the filesystem. With `FUSE_POSIX_ACL` the kernel
//! enforces the ACLs it reads from the `system.posix_acl_*` xattrs, but keeping the mode and
//! the access ACL in step, and inheriting a directory's default ACL, are the filesystem's
//! work. This module does what the kernel's `posix_acl_update_mode`, `posix_acl_chmod` and
//! `posix_acl_create` do for in-kernel filesystems, on the xattr form:
//!
//! ```text
//!   header: u32 version (2), then entries of 8 bytes, little-endian:
//!   u16 tag (USER_OBJ 1, USER 2, GROUP_OBJ 4, GROUP 8, MASK 16, OTHER 32), u16 perm, u32 id
//! ```
//! The caller runs these inside one `Engine::fs_op`, so a mode and its ACL change together.

use tarn_engine::posix::{Attr, Fs, Ino, PosixError, SetAttr, XattrSet};

/// What the names of both ACL xattrs start with.
pub(crate) const PREFIX: &[u8] = b"system.posix_acl_";
/// The access ACL's xattr name.
pub(crate) const ACCESS: &[u8] = b"system.posix_acl_access";
/// The default ACL's xattr name (directories only).
pub(crate) const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const GROUP_OBJ: u16 = 0x04;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

/// One ACL entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// Decodes an ACL xattr; `None` when it is malformed.
pub(crate) fn parse(bytes: &[u8]) -> Option<Vec<Entry>> {
    let (header, body) = bytes.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*header) != VERSION || body.len() % 8 != 0 {
        return None;
    }
    let entries: Vec<Entry> = body
        .chunks_exact(8)
        .map(|raw| Entry {
            tag: u16::from_le_bytes([raw[0], raw[1]]),
            perm: u16::from_le_bytes([raw[2], raw[3]]),
            id: u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]),
        })
        .collect();
    let has = |tag| entries.iter().any(|e| e.tag == tag);
    (has(USER_OBJ) && has(GROUP_OBJ) && has(OTHER)).then_some(entries)
}

/// Encodes entries as an ACL xattr.
pub(crate) fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut bytes = VERSION.to_le_bytes().to_vec();
    for entry in entries {
        bytes.extend_from_slice(&entry.tag.to_le_bytes());
        bytes.extend_from_slice(&entry.perm.to_le_bytes());
        bytes.extend_from_slice(&entry.id.to_le_bytes());
    }
    bytes
}

/// True when the ACL says no more than the mode bits (owner, group, other only).
fn is_minimal(entries: &[Entry]) -> bool {
    entries
        .iter()
        .all(|e| matches!(e.tag, USER_OBJ | GROUP_OBJ | OTHER))
}

/// The entry that stands for the group class: the mask if there is one, else the owning
/// group's entry.
fn group_class(entries: &mut [Entry]) -> Option<&mut Entry> {
    let tag = if entries.iter().any(|e| e.tag == MASK) {
        MASK
    } else {
        GROUP_OBJ
    };
    entries.iter_mut().find(|e| e.tag == tag)
}

/// The permission bits (0o777) an access ACL implies.
fn mode_bits(entries: &[Entry]) -> u32 {
    let mut entries = entries.to_vec();
    let perm = |entries: &mut [Entry], tag| {
        entries
            .iter()
            .find(|e| e.tag == tag)
            .map_or(0, |e| u32::from(e.perm & 7))
    };
    let user = perm(&mut entries, USER_OBJ);
    let other = perm(&mut entries, OTHER);
    let group = group_class(&mut entries).map_or(0, |e| u32::from(e.perm & 7));
    (user << 6) | (group << 3) | other
}

/// `posix_acl_chmod`: the ACL after a chmod to `mode`.
fn chmod(entries: &mut [Entry], mode: u32) {
    for entry in entries.iter_mut() {
        match entry.tag {
            USER_OBJ => entry.perm = ((mode >> 6) & 7) as u16,
            OTHER => entry.perm = (mode & 7) as u16,
            _ => {}
        }
    }
    if let Some(group) = group_class(entries) {
        group.perm = ((mode >> 3) & 7) as u16;
    }
}

/// `posix_acl_create_masq`: a new inode's access ACL from its parent's default ACL, and the
/// mode narrowed by it.
fn create_masq(entries: &mut [Entry], mode: u32) -> u32 {
    let mut mode = mode;
    for entry in entries.iter_mut() {
        let shift = match entry.tag {
            USER_OBJ => 6,
            OTHER => 0,
            _ => continue,
        };
        entry.perm &= ((mode >> shift) & 7) as u16;
        mode &= !(0o7 << shift) | (u32::from(entry.perm) << shift);
    }
    if let Some(group) = group_class(entries) {
        group.perm &= ((mode >> 3) & 7) as u16;
        mode &= !0o070 | (u32::from(group.perm) << 3);
    }
    mode
}

type Result<T> = std::result::Result<T, PosixError>;

fn read_acl(fs: &mut Fs<'_>, ino: Ino, name: &[u8]) -> Result<Option<Vec<Entry>>> {
    match fs.getxattr(ino, name) {
        Ok(bytes) => Ok(parse(&bytes)),
        Err(PosixError::NoAttr | PosixError::NotSupported) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Sets the access ACL `value` of `ino` and the mode it implies (`posix_acl_update_mode`);
/// an ACL that says no more than a mode is stored as the mode alone.
pub(crate) fn set_access(fs: &mut Fs<'_>, ino: Ino, value: &[u8], how: XattrSet) -> Result<()> {
    let entries = parse(value).ok_or(PosixError::Invalid("malformed POSIX ACL"))?;
    let attr = fs.getattr(ino)?;
    let mode = (u32::from(attr.perm) & 0o7000) | mode_bits(&entries);
    if is_minimal(&entries) {
        match fs.removexattr(ino, ACCESS) {
            Ok(()) | Err(PosixError::NoAttr) => {}
            Err(error) => return Err(error),
        }
    } else {
        fs.setxattr(ino, ACCESS, &encode(&entries), how)?;
    }
    let changes = SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    };
    fs.setattr(ino, &changes).map(|_| ())
}

/// After a chmod of `ino`: its access ACL follows the new mode (`posix_acl_chmod`).
pub(crate) fn after_chmod(fs: &mut Fs<'_>, ino: Ino, mode: u32) -> Result<()> {
    if let Some(mut entries) = read_acl(fs, ino, ACCESS)? {
        chmod(&mut entries, mode);
        fs.setxattr(ino, ACCESS, &encode(&entries), XattrSet::Replace)?;
    }
    Ok(())
}

/// The parent's default ACL, if it has one: a new inode inherits it instead of the umask.
pub(crate) fn parent_default(fs: &mut Fs<'_>, parent: Ino) -> Result<Option<Vec<Entry>>> {
    read_acl(fs, parent, DEFAULT)
}

/// Gives a newly created inode its inherited ACLs (`posix_acl_create`): a directory keeps
/// the default ACL as its own default; the access ACL is the default narrowed by the mode
/// the creator asked for, and the mode is narrowed by it in turn.
pub(crate) fn inherit(fs: &mut Fs<'_>, attr: &Attr, default: &[Entry], mode: u32) -> Result<Attr> {
    let is_dir = attr.kind == tarn_engine::posix::FileKind::Directory;
    if is_dir {
        fs.setxattr(attr.ino, DEFAULT, &encode(default), XattrSet::Either)?;
    }
    let mut access = default.to_vec();
    let narrowed = create_masq(&mut access, mode & 0o777) | (mode & 0o7000);
    if !is_minimal(&access) {
        fs.setxattr(attr.ino, ACCESS, &encode(&access), XattrSet::Either)?;
    }
    if narrowed == u32::from(attr.perm) {
        return fs.getattr(attr.ino);
    }
    let changes = SetAttr {
        mode: Some(narrowed),
        ..SetAttr::default()
    };
    fs.setattr(attr.ino, &changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Vec<Entry> {
        entries
            .iter()
            .map(|&(tag, perm, id)| Entry { tag, perm, id })
            .collect()
    }

    const USER: u16 = 0x02;

    #[test]
    fn xattr_form_round_trips_and_garbage_is_refused() {
        let entries = acl(&[
            (USER_OBJ, 7, 0),
            (USER, 5, 65534),
            (GROUP_OBJ, 0, 0),
            (MASK, 5, 0),
        ]);
        let mut full = entries.clone();
        full.push(Entry {
            tag: OTHER,
            perm: 0,
            id: 0,
        });
        assert_eq!(parse(&encode(&full)), Some(full.clone()));
        assert_eq!(parse(&encode(&entries)), None, "no OTHER entry");
        assert_eq!(parse(&[2, 0, 0, 0, 1]), None);
        assert_eq!(parse(&[]), None);
    }

    #[test]
    fn the_mask_is_the_group_class() {
        let mut entries = acl(&[
            (USER_OBJ, 7, 0),
            (USER, 5, 65534),
            (GROUP_OBJ, 0, 0),
            (MASK, 5, 0),
            (OTHER, 0, 0),
        ]);
        assert_eq!(mode_bits(&entries), 0o750);
        chmod(&mut entries, 0o700);
        assert_eq!(mode_bits(&entries), 0o700);
        assert_eq!(
            entries[1].perm, 5,
            "named entries keep their bits, the mask limits them"
        );
        assert_eq!(entries[3].perm, 0);
    }

    #[test]
    fn creation_narrows_the_default_and_the_mode() {
        let mut entries = acl(&[
            (USER_OBJ, 7, 0),
            (USER, 7, 1000),
            (GROUP_OBJ, 5, 0),
            (MASK, 7, 0),
            (OTHER, 5, 0),
        ]);
        let mode = create_masq(&mut entries, 0o666);
        assert_eq!(mode, 0o664);
        assert_eq!(mode_bits(&entries), 0o664);
        assert!(!is_minimal(&entries));
    }
}
