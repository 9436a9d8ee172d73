//! reqwest through `DrainOnDropLayer::wrap_response` (`examples/reqwest.rs`):
//! unread bodies keep reqwest's pooled connections.

mod support;

#[path = "../examples/reqwest.rs"]
#[allow(dead_code, unreachable_pub)]
mod reqwest_example;

use std::time::Duration;

use drain_on_drop::DrainOnDropLayer;

use support::{RawServer, SECONDS, assert_keeps_half, content_length, wait_for};

const SLACK: Duration = Duration::from_secs(5);

async fn run(drain: bool) -> (usize, drain_on_drop::DrainSnapshot) {
    let server = RawServer::start(|_| content_length(1, 64 * 1024)).await;
    let client = reqwest::Client::new();
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
        let stats = layer.stats();
        wait_for("the drain to end", SECONDS + SLACK, || stats.snapshot().in_flight == 0).await;
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
    let res = reqwest_example::send(&layer, reqwest::Client::new().get(format!("http://{}/", server.addr)))
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
