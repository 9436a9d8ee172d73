//! Which failed requests go again, and the errors the connector makes
//! that the retry reads (see the room's Retries).

use std::time::Duration;

/// Retries of a failed request, at most, unless set otherwise (Go's
/// `RoundTrip` retries 6 times).
pub(crate) const MAX_RETRIES: usize = 6;

/// How long a request refused more than once waits before its next try:
/// the first retry goes at once (the refusing connection is gone: another
/// is taken from the pool or dialed), the second after this, and each
/// later one after twice the wait before: with [`MAX_RETRIES`], about
/// 0.8 s in all. A server that refuses again and again is shedding load;
/// a request that hammers it gains nothing.
pub(crate) const FIRST_DELAY: Duration = Duration::from_millis(25);

/// The wait before retry number `retry` (1 for the first).
pub(crate) fn retry_delay(retry: usize) -> Duration {
    match retry {
        0 | 1 => Duration::ZERO,
        n => FIRST_DELAY.saturating_mul(1 << (n - 2).min(16)),
    }
}

/// Whether a failed request may go again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// The server never processed it: any method.
    Unprocessed,
    /// It may have been processed: only an idempotent method.
    IfIdempotent,
    /// Not a failure a retry mends.
    Never,
}

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
pub(crate) fn is_idempotent(method: &http::Method) -> bool {
    use http::Method;
    [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE, Method::PUT, Method::DELETE].contains(method)
}

/// What a failed request's error says (see the module's docs): whether it
/// may go again, and whether the server punished its connection.
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
pub(crate) fn after_failure<'a>(error: &'a (dyn std::error::Error + 'static)) -> Failure<'a> {
    let mut connected = None;
    let mut connect = false;
    let mut next = Some(error);
    let retry = loop {
        let Some(error) = next else { break Retry::Never };
        if let Some(client) = error.downcast_ref::<hyper_util::client::legacy::Error>() {
            if never_written(client) {
                break Retry::Unprocessed;
            }
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

/// Whether hyper-util failed a request before writing a byte of it, for a
/// reason of its pool's rather than the server's or the connector's:
/// - a `Connect` error from its pool: a checkout handed a connection that
///   closed at that instant ("checked out connection was closed"), or
///   whose wait ended because the dial it waited for went away ("request
///   was canceled"); hyper-util sends such a request again itself only
///   with `http2_only`;
/// - a `Canceled` error: a connect cancelled because another connection to
///   the origin took hyper-util's HTTP/2 lock ("ALPN upgraded to HTTP/2"),
///   or a request hyper gave back unsent on a fresh connection.
///
/// hyper-util names neither its error's kind nor its pool's error in its
/// API (`pool` is `#[doc(hidden)]`), so this reads their `Display`
/// ("client error (Canceled)", `pool::Error`'s three words): a hyper-util
/// that words them otherwise makes these failures final again, as they
/// were, never retried wrongly. `tests/retry.rs` provokes each on the
/// hyper-util CI resolves, the newest included.
fn never_written(client: &hyper_util::client::legacy::Error) -> bool {
    use std::fmt::Write as _;
    let mut kind = String::new();
    let _ = write!(kind, "{client}");
    if kind == "client error (Canceled)" {
        return true;
    }
    if !client.is_connect() || client.connect_info().is_some() {
        return false;
    }
    let Some(pool) = std::error::Error::source(client) else { return false };
    if pool.source().is_some() {
        return false;
    }
    let mut said = String::new();
    let _ = write!(said, "{pool}");
    matches!(said.as_str(), "checked out connection was closed" | "request was canceled")
}

/// An h2 error: whether it was refused unprocessed, and whether it punishes
/// the connection.
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

/// The error of a connect hyper-util no longer needed: it waited for
/// another dial to its origin, whose connection hyper-util's pool handed
/// its request instead, and hyper-util finishes such a connect in the
/// background (the connector ends it at once rather than dial). Nothing was
/// sent on it: `RetryRefused` sends again a request that ever fails with it.
#[derive(Debug)]
pub(crate) struct Superseded;

impl std::fmt::Display for Superseded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connect not needed: the pool handed its request another connection to the origin")
    }
}

impl std::error::Error for Superseded {}

/// The error of a connect that waited for another dial to its origin, and
/// that dial failed: the same failure, told at once to every connect
/// waiting for it (hyper-util alone would have had each dial and fail on
/// its own). The wrapped connector's error is not `Clone`; this carries
/// what it said, and its I/O error kind if it had one, so that `Display`
/// and `io::Error::kind` read as the dial's did. Never retried (a failed
/// connect).
#[derive(Debug)]
pub(crate) struct DialFailed {
    /// The dial's error and its sources, as they displayed, joined by ": ".
    said: String,
    kind: Option<std::io::ErrorKind>,
}

impl DialFailed {
    /// What `error` says, for every connect that waited for its dial.
    pub(crate) fn of(error: &(dyn std::error::Error + 'static)) -> DialFailed {
        use std::fmt::Write as _;
        let mut said = String::new();
        let mut kind = None;
        let mut next = Some(error);
        while let Some(e) = next {
            if !said.is_empty() {
                said.push_str(": ");
            }
            let _ = write!(said, "{e}");
            if kind.is_none()
                && let Some(io) = e.downcast_ref::<std::io::Error>()
            {
                kind = Some(io.kind());
            }
            next = e.source();
        }
        DialFailed { said, kind }
    }

    /// This failure for one connect: an `io::Error` of the dial's kind
    /// (`Other` if it had none).
    pub(crate) fn error(&self) -> std::io::Error {
        let kind = self.kind.unwrap_or(std::io::ErrorKind::Other);
        std::io::Error::new(kind, WaitedDial { said: self.said.clone() })
    }
}

/// A [`DialFailed`] as one waiting connect sees it.
#[derive(Debug)]
struct WaitedDial {
    said: String,
}

impl std::fmt::Display for WaitedDial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the dial this connect waited for failed: {}", self.said)
    }
}

impl std::error::Error for WaitedDial {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_retry_goes_at_once_then_each_waits_twice_as_long() {
        let ms = Duration::from_millis;
        let waits: Vec<Duration> = (1..=MAX_RETRIES).map(retry_delay).collect();
        assert_eq!(waits, [ms(0), ms(25), ms(50), ms(100), ms(200), ms(400)]);
        assert!(retry_delay(usize::MAX) < Duration::from_secs(3600), "bounded");
    }

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

    #[test]
    fn a_failed_dial_says_to_its_waiters_what_it_said_with_its_kind() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused here");
        let failed = DialFailed::of(&refused);
        let e = failed.error();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
        assert_eq!(e.to_string(), "the dial this connect waited for failed: refused here");
    }
}
