//! HTTP/1 keep-alive's rules: when a pooled connection retires before its
//! server's idle timeout, and what an origin learns of that timeout.
//!
//! **The race.** A server closes a keep-alive connection that sat idle for
//! its timeout (Node's `keepAliveTimeout`, nginx's `keepalive_timeout`,
//! Apache's `KeepAliveTimeout`, uvicorn's `--timeout-keep-alive`, Go's
//! `IdleTimeout`), with a FIN and nothing else. A request the client sends
//! on it as that FIN is on its way fails (`IncompleteMessage`, sometimes
//! `ConnectionReset`), unread by the server. hyper-util alone rarely met
//! it where bodies were dropped (each drop closed its connection); the
//! layer keeps those connections, so it must keep them clear of the race.
//!
//! **What a server says, and what it does.** Node sends `Keep-Alive:
//! timeout=N` on every response (and closes a second later than it says);
//! Apache sends it only to a request that carries `Connection:
//! keep-alive`; nginx (by default), uvicorn and Go's server say nothing.
//! But each closes an idle connection at a fixed idle time, to about a
//! millisecond (measured: `../CONTEXT.md` of the project, and the
//! interop suite), which the observer (`observe.rs`, around every
//! connection) sees as the end of the connection's read side while no
//! request is in flight: an *idle close*, after the time since the last
//! byte of the last response.
//!
//! **The rules** ([`Lessons`]): an origin's idle timeout is its latest idle
//! close (a shorter one lowers it at once; a longer one, seen on a
//! connection that stayed idle past the learned time, raises it; one
//! sooner than [`SOONEST_TIMEOUT`] after a response is a restart or a
//! server that keeps no connection, and teaches nothing), or the
//! least of the recent closes that agree with it (a loaded machine reads a
//! FIN late, never early), capped
//! by what the server last said plus one second (Node's slack); before any
//! idle close, what the server said; before either, nothing is known and
//! nothing retires (a race can still be lost: [`RetryRefused`] sends a
//! GET that lost it again). A pooled connection idle for
//! [`retire_after`](OriginIdle::retire_after) (the timeout less the
//! origin's round trip, the spread of its idle closes, and a margin of
//! [`MARGIN`] or a 32nd of the timeout, whichever is more) is not used
//! again: the observer ends its read side when hyper-util hands it a
//! request, before hyper writes a byte of it, so hyper-util sends that
//! request on another connection (its `retry_canceled_requests`, on by
//! default). A connection idle for less is reused as before: reuse the
//! server allows is kept. No timer: the check runs when a request comes.
//!
//! [`RetryRefused`]: crate::RetryRefused

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::HeaderMap;

/// How the layer treats its servers' idle timeouts on HTTP/1
/// ([`DrainOnDropLayer::server_idle_timeout`](crate::DrainOnDropLayer::server_idle_timeout)).
/// It needs the observer ([`DrainOnDropLayer::observe`](crate::DrainOnDropLayer::observe)),
/// which sees each connection's idle time and its server's idle closes.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdleTimeout {
    /// Learn each origin's idle timeout from what its server says
    /// (`Keep-Alive: timeout=`) and does (the idle closes the observer
    /// sees), and retire a pooled connection before its server would close
    /// it. The default.
    #[default]
    Learned,
    /// Every origin's servers close a connection idle this long: retire
    /// a pooled connection before then, learning nothing.
    Known(Duration),
    /// Retire nothing: a pooled connection is used however long it was idle
    /// (as before the layer learned idle timeouts; hyper-util's
    /// `pool_idle_timeout` still applies).
    Ignored,
}

/// The least a connection retires before its server's idle timeout, beyond
/// the origin's round trip and the spread of its idle closes: the time a
/// loaded machine may take to run the task that reads the server's FIN,
/// or to send a request it decided to send.
pub(crate) const MARGIN: Duration = Duration::from_millis(25);

/// A close sooner than this after a response is not an idle timeout (a
/// restart, a server that keeps no connection, whose FIN comes with the
/// response): it teaches nothing. Servers' idle timeouts are seconds
/// (Node's `Keep-Alive: timeout=` cannot say less than one).
pub(crate) const SOONEST_TIMEOUT: Duration = Duration::from_millis(50);

/// Idle closes an origin keeps, for their spread.
const CLOSES: usize = 4;

/// What a server that says `timeout=N` may take beyond it: Node closes an
/// idle connection a second after the timeout it states.
const SAID_SLACK: Duration = Duration::from_secs(1);

/// Microseconds, as kept in atomics; `u64::MAX` for none.
const NONE: u64 = u64::MAX;

fn micros(d: Duration) -> u64 {
    d.as_secs().saturating_mul(1_000_000).saturating_add(u64::from(d.subsec_micros())).min(NONE - 1)
}

/// Whether a read error of an idle connection is its server closing it (a
/// reset rather than a FIN, or TLS ending without its close alert).
pub(crate) fn is_close(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind as K;
    matches!(kind, K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof | K::BrokenPipe)
}

/// What the `Keep-Alive` header of a response says: `timeout=` and `max=`
/// (RFC 2068, 19.7.1.1; `max` is the number of requests the server still
/// takes on the connection).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Said {
    pub(crate) timeout: Option<Duration>,
    pub(crate) max: Option<u64>,
}

impl Said {
    /// Reads the response's `Keep-Alive` header (none: nothing said).
    pub(crate) fn read(headers: &HeaderMap) -> Said {
        let mut said = Said::default();
        for value in headers.get_all(http::header::HeaderName::from_static("keep-alive")) {
            let Ok(value) = value.to_str() else { continue };
            for param in value.split(',') {
                let Some((name, number)) = param.split_once('=') else { continue };
                let Ok(number) = number.trim().trim_matches('"').parse::<u64>() else { continue };
                match name.trim() {
                    n if n.eq_ignore_ascii_case("timeout") => {
                        said.timeout = Some(Duration::from_secs(number))
                    }
                    n if n.eq_ignore_ascii_case("max") => said.max = Some(number),
                    _ => {}
                }
            }
        }
        said
    }

    /// The server takes no further request on the connection.
    pub(crate) fn last_request(&self) -> bool {
        self.max == Some(0)
    }
}

/// What one origin learned of its servers' idle timeout. Read without a
/// lock by the observer of each of its connections
/// ([`retire_after`](Self::retire_after)); written, under the origin's own
/// short lock, only when a server says something new or closes an idle
/// connection.
#[derive(Debug)]
pub(crate) struct OriginIdle {
    /// The idle age, in microseconds, at which a pooled connection retires,
    /// before the round trip is taken off; `NONE` while nothing is known.
    retire_before_round_trip: AtomicU64,
    /// The last `Keep-Alive: timeout=` a server of this origin sent, in
    /// microseconds (`NONE`: none), readable without the lock.
    said: AtomicU64,
    /// Idle closes seen, and connections retired before their server's.
    closes_seen: AtomicU64,
    retired: AtomicU64,
    lessons: Mutex<Lessons>,
}

impl Default for OriginIdle {
    fn default() -> Self {
        OriginIdle {
            retire_before_round_trip: AtomicU64::new(NONE),
            said: AtomicU64::new(NONE),
            closes_seen: AtomicU64::new(0),
            retired: AtomicU64::new(0),
            lessons: Mutex::default(),
        }
    }
}

impl OriginIdle {
    fn with<R>(&self, f: impl FnOnce(&mut Lessons) -> R) -> R {
        // Plain figures: a panic while holding the lock leaves them valid.
        let mut lessons = self.lessons.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut lessons);
        let before = lessons.retire_before_round_trip().map_or(NONE, micros);
        self.retire_before_round_trip.store(before, Ordering::Relaxed);
        r
    }

    /// A response of this origin said `timeout` (a lock only when it says
    /// something new).
    pub(crate) fn said(&self, timeout: Duration) {
        let us = micros(timeout);
        if self.said.swap(us, Ordering::Relaxed) != us {
            self.with(|l| l.said = Some(timeout));
        }
    }

    /// A connection of this origin was closed by its server after `idle`
    /// without a request in flight (counted; a lesson from
    /// [`SOONEST_TIMEOUT`] on).
    pub(crate) fn closed_after(&self, idle: Duration) {
        self.closes_seen.fetch_add(1, Ordering::Relaxed);
        if idle >= SOONEST_TIMEOUT {
            self.with(|l| l.closed_after(idle));
        }
    }

    /// A connection of this origin was retired before its server's idle
    /// timeout.
    pub(crate) fn retired(&self) {
        self.retired.fetch_add(1, Ordering::Relaxed);
    }

    /// The idle age at which a pooled connection of this origin retires,
    /// given its `round_trip` (the request must reach the server before the
    /// server's timeout ends) and the layer's `setting`; `None`: never.
    pub(crate) fn retire_after(
        &self,
        setting: IdleTimeout,
        round_trip: Option<Duration>,
    ) -> Option<Duration> {
        let before = match setting {
            IdleTimeout::Ignored => return None,
            IdleTimeout::Known(timeout) => retire_before_round_trip(timeout, Duration::ZERO),
            IdleTimeout::Learned => match self.retire_before_round_trip.load(Ordering::Relaxed) {
                NONE => return None,
                us => Duration::from_micros(us),
            },
        };
        Some(before.saturating_sub(round_trip.unwrap_or_default()))
    }

    /// The origin's idle timeout as the layer knows it now, the idle closes
    /// it saw, and the connections it retired.
    pub(crate) fn snapshot(&self, setting: IdleTimeout) -> (Option<Duration>, u64, u64) {
        let timeout = match setting {
            IdleTimeout::Known(timeout) => Some(timeout),
            _ => self.with(|l| l.timeout()),
        };
        (timeout, self.closes_seen.load(Ordering::Relaxed), self.retired.load(Ordering::Relaxed))
    }
}

/// The idle closes and `Keep-Alive` timeout of one origin.
#[derive(Debug, Default)]
struct Lessons {
    said: Option<Duration>,
    /// The latest idle closes, newest at `next - 1` (mod [`CLOSES`]).
    closes: [Option<Duration>; CLOSES],
    next: usize,
}

impl Lessons {
    fn closed_after(&mut self, idle: Duration) {
        self.closes[self.next % CLOSES] = Some(idle);
        self.next = (self.next + 1) % CLOSES;
    }

    fn latest(&self) -> Option<Duration> {
        self.closes[(self.next + CLOSES - 1) % CLOSES]
    }

    /// The idle closes that agree with the latest (within an eighth of it:
    /// the same timeout, seen again), as their least and greatest.
    fn agreeing(&self) -> Option<(Duration, Duration)> {
        let latest = self.latest()?;
        let near = |c: &&Duration| c.abs_diff(latest) <= latest / 8;
        let agreeing = self.closes.iter().flatten().filter(near);
        Some(agreeing.fold((latest, latest), |(lo, hi), c| (lo.min(*c), hi.max(*c))))
    }

    /// The server's idle timeout: the least of its idle closes that agree
    /// with the latest (a close is seen late, never early, when the machine
    /// is slow to read it), no later than it said plus [`SAID_SLACK`]; what
    /// it said, before any close.
    fn timeout(&self) -> Option<Duration> {
        match (self.agreeing().map(|(lo, _)| lo), self.said) {
            (Some(seen), Some(said)) => Some(seen.min(said + SAID_SLACK)),
            (seen, said) => seen.or(said),
        }
    }

    /// How far apart those closes fell.
    fn spread(&self) -> Duration {
        self.agreeing().map_or(Duration::ZERO, |(lo, hi)| hi - lo)
    }

    fn retire_before_round_trip(&self) -> Option<Duration> {
        Some(retire_before_round_trip(self.timeout()?, self.spread()))
    }
}

/// The idle age, before the round trip is taken off, at which a connection
/// to a server closing after `timeout` retires: `timeout` less the
/// `spread` of its idle closes and [`MARGIN`] or a 32nd of it, whichever
/// is more (0: retired as soon as it is idle).
fn retire_before_round_trip(timeout: Duration, spread: Duration) -> Duration {
    timeout.saturating_sub(spread + MARGIN.max(timeout / 32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn said(value: &str) -> Said {
        let mut headers = HeaderMap::new();
        headers.insert("keep-alive", value.parse().unwrap());
        Said::read(&headers)
    }

    #[test]
    fn the_keep_alive_header_is_read_as_servers_write_it() {
        assert_eq!(said("timeout=5"), Said { timeout: Some(Duration::from_secs(5)), max: None });
        assert_eq!(
            said("timeout=1, max=100"),
            Said { timeout: Some(Duration::from_secs(1)), max: Some(100) }
        );
        assert_eq!(
            said("Max=0 , Timeout=\"2\""),
            Said { timeout: Some(Duration::from_secs(2)), max: Some(0) }
        );
        assert!(said("max=0").last_request());
        assert_eq!(said("timeout=soon, other=1"), Said::default(), "nothing it can read");
        assert_eq!(Said::read(&HeaderMap::new()), Said::default());
    }

    #[test]
    fn the_latest_idle_close_is_the_timeout_capped_by_what_the_server_said() {
        let us = Duration::from_micros;
        let idle = OriginIdle::default();
        let learned = |rtt| idle.retire_after(IdleTimeout::Learned, rtt);
        let timeout = || idle.snapshot(IdleTimeout::Learned).0;
        assert_eq!(learned(None), None, "nothing known: nothing retires");
        idle.said(Duration::from_secs(1));
        assert_eq!(learned(None), Some(us(1_000_000 - 31_250)), "what it said, less a 32nd of it");
        idle.closed_after(ms(2000));
        assert_eq!(timeout(), Some(ms(2000)), "Node closes a second after it says");
        assert_eq!(learned(None), Some(us(2_000_000 - 62_500)));
        assert_eq!(learned(Some(ms(100))), Some(us(1_900_000 - 62_500)), "the request must arrive in time");
        idle.closed_after(ms(600));
        assert_eq!(timeout(), Some(ms(600)), "a shorter close lowers it at once");
        assert_eq!(learned(None), Some(ms(600 - 25)), "the margin: 25 ms at least");
        idle.closed_after(ms(1400));
        assert_eq!(timeout(), Some(ms(1400)), "a longer one raises it");
        idle.closed_after(ms(1404));
        assert_eq!(timeout(), Some(ms(1400)), "the least of the closes that agree with the latest");
        assert_eq!(learned(None), Some(us(1_400_000 - 4_000 - 43_750)), "less their spread");
        idle.said(ms(300));
        assert_eq!(timeout(), Some(ms(1300)), "capped by what it says now, plus a second");
        assert_eq!(idle.snapshot(IdleTimeout::Learned).1, 4, "four closes seen");
    }

    #[test]
    fn a_known_timeout_or_none_overrides_what_is_learned() {
        let idle = OriginIdle::default();
        idle.closed_after(ms(300));
        let known = IdleTimeout::Known(Duration::from_secs(4));
        assert_eq!(idle.retire_after(known, Some(ms(10))), Some(ms(4000 - 125 - 10)));
        assert_eq!(idle.snapshot(known).0, Some(Duration::from_secs(4)));
        assert_eq!(idle.retire_after(IdleTimeout::Ignored, None), None);
        idle.closed_after(ms(60));
        assert_eq!(idle.retire_after(IdleTimeout::Learned, None), Some(ms(35)), "closes soon after");
        idle.closed_after(ms(3));
        assert_eq!(
            idle.snapshot(IdleTimeout::Learned).0,
            Some(ms(60)),
            "a close right behind a response, or a restart's: not a timeout"
        );
        assert_eq!(idle.snapshot(IdleTimeout::Learned).1, 3, "counted all the same");
    }
}
