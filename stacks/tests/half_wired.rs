//! Adaptive mode cannot be half-wired without a word: an adaptive layer
//! serving responses that no observer tagged says so once, at WARN (target
//! `drain_on_drop`), and `origins()` says why no estimate exists. A binary
//! of its own: it installs a process-wide subscriber.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use drain_on_drop::{Adaptive, DrainOnDropLayer};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::ServiceBuilder;

use support::*;

/// Every WARN line of target `drain_on_drop`, as the fmt subscriber wrote it.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn warnings(&self) -> usize {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        text.lines().filter(|l| l.contains("adaptive mode without an observer")).count()
    }
}

/// Five requests to `server` through `layer`, over `client`.
async fn five<C>(server: &RawServer, layer: &DrainOnDropLayer, client: Client<C, Empty<Bytes>>)
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let mut svc = ServiceBuilder::new().layer(layer.clone()).service(client);
    for _ in 0..5 {
        drop_unread(&mut svc, get(server.uri("/"))).await;
        settle(&layer.stats(), SECONDS).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_layer_without_an_observer_warns_once_and_says_why() {
    let lines = Lines::default();
    let writer = lines.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();
    let server = RawServer::start(|_| content_length(1, 64 * KIB)).await;

    let half_wired = DrainOnDropLayer::new().adaptive();
    five(&server, &half_wired, client().0).await;
    assert_eq!(lines.warnings(), 1, "one warning for the layer, not one per response");
    let origins = half_wired.origins();
    assert_eq!(origins[0].adaptive, Adaptive::NoObserver, "{origins:?}");
    assert_eq!(origins[0].setup_cost, None);

    let another = DrainOnDropLayer::new().adaptive();
    five(&server, &another, client().0).await;
    assert_eq!(lines.warnings(), 2, "one per layer");

    let wired = DrainOnDropLayer::new().adaptive();
    let observed = Client::builder(TokioExecutor::new()).build(wired.observe(CountingConnector::new()));
    five(&server, &wired, observed).await;
    assert_eq!(lines.warnings(), 2, "an observed layer says nothing");
    assert_eq!(wired.origins()[0].adaptive, Adaptive::Measured, "{:?}", wired.origins());

    let fixed = DrainOnDropLayer::new();
    five(&server, &fixed, client().0).await;
    assert_eq!(lines.warnings(), 2, "outside adaptive mode, nothing to say");
    assert_eq!(fixed.origins()[0].adaptive, Adaptive::Off);
}
