//! The CLI's side of the socket: connect, start the daemon on demand, send requests.

use std::io::BufReader;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tarn_base::Clock;
use tarn_proto::{Progress, Request, Response, ServerLine};

use crate::lineio::{LineRead, read_line, write_line};
use crate::{DaemonError, LOG_FILE, SOCKET_FILE, START_WAIT_SECS};

/// After an autostarted daemon exited, how long to keep trying the socket: a daemon started
/// by a concurrent CLI may be the one that answers (ours lost the pid lock to it).
const AFTER_EXIT_WAIT_MS: u64 = 1_000;
/// Interval between connection attempts while a daemon starts.
const POLL_MS: u64 = 20;

/// One connection to the daemon; requests on it are served one after the other.
#[derive(Debug)]
pub struct Client {
    socket: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    /// Connects to the daemon of `rundir`; fails if none is listening.
    pub fn connect(rundir: &Path) -> Result<Client, DaemonError> {
        let socket = rundir.join(SOCKET_FILE);
        let stream = UnixStream::connect(&socket).map_err(|source| DaemonError::Connect {
            socket: socket.clone(),
            source,
        })?;
        Client::from_stream(socket, stream)
    }

    /// Connects to the daemon of `rundir`, starting `tarn --rundir DIR daemon` (this very
    /// executable) when the socket is absent or refuses.
    pub fn connect_or_start(rundir: &Path) -> Result<Client, DaemonError> {
        let socket = rundir.join(SOCKET_FILE);
        let program = std::env::current_exe().map_err(|source| DaemonError::Start {
            socket,
            reason: format!(
                "cannot find the tarn executable: {}",
                crate::describe_io(&source)
            ),
        })?;
        Client::connect_or_start_with(rundir, &program)
    }

    /// As `connect_or_start`, with the program to start given (`program --rundir DIR daemon`).
    pub fn connect_or_start_with(rundir: &Path, program: &Path) -> Result<Client, DaemonError> {
        match Client::connect(rundir) {
            Ok(client) => return Ok(client),
            Err(DaemonError::Connect { source, .. }) if is_absent(&source) => {}
            Err(error) => return Err(error),
        }
        let rundir = std::path::absolute(rundir).map_err(|source| DaemonError::Rundir {
            path: rundir.to_path_buf(),
            source,
        })?;
        let socket = rundir.join(SOCKET_FILE);
        let mut child = spawn_daemon(&rundir, program)?;
        let clock = tarn_base::SystemClock::new();
        let mut deadline_ns = START_WAIT_SECS * 1_000_000_000;
        let mut exit_status = None;
        loop {
            match UnixStream::connect(&socket) {
                Ok(stream) => return Client::from_stream(socket, stream),
                Err(source) if !is_absent(&source) => {
                    return Err(DaemonError::Connect { socket, source });
                }
                Err(_) => {}
            }
            if exit_status.is_none()
                && let Ok(Some(status)) = child.try_wait()
            {
                exit_status = Some(status);
                let grace_ns = clock.monotonic_ns() + AFTER_EXIT_WAIT_MS * 1_000_000;
                deadline_ns = deadline_ns.min(grace_ns);
            }
            if clock.monotonic_ns() >= deadline_ns {
                let log = rundir.join(LOG_FILE);
                let reason = match exit_status {
                    Some(status) => format!(
                        "the daemon started for it exited ({status}); see {}",
                        log.display()
                    ),
                    None => format!(
                        "the daemon started for it did not listen within {START_WAIT_SECS} s; \
                         see {}",
                        log.display()
                    ),
                };
                return Err(DaemonError::Start { socket, reason });
            }
            std::thread::sleep(Duration::from_millis(POLL_MS));
        }
    }

    fn from_stream(socket: PathBuf, stream: UnixStream) -> Result<Client, DaemonError> {
        let writer = stream
            .try_clone()
            .map_err(|source| DaemonError::Connection {
                socket: socket.clone(),
                source,
            })?;
        Ok(Client {
            socket,
            reader: BufReader::new(stream),
            writer,
        })
    }

    /// Path of the socket this client is connected to.
    #[must_use]
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Sends `request` and waits for its final response, passing progress lines to
    /// `on_progress` as they arrive.
    pub fn call(
        &mut self,
        request: &Request,
        on_progress: impl FnMut(Progress),
    ) -> Result<Response, DaemonError> {
        self.call_with_stream(request, None, on_progress)
    }

    /// [`Client::call`] of a request that carries a stream: `stream` (stdout for `send`,
    /// stdin for `receive`) is passed to the daemon when it asks (crate block, "Streams").
    pub fn call_with_stream(
        &mut self,
        request: &Request,
        stream: Option<std::os::fd::BorrowedFd<'_>>,
        mut on_progress: impl FnMut(Progress),
    ) -> Result<Response, DaemonError> {
        let line = tarn_proto::encode_request(request)?;
        write_line(&mut self.writer, &line).map_err(|source| self.connection_error(source))?;
        loop {
            let line = match read_line(&mut self.reader) {
                Ok(LineRead::Line(line)) => line,
                Ok(LineRead::Eof) => {
                    return Err(DaemonError::Closed {
                        socket: self.socket.clone(),
                    });
                }
                Ok(LineRead::TooLong) => {
                    return Err(DaemonError::Protocol {
                        source: tarn_proto::ProtoError::TooLong {
                            len: tarn_proto::MAX_LINE_BYTES,
                            max: tarn_proto::MAX_LINE_BYTES,
                        },
                    });
                }
                Err(source) => return Err(self.connection_error(source)),
            };
            match tarn_proto::decode_server_line(&line)? {
                ServerLine::Progress(progress) => on_progress(progress),
                ServerLine::Response(response) => return Ok(response),
                ServerLine::StreamWanted => match stream {
                    Some(fd) => crate::passfd::send_fd(&self.writer, fd)
                        .map_err(|source| self.connection_error(source))?,
                    None => {
                        return Err(self.connection_error(std::io::Error::other(
                            "the daemon asked for a stream this request does not carry",
                        )));
                    }
                },
            }
        }
    }

    fn connection_error(&self, source: std::io::Error) -> DaemonError {
        DaemonError::Connection {
            socket: self.socket.clone(),
            source,
        }
    }
}

/// Waits up to `timeout_secs` for the daemon of `rundir` to exit, which is when its pid lock
/// (I1) is free; true if it is. Used by `tarn daemon --stop` so that it returns only after
/// pools were closed.
#[must_use]
pub fn wait_stopped(rundir: &Path, timeout_secs: u64) -> bool {
    let path = rundir.join(crate::PID_FILE);
    let clock = tarn_base::SystemClock::new();
    loop {
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return true,
            Err(_) => return false,
        };
        // Taking the lock proves no daemon holds it; it is released when `file` drops.
        if file.try_lock().is_ok() {
            return true;
        }
        if clock.monotonic_ns() >= timeout_secs * 1_000_000_000 {
            return false;
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// Whether a connect error means "no daemon there" (start one) rather than a real problem.
fn is_absent(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
    )
}

/// Starts `program --rundir DIR daemon` in its own process group (so the terminal's ^C does
/// not reach it), with stdin from /dev/null, stdout and stderr appended to the log and `/`
/// as its working directory (so it pins no file system the CLI happened to be in).
fn spawn_daemon(rundir: &Path, program: &Path) -> Result<std::process::Child, DaemonError> {
    let rundir_error = |source| DaemonError::Rundir {
        path: rundir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(rundir).map_err(rundir_error)?;
    std::fs::set_permissions(rundir, std::fs::Permissions::from_mode(0o700))
        .map_err(rundir_error)?;
    let log_path = rundir.join(LOG_FILE);
    let log_error = |source| DaemonError::File {
        what: "open",
        path: log_path.clone(),
        source,
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log_path)
        .map_err(log_error)?;
    let log_err = log.try_clone().map_err(log_error)?;
    Command::new(program)
        .arg("--rundir")
        .arg(rundir)
        .arg("daemon")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .current_dir("/")
        .process_group(0)
        .spawn()
        .map_err(|source| DaemonError::Start {
            socket: rundir.join(SOCKET_FILE),
            reason: format!(
                "cannot start {}: {}",
                program.display(),
                crate::describe_io(&source)
            ),
        })
}
