//! hyper's own `client::conn::http1` connections in a pool of the caller's,
//! with the drain put on each response by `DrainOnDropLayer::wrap_response`
//! (rustdoc `recipes`, "hyper's own connections, in your pool"). Connections
//! counted at the server.

mod support;

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, Reason};
use http_body_util::Empty;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;

use support::*;

/// A pool of hyper connections: a free one is handed out again once
/// `SendRequest::ready` says its last response is done (a body read, or
/// drained, to its end); one that closed is thrown away.
struct Pool {
    addr: std::net::SocketAddr,
    idle: Vec<SendRequest<Empty<Bytes>>>,
}

impl Pool {
    async fn checkout(&mut self) -> SendRequest<Empty<Bytes>> {
        while let Some(mut sender) = self.idle.pop() {
            if sender.ready().await.is_ok() {
                return sender;
            }
        }
        let stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        sender
    }
}

/// `n` requests through the pool, each body dropped unread (through the
/// drain when `layer` is given); the connections the server accepted.
async fn run(server: &RawServer, layer: Option<&DrainOnDropLayer>, n: usize) -> usize {
    let mut pool = Pool { addr: server.addr, idle: Vec::new() };
    for _ in 0..n {
        let mut sender = pool.checkout().await;
        let res = sender.send_request(get(server.uri("/"))).await.unwrap();
        assert!(res.status().is_success());
        match layer {
            Some(layer) => drop(layer.wrap_response(res)),
            None => drop(res),
        }
        pool.idle.push(sender);
        if let Some(layer) = layer {
            settle(&layer.stats(), SECONDS).await;
        }
    }
    server.accepted()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_hyper_connections_keeps_one_with_the_drain() {
    let alone = run(&RawServer::start(|_| content_length(1, 64 * KIB)).await, None, 20).await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let with = run(&RawServer::start(|_| content_length(1, 64 * KIB)).await, Some(&layer), 20).await;
    println!("20 requests, 64 KiB unread, hyper connections in a pool: alone {alone}, with the drain {with}");
    assert_eq!(alone, 20, "hyper closes each connection whose body was dropped unread");
    assert_eq!(with, 1, "the pool waits for each drain (ready()), so one connection serves all");
    let s = layer.stats().snapshot();
    assert_eq!(s.count(Reason::EndOfBody), 20, "{s:?}");
}

/// hyper's own body is framed as its headers say: one with neither a length
/// nor chunking ends only when the server closes, and is skipped unread, as
/// for the layer's own responses. (reqwest's bodies, whose headers no longer
/// describe the wire, are not taken for close-delimited.)
#[tokio::test]
async fn a_close_delimited_hyper_body_is_skipped_not_drained() {
    let server = RawServer::start(|_| {
        vec![
            Step::Write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nsome bytes".to_vec()),
            Step::Hang,
        ]
    })
    .await;
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let mut pool = Pool { addr: server.addr, idle: Vec::new() };
    let mut sender = pool.checkout().await;
    let res = sender.send_request(get(server.uri("/"))).await.unwrap();
    drop(layer.wrap_response(res));
    let s = layer.stats().snapshot();
    assert_eq!((s.count(Reason::CloseDelimited), s.bytes_drained, s.in_flight), (1, 0, 0), "{s:?}");
}
