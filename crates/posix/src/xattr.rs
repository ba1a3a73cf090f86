//! Extended attributes: a ZAP per inode (created with the first attribute) mapping the full
//! name (`user.x`, `system.posix_acl_access`) to the value, inline up to what a ZAP value
//! holds and in an object of its own beyond.

use tarn_base::ObjectId;
use tarn_objects::ZAP_VALUE_MAX;

use crate::fs::{Fs, Result, oid};
use crate::inode::{self, Inode, TYPE_XATTR, TYPE_XATTR_VALUE};
use crate::intent::LogOp;
use crate::{Ino, PosixError, XattrSet};

/// Longest attribute name (Linux's XATTR_NAME_MAX).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest attribute value (Linux's XATTR_SIZE_MAX).
pub const XATTR_SIZE_MAX: usize = 64 << 10;
/// Names of the layer's own attributes start so: no Linux namespace (`user.`, `trusted.`,
/// `security.`, `system.`) does, so the kernel never passes one to the filesystem, and the
/// user verbs here refuse and hide them as well.
pub(crate) const SYSTEM_PREFIX: &[u8] = b"tarn.";
const INLINE: u8 = 0;
const EXTERNAL: u8 = 1;

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.contains(&0) {
        return Err(PosixError::Invalid("attribute name"));
    }
    if name.len() > XATTR_NAME_MAX {
        return Err(PosixError::Range);
    }
    Ok(())
}

/// A stored value: inline bytes, or (object, length) of a value object.
enum Stored {
    Inline(Vec<u8>),
    External(ObjectId, u64),
}

fn decode(zap: u64, bytes: &[u8]) -> Result<Stored> {
    match bytes.split_first() {
        Some((&INLINE, rest)) => Ok(Stored::Inline(rest.to_vec())),
        Some((&EXTERNAL, rest)) if rest.len() == 16 => {
            let word = |at: usize| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&rest[at..at + 8]);
                u64::from_le_bytes(w)
            };
            let len = word(8);
            if len as usize > XATTR_SIZE_MAX {
                return Err(inode::corrupt(zap, "attribute value longer than the limit"));
            }
            Ok(Stored::External(ObjectId(word(0)), len))
        }
        _ => Err(inode::corrupt(zap, "attribute value does not decode")),
    }
}

impl Fs<'_> {
    fn check_xattr(&self) -> Result<()> {
        if self.config.xattr {
            Ok(())
        } else {
            Err(PosixError::NotSupported)
        }
    }

    /// Like [`Fs::check_xattr`] for one attribute: ACL attributes also need `acl`.
    fn check_named(&self, name: &[u8]) -> Result<()> {
        self.check_xattr()?;
        check_name(name)?;
        // The layer's own attributes (the checksum cache) are not the user's to read or
        // forge; Linux answers a name outside its namespaces the same way.
        if name.starts_with(SYSTEM_PREFIX) {
            return Err(PosixError::NotSupported);
        }
        if name.starts_with(b"system.posix_acl_") && !self.config.acl {
            return Err(PosixError::NotSupported);
        }
        Ok(())
    }

    fn stored(&mut self, zap: u64, name: &[u8]) -> Result<Option<Stored>> {
        match self.os.zap_lookup(self.store, ObjectId(zap), name)? {
            Some(bytes) => decode(zap, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// The value of extended attribute `name` (full name with namespace, e.g. `user.x`).
    pub fn getxattr(&mut self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        self.check_named(name)?;
        let inode = self.inode(ino)?;
        if inode.xattr == 0 {
            return Err(PosixError::NoAttr);
        }
        match self.stored(inode.xattr, name)?.ok_or(PosixError::NoAttr)? {
            Stored::Inline(value) => Ok(value),
            Stored::External(object, len) => {
                let mut value = vec![0u8; len as usize];
                self.os.read(self.store, object, 0, &mut value)?;
                Ok(value)
            }
        }
    }

    /// Sets extended attribute `name`.
    pub fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        self.check_named(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(PosixError::TooBig);
        }
        let mut inode = self.inode(ino)?;
        let exists = inode.xattr != 0 && self.stored(inode.xattr, name)?.is_some();
        match how {
            XattrSet::Create if exists => return Err(PosixError::Exists),
            XattrSet::Replace if !exists => return Err(PosixError::NoAttr),
            _ => {}
        }
        if inode.xattr == 0 {
            inode.xattr = self.os.zap_create(self.store, TYPE_XATTR)?.0;
        }
        if exists {
            self.remove_value(inode.xattr, name)?;
        }
        let mut encoded = Vec::with_capacity(value.len() + 1);
        if value.len() < ZAP_VALUE_MAX {
            encoded.push(INLINE);
            encoded.extend_from_slice(value);
        } else {
            let object = self
                .os
                .allocate_object(self.store, TYPE_XATTR_VALUE, 512, 0, 0)?;
            let block = (value.len() as u64).next_power_of_two().max(512);
            self.os
                .set_block_size(self.store, object, u32::try_from(block).unwrap_or(1 << 17))?;
            self.os.write(self.store, object, 0, value)?;
            encoded.push(EXTERNAL);
            encoded.extend_from_slice(&object.0.to_le_bytes());
            encoded.extend_from_slice(&(value.len() as u64).to_le_bytes());
        }
        self.os
            .zap_insert(self.store, ObjectId(inode.xattr), name, &encoded)?;
        inode.ctime = self.now;
        self.put(ino, &inode)?;
        self.record(|| LogOp::SetXattr {
            ino,
            name: name.to_vec(),
            value: value.to_vec(),
            how,
        });
        Ok(())
    }

    /// A small attribute of the layer's own (name under [`SYSTEM_PREFIX`]) of `inode`.
    pub(crate) fn system_attr(&mut self, inode: &Inode, name: &[u8]) -> Result<Option<Vec<u8>>> {
        assert!(name.starts_with(SYSTEM_PREFIX), "a system attribute name");
        if inode.xattr == 0 {
            return Ok(None);
        }
        match self.stored(inode.xattr, name)? {
            Some(Stored::Inline(value)) => Ok(Some(value)),
            Some(Stored::External(..)) => Err(inode::corrupt(
                inode.xattr,
                "system attribute stored outside its ZAP",
            )),
            None => Ok(None),
        }
    }

    /// Sets a small attribute of the layer's own on `inode` (creating its attribute ZAP;
    /// the caller writes the inode). Not a user's change: no ctime, no intent-log record.
    pub(crate) fn set_system_attr(
        &mut self,
        inode: &mut Inode,
        name: &[u8],
        value: &[u8],
    ) -> Result<()> {
        assert!(name.starts_with(SYSTEM_PREFIX), "a system attribute name");
        assert!(
            value.len() < ZAP_VALUE_MAX,
            "a system attribute fits inline"
        );
        if inode.xattr == 0 {
            inode.xattr = self.os.zap_create(self.store, TYPE_XATTR)?.0;
        }
        let mut encoded = Vec::with_capacity(value.len() + 1);
        encoded.push(INLINE);
        encoded.extend_from_slice(value);
        self.os
            .zap_update(self.store, ObjectId(inode.xattr), name, &encoded)?;
        Ok(())
    }

    /// Removes the stored value of `name` (and its value object).
    fn remove_value(&mut self, zap: u64, name: &[u8]) -> Result<()> {
        if let Some(Stored::External(object, _)) = self.stored(zap, name)? {
            self.os.free_object(self.store, object)?;
        }
        self.os.zap_remove(self.store, ObjectId(zap), name)?;
        Ok(())
    }

    /// Names of the extended attributes of `ino`.
    pub fn listxattr(&mut self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        self.check_xattr()?;
        let inode = self.inode(ino)?;
        if inode.xattr == 0 {
            return Ok(Vec::new());
        }
        let (entries, _) =
            self.os
                .zap_list_bytes(self.store, ObjectId(inode.xattr), None, usize::MAX)?;
        let mut names: Vec<Vec<u8>> = entries
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| !name.starts_with(SYSTEM_PREFIX))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Removes extended attribute `name`.
    pub fn removexattr(&mut self, ino: Ino, name: &[u8]) -> Result<()> {
        self.check_named(name)?;
        let mut inode = self.inode(ino)?;
        if inode.xattr == 0 || self.stored(inode.xattr, name)?.is_none() {
            return Err(PosixError::NoAttr);
        }
        self.remove_value(inode.xattr, name)?;
        inode.ctime = self.now;
        self.put(ino, &inode)?;
        self.record(|| LogOp::RemoveXattr {
            ino,
            name: name.to_vec(),
        });
        Ok(())
    }

    /// Frees an inode's attribute ZAP and every value object (the inode is being freed).
    pub(crate) fn free_xattrs(&mut self, zap: u64) -> Result<()> {
        let (entries, _) = self
            .os
            .zap_list_bytes(self.store, ObjectId(zap), None, usize::MAX)?;
        for (_, value) in entries {
            if let Stored::External(object, _) = decode(zap, &value)? {
                self.os.free_object(self.store, object)?;
            }
        }
        self.os.free_object(self.store, oid(zap))?;
        Ok(())
    }
}
