//! tonic 0.14 as a road of its own: the layer between a hand-written tonic
//! client (as tonic-build generates them) and tonic's `Channel`, against a
//! real tonic server on loopback (`tests/tonic/firehose.rs`).
//!
//! tonic sends path-only URIs (`/firehose.Firehose/Subscribe`) and its
//! `Channel` adds the authority below the layer: `default_origin` names it.
//! A dropped `Streaming` is a dropped HTTP/2 body: gRPC's content type is an
//! open-ended stream by default, reset, never read. The server counts the
//! messages it handed to tonic and the streams whose sender found the
//! receiver gone (the client reset the stream).
//!
//! Figures are printed (`cargo test -p drain-on-drop-stacks --test tonic --
//! --nocapture`); every wait is on a condition with a deadline.

#[path = "tonic/firehose.rs"]
mod firehose;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, Outcome, Reason};
use firehose::firehose_client::FirehoseClient;
use firehose::firehose_server::{Firehose, FirehoseServer};
use firehose::{Chunk, EchoReply, EchoRequest, SubscribeRequest};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};
use tracing::Instrument;

const KIB: u32 = 1024;
const MIB: u64 = 1024 * 1024;

/// The deadline of every wait: only a deadline, each wait returns as soon as
/// its condition holds (2 cores, a debug build, other tests in parallel).
const DEADLINE: Duration = Duration::from_secs(60);

type StdError = Box<dyn std::error::Error + Send + Sync + 'static>;

// ---------------------------------------------------------------------------
// The server

/// What the server counts.
#[derive(Debug, Default)]
struct Counts {
    /// Unary calls answered.
    echoes: AtomicU64,
    /// Subscribe calls begun.
    streams: AtomicU64,
    /// Messages handed to tonic.
    sent: AtomicU64,
    /// Streams whose sender found the receiver gone: tonic dropped the
    /// response stream, which it does when the client resets the stream.
    cancelled: AtomicU64,
    /// Streams that sent all their `count` messages.
    completed: AtomicU64,
    /// Streams whose sender runs now, and the most at once.
    open: AtomicU64,
    max_open: AtomicU64,
}

impl Counts {
    fn get(&self, counter: fn(&Counts) -> &AtomicU64) -> u64 {
        counter(self).load(Ordering::SeqCst)
    }
}

struct FirehoseService {
    counts: Arc<Counts>,
}

impl Firehose for FirehoseService {
    async fn echo(
        &self,
        request: tonic::Request<EchoRequest>,
    ) -> Result<tonic::Response<EchoReply>, tonic::Status> {
        self.counts.echoes.fetch_add(1, Ordering::SeqCst);
        Ok(tonic::Response::new(EchoReply { message: request.into_inner().message }))
    }

    type SubscribeStream = tokio_stream::wrappers::ReceiverStream<Result<Chunk, tonic::Status>>;

    /// `count` messages of `message_bytes` (endless when 0), each sent as
    /// soon as tonic takes the last one: as fast as flow control allows.
    async fn subscribe(
        &self,
        request: tonic::Request<SubscribeRequest>,
    ) -> Result<tonic::Response<Self::SubscribeStream>, tonic::Status> {
        let SubscribeRequest { message_bytes, count } = request.into_inner();
        let counts = Arc::clone(&self.counts);
        counts.streams.fetch_add(1, Ordering::SeqCst);
        let data = Bytes::from(vec![b'x'; message_bytes as usize]);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let open = counts.open.fetch_add(1, Ordering::SeqCst) + 1;
        counts.max_open.fetch_max(open, Ordering::SeqCst);
        tokio::spawn(async move {
            for seq in 0.. {
                if count != 0 && seq == count {
                    counts.completed.fetch_add(1, Ordering::SeqCst);
                    break;
                }
                if tx.send(Ok(Chunk { seq, data: data.clone() })).await.is_err() {
                    counts.cancelled.fetch_add(1, Ordering::SeqCst);
                    break;
                }
                counts.sent.fetch_add(1, Ordering::SeqCst);
            }
            counts.open.fetch_sub(1, Ordering::SeqCst);
        });
        Ok(tonic::Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

/// A tonic server on `127.0.0.1:0`, on the test's runtime.
struct TestServer {
    /// `http://127.0.0.1:port`
    uri: http::Uri,
    counts: Arc<Counts>,
}

async fn start_server() -> TestServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap()).parse().unwrap();
    let counts = Arc::new(Counts::default());
    let svc = FirehoseServer::new(FirehoseService { counts: Arc::clone(&counts) });
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tokio::spawn(Server::builder().add_service(svc).serve_with_incoming(incoming));
    TestServer { uri, counts }
}

/// A channel to `server` (one HTTP/2 connection, connected now) and the
/// endpoint's URI.
async fn channel(endpoint: &Endpoint) -> Channel {
    endpoint.connect().await.expect("the channel connects to the local server")
}

/// The layer as a tonic user sets it up: the endpoint's origin named.
fn layer_for(endpoint: &Endpoint) -> DrainOnDropLayer {
    DrainOnDropLayer::new().default_origin(endpoint.uri().clone())
}

// ---------------------------------------------------------------------------
// Traffic

/// What a run of server-streaming calls saw at the clients.
struct Traffic {
    calls: usize,
    failed: usize,
    first_failure: Option<String>,
    /// Calls whose failure names h2's GOAWAY for too many internal resets.
    too_many_resets: usize,
    elapsed: Duration,
}

impl std::fmt::Display for Traffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} calls in {:.1?}, {} failed ({} to too_many_internal_resets)",
            self.calls, self.elapsed, self.failed, self.too_many_resets
        )?;
        match &self.first_failure {
            Some(first) => write!(f, "; the first: {first}"),
            None => Ok(()),
        }
    }
}

/// The longest a run of calls may take: seconds, on any machine (a layer
/// that paced its resets at 20 a second would take 80 s for 1,600 drops).
const RUN_DEADLINE: Duration = Duration::from_secs(300);

/// `callers` tasks share `client` (one channel); each makes `each`
/// Subscribe calls in turn, reads `read` messages of each stream and drops
/// the `Streaming`.
async fn drop_streams<T>(
    client: FirehoseClient<T>,
    callers: usize,
    each: usize,
    request: SubscribeRequest,
    read: usize,
) -> Traffic
where
    T: tonic::client::GrpcService<tonic::body::Body> + Clone + Send + 'static,
    T::Future: Send,
    T::Error: Into<StdError>,
    T::ResponseBody: http_body::Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<StdError> + Send,
{
    tokio::time::timeout(RUN_DEADLINE, async move {
        let start = Instant::now();
        let failures = Arc::new(Mutex::new(Vec::<String>::new()));
        let tasks: Vec<_> = (0..callers)
            .map(|_| {
                let mut client = client.clone();
                let request = request.clone();
                let failures = Arc::clone(&failures);
                tokio::spawn(async move {
                    for _ in 0..each {
                        let failure = match client.subscribe(request.clone()).await {
                            Ok(res) => {
                                let mut stream = res.into_inner();
                                let mut failure = None;
                                for i in 0..read {
                                    match stream.message().await {
                                        Ok(Some(_)) => {}
                                        Ok(None) => {
                                            failure = Some(format!("the stream ended after {i} messages"))
                                        }
                                        Err(status) => failure = Some(format!("message {i}: {status}")),
                                    }
                                    if failure.is_some() {
                                        break;
                                    }
                                }
                                drop(stream); // early: the rest of the stream is the layer's (or h2's)
                                failure
                            }
                            Err(status) => Some(format!("the call: {status}")),
                        };
                        if let Some(failure) = failure {
                            failures.lock().unwrap().push(failure);
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("a caller panicked");
        }
        let failures = failures.lock().unwrap();
        Traffic {
            calls: callers * each,
            failed: failures.len(),
            first_failure: failures.first().cloned(),
            too_many_resets: failures.iter().filter(|f| f.contains("too_many_internal_resets")).count(),
            elapsed: start.elapsed(),
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{callers} callers x {each} calls did not end within {RUN_DEADLINE:?}"))
}

/// The server's figures, for the printout.
fn server_figures(counts: &Counts) -> String {
    format!(
        "streams {}, messages sent {}, streams cancelled {}, completed {}, most open at once {}",
        counts.get(|c| &c.streams),
        counts.get(|c| &c.sent),
        counts.get(|c| &c.cancelled),
        counts.get(|c| &c.completed),
        counts.get(|c| &c.max_open),
    )
}

/// Waits until `cond` holds, or panics with `what` after [`DEADLINE`].
async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "{what}: not within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// ---------------------------------------------------------------------------
// Captured WARN events

/// A WARN (or ERROR) event of target `drain_on_drop`, with the name of the
/// `case` span it was emitted in (each test runs its calls in one).
#[derive(Clone, Debug)]
struct Warning {
    case: Option<String>,
    message: String,
}

static WARNINGS: Mutex<Vec<Warning>> = Mutex::new(Vec::new());

/// The `name` of a `case` span, kept in its extensions.
struct Case(String);

struct Capture;

impl Capture {
    /// Only `case` spans and WARN or worse events: the layer's DEBUG events
    /// stay off, as in a service that logs at INFO.
    fn wanted(meta: &tracing::Metadata<'_>) -> bool {
        (meta.is_span() && meta.name() == "case")
            || (meta.is_event() && *meta.level() <= tracing::Level::WARN)
    }
}

struct Visitor<'a>(&'a str, &'a mut String);

impl tracing::field::Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == self.0 {
            *self.1 = format!("{value:?}");
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == self.0 {
            *self.1 = value.to_string();
        }
    }
}

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn register_callsite(&self, meta: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        if Self::wanted(meta) {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn enabled(&self, meta: &tracing::Metadata<'_>, _: tracing_subscriber::layer::Context<'_, S>) -> bool {
        Self::wanted(meta)
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut name = String::new();
        attrs.record(&mut Visitor("name", &mut name));
        ctx.span(id).unwrap().extensions_mut().insert(Case(name));
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != "drain_on_drop" {
            return;
        }
        let mut message = String::new();
        event.record(&mut Visitor("message", &mut message));
        let case = ctx.event_scope(event).and_then(|scope| {
            scope.from_root().find_map(|span| span.extensions().get::<Case>().map(|c| c.0.clone()))
        });
        WARNINGS.lock().unwrap().push(Warning { case, message });
    }
}

/// Installs the capturing subscriber for the whole binary (tests run in
/// parallel on threads of their own: a thread-local one would miss events
/// of tasks on other threads).
fn capture_warnings() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        use tracing_subscriber::layer::SubscriberExt;
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Capture))
            .expect("no other global subscriber in this binary");
    });
}

/// The WARN events emitted in the `case` span named `case`.
fn warnings_in(case: &str) -> Vec<Warning> {
    WARNINGS.lock().unwrap().iter().filter(|w| w.case.as_deref() == Some(case)).cloned().collect()
}

const NO_ORIGIN: &str = "a request named no origin";

/// `n` unary calls through `client`; asserts each echo.
async fn echo_calls<T>(client: &mut FirehoseClient<T>, n: usize)
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<StdError>,
    T::ResponseBody: http_body::Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<StdError> + Send,
{
    for i in 0..n {
        let message = format!("hello {i}");
        let reply = client
            .echo(EchoRequest { message: message.clone() })
            .await
            .expect("a unary call through the layer");
        assert_eq!(reply.into_inner().message, message, "the server's echo of call {i}");
    }
}

// ---------------------------------------------------------------------------
// (a) Unary calls, and the origin

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_calls_with_default_origin_warn_nothing_and_measure_the_endpoints_round_trip() {
    capture_warnings();
    let server = start_server().await;
    let endpoint = Endpoint::from(server.uri.clone());
    let layer = layer_for(&endpoint);
    let svc = ServiceBuilder::new().layer(layer.clone()).service(channel(&endpoint).await);
    let mut client = FirehoseClient::new(svc);
    echo_calls(&mut client, 20).instrument(tracing::warn_span!("case", name = "default_origin")).await;
    assert_eq!(server.counts.get(|c| &c.echoes), 20, "the server answered every call");

    let warnings = warnings_in("default_origin");
    assert!(
        warnings.iter().all(|w| !w.message.contains(NO_ORIGIN)),
        "default_origin names the origin tonic's Channel adds below the layer: no WARN that a request \
         named none; got {warnings:?}"
    );
    let origins = layer.origins();
    let expected = format!("http://{}", server.uri.authority().unwrap());
    println!("default_origin: origins {origins:?}");
    let origin = origins
        .iter()
        .find(|o| o.origin == expected)
        .unwrap_or_else(|| panic!("origins() lists the endpoint's origin {expected}: {origins:?}"));
    assert!(origin.round_trip.is_some(), "the unary calls measured the endpoint's round trip: {origin:?}");
    assert_eq!(origins.len(), 1, "one origin, the endpoint's: {origins:?}");
    let s = layer.stats().snapshot();
    assert_eq!(
        s.drained + s.abandoned + s.skipped + s.failed,
        0,
        "tonic reads a unary reply to its end: {s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_calls_without_default_origin_warn_that_a_request_named_no_origin() {
    capture_warnings();
    let server = start_server().await;
    let endpoint = Endpoint::from(server.uri.clone());
    let layer = DrainOnDropLayer::new();
    let svc = ServiceBuilder::new().layer(layer.clone()).service(channel(&endpoint).await);
    let mut client = FirehoseClient::new(svc);
    echo_calls(&mut client, 20).instrument(tracing::warn_span!("case", name = "no_default_origin")).await;

    let warnings = warnings_in("no_default_origin");
    let no_origin = warnings.iter().filter(|w| w.message.contains(NO_ORIGIN)).count();
    assert_eq!(
        no_origin, 1,
        "tonic sends path-only URIs: without default_origin the layer says once that a request named no \
         origin; got {warnings:?}"
    );
    println!("without default_origin: origins {:?}; {warnings:?}", layer.origins());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_calls_from_a_client_with_origin_send_absolute_uris_through_the_layer() {
    capture_warnings();
    let server = start_server().await;
    let endpoint = Endpoint::from(server.uri.clone());
    let layer = DrainOnDropLayer::new();
    let svc = ServiceBuilder::new().layer(layer.clone()).service(channel(&endpoint).await);
    let mut client = FirehoseClient::with_origin(svc, server.uri.clone());
    echo_calls(&mut client, 20).instrument(tracing::warn_span!("case", name = "with_origin")).await;

    let warnings = warnings_in("with_origin");
    assert!(
        warnings.iter().all(|w| !w.message.contains(NO_ORIGIN)),
        "with_origin puts the origin in every URI: no WARN; got {warnings:?}"
    );
    let origins = layer.origins();
    let expected = format!("http://{}", server.uri.authority().unwrap());
    assert!(
        origins.iter().any(|o| o.origin == expected && o.round_trip.is_some()),
        "origins() lists {expected} with a round trip: {origins:?}"
    );
}

// ---------------------------------------------------------------------------
// tonic's Channel

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_channel_sends_a_request_before_its_response_future_is_polled() {
    let server = start_server().await;
    let endpoint = Endpoint::from(server.uri.clone());
    let layer = layer_for(&endpoint);
    let mut svc = layer.layer(channel(&endpoint).await);
    // An Echo call, framed by hand: no compression flag, length, message.
    let message = prost::Message::encode_to_vec(&EchoRequest { message: "eager".into() });
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&message);
    let req = http::Request::post("/firehose.Firehose/Echo")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::Body::new(http_body_util::Full::new(Bytes::from(frame))))
        .unwrap();
    let future = svc.ready().await.unwrap().call(req);
    // The response future is not polled: tonic's Channel is a tower Buffer,
    // whose worker hands the request to hyper's h2 connection at `call`.
    wait_for("the server to answer a request whose response future was never polled", || {
        server.counts.get(|c| &c.echoes) == 1
    })
    .await;
    drop(future);
}

// ---------------------------------------------------------------------------
// Streams dropped early: one run through the layer, one without

/// A traffic pattern: `callers` × `each` Subscribe calls of `request`, each
/// dropped after reading `read` messages.
#[derive(Clone, Copy)]
struct Pattern {
    callers: usize,
    each: usize,
    message_bytes: u32,
    /// Messages in each stream; 0: endless.
    count: u64,
    read: usize,
}

impl Pattern {
    fn calls(&self) -> u64 {
        (self.callers * self.each) as u64
    }

    async fn run<T>(&self, client: FirehoseClient<T>) -> Traffic
    where
        T: tonic::client::GrpcService<tonic::body::Body> + Clone + Send + 'static,
        T::Future: Send,
        T::Error: Into<StdError>,
        T::ResponseBody: http_body::Body<Data = Bytes> + Send + 'static,
        <T::ResponseBody as http_body::Body>::Error: Into<StdError> + Send,
    {
        let request = SubscribeRequest { message_bytes: self.message_bytes, count: self.count };
        drop_streams(client, self.callers, self.each, request, self.read).await
    }
}

/// (b) 4 callers × 25 endless streams of 1 KiB messages, each dropped after
/// reading 3 (a layer that drained them for 30 s read 920-6,397 MiB).
const ENDLESS: Pattern = Pattern { callers: 4, each: 25, message_bytes: KIB, count: 0, read: 3 };

/// (c) 16 callers × 100 streams of 64 messages of 64 KiB (4 MiB, twice
/// hyper's stream window: no stream ends before its drop), each dropped
/// after its first message (with h2 0.4.20, tonic alone failed some 60 calls
/// to its own GOAWAY too_many_internal_resets).
const MANY: Pattern = Pattern { callers: 16, each: 100, message_bytes: 64 * KIB, count: 64, read: 1 };

/// Runs `pattern` through `layer` on a channel to `server`, and asserts what
/// every such run must show: no call fails, every drop is counted once, as
/// `stream` (gRPC's content type is open-ended by default) in the drop
/// itself (no drain runs after the calls), nothing is read, and the server
/// sees every stream cancelled.
async fn through_the_layer(
    pattern: Pattern,
    server: &TestServer,
    endpoint: &Endpoint,
    layer: DrainOnDropLayer,
) {
    let calls = pattern.calls();
    let svc = ServiceBuilder::new().layer(layer.clone()).service(channel(endpoint).await);
    let run = pattern.run(FirehoseClient::new(svc)).await;
    let stats = layer.stats();
    let at_once = stats.snapshot();
    assert_eq!(at_once.in_flight, 0, "no drop holds its stream: {at_once:?}");
    let idle = stats.wait_idle(DEADLINE).await;
    let s = stats.snapshot();
    println!(
        "with the layer: {run}; layer: bytes drained {} ({:.2} MiB), {s:?}; server: {}",
        s.bytes_drained,
        s.bytes_drained as f64 / MIB as f64,
        server_figures(&server.counts),
    );
    assert!(idle, "every drop's handling ends within {DEADLINE:?}: {s:?}");
    assert_eq!(run.failed, 0, "no call fails: {run}");
    assert_eq!(
        s.drained + s.abandoned + s.skipped + s.failed,
        calls,
        "every call's drop is counted once: {s:?}"
    );
    assert_eq!(
        s.count(Reason::Stream),
        calls,
        "gRPC is open-ended by default (application/grpc): every drop counted `stream`: {s:?}"
    );
    assert_eq!(s.total(Outcome::Failed), 0, "{s:?}");
    assert_eq!(s.bytes_drained, 0, "dropped streams are reset, not read: {s:?}");
    wait_for("the server to see every stream cancelled", || server.counts.get(|c| &c.cancelled) == calls)
        .await;
    println!("then the server saw every stream cancelled: {}", server_figures(&server.counts));
}

/// Runs `pattern` on tonic's Channel alone and prints what it cost; asserts
/// nothing: the figures to compare with.
async fn without_the_layer(pattern: Pattern) {
    let server = start_server().await;
    let run = pattern.run(FirehoseClient::new(channel(&Endpoint::from(server.uri.clone())).await)).await;
    // Calls that failed may never have reached the server: wait for the
    // streams it began to end.
    let ended = tokio::time::timeout(DEADLINE, async {
        while server.counts.get(|c| &c.open) > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .is_ok();
    println!(
        "without the layer: {run}; server: {} (every stream it began ended within {DEADLINE:?}: {ended})",
        server_figures(&server.counts)
    );
}

// ---------------------------------------------------------------------------
// (b) Endless streams dropped after 3 messages

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_endless_streams_are_reset_not_read_cancelled_at_the_server_and_no_call_fails() {
    let server = start_server().await;
    let endpoint = Endpoint::from(server.uri.clone());
    through_the_layer(ENDLESS, &server, &endpoint, layer_for(&endpoint)).await;
    without_the_layer(ENDLESS).await;
}

// ---------------------------------------------------------------------------
// (c) Many callers dropping streams of 64 KiB messages

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_callers_dropping_streams_of_64_kib_messages_fail_no_call_through_the_layer() {
    without_the_layer(MANY).await;
    let server = start_server().await;
    let endpoint = Endpoint::from(server.uri.clone());
    through_the_layer(MANY, &server, &endpoint, layer_for(&endpoint)).await;
}
