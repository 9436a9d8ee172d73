//! Which failed requests go again, whatever the protocol, and when
//! ([`RetryRefused`](crate::RetryRefused) asks): a request the server never
//! processed goes again whatever its method; one it may have processed,
//! only if its method is idempotent. On HTTP/1 that is the keep-alive race
//! (`keepalive.rs`): a request written on a pooled connection as its server
//! closed it for being idle fails before any byte of its response
//! (`IncompleteMessage`, `ConnectionReset`) and may, for all the client
//! can tell, have been read; a GET goes again on another connection, as
//! Go's `Transport` does, a POST never. HTTP/2's own failures (GOAWAY,
//! REFUSED_STREAM, the connector's) are read in the HTTP/2 room
//! (`http2::retries`).

use std::time::{Duration, Instant};

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
    #[cfg_attr(not(feature = "http2"), expect(dead_code, reason = "only HTTP/2 servers punish"))]
    pub(crate) punished: Option<&'a hyper_util::client::legacy::connect::Connected>,
    /// hyper-util failed it as a pool waiter whose dial went away ("request
    /// was canceled"): never written, but sent again only if that dial did
    /// not fail (see [`Failure::allows`]).
    waited_for_dial: bool,
}

impl Failure<'_> {
    /// Whether `req`, whose try began at `since`, goes again after this
    /// failure. A request hyper-util failed as a pool waiter whose dial
    /// went away goes again unless a dial to its origin failed since its
    /// try began: with `http2_only`, hyper-util's own lock keeps the other
    /// requests to an origin waiting in its pool behind one dial, and fails
    /// them so when that dial fails; sent again, each would dial the
    /// failing origin again, one after another (hyper-util alone fails
    /// them all with the dial, once). A dial abandoned (its caller gave up)
    /// failed nothing: those requests go again.
    pub(crate) fn allows<B>(&self, req: &http::Request<B>, since: Instant) -> bool {
        if self.waited_for_dial && dial_failed_since(req.uri(), since) {
            return false;
        }
        self.retry.allows(req.method())
    }
}

/// Whether an `Http2Connector`'s dial to `uri`'s origin failed at or after
/// `since`.
fn dial_failed_since(uri: &http::Uri, since: Instant) -> bool {
    #[cfg(feature = "http2")]
    return crate::connector::failed_since(uri, since);
    #[cfg(not(feature = "http2"))]
    return {
        let _ = (uri, since);
        false
    };
}

/// Reads a failed request's error: the errors of its cause chain, h2's
/// (with feature `http2`), hyper's, hyper-util's and std's I/O errors
/// wherever they sit in it (tonic's errors wrap them too).
pub(crate) fn after_failure<'a>(error: &'a (dyn std::error::Error + 'static)) -> Failure<'a> {
    let mut connected = None;
    let mut connect = false;
    let mut waited_for_dial = false;
    let mut next = Some(error);
    let retry = loop {
        let Some(error) = next else { break Retry::Never };
        if let Some(client) = error.downcast_ref::<hyper_util::client::legacy::Error>() {
            if let Some(unwritten) = never_written(client) {
                waited_for_dial = unwritten == Unwritten::DialGone;
                break Retry::Unprocessed;
            }
            connected = connected.or(client.connect_info());
            connect |= client.is_connect();
        } else if let Some(failure) = http2_failure(error, connected) {
            return failure;
        } else if let Some(hyper) = error.downcast_ref::<hyper::Error>() {
            if hyper.is_user() || hyper.is_parse() {
                break Retry::Never;
            }
            if hyper.is_canceled() || hyper.is_closed() || hyper.is_incomplete_message() || hyper.is_timeout()
            {
                break if connect { Retry::Never } else { Retry::IfIdempotent };
            }
        } else if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if io.get_ref().is_some_and(|inner| superseded(inner)) {
                break Retry::Unprocessed;
            }
            break if connect { Retry::Never } else { Retry::IfIdempotent };
        } else if superseded(error) {
            break Retry::Unprocessed;
        }
        next = error.source();
    };
    Failure { retry, punished: None, waited_for_dial }
}

/// An h2 error's failure (HTTP/2's room reads it), `connected` punished
/// if the server punished it.
#[cfg(feature = "http2")]
fn http2_failure<'a>(
    error: &'a (dyn std::error::Error + 'static),
    connected: Option<&'a hyper_util::client::legacy::connect::Connected>,
) -> Option<Failure<'a>> {
    use crate::http2::H2Said;
    let (said, punishing) = crate::http2::h2_failure(error.downcast_ref::<h2::Error>()?);
    let retry = match said {
        H2Said::NeverProcessed => Retry::Unprocessed,
        H2Said::MayHaveBeenProcessed => Retry::IfIdempotent,
        H2Said::Nothing => Retry::Never,
    };
    Some(Failure { retry, punished: connected.filter(|_| punishing), waited_for_dial: false })
}

#[cfg(not(feature = "http2"))]
fn http2_failure<'a>(
    _: &'a (dyn std::error::Error + 'static),
    _: Option<&'a hyper_util::client::legacy::connect::Connected>,
) -> Option<Failure<'a>> {
    None
}

/// The connector's error for a connect hyper-util no longer needed (never
/// sent anything: `http2::Superseded`).
fn superseded(error: &(dyn std::error::Error + 'static)) -> bool {
    #[cfg(feature = "http2")]
    return error.is::<crate::http2::Superseded>();
    #[cfg(not(feature = "http2"))]
    return {
        let _ = error;
        false
    };
}

/// Why hyper-util failed a request before writing a byte of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unwritten {
    /// A pool waiter whose dial went away ("request was canceled").
    DialGone,
    /// Any other reason of its pool's (see [`never_written`]).
    Pool,
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
fn never_written(client: &hyper_util::client::legacy::Error) -> Option<Unwritten> {
    use std::fmt::Write as _;
    let mut kind = String::new();
    let _ = write!(kind, "{client}");
    if kind == "client error (Canceled)" {
        return Some(Unwritten::Pool);
    }
    if !client.is_connect() || client.connect_info().is_some() {
        return None;
    }
    let pool = std::error::Error::source(client)?;
    if pool.source().is_some() {
        return None;
    }
    let mut said = String::new();
    let _ = write!(said, "{pool}");
    match said.as_str() {
        "checked out connection was closed" => Some(Unwritten::Pool),
        "request was canceled" => Some(Unwritten::DialGone),
        _ => None,
    }
}

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
        #[cfg(feature = "http2")]
        {
            let rebuilt = h2::Error::from(h2::Reason::REFUSED_STREAM);
            let failure = after_failure(&rebuilt);
            assert_eq!(failure.retry, Retry::IfIdempotent, "a reason alone says nothing of who sent it");
            let superseded = io::Error::other(crate::http2::Superseded);
            assert_eq!(after_failure(&superseded).retry, Retry::Unprocessed, "never left");
        }
        let broken = io::Error::from(io::ErrorKind::BrokenPipe);
        let failure = after_failure(&broken);
        assert_eq!(failure.retry, Retry::IfIdempotent, "a broken connection: it may have been read");
        assert!(failure.retry.allows(&Method::GET) && !failure.retry.allows(&Method::POST));
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
