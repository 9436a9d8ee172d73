//! HTTP/2: what an early drop does to a stream, when a connection is dialed
//! and when it moves on, and which failed requests may be sent again. Every
//! rule of it lives here, beside the facts from h2, hyper and hyper-util it
//! rests on; the policy, the connector and the retry ask this room and keep
//! no rule of their own.
//!
//! **Drops** (h2 0.4.21 and later, which the `http2` feature requires).
//! Dropping an HTTP/2 body before its end makes h2 send RST_STREAM(CANCEL),
//! unless the whole body had already arrived (the stream is then closed,
//! and nothing is sent): the server stops sending, the stream is freed, the
//! connection is kept. h2 remembers a reset stream for 5 s, up to 8,192 of
//! them on a client that announces no SETTINGS_MAX_CONCURRENT_STREAMS of its
//! own (hyper's and hyper-util's announce none), forgetting the oldest
//! first, and ignores the DATA still arriving for a stream it remembers.
//! (h2 0.4.20 and older remembered 50 for 1 s: resets at once lost
//! requests, hyperium/h2#856.) So a dropped HTTP/2 body is not read at all:
//! it is reset at once, as Go 1.27's client does ([`early_drop`]). A drain
//! would save nothing (the connection is kept either way), and a body read
//! or held to spare a reset holds a stream and its share of the
//! connection's window, and whatever request would wait for either.
//!
//! **Dials** ([`gates`], [`patience`]). hyper-util's pool takes its
//! one-connection lock for HTTP/2 only when the client is `http2_only`;
//! over TLS with ALPN, each request that finds no connection dials its own,
//! and all but the first to negotiate h2 are thrown away after their
//! handshakes (hyperium/hyper#1485): after every connection lost, as many
//! handshakes as requests waiting. Go's transport does the same; undici
//! queues requests behind one probe (nodejs/undici#5799), Go's x/net/http2
//! behind one dial (`dialCall`). The [`Http2Connector`](crate::Http2Connector)
//! dials an origin once at a time while it speaks HTTP/2 (or might: an
//! `https` origin none of whose connections said yet); a connect that finds
//! a dial on its way waits for it, and hyper-util hands its request that
//! dial's connection from its pool. But one dial must not become every
//! caller's fate (hyper-util alone rides through each of these):
//! - a handshake that never ends (a balancer that accepts and never
//!   answers; hyper-rustls bounds no handshake) is raced, after the
//!   origin's [`patience`], by a second attempt, the first going on (RFC
//!   8305's Happy Eyeballs races attempts the same way, from measured round
//!   trips): the first to connect serves everyone, and with `http2_only`,
//!   whose own lock holds every other request behind this dial, the race
//!   is what frees them; those waiting give the race a patience of its own,
//!   then each dials its own, as hyper-util alone would have from the
//!   start;
//! - a dial that fails fails those waiting for it at once, with its error
//!   ([`DialFailed`]): a failing origin fails each caller no later than
//!   its own dial would have, never one after another;
//! - a connect left waiting when the pool could not hand its request that
//!   dial's connection (a client without a pool, or one handed a
//!   connection that closed at that instant) dials its own once that
//!   connection is in use ([`SERVED_GRACE`] later), so its connection is a
//!   real one, with the wrapped connector's extras;
//! - a caller that gives up leaves nothing: its place among the waiters is
//!   given back when its connect is dropped.
//!
//! **Moves** ([`moves_on`], [`Share`], [`punishes`]). Some servers
//! punish a connection for resets. Node's nghttp2 takes 1,000 RST_STREAM
//! frames in a burst, then 33 a second, then sends GOAWAY INTERNAL_ERROR
//! (harmless: what it refused above the last stream id goes again). Node 20
//! also never gives back the session memory it counted for response bytes
//! still queued on a stream the client resets, and a session whose 10 MB
//! are spent refuses every new stream with RST_STREAM ENHANCE_YOUR_CALM (and
//! after some 100 refusals in a row closes the connection). Apache's
//! mod_http2 sends GOAWAY INTERNAL_ERROR after a few thousand. Go's client
//! dials another connection once its resets outrun the server's PING
//! answers. Most servers punish nothing: Go's net/http, nginx, h2o, hyper.
//! So a connection is charged for the resets it actually sent (RST_STREAM
//! frames written on it, counted by the connector), and moves on
//! (hyper-util's `Connected::poison`: no new request goes on it, the ones on
//! it finish) only once its origin's share is spent. The connector reads
//! the frame headers the server sends too: a stream refused with
//! ENHANCE_YOUR_CALM, or a GOAWAY with ENHANCE_YOUR_CALM or INTERNAL_ERROR,
//! after resets, punishes the connection ([`punishes`]): it takes no new
//! request, and its origin learns a share, half the resets it had sent.
//! A lesson is then tested, as TCP probes a congestion window: after
//! [`FIRST_HOLD`] connections moved on at that share unpunished, the next
//! may take twice the resets that were punished; punished again, the
//! lesson holds twice as long before the next probe (a Node session that
//! fills at 14 resets is probed ever more rarely); unpunished, the lesson
//! is forgotten, and the origin keeps one connection again (one refusal
//! for another reason costs a few connections, not one per reset).
//!
//! **Retries** ([`retries`]). A request the server refused before
//! processing it (RFC 9113, 8.7) goes again, whatever its method: one on a
//! stream above the last stream id of a GOAWAY it received (h2 fails those,
//! and any opened after it, with the remote GOAWAY), one reset with
//! REFUSED_STREAM. So does one hyper-util failed before writing a byte of
//! it: a pool checkout handed a connection that closed
//! at that instant, a connect hyper-util cancelled because another took
//! its HTTP/2 lock, a request hyper gave back unsent. Anything else may
//! have been processed: hyper's `is_canceled` (a request that waited for a
//! stream slot is failed so even when h2 sent it after a graceful GOAWAY's
//! first phase), a reason hyper rebuilt without saying who sent it, any
//! other reset (Node's ENHANCE_YOUR_CALM included), a connection that
//! broke. Such a request goes again only if its method is idempotent (RFC
//! 9110, 9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE), sending it twice
//! then being harmless by definition; a POST or PATCH never. A failed
//! connect is not retried. A request goes again at once, and, failing
//! again, after 25 ms, doubling, 6 times at most
//! (Go: 6, the first at once).

#[cfg(feature = "http2")]
mod retries;

#[cfg(feature = "http2")]
use std::time::Duration;

#[cfg(feature = "http2")]
pub(crate) use self::retries::{DialFailed, H2Said, Superseded, h2_failure};

use crate::outcome::Reason;

/// What becomes of an HTTP/2 body dropped before its end, given what its
/// head said (`headers::inspect`: only ever an open-ended stream on
/// HTTP/2): reset at once, unread, counted `stream` if it was one and
/// `reset` otherwise.
pub(crate) fn early_drop(head: Option<Reason>) -> Reason {
    head.unwrap_or(Reason::Reset)
}

/// What an origin's last connection spoke, as far as its connector knows.
#[cfg(feature = "http2")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proto {
    /// No connection said yet.
    Unknown,
    Http1,
    Http2,
}

/// Whether a connect to an origin that spoke `proto` waits while another
/// dial to it is on its way: HTTP/2 (all requests share one connection),
/// or not yet known over TLS, where ALPN may choose HTTP/2 (the first
/// requests to an origin queue behind one dial, as undici's do). HTTP/1
/// needs a connection per request in flight: never.
#[cfg(feature = "http2")]
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
#[cfg(feature = "http2")]
pub(crate) fn patience(handshakes: &[Duration]) -> Duration {
    if handshakes.is_empty() {
        return PATIENCE_UNKNOWN;
    }
    let mut sorted = handshakes.to_vec();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    median.saturating_mul(2).clamp(PATIENCE_FLOOR, PATIENCE_CEILING)
}

/// [`patience`] before any handshake to the origin ended: a TCP and TLS
/// 1.3 handshake (2 round trips) with its name lookup fits across most of
/// the world, and a handshake that never ends is raced after this (RFC
/// 8305's 250 ms is for one TCP attempt: one round trip).
#[cfg(feature = "http2")]
pub(crate) const PATIENCE_UNKNOWN: Duration = Duration::from_millis(500);
/// The least [`patience`]: RFC 8305's default attempt delay. A handshake
/// on loopback takes a millisecond, but tens on a loaded machine: waiting
/// less would dial for nothing.
#[cfg(feature = "http2")]
pub(crate) const PATIENCE_FLOOR: Duration = Duration::from_millis(250);
/// The most [`patience`]: RFC 8305's upper bound.
#[cfg(feature = "http2")]
pub(crate) const PATIENCE_CEILING: Duration = Duration::from_secs(2);
/// How long a connect still waits once the dial it waited for is in use
/// (a request went on its connection), before it dials its own: hyper-util
/// hands a new connection to every request waiting in its pool in one pass
/// under its lock, but the first request handed it may go out before the
/// pass ends (on another thread, or a loaded machine's preempted one). A
/// connect still waiting after this was not among them: its client has no
/// pool, or handed it a connection that closed at that instant.
#[cfg(feature = "http2")]
pub(crate) const SERVED_GRACE: Duration = Duration::from_millis(100);
/// Handshakes [`patience`] looks back on.
#[cfg(feature = "http2")]
pub(crate) const HANDSHAKES_KEPT: usize = 8;

/// Whether a connection that has sent `resets` resets moves on, under its
/// origin's `share` (`0`: no share, never).
#[cfg(feature = "http2")]
pub(crate) fn moves_on(resets: usize, share: usize) -> bool {
    share > 0 && resets >= share
}

/// Whether a frame the server sent punishes the connection for what it
/// did: a stream refused with ENHANCE_YOUR_CALM (Node, its session memory
/// spent), or a GOAWAY with ENHANCE_YOUR_CALM or INTERNAL_ERROR (nghttp2's
/// and Apache's answer to too many resets). A GOAWAY NO_ERROR (a server
/// recycling connections, as nginx's `keepalive_requests`) or
/// REFUSED_STREAM (a stream limit) punishes nothing.
#[cfg(feature = "http2")]
pub(crate) fn punishes(frame: Received) -> bool {
    use h2::Reason as R;
    match frame {
        Received::Reset(code) => code == R::ENHANCE_YOUR_CALM,
        Received::GoAway(code) => matches!(code, R::ENHANCE_YOUR_CALM | R::INTERNAL_ERROR),
    }
}

/// A frame the server sent that may punish a connection (see [`punishes`]).
#[cfg(feature = "http2")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Received {
    /// RST_STREAM with this error code.
    Reset(h2::Reason),
    /// GOAWAY with this error code.
    GoAway(h2::Reason),
}

/// Connections that move on unpunished at a learned share before the next
/// one probes twice the resets that were punished (see [`Share`]).
#[cfg(feature = "http2")]
pub(crate) const FIRST_HOLD: u32 = 3;
/// Times a lesson's hold doubles, at most (3 x 64 connections between
/// probes).
#[cfg(feature = "http2")]
const MOST_CONFIRMED: u32 = 6;

/// An origin's share of resets per connection, as its servers taught it
/// (see the module's Moves): none until a connection is punished; then
/// half the resets that connection had sent, tested by a probe after
/// [`FIRST_HOLD`] unpunished moves, held twice as long each time a probe is
/// punished, forgotten when one is not.
#[cfg(feature = "http2")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Share {
    lesson: Option<Lesson>,
}

#[cfg(feature = "http2")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lesson {
    /// Resets the punished connection had sent.
    bore: usize,
    /// Unpunished moves left before a connection probes.
    hold: u32,
    /// Punishments in a row that found the lesson true.
    confirmed: u32,
}

#[cfg(feature = "http2")]
impl Share {
    /// Resets a connection takes before it moves on (`0`: it does not).
    pub(crate) fn allowance(&self) -> usize {
        match self.lesson {
            None => 0,
            Some(l) if l.hold == 0 => l.bore.saturating_mul(2),
            Some(l) => (l.bore / 2).max(1),
        }
    }

    /// A connection was punished after sending `resets` resets. A
    /// punishment after no reset teaches nothing: moving on would not have
    /// spared it.
    pub(crate) fn punished(&mut self, resets: usize) {
        if resets == 0 {
            return;
        }
        let confirmed = match self.lesson {
            None => 0,
            Some(l) => (l.confirmed + 1).min(MOST_CONFIRMED),
        };
        self.lesson = Some(Lesson { bore: resets, hold: FIRST_HOLD << confirmed, confirmed });
    }

    /// A connection moved on, unpunished so far, after sending `resets`:
    /// one more move at the lesson's share, or, at twice what was punished,
    /// a probe that finds the lesson false.
    pub(crate) fn moved(&mut self, resets: usize) {
        let Some(lesson) = &mut self.lesson else { return };
        if resets >= lesson.bore.saturating_mul(2) {
            self.lesson = None;
        } else {
            lesson.hold = lesson.hold.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_http2_body_is_reset_and_an_open_ended_stream_counted_as_one() {
        assert_eq!(early_drop(None), Reason::Reset);
        assert_eq!(early_drop(Some(Reason::Stream)), Reason::Stream);
    }

    #[cfg(feature = "http2")]
    #[test]
    fn dials_queue_for_http2_and_for_tls_origins_not_yet_heard_never_for_http1() {
        assert!(gates(Proto::Http2, false) && gates(Proto::Http2, true));
        assert!(gates(Proto::Unknown, true));
        assert!(!gates(Proto::Unknown, false), "plain TCP: ALPN cannot pick HTTP/2");
        assert!(!gates(Proto::Http1, true));
    }

    #[cfg(feature = "http2")]
    #[test]
    fn no_connection_moves_until_a_server_punished_then_at_half_what_it_bore() {
        let mut share = Share::default();
        assert_eq!(share.allowance(), 0, "no share: one connection");
        assert!(!moves_on(1_000_000, share.allowance()));
        share.punished(0);
        assert_eq!(share.allowance(), 0, "punished before any reset: moving would not help");
        share.punished(500);
        assert_eq!(share.allowance(), 250);
        assert!(!moves_on(249, 250) && moves_on(250, 250));
        let mut one = Share::default();
        one.punished(1);
        assert_eq!(one.allowance(), 1, "at least one");
    }

    #[cfg(feature = "http2")]
    #[test]
    fn a_lesson_is_probed_after_its_hold_and_forgotten_when_the_probe_goes_unpunished() {
        // One refusal after 2 resets, never again: a few connections, then
        // one connection again.
        let mut share = Share::default();
        share.punished(2);
        let mut connections = Vec::new();
        while share.allowance() > 0 {
            let n = share.allowance();
            connections.push(n);
            share.moved(n);
        }
        assert_eq!(connections, [1, 1, 1, 4], "three moves at the lesson, one probe, then none");
    }

    #[cfg(feature = "http2")]
    #[test]
    fn a_lesson_punished_again_holds_twice_as_long_each_time() {
        // A server that punishes every connection at 20 resets.
        let mut share = Share::default();
        let (mut drops, mut punished, mut holds) = (0, 0, Vec::new());
        share.punished(20);
        punished += 1;
        drops += 20;
        while drops < 2_000 {
            let n = share.allowance();
            if n > 20 {
                share.punished(20);
                punished += 1;
                drops += 20;
                holds.push(share.lesson.unwrap().hold);
            } else {
                share.moved(n);
                drops += n;
            }
        }
        assert_eq!(holds[..4], [6, 12, 24, 48], "each probe punished doubles the hold");
        assert!(punished <= 6, "{punished} connections punished in {drops} drops");
        let mut first_100 = Share::default();
        first_100.punished(20);
        let (mut drops, mut punished) = (20, 1);
        while drops < 100 {
            let n = first_100.allowance();
            if n > 20 {
                first_100.punished(20);
                punished += 1;
                drops += 20;
            } else {
                first_100.moved(n);
                drops += n;
            }
        }
        assert!(punished <= 2, "the review's figure: 100 drops, at most 2 punished: {punished}");
    }

    #[cfg(feature = "http2")]
    #[test]
    fn patience_is_twice_the_median_handshake_within_rfc_8305s_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(patience(&[]), ms(500), "before any handshake");
        assert_eq!(patience(&[ms(2), ms(3), ms(1)]), ms(250), "loopback: the floor");
        assert_eq!(
            patience(&[ms(200), ms(210), ms(5_000), ms(190)]),
            ms(420),
            "one slow one is not the median"
        );
        assert_eq!(patience(&[ms(3_000)]), ms(2_000), "the ceiling");
    }

    #[cfg(feature = "http2")]
    #[test]
    fn only_refusals_for_what_the_connection_did_punish_it() {
        use h2::Reason as R;
        assert!(punishes(Received::Reset(R::ENHANCE_YOUR_CALM)));
        assert!(punishes(Received::GoAway(R::ENHANCE_YOUR_CALM)));
        assert!(punishes(Received::GoAway(R::INTERNAL_ERROR)));
        assert!(!punishes(Received::GoAway(R::NO_ERROR)), "a server recycling connections");
        assert!(!punishes(Received::Reset(R::REFUSED_STREAM)), "a stream limit");
        assert!(!punishes(Received::Reset(R::CANCEL)));
    }
}
