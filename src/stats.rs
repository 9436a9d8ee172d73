//! The one place that counts: the shared counters, the in-flight slots, and
//! the tracing event that reports every early drop. It records what it is
//! told; the policy decides and the drain drains.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::event::Report;
use crate::outcome::{Outcome, Reason};

/// How often [`DrainStats::wait_idle`] looks at `in_flight`.
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// When a wait for idle that ends at `deadline` (`None`: never) looks next,
/// or `None` when the deadline has passed.
fn next_look(deadline: Option<Instant>) -> Option<Instant> {
    let now = Instant::now();
    match deadline {
        Some(d) if now >= d => None,
        Some(d) => Some(d.min(now + LOOK_EVERY)),
        None => Some(now + LOOK_EVERY),
    }
}

#[derive(Default)]
struct Counters {
    /// Early drops by reason, indexed by [`Reason::index`].
    by_reason: [AtomicU64; Reason::COUNT],
    bytes_drained: AtomicU64,
    /// Drains holding a slot. Released (Release) only after the drain's
    /// reason and bytes were counted, and read (Acquire) before any other
    /// counter by [`DrainStats::snapshot`]: a snapshot that sees a slot
    /// released sees what that drain counted.
    in_flight: AtomicU64,
    requests: AtomicU64,
    reused: AtomicU64,
    connections_opened: AtomicU64,
    /// An `ObserveConnector` counts into these stats: responses carry its tag.
    observed: std::sync::atomic::AtomicBool,
}

/// A cheap, cloneable handle on the counters of one
/// [`DrainOnDropLayer`](crate::DrainOnDropLayer).
///
/// Every service built from the layer, and from its clones, counts into the
/// same counters. Every early drop (a body dropped before its end) is counted
/// exactly once, under one [`Reason`], when its outcome is known; bodies read
/// to their end are not counted.
///
/// # Reading exact figures
///
/// A drain runs in the background after the drop, so wait for `in_flight`
/// to reach 0 before reading what a batch of drops did:
/// [`wait_idle`](Self::wait_idle) does, within a bound. The counters are
/// ordered so that this is exact, on any runtime: every snapshot taken after
/// one that read `in_flight == 0` includes every drop that ended before it.
///
/// ```
/// # async fn wait(stats: drain_on_drop::DrainStats) {
/// use std::time::Duration;
///
/// // Each drain ends within its time budget (at most 1 s by default).
/// if !stats.wait_idle(Duration::from_secs(2)).await {
///     eprintln!("drains still running: the counts below miss them");
/// }
/// let s = stats.snapshot();
/// println!("drained {} abandoned {} skipped {} failed {}", s.drained, s.abandoned, s.skipped, s.failed);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct DrainStats {
    counters: Arc<Counters>,
}

impl fmt::Debug for DrainStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.snapshot(), f)
    }
}

/// The drain counters of a [`DrainStats`] at one moment.
///
/// The four totals are the sums of their reasons ([`count`](Self::count),
/// [`iter`](Self::iter)) in every snapshot. To export, iterate: each
/// `(reason, value)` pair is a counter labelled `outcome =
/// reason.outcome().as_str()` and `reason = reason.as_str()` (see
/// the repository's `metrics` example).
///
/// ```
/// use drain_on_drop::{DrainOnDropLayer, Reason};
///
/// let stats = DrainOnDropLayer::new().stats();
/// let before = stats.snapshot();
/// // ... requests ...
/// let delta = stats.snapshot().since(&before);
/// for (reason, n) in delta.iter().filter(|(_, n)| *n > 0) {
///     println!("{} {}: {n}", reason.outcome(), reason);
/// }
/// assert_eq!(delta.count(Reason::OverTime), 0);
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DrainSnapshot {
    /// Drains that reached the end of the body ([`Reason::EndOfBody`]). hyper
    /// then pools the connection, unless it cannot: the server sent bytes
    /// after the body or closed the connection, the request body upload
    /// failed, or the client's pool is disabled (which the layer cannot see).
    pub drained: u64,
    /// Drains given up: over the byte budget, over the time budget, or the
    /// runtime shut down while the drain ran. The rest of the body is
    /// dropped, and hyper closes the connection unless its own single read
    /// at the drop finds the end of the body already buffered.
    pub abandoned: u64,
    /// Early drops for which no drain was started, whatever the reason: see
    /// the [`Reason`]s of [`Outcome::Skipped`].
    pub skipped: u64,
    /// Drains that ended on a body error or a panic of the body. The
    /// connection was closed.
    pub failed: u64,
    /// Data bytes read and discarded by drains, whatever their outcome.
    pub bytes_drained: u64,
    /// Drains running now.
    pub in_flight: u64,
    by_reason: [u64; Reason::COUNT],
}

impl Default for DrainSnapshot {
    fn default() -> Self {
        DrainSnapshot::from_reasons([0; Reason::COUNT], 0, 0)
    }
}

impl DrainSnapshot {
    fn from_reasons(by_reason: [u64; Reason::COUNT], bytes_drained: u64, in_flight: u64) -> Self {
        let total =
            |o: Outcome| Reason::ALL.iter().filter(|r| r.outcome() == o).map(|r| by_reason[r.index()]).sum();
        DrainSnapshot {
            drained: total(Outcome::Drained),
            abandoned: total(Outcome::Abandoned),
            skipped: total(Outcome::Skipped),
            failed: total(Outcome::Failed),
            bytes_drained,
            in_flight,
            by_reason,
        }
    }

    /// Early drops counted under `reason`.
    pub fn count(&self, reason: Reason) -> u64 {
        self.by_reason[reason.index()]
    }

    /// Early drops of one outcome: the same as the field of that name.
    pub fn total(&self, outcome: Outcome) -> u64 {
        match outcome {
            Outcome::Drained => self.drained,
            Outcome::Abandoned => self.abandoned,
            Outcome::Skipped => self.skipped,
            Outcome::Failed => self.failed,
        }
    }

    /// Every reason with its count, zeros included, in the order of
    /// [`Reason::ALL`].
    pub fn iter(&self) -> impl Iterator<Item = (Reason, u64)> + '_ {
        Reason::ALL.iter().map(|&r| (r, self.count(r)))
    }

    /// What was counted between `earlier` and `self`: every counter
    /// subtracted (saturating at 0, for snapshots given in the wrong order),
    /// `in_flight` as in `self`.
    pub fn since(&self, earlier: &DrainSnapshot) -> DrainSnapshot {
        let by_reason = std::array::from_fn(|i| self.by_reason[i].saturating_sub(earlier.by_reason[i]));
        DrainSnapshot::from_reasons(
            by_reason,
            self.bytes_drained.saturating_sub(earlier.bytes_drained),
            self.in_flight,
        )
    }
}

impl fmt::Debug for DrainSnapshot {
    /// The totals, then every non-zero reason by its name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("DrainSnapshot");
        s.field("drained", &self.drained)
            .field("abandoned", &self.abandoned)
            .field("skipped", &self.skipped)
            .field("failed", &self.failed)
            .field("bytes_drained", &self.bytes_drained)
            .field("in_flight", &self.in_flight);
        for (reason, n) in self.iter().filter(|(_, n)| *n > 0) {
            s.field(reason.as_str(), &n);
        }
        s.finish()
    }
}

/// What the reuse observer counted
/// ([`DrainOnDropLayer::observe`](crate::DrainOnDropLayer::observe)); all
/// zero without one.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReuseSnapshot {
    /// Responses that came through the layer on a connection opened by an
    /// [`ObserveConnector`](crate::ObserveConnector).
    pub requests: u64,
    /// Of `requests`: responses on a connection that had carried one before.
    pub reused: u64,
    /// Connections opened by observers counting into these stats.
    pub connections_opened: u64,
}

impl ReuseSnapshot {
    /// What was counted between `earlier` and `self` (saturating at 0).
    pub fn since(&self, earlier: &ReuseSnapshot) -> ReuseSnapshot {
        ReuseSnapshot {
            requests: self.requests.saturating_sub(earlier.requests),
            reused: self.reused.saturating_sub(earlier.reused),
            connections_opened: self.connections_opened.saturating_sub(earlier.connections_opened),
        }
    }
}

impl DrainStats {
    /// Reads the drain counters. See [Reading exact figures](Self#reading-exact-figures).
    pub fn snapshot(&self) -> DrainSnapshot {
        let c = &*self.counters;
        // First, and Acquire: pairs with the Release in `Slot::drop`.
        let in_flight = c.in_flight.load(Ordering::Acquire);
        let by_reason = std::array::from_fn(|i| c.by_reason[i].load(Ordering::Relaxed));
        DrainSnapshot::from_reasons(by_reason, c.bytes_drained.load(Ordering::Relaxed), in_flight)
    }

    /// Waits until no drain runs ([`DrainSnapshot::in_flight`] is 0), for
    /// at most `timeout`: `true` if it got there, and then every snapshot
    /// taken afterwards counts every drop that ended before (see [Reading
    /// exact figures](Self#reading-exact-figures)); `false` when drains
    /// still ran after `timeout`.
    ///
    /// Looks every millisecond, on a timer of the crate's own: it needs
    /// neither a runtime nor a runtime's time driver. Drains run on their
    /// responses' runtime, so wait where that runtime keeps running: on a
    /// current-thread runtime, inside `block_on`. In synchronous code, see
    /// [`wait_idle_blocking`](Self::wait_idle_blocking).
    ///
    /// ```
    /// # async fn run(layer: drain_on_drop::DrainOnDropLayer) {
    /// use std::time::Duration;
    ///
    /// let stats = layer.stats();
    /// // ... requests whose bodies are dropped early ...
    /// assert!(stats.wait_idle(Duration::from_secs(2)).await, "every drain ends within its budget");
    /// println!("{:?}", stats.snapshot());
    /// # }
    /// ```
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if self.snapshot().in_flight == 0 {
                return true;
            }
            match next_look(deadline) {
                Some(at) => crate::timer::sleep_until(at).await,
                None => return false,
            }
        }
    }

    /// [`wait_idle`](Self::wait_idle) for synchronous code: blocks the
    /// thread, a millisecond at a time, until no drain runs, for at most
    /// `timeout`. Not on a thread that drives the runtime the drains run on
    /// (a current-thread runtime's, between `block_on` calls): they could
    /// not run meanwhile.
    pub fn wait_idle_blocking(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if self.snapshot().in_flight == 0 {
                return true;
            }
            match next_look(deadline) {
                Some(at) => std::thread::sleep(at.saturating_duration_since(Instant::now())),
                None => return false,
            }
        }
    }

    /// Reads the reuse observer's counters.
    pub fn reuse(&self) -> ReuseSnapshot {
        let c = &*self.counters;
        ReuseSnapshot {
            requests: c.requests.load(Ordering::Relaxed),
            reused: c.reused.load(Ordering::Relaxed),
            connections_opened: c.connections_opened.load(Ordering::Relaxed),
        }
    }

    /// Notes that an observer counts into these stats.
    pub(crate) fn mark_observed(&self) {
        self.counters.observed.store(true, Ordering::Relaxed);
    }

    /// Whether an observer counts into these stats (one load).
    pub(crate) fn is_observed(&self) -> bool {
        self.counters.observed.load(Ordering::Relaxed)
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

    /// Takes one of `limit` drain slots, or `None` when all are taken.
    pub(crate) fn try_acquire(&self, limit: usize) -> Option<Slot> {
        let limit = u64::try_from(limit).unwrap_or(u64::MAX);
        self.counters
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < limit).then_some(n + 1))
            .ok()?;
        Some(Slot { stats: self.clone() })
    }

    /// Counts one early drop and emits its event.
    pub(crate) fn record(&self, report: &Report<'_>) {
        let c = &*self.counters;
        c.by_reason[report.reason.index()].fetch_add(1, Ordering::Relaxed);
        if report.bytes_drained > 0 {
            c.bytes_drained.fetch_add(report.bytes_drained, Ordering::Relaxed);
        }
        report.emit();
    }
}

/// One running drain's place under `max_concurrent_drains`. Dropped after the
/// drain's outcome was recorded.
pub(crate) struct Slot {
    stats: DrainStats,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Release: whoever reads this decrement (Acquire) sees the counts
        // recorded before it.
        self.stats.counters.in_flight.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(reason: Reason, bytes: u64) -> Report<'static> {
        Report {
            reason,
            bytes_drained: bytes,
            caller_read: 0,
            elapsed: Duration::ZERO,
            status: 200,
            trace: None,
            origin: None,
        }
    }

    #[test]
    fn totals_are_the_sums_of_their_reasons_and_since_subtracts() {
        let stats = DrainStats::default();
        stats.record(&report(Reason::EndOfBody, 10));
        let before = stats.snapshot();
        stats.record(&report(Reason::OverTime, 5));
        stats.record(&report(Reason::OverBytes, 7));
        stats.record(&report(Reason::Stream, 0));
        stats.record(&report(Reason::BodyPanic, 0));
        let now = stats.snapshot();
        assert_eq!((now.drained, now.abandoned, now.skipped, now.failed), (1, 2, 1, 1));
        assert_eq!(now.bytes_drained, 22);
        for o in Outcome::ALL {
            let sum: u64 = now.iter().filter(|(r, _)| r.outcome() == o).map(|(_, n)| n).sum();
            assert_eq!(now.total(o), sum, "{o} is the sum of its reasons");
        }
        assert_eq!(now.iter().count(), Reason::COUNT, "iter lists zeros too");
        let delta = now.since(&before);
        assert_eq!((delta.drained, delta.abandoned, delta.bytes_drained), (0, 2, 12));
        assert_eq!(delta.count(Reason::OverTime), 1);
        assert_eq!(before.since(&now), DrainSnapshot::default(), "saturates at zero");
        let debug = format!("{now:?}");
        assert!(debug.contains("over_time: 1") && !debug.contains("saturated"), "{debug}");
    }

    #[test]
    fn slots_are_capped_and_released_on_drop() {
        let stats = DrainStats::default();
        let a = stats.try_acquire(2).unwrap();
        let _b = stats.try_acquire(2).unwrap();
        assert!(stats.try_acquire(2).is_none());
        assert_eq!(stats.snapshot().in_flight, 2);
        drop(a);
        assert_eq!(stats.snapshot().in_flight, 1);
    }
}
