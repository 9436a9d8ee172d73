//! HTTP/2: what an early drop does to a stream, and which failed requests
//! the server never processed (so that they may be sent again). Every rule
//! of it lives here, beside the facts from h2 and hyper it rests on; the
//! policy and the retry ask this room and keep no HTTP/2 state of their
//! own.
//!
//! **The facts** (h2 0.4.21 and later, which the `http2` feature
//! requires). Dropping an HTTP/2 body before its end makes h2 send
//! RST_STREAM(CANCEL), unless the whole body had already arrived (the
//! stream is then closed, and nothing is sent): the server stops sending,
//! the stream is freed, the connection is kept. h2 remembers a reset
//! stream for 5 s, up to 8,192 of them on a client that announces no
//! SETTINGS_MAX_CONCURRENT_STREAMS of its own (hyper's and hyper-util's
//! clients announce none; else twice that setting, at least 50), forgetting
//! the oldest first, and ignores the DATA still arriving for a stream it
//! remembers (its flow-control credit is given back to the connection).
//! Only DATA for a stream it forgot counts against the connection (GOAWAY
//! `too_many_internal_resets` past 1,024: hyperium/h2#856): with that
//! memory, that takes more than 1,600 resets a second on one connection,
//! each answered with DATA more than 5 s late. (h2 0.4.20 and older
//! remembered 50 for 1 s and did not evict: the same drops lost requests
//! there, which the `http2` feature's requirement rules out.)
//!
//! **The rule.** A dropped HTTP/2 body is not read at all: its stream is
//! reset at once, as Go 1.27's client does ([`early_drop`]). On HTTP/2 a
//! drain saves nothing (the connection is kept either way), and a body read
//! or held to spare a reset holds a stream, its share of the connection's
//! flow-control window, and whatever request would wait for either. So no
//! request waits for a drain, and no stream is held: an open-ended stream
//! ([`stream_content_types`](crate::DrainOnDropLayer::stream_content_types),
//! gRPC) is counted `stream`, any other body `reset`; both read nothing.
//!
//! **Servers that punish resets.** Node's nghttp2 takes at most 1,000
//! RST_STREAM frames per connection in a burst, then 33 a second, and past
//! that sends GOAWAY INTERNAL_ERROR; Node 20 also never gives back the
//! session memory it counted for response bytes still queued on a stream
//! the client resets, and a session whose 10 MB are spent refuses new
//! streams with ENHANCE_YOUR_CALM, a refusal no client may take as
//! unprocessed. Go's client keeps its resets within what the server has
//! seen (a reset stream counts against the stream limit until a PING sent
//! with it is answered, past which it dials another connection: on Node,
//! one per some 70 drops). The layer sees no PING; it keeps each
//! connection's resets within a share instead ([`Resets`]): once an
//! origin's streams were reset [`RESETS_PER_CONNECTION`] times, the
//! connection of the next response takes no new request (hyper-util's
//! `Connected::poison`, reached through `capture_connection`): hyper-util
//! dials another, and the old one ends when its open streams do. 250, a
//! quarter of nghttp2's burst: at 500, 64 callers dropping 1 MiB bodies
//! filled a Node session (14 of 2,000 refused, h2c); at 250, none in every
//! run measured. Elsewhere a handshake per 250 drops costs nothing
//! measurable; over TLS with ALPN and no `http2_only`, hyper-util dials
//! one for each request waiting until one has negotiated h2 (as it does
//! for a first connection), and keeps one. Only hyper-util's `Client` can
//! be told so; hyper's own connections and tonic's `Channel` keep theirs.
//! What a server refuses past its limit anyway it never processed, and
//! [`RetryRefused`](crate::RetryRefused) sends it again on another
//! connection ([`never_processed`]); nginx's graceful GOAWAY after
//! `keepalive_requests` is retried the same way.
//!
//! **What may be sent again** ([`never_processed`]): a request the server
//! refused before processing it (RFC 9113, 8.7): one on a stream above the
//! last stream id of a GOAWAY it received (h2 fails those, and every
//! request sent on the connection after it, with the remote GOAWAY), or
//! reset with REFUSED_STREAM; and one hyper says was never sent
//! (`hyper::Error::is_canceled`: the connection closed before the request
//! was written, or while it waited for a stream). Never one the server may
//! have processed: a stream the connection lost at or below the GOAWAY's
//! last stream id, reset with any other code (Node's ENHANCE_YOUR_CALM
//! included), or cut off by a broken connection. A refused request goes
//! again at once, and, refused again, after [`FIRST_DELAY`], doubling,
//! [`MAX_RETRIES`] times at most (Go: 6, the first at once, then 1 s,
//! doubling).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(feature = "http2")]
use std::time::Duration;

use http::Request;
use hyper_util::client::legacy::connect::{CaptureConnection, capture_connection};

use crate::outcome::Reason;

/// What becomes of an HTTP/2 body dropped before its end, given what its
/// head said (`headers::inspect`: only ever an open-ended stream on
/// HTTP/2): reset at once, unread, counted `stream` if it was one and
/// `reset` otherwise. The reset counts towards its origin's connection's
/// share (`resets_per_connection`, see [`Resets`]).
pub(crate) fn early_drop(
    head: Option<Reason>,
    resets: Option<&Resets>,
    resets_per_connection: usize,
) -> Reason {
    if let Some(resets) = resets {
        resets.count(resets_per_connection);
    }
    head.unwrap_or(Reason::Reset)
}

/// Stream resets an HTTP/2 connection takes from early drops before it
/// takes no new request, unless set otherwise
/// (`DrainOnDropLayer::http2_resets_per_connection`): a quarter of the
/// 1,000 RST_STREAM frames nghttp2 takes in a burst (see the module's
/// docs for why not half).
pub(crate) const RESETS_PER_CONNECTION: usize = 250;

/// One origin's early-drop resets since its HTTP/2 connection last moved
/// on. hyper-util's pool keeps one HTTP/2 connection per origin, so an
/// origin's count is its connection's (when two are open for a moment, the
/// count is the sum, and the move comes early: one handshake sooner).
/// Atomics only: counted in the drop, which takes no lock.
#[derive(Debug, Default)]
pub(crate) struct Resets {
    since_move: AtomicUsize,
    /// The share is spent: the next request's connection is to move on.
    move_on: AtomicBool,
}

impl Resets {
    /// An early drop reset one of the origin's streams: past `share` (`0`:
    /// never), the connection is to take no new request.
    fn count(&self, share: usize) {
        if share == 0 {
            return;
        }
        if self.since_move.fetch_add(1, Ordering::Relaxed) + 1 >= share {
            self.since_move.store(0, Ordering::Relaxed);
            self.move_on.store(true, Ordering::Relaxed);
        }
    }

    /// At the request's `call`: once the share is spent, asks hyper-util's
    /// `Client` which connection the request goes on (an allocation, for
    /// that request only).
    pub(crate) fn capture<B>(&self, req: &mut Request<B>) -> Option<CaptureConnection> {
        self.move_on.load(Ordering::Relaxed).then(|| capture_connection(req))
    }

    /// At the response head of a request [`capture`](Self::capture)d: its
    /// connection, the one the resets went to (or a newer one), takes no
    /// new request. Once: the first such response clears the mark, even
    /// when no connection was told (a service other than hyper-util's
    /// `Client`, which fills in none: nothing can move there).
    pub(crate) fn move_on(&self, captured: &CaptureConnection) {
        if self.move_on.swap(false, Ordering::Relaxed)
            && let Some(connection) = captured.connection_metadata().as_ref()
        {
            connection.poison();
        }
    }
}

/// Retries of a refused request, at most, unless set otherwise (Go's
/// `RoundTrip` retries 6 times).
#[cfg(feature = "http2")]
pub(crate) const MAX_RETRIES: usize = 6;

/// How long a request refused more than once waits before its next try:
/// the first retry goes at once (the refusing connection is gone: another
/// is taken from the pool or dialed), the second after this, and each
/// later one after twice the wait before: with [`MAX_RETRIES`], about
/// 0.8 s in all. A server that refuses again and again is shedding load;
/// a request that hammers it gains nothing.
#[cfg(feature = "http2")]
pub(crate) const FIRST_DELAY: Duration = Duration::from_millis(25);

/// The wait before retry number `retry` (1 for the first).
#[cfg(feature = "http2")]
pub(crate) fn retry_delay(retry: usize) -> Duration {
    match retry {
        0 | 1 => Duration::ZERO,
        n => FIRST_DELAY.saturating_mul(1 << (n - 2).min(16)),
    }
}

/// Whether a request that failed with `error` was never processed by the
/// server (see the module's docs): the errors of its cause chain are
/// looked at, h2's and hyper's wherever they sit in it (hyper-util's and
/// tonic's errors wrap them).
#[cfg(feature = "http2")]
pub(crate) fn never_processed(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(h2) = error.downcast_ref::<h2::Error>() {
            // h2 fails a stream with the peer's GOAWAY only when its id is
            // above the GOAWAY's last stream id, or when it was opened
            // after the GOAWAY arrived (`Streams::recv_go_away`).
            let above_last_stream = h2.is_go_away() && h2.is_remote();
            let refused = h2.is_reset() && h2.is_remote() && h2.reason() == Some(h2::Reason::REFUSED_STREAM);
            return above_last_stream || refused;
        }
        if error.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_canceled) {
            // "A pending item was dropped before ever being processed."
            return true;
        }
        next = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "http2")]
    #[test]
    fn the_first_retry_goes_at_once_then_each_waits_twice_as_long() {
        let ms = Duration::from_millis;
        let waits: Vec<Duration> = (1..=MAX_RETRIES).map(retry_delay).collect();
        assert_eq!(waits, [ms(0), ms(25), ms(50), ms(100), ms(200), ms(400)]);
        assert!(retry_delay(usize::MAX) < Duration::from_secs(3600), "bounded");
    }

    #[test]
    fn a_dropped_http2_body_is_reset_and_an_open_ended_stream_counted_as_one() {
        assert_eq!(early_drop(None, None, RESETS_PER_CONNECTION), Reason::Reset);
        assert_eq!(early_drop(Some(Reason::Stream), None, RESETS_PER_CONNECTION), Reason::Stream);
    }

    #[test]
    fn a_connection_moves_on_once_per_share_of_resets_and_never_with_a_share_of_0() {
        let resets = Resets::default();
        let mut req = Request::new(());
        for _ in 0..2 {
            resets.count(3);
            assert!(resets.capture(&mut req).is_none(), "within the share");
        }
        resets.count(3);
        let captured = resets.capture(&mut req).expect("the share is spent");
        resets.move_on(&captured);
        assert!(resets.capture(&mut req).is_none(), "moved on once; counting again");
        let off = Resets::default();
        for _ in 0..10_000 {
            off.count(0);
        }
        assert!(off.capture(&mut req).is_none());
    }

    #[cfg(feature = "http2")]
    #[test]
    fn only_what_the_server_never_processed_counts_as_refused() {
        use std::io;
        let refused = h2::Error::from(h2::Reason::REFUSED_STREAM);
        // A reason alone (h2's `From<Reason>`) says nothing of who sent it.
        assert!(!never_processed(&refused), "not a reset received from the server");
        // What the server refused, or may have processed, on real sockets:
        // tests/retry.rs.
        let other = io::Error::other("no h2 or hyper error in the chain");
        assert!(!never_processed(&other));
    }
}
