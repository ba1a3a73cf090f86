//! Device files opened with `O_DIRECT`, as the daemon opens them, under the allocator the
//! `tarn` binary installs (`tarn_base::page_align::PageAligned`).
//!
//! Goal: the engine's normal paths (pool create, writes of whole and partial records, txg
//! syncs with their labels and uberblocks, export, the import scan, cold reads with
//! read-ahead, a scrub) hand every device access to the kernel as it is: no access goes
//! through `FileDevice`'s aligned bounce copy, and every byte reads back. Method: a raidz2
//! pool of six files in a temporary directory (ext4 here; a file system without O_DIRECT
//! would make the test fail its first assertion rather than pass vacuously), opened through
//! a provider that opens them as `FileProvider` does and keeps each `FileDevice` to read its
//! bounce counter. Negative control: without the `#[global_allocator]` below, the
//! pipeline's buffers are not page-aligned and the bounce count is in the thousands.
//!
//! Also: the txg's block writes reach the device queues shared (`Device::write_shared`) and
//! page-aligned, so no queue had to copy one for its alignment
//! (`QueuedDevice::unaligned_copies`). Negative control: without the allocator the queues
//! copied 512 of them.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use tarn_base::page_align::PageAligned;
use tarn_base::{ManualClock, ObjectId, SeededRng};
use tarn_device::{Device, DeviceError, FileDevice, FileOpenOptions, QueuedDevice};
use tarn_engine::{
    CreateOptions, CreateSpec, DeviceProvider, Engine, HostIdentity, ImportOptions, ScanState,
    ScrubAction, TopLayout,
};

#[global_allocator]
static ALLOCATOR: PageAligned<std::alloc::System> = PageAligned::new(std::alloc::System);

const DEVICE_SIZE: u64 = 96 << 20;

/// Opens device files with `O_DIRECT` the way `FileProvider { direct: true }` does, and
/// keeps every `FileDevice` it opened until [`Direct::take_bounces`].
#[derive(Default)]
struct Direct {
    opened: Mutex<Vec<Arc<FileDevice>>>,
    queued: Mutex<Vec<Arc<QueuedDevice>>>,
}

impl Direct {
    /// How many devices were opened since the last call and how many accesses of theirs
    /// bounced; lets go of them (an open file keeps its exclusive lock).
    fn take_bounces(&self) -> (usize, u64) {
        let opened = std::mem::take(&mut *self.opened.lock().unwrap());
        assert!(opened.iter().all(|d| d.is_direct()), "all opened O_DIRECT");
        let queued = std::mem::take(&mut *self.queued.lock().unwrap());
        let copies: u64 = queued.iter().map(|q| q.unaligned_copies()).sum();
        assert_eq!(copies, 0, "shared writes copied for their alignment");
        (opened.len(), opened.iter().map(|d| d.bounces()).sum())
    }
}

impl DeviceProvider for Direct {
    fn open(&self, path: &str, read_only: bool) -> Result<Arc<dyn Device>, DeviceError> {
        let options = FileOpenOptions {
            direct: true,
            exclusive: !read_only,
            read_only,
        };
        let file = Arc::new(FileDevice::open(Path::new(path), options)?);
        self.opened.lock().unwrap().push(Arc::clone(&file));
        if read_only {
            return Ok(file);
        }
        let queued = Arc::new(QueuedDevice::new(file)?);
        self.queued.lock().unwrap().push(Arc::clone(&queued));
        Ok(queued)
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, DeviceError> {
        tarn_device::list_device_paths(Path::new(dir))
    }
}

fn read_all(engine: &Engine, written: &[(ObjectId, Vec<u8>)]) {
    for (object, data) in written {
        let mut back = vec![0u8; data.len()];
        for start in (0..data.len()).step_by(128 << 10) {
            let end = (start + (128 << 10)).min(data.len());
            engine
                .object_read("tank", *object, start as u64, &mut back[start..end])
                .unwrap();
        }
        assert!(back == *data, "read back {object:?}");
    }
}

#[test]
fn direct_io_makes_no_bounce_on_the_normal_paths() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<String> = (0..6)
        .map(|i| dir.path().join(format!("d{i}")).display().to_string())
        .collect();
    for path in &paths {
        tarn_device::create_sparse_file(Path::new(path), DEVICE_SIZE).unwrap();
    }
    let provider = Arc::new(Direct::default());
    let identity = HostIdentity {
        hostid: 7,
        hostname: "host".into(),
    };
    let clock = Arc::new(ManualClock::new(1_795_357_800));
    let engine = Engine::new(provider.clone(), identity, clock, 9);
    let spec = CreateSpec::one_top("tank", TopLayout::Raidz(2), paths.clone());
    let options = CreateOptions {
        command: "pool create tank".into(),
        ..CreateOptions::default()
    };
    engine.create_pool(&spec, &options).unwrap();
    let mut written = Vec::new();
    // Whole records, a partial last record, and blocks smaller than one raidz row.
    for (seed, len) in [
        (1u64, 3 << 20),
        (2, (1 << 20) + 40_960),
        (3, 5000),
        (4, 4096),
    ] {
        let object = engine.object_create("tank", 128 << 10).unwrap();
        let mut data = vec![0u8; len];
        SeededRng::new(seed).fill(&mut data);
        engine.object_write("tank", object, 0, &data).unwrap();
        written.push((object, data));
        engine.sync_pool("tank").unwrap();
    }
    read_all(&engine, &written);
    engine.export_pool("tank", false).unwrap();
    let (opened, bounces) = provider.take_bounces();
    assert_eq!(opened, 6, "create opened the six files");
    assert_eq!(
        bounces, 0,
        "create, writes, syncs, reads and export bounced"
    );
    let dirs = [dir.path().display().to_string()];
    engine
        .import_pool(&dirs, "tank", &ImportOptions::default(), "pool import")
        .unwrap();
    read_all(&engine, &written);
    engine
        .scrub(&["tank".into()], ScrubAction::Start, "pool scrub tank")
        .unwrap();
    while engine.scrub_step("tank", 4 << 20).unwrap().unwrap().state == ScanState::Scanning {}
    engine.export_pool("tank", false).unwrap();
    let (opened, bounces) = provider.take_bounces();
    assert!(
        opened >= 6,
        "the import scan and the import opened the files: {opened}"
    );
    assert_eq!(
        bounces, 0,
        "the import scan, cold reads and the scrub bounced"
    );
}
