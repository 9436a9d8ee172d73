//! A TLS server and client pair for one test: a certificate rcgen makes
//! for `name`, the server offering h2 and HTTP/1.1 by ALPN (as real servers
//! do), the client trusting that certificate alone. ring is the provider
//! of every client and server in the repository (nothing builds
//! aws-lc-sys, a C library).

use std::sync::Arc;

use hyper_util::client::legacy::connect::HttpConnector;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// The server's acceptor and the client's configuration.
pub(crate) struct Tls {
    pub(crate) acceptor: tokio_rustls::TlsAcceptor,
    pub(crate) client: rustls::ClientConfig,
}

/// A pair for `name` (`localhost`, `127.0.0.1`).
pub(crate) fn pair(name: &str) -> Tls {
    pair_offering(name, &[b"h2", b"http/1.1"])
}

/// A pair for `name` whose server offers `protocols` by ALPN.
#[allow(dead_code)]
pub(crate) fn pair_offering(name: &str, protocols: &[&[u8]]) -> Tls {
    // rustls 0.23.48 deprecates ring's provider (no post-quantum key exchange).
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
    let cert = key.cert.der().clone();
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.signing_key.serialize_der()));
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], private)
        .unwrap();
    server.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Tls { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)), client }
}

/// hyper-rustls' connector, as its users build it.
pub(crate) type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// hyper-rustls' connector over `client` (TCP_NODELAY), offering h2 and
/// http/1.1 by ALPN, or h2 alone with `h2_only`.
pub(crate) fn https(client: rustls::ClientConfig, h2_only: bool) -> Https {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(client).https_only();
    match h2_only {
        true => builder.enable_http2().wrap_connector(http),
        false => builder.enable_all_versions().wrap_connector(http),
    }
}
