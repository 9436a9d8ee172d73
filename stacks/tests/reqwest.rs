//! reqwest through `DrainOnDropLayer::wrap_response` (`stacks/examples/reqwest.rs`):
//! unread bodies keep reqwest's pooled connections.

#[path = "../../tests/support/mod.rs"]
mod support;

#[path = "gzip/mod.rs"]
mod gzip;

#[path = "../examples/reqwest.rs"]
#[allow(dead_code, unreachable_pub)]
mod reqwest_example;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, Reason};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// A reqwest client builder with rustls' ring provider installed: this
/// repository builds reqwest with `rustls-no-provider` (ring, as every other
/// TLS set-up here), where reqwest's default features would bring aws-lc-rs.
fn reqwest_builder() -> reqwest::ClientBuilder {
    // rustls 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
    // repository keeps ring so that nothing builds aws-lc-sys (a C library).
    #[allow(deprecated)]
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

use support::{RawServer, SECONDS, accept_each, assert_keeps_half, content_length, settle};

async fn run(drain: bool) -> (usize, drain_on_drop::DrainSnapshot) {
    let server = RawServer::start(|_| content_length(1, 64 * 1024)).await;
    let client = reqwest_builder().build().unwrap();
    // Seconds of time budget: every drain reaches the end on any machine.
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let url = format!("http://{}/x", server.addr);
    for _ in 0..20 {
        let res = if drain {
            reqwest_example::send(&layer, client.get(&url)).await.unwrap()
        } else {
            client.get(&url).send().await.unwrap()
        };
        assert!(res.error_for_status_ref().is_ok());
        assert_eq!(res.url().as_str(), url, "the URL survives the round trip");
        drop(res);
        settle(&layer.stats(), SECONDS).await;
    }
    (server.accepted(), layer.stats().snapshot())
}

#[tokio::test]
async fn reqwest_responses_dropped_unread_keep_their_connections_with_the_drain() {
    let (without, _) = run(false).await;
    let (with, s) = run(true).await;
    println!("20 requests, 64 KiB unread: reqwest alone {without} connections, with the drain {with}");
    assert_eq!(without, 20, "reqwest alone closes every connection whose body was not read");
    assert_eq!(s.drained, 20, "{s:?}");
    // Each request waits for the drain before the next one: hyper-util's
    // checkout race with the connection's way back to the pool is what is
    // left (1 to 3 connections on a quiet machine).
    assert_keeps_half("20 requests through reqwest, 64 KiB unread", with, without, 0);
}

#[tokio::test]
async fn a_reqwest_response_keeps_its_api_after_the_round_trip() {
    let server = RawServer::start(|_| content_length(2, 1000)).await;
    let layer = DrainOnDropLayer::new();
    let res = reqwest_example::send(
        &layer,
        reqwest_builder().build().unwrap().get(format!("http://{}/", server.addr)),
    )
    .await
    .unwrap();
    assert_eq!(res.content_length(), Some(1000));
    assert_eq!(res.bytes().await.unwrap(), support::body_bytes(2, 1000));
    assert_eq!(
        layer.stats().snapshot(),
        drain_on_drop::DrainSnapshot::default(),
        "read to the end: nothing counted"
    );
}

/// An HTTP/1.1-only TLS server (rustls with ring, a certificate for
/// `localhost` made here) answering every request with 64 KiB; its port, the
/// certificate, and the connections it accepted.
async fn tls_server() -> (u16, reqwest::Certificate, Arc<AtomicUsize>) {
    let key = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = key.cert.der().clone();
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.signing_key.serialize_der()));
    // rustls 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
    // repository keeps ring so that nothing builds aws-lc-sys (a C library).
    #[allow(deprecated)]
    let mut config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], private)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (addr, accepted) = accept_each(move |io| {
        let acceptor = acceptor.clone();
        async move {
            let Ok(tls) = acceptor.accept(io.into_inner()).await else { return };
            let svc = hyper::service::service_fn(|_| async {
                let body = Full::new(Bytes::from(support::body_bytes(3, 64 * 1024)));
                Ok::<_, Infallible>(http::Response::new(body))
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), svc).await;
        }
    })
    .await;
    let port = addr.port();
    (port, reqwest::Certificate::from_der(&cert).unwrap(), accepted)
}

/// The recipes' adapter with reqwest's default features (rustls, HTTP/2
/// offered, HTTP/1.1 taken), over TLS to a local server: 20 requests whose
/// 64 KiB bodies are dropped unread, without and with the drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_keeps_reqwest_tls_connections_with_default_features() {
    let mut accepted = Vec::new();
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    for drain in [false, true] {
        let (port, cert, count) = tls_server().await;
        let client = reqwest_builder().tls_certs_only([cert]).build().unwrap();
        let url = format!("https://localhost:{port}/");
        for _ in 0..20 {
            let res = if drain {
                reqwest_example::send(&layer, client.get(&url)).await.unwrap()
            } else {
                client.get(&url).send().await.unwrap()
            };
            assert_eq!(res.version(), http::Version::HTTP_11);
            assert!(res.status().is_success());
            drop(res);
            settle(&layer.stats(), SECONDS).await;
        }
        accepted.push(count.load(Ordering::SeqCst));
    }
    let s = layer.stats().snapshot();
    println!(
        "reqwest over TLS, 20 requests, 64 KiB unread: alone {}, with the drain {} connections",
        accepted[0], accepted[1]
    );
    assert_eq!(accepted[0], 20, "reqwest alone closes every connection whose body was not read");
    assert_eq!((s.drained, s.bytes_drained), (20, 20 * 64 * 1024), "{s:?}");
    assert_keeps_half("reqwest over TLS, 64 KiB unread", accepted[1], accepted[0], 0);
}

/// reqwest with `gzip`: as the recipes' adapter puts it, the drain reads what
/// reqwest inflates, and counts inflated bytes; with the decompression above
/// the drain (`send_decoded_above`), it reads and counts wire bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_gzip_the_drain_reads_wire_bytes_when_decompression_is_above_it() {
    const N: u64 = 20;
    let mut rows = Vec::new();
    for how in ["reqwest alone", "adapter", "decoded above the drain"] {
        let (url, accepted) = gzip::server().await;
        let layer = DrainOnDropLayer::new().max_time(SECONDS);
        let decoding = reqwest_builder().build().unwrap();
        let raw = reqwest_builder().no_gzip().build().unwrap();
        for i in 0..N {
            let res = match how {
                "reqwest alone" => decoding.get(&url).send().await.unwrap(),
                "adapter" => reqwest_example::send(&layer, decoding.get(&url)).await.unwrap(),
                _ => {
                    let req = http::Request::get(&url).body(reqwest::Body::from(Vec::new())).unwrap();
                    reqwest_example::send_decoded_above(&layer, &raw, req).await.unwrap()
                }
            };
            if i == 0 {
                // The caller still reads the decoded body.
                assert_eq!(res.bytes().await.unwrap().len(), 1 << 20, "{how}: decoded");
            } else {
                drop(res);
            }
            settle(&layer.stats(), SECONDS).await;
        }
        let s = layer.stats().snapshot();
        println!(
            "{how}: {} connections for {N} requests; drained {}, abandoned {} ({} over_bytes); {} bytes drained",
            accepted.load(Ordering::SeqCst),
            s.drained,
            s.abandoned,
            s.count(Reason::OverBytes),
            s.bytes_drained
        );
        rows.push(s);
    }
    let (adapter, above) = (rows[1], rows[2]);
    // Inflated, each early drop reads past the 256 KiB budget and gives up.
    assert_eq!(adapter.count(Reason::OverBytes), N - 1, "{adapter:?}");
    assert!(adapter.bytes_drained >= (N - 1) * 256 * 1024, "{adapter:?}");
    // On the wire, each body is a few KiB: read to its end.
    assert_eq!(above.count(Reason::EndOfBody), N - 1, "{above:?}");
    assert!(above.bytes_drained < (N - 1) * 64 * 1024, "wire bytes, not inflated ones: {above:?}");
}
