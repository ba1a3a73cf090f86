//! `tarn demo`: the main job on an embedded default. Creates a raidz2 pool on sparse files in
//! a temporary directory, writes data through the engine, reads it back and checks every
//! byte, shows the pool's status, exports it, imports it again by scanning the directory (the
//! devices are found by GUID), and checks the data once more. In between it creates a
//! dataset, mounts it through FUSE and writes, reads and re-checks a file with ordinary
//! system calls (`demo_fs.rs`). With `--size 2G` it is also the engine-level write benchmark
//! (`bench/engine-write` runs it beside `dd`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tarn_base::{SeededRng, format_size};
use tarn_engine::{CreateOptions, CreateSpec, Engine, ImportOptions, TopLayout, TopSpec};

/// What the demo does.
#[derive(Clone, Debug)]
pub(crate) struct DemoOptions {
    /// Where the device files go (a new temporary directory when `None`).
    pub(crate) dir: Option<PathBuf>,
    /// Bytes of data to write.
    pub(crate) size: u64,
    /// Number of device files.
    pub(crate) devices: usize,
    /// Size of each device file.
    pub(crate) device_size: u64,
    /// Keep the files afterwards.
    pub(crate) keep: bool,
    /// Open devices with O_DIRECT.
    pub(crate) direct: bool,
    /// Layout of the one vdev.
    pub(crate) layout: TopLayout,
}

pub(crate) const CHUNK: usize = 1 << 20;
const POOL: &str = "demo";

/// Random bytes the chunks are cut from: generating fresh random data for every chunk would
/// cost more than the engine's own work and distort the figures.
pub(crate) struct Pattern {
    bytes: Vec<u8>,
}

const PATTERN_SIZE: usize = 64 << 20;

impl Pattern {
    fn new(seed: u64) -> Self {
        let mut bytes = vec![0u8; PATTERN_SIZE + CHUNK];
        SeededRng::new(seed).fill(&mut bytes);
        Pattern { bytes }
    }

    /// Data for chunk `index`: three quarters random (a window of the pattern that moves by
    /// an odd stride, stamped with the index so no two chunks are equal), one quarter zeros
    /// (compressible), so both the compressed and the uncompressed paths run.
    pub(crate) fn chunk(&self, index: u64, out: &mut [u8]) {
        let start = (index as usize).wrapping_mul(4099 * 512) % PATTERN_SIZE;
        let random = out.len() / 4 * 3;
        out[..random].copy_from_slice(&self.bytes[start..start + random]);
        let stamp = index.to_le_bytes();
        let stamp_len = stamp.len().min(random);
        out[..stamp_len].copy_from_slice(&stamp[..stamp_len]);
        out[random..].fill(0);
    }
}

pub(crate) fn rate(bytes: u64, seconds: f64) -> String {
    format!("{:.0} MB/s", bytes as f64 / seconds.max(1e-9) / 1e6)
}

fn verify(
    engine: &Engine,
    object: tarn_base::ObjectId,
    options: &DemoOptions,
    pattern: &Pattern,
) -> Result<f64, String> {
    #[allow(clippy::disallowed_methods)] // The demo reports real throughput.
    let start = Instant::now();
    let mut expected = vec![0u8; CHUNK];
    let mut actual = vec![0u8; CHUNK];
    for index in 0..options.size.div_ceil(CHUNK as u64) {
        let len = (options.size - index * CHUNK as u64).min(CHUNK as u64) as usize;
        pattern.chunk(index, &mut expected[..len]);
        engine
            .object_read(POOL, object, index * CHUNK as u64, &mut actual[..len])
            .map_err(|e| format!("cannot read back chunk {index}: {e}"))?;
        if expected[..len] != actual[..len] {
            return Err(format!("chunk {index} read back wrong bytes"));
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Runs the demo, printing as it goes; `status` renders `tarn pool status` for the engine.
pub(crate) fn run(options: &DemoOptions, status: &dyn Fn(&Engine) -> String) -> Result<(), String> {
    let dir = match &options.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("tarn-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create '{}': {e}", dir.display()))?;
    let result = run_in(&dir, options, status);
    if !options.keep {
        for index in 0..options.devices {
            let _ = std::fs::remove_file(device_path(&dir, index));
        }
        let _ = std::fs::remove_dir(dir.join("mnt"));
        if options.dir.is_none() {
            let _ = std::fs::remove_dir(&dir);
        }
    }
    result
}

fn device_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("disk{index}"))
}

fn create_devices(dir: &Path, options: &DemoOptions) -> Result<Vec<String>, String> {
    let mut devices = Vec::new();
    for index in 0..options.devices {
        let path = device_path(dir, index);
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot create '{}': {e}", path.display()))?;
        file.set_len(options.device_size)
            .map_err(|e| format!("cannot size '{}': {e}", path.display()))?;
        devices.push(path.display().to_string());
    }
    Ok(devices)
}

fn create_pool(engine: &Engine, devices: Vec<String>, layout: TopLayout) -> Result<(), String> {
    let command = format!("pool create {POOL} {} {}", layout.name(), devices.join(" "));
    println!("$ tarn {command}");
    let spec = CreateSpec {
        name: POOL.into(),
        tops: vec![TopSpec { layout, devices }],
        spares: Vec::new(),
        caches: Vec::new(),
        logs: Vec::new(),
        specials: Vec::new(),
        ashift: 12,
        force: false,
    };
    let options = CreateOptions {
        command,
        ..CreateOptions::default()
    };
    engine
        .create_pool(&spec, &options)
        .map_err(|e| format!("cannot create '{POOL}': {e}"))?;
    Ok(())
}

/// Writes the data in 1 MiB requests and commits it; prints the rate.
#[allow(clippy::disallowed_methods)] // The demo reports real throughput.
fn write_data(
    engine: &Engine,
    object: tarn_base::ObjectId,
    options: &DemoOptions,
    pattern: &Pattern,
) -> Result<(), String> {
    let start = Instant::now();
    let mut chunk = vec![0u8; CHUNK];
    for index in 0..options.size.div_ceil(CHUNK as u64) {
        let len = (options.size - index * CHUNK as u64).min(CHUNK as u64) as usize;
        pattern.chunk(index, &mut chunk[..len]);
        engine
            .object_write(POOL, object, index * CHUNK as u64, &chunk[..len])
            .map_err(|e| format!("cannot write: {e}"))?;
    }
    engine
        .sync_pool(POOL)
        .map_err(|e| format!("cannot sync: {e}"))?;
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "wrote {} through the engine and committed it in {seconds:.2}s ({})",
        format_size(options.size),
        rate(options.size, seconds)
    );
    Ok(())
}

fn export(engine: &Engine) -> Result<(), String> {
    engine
        .export_pool(POOL, false)
        .map_err(|e| format!("cannot export '{POOL}': {e}"))
}

fn run_in(
    dir: &Path,
    options: &DemoOptions,
    status: &dyn Fn(&Engine) -> String,
) -> Result<(), String> {
    let devices = create_devices(dir, options)?;
    println!(
        "tarn demo: {} sparse files of {} in {}",
        options.devices,
        format_size(options.device_size),
        dir.display()
    );
    let engine = new_engine(options.direct);
    create_pool(&engine, devices, options.layout)?;
    let object = engine
        .object_create(POOL, 128 << 10)
        .map_err(|e| e.to_string())?;
    let pattern = Pattern::new(SeededRng::from_entropy().next_u64());
    write_data(&engine, object, options, &pattern)?;
    let seconds = verify(&engine, object, options, &pattern)?;
    println!(
        "read back {} in {seconds:.2}s ({}): every byte matches",
        format_size(options.size),
        rate(options.size, seconds)
    );
    crate::demo_fs::create(&engine, dir)?;
    let mounted = crate::demo_fs::write_and_check(&engine, options.size, &pattern)?;
    println!("$ tarn pool status {POOL}");
    print!("{}", status(&engine));
    println!("$ tarn pool export {POOL}");
    export(&engine)?;
    drop(engine);

    let engine = new_engine(options.direct);
    let dirs = vec![dir.display().to_string()];
    let command = format!("pool import -d {} {POOL}", dir.display());
    println!("$ tarn {command}");
    engine
        .import_pool(&dirs, POOL, &ImportOptions::default(), &command)
        .map_err(|e| format!("cannot import '{POOL}': {e}"))?;
    let seconds = verify(&engine, object, options, &pattern)?;
    println!(
        "read back after import in {seconds:.2}s ({}): every byte matches",
        rate(options.size, seconds)
    );
    if mounted {
        crate::demo_fs::check_again(&engine, options.size, &pattern)?;
    }
    for summary in engine.list(&[]).map_err(|e| e.to_string())? {
        println!(
            "pool {}: size {}, allocated {}, free {}, health {}",
            summary.name,
            format_size(summary.size),
            format_size(summary.allocated),
            format_size(summary.free),
            summary.health
        );
    }
    export(&engine)
}

fn new_engine(direct: bool) -> Arc<Engine> {
    Arc::new(tarn_daemon::backend::file_engine(direct))
}
