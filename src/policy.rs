//! The one place that decides what happens to an early drop, and to the
//! drain that follows: whether to drain at all ([`decide`]), which body's
//! code may run in the drop ([`runs_in_the_drop`]), whether a drain that
//! has to wait may ([`admit`]), the reason for a drain that cannot wait or
//! never finished ([`cannot_wait`], [`unfinished`]), and which outcomes
//! teach an origin's estimates something ([`samples_throughput`],
//! [`counts_for_probes`]). What a drain may spend is `sizing.rs`'s; what the
//! headers say, `headers.rs`'s; where a drain runs, `runtime.rs`'s.

use std::any::TypeId;
use std::time::Instant;

use http_body::SizeHint;

use crate::budget::DrainBudget;
use crate::http2;
use crate::origin::{Origin, OriginAt};
use crate::outcome::Reason;
use crate::shared::Shared;
use crate::sizing;
use crate::stats::Slot;

/// What is known when a body is dropped before its end.
pub(crate) struct AtDrop {
    /// What the headers said when the response arrived (`headers::inspect`).
    pub(crate) head: Option<Reason>,
    /// The request's own budget, overriding the layer's.
    pub(crate) request_budget: Option<DrainBudget>,
    /// The response's origin.
    pub(crate) origin: Option<OriginAt>,
    /// What is left of the body, as far as is known.
    pub(crate) remaining: SizeHint,
    /// Data bytes the caller read.
    pub(crate) read: u64,
    /// The thread is unwinding from a panic.
    pub(crate) unwinding: bool,
    /// The response is HTTP/2 (or later): a drop resets a stream, never
    /// the connection (see the HTTP/2 room, `http2`).
    pub(crate) http2: bool,
}

/// What to do with a body dropped before its end.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Drop it now, as hyper alone would.
    Skip(Reason),
    /// Drain it within this budget (counted from the drop): hyper's own body
    /// at once as far as hyper handed it over, then, if [`admit`] lets it,
    /// on a task.
    Drain(DrainBudget),
}

/// Decides what to do with a body dropped before its end, `now`. Also
/// returns the budget it was decided with, when it got that far, for the
/// event. A probe the adaptive budget carried is spent only when the drop
/// drains.
pub(crate) fn decide(shared: &Shared, at: &AtDrop, now: Instant) -> (Decision, Option<DrainBudget>) {
    let config = &shared.config;
    let budgets = &config.budgets;
    if !config.enabled || config.max_concurrent_drains == 0 {
        return (Decision::Skip(Reason::Disabled), None);
    }
    let enabled = at.request_budget.unwrap_or_else(|| sizing::fixed(budgets)).is_enabled();
    if !enabled {
        return (Decision::Skip(Reason::Disabled), None);
    }
    if at.http2 {
        return (Decision::Skip(http2::early_drop(at.head)), None);
    }
    if let Some(reason) = at.head {
        return (Decision::Skip(reason), None);
    }
    let sized = match (at.request_budget, &at.origin) {
        (Some(budget), _) => plain(budget),
        (None, None) => plain(sizing::fixed(budgets)),
        (None, Some(origin)) if budgets.adaptive() => {
            let size = at.remaining.exact().map_or(budgets.max_bytes(), |rest| rest.saturating_add(at.read));
            let round_trip = origin.round_trip();
            origin.origin.with(|est| sizing::for_origin(budgets, est, round_trip, size, Some(now)))
        }
        (None, Some(origin)) => plain(sizing::following_round_trip(budgets, origin.round_trip())),
    };
    let decision = with_budget(&sized, at);
    if let (Decision::Drain(_), true, Some(origin)) = (&decision, sized.adaptive, &at.origin) {
        origin.origin.with(|est| est.spend(sized.probe, now));
    }
    (decision, Some(sized.budget))
}

fn plain(budget: DrainBudget) -> sizing::Sized {
    sizing::Sized { budget, adaptive: false, probe: None }
}

/// The checks that need the budget.
fn with_budget(sized: &sizing::Sized, at: &AtDrop) -> Decision {
    let budget = sized.budget;
    if sized.adaptive && !budget.is_enabled() {
        return Decision::Skip(Reason::ReconnectCheaper);
    }
    // A body that must be longer than the budget is not worth a single
    // read: Go and .NET skip it the same way.
    if at.remaining.lower() > budget.max_bytes {
        return Decision::Skip(Reason::DeclaredOverBudget);
    }
    // A drain would run, but not from a drop made while the thread
    // unwinds: no read, no task, only the count.
    if at.unwinding {
        return Decision::Skip(Reason::Unwinding);
    }
    // The cap is not asked here: a body that ends in the drop takes no
    // place under it (see `admit`).
    Decision::Drain(budget)
}

/// Whether the drop may run code of a body of type `B`: only of hyper's
/// own (`hyper::body::Incoming`), which blocks on nothing and takes no lock
/// of the caller's. Any other body's code (`poll_frame`, `size_hint`,
/// `is_end_stream`) runs on the drain's task only; the drop decides from
/// what the layer saw while the caller read it. Also whether the body's
/// headers describe its wire framing (see `headers::RequestSays`).
pub(crate) fn runs_in_the_drop<B: 'static>() -> bool {
    TypeId::of::<B>() == TypeId::of::<hyper::body::Incoming>()
}

/// Admits a drain that has to wait for the server to the background, under
/// `max_concurrent_drains`, of which one origin may take at most three
/// quarters once the layer has seen another (so that one origin's drops,
/// a stalling server's say, always leave slots for the others): its slot,
/// and whether it took one of `origin`'s; `None` (`saturated`) when there
/// is no room. A drain that ends in the drop holds no slot.
pub(crate) fn admit(shared: &Shared, origin: Option<&Origin>) -> Option<(Slot, bool)> {
    let cap = shared.config.max_concurrent_drains;
    let share = if shared.origins.len() > 1 { (cap - cap / 4).max(1) } else { cap };
    let took = match origin {
        Some(origin) if !origin.try_take_slot(share) => return None,
        Some(_) => true,
        None => false,
    };
    match shared.stats.try_acquire(cap) {
        Some(slot) => Some((slot, took)),
        None => {
            if let (true, Some(origin)) = (took, origin) {
                origin.give_back_slot();
            }
            None
        }
    }
}

/// Why a drain that had to wait for the server could not: `refused` says
/// why not (no slot, no runtime), which is the reason when the drop read
/// nothing; a drop that had read part of the body did start a drain, and
/// gives it up (`cannot_wait`).
pub(crate) fn cannot_wait(refused: Reason, read_any: bool) -> Reason {
    if read_any { Reason::CannotWait } else { refused }
}

/// Why a drain task ended without reaching an outcome of its own: dropped
/// while running (its runtime shut down, whatever else the thread was
/// doing: a panic of the body is caught where it happens and counted
/// `body_panic` there), or dropped before it ever ran (every runtime it
/// could run on had shut down), which is [`cannot_wait`] for want of a
/// runtime.
pub(crate) fn unfinished(polled: bool, read_any: bool) -> Reason {
    if polled { Reason::RuntimeShutdown } else { cannot_wait(Reason::NoRuntime, read_any) }
}

/// Whether a drain that ended with `reason` measured the link: it read
/// until the body, a budget, or the deadline stopped it, on a connection
/// past its first response (`warm`). A new connection's drains are in TCP
/// slow start, at a quarter of the link's rate or less: counted, they would
/// make the estimate collapse, the byte budget with it, and no connection
/// would ever be kept to correct it.
pub(crate) fn samples_throughput(reason: Reason, warm: bool) -> bool {
    warm && matches!(reason, Reason::EndOfBody | Reason::OverBytes | Reason::OverTime)
}

/// What a drain that ended with `reason` says to adaptive mode's probes:
/// `Some(true)` it reached the end, `Some(false)` it gave up (a budget ran
/// out), `None` nothing: a skip is a decision the estimates made (right, on
/// a LAN), and probing it would waste the link.
pub(crate) fn counts_for_probes(reason: Reason) -> Option<bool> {
    match reason {
        Reason::EndOfBody => Some(true),
        Reason::OverTime | Reason::OverBytes => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::Config;
    use std::time::Duration;

    fn shared(max_bytes: u64, max_time: Duration, cap: usize) -> Shared {
        let mut config = Config { max_concurrent_drains: cap, ..Config::default() };
        config.budgets.set_max_bytes(max_bytes);
        config.budgets.set_max_time(max_time);
        Shared { config, ..Shared::default() }
    }

    fn at(budget: Option<DrainBudget>, remaining: u64) -> AtDrop {
        AtDrop {
            head: None,
            request_budget: budget,
            origin: None,
            remaining: SizeHint::with_exact(remaining),
            read: 0,
            unwinding: false,
            http2: false,
        }
    }

    fn skip(shared: &Shared, at: &AtDrop) -> Option<Reason> {
        match decide(shared, at, Instant::now()).0 {
            Decision::Skip(r) => Some(r),
            Decision::Drain(..) => None,
        }
    }

    #[test]
    fn budget_checks_come_in_order() {
        let ms = Duration::from_millis;
        assert_eq!(skip(&shared(0, ms(50), 1), &at(None, 1)), Some(Reason::Disabled));
        assert_eq!(skip(&shared(10, ms(0), 1), &at(None, 1)), Some(Reason::Disabled));
        assert_eq!(skip(&shared(10, ms(50), 0), &at(None, 1)), Some(Reason::Disabled), "cap 0");
        let mut off = shared(10, ms(50), 1);
        off.config.enabled = false;
        let big = Some(DrainBudget::new(1 << 20, Duration::from_secs(1)));
        assert_eq!(
            skip(&off, &at(big, 1)),
            Some(Reason::Disabled),
            "switched off, whatever the request says"
        );
        let mut close = at(None, 1);
        close.head = Some(Reason::ConnectionClose);
        assert_eq!(skip(&shared(10, ms(50), 1), &close), Some(Reason::ConnectionClose));
        assert_eq!(skip(&shared(10, ms(50), 1), &at(None, 11)), Some(Reason::DeclaredOverBudget));
        let unwinding = AtDrop { unwinding: true, ..at(None, 10) };
        assert_eq!(skip(&shared(10, ms(50), 1), &unwinding), Some(Reason::Unwinding));
        let over_and_unwinding = AtDrop { unwinding: true, ..at(None, 11) };
        assert_eq!(
            skip(&shared(10, ms(50), 1), &over_and_unwinding),
            Some(Reason::DeclaredOverBudget),
            "a drop that would not drain anyway says why"
        );
        let s = shared(10, ms(50), 1);
        assert_eq!(skip(&s, &at(None, 10)), None, "exactly the budget is drained");
        let running = admit(&s, None).expect("one slot");
        assert!(admit(&s, None).is_none(), "the cap holds");
        assert_eq!(skip(&s, &at(None, 1)), None, "the cap is asked only of a drain that has to wait");
        drop(running);
        assert!(admit(&s, None).is_some(), "slot freed");
    }

    #[test]
    fn an_http2_drop_is_reset_unread_whatever_the_budgets_unless_switched_off() {
        let layer = shared(256 * 1024, Duration::from_millis(50), 1024);
        let h2 = |remaining| AtDrop { http2: true, ..at(None, remaining) };
        assert_eq!(skip(&layer, &h2(10)), Some(Reason::Reset), "a small body too: a drain saves nothing");
        let big = Some(DrainBudget::new(1 << 30, Duration::from_secs(60)));
        assert_eq!(skip(&layer, &AtDrop { request_budget: big, ..h2(10) }), Some(Reason::Reset));
        let stream = AtDrop { head: Some(Reason::Stream), ..h2(0) };
        assert_eq!(skip(&layer, &stream), Some(Reason::Stream), "counted as the open-ended stream it is");
        let mut off = shared(256 * 1024, Duration::from_millis(50), 1024);
        off.config.enabled = false;
        assert_eq!(skip(&off, &h2(10)), Some(Reason::Disabled), "switched off: as hyper alone, and said so");
    }

    #[test]
    fn a_request_budget_replaces_the_layer_budget() {
        let layer = shared(256 * 1024, Duration::from_millis(50), 1024);
        let big = Some(DrainBudget::new(1 << 20, Duration::from_secs(1)));
        assert_eq!(skip(&layer, &at(None, 1 << 19)), Some(Reason::DeclaredOverBudget));
        assert_eq!(skip(&layer, &at(big, 1 << 19)), None);
        let off = Some(DrainBudget::disabled());
        assert_eq!(skip(&layer, &at(off, 1)), Some(Reason::Disabled));
        let disabled_layer = shared(0, Duration::ZERO, 1024);
        assert_eq!(skip(&disabled_layer, &at(big, 1)), None, "the request budget wins");
    }

    /// An adaptive layer whose one origin is measured as `record` says.
    fn adaptive_origin(record: impl FnOnce(&mut crate::origin::Estimates)) -> (Shared, OriginAt) {
        let mut layer = Shared::default();
        layer.config.budgets.set_adaptive();
        let target =
            layer.origins.target(&"http://lan.example/".parse().unwrap(), &http::HeaderMap::new()).unwrap();
        let origin = layer.origins.find(&target).unwrap();
        origin.with(record);
        (layer, OriginAt { origin })
    }

    #[test]
    fn an_adaptive_budget_of_zero_is_reconnect_cheaper_not_disabled() {
        // A connection that costs nothing to open, on a measured link.
        let (layer, origin) = adaptive_origin(|est| {
            est.record_connection(Some((false, Duration::ZERO)));
            est.record_drain(1 << 20, Duration::from_millis(10), Instant::now());
        });
        let at = AtDrop { origin: Some(origin), ..at(None, 100) };
        let (decision, budget) = decide(&layer, &at, Instant::now());
        assert_eq!(decision, Decision::Skip(Reason::ReconnectCheaper));
        assert_eq!(budget.map(|b| b.max_bytes()), Some(0), "decided with a zero budget");
    }

    #[test]
    fn a_probe_is_spent_only_by_a_drop_that_drains() {
        let (layer, origin) = adaptive_origin(|est| {
            est.record_connection(Some((false, Duration::from_millis(200))));
            for _ in 0..8 {
                est.record_outcome(false);
            }
        });
        let est = origin.origin.clone();
        let misses = || est.with(|est| est.misses());
        let unwinding = AtDrop { origin: Some(origin.clone()), unwinding: true, ..at(None, 100) };
        assert_eq!(decide(&layer, &unwinding, Instant::now()).0, Decision::Skip(Reason::Unwinding));
        assert_eq!(misses(), 8, "a skipped drop spends no probe");
        let drains = AtDrop { origin: Some(origin), ..at(None, 100) };
        assert!(matches!(decide(&layer, &drains, Instant::now()).0, Decision::Drain(_)));
        assert_eq!(misses(), 0, "the drop that drains spends it");
    }

    #[test]
    fn unfinished_drains_name_their_cause() {
        assert_eq!(unfinished(false, false), Reason::NoRuntime);
        assert_eq!(unfinished(false, true), Reason::CannotWait, "a drain that read is not a skip");
        assert_eq!(unfinished(true, true), Reason::RuntimeShutdown);
        assert_eq!(unfinished(true, false), Reason::RuntimeShutdown, "whatever else the thread does");
        assert_eq!(cannot_wait(Reason::Saturated, false), Reason::Saturated);
        assert_eq!(cannot_wait(Reason::Saturated, true), Reason::CannotWait);
        for reason in [Reason::Saturated, Reason::NoRuntime] {
            assert_eq!(reason.outcome(), crate::Outcome::Skipped);
        }
        assert_eq!(Reason::CannotWait.outcome(), crate::Outcome::Abandoned);
    }

    #[test]
    fn only_drains_that_read_on_a_warm_connection_sample_the_link() {
        assert!(samples_throughput(Reason::OverTime, true));
        assert!(!samples_throughput(Reason::OverTime, false), "slow start");
        assert!(!samples_throughput(Reason::BodyError, true));
        assert_eq!(counts_for_probes(Reason::DeclaredOverBudget), None, "skips are decisions, not misses");
    }
}
