//! Drain response bodies that callers drop early, so hyper-util's pool keeps
//! the HTTP/1 connection; on HTTP/2, drop them at once, unread, and send
//! again what the server refused unprocessed, as Go's client does.
//!
//! ```toml
//! [dependencies]
//! drain-on-drop = "0.10"
//! http = "1"
//! http-body-util = "0.1"
//! hyper = { version = "1", features = ["http1", "server"] }
//! hyper-util = { version = "0.1", features = ["client-legacy", "http1", "tokio"] }
//! tokio = { version = "1", features = ["macros", "net", "rt-multi-thread", "time"] }
//! tower = { version = "0.5", features = ["util"] }
//! ```
//!
//! (The quick start of the README, shown on crates.io, is a whole program
//! with a local server to try it on; `server` and `net` are for that
//! server. CI builds both with this block.)
//!
//! ```no_run
//! use drain_on_drop::DrainOnDropLayer;
//! use http_body_util::Empty;
//! use hyper::body::Bytes;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use tower::ServiceBuilder;
//!
//! // 256 KiB per drain, and a time budget that follows each origin's round
//! // trip (50 ms on a LAN, 600 ms for an origin 100 ms away).
//! let layer = DrainOnDropLayer::new();
//! let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
//! let svc = ServiceBuilder::new()
//!     // retry, timeout, redirect layers go here, above the drain
//!     .layer(layer.clone())
//!     .service(client);
//! // ... use `svc`; then `layer.stats().snapshot()` says what was drained.
//! ```
//!
//! A complete program that waits for its drains and prints what happened is
//! [below](#example); [`recipes`] has reqwest, hyper's own connections, a
//! reverse proxy, Prometheus, and moving an existing client over.
//!
//! # The problem
//!
//! HTTP/1.1 sends responses back to back on one connection; a client finds
//! where the next response starts only by reading the previous body to its
//! last byte. hyper-util pools a connection only once its body was read to
//! the end. When a caller drops a response early (it only wanted the
//! status, read part of a stream, a retry policy discarded a 503, a redirect
//! follower threw away the 301 body), hyper reads once more what it already
//! buffered and otherwise closes the connection: the next request pays a new
//! TCP and TLS handshake, and, far from the server, TCP slow start again.
//! 100 sequential requests to a local server with 64 KiB bodies dropped
//! unread open 100 connections with hyper-util alone, 2 to 3 with this
//! layer; 30 requests to an origin 100 ms away with 64 KiB bodies take 12.42 s on 30
//! connections alone and 3.67 s on 2 with it (a simulated link with TCP slow
//! start; reading every body: 3.84 s). Go's net/http drains such bodies since 1.27 (256 KiB, 50 ms);
//! .NET has `MaxResponseDrainSize` and `ResponseDrainTimeout`.
//!
//! **On HTTP/2** a dropped body costs only its stream, which hyper's h2
//! resets at once (unless the body had all arrived: then nothing is sent);
//! the layer counts it (`reset` either way) and reads nothing, so no request
//! ever waits for a drop. What HTTP/2 servers refuse when clients reset fast
//! (Node's reset limit, nginx's `keepalive_requests`), they never processed:
//! [`RetryRefusedLayer`] sends it again. See [HTTP/2](#http2).
//!
//! # When you do not need it
//!
//! - **Bodies you always read to the end**: nothing is left to drain (the
//!   layer costs one allocation and a few reference counts per response).
//! - **`Connection: close`** on the request or the response, or a server
//!   that closes after every response: the connection is not reused anyway.
//!
//! # What this crate does
//!
//! [`DrainOnDropLayer`] wraps the client. Each response body comes back as a
//! [`DrainBody`], which forwards every frame unchanged. When a `DrainBody` is
//! dropped before its end:
//!
//! 1. **Decide.** No drain when draining is disabled, when the request or
//!    response says `Connection: close` (or an HTTP/1.0 response lacks
//!    keep-alive), when the body is close-delimited (no length, not chunked:
//!    it ends only when the server closes), when the
//!    content type is an open-ended stream, when the remaining length is
//!    known and exceeds the byte budget, or when the thread is unwinding
//!    from a panic. The inner body is then dropped at once, as hyper alone
//!    would.
//! 2. **Drain.** Otherwise hyper's own body (`hyper::body::Incoming`) is
//!    read in the drop as far as hyper has handed it over: that runs
//!    nothing but hyper's code and never waits, and a body whose rest is in
//!    what hyper handed over ends at once, with no task. (hyper's HTTP/1
//!    connection task hands a body over one decoded chunk at a time, so a
//!    body ends in the drop only when its rest fits that chunk: a small
//!    body, or the tail of a longer one.) A body that has to wait, and any
//!    other body (whose code could block, or take a lock the caller holds:
//!    the drop does not even call its `size_hint` or `is_end_stream`), is
//!    read on a background task (see [Runtime](#runtime)), if fewer than
//!    [`max_concurrent_drains`](DrainOnDropLayer::max_concurrent_drains) are
//!    running. The drain reads and discards frames (data and trailers)
//!    until the end of the body, then drops it, and hyper-util puts the
//!    connection back in the pool. It gives up, and the connection is
//!    closed, when more than [`max_bytes`](DrainOnDropLayer::max_bytes)
//!    would have to be read, when [`max_time`](DrainOnDropLayer::max_time)
//!    has passed since the drop (checked before every frame, so the outcome
//!    is known within `max_time` plus the time of one frame), or on the
//!    first body error. Dropping never blocks and never waits.
//! 3. **Count.** Every early drop lands exactly once in [`DrainStats`] under
//!    one [`Reason`], which belongs to one [`Outcome`]: drained, abandoned,
//!    skipped or failed. A skipped drop read nothing. It also emits one
//!    `tracing` event at DEBUG (target `drain_on_drop`) with the outcome,
//!    the reason, the origin (`scheme://host:port`), the status, the bytes
//!    drained and the time spent, inside the span that was current when the
//!    request was called.
//!
//! A body read to its end, or already at its end (HEAD, 204, 304,
//! `Content-Length: 0`), is never drained or counted and costs little
//! beyond the wrapper, in every mode: no task, one reference to the layer's
//! state and one to the runtime, a marker in the response's extensions, and
//! one short lock when its head arrives, on the layer's origin table, to
//! record the round trip (the default budget follows it). An early drop
//! takes no further lock in the default mode (the round trip was read with
//! the head) unless the DEBUG event is on; a drain that waited takes one
//! more at its end to record what it measured. Adaptive mode adds a lock at
//! the drop, for its estimates.
//!
//! A response drains once, however it was wrapped: the first `DrainOnDrop`
//! (or [`wrap_response`](DrainOnDropLayer::wrap_response)) to see it marks
//! it, and any other one further out passes its body through. Stacked
//! layers (the same one twice, two with different budgets, a tower
//! `Buffer` between them) therefore count each early drop once, in the
//! innermost layer's stats and under its budgets. A response rebuilt
//! between two layers, its extensions (and the mark) lost, drains once too,
//! in the outer layer.
//!
//! # Counting and exporting
//!
//! Wait until [`DrainSnapshot::in_flight`] is 0, then read: every snapshot
//! taken after one that saw `in_flight == 0` includes every drop that ended
//! before it. [`DrainSnapshot::iter`] lists every [`Reason`] with its count,
//! so an exporter labels a counter by `reason.outcome().as_str()` and
//! `reason.as_str()` without naming the reasons ([`recipes`] has a
//! Prometheus collector). [`DrainSnapshot::since`] gives the difference of
//! two snapshots.

//! # Why byte *and* time budgets
//!
//! Draining trades bytes read now for a handshake saved later. The byte
//! budget bounds the bandwidth spent on data nobody wants; the time budget
//! bounds how long a connection (and a small task) is held for a server that
//! stalls, trickles or streams forever. A body whose remaining
//! `Content-Length` is above the byte budget is not read at all.
//!
//! **The default time budget follows the origin's round trip.** A fixed
//! 50 ms (Go 1.27's) is right on a LAN and wrong far away: 100 ms from the
//! server, the last bytes of even a 16 KiB body come one round trip after
//! its head on a new connection (TCP slow start), so every such drain runs
//! out of time, and every request pays a new TCP and TLS handshake plus the
//! slow start of its response. So the layer measures, per origin, the
//! shortest time from a request to its response head in the last 16 s (one
//! round trip plus the server's quickest answer), and gives each drain
//! enough round trips for a new connection's slow start to deliver the
//! byte budget, plus one: with the default 256 KiB, **six round trips,
//! never less than 50 ms nor more than 1 s**. A LAN origin (a round trip
//! under 8 ms) gets 50 ms, as before; one 20 ms away 120 ms, 100 ms away
//! 600 ms, 150 ms away 900 ms. [`DrainOnDropLayer::origins`] shows each
//! origin's round trip and budget. Setting
//! [`max_time`](DrainOnDropLayer::max_time) fixes the time budget instead;
//! [`max_bytes`](DrainOnDropLayer::max_bytes) is always the byte budget
//! (default 256 KiB). The cost of the longer budget: a far server that
//! stalls holds its connection (and a task) up to that long before it is
//! closed.
//!
//! # Idle connections
//!
//! A kept HTTP/1 connection meets its server's idle timeout: a request sent
//! on it as the server closes it for being idle fails before any byte of
//! its response (`IncompleteMessage`, sometimes `ConnectionReset`), unread
//! by the server. hyper-util alone rarely met that race where bodies were
//! dropped (each drop closed its connection); the layer keeps those
//! connections, so it keeps them clear of it. With
//! [`observe`](DrainOnDropLayer::observe) around the connector, it learns
//! each origin's idle timeout from what its servers say (`Keep-Alive:
//! timeout=`) and do (a pooled connection closed while idle), and a pooled
//! connection idle for nearly that long takes no further request: hyper-util
//! sends that request on another connection before writing a byte of it.
//! A connection idle for less is reused. [`RetryRefusedLayer`] above the
//! layer sends again, on another connection, a request that failed before
//! any byte of its response when its method is idempotent (the race lost
//! before anything was learned), as Go's `Transport` does; never a POST that
//! may have been read. See
//! [`server_idle_timeout`](DrainOnDropLayer::server_idle_timeout) and
//! [`IdleTimeout`].
//!
//! # HTTP/2
//!
//! On HTTP/2 a dropped body never costs the connection, only its stream,
//! and a drain would save nothing: the connection is kept either way. So
//! the layer reads nothing of a dropped HTTP/2 body and holds nothing for
//! it: the body is dropped at once, hyper's h2 resets its stream
//! (RST_STREAM CANCEL, unless the whole body had arrived), the server stops
//! sending, and the drop is counted, `reset` or (an open-ended stream,
//! [`stream_content_types`]: server-sent events, gRPC) `stream`. No request
//! waits for a drop, and no stream or flow-control window is held for one,
//! whatever the body does (flows, trickles, stalls, never ends). This is
//! what Go 1.27's client does.
//!
//! It rests on h2 0.4.21 or later (the `http2` feature requires it), which
//! remembers 8,192 reset streams per connection for 5 s and forgets the
//! oldest first, ignoring the DATA still arriving for them: resets at once
//! lose no request. (h2 0.4.20 and older remembered 50 for 1 s, and DATA for
//! a forgotten stream counted towards GOAWAY `too_many_internal_resets`,
//! hyperium/h2#856.)
//!
//! **One dial at a time, within `dial_patience`; one connection while the
//! server bears its resets.** Over TLS with ALPN (hyper-rustls offering h2
//! and http/1.1, no `http2_only`: how most users run it), hyper-util's
//! `Client` dials a TLS connection for every request that finds none, and
//! throws all but one away after their handshakes: at the start, and after
//! every connection lost. [`Http2Connector`] (feature `http2`), wrapped
//! around the client's connector, dials an HTTP/2 origin once at a time;
//! the other requests wait for that dial and get its connection from
//! hyper-util's pool. The dial is the origin's, not the first request's: a
//! caller that gives up leaves it going for those who wait. A wait is
//! bounded: a dial slower than the origin's `dial_patience` (by default
//! twice its median handshake, 250 ms to 2 s; 500 ms before any) while
//! others wait is raced by a second attempt, and those waiting give that
//! one as long again, then each dials its own, as hyper-util alone would,
//! so a handshake that never ends holds no one; a failed attempt fails
//! those it no longer serves sooner at once, with its error (typed, behind
//! `source()`); a connection gone unused frees those waiting at once; a
//! caller that gives up leaves nothing behind. The connector also counts the
//! RST_STREAM frames each connection sends and reads what its server says
//! of them, and moves a connection on (no new request on it; hyper-util
//! dials the next, once) only after its server refused streams or closed
//! a connection for the resets it received: Node 20 never gives back the
//! session memory it counted for bytes queued on a stream the client
//! resets, and past 10 MB refuses new streams with ENHANCE_YOUR_CALM;
//! nghttp2 and Apache send GOAWAY INTERNAL_ERROR past their limits. From
//! then on, that origin's connections each move on after half the resets
//! the refused one had sent (its `resets_per_connection`), a limit tried
//! higher now and then and dropped when the server bears it. Servers that
//! refuse nothing (Go's net/http, nginx, h2o, hyper) keep one connection
//! while the callers fit in its streams: a connection whose server's
//! `SETTINGS_MAX_CONCURRENT_STREAMS` are all taken moves on too, and the
//! next request dials another (up to `max_connections_per_origin`), where
//! hyper-util alone queues every request on one connection.
//!
//! **What failed before it was processed goes again.** Node's nghttp2 takes
//! 1,000 resets in a burst, then 33 a second, and sends GOAWAY
//! INTERNAL_ERROR; nginx sends a graceful GOAWAY after `keepalive_requests`;
//! any server shutting down does; Node's refusals above. hyper-util's
//! `Client` fails those requests. [`RetryRefusedLayer`], one line above
//! this layer, sends a request again on another connection
//! (at once, then after a wait doubling from 25 ms, 6 times at most) when
//! the server never processed it (above a GOAWAY's last stream id, refused
//! with REFUSED_STREAM, failed by hyper-util before a byte of it was
//! written: a pool checkout handed a connection that had just closed, as
//! servers recycling connections cause), or when it may have but its
//! method is idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE: sent
//! twice, it has the effect of once); never a POST that may have been
//! processed. reqwest retries
//! the unprocessed ones itself since 0.12.23.
//!
//! The three together are the README's HTTP/2 stack: [`RetryRefusedLayer`]
//! above this layer, over a `Client` built on [`Http2Connector`]. Over TLS
//! with ALPN (hyper-rustls offering h2 and http/1.1, with the system's
//! roots), these `[dependencies]` lines take the place of the same crates'
//! in the block at the top, and add hyper-rustls:
//!
//! ```toml
//! drain-on-drop = { version = "0.10", features = ["http2"] }
//! hyper-util = { version = "0.1", features = ["client-legacy", "http1", "http2", "tokio"] }
//! hyper-rustls = { version = "0.27", default-features = false, features = ["http1", "http2", "native-tokio", "ring", "tls12"] }
//! ```
//!
//! and the client is built on the TLS connector:
//!
//! ```ignore
//! use drain_on_drop::{DrainOnDropLayer, Http2Connector, RetryRefusedLayer};
//! use http_body_util::Empty;
//! use hyper::body::Bytes;
//! use hyper_util::client::legacy::Client; // no `HttpConnector`: hyper-rustls brings its own
//! use hyper_util::rt::TokioExecutor;
//! use tower::ServiceBuilder;
//!
//! let layer = DrainOnDropLayer::new();
//! let https = hyper_rustls::HttpsConnectorBuilder::new().with_native_roots()?.https_or_http().enable_all_versions().build();
//! let connector = Http2Connector::new(layer.observe(https)); // one dial at a time per HTTP/2 origin
//! let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
//! let mut svc = ServiceBuilder::new().layer(RetryRefusedLayer::new()).layer(layer).service(client);
//! ```
//!
//! (Not compiled here: the crate's tests have no `native-tokio`. These are
//! the README's HTTP/2 lines, which CI builds into its quick start and runs
//! against Node's HTTP/2 server over TLS.) `layer.observe` counts
//! connections and their reuse ([`ConnectionReuse`]).
#![cfg_attr(
    not(feature = "http2"),
    doc = "\n*These pages were built without the `http2` feature: [`Http2Connector`] links \
           to docs.rs. In the crate's repository, \
           `cargo doc --open -p drain-on-drop --all-features` documents it here; in a \
           project of your own, enable the feature in its `Cargo.toml`.*\n"
)]
//!
//! Requests whose origin is added below the layer (tonic's `Channel` adds
//! the authority) are counted under [`DrainOnDropLayer::default_origin`].
//!
//! # Per request, per stream, per connection
//!
//! - A [`DrainBudget`] in a request's extensions overrides the budgets for
//!   that response (`DrainBudget::disabled()` for an export nobody drains).
//! - Open-ended streams ([`stream_content_types`], default
//!   `text/event-stream` and gRPC) are closed at once instead of holding a
//!   drain for the whole time budget (on HTTP/2 every dropped body is).
//! - [`DrainOnDropLayer::observe`] wraps the client's connector so that every
//!   response carries a [`ConnectionReuse`] (new or reused connection, setup
//!   time) and [`DrainStats::reuse`] counts `requests`, `reused` and
//!   `connections_opened`.
//!
//! [`stream_content_types`]: DrainOnDropLayer::stream_content_types
//!
//! # Adaptive budgets
//!
//! The default's byte budget is still one size for every origin: on a LAN
//! draining 1 MiB steals the link from the next request and costs more than
//! a new connection; across regions a new connection costs TCP and TLS
//! round trips and a slow start, and draining far more pays.
//! [`DrainOnDropLayer::adaptive`] keeps, per origin, what a new connection
//! costs (measured by the [`observe`](DrainOnDropLayer::observe) connector
//! wrapper, which adaptive mode needs) and how fast the link delivers
//! drained bodies on warm connections, and gives each drain a time budget of
//! what a kept connection saves the next request (the setup, plus the round
//! trips a new connection's slow start would add to a response of this
//! size) and a byte budget of what the link moves in that time.
//! [`DrainOnDropLayer::origins`] shows the estimates and the current
//! threshold.
//!
//! # Where the layer goes
//!
//! Innermost, directly around the client. It must see the body type the
//! client returns (hyper's `Incoming`) and every response the client returns,
//! including the ones a retry or redirect layer above it discards: those
//! discarded bodies are exactly what it drains. A timeout layer above it
//! bounds the time to the response head; the drain starts after that, in the
//! background, under its own `max_time`. Decompression goes above it, so
//! that budgets count wire bytes.
//!
//! Any `Send` body works below it, `Unpin` or not (tower-http's response
//! body timeout, whose body holds a `PhantomPinned`, needs no adapter): the
//! layer keeps the inner body in a box of its own, one allocation per
//! response. [`recipes`] has a whole tower-http stack in that order.
//!
//! A body that is not `Send` cannot be: its drain runs on a tokio task.
//! rustc then reports "the method `ready` exists for struct
//! `DrainOnDrop<…>`, but its trait bounds were not satisfied" (E0599) at the
//! first call, without naming `Send`; the response body type below the layer
//! is what to look at:
//!
//! ```compile_fail,E0599
//! # use std::convert::Infallible;
//! # use std::rc::Rc;
//! use drain_on_drop::DrainOnDropLayer;
//! use http_body_util::Full;
//! use hyper::body::Bytes;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! /// A body holding an `Rc`: not `Send`.
//! struct Local(Full<Bytes>, Rc<()>);
//! # impl http_body::Body for Local {
//! #     type Data = Bytes;
//! #     type Error = Infallible;
//! #     fn poll_frame(
//! #         self: std::pin::Pin<&mut Self>,
//! #         cx: &mut std::task::Context<'_>,
//! #     ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
//! #         std::pin::Pin::new(&mut self.get_mut().0).poll_frame(cx)
//! #     }
//! # }
//!
//! # async fn run() {
//! let inner = tower::service_fn(|_: http::Request<()>| async {
//!     Ok::<_, Infallible>(http::Response::new(Local(Full::new(Bytes::new()), Rc::new(()))))
//! });
//! let mut svc = ServiceBuilder::new().layer(DrainOnDropLayer::new()).service(inner);
//! let _ = svc.ready().await; // E0599: `Local` is not `Send`
//! # }
//! ```
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use drain_on_drop::DrainOnDropLayer;
//! use http_body_util::Empty;
//! use hyper::body::Bytes;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! # // A local server answering every request with 64 KiB.
//! # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! # let url = format!("http://{}/status", listener.local_addr()?);
//! # tokio::spawn(async move {
//! #     while let Ok((stream, _)) = listener.accept().await {
//! #         let svc = hyper::service::service_fn(|_| async {
//! #             let body = http_body_util::Full::new(Bytes::from(vec![0u8; 64 * 1024]));
//! #             Ok::<_, std::convert::Infallible>(http::Response::new(body))
//! #         });
//! #         let io = hyper_util::rt::TokioIo::new(stream);
//! #         tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(io, svc));
//! #     }
//! # });
//! let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
//! // 256 KiB per drain, and up to a second: on any machine, this example's
//! // drains of a local server's 64 KiB end well within it.
//! let layer = DrainOnDropLayer::new()
//!     .max_bytes(256 * 1024)
//!     .max_time(Duration::from_secs(1));
//! let stats = layer.stats();
//! let mut svc = ServiceBuilder::new().layer(layer).service(client);
//!
//! for _ in 0..10 {
//!     let req = http::Request::get(&url).body(Empty::new())?;
//!     let res = svc.ready().await?.call(req).await?;
//!     // Only the status matters: the 64 KiB body is dropped unread and
//!     // drained in the background, so the next request reuses the connection.
//!     assert!(res.status().is_success());
//! }
//! // Drains run in the background: wait for them before reading the counters.
//! assert!(stats.wait_idle(Duration::from_secs(5)).await, "each drain ends within its 1 s budget");
//! assert_eq!(stats.snapshot().drained, 10);
//! # Ok(())
//! # }
//! ```
//!
//! # Runtime
//!
//! A drain that has to wait for the server runs on the tokio runtime its
//! response arrived on (where hyper's connection task runs), wherever the
//! body was dropped (another runtime, a plain thread); if that runtime has
//! already shut down, on the runtime current at the drop. It needs no time
//! driver: its deadline is kept by a timer thread of the crate's own (one
//! per process, running only while a drain or [`DrainStats::wait_idle`]
//! waits), so a runtime built without `enable_time`, where hyper-util's
//! client works, drains as any other, and nothing panics. A static client
//! shared by many short-lived runtimes (one per test) works: each response
//! drains on its own runtime.
//!
//! **A current-thread runtime runs its drains only while it is driven.** A
//! body dropped outside `block_on` (a synchronous wrapper that calls
//! `block_on` per request) has its drain queued until the next `block_on`:
//! until then it holds its connection and a `max_concurrent_drains` slot,
//! its outcome is not counted, and `wait_idle` elsewhere times out. The
//! time budget still counts from the drop.
//!
//! With no runtime to wait on, the drop does not wait: counted `no_runtime`
//! (skipped, nothing read) or, when it had already read part of hyper's
//! body, `cannot_wait` (abandoned). A drain still running (or queued) when
//! its runtime shuts down is dropped with it and counted as abandoned
//! (`runtime_shutdown`), whatever the thread was doing, a panic of the
//! caller's included. A body that panics while drained is counted as failed
//! (`body_panic`), and the panic stays in the drain.
//!
//! No state of a layer or of a runtime outlives the last service, response
//! or drain that uses it: a response holds a reference to the runtime it
//! arrived on until it is dropped or drained, and a drain holds only the
//! runtime it runs on (the one current at the drop only for the instant it
//! is handed over).
//!
//! The code a drop runs is the layer's, hyper's, and tokio's (to spawn a
//! task); of the user's, only the `tracing` subscriber, for the DEBUG event
//! of a request made while that event was enabled. A response rebuilt
//! between two layers (its extensions, and the layer's one-drain marker,
//! lost) still drains once: the outer layer owns its drain, and the inner
//! one gives its own up.
//!
//! [`Client`]: https://docs.rs/hyper-util/latest/hyper_util/client/legacy/struct.Client.html

//! [`RetryRefusedLayer`]: crate::RetryRefusedLayer

// The HTTP/2 connector exists with the `http2` feature: without it (as
// `cargo doc` builds by default), its links go to docs.rs, built with it.
#![cfg_attr(feature = "http2", doc = "\n[`Http2Connector`]: crate::Http2Connector")]
#![cfg_attr(
    not(feature = "http2"),
    doc = "\n[`Http2Connector`]: https://docs.rs/drain-on-drop/latest/drain_on_drop/connector/struct.Http2Connector.html"
)]
#![forbid(unsafe_code)]

// The rooms, from the entry point down (`tests/layout.rs` keeps the import
// graph one-way):
// - `layer` (settings, `origins()`), `service`, `future`: the tower
//   pieces; `roads` (`sending`, `wrap_response`, `http1_sender`): the drain
//   on responses that do not come through the service; `request` reads a request in `call`, `response` does
//   everything once when its head arrives, `body` forwards frames and, at an
//   early drop, asks the policy.
// - `policy`: the one place that decides (drain or skip, which body's code
//   runs in the drop, the cap, what an outcome teaches an origin); `headers`
//   reads what the headers say; `sizing`: what a drain may spend (every
//   budget rule and number); `runtime`: where a drain runs; `keepalive`:
//   HTTP/1 keep-alive's rules (what an origin learns of its servers' idle
//   timeout, when a pooled connection retires), asked by `observe`;
//   `retries`: which failed requests go again, and when, asked by `retry`,
//   the tower layer that sends them again; `http2`: HTTP/2's rules (a drop
//   is reset at once; when a dial is waited for and how long; when a
//   connection moves on and what a server teaches; `http2::retries`: what
//   an h2 error and the connector's errors say), asked by the policy, by
//   `connector` (`Http2Connector`) and by `retries`.
// - `drain`: the one place that drains; `budget`: `DrainBudget` and the
//   allowance a drain spends; `timer`: deadlines without a runtime timer.
// - `stats`: the one place that counts; `event`: the DEBUG event;
//   `outcome`: reasons and outcomes; `origin`: what is measured per origin;
//   `observe`: the connector wrapper; `shared`: what a layer's pieces share.
mod body;
mod budget;
mod conn;
#[cfg(feature = "http2")]
pub mod connector;
mod drain;
mod event;
pub mod future;
mod headers;
mod http2;
mod keepalive;
mod layer;
#[cfg(feature = "reqwest-middleware")]
mod middleware;
pub mod observe;
mod origin;
mod outcome;
mod policy;
#[cfg_attr(not(doctest), doc = include_str!("recipes.md"))]
// Its code blocks need reqwest, axum and prometheus-client: they are
// compiled and run as doctests of the workspace's `stacks` member.
pub mod recipes {}
mod request;
mod response;
mod retries;
pub mod retry;
mod roads;
mod runtime;
mod sending;
mod service;
mod shared;
mod sizing;
mod stats;
mod timer;

pub use body::DrainBody;
pub use budget::DrainBudget;
pub use conn::Http1Sender;
#[cfg(feature = "http2")]
pub use conn::Http2Sender;
#[cfg(feature = "http2")]
pub use connector::{Http2Connection, Http2Connector};
pub use keepalive::IdleTimeout;
pub use layer::DrainOnDropLayer;
pub use observe::{ConnectionReuse, ObserveConnector};
pub use origin::{Adaptive, OriginSnapshot};
pub use outcome::{Outcome, Reason};
pub use retry::{RetryRefused, RetryRefusedLayer};
pub use sending::Sending;
pub use service::DrainOnDrop;
pub use stats::{DrainSnapshot, DrainStats, ReuseSnapshot};

/// Compiles the code blocks of README.md.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
