//! [`Http2Connector`]: hyper-util's connector, wrapped so that an origin
//! that speaks HTTP/2 is dialed once at a time, a dial raced by a second
//! once it outlasts `dial_patience`, and each HTTP/2 connection counts the
//! resets it sends and moves on (takes no new request) only once its
//! server refused streams or closed a connection for resets, or once its
//! server's streams are all taken.

// The rules are the HTTP/2 room's (`http2`: `gates`, `patience`,
// `race_at`, `waits_after_failure`, `fills`, `Share`, `punishes`); here are
// the pieces that follow them: the origins (`gate`), a dial others wait
// for (`dial`), a connect through the gate (`connect`), each connection's
// record (`link`), the connections themselves (`io`), and what a
// connection carries (`frames`).

mod connect;
mod dial;
mod frames;
mod gate;
mod io;
mod link;

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Uri;
use hyper_util::client::legacy::connect::Connection;
use tower_service::Service;

use crate::http2;

pub use self::connect::ConnectFuture;
use self::gate::{ClientFacts, DialOrigin};
pub use self::io::Http2Connection;
pub(crate) use self::link::LinkTag;

/// Some connector of this process has a fixed share
/// ([`Http2Connector::resets_per_connection`]): its first connection to an
/// origin may have to move on before its first response, so the layer
/// captures the requests to an origin before its first response too (which
/// replaces a capture of the caller's own: the first requests to each
/// origin, only where a share is fixed).
static FIXED_SHARE: AtomicBool = AtomicBool::new(false);

/// Whether the layer captures the requests to an origin before its first
/// response (see [`FIXED_SHARE`]).
pub(crate) fn captures_before_response() -> bool {
    FIXED_SHARE.load(Ordering::Relaxed)
}

/// The error of an [`Http2Connector`]'s connect (see its `Service` impl).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Wraps hyper-util's connector (such as hyper-rustls' `HttpsConnector`)
/// for the HTTP/2 road, over TLS with ALPN as over h2c:
///
/// - **One dial at a time, each wait bounded.** While an origin speaks
///   HTTP/2 (or, over TLS, before its first connection said what it
///   speaks), a connect that finds another dial to it on its way waits for
///   that dial, and hyper-util hands the request that dial's connection
///   from its pool. hyper-util alone takes that lock only with
///   `http2_only`: over ALPN, each request waiting for a connection dials
///   its own TLS connection, and all but one are thrown away after their
///   handshakes, at the start and after every connection lost. The dial
///   belongs to the origin, not to the request that started it: a caller
///   that gives up leaves it going for those who wait (the last to go ends
///   it, as hyper-util alone ends a connect given up). A dial that
///   outlasts the origin's [`dial_patience`] (by default twice its median
///   handshake, 250 ms to 2 s, 500 ms before any) while others wait for it
///   is raced by a second attempt (nobody waiting, only after 2 s: with
///   `http2_only`, hyper-util's own lock hides those waiting), and those
///   waiting for it give that attempt as long again, then each dials its
///   own, as hyper-util alone would have. A failed attempt fails at once,
///   with its error, every connect that no other attempt could serve sooner
///   than its own dial would have (each error's `source()` leads to the
///   wrapped connector's, typed); a connection that went away unused, or
///   spoke HTTP/1, sends those waiting for it through the gate again at
///   once. HTTP/1 origins are dialed as before, one connection per request
///   in flight; a client without a pool is known at its first connection
///   (no request else was handed it), and nothing is gated after.
/// - **As many connections as the server's streams need.** hyper-util's
///   pool puts every HTTP/2 request to an origin on one connection, and h2
///   queues those above the server's SETTINGS_MAX_CONCURRENT_STREAMS on
///   it. The connector reads that setting, and moves a connection on at
///   the hand-out from the pool that takes its last stream: the next
///   request dials another, once at a time, up to
///   [`max_connections_per_origin`] open at once. A connection so moved
///   takes no request again and closes when its streams end: under a load
///   above the server's limit, about one connection per that many requests
///   (Go's client, which opens another connection when every stream of its
///   own is taken, keeps them all).
/// - **Moved on when the server refuses streams for resets.** Each HTTP/2
///   connection counts what it may yet reset: the RST_STREAM frames it
///   writes (a dropped body's stream, a cancelled request's), its streams
///   in flight, and the requests hyper-util's pool handed it not yet sent;
///   and it reads what its server says of its resets. A server may refuse
///   new streams, or close the connection, for the resets it received (Node
///   refuses new streams with ENHANCE_YOUR_CALM once its session memory is
///   spent; nghttp2 and Apache send GOAWAY INTERNAL_ERROR past their
///   limits). That connection then moves on, and its origin gets a limit of
///   resets per connection, half what that connection had sent
///   ([`resets_per_connection`] fixes it instead); each connection to that
///   origin moves on once it has sent that many (hyper-util's
///   `Connected::poison`: the requests on it finish; the next one dials,
///   once), so that no server sees more than that from one connection (but
///   for a new connection's first requests, one a caller at most). The
///   limit is tried higher now and then and dropped when the server bears
///   it. Servers that refuse nothing (Go's net/http, nginx, h2o, hyper)
///   keep one connection while the callers fit in its streams.
///
/// It changes no byte, and hyper-util gets the wrapped connector's own
/// connections, `connected()` and extras (`HttpInfo`) included: their I/O
/// is read as it is written and read (frame headers, and the server's
/// SETTINGS; what is read is copied once on its way; a connection that
/// moved on is read for up to 250 ms more once hyper closes it, for what
/// its server says of its last resets). Moving a connection on takes
/// hyper-util's view of it, which [`DrainOnDrop`](crate::DrainOnDrop)
/// captures on every request to an origin before its first response where
/// a limit of resets is fixed, and while one of this connector's
/// connections to it may move on or lacks that view: the README's HTTP/2
/// stack has all three (`RetryRefused` above `DrainOnDrop`, over a `Client`
/// built with this connector). The requests the pool hands a connection
/// are counted as hyper-util 0.1 hands them (it copies the connection's
/// `Connected` for each), from the copy its pool keeps.
///
/// ```
/// use drain_on_drop::{DrainOnDropLayer, Http2Connector, RetryRefusedLayer};
/// use http_body_util::Empty;
/// use hyper::body::Bytes;
/// use hyper_util::client::legacy::{Client, connect::HttpConnector};
/// use hyper_util::rt::TokioExecutor;
/// use tower::ServiceBuilder;
///
/// // hyper-rustls' `HttpsConnector` goes where `HttpConnector` is.
/// let connector = Http2Connector::new(HttpConnector::new());
/// let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
/// let svc = ServiceBuilder::new()
///     .layer(RetryRefusedLayer::new())
///     .layer(DrainOnDropLayer::new())
///     .service(client);
/// # drop(svc);
/// ```
///
/// Clones share their origins (build one per `Client`); each origin's state
/// is a few words, and at most 1,024 unused origins are kept, but for what
/// each spoke (9 bytes an origin, for the client's life): a cold burst to
/// an HTTPS origin waits for one handshake to learn its protocol once per
/// origin. A client without a pool (`pool_max_idle_per_host(0)`) gains
/// nothing from it: each request needs its own connection; its first burst
/// waits for one handshake to learn that, then nothing is gated.
///
/// [`dial_patience`]: Http2Connector::dial_patience
/// [`resets_per_connection`]: Http2Connector::resets_per_connection
/// [`max_connections_per_origin`]: Http2Connector::max_connections_per_origin
#[derive(Clone)]
pub struct Http2Connector<C> {
    inner: C,
    origins: Arc<Origins>,
}

impl<C> Http2Connector<C> {
    /// Wraps `inner`: one dial at a time per HTTP/2 origin, within its
    /// `dial_patience`, and each origin's resets per connection learned
    /// from its servers.
    pub fn new(inner: C) -> Self {
        Http2Connector { inner, origins: Arc::new(Origins::new(Settings::default())) }
    }

    /// Fixes the resets an HTTP/2 connection may send before it moves on,
    /// for every origin: `0` never moves a connection for its resets. What
    /// counts is what it may yet reset (the resets it sent, its streams in
    /// flight, the requests handed it not yet sent), so a server sees no
    /// more than this from one connection, but for a new connection's first
    /// requests (one a caller at most, before its first response). Default
    /// is learned per origin: no limit (its connections never move on for
    /// resets) until one of its servers refuses streams or closes a
    /// connection for the resets it received, then half the resets that
    /// connection had sent, tried higher now and then and dropped when the
    /// server bears it. Fix it for a server known to refuse streams for
    /// resets from the first connection on, so that not even the first
    /// refusal comes (idempotent requests refused then go again; others
    /// fail). Too low costs a connection (a handshake) every few requests;
    /// too high lets the server refuse streams (a POST refused for resets is
    /// not sent again). A connection so refused takes no new request either
    /// way.
    ///
    /// ```
    /// # use drain_on_drop::Http2Connector;
    /// # use hyper_util::client::legacy::connect::HttpConnector;
    /// // A Node 20 backend answering 1 MiB with one `stream.end`: its
    /// // sessions refuse new streams after some 14 resets of such bodies.
    /// let connector = Http2Connector::new(HttpConnector::new()).resets_per_connection(7);
    /// ```
    pub fn resets_per_connection(self, resets: usize) -> Self {
        if resets > 0 {
            FIXED_SHARE.store(true, Ordering::Relaxed);
        }
        let settings = Settings { share: Some(resets), ..self.origins.settings };
        Http2Connector { inner: self.inner, origins: Arc::new(Origins::new(settings)) }
    }

    /// Fixes every origin's dial patience: how long a dial that others wait
    /// for goes before a second attempt races it (the first going on), and,
    /// twice that, how long a connect waits for another's dial before it
    /// dials its own.
    /// Default is learned per origin: twice the median of its last 8
    /// handshakes (the wrapped connector's call to its connection), at
    /// least 250 ms (RFC 8305's Connection Attempt Delay) and at most 2 s
    /// (its bound); 500 ms before any handshake to it ended. A handshake
    /// that never ends (a balancer that accepts and never answers:
    /// `HttpConnector::set_connect_timeout` bounds TCP only, and
    /// hyper-rustls bounds no handshake) costs the others about this much.
    /// Too low races handshakes that were only slow (a second connection
    /// the server accepts, then one is dropped); too high holds those
    /// waiting behind a handshake that will never end. `Duration::ZERO`
    /// makes no connect wait (every request that finds no connection dials
    /// its own, as hyper-util alone does over ALPN).
    ///
    /// ```
    /// # use drain_on_drop::Http2Connector;
    /// # use hyper_util::client::legacy::connect::HttpConnector;
    /// # use std::time::{Duration, Instant};
    /// // An origin far away, whose handshakes vary a lot.
    /// let connector = Http2Connector::new(HttpConnector::new()).dial_patience(Duration::from_secs(1));
    /// ```
    pub fn dial_patience(self, patience: Duration) -> Self {
        let settings = Settings { patience: Some(patience), ..self.origins.settings };
        Http2Connector { inner: self.inner, origins: Arc::new(Origins::new(settings)) }
    }

    /// Sets the most HTTP/2 connections one origin has open at once for
    /// streams its server does not let one connection carry. hyper-util's
    /// pool puts every HTTP/2 request to an origin on one connection, and
    /// h2 queues those above the server's SETTINGS_MAX_CONCURRENT_STREAMS
    /// on it (nginx announces 128, Apache and h2o 100, Go's server 250):
    /// with 100 streams and answers that take 100 ms, one connection
    /// carries 1,000 requests a second, whatever the callers. The connector
    /// moves a connection on (it takes no new request; the requests on it
    /// finish) at the hand-out from the pool that takes its last stream,
    /// and the next request dials another, once at a time, as Go's client
    /// opens another connection when every stream of its own is taken.
    /// Unlike Go's, a connection moved on is not used again (hyper-util's
    /// pool keeps one HTTP/2 connection per origin): under a load above the
    /// server's limit, one new connection for each batch of about that
    /// many requests, each closed when its last stream ends. `1` keeps one
    /// connection, and h2's queue, as hyper-util alone does. Default is 16.
    /// Servers that announce no limit (Node), or that callers within it
    /// never fill, keep one connection.
    ///
    /// ```
    /// # use drain_on_drop::Http2Connector;
    /// # use hyper_util::client::legacy::connect::HttpConnector;
    /// // Never more than 4 connections to one origin.
    /// let connector = Http2Connector::new(HttpConnector::new()).max_connections_per_origin(4);
    /// ```
    pub fn max_connections_per_origin(self, connections: usize) -> Self {
        let settings = Settings { max_connections: connections.max(1), ..self.origins.settings };
        Http2Connector { inner: self.inner, origins: Arc::new(Origins::new(settings)) }
    }

    /// Gets a reference to the wrapped connector.
    pub fn get_ref(&self) -> &C {
        &self.inner
    }

    /// Gets a mutable reference to the wrapped connector.
    pub fn get_mut(&mut self) -> &mut C {
        &mut self.inner
    }

    /// Consumes `self`, returning the wrapped connector.
    pub fn into_inner(self) -> C {
        self.inner
    }
}

impl<C: fmt::Debug> fmt::Debug for Http2Connector<C> {
    /// The wrapped connector; not the origins (hosts the user may keep out
    /// of logs).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Http2Connector").field("inner", &self.inner).finish_non_exhaustive()
    }
}

/// Connects as the wrapped connector does. Its error is the wrapped
/// connector's, boxed; where several connects took part in one dial that
/// failed (the one that drove it and those that waited for it), each gets
/// an `io::Error` of the dial's kind holding the dial's error, shared:
/// `get_ref()` says what the dial said, and its `source()` is the wrapped
/// connector's error itself (a TLS `rustls::Error` inside hyper-rustls'
/// `io::Error`, an I/O error); a connect hyper-util finished in the
/// background after its request was handed another connection ends at
/// once with an error hyper-util drops.
impl<C> Service<Uri> for Http2Connector<C>
where
    C: Service<Uri> + Clone + Send + 'static,
    C::Error: Into<BoxError>,
    C::Future: Unpin + Send + 'static,
    C::Response: Connection,
{
    type Response = Http2Connection<C>;
    type Error = BoxError;
    type Future = ConnectFuture<C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        ConnectFuture::start(self.origins.of(&dst), &mut self.inner, dst)
    }
}

/// A server refused a stream on the connection `connected` describes, for
/// what the connection did (`http2::after_failure`): it takes no new
/// request, and, if this connector opened it, its origin learns a share.
pub(crate) fn punished(connected: &hyper_util::client::legacy::connect::Connected) {
    connected.poison();
    if let Some(link) = LinkTag::of_connected(connected) {
        link.punished(link.resets());
    }
}

/// What the user fixed (`Http2Connector::resets_per_connection`,
/// `Http2Connector::dial_patience`,
/// `Http2Connector::max_connections_per_origin`), for every origin.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) share: Option<usize>,
    pub(crate) patience: Option<Duration>,
    pub(crate) max_connections: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { share: None, patience: None, max_connections: http2::MAX_CONNECTIONS }
    }
}

/// The origins of one connector (and of its clones): the state of each
/// (`gate::DialOrigin`), keyed by scheme, host and port; and, for the
/// client's life, what each origin forgotten spoke (a hash of its key and
/// one byte), so that a cold burst waits for a handshake to learn an
/// origin's protocol once per origin, however many origins there are.
pub(crate) struct Origins {
    by_key: Mutex<HashMap<Box<str>, Arc<DialOrigin>>>,
    spoke: Mutex<HashMap<u64, http2::Proto>>,
    client: Arc<ClientFacts>,
    pub(crate) settings: Settings,
}

/// Origins kept before those no connection or dial uses are forgotten
/// (but for what they spoke).
const KEPT: usize = 1024;

fn hash(key: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish()
}

/// Dials that failed, by origin key, and when (kept [`FAILED_KEPT`]): for
/// `RetryRefused`, which reads a request hyper-util failed as "request was
/// canceled" (a pool waiter whose dial went away: with `http2_only`
/// hyper-util's own lock keeps its waiters from the connector) as never
/// written, unless the dial it waited for failed: sent again, it would
/// only dial the failing origin again.
static FAILED: Mutex<Vec<(Box<str>, Instant)>> = Mutex::new(Vec::new());

/// How long a failed dial is remembered for [`failed_since`].
const FAILED_KEPT: Duration = Duration::from_secs(60);

/// A dial to the origin keyed `key` failed now.
pub(crate) fn dial_failed(key: &str) {
    let now = Instant::now();
    let mut failed = FAILED.lock().unwrap_or_else(|e| e.into_inner());
    failed.retain(|(k, at)| now.saturating_duration_since(*at) < FAILED_KEPT && &**k != key);
    failed.push((key.into(), now));
}

/// Whether a dial by an [`Http2Connector`] to `uri`'s origin failed at or
/// after `since`.
pub(crate) fn failed_since(uri: &Uri, since: Instant) -> bool {
    let Some(key) = Origins::key(uri) else { return false };
    let failed = FAILED.lock().unwrap_or_else(|e| e.into_inner());
    failed.iter().any(|(k, at)| **k == *key && *at >= since)
}

impl Origins {
    pub(crate) fn new(settings: Settings) -> Self {
        Origins { by_key: Mutex::default(), spoke: Mutex::default(), client: Arc::default(), settings }
    }

    /// The key of `uri`'s origin (scheme, host and port: never a
    /// userinfo); none without a host.
    fn key(uri: &Uri) -> Option<Box<str>> {
        let scheme = uri.scheme_str().unwrap_or("");
        let host = uri.host()?;
        let port = uri.port_u16().unwrap_or(if scheme == "https" { 443 } else { 80 });
        Some(format!("{scheme}://{host}:{port}").into_boxed_str())
    }

    /// The origin of `dst`.
    pub(crate) fn of(&self, dst: &Uri) -> Arc<DialOrigin> {
        let key = Self::key(dst).unwrap_or_else(|| format!("{}://:0", dst.scheme_str().unwrap_or("")).into());
        let scheme = dst.scheme_str().unwrap_or("");
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(origin) = by_key.get(&key) {
            return origin.clone();
        }
        let mut spoke = self.spoke.lock().unwrap_or_else(|e| e.into_inner());
        if by_key.len() >= KEPT {
            by_key.retain(|key, origin| {
                let used = Arc::strong_count(origin) > 1;
                if !used && origin.proto() != http2::Proto::Unknown {
                    spoke.insert(hash(key), origin.proto());
                }
                used
            });
        }
        let proto = spoke.remove(&hash(&key)).unwrap_or(http2::Proto::Unknown);
        drop(spoke);
        let origin =
            DialOrigin::new(key.clone(), scheme == "https", proto, self.settings, self.client.clone());
        by_key.entry(key).or_insert(Arc::new(origin)).clone()
    }
}
