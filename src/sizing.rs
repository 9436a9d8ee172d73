//! What one drain may spend: the one place that turns the layer's settings
//! and an origin's estimates into a [`DrainBudget`], for the drop decision
//! and for [`DrainOnDropLayer::origins`](crate::DrainOnDropLayer::origins)
//! alike. Every number of the budget rules is stated here, once; the crate
//! documentation's "Why byte and time budgets" says them in words.
//!
//! Three rules, by mode:
//! - **Fixed**: `max_bytes` and `max_time` as set ([`fixed`]); an explicit
//!   `max_time` fixes the time budget in every mode.
//! - **Default**: `max_bytes`, and a time budget that follows the origin's
//!   round trip ([`following_round_trip`]): enough round trips for a new
//!   connection's TCP slow start to deliver `max_bytes`, plus one, between
//!   [`DEFAULT_MAX_TIME`] and [`CEILING_TIME`].
//! - **Adaptive**: what a kept connection saves the next request, from the
//!   origin's setup cost, round trip and throughput ([`adaptive`]), with
//!   probes when the estimate may be stuck; the default rule until the
//!   setup cost is measured.

use std::time::{Duration, Instant};

use crate::budget::DrainBudget;
use crate::origin::{Estimates, Probe, RATE_SAMPLES};

/// The default byte budget.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 256 * 1024;
/// The default fixed time budget (Go 1.27's), and the least the round-trip
/// rule gives: what a LAN origin gets.
pub(crate) const DEFAULT_MAX_TIME: Duration = Duration::from_millis(50);
/// The most a time budget that follows the origin gets (the default rule,
/// and adaptive mode) when `max_time` was not set.
pub(crate) const CEILING_TIME: Duration = Duration::from_secs(1);
/// Byte ceiling of adaptive drains when `max_bytes` was not set.
pub(crate) const CEILING_BYTES: u64 = 4 * 1024 * 1024;
/// A TCP sender's initial congestion window: 10 segments of 1460 bytes
/// (RFC 6928, Linux's default).
pub(crate) const INITIAL_WINDOW: u64 = 14_600;
/// Throughput assumed until one is measured (100 Mbit/s, a common access
/// link), for far origins: their long setup cost then buys a large budget
/// from the first drop.
const UNMEASURED_THROUGHPUT: f64 = 12.5e6;
/// An origin whose last drains all gave up (a budget ran out) gets the
/// ceiling budget, bytes and time, for every this many of them: the way
/// back for an estimate too short for the origin. Skipped drops do not
/// count: skipping is what the estimates are for (on a LAN a new connection
/// is cheaper than a large body), and a stale estimate is probed by time.
const PROBE_EVERY: u32 = 8;
/// When no drain refreshed the throughput for this long, the next drain
/// gets the ceiling byte budget whatever the estimate says; at most one
/// such probe per origin per interval.
const PROBE_AFTER: Duration = Duration::from_secs(10);

/// A layer's budget settings: what `max_bytes`, `max_time` and `adaptive`
/// set. Written only through the setters below, so that a value and
/// whether the user chose it change together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    max_bytes: u64,
    max_time: Duration,
    /// `max_bytes` / `max_time` were set by the user: they are then the
    /// budgets (and the ceilings of adaptive mode); otherwise the time
    /// budget follows the origin's round trip, and adaptive mode has
    /// ceilings of its own.
    explicit_bytes: bool,
    explicit_time: bool,
    /// Budgets follow the adaptive rule.
    adaptive: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_bytes: DEFAULT_MAX_BYTES,
            max_time: DEFAULT_MAX_TIME,
            explicit_bytes: false,
            explicit_time: false,
            adaptive: false,
        }
    }
}

impl Settings {
    /// Sets the byte budget (and the adaptive byte ceiling).
    pub(crate) fn set_max_bytes(&mut self, max_bytes: u64) {
        (self.max_bytes, self.explicit_bytes) = (max_bytes, true);
    }

    /// Fixes the time budget (and the adaptive time ceiling).
    pub(crate) fn set_max_time(&mut self, max_time: Duration) {
        (self.max_time, self.explicit_time) = (max_time, true);
    }

    /// Switches to the adaptive rule.
    pub(crate) fn set_adaptive(&mut self) {
        self.adaptive = true;
    }

    /// The byte budget as set (or its default).
    pub(crate) fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Whether the adaptive rule applies.
    pub(crate) fn adaptive(&self) -> bool {
        self.adaptive
    }
}

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

/// The budgets as set: `max_bytes` and `max_time` (or their defaults).
pub(crate) fn fixed(config: &Settings) -> DrainBudget {
    DrainBudget::new(config.max_bytes, config.max_time)
}

/// The most an adaptive drain may spend: `max_bytes` and `max_time` when
/// set, else [`CEILING_BYTES`] and [`CEILING_TIME`].
pub(crate) fn ceiling(config: &Settings) -> DrainBudget {
    DrainBudget::new(
        if config.explicit_bytes { config.max_bytes } else { CEILING_BYTES },
        if config.explicit_time { config.max_time } else { CEILING_TIME },
    )
}

/// The default rule: `max_bytes`, and a time budget of
/// `slow_start_rounds(max_bytes) + 1` round trips of the origin (six at the
/// default 256 KiB), never below `max_time`'s default nor above
/// [`CEILING_TIME`]. A LAN origin (a round trip under 8 ms at 256 KiB) gets
/// 50 ms; one 100 ms away, 600 ms. An explicit `max_time` is the time
/// budget, whatever the round trip; so is the fixed default with no round
/// trip measured yet.
pub(crate) fn following_round_trip(config: &Settings, round_trip: Option<Duration>) -> DrainBudget {
    match round_trip {
        Some(rtt) if !config.explicit_time => {
            let rounds = slow_start_rounds(config.max_bytes) + 1;
            let time = rtt.saturating_mul(rounds).clamp(config.max_time, ceiling(config).max_time);
            DrainBudget::new(config.max_bytes, time)
        }
        _ => fixed(config),
    }
}

/// What an origin's early drop may spend, and how it was sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sized {
    pub(crate) budget: DrainBudget,
    /// The adaptive rule gave it (a zero budget then means a reconnect is
    /// cheaper, not that draining is off).
    pub(crate) adaptive: bool,
    /// The probe it carries, to be spent if the drop drains
    /// (`Estimates::spend`).
    pub(crate) probe: Option<Probe>,
}

/// The budget of an early drop of a body of `size` bytes from the origin
/// with these estimates: the adaptive rule in adaptive mode once the setup
/// cost is measured, otherwise the default rule. `now` is the drop's time,
/// for probes; `None` (a snapshot) asks for no probe.
pub(crate) fn for_origin(
    config: &Settings,
    est: &Estimates,
    round_trip: Option<Duration>,
    size: u64,
    now: Option<Instant>,
) -> Sized {
    let default = following_round_trip(config, round_trip);
    let plain = Sized { budget: default, adaptive: false, probe: None };
    if !config.adaptive {
        return plain;
    }
    let Some(budget) = adaptive(config, est, round_trip, size, default) else { return plain };
    let ceiling = ceiling(config);
    let probe = now.and_then(|now| {
        if est.misses() >= PROBE_EVERY {
            Some(Probe::Misses)
        } else if est.measured_ago(now).is_some_and(|ago| ago >= PROBE_AFTER)
            && budget.max_bytes < ceiling.max_bytes
        {
            Some(Probe::Stale)
        } else {
            None
        }
    });
    let budget = match probe {
        Some(Probe::Misses) => ceiling,
        Some(Probe::Stale) => DrainBudget::new(ceiling.max_bytes, budget.max_time),
        None => budget,
    };
    Sized { budget, adaptive: true, probe }
}

/// Whether an origin's budget, as [`for_origin`] gives it, depends on the
/// origin (for snapshots): not when the fixed budgets apply.
pub(crate) fn depends_on_origin(config: &Settings, sized: &Sized) -> bool {
    sized.adaptive || !config.explicit_time
}

/// The adaptive rule for a body of `size` bytes: `None` while the setup
/// cost is unknown (no observer, or no new connection yet).
///
/// A kept connection saves the next request the setup of a new one and
/// the slow start of its response: a new connection needs
/// `slow_start_rounds(size)` round trips to deliver a body of that size, a
/// warm one about one. A drain may take that long; its byte budget is what
/// the link moves in that time. The round trip here is the smaller of the
/// head-time estimate and the setup cost, both of which are at least one
/// round trip (server think time in the one, TLS in the other). Until the
/// throughput is measured, never less than `default`, the budget the
/// origin gets outside adaptive mode.
fn adaptive(
    config: &Settings,
    est: &Estimates,
    round_trip: Option<Duration>,
    size: u64,
    default: DrainBudget,
) -> Option<DrainBudget> {
    let ceiling = ceiling(config);
    let setup = est.setup_cost()?.as_secs_f64();
    let rtt = round_trip.map_or(setup, |d| d.as_secs_f64().min(setup));
    let cold_start = f64::from(slow_start_rounds(size) - 1) * rtt;
    let time = (setup + cold_start).min(ceiling.max_time.as_secs_f64());
    let budget = match throughput(est) {
        Some(rate) => DrainBudget::new((rate * time) as u64, Duration::from_secs_f64(time)),
        None => DrainBudget::new(
            ((UNMEASURED_THROUGHPUT * time) as u64).max(default.max_bytes),
            Duration::from_secs_f64(time).max(default.max_time),
        ),
    };
    Some(DrainBudget::new(budget.max_bytes.min(ceiling.max_bytes), budget.max_time.min(ceiling.max_time)))
}

/// The throughput the adaptive rule assumes: the measured one, with the
/// prior ([`UNMEASURED_THROUGHPUT`]) counted as one of the samples until
/// [`RATE_SAMPLES`] were taken, so that a first sample taken under cross
/// traffic does not stop all drains.
fn throughput(est: &Estimates) -> Option<f64> {
    let measured = est.throughput()?;
    Some(if est.rate_samples() < RATE_SAMPLES { measured.max(UNMEASURED_THROUGHPUT) } else { measured })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZE: u64 = 256 << 10;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn adaptive_config() -> Settings {
        Settings { adaptive: true, ..Settings::default() }
    }

    /// The adaptive budget of a body that fits a new connection's first
    /// flight (no slow start to save: the setup cost alone sets its time),
    /// at `now`.
    fn budget_at(est: &Estimates, now: Instant) -> Sized {
        for_origin(&adaptive_config(), est, None, INITIAL_WINDOW, Some(now))
    }

    fn new_connection(setup: Duration) -> Estimates {
        let mut e = Estimates::default();
        e.record_connection(Some((false, setup)));
        e
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
    fn the_default_time_budget_follows_the_round_trip_between_50_ms_and_1_s() {
        let time = |config: &Settings, rtt: Option<u64>| following_round_trip(config, rtt.map(ms)).max_time;
        let default = Settings::default();
        assert_eq!(time(&default, None), ms(50), "no round trip measured yet: the fixed default");
        assert_eq!(time(&default, Some(0)), ms(50), "loopback");
        assert_eq!(time(&default, Some(8)), ms(50), "a LAN: today's 50 ms");
        // 256 KiB take 5 round trips of slow start on a new connection; one more.
        assert_eq!(time(&default, Some(20)), ms(120));
        assert_eq!(time(&default, Some(100)), ms(600));
        assert_eq!(time(&default, Some(150)), ms(900));
        assert_eq!(time(&default, Some(400)), ms(1000), "capped");
        assert_eq!(following_round_trip(&default, Some(ms(100))).max_bytes, 256 * 1024, "bytes as set");
        let big = Settings { max_bytes: 1 << 20, explicit_bytes: true, ..Settings::default() };
        assert_eq!(time(&big, Some(100)), ms(800), "1 MiB: 7 rounds, and one more");
        let fixed = Settings { max_time: ms(70), explicit_time: true, ..Settings::default() };
        assert_eq!(time(&fixed, Some(100)), ms(70), "an explicit max_time is the budget");
    }

    #[test]
    fn no_adaptive_budget_without_a_measured_setup_cost() {
        let mut e = Estimates::default();
        e.record_connection(Some((true, Duration::ZERO)));
        let sized = budget_at(&e, Instant::now());
        assert!(!sized.adaptive, "reused responses say nothing about setup: the default rule");
        assert_eq!(sized.budget, fixed(&Settings::default()));
    }

    #[test]
    fn a_kept_connection_saves_the_setup_and_the_cold_start_of_the_next_response() {
        let config = adaptive_config();
        let now = Some(Instant::now());
        let mut far = new_connection(ms(200));
        let far_rtt = Some(ms(100));
        // 256 KiB need 5 rounds on a new connection, 1 on a warm one: 4 saved.
        let b = for_origin(&config, &far, far_rtt, SIZE, now).budget;
        assert_eq!(b.max_time, ms(600), "setup 200 ms + 4 round trips of 100 ms");
        assert_eq!(b.max_bytes, CEILING_BYTES.min(7_500_000), "100 Mbit/s for 600 ms, under the ceiling");
        let small = for_origin(&config, &far, far_rtt, 16 << 10, now).budget;
        assert_eq!(
            small.max_time,
            ms(600),
            "16 KiB, unmeasured link: never below the default (6 round trips)"
        );
        far.record_drain(20_000_000, Duration::from_secs(1), Instant::now());
        let small = for_origin(&config, &far, far_rtt, 16 << 10, now).budget;
        assert_eq!(small.max_time, ms(300), "measured: 16 KiB take one round trip more on a new connection");
        let mut near = new_connection(ms(2));
        let near_rtt = Some(ms(30)); // a slow server: no longer a round trip than the setup
        assert_eq!(
            for_origin(&config, &near, near_rtt, SIZE, now).budget,
            following_round_trip(&config, Some(ms(30))),
            "a LAN origin drains what the default drains until the link is measured"
        );
        near.record_drain(20_000_000, Duration::from_secs(1), Instant::now());
        let measured = for_origin(&config, &near, near_rtt, SIZE, now).budget;
        assert_eq!(measured.max_time, ms(10), "setup 2 ms + 4 round trips of at most 2 ms");
    }

    #[test]
    fn the_measured_throughput_counts_with_the_prior_until_enough_samples() {
        let now = Instant::now();
        let mut e = new_connection(ms(200));
        e.record_drain(1_000_000, Duration::from_secs(1), now); // 1 MB/s, below the prior
        assert_eq!(budget_at(&e, now).budget.max_bytes, 2_500_000);
        e.record_drain(20_000_000, Duration::from_secs(1), now); // 20 MB/s
        let b = budget_at(&e, now).budget;
        assert!((b.max_bytes as i64 - 4_000_000).abs() < 1_000, "{b:?}");
        for _ in 0..RATE_SAMPLES {
            e.record_drain(100_000, Duration::from_secs(1), now);
        }
        let slow = budget_at(&e, now).budget;
        assert!((slow.max_bytes as i64 - 20_000).abs() < 1_000, "{slow:?}");
    }

    #[test]
    fn a_stale_throughput_gets_one_byte_ceiling_probe_per_interval() {
        let t0 = Instant::now();
        let mut e = new_connection(ms(200));
        for _ in 0..RATE_SAMPLES {
            e.record_drain(100_000, Duration::from_secs(1), t0);
        }
        let fresh = budget_at(&e, t0);
        assert_eq!(fresh.probe, None, "a fresh estimate gets no probe");
        let later = t0 + PROBE_AFTER * 2;
        let probe = budget_at(&e, later);
        assert_eq!(probe.probe, Some(Probe::Stale));
        assert_eq!(probe.budget, DrainBudget::new(CEILING_BYTES, fresh.budget.max_time), "bytes only");
        assert_eq!(budget_at(&e, later).probe, Some(Probe::Stale), "asking spends nothing");
        e.spend(probe.probe, later);
        assert_eq!(budget_at(&e, later).budget, fresh.budget, "spent: the next drop gets the estimate");
        assert_eq!(
            for_origin(&adaptive_config(), &e, None, SIZE, None).probe,
            None,
            "snapshots ask for no probe"
        );
    }

    #[test]
    fn an_origin_whose_drains_keep_giving_up_gets_the_ceiling_now_and_then() {
        let now = Instant::now();
        let mut e = new_connection(ms(200));
        for _ in 0..RATE_SAMPLES {
            e.record_drain(100_000, Duration::from_secs(1), now);
        }
        let stuck = budget_at(&e, now).budget;
        let mut probes = 0;
        for _ in 0..3 * PROBE_EVERY {
            let sized = budget_at(&e, now);
            if sized.probe == Some(Probe::Misses) {
                assert_eq!(sized.budget, ceiling(&adaptive_config()));
                probes += 1;
            } else {
                assert_eq!(sized.budget, stuck);
            }
            e.spend(sized.probe, now);
            e.record_outcome(false);
        }
        assert_eq!(probes, 2, "one probe per {PROBE_EVERY} drains given up");
        e.record_outcome(true);
        assert!((0..PROBE_EVERY).all(|_| budget_at(&e, now).budget == stuck), "a drain that ends resets");
    }

    #[test]
    fn ceilings_bound_the_budget() {
        let now = Instant::now();
        let mut e = new_connection(Duration::from_secs(30));
        let ceiling = ceiling(&adaptive_config());
        assert_eq!(budget_at(&e, now).budget, ceiling);
        e.record_drain(1 << 30, Duration::from_secs(1), now);
        assert_eq!(budget_at(&e, now).budget, ceiling);
    }
}
