//! Origins: which server a request goes to ([`key`]), what the layer has
//! measured about each ([`estimates`]), and the bounded table that keeps
//! them ([`table`]). This module measures and hands out plain figures; what
//! a drain may spend follows from them in `sizing.rs`.

mod estimates;
mod heads;
mod key;
mod table;

#[cfg(feature = "http2")]
use std::sync::atomic::AtomicU8;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub(crate) use estimates::{Estimates, Probe, RATE_SAMPLES};
pub(crate) use key::OriginKey;
pub(crate) use table::Origins;

use crate::budget::DrainBudget;
use crate::keepalive::OriginIdle;

/// One origin: its name, what the layer measured about it, and the drain
/// slots its drains hold. Shared by the table and by the requests, responses and drains of
/// the origin, which reach it without the table.
pub(crate) struct Origin {
    key: OriginKey,
    /// The table's clock at this origin's last lookup (least recently used
    /// forgotten first).
    last_used: AtomicU64,
    estimates: Mutex<Estimates>,
    /// How its first request with an absolute URI spelled it (scheme and
    /// authority, as written; never one with a userinfo): a service's next
    /// request spelled the same is to this origin.
    spelling: OnceLock<(Box<str>, Box<str>)>,
    /// Its round trip (see `heads.rs`), timed from `epoch`.
    heads: heads::HeadTimes,
    epoch: Instant,
    /// Drains of this origin holding a slot under `max_concurrent_drains`.
    drains: AtomicUsize,
    /// What its HTTP/1 servers said and did of their idle timeout.
    idle: OriginIdle,
    /// Whether each request's connection is captured, for hyper-util's
    /// view of it (through which an `Http2Connector`'s connection moves on,
    /// `connector::Link`): [`CAPTURE_UNKNOWN`] until a response says (where
    /// a share is fixed, every request is captured while none came, so that
    /// a first connection moves on in time too), then as its
    /// `Http2Connector` connections want ([`CAPTURE`]), or never
    /// ([`CAPTURE_NOT`]: it answered on no such connection).
    #[cfg(feature = "http2")]
    wants_capture: AtomicU8,
}

impl Origin {
    fn new(key: OriginKey, now: u64) -> Self {
        Origin {
            key,
            last_used: AtomicU64::new(now),
            estimates: Mutex::default(),
            spelling: OnceLock::new(),
            heads: heads::HeadTimes::default(),
            epoch: Instant::now(),
            drains: AtomicUsize::new(0),
            idle: OriginIdle::default(),
            #[cfg(feature = "http2")]
            wants_capture: AtomicU8::new(CAPTURE_UNKNOWN),
        }
    }

    /// Whether a request's connection is to be captured (see
    /// `wants_capture`): before the origin's first response, only where
    /// some `Http2Connector` has a fixed share (its first connection may
    /// have to move on before any response; a capture replaces the
    /// caller's own); after one that said nothing (no `Http2Connector`
    /// connection carried it), never again.
    #[cfg(feature = "http2")]
    #[inline]
    pub(crate) fn captures(&self) -> bool {
        match self.wants_capture.load(Ordering::Relaxed) {
            CAPTURE => true,
            CAPTURE_NOT => false,
            _ if !crate::connector::captures_before_response() => false,
            _ if self.round_trip().is_none() => true,
            _ => {
                let _ = self.wants_capture.compare_exchange(
                    CAPTURE_UNKNOWN,
                    CAPTURE_NOT,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                self.wants_capture.load(Ordering::Relaxed) == CAPTURE
            }
        }
    }

    /// A response came on an `Http2Connector`'s connection to this origin,
    /// whose connections want every request captured (`true`) or not.
    #[cfg(feature = "http2")]
    pub(crate) fn want_capture(&self, wanted: bool) {
        let state = if wanted { CAPTURE } else { CAPTURE_NOT };
        if self.wants_capture.load(Ordering::Relaxed) != state {
            self.wants_capture.store(state, Ordering::Relaxed);
        }
    }

    /// What its HTTP/1 servers said and did of their idle timeout
    /// (`keepalive.rs`).
    pub(crate) fn idle(&self) -> &OriginIdle {
        &self.idle
    }

    /// Takes one of this origin's `share` of the drain slots, or says no.
    pub(crate) fn try_take_slot(&self, share: usize) -> bool {
        self.drains
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < share).then_some(n + 1))
            .is_ok()
    }

    /// Gives back a slot taken with [`try_take_slot`](Self::try_take_slot).
    pub(crate) fn give_back_slot(&self) {
        self.drains.fetch_sub(1, Ordering::Relaxed);
    }

    /// Runs `f` on the origin's estimates (one short lock, the origin's own).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Estimates) -> R) -> R {
        // A panic while holding the lock cannot leave plain figures invalid.
        f(&mut self.estimates.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Notes how a request to this origin spelled it, if none did before
    /// (and it carries no userinfo, which is never kept).
    pub(crate) fn spell(&self, scheme: Option<&str>, authority: &str) {
        if self.spelling.get().is_none() && !authority.contains('@') {
            let _ = self.spelling.set((scheme.unwrap_or("").into(), authority.into()));
        }
    }

    /// Whether a request for `scheme://authority` is to this origin, spelled
    /// as its first one was.
    pub(crate) fn spelled(&self, scheme: Option<&str>, authority: &str) -> bool {
        self.spelling.get().is_some_and(|(s, a)| **a == *authority && **s == *scheme.unwrap_or(""))
    }

    /// Records the time from a request's call to its response head, `now`:
    /// no lock, and a write only when it is the quickest of its second.
    pub(crate) fn record_head(&self, now: Instant, head: Duration) {
        self.heads.record(self.epoch, now, head);
    }

    /// The origin's round trip: the shortest time from a request's call to
    /// its response head in the last 16 seconds with one. On a reused
    /// connection that is one round trip plus the server's quickest answer;
    /// a response on a new connection also carries the connection's setup,
    /// so until a reused connection answered, the estimate is high (and the
    /// first drains' time budget generous, not short). Never the caller's
    /// reading pace.
    pub(crate) fn round_trip(&self) -> Option<Duration> {
        self.heads.round_trip(self.epoch, Instant::now())
    }

    /// `scheme://host:port`, never the userinfo.
    pub(crate) fn name(&self) -> String {
        self.key.to_string()
    }
}

/// `Origin::wants_capture`: no response said yet.
#[cfg(feature = "http2")]
const CAPTURE_UNKNOWN: u8 = 0;
/// `Origin::wants_capture`: every request is captured.
#[cfg(feature = "http2")]
const CAPTURE: u8 = 1;
/// `Origin::wants_capture`: none is.
#[cfg(feature = "http2")]
const CAPTURE_NOT: u8 = 2;

/// The response's origin, as its drop needs it.
#[derive(Clone)]
pub(crate) struct OriginAt {
    pub(crate) origin: std::sync::Arc<Origin>,
}

impl OriginAt {
    /// The origin's round trip now (see [`Origin::round_trip`]).
    pub(crate) fn round_trip(&self) -> Option<Duration> {
        self.origin.round_trip()
    }
}

/// Where an origin stands in adaptive mode
/// ([`DrainOnDropLayer::adaptive`](crate::DrainOnDropLayer::adaptive)):
/// whether its drops get the adaptive budget, and if not, why.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adaptive {
    /// Adaptive mode is off: the default budget applies.
    Off,
    /// Adaptive mode is on, and the origin's setup cost was measured: the
    /// adaptive budget applies.
    Measured,
    /// Adaptive mode is on, but this origin's responses came on connections
    /// no [`ObserveConnector`](crate::ObserveConnector) opened, so nothing
    /// measures what a new connection costs: the default budget applies.
    /// Wrap the client's connector with
    /// [`DrainOnDropLayer::observe`](crate::DrainOnDropLayer::observe).
    NoObserver,
    /// Adaptive mode is on and observed, but no new connection to this
    /// origin was measured yet: the default budget applies until one is.
    AwaitingNewConnection,
}

/// The estimates of one origin at one moment; see
/// [`DrainOnDropLayer::origins`](crate::DrainOnDropLayer::origins).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub struct OriginSnapshot {
    /// Whether the adaptive budget applies to this origin, and if not, why.
    pub adaptive: Adaptive,
    /// `scheme://host:port`, never the userinfo.
    pub origin: String,
    /// Estimated round trip: the shortest time from a request's call to its
    /// response head in the origin's last 16 seconds with a response (a
    /// response on a new connection includes the connection's setup).
    /// `None` before the first response.
    pub round_trip: Option<Duration>,
    /// Estimated cost of a new connection: the observer's connector time
    /// (see [`DrainOnDropLayer::adaptive`](crate::DrainOnDropLayer::adaptive)).
    /// `None` before the first new connection, and without an observer.
    pub setup_cost: Option<Duration>,
    /// Estimated link throughput in bytes per second: the highest of the last
    /// drains' rates, on connections past their first response. `None`
    /// before such a drain received 16 KiB or more from the link.
    pub throughput: Option<u64>,
    /// The budget an early drop of a body the size of the byte budget from
    /// this origin gets now: the decision threshold. `None` when it does not
    /// depend on the origin (`max_time` set, so the fixed budgets apply).
    pub budget: Option<DrainBudget>,
    /// New connections the observer measured.
    pub new_connections: u64,
    /// Responses on reused connections (counted with an observer).
    pub reused_responses: u64,
    /// How long the origin's HTTP/1 servers keep an idle connection, as the
    /// layer knows it: its latest idle close seen, capped by what a server
    /// said (`Keep-Alive: timeout=`) plus a second; what a server said,
    /// before any close; the time set with
    /// [`IdleTimeout::Known`](crate::IdleTimeout::Known). `None` while
    /// nothing is known. See
    /// [`DrainOnDropLayer::server_idle_timeout`](crate::DrainOnDropLayer::server_idle_timeout).
    pub idle_timeout: Option<Duration>,
    /// The idle time after which a pooled HTTP/1 connection to the origin
    /// takes no further request: `idle_timeout` less the round trip, the
    /// spread of the idle closes seen and a margin (25 ms, or a 32nd of the
    /// timeout if more). `None`: none retires.
    pub retire_after: Option<Duration>,
    /// Connections of the origin its servers closed while idle, as the
    /// observer saw.
    pub idle_closes: u64,
    /// Connections of the origin retired before their server's idle close
    /// (also counted in [`ReuseSnapshot::retired`](crate::ReuseSnapshot::retired)).
    pub retired: u64,
}

impl OriginSnapshot {
    /// `origin`'s estimates, in adaptive mode when `adaptive`, with the
    /// budget it gets now.
    pub(crate) fn new(
        origin: &Origin,
        est: &Estimates,
        round_trip: Option<Duration>,
        adaptive: bool,
        budget: Option<DrainBudget>,
        idle: crate::keepalive::IdleTimeout,
    ) -> Self {
        let (idle_timeout, idle_closes, retired) = origin.idle.snapshot(idle);
        let adaptive = match (adaptive, est.setup_cost(), est.unobserved_responses()) {
            (false, ..) => Adaptive::Off,
            (true, Some(_), _) => Adaptive::Measured,
            (true, None, 0) => Adaptive::AwaitingNewConnection,
            (true, None, _) => Adaptive::NoObserver,
        };
        OriginSnapshot {
            adaptive,
            origin: origin.name(),
            round_trip,
            setup_cost: est.setup_cost(),
            throughput: est.throughput().map(|v| v as u64),
            budget,
            new_connections: est.new_connections(),
            reused_responses: est.reused_responses(),
            idle_timeout,
            retire_after: origin.idle.retire_after(idle, round_trip),
            idle_closes,
            retired,
        }
    }
}
