//! The fixture of the FUSE tests: an engine in this process on a sparse file in a temp
//! dir, a pool on it, and its root dataset mounted at `<tmp>/mnt` through the real kernel
//! FUSE driver.

#![allow(dead_code, unreachable_pub)] // Each test binary uses its own part of this module.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use tarn_base::{SeededRng, SystemClock};
use tarn_engine::{
    CreateOptions, CreateSpec, DeviceProvider, Engine, FileProvider, HostIdentity, ImportOptions,
    MountSpec, TopLayout, TopSpec,
};

pub const POOL: &str = "fusetank";
const DEVICE_BYTES: u64 = 512 << 20;

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub engine: Arc<Engine>,
    pub mount: Option<tarn_fuse::Mount>,
    pub mnt: PathBuf,
    /// Who checks permissions on the mounts this fixture makes.
    pub permissions: tarn_fuse::Permissions,
}

/// Whether FUSE tests can run here; prints why not (CI always has /dev/fuse).
pub fn fuse_or_skip(test: &str) -> bool {
    if tarn_fuse::fuse_available() {
        return true;
    }
    eprintln!(
        "SKIP {test}: {} is absent, no FUSE tests on this host",
        tarn_fuse::FUSE_DEVICE
    );
    false
}

pub fn new_engine() -> Engine {
    engine_on(Arc::new(FileProvider { direct: false }))
}

/// An engine whose devices `provider` opens.
pub fn engine_on(provider: Arc<dyn DeviceProvider>) -> Engine {
    Engine::new(
        provider,
        HostIdentity {
            hostid: 0x7a11,
            hostname: "fuse-test".into(),
        },
        Arc::new(SystemClock::new()),
        SeededRng::from_entropy().next_u64(),
    )
}

impl Fixture {
    /// A pool on one sparse file, its root dataset mounted at `<tmp>/mnt`. The temp dir is
    /// 0755 so that an unprivileged user can reach the mount.
    pub fn new() -> Fixture {
        Fixture::with(&[])
    }

    /// Like [`Fixture::new`] with dataset properties set on the root dataset before it is
    /// mounted (`acltype=posix` for the ACL tests).
    pub fn with(properties: &[(&str, &str)]) -> Fixture {
        Fixture::checked_by(properties, tarn_fuse::Permissions::Kernel)
    }

    /// Like [`Fixture::with`], mounted with permissions checked by `permissions`.
    pub fn checked_by(properties: &[(&str, &str)], permissions: tarn_fuse::Permissions) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod tempdir");
        let device = dir.path().join("d0");
        std::fs::File::create(&device)
            .and_then(|f| f.set_len(DEVICE_BYTES))
            .expect("device file");
        let engine = Arc::new(new_engine());
        let spec = CreateSpec {
            name: POOL.into(),
            tops: vec![TopSpec {
                layout: TopLayout::Disk,
                devices: vec![device.display().to_string()],
            }],
            spares: Vec::new(),
            caches: Vec::new(),
            logs: Vec::new(),
            specials: Vec::new(),
            ashift: 12,
            force: false,
        };
        let options = CreateOptions {
            command: format!("pool create {POOL}"),
            ..CreateOptions::default()
        };
        engine.create_pool(&spec, &options).expect("create pool");
        let assignments: Vec<(String, String)> = properties
            .iter()
            .map(|(p, v)| ((*p).to_string(), (*v).to_string()))
            .collect();
        if !assignments.is_empty() {
            engine
                .set_dataset_props(POOL, &assignments, "set")
                .expect("set properties");
        }
        let mnt = dir.path().join("mnt");
        let mut fixture = Fixture {
            dir,
            engine,
            mount: None,
            mnt,
            permissions,
        };
        fixture.mount();
        fixture
    }

    pub fn spec(&self) -> MountSpec {
        let mut specs = self.engine.mount_specs(POOL).expect("mount specs");
        let mut spec = specs.remove(0);
        spec.mountpoint = self.mnt.clone();
        spec
    }

    pub fn mount(&mut self) {
        let mount = tarn_fuse::mount_with(Arc::clone(&self.engine), &self.spec(), self.permissions)
            .expect("mount");
        self.mount = Some(mount);
    }

    pub fn unmount(&mut self) {
        if let Some(mut mount) = self.mount.take() {
            mount.unmount().expect("unmount");
        }
    }

    /// Unmounts, exports, imports again (a fresh engine, as after a daemon restart) and
    /// mounts again.
    pub fn cycle(&mut self) {
        self.cycle_on(Arc::new(FileProvider { direct: false }));
    }

    /// [`Fixture::cycle`] with the devices opened by `provider` from then on.
    pub fn cycle_on(&mut self, provider: Arc<dyn DeviceProvider>) {
        self.unmount();
        self.engine.export_pool(POOL, false).expect("export");
        let engine = Arc::new(engine_on(provider));
        let dirs = vec![self.dir.path().display().to_string()];
        engine
            .import_pool(&dirs, POOL, &ImportOptions::default(), "pool import")
            .expect("import");
        self.engine = engine;
        self.mount();
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.mnt.join(name)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(mut mount) = self.mount.take()
            && mount.unmount().is_err()
        {
            mount.detach();
        }
    }
}

/// Runs a command, asserting success; returns stdout.
pub fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program).args(args).output().expect(program);
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `sh -c script` as user nobody (uid/gid 65534, no groups); returns whether it
/// succeeded and its stderr.
pub fn as_nobody(script: &str) -> (bool, String) {
    let output = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .output()
        .expect("setpriv");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `len` incompressible bytes (an xorshift stream), different for each seed.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(seed);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

pub fn sh(script: &str, dir: &Path) -> String {
    let output = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .expect("sh");
    assert!(
        output.status.success(),
        "sh -c {script:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
