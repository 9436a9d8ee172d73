//! One connection the [`Http2Connector`](crate::Http2Connector) opened: the
//! resets it was charged, its origin's share, and how it is moved on
//! ([`Link`]); and the tag hyper-util copies into every response it carries
//! ([`LinkTag`]), by which the layer and the retry find it again.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use http::Extensions;
use hyper_util::client::legacy::connect::{CaptureConnection, Connected};

use super::gate::DialOrigin;
use crate::http2;

/// An HTTP/2 connection's own record. Held by its I/O (for as long as the
/// connection lives); the tags in responses and in hyper-util's copies of
/// its `Connected` hold it weakly, so nothing outlives the connection.
pub(crate) struct Link {
    origin: Arc<DialOrigin>,
    /// RST_STREAM frames written on it (`frames.rs`).
    resets: AtomicUsize,
    /// It was told to take no new request (or will be, once `handle` comes).
    moved: AtomicBool,
    /// Its server punished it (its origin learned from it once).
    punished: AtomicBool,
    /// hyper-util's view of the connection, from the first response of a
    /// request whose connection was captured (the layer captures every
    /// request to an origin its connections served): `Connected::poison`
    /// through it is what makes hyper-util's pool take no new request on it.
    handle: OnceLock<CaptureConnection>,
}

impl Link {
    pub(crate) fn new(origin: Arc<DialOrigin>) -> Arc<Link> {
        Arc::new(Link {
            origin,
            resets: AtomicUsize::new(0),
            moved: AtomicBool::new(false),
            punished: AtomicBool::new(false),
            handle: OnceLock::new(),
        })
    }

    /// `n` more RST_STREAM frames went out on the connection: past its
    /// origin's share, it moves on (and its origin hears it did so
    /// unpunished so far).
    pub(crate) fn reset_written(&self, n: usize) {
        let resets = self.resets.fetch_add(n, Ordering::Relaxed) + n;
        if http2::moves_on(resets, self.origin.share()) && self.move_on() {
            self.origin.moved(resets);
        }
    }

    /// The connection takes no new request: poisoned now if hyper-util's
    /// handle on it is here, else as soon as it comes. Whether this call
    /// moved it (it had not moved yet).
    fn move_on(&self) -> bool {
        let first = !self.moved.swap(true, Ordering::AcqRel);
        if first {
            self.poison();
        }
        first
    }

    fn poison(&self) {
        if let Some(handle) = self.handle.get()
            && let Some(connected) = handle.connection_metadata().as_ref()
        {
            tracing::debug!(
                target: "drain_on_drop",
                resets = self.resets.load(Ordering::Relaxed),
                "HTTP/2 connection moves on: it takes no new request"
            );
            connected.poison();
        }
    }

    /// Whether the connection still needs hyper-util's handle.
    pub(crate) fn wants_handle(&self) -> bool {
        self.handle.get().is_none()
    }

    /// hyper-util's handle on the connection, from a captured request that
    /// went on it; kept if it is the first.
    pub(crate) fn offer_handle(&self, handle: CaptureConnection) {
        if self.handle.set(handle).is_ok() && self.moved.load(Ordering::Acquire) {
            self.poison();
        }
    }

    /// The server punished the connection for what it did
    /// (`http2::punishes`: seen by the connection reading the server's
    /// frames, or by `RetryRefused` in a request's error): it takes no new
    /// request, and its origin learns, once, from the resets it had sent.
    pub(crate) fn punished(&self) {
        if !self.punished.swap(true, Ordering::AcqRel) {
            tracing::debug!(
                target: "drain_on_drop",
                resets = self.resets.load(Ordering::Relaxed),
                "HTTP/2 connection punished by its server for its resets"
            );
            self.origin.punished(self.resets.load(Ordering::Relaxed));
        }
        self.move_on();
    }
}

/// What hyper-util copies into the extensions of each response a
/// connector's connection carries (private: nobody else can forge it).
#[derive(Clone)]
pub(crate) struct LinkTag(Weak<Link>);

impl LinkTag {
    pub(crate) fn new(link: &Arc<Link>) -> Self {
        LinkTag(Arc::downgrade(link))
    }

    /// The connection a response came on, while it lives.
    pub(crate) fn of_response(extensions: &Extensions) -> Option<Arc<Link>> {
        extensions.get::<LinkTag>()?.0.upgrade()
    }

    /// The connection `connected` describes (as a failed request's error
    /// carries it), if the connector opened it and it lives.
    pub(crate) fn of_connected(connected: &Connected) -> Option<Arc<Link>> {
        let mut extensions = Extensions::new();
        connected.get_extras(&mut extensions);
        LinkTag::of_response(&extensions)
    }
}
