//! The mount table: what is mounted at a path (`/proc/self/mountinfo`) and the cleanup of
//! stale tarn mounts left by a daemon that died.

use std::path::{Path, PathBuf};

use crate::{FSTYPE, FUSE_DEVICE, FuseError};

/// One line of `/proc/self/mountinfo`, the fields we use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    /// Filesystem type (`fuse.tarn` for ours).
    pub fstype: String,
    /// Source (`POOL/DATASET` for ours).
    pub source: String,
}

/// Whether the kernel's FUSE device exists.
#[must_use]
pub fn fuse_available() -> bool {
    Path::new(FUSE_DEVICE).exists()
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let octal = bytes.get(at + 1..at + 4).and_then(|digits| {
            let text = std::str::from_utf8(digits).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[at], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                at += 4;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses one mountinfo line: `id parent major:minor root mountpoint options [optional...]
/// - fstype source superoptions`.
fn parse_line(line: &str) -> Option<MountEntry> {
    let mut fields = line.split(' ');
    let mountpoint = fields.nth(4)?;
    let mut rest = fields.skip_while(|field| *field != "-");
    rest.next()?;
    let fstype = rest.next()?;
    let source = rest.next()?;
    Some(MountEntry {
        mountpoint: PathBuf::from(unescape(mountpoint)),
        fstype: unescape(fstype),
        source: unescape(source),
    })
}

/// The path as the mount table spells it: absolute, without `.`/`..`, symlinks in parents
/// resolved. The last component is not resolved, since a dead FUSE mount cannot be stat'ed.
fn table_path(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => parent
            .canonicalize()
            .map_or_else(|_| absolute.clone(), |parent| parent.join(name)),
        _ => absolute,
    }
}

/// Everything mounted at `path`, bottom of the stack first.
pub fn mounts_at(path: &Path) -> Result<Vec<MountEntry>, FuseError> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|source| FuseError::MountTable { source })?;
    let wanted = table_path(path);
    Ok(table
        .lines()
        .filter_map(parse_line)
        .filter(|entry| entry.mountpoint == wanted)
        .collect())
}

/// Whether the mount at `path` has lost its server: the kernel answers ENOTCONN (or
/// ECONNABORTED while aborting) for a FUSE mount whose daemon died.
fn is_dead(path: &Path) -> bool {
    std::fs::metadata(path).is_err_and(|error| {
        matches!(
            error.raw_os_error(),
            Some(libc::ENOTCONN | libc::ECONNABORTED)
        )
    })
}

/// Lazily unmounts every dead tarn FUSE mount at `path` (a daemon that was killed leaves one
/// behind, answering "Transport endpoint is not connected"). A live mount, of another
/// daemon or of another filesystem, is left alone. Returns how many were detached.
pub fn clean_stale(path: &Path) -> Result<usize, FuseError> {
    let ours = mounts_at(path)?
        .into_iter()
        .filter(|entry| entry.fstype == FSTYPE)
        .count();
    let stale = if ours > 0 && is_dead(path) { ours } else { 0 };
    let target = table_path(path);
    for _ in 0..stale {
        nix::mount::umount2(&target, nix::mount::MntFlags::MNT_DETACH).map_err(|errno| {
            FuseError::Unmount {
                path: target.clone(),
                source: std::io::Error::from(errno),
            }
        })?;
    }
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_parse_with_escapes_and_optional_fields() {
        let line = "36 35 0:42 / /mnt/my\\040pool rw,nosuid shared:7 master:1 - fuse.tarn \
                    tank/home rw,user_id=0";
        let entry = parse_line(line).expect("parses");
        assert_eq!(entry.mountpoint, PathBuf::from("/mnt/my pool"));
        assert_eq!(entry.fstype, "fuse.tarn");
        assert_eq!(entry.source, "tank/home");
        assert_eq!(parse_line("garbage"), None);
    }

    #[test]
    fn the_root_is_mounted() {
        assert!(!mounts_at(Path::new("/")).expect("mountinfo").is_empty());
    }
}
