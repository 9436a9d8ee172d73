//! An observed HTTP/1 connection's keep-alive state (the rules are
//! `keepalive.rs`'s): what its read and write sides saw, and the handle a
//! response keeps to mark it idle.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::TagInner;
use crate::keepalive::IdleTimeout;
use crate::origin::Origin;

/// What an HTTP/1 connection's read and write sides saw, for its
/// keep-alive (`keepalive.rs`): when it last received a byte of a
/// response, which request the layer saw answered to the end, and which
/// the connection started since.
pub(super) struct ConnIdle {
    opened: Instant,
    /// Microseconds from `opened` to the last read of the connection while
    /// it was not idle: the last byte of its last response, once it is.
    pub(super) last_read: AtomicU64,
    /// Requests started: writes that followed a read (or none), counted by
    /// the connection alone.
    pub(super) sent: AtomicU32,
    /// The latest request whose response the layer saw end (its body read
    /// to the end, drained, or none): the connection is idle while that is
    /// the last one started. 0 before any (requests count from 1).
    pub(super) ended: AtomicU32,
    /// The response's origin and the layer's setting, from the first
    /// HTTP/1 response through the layer.
    pub(super) origin: OnceLock<(Arc<Origin>, IdleTimeout)>,
    /// The server takes no further request (`Keep-Alive: max=0`).
    pub(super) last_request: AtomicBool,
}

impl ConnIdle {
    pub(super) fn new() -> Self {
        let (last_read, sent, ended, last_request) = Default::default();
        ConnIdle { opened: Instant::now(), last_read, sent, ended, origin: OnceLock::new(), last_request }
    }

    pub(super) fn now(&self) -> u64 {
        self.opened.elapsed().as_micros().min(u128::from(u64::MAX)) as u64
    }

    /// Idle: the layer saw the response of the last request started end.
    pub(super) fn is_idle(&self) -> bool {
        let sent = self.sent.load(Ordering::Acquire);
        sent != 0 && self.ended.load(Ordering::Acquire) == sent
    }

    /// How long since the last byte of the last response.
    pub(super) fn idle_for(&self) -> Duration {
        Duration::from_micros(self.now().saturating_sub(self.last_read.load(Ordering::Relaxed)))
    }
}

/// An HTTP/1 connection as a response keeps it, to mark it idle when the
/// body ended ([`ConnectionTag::into_parts`](super::ConnectionTag::into_parts)).
pub(crate) struct Connection1(pub(super) Arc<TagInner>);

impl Connection1 {
    /// The response to `request` ended (its body read to its end, drained,
    /// or none): the connection is idle until its next request starts.
    pub(crate) fn ended(&self, request: u32) {
        // The latest wins: a body read to its end after the next response's
        // (its caller was slower) says nothing new.
        self.0.idle.ended.fetch_max(request, Ordering::AcqRel);
    }
}

/// Whether an idle connection is to take no further request: its server
/// said so, or it was idle for its origin's `retire_after`.
pub(super) fn retires(idle: &ConnIdle) -> bool {
    let Some((origin, setting)) = idle.origin.get() else { return false };
    if idle.last_request.load(Ordering::Relaxed) {
        return true;
    }
    origin.idle().retire_after(*setting, origin.round_trip()).is_some_and(|after| idle.idle_for() >= after)
}
