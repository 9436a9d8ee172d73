use std::time::Duration;

use http_body::SizeHint;

/// Per-request drain budgets: insert into a request's extensions to override
/// the layer's [`max_bytes`] and [`max_time`] for that one response.
///
/// ```
/// use std::time::Duration;
/// use drain_on_drop::DrainBudget;
///
/// // A 5 MiB export nobody will drain: close the connection if dropped early.
/// let mut export = http::Request::get("http://api.local/export").body(()).unwrap();
/// export.extensions_mut().insert(DrainBudget::disabled());
///
/// // A status probe to a far origin: worth a longer drain than the default.
/// let mut probe = http::Request::get("http://far.example/health").body(()).unwrap();
/// probe.extensions_mut().insert(DrainBudget::new(64 * 1024, Duration::from_millis(300)));
/// ```
///
/// The other rules still apply: `Connection: close`, streams listed in
/// [`stream_content_types`] and [`max_concurrent_drains`]; an HTTP/2 body
/// is never drained (its stream is reset at once, unless the body had all
/// arrived).
///
/// [`max_bytes`]: crate::DrainOnDropLayer::max_bytes
/// [`max_time`]: crate::DrainOnDropLayer::max_time
/// [`stream_content_types`]: crate::DrainOnDropLayer::stream_content_types
/// [`max_concurrent_drains`]: crate::DrainOnDropLayer::max_concurrent_drains
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DrainBudget {
    pub(crate) max_bytes: u64,
    pub(crate) max_time: Duration,
}

impl DrainBudget {
    /// A budget of `max_bytes` data bytes and `max_time` from the drop. A
    /// zero in either disables draining for the request.
    pub fn new(max_bytes: u64, max_time: Duration) -> Self {
        DrainBudget { max_bytes, max_time }
    }

    /// Never drain this request's response: an early drop closes the
    /// connection at once (counted as skipped, reason `disabled`).
    pub fn disabled() -> Self {
        DrainBudget::new(0, Duration::ZERO)
    }

    /// The byte budget.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The time budget.
    pub fn max_time(&self) -> Duration {
        self.max_time
    }

    /// Whether this budget allows any drain at all.
    pub fn is_enabled(&self) -> bool {
        self.max_bytes > 0 && !self.max_time.is_zero()
    }
}

/// What one started drain may spend: the budget it was decided with, turned
/// into a byte allowance and a deadline at the drop. What it has spent is
/// the drain's to count; [`after_frame`](Self::after_frame) says where that
/// leaves it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Allowance {
    pub(crate) max_bytes: u64,
    /// When the body was dropped: the time budget counts from here.
    pub(crate) dropped_at: std::time::Instant,
    /// `None` when `max_time` is too large to be represented as an instant.
    pub(crate) deadline: Option<std::time::Instant>,
}

impl Allowance {
    /// Starts counting `budget` at `dropped_at`.
    pub(crate) fn from_drop(budget: DrainBudget, dropped_at: std::time::Instant) -> Self {
        Allowance {
            max_bytes: budget.max_bytes,
            dropped_at,
            deadline: dropped_at.checked_add(budget.max_time),
        }
    }
}

impl Allowance {
    /// Where a drain stands after a data frame of `len` bytes brought it to
    /// `read` bytes (`crossed`: an earlier frame took it past the byte
    /// allowance; `rest`: the body's size hint now). More data after the
    /// crossing frame, or a rest known to be longer than what is left, is
    /// over the allowance: so a drain reads at most `max_bytes` plus two
    /// frames.
    pub(crate) fn after_frame(&self, read: u64, len: u64, crossed: bool, rest: SizeHint) -> Spending {
        if crossed && len > 0 {
            return Spending::Spent;
        }
        if rest.lower() > self.max_bytes.saturating_sub(read) {
            return Spending::Spent;
        }
        if read > self.max_bytes { Spending::Crossed } else { Spending::Within }
    }
}

/// Where a drain stands against its byte allowance after a data frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spending {
    /// Read on.
    Within,
    /// This frame took the drain past the allowance: read one more frame, to
    /// see whether the body ends there (only its end marker or trailers left).
    Crossed,
    /// Give up (`over_bytes`).
    Spent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_reads_one_frame_past_the_allowance_then_gives_up_on_more_data() {
        let a = Allowance::from_drop(DrainBudget::new(10, Duration::from_secs(1)), std::time::Instant::now());
        let none = SizeHint::new();
        assert_eq!(a.after_frame(10, 10, false, none), Spending::Within, "exactly the allowance");
        assert_eq!(a.after_frame(11, 5, false, none), Spending::Crossed);
        assert_eq!(a.after_frame(12, 1, true, none), Spending::Spent, "data after the crossing frame");
        assert_eq!(a.after_frame(11, 0, true, none), Spending::Crossed, "an empty frame is no data");
        assert_eq!(
            a.after_frame(4, 4, false, SizeHint::with_exact(7)),
            Spending::Spent,
            "rest known too long"
        );
    }

    #[test]
    fn a_time_budget_too_large_for_an_instant_has_no_deadline() {
        let a = Allowance::from_drop(DrainBudget::new(10, Duration::MAX), std::time::Instant::now());
        assert!(a.deadline.is_none());
    }
}
