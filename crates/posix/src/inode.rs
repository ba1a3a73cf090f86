//! The inode: a file's attributes in its object's bonus buffer (docs/FORMAT.md, "POSIX
//! layer"), and the object types the POSIX layer gives its objects.

use tarn_objects::ObjectError;

use crate::{FileKind, Ino, PosixError, Timespec};

/// Object types of the POSIX layer (above tarn-objects' own and the engine's MOS types).
pub(crate) const TYPE_MASTER: u8 = 32;
pub(crate) const TYPE_DIRECTORY: u8 = 33;
pub(crate) const TYPE_FILE: u8 = 34;
pub(crate) const TYPE_SYMLINK: u8 = 35;
pub(crate) const TYPE_SPECIAL: u8 = 36;
pub(crate) const TYPE_XATTR: u8 = 37;
pub(crate) const TYPE_XATTR_VALUE: u8 = 38;
pub(crate) const TYPE_UNLINKED: u8 = 39;
pub(crate) const TYPE_USEDBY: u8 = 40;

/// Inode flag: new files and directories in this directory take its project id (and new
/// directories this flag), ZFS's `PROJINHERIT`.
pub(crate) const FLAG_PROJECT_INHERIT: u32 = 1;
/// Inode flag: the checksums the file's cache attribute holds (module `filesum`) were
/// computed from the data as it is: every change of the data (write, truncate, fallocate)
/// clears it. An older tarn ignores and drops it, which only costs a recomputation.
pub(crate) const FLAG_CHECKSUM_CURRENT: u32 = 2;
/// The flag bits an inode keeps (others read as zero).
const FLAGS_KNOWN: u32 = FLAG_PROJECT_INHERIT | FLAG_CHECKSUM_CURRENT;

/// Encoded length of the fixed part of an inode.
pub(crate) const INODE_LEN: usize = 128;
/// Longest symlink target kept in the bonus buffer after the inode.
pub(crate) const SYMLINK_INLINE_MAX: usize = tarn_format::dnode::DNODE_BONUS_MAX - INODE_LEN;
const INODE_VERSION: u8 = 1;

/// A decoded inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Inode {
    pub(crate) kind: FileKind,
    pub(crate) perm: u16,
    pub(crate) nlink: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Bytes for files and symlinks; entries for directories.
    pub(crate) size: u64,
    /// Directory a directory lives in (its `..`); for other files the directory it was
    /// created in or last renamed into (for naming damaged files).
    pub(crate) parent: Ino,
    pub(crate) rdev: u64,
    pub(crate) generation: u64,
    /// ZAP of extended attributes (0: none yet).
    pub(crate) xattr: u64,
    pub(crate) atime: Timespec,
    pub(crate) mtime: Timespec,
    pub(crate) ctime: Timespec,
    pub(crate) crtime: Timespec,
    /// Project id (`projectquota@`); 0 is the default project.
    pub(crate) project: u32,
    /// [`FLAG_PROJECT_INHERIT`], [`FLAG_CHECKSUM_CURRENT`]; other bits zero.
    pub(crate) flags: u32,
    /// A symlink's target when it fits in the bonus buffer.
    pub(crate) inline: Vec<u8>,
}

fn kind_code(kind: FileKind) -> u8 {
    match kind {
        FileKind::Regular => 1,
        FileKind::Directory => 2,
        FileKind::Symlink => 3,
        FileKind::Fifo => 4,
        FileKind::Socket => 5,
        FileKind::CharDevice => 6,
        FileKind::BlockDevice => 7,
    }
}

/// The file kind an encoded byte names.
pub(crate) fn kind_from(code: u8) -> Option<FileKind> {
    Some(match code {
        1 => FileKind::Regular,
        2 => FileKind::Directory,
        3 => FileKind::Symlink,
        4 => FileKind::Fifo,
        5 => FileKind::Socket,
        6 => FileKind::CharDevice,
        7 => FileKind::BlockDevice,
        _ => return None,
    })
}

/// The kind byte of a directory entry.
pub(crate) fn kind_byte(kind: FileKind) -> u8 {
    kind_code(kind)
}

/// The object type an inode of `kind` lives in.
pub(crate) fn object_type(kind: FileKind) -> u8 {
    match kind {
        FileKind::Regular => TYPE_FILE,
        FileKind::Directory => TYPE_DIRECTORY,
        FileKind::Symlink => TYPE_SYMLINK,
        _ => TYPE_SPECIAL,
    }
}

/// A corrupt-metadata error for inode `ino`.
pub(crate) fn corrupt(ino: Ino, why: &'static str) -> PosixError {
    PosixError::Object(ObjectError::Corrupt {
        object: tarn_base::ObjectId(ino),
        why,
        source: None,
    })
}

fn put_time(out: &mut Vec<u8>, time: Timespec) {
    out.extend_from_slice(&time.secs.to_le_bytes());
    out.extend_from_slice(&time.nsecs.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn time_at(bytes: &[u8], at: usize) -> Option<Timespec> {
    let nsecs = u32_at(bytes, at + 8);
    (nsecs < 1_000_000_000).then(|| Timespec {
        secs: u64_at(bytes, at) as i64,
        nsecs,
    })
}

impl Inode {
    /// Whether `self` and `other` are the same but for what reading changes: the access
    /// time, and the checksum cache (module `filesum`: its flag, and the attribute ZAP its
    /// first value creates; a user's attribute change also moves the ctime).
    pub(crate) fn same_but_access(&self, other: &Inode) -> bool {
        let plain = |inode: &Inode| Inode {
            atime: Timespec::default(),
            flags: inode.flags & !FLAG_CHECKSUM_CURRENT,
            xattr: 0,
            ..inode.clone()
        };
        plain(self) == plain(other)
    }

    /// Encodes into the bonus buffer bytes (the fixed part plus an inline symlink target).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(INODE_LEN + self.inline.len());
        out.push(INODE_VERSION);
        out.push(kind_code(self.kind));
        out.extend_from_slice(&self.perm.to_le_bytes());
        out.extend_from_slice(&self.nlink.to_le_bytes());
        out.extend_from_slice(&self.uid.to_le_bytes());
        out.extend_from_slice(&self.gid.to_le_bytes());
        for word in [
            self.size,
            self.parent,
            self.rdev,
            self.generation,
            self.xattr,
        ] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        for time in [self.atime, self.mtime, self.ctime, self.crtime] {
            put_time(&mut out, time);
        }
        out.extend_from_slice(&self.project.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        assert_eq!(out.len(), INODE_LEN, "inode layout");
        assert!(
            self.inline.len() <= SYMLINK_INLINE_MAX,
            "inline symlink too long"
        );
        out.extend_from_slice(&self.inline);
        out
    }

    /// Decodes bonus bytes read from disk: garbage is an error, never a panic.
    pub(crate) fn decode(ino: Ino, bytes: &[u8]) -> Result<Inode, PosixError> {
        if bytes.len() < INODE_LEN {
            return Err(corrupt(ino, "inode is shorter than its fixed part"));
        }
        if bytes[0] != INODE_VERSION {
            return Err(corrupt(ino, "inode has an unknown version"));
        }
        let kind = kind_from(bytes[1]).ok_or_else(|| corrupt(ino, "inode has a bad file type"))?;
        let times: Option<Vec<Timespec>> = (0..4).map(|i| time_at(bytes, 56 + 16 * i)).collect();
        let times = times.ok_or_else(|| corrupt(ino, "inode time has nanoseconds >= 1e9"))?;
        let inline = bytes[INODE_LEN..].to_vec();
        if !inline.is_empty() && kind != FileKind::Symlink {
            return Err(corrupt(
                ino,
                "inline data on an inode that is not a symlink",
            ));
        }
        Ok(Inode {
            kind,
            perm: u16::from_le_bytes([bytes[2], bytes[3]]) & 0o7777,
            nlink: u32_at(bytes, 4),
            uid: u32_at(bytes, 8),
            gid: u32_at(bytes, 12),
            size: u64_at(bytes, 16),
            parent: u64_at(bytes, 24),
            rdev: u64_at(bytes, 32),
            generation: u64_at(bytes, 40),
            xattr: u64_at(bytes, 48),
            atime: times[0],
            mtime: times[1],
            ctime: times[2],
            crtime: times[3],
            project: u32_at(bytes, 120),
            flags: u32_at(bytes, 124) & FLAGS_KNOWN,
            inline,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let t = Timespec {
            secs: -5,
            nsecs: 999_999_999,
        };
        let inode = Inode {
            kind: FileKind::Symlink,
            perm: 0o4755,
            nlink: 3,
            uid: 1000,
            gid: 100,
            size: 6,
            parent: 9,
            rdev: 0,
            generation: 77,
            xattr: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            project: 7,
            flags: FLAG_PROJECT_INHERIT,
            inline: b"target".to_vec(),
        };
        let bytes = inode.encode();
        assert_eq!(Inode::decode(1, &bytes).unwrap(), inode);
        assert!(Inode::decode(1, &bytes[..100]).is_err());
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0xa5;
            let _ = Inode::decode(1, &bad);
        }
    }
}
