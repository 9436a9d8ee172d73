//! The DEBUG event of every early drop, seen by a capturing subscriber:
//! emitted in the span of the request, with origin and status. A binary of
//! its own: tracing caches each callsite's interest process-wide, and a
//! thread-local subscriber in one test among many parallel ones can miss it.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use drain_on_drop::DrainOnDropLayer;
use http_body_util::BodyExt;
use tower::{Service, ServiceBuilder, ServiceExt};

use support::{SECONDS, SLACK, big_or_small, client, wait_for};

/// One event as a capturing subscriber saw it.
#[derive(Clone, Debug, Default)]
struct Captured {
    fields: HashMap<String, String>,
    /// Names of the spans the event was in, innermost first.
    spans: Vec<String>,
    /// Fields of those spans, joined.
    span_fields: String,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

struct Visitor<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

/// The fields of a span, kept in its extensions.
struct SpanFields(String);

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = HashMap::new();
        attrs.record(&mut Visitor(&mut fields));
        let mut text: Vec<_> = fields.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        text.sort();
        ctx.span(id).unwrap().extensions_mut().insert(SpanFields(text.join(" ")));
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != "drain_on_drop" {
            return;
        }
        let mut captured = Captured::default();
        event.record(&mut Visitor(&mut captured.fields));
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope {
                captured.spans.push(span.name().to_string());
                if let Some(f) = span.extensions().get::<SpanFields>() {
                    captured.span_fields.push_str(&f.0);
                    captured.span_fields.push(' ');
                }
            }
        }
        self.0.lock().unwrap().push(captured);
    }
}

#[test]
fn drop_events_are_emitted_in_the_request_span_with_origin_and_status() {
    use tracing_subscriber::layer::SubscriberExt;

    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    // Current thread: the drain task runs on this thread, under this subscriber.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let port = rt.block_on(async {
        let server = big_or_small(1000).await;
        let (client, _) = client();
        // Seconds of time budget: the small body is drained on any machine.
        let layer = DrainOnDropLayer::new().max_time(SECONDS);
        let stats = layer.stats();
        let mut svc = ServiceBuilder::new()
            .layer(tower_http::trace::TraceLayer::new_for_http())
            .layer(layer)
            .service(client);
        let port = server.addr.port();
        // Userinfo in the URI must not reach the event.
        let with_userinfo = |path: &str| format!("http://alice:secret@127.0.0.1:{port}{path}");
        let small = http::Request::get(with_userinfo("/small")).body(http_body_util::Empty::new()).unwrap();
        let res = svc.ready().await.unwrap().call(small).await.unwrap();
        drop(res);
        wait_for("the drain to end", SLACK, || {
            stats.snapshot().drained == 1 && stats.snapshot().in_flight == 0
        })
        .await;
        let big = http::Request::get(with_userinfo("/big")).body(http_body_util::Empty::new()).unwrap();
        let mut res = svc.ready().await.unwrap().call(big).await.unwrap();
        let _ = res.body_mut().frame().await;
        drop(res);
        assert_eq!(stats.snapshot().skipped, 1);
        port
    });
    let events = capture.0.lock().unwrap().clone();
    assert_eq!(events.len(), 2, "one event per early drop: {events:#?}");
    let origin = format!("http://127.0.0.1:{port}");
    for (event, (outcome, reason)) in
        events.iter().zip([("drained", "end_of_body"), ("skipped", "declared_over_budget")])
    {
        assert_eq!(event.fields["outcome"], outcome, "{event:#?}");
        assert_eq!(event.fields["reason"], reason, "{event:#?}");
        assert_eq!(event.fields["status"], "200", "{event:#?}");
        assert_eq!(event.fields["origin"], origin, "scheme://host:port: {event:#?}");
        assert!(
            event.spans.first().is_some_and(|s| s == "request"),
            "in TraceLayer's request span: {event:#?}"
        );
        assert!(event.span_fields.contains("method=GET"), "{event:#?}");
        let all = format!("{:?}", event.fields);
        assert!(!all.contains("secret") && !all.contains("alice"), "no userinfo in the event: {all}");
    }
    assert!(events[1].fields.contains_key("caller_read"));
}
