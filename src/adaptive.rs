//! Adaptive budgets: per-origin estimates of what a new connection costs and
//! how fast bytes arrive, turned into the budget of each drain.
//!
//! The rule: a drain may spend at most what a new connection would cost.
//! Its time budget is the origin's estimated connection setup cost (times
//! [`FACTOR`]), and its byte budget what the origin's throughput moves in that
//! time. A body whose known remaining length is above that is not drained
//! at all, exactly as with fixed budgets. Until an origin has been seen on a
//! new connection, the fixed budgets apply.
//!
//! The estimates, per origin:
//! - **setup cost**: the connector's own time when an `ObserveConnector` is
//!   installed; otherwise the time from the call to the response head on
//!   new connections minus that on reused ones (half the former, two thirds
//!   for `https`, until a reused connection was seen). New and reused
//!   connections are told apart by the connection's local address in
//!   hyper-util's `HttpInfo`, or by the observer's tag.
//! - **throughput**: bytes per second of drains and of bodies that callers
//!   read to the end (transfers of 16 KiB or more); 100 Mbit/s until one is
//!   measured. When the estimate is more than 10 s old, the next drop probes
//!   with the byte ceiling (still within the setup-cost time), so an origin
//!   whose estimate stopped all drains is measured again.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use http::Uri;

use crate::budget::DrainBudget;
use crate::stats::AdaptiveView;

/// A drain may take this many times the estimated setup cost of a new
/// connection. 1.0: drain exactly when it is expected to be cheaper.
pub(crate) const FACTOR: f64 = 1.0;
/// Byte ceiling of adaptive drains when `max_bytes` was not set explicitly.
pub(crate) const DEFAULT_CEILING_BYTES: u64 = 4 * 1024 * 1024;
/// Time ceiling of adaptive drains when `max_time` was not set explicitly.
pub(crate) const DEFAULT_CEILING_TIME: Duration = Duration::from_secs(1);
/// Origins tracked per layer; the least recently used is forgotten first.
pub(crate) const MAX_ORIGINS: usize = 256;
/// Local addresses remembered per origin to tell new connections from
/// reused ones when no `ObserveConnector` tags them.
const MAX_LOCAL_ADDRS: usize = 64;
/// Weight of a new sample in the running averages.
const ALPHA: f64 = 0.25;
/// When no transfer refreshed the throughput estimate for this long (or
/// none was measured since the first budget), the next early drop gets the
/// ceiling byte budget whatever the estimate says, still bounded by the
/// setup cost in time, so a low estimate that stopped all drains is measured
/// again. At most one such probe per origin per interval: its cost, at most
/// one setup cost of link time, is bounded in time rather than a share of
/// the early drops.
const PROBE_AFTER: Duration = Duration::from_secs(10);
/// Throughput assumed until one is measured (100 Mbit/s, a common access
/// link): enough for far origins, whose setup cost is long, to drain large
/// bodies from the first drop, while a near origin does not start a drain
/// that only a faster link could finish within its short setup cost. The
/// first transfer of 16 KiB or more (a drain, or a body a caller reads)
/// replaces it.
const UNMEASURED_THROUGHPUT: f64 = 12.5e6;
/// How fast the skewed head-time estimates move against their skew.
const SKEW_DECAY: f64 = 0.1;
/// Transfers shorter than this say little about throughput.
const MIN_TRANSFER_BYTES: u64 = 16 * 1024;

/// An origin as the pool sees it: scheme, host and port (the default port
/// filled in), never the userinfo, so `http://alice:secret@api/` and
/// `http://api:80/` are one origin and no credential is kept.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct OriginKey {
    scheme: Box<str>,
    host: Box<str>,
    port: u16,
}

impl OriginKey {
    /// `None` for a URI without a host (a relative URI the client rejects).
    pub(crate) fn from_uri(uri: &Uri) -> Option<Self> {
        let host = uri.host()?;
        let scheme = uri.scheme_str().unwrap_or("http");
        let port = uri.port_u16().unwrap_or(if scheme.eq_ignore_ascii_case("https") { 443 } else { 80 });
        Some(OriginKey {
            scheme: scheme.to_ascii_lowercase().into_boxed_str(),
            host: host.to_ascii_lowercase().into_boxed_str(),
            port,
        })
    }

    fn is_tls(&self) -> bool {
        &*self.scheme == "https"
    }
}

impl fmt::Display for OriginKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// A running average.
#[derive(Clone, Copy, Debug, Default)]
struct Ewma {
    value: Option<f64>,
    samples: u64,
}

impl Ewma {
    fn add(&mut self, x: f64) {
        self.samples += 1;
        self.value = Some(match self.value {
            // The first few samples weigh more, so a cold start converges fast.
            Some(v) => v + (x - v) * ALPHA.max(1.0 / self.samples as f64),
            None => x,
        });
    }

    /// Rises fast and falls slowly: for head times on new connections, where
    /// the first use of a connection that hyper-util dialled in the
    /// background (its checkout raced the dial and won) looks new but paid
    /// no setup, and must not erase the samples that did.
    fn add_peak(&mut self, x: f64) {
        self.add_skewed(x, x > self.value.unwrap_or(x));
    }

    /// Falls fast and rises slowly: for head times on reused connections,
    /// where a request that waited for a drain to hand its connection back
    /// looks slow but says nothing about the round trip.
    fn add_floor(&mut self, x: f64) {
        self.add_skewed(x, x < self.value.unwrap_or(x));
    }

    fn add_skewed(&mut self, x: f64, toward: bool) {
        self.samples += 1;
        self.value = Some(match self.value {
            Some(v) if toward => v + (x - v) * 0.5,
            Some(v) => v + (x - v) * SKEW_DECAY,
            None => x,
        });
    }
}

#[derive(Debug, Default)]
struct Estimates {
    /// Seconds the connector took to open a connection, from an
    /// `ObserveConnector`'s tag: the setup cost itself, when known.
    connect: Ewma,
    /// Seconds from the call to the response head on a new connection
    /// (peak-weighted, see [`Ewma::add_peak`]).
    head_new: Ewma,
    /// The same on a reused connection (floor-weighted, see [`Ewma::add_floor`]).
    head_reused: Ewma,
    /// Bytes per second of body transfers (drains and callers reading).
    throughput: Ewma,
    /// Local addresses of connections already seen.
    local_addrs: VecDeque<SocketAddr>,
    /// The origin's scheme is `https`.
    tls: bool,
    /// When the throughput was last measured or probed for (or the first
    /// budget handed out, before any measurement).
    throughput_at: Option<Instant>,
}

impl Estimates {
    /// Seconds a new connection costs: the connector's own time when an
    /// observer measured it; otherwise the head time on new connections
    /// minus that on reused ones, or, until the latter is known, the share of
    /// the former that setting up takes: one round trip of the two it takes
    /// to get a head on plain TCP, two of three with TLS 1.3.
    fn setup_cost(&self) -> Option<f64> {
        if let Some(connect) = self.connect.value {
            return Some(connect);
        }
        let new = self.head_new.value?;
        Some(match self.head_reused.value {
            Some(reused) => (new - reused).max(0.0),
            None if self.tls => new * 2.0 / 3.0,
            None => new / 2.0,
        })
    }

    fn budget(&self, ceiling: DrainBudget) -> Option<DrainBudget> {
        let setup = self.setup_cost()?;
        let time = (setup * FACTOR).min(ceiling.max_time.as_secs_f64());
        let rate = self.throughput.value.unwrap_or(UNMEASURED_THROUGHPUT);
        let bytes = ((rate * time) as u64).min(ceiling.max_bytes);
        Some(DrainBudget::new(bytes, Duration::from_secs_f64(time)))
    }
}

/// What is known about one origin.
pub(crate) struct Origin {
    key: OriginKey,
    last_used: AtomicU64,
    /// Drains of this origin's bodies running now.
    draining: AtomicU64,
    estimates: Mutex<Estimates>,
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Origin").field("key", &self.key).finish_non_exhaustive()
    }
}

/// Marks a drain of an origin's body as running until dropped.
pub(crate) struct Draining(Arc<Origin>);

impl Draining {
    pub(crate) fn origin(&self) -> &Origin {
        &self.0
    }
}

impl Drop for Draining {
    fn drop(&mut self) {
        self.0.draining.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Origin {
    fn estimates(&self) -> MutexGuard<'_, Estimates> {
        // A panic while holding the lock cannot leave the averages invalid.
        self.estimates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a drain of this origin's bodies is running.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed) > 0
    }

    /// Counts a drain as running until the guard is dropped.
    pub(crate) fn start_drain(self: Arc<Self>) -> Draining {
        self.draining.fetch_add(1, Ordering::Relaxed);
        Draining(self)
    }

    /// Records a response head that took `head` from the call. `observed`
    /// is the observer's word when there is one (reused, connector time);
    /// otherwise the connection's local address tells whether it was seen
    /// before. A request sent `while_draining` may have waited for the drain
    /// to hand its connection back: its head time on a reused connection
    /// says nothing about the round trip and is not recorded.
    pub(crate) fn record_head(
        &self,
        head: Duration,
        while_draining: bool,
        observed: Option<(bool, Duration)>,
        local_addr: Option<SocketAddr>,
    ) {
        let mut est = self.estimates();
        let reused = match (observed, local_addr) {
            (Some((reused, connect)), _) => {
                if !reused {
                    est.connect.add(connect.as_secs_f64());
                }
                reused
            }
            (None, Some(addr)) => {
                let seen = est.local_addrs.contains(&addr);
                if !seen {
                    if est.local_addrs.len() == MAX_LOCAL_ADDRS {
                        est.local_addrs.pop_front();
                    }
                    est.local_addrs.push_back(addr);
                }
                seen
            }
            (None, None) => return,
        };
        let sample = head.as_secs_f64();
        if reused && while_draining {
            return;
        }
        if reused {
            est.head_reused.add_floor(sample);
        } else {
            est.head_new.add_peak(sample);
        }
    }

    /// Records `bytes` of body that took `elapsed` to arrive.
    pub(crate) fn record_transfer(&self, bytes: u64, elapsed: Duration) {
        if bytes < MIN_TRANSFER_BYTES {
            return;
        }
        let secs = elapsed.as_secs_f64().max(1e-6);
        let mut est = self.estimates();
        est.throughput.add(bytes as f64 / secs);
        est.throughput_at = Some(Instant::now());
    }

    /// The budget an early drop from this origin gets now, or `None` while
    /// the origin has not been seen on a new connection.
    pub(crate) fn budget(&self, ceiling: DrainBudget) -> Option<DrainBudget> {
        self.budget_at(ceiling, Instant::now())
    }

    fn budget_at(&self, ceiling: DrainBudget, now: Instant) -> Option<DrainBudget> {
        let mut est = self.estimates();
        let budget = est.budget(ceiling)?;
        // Counted from the first budget when nothing was measured yet.
        let since = *est.throughput_at.get_or_insert(now);
        let stale = now.saturating_duration_since(since) >= PROBE_AFTER;
        if stale && budget.max_bytes < ceiling.max_bytes {
            est.throughput_at = Some(now);
            return Some(DrainBudget::new(ceiling.max_bytes, budget.max_time));
        }
        Some(budget)
    }

    /// The estimates a drop is decided with, and the budget they give.
    pub(crate) fn view(&self, budget: Option<DrainBudget>) -> AdaptiveView {
        let est = self.estimates();
        AdaptiveView {
            setup_cost: est.setup_cost().map(Duration::from_secs_f64),
            throughput: est.throughput.value.map(|v| v as u64),
            budget,
        }
    }

    fn snapshot(&self, ceiling: DrainBudget) -> OriginSnapshot {
        let est = self.estimates();
        OriginSnapshot {
            origin: self.key.to_string(),
            setup_cost: est.setup_cost().map(Duration::from_secs_f64),
            throughput: est.throughput.value.map(|v| v as u64),
            budget: est.budget(ceiling),
            new_connections: est.head_new.samples,
            reused_responses: est.head_reused.samples,
        }
    }
}

/// The estimates of one origin at one moment; see
/// [`DrainOnDropLayer::origins`](crate::DrainOnDropLayer::origins).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub struct OriginSnapshot {
    /// `scheme://host:port`, never the userinfo.
    pub origin: String,
    /// Estimated cost of a new connection (see
    /// [`DrainOnDropLayer::adaptive`](crate::DrainOnDropLayer::adaptive)).
    /// `None` before the first new connection.
    pub setup_cost: Option<Duration>,
    /// Estimated body throughput in bytes per second, from drains and from
    /// callers reading bodies. `None` before the first transfer of 16 KiB or more.
    pub throughput: Option<u64>,
    /// The budget an early drop from this origin gets now: the decision
    /// threshold. `None` while the fixed budgets apply.
    pub budget: Option<DrainBudget>,
    /// Response heads seen on new connections.
    pub new_connections: u64,
    /// Response heads seen on reused connections.
    pub reused_responses: u64,
}

/// The per-origin table of one layer, bounded to [`MAX_ORIGINS`].
#[derive(Default)]
pub(crate) struct Origins {
    table: Mutex<HashMap<OriginKey, Arc<Origin>>>,
    clock: AtomicU64,
}

impl Origins {
    fn table(&self) -> MutexGuard<'_, HashMap<OriginKey, Arc<Origin>>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The entry of `key`, created if needed; forgets the least recently
    /// used origin when the table is full.
    pub(crate) fn get(&self, key: &OriginKey) -> Arc<Origin> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut table = self.table();
        if let Some(origin) = table.get(key) {
            origin.last_used.store(now, Ordering::Relaxed);
            return origin.clone();
        }
        if table.len() >= MAX_ORIGINS {
            let oldest =
                table.iter().min_by_key(|(_, o)| o.last_used.load(Ordering::Relaxed)).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                table.remove(&oldest);
            }
        }
        let origin = Arc::new(Origin {
            key: key.clone(),
            last_used: AtomicU64::new(now),
            draining: AtomicU64::new(0),
            estimates: Mutex::new(Estimates { tls: key.is_tls(), ..Estimates::default() }),
        });
        table.insert(key.clone(), origin.clone());
        origin
    }

    /// Origins tracked now.
    pub(crate) fn len(&self) -> usize {
        self.table().len()
    }

    /// Every origin's estimates, with budgets under `ceiling`.
    pub(crate) fn snapshot(&self, ceiling: DrainBudget) -> Vec<OriginSnapshot> {
        let origins: Vec<Arc<Origin>> = self.table().values().cloned().collect();
        let mut out: Vec<_> = origins.iter().map(|o| o.snapshot(ceiling)).collect();
        out.sort_by(|a, b| a.origin.cmp(&b.origin));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CEILING: DrainBudget = DrainBudget { max_bytes: 4 << 20, max_time: Duration::from_secs(1) };

    /// A plain-HTTP origin: without a reused sample its setup cost is half
    /// the new-connection head time.
    fn origin() -> Arc<Origin> {
        let key = OriginKey::from_uri(&"http://a.example/x".parse().unwrap()).unwrap();
        Origins::default().get(&key)
    }

    #[test]
    fn no_budget_before_a_new_connection_was_seen() {
        assert_eq!(origin().budget(CEILING), None);
    }

    #[test]
    fn setup_cost_is_new_minus_reused_head_time() {
        let o = origin();
        let addr = |port| SocketAddr::from(([127, 0, 0, 1], port));
        for port in [1000, 1001] {
            o.record_head(Duration::from_millis(300), false, None, Some(addr(port)));
        }
        // Half the new-connection head time until a reused one is seen.
        let b = o.budget(CEILING).unwrap();
        assert!((b.max_time.as_secs_f64() - 0.150).abs() < 1e-3, "{b:?}");
        for _ in 0..5 {
            o.record_head(Duration::from_millis(100), false, None, Some(addr(1000)));
        }
        let b = o.budget(CEILING).unwrap();
        assert!((b.max_time.as_secs_f64() - 0.200).abs() < 1e-3, "{b:?}");
        assert_eq!(b.max_bytes, 2_500_000, "throughput unknown: 100 Mbit/s for 200 ms");
        // 1 MB/s for 200 ms: 200 kB.
        o.record_transfer(1_000_000, Duration::from_secs(1));
        let b = o.budget(CEILING).unwrap();
        assert!((b.max_bytes as i64 - 200_000).abs() < 1_000, "{b:?}");
        // A fresh estimate gets no probe; a stale one gets one probe with the
        // byte ceiling, in the same time.
        assert!((0..8).all(|_| o.budget(CEILING).unwrap() == b));
        let later = Instant::now() + PROBE_AFTER * 2;
        let budgets: Vec<_> = (0..4).map(|_| o.budget_at(CEILING, later).unwrap()).collect();
        let probes = budgets.iter().filter(|b| b.max_bytes == CEILING.max_bytes).count();
        assert_eq!(probes, 1, "{budgets:?}");
        assert!(budgets.iter().all(|b| b.max_time == budgets[0].max_time));
    }

    #[test]
    fn ceilings_bound_the_budget() {
        let o = origin();
        o.record_head(Duration::from_secs(30), false, Some((false, Duration::from_secs(30))), None);
        let b = o.budget(CEILING).unwrap();
        assert_eq!(b, CEILING);
    }

    #[test]
    fn the_table_forgets_the_least_recently_used_origin() {
        let origins = Origins::default();
        let key = |i: usize| OriginKey::from_uri(&format!("http://h{i}:80/").parse().unwrap()).unwrap();
        let first = origins.get(&key(0));
        first.record_head(Duration::from_millis(10), false, None, None);
        for i in 1..MAX_ORIGINS {
            origins.get(&key(i));
        }
        origins.get(&key(0)); // used again: not the oldest any more
        origins.get(&key(MAX_ORIGINS));
        let table = origins.table();
        assert_eq!(table.len(), MAX_ORIGINS);
        assert!(table.contains_key(&key(0)) && !table.contains_key(&key(1)));
    }

    #[test]
    fn origin_keys_drop_userinfo_and_fill_in_the_default_port() {
        let key = |u: &str| OriginKey::from_uri(&u.parse().unwrap()).unwrap();
        assert_eq!(key("http://alice:secret@API.example/x").to_string(), "http://api.example:80");
        assert_eq!(key("http://alice:secret@api.example/"), key("http://api.example:80/y"));
        assert_eq!(key("https://api.example/").to_string(), "https://api.example:443");
        assert_eq!(key("http://[::1]:8080/").to_string(), "http://[::1]:8080");
        assert!(OriginKey::from_uri(&"/relative".parse().unwrap()).is_none());
    }
}
