//! Goal: the daemon's contract end to end, in process: a test `Handler` behind `serve` on a
//! temporary rundir in a thread, reached through `Client`. Method: each test starts its own
//! daemon, talks to it over the real socket, and stops it with a `Shutdown` request.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tarn_daemon::{CACHE_FILE, Client, DaemonError, Handler, SOCKET_FILE, serve};
use tarn_proto::{CacheEntry, PoolListRow, Progress, ReplyPayload, Request, Response, ServerLine};

/// Remembers pools by name; `PoolImportList` reports three progress steps.
#[derive(Default)]
struct TestHandler {
    pools: Mutex<Vec<CacheEntry>>,
    imported_from_cache: Mutex<Vec<String>>,
    shutdowns: Mutex<u32>,
}

impl Handler for TestHandler {
    fn handle(&self, request: Request) -> Response {
        let mut pools = self.pools.lock().expect("lock");
        match request {
            Request::PoolCreate(create) => {
                if pools.iter().any(|p| p.name == create.name) {
                    return Response::error(format!("pool '{}' already exists", create.name));
                }
                let devices = create
                    .vdevs
                    .iter()
                    .flat_map(|v| v.devices.clone())
                    .collect();
                let guid = pools.len() as u64 + 100;
                pools.push(CacheEntry {
                    name: create.name,
                    guid,
                    devices,
                });
                Response::Ok(ReplyPayload::Unit)
            }
            Request::PoolExport { name, .. } => {
                let before = pools.len();
                pools.retain(|p| p.name != name);
                if pools.len() == before {
                    return Response::error("no such pool");
                }
                Response::Ok(ReplyPayload::Unit)
            }
            Request::PoolList { .. } => Response::Ok(ReplyPayload::PoolList(
                pools
                    .iter()
                    .map(|p| PoolListRow {
                        name: p.name.clone(),
                        size: 1 << 30,
                        alloc: 0,
                        free: 1 << 30,
                        checkpoint: None,
                        expandsize: None,
                        frag: Some(0),
                        cap: 0,
                        dedup_hundredths: 100,
                        health: "ONLINE".into(),
                        altroot: None,
                        guid: p.guid,
                    })
                    .collect(),
            )),
            _ => Response::error("not supported by the test handler"),
        }
    }

    fn handle_with_progress(
        &self,
        request: Request,
        progress: &mut dyn FnMut(Progress),
    ) -> Response {
        if let Request::PoolImportList { .. } = request {
            for done in 1..=3 {
                progress(Progress {
                    operation: "scan".into(),
                    done,
                    total: 3,
                });
            }
            return Response::Ok(ReplyPayload::Importable(vec![]));
        }
        self.handle(request)
    }

    fn cache_entries(&self) -> Vec<CacheEntry> {
        self.pools.lock().expect("lock").clone()
    }

    fn import_cached(&self, entry: &CacheEntry) -> Result<(), String> {
        if entry.name == "broken" {
            return Err("devices missing".into());
        }
        self.imported_from_cache
            .lock()
            .expect("lock")
            .push(entry.name.clone());
        self.pools.lock().expect("lock").push(entry.clone());
        Ok(())
    }

    fn shutdown(&self) {
        *self.shutdowns.lock().expect("lock") += 1;
    }
}

struct Daemon {
    rundir: PathBuf,
    handler: Arc<TestHandler>,
    thread: Option<JoinHandle<Result<(), DaemonError>>>,
}

impl Daemon {
    fn start(rundir: &Path) -> Daemon {
        Daemon::start_with(rundir, Arc::new(TestHandler::default()))
    }

    fn start_with(rundir: &Path, handler: Arc<TestHandler>) -> Daemon {
        let dir = rundir.to_path_buf();
        let shared: Arc<dyn Handler> = handler.clone();
        let thread = std::thread::spawn(move || serve(&dir, shared));
        for _ in 0..500 {
            if let Ok(mut client) = Client::connect(rundir) {
                let pong = client.call(&Request::Ping, |_| {}).expect("ping");
                assert!(
                    matches!(pong, Response::Ok(ReplyPayload::Pong(_))),
                    "{pong:?}"
                );
                return Daemon {
                    rundir: rundir.to_path_buf(),
                    handler,
                    thread: Some(thread),
                };
            }
            assert!(
                !thread.is_finished(),
                "daemon exited early: {:?}",
                thread.join()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("daemon did not listen on {}", rundir.display());
    }

    fn client(&self) -> Client {
        Client::connect(&self.rundir).expect("connect")
    }

    fn stop(mut self) {
        let reply = self
            .client()
            .call(&Request::Shutdown, |_| {})
            .expect("shutdown");
        assert_eq!(reply, Response::Ok(ReplyPayload::Unit));
        let thread = self.thread.take().expect("running");
        thread
            .join()
            .expect("daemon thread")
            .expect("serve returns Ok");
        assert!(
            !self.rundir.join(SOCKET_FILE).exists(),
            "socket removed on clean exit"
        );
        assert_eq!(*self.handler.shutdowns.lock().expect("lock"), 1);
    }
}

fn create(name: &str) -> Request {
    Request::PoolCreate(tarn_proto::PoolCreate {
        name: name.into(),
        vdevs: vec![tarn_proto::VdevGroupSpec {
            role: tarn_proto::VdevRole::Data,
            kind: tarn_proto::VdevKind::Disk,
            devices: vec![format!("/dev/{name}0")],
        }],
        properties: vec![],
        fs_properties: vec![],
        mountpoint: None,
        force: false,
        dry_run: false,
    })
}

fn cached_names(rundir: &Path) -> Vec<String> {
    let bytes = std::fs::read(rundir.join(CACHE_FILE)).expect("cache file");
    tarn_proto::decode_cache_file(&bytes)
        .expect("decodes")
        .into_iter()
        .map(|e| e.name)
        .collect()
}

#[test]
fn requests_round_trip_on_one_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(dir.path());
    let mut client = daemon.client();
    assert_eq!(
        client.call(&create("tank"), |_| {}).expect("call"),
        Response::Ok(ReplyPayload::Unit)
    );
    let reply = client
        .call(&Request::PoolList { names: vec![] }, |_| {})
        .expect("call");
    let Response::Ok(ReplyPayload::PoolList(rows)) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(
        rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        ["tank"]
    );
    let reply = client.call(&create("tank"), |_| {}).expect("call");
    assert_eq!(reply, Response::error("pool 'tank' already exists"));
    drop(client);
    daemon.stop();
}

#[test]
fn rundir_and_socket_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let rundir = dir.path().join("run");
    let daemon = Daemon::start(&rundir);
    let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&rundir), 0o700);
    assert_eq!(mode(&rundir.join(SOCKET_FILE)), 0o600);
    let pid = std::fs::read_to_string(rundir.join(tarn_daemon::PID_FILE)).expect("pid file");
    assert_eq!(pid.trim(), std::process::id().to_string());
    daemon.stop();
}

#[test]
fn progress_lines_reach_the_client_before_the_response() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(dir.path());
    let mut seen = Vec::new();
    let reply = daemon
        .client()
        .call(&Request::PoolImportList { dirs: vec![] }, |p| {
            seen.push(p.done)
        })
        .expect("call");
    assert_eq!(reply, Response::Ok(ReplyPayload::Importable(vec![])));
    assert_eq!(seen, [1, 2, 3]);
    daemon.stop();
}

#[test]
fn cache_file_follows_create_and_export() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(dir.path());
    assert!(
        !dir.path().join(CACHE_FILE).exists(),
        "no cache before any pool change"
    );
    let mut client = daemon.client();
    client.call(&create("tank"), |_| {}).expect("call");
    client.call(&create("data"), |_| {}).expect("call");
    assert_eq!(cached_names(dir.path()), ["tank", "data"]);
    let export = Request::PoolExport {
        name: "tank".into(),
        force: false,
    };
    assert_eq!(
        client.call(&export, |_| {}).expect("call"),
        Response::Ok(ReplyPayload::Unit)
    );
    assert_eq!(cached_names(dir.path()), ["data"]);
    assert!(
        !dir.path().join(format!("{CACHE_FILE}.tmp")).exists(),
        "temp file renamed away"
    );
    drop(client);
    daemon.stop();
    // Goal: a clean stop keeps the pools in the cache (they are re-imported next start).
    assert_eq!(cached_names(dir.path()), ["data"]);
}

#[test]
fn cached_pools_are_reimported_at_start_and_failures_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let entries = vec![
        CacheEntry {
            name: "broken".into(),
            guid: 1,
            devices: vec![],
        },
        CacheEntry {
            name: "tank".into(),
            guid: 2,
            devices: vec!["/d/a".into()],
        },
    ];
    let bytes = tarn_proto::encode_cache_file(&entries).expect("encode");
    std::fs::write(dir.path().join(CACHE_FILE), bytes).expect("write cache");
    let daemon = Daemon::start(dir.path());
    assert_eq!(
        *daemon.handler.imported_from_cache.lock().expect("lock"),
        ["tank"]
    );
    let log = std::fs::read_to_string(dir.path().join(tarn_daemon::LOG_FILE)).expect("log");
    assert!(
        log.contains("cannot import 'broken' (guid 1) from cache: devices missing"),
        "{log}"
    );
    daemon.stop();
}

#[test]
fn corrupt_cache_file_is_kept_aside() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join(CACHE_FILE), b"{not json").expect("write cache");
    let daemon = Daemon::start(dir.path());
    assert!(dir.path().join(format!("{CACHE_FILE}.bad")).exists());
    assert!(
        daemon
            .handler
            .imported_from_cache
            .lock()
            .expect("lock")
            .is_empty()
    );
    daemon.stop();
}

#[test]
fn second_daemon_on_the_same_rundir_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(dir.path());
    let second = serve(dir.path(), Arc::new(TestHandler::default()));
    match second {
        Err(error @ DaemonError::AlreadyRunning { .. }) => assert_eq!(
            error.to_string(),
            format!(
                "a tarn daemon is already running for {} (pid {})",
                dir.path().display(),
                std::process::id()
            )
        ),
        other => panic!("second daemon: {other:?}"),
    }
    // The refused daemon left the running one's socket alone.
    let reply = daemon.client().call(&Request::Ping, |_| {}).expect("ping");
    assert!(matches!(reply, Response::Ok(ReplyPayload::Pong(_))));
    daemon.stop();
}

#[test]
fn stale_socket_is_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A socket left by a crashed daemon: bound, then its listener dropped.
    let stale = std::os::unix::net::UnixListener::bind(dir.path().join(SOCKET_FILE)).expect("bind");
    drop(stale);
    assert!(matches!(
        Client::connect(dir.path()),
        Err(DaemonError::Connect { .. })
    ));
    let daemon = Daemon::start(dir.path());
    daemon.stop();
}

#[test]
fn malformed_lines_get_an_error_and_the_connection_survives() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(dir.path());
    let mut stream =
        std::os::unix::net::UnixStream::connect(dir.path().join(SOCKET_FILE)).expect("connect");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut answer = |stream: &mut std::os::unix::net::UnixStream, line: &[u8]| {
        stream.write_all(line).expect("write");
        let mut reply = String::new();
        reader.read_line(&mut reply).expect("read");
        tarn_proto::decode_server_line(reply.as_bytes()).expect("reply decodes")
    };
    for bad in [&b"{garbage\n"[..], b"\"no_such_request\"\n", b"\xff\xfe\n"] {
        let reply = answer(&mut stream, bad);
        let ServerLine::Response(Response::Error(error)) = reply else {
            panic!("{reply:?}")
        };
        assert!(
            error.message.starts_with("malformed message: "),
            "{}",
            error.message
        );
    }
    let reply = answer(&mut stream, b"\"ping\"\n");
    assert!(matches!(
        reply,
        ServerLine::Response(Response::Ok(ReplyPayload::Pong(_)))
    ));
    drop(stream);
    daemon.stop();
}

#[test]
fn over_long_line_is_refused_with_an_error() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(dir.path());
    let stream =
        std::os::unix::net::UnixStream::connect(dir.path().join(SOCKET_FILE)).expect("connect");
    let mut writer = stream.try_clone().expect("clone");
    let sender = std::thread::spawn(move || {
        // The daemon stops reading after the limit, so the rest of the write may fail.
        let _ = writer.write_all(&vec![b'x'; tarn_proto::MAX_LINE_BYTES + 1]);
    });
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply).expect("read");
    let reply = tarn_proto::decode_server_line(reply.as_bytes()).expect("decodes");
    let ServerLine::Response(Response::Error(error)) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(error.message, "request longer than 16777216 bytes refused");
    sender.join().expect("sender");
    daemon.stop();
}

#[test]
fn autostart_failure_is_reported_with_the_log() {
    // Goal: when the started program exits without listening, the client says so promptly
    // (well before START_WAIT_SECS) and names the log. Method: `/bin/false` as the daemon.
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = tarn_base::SystemClock::new();
    let error = Client::connect_or_start_with(dir.path(), Path::new("/bin/false"))
        .expect_err("nothing listens");
    let elapsed_ms = tarn_base::Clock::monotonic_ns(&clock) / 1_000_000;
    assert!(elapsed_ms < 5_000, "took {elapsed_ms} ms");
    let text = error.to_string();
    let socket = dir.path().join(SOCKET_FILE);
    assert!(
        text.starts_with(&format!(
            "cannot connect to tarn daemon at {}: ",
            socket.display()
        )),
        "{text}"
    );
    assert!(text.contains("daemon.log"), "{text}");
}

#[test]
fn requests_after_shutdown_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(dir.path());
    let mut idle = daemon.client();
    idle.call(&Request::Ping, |_| {}).expect("ping");
    daemon.stop();
    assert!(
        tarn_daemon::wait_stopped(dir.path(), 1),
        "pid lock released after serve returned"
    );
    let reply = idle
        .call(&Request::PoolList { names: vec![] }, |_| {})
        .expect("call");
    assert_eq!(reply, Response::error("the daemon is shutting down"));
}
