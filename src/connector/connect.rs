//! The future of a connect through the gate: it dials on its own, or takes
//! part in a dial of its origin's (started by it or by another connect),
//! driving it in its turn, until that dial's connection is hyper-util's or
//! the dial fails it; the HTTP/2 room (`http2`) says why each.

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
use super::dial::{Dial, DriverFailure, Step};
use super::gate::{DialOrigin, Entry};
use super::io::{Hold, Http2Connection};
use super::link::Link;
use crate::http2::{self, DialFailed, Proto, Superseded};
use crate::timer::Deadline;

impl<C> ConnectFuture<C>
where
    C: Service<Uri> + Clone,
{
    /// A connect to `origin`'s `dst` through its gate, on `inner` (made
    /// ready): it dials on its own, starts a dial others may join, or joins
    /// the dial on its way.
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

/// Future of [`Http2Connector`](crate::Http2Connector): the wrapped
/// connector's connection, or, when it took part in a dial of its origin's
/// that another connect's request got, an end for hyper-util to drop (its
/// request gets that connection from hyper-util's pool); or the dial's
/// failure (see [`Http2Connector`](crate::Http2Connector)).
#[must_use = "futures do nothing unless polled"]
pub struct ConnectFuture<C: Service<Uri>> {
    state: Connecting<C>,
    /// The task that first polled it while it took part in a dial or had
    /// yet to dial: the one that wants the connection (hyper-util finishes
    /// a connect it no longer needs on another).
    owner: Option<Waker>,
}

enum Connecting<C: Service<Uri>> {
    /// Taking part in a dial of its origin's: driving it in its turn, else
    /// waiting (until `expires`, unless it drives; once the dial's
    /// connection is in use, `grace`).
    Member {
        member: Membership,
        connector: C,
        dst: Uri,
        expires: Deadline,
        grace: Option<Deadline>,
        /// Its first turn waits for one more poll (see `Ready`).
        yielded: bool,
    },
    /// About to dial its own once `connector` is ready, and, on a first
    /// poll, once the task polled its pool checkout again: hyper-util polls
    /// the checkout, then the connect, and a connection pooled in between
    /// (on another thread) would otherwise cost a dial hyper-util finishes
    /// in the background and throws away.
    Ready {
        connector: C,
        dst: Uri,
        origin: Arc<DialOrigin>,
        yielded: bool,
    },
    /// Its own dial, ungated (it goes on, as hyper-util alone's does, if
    /// hyper-util no longer needs it: its connection is pooled).
    Own {
        dial: C::Future,
        started: Instant,
        origin: Arc<DialOrigin>,
    },
    Done,
}

/// A connect's place in a dial: given back when it goes, however it does
/// (its future dropped included), and with it its turn to drive the dial.
struct Membership {
    dial: Arc<Dial>,
    origin: Arc<DialOrigin>,
    key: usize,
}

impl Drop for Membership {
    fn drop(&mut self) {
        if self.dial.leave(self.key) {
            self.origin.forget(&self.dial);
        }
    }
}

impl<C: Service<Uri>> Connecting<C> {
    /// Where the gate's `entry` sends a connect to `origin`'s `dst`, on
    /// `connector` (made ready), yielding once before a dial of its own
    /// unless `yielded`.
    fn entered(entry: Entry, connector: C, dst: Uri, origin: Arc<DialOrigin>, yielded: bool) -> Self {
        let (dial, starter) = match entry {
            Entry::Free => return Connecting::Ready { connector, dst, origin, yielded },
            Entry::Dial(dial) => (dial, true),
            Entry::Wait(dial) => (dial, false),
        };
        let key = dial.join(starter);
        let expires = Deadline::at(dial.expires());
        let member = Membership { dial, origin, key };
        Connecting::Member { member, connector, dst, expires, grace: None, yielded: yielded || !starter }
    }
}

/// A dial's attempts: its first, and a second raced once the first
/// outlasts the origin's patience while someone waits for it (or, nobody
/// waiting, `http2::LONE_RACE`), the first going on (RFC 8305 races
/// attempts the same way): with hyper-util's `http2_only`, whose own lock
/// holds every other request behind this one, the race is what keeps a
/// handshake that never ends from holding them all. Kept in the dial
/// (`Dial::take_work`), polled by its driver.
struct Attempts<C: Service<Uri>> {
    running: [Option<(C::Future, Instant)>; 2],
    race: Option<Race<C>>,
}

/// What a second attempt is made with, and when it goes.
struct Race<C> {
    connector: C,
    dst: Uri,
    at: Option<Deadline>,
}

/// What one poll of a dial's attempts came to.
enum Event<T> {
    Connected(T, Duration),
    Failed(BoxError, Duration),
}

impl<C> Attempts<C>
where
    C: Service<Uri>,
    C::Error: Into<BoxError>,
    C::Future: Unpin,
{
    /// When each attempt still running began, and how long it has run.
    fn running(&self) -> Vec<(Instant, Duration)> {
        self.running.iter().flatten().map(|(_, began)| (*began, began.elapsed())).collect()
    }

    /// The first connection an attempt made, or the next failure; a second
    /// attempt goes at `race_at`.
    fn poll(&mut self, cx: &mut Context<'_>, race_at: Option<Instant>) -> Poll<Event<C::Response>> {
        loop {
            for attempt in &mut self.running {
                let Some((dial, began)) = attempt else { continue };
                if let Poll::Ready(result) = Pin::new(dial).poll(cx) {
                    let took = began.elapsed();
                    *attempt = None;
                    return Poll::Ready(match result {
                        Ok(io) => Event::Connected(io, took),
                        Err(e) => Event::Failed(e.into(), took),
                    });
                }
            }
            let (Some(race), Some(at)) = (&mut self.race, race_at) else { return Poll::Pending };
            if self.running[0].is_none() {
                // The first failed: nothing to race.
                self.race = None;
                return Poll::Pending;
            }
            let deadline = race.at.get_or_insert_with(|| Deadline::at(at));
            if deadline.when() != at {
                *deadline = Deadline::at(at);
            }
            ready!(deadline.poll_elapsed(cx));
            match race.connector.poll_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => self.race = None,
                Poll::Ready(Ok(())) => {
                    tracing::trace!(target: "drain_on_drop::dial", "a dial outlasts its patience: a second attempt races it");
                    self.running[1] = Some((race.connector.call(race.dst.clone()), Instant::now()));
                    self.race = None;
                }
            }
        }
    }
}

/// What a member's turn at driving its dial came to.
enum Driven<T> {
    /// This member's connect ends with the dial's connection.
    Connected(T, Duration),
    /// This member's connect fails.
    Failed(BoxError),
    /// An attempt failed, not for this member: look again.
    Again,
}

impl Membership {
    /// A turn at driving the dial: its attempts, started with `connector`
    /// (made ready here) if they have not begun.
    fn drive<C>(&self, connector: &mut C, dst: &Uri, cx: &mut Context<'_>) -> Poll<Driven<C::Response>>
    where
        C: Service<Uri> + Clone + Send + 'static,
        C::Error: Into<BoxError>,
        C::Future: Unpin + Send + 'static,
    {
        let mut work = match self.dial.take_work() {
            Some(work) => work.downcast::<Attempts<C>>().expect("one connector type per connector's origins"),
            None => match ready!(connector.poll_ready(cx)) {
                Err(e) => return Poll::Ready(self.failed::<C>(None, e.into(), Duration::ZERO)),
                Ok(()) => {
                    let first = (connector.call(dst.clone()), Instant::now());
                    let race = Race { connector: connector.clone(), dst: dst.clone(), at: None };
                    Box::new(Attempts { running: [Some(first), None], race: Some(race) })
                }
            },
        };
        match work.poll(cx, self.dial.race_at()) {
            Poll::Pending => {
                self.dial.put_work(work);
                Poll::Pending
            }
            Poll::Ready(Event::Connected(io, took)) => {
                drop(work); // the other attempt, if any: the first to connect serves everyone
                self.dial.connected();
                Poll::Ready(Driven::Connected(io, took))
            }
            Poll::Ready(Event::Failed(error, took)) => Poll::Ready(self.failed(Some(work), error, took)),
        }
    }

    /// An attempt of the dial failed after `took` with `error`; `work`, the
    /// attempts left, if any.
    fn failed<C>(
        &self,
        work: Option<Box<Attempts<C>>>,
        error: BoxError,
        took: Duration,
    ) -> Driven<C::Response>
    where
        C: Service<Uri> + Send + 'static,
        C::Error: Into<BoxError>,
        C::Future: Unpin + Send + 'static,
    {
        let running = work.as_ref().map(|w| w.running()).unwrap_or_default();
        tracing::trace!(target: "drain_on_drop::dial", %error, left = running.len(), "a dial's attempt failed");
        let (mine, over) = self.dial.attempt_failed(error, took, &running, self.key);
        if over {
            self.origin.forget(&self.dial);
            super::dial_failed(self.origin.key());
        } else if let Some(work) = work {
            self.dial.put_work(work);
        }
        match mine {
            Some(DriverFailure::Own(error)) => Driven::Failed(error),
            Some(DriverFailure::Shared(error)) => Driven::Failed(Box::new(DialFailed::error(&error, false))),
            None => Driven::Again,
        }
    }
}

// Nothing here is ever pinned in place: the wrapped connector's future is
// polled through `Pin::new`, which asks it to be `Unpin`.
impl<C: Service<Uri>> Unpin for ConnectFuture<C> {}

impl<C> Future for ConnectFuture<C>
where
    C: Service<Uri> + Clone + Send + 'static,
    C::Error: Into<BoxError>,
    C::Future: Unpin + Send + 'static,
    C::Response: Connection,
{
    type Output = Result<Http2Connection<C>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // hyper-util finishes a connect whose request its pool served on
        // another task: one that takes part in a dial leaves it (its turn
        // to drive goes to another member; the last to go ends it), one
        // that has not dialed stops here; a dial of its own goes on (its
        // connection is pooled, as hyper-util alone's is).
        let superseded = match this.state {
            Connecting::Member { .. } | Connecting::Ready { .. } => {
                !this.owner.get_or_insert_with(|| cx.waker().clone()).will_wake(cx.waker())
            }
            _ => {
                this.owner = None;
                false
            }
        };
        loop {
            match &mut this.state {
                Connecting::Member { .. } | Connecting::Ready { .. } if superseded => {
                    tracing::trace!(target: "drain_on_drop::dial", "connect not needed");
                    this.state = Connecting::Done;
                    return Poll::Ready(Err(Box::new(Superseded)));
                }
                Connecting::Member { member, connector, dst, expires, grace, yielded } => {
                    let step = match member.dial.poll_step(member.key, cx) {
                        Poll::Ready(step) => step,
                        Poll::Pending => {
                            ready!(expires.poll_elapsed(cx));
                            tracing::trace!(target: "drain_on_drop::dial", "patience spent: dials its own");
                            this.state = this.state.take().into_own();
                            continue;
                        }
                    };
                    match step {
                        Step::Drive if !*yielded => {
                            *yielded = true;
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                        Step::Drive => match ready!(member.drive(connector, dst, cx)) {
                            Driven::Again => continue,
                            Driven::Failed(error) => {
                                this.state = Connecting::Done;
                                return Poll::Ready(Err(error));
                            }
                            Driven::Connected(io, took) => {
                                let Connecting::Member { member, .. } = this.state.take() else {
                                    unreachable!("matched above")
                                };
                                let origin = member.origin.clone();
                                origin.handshake(took);
                                let hold = Hold { origin, dial: Some(member.dial.clone()) };
                                drop(member);
                                return Poll::Ready(Ok(connected(io, hold)));
                            }
                        },
                        Step::Failed(error) => {
                            this.state = Connecting::Done;
                            return Poll::Ready(Err(Box::new(DialFailed::error(&error, true))));
                        }
                        // In use, and the pool did not hand it to this
                        // request (without a pool it could not): its own.
                        Step::Served { pooled: false } => this.state = this.state.take().into_own(),
                        Step::Served { pooled: true } => {
                            // Its pool hands it to those waiting there in
                            // one pass, which may not have reached this
                            // request yet: a grace, then its own.
                            let grace = grace.get_or_insert_with(|| {
                                let at = Instant::now() + http2::SERVED_GRACE;
                                Deadline::at(at.min(expires.when().max(Instant::now())))
                            });
                            ready!(grace.poll_elapsed(cx));
                            tracing::trace!(target: "drain_on_drop::dial", "not handed that connection: dials its own");
                            this.state = this.state.take().into_own();
                        }
                        // Gone unused, HTTP/1, or over: through the gate
                        // again (its first poll is long past).
                        Step::Again => {
                            let Connecting::Member { member, connector, dst, .. } = this.state.take() else {
                                unreachable!("matched above")
                            };
                            let origin = member.origin.clone();
                            drop(member);
                            let entry = origin.enter();
                            this.state = Connecting::entered(entry, connector, dst, origin, true);
                        }
                    }
                }
                Connecting::Ready { yielded: yielded @ false, .. } => {
                    *yielded = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Connecting::Ready { connector, dst, .. } => {
                    if let Err(e) = ready!(connector.poll_ready(cx)) {
                        this.state = Connecting::Done;
                        return Poll::Ready(Err(e.into()));
                    }
                    let dial = connector.call(dst.clone());
                    let Connecting::Ready { origin, .. } = this.state.take() else {
                        unreachable!("matched above")
                    };
                    this.state = Connecting::Own { dial, started: Instant::now(), origin };
                }
                Connecting::Own { dial, started, origin } => {
                    let result = ready!(Pin::new(dial).poll(cx));
                    let (took, origin) = (started.elapsed(), origin.clone());
                    this.state = Connecting::Done;
                    let io = result.map_err(Into::into)?;
                    origin.handshake(took);
                    return Poll::Ready(Ok(connected(io, Hold { origin, dial: None })));
                }
                Connecting::Done => panic!("ConnectFuture polled after completion"),
            }
        }
    }
}

impl<C: Service<Uri>> Connecting<C> {
    fn take(&mut self) -> Self {
        std::mem::replace(self, Connecting::Done)
    }

    /// A member that stops waiting for its dial: about to dial its own
    /// (its first poll is long past).
    fn into_own(self) -> Self {
        match self {
            Connecting::Member { member, connector, dst, .. } => {
                let origin = member.origin.clone();
                drop(member);
                Connecting::Ready { connector, dst, origin, yielded: true }
            }
            other => other,
        }
    }
}

/// A dial's connection, as it is handed to hyper-util: HTTP/1 by ALPN, or
/// on an origin known to speak it over plain TCP, untouched; anything else
/// read as it goes.
fn connected<C>(io: C::Response, hold: Hold) -> Http2Connection<C>
where
    C: Service<Uri>,
    C::Response: Connection,
{
    let origin = hold.origin.clone();
    let alpn_h2 = io.connected().is_negotiated_h2();
    if (origin.https() && !alpn_h2) || (!origin.https() && origin.proto() == Proto::Http1) {
        drop(hold.spoke(Proto::Http1));
        return Http2Connection::plain(io);
    }
    Http2Connection::tracked(io, Link::new(origin), hold)
}

impl<C: Service<Uri>> fmt::Debug for ConnectFuture<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            Connecting::Member { .. } => "taking part in a dial",
            Connecting::Ready { .. } => "about to dial",
            Connecting::Own { .. } => "dialing",
            Connecting::Done => "done",
        };
        f.debug_struct("ConnectFuture").field("state", &state).finish()
    }
}
