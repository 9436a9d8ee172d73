//! TLS 1.3 with a self-signed certificate generated at start (rcgen, ring).

use std::sync::Arc;

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
}

impl Tls {
    /// Generates a certificate for `localhost` and configures TLS 1.3 only,
    /// ALPN `http/1.1` only, on both sides; the client trusts that
    /// certificate alone. Session resumption is rustls' default.
    pub fn generate() -> Tls {
        let key =
            rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()]).expect("generate certificate");
        let cert = key.cert.der().clone();
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.signing_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());

        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], private)
            .expect("server certificate");
        server.alpn_protocols = vec![b"http/1.1".to_vec()];

        let mut roots = RootCertStore::empty();
        roots.add(cert).expect("trust the generated certificate");
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];

        Tls { acceptor: TlsAcceptor::from(Arc::new(server)), connector: TlsConnector::from(Arc::new(client)) }
    }

    /// The name the client verifies.
    pub fn server_name() -> ServerName<'static> {
        ServerName::try_from(SERVER_NAME).expect("valid DNS name")
    }
}
