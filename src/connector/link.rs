//! One connection the [`Http2Connector`](crate::Http2Connector) opened: what
//! it is to its origin's lesson, what it may yet reset, and how it is moved
//! on ([`Link`]); and the tag hyper-util copies into every response it
//! carries ([`LinkTag`]), by which the layer and the retry find it again.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use http::Extensions;
use hyper_util::client::legacy::connect::{CaptureConnection, Connected};

use super::gate::DialOrigin;
use crate::http2::{self, Role};

/// An HTTP/2 connection's own record. Held by its I/O (for as long as the
/// connection lives); the tags in responses and in hyper-util's copies of
/// its `Connected` hold it weakly, so nothing outlives the connection.
///
/// What it may yet reset is the RST_STREAM frames it wrote, its streams in
/// flight, and the requests hyper-util's pool handed it that have not gone
/// out yet (checkouts, counted as [`LinkTag`] sees them); each is stored by
/// the one task that changes it, in an order that never lets a reader
/// count less than there is.
pub(crate) struct Link {
    origin: Arc<DialOrigin>,
    /// What it is to its origin's lesson, fixed when it opened.
    role: Role,
    /// A test's own allowance (`0`: any number); `None` for a connection
    /// that takes its origin's share.
    own: Option<usize>,
    /// Resets after which, the unbounded test, it forgets the lesson (once
    /// its server answered a stream opened after them).
    forget_at: Option<usize>,
    /// RST_STREAM frames written on it (`frames.rs`).
    resets: AtomicUsize,
    /// Its streams in flight: opened, neither reset nor ended by the server.
    open: AtomicUsize,
    /// Requests written on it (HEADERS of a new stream).
    written: AtomicUsize,
    /// Times hyper-util's pool handed it to a request.
    checkouts: AtomicUsize,
    /// It was told to take no new request for its share of resets (or will
    /// be, once `handle` comes).
    moved: AtomicBool,
    /// It was told to take no new request for want of streams (or will be,
    /// once `handle` comes): the hand-out that took the last of its server's
    /// streams filled it.
    filled: AtomicBool,
    /// A response came on it.
    answered: AtomicBool,
    /// Its server's SETTINGS_MAX_CONCURRENT_STREAMS (`0`: none said).
    max_streams: AtomicUsize,
    /// Its streams in flight whose response head has not come.
    awaiting: AtomicUsize,
    /// When its first request went out, and the hand-outs counted then
    /// (those of hyper-util's first pass, see `first_pass_over`).
    first_write: OnceLock<(Instant, usize)>,
    /// The hand-outs of hyper-util's first pass over the requests that
    /// waited for it are on their way (see `first_pass_over`).
    first_pass_over: AtomicBool,
    /// Its server punished it (its origin learned from it once).
    punished: AtomicBool,
    /// Its origin heard that it passed as its role asked, unpunished.
    passed: AtomicBool,
    /// hyper-util's view of it was poisoned (said once).
    poisoned: AtomicBool,
    /// hyper-util's view of the connection, from the first response of a
    /// captured request that went on it (the layer captures every request
    /// to an origin while one of its connections may move on):
    /// `Connected::poison` through it is what makes hyper-util's pool take
    /// no new request on it.
    handle: OnceLock<CaptureConnection>,
}

impl Link {
    pub(crate) fn new(origin: Arc<DialOrigin>) -> Arc<Link> {
        let (role, own, forget_at) = origin.terms();
        if let (Role::Test { level, .. }, Some(own)) = (role, own) {
            tracing::debug!(target: "drain_on_drop", level, own, "HTTP/2 connection tests its origin's share");
        }
        origin.unhandled(true);
        origin.connection(true);
        Arc::new(Link {
            origin,
            first_write: OnceLock::new(),
            first_pass_over: AtomicBool::new(false),
            role,
            own,
            forget_at,
            resets: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            written: AtomicUsize::new(0),
            checkouts: AtomicUsize::new(0),
            moved: AtomicBool::new(false),
            filled: AtomicBool::new(false),
            max_streams: AtomicUsize::new(0),
            awaiting: AtomicUsize::new(0),
            answered: AtomicBool::new(false),
            punished: AtomicBool::new(false),
            passed: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
            handle: OnceLock::new(),
        })
    }

    /// The connection has written `resets` RST_STREAM frames and `written`
    /// requests, and `open` of its streams may still be reset, `awaiting` of
    /// them still without their response head (stored in that order: a
    /// reader loads them the other way round).
    pub(crate) fn charge(&self, resets: usize, open: usize, written: usize, awaiting: usize) {
        self.resets.store(resets, Ordering::Relaxed);
        self.awaiting.store(awaiting, Ordering::Relaxed);
        self.open.store(open, Ordering::Release);
        self.written.store(written, Ordering::Release);
        if written > 0 {
            self.first_write.get_or_init(|| (Instant::now(), self.checkouts.load(Ordering::Relaxed)));
        }
        self.check();
        self.settle();
    }

    /// Whether the hand-outs of hyper-util's first pass are on their way.
    /// When a connection is pooled, hyper-util's pool hands it, in one pass
    /// under its lock, to every request that waited for it; each of them
    /// checks whether it may still use it only when its task runs, and
    /// fails if it was told to take no new request by then (a request
    /// left without a connection: hyper-util dials again for it, or, over
    /// ALPN, the connect it raced with its checkout must serve it). So a
    /// connection is poisoned only once its first request went out and the
    /// requests handed it by then (the pass) were written, or its first
    /// response came (a round trip after the pass), or its server's
    /// streams are all written (a pass of more requests than that: the
    /// rest wait for a stream, on this connection if they took it already,
    /// on the next if their turn comes after it moved on: hyper-util sends
    /// a request handed a connection that closed to another), or
    /// [`http2::SERVED_GRACE`] passed (a request handed it and never sent:
    /// its caller gave up). Later hand-outs are a pool checkout's own, the
    /// request's to use whatever happens to the connection after.
    fn first_pass_over(&self) -> bool {
        if self.first_pass_over.load(Ordering::Relaxed) {
            return true;
        }
        let Some(&(at, pass)) = self.first_write.get() else { return false };
        // One of the pass's hand-outs is never written (see `may_reset`).
        let written = self.written.load(Ordering::Acquire);
        let answered = self.answered.load(Ordering::Relaxed);
        let streams = self.max_streams.load(Ordering::Relaxed);
        if answered
            || written.saturating_add(1) >= pass
            || http2::fills(written, streams)
            || at.elapsed() >= http2::SERVED_GRACE
        {
            self.first_pass_over.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// hyper-util's pool handed the connection to a request (`LinkTag`'s
    /// clone of the pool's own copy).
    fn checked_out(&self) {
        // Before this hand-out counts: it is the pool checkout's own once
        // the first pass is over.
        self.first_pass_over();
        self.checkouts.fetch_add(1, Ordering::Relaxed);
        self.check();
        self.check_streams();
        self.settle();
    }

    /// Times hyper-util's pool handed it to a request (`0`: the client has
    /// no pool, or it was never handed out).
    pub(crate) fn checkouts(&self) -> usize {
        self.checkouts.load(Ordering::Relaxed)
    }

    /// A response (its head) came on it; `tolerated`: the most resets
    /// written before a stream its server answered in what was just read.
    /// The unbounded test forgets its origin's lesson once its server
    /// answered a stream opened after its `forget_at` resets: frames arrive
    /// in order, so the server had read those resets and took a new stream
    /// after them. Reaching that many resets proves nothing by itself: a
    /// server punishes at its next stream, so the punishment of a limit
    /// just under it is still on its way.
    pub(crate) fn answered(&self, tolerated: Option<usize>) {
        if !self.answered.swap(true, Ordering::Relaxed) {
            self.settle();
        }
        if self.forget_at.is_some_and(|at| tolerated.is_some_and(|bore| bore >= at))
            && !self.punished.load(Ordering::Acquire)
            && !self.passed.swap(true, Ordering::AcqRel)
        {
            tracing::debug!(target: "drain_on_drop", "HTTP/2 origin's lesson forgotten: its test went unpunished");
            self.origin.passed(self.role);
        }
    }

    /// Its server said how many streams it may have open at once.
    pub(crate) fn max_streams(&self, streams: u32) {
        self.max_streams.store(usize::try_from(streams).unwrap_or(usize::MAX), Ordering::Relaxed);
    }

    /// At a hand-out from hyper-util's pool: moves it on if that hand-out
    /// took the last of its server's streams (`http2::fills`) and its origin
    /// may open another connection, so that the next request dials one (a
    /// first pass that handed it more requests than that moves it on once
    /// they are on their way, see [`first_pass_over`](Self::first_pass_over)).
    /// The streams taken are those awaiting their response head and the
    /// requests handed it not yet sent: a stream whose head came may be one
    /// whose body was just dropped, its reset not yet written (callers
    /// answered together send their next requests together, before h2
    /// writes the resets of the last ones).
    fn check_streams(&self) {
        let limit = self.max_streams.load(Ordering::Relaxed);
        if limit == 0 || self.filled.load(Ordering::Relaxed) {
            return;
        }
        let written = self.written.load(Ordering::Acquire);
        let awaiting = self.awaiting.load(Ordering::Relaxed);
        let pending = self.checkouts.load(Ordering::Relaxed).saturating_sub(written.saturating_add(1));
        if http2::fills(awaiting.saturating_add(pending), limit)
            && self.origin.may_open_another()
            && !self.filled.swap(true, Ordering::SeqCst)
        {
            tracing::debug!(target: "drain_on_drop", limit, "HTTP/2 connection moves on: its server's streams are all taken");
        }
    }

    /// What it may yet reset: the resets it wrote, its streams in flight,
    /// and the requests handed it not written yet. hyper-util's pool hands
    /// a new connection twice to the request that dialed it (its connect
    /// and its pool checkout, raced: one of them is dropped unused), so one
    /// checkout is never written.
    fn may_reset(&self) -> usize {
        let written = self.written.load(Ordering::Acquire);
        let open = self.open.load(Ordering::Acquire);
        let resets = self.resets.load(Ordering::Relaxed);
        let pending = self.checkouts.load(Ordering::Relaxed).saturating_sub(written.saturating_add(1));
        resets.saturating_add(open).saturating_add(pending)
    }

    /// Moves it on once what it may yet reset reaches its allowance.
    fn check(&self) {
        if self.moved.load(Ordering::Relaxed) {
            return;
        }
        let allowance = self.own.unwrap_or_else(|| self.origin.share());
        if allowance > 0 && http2::moves_on(self.may_reset(), allowance) {
            self.move_on();
        }
    }

    /// The connection takes no new request: poisoned now if hyper-util's
    /// handle on it is here, else as soon as it comes.
    fn move_on(&self) {
        self.moved.store(true, Ordering::SeqCst);
        self.settle();
    }

    /// Poisons it if it is to take no new request, hyper-util's handle on
    /// it is here (else `offer_handle` does, once it comes), and the first
    /// pass's hand-outs are on their way (else the next write or hand-out
    /// does).
    fn settle(&self) {
        if self.poisoned.load(Ordering::Relaxed) || !self.retired() || !self.first_pass_over() {
            return;
        }
        if let Some(handle) = self.handle.get() {
            self.poison(handle);
        }
    }

    /// Whether it is to take no new request.
    fn retired(&self) -> bool {
        self.moved.load(Ordering::SeqCst) || self.filled.load(Ordering::SeqCst)
    }

    fn poison(&self, handle: &CaptureConnection) {
        if let Some(connected) = handle.connection_metadata().as_ref() {
            connected.poison();
            if !self.poisoned.swap(true, Ordering::Relaxed) {
                tracing::debug!(
                    target: "drain_on_drop",
                    resets = self.resets(),
                    "HTTP/2 connection moves on: it takes no new request"
                );
            }
        }
    }

    /// Whether the layer is to capture every request to the connection's
    /// origin (see `DialOrigin::wants_captures`).
    pub(crate) fn wants_captures(&self) -> bool {
        self.origin.wants_captures()
    }

    /// hyper-util's handle on the connection, from a captured request that
    /// went on it (the first is kept). Once the connection moved on, each
    /// one poisons it again before its caller can send another request:
    /// another caller may have set the handle a moment before and not yet
    /// poisoned it.
    pub(crate) fn offer_handle(&self, handle: CaptureConnection) {
        let handle = match self.handle.set(handle) {
            Ok(()) => {
                self.origin.unhandled(false);
                self.handle.get().expect("just set")
            }
            Err(_) if !self.retired() || !self.first_pass_over() => return,
            Err(mine) => {
                self.poison(&mine);
                return;
            }
        };
        // Either this sees `moved` (`filled`), or `settle` sees the handle.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.retired() && self.first_pass_over() {
            self.poison(handle);
        }
    }

    /// Whether what its server says still matters: it moved on, and no
    /// punishment was heard of (it would pass, at its end).
    pub(crate) fn awaits_verdict(&self) -> bool {
        self.moved.load(Ordering::Relaxed) && !self.punished.load(Ordering::Relaxed)
    }

    /// RST_STREAM frames written on it so far.
    pub(crate) fn resets(&self) -> usize {
        self.resets.load(Ordering::Relaxed)
    }

    /// The server punished the connection for what it did after it had
    /// sent `bore` resets (`http2::punishes`: seen by the connection
    /// reading the server's frames, or by `RetryRefused` in a request's
    /// error): it takes no new request, and its origin learns, once.
    pub(crate) fn punished(&self, bore: usize) {
        if !self.punished.swap(true, Ordering::AcqRel) {
            tracing::debug!(
                target: "drain_on_drop",
                bore,
                resets = self.resets(),
                "HTTP/2 connection punished by its server for its resets"
            );
            self.origin.punished(bore, self.role);
        }
        self.move_on();
    }
}

impl Drop for Link {
    /// The connection is gone: its origin hears whether it moved on
    /// unpunished at its allowance, or ended before it.
    fn drop(&mut self) {
        self.origin.connection(false);
        if self.handle.get().is_none() {
            self.origin.unhandled(false);
        }
        if *self.punished.get_mut() || *self.passed.get_mut() {
            return;
        }
        if *self.moved.get_mut() {
            self.origin.passed(self.role);
        } else {
            self.origin.ended(self.role);
        }
    }
}

/// What hyper-util copies into the extensions of each response a
/// connector's connection carries (private: nobody else can forge it).
///
/// The one in the `Connected` the connection gave hyper-util (`original`)
/// stays in the copy its pool keeps; hyper-util 0.1 clones that copy once
/// each time its pool hands the connection to a request (`reserve`), and
/// only then (captures, responses and errors clone a request's copy): so a
/// clone of the original is a checkout, counted before the request goes
/// out, while the pool's lock is held, and the connection can move on
/// before the pool hands it to another.
pub(crate) struct LinkTag {
    link: Weak<Link>,
    original: bool,
}

impl Clone for LinkTag {
    fn clone(&self) -> Self {
        if self.original
            && let Some(link) = self.link.upgrade()
        {
            link.checked_out();
        }
        LinkTag { link: self.link.clone(), original: false }
    }
}

impl LinkTag {
    /// The tag of the `Connected` the connection gives hyper-util.
    pub(crate) fn new(link: &Arc<Link>) -> Self {
        LinkTag { link: Arc::downgrade(link), original: true }
    }

    /// The connection a response came on, while it lives.
    pub(crate) fn of_response(extensions: &Extensions) -> Option<Arc<Link>> {
        extensions.get::<LinkTag>()?.link.upgrade()
    }

    /// The connection `connected` describes (as a failed request's error
    /// carries it), if the connector opened it and it lives.
    pub(crate) fn of_connected(connected: &Connected) -> Option<Arc<Link>> {
        let mut extensions = Extensions::new();
        connected.get_extras(&mut extensions);
        LinkTag::of_response(&extensions)
    }
}
