//! Exports the layer's counters to Prometheus with `prometheus-client`: one
//! counter family labelled by `outcome` and `reason`, built by iterating the
//! snapshot, so a reason added in a later release shows up by itself.
//!
//! ```text
//! cargo run --example metrics
//! ```

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, DrainStats};
use http_body_util::{Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use tower::{Service, ServiceBuilder, ServiceExt};

/// Reads a [`DrainStats`] at every scrape.
#[derive(Debug)]
pub struct DrainCollector(pub DrainStats);

impl Collector for DrainCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = self.0.snapshot();
        let help = "HTTP/1 response bodies dropped before their end, by outcome and reason";
        let mut drops = encoder.encode_descriptor("early_drops", help, None, MetricType::Counter)?;
        for (reason, n) in s.iter() {
            let labels = [("outcome", reason.outcome().as_str()), ("reason", reason.as_str())];
            ConstCounter::new(n).encode(drops.encode_family(&labels)?)?;
        }
        let help = "Body bytes read and discarded by drains";
        let bytes = encoder.encode_descriptor("drained", help, Some(&Unit::Bytes), MetricType::Counter)?;
        ConstCounter::new(s.bytes_drained).encode(bytes)?;
        let help = "Drains running now";
        let in_flight = encoder.encode_descriptor("drains_in_flight", help, None, MetricType::Gauge)?;
        ConstGauge::new(i64::try_from(s.in_flight).unwrap_or(i64::MAX)).encode(in_flight)?;
        Ok(())
    }
}

/// A registry exporting `stats` under the prefix `drain_on_drop`.
pub fn registry(stats: DrainStats) -> Registry {
    let mut registry = Registry::with_prefix("drain_on_drop");
    registry.register_collector(Box::new(DrainCollector(stats)));
    registry
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // A local server answering every request with 64 KiB.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper::service::service_fn(|_| async {
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(vec![b'x'; 64 * 1024]))))
            });
            let conn =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::spawn(conn);
        }
    });

    let layer = DrainOnDropLayer::new();
    let registry = registry(layer.stats());
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut svc = ServiceBuilder::new().layer(layer.clone()).service(client);
    for _ in 0..10 {
        let req = http::Request::get(&url).body(Empty::new())?;
        let res = svc.ready().await?.call(req).await?;
        drop(res); // only the status mattered: drained in the background
    }
    let stats = layer.stats();
    // Drains run in the background: wait for them (bounded) before counting.
    stats.wait_idle(Duration::from_secs(5)).await;

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    print!("{text}");
    Ok(())
}
