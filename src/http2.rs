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
//! **Dials** ([`gates`]). hyper-util's pool takes its one-connection lock
//! for HTTP/2 only when the client is `http2_only`; over TLS with ALPN, each
//! request that finds no connection dials its own, and all but the first to
//! negotiate h2 are thrown away after their handshakes (hyperium/hyper#1485):
//! after every connection lost, as many handshakes as requests waiting.
//! Go's transport does the same; undici queues requests behind one probe
//! (nodejs/undici#5799). The [`Http2Connector`](crate::Http2Connector)
//! dials an origin once at a time while it speaks HTTP/2 (or might: an
//! `https` origin none of whose connections said yet); the others wait for
//! that dial and get its connection from hyper-util's pool.
//!
//! **Moves** ([`moves_on`], [`learned_share`], [`punishment`]). Some servers
//! punish a connection for resets. Node's nghttp2 takes 1,000 RST_STREAM
//! frames in a burst, then 33 a second, then sends GOAWAY INTERNAL_ERROR
//! (harmless: what it refused above the last stream id goes again). Node 20
//! also never gives back the session memory it counted for response bytes
//! still queued on a stream the client resets, and a session whose 10 MB
//! are spent refuses every new stream with RST_STREAM ENHANCE_YOUR_CALM (and
//! after some 100 refusals in a row closes the connection). Go's client
//! dials another connection once its resets outrun the server's PING
//! answers. Most servers punish nothing: Go's net/http, nginx, hyper. So a
//! connection is charged for the resets it actually sent (RST_STREAM frames
//! written on it, counted by the connector), and moves on (hyper-util's
//! `Connected::poison`: no new request goes on it, the ones on it finish)
//! only once its origin's share is spent; an origin has no share until one
//! of its servers refused a stream with ENHANCE_YOUR_CALM or went away with
//! an error after resets. The share is then half the resets that connection
//! had taken, and a connection that draws a refusal takes no new stream.
//! Until the first refusal every origin keeps one connection; after it, a
//! Node origin moves on before its session fills.
//!
//! **Retries** ([`after_failure`]). A request the server refused before
//! processing it (RFC 9113, 8.7) goes again, whatever its method: one on a
//! stream above the last stream id of a GOAWAY it received (h2 fails those,
//! and any opened after it, with the remote GOAWAY), one reset with
//! REFUSED_STREAM, one that never left because its connection was another's
//! (the connector's). Anything else may have been processed: hyper's
//! `is_canceled` (a request that waited for a stream slot is failed so even
//! when h2 sent it after a graceful GOAWAY's first phase), a reason hyper
//! rebuilt without saying who sent it, any other reset (Node's
//! ENHANCE_YOUR_CALM included), a connection that broke. Such a request goes
//! again only if its method is idempotent (RFC 9110, 9.2.2: GET, HEAD,
//! OPTIONS, TRACE, PUT, DELETE), sending it twice then being harmless by
//! definition; a POST or PATCH never. A failed connect is not retried. A
//! request goes again at once, and, failing again, after [`FIRST_DELAY`],
//! doubling, [`MAX_RETRIES`] times at most (Go: 6, the first at once).

#[cfg(feature = "http2")]
use std::time::Duration;

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

/// Whether a connection that has sent `resets` resets moves on, under its
/// origin's `share` (`0`: no share, never).
#[cfg(feature = "http2")]
pub(crate) fn moves_on(resets: usize, share: usize) -> bool {
    share > 0 && resets >= share
}

/// The share an origin learns when one of its connections is refused after
/// `resets` resets: half of them (a session that filled at `resets` is
/// left half empty), never more than it had (`share`, `0` if none), at
/// least 1. A refusal after no reset teaches nothing: moving would not have
/// helped.
#[cfg(feature = "http2")]
pub(crate) fn learned_share(share: usize, resets: usize) -> usize {
    if resets == 0 {
        return share;
    }
    let learned = (resets / 2).max(1);
    if share == 0 { learned } else { share.min(learned) }
}

/// Retries of a failed request, at most, unless set otherwise (Go's
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

/// Whether a failed request may go again.
#[cfg(feature = "http2")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// The server never processed it: any method.
    Unprocessed,
    /// It may have been processed: only an idempotent method.
    IfIdempotent,
    /// Not a failure a retry mends.
    Never,
}

#[cfg(feature = "http2")]
impl Retry {
    /// Whether a request with `method` goes again after this.
    pub(crate) fn allows(self, method: &http::Method) -> bool {
        match self {
            Retry::Unprocessed => true,
            Retry::IfIdempotent => is_idempotent(method),
            Retry::Never => false,
        }
    }
}

/// RFC 9110, 9.2.2: the methods for which several identical requests have
/// the effect of one.
#[cfg(feature = "http2")]
pub(crate) fn is_idempotent(method: &http::Method) -> bool {
    use http::Method;
    [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE, Method::PUT, Method::DELETE].contains(method)
}

/// What a failed request's error says (see the module's docs): whether it
/// may go again, and whether the server punished its connection.
#[cfg(feature = "http2")]
#[derive(Debug)]
pub(crate) struct Failure<'a> {
    pub(crate) retry: Retry,
    /// The connection a server refused a stream on for what the connection
    /// did (ENHANCE_YOUR_CALM, or an error GOAWAY): it is to take no new
    /// request, and its origin learns a share.
    pub(crate) punished: Option<&'a hyper_util::client::legacy::connect::Connected>,
}

/// Reads a failed request's error: the errors of its cause chain, h2's,
/// hyper's, hyper-util's and std's I/O errors wherever they sit in it
/// (tonic's errors wrap them too).
#[cfg(feature = "http2")]
pub(crate) fn after_failure<'a>(error: &'a (dyn std::error::Error + 'static)) -> Failure<'a> {
    let mut connected = None;
    let mut connect = false;
    let mut next = Some(error);
    let retry = loop {
        let Some(error) = next else { break Retry::Never };
        if let Some(client) = error.downcast_ref::<hyper_util::client::legacy::Error>() {
            connected = connected.or(client.connect_info());
            connect |= client.is_connect();
        } else if let Some(h2) = error.downcast_ref::<h2::Error>() {
            let (retry, punishing) = h2_failure(h2);
            let punished = if punishing { connected } else { None };
            return Failure { retry, punished };
        } else if let Some(hyper) = error.downcast_ref::<hyper::Error>() {
            if hyper.is_user() || hyper.is_parse() {
                break Retry::Never;
            }
            if hyper.is_canceled() || hyper.is_closed() || hyper.is_incomplete_message() || hyper.is_timeout()
            {
                break if connect { Retry::Never } else { Retry::IfIdempotent };
            }
        } else if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if io.get_ref().is_some_and(|inner| inner.is::<Superseded>()) {
                break Retry::Unprocessed;
            }
            break if connect { Retry::Never } else { Retry::IfIdempotent };
        } else if error.is::<Superseded>() {
            break Retry::Unprocessed;
        }
        next = error.source();
    };
    Failure { retry, punished: None }
}

/// An h2 error: whether it was refused unprocessed, and whether it punishes
/// the connection.
#[cfg(feature = "http2")]
fn h2_failure(h2: &h2::Error) -> (Retry, bool) {
    use h2::Reason as R;
    let remote = h2.is_remote();
    if h2.is_go_away() && remote {
        // Above the last stream id, or opened after the GOAWAY arrived
        // (`Streams::recv_go_away`): never processed.
        let punishing = matches!(h2.reason(), Some(R::ENHANCE_YOUR_CALM | R::INTERNAL_ERROR));
        return (Retry::Unprocessed, punishing);
    }
    if h2.is_reset() && remote {
        return match h2.reason() {
            Some(R::REFUSED_STREAM) => (Retry::Unprocessed, false),
            Some(R::ENHANCE_YOUR_CALM) => (Retry::IfIdempotent, true),
            _ => (Retry::IfIdempotent, false),
        };
    }
    // hyper's rebuilt reasons (`h2::Error::from(Reason)`: who sent it is
    // lost), local resets and connection errors, I/O: the stream may have
    // been sent.
    let failed = h2.reason().is_some() || h2.is_io();
    (if failed { Retry::IfIdempotent } else { Retry::Never }, false)
}

#[cfg(feature = "http2")]
/// The error of a connection hyper-util did not need: it stood in for
/// another dial to its origin (the connector's `Lazy`), and that dial's
/// connection took its place. Nothing was sent on it: `RetryRefused` sends again a
/// request that ever fails with it.
#[derive(Debug)]
pub(crate) struct Superseded;

#[cfg(feature = "http2")]
impl std::fmt::Display for Superseded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection not needed: another one to its origin was set up for HTTP/2")
    }
}

#[cfg(feature = "http2")]
impl std::error::Error for Superseded {}

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
    fn no_connection_moves_until_a_server_refused_then_at_half_what_it_bore() {
        assert!(!moves_on(1_000_000, 0), "no share: one connection");
        assert_eq!(learned_share(0, 500), 250);
        assert_eq!(learned_share(250, 1_000), 250, "never more than it was");
        assert_eq!(learned_share(250, 100), 50);
        assert_eq!(learned_share(0, 1), 1);
        assert_eq!(learned_share(0, 0), 0, "refused before any reset: moving would not help");
        assert!(!moves_on(249, 250) && moves_on(250, 250));
    }

    #[cfg(feature = "http2")]
    #[test]
    fn only_what_the_server_never_processed_goes_again_whatever_the_method() {
        use http::Method;
        use std::io;
        let rebuilt = h2::Error::from(h2::Reason::REFUSED_STREAM);
        let failure = after_failure(&rebuilt);
        assert_eq!(failure.retry, Retry::IfIdempotent, "a reason alone says nothing of who sent it");
        assert!(failure.retry.allows(&Method::GET) && !failure.retry.allows(&Method::POST));
        let broken = io::Error::from(io::ErrorKind::BrokenPipe);
        assert_eq!(after_failure(&broken).retry, Retry::IfIdempotent);
        let superseded = io::Error::other(Superseded);
        assert_eq!(after_failure(&superseded).retry, Retry::Unprocessed, "never left");
        let other = std::fmt::Error;
        assert_eq!(after_failure(&other).retry, Retry::Never, "not a transport's error");
        for m in ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"] {
            assert!(is_idempotent(&m.parse().unwrap()), "{m}");
        }
        for m in ["POST", "PATCH", "CONNECT"] {
            assert!(!is_idempotent(&m.parse().unwrap()), "{m}");
        }
    }
}
