//! Per-origin estimates: the round trip, what a new connection costs, and
//! how fast the link delivers a drained body. The policy turns them into
//! each drain's budget (`policy::budget`).
//!
//! **Round trip**, in every mode: the shortest time from a request's call to
//! its response head among the origin's last [`HEAD_SAMPLES`] responses.
//! On a reused connection that is one round trip plus the server's quickest
//! answer; a response on a new connection also carries the connection's
//! setup, so until a reused connection answered, the estimate is high (and
//! so the first drains' time budget generous, not short). Measured by the
//! layer itself, no wiring needed; never the caller's reading pace.
//!
//! **Setup cost**, in adaptive mode: the connector's own time to open a
//! connection (TCP, and TLS when the observed connector does TLS), measured
//! by an `ObserveConnector` on every new connection. Head times cannot stand
//! in for it (server think time and queueing weigh as much as setup there).
//!
//! **Throughput**, in adaptive mode: measured on drains only, never on
//! bodies callers read (a caller's reading pace is not the link's), and only
//! on drains of a connection's second response or later: a new connection is
//! in TCP slow start, and its drains' rates (a quarter of the link's, or
//! less) would make the estimate collapse, the byte budget with it, and no
//! connection would ever be kept to correct it. A drain's sample counts the
//! bytes that arrived after its first wait for the server, over the time
//! since that wait. The estimate is the highest of the last
//! [`RATE_SAMPLES`] samples, and of the prior ([`UNMEASURED_THROUGHPUT`])
//! until that many were taken.
//!
//! **Probes.** An origin whose drains keep giving up (over a budget) gets
//! the ceiling budget for one drain in [`PROBE_EVERY`]; one whose throughput
//! was not measured for [`PROBE_AFTER`] gets the byte ceiling once: either
//! way a stuck estimate is measured again.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use http::Uri;

use crate::budget::DrainBudget;
use crate::outcome::Reason;
use crate::stats::OriginView;

/// Byte ceiling of adaptive drains when `max_bytes` was not set explicitly.
pub(crate) const DEFAULT_CEILING_BYTES: u64 = 4 * 1024 * 1024;
/// Time ceiling of every drain whose time budget follows the origin (the
/// default, and adaptive mode) when `max_time` was not set explicitly.
pub(crate) const DEFAULT_CEILING_TIME: Duration = Duration::from_secs(1);
/// Origins tracked per layer; the least recently used is forgotten first.
pub(crate) const MAX_ORIGINS: usize = 256;
/// A TCP sender's initial congestion window: 10 segments of 1460 bytes
/// (RFC 6928, Linux's default).
pub(crate) const INITIAL_WINDOW: u64 = 14_600;
/// Head times kept per origin; the round trip is their minimum.
const HEAD_SAMPLES: usize = 16;
/// Weight of a new sample in the setup-cost average.
const ALPHA: f64 = 0.25;
/// Drain rates kept per origin; the estimate is their maximum.
const RATE_SAMPLES: usize = 8;
/// When no drain refreshed the throughput estimate for this long, the next
/// early drop gets the ceiling byte budget whatever the estimate says. At
/// most one such probe per origin per interval.
const PROBE_AFTER: Duration = Duration::from_secs(10);
/// An origin whose last drains all gave up (a budget ran out) gets the
/// ceiling budget, bytes and time, for every this many of them: the way back
/// for an estimate too short for the origin. Skipped drops do not count:
/// skipping is what the estimates are for (on a LAN a new connection is
/// cheaper than a large body), and a stale estimate is probed by time
/// ([`PROBE_AFTER`]).
const PROBE_EVERY: u32 = 8;
/// Throughput assumed until one is measured (100 Mbit/s, a common access
/// link), for far origins: their long setup cost then buys a large budget
/// from the first drop.
const UNMEASURED_THROUGHPUT: f64 = 12.5e6;
/// Transfers shorter than this say little about throughput.
const MIN_TRANSFER_BYTES: u64 = 16 * 1024;

/// Round trips a TCP sender in slow start needs to deliver `bytes` on a new
/// connection: its window starts at [`INITIAL_WINDOW`] and doubles every
/// round trip, so after `n` rounds it has sent `INITIAL_WINDOW × (2ⁿ − 1)`.
/// At least 1.
pub(crate) fn slow_start_rounds(bytes: u64) -> u32 {
    let mut rounds = 1;
    let mut sent = INITIAL_WINDOW;
    let mut window = INITIAL_WINDOW;
    while sent < bytes && rounds < 32 {
        window = window.saturating_mul(2);
        sent = sent.saturating_add(window);
        rounds += 1;
    }
    rounds
}

/// An origin as the pool sees it: scheme, host and port (the default port
/// filled in), never the userinfo, so `http://alice:secret@api/` and
/// `http://api:80/` are one origin and no credential is kept.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct OriginKey {
    scheme: Box<str>,
    host: Box<str>,
    port: u16,
}

/// The parts of a request URI that name its origin, borrowed.
#[derive(Clone, Copy)]
struct Parts<'a> {
    scheme: &'a str,
    host: &'a str,
    port: u16,
}

impl<'a> Parts<'a> {
    /// `None` for a URI without a host (a relative URI the client rejects).
    ///
    /// Splits the authority (which `Uri` validated) by bytes: `Uri::host`
    /// and `Uri::port_u16` would each search it again, and this runs on
    /// every request.
    fn of(uri: &'a Uri) -> Option<Self> {
        let authority = uri.authority()?.as_str();
        let scheme = uri.scheme_str().unwrap_or("http");
        let host_port = match authority.bytes().rposition(|b| b == b'@') {
            Some(at) => &authority[at + 1..],
            None => authority,
        };
        // The port follows the last ':', unless that ':' is inside an IPv6
        // literal's brackets; an empty port is the default port.
        let (host, port) = match host_port.bytes().rposition(|b| b == b':') {
            Some(colon) if !host_port.as_bytes()[colon..].contains(&b']') => {
                (&host_port[..colon], port_number(&host_port.as_bytes()[colon + 1..]))
            }
            _ => (host_port, None),
        };
        let port = port.unwrap_or(if scheme.eq_ignore_ascii_case("https") { 443 } else { 80 });
        Some(Parts { scheme, host, port })
    }

    /// A hash of the origin, case-insensitive, computed without allocating:
    /// each part hashed a chunk at a time, a chunk with capitals lowercased
    /// into a small buffer first.
    fn hash(self, state: &RandomState) -> u64 {
        let mut h = state.build_hasher();
        let mut buf = [0u8; 64];
        for part in [self.scheme, self.host] {
            for chunk in part.as_bytes().chunks(buf.len()) {
                // Hosts are almost always lowercase already.
                if chunk.iter().any(u8::is_ascii_uppercase) {
                    let lower = &mut buf[..chunk.len()];
                    lower.copy_from_slice(chunk);
                    lower.make_ascii_lowercase();
                    h.write(lower);
                } else {
                    h.write(chunk);
                }
            }
            h.write_u8(0xff);
        }
        h.write_u16(self.port);
        h.finish()
    }
}

/// A port as hyper reads it (`Uri::port_u16`, which is `str::parse::<u16>`:
/// an optional `+`, then any number of digits, leading zeros included, up
/// to 65535), so that the key names the server hyper connects to; `None`
/// when empty (the default port) or not a port. Written out because
/// `str::parse` would be most of the lookup's cost.
fn port_number(digits: &[u8]) -> Option<u16> {
    let digits = digits.strip_prefix(b"+").unwrap_or(digits);
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u16, |n, &b| {
        let digit = b.is_ascii_digit().then(|| u16::from(b - b'0'))?;
        n.checked_mul(10)?.checked_add(digit)
    })
}

impl OriginKey {
    /// `None` for a URI without a host.
    #[cfg(test)]
    fn from_uri(uri: &Uri) -> Option<Self> {
        Parts::of(uri).map(OriginKey::new)
    }

    fn new(p: Parts<'_>) -> Self {
        OriginKey {
            scheme: p.scheme.to_ascii_lowercase().into_boxed_str(),
            host: p.host.to_ascii_lowercase().into_boxed_str(),
            port: p.port,
        }
    }

    fn matches(&self, p: Parts<'_>) -> bool {
        // The key is lowercase, and so is almost every URI: compare bytes
        // first.
        let same = |key: &str, part: &str| key == part || key.eq_ignore_ascii_case(part);
        self.port == p.port && same(&self.scheme, p.scheme) && same(&self.host, p.host)
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
    /// The last head times, a ring; `None` where none was taken yet.
    heads: [Option<Duration>; HEAD_SAMPLES],
    /// Head times taken so far (the ring's next slot is this modulo its size).
    head_samples: u64,
    /// Seconds the connector took to open a connection, from the observer.
    connect: Ewma,
    /// Bytes per second of the last drains that waited for the link.
    rates: VecDeque<f64>,
    /// When the throughput was last measured or probed for (or the first
    /// budget handed out, before any measurement).
    throughput_at: Option<Instant>,
    reused_responses: u64,
    /// Responses on connections no observer tagged.
    unobserved_responses: u64,
    /// Drains that gave up since the last one that reached the end (see
    /// [`PROBE_EVERY`]).
    misses: u32,
}

impl Estimates {
    fn round_trip(&self) -> Option<Duration> {
        self.heads.iter().flatten().min().copied()
    }

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

    /// The adaptive budget for a body of `size` bytes: `None` while the
    /// setup cost is unknown (no observer, or no new connection yet).
    ///
    /// A kept connection saves the next request the setup of a new one and
    /// the slow start of its response: a new connection needs
    /// `slow_start_rounds(size)` round trips to deliver a body of that size,
    /// a warm one about one. A drain may take that long; its byte budget is
    /// what the link moves in that time. The round trip here is the smaller
    /// of the head-time estimate and the setup cost, both of which are at
    /// least one round trip. Until the throughput is measured, never less
    /// than `default`, the budget the origin gets outside adaptive mode.
    fn budget(&self, ceiling: DrainBudget, default: DrainBudget, size: u64) -> Option<DrainBudget> {
        let setup = self.setup_cost()?;
        // Both are at least one round trip and may be more (server think
        // time in the head time, TLS in the setup): the smaller is the
        // better bound.
        let rtt = self.round_trip().map_or(setup, |d| d.as_secs_f64().min(setup));
        let cold_start = f64::from(slow_start_rounds(size) - 1) * rtt;
        let time = (setup + cold_start).min(ceiling.max_time.as_secs_f64());
        let budget = match self.throughput() {
            Some(rate) => DrainBudget::new((rate * time) as u64, Duration::from_secs_f64(time)),
            None => DrainBudget::new(
                ((UNMEASURED_THROUGHPUT * time) as u64).max(default.max_bytes),
                Duration::from_secs_f64(time).max(default.max_time),
            ),
        };
        Some(DrainBudget::new(budget.max_bytes.min(ceiling.max_bytes), budget.max_time.min(ceiling.max_time)))
    }
}

/// What is known about one origin.
pub(crate) struct Origin {
    key: OriginKey,
    /// The table's clock at this origin's last lookup: written and read
    /// under the table's lock (atomic only because origins are shared).
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
        // A panic while holding the lock cannot leave the estimates invalid.
        self.estimates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `scheme://host:port`.
    pub(crate) fn key(&self) -> &OriginKey {
        &self.key
    }

    /// Records the time from a request's call to its response head.
    pub(crate) fn record_head(&self, elapsed: Duration) {
        let mut est = self.estimates();
        let at = (est.head_samples % HEAD_SAMPLES as u64) as usize;
        est.heads[at] = Some(elapsed);
        est.head_samples += 1;
    }

    /// The round-trip estimate: the shortest recent head time.
    pub(crate) fn round_trip(&self) -> Option<Duration> {
        self.estimates().round_trip()
    }

    /// Records what the observer said about a response's connection (whether
    /// it was reused, and its setup time), or that no observer said anything.
    pub(crate) fn record_connection(&self, observed: Option<(bool, Duration)>) {
        let mut est = self.estimates();
        match observed {
            Some((true, _)) => est.reused_responses += 1,
            Some((false, setup_time)) => est.connect.add(setup_time.as_secs_f64()),
            None => est.unobserved_responses += 1,
        }
    }

    /// Records that a drain of a connection's second response or later
    /// (`warm`) received `bytes` from the link in `elapsed` (counted from
    /// its first wait for the server). A new connection's drains are in
    /// slow start and say nothing about the link: not recorded.
    pub(crate) fn record_drain(&self, bytes: u64, elapsed: Duration, warm: bool) {
        if bytes < MIN_TRANSFER_BYTES || !warm {
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

    /// Records how an early drop of this origin ended, for [`PROBE_EVERY`].
    pub(crate) fn record_outcome(&self, reason: Reason) {
        // Drains that ran and gave up; a skip is a decision the estimates
        // made, right on a LAN, and probing it would waste the link.
        let mut est = match reason {
            Reason::EndOfBody | Reason::OverTime | Reason::OverBytes => self.estimates(),
            _ => return,
        };
        if reason == Reason::EndOfBody {
            est.misses = 0;
        } else {
            est.misses = est.misses.saturating_add(1);
        }
    }

    /// The adaptive budget of an early drop of a body of `size` bytes
    /// (see [`Estimates::budget`]), or a probe: the ceiling, when the
    /// origin's drops keep missing ([`PROBE_EVERY`]) or its throughput was
    /// not measured for [`PROBE_AFTER`]. `None` while the setup cost is
    /// unknown.
    pub(crate) fn adaptive_budget(
        &self,
        ceiling: DrainBudget,
        default: DrainBudget,
        size: u64,
    ) -> Option<DrainBudget> {
        self.adaptive_budget_at(ceiling, default, size, Instant::now())
    }

    fn adaptive_budget_at(
        &self,
        ceiling: DrainBudget,
        default: DrainBudget,
        size: u64,
        now: Instant,
    ) -> Option<DrainBudget> {
        let mut est = self.estimates();
        let budget = est.budget(ceiling, default, size)?;
        if est.misses >= PROBE_EVERY {
            est.misses = 0;
            return Some(ceiling);
        }
        // Counted from the first budget when nothing was measured yet.
        let since = *est.throughput_at.get_or_insert(now);
        if now.saturating_duration_since(since) >= PROBE_AFTER && budget.max_bytes < ceiling.max_bytes {
            est.throughput_at = Some(now);
            return Some(DrainBudget::new(ceiling.max_bytes, budget.max_time));
        }
        Some(budget)
    }

    /// The estimates a drop is decided with, and the budget they gave.
    pub(crate) fn view(&self, budget: DrainBudget) -> OriginView {
        let est = self.estimates();
        OriginView {
            round_trip: est.round_trip(),
            setup_cost: est.setup_cost().map(Duration::from_secs_f64),
            throughput: est.measured_throughput().map(|v| v as u64),
            budget,
        }
    }

    /// The origin's estimates, with the budget `budget` says it gets now, in
    /// adaptive mode when `adaptive`.
    fn snapshot(&self, adaptive: bool, budget: impl Fn(&Origin) -> Option<DrainBudget>) -> OriginSnapshot {
        let budget = budget(self);
        let est = self.estimates();
        let adaptive = match (adaptive, est.setup_cost(), est.unobserved_responses) {
            (false, ..) => Adaptive::Off,
            (true, Some(_), _) => Adaptive::Measured,
            (true, None, 0) => Adaptive::AwaitingNewConnection,
            (true, None, _) => Adaptive::NoObserver,
        };
        OriginSnapshot {
            adaptive,
            origin: self.key.to_string(),
            round_trip: est.round_trip(),
            setup_cost: est.setup_cost().map(Duration::from_secs_f64),
            throughput: est.measured_throughput().map(|v| v as u64),
            budget,
            new_connections: est.connect.samples,
            reused_responses: est.reused_responses,
        }
    }

    /// The adaptive budget of a body of `size` bytes without a probe, for
    /// snapshots.
    pub(crate) fn adaptive_budget_now(
        &self,
        ceiling: DrainBudget,
        default: DrainBudget,
        size: u64,
    ) -> Option<DrainBudget> {
        self.estimates().budget(ceiling, default, size)
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
    /// response head among the origin's last 16 responses (a response on a
    /// new connection includes the connection's setup). `None` before the
    /// first response.
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
}

/// Origins by their hash ([`Parts::hash`]), and the clock their
/// `last_used` is read from.
#[derive(Default)]
struct Table {
    by_hash: HashMap<u64, Arc<Origin>, BuildHasherDefault<PreHashed>>,
    /// Lookups so far.
    clock: u64,
}

/// The table's keys are hashes already, keyed by [`Origins`]' own
/// `RandomState`: used as they are rather than hashed a second time.
#[derive(Default)]
struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here (`write_u64`); any other input is
        // still a valid, if slow, hash.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The per-origin table of one layer, bounded to [`MAX_ORIGINS`].
#[derive(Default)]
pub(crate) struct Origins {
    /// By the hash of the origin's parts; the entry's key is checked on
    /// every lookup.
    table: Mutex<Table>,
    hasher: RandomState,
}

impl Origins {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The entry of `uri`'s origin, created if needed (forgetting the least
    /// recently used origin when the table is full); allocates only then.
    /// `None` for a URI without a host, or in the unlikely event that two
    /// origins' hashes collide (the second is then not tracked).
    pub(crate) fn get(&self, uri: &Uri) -> Option<Arc<Origin>> {
        let parts = Parts::of(uri)?;
        let id = parts.hash(&self.hasher);
        let mut guard = self.table();
        let Table { by_hash: table, clock } = &mut *guard;
        *clock += 1;
        let now = *clock;
        if let Some(origin) = table.get(&id) {
            origin.last_used.store(now, Ordering::Relaxed);
            return origin.key.matches(parts).then(|| origin.clone());
        }
        if table.len() >= MAX_ORIGINS {
            let oldest =
                table.iter().min_by_key(|(_, o)| o.last_used.load(Ordering::Relaxed)).map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                table.remove(&oldest);
            }
        }
        let origin = Arc::new(Origin {
            key: OriginKey::new(parts),
            last_used: AtomicU64::new(now),
            estimates: Mutex::new(Estimates::default()),
        });
        table.insert(id, origin.clone());
        Some(origin)
    }

    /// Origins tracked now.
    pub(crate) fn len(&self) -> usize {
        self.table().by_hash.len()
    }

    /// Every origin's estimates, sorted by origin, each with the budget
    /// `budget` gives it, in adaptive mode when `adaptive`.
    pub(crate) fn snapshot(
        &self,
        adaptive: bool,
        budget: impl Fn(&Origin) -> Option<DrainBudget>,
    ) -> Vec<OriginSnapshot> {
        let origins: Vec<Arc<Origin>> = self.table().by_hash.values().cloned().collect();
        let mut out: Vec<_> = origins.iter().map(|o| o.snapshot(adaptive, &budget)).collect();
        out.sort_by(|a, b| a.origin.cmp(&b.origin));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CEILING: DrainBudget = DrainBudget { max_bytes: 4 << 20, max_time: Duration::from_secs(1) };
    const FIXED: DrainBudget = DrainBudget { max_bytes: 256 << 10, max_time: Duration::from_millis(50) };
    const SIZE: u64 = 256 << 10;

    fn origin() -> Arc<Origin> {
        Origins::default().get(&"http://a.example/x".parse().unwrap()).unwrap()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The budget of a body that fits a new connection's first flight: no
    /// slow start to save, so the setup cost alone sets its time.
    fn budget(o: &Origin) -> Option<DrainBudget> {
        o.adaptive_budget(CEILING, FIXED, INITIAL_WINDOW)
    }

    #[test]
    fn slow_start_rounds_follow_the_doubling_window() {
        // 14,600 · (2ⁿ − 1): 14,600, 43,800, 102,200, 219,000, 452,800 ...
        let rounds: Vec<_> = [1, 14_600, 14_601, 16 << 10, 64 << 10, 219_000, 256 << 10, 1 << 20]
            .map(slow_start_rounds)
            .to_vec();
        assert_eq!(rounds, [1, 1, 2, 2, 3, 4, 5, 7]);
        assert_eq!(slow_start_rounds(u64::MAX), 32, "bounded");
    }

    #[test]
    fn the_round_trip_is_the_shortest_recent_head_time() {
        let o = origin();
        assert_eq!(o.round_trip(), None);
        o.record_head(ms(300)); // a new connection: setup included
        assert_eq!(o.round_trip(), Some(ms(300)));
        o.record_head(ms(102));
        o.record_head(ms(150));
        assert_eq!(o.round_trip(), Some(ms(102)));
        for _ in 0..HEAD_SAMPLES {
            o.record_head(ms(120));
        }
        assert_eq!(o.round_trip(), Some(ms(120)), "an old minimum leaves the window");
    }

    #[test]
    fn no_budget_without_a_measured_setup_cost() {
        let o = origin();
        assert_eq!(budget(&o), None);
        o.record_connection(Some((true, Duration::ZERO)));
        assert_eq!(budget(&o), None, "reused responses say nothing about setup");
    }

    #[test]
    fn a_kept_connection_saves_the_setup_and_the_cold_start_of_the_next_response() {
        let far = origin();
        far.record_connection(Some((false, ms(200))));
        far.record_head(ms(100));
        // 256 KiB need 5 rounds on a new connection, 1 on a warm one: 4 saved.
        let b = far.adaptive_budget(CEILING, FIXED, SIZE).unwrap();
        assert_eq!(b.max_time, ms(600), "setup 200 ms + 4 round trips of 100 ms");
        assert_eq!(b.max_bytes, CEILING.max_bytes.min(7_500_000), "100 Mbit/s for 600 ms, under the ceiling");
        let small = far.adaptive_budget(CEILING, FIXED, 16 << 10).unwrap();
        assert_eq!(small.max_time, ms(300), "16 KiB: one round trip more on a new connection");
        let near = origin();
        near.record_connection(Some((false, ms(2))));
        near.record_head(ms(30)); // a slow server: no longer a round trip than the setup
        assert_eq!(
            near.adaptive_budget(CEILING, FIXED, SIZE),
            Some(FIXED),
            "a LAN origin drains what the default drains"
        );
        near.record_drain(20_000_000, Duration::from_secs(1), true);
        let measured = near.adaptive_budget(CEILING, FIXED, SIZE).unwrap();
        assert_eq!(measured.max_time, ms(10), "setup 2 ms + 4 round trips of at most 2 ms");
    }

    #[test]
    fn throughput_is_the_highest_recent_warm_drain_rate_and_probes_when_stale() {
        let o = origin();
        o.record_connection(Some((false, ms(200))));
        o.record_drain(1_000_000, Duration::from_secs(1), false);
        assert_eq!(o.view(FIXED).throughput, None, "a new connection's drain is in slow start");
        o.record_drain(1_000_000, Duration::from_secs(1), true); // 1 MB/s
        o.record_drain(10_000, Duration::from_secs(1), true); // too small to say anything
        // Below the prior: the prior still counts until enough samples.
        assert_eq!(budget(&o).unwrap().max_bytes, 2_500_000);
        o.record_drain(20_000_000, Duration::from_secs(1), true); // 20 MB/s
        let b = budget(&o).unwrap();
        assert!((b.max_bytes as i64 - 4_000_000).abs() < 1_000, "{b:?}");
        // One slow sample (cross traffic) does not pull the estimate down.
        o.record_drain(100_000, Duration::from_secs(1), true);
        assert_eq!(budget(&o).unwrap(), b);
        // A link that stays slow does, once the fast sample leaves the window.
        for _ in 0..RATE_SAMPLES {
            o.record_drain(100_000, Duration::from_secs(1), true);
        }
        let slow = budget(&o).unwrap();
        assert!((slow.max_bytes as i64 - 20_000).abs() < 1_000, "{slow:?}");
        assert_eq!(o.view(FIXED).throughput, Some(100_000));
        // A fresh estimate gets no probe; a stale one gets one, in the same time.
        assert!((0..8).all(|_| budget(&o).unwrap() == slow));
        let later = Instant::now() + PROBE_AFTER * 2;
        let budgets: Vec<_> =
            (0..4).map(|_| o.adaptive_budget_at(CEILING, FIXED, INITIAL_WINDOW, later).unwrap()).collect();
        let probes = budgets.iter().filter(|b| b.max_bytes == CEILING.max_bytes).count();
        assert_eq!(probes, 1, "{budgets:?}");
        assert!(budgets.iter().all(|b| b.max_time == budgets[0].max_time));
    }

    #[test]
    fn an_origin_whose_drains_keep_giving_up_gets_the_ceiling_now_and_then() {
        let o = origin();
        o.record_connection(Some((false, ms(200))));
        for _ in 0..RATE_SAMPLES {
            o.record_drain(100_000, Duration::from_secs(1), true);
        }
        let stuck = budget(&o).unwrap();
        let mut probes = 0;
        for _ in 0..3 * PROBE_EVERY {
            if budget(&o).unwrap() == CEILING {
                probes += 1;
            } else {
                assert_eq!(budget(&o).unwrap(), stuck);
            }
            o.record_outcome(Reason::OverTime);
        }
        assert_eq!(probes, 2, "one probe per {PROBE_EVERY} drains given up");
        o.record_outcome(Reason::EndOfBody);
        for _ in 0..3 * PROBE_EVERY {
            o.record_outcome(Reason::DeclaredOverBudget);
        }
        let budgets: Vec<_> = (0..PROBE_EVERY).map(|_| budget(&o).unwrap()).collect();
        assert!(budgets.iter().all(|b| *b != CEILING), "skips are decisions, not misses: {budgets:?}");
        o.record_outcome(Reason::EndOfBody);
        assert!((0..PROBE_EVERY).all(|_| budget(&o).unwrap() == stuck), "a drain that ends resets the count");
    }

    #[test]
    fn ceilings_bound_the_budget() {
        let o = origin();
        o.record_connection(Some((false, Duration::from_secs(30))));
        assert_eq!(budget(&o).unwrap(), CEILING);
        o.record_drain(1 << 30, Duration::from_secs(1), true);
        assert_eq!(budget(&o).unwrap(), CEILING);
    }

    #[test]
    fn the_table_forgets_the_least_recently_used_origin() {
        let origins = Origins::default();
        let uri = |i: usize| -> Uri { format!("http://h{i}:80/").parse().unwrap() };
        let (first, second) = (origins.get(&uri(0)).unwrap(), origins.get(&uri(1)).unwrap());
        for i in 2..MAX_ORIGINS {
            origins.get(&uri(i));
        }
        assert!(Arc::ptr_eq(&first, &origins.get(&uri(0)).unwrap()), "found again, and used again");
        origins.get(&uri(MAX_ORIGINS)); // full: the least recently used (1) goes
        assert_eq!(origins.len(), MAX_ORIGINS);
        assert!(Arc::ptr_eq(&first, &origins.get(&uri(0)).unwrap()), "the recently used one stays");
        assert!(!Arc::ptr_eq(&second, &origins.get(&uri(1)).unwrap()), "the oldest was forgotten");
    }

    #[test]
    fn parts_split_the_authority_as_uri_does() {
        let long = format!("http://{}.example/", "Ab".repeat(70));
        let uris = [
            "http://api.example/x",
            "https://api.example/",
            "HTTPS://API.example:8443/",
            "http://alice:se:cr@et@api.example:81/",
            "http://api.example:/",
            "http://api.example:65535/",
            "http://api.example:0080/",
            "http://[::1]/",
            "http://[::1]:8080/",
            "http://u:p@[fe80::1%25eth0]:9/",
            "ws://api.example/",
            long.as_str(),
        ];
        let state = RandomState::new();
        for u in uris {
            let uri: Uri = u.parse().unwrap();
            let p = Parts::of(&uri).unwrap();
            let default = if p.scheme.eq_ignore_ascii_case("https") { 443 } else { 80 };
            assert_eq!((p.host, p.port), (uri.host().unwrap(), uri.port_u16().unwrap_or(default)), "{u}");
            let upper: Uri = u.to_ascii_uppercase().replace("%25ETH0", "%25eth0").parse().unwrap();
            assert_eq!(p.hash(&state), Parts::of(&upper).unwrap().hash(&state), "{u}: case-insensitive");
        }
        let [a, b] = ["http://a.example/", "http://b.example/"].map(|u| u.parse::<Uri>().unwrap());
        assert_ne!(Parts::of(&a).unwrap().hash(&state), Parts::of(&b).unwrap().hash(&state));
    }

    #[test]
    fn ports_are_read_as_hyper_reads_them() {
        let mut cases: Vec<String> =
            ["", "+", "++80", "-0", "+0", "0", "00000000000000080", "+36635", "65535"]
                .into_iter()
                .chain(["65536", "99999", "080a", " 80", "8 0", "١٢"])
                .map(String::from)
                .collect();
        cases.extend(
            (0..70_000u32).step_by(7).flat_map(|n| [n.to_string(), format!("+{n}"), format!("000{n}")]),
        );
        for digits in &cases {
            assert_eq!(port_number(digits.as_bytes()), digits.parse::<u16>().ok(), "{digits:?}");
        }
        // And through a URI, as hyper-util's connector reads it.
        for authority in ["127.0.0.1:+36635", "127.0.0.1:0000036635", "h:+0", "h:", "[::1]:+8080"] {
            let uri: Uri = format!("http://{authority}/").parse().unwrap();
            assert_eq!(Parts::of(&uri).unwrap().port, uri.port_u16().unwrap_or(80), "{authority}");
        }
    }

    #[test]
    fn origin_keys_drop_userinfo_fill_in_the_default_port_and_ignore_case() {
        let key = |u: &str| OriginKey::from_uri(&u.parse().unwrap()).unwrap();
        assert_eq!(key("http://alice:secret@API.example/x").to_string(), "http://api.example:80");
        assert_eq!(key("http://alice:secret@api.example/"), key("http://api.example:80/y"));
        assert_eq!(key("https://api.example/").to_string(), "https://api.example:443");
        assert_eq!(key("http://[::1]:8080/").to_string(), "http://[::1]:8080");
        assert!(OriginKey::from_uri(&"/relative".parse().unwrap()).is_none());
        let origins = Origins::default();
        let a = origins.get(&"http://alice:secret@API.example/x".parse().unwrap()).unwrap();
        let b = origins.get(&"http://api.example:80/y".parse().unwrap()).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one origin");
        assert_eq!(origins.len(), 1);
    }
}
