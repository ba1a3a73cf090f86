//! [`Fs`]: one operation's view of a filesystem, its master node, inode access and the
//! unlinked set. The operations themselves are in `namespace.rs` (names), `data.rs`
//! (contents) and `xattr.rs`.

use tarn_base::ObjectId;
use tarn_objects::{ObjectError, ObjectSet};
use tarn_zio::BlockStore;

use crate::inode::{self, INODE_LEN, Inode, TYPE_MASTER, TYPE_UNLINKED};
use crate::intent::{LogOp, Logged};
use crate::{Attr, Creds, FileKind, FsConfig, Ino, PosixError, Timespec};

pub(crate) type Result<T> = std::result::Result<T, PosixError>;

/// The master node's fixed object number (the first object a fresh object set hands out).
pub(crate) const MASTER: ObjectId = ObjectId(1);
/// Master-node keys.
const KEY_VERSION: &str = "version";
const KEY_ROOT: &str = "root";
const KEY_UNLINKED: &str = "unlinked";
const KEY_INODES: &str = "inodes";
/// The POSIX layer's format version.
pub(crate) const POSIX_VERSION: u64 = 1;

/// A filesystem view of one dataset's object set for the duration of one operation. The
/// engine builds one per call, under the pool lock.
pub struct Fs<'a> {
    pub(crate) os: &'a mut ObjectSet,
    pub(crate) store: &'a dyn BlockStore,
    pub(crate) now: Timespec,
    pub(crate) config: FsConfig,
    /// Per-owner quotas and what they admitted since the last sync (`usedby.rs`).
    pub(crate) quotas: Option<(&'a crate::Quotas, &'a mut crate::Pending)>,
    /// Where modifying calls append their intent-log records ([`Fs::with_log`]).
    pub(crate) log: Option<&'a mut Vec<Logged>>,
    /// Which numbers a new inode may take ([`Fs::avoid_inos`], replay).
    pub(crate) new_ino: NewIno,
}

/// A predicate over inode numbers, shared with the front end that owns it.
pub type InoFilter = std::sync::Arc<dyn Fn(Ino) -> bool + Send + Sync>;

/// Which number a new inode takes: the lowest free one, with the exceptions of a front end,
/// or (replaying the intent log) the lowest free one from the number the log recorded.
#[derive(Clone, Default)]
pub(crate) enum NewIno {
    #[default]
    Lowest,
    /// Not the numbers the filter names (a client still holds them, for freed inodes).
    Avoiding(InoFilter),
    /// At least this number.
    AtLeast(Ino),
}

impl std::fmt::Debug for NewIno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NewIno::Lowest => f.write_str("Lowest"),
            NewIno::Avoiding(_) => f.write_str("Avoiding(..)"),
            NewIno::AtLeast(ino) => write!(f, "AtLeast({ino})"),
        }
    }
}

pub(crate) fn oid(ino: Ino) -> ObjectId {
    ObjectId(ino)
}

/// An object set without a master node, or a master node without a key the layer keeps
/// there, is not a filesystem.
fn not_filesystem(e: ObjectError) -> PosixError {
    match e {
        ObjectError::NoSuchObject { .. } | ObjectError::NoSuchKey { .. } => {
            PosixError::NotFilesystem
        }
        other => other.into(),
    }
}

impl<'a> Fs<'a> {
    /// A view of `os` with `now` as the time of every change it makes.
    pub fn new(
        os: &'a mut ObjectSet,
        store: &'a dyn BlockStore,
        now: Timespec,
        config: FsConfig,
    ) -> Self {
        Fs {
            os,
            store,
            now,
            config,
            quotas: None,
            log: None,
            new_ino: NewIno::Lowest,
        }
    }

    /// New inodes made through this view never take a number `held` names: numbers of
    /// freed inodes a client has not let go of yet (the kernel's FUSE inode cache keeps an
    /// inode until its FORGET; a new inode under a number it holds makes the kernel find the
    /// old inode's dentries). Replay does not need the same numbers avoided: the log records
    /// each new inode's number.
    pub fn avoid_inos(&mut self, held: InoFilter) {
        self.new_ino = NewIno::Avoiding(held);
    }

    /// Makes an empty object set a filesystem: the master node and a root directory owned
    /// by `owner` with permissions 0755.
    pub fn format(&mut self, owner: Creds) -> Result<()> {
        let master = self.os.zap_create(self.store, TYPE_MASTER)?;
        if master != MASTER {
            return Err(PosixError::Invalid("object set is not empty"));
        }
        self.os.set_metadata(self.store, master, true)?;
        let unlinked = self.os.zap_create(self.store, TYPE_UNLINKED)?;
        self.os
            .zap_insert_u64(self.store, MASTER, KEY_VERSION, POSIX_VERSION)?;
        self.os
            .zap_insert_u64(self.store, MASTER, KEY_UNLINKED, unlinked.0)?;
        self.os.zap_insert_u64(self.store, MASTER, KEY_INODES, 0)?;
        let (root, _) = self.new_inode(FileKind::Directory, 0o755, owner, 0, |root, inode| {
            inode.parent = root;
        })?;
        self.os.zap_insert_u64(self.store, MASTER, KEY_ROOT, root)?;
        self.usedby_format()?;
        Ok(())
    }

    fn master(&mut self, key: &str) -> Result<u64> {
        self.os
            .zap_lookup_u64(self.store, MASTER, key)
            .map_err(not_filesystem)?
            .ok_or(PosixError::NotFilesystem)
    }

    /// The root directory's inode.
    pub fn root(&mut self) -> Result<Ino> {
        let version = self.master(KEY_VERSION)?;
        if version != POSIX_VERSION {
            return Err(inode::corrupt(MASTER.0, "unknown POSIX layer version"));
        }
        self.master(KEY_ROOT)
    }

    /// Inodes in use (for statfs's file count).
    pub fn inode_count(&mut self) -> Result<u64> {
        self.master(KEY_INODES)
    }

    fn count_inodes(&mut self, delta: i64) -> Result<()> {
        self.os
            .zap_add_u64(self.store, MASTER, KEY_INODES, delta)
            .map_err(not_filesystem)?;
        Ok(())
    }

    /// Reads inode `ino` (ENOENT if the object is not a live inode).
    pub(crate) fn inode(&mut self, ino: Ino) -> Result<Inode> {
        if ino == MASTER.0 || ino == 0 {
            return Err(PosixError::NotFound);
        }
        let info = match self.os.object_info(self.store, oid(ino)) {
            Ok(info) => info,
            Err(ObjectError::NoSuchObject { .. } | ObjectError::InvalidArgument { .. }) => {
                return Err(PosixError::NotFound);
            }
            Err(e) => return Err(e.into()),
        };
        let inode = Inode::decode(ino, &self.os.bonus(self.store, oid(ino))?)?;
        if info.object_type != inode::object_type(inode.kind) {
            return Err(inode::corrupt(
                ino,
                "inode type disagrees with its object type",
            ));
        }
        Ok(inode)
    }

    /// Writes inode `ino`.
    pub(crate) fn put(&mut self, ino: Ino, inode: &Inode) -> Result<()> {
        self.os.set_bonus(self.store, oid(ino), &inode.encode())?;
        Ok(())
    }

    /// A new inode of `kind` (its object, its bonus), not yet linked anywhere (nlink 1, or
    /// 2 for a directory); `shape` sets what the caller knows (its parent, its project)
    /// before the inode is written, once.
    pub(crate) fn new_inode(
        &mut self,
        kind: FileKind,
        perm: u32,
        creds: Creds,
        rdev: u64,
        shape: impl FnOnce(Ino, &mut Inode),
    ) -> Result<(Ino, Inode)> {
        let usable: &dyn Fn(u64) -> bool = match &self.new_ino {
            NewIno::Lowest => &|_| true,
            NewIno::Avoiding(held) => &|id| !held(id),
            NewIno::AtLeast(first) => &|id| id >= *first,
        };
        let object = match kind {
            FileKind::Directory => {
                self.os
                    .zap_create_where(self.store, inode::TYPE_DIRECTORY, usable)?
            }
            _ => {
                let shape = (inode::object_type(kind), 512, 0, INODE_LEN as u16);
                self.os.allocate_object_where(self.store, shape, usable)?
            }
        };
        let ino = object.0;
        let mut inode = Inode {
            kind,
            perm: (perm & 0o7777) as u16,
            nlink: if kind == FileKind::Directory { 2 } else { 1 },
            uid: creds.uid,
            gid: creds.gid,
            size: 0,
            parent: 0,
            rdev,
            generation: self.store.txg().0,
            xattr: 0,
            atime: self.now,
            mtime: self.now,
            ctime: self.now,
            crtime: self.now,
            project: 0,
            flags: 0,
            inline: Vec::new(),
        };
        shape(ino, &mut inode);
        self.put(ino, &inode)?;
        self.count_inodes(1)?;
        Ok((ino, inode))
    }

    /// What `stat` shows for `ino`.
    pub(crate) fn attr_of(&mut self, ino: Ino, inode: &Inode) -> Result<Attr> {
        let info = self.os.object_info(self.store, oid(ino))?;
        let blksize = match inode.kind {
            FileKind::Regular => info.data_block_size.max(4096),
            _ => 4096,
        };
        Ok(Attr {
            ino,
            kind: inode.kind,
            perm: inode.perm,
            nlink: inode.nlink,
            uid: inode.uid,
            gid: inode.gid,
            rdev: inode.rdev,
            size: inode.size,
            blocks: info.used_bytes.div_ceil(512),
            blksize,
            atime: inode.atime,
            mtime: inode.mtime,
            ctime: inode.ctime,
            crtime: inode.crtime,
            generation: inode.generation,
        })
    }

    /// The attributes of `ino`.
    pub fn getattr(&mut self, ino: Ino) -> Result<Attr> {
        let inode = self.inode(ino)?;
        self.attr_of(ino, &inode)
    }

    /// Records an access (a read of a file, a listing of a directory) at the operation's
    /// time under [`FsConfig::atime`](crate::FsConfig). True when the inode was written.
    pub fn accessed(&mut self, ino: Ino) -> Result<bool> {
        let mut inode = self.inode(ino)?;
        if !self
            .config
            .atime
            .due(self.now, inode.atime, inode.mtime, inode.ctime)
        {
            return Ok(false);
        }
        inode.atime = self.now;
        self.put(ino, &inode)?;
        Ok(true)
    }

    fn unlinked_set(&mut self) -> Result<ObjectId> {
        Ok(ObjectId(self.master(KEY_UNLINKED)?))
    }

    /// Puts an inode that lost its last link on the unlinked set.
    pub(crate) fn mark_unlinked(&mut self, ino: Ino) -> Result<()> {
        let set = self.unlinked_set()?;
        self.os
            .zap_update_u64(self.store, set, ino.to_le_bytes(), ino)?;
        Ok(())
    }

    /// Frees an inode whose link count is zero (the front end calls this when nothing holds
    /// it open any more). An inode with links is left alone.
    pub fn reclaim(&mut self, ino: Ino) -> Result<()> {
        let inode = self.inode(ino)?;
        if inode.nlink > 0 {
            return Ok(());
        }
        if inode.xattr != 0 {
            self.free_xattrs(inode.xattr)?;
        }
        self.os.free_object(self.store, oid(ino))?;
        self.count_inodes(-1)?;
        let set = self.unlinked_set()?;
        if self
            .os
            .zap_lookup(self.store, set, ino.to_le_bytes())?
            .is_some()
        {
            self.os.zap_remove(self.store, set, ino.to_le_bytes())?;
        }
        self.record(|| LogOp::Reclaim { ino });
        Ok(())
    }

    /// Frees every inode left on the unlinked set (called when a dataset is mounted, as ZFS
    /// drains its unlinked set: files deleted while open whose owner died). Returns how many.
    pub fn drain_unlinked(&mut self) -> Result<u64> {
        // One record for the whole drain, not one per reclaim inside it.
        let log = self.log.take();
        let result = self.drain_unlinked_quietly();
        self.log = log;
        if matches!(result, Ok(freed) if freed > 0) {
            self.record(|| LogOp::DrainUnlinked);
        }
        result
    }

    fn drain_unlinked_quietly(&mut self) -> Result<u64> {
        let set = self.unlinked_set()?;
        let mut freed = 0;
        loop {
            let (entries, _) = self.os.zap_list_bytes(self.store, set, None, 256)?;
            if entries.is_empty() {
                return Ok(freed);
            }
            for (key, value) in entries {
                let ino = <[u8; 8]>::try_from(value.as_slice())
                    .map(u64::from_le_bytes)
                    .map_err(|_| inode::corrupt(set.0, "unlinked-set entry is not a u64"))?;
                match self.inode(ino) {
                    Ok(inode) if inode.nlink == 0 => self.reclaim(ino)?,
                    // Linked again or gone: just drop the entry.
                    Ok(_) | Err(PosixError::NotFound) => {
                        self.os.zap_remove(self.store, set, &key)?;
                    }
                    Err(e) => return Err(e),
                }
                freed += 1;
            }
        }
    }
}
