//! One connection the [`Http2Connector`](crate::Http2Connector) opened: what
//! it is to its origin's lesson, what it may yet reset, and how it is moved
//! on ([`Link`]); and the tag hyper-util copies into every response it
//! carries ([`LinkTag`]), by which the layer and the retry find it again.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

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
    /// Resets after which, the unbounded test, it forgets the lesson.
    forget_at: Option<usize>,
    /// RST_STREAM frames written on it (`frames.rs`).
    resets: AtomicUsize,
    /// Its streams in flight: opened, neither reset nor ended by the server.
    open: AtomicUsize,
    /// Requests written on it (HEADERS of a new stream).
    written: AtomicUsize,
    /// Times hyper-util's pool handed it to a request.
    checkouts: AtomicUsize,
    /// It was told to take no new request (or will be, once `handle` comes).
    moved: AtomicBool,
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
        Arc::new(Link {
            origin,
            role,
            own,
            forget_at,
            resets: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            written: AtomicUsize::new(0),
            checkouts: AtomicUsize::new(0),
            moved: AtomicBool::new(false),
            punished: AtomicBool::new(false),
            passed: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
            handle: OnceLock::new(),
        })
    }

    /// The connection has written `resets` RST_STREAM frames and `written`
    /// requests, and `open` of its streams may still be reset (stored in
    /// that order: a reader loads them the other way round).
    pub(crate) fn charge(&self, resets: usize, open: usize, written: usize) {
        self.resets.store(resets, Ordering::Relaxed);
        self.open.store(open, Ordering::Release);
        self.written.store(written, Ordering::Release);
        self.check();
    }

    /// hyper-util's pool handed the connection to a request (`LinkTag`'s
    /// clone of the pool's own copy).
    fn checked_out(&self) {
        self.checkouts.fetch_add(1, Ordering::Relaxed);
        self.check();
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

    /// Moves it on once what it may yet reset reaches its allowance; the
    /// unbounded test that bore enough unpunished forgets its origin's
    /// lesson.
    fn check(&self) {
        if self.moved.load(Ordering::Relaxed) {
            return;
        }
        let allowance = self.own.unwrap_or_else(|| self.origin.share());
        if allowance > 0 && http2::moves_on(self.may_reset(), allowance) {
            self.move_on();
        } else if self.forget_at.is_some_and(|at| self.resets() >= at)
            && !self.passed.swap(true, Ordering::AcqRel)
        {
            tracing::debug!(target: "drain_on_drop", "HTTP/2 origin's lesson forgotten: its test went unpunished");
            self.origin.passed(self.role);
        }
    }

    /// The connection takes no new request: poisoned now if hyper-util's
    /// handle on it is here, else as soon as it comes.
    fn move_on(&self) {
        if !self.moved.swap(true, Ordering::SeqCst)
            && let Some(handle) = self.handle.get()
        {
            self.poison(handle);
        }
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
            Err(_) if !self.moved.load(Ordering::SeqCst) => return,
            Err(mine) => {
                self.poison(&mine);
                return;
            }
        };
        // Either this sees `moved`, or `move_on` sees the handle.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.moved.load(Ordering::SeqCst) {
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
