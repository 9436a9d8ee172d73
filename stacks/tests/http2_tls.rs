//! HTTP/2 over TLS, negotiated with ALPN (what most HTTPS APIs speak, and
//! reqwest's default over TLS): 16 callers dropping 1 MiB bodies after
//! their heads, through the layer, lose no request, on a connection per 250 drops; each
//! drop is reset at once, nothing read. (With h2 0.4.20 and older,
//! hyper-util alone lost requests here to its own GOAWAY
//! `too_many_internal_resets`; tests/http2.rs checks the h2 this build has.)

#[path = "../../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, Reason};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tower::ServiceBuilder;

use support::*;

/// A TLS server for `localhost` offering only `h2` by ALPN, answering with
/// 1 MiB in 16 KiB frames; its port, the client's TLS configuration that
/// trusts it, and the connections accepted.
async fn h2_tls_server() -> (u16, rustls::ClientConfig, Arc<std::sync::atomic::AtomicUsize>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = key.cert.der().clone();
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.signing_key.serialize_der()));
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], private)
        .unwrap();
    server.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let (addr, accepted) = accept_each(move |io: hyper_util::rt::TokioIo<tokio::net::TcpStream>| {
        let acceptor = acceptor.clone();
        async move {
            let tcp = io.into_inner();
            let _ = tcp.set_nodelay(true);
            if let Ok(tls) = acceptor.accept(tcp).await {
                serve_h2(hyper_util::rt::TokioIo::new(tls), MIB).await;
            }
        }
    })
    .await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (addr.port(), client, accepted)
}

/// hyper-util's pooled client over rustls, offering h2 and HTTP/1.1 by ALPN
/// (the server takes h2).
fn client(tls: rustls::ClientConfig) -> Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_all_versions()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new()).build(https)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_with_alpn_h2_early_drops_are_reset_at_once_and_cost_no_request() {
    const N: usize = 1_500;
    let (port, tls, accepted) = h2_tls_server().await;
    let uri: http::Uri = format!("https://localhost:{port}/").parse().unwrap();
    let layer = DrainOnDropLayer::new();
    let mut svc = ServiceBuilder::new().layer(layer.clone()).service(client(tls));
    // One request first: until a connection has negotiated h2, hyper-util
    // dials one per concurrent request (alone or not).
    let res = tower::ServiceExt::ready(&mut svc).await.unwrap();
    let res = tower::Service::call(res, get(uri.clone())).await.unwrap();
    assert_eq!(res.version(), http::Version::HTTP_2, "ALPN chose h2");
    read_all(res.into_body()).await.unwrap();
    let run = h2_traffic(svc, uri, 16, N, false).await;
    assert_eq!((run.sent, run.failed), (N, 0), "{run:?}");
    // The connection moves on after each 250 resets (the layer's default
    // `http2_resets_per_connection`); until the next has negotiated h2 by
    // ALPN, hyper-util dials one for each of the 16 callers waiting, as it
    // does for the first, and keeps one.
    let (accepted, moves) = (accepted.load(Ordering::SeqCst), N / 250);
    assert!(
        (1 + moves..=1 + moves * 16).contains(&accepted),
        "a connection per 250 resets, each dialed by up to 16 callers: {accepted}, {run:?}"
    );
    let s = layer.stats().snapshot();
    assert_eq!(s.count(Reason::Reset), N as u64, "each drop reset, counted once (the first was read): {s:?}");
    assert_eq!((s.bytes_drained, s.in_flight), (0, 0), "nothing read, nothing held: {s:?}");
    println!("over TLS, with the layer: {run:?}; {s:?}");
}
