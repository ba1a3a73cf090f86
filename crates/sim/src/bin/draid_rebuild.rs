//! `draid-rebuild`: how long one failed disk takes to rebuild on the seed's 90 disks, dRAID
//! (`draid2:8d:2s:90c`, a distributed spare, sequential rebuild) against raidz2 8+2 (nine
//! vdevs of ten plus one traditional spare, block-pointer resilver), with the same data.
//!
//! Both pools run in the real engine on in-memory devices that record every access of the
//! rebuild. The time is then computed from those records with a fixed disk model, so the
//! result does not depend on the host: each device spends `len / bandwidth` per access plus
//! one seek when the access does not start where the previous one ended, and the rebuild
//! takes as long as its busiest device (devices work in parallel; a deep queue keeps each
//! busy). The devices keep each distinct 4 KiB sector once, so a pool of 90 GiB-sized disks
//! filled with repeated records fits in a little memory.
//!
//! usage: draid-rebuild [--device-size 1G] [--fill 40] [--bandwidth 200] [--seek-ms 8]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tarn_base::{ManualClock, SeededRng};
use tarn_device::{Device, DeviceError, check_range};
use tarn_engine::{
    CreateOptions, CreateSpec, DeviceProvider, Engine, HostIdentity, ScanFunction, ScanState,
    TopLayout, TopSpec,
};

const SECTOR: u64 = 4096;
const POOL: &str = "tank";
const RECORD: usize = 1 << 20;

/// One recorded access: write or read, device offset, length.
type Access = (bool, u64, u64);

#[derive(Debug, Default)]
struct Store {
    sectors: HashMap<u64, Arc<Vec<u8>>>,
    /// Distinct sector contents by hash (each content stored once).
    contents: HashMap<u64, Vec<Arc<Vec<u8>>>>,
}

impl Store {
    fn intern(&mut self, bytes: Vec<u8>) -> Arc<Vec<u8>> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut hasher);
        let bucket = self.contents.entry(hasher.finish()).or_default();
        if let Some(found) = bucket.iter().find(|c| ***c == bytes) {
            return Arc::clone(found);
        }
        let new = Arc::new(bytes);
        bucket.push(Arc::clone(&new));
        new
    }
}

/// An in-memory device that stores each distinct sector once and records accesses while
/// `recording` is set.
#[derive(Debug)]
struct TraceDevice {
    name: String,
    size: u64,
    store: Mutex<Store>,
    log: Mutex<Vec<Access>>,
    recording: Arc<AtomicBool>,
    gone: AtomicBool,
}

impl TraceDevice {
    fn record(&self, write: bool, offset: u64, len: u64) {
        if self.recording.load(Ordering::Relaxed) {
            let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
            log.push((write, offset, len));
        }
    }

    fn check(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        if self.gone.load(Ordering::Relaxed) {
            return Err(DeviceError::Gone);
        }
        check_range(offset, len, self.size)
    }
}

impl Device for TraceDevice {
    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.check(offset, buf.len() as u64)?;
        self.record(false, offset, buf.len() as u64);
        let store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let (index, within) = (at / SECTOR, (at % SECTOR) as usize);
            let take = (SECTOR as usize - within).min(buf.len() - done);
            match store.sectors.get(&index) {
                Some(sector) => {
                    buf[done..done + take].copy_from_slice(&sector[within..within + take])
                }
                None => buf[done..done + take].fill(0),
            }
            done += take;
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.check(offset, data.len() as u64)?;
        self.record(true, offset, data.len() as u64);
        let mut store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let (index, within) = (at / SECTOR, (at % SECTOR) as usize);
            let take = (SECTOR as usize - within).min(data.len() - done);
            let mut sector = match store.sectors.get(&index) {
                Some(old) => old.as_ref().clone(),
                None => vec![0u8; SECTOR as usize],
            };
            sector[within..within + take].copy_from_slice(&data[done..done + take]);
            let sector = store.intern(sector);
            store.sectors.insert(index, sector);
            done += take;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        if self.gone.load(Ordering::Relaxed) {
            return Err(DeviceError::Gone);
        }
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(offset, len, self.size)
    }

    fn path(&self) -> &str {
        &self.name
    }

    fn probe_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
struct Provider {
    devices: Vec<Arc<TraceDevice>>,
}

impl DeviceProvider for Provider {
    fn open(&self, path: &str, _read_only: bool) -> Result<Arc<dyn Device>, DeviceError> {
        self.devices
            .iter()
            .find(|d| d.name == path)
            .map(|d| Arc::clone(d) as Arc<dyn Device>)
            .ok_or(DeviceError::Gone)
    }

    fn list(&self, _dir: &str) -> Result<Vec<String>, DeviceError> {
        Ok(self.devices.iter().map(|d| d.name.clone()).collect())
    }
}

#[derive(Clone, Copy)]
struct Params {
    device_size: u64,
    fill_percent: u64,
    bandwidth: f64,
    seek: f64,
}

/// The modelled seconds of one device's accesses (module docs).
fn busy_seconds(log: &[Access], params: &Params) -> f64 {
    let mut end = u64::MAX;
    let mut seconds = 0.0;
    for &(_, offset, len) in log {
        if offset != end {
            seconds += params.seek;
        }
        seconds += len as f64 / params.bandwidth;
        end = offset + len;
    }
    seconds
}

struct Outcome {
    rebuilt_bytes: u64,
    busiest: f64,
    /// The busiest device's time without seeks (bandwidth only).
    busiest_streaming: f64,
    /// Accesses, seeks and bytes of the busiest device.
    busiest_io: (usize, usize, u64),
    mean: f64,
    read: u64,
    written: u64,
}

/// Creates the pool, fills it, fails one device, lets the engine's hot-spare check put a spare
/// in and runs the resilver or rebuild to its end; returns the modelled time.
fn run(
    spec: &CreateSpec,
    devices: usize,
    failed: usize,
    params: &Params,
) -> Result<Outcome, String> {
    let recording = Arc::new(AtomicBool::new(false));
    let provider = Arc::new(Provider {
        devices: (0..devices)
            .map(|i| {
                Arc::new(TraceDevice {
                    name: format!("/bench/d{i}"),
                    size: params.device_size,
                    store: Mutex::new(Store::default()),
                    log: Mutex::new(Vec::new()),
                    recording: Arc::clone(&recording),
                    gone: AtomicBool::new(false),
                })
            })
            .collect(),
    });
    let identity = HostIdentity {
        hostid: 1,
        hostname: "bench".into(),
    };
    let engine = Engine::new(provider.clone(), identity, Arc::new(ManualClock::new(1)), 1);
    engine
        .create_pool(spec, &CreateOptions::default())
        .map_err(|e| e.to_string())?;
    fill(&engine, params)?;
    provider.devices[failed].gone.store(true, Ordering::Relaxed);
    recording.store(true, Ordering::Relaxed);
    if engine.fault_check().is_empty() {
        return Err("no spare was activated".into());
    }
    let mut repaired = 0;
    loop {
        let progress = engine
            .scrub_step(POOL, 64 << 20)
            .map_err(|e| e.to_string())?
            .ok_or("no scan")?;
        if progress.function == ScanFunction::Resilver && progress.state != ScanState::Scanning {
            repaired = repaired.max(progress.repaired);
            break;
        }
        repaired = progress.repaired;
    }
    recording.store(false, Ordering::Relaxed);
    Ok(measure(&provider, params, repaired))
}

/// Writes the same random record over and over until the pool is `fill_percent` full.
fn fill(engine: &Engine, params: &Params) -> Result<(), String> {
    let size = engine.list(&[]).map_err(|e| e.to_string())?[0].size;
    let target = size / 100 * params.fill_percent;
    let mut record = vec![0u8; RECORD];
    SeededRng::new(7).fill(&mut record);
    let object = engine
        .object_create(POOL, RECORD as u32)
        .map_err(|e| e.to_string())?;
    let mut written = 0u64;
    while written < target {
        engine
            .object_write(POOL, object, written, &record)
            .map_err(|e| e.to_string())?;
        written += RECORD as u64;
        if written.is_multiple_of(256 << 20) {
            engine.sync_pool(POOL).map_err(|e| e.to_string())?;
        }
    }
    engine.sync_pool(POOL).map_err(|e| e.to_string())?;
    eprintln!("  wrote {} MiB", written >> 20);
    Ok(())
}

/// The modelled times of the recorded accesses.
fn measure(provider: &Provider, params: &Params, repaired: u64) -> Outcome {
    let devices = provider.devices.len();
    let mut busiest: f64 = 0.0;
    let mut busiest_io = (0, 0, 0);
    let mut busiest_streaming: f64 = 0.0;
    let streaming = Params {
        seek: 0.0,
        ..*params
    };
    let mut total = 0.0;
    let (mut read, mut wrote) = (0, 0);
    for device in &provider.devices {
        let log = device.log.lock().unwrap_or_else(PoisonError::into_inner);
        let seconds = busy_seconds(&log, params);
        busiest_streaming = busiest_streaming.max(busy_seconds(&log, &streaming));
        if seconds > busiest {
            let seeks = log.windows(2).filter(|w| w[1].1 != w[0].1 + w[0].2).count() + 1;
            busiest_io = (log.len(), seeks, log.iter().map(|a| a.2).sum());
            busiest = seconds;
        }
        total += seconds;
        read += log.iter().filter(|a| !a.0).map(|a| a.2).sum::<u64>();
        wrote += log.iter().filter(|a| a.0).map(|a| a.2).sum::<u64>();
    }
    Outcome {
        rebuilt_bytes: repaired,
        busiest,
        busiest_streaming,
        busiest_io,
        mean: total / devices as f64,
        read,
        written: wrote,
    }
}

fn parse() -> Result<Params, String> {
    let mut params = Params {
        device_size: 1 << 30,
        fill_percent: 40,
        bandwidth: 200.0 * 1e6,
        seek: 0.008,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        let bad = format!("bad value for {arg}");
        match arg.as_str() {
            "--device-size" => {
                params.device_size = tarn_base::parse_size(&value).map_err(|e| e.to_string())?;
            }
            "--fill" => params.fill_percent = value.parse().map_err(|_| bad)?,
            "--bandwidth" => params.bandwidth = value.parse::<f64>().map_err(|_| bad)? * 1e6,
            "--seek-ms" => params.seek = value.parse::<f64>().map_err(|_| bad)? / 1e3,
            _ => return Err(format!("unknown argument {arg}")),
        }
    }
    Ok(params)
}

fn spec(tops: Vec<TopSpec>, spares: Vec<String>) -> CreateSpec {
    CreateSpec {
        tops,
        spares,
        ..CreateSpec::one_top(POOL, TopLayout::Disk, Vec::new())
    }
}

fn report(name: &str, outcome: &Outcome) {
    let (accesses, seeks, bytes) = outcome.busiest_io;
    println!(
        "{name:<40} busiest device without seeks {:>8.2} s",
        outcome.busiest_streaming
    );
    println!(
        "{name:<40} rebuilt {:>6} MiB  busiest device {:>8.2} s ({accesses} accesses, {seeks} \
         seeks, {} MiB)  mean {:>7.2} s  all devices read {} MiB, wrote {} MiB",
        outcome.rebuilt_bytes >> 20,
        outcome.busiest,
        bytes >> 20,
        outcome.mean,
        outcome.read >> 20,
        outcome.written >> 20
    );
}

fn main() -> std::process::ExitCode {
    let params = match parse() {
        Ok(params) => params,
        Err(why) => {
            eprintln!("draid-rebuild: {why}");
            return std::process::ExitCode::from(2);
        }
    };
    let names = |range: std::ops::Range<usize>| -> Vec<String> {
        range.map(|i| format!("/bench/d{i}")).collect()
    };
    println!(
        "90 disks of {} MiB filled to {}%, {:.0} MB/s and {:.1} ms per seek each",
        params.device_size >> 20,
        params.fill_percent,
        params.bandwidth / 1e6,
        params.seek * 1e3
    );
    let draid = spec(
        vec![TopSpec {
            layout: TopLayout::Draid {
                parity: 2,
                data: 8,
                spares: 2,
            },
            devices: names(0..90),
        }],
        Vec::new(),
    );
    let raidz = spec(
        (0..9)
            .map(|v| TopSpec {
                layout: TopLayout::Raidz(2),
                devices: names(v * 10..v * 10 + 10),
            })
            .collect(),
        names(90..91),
    );
    let mut results = Vec::new();
    for (name, spec, devices) in [
        ("draid2:8d:90c:2s, distributed spare", &draid, 90),
        ("9 x raidz2 8+2, one traditional spare", &raidz, 91),
    ] {
        eprintln!("{name}:");
        match run(spec, devices, 17, &params) {
            Ok(outcome) => {
                report(name, &outcome);
                results.push((outcome.busiest, outcome.busiest_streaming));
            }
            Err(why) => {
                eprintln!("draid-rebuild: {name}: {why}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    let ratio = |a: f64, b: f64| format!("{:.3} (1/{:.1})", a / b, b / a);
    println!(
        "dRAID rebuild time / traditional spare: {} with seeks (target <= 1/6), {} by \
         bandwidth alone",
        ratio(results[0].0, results[1].0),
        ratio(results[0].1, results[1].1)
    );
    std::process::ExitCode::SUCCESS
}
