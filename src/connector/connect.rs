//! The future of a connect through the gate: it dials, or waits for
//! another's dial within its patience and then for the pool, or fails
//! with what that dial said; the HTTP/2 room (`http2`) says why each.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::{Duration, Instant};

use http::Uri;
use hyper_util::client::legacy::connect::Connection;
use tower_service::Service;

use super::BoxError;
use super::gate::{Dial, DialOrigin, Entry, Phase};
use super::io::{Hold, Http2Connection};
use super::link::Link;
use crate::http2::{self, DialFailed, Proto, Superseded};
use crate::timer::Deadline;

impl<C> ConnectFuture<C>
where
    C: Service<Uri> + Clone,
    C::Error: Into<BoxError>,
    C::Future: Unpin,
{
    /// A connect to `origin`'s `dst` through its gate, on `inner` (made
    /// ready): it dials, or waits for the dial on its way.
    pub(super) fn start(origin: Arc<DialOrigin>, inner: &mut C, dst: Uri) -> Self {
        let entry = origin.enter();
        tracing::trace!(target: "drain_on_drop::dial", entry = entry.name(), "connect");
        // The connector made ready goes with the request; a clone takes its
        // place.
        let ready = inner.clone();
        let connector = std::mem::replace(inner, ready);
        ConnectFuture { state: Connecting::entered(entry, connector, dst, origin, false), owner: None }
    }
}

/// Future of [`Http2Connector`](crate::Http2Connector): the wrapped connector's connection, or,
/// when another dial to the origin was on its way, that dial's outcome
/// first (see [`Http2Connector`](crate::Http2Connector)).
#[must_use = "futures do nothing unless polled"]
pub struct ConnectFuture<C: Service<Uri>> {
    state: Connecting<C>,
    /// The task that first polled it while it waited: the one that wants
    /// the connection (hyper-util finishes a connect it no longer needs on
    /// another).
    owner: Option<Waker>,
}

enum Connecting<C: Service<Uri>> {
    /// Dialing; `hold` tells those waiting for this dial how it went.
    Dial {
        attempts: Attempts<C>,
        hold: Hold,
    },
    /// Waiting for another's dial, until `deadline` (the origin's patience,
    /// or, once that dial's connection is in use, `http2::SERVED_GRACE`).
    Wait {
        waiting: Waiting,
        deadline: Deadline,
        connector: C,
        dst: Uri,
        origin: Arc<DialOrigin>,
    },
    /// About to dial once `connector` is ready, and, on a first poll, once
    /// the task polled its pool checkout again: hyper-util polls the
    /// checkout, then the connect, and a connection pooled in between (on
    /// another thread) would otherwise cost a dial hyper-util finishes in
    /// the background and throws away.
    Ready {
        connector: C,
        dst: Uri,
        hold: Hold,
        yielded: bool,
    },
    Done,
}

impl<C: Service<Uri>> Connecting<C> {
    /// Where the gate's `entry` sends a connect to `origin`'s `dst`, on
    /// `connector` (made ready): it waits for another's dial, or is to dial
    /// (yielding once first unless `yielded`), holding its own dial for
    /// those who wait for it.
    fn entered(entry: Entry, connector: C, dst: Uri, origin: Arc<DialOrigin>, yielded: bool) -> Self {
        match entry {
            Entry::Wait(dial) => Connecting::Wait {
                deadline: Deadline::at(dial.expires()),
                waiting: Waiting { dial, key: None, served: false },
                connector,
                dst,
                origin,
            },
            Entry::Free => Connecting::Ready { connector, dst, hold: Hold { origin, dial: None }, yielded },
            Entry::Dial(dial) => {
                Connecting::Ready { connector, dst, hold: Hold { origin, dial: Some(dial) }, yielded }
            }
        }
    }
}

/// A dial: its first attempt, and, for a dial others wait for, a second
/// raced once the first outlasts the origin's patience, the first going on
/// (RFC 8305 races attempts the same way): with hyper-util's `http2_only`,
/// whose own lock holds every other request behind this one, the race is
/// what keeps a handshake that never ends from holding them all.
struct Attempts<C: Service<Uri>> {
    first: Option<(C::Future, Instant)>,
    second: Option<(C::Future, Instant)>,
    race: Option<Race<C>>,
    /// The first failure, while another attempt is on its way.
    failed: Option<BoxError>,
}

/// When to race a second attempt, and what with.
struct Race<C> {
    at: Deadline,
    connector: C,
    dst: Uri,
}

impl<C> Attempts<C>
where
    C: Service<Uri>,
    C::Error: Into<BoxError>,
    C::Future: Unpin,
{
    fn first(dial: C::Future, race: Option<Race<C>>) -> Self {
        Attempts { first: Some((dial, Instant::now())), second: None, race, failed: None }
    }

    /// The first connection either attempt made, and how long its attempt
    /// took; or, once both failed (or the first, before a second began),
    /// the first failure.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<(C::Response, Duration), BoxError>> {
        loop {
            for attempt in [&mut self.first, &mut self.second] {
                let Some((dial, started)) = attempt else { continue };
                if let Poll::Ready(result) = Pin::new(dial).poll(cx) {
                    let took = started.elapsed();
                    *attempt = None;
                    match result {
                        Ok(io) => return Poll::Ready(Ok((io, took))),
                        Err(e) => {
                            self.failed.get_or_insert(e.into());
                        }
                    }
                }
            }
            if self.first.is_none() && self.second.is_none() {
                return Poll::Ready(Err(self.failed.take().expect("an attempt failed")));
            }
            let Some(race) = &mut self.race else { return Poll::Pending };
            if self.second.is_some() || race.at.poll_elapsed(cx).is_pending() {
                return Poll::Pending;
            }
            match race.connector.poll_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => self.race = None,
                Poll::Ready(Ok(())) => {
                    tracing::trace!(target: "drain_on_drop::dial", "a dial outlasts its patience: a second attempt races it");
                    self.second = Some((race.connector.call(race.dst.clone()), Instant::now()));
                    self.race = None;
                }
            }
        }
    }
}

/// A connect's place among those waiting for a dial: given back when it
/// stops waiting, however it does (its future dropped included).
struct Waiting {
    dial: Arc<Dial>,
    key: Option<usize>,
    /// Its dial's connection was seen in use.
    served: bool,
}

impl Waiting {
    fn poll_phase(&mut self, cx: &mut Context<'_>) -> Poll<Phase> {
        self.dial.poll_phase(&mut self.key, cx)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.dial.leave(key);
        }
    }
}

// Nothing here is ever pinned in place: the wrapped connector's future is
// polled through `Pin::new`, which asks it to be `Unpin`.
impl<C: Service<Uri>> Unpin for ConnectFuture<C> {}

impl<C> Future for ConnectFuture<C>
where
    C: Service<Uri>,
    C::Error: Into<BoxError>,
    C::Future: Unpin,
    C::Response: Connection,
{
    type Output = Result<Http2Connection<C>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // hyper-util finishes a connect whose request its pool served on
        // another task: one that has not dialed yet stops here. A dial
        // goes on (its connection is pooled, as hyper-util alone's is),
        // and keeps no waker of its caller's.
        let superseded = match this.state {
            Connecting::Wait { .. } | Connecting::Ready { .. } => {
                !this.owner.get_or_insert_with(|| cx.waker().clone()).will_wake(cx.waker())
            }
            _ => {
                this.owner = None;
                false
            }
        };
        loop {
            match &mut this.state {
                Connecting::Dial { attempts, .. } => {
                    let result = ready!(attempts.poll(cx));
                    let Connecting::Dial { hold, .. } = std::mem::replace(&mut this.state, Connecting::Done)
                    else {
                        unreachable!("matched above")
                    };
                    return Poll::Ready(match result {
                        Ok((io, took)) => Ok(connected(io, hold, took)),
                        Err(e) => Err(dial_failed(e, hold)),
                    });
                }
                Connecting::Wait { .. } | Connecting::Ready { .. } if superseded => {
                    tracing::trace!(target: "drain_on_drop::dial", "connect not needed");
                    this.state = Connecting::Done;
                    return Poll::Ready(Err(Box::new(Superseded)));
                }
                Connecting::Wait { waiting, deadline, .. } => {
                    let phase = match waiting.poll_phase(cx) {
                        Poll::Ready(Phase::Serving) => {
                            // Its pool hands it to those waiting there in
                            // one pass, which may not have reached this
                            // request yet: a grace, then its own.
                            if !waiting.served {
                                waiting.served = true;
                                let grace = Instant::now() + http2::SERVED_GRACE;
                                if grace < deadline.when() {
                                    *deadline = Deadline::at(grace);
                                }
                            }
                            ready!(deadline.poll_elapsed(cx));
                            tracing::trace!(target: "drain_on_drop::dial", "not handed that connection: dials its own");
                            Phase::Serving
                        }
                        Poll::Ready(phase) => phase,
                        Poll::Pending => {
                            ready!(deadline.poll_elapsed(cx));
                            tracing::trace!(target: "drain_on_drop::dial", "patience spent: dials its own");
                            Phase::Serving
                        }
                    };
                    let Connecting::Wait { connector, dst, origin, .. } =
                        std::mem::replace(&mut this.state, Connecting::Done)
                    else {
                        unreachable!("matched above")
                    };
                    this.state = match phase {
                        Phase::Failed(failure) => return Poll::Ready(Err(Box::new(failure.error()))),
                        // In use, and this request was not handed it (or
                        // past the patience): its own connection.
                        Phase::Serving => Connecting::entered(Entry::Free, connector, dst, origin, true),
                        // Gone before it connected, or HTTP/1: through the
                        // gate again (its first poll is long past).
                        _ => {
                            let entry = origin.enter();
                            Connecting::entered(entry, connector, dst, origin, true)
                        }
                    };
                }
                Connecting::Ready { yielded: yielded @ false, .. } => {
                    *yielded = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Connecting::Ready { connector, dst, .. } => {
                    if let Err(e) = ready!(connector.poll_ready(cx)) {
                        let Connecting::Ready { hold, .. } =
                            std::mem::replace(&mut this.state, Connecting::Done)
                        else {
                            unreachable!("matched above")
                        };
                        return Poll::Ready(Err(dial_failed(e.into(), hold)));
                    }
                    let dial = connector.call(dst.clone());
                    let Connecting::Ready { connector, dst, hold, .. } =
                        std::mem::replace(&mut this.state, Connecting::Done)
                    else {
                        unreachable!("matched above")
                    };
                    let race = hold.dial.as_ref().and_then(|d| d.race_at()).map(|at| Race {
                        at: Deadline::at(at),
                        connector,
                        dst,
                    });
                    this.state = Connecting::Dial { attempts: Attempts::first(dial, race), hold };
                }
                Connecting::Done => panic!("ConnectFuture polled after completion"),
            }
        }
    }
}

/// A dial's connection, as it is handed to hyper-util: HTTP/1 by ALPN, or
/// on an origin known to speak it over plain TCP, untouched; anything else
/// read as it goes.
fn connected<C>(io: C::Response, hold: Hold, took: Duration) -> Http2Connection<C>
where
    C: Service<Uri>,
    C::Response: Connection,
{
    let origin = hold.origin.clone();
    origin.connected(hold.dial.as_ref(), took);
    let alpn_h2 = io.connected().is_negotiated_h2();
    if (origin.https() && !alpn_h2) || (!origin.https() && origin.proto() == Proto::Http1) {
        drop(hold.spoke(Proto::Http1));
        return Http2Connection::plain(io);
    }
    Http2Connection::tracked(io, Link::new(origin), hold)
}

/// A dial failed with `error`: those waiting for it are told what it said.
fn dial_failed(error: BoxError, mut hold: Hold) -> BoxError {
    if let Some(dial) = hold.dial.take() {
        hold.origin.failed(&dial, DialFailed::of(&*error));
    }
    error
}

impl<C: Service<Uri>> fmt::Debug for ConnectFuture<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            Connecting::Dial { .. } => "dialing",
            Connecting::Wait { .. } => "waiting for another dial",
            Connecting::Ready { .. } => "about to dial",
            Connecting::Done => "done",
        };
        f.debug_struct("ConnectFuture").field("state", &state).finish()
    }
}
