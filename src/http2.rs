//! HTTP/2: why an early drop is drained there too, and how resets are
//! paced.
//!
//! Dropping an HTTP/2 body before its end makes hyper's h2 client send
//! RST_STREAM(CANCEL) and remember the stream as reset for 1 s, at most 50
//! streams (h2's `DEFAULT_RESET_STREAM_SECS`, `DEFAULT_RESET_STREAM_MAX`).
//! DATA that arrives later for a stream it no longer remembers is answered
//! with a reset of h2's own, which h2 counts against the connection, never
//! forgetting; past 1,024 the client sends GOAWAY ENHANCE_YOUR_CALM
//! "too_many_internal_resets" and every request in flight on the
//! connection fails. With bodies in flight, a connection that resets more
//! than 50 streams in a second forgets streams whose DATA is still coming.
//!
//! So the layer drains HTTP/2 bodies as it does HTTP/1 ones, and a stream
//! then ends normally; and every reset it causes itself (a body it does
//! not drain, a drain that gives up) is paced: at most
//! [`RESETS_PER_SECOND`] per origin in any second, well under the 50 h2
//! remembers. A reset past the pace is not sent: the drain goes on, past
//! its budget, to the end of the body, or for at most [`PACED_MAX_TIME`].
//!
//! The budgets are HTTP/1's. Past them, only resets save bytes, and at most
//! 25 a second per connection: a client that drops many large bodies a
//! second reads nearly all of them, as if it read them itself (hyper's
//! stream window is 2 MiB: a body that fits it is on its way whatever the
//! client does). A drain holds one stream of the connection, never the
//! connection; the server's `SETTINGS_MAX_CONCURRENT_STREAMS` bounds the
//! streams drains and callers hold together (hyper queues new requests
//! until one frees, as it does for callers that read their bodies), and
//! `max_concurrent_drains` bounds the drains.

use std::time::{Duration, Instant};

/// A client whose HTTP/2 connections' reset memory can be set: how many
/// streams each connection remembers after resetting them (h2's
/// `max_concurrent_reset_streams`, 50 by default). See
/// [`DrainOnDropLayer::http2_reset_memory`](crate::DrainOnDropLayer::http2_reset_memory),
/// which sets it on the client and in the layer in one call.
///
/// Implemented for hyper-util's legacy `Client` builder and hyper's
/// `client::conn::http2::Builder` (cargo feature `http2`), and for any
/// `FnMut(usize)` closure, for a client built otherwise (tonic's
/// `Endpoint::http2_max_concurrent_reset_streams`).
pub trait ResetMemory {
    /// Sets how many locally reset streams each HTTP/2 connection of the
    /// client remembers.
    fn set_reset_memory(&mut self, streams: usize);
}

#[cfg(feature = "http2")]
impl ResetMemory for hyper_util::client::legacy::Builder {
    fn set_reset_memory(&mut self, streams: usize) {
        self.http2_max_concurrent_reset_streams(streams);
    }
}

#[cfg(feature = "http2")]
impl<E: Clone> ResetMemory for hyper::client::conn::http2::Builder<E> {
    fn set_reset_memory(&mut self, streams: usize) {
        self.max_concurrent_reset_streams(streams);
    }
}

impl<F: FnMut(usize)> ResetMemory for F {
    fn set_reset_memory(&mut self, streams: usize) {
        self(streams)
    }
}

/// How many reset streams h2 remembers per connection unless told
/// otherwise (h2's `DEFAULT_RESET_STREAM_MAX`).
pub(crate) const H2_RESET_MEMORY: usize = 50;

/// Resets the layer lets an origin's connection send in any [`RESET_WINDOW`]:
/// half the 50 reset streams h2 remembers for 1 s. h2 expires remembered
/// streams only when its connection task runs next, a little after their
/// second, so at K a second it may hold up to 2K at once: 25 never
/// overflows (measured: 32 a second let 2 late frames through at 1 MiB and
/// 64 callers, 40 let 11).
pub(crate) const RESETS_PER_SECOND: usize = 25;
/// The window the pace counts resets in: h2 remembers a reset stream this
/// long.
const RESET_WINDOW: Duration = Duration::from_secs(1);
/// How long a drain goes on past its budget when its reset was refused: a
/// body that ends does so well before (the server's concurrent-stream
/// limit slows the callers down meanwhile); one that never ends (a server
/// that stalls, an endless stream not listed as one) is reset then, as a
/// reset the pace could not defer.
pub(crate) const PACED_MAX_TIME: Duration = Duration::from_secs(30);

/// The last resets of one origin's streams, to keep them under
/// [`RESETS_PER_SECOND`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ResetPace {
    /// When the last resets were let through, a ring.
    at: [Option<Instant>; RESETS_PER_SECOND],
    next: usize,
}

impl ResetPace {
    /// Lets a reset through `now` if fewer than [`RESETS_PER_SECOND`] were
    /// in the last [`RESET_WINDOW`] (and notes it), or refuses it.
    pub(crate) fn try_reset(&mut self, now: Instant) -> bool {
        if self.at[self.next].is_some_and(|at| now.saturating_duration_since(at) < RESET_WINDOW) {
            return false;
        }
        self.note(now);
        true
    }

    /// Notes a reset that happens `now` whatever the pace (one the layer
    /// cannot defer).
    pub(crate) fn note(&mut self, now: Instant) {
        self.at[self.next] = Some(now);
        self.next = (self.next + 1) % RESETS_PER_SECOND;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_the_pace_of_resets_goes_through_in_any_second() {
        let t0 = Instant::now();
        let mut pace = ResetPace::default();
        let ms = Duration::from_millis;
        let through = (0..100).filter(|i| pace.try_reset(t0 + ms(*i))).count();
        assert_eq!(through, RESETS_PER_SECOND, "within one second");
        assert!(!pace.try_reset(t0 + ms(999)), "still the same second for the first one");
        assert!(pace.try_reset(t0 + ms(1000)), "the first one's second is over");
        assert!(!pace.try_reset(t0 + ms(1000)), "and only it");
        let later = t0 + Duration::from_secs(5);
        assert_eq!((0..100).filter(|_| pace.try_reset(later)).count(), RESETS_PER_SECOND);
    }
}
