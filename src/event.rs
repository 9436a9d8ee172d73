//! The one event an early drop emits: a `tracing` event at DEBUG (target
//! `drain_on_drop`) with the outcome, the reason, the origin, the status,
//! the bytes and the time, inside the span that was current when the
//! request was called, and the estimates the drop was decided with.

use std::time::Duration;

use crate::budget::DrainBudget;
use crate::origin::Estimates;
use crate::outcome::{Outcome, Reason};

/// Whether the DEBUG event of an early drop is enabled now: asked when a
/// request is called (or a response wrapped), never at the drop.
pub(crate) fn debug_enabled() -> bool {
    tracing::enabled!(target: "drain_on_drop", tracing::Level::DEBUG)
}

/// Where an early drop's event belongs: the span current when the request
/// was called, and the request's origin. Captured only when the DEBUG event
/// is enabled at that moment.
pub(crate) struct Trace {
    pub(crate) span: tracing::Span,
    /// `scheme://host:port`, never the userinfo.
    pub(crate) origin: String,
}

impl Trace {
    /// The current span, with `origin`.
    pub(crate) fn capture(origin: String) -> Box<Trace> {
        Box::new(Trace { span: tracing::Span::current(), origin })
    }
}

/// The origin's estimates a drop was decided with, and the budget they gave.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OriginView {
    pub(crate) round_trip: Option<Duration>,
    pub(crate) setup_cost: Option<Duration>,
    pub(crate) throughput: Option<u64>,
    pub(crate) budget: DrainBudget,
}

impl OriginView {
    pub(crate) fn of(est: &Estimates, round_trip: Option<Duration>, budget: DrainBudget) -> Self {
        OriginView {
            round_trip,
            setup_cost: est.setup_cost(),
            throughput: est.throughput().map(|v| v as u64),
            budget,
        }
    }
}

/// Everything said about one early drop.
pub(crate) struct Report<'a> {
    pub(crate) reason: Reason,
    pub(crate) bytes_drained: u64,
    pub(crate) caller_read: u64,
    pub(crate) elapsed: Duration,
    pub(crate) status: u16,
    pub(crate) trace: Option<&'a Trace>,
    pub(crate) origin: Option<OriginView>,
}

impl Report<'_> {
    /// Emits the DEBUG event, when the request found it enabled (the drop
    /// does not ask the subscriber again: that would be a call into it).
    pub(crate) fn emit(&self) {
        let Some(trace) = self.trace else { return };
        let emit = || {
            let origin = trace.origin.as_str();
            let elapsed_us = u64::try_from(self.elapsed.as_micros()).unwrap_or(u64::MAX);
            let message = match self.reason.outcome() {
                Outcome::Skipped => "response body dropped early; not drained",
                _ => "response body dropped early; drain ended",
            };
            // `None` values are not recorded: a drop decided without the
            // origin's estimates has no estimate fields.
            let a = self.origin;
            tracing::debug!(
                target: "drain_on_drop",
                outcome = self.reason.outcome().as_str(),
                reason = self.reason.as_str(),
                origin,
                status = self.status,
                caller_read = self.caller_read,
                bytes_drained = self.bytes_drained,
                elapsed_us,
                round_trip_us = a.and_then(|a| a.round_trip).map(|d| d.as_micros() as u64),
                setup_cost_us = a.and_then(|a| a.setup_cost).map(|d| d.as_micros() as u64),
                throughput = a.and_then(|a| a.throughput),
                budget_bytes = a.map(|a| a.budget.max_bytes),
                budget_time_us = a.map(|a| a.budget.max_time.as_micros() as u64),
                "{message}"
            );
        };
        trace.span.in_scope(emit);
    }
}
