//! The Prometheus export of `stacks/examples/metrics.rs`: one counter family
//! labelled by outcome and reason, every reason present with its count.

#[path = "../../tests/support/mod.rs"]
mod support;

#[path = "../examples/metrics.rs"]
#[allow(dead_code, unreachable_pub)]
mod metrics_example;

use drain_on_drop::{DrainOnDropLayer, Outcome, Reason};
use tower::{Service, ServiceBuilder, ServiceExt};

use support::{SECONDS, SLACK, big_or_small, client, get};

#[tokio::test]
async fn the_metrics_example_exports_every_reason_with_its_count() {
    let server = big_or_small(1000).await;
    let (client, _) = client();
    // Seconds of time budget: the three small bodies are drained on any machine.
    let layer = DrainOnDropLayer::new().max_time(SECONDS);
    let registry = metrics_example::registry(layer.stats());
    let mut svc = ServiceBuilder::new().layer(layer.clone()).service(client);
    for path in ["/a", "/b", "/c", "/big"] {
        drop(svc.ready().await.unwrap().call(get(server.uri(path))).await.unwrap());
    }
    let stats = layer.stats();
    assert!(stats.wait_idle(SLACK).await, "the drains should end: {stats:?}");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let line = |outcome: &str, reason: &str| {
        format!("drain_on_drop_early_drops_total{{outcome=\"{outcome}\",reason=\"{reason}\"}} ")
    };
    let value = |outcome: &str, reason: &str| -> u64 {
        let prefix = line(outcome, reason);
        let l =
            text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {prefix} in\n{text}"));
        l[prefix.len()..].parse().unwrap()
    };
    assert_eq!(value("drained", "end_of_body"), 3, "{text}");
    assert_eq!(value("skipped", "declared_over_budget"), 1, "{text}");
    assert_eq!(value("abandoned", "over_time"), 0, "{text}");
    for reason in Reason::ALL {
        value(reason.outcome().as_str(), reason.as_str());
    }
    assert!(text.contains("drain_on_drop_drained_bytes_total 3000"), "{text}");
    let exported: u64 = Outcome::ALL.iter().map(|&o| stats.snapshot().total(o)).sum();
    assert_eq!(exported, 4);
}
