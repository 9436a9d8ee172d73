//! The one place that counts: shared counters, the in-flight permit, and the
//! tracing event that reports every early drop's outcome.

use std::fmt;

use crate::adaptive::{OriginSnapshot, Origins};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Why an early drop was not drained at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SkipReason {
    /// `max_bytes` or `max_time` is zero.
    Disabled,
    /// `Connection: close` on the request or the response, or an HTTP/1.0
    /// response without keep-alive: the connection will not be reused anyway.
    ConnectionClose,
    /// An HTTP/1 body with neither `Content-Length` nor chunked framing: it
    /// ends when the server closes the connection, which is never pooled.
    CloseDelimited,
    /// HTTP/2 or later: dropping the body resets one stream, the connection
    /// survives on its own.
    Http2,
    /// The remaining length is known and larger than `max_bytes`.
    OverBudget,
    /// No tokio runtime was captured, or it shut down before the drain started.
    NoRuntime,
    /// `max_concurrent_drains` drains were already running.
    Saturated,
    /// An open-ended stream (`text/event-stream`, or another listed type):
    /// it will not end within any budget, so it is closed at once.
    Stream,
}

impl SkipReason {
    const ALL: [SkipReason; 8] = [
        SkipReason::Disabled,
        SkipReason::ConnectionClose,
        SkipReason::CloseDelimited,
        SkipReason::Http2,
        SkipReason::OverBudget,
        SkipReason::NoRuntime,
        SkipReason::Saturated,
        SkipReason::Stream,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SkipReason::Disabled => "disabled",
            SkipReason::ConnectionClose => "connection_close",
            SkipReason::CloseDelimited => "close_delimited",
            SkipReason::Http2 => "http2",
            SkipReason::OverBudget => "declared_over_budget",
            SkipReason::NoRuntime => "no_runtime",
            SkipReason::Saturated => "saturated",
            SkipReason::Stream => "stream",
        }
    }
}

/// How a started drain ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The end of the body was reached; the connection can be pooled.
    Drained,
    /// More than `max_bytes` would have had to be read.
    OverBytes,
    /// `max_time` passed since the drop.
    OverTime,
    /// The runtime dropped the drain task before it ended (shutdown).
    Cancelled,
    /// The body returned an error (reset, malformed framing, early EOF).
    Failed,
}

impl Outcome {
    /// Number of outcomes: `Failed` is the last variant.
    const COUNT: usize = Outcome::Failed as usize + 1;

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Drained => "drained",
            Outcome::OverBytes => "abandoned",
            Outcome::OverTime => "abandoned",
            Outcome::Cancelled => "abandoned",
            Outcome::Failed => "failed",
        }
    }

    fn reason(self) -> &'static str {
        match self {
            Outcome::Drained => "end_of_body",
            Outcome::OverBytes => "over_bytes",
            Outcome::OverTime => "over_time",
            Outcome::Cancelled => "runtime_shutdown",
            Outcome::Failed => "body_error",
        }
    }
}

#[derive(Default)]
struct Counters {
    bytes_drained: AtomicU64,
    in_flight: AtomicU64,
    /// Started drains by how they ended, indexed by [`Outcome`].
    ended: [AtomicU64; Outcome::COUNT],
    /// Early drops not drained, indexed by [`SkipReason`].
    skipped: [AtomicU64; SkipReason::ALL.len()],
    requests: AtomicU64,
    reused: AtomicU64,
    connections_opened: AtomicU64,
    origins: Origins,
}

/// A cheap, cloneable handle on the counters of one [`DrainOnDropLayer`].
///
/// Every service built from the layer, and from its clones, counts into the
/// same counters. Read them with [`snapshot`](Self::snapshot).
///
/// Every early drop (a body dropped before its end) is counted exactly once,
/// in `drained`, `abandoned`, `skipped` or `failed`, when its outcome is known.
/// Bodies read to their end are not counted at all.
///
/// [`DrainOnDropLayer`]: crate::DrainOnDropLayer
#[derive(Clone, Default)]
pub struct DrainStats {
    counters: Arc<Counters>,
}

impl fmt::Debug for DrainStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.snapshot(), f)
    }
}

/// The counters of a [`DrainStats`] at one moment.
///
/// Fields are read one by one without a lock, so a snapshot taken while drains
/// run may be off by the drains that ended during the read.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainSnapshot {
    /// Drains that reached the end of the body. hyper then pools the
    /// connection, unless it cannot: the server sent bytes after the body or
    /// closed the connection, the request body upload failed, or the
    /// client's pool is disabled (which the layer cannot see).
    pub drained: u64,
    /// Drains given up: the byte budget or the time budget ran out, or the
    /// runtime shut down while the drain ran. The body is dropped, and hyper
    /// closes the connection unless its own single read at the drop finds
    /// the end of the body already buffered (say, a chunked body whose last
    /// data frame crossed the budget and whose final chunk had arrived).
    pub abandoned: u64,
    /// Early drops for which no drain was started, whatever the reason
    /// (disabled, `Connection: close`, HTTP/2, declared length over budget,
    /// no runtime, too many drains running).
    pub skipped: u64,
    /// Drains that ended on a body error (reset, malformed framing, early
    /// end of file). The connection was closed.
    pub failed: u64,
    /// Data bytes read and discarded by drains, whatever their outcome.
    pub bytes_drained: u64,
    /// Drains running now.
    pub in_flight: u64,
    /// Of `abandoned`: more than the byte budget would have had to be read.
    pub abandoned_over_bytes: u64,
    /// Of `abandoned`: the time budget ran out.
    pub abandoned_over_time: u64,
    /// Of `abandoned`: the runtime shut down while the drain ran.
    pub abandoned_runtime_shutdown: u64,
    /// Of `skipped`: `max_bytes` or `max_time` is zero, for the layer or
    /// through a [`DrainBudget`](crate::DrainBudget).
    pub skipped_disabled: u64,
    /// Of `skipped`: `Connection: close` on the request or response, or
    /// HTTP/1.0 without keep-alive.
    pub skipped_connection_close: u64,
    /// Of `skipped`: a body without length or chunking, ended by closing.
    pub skipped_close_delimited: u64,
    /// Of `skipped`: HTTP/2 or later.
    pub skipped_http2: u64,
    /// Of `skipped`: the remaining length was known and above the byte budget.
    pub skipped_over_budget: u64,
    /// Of `skipped`: an open-ended stream content type.
    pub skipped_stream: u64,
    /// Of `skipped`: `max_concurrent_drains` drains were running.
    pub skipped_saturated: u64,
    /// Of `skipped`: no runtime to drain on, or it was shutting down.
    pub skipped_no_runtime: u64,
    /// Responses that came through the layer on a connection opened by an
    /// [`ObserveConnector`](crate::ObserveConnector) (0 without one).
    pub requests: u64,
    /// Of `requests`: responses on a connection that had carried one before.
    pub reused: u64,
    /// Connections opened by [`ObserveConnector`](crate::ObserveConnector)s
    /// counting into these stats (0 without one).
    pub connections_opened: u64,
}

impl DrainStats {
    /// Reads the counters.
    pub fn snapshot(&self) -> DrainSnapshot {
        let c = &*self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let ended = |o: Outcome| load(&c.ended[o as usize]);
        let (over_bytes, over_time, cancelled) =
            (ended(Outcome::OverBytes), ended(Outcome::OverTime), ended(Outcome::Cancelled));
        let skipped = |r: SkipReason| load(&c.skipped[r as usize]);
        DrainSnapshot {
            drained: ended(Outcome::Drained),
            abandoned: over_bytes + over_time + cancelled,
            skipped: c.skipped.iter().map(load).sum(),
            failed: ended(Outcome::Failed),
            bytes_drained: load(&c.bytes_drained),
            in_flight: load(&c.in_flight),
            abandoned_over_bytes: over_bytes,
            abandoned_over_time: over_time,
            abandoned_runtime_shutdown: cancelled,
            skipped_disabled: skipped(SkipReason::Disabled),
            skipped_connection_close: skipped(SkipReason::ConnectionClose),
            skipped_close_delimited: skipped(SkipReason::CloseDelimited),
            skipped_http2: skipped(SkipReason::Http2),
            skipped_over_budget: skipped(SkipReason::OverBudget),
            skipped_stream: skipped(SkipReason::Stream),
            skipped_saturated: skipped(SkipReason::Saturated),
            skipped_no_runtime: skipped(SkipReason::NoRuntime),
            requests: load(&c.requests),
            reused: load(&c.reused),
            connections_opened: load(&c.connections_opened),
        }
    }

    /// Per-origin estimates of the adaptive mode
    /// ([`DrainOnDropLayer::adaptive`](crate::DrainOnDropLayer::adaptive)),
    /// sorted by origin; empty otherwise.
    pub fn origins(&self) -> Vec<OriginSnapshot> {
        self.counters.origins.snapshot()
    }

    pub(crate) fn origin_table(&self) -> &Origins {
        &self.counters.origins
    }

    /// Counts a connection opened by an observer; returns its number, from 1.
    pub(crate) fn connection_opened(&self) -> u64 {
        self.counters.connections_opened.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Counts a response that arrived on an observed connection.
    pub(crate) fn response(&self, reused: bool) {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        if reused {
            self.counters.reused.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts an early drop that was not drained and reports it.
    pub(crate) fn skip(&self, reason: SkipReason, caller_read: u64) {
        self.counters.skipped[reason as usize].fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            outcome = "skipped",
            reason = reason.as_str(),
            caller_read,
            bytes_drained = 0u64,
            elapsed_us = 0u64,
            "response body dropped early; not drained"
        );
    }

    /// Reserves one of `limit` drain slots, or `None` when all are taken.
    pub(crate) fn try_start(&self, limit: usize) -> Option<DrainPermit> {
        let in_flight = &self.counters.in_flight;
        let limit = u64::try_from(limit).unwrap_or(u64::MAX);
        in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1)).ok()?;
        Some(DrainPermit {
            stats: self.clone(),
            started_at: Instant::now(),
            running: false,
            bytes: 0,
            outcome: None,
        })
    }
}

/// One running drain: holds an in-flight slot, and counts the drain's
/// outcome exactly once when dropped, however the drain ended.
pub(crate) struct DrainPermit {
    stats: DrainStats,
    started_at: Instant,
    running: bool,
    bytes: u64,
    outcome: Option<Outcome>,
}

impl DrainPermit {
    /// The drain task was polled: from now on, being dropped without an
    /// outcome means it was cancelled, not that it never ran.
    pub(crate) fn running(&mut self) {
        self.running = true;
    }

    pub(crate) fn add_bytes(&mut self, n: u64) {
        self.bytes = self.bytes.saturating_add(n);
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn finish(mut self, outcome: Outcome) {
        self.outcome = Some(outcome);
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.started_at.elapsed()
    }
}

impl Drop for DrainPermit {
    fn drop(&mut self) {
        let c = &*self.stats.counters;
        c.in_flight.fetch_sub(1, Ordering::AcqRel);
        let outcome = match self.outcome {
            Some(outcome) => outcome,
            None if self.running => Outcome::Cancelled,
            // Spawned onto a runtime that was shutting down: never ran.
            None => return self.stats.skip(SkipReason::NoRuntime, 0),
        };
        c.bytes_drained.fetch_add(self.bytes, Ordering::Relaxed);
        c.ended[outcome as usize].fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            outcome = outcome.as_str(),
            reason = outcome.reason(),
            bytes_drained = self.bytes,
            elapsed_us = u64::try_from(self.elapsed().as_micros()).unwrap_or(u64::MAX),
            "response body dropped early; drain ended"
        );
    }
}
