//! The origin the layer keys its estimates by is the server hyper connects
//! to: the port is read as hyper reads it (`Uri::port_u16`), so two servers
//! are never merged under one key, and a far server's round trip (and so
//! its drains' time budget) is never replaced by a near one's.

mod support;

use std::time::Duration;

use drain_on_drop::DrainOnDropLayer;
use tower::{Layer, Service, ServiceExt};

use support::*;

/// `http://127.0.0.1:+PORT/` and `http://127.0.0.1:000PORT/` reach PORT
/// (hyper parses the port with `str::parse::<u16>`); 0.4 keyed both as
/// `:80`, so a slow server and a fast one written so shared one round trip
/// (the fast one's), and the slow one's drains ran out of a 50 ms budget.
#[tokio::test]
async fn a_port_hyper_accepts_is_keyed_to_the_server_hyper_connects_to() {
    let slow_head = Duration::from_millis(500);
    let slow = RawServer::start(move |_| {
        vec![Step::Sleep(slow_head), Step::Write([cl_head(KIB), body_bytes(1, KIB)].concat())]
    })
    .await;
    let fast = RawServer::start(|_| content_length(2, KIB)).await;
    let layer = DrainOnDropLayer::new();
    let mut svc = layer.clone().layer(client().0);
    let (slow_port, fast_port) = (slow.addr.port(), fast.addr.port());
    for _ in 0..3 {
        for uri in [format!("http://127.0.0.1:+{slow_port}/"), format!("http://127.0.0.1:000{fast_port}/")] {
            let res = svc.ready().await.unwrap().call(get(uri.parse().unwrap())).await.unwrap();
            read_all(res.into_body()).await.unwrap();
        }
    }
    assert_eq!(
        (slow.accepted(), fast.accepted()),
        (1, 1),
        "hyper reached both servers, on one connection each"
    );
    let origins = layer.origins();
    let names: Vec<_> = origins.iter().map(|o| o.origin.as_str()).collect();
    let (slow_key, fast_key) =
        (format!("http://127.0.0.1:{slow_port}"), format!("http://127.0.0.1:{fast_port}"));
    let mut expected = vec![slow_key.as_str(), fast_key.as_str()];
    expected.sort();
    assert_eq!(names, expected, "one origin per server, named by its port");
    let slow_rtt = origins.iter().find(|o| o.origin == slow_key).and_then(|o| o.round_trip).unwrap();
    assert!(slow_rtt >= slow_head, "the slow server keeps its own round trip: {slow_rtt:?}");
    let fast_rtt = origins.iter().find(|o| o.origin == fast_key).and_then(|o| o.round_trip).unwrap();
    assert!(fast_rtt < slow_head, "and the fast one its own: {fast_rtt:?}");
}

/// Services behind one gateway, sidecars on localhost, a test suite's
/// servers: 64 origins that differ by their port alone are all kept, each
/// with its own round trip, however often they are used in turn (the
/// origin hash once put every port of one host in one 16-place part of the
/// table, and each was forgotten and recreated empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_origins_on_one_host_keep_their_state() {
    let mut servers = Vec::new();
    for i in 0..64u64 {
        servers.push(RawServer::start(move |_| content_length(i, KIB)).await);
    }
    let layer = DrainOnDropLayer::new();
    let mut svc = layer.clone().layer(client().0);
    for _ in 0..3 {
        for server in &servers {
            let uri = format!("http://127.0.0.1:{}/", server.addr.port());
            let res = svc.ready().await.unwrap().call(get(uri.parse().unwrap())).await.unwrap();
            read_all(res.into_body()).await.unwrap();
        }
    }
    let origins = layer.origins();
    assert_eq!(
        origins.len(),
        64,
        "every origin kept: {:?}",
        origins.iter().map(|o| &o.origin).collect::<Vec<_>>()
    );
    for server in &servers {
        let name = format!("http://127.0.0.1:{}", server.addr.port());
        let origin = origins.iter().find(|o| o.origin == name).unwrap_or_else(|| panic!("{name} kept"));
        assert!(origin.round_trip.is_some(), "{name}: its round trip kept");
    }
}
