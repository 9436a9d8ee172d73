//! HTTP/2's rules for dials (see the room's Dials): when a connect waits
//! for another's dial, how long, when a second attempt races it, who a
//! failed attempt fails, and when a connection's streams are all taken.

use std::time::{Duration, Instant};

use super::Proto;

/// Whether a connect to an origin that spoke `proto` waits while another
/// dial to it is on its way: HTTP/2 (all requests share one connection),
/// or not yet known over TLS, where ALPN may choose HTTP/2 (the first
/// requests to an origin queue behind one dial, as undici's do). HTTP/1
/// needs a connection per request in flight: never.
pub(crate) fn gates(proto: Proto, https: bool) -> bool {
    match proto {
        Proto::Http2 => true,
        Proto::Unknown => https,
        Proto::Http1 => false,
    }
}

/// How long a dial goes before a second attempt races it, and how long,
/// twice that, a connect waits for another's dial to its origin before it
/// dials its own, unless the user fixed it: twice the median of the
/// origin's last handshakes (`handshakes`, the connector's call to its
/// connection, most recent last), within [`PATIENCE_FLOOR`] and
/// [`PATIENCE_CEILING`]; [`PATIENCE_UNKNOWN`] before any handshake ended.
/// Twice the median: a dial that takes that long is no longer a dial like
/// the others (RFC 8305 bases its attempt delay on measured round trips
/// the same way, within 10 ms and 2 s, 250 ms by default).
pub(crate) fn patience(handshakes: &[Duration]) -> Duration {
    if handshakes.is_empty() {
        return PATIENCE_UNKNOWN;
    }
    let mut sorted = handshakes.to_vec();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    median.saturating_mul(2).clamp(PATIENCE_FLOOR, PATIENCE_CEILING)
}

/// When a dial that began at `started` races a second attempt: after
/// `patience` when some connect besides the one that started it waits for
/// it, else after [`LONE_RACE`] (or the patience, if longer). A dial
/// nobody else waits for is raced only so late because hyper-util's own
/// HTTP/2 lock (`http2_only`) may hold requests the connector cannot see
/// behind it; a lone dial that ends before that costs one connection, as
/// hyper-util alone's does.
pub(crate) fn race_at(started: Instant, patience: Duration, someone_waits: bool) -> Instant {
    started + if someone_waits { patience } else { patience.max(LONE_RACE) }
}

/// When a dial nobody else waits for races a second attempt (see
/// [`race_at`]): RFC 8305's upper bound on its attempt delay.
pub(crate) const LONE_RACE: Duration = PATIENCE_CEILING;

/// Whether a connect that joined a dial at `arrived` goes on waiting once
/// one of the dial's attempts failed after `took`, `running` the attempts
/// still on their way (when each began, how long it has run). hyper-util
/// alone would have dialed for it when it arrived, and (the same origin,
/// the same fault) failed `took` later: an attempt that began no later
/// than that and has not yet run `took` may still serve it sooner; any
/// other attempt could not (it began after, or has already outlasted the
/// fault), so it fails at once with the failure, as its own dial would
/// have.
pub(crate) fn waits_after_failure(arrived: Instant, took: Duration, running: &[(Instant, Duration)]) -> bool {
    running.iter().any(|&(began, ran)| began <= arrived && ran < took)
}

/// [`patience`] before any handshake to the origin ended: a TCP and TLS
/// 1.3 handshake (2 round trips) with its name lookup fits across most of
/// the world, and a handshake that never ends is raced after this (RFC
/// 8305's 250 ms is for one TCP attempt: one round trip).
pub(crate) const PATIENCE_UNKNOWN: Duration = Duration::from_millis(500);
/// The least [`patience`]: RFC 8305's default attempt delay. A handshake
/// on loopback takes a millisecond, but tens on a loaded machine: waiting
/// less would dial for nothing.
pub(crate) const PATIENCE_FLOOR: Duration = Duration::from_millis(250);
/// The most [`patience`]: RFC 8305's upper bound.
pub(crate) const PATIENCE_CEILING: Duration = Duration::from_secs(2);
/// How long a connect still waits once the dial it waited for is in use
/// (a request went on its connection), before it dials its own: hyper-util
/// hands a new connection to every request waiting in its pool in one pass
/// under its lock, but the first request handed it may go out before the
/// pass ends (on another thread, or a loaded machine's preempted one). A
/// connect still waiting after this was not among them: its client has no
/// pool, or handed it a connection that closed at that instant.
pub(crate) const SERVED_GRACE: Duration = Duration::from_millis(100);
/// How long a connection that moved on unpunished still reads what its
/// server says once hyper closes it (or until the server closes): a
/// punishment of its last resets (a GOAWAY ENHANCE_YOUR_CALM sent as they
/// arrive) comes a round trip after them, when hyper no longer reads.
/// [`PATIENCE_FLOOR`]: what a loaded machine may add to a round trip.
pub(crate) const LINGER: Duration = PATIENCE_FLOOR;
/// Handshakes [`patience`] looks back on.
pub(crate) const HANDSHAKES_KEPT: usize = 8;

/// Whether a connection whose server lets it have `limit` streams open at
/// once is full: `busy` of them are taken (streams in flight, and requests
/// hyper-util's pool handed it not yet sent). hyper-util's pool puts every
/// HTTP/2 request to an origin on its one pooled connection, and h2 queues
/// the streams above the limit on it (hyperium/hyper#3173, #3623): a
/// connection moved on when full sends the next request to a new one, as
/// Go's client opens another connection when every stream of its
/// connections is taken (`StrictMaxConcurrentStreams` off, its default).
/// Unlike Go's, a connection moved on takes no request again (hyper-util's
/// pool keeps one HTTP/2 connection per origin, and gives up one that took
/// no request): under load above the limit, one new connection per `limit`
/// requests or so.
pub(crate) fn fills(busy: usize, limit: usize) -> bool {
    limit > 0 && busy >= limit
}

/// The most HTTP/2 connections an origin has open at once for streams its
/// server's limit does not let one carry, unless the user sets it: 16
/// connections of nginx's 128 streams carry 2,048 requests at once.
pub(crate) const MAX_CONNECTIONS: usize = 16;
