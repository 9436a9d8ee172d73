//! TLS 1.3 with a self-signed certificate generated at start (rcgen, ring),
//! ALPN `http/1.1` ([`Tls::generate`]), or a server offering `h2` and
//! `http/1.1` to a client offering `h2` ([`Tls::h2`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The name on the certificate, sent as SNI.
pub const SERVER_NAME: &str = "localhost";

/// Server and client sides of one generated certificate. Cheap to clone.
#[derive(Clone)]
pub struct Tls {
    pub acceptor: TlsAcceptor,
    pub connector: TlsConnector,
    /// The client's configuration (what `connector` holds), for hyper-rustls.
    pub client: Arc<ClientConfig>,
    /// The certificate, PEM-encoded, for clients outside this process.
    pub cert_pem: String,
    /// `cert_pem` in a file of its own, removed with the last clone.
    ca_pem: Arc<TempFile>,
    /// The private key, PEM-encoded, in a file of its own, for servers
    /// outside this process (Node, Go, nginx).
    key_pem: Arc<TempFile>,
}

/// A client configuration as [`Tls`]'s (TLS 1.3, ring), trusting the one
/// certificate in the PEM file `ca_pem` (a [`Tls::ca_pem_path`] of another
/// process), ALPN `h2`.
pub fn client_trusting(ca_pem: &Path) -> Result<Arc<ClientConfig>, Box<dyn std::error::Error + Send + Sync>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let pem = std::fs::read(ca_pem).map_err(|e| format!("reading {}: {e}", ca_pem.display()))?;
    let cert = CertificateDer::from_pem_slice(&pem).map_err(|e| format!("{}: {e:?}", ca_pem.display()))?;
    let mut roots = RootCertStore::empty();
    roots.add(cert)?;
    // As in `generate_with`: ring, deprecated by rustls 0.23.48, kept.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(client))
}

/// A file under the temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Tls {
    /// Generates a certificate for `localhost` and configures TLS 1.3 only,
    /// ALPN `http/1.1` only, on both sides; the client trusts that
    /// certificate alone. Session resumption is rustls' default.
    pub fn generate() -> Tls {
        Tls::generate_for(b"http/1.1")
    }

    /// [`generate`](Self::generate) for HTTP/2 over TLS: the server offers
    /// `h2` then `http/1.1` (and picks `h2` when the client offers it, as
    /// Go's net/http and nginx do), the client `h2` only. Clients built on
    /// [`Tls::client`] through hyper-rustls set their own list (`h2`, or
    /// `h2` and `http/1.1` for the http2 bench's ALPN road).
    pub fn h2() -> Tls {
        Tls::generate_with(&[b"h2", b"http/1.1"], b"h2")
    }

    fn generate_for(alpn: &[u8]) -> Tls {
        Tls::generate_with(&[alpn], alpn)
    }

    fn generate_with(server_alpn: &[&[u8]], client_alpn: &[u8]) -> Tls {
        let key =
            rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()]).expect("generate certificate");
        let cert = key.cert.der().clone();
        let cert_pem = key.cert.pem();
        static GENERATED: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "drain-on-drop-bench-{}-{}.pem",
            std::process::id(),
            GENERATED.fetch_add(1, Ordering::Relaxed)
        );
        let ca_pem = TempFile(std::env::temp_dir().join(&name));
        std::fs::write(&ca_pem.0, &cert_pem).expect("write the certificate's PEM file");
        let key_pem = TempFile(std::env::temp_dir().join(format!("key-{name}")));
        std::fs::write(&key_pem.0, key.signing_key.serialize_pem()).expect("write the key's PEM file");
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.signing_key.serialize_der()));
        // rustls 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
        // repository keeps ring so that nothing builds aws-lc-sys (a C library).
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());

        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], private)
            .expect("server certificate");
        server.alpn_protocols = server_alpn.iter().map(|p| p.to_vec()).collect();

        let mut roots = RootCertStore::empty();
        roots.add(cert).expect("trust the generated certificate");
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![client_alpn.to_vec()];
        let client = Arc::new(client);

        Tls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(client.clone()),
            client,
            cert_pem,
            ca_pem: Arc::new(ca_pem),
            key_pem: Arc::new(key_pem),
        }
    }

    /// A file holding [`Tls::cert_pem`] (written once, by
    /// [`Tls::generate`]), for a client to trust, as `goclient -ca` does.
    pub fn ca_pem_path(&self) -> &Path {
        &self.ca_pem.0
    }

    /// A file holding the certificate's private key (PEM), for a server.
    pub fn key_pem_path(&self) -> &Path {
        &self.key_pem.0
    }

    /// The name the client verifies.
    pub fn server_name() -> ServerName<'static> {
        ServerName::try_from(SERVER_NAME).expect("valid DNS name")
    }
}
