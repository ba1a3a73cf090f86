//! The POSIX layer given garbage from disk: a small filesystem is built in memory, then the
//! input overwrites an inode's bonus buffer, a directory entry's value and an attribute's
//! stored value; every operation that reads them must return an error or a value, never
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_base::ObjectId;
use tarn_objects::testing::MemStore;
use tarn_objects::{ObjectSet, ObjsetKind};
use tarn_posix::{Creds, FileKind, Fs, FsConfig, Seek, Timespec, XattrSet};

fuzz_target!(|input: &[u8]| {
    let store = MemStore::new();
    let mut os = ObjectSet::create(ObjsetKind::Filesystem);
    let now = Timespec::default();
    let config = FsConfig { acl: true, ..FsConfig::default() };
    let me = Creds { uid: 1, gid: 1 };
    let (root, dir, file, link) = {
        let mut fs = Fs::new(&mut os, &store, now, config);
        fs.format(Creds::default()).expect("format");
        let root = fs.root().expect("root");
        let dir = fs.mkdir(root, b"d", 0o755, me).expect("mkdir").ino;
        let file = fs.mknod(dir, b"f", FileKind::Regular, 0o644, 0, me).expect("file").ino;
        fs.write(file, 0, &[7; 5000]).expect("write");
        fs.setxattr(file, b"user.a", b"value", XattrSet::Either).expect("xattr");
        let link = fs.symlink(root, b"s", b"d/f", me).expect("symlink").ino;
        (root, dir, file, link)
    };
    let (first, rest) = input.split_at(input.len().min(320));
    let victim = match input.first().map(|b| b % 4) {
        Some(0) => file,
        Some(1) => dir,
        Some(2) => link,
        _ => root,
    };
    let _ = os.set_bonus(&store, ObjectId(victim), first);
    if !rest.is_empty() {
        let value = &rest[..rest.len().min(1000)];
        let _ = os.zap_update(&store, ObjectId(dir), b"f", value);
    }
    let mut fs = Fs::new(&mut os, &store, now, config);
    for ino in [root, dir, file, link] {
        let _ = fs.getattr(ino);
        let _ = fs.readdir(ino, 0, 100);
        let _ = fs.read(ino, 0, 10_000);
        let _ = fs.readlink(ino);
        let _ = fs.listxattr(ino);
        let _ = fs.getxattr(ino, b"user.a");
        let _ = fs.seek(ino, 0, Seek::Hole);
        let _ = fs.path_of(ino);
    }
    let _ = fs.lookup(dir, b"f");
    let _ = fs.lookup(root, b"d");
    let _ = fs.unlink(dir, b"f");
    let _ = fs.rename(root, b"d", root, b"e", Default::default());
    let _ = fs.drain_unlinked();
});
