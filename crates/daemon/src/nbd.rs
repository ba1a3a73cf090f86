//! The NBD export table: one listener per imported pool, each of its volumes an export
//! named by its dataset name (`tank/vol`), served by tarn-nbd over the engine's volume
//! verbs.
//!
//! ```text
//!  <rundir>/nbd/<pool>.sock (0600)  ── accept thread "nbd-<pool>" ── one thread per
//!                                      connection: tarn_nbd::serve(PoolVolumes)
//! ```
//! The table follows the engine: after every request (and every import from the cache
//! file) `NbdTable::follow` starts a listener for each pool that has none and stops the
//! listeners of pools that are gone. Stopping a listener shuts down every connection it
//! accepted (clients see the connection end; requests in flight finish or fail with
//! ESHUTDOWN) and removes its socket. Clients connect with
//! `nbd+unix:///tank/vol?socket=<rundir>/nbd/tank.sock`.
//!
//! A volume with `volmode=none` (inherited like ZFS's) is no export, as a zvol with it has no
//! device node: not listed, opened as an unknown export, not shown by `tarn nbd`, no TCP
//! listener of its own. Setting it on a served volume ends that volume's connections at the
//! next `follow`, exactly as destroying it does (a zvol's device goes away under its users:
//! they see the connection end, requests in flight finish or fail); setting it back serves
//! it to new connections.
//!
//! TCP only when asked for by the user property [`LISTEN_PROPERTY`] (`org.tarn:nbd_listen`),
//! read per volume with inheritance as every user property: set on the pool's root it
//! serves every volume, on a filesystem its volumes below, on one volume that volume only
//! (and `off` there keeps one volume off a listener its parent asked for). Unset, `off` or
//! `none` serve no TCP; `on` is `127.0.0.1:10809` (NBD's port), a bare port is that port on
//! loopback, and `ADDRESS:PORT` (`[v6]:PORT`) binds where it says. The listener settings of
//! a volume are that value and the TLS properties of module [`crate::nbd_tls`]
//! ([`SETTINGS_PROPERTIES`]): volumes with the same settings share one TCP listener, which
//! lists and opens only them (another volume of the pool is an unknown export there).
//! `follow` reads every volume's settings (and the root's, so a root's listener exists
//! before its first volume), starts a listener for each new set, stops those no volume
//! wants any more, and ends a TCP connection whose volume moved to other settings;
//! stopping a listener shuts down its connections too. A value that does not parse is
//! reported once on the daemon's stderr and serves nothing (a user property is not checked
//! at `set`, as in ZFS). Clients connect with `nbd://127.0.0.1:10809/tank/vol` (`nbds://`
//! when TLS is required); the same exports, counts and rules as the Unix socket. Two
//! settings naming one address cannot both bind: the second is reported and not served.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tarn_engine::{DatasetId, Engine, EngineError, Histogram, Latencies, PoolError, ReadOut, Run};
use tarn_nbd::codec::errno;
use tarn_nbd::{Backend, BackendError, Chunk, Export, ReadData};

use crate::nbd_tls::{
    CERTIFICATES_PROPERTY, CLIENTS_PROPERTY, TLS_PROPERTY, TlsSetup, VERIFY_PROPERTY,
};

/// Connections one pool's listener serves at once; more are closed at accept.
const CONNECTIONS_MAX: usize = 64;
/// The user property that asks for a TCP listener (module doc).
pub const LISTEN_PROPERTY: &str = "org.tarn:nbd_listen";
/// The user properties whose effective values are a volume's TCP listener settings.
pub const SETTINGS_PROPERTIES: [&str; 5] = [
    LISTEN_PROPERTY,
    TLS_PROPERTY,
    CERTIFICATES_PROPERTY,
    VERIFY_PROPERTY,
    CLIENTS_PROPERTY,
];
/// NBD's registered TCP port (`on`, or an address without one).
pub const NBD_PORT: u16 = 10809;

/// One pool's listener and its connections.
struct Listener {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
    volumes: Arc<PoolVolumes>,
    /// TCP listeners by their settings (the property values, one per line).
    tcp: BTreeMap<String, Tcp>,
    /// Settings that could not be served, already reported on stderr (tried again at each
    /// follow, reported once).
    refused: std::collections::BTreeSet<String>,
}

/// A TCP listener of a pool, for one set of settings: where it listens.
struct Tcp {
    addr: SocketAddr,
    /// `nbds` when TLS is required, else `nbd`.
    scheme: &'static str,
    stop: Arc<AtomicBool>,
    /// The accept thread: joined at stop, so the port is closed when `follow` returns.
    thread: Option<std::thread::JoinHandle<()>>,
}

/// An accepted socket of either kind, kept to shut it down; a TCP one with the settings of
/// its listener.
enum Socket {
    Unix(UnixStream),
    Tcp(TcpStream, Arc<str>),
}

impl Socket {
    fn shutdown(&self) {
        let _ = match self {
            Socket::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Socket::Tcp(s, _) => s.shutdown(std::net::Shutdown::Both),
        };
    }

    /// The settings of the TCP listener that accepted it.
    fn route(&self) -> Option<&str> {
        match self {
            Socket::Unix(_) => None,
            Socket::Tcp(_, route) => Some(route),
        }
    }
}

/// A stream a listener accepts: two handles on it (reader, writer) and one to keep.
trait Stream: Read + Write + Send + Sized + 'static {
    fn duplicate(&self) -> std::io::Result<Self>;
    fn keep(self, route: Option<&Arc<str>>) -> Socket;
    /// Serves the connection (`tls`: the TCP listener's TLS, module `nbd_tls`).
    fn serve(
        self,
        writer: Self,
        backend: &dyn tarn_nbd::Backend,
        tls: Option<&TlsSetup>,
    ) -> Result<(), tarn_nbd::ServeError>;
}

impl Stream for UnixStream {
    fn duplicate(&self) -> std::io::Result<Self> {
        self.try_clone()
    }
    fn keep(self, _: Option<&Arc<str>>) -> Socket {
        Socket::Unix(self)
    }
    fn serve(
        self,
        writer: Self,
        backend: &dyn tarn_nbd::Backend,
        _: Option<&TlsSetup>,
    ) -> Result<(), tarn_nbd::ServeError> {
        tarn_nbd::serve(self, writer, backend)
    }
}

impl Stream for TcpStream {
    fn duplicate(&self) -> std::io::Result<Self> {
        // Replies are written whole and small ones must not wait for Nagle.
        self.set_nodelay(true)?;
        self.try_clone()
    }
    fn keep(self, route: Option<&Arc<str>>) -> Socket {
        Socket::Tcp(self, route.map_or_else(|| Arc::from(""), Arc::clone))
    }
    fn serve(
        self,
        writer: Self,
        backend: &dyn tarn_nbd::Backend,
        tls: Option<&TlsSetup>,
    ) -> Result<(), tarn_nbd::ServeError> {
        match tls {
            Some(setup) => crate::nbd_tls::serve_tcp(self, writer, backend, setup),
            None => tarn_nbd::serve(self, writer, backend),
        }
    }
}

/// An accepted socket and the export it chose (name, dataset id), once it chose one.
type Accepted = (Socket, Option<(String, u64)>);

/// What a listener shares with its connections.
#[derive(Default)]
struct Shared {
    /// Requests served and their latencies, per [`NBD_OPS`] entry (the metrics).
    ops: [Histogram; NBD_OPS.len()],
    /// Open connections per export name.
    counts: Mutex<BTreeMap<String, usize>>,
    /// Every accepted socket (to shut down when the pool goes), by a running number, with
    /// the export it chose (name and dataset id) once it chose one.
    sockets: Mutex<BTreeMap<u64, Accepted>>,
    /// Each volume served over TCP: the settings of its listener and the listener's URI
    /// base (`nbd://ADDR`), as of the last `follow`.
    routes: Mutex<BTreeMap<String, (Arc<str>, String)>>,
}

/// The NBD requests the metrics count, by the protocol's names (lowercase).
pub const NBD_OPS: [&str; 5] = ["read", "write", "write_zeroes", "flush", "block_status"];

/// Index of each request in [`NBD_OPS`].
#[derive(Clone, Copy)]
enum NbdOp {
    Read = 0,
    Write = 1,
    WriteZeroes = 2,
    Flush = 3,
    BlockStatus = 4,
}

/// The monotonic clock the request latencies are read from.
fn monotonic_ns() -> u64 {
    use tarn_base::Clock;
    static CLOCK: std::sync::LazyLock<tarn_base::SystemClock> =
        std::sync::LazyLock::new(tarn_base::SystemClock::new);
    CLOCK.monotonic_ns()
}

/// One served volume, as `tarn nbd` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedVolume {
    /// Pool name.
    pub pool: String,
    /// Volume (export) name.
    pub volume: String,
    /// Socket path.
    pub socket: PathBuf,
    /// Open connections.
    pub connections: usize,
    /// The volume's TCP listener as a URI base (`nbd://ADDR`, `nbds://ADDR` when TLS is
    /// required), when it has one.
    pub tcp: Option<String>,
}

/// The daemon's NBD listeners.
pub struct NbdTable {
    // (Debug by hand below: the engine and listeners print as counts.)
    engine: Arc<Engine>,
    /// Where sockets go; `None`: NBD is off (daemons in tests built without a rundir).
    dir: Option<PathBuf>,
    listeners: Mutex<BTreeMap<String, Listener>>,
}

impl std::fmt::Debug for NbdTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdTable")
            .field("dir", &self.dir)
            .field("listeners", &lock(&self.listeners).len())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl NbdTable {
    /// A table serving under `<rundir>/nbd` (none without a rundir).
    #[must_use]
    pub fn new(engine: Arc<Engine>, rundir: Option<&Path>) -> NbdTable {
        NbdTable {
            engine,
            dir: rundir.map(|r| r.join("nbd")),
            listeners: Mutex::new(BTreeMap::new()),
        }
    }

    /// Starts listeners for new pools and stops those of pools that are gone.
    pub fn follow(&self) {
        let Some(dir) = &self.dir else { return };
        let pools = self.engine.pool_names();
        let mut listeners = lock(&self.listeners);
        let gone: Vec<String> = listeners
            .keys()
            .filter(|p| !pools.contains(p))
            .cloned()
            .collect();
        for pool in gone {
            if let Some(listener) = listeners.remove(&pool) {
                stop(listener);
            }
        }
        for pool in pools {
            if let Some(listener) = listeners.get_mut(&pool) {
                drop_stale(&self.engine, &pool, listener);
                follow_tcp(&self.engine, &pool, listener);
                continue;
            }
            match start(&self.engine, dir, &pool) {
                Ok(mut listener) => {
                    follow_tcp(&self.engine, &pool, &mut listener);
                    listeners.insert(pool, listener);
                }
                Err(e) => eprintln!("tarn daemon: cannot serve NBD for pool '{pool}': {e}"),
            }
        }
    }

    /// Stops every listener (daemon shutdown).
    pub fn stop_all(&self) {
        let mut listeners = lock(&self.listeners);
        for (_, listener) in std::mem::take(&mut *listeners) {
            stop(listener);
        }
    }

    /// Each pool's NBD requests (count and latency) by [`NBD_OPS`] entry, since its
    /// listener started (the pool's import).
    #[must_use]
    pub fn op_stats(&self) -> Vec<(String, Vec<Latencies>)> {
        let listeners = lock(&self.listeners);
        listeners
            .iter()
            .map(|(pool, listener)| {
                let ops = listener
                    .shared
                    .ops
                    .iter()
                    .map(Histogram::snapshot)
                    .collect();
                (pool.clone(), ops)
            })
            .collect()
    }

    /// Every volume served, with its connection count.
    #[must_use]
    pub fn served(&self) -> Vec<ServedVolume> {
        let listeners = lock(&self.listeners);
        let mut out = Vec::new();
        for (pool, listener) in listeners.iter() {
            let counts = lock(&listener.shared.counts).clone();
            let routes = lock(&listener.shared.routes).clone();
            for volume in exposed(&self.engine, pool) {
                out.push(ServedVolume {
                    pool: pool.clone(),
                    connections: counts.get(&volume.name).copied().unwrap_or(0),
                    tcp: routes.get(&volume.name).map(|(_, uri)| uri.clone()),
                    volume: volume.name,
                    socket: listener.path.clone(),
                });
            }
        }
        out
    }
}

fn start(engine: &Arc<Engine>, dir: &Path, pool: &str) -> Result<Listener, std::io::Error> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let path = dir.join(format!("{pool}.sock"));
    // A socket left by a killed daemon: this daemon holds the rundir lock, so it is stale.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Shared::default());
    let volumes = Arc::new(PoolVolumes {
        engine: Arc::clone(engine),
        pool: pool.to_string(),
        shared: Arc::clone(&shared),
    });
    let thread_stop = Arc::clone(&stop);
    let thread_volumes = Arc::clone(&volumes);
    std::thread::Builder::new()
        .name(format!("nbd-{pool}"))
        .spawn(move || accept_loop(listener.incoming(), &thread_stop, &thread_volumes, None))?;
    Ok(Listener {
        path,
        stop,
        shared,
        volumes,
        tcp: BTreeMap::new(),
        refused: std::collections::BTreeSet::new(),
    })
}

fn stop(mut listener: Listener) {
    listener.stop.store(true, Ordering::Release);
    // Wake the accept thread, which sees the flag and ends.
    let _ = UnixStream::connect(&listener.path);
    let _ = std::fs::remove_file(&listener.path);
    for (_, tcp) in std::mem::take(&mut listener.tcp) {
        stop_tcp(tcp);
    }
    for (_, (socket, _)) in std::mem::take(&mut *lock(&listener.shared.sockets)) {
        socket.shutdown();
    }
}

/// Where `value` of [`LISTEN_PROPERTY`] asks to listen: `None` for no TCP (module doc).
pub fn listen_address(value: &str) -> Result<Option<SocketAddr>, String> {
    let loopback = std::net::Ipv4Addr::LOCALHOST;
    match value {
        "" | "-" | "off" | "none" => Ok(None),
        "on" => Ok(Some(SocketAddr::from((loopback, NBD_PORT)))),
        _ => {
            if let Ok(port) = value.parse::<u16>() {
                return Ok(Some(SocketAddr::from((loopback, port))));
            }
            if let Ok(addr) = value.parse::<SocketAddr>() {
                return Ok(Some(addr));
            }
            match value.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(Some(SocketAddr::new(ip, NBD_PORT))),
                Err(_) => Err(format!(
                    "{LISTEN_PROPERTY}={value} is not off, on, a port or ADDRESS:PORT"
                )),
            }
        }
    }
}

/// Starts and stops `pool`'s TCP listeners after the listener settings of its root and
/// volumes ([`SETTINGS_PROPERTIES`], module doc), and ends the TCP connections of volumes
/// whose settings moved to another listener.
fn follow_tcp(engine: &Engine, pool: &str, listener: &mut Listener) {
    let settings = tcp_settings(engine, pool);
    let wanted: std::collections::BTreeSet<&String> = settings.values().collect();
    let gone: Vec<String> = listener
        .tcp
        .keys()
        .filter(|key| !wanted.contains(key))
        .cloned()
        .collect();
    for key in gone {
        if let Some(tcp) = listener.tcp.remove(&key) {
            stop_tcp(tcp);
        }
    }
    listener.refused.retain(|key| wanted.contains(key));
    for key in wanted {
        if listener.tcp.contains_key(key) {
            continue;
        }
        // Tried again at every follow (a port may have become free), reported once.
        match serve_settings(key, &listener.volumes) {
            Ok(Some(tcp)) => {
                listener.refused.remove(key);
                listener.tcp.insert(key.clone(), tcp);
            }
            Ok(None) => {}
            Err(e) => {
                if listener.refused.insert(key.clone()) {
                    eprintln!("tarn daemon: pool '{pool}': {e}; no NBD over TCP there");
                }
            }
        }
    }
    let mut routes = BTreeMap::new();
    for (volume, key) in settings.into_iter().filter(|(name, _)| name != pool) {
        if let Some(tcp) = listener.tcp.get(&key) {
            let uri = format!("{}://{}", tcp.scheme, tcp.addr);
            routes.insert(volume, (Arc::from(key.as_str()), uri));
        }
    }
    // A TCP connection whose listener is gone, or whose volume is served elsewhere now.
    for (socket, export) in lock(&listener.shared.sockets).values() {
        let Some(route) = socket.route() else {
            continue;
        };
        let moved = export
            .as_ref()
            .is_some_and(|(name, _)| routes.get(name).is_none_or(|(key, _)| &**key != route));
        if moved || !listener.tcp.contains_key(route) {
            socket.shutdown();
        }
    }
    *lock(&listener.shared.routes) = routes;
}

/// The listener settings (module doc) of `pool`'s root and of each of its volumes, by
/// name: the effective values of [`SETTINGS_PROPERTIES`], one per line.
fn tcp_settings(engine: &Engine, pool: &str) -> BTreeMap<String, String> {
    let query = tarn_engine::DatasetQuery {
        names: vec![pool.to_string()],
        recursive: true,
        properties: SETTINGS_PROPERTIES
            .iter()
            .map(ToString::to_string)
            .collect(),
        types: vec!["filesystem".into(), "volume".into()],
        ..tarn_engine::DatasetQuery::default()
    };
    let volumes: Vec<String> = exposed(engine, pool).into_iter().map(|v| v.name).collect();
    let rows = engine.dataset_props(&query).unwrap_or_default();
    rows.into_iter()
        .filter(|row| row.name == pool || volumes.contains(&row.name))
        .map(|row| {
            let values: Vec<String> = row.props.into_iter().map(|p| p.value).collect();
            (row.name, values.join("\n"))
        })
        .collect()
}

/// Starts a TCP listener for `key` (the settings, module doc); `None` when they ask for
/// no TCP.
fn serve_settings(key: &str, volumes: &Arc<PoolVolumes>) -> Result<Option<Tcp>, String> {
    let mut values = key.split('\n');
    let mut next = || values.next().unwrap_or("-");
    let (listen, tls, certificates) = (next(), next(), next());
    let (verify, clients) = (next(), next());
    let Some(addr) = listen_address(listen)? else {
        return Ok(None);
    };
    let tls = TlsSetup::from_properties(tls, certificates, verify, clients)?;
    start_tcp(addr, volumes, tls, key)
        .map(Some)
        .map_err(|e| format!("cannot listen on {addr}: {e}"))
}

fn start_tcp(
    addr: SocketAddr,
    volumes: &Arc<PoolVolumes>,
    tls: TlsSetup,
    key: &str,
) -> std::io::Result<Tcp> {
    let listener = TcpListener::bind(addr)?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let volumes = Arc::clone(volumes);
    let scheme = if tls.policy == tarn_nbd::Tls::Required {
        "nbds"
    } else {
        "nbd"
    };
    let route = Arc::from(key);
    let tls = Arc::new(tls);
    let thread = std::thread::Builder::new()
        .name(format!("nbd-tcp-{}", volumes.pool))
        .spawn(move || {
            let tcp = Some((tls, route));
            accept_loop(listener.incoming(), &thread_stop, &volumes, tcp);
        })?;
    Ok(Tcp {
        addr,
        scheme,
        stop,
        thread: Some(thread),
    })
}

fn stop_tcp(mut tcp: Tcp) {
    tcp.stop.store(true, Ordering::Release);
    // Wake the accept thread (through loopback when it listens on every address), then
    // wait for it to drop the listener; a thread that could not be woken is left to end
    // at its next accept rather than waited for.
    let mut wake = tcp.addr;
    if wake.ip().is_unspecified() {
        wake.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let woken = TcpStream::connect_timeout(&wake, std::time::Duration::from_secs(1));
    if let (Ok(_), Some(thread)) = (woken, tcp.thread.take()) {
        let _ = thread.join();
    }
}

/// The volumes of `pool` that are exports: every one but those with `volmode=none`.
fn exposed(engine: &Engine, pool: &str) -> Vec<tarn_engine::VolumeStat> {
    let mut volumes = engine.volumes(pool).unwrap_or_default();
    volumes.retain(|v| v.exposed);
    volumes
}

/// Ends the connections whose volume is gone, renamed or no longer exposed (`volmode=none`,
/// module doc): a dataset id can be taken by a new dataset, and a connection must never
/// reach a volume it did not open.
fn drop_stale(engine: &Engine, pool: &str, listener: &Listener) {
    let live: Vec<(String, u64)> = exposed(engine, pool)
        .into_iter()
        .map(|v| (v.name, v.dataset.0))
        .collect();
    let sockets = lock(&listener.shared.sockets);
    for (socket, export) in sockets.values() {
        if export.as_ref().is_some_and(|e| !live.contains(e)) {
            socket.shutdown();
        }
    }
}

/// Connection numbers, shared by a pool's Unix and TCP listeners.
static NEXT_CONNECTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A TCP listener's TLS and settings.
type TcpRoute = (Arc<TlsSetup>, Arc<str>);

fn accept_loop<S: Stream>(
    incoming: impl Iterator<Item = std::io::Result<S>>,
    stop: &AtomicBool,
    volumes: &Arc<PoolVolumes>,
    tcp: Option<TcpRoute>,
) {
    for stream in incoming {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = &volumes.shared;
        if lock(&shared.sockets).len() >= CONNECTIONS_MAX {
            continue;
        }
        let (Ok(writer), Ok(keep)) = (stream.duplicate(), stream.duplicate()) else {
            continue;
        };
        let id = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
        let route = tcp.as_ref().map(|(_, route)| Arc::clone(route));
        lock(&shared.sockets).insert(id, (keep.keep(route.as_ref()), None));
        let connection = Connection {
            volumes: Arc::clone(volumes),
            id,
            route,
        };
        let tls = tcp.as_ref().map(|(tls, _)| Arc::clone(tls));
        let spawned = std::thread::Builder::new()
            .name("nbd-conn".into())
            .spawn(move || {
                let served = stream.serve(writer, &connection, tls.as_deref());
                if let Err(e) = served
                    && !matches!(e, tarn_nbd::ServeError::Io(_))
                {
                    let pool = &connection.volumes.pool;
                    eprintln!("tarn daemon: nbd client of '{pool}': {e}");
                }
                lock(&connection.volumes.shared.sockets).remove(&id);
            });
        if spawned.is_err() {
            lock(&shared.sockets).remove(&id);
        }
    }
}

/// The volumes of one pool as NBD exports.
struct PoolVolumes {
    engine: Arc<Engine>,
    pool: String,
    shared: Arc<Shared>,
}

fn backend_error(error: &EngineError) -> BackendError {
    let errno = match error {
        EngineError::NoSpace | EngineError::QuotaExceeded => errno::ENOSPC,
        EngineError::ReadOnlyDataset | EngineError::Pool(PoolError::ReadOnly) => errno::EPERM,
        EngineError::NoSuchPool => errno::ESHUTDOWN,
        EngineError::Dataset(tarn_engine::DatasetError::OutOfRange { .. }) => errno::EINVAL,
        _ => errno::EIO,
    };
    BackendError {
        errno,
        message: error.to_string(),
    }
}

/// One accepted connection: the pool's volumes, the connection's number and, over TCP,
/// the settings of its listener (it serves only the volumes routed there).
struct Connection {
    volumes: Arc<PoolVolumes>,
    id: u64,
    route: Option<Arc<str>>,
}

impl std::ops::Deref for Connection {
    type Target = PoolVolumes;

    fn deref(&self) -> &PoolVolumes {
        &self.volumes
    }
}

impl Connection {
    fn id(export: &Export) -> DatasetId {
        DatasetId(export.token)
    }

    /// Runs one request, counting it and its latency under `op`.
    fn timed<T>(&self, op: NbdOp, f: impl FnOnce() -> T) -> T {
        let start = monotonic_ns();
        let out = f();
        let elapsed = monotonic_ns().saturating_sub(start);
        self.shared.ops[op as usize].add(elapsed);
        out
    }

    /// Whether volume `name` is an export of this connection's listener.
    fn serves(&self, name: &str) -> bool {
        let Some(route) = &self.route else {
            return true;
        };
        lock(&self.shared.routes)
            .get(name)
            .is_some_and(|(key, _)| key == route)
    }
}

/// A volume read's bytes as the engine's cache holds them, written into the NBD reply from
/// there (tarn-nbd `ReadData`): clean blocks are not copied at all.
struct VolumeData(ReadOut);

impl ReadData for VolumeData {
    fn chunks(&self) -> Vec<Chunk<'_>> {
        (self.0.runs())
            .map(|run| match run {
                Run::Bytes(bytes) => Chunk::Bytes(bytes),
                Run::Zeros(len) => Chunk::Zeros(len),
            })
            .collect()
    }
}

impl Backend for Connection {
    fn list(&self) -> Vec<String> {
        exposed(&self.engine, &self.pool)
            .into_iter()
            .map(|v| v.name)
            .filter(|name| self.serves(name))
            .collect()
    }

    fn open(&self, name: &str) -> Result<Export, BackendError> {
        let unknown = || BackendError {
            errno: errno::EINVAL,
            message: format!("no volume '{name}' in pool '{}'", self.pool),
        };
        if name.split('/').next() != Some(self.pool.as_str()) || !self.serves(name) {
            return Err(unknown());
        }
        let stat = self.engine.volume_stat(name).map_err(|_| unknown())?;
        if !stat.exposed {
            return Err(unknown());
        }
        Ok(Export {
            name: stat.name,
            token: stat.dataset.0,
            size: stat.size,
            block_size: stat.block_size,
            readonly: stat.readonly,
        })
    }

    fn read(
        &self,
        export: &Export,
        offset: u64,
        len: usize,
    ) -> Result<Box<dyn ReadData>, BackendError> {
        let id = Self::id(export);
        let result = self.timed(NbdOp::Read, || {
            self.engine.volume_read_out(&self.pool, id, offset, len)
        });
        match result {
            Ok(out) => Ok(Box::new(VolumeData(out))),
            Err(e) => Err(backend_error(&e)),
        }
    }

    /// The server's pieces go to the volume as they are: its whole blocks become the
    /// volume's dirty records without a copy (tarn-nbd "Choices").
    fn write(
        &self,
        export: &Export,
        offset: u64,
        pieces: Vec<Vec<u8>>,
        fua: bool,
    ) -> Result<(), BackendError> {
        let id = Self::id(export);
        let result = self.timed(NbdOp::Write, || {
            (self.engine).volume_write_owned(&self.pool, id, offset, pieces, fua)
        });
        result.map_err(|e| backend_error(&e))
    }

    fn zero(&self, export: &Export, offset: u64, len: u64, fua: bool) -> Result<(), BackendError> {
        let id = Self::id(export);
        let result = self.timed(NbdOp::WriteZeroes, || {
            self.engine.volume_zero(&self.pool, id, offset, len, fua)
        });
        result.map_err(|e| backend_error(&e))
    }

    fn flush(&self, export: &Export) -> Result<(), BackendError> {
        let result = self.timed(NbdOp::Flush, || {
            self.engine.volume_flush(&self.pool, Self::id(export))
        });
        result.map_err(|e| backend_error(&e))
    }

    fn extents(
        &self,
        export: &Export,
        offset: u64,
        len: u64,
    ) -> Result<Vec<(u64, bool)>, BackendError> {
        let id = Self::id(export);
        let runs = self.timed(NbdOp::BlockStatus, || {
            self.engine.volume_extents(&self.pool, id, offset, len)
        });
        let runs = runs.map_err(|e| backend_error(&e))?;
        Ok(runs.into_iter().map(|e| (e.len, e.hole)).collect())
    }

    fn connected(&self, export: &Export, up: bool) {
        {
            let mut counts = lock(&self.shared.counts);
            if let Some(entry) = lock(&self.shared.sockets).get_mut(&self.id) {
                entry.1 = up.then(|| (export.name.clone(), export.token));
            }
            let count = counts.entry(export.name.clone()).or_insert(0);
            if up {
                *count += 1;
            } else {
                *count = count.saturating_sub(1);
            }
        }
        // A refresh (destroy, rename, volmode=none) whose `drop_stale` ran between this
        // connection's handshake and the record above did not see it: look once more now
        // that it is recorded (every later refresh sees it). The engine is asked with no
        // lock of ours held, as `drop_stale` does.
        let live =
            |v: &tarn_engine::VolumeStat| v.name == export.name && v.dataset.0 == export.token;
        if up
            && !exposed(&self.engine, &self.pool).iter().any(live)
            && let Some((socket, _)) = lock(&self.shared.sockets).get(&self.id)
        {
            socket.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_values_parse_the_documented_way() {
        let at = |s: &str| listen_address(s).map(|a| a.map(|a| a.to_string()));
        for off in ["", "-", "off", "none"] {
            assert_eq!(at(off), Ok(None), "{off}");
        }
        assert_eq!(at("on"), Ok(Some("127.0.0.1:10809".into())));
        assert_eq!(at("10810"), Ok(Some("127.0.0.1:10810".into())));
        assert_eq!(at("0.0.0.0:7"), Ok(Some("0.0.0.0:7".into())));
        assert_eq!(at("[::1]:7"), Ok(Some("[::1]:7".into())));
        assert_eq!(at("192.0.2.7"), Ok(Some("192.0.2.7:10809".into())));
        for bad in ["nowhere", "70000", "1.2.3.4:x", "on "] {
            assert!(at(bad).is_err(), "{bad}");
        }
    }
}
