//! The one place that counts: the shared counters, the in-flight slots, and
//! the tracing event that reports every early drop. It records what it is
//! told; the policy decides and the drain drains.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::event::Report;
use crate::outcome::{Outcome, Reason};
use crate::timer::Deadline;

mod idle;
use idle::{Idle, IdleWaiter};

/// In the extensions of a request that `RetryRefused` sends again: the
/// layer below counts it ([`ReuseSnapshot::sent_again`]). Private: nobody
/// else can insert it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SentAgain;

#[derive(Default)]
struct Counters {
    /// Early drops by reason, indexed by [`Reason::index`].
    by_reason: [AtomicU64; Reason::COUNT],
    bytes_drained: AtomicU64,
    /// Drains holding a slot. Released (`SeqCst`, a Release) only after the
    /// drain's reason and bytes were counted, and read (Acquire) before any
    /// other counter by [`DrainStats::snapshot`]: a snapshot that sees a
    /// slot released sees what that drain counted.
    in_flight: AtomicU64,
    requests: AtomicU64,
    reused: AtomicU64,
    connections_opened: AtomicU64,
    retired: AtomicU64,
    sent_again: AtomicU64,
    /// An `ObserveConnector` counts into these stats: responses carry its tag.
    observed: std::sync::atomic::AtomicBool,
    /// Who waits for `in_flight` to reach 0.
    idle: Idle,
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
/// reason.outcome().as_str()` and `reason = reason.as_str()`: the
/// [recipes](crate::recipes#exporting-the-counters) have a Prometheus
/// collector (run as a program by `stacks/examples/metrics.rs`, in the
/// crate's repository, not in the package).
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
    /// Of `connections_opened`: HTTP/1 connections retired before their
    /// server's idle timeout (see
    /// [`DrainOnDropLayer::server_idle_timeout`](crate::DrainOnDropLayer::server_idle_timeout)):
    /// each took no further request, which went on another connection.
    pub retired: u64,
    /// Requests a [`RetryRefused`](crate::RetryRefused) above the layer sent
    /// again after a failure (each try after the first, counted as it goes
    /// through the layer; with or without an observer).
    pub sent_again: u64,
}

impl ReuseSnapshot {
    /// What was counted between `earlier` and `self` (saturating at 0).
    pub fn since(&self, earlier: &ReuseSnapshot) -> ReuseSnapshot {
        ReuseSnapshot {
            requests: self.requests.saturating_sub(earlier.requests),
            reused: self.reused.saturating_sub(earlier.reused),
            connections_opened: self.connections_opened.saturating_sub(earlier.connections_opened),
            retired: self.retired.saturating_sub(earlier.retired),
            sent_again: self.sent_again.saturating_sub(earlier.sent_again),
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
    /// Woken by the end of the last drain, it costs nothing while it waits:
    /// no polling. Its timeout is kept by a timer of the crate's own, so it
    /// needs neither a runtime nor a runtime's time driver. Drains run on
    /// their responses' runtime, so wait where that runtime keeps running:
    /// on a current-thread runtime, inside `block_on`. In synchronous code,
    /// see [`wait_idle_blocking`](Self::wait_idle_blocking).
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
        if self.idle_now() {
            return true;
        }
        let mut timeout = Instant::now().checked_add(timeout).map(Deadline::at);
        let waiter = IdleWaiter::new(&self.counters.idle);
        std::future::poll_fn(|cx: &mut Context<'_>| {
            waiter.register(cx.waker());
            if self.idle_now() {
                return Poll::Ready(true);
            }
            match timeout.as_mut().map(|t| t.poll_elapsed(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(self.idle_now()),
                _ => Poll::Pending,
            }
        })
        .await
    }

    /// [`wait_idle`](Self::wait_idle) for synchronous code: blocks the
    /// thread until no drain runs, for at most `timeout`; woken by the end
    /// of the last drain, it costs nothing while it waits. Not on a thread
    /// that drives the runtime the drains run on (a current-thread
    /// runtime's, between `block_on` calls): they could not run meanwhile.
    pub fn wait_idle_blocking(&self, timeout: Duration) -> bool {
        if self.idle_now() {
            return true;
        }
        let deadline = Instant::now().checked_add(timeout);
        let idle = &self.counters.idle;
        let mut list = idle.list();
        idle.waiters.fetch_add(1, Ordering::SeqCst);
        let idle_now = loop {
            // Read under the lock that a drain ending takes to signal.
            if self.idle_now() {
                break true;
            }
            list = match deadline {
                None => idle.ended.wait(list).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
                    else {
                        break false;
                    };
                    idle.ended.wait_timeout(list, left).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        };
        idle.waiters.fetch_sub(1, Ordering::SeqCst);
        drop(list);
        idle_now
    }

    /// No drain runs: `in_flight` read `SeqCst` (an Acquire, for the
    /// counts; sequentially consistent with the waiters' registration).
    fn idle_now(&self) -> bool {
        self.counters.in_flight.load(Ordering::SeqCst) == 0
    }

    /// Reads the reuse observer's counters.
    pub fn reuse(&self) -> ReuseSnapshot {
        let c = &*self.counters;
        ReuseSnapshot {
            requests: c.requests.load(Ordering::Relaxed),
            reused: c.reused.load(Ordering::Relaxed),
            connections_opened: c.connections_opened.load(Ordering::Relaxed),
            retired: c.retired.load(Ordering::Relaxed),
            sent_again: c.sent_again.load(Ordering::Relaxed),
        }
    }

    /// An observed connection was retired before its server's idle close.
    pub(crate) fn connection_retired(&self) {
        self.counters.retired.fetch_add(1, Ordering::Relaxed);
    }

    /// A request came through the layer again, sent by `RetryRefused`.
    pub(crate) fn sent_again(&self) {
        self.counters.sent_again.fetch_add(1, Ordering::Relaxed);
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
        let c = &*self.stats.counters;
        // SeqCst, a Release: whoever reads this decrement (Acquire) sees
        // the counts recorded before it. The waiters are read after it
        // (see `Idle`), and only the last drain wakes them.
        if c.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 && c.idle.waiters.load(Ordering::SeqCst) > 0 {
            c.idle.wake_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::Waker;

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

    /// Counts its wakes.
    struct Counting(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn wakes(c: &Counting) -> usize {
        c.0.load(Ordering::SeqCst)
    }

    /// Waits (30 s at most) for `cond`.
    fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn wait_idle_is_woken_by_the_end_of_the_last_drain_and_not_before() {
        let stats = DrainStats::default();
        let (a, b) = (stats.try_acquire(2).unwrap(), stats.try_acquire(2).unwrap());
        let counting = Arc::new(Counting(Default::default()));
        let waker = Waker::from(counting.clone());
        let mut cx = Context::from_waker(&waker);
        let mut wait = std::pin::pin!(stats.wait_idle(Duration::from_secs(3600)));
        assert!(wait.as_mut().poll(&mut cx).is_pending(), "two drains run");
        drop(a);
        // What a polling loop would have done by now, many times over.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(wakes(&counting), 0, "a waiter is not woken while a drain runs: it costs nothing");
        assert_eq!(wait.as_mut().poll(&mut cx), Poll::Pending, "one drain still runs");
        drop(b);
        wait_until("the wake of the last drain's end", || wakes(&counting) > 0);
        assert_eq!(wait.as_mut().poll(&mut cx), Poll::Ready(true), "idle, well before the timeout");
        assert_eq!(stats.counters.idle.waiters.load(Ordering::SeqCst), 0, "the waiter is gone");
    }

    #[test]
    fn a_dropped_wait_idle_leaves_no_waker_behind() {
        let stats = DrainStats::default();
        let slot = stats.try_acquire(1).unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        let mut wait = Box::pin(stats.wait_idle(Duration::from_secs(3600)));
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        assert_eq!(stats.counters.idle.list().wakers.len(), 1, "registered");
        drop(wait);
        assert!(stats.counters.idle.list().wakers.is_empty(), "removed with its waiter");
        assert_eq!(stats.counters.idle.waiters.load(Ordering::SeqCst), 0);
        drop(slot);
    }

    #[test]
    fn wait_idle_times_out_while_a_drain_runs() {
        let stats = DrainStats::default();
        let _slot = stats.try_acquire(1).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        assert!(!rt.block_on(stats.wait_idle(Duration::from_millis(20))), "no timer of tokio's needed");
        assert!(!stats.wait_idle_blocking(Duration::from_millis(20)));
    }

    #[test]
    fn wait_idle_blocking_returns_when_the_last_drain_ends() {
        let stats = DrainStats::default();
        let slot = stats.try_acquire(1).unwrap();
        let returned = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waiter = std::thread::spawn({
            let (stats, returned) = (stats.clone(), returned.clone());
            move || {
                let idle = stats.wait_idle_blocking(Duration::from_secs(3600));
                returned.store(true, Ordering::SeqCst);
                idle
            }
        });
        wait_until("the waiter to wait", || stats.counters.idle.waiters.load(Ordering::SeqCst) == 1);
        assert!(!returned.load(Ordering::SeqCst), "a drain runs");
        drop(slot);
        wait_until("wait_idle_blocking to return, woken by the end of the drain", || {
            returned.load(Ordering::SeqCst)
        });
        assert!(waiter.join().unwrap(), "idle");
    }
}
