//! [`Http2Connector`]: hyper-util's connector, wrapped so that an origin
//! that speaks HTTP/2 is dialed once at a time, and each HTTP/2 connection
//! is charged for the resets it sends and moves on only as far as its server
//! needs. The rules are `http2.rs`'s (`gates`, `moves_on`,
//! `learned_share`); here are the pieces that follow them: the origins and
//! their dials (`gate`), each connection's record (`link`), the connections
//! themselves (`io`), and what a connection writes (`frames`).

mod frames;
mod gate;
mod io;
mod link;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};

use http::Uri;
use hyper_util::client::legacy::connect::Connection;
use tower_service::Service;

use self::gate::{Dial, DialOrigin, Entry, Origins, Phase};
use self::io::Hold;
pub use self::io::Http2Connection;
pub(crate) use self::link::{Link, LinkTag};
use crate::http2::Proto;
pub(crate) use crate::http2::Superseded;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Wraps hyper-util's connector (such as hyper-rustls' `HttpsConnector`)
/// for the HTTP/2 road, over TLS with ALPN as over h2c:
///
/// - **One dial at a time.** While an origin speaks HTTP/2 (or, over TLS,
///   before its first connection said what it speaks), a connect that finds
///   another dial to it on its way waits for that dial, and hyper-util hands
///   the request that dial's connection from its pool. hyper-util alone
///   takes that lock only with `http2_only`: over ALPN, each request waiting
///   for a connection dials its own TLS connection, and all but one are
///   thrown away after their handshakes, at the start and after every
///   connection lost. HTTP/1 origins are dialed as before, one connection
///   per request in flight.
/// - **Moved on only as far as the server needs.** Each HTTP/2 connection
///   counts the RST_STREAM frames it writes (a dropped body's stream, a
///   cancelled request's). A server that punishes resets (Node refuses new
///   streams with ENHANCE_YOUR_CALM once its session memory is spent)
///   teaches the origin a share, half the resets its connection had taken,
///   through [`RetryRefused`](crate::RetryRefused), which sees the refusal;
///   from then on each connection to that origin takes no new request once
///   its share is spent (hyper-util's `Connected::poison`: the requests on
///   it finish; the next one dials, once). Servers that punish nothing (Go's
///   net/http, nginx, hyper) keep one connection.
///
/// It changes no byte: the wrapped connector's I/O is read as it is written,
/// frame headers only. Moving a connection on takes hyper-util's view of it,
/// which [`DrainOnDrop`](crate::DrainOnDrop) captures on requests to origins
/// it has seen served by this connector: the README's HTTP/2 stack has all
/// three (`RetryRefused` above `DrainOnDrop`, over a `Client` built with
/// this connector).
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
/// is a few words, and at most 1,024 unused origins are kept.
#[derive(Clone)]
pub struct Http2Connector<C> {
    inner: C,
    origins: Arc<Origins>,
}

impl<C> Http2Connector<C> {
    /// Wraps `inner`: one dial at a time per HTTP/2 origin, and each origin's
    /// share of resets per connection learned from its servers.
    pub fn new(inner: C) -> Self {
        Http2Connector { inner, origins: Arc::new(Origins::new(None)) }
    }

    /// Fixes the resets an HTTP/2 connection takes before it moves on, for
    /// every origin: `0` never moves a connection for its resets. Default
    /// is none fixed: an origin has no share (its connections never move)
    /// until one of its servers refuses a stream for what a connection did,
    /// then half the resets that connection had taken. Fix it for a server
    /// known to punish resets from the first connection on, so that not even
    /// the first refusal comes (idempotent requests refused then go again;
    /// others fail).
    ///
    /// ```
    /// # use drain_on_drop::Http2Connector;
    /// # use hyper_util::client::legacy::connect::HttpConnector;
    /// // A Node backend: Node 20 refuses streams once about 500 resets
    /// // filled a session.
    /// let connector = Http2Connector::new(HttpConnector::new()).resets_per_connection(200);
    /// ```
    pub fn resets_per_connection(self, resets: usize) -> Self {
        Http2Connector { inner: self.inner, origins: Arc::new(Origins::new(Some(resets))) }
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

impl<C> Service<Uri> for Http2Connector<C>
where
    C: Service<Uri> + Clone,
    C::Future: Unpin,
    C::Response: Connection,
{
    type Response = Http2Connection<C>;
    type Error = C::Error;
    type Future = ConnectFuture<C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let origin = self.origins.of(&dst);
        let entry = origin.enter();
        tracing::trace!(target: "drain_on_drop::dial", entry = entry.name(), "connect");
        let state = match entry {
            Entry::Free => Connecting::Dial { dial: self.inner.call(dst), hold: Hold { origin, dial: None } },
            Entry::Dial(dial) => {
                Connecting::Dial { dial: self.inner.call(dst), hold: Hold { origin, dial: Some(dial) } }
            }
            entry => {
                // The connector made ready goes with the request; a clone
                // takes its place.
                let ready = self.inner.clone();
                let connector = std::mem::replace(&mut self.inner, ready);
                match entry {
                    Entry::Wait(dial) => Connecting::Wait { dial, connector, dst, origin },
                    _ => Connecting::StandIn { connector, dst, origin },
                }
            }
        };
        ConnectFuture { state, owner: None }
    }
}

/// Future of [`Http2Connector`]: the wrapped connector's connection, or,
/// when another dial to the origin was on its way, that dial's outcome
/// first (see [`Http2Connector`]).
#[must_use = "futures do nothing unless polled"]
pub struct ConnectFuture<C: Service<Uri>> {
    state: Connecting<C>,
    /// The task that first polled it: the one that wants the connection
    /// (hyper-util finishes a connect it no longer needs on another).
    owner: Option<Waker>,
}

enum Connecting<C: Service<Uri>> {
    /// Dialing; `hold` lets those waiting for this dial go on if it fails
    /// or is dropped.
    Dial {
        dial: C::Future,
        hold: Hold,
    },
    /// Waiting for another's dial.
    Wait {
        dial: Arc<Dial>,
        connector: C,
        dst: Uri,
        origin: Arc<DialOrigin>,
    },
    /// Standing in for another's connection, being pooled.
    StandIn {
        connector: C,
        dst: Uri,
        origin: Arc<DialOrigin>,
    },
    /// About to dial once `connector` is ready.
    Ready {
        connector: C,
        dst: Uri,
        hold: Hold,
    },
    Done,
}

// Nothing here is ever pinned in place: the wrapped connector's future is
// polled through `Pin::new`, which asks it to be `Unpin`.
impl<C: Service<Uri>> Unpin for ConnectFuture<C> {}

impl<C> Future for ConnectFuture<C>
where
    C: Service<Uri>,
    C::Future: Unpin,
    C::Response: Connection,
{
    type Output = Result<Http2Connection<C>, C::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.owner.is_none() {
            this.owner = Some(cx.waker().clone());
        }
        let owner = || this.owner.clone().expect("set above");
        loop {
            match &mut this.state {
                Connecting::Dial { dial, .. } => {
                    let result = ready!(Pin::new(dial).poll(cx));
                    let Connecting::Dial { hold, .. } = std::mem::replace(&mut this.state, Connecting::Done)
                    else {
                        unreachable!("matched above")
                    };
                    return Poll::Ready(result.map(|io| connected(io, hold)));
                }
                Connecting::Wait { dial, .. } => {
                    let phase = ready!(dial.poll_phase(cx));
                    let Connecting::Wait { connector, dst, origin, .. } =
                        std::mem::replace(&mut this.state, Connecting::Done)
                    else {
                        unreachable!("matched above")
                    };
                    if phase != Phase::Over {
                        return Poll::Ready(Ok(Http2Connection::lazy(connector, owner(), dst, origin)));
                    }
                    // That dial failed, or found HTTP/1: through the gate again.
                    this.state = match origin.enter() {
                        Entry::Wait(dial) => Connecting::Wait { dial, connector, dst, origin },
                        Entry::StandIn => Connecting::StandIn { connector, dst, origin },
                        Entry::Free => {
                            Connecting::Ready { connector, dst, hold: Hold { origin, dial: None } }
                        }
                        Entry::Dial(dial) => {
                            Connecting::Ready { connector, dst, hold: Hold { origin, dial: Some(dial) } }
                        }
                    };
                }
                Connecting::Ready { connector, dst, .. } => {
                    if let Err(e) = ready!(connector.poll_ready(cx)) {
                        this.state = Connecting::Done;
                        return Poll::Ready(Err(e));
                    }
                    let dial = connector.call(dst.clone());
                    let Connecting::Ready { hold, .. } = std::mem::replace(&mut this.state, Connecting::Done)
                    else {
                        unreachable!("matched above")
                    };
                    this.state = Connecting::Dial { dial, hold };
                }
                Connecting::StandIn { .. } => {
                    let Connecting::StandIn { connector, dst, origin } =
                        std::mem::replace(&mut this.state, Connecting::Done)
                    else {
                        unreachable!("matched above")
                    };
                    return Poll::Ready(Ok(Http2Connection::lazy(connector, owner(), dst, origin)));
                }
                Connecting::Done => panic!("ConnectFuture polled after completion"),
            }
        }
    }
}

/// A dial's connection, as it is handed to hyper-util: HTTP/1 by ALPN, or
/// on an origin known to speak it over plain TCP, untouched; anything else
/// read as it is written.
fn connected<C>(io: C::Response, hold: Hold) -> Http2Connection<C>
where
    C: Service<Uri>,
    C::Response: Connection,
{
    let origin = hold.origin.clone();
    let alpn_h2 = io.connected().is_negotiated_h2();
    if (origin.https() && !alpn_h2) || (!origin.https() && origin.proto() == Proto::Http1) {
        hold.spoke(Proto::Http1);
        return Http2Connection::plain(io);
    }
    if let Some(dial) = &hold.dial {
        origin.handed(dial);
    }
    Http2Connection::tracked(io, Link::new(origin), hold)
}

impl<C: Service<Uri>> fmt::Debug for ConnectFuture<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            Connecting::Dial { .. } => "dialing",
            Connecting::Wait { .. } => "waiting for another dial",
            Connecting::StandIn { .. } => "standing in",
            Connecting::Ready { .. } => "about to dial",
            Connecting::Done => "done",
        };
        f.debug_struct("ConnectFuture").field("state", &state).finish()
    }
}

/// A server refused a stream on the connection `connected` describes, for
/// what the connection did (`http2::after_failure`): it takes no new
/// request, and, if this connector opened it, its origin learns a share.
pub(crate) fn punished(connected: &hyper_util::client::legacy::connect::Connected) {
    connected.poison();
    if let Some(link) = LinkTag::of_connected(connected) {
        link.punished();
    }
}
