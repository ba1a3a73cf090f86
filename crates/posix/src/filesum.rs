//! File checksums for `tarn checksum` (adler32, md5, sha256, crc32c: what grid transfers
//! and their storage middlewares compare) and the cache that makes asking again free.
//!
//! # Model
//! The digest is computed by the caller (the engine reads the file in chunks, releasing the
//! pool lock between them) with a [`FileHasher`]; this module owns the cache, which lives
//! with the file: a system attribute ([`CACHE_ATTR`], in the inode's attribute ZAP, hidden
//! from and refused to the attribute verbs) holding an epoch and one value per algorithm,
//! and the inode flag `FLAG_CHECKSUM_CURRENT`.
//!
//! ```text
//!  begin(ino)          flag clear: epoch += 1, values dropped, flag set  -> epoch
//!                      flag set:   the current epoch
//!  read the data, hash it (any number of fs operations)
//!  store(ino, epoch)   flag set and same epoch: value kept -> true; else -> false (again)
//!  write / truncate / fallocate                           flag cleared
//!  cached(ino, kind)   flag set: the value of `kind`, if any
//! ```
//!
//! # Invariants
//! - C1: while the flag is set, every value in the attribute was computed from data read
//!   after the current epoch began, and no data change happened since it began (a change
//!   clears the flag, and only `begin` sets it, starting a new epoch).
//! - C2: a computation whose data changed under it (flag cleared, maybe set again by another
//!   `begin` with a new epoch) never stores its value.
//!
//! A snapshot, clone, rollback, send and receive carry the flag and the attribute together
//! with the data they describe, so C1 holds there too; so does an intent-log replay (the
//! replayed writes clear the flag). An older tarn drops the flag when it writes the inode.
//!
//! # Failure model
//! An attribute that does not decode is no cache (it is rewritten by the next `begin`),
//! never an error or a panic. The cache is never written to the intent log: a crash loses
//! at most values not yet committed, which are computed again.
//!
//! # Not here
//! Reading and hashing the data (the engine), paths and mounts (the daemon), the names grid
//! middlewares read (docs/CHECKSUM.md; the CLI can copy a value to one).

use adler2::Adler32;
use md5::Digest;

use crate::Ino;
use crate::fs::{Fs, Result};
use crate::inode::FLAG_CHECKSUM_CURRENT;

/// The system attribute holding a file's cached checksums.
pub const CACHE_ATTR: &[u8] = b"tarn.checksums";
const CACHE_VERSION: u8 = 1;
/// Longest value a cached checksum has (sha256).
const VALUE_MAX: usize = 32;

/// A file checksum algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileSumKind {
    /// Adler-32 (zlib's), 4 bytes, printed as 8 hex digits: the grid's transfer checksum.
    Adler32,
    /// MD5, 16 bytes.
    Md5,
    /// SHA-256, 32 bytes.
    Sha256,
    /// CRC-32C (Castagnoli), 4 bytes, printed as 8 hex digits.
    Crc32c,
}

impl FileSumKind {
    /// Every algorithm, in the order help texts list them.
    pub const ALL: [FileSumKind; 4] = [
        FileSumKind::Adler32,
        FileSumKind::Md5,
        FileSumKind::Sha256,
        FileSumKind::Crc32c,
    ];

    /// The name users type and see (`adler32`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            FileSumKind::Adler32 => "adler32",
            FileSumKind::Md5 => "md5",
            FileSumKind::Sha256 => "sha256",
            FileSumKind::Crc32c => "crc32c",
        }
    }

    /// The algorithm a name (any case) names.
    #[must_use]
    pub fn from_name(name: &str) -> Option<FileSumKind> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.name().eq_ignore_ascii_case(name))
    }

    fn code(self) -> u8 {
        match self {
            FileSumKind::Adler32 => 1,
            FileSumKind::Md5 => 2,
            FileSumKind::Sha256 => 3,
            FileSumKind::Crc32c => 4,
        }
    }

    fn from_code(code: u8) -> Option<FileSumKind> {
        Self::ALL.into_iter().find(|kind| kind.code() == code)
    }
}

/// A running file checksum.
pub enum FileHasher {
    /// Adler-32.
    Adler32(Adler32),
    /// MD5.
    Md5(md5::Md5),
    /// SHA-256.
    Sha256(sha2::Sha256),
    /// CRC-32C so far.
    Crc32c(u32),
}

impl FileHasher {
    /// A hasher of `kind` over no bytes yet.
    #[must_use]
    pub fn new(kind: FileSumKind) -> FileHasher {
        match kind {
            FileSumKind::Adler32 => FileHasher::Adler32(Adler32::new()),
            FileSumKind::Md5 => FileHasher::Md5(md5::Md5::new()),
            FileSumKind::Sha256 => FileHasher::Sha256(sha2::Sha256::new()),
            FileSumKind::Crc32c => FileHasher::Crc32c(0),
        }
    }

    /// Adds the next bytes of the file.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            FileHasher::Adler32(a) => a.write_slice(bytes),
            FileHasher::Md5(h) => h.update(bytes),
            FileHasher::Sha256(h) => h.update(bytes),
            FileHasher::Crc32c(crc) => *crc = crc32c::crc32c_append(*crc, bytes),
        }
    }

    /// The checksum (big-endian for the 32-bit ones, as they are printed).
    #[must_use]
    pub fn finish(self) -> Vec<u8> {
        match self {
            FileHasher::Adler32(a) => most_significant_first(a.checksum()),
            FileHasher::Md5(h) => h.finalize().to_vec(),
            FileHasher::Sha256(h) => h.finalize().to_vec(),
            FileHasher::Crc32c(crc) => most_significant_first(crc),
        }
    }
}

/// A 32-bit checksum's bytes in the order it is printed (`adler32 = 0x11e60398` is
/// `11e60398`); this is a value to show, not an on-disk integer (those are little-endian).
fn most_significant_first(value: u32) -> Vec<u8> {
    let mut bytes = value.to_le_bytes();
    bytes.reverse();
    bytes.to_vec()
}

/// Lowercase hex, as every grid tool prints checksums.
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The decoded cache attribute.
#[derive(Debug, Default, PartialEq, Eq)]
struct Cache {
    epoch: u64,
    values: Vec<(FileSumKind, Vec<u8>)>,
}

impl Cache {
    /// Version byte, epoch (u64 LE), count, then per value: algorithm code, length, bytes.
    fn encode(&self) -> Vec<u8> {
        let mut out = vec![CACHE_VERSION];
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.push(u8::try_from(self.values.len()).expect("one value per algorithm"));
        for (kind, value) in &self.values {
            assert!(value.len() <= VALUE_MAX, "checksum value length");
            out.push(kind.code());
            out.push(value.len() as u8);
            out.extend_from_slice(value);
        }
        out
    }

    /// `None` for bytes that are not a cache of this version (input, never a panic).
    fn decode(bytes: &[u8]) -> Option<Cache> {
        let (&version, rest) = bytes.split_first()?;
        if version != CACHE_VERSION || rest.len() < 9 {
            return None;
        }
        let epoch = u64::from_le_bytes(rest[..8].try_into().ok()?);
        let count = rest[8];
        let mut at = &rest[9..];
        let mut values = Vec::new();
        for _ in 0..count {
            let (&code, tail) = at.split_first()?;
            let (&len, tail) = tail.split_first()?;
            let len = usize::from(len);
            if len > VALUE_MAX || tail.len() < len {
                return None;
            }
            let kind = FileSumKind::from_code(code)?;
            if values.iter().any(|(k, _)| *k == kind) {
                return None;
            }
            values.push((kind, tail[..len].to_vec()));
            at = &tail[len..];
        }
        at.is_empty().then_some(Cache { epoch, values })
    }
}

impl Fs<'_> {
    fn checksum_cache(&mut self, inode: &crate::inode::Inode) -> Result<Cache> {
        Ok(self
            .system_attr(inode, CACHE_ATTR)?
            .and_then(|bytes| Cache::decode(&bytes))
            .unwrap_or_default())
    }

    /// The cached `kind` checksum of regular file `ino` if it is current (C1), and the
    /// file's size. EISDIR for a directory, EINVAL for a special file.
    pub fn checksum_cached(&mut self, ino: Ino, kind: FileSumKind) -> Result<Option<Vec<u8>>> {
        let inode = self.regular(ino)?;
        if inode.flags & FLAG_CHECKSUM_CURRENT == 0 {
            return Ok(None);
        }
        let cache = self.checksum_cache(&inode)?;
        Ok(cache
            .values
            .into_iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, value)| value))
    }

    /// Starts computing a checksum of `ino`: the epoch to hand to
    /// [`Fs::checksum_store`]. Writes the inode only when no epoch is current.
    pub fn checksum_begin(&mut self, ino: Ino) -> Result<u64> {
        let mut inode = self.regular(ino)?;
        let cache = self.checksum_cache(&inode)?;
        if inode.flags & FLAG_CHECKSUM_CURRENT != 0 {
            return Ok(cache.epoch);
        }
        let fresh = Cache {
            epoch: cache.epoch.wrapping_add(1),
            values: Vec::new(),
        };
        self.set_system_attr(&mut inode, CACHE_ATTR, &fresh.encode())?;
        inode.flags |= FLAG_CHECKSUM_CURRENT;
        self.put(ino, &inode)?;
        Ok(fresh.epoch)
    }

    /// Keeps `value` as the `kind` checksum of `ino` if its data did not change since
    /// `epoch` began (C2); `false` when it did (the value may mix old and new data).
    pub fn checksum_store(
        &mut self,
        ino: Ino,
        epoch: u64,
        kind: FileSumKind,
        value: &[u8],
    ) -> Result<bool> {
        assert!(value.len() <= VALUE_MAX, "checksum value length");
        let mut inode = self.regular(ino)?;
        if inode.flags & FLAG_CHECKSUM_CURRENT == 0 {
            return Ok(false);
        }
        let mut cache = self.checksum_cache(&inode)?;
        if cache.epoch != epoch {
            return Ok(false);
        }
        cache.values.retain(|(k, _)| *k != kind);
        cache.values.push((kind, value.to_vec()));
        self.set_system_attr(&mut inode, CACHE_ATTR, &cache.encode())?;
        // The attribute ZAP may be new: the inode names it.
        self.put(ino, &inode)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{ME, World};
    use crate::{Fallocate, FileKind, SetAttr, XattrSet};

    const ADLER: FileSumKind = FileSumKind::Adler32;

    fn file(w: &mut World) -> Ino {
        let mut fs = w.fs();
        let root = fs.root().unwrap();
        let f = fs
            .mknod(root, b"f", FileKind::Regular, 0o644, 0, ME)
            .unwrap();
        fs.write(f.ino, 0, b"Wikipedia").unwrap();
        f.ino
    }

    /// Begins and stores `value` in one go; the store must take.
    fn compute(fs: &mut Fs<'_>, f: Ino, value: &[u8]) {
        let epoch = fs.checksum_begin(f).unwrap();
        assert!(fs.checksum_store(f, epoch, ADLER, value).unwrap());
    }

    #[test]
    fn the_cache_survives_reopen_and_every_data_change_drops_it() {
        let mut w = World::new();
        let f = file(&mut w);
        let mut fs = w.fs();
        assert_eq!(fs.checksum_cached(f, ADLER).unwrap(), None);
        compute(&mut fs, f, b"v1");
        assert_eq!(fs.checksum_cached(f, ADLER).unwrap(), Some(b"v1".to_vec()));
        assert_eq!(fs.checksum_cached(f, FileSumKind::Md5).unwrap(), None);
        // Metadata changes keep it: the data is the same.
        let chmod = SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        };
        fs.setattr(f, &chmod).unwrap();
        fs.set_project(f, 5, false).unwrap();
        fs.setxattr(f, b"user.a", b"1", XattrSet::Either).unwrap();
        drop(fs);
        w.sync_and_reopen();
        let mut fs = w.fs();
        assert_eq!(fs.checksum_cached(f, ADLER).unwrap(), Some(b"v1".to_vec()));
        fs.write(f, 9, b"!").unwrap();
        assert_eq!(fs.checksum_cached(f, ADLER).unwrap(), None, "write");
        compute(&mut fs, f, b"v2");
        let truncate = SetAttr {
            size: Some(3),
            ..SetAttr::default()
        };
        fs.setattr(f, &truncate).unwrap();
        assert_eq!(fs.checksum_cached(f, ADLER).unwrap(), None, "truncate");
        compute(&mut fs, f, b"v3");
        let punch = Fallocate {
            keep_size: true,
            punch_hole: true,
            zero_range: false,
        };
        fs.fallocate(f, 0, 1, punch).unwrap();
        assert_eq!(fs.checksum_cached(f, ADLER).unwrap(), None, "fallocate");
        // A new epoch drops the values of the old one, of every algorithm.
        compute(&mut fs, f, b"v4");
        let epoch = fs.checksum_begin(f).unwrap();
        assert!(fs.checksum_store(f, epoch, FileSumKind::Md5, b"m").unwrap());
        fs.write(f, 0, b"x").unwrap();
        compute(&mut fs, f, b"v5");
        assert_eq!(fs.checksum_cached(f, FileSumKind::Md5).unwrap(), None);
    }

    #[test]
    fn a_cached_checksum_is_not_a_modification_for_diff_and_receive() {
        let mut w = World::new();
        let f = file(&mut w);
        let bonus = |w: &mut World| w.os.bonus(&w.store, tarn_base::ObjectId(f)).unwrap();
        let before = bonus(&mut w);
        compute(&mut w.fs(), f, b"v");
        let after = bonus(&mut w);
        assert_ne!(before, after, "the flag is in the inode");
        assert!(crate::same_but_access_time(&after, &before));
        // (The test clock stands still: the write grows the file so the inode differs.)
        w.fs().write(f, 100, b"x").unwrap();
        assert!(!crate::same_but_access_time(&bonus(&mut w), &before));
    }

    #[test]
    fn a_computation_the_data_changed_under_is_not_stored() {
        let mut w = World::new();
        let f = file(&mut w);
        let mut fs = w.fs();
        let first = fs.checksum_begin(f).unwrap();
        fs.write(f, 0, b"w").unwrap();
        // A second computation began after the write: its epoch is current, not the first's.
        let second = fs.checksum_begin(f).unwrap();
        assert_ne!(first, second);
        assert!(!fs.checksum_store(f, first, ADLER, b"mixed").unwrap());
        assert_eq!(fs.checksum_cached(f, ADLER).unwrap(), None);
        assert!(fs.checksum_store(f, second, ADLER, b"good").unwrap());
        // Two computations in one epoch both store.
        let again = fs.checksum_begin(f).unwrap();
        assert_eq!(again, second);
        assert!(fs.checksum_store(f, again, FileSumKind::Md5, b"m").unwrap());
        assert_eq!(
            fs.checksum_cached(f, ADLER).unwrap(),
            Some(b"good".to_vec())
        );
    }

    #[test]
    fn the_cache_attribute_is_hidden_from_and_refused_to_users() {
        let mut w = World::new();
        let f = file(&mut w);
        let mut fs = w.fs();
        compute(&mut fs, f, b"v");
        fs.setxattr(f, b"user.a", b"1", XattrSet::Either).unwrap();
        assert_eq!(fs.listxattr(f).unwrap(), vec![b"user.a".to_vec()]);
        let enotsup = |r: Result<()>| r.unwrap_err().errno();
        let forged = fs.setxattr(f, CACHE_ATTR, b"forged", XattrSet::Either);
        assert_eq!(enotsup(forged), libc::EOPNOTSUPP);
        assert_eq!(enotsup(fs.removexattr(f, CACHE_ATTR)), libc::EOPNOTSUPP);
        let read = fs.getxattr(f, CACHE_ATTR).map(|_| ());
        assert_eq!(enotsup(read), libc::EOPNOTSUPP);
        assert_eq!(fs.checksum_cached(f, ADLER).unwrap(), Some(b"v".to_vec()));
        let root = fs.root().unwrap();
        assert_eq!(fs.checksum_begin(root).unwrap_err().errno(), libc::EISDIR);
    }

    fn sum(kind: FileSumKind, bytes: &[u8]) -> String {
        let mut hasher = FileHasher::new(kind);
        for chunk in bytes.chunks(7) {
            hasher.update(chunk);
        }
        hex(&hasher.finish())
    }

    #[test]
    fn known_values() {
        // Published test vectors: zlib's adler32("Wikipedia"), RFC 1321, FIPS 180-2,
        // and RFC 3720's CRC-32C check value of "123456789".
        assert_eq!(sum(FileSumKind::Adler32, b"Wikipedia"), "11e60398");
        assert_eq!(sum(FileSumKind::Adler32, b""), "00000001");
        assert_eq!(
            sum(FileSumKind::Md5, b"abc"),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        assert_eq!(
            sum(FileSumKind::Sha256, b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(sum(FileSumKind::Crc32c, b"123456789"), "e3069283");
    }

    #[test]
    fn names_round_trip() {
        for kind in FileSumKind::ALL {
            assert_eq!(FileSumKind::from_name(kind.name()), Some(kind));
            assert_eq!(FileSumKind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(
            FileSumKind::from_name("ADLER32"),
            Some(FileSumKind::Adler32)
        );
        assert_eq!(FileSumKind::from_name("sha1"), None);
    }

    #[test]
    fn cache_codec_round_trips_and_rejects_garbage() {
        let cache = Cache {
            epoch: 7,
            values: vec![
                (FileSumKind::Adler32, vec![1, 2, 3, 4]),
                (FileSumKind::Sha256, vec![9; 32]),
            ],
        };
        let bytes = cache.encode();
        assert_eq!(Cache::decode(&bytes), Some(cache));
        for len in 0..bytes.len() {
            assert_eq!(Cache::decode(&bytes[..len]), None, "truncated to {len}");
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0xff;
            let _ = Cache::decode(&bad);
        }
    }
}
