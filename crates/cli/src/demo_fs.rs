//! The filesystem half of `tarn demo`: a dataset mounted through the kernel's FUSE driver,
//! a file written and read back through it with ordinary system calls, and the same file
//! checked again after the pool was exported and imported.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tarn_base::format_size;
use tarn_engine::Engine;

use crate::demo::{CHUNK, Pattern, rate};

/// The demo's dataset.
pub(crate) const DATASET: &str = "demo/files";
/// The most the demo writes through the mount.
const FILE_BYTES_MAX: u64 = 256 << 20;

fn file_path(mountpoint: &Path) -> PathBuf {
    mountpoint.join("data.bin")
}

/// `tarn create -o mountpoint=DIR/mnt demo/files`.
pub(crate) fn create(engine: &Engine, dir: &Path) -> Result<(), String> {
    let mountpoint = dir.join("mnt").display().to_string();
    let command = format!("create -o mountpoint={mountpoint} {DATASET}");
    println!("$ tarn {command}");
    engine
        .create_dataset(
            DATASET,
            &[("mountpoint".into(), mountpoint)],
            false,
            &command,
        )
        .map_err(|e| format!("cannot create '{DATASET}': {e}"))
}

/// Mounts the dataset; `None` (with a note) when this machine cannot mount FUSE.
fn mount(engine: &Arc<Engine>) -> Result<Option<tarn_fuse::Mount>, String> {
    let spec = engine
        .dataset_mount_spec(DATASET)
        .map_err(|e| format!("cannot mount '{DATASET}': {e}"))?
        .ok_or_else(|| format!("cannot mount '{DATASET}': it has no mountpoint"))?;
    match tarn_fuse::mount(Arc::clone(engine), &spec) {
        Ok(mount) => {
            println!("mounted {DATASET} at {} (FUSE)", spec.mountpoint.display());
            Ok(Some(mount))
        }
        Err(e) => {
            println!("skipping the filesystem part: cannot mount '{DATASET}': {e}");
            Ok(None)
        }
    }
}

fn unmount(mut mount: tarn_fuse::Mount) -> Result<(), String> {
    mount
        .unmount()
        .map_err(|e| format!("cannot unmount '{DATASET}': {e}"))
}

/// Bytes the demo writes through the mount.
pub(crate) fn file_bytes(size: u64) -> u64 {
    size.min(FILE_BYTES_MAX)
}

/// Writes the file through the mount (1 MiB writes, then fsync) and reads it back.
#[allow(clippy::disallowed_methods)] // The demo reports real throughput.
pub(crate) fn write_and_check(
    engine: &Arc<Engine>,
    size: u64,
    pattern: &Pattern,
) -> Result<bool, String> {
    let Some(mount) = mount(engine)? else {
        return Ok(false);
    };
    let path = file_path(mount.mountpoint());
    let io = |e: std::io::Error| format!("'{}': {e}", path.display());
    let start = Instant::now();
    let mut file = std::fs::File::create(&path).map_err(io)?;
    let mut chunk = vec![0u8; CHUNK];
    let bytes = file_bytes(size);
    for index in 0..bytes.div_ceil(CHUNK as u64) {
        let len = (bytes - index * CHUNK as u64).min(CHUNK as u64) as usize;
        pattern.chunk(index, &mut chunk[..len]);
        file.write_all(&chunk[..len]).map_err(io)?;
    }
    file.sync_all().map_err(io)?;
    drop(file);
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "wrote {} to {} with write(2) and fsync(2) in {seconds:.2}s ({})",
        format_size(bytes),
        path.display(),
        rate(bytes, seconds)
    );
    check(&path, bytes, pattern)?;
    unmount(mount).map(|()| true)
}

/// Mounts again (after the import) and checks the file.
pub(crate) fn check_again(
    engine: &Arc<Engine>,
    size: u64,
    pattern: &Pattern,
) -> Result<(), String> {
    let Some(mount) = mount(engine)? else {
        return Ok(());
    };
    check(&file_path(mount.mountpoint()), file_bytes(size), pattern)?;
    unmount(mount)
}

/// Reads the file with read(2) and compares every byte.
#[allow(clippy::disallowed_methods)] // The demo reports real throughput.
fn check(path: &Path, bytes: u64, pattern: &Pattern) -> Result<(), String> {
    let io = |e: std::io::Error| format!("'{}': {e}", path.display());
    let start = Instant::now();
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut expected = vec![0u8; CHUNK];
    let mut actual = vec![0u8; CHUNK];
    for index in 0..bytes.div_ceil(CHUNK as u64) {
        let len = (bytes - index * CHUNK as u64).min(CHUNK as u64) as usize;
        pattern.chunk(index, &mut expected[..len]);
        file.read_exact(&mut actual[..len]).map_err(io)?;
        if actual[..len] != expected[..len] {
            return Err(format!("'{}': bytes differ in MiB {index}", path.display()));
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "read {} back through the mount in {seconds:.2}s ({}): every byte matches",
        format_size(bytes),
        rate(bytes, seconds)
    );
    Ok(())
}
