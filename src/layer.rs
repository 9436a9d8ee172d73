use std::sync::Arc;
use std::time::Duration;

use http::Uri;
use tower_layer::Layer;

use crate::keepalive::IdleTimeout;
use crate::observe::ObserveConnector;
use crate::origin::{Estimates, OriginSnapshot};
use crate::service::DrainOnDrop;
use crate::shared::{Config, Shared};
use crate::sizing;
use crate::stats::DrainStats;

/// Wraps a client service in [`DrainOnDrop`]: response bodies dropped before
/// their end are drained in the background so the connection can be pooled.
///
/// The layer holds configuration and a [`DrainStats`] handle. Clones of the
/// layer, and every service built from it, share those counters.
///
/// ```
/// use std::time::Duration;
/// use drain_on_drop::DrainOnDropLayer;
///
/// let layer = DrainOnDropLayer::new()
///     .max_bytes(1024 * 1024)
///     .max_time(Duration::from_millis(200));
/// let stats = layer.stats();
/// assert_eq!(stats.snapshot().drained, 0);
/// ```
#[derive(Clone, Debug)]
pub struct DrainOnDropLayer {
    pub(crate) shared: Arc<Shared>,
}

impl DrainOnDropLayer {
    /// A layer with the default settings, each stated on its setter
    /// ([`max_bytes`](Self::max_bytes), [`max_time`](Self::max_time),
    /// [`max_concurrent_drains`](Self::max_concurrent_drains), …) and
    /// explained in the [crate documentation](crate#why-byte-and-time-budgets).
    pub fn new() -> Self {
        DrainOnDropLayer { shared: Arc::new(Shared::default()) }
    }

    fn config(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(&mut Arc::make_mut(&mut self.shared).config);
        self
    }

    /// Switches draining on or off, keeping the service's type: the way to
    /// make the layer optional (from a setting, a feature flag, an A/B
    /// comparison). Switched off, every early drop is dropped as hyper
    /// alone would drop it and counted skipped (`disabled`), so the stats
    /// still say how many drops the layer would have drained, and an
    /// [`observe`](Self::observe) connector still counts connections.
    /// `max_bytes(0)`, `max_time(Duration::ZERO)` and
    /// `max_concurrent_drains(0)` switch it off too. Default is on.
    ///
    /// tower's `ServiceBuilder::option_layer(Option<DrainOnDropLayer>)` does
    /// not work here: the layer changes the response body type (to
    /// [`DrainBody`](crate::DrainBody)), so the two arms of tower's `Either` return different
    /// responses and rustc reports E0599 ("the method `ready` exists … but
    /// its trait bounds were not satisfied") at the first call:
    ///
    /// ```compile_fail,E0599
    /// # use drain_on_drop::DrainOnDropLayer;
    /// # use http_body_util::Empty;
    /// # use hyper::body::Bytes;
    /// # use hyper_util::client::legacy::Client;
    /// # use hyper_util::rt::TokioExecutor;
    /// # use tower::{Service, ServiceBuilder, ServiceExt};
    /// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let layer = std::env::var_os("DRAIN").map(|_| DrainOnDropLayer::new());
    /// let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    /// let mut svc = ServiceBuilder::new().option_layer(layer).service(client);
    /// let req = http::Request::get("http://example.com/").body(Empty::new())?;
    /// let res = svc.ready().await?.call(req).await?; // E0599: two response body types
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Keep the layer and switch it:
    ///
    /// ```
    /// use drain_on_drop::DrainOnDropLayer;
    /// use http_body_util::Empty;
    /// use hyper::body::Bytes;
    /// use hyper_util::client::legacy::Client;
    /// use hyper_util::rt::TokioExecutor;
    /// use tower::ServiceBuilder;
    ///
    /// let drain = std::env::var_os("NO_DRAIN").is_none();
    /// let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    /// // One type, whatever `drain` is.
    /// let svc = ServiceBuilder::new().layer(DrainOnDropLayer::new().enabled(drain)).service(client);
    /// # drop(svc);
    /// ```
    pub fn enabled(self, enabled: bool) -> Self {
        self.config(|c| c.enabled = enabled)
    }

    /// Byte budget: the data bytes one drain may read.
    ///
    /// A body whose remaining length is known (`Content-Length`) and larger
    /// is not drained at all (`declared_over_budget`: zero bytes read). A
    /// body of unknown length (chunked) is read until a frame takes the drain
    /// past the budget; it then reads one more frame to see whether the body
    /// ends there. If only the end marker or trailers were left, the body is
    /// drained (`end_of_body`) and the connection reused: the drain finishes
    /// what it paid for. Otherwise it is abandoned (`over_bytes`). So a drain
    /// reads at most `max_bytes` plus two of hyper's frames (a frame is one
    /// chunk, or what one read of hyper's buffer holds of it; with 16 KiB
    /// chunks, at most `max_bytes + 32 KiB`), all within `max_time`.
    ///
    /// An abandoned body is dropped, and hyper closes the connection unless
    /// the rest of the body is already in its buffer: then hyper's own read
    /// at the drop finishes it and the connection is pooled although the
    /// drop counts as `abandoned` (the layer cannot see hyper's buffer).
    ///
    /// `0` disables draining. Default is 256 KiB (262,144 bytes).
    ///
    /// ```
    /// # use drain_on_drop::DrainOnDropLayer;
    /// // Drain error pages and small JSON replies, never downloads.
    /// let layer = DrainOnDropLayer::new().max_bytes(64 * 1024);
    /// ```
    pub fn max_bytes(self, max_bytes: u64) -> Self {
        self.config(|c| c.budgets.set_max_bytes(max_bytes))
    }

    /// Time budget: a drain is abandoned this long after the body was
    /// dropped, whatever the server does (stalls, trickles, never ends).
    /// Setting it fixes the time budget for every origin.
    ///
    /// Zero disables draining. Default: it follows the origin's round trip,
    /// measured by the layer (the shortest time from a request to its
    /// response head in the origin's last 16 seconds): enough round trips for a
    /// new connection's TCP slow start to deliver the byte budget, plus one
    /// (six at the default 256 KiB), never less than 50 ms nor more than
    /// 1 s. So 50 ms on a LAN, 600 ms for an origin 100 ms away; 50 ms before
    /// an origin's first response. See the [crate
    /// documentation](crate#why-byte-and-time-budgets).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use drain_on_drop::DrainOnDropLayer;
    /// // Never hold a connection more than 100 ms for a drain, near or far.
    /// let layer = DrainOnDropLayer::new().max_time(Duration::from_millis(100));
    /// ```
    pub fn max_time(self, max_time: Duration) -> Self {
        self.config(|c| c.budgets.set_max_time(max_time))
    }

    /// The most drains running at once in the background, across every
    /// service built from this layer. Once the layer has seen more than one
    /// origin, one origin may hold at most three quarters of them (the cap
    /// less a quarter of it rounded down: 768 of the default 1024), so that
    /// one origin's drops, a stalling server's say, always leave room for the
    /// others. A body that has to wait for the server while that many drains
    /// run, or while its origin holds its three quarters of them, is not drained (counted as
    /// skipped, `saturated`, or as `cannot_wait` when the drop had already
    /// read part of it), so a flood of early drops cannot grow background
    /// work without bound. A hyper body that ends in the drop itself runs no
    /// task and takes no place, so the cap never refuses it; but hyper hands an
    /// HTTP/1 body over one decoded chunk at a time, so that is a body whose
    /// rest fits the chunk hyper has handed over (a small body, the tail of
    /// a longer one), not every body that has arrived: a 64 KiB body sent
    /// with its head, dropped unread with every slot taken, is given up
    /// after its first chunk (`cannot_wait`).
    ///
    /// A drain lasts at most `max_time`, so the number running is about the
    /// rate of early drops times their drain time: 10,000 drops a second of
    /// bodies that stall for a whole 50 ms budget (the default on a LAN) is 500. Each running
    /// drain holds one connection (which hyper would otherwise close) and a
    /// small task. `0` disables draining. Default is 1024.
    ///
    /// ```
    /// # use drain_on_drop::DrainOnDropLayer;
    /// let layer = DrainOnDropLayer::new().max_concurrent_drains(64);
    /// ```
    pub fn max_concurrent_drains(self, max: usize) -> Self {
        self.config(|c| c.max_concurrent_drains = max)
    }

    /// Response media types that are open-ended streams: an early drop of
    /// such a body is not drained (it would only burn the time budget on a
    /// stream that does not end) and its connection is closed at once,
    /// counted as skipped (`stream`). On HTTP/2 every dropped body is reset
    /// at once, unread; one of these types is counted `stream` rather than
    /// `reset`. Matched case-insensitively against the `Content-Type`
    /// without its parameters. Replaces the list; pass an empty list to
    /// drain streams like any other body.
    ///
    /// An entry ending in `*` matches every media type that starts with what
    /// comes before it (`"application/grpc+*"`).
    ///
    /// Default is `["text/event-stream", "application/grpc",
    /// "application/grpc+*"]`: server-sent events, and gRPC, whose streams a
    /// client cancels by resetting them (the server stops its work then).
    ///
    /// ```
    /// # use drain_on_drop::DrainOnDropLayer;
    /// // Also treat NDJSON as a stream.
    /// let layer = DrainOnDropLayer::new()
    ///     .stream_content_types(["text/event-stream", "application/x-ndjson"]);
    /// // Drain everything, streams included.
    /// let layer = DrainOnDropLayer::new().stream_content_types(Vec::<String>::new());
    /// ```
    pub fn stream_content_types<I>(self, types: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let types: Vec<String> = types.into_iter().map(|t| t.into().trim().to_ascii_lowercase()).collect();
        self.config(|c| c.stream_types = Arc::from(types))
    }

    /// The origin of requests that name none (a URI without an authority,
    /// and no `Host` header): tonic's `Channel`, and hyper's own HTTP/2
    /// connections, add it below the layer, so their requests reach it as
    /// `/package.Service/Method`. Their drains then follow this origin's round
    /// trip, [`origins`](Self::origins) shows it, and no WARN says that a
    /// request named no origin. A request that names its origin is keyed by
    /// its own. Default is none.
    ///
    /// ```
    /// use drain_on_drop::DrainOnDropLayer;
    ///
    /// // The URI the channel connects to (tonic: `endpoint.uri().clone()`).
    /// let layer = DrainOnDropLayer::new().default_origin("http://127.0.0.1:50051".parse().unwrap());
    /// # drop(layer);
    /// ```
    pub fn default_origin(self, origin: Uri) -> Self {
        self.config(|c| c.default_origin = Some(origin))
    }

    /// How pooled HTTP/1 connections meet their servers' idle timeouts.
    ///
    /// A server closes a keep-alive connection that sat idle for its
    /// timeout (Node 5 s, uvicorn and Apache 5 s, nginx 75 s, by default); a
    /// request sent on it as it closes fails, unread by the server
    /// (`IncompleteMessage`, sometimes `ConnectionReset`). The layer keeps
    /// connections that hyper-util alone would close at each early drop, so
    /// it keeps them clear of that race: with
    /// [`IdleTimeout::Learned`], **the
    /// default**, it learns each origin's idle timeout from what its servers
    /// say (`Keep-Alive: timeout=`, and `max=0`: no further request) and do
    /// (a pooled connection closed while idle, which the
    /// [`observe`](Self::observe) wrapper sees: **it needs the observer**),
    /// and a pooled connection idle for nearly that long (less the origin's
    /// round trip, the spread of the closes seen, and 25 ms or a 32nd of the
    /// timeout) takes no further request: hyper-util sends that request on
    /// another connection, before writing a byte of it. A connection idle
    /// for less is reused as before. Nothing runs in between (no timer): the
    /// check is made when a request comes. A shorter idle close relearns the
    /// timeout at once; a longer one is learned when a connection stays
    /// idle, unused, until its server closes it.
    ///
    /// What it cannot see: the first race with a server that says nothing,
    /// before any idle close was seen ([`RetryRefused`](crate::RetryRefused)
    /// above the layer sends a GET that lost it again), and a NAT or
    /// balancer that drops an idle flow without a FIN. Set
    /// [`IdleTimeout::Known`] with a time below
    /// the shortest such timeout on the way to retire connections before
    /// it, for every origin, or
    /// [`IdleTimeout::Ignored`] to retire
    /// none. [`origins`](Self::origins) shows what each origin learned
    /// (`idle_timeout`, `retire_after`), and [`DrainStats::reuse`] counts the
    /// connections `retired`. Default is `IdleTimeout::Learned`.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use drain_on_drop::{DrainOnDropLayer, IdleTimeout};
    ///
    /// // A balancer on the way drops idle flows after 60 s without a word.
    /// let layer = DrainOnDropLayer::new().server_idle_timeout(IdleTimeout::Known(Duration::from_secs(60)));
    /// # drop(layer);
    /// ```
    pub fn server_idle_timeout(self, idle_timeout: IdleTimeout) -> Self {
        self.config(|c| c.idle_timeout = idle_timeout)
    }

    /// Switches to adaptive budgets: per origin, drain only when reading the
    /// rest is expected to cost less than a new connection.
    ///
    /// For each origin (`scheme://host:port`) the layer keeps its round trip
    /// (as for the default budget), what a new connection costs (the
    /// connector's own time, measured by the [`observe`](Self::observe)
    /// wrapper: **adaptive mode needs it**; put it around the TLS connector
    /// so the handshake is counted) and how fast the link delivers drained
    /// bodies on connections past their first response (the highest of the
    /// last drains' rates; a new connection's drains are in TCP slow start
    /// and are not counted). A drain then gets a time budget of what a kept
    /// connection saves the next request: the setup cost, plus the round
    /// trips a new connection's slow start adds to a response the size of
    /// this one (four for 256 KiB, none for one that fits 14,600 bytes); and
    /// a byte budget of what the link moves in that time. A body whose
    /// remaining length is known and larger is not drained at all
    /// (`declared_over_budget`), and an origin where any drain costs more
    /// than a reconnect skips them (`reconnect_cheaper`). An origin whose
    /// drops keep missing gets the ceiling budget for one drop in eight, so
    /// an estimate that stopped every drain is measured again.
    ///
    /// Until the link was measured, an origin gets the larger of the
    /// default budget and what 100 Mbit/s moves in that time, so adaptive
    /// mode is never below the default on a short run. Without an observer,
    /// or before the origin's first new connection, the default budget
    /// applies: an adaptive layer that serves a response no observer tagged
    /// says so once, in a WARN event (target `drain_on_drop`), and
    /// [`origins`](Self::origins) shows why each origin has no estimate
    /// ([`Adaptive`](crate::Adaptive)).
    ///
    /// [`max_bytes`](Self::max_bytes) and [`max_time`](Self::max_time), when
    /// set, are hard ceilings (and the fixed budgets); otherwise the
    /// ceilings are 4 MiB and 1 s. Some 256 origins are tracked per layer
    /// (in 16 parts by hash, each up to 32 while the table has room), the
    /// least recently used of a part forgotten first; [`origins`](Self::origins) shows
    /// the estimates, and each drop's DEBUG event the figures it was decided
    /// with. Default is off.
    ///
    /// ```
    /// use drain_on_drop::DrainOnDropLayer;
    /// use http_body_util::Empty;
    /// use hyper::body::Bytes;
    /// use hyper_util::client::legacy::{Client, connect::HttpConnector};
    /// use hyper_util::rt::TokioExecutor;
    /// use tower::ServiceBuilder;
    ///
    /// // Adaptive, never more than 2 MiB or 500 ms per drain.
    /// let layer = DrainOnDropLayer::new()
    ///     .adaptive()
    ///     .max_bytes(2 * 1024 * 1024)
    ///     .max_time(std::time::Duration::from_millis(500));
    /// let connector = layer.observe(HttpConnector::new()); // measures the setup cost
    /// let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    /// let svc = ServiceBuilder::new().layer(layer).service(client);
    /// ```
    pub fn adaptive(self) -> Self {
        self.config(|c| c.budgets.set_adaptive())
    }

    /// Wraps a hyper-util connector in an [`ObserveConnector`] counting into
    /// this layer's [`DrainStats::reuse`]: `connections_opened`, and, for
    /// responses through services built from this layer, `requests` and
    /// `reused`, plus a
    /// [`ConnectionReuse`](crate::ConnectionReuse) in each response's
    /// extensions.
    pub fn observe<C>(&self, connector: C) -> ObserveConnector<C> {
        ObserveConnector::new(connector, self.stats())
    }

    /// The counters shared by this layer, its clones and every service built
    /// from them.
    pub fn stats(&self) -> DrainStats {
        self.shared.stats.clone()
    }

    /// Per-origin estimates (the round trip; in adaptive mode
    /// ([`adaptive`](Self::adaptive)) also the setup cost and throughput),
    /// sorted by origin, with the budget an early drop of a body the size of
    /// the byte budget from each would get now. Some 256 origins (in 16
    /// parts by hash, each up to 32 while the table has room), the least
    /// recently used of a part forgotten first; never the userinfo.
    pub fn origins(&self) -> Vec<OriginSnapshot> {
        let budgets = &self.shared.config.budgets;
        let snapshot = |origin: std::sync::Arc<crate::origin::Origin>| {
            let est: Estimates = origin.with(|est| *est);
            let round_trip = origin.round_trip();
            // As a drop of a body the size of the byte budget would get it,
            // without spending a probe.
            let sized = sizing::for_origin(budgets, &est, round_trip, budgets.max_bytes(), None);
            let budget = sizing::depends_on_origin(budgets, &sized).then_some(sized.budget);
            let idle = self.shared.config.idle_timeout;
            OriginSnapshot::new(&origin, &est, round_trip, budgets.adaptive(), budget, idle)
        };
        self.shared.origins.all().into_iter().map(snapshot).collect()
    }
}

impl Default for DrainOnDropLayer {
    /// Same as [`DrainOnDropLayer::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for DrainOnDropLayer {
    type Service = DrainOnDrop<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DrainOnDrop::from_shared(inner, self.shared.clone())
    }
}

// Here rather than in `service.rs`, so that the service does not depend on
// the layer that builds it.
impl<S> DrainOnDrop<S> {
    /// Wraps `inner` with the default budgets (see [`DrainOnDropLayer::new`]).
    pub fn new(inner: S) -> Self {
        DrainOnDropLayer::new().layer(inner)
    }

    /// Returns a new [`DrainOnDropLayer`] with the default budgets.
    pub fn layer() -> DrainOnDropLayer {
        DrainOnDropLayer::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sizing::{CEILING_TIME, DEFAULT_MAX_BYTES, DEFAULT_MAX_TIME, slow_start_rounds};

    /// The cell after the setter in `doc`'s table row for `setter`.
    fn table_default<'a>(doc: &'a str, what: &str, setter: &str) -> &'a str {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{setter}")))
            .unwrap_or_else(|| panic!("{what} has no table row for `{setter}`"));
        row.split('|').nth(2).unwrap_or_else(|| panic!("{what}: `{setter}`'s row has no default")).trim()
    }

    /// The rustdoc of `fn name` in this file.
    fn rustdoc_of(name: &str) -> String {
        let source = include_str!("layer.rs");
        let at = source.find(&format!("pub fn {name}")).unwrap_or_else(|| panic!("no `pub fn {name}`"));
        let doc: Vec<&str> =
            source[..at].lines().rev().skip(1).take_while(|l| l.trim_start().starts_with("///")).collect();
        doc.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// Every default the README's and the guide's setter tables state, and
    /// the setter's own rustdoc, against the code's: a default changed in
    /// one place and not the others fails here.
    #[test]
    fn the_readme_the_guide_and_the_rustdoc_state_the_defaults_the_code_has() {
        let config = Config::default();
        let kib = DEFAULT_MAX_BYTES / 1024;
        let rounds = slow_start_rounds(DEFAULT_MAX_BYTES) + 1;
        let (min_ms, max_s) = (DEFAULT_MAX_TIME.as_millis(), CEILING_TIME.as_secs());
        let on_off = |b: bool| if b { "on" } else { "off" };
        // (setter, what its default cell must contain, what its rustdoc must).
        let mut rows: Vec<(&str, Vec<String>, Vec<String>)> = vec![
            ("max_bytes", vec![format!("{kib} KiB")], vec![format!("Default is {kib} KiB")]),
            (
                "max_time",
                vec![format!("{rounds} round trips"), format!("{min_ms} ms to {max_s} s")],
                vec![format!("{min_ms} ms"), format!("{max_s} s")],
            ),
            (
                "max_concurrent_drains",
                vec![config.max_concurrent_drains.to_string()],
                vec![format!("Default is {}", config.max_concurrent_drains)],
            ),
            (
                "enabled",
                vec![on_off(config.enabled).into()],
                vec![format!("Default is {}", on_off(config.enabled))],
            ),
            ("adaptive", vec![on_off(config.budgets.adaptive()).into()], vec!["Default is off".into()]),
            ("default_origin", vec!["none".into()], vec!["Default is none".into()]),
            (
                "server_idle_timeout",
                vec!["learned per origin".into()],
                vec!["Default is `IdleTimeout::Learned`".into()],
            ),
        ];
        assert_eq!(config.idle_timeout, IdleTimeout::Learned);
        assert!(config.default_origin.is_none());
        let types: Vec<String> = config.stream_types.iter().map(|t| format!("\"{t}\"")).collect();
        rows.push(("stream_content_types", vec!["`text/event-stream`".into()], types));
        let guide = include_str!("../docs/GUIDE.md");
        let readme = include_str!("../README.md");
        for (setter, cell, rustdoc) in &rows {
            let doc = rustdoc_of(setter);
            for want in rustdoc {
                assert!(doc.contains(want.as_str()), "the rustdoc of `{setter}` should say {want:?}:\n{doc}");
            }
            for (what, text) in [("README.md", readme), ("docs/GUIDE.md", guide)] {
                let stated = table_default(text, what, setter);
                for want in cell {
                    assert!(
                        stated.contains(want.as_str()),
                        "{what} gives `{setter}` the default {stated:?}, not {want:?}"
                    );
                }
            }
        }
        // Every stream type by its name in the guide's row; the README names gRPC.
        let guide_types = table_default(guide, "docs/GUIDE.md", "stream_content_types");
        for t in config.stream_types.iter() {
            assert!(
                guide_types.contains(&format!("`{t}`")),
                "docs/GUIDE.md's stream types lack {t}: {guide_types}"
            );
        }
        assert!(table_default(readme, "README.md", "stream_content_types").contains("gRPC"));
        for (what, text) in [("README.md", readme), ("docs/GUIDE.md", guide)] {
            let stated = table_default(text, what, "RetryRefusedLayer::max_retries");
            assert_eq!(stated, crate::retries::MAX_RETRIES.to_string(), "{what}: `max_retries`");
        }
    }
}
