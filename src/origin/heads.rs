//! The round trip of one origin, kept without a lock: the shortest time
//! from a request's call to its response head in each of the last
//! [`SECONDS`] seconds. Recording reads one atomic and writes only when a
//! head is the quickest of its second so far (once a second, and on the
//! rare improvement), so that many threads answering for one origin do not
//! take turns on a lock or a counter, whatever their number.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Seconds whose quickest head the round trip is the least of.
pub(crate) const SECONDS: usize = 16;

/// Each second's quickest head: `(second + 1) << 32 | microseconds` (0 for
/// a second with none), in the slot of its second modulo [`SECONDS`].
#[derive(Debug, Default)]
pub(crate) struct HeadTimes {
    slots: [AtomicU64; SECONDS],
}

/// Seconds since `epoch`, from 1, and `head` in microseconds, packed (in
/// u64 arithmetic: `as_micros` divides a u128).
fn pack(second: u64, head: Duration) -> u64 {
    let micros = head.as_secs().saturating_mul(1_000_000).saturating_add(u64::from(head.subsec_micros()));
    (second.min(u64::from(u32::MAX) - 1) + 1) << 32 | micros.min(u64::from(u32::MAX))
}

fn unpack(slot: u64) -> Option<(u64, Duration)> {
    (slot != 0).then(|| ((slot >> 32) - 1, Duration::from_micros(slot & u64::from(u32::MAX))))
}

impl HeadTimes {
    /// Records a head that took `head`, arriving `now` (seconds counted
    /// from `epoch`).
    pub(crate) fn record(&self, epoch: Instant, now: Instant, head: Duration) {
        let second = now.saturating_duration_since(epoch).as_secs();
        let slot = &self.slots[second as usize % SECONDS];
        let new = pack(second, head);
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            match unpack(current) {
                // The quickest of its second already, or an older second
                // than the slot's (a head timed before a clock step).
                Some((s, quickest)) if s == second && quickest <= head => return,
                Some((s, _)) if s > second => return,
                _ => {}
            }
            match slot.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now_there) => current = now_there,
            }
        }
    }

    /// The shortest head of the last [`SECONDS`] seconds as of `now`, or
    /// `None` before the first.
    pub(crate) fn round_trip(&self, epoch: Instant, now: Instant) -> Option<Duration> {
        let second = now.saturating_duration_since(epoch).as_secs();
        self.slots
            .iter()
            .filter_map(|slot| unpack(slot.load(Ordering::Relaxed)))
            .filter(|(s, _)| second.saturating_sub(*s) < SECONDS as u64)
            .map(|(_, head)| head)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_round_trip_is_the_quickest_head_of_the_last_16_seconds() {
        let t0 = Instant::now();
        let heads = HeadTimes::default();
        assert_eq!(heads.round_trip(t0, t0), None);
        heads.record(t0, t0, ms(300)); // a new connection: setup included
        assert_eq!(heads.round_trip(t0, t0), Some(ms(300)));
        heads.record(t0, t0 + ms(10), ms(102));
        heads.record(t0, t0 + ms(20), ms(150));
        assert_eq!(heads.round_trip(t0, t0 + ms(30)), Some(ms(102)));
        let later = t0 + Duration::from_secs(3);
        heads.record(t0, later, ms(120));
        assert_eq!(heads.round_trip(t0, later), Some(ms(102)), "still within 16 s");
        let much_later = t0 + Duration::from_secs(17);
        assert_eq!(heads.round_trip(t0, much_later), Some(ms(120)), "the 102 ms second left the window");
        heads.record(t0, much_later, ms(400));
        assert_eq!(heads.round_trip(t0, much_later + Duration::from_secs(15)), Some(ms(400)));
        assert_eq!(heads.round_trip(t0, much_later + Duration::from_secs(16)), None, "all left it");
    }

    #[test]
    fn many_threads_keep_the_quickest() {
        let t0 = Instant::now();
        let heads = std::sync::Arc::new(HeadTimes::default());
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let heads = heads.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u64 {
                        heads.record(t0, t0, Duration::from_micros(1000 + (i * 7 + t * 13) % 500));
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(heads.round_trip(t0, t0), Some(Duration::from_micros(1000)));
    }
}
