//! The daemon side: rundir, pid lock, socket, cache file, and one thread per connection.

use std::io::{BufReader, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tarn_base::Clock;
use tarn_proto::{PongInfo, ReplyPayload, Request, Response, ServerLine};

use crate::lineio::{LineRead, read_line, write_line};
use crate::{
    CACHE_FILE, CONNECTIONS_MAX, DaemonError, Handler, LOG_FILE, Logger, PID_FILE,
    SHUTDOWN_WAIT_SECS, SOCKET_FILE, describe_io,
};

/// Serves the admin protocol for `handler` on `rundir/tarn.sock` until a `Shutdown` request;
/// see the crate block for the files and invariants. Returns after `Handler::shutdown` ran
/// and the socket was removed.
pub fn serve(rundir: &Path, handler: Arc<dyn Handler>) -> Result<(), DaemonError> {
    prepare_rundir(rundir)?;
    let log = Logger::open(&rundir.join(LOG_FILE)).map_err(|source| DaemonError::File {
        what: "open",
        path: rundir.join(LOG_FILE),
        source,
    })?;
    let _pid_lock = lock_pid_file(rundir)?;
    let socket = rundir.join(SOCKET_FILE);
    let listener = bind_socket(&socket)?;
    log.log(&format!(
        "daemon {} listening on {}",
        std::process::id(),
        socket.display()
    ));
    let server = Arc::new(Server {
        handler,
        log,
        rundir: rundir.to_path_buf(),
        socket,
        phase: Mutex::new(Phase {
            stopping: false,
            busy: 0,
            connections: 0,
        }),
        idle: Condvar::new(),
        cache_lock: Mutex::new(()),
    });
    let signals = watch_signals(&server)?;
    server.import_cache();
    notify_service_manager(&server.log, "READY=1");
    server.accept_loop(&listener);
    notify_service_manager(&server.log, "STOPPING=1");
    signals.close();
    drop(listener);
    server.stop();
    // Still under the pid lock: a daemon starting now creates and locks a new file.
    let _ = std::fs::remove_file(rundir.join(PID_FILE));
    Ok(())
}

/// Tells systemd (a `Type=notify` unit: `$NOTIFY_SOCKET`, a datagram socket, `@` for the
/// abstract namespace) the daemon's state: `READY=1` once it serves, with the cached pools
/// imported and mounted, so units ordered after it find them; `STOPPING=1` when it stops.
/// Without the variable (not a service) nothing is sent; a failure is logged, never fatal.
fn notify_service_manager(log: &Logger, state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sent = (|| -> std::io::Result<()> {
        let socket = std::os::unix::net::UnixDatagram::unbound()?;
        let bytes = path.as_encoded_bytes();
        match bytes.strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                socket.send_to_addr(state.as_bytes(), &address)?;
            }
            None => {
                socket.send_to(state.as_bytes(), &path)?;
            }
        }
        Ok(())
    })();
    if let Err(error) = sent {
        log.log(&format!(
            "cannot notify the service manager ({state}): {error}"
        ));
    }
}

/// SIGTERM (systemd's stop, `kill`) and SIGINT (^C) stop the daemon as `daemon --stop`
/// does: requests finish, pools are synced and unmounted, the socket and pid file go.
fn watch_signals(server: &Arc<Server>) -> Result<signal_hook::iterator::Handle, DaemonError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let signal_error = |source| DaemonError::File {
        what: "watch signals of",
        path: server.socket.clone(),
        source,
    };
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).map_err(signal_error)?;
    let handle = signals.handle();
    let waker = Arc::clone(server);
    std::thread::Builder::new()
        .name("tarn-signals".to_string())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                waker.log.log(&format!("signal {signal}: stopping"));
                waker.begin_shutdown();
                // Wakes the accept loop, which sees `stopping` and returns.
                let _ = UnixStream::connect(&waker.socket);
            }
        })
        .map_err(signal_error)?;
    Ok(handle)
}

/// Creates the rundir 0700 and checks that this uid owns it (the socket's privacy rests on
/// it: see "Not here" in the crate block).
fn prepare_rundir(rundir: &Path) -> Result<(), DaemonError> {
    let rundir_error = |source| DaemonError::Rundir {
        path: rundir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(rundir).map_err(rundir_error)?;
    let meta = std::fs::metadata(rundir).map_err(rundir_error)?;
    if let Some(uid) = crate::current_uid()
        && meta.uid() != uid
        && uid != 0
    {
        return Err(DaemonError::RundirOwner {
            path: rundir.to_path_buf(),
            owner: meta.uid(),
            uid,
        });
    }
    std::fs::set_permissions(rundir, std::fs::Permissions::from_mode(0o700)).map_err(rundir_error)
}

/// Takes the exclusive lock of I1 and writes our pid. The returned file must stay open for
/// as long as the daemon runs.
fn lock_pid_file(rundir: &Path) -> Result<std::fs::File, DaemonError> {
    let path = rundir.join(PID_FILE);
    let file_error = |what, source| DaemonError::File {
        what,
        path: path.clone(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|source| file_error("open", source))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let pid = std::fs::read_to_string(&path)
                .unwrap_or_default()
                .trim()
                .to_string();
            return Err(DaemonError::AlreadyRunning {
                rundir: rundir.to_path_buf(),
                pid,
            });
        }
        Err(std::fs::TryLockError::Error(source)) => return Err(file_error("lock", source)),
    }
    file.set_len(0)
        .map_err(|source| file_error("write", source))?;
    file.write_all(format!("{}\n", std::process::id()).as_bytes())
        .map_err(|source| file_error("write", source))?;
    Ok(file)
}

/// Binds the socket, replacing a stale one (safe: under the pid lock no other daemon of this
/// rundir is alive, so whatever is at the path is left over from a crash).
fn bind_socket(socket: &Path) -> Result<UnixListener, DaemonError> {
    let bind_error = |what, source| DaemonError::File {
        what,
        path: socket.to_path_buf(),
        source,
    };
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(bind_error("remove stale socket", source)),
    }
    let listener = UnixListener::bind(socket).map_err(|source| bind_error("bind", source))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|source| bind_error("chmod", source))?;
    Ok(listener)
}

/// Writes the cache file atomically (I2): temp file, fsync, rename, fsync of the directory.
fn write_cache_file(rundir: &Path, entries: &[tarn_proto::CacheEntry]) -> Result<(), DaemonError> {
    let path = rundir.join(CACHE_FILE);
    let temp = rundir.join(format!("{CACHE_FILE}.tmp"));
    let bytes = tarn_proto::encode_cache_file(entries)?;
    let file_error = |what, source| DaemonError::File {
        what,
        path: path.clone(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .map_err(|source| file_error("write", source))?;
    file.write_all(&bytes)
        .map_err(|source| file_error("write", source))?;
    file.sync_all()
        .map_err(|source| file_error("sync", source))?;
    drop(file);
    std::fs::rename(&temp, &path).map_err(|source| file_error("rename", source))?;
    std::fs::File::open(rundir)
        .and_then(|dir| dir.sync_all())
        .map_err(|source| file_error("sync directory of", source))
}

#[derive(Debug)]
struct Phase {
    stopping: bool,
    /// Requests inside the handler (I3).
    busy: usize,
    /// Open connections (bounded by `CONNECTIONS_MAX`).
    connections: usize,
}

struct Server {
    handler: Arc<dyn Handler>,
    log: Logger,
    rundir: PathBuf,
    socket: PathBuf,
    phase: Mutex<Phase>,
    /// Signalled when `busy` drops to zero.
    idle: Condvar,
    /// Serializes cache file rewrites.
    cache_lock: Mutex<()>,
}

/// Releases a counted slot of `Phase` when dropped, also while unwinding from a panicking
/// handler, so that a stopping daemon does not wait for a request that no longer runs.
struct Slot<'a> {
    server: &'a Server,
    request: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut phase = self.server.lock_phase();
        if self.request {
            assert!(phase.busy > 0, "I3: busy count underflow");
            phase.busy -= 1;
            if phase.busy == 0 {
                self.server.idle.notify_all();
            }
        } else {
            assert!(phase.connections > 0, "connection count underflow");
            phase.connections -= 1;
        }
    }
}

impl Server {
    fn lock_phase(&self) -> MutexGuard<'_, Phase> {
        // A poisoned lock only means a thread panicked while counting; the counts are still
        // consistent because every update is a single statement.
        self.phase
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn import_cache(&self) {
        let path = self.rundir.join(CACHE_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return,
            Err(error) => {
                self.log.log(&format!(
                    "cannot read {}: {}",
                    path.display(),
                    describe_io(&error)
                ));
                return;
            }
        };
        let entries = match tarn_proto::decode_cache_file(&bytes) {
            Ok(entries) => entries,
            Err(error) => {
                let bad = self.rundir.join(format!("{CACHE_FILE}.bad"));
                let kept = std::fs::rename(&path, &bad).is_ok();
                self.log.log(&format!(
                    "cannot decode {}: {error}; {}",
                    path.display(),
                    if kept {
                        "kept aside as tarn.cache.bad"
                    } else {
                        "left in place"
                    }
                ));
                return;
            }
        };
        for entry in &entries {
            match self.handler.import_cached(entry) {
                Ok(()) => self
                    .log
                    .log(&format!("imported '{}' from cache", entry.name)),
                Err(message) => self.log.log(&format!(
                    "cannot import '{}' (guid {}) from cache: {message}",
                    entry.name, entry.guid
                )),
            }
        }
    }

    fn accept_loop(self: &Arc<Self>, listener: &UnixListener) {
        for stream in listener.incoming() {
            if self.lock_phase().stopping {
                break;
            }
            let mut stream = match stream {
                Ok(stream) => stream,
                Err(error) => {
                    self.log
                        .log(&format!("accept failed: {}", describe_io(&error)));
                    continue;
                }
            };
            {
                let mut phase = self.lock_phase();
                if phase.connections >= CONNECTIONS_MAX {
                    drop(phase);
                    let refusal = Response::error(format!(
                        "too many connections to the daemon (limit {CONNECTIONS_MAX})"
                    ));
                    let _ = send(&mut stream, &ServerLine::Response(refusal));
                    continue;
                }
                phase.connections += 1;
            }
            let server = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("tarn-connection".to_string())
                .spawn(move || server.serve_connection(stream));
            if let Err(error) = spawned {
                // The closure (and its stream) is gone, so the slot is released here.
                self.lock_phase().connections -= 1;
                self.log.log(&format!(
                    "cannot start connection thread: {}",
                    describe_io(&error)
                ));
            }
        }
    }

    fn serve_connection(&self, stream: UnixStream) {
        let _slot = Slot {
            server: self,
            request: false,
        };
        let Ok(mut writer) = stream.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(stream);
        loop {
            let line = match read_line(&mut reader) {
                Ok(LineRead::Line(line)) => line,
                Ok(LineRead::Eof) | Err(_) => return,
                Ok(LineRead::TooLong) => {
                    let message = format!(
                        "request longer than {} bytes refused",
                        tarn_proto::MAX_LINE_BYTES
                    );
                    let _ = send(&mut writer, &ServerLine::Response(Response::error(message)));
                    return;
                }
            };
            let (response, shutdown) = match tarn_proto::decode_request(&line) {
                Err(error) => {
                    self.log.log(&format!("malformed request refused: {error}"));
                    (Response::error(error.to_string()), false)
                }
                Ok(Request::Shutdown) => (self.begin_shutdown(), true),
                Ok(request) if request.wants_stream() => (
                    self.dispatch_stream(request, reader.get_ref(), &mut writer),
                    false,
                ),
                Ok(request) => (self.dispatch(request, &mut writer), false),
            };
            if send(&mut writer, &ServerLine::Response(response)).is_err() {
                self.log.log("client went away before its response");
            }
            if shutdown {
                // Wakes the accept loop, which sees `stopping` and returns.
                let _ = UnixStream::connect(&self.socket);
                return;
            }
        }
    }

    fn begin_shutdown(&self) -> Response {
        self.lock_phase().stopping = true;
        self.log.log("shutdown requested");
        Response::Ok(ReplyPayload::Unit)
    }

    fn dispatch(&self, request: Request, writer: &mut UnixStream) -> Response {
        if request == Request::Ping {
            let version = env!("CARGO_PKG_VERSION").to_string();
            return Response::Ok(ReplyPayload::Pong(PongInfo {
                pid: std::process::id(),
                version,
            }));
        }
        let Some(_slot) = self.request_slot() else {
            return Response::error("the daemon is shutting down");
        };
        let verb = request.verb();
        let changes_pool_set = request.changes_pool_set();
        let mut progress = |progress| {
            // A client that went away only loses its progress lines; the work goes on.
            let _ = send(writer, &ServerLine::Progress(progress));
        };
        let response = self.handler.handle_with_progress(request, &mut progress);
        match &response {
            Response::Ok(_) if changes_pool_set => self.log.log(&format!("{verb}: ok")),
            Response::Ok(_) => {}
            Response::Error(error) => self.log.log(&format!("{verb}: {}", error.message)),
        }
        if changes_pool_set {
            self.rewrite_cache();
        }
        response
    }

    /// A slot for one request (counted busy until dropped); `None` once the daemon stops.
    fn request_slot(&self) -> Option<Slot<'_>> {
        let mut phase = self.lock_phase();
        if phase.stopping {
            return None;
        }
        phase.busy += 1;
        Some(Slot {
            server: self,
            request: true,
        })
    }

    /// A request with a stream: asks for the client's descriptor, then serves it.
    fn dispatch_stream(
        &self,
        request: Request,
        socket: &UnixStream,
        writer: &mut UnixStream,
    ) -> Response {
        if let Err(error) = send(writer, &ServerLine::StreamWanted) {
            return Response::error(format!("cannot ask for the stream: {error}"));
        }
        let stream = match crate::passfd::receive_fd(socket) {
            Ok(fd) => fd,
            Err(error) => return Response::error(format!("no stream from the client: {error}")),
        };
        let Some(_slot) = self.request_slot() else {
            return Response::error("the daemon is shutting down");
        };
        let verb = request.verb();
        let mut progress = |progress| {
            let _ = send(writer, &ServerLine::Progress(progress));
        };
        let response = self.handler.handle_stream(request, stream, &mut progress);
        if let Response::Error(error) = &response {
            self.log.log(&format!("{verb}: {}", error.message));
        }
        response
    }

    fn rewrite_cache(&self) {
        let _guard = self
            .cache_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entries = self.handler.cache_entries();
        if let Err(error) = write_cache_file(&self.rundir, &entries) {
            self.log.log(&format!("cache file not updated: {error}"));
        }
    }

    /// I3: waits (bounded) for requests in the handler, then shuts the handler down.
    fn stop(&self) {
        let clock = tarn_base::SystemClock::new();
        let deadline_ns = SHUTDOWN_WAIT_SECS * 1_000_000_000;
        let mut phase = self.lock_phase();
        assert!(phase.stopping, "I3: stop without a shutdown request");
        while phase.busy > 0 && clock.monotonic_ns() < deadline_ns {
            phase = self
                .idle
                .wait_timeout(phase, Duration::from_millis(100))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        let busy = phase.busy;
        drop(phase);
        if busy > 0 {
            self.log
                .log(&format!("{busy} request(s) still running at shutdown"));
        }
        // The cache file is already current (I2); it is not rewritten here because closed
        // pools must stay in it for the next start.
        self.handler.shutdown();
        let _ = std::fs::remove_file(&self.socket);
        self.log.log("daemon stopped");
    }
}

fn send(writer: &mut UnixStream, line: &ServerLine) -> std::io::Result<()> {
    let bytes = match tarn_proto::encode_server_line(line) {
        Ok(bytes) => bytes,
        // An oversized reply is replaced by an error so that I4 (one final line) holds.
        Err(error) => tarn_proto::encode_server_line(&ServerLine::Response(Response::error(
            format!("reply not sent: {error}"),
        )))
        .map_err(std::io::Error::other)?,
    };
    write_line(writer, &bytes)
}
