//! Whole-pool import of mangled images: a raidz1 pool of three simulated devices is built once
//! (with one object of known data); each input is a list of patches (device, offset, bytes)
//! XORed into the images. Import must never panic, and every read that succeeds must return
//! exactly the original bytes: damage is reported, never returned.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use tarn_base::{ManualClock, ObjectId, SeededRng};
use tarn_device::{Device, FaultPlan, SimDevice};
use tarn_engine::{
    CreateOptions, CreateSpec, Engine, HostIdentity, ImportOptions, SimProvider, TopLayout,
};

const DEVICE_SIZE: u64 = 64 << 20;
const CHUNK: usize = 64 << 10;
const DATA_LEN: usize = 1 << 20;

struct Image {
    /// Per device: its path and its non-zero 64 KiB chunks.
    devices: Vec<(String, Vec<(u64, Vec<u8>)>)>,
    data: Vec<u8>,
    object: ObjectId,
}

fn engine(provider: &Arc<SimProvider>) -> Engine {
    let identity = HostIdentity { hostid: 1, hostname: "fuzz".into() };
    Engine::new(provider.clone(), identity, Arc::new(ManualClock::new(1_700_000_000)), 7)
}

fn build() -> Image {
    let provider = Arc::new(SimProvider::new());
    let names: Vec<String> = (0..3).map(|i| format!("/fuzz/d{i}")).collect();
    for name in &names {
        provider.insert(name, SimDevice::new(name, DEVICE_SIZE, FaultPlan::default()));
    }
    let engine = engine(&provider);
    let spec = CreateSpec {
        ashift: 9,
        ..CreateSpec::one_top("tank", TopLayout::Raidz(1), names.clone())
    };
    engine.create_pool(&spec, &CreateOptions::default()).expect("create");
    let object = engine.object_create("tank", 16 << 10).expect("object");
    let mut data = vec![0u8; DATA_LEN];
    SeededRng::new(3).fill(&mut data[..DATA_LEN / 2]);
    engine.object_write("tank", object, 0, &data).expect("write");
    engine.export_pool("tank", false).expect("export");
    let devices = names
        .iter()
        .map(|name| {
            let image = provider.get(name).expect("device").image();
            let chunks = image
                .chunks(CHUNK)
                .enumerate()
                .filter(|(_, c)| c.iter().any(|&b| b != 0))
                .map(|(i, c)| ((i * CHUNK) as u64, c.to_vec()))
                .collect();
            (name.clone(), chunks)
        })
        .collect();
    Image { devices, data, object }
}

fuzz_target!(|input: &[u8]| {
    static IMAGE: OnceLock<Image> = OnceLock::new();
    let image = IMAGE.get_or_init(build);
    let provider = Arc::new(SimProvider::new());
    let mut sims = Vec::new();
    for (name, chunks) in &image.devices {
        let sim = SimDevice::new(name, DEVICE_SIZE, FaultPlan::default());
        for (offset, bytes) in chunks {
            sim.write_at(*offset, bytes).expect("image write");
        }
        provider.insert(name, sim.clone());
        sims.push(sim);
    }
    // Patches: [device u8][chunk index u16][offset in chunk u16][len u8][bytes...]; offsets
    // land in chunks that hold data, where damage matters.
    let mut rest = input;
    while rest.len() >= 6 {
        let device = usize::from(rest[0]) % sims.len();
        let chunks = &image.devices[device].1;
        let (base, _) = chunks[usize::from(u16::from_le_bytes([rest[1], rest[2]])) % chunks.len()];
        let at = base + u64::from(u16::from_le_bytes([rest[3], rest[4]])) % CHUNK as u64;
        let len = usize::from(rest[5]).min(rest.len() - 6);
        let mut bytes = vec![0u8; len];
        let _ = sims[device].read_at(at, &mut bytes);
        for (b, x) in bytes.iter_mut().zip(&rest[6..6 + len]) {
            *b ^= x;
        }
        let _ = sims[device].write_at(at, &bytes);
        rest = &rest[6 + len..];
    }
    for sim in &sims {
        let _ = sim.flush();
    }
    let engine = engine(&provider);
    let options = ImportOptions { rewind: true, ..ImportOptions::default() };
    if engine.import_pool(&["/fuzz".into()], "tank", &options, "import").is_err() {
        return;
    }
    let mut back = vec![0u8; 64 << 10];
    for offset in (0..DATA_LEN).step_by(back.len()) {
        if engine.object_read("tank", image.object, offset as u64, &mut back).is_ok() {
            assert!(back[..] == image.data[offset..offset + back.len()], "wrong bytes at {offset}");
        }
    }
});
