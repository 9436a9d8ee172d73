use std::time::Duration;

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
/// The other rules still apply: `Connection: close`, HTTP/2, streams listed
/// in [`stream_content_types`] and [`max_concurrent_drains`].
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
/// into a byte allowance and a deadline at the drop.
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
