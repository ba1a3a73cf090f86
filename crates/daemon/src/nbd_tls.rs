//! NBD over TLS on a TCP listener (module `nbd`): the volumes' user properties (inherited,
//! part of a listener's settings) [`TLS_PROPERTY`] (`org.tarn:nbd_tls`: `off`, the default;
//! `on`, offered; `require`), [`CERTIFICATES_PROPERTY`] (`org.tarn:nbd_tls_certificates`: a
//! directory holding `server-cert.pem`, the chain, and `server-key.pem`, its key, as
//! nbdkit's and qemu's `--tls-certificates`/`tls-creds-x509` directories) and
//! [`VERIFY_PROPERTY`] (`org.tarn:nbd_tls_verify`: `none`, the default, or `require`: a
//! client must present a certificate that chains to `ca-cert.pem` in that directory, as
//! nbdkit's `--tls-verify-peer` and qemu's `verify-peer=on`; one without is refused in the
//! TLS handshake, before it sees any export) decide. `require` is refused unless
//! `nbd_tls=require` too: a client that could stay in the clear would need no certificate.
//! With `require`, two more checks narrow who gets in, both in the handshake:
//! - revocation: `ca-crl.pem` in the certificate directory, when present, holds the CA's
//!   certificate revocation lists (PEM, as `openssl ca -gencrl` writes them; the file name
//!   nbdkit's and qemu's certificate directories use). A revoked client certificate is
//!   refused, and so is one whose status no list can tell (the CA issued no list). A file
//!   that is not a usable list keeps the listener from starting, with the reason;
//! - the allow-list [`CLIENTS_PROPERTY`] (`org.tarn:nbd_tls_clients`: `none`, the default,
//!   admits any certificate the CA signed; else a comma-separated list of client names,
//!   DNS names or IP addresses): the client's certificate must carry one of them in its
//!   subjectAltName (webpki's name matching, as a server's name is checked). It needs
//!   `nbd_tls_verify=require`.
//!
//! Both are read when a listener starts: a listener starts again when any of its
//! properties changes (or the daemon restarts), so a new `ca-crl.pem` takes effect after,
//! for example, `tarn set org.tarn:nbd_tls_certificates=DIR` again.
//! rustls (ring provider, webpki client verifier) does the TLS.
//!
//! ```text
//!  TCP ── serve_tls(Offered|Required) in the clear ── STARTTLS ACK ── TLS handshake
//!      ── pump: net thread (TCP -> decrypt -> pair) + plain thread (pair -> encrypt -> TCP)
//!      ── Unix socket pair ── serve_tls(Established) ── the volume
//! ```
//! The server side of tarn-nbd needs a reader and a writer usable from two threads at once;
//! one rustls connection is one object, so two pump threads share it under a lock and hand
//! the plaintext to tarn-nbd through a socket pair. Invariant: bytes go to TCP only while
//! the writer holds the TCP write lock, which it takes before it lets go of the connection
//! lock, so TLS records leave in the order rustls made them; no thread blocks on a socket
//! while holding the connection lock (a full TCP buffer never stops decryption).
//!
//! Failure model: bad certificate files make the listener refuse to start (the daemon says
//! why on stderr; `require` never falls back to the clear); a failed or slow handshake
//! (over [`HANDSHAKE_TIMEOUT`]) ends that connection only; any end of either side ends
//! both. Not here: PSK (nbdkit's `--tls-psk`), OCSP, lists fetched from a CRL
//! distribution point, and names matched in the subject's common name (subjectAltName
//! only, as webpki checks a server's).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName, UnixTime,
};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ParsedCertificate, VerifierBuilderError, WebPkiClientVerifier};
use rustls::{
    CertRevocationListError, CertificateError, DigitallySignedStruct, DistinguishedName,
    RootCertStore, ServerConfig, ServerConnection, SignatureScheme,
};
use tarn_nbd::{Backend, ServeError, Served, Tls};

/// The user property that offers or requires TLS on a TCP listener.
pub const TLS_PROPERTY: &str = "org.tarn:nbd_tls";
/// The user property naming the certificate directory.
pub const CERTIFICATES_PROPERTY: &str = "org.tarn:nbd_tls_certificates";
/// The user property that requires clients to present a certificate the CA signed.
pub const VERIFY_PROPERTY: &str = "org.tarn:nbd_tls_verify";
/// The user property listing the client names admitted (module doc).
pub const CLIENTS_PROPERTY: &str = "org.tarn:nbd_tls_clients";
/// The certificate revocation lists in the certificate directory (module doc).
const CRL_FILE: &str = "ca-crl.pem";
/// Longest a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes moved per pump step.
const CHUNK: usize = 256 << 10;

/// A TCP listener's TLS: the policy and, unless it is off, the server's certificate.
#[derive(Clone)]
pub(crate) struct TlsSetup {
    pub(crate) policy: Tls,
    config: Option<Arc<ServerConfig>>,
}

impl TlsSetup {
    /// The setup the property values ask for (`-` for unset), or why it cannot be had.
    pub(crate) fn from_properties(
        tls: &str,
        certificates: &str,
        verify: &str,
        clients: &str,
    ) -> Result<TlsSetup, String> {
        let verify_peer = match verify {
            "-" | "" | "none" => false,
            "require" => true,
            other => return Err(format!("{VERIFY_PROPERTY}={other} is not none or require")),
        };
        let allowed = allowed_names(clients)?;
        if allowed.is_some() && !verify_peer {
            return Err(format!(
                "{CLIENTS_PROPERTY}={clients} needs {VERIFY_PROPERTY}=require (a client \
                 without a certificate has no name to check)"
            ));
        }
        if verify_peer && tls != "require" {
            return Err(format!(
                "{VERIFY_PROPERTY}=require needs {TLS_PROPERTY}=require (a client in the \
                 clear would need no certificate)"
            ));
        }
        let policy = match tls {
            "-" | "" | "off" => {
                return Ok(TlsSetup {
                    policy: Tls::Off,
                    config: None,
                });
            }
            "on" => Tls::Offered,
            "require" => Tls::Required,
            other => return Err(format!("{TLS_PROPERTY}={other} is not off, on or require")),
        };
        if matches!(certificates, "-" | "") {
            return Err(format!(
                "{TLS_PROPERTY}={tls} needs {CERTIFICATES_PROPERTY}=DIR"
            ));
        }
        let peers = verify_peer.then_some(allowed);
        let config = server_config(Path::new(certificates), peers)?;
        Ok(TlsSetup {
            policy,
            config: Some(config),
        })
    }
}

/// The names of [`CLIENTS_PROPERTY`]'s value: `None` for any client (`none`, unset).
fn allowed_names(value: &str) -> Result<Option<Vec<ServerName<'static>>>, String> {
    if matches!(value, "-" | "" | "none") {
        return Ok(None);
    }
    value
        .split(',')
        .map(|name| {
            ServerName::try_from(name.trim().to_string()).map_err(|_| {
                format!(
                    "{CLIENTS_PROPERTY}: '{name}' is not a DNS name or an IP address (valid: \
                     none, or names separated by commas)"
                )
            })
        })
        .collect::<Result<Vec<_>, String>>()
        .map(Some)
}

/// The server's TLS configuration from `dir`/server-cert.pem and `dir`/server-key.pem.
/// With `peers` (`nbd_tls_verify=require`), clients must present a certificate chaining to
/// `dir`/ca-cert.pem, not revoked, and naming one of the allowed names if it has them.
fn server_config(
    dir: &Path,
    peers: Option<Option<Vec<ServerName<'static>>>>,
) -> Result<Arc<ServerConfig>, String> {
    let cert_path = dir.join("server-cert.pem");
    let key_path = dir.join("server-key.pem");
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .and_then(Iterator::collect)
        .map_err(|e| format!("{}: {e}", cert_path.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate", cert_path.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| format!("{}: {e}", key_path.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let clients = match peers {
        None => WebPkiClientVerifier::no_client_auth(),
        Some(None) => client_verifier(dir, &provider)?,
        Some(Some(names)) => Arc::new(AllowList {
            inner: client_verifier(dir, &provider)?,
            names,
        }),
    };
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(clients)
        .with_single_cert(chain, key)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(Arc::new(config))
}

/// The verifier that accepts only client certificates chaining to `dir`/ca-cert.pem.
fn client_verifier(
    dir: &Path,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, String> {
    let ca_path = dir.join("ca-cert.pem");
    let cas: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&ca_path)
        .and_then(Iterator::collect)
        .map_err(|e| format!("{}: {e}", ca_path.display()))?;
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(cas);
    if added == 0 {
        return Err(format!("{}: no usable CA certificate", ca_path.display()));
    }
    let crl_path = dir.join(CRL_FILE);
    let crls = revocation_lists(&crl_path)?;
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
        .with_crls(crls)
        .build()
        .map_err(|e| match e {
            VerifierBuilderError::InvalidCrl(e) => {
                let why = match e {
                    CertRevocationListError::InvalidCrlNumber
                    | CertRevocationListError::InvalidRevokedCertSerialNumber => {
                        "a malformed number in it"
                    }
                    CertRevocationListError::ParseError => "it does not parse",
                    CertRevocationListError::UnsupportedCrlVersion => "an unsupported version",
                    _ => "malformed or of an unsupported kind",
                };
                format!(
                    "{}: not a usable revocation list: {why}",
                    crl_path.display()
                )
            }
            e => format!("{}: {e}", ca_path.display()),
        })
}

/// The revocation lists in `path` (module doc); none when there is no such file.
fn revocation_lists(path: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>, String> {
    let crls: Vec<CertificateRevocationListDer<'static>> =
        match CertificateRevocationListDer::pem_file_iter(path).and_then(Iterator::collect) {
            Ok(crls) => crls,
            Err(rustls::pki_types::pem::Error::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Vec::new());
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
    if crls.is_empty() {
        return Err(format!(
            "{}: no revocation list (an X509 CRL in PEM)",
            path.display()
        ));
    }
    Ok(crls)
}

/// A client verifier that, after `inner` accepted a certificate, also requires one of
/// `names` in its subjectAltName (module doc, [`CLIENTS_PROPERTY`]).
#[derive(Debug)]
struct AllowList {
    inner: Arc<dyn ClientCertVerifier>,
    names: Vec<ServerName<'static>>,
}

impl ClientCertVerifier for AllowList {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = ParsedCertificate::try_from(end_entity)?;
        let named = |name: &ServerName<'_>| rustls::client::verify_server_name(&cert, name);
        if self.names.iter().any(|name| named(name).is_ok()) {
            return Ok(verified);
        }
        Err(rustls::Error::InvalidCertificate(
            CertificateError::ApplicationVerificationFailure,
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Serves one TCP connection under `setup`: in the clear until STARTTLS, then over TLS.
pub(crate) fn serve_tcp(
    stream: TcpStream,
    writer: TcpStream,
    backend: &dyn Backend,
    setup: &TlsSetup,
) -> Result<(), ServeError> {
    let reader = stream.try_clone()?;
    let served = tarn_nbd::serve_tls(reader, writer, backend, setup.policy)?;
    let Served::StartTls { no_zeroes } = served else {
        return Ok(());
    };
    let Some(config) = &setup.config else {
        return Err(ServeError::Protocol(
            "STARTTLS without a certificate".into(),
        ));
    };
    let connection = handshake(&stream, config)?;
    serve_encrypted(stream, connection, backend, no_zeroes)
}

/// The TLS handshake on `stream`, within [`HANDSHAKE_TIMEOUT`].
fn handshake(stream: &TcpStream, config: &Arc<ServerConfig>) -> io::Result<ServerConnection> {
    let mut connection = ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
    // The pump drains what rustls encrypts after every chunk: no limit needed.
    connection.set_buffer_limit(None);
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut io = stream.try_clone()?;
    while connection.is_handshaking() {
        connection.complete_io(&mut io)?;
    }
    stream.set_read_timeout(None)?;
    Ok(connection)
}

/// The rest of the handshake and the transmission over TLS (module doc, the pump).
fn serve_encrypted(
    stream: TcpStream,
    connection: ServerConnection,
    backend: &dyn Backend,
    no_zeroes: bool,
) -> Result<(), ServeError> {
    let (outer, inner) = UnixStream::pair()?;
    let connection = Mutex::new(connection);
    let tcp_writer = Mutex::new(stream.try_clone()?);
    let (net_reader, plain_reader) = (stream.try_clone()?, outer.try_clone()?);
    let (inner_reader, inner_writer) = (inner.try_clone()?, inner.try_clone()?);
    std::thread::scope(|scope| {
        let connection = &connection;
        let tcp_writer = &tcp_writer;
        let outer = &outer;
        scope.spawn(move || net_to_plain(connection, net_reader, outer, tcp_writer));
        scope.spawn(move || plain_to_net(connection, plain_reader, tcp_writer));
        let tls = Tls::Established { no_zeroes };
        let served = tarn_nbd::serve_tls(inner_reader, inner_writer, backend, tls);
        // Ends both pump threads: the plain one reads EOF, the net one's read returns.
        let _ = inner.shutdown(Shutdown::Both);
        let _ = stream.shutdown(Shutdown::Both);
        served.map(drop)
    })
}

/// Sends what rustls has to send; the TCP write lock is taken before the connection lock
/// is let go (module doc).
fn send_tls(
    mut connection: MutexGuard<'_, ServerConnection>,
    tcp_writer: &Mutex<TcpStream>,
) -> io::Result<()> {
    let mut out = Vec::new();
    while connection.wants_write() {
        connection.write_tls(&mut out)?;
    }
    if out.is_empty() {
        return Ok(());
    }
    let mut tcp = lock(tcp_writer);
    drop(connection);
    tcp.write_all(&out)
}

/// TCP -> decrypt -> the socket pair, until either side ends. Plaintext rustls already
/// holds (a request that came with the handshake's last flight) goes first.
fn net_to_plain(
    connection: &Mutex<ServerConnection>,
    mut tcp: TcpStream,
    mut plain: &UnixStream,
    tcp_writer: &Mutex<TcpStream>,
) {
    let mut buf = vec![0u8; CHUNK];
    let mut n = 0;
    loop {
        let (decrypted, end) = decrypt(&mut lock(connection), &buf[..n]);
        // Alerts and post-handshake messages rustls wants to send.
        let sent = send_tls(lock(connection), tcp_writer);
        if plain.write_all(&decrypted).is_err() || end || sent.is_err() {
            break;
        }
        n = match tcp.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
    }
    let _ = plain.shutdown(Shutdown::Write);
}

/// Feeds `input` to rustls and takes every byte of plaintext it yields (draining after each
/// record batch: rustls holds only a little received plaintext); `true` when the
/// connection ended (close_notify, or bytes that are not TLS).
fn decrypt(connection: &mut ServerConnection, mut input: &[u8]) -> (Vec<u8>, bool) {
    let mut decrypted = Vec::new();
    loop {
        match connection.reader().read_to_end(&mut decrypted) {
            // The client sent close_notify.
            Ok(_) => return (decrypted, true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return (decrypted, true),
        }
        if input.is_empty() {
            return (decrypted, false);
        }
        if connection.read_tls(&mut input).is_err() || connection.process_new_packets().is_err() {
            return (decrypted, true);
        }
    }
}

/// The socket pair -> encrypt -> TCP, until either side ends; then close_notify.
fn plain_to_net(
    connection: &Mutex<ServerConnection>,
    mut plain: UnixStream,
    tcp_writer: &Mutex<TcpStream>,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match plain.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut guard = lock(connection);
        if guard.writer().write_all(&buf[..n]).is_err() || send_tls(guard, tcp_writer).is_err() {
            break;
        }
    }
    let mut guard = lock(connection);
    guard.send_close_notify();
    let _ = send_tls(guard, tcp_writer);
    let _ = lock(tcp_writer).shutdown(Shutdown::Write);
}
