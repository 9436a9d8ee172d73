//! Adaptive budgets: per-origin estimates of what a new connection costs and
//! how fast the link delivers a drained body, turned into the budget of each
//! drain.
//!
//! The rule: a drain may spend at most what a new connection would cost.
//! Its time budget is the origin's connection setup cost (times [`FACTOR`]),
//! and its byte budget what the link moves in that time. A body whose known
//! remaining length is above that is not drained at all, exactly as with
//! fixed budgets.
//!
//! **Setup cost** is the connector's own time to open a connection (TCP,
//! and TLS when the observed connector does TLS), measured by an
//! `ObserveConnector` on every new connection. Without an observer the
//! layer does not estimate it: an origin without a measured setup cost
//! gets the fixed budgets. Head times cannot stand in for it: the time from
//! the call to the response head on a new connection minus that on a reused
//! one is server think time and queueing as much as setup, and new
//! connections are rare once drains succeed, so one slow endpoint that
//! happened to open the connection (400 ms) became a 400 ms "setup cost" for
//! the origin; windowed minima do not help with one or two samples.
//!
//! **Throughput** is measured on drains only, never on bodies callers read
//! (a caller's reading pace is not the link's: a proxy streaming to a slow
//! client read at 163 KB/s from a 500 MB/s origin). A drain's sample counts
//! the bytes that arrived after its first wait for the server, over the time
//! since that wait, so bytes already buffered at the drop do not inflate it;
//! a drain that never waited says nothing about the link. The estimate is
//! the highest of the last [`RATE_SAMPLES`] samples, and of the prior
//! ([`UNMEASURED_THROUGHPUT`]) until that many were taken: one sample taken
//! while cross traffic shared the link must not stop all drains for seconds
//! when earlier samples (or, before any, the prior) said the link is fast.
//! If the link really is slower, an over-estimate costs at most one setup
//! cost of time per drain (the time budget), and each such drain is a lower
//! sample; after [`RATE_SAMPLES`] of them the estimate is the link's.
//!
//! **Until throughput is measured** an origin gets the larger of the fixed
//! budgets and what [`UNMEASURED_THROUGHPUT`] moves in its setup cost, so a
//! short run is never worse than the fixed default (a LAN origin drains what
//! the default drains), a far origin drains large bodies from the first drop,
//! and either way the drain measures the link.
//!
//! When the throughput estimate is more than [`PROBE_AFTER`] old, the next
//! drop probes with the byte ceiling (still within the setup-cost time), so
//! an origin whose estimate stopped all drains is measured again.

use std::collections::{HashMap, VecDeque};
use std::fmt;
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
/// Weight of a new sample in the setup-cost average.
const ALPHA: f64 = 0.25;
/// Drain rates kept per origin; the estimate is their maximum.
const RATE_SAMPLES: usize = 8;
/// When no drain refreshed the throughput estimate for this long, the next
/// early drop gets the ceiling byte budget whatever the estimate says,
/// still bounded by the setup cost in time. At most one such probe per
/// origin per interval: its cost, at most one setup cost of link time, is
/// bounded in time rather than a share of the early drops.
const PROBE_AFTER: Duration = Duration::from_secs(10);
/// Throughput assumed until one is measured (100 Mbit/s, a common access
/// link), for far origins: their long setup cost then buys a large budget
/// from the first drop.
const UNMEASURED_THROUGHPUT: f64 = 12.5e6;
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
}

#[derive(Debug, Default)]
struct Estimates {
    /// Seconds the connector took to open a connection, from the observer.
    connect: Ewma,
    /// Bytes per second of the last drains that waited for the link.
    rates: VecDeque<f64>,
    /// When the throughput was last measured or probed for (or the first
    /// budget handed out, before any measurement).
    throughput_at: Option<Instant>,
    reused_responses: u64,
}

impl Estimates {
    fn setup_cost(&self) -> Option<f64> {
        self.connect.value
    }

    /// The highest of the recent drain rates; the prior counts as one of
    /// them until [`RATE_SAMPLES`] were measured, so a first sample taken
    /// under cross traffic does not stop all drains either.
    fn throughput(&self) -> Option<f64> {
        let measured = self.rates.iter().copied().reduce(f64::max)?;
        Some(if self.rates.len() < RATE_SAMPLES { measured.max(UNMEASURED_THROUGHPUT) } else { measured })
    }

    /// The throughput measured by drains alone, for snapshots and events.
    fn measured_throughput(&self) -> Option<f64> {
        self.rates.iter().copied().reduce(f64::max)
    }

    /// `None` while the setup cost is unknown: the fixed budgets apply.
    fn budget(&self, ceiling: DrainBudget, fixed: DrainBudget) -> Option<DrainBudget> {
        let setup = self.setup_cost()?;
        let time = (setup * FACTOR).min(ceiling.max_time.as_secs_f64());
        let budget = match self.throughput() {
            Some(rate) => DrainBudget::new((rate * time) as u64, Duration::from_secs_f64(time)),
            None => {
                let prior = (UNMEASURED_THROUGHPUT * time) as u64;
                DrainBudget::new(
                    prior.max(fixed.max_bytes),
                    Duration::from_secs_f64(time).max(fixed.max_time),
                )
            }
        };
        Some(DrainBudget::new(budget.max_bytes.min(ceiling.max_bytes), budget.max_time.min(ceiling.max_time)))
    }
}

/// What is known about one origin.
pub(crate) struct Origin {
    key: OriginKey,
    last_used: AtomicU64,
    estimates: Mutex<Estimates>,
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Origin").field("key", &self.key).finish_non_exhaustive()
    }
}

impl Origin {
    fn estimates(&self) -> MutexGuard<'_, Estimates> {
        // A panic while holding the lock cannot leave the averages invalid.
        self.estimates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records what the observer said about a response's connection: a new
    /// connection's setup time, or one more reused response.
    pub(crate) fn record_connection(&self, reused: bool, setup_time: Duration) {
        let mut est = self.estimates();
        if reused {
            est.reused_responses += 1;
        } else {
            est.connect.add(setup_time.as_secs_f64());
        }
    }

    /// Records that a drain received `bytes` from the link in `elapsed`
    /// (counted from its first wait for the server).
    pub(crate) fn record_drain(&self, bytes: u64, elapsed: Duration) {
        if bytes < MIN_TRANSFER_BYTES {
            return;
        }
        let rate = bytes as f64 / elapsed.as_secs_f64().max(1e-6);
        let mut est = self.estimates();
        if est.rates.len() == RATE_SAMPLES {
            est.rates.pop_front();
        }
        est.rates.push_back(rate);
        est.throughput_at = Some(Instant::now());
    }

    /// The budget an early drop from this origin gets now, or `None` while
    /// the setup cost is unknown (no observer, or no new connection yet).
    pub(crate) fn budget(&self, ceiling: DrainBudget, fixed: DrainBudget) -> Option<DrainBudget> {
        self.budget_at(ceiling, fixed, Instant::now())
    }

    fn budget_at(&self, ceiling: DrainBudget, fixed: DrainBudget, now: Instant) -> Option<DrainBudget> {
        let mut est = self.estimates();
        let budget = est.budget(ceiling, fixed)?;
        // Counted from the first budget when nothing was measured yet.
        let since = *est.throughput_at.get_or_insert(now);
        let stale = now.saturating_duration_since(since) >= PROBE_AFTER;
        if stale && budget.max_bytes < ceiling.max_bytes {
            est.throughput_at = Some(now);
            return Some(DrainBudget::new(ceiling.max_bytes, budget.max_time));
        }
        Some(budget)
    }

    /// The estimates a drop is decided with, and the budget they gave.
    pub(crate) fn view(&self, budget: Option<DrainBudget>) -> AdaptiveView {
        let est = self.estimates();
        AdaptiveView {
            setup_cost: est.setup_cost().map(Duration::from_secs_f64),
            throughput: est.measured_throughput().map(|v| v as u64),
            budget,
        }
    }

    fn snapshot(&self, ceiling: DrainBudget, fixed: DrainBudget) -> OriginSnapshot {
        let est = self.estimates();
        OriginSnapshot {
            origin: self.key.to_string(),
            setup_cost: est.setup_cost().map(Duration::from_secs_f64),
            throughput: est.measured_throughput().map(|v| v as u64),
            budget: est.budget(ceiling, fixed),
            new_connections: est.connect.samples,
            reused_responses: est.reused_responses,
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
    /// Estimated cost of a new connection: the observer's connector time
    /// (see [`DrainOnDropLayer::adaptive`](crate::DrainOnDropLayer::adaptive)).
    /// `None` before the first new connection, and without an observer.
    pub setup_cost: Option<Duration>,
    /// Estimated link throughput in bytes per second: the highest of the last
    /// drains' rates. `None` before a drain received 16 KiB or more from the
    /// link.
    pub throughput: Option<u64>,
    /// The budget an early drop from this origin gets now: the decision
    /// threshold. `None` while the fixed budgets apply.
    pub budget: Option<DrainBudget>,
    /// New connections the observer measured.
    pub new_connections: u64,
    /// Responses on reused connections.
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
            estimates: Mutex::new(Estimates::default()),
        });
        table.insert(key.clone(), origin.clone());
        origin
    }

    /// Origins tracked now.
    pub(crate) fn len(&self) -> usize {
        self.table().len()
    }

    /// Every origin's estimates, with budgets under `ceiling`.
    pub(crate) fn snapshot(&self, ceiling: DrainBudget, fixed: DrainBudget) -> Vec<OriginSnapshot> {
        let origins: Vec<Arc<Origin>> = self.table().values().cloned().collect();
        let mut out: Vec<_> = origins.iter().map(|o| o.snapshot(ceiling, fixed)).collect();
        out.sort_by(|a, b| a.origin.cmp(&b.origin));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CEILING: DrainBudget = DrainBudget { max_bytes: 4 << 20, max_time: Duration::from_secs(1) };
    const FIXED: DrainBudget = DrainBudget { max_bytes: 256 << 10, max_time: Duration::from_millis(50) };

    fn origin() -> Arc<Origin> {
        let key = OriginKey::from_uri(&"http://a.example/x".parse().unwrap()).unwrap();
        Origins::default().get(&key)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn no_budget_without_a_measured_setup_cost() {
        let o = origin();
        assert_eq!(o.budget(CEILING, FIXED), None);
        o.record_connection(true, Duration::ZERO);
        assert_eq!(o.budget(CEILING, FIXED), None, "reused responses say nothing about setup");
    }

    #[test]
    fn until_measured_the_budget_is_the_larger_of_fixed_and_the_prior() {
        let near = origin();
        near.record_connection(false, ms(2));
        assert_eq!(near.budget(CEILING, FIXED), Some(FIXED), "a LAN origin drains what the default drains");
        let far = origin();
        far.record_connection(false, ms(200));
        let b = far.budget(CEILING, FIXED).unwrap();
        assert_eq!(b, DrainBudget::new(2_500_000, ms(200)), "100 Mbit/s for 200 ms");
    }

    #[test]
    fn throughput_is_the_highest_recent_drain_rate_and_probes_when_stale() {
        let o = origin();
        o.record_connection(false, ms(200));
        o.record_drain(1_000_000, Duration::from_secs(1)); // 1 MB/s
        o.record_drain(10_000, Duration::from_secs(1)); // too small to say anything
        // Below the prior: the prior still counts until enough samples.
        let b = o.budget(CEILING, FIXED).unwrap();
        assert_eq!(b.max_bytes, 2_500_000, "{b:?}");
        o.record_drain(20_000_000, Duration::from_secs(1)); // 20 MB/s
        let b = o.budget(CEILING, FIXED).unwrap();
        assert!((b.max_bytes as i64 - 4_000_000).abs() < 1_000, "{b:?}");
        // One slow sample (cross traffic) does not pull the estimate down.
        o.record_drain(100_000, Duration::from_secs(1));
        assert_eq!(o.budget(CEILING, FIXED).unwrap(), b);
        // A link that stays slow does, once the fast sample leaves the window.
        for _ in 0..RATE_SAMPLES {
            o.record_drain(100_000, Duration::from_secs(1));
        }
        let slow = o.budget(CEILING, FIXED).unwrap();
        assert!((slow.max_bytes as i64 - 20_000).abs() < 1_000, "{slow:?}");
        assert_eq!(o.view(None).throughput, Some(100_000));
        // A fresh estimate gets no probe; a stale one gets one, in the same time.
        assert!((0..8).all(|_| o.budget(CEILING, FIXED).unwrap() == slow));
        let later = Instant::now() + PROBE_AFTER * 2;
        let budgets: Vec<_> = (0..4).map(|_| o.budget_at(CEILING, FIXED, later).unwrap()).collect();
        let probes = budgets.iter().filter(|b| b.max_bytes == CEILING.max_bytes).count();
        assert_eq!(probes, 1, "{budgets:?}");
        assert!(budgets.iter().all(|b| b.max_time == budgets[0].max_time));
    }

    #[test]
    fn ceilings_bound_the_budget() {
        let o = origin();
        o.record_connection(false, Duration::from_secs(30));
        assert_eq!(o.budget(CEILING, FIXED).unwrap(), CEILING);
        o.record_drain(1 << 30, Duration::from_secs(1));
        assert_eq!(o.budget(CEILING, FIXED).unwrap(), CEILING);
    }

    #[test]
    fn the_table_forgets_the_least_recently_used_origin() {
        let origins = Origins::default();
        let key = |i: usize| OriginKey::from_uri(&format!("http://h{i}:80/").parse().unwrap()).unwrap();
        origins.get(&key(0));
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
