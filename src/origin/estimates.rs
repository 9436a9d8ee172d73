//! What the layer has measured about one origin: plain figures, recorded
//! as responses and drains come and read back as they are. How a drain's
//! budget follows from them is `sizing.rs`'s business; which drains and
//! outcomes are recorded, the policy's.
//!
//! (The round trip, kept in every mode and recorded on every response, is
//! not here but in `heads.rs`, without a lock.)
//!
//! - **Setup cost**: the connector's own time to open a connection (TCP,
//!   and TLS when the observed connector does TLS), measured by an
//!   `ObserveConnector` on every new connection. Head times cannot stand in
//!   for it (server think time and queueing weigh as much as setup there).
//! - **Throughput**: bytes per second of drains that had to wait for the
//!   link, counting the bytes that arrived after their first wait, over the
//!   time since; the highest of the last [`RATE_SAMPLES`]. Drains only,
//!   never bodies callers read (a caller's pace is not the link's).
//! - **Misses**: drains that gave up since the last one that reached the
//!   end, and when the throughput was last measured (or probed for): what
//!   a probe looks at.

use std::time::{Duration, Instant};

/// Drain rates kept; the throughput is their maximum.
pub(crate) const RATE_SAMPLES: usize = 8;
/// Weight of a new sample in the setup-cost average.
const ALPHA: f64 = 0.25;
/// Transfers shorter than this say little about throughput.
const MIN_TRANSFER_BYTES: u64 = 16 * 1024;

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

/// One origin's figures. `Copy`, so that a snapshot is taken under the
/// table's lock in one move.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Estimates {
    /// Seconds the connector took to open a connection, from the observer.
    connect: Ewma,
    /// Bytes per second of the last drains that waited for the link, a ring.
    rates: [f64; RATE_SAMPLES],
    /// Rates taken so far.
    rate_samples: u64,
    /// When the throughput was last measured or probed for, or an adaptive
    /// budget first handed out before any measurement.
    measured_at: Option<Instant>,
    reused_responses: u64,
    /// Responses on connections no observer tagged.
    unobserved_responses: u64,
    /// Drains that gave up since the last one that reached the end.
    misses: u32,
}

impl Estimates {
    /// Records what the observer said about a response's connection (whether
    /// it was reused, and its setup time), or that no observer said anything.
    pub(crate) fn record_connection(&mut self, observed: Option<(bool, Duration)>) {
        match observed {
            Some((true, _)) => self.reused_responses += 1,
            Some((false, setup_time)) => self.connect.add(setup_time.as_secs_f64()),
            None => self.unobserved_responses += 1,
        }
    }

    /// Records that a drain received `bytes` from the link in `elapsed`
    /// (counted from its first wait for the server), `now`. Too short a
    /// transfer says nothing and is not recorded.
    pub(crate) fn record_drain(&mut self, bytes: u64, elapsed: Duration, now: Instant) {
        if bytes < MIN_TRANSFER_BYTES {
            return;
        }
        let rate = bytes as f64 / elapsed.as_secs_f64().max(1e-6);
        self.rates[(self.rate_samples % RATE_SAMPLES as u64) as usize] = rate;
        self.rate_samples += 1;
        self.measured_at = Some(now);
    }

    /// Records whether a drain that ran reached the end (`true`) or gave up.
    pub(crate) fn record_outcome(&mut self, reached_the_end: bool) {
        self.misses = if reached_the_end { 0 } else { self.misses.saturating_add(1) };
    }

    /// Notes that an adaptive budget was spent by a drain `now`, and which
    /// probe it carried: a probe resets what called for it; the first
    /// budget starts the clock of the throughput's age.
    pub(crate) fn spend(&mut self, probe: Option<Probe>, now: Instant) {
        match probe {
            Some(Probe::Misses) => self.misses = 0,
            Some(Probe::Stale) => self.measured_at = Some(now),
            None => {
                self.measured_at.get_or_insert(now);
            }
        }
    }

    /// The average time the connector took to open a connection.
    pub(crate) fn setup_cost(&self) -> Option<Duration> {
        self.connect.value.map(Duration::from_secs_f64)
    }

    /// The highest of the recent drain rates, in bytes per second.
    pub(crate) fn throughput(&self) -> Option<f64> {
        let taken = (self.rate_samples as usize).min(RATE_SAMPLES);
        self.rates[..taken].iter().copied().reduce(f64::max)
    }

    /// How many rates the throughput was taken from (at most [`RATE_SAMPLES`]).
    pub(crate) fn rate_samples(&self) -> usize {
        (self.rate_samples as usize).min(RATE_SAMPLES)
    }

    /// Drains that gave up since the last one that reached the end.
    pub(crate) fn misses(&self) -> u32 {
        self.misses
    }

    /// How long ago the throughput was measured or probed for (or the first
    /// adaptive budget spent), as of `now`.
    pub(crate) fn measured_ago(&self, now: Instant) -> Option<Duration> {
        self.measured_at.map(|at| now.saturating_duration_since(at))
    }

    /// New connections the observer measured.
    pub(crate) fn new_connections(&self) -> u64 {
        self.connect.samples
    }

    /// Responses on reused connections (counted with an observer).
    pub(crate) fn reused_responses(&self) -> u64 {
        self.reused_responses
    }

    /// Responses on connections no observer tagged.
    pub(crate) fn unobserved_responses(&self) -> u64 {
        self.unobserved_responses
    }
}

/// Why a drain gets the ceiling budget instead of its estimate (see
/// `sizing::adaptive`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// The origin's drains keep giving up.
    Misses,
    /// The throughput was not measured for a while.
    Stale,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn throughput_is_the_highest_of_the_recent_rates_and_short_transfers_say_nothing() {
        let now = Instant::now();
        let mut e = Estimates::default();
        e.record_drain(10_000, Duration::from_secs(1), now);
        assert_eq!((e.throughput(), e.measured_ago(now)), (None, None), "too short to say anything");
        e.record_drain(1_000_000, Duration::from_secs(1), now);
        e.record_drain(20_000_000, Duration::from_secs(1), now);
        e.record_drain(100_000, Duration::from_secs(1), now);
        assert_eq!((e.throughput(), e.rate_samples()), (Some(20e6), 3));
        for _ in 0..RATE_SAMPLES {
            e.record_drain(100_000, Duration::from_secs(1), now);
        }
        assert_eq!(e.throughput(), Some(1e5), "the fast sample left the window");
        assert_eq!(e.rate_samples(), RATE_SAMPLES);
    }

    #[test]
    fn setup_cost_averages_new_connections_only() {
        let mut e = Estimates::default();
        e.record_connection(Some((true, ms(500))));
        e.record_connection(None);
        assert_eq!(e.setup_cost(), None, "reused and untagged responses say nothing about setup");
        e.record_connection(Some((false, ms(100))));
        e.record_connection(Some((false, ms(300))));
        assert_eq!(e.setup_cost(), Some(ms(200)), "the first samples weigh alike");
        assert_eq!((e.new_connections(), e.reused_responses(), e.unobserved_responses()), (2, 1, 1));
    }

    #[test]
    fn misses_count_until_a_drain_reaches_the_end_and_probes_reset_what_called_for_them() {
        let t0 = Instant::now();
        let mut e = Estimates::default();
        for _ in 0..3 {
            e.record_outcome(false);
        }
        assert_eq!(e.misses(), 3);
        e.spend(Some(Probe::Misses), t0);
        assert_eq!(e.misses(), 0);
        e.spend(None, t0);
        assert_eq!(e.measured_ago(t0 + ms(10)), Some(ms(10)), "the first budget starts the clock");
        e.spend(None, t0 + ms(5));
        assert_eq!(e.measured_ago(t0 + ms(10)), Some(ms(10)), "only the first");
        e.spend(Some(Probe::Stale), t0 + ms(8));
        assert_eq!(e.measured_ago(t0 + ms(10)), Some(ms(2)), "a stale probe restarts it");
        e.record_outcome(false);
        e.record_outcome(true);
        assert_eq!(e.misses(), 0);
    }
}
