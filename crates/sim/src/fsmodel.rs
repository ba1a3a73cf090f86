//! The filesystem part of the reference model: one tree per dataset, paths to nodes, a node's
//! contents (file bytes, directory, symlink target) and its xattrs. Hard links are paths that
//! name the same node, which is how the checker knows which entries must share an inode. Each
//! operation returns the errno the POSIX layer must answer when the model refuses it, and a
//! refused operation changes nothing. File bytes are shared (`Arc`) until written, so keeping
//! a copy per recent txg stays cheap, as for objects.

use std::collections::BTreeMap;
use std::sync::Arc;

/// A node of the model (an inode of the engine, found through the paths that name it).
pub(crate) type NodeId = u64;

/// What a node holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Content {
    /// A regular file: every byte up to its size.
    File(Arc<Vec<u8>>),
    /// A directory (its entries are the paths below it).
    Dir,
    /// A symbolic link and its target.
    Symlink(Vec<u8>),
}

/// One node: contents and extended attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    pub(crate) content: Content,
    pub(crate) xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// One dataset's filesystem. The root directory is the path `""`; other paths are names
/// joined by `/` (`a/b/c`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FsModel {
    pub(crate) paths: BTreeMap<String, NodeId>,
    pub(crate) nodes: BTreeMap<NodeId, Node>,
    next: NodeId,
}

/// The errno a refused operation must return.
pub(crate) type Refusal = i32;

/// `dir/name` (or `name` in the root).
pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The directory holding `path` and its last name.
pub(crate) fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

fn is_below(path: &str, dir: &str) -> bool {
    dir.is_empty() || path.starts_with(&format!("{dir}/"))
}

impl FsModel {
    /// A fresh filesystem: the root directory alone.
    pub(crate) fn new() -> FsModel {
        let root = Node {
            content: Content::Dir,
            xattrs: BTreeMap::new(),
        };
        FsModel {
            paths: BTreeMap::from([(String::new(), 0)]),
            nodes: BTreeMap::from([(0, root)]),
            next: 1,
        }
    }

    /// The node `path` names.
    pub(crate) fn node(&self, path: &str) -> Option<&Node> {
        self.paths.get(path).and_then(|id| self.nodes.get(id))
    }

    fn is_dir(&self, path: &str) -> bool {
        self.node(path).is_some_and(|n| n.content == Content::Dir)
    }

    /// The entries of directory `dir`: name and node.
    pub(crate) fn children(&self, dir: &str) -> Vec<(String, NodeId)> {
        self.paths
            .iter()
            .filter(|(path, _)| !path.is_empty() && split(path).0 == dir)
            .map(|(path, &id)| (split(path).1.to_string(), id))
            .collect()
    }

    /// Paths of every directory (the root first), of every file, of everything but the root.
    pub(crate) fn dirs(&self) -> Vec<String> {
        self.select(|n| n.content == Content::Dir)
    }

    pub(crate) fn files(&self) -> Vec<String> {
        self.select(|n| matches!(n.content, Content::File(_)))
    }

    pub(crate) fn entries(&self) -> Vec<String> {
        self.paths
            .keys()
            .filter(|p| !p.is_empty())
            .cloned()
            .collect()
    }

    fn select(&self, wanted: impl Fn(&Node) -> bool) -> Vec<String> {
        self.paths
            .iter()
            .filter(|(_, id)| self.nodes.get(id).is_some_and(&wanted))
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// Link count as `stat` shows it: paths naming a file, 2 plus subdirectories for a
    /// directory.
    pub(crate) fn nlink(&self, id: NodeId) -> u32 {
        let Some((path, _)) = self.paths.iter().find(|(_, n)| **n == id) else {
            return 0;
        };
        if self.nodes[&id].content == Content::Dir {
            let subdirs = self
                .children(path)
                .iter()
                .filter(|(_, c)| self.nodes[c].content == Content::Dir)
                .count();
            return 2 + subdirs as u32;
        }
        self.paths.values().filter(|n| **n == id).count() as u32
    }

    /// Size of a regular file.
    pub(crate) fn size(&self, path: &str) -> u64 {
        match self.node(path).map(|n| &n.content) {
            Some(Content::File(bytes)) => bytes.len() as u64,
            _ => 0,
        }
    }

    /// Creates `path` (its directory exists) holding `content`.
    pub(crate) fn create(&mut self, path: &str, content: Content) -> Result<(), Refusal> {
        if self.paths.contains_key(path) {
            return Err(libc::EEXIST);
        }
        let id = self.next;
        self.next += 1;
        let node = Node {
            content,
            xattrs: BTreeMap::new(),
        };
        self.nodes.insert(id, node);
        self.paths.insert(path.to_string(), id);
        Ok(())
    }

    fn file_mut(&mut self, path: &str) -> &mut Vec<u8> {
        let id = self.paths[path];
        match &mut self
            .nodes
            .get_mut(&id)
            .expect("paths name live nodes")
            .content
        {
            Content::File(bytes) => Arc::make_mut(bytes),
            _ => panic!("the workload writes regular files only: {path}"),
        }
    }

    /// Writes `data` at `offset` of file `path`, growing it (the gap reads as zeros).
    pub(crate) fn write(&mut self, path: &str, offset: u64, data: &[u8]) {
        let bytes = self.file_mut(path);
        let start = usize::try_from(offset).expect("file offsets fit in memory");
        let end = start + data.len();
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[start..end].copy_from_slice(data);
    }

    /// Sets the size of file `path`.
    pub(crate) fn truncate(&mut self, path: &str, size: u64) {
        let size = usize::try_from(size).expect("file sizes fit in memory");
        self.file_mut(path).resize(size, 0);
    }

    /// Punches a hole (keeping the size): the bytes read as zeros.
    pub(crate) fn punch(&mut self, path: &str, offset: u64, len: u64) {
        let bytes = self.file_mut(path);
        let size = bytes.len() as u64;
        let start = offset.min(size) as usize;
        let end = offset.saturating_add(len).min(size) as usize;
        bytes[start..end].fill(0);
    }

    /// Drops `path`; its node goes when no path names it any more.
    fn drop_path(&mut self, path: &str) {
        let id = self.paths.remove(path).expect("dropped paths exist");
        if !self.paths.values().any(|n| *n == id) {
            self.nodes.remove(&id);
        }
    }

    /// Hard link `target` to the node of `source`.
    pub(crate) fn link(&mut self, source: &str, target: &str) -> Result<(), Refusal> {
        if self.is_dir(source) {
            return Err(libc::EPERM);
        }
        if self.paths.contains_key(target) {
            return Err(libc::EEXIST);
        }
        let id = self.paths[source];
        self.paths.insert(target.to_string(), id);
        Ok(())
    }

    /// Removes the non-directory `path` (its node is reclaimed with its last link).
    pub(crate) fn unlink(&mut self, path: &str) -> Result<(), Refusal> {
        if self.is_dir(path) {
            return Err(libc::EISDIR);
        }
        self.drop_path(path);
        Ok(())
    }

    /// Removes the empty directory `path`.
    pub(crate) fn rmdir(&mut self, path: &str) -> Result<(), Refusal> {
        if !self.is_dir(path) {
            return Err(libc::ENOTDIR);
        }
        if !self.children(path).is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.drop_path(path);
        Ok(())
    }

    /// rename(2) of `source` to `target` (whose directory exists), replacing a file or an
    /// empty directory there.
    pub(crate) fn rename(&mut self, source: &str, target: &str) -> Result<(), Refusal> {
        let moving_dir = self.is_dir(source);
        let parent = split(target).0;
        if moving_dir && (parent == source || is_below(parent, source)) {
            return Err(libc::EINVAL);
        }
        if let Some(&other) = self.paths.get(target) {
            if other == self.paths[source] {
                return Ok(());
            }
            match (moving_dir, self.is_dir(target)) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                (true, true) if !self.children(target).is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
            self.drop_path(target);
        }
        let moved: Vec<(String, NodeId)> = self
            .paths
            .iter()
            .filter(|(p, _)| *p == source || p.starts_with(&format!("{source}/")))
            .map(|(p, &id)| (p.clone(), id))
            .collect();
        for (path, id) in moved {
            self.paths.remove(&path);
            self.paths
                .insert(format!("{target}{}", &path[source.len()..]), id);
        }
        Ok(())
    }

    /// Removes `path` and everything below it; returns what was there, by path suffix.
    fn take_subtree(&mut self, path: &str) -> Vec<(String, NodeId)> {
        let taken: Vec<(String, NodeId)> = self
            .paths
            .iter()
            .filter(|(p, _)| *p == path || p.starts_with(&format!("{path}/")))
            .map(|(p, &id)| (p[path.len()..].to_string(), id))
            .collect();
        for (suffix, _) in &taken {
            self.paths.remove(&format!("{path}{suffix}"));
        }
        taken
    }

    /// rename(2) with RENAME_NOREPLACE: EEXIST whenever `target` exists (even as a link of
    /// the same inode).
    pub(crate) fn rename_noreplace(&mut self, source: &str, target: &str) -> Result<(), Refusal> {
        let parent = split(target).0;
        if self.is_dir(source) && (parent == source || is_below(parent, source)) {
            return Err(libc::EINVAL);
        }
        if self.paths.contains_key(target) {
            return Err(libc::EEXIST);
        }
        self.rename(source, target)
    }

    /// rename(2) with RENAME_EXCHANGE: `source` and `target` (both existing, neither below
    /// the other) swap what they name.
    pub(crate) fn exchange(&mut self, source: &str, target: &str) -> Result<(), Refusal> {
        let (source_parent, target_parent) = (split(source).0, split(target).0);
        if self.is_dir(source) && (target_parent == source || is_below(target_parent, source)) {
            return Err(libc::EINVAL);
        }
        if !self.paths.contains_key(target) {
            return Err(libc::ENOENT);
        }
        if self.is_dir(target) && (source_parent == target || is_below(source_parent, target)) {
            return Err(libc::EINVAL);
        }
        let from_source = self.take_subtree(source);
        let from_target = self.take_subtree(target);
        for (suffix, id) in from_source {
            self.paths.insert(format!("{target}{suffix}"), id);
        }
        for (suffix, id) in from_target {
            self.paths.insert(format!("{source}{suffix}"), id);
        }
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) extended attribute `name` of `path`.
    pub(crate) fn setxattr(
        &mut self,
        path: &str,
        name: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), Refusal> {
        let id = self.paths[path];
        let xattrs = &mut self
            .nodes
            .get_mut(&id)
            .expect("paths name live nodes")
            .xattrs;
        match value {
            Some(value) => {
                xattrs.insert(name.to_vec(), value.to_vec());
            }
            None => {
                xattrs.remove(name).ok_or(libc::ENODATA)?;
            }
        }
        Ok(())
    }

    /// Folds the tree into a trace hash.
    pub(crate) fn digest(&self, hash: &mut crate::trace::Fnv) {
        for (path, id) in &self.paths {
            hash.add(path.as_bytes());
            hash.add(&id.to_le_bytes());
        }
        for node in self.nodes.values() {
            match &node.content {
                Content::File(bytes) => hash.add(bytes),
                Content::Dir => hash.add(b"/"),
                Content::Symlink(target) => hash.add(target),
            }
            for (name, value) in &node.xattrs {
                hash.add(name);
                hash.add(value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_renames_and_refusals_follow_posix() {
        // Goal: the model answers the way rename(2), link(2), unlink(2) and rmdir(2) do.
        let mut fs = FsModel::new();
        fs.create("a", Content::Dir).unwrap();
        fs.create("a/f", Content::File(Arc::new(vec![1, 2])))
            .unwrap();
        assert_eq!(fs.create("a/f", Content::Dir), Err(libc::EEXIST));
        fs.link("a/f", "g").unwrap();
        assert_eq!(fs.nlink(fs.paths["g"]), 2);
        assert_eq!(fs.nlink(0), 3);
        assert_eq!(fs.rename("a", "a/b"), Err(libc::EINVAL));
        assert_eq!(fs.rmdir("a"), Err(libc::ENOTEMPTY));
        fs.rename("a/f", "g").unwrap();
        assert!(
            fs.paths.contains_key("a/f"),
            "a rename between links does nothing"
        );
        fs.rename("a", "b").unwrap();
        assert_eq!(fs.children("b").len(), 1);
        fs.unlink("g").unwrap();
        fs.unlink("b/f").unwrap();
        assert_eq!(fs.nodes.len(), 2);
        fs.create("c", Content::File(Arc::new(Vec::new()))).unwrap();
        fs.write("c", 10, &[7]);
        fs.punch("c", 5, 100);
        assert_eq!(fs.size("c"), 11);
        fs.truncate("c", 3);
        assert_eq!(fs.rename("b", "c"), Err(libc::ENOTDIR));
        assert_eq!(fs.rename("c", "b"), Err(libc::EISDIR));
        fs.rename("c", "b/c").unwrap();
        fs.rmdir("b").unwrap_err();
        fs.create("d", Content::Dir).unwrap();
        assert_eq!(fs.exchange("b", "b/c"), Err(libc::EINVAL));
        assert_eq!(fs.exchange("b/c", "b"), Err(libc::EINVAL));
        assert_eq!(fs.exchange("b", "e"), Err(libc::ENOENT));
        fs.exchange("b/c", "d").unwrap();
        assert!(fs.is_dir("b/c") && !fs.is_dir("d"));
        assert_eq!(fs.rename_noreplace("d", "b/c"), Err(libc::EEXIST));
        fs.rename_noreplace("d", "e").unwrap();
    }
}
