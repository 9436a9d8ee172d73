//! HTTP/2's part of which failed requests go again (the general rules are
//! the top-level `retries.rs`'s): what an h2 error says, and the errors the
//! connector makes that the retry reads (see the room's Retries).

/// What an h2 error says of its request (the general rules, `retries.rs`,
/// read it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum H2Said {
    /// The server refused it unprocessed.
    NeverProcessed,
    /// It may have been processed.
    MayHaveBeenProcessed,
    /// Not a failure a retry mends.
    Nothing,
}

/// An h2 error: whether it was refused unprocessed, and whether it punishes
/// the connection.
pub(crate) fn h2_failure(h2: &h2::Error) -> (H2Said, bool) {
    use h2::Reason as R;
    let remote = h2.is_remote();
    if h2.is_go_away() && remote {
        // Above the last stream id, or opened after the GOAWAY arrived
        // (`Streams::recv_go_away`): never processed.
        let punishing = matches!(h2.reason(), Some(R::ENHANCE_YOUR_CALM | R::INTERNAL_ERROR));
        return (H2Said::NeverProcessed, punishing);
    }
    if h2.is_reset() && remote {
        return match h2.reason() {
            Some(R::REFUSED_STREAM) => (H2Said::NeverProcessed, false),
            Some(R::ENHANCE_YOUR_CALM) => (H2Said::MayHaveBeenProcessed, true),
            _ => (H2Said::MayHaveBeenProcessed, false),
        };
    }
    // hyper's rebuilt reasons (`h2::Error::from(Reason)`: who sent it is
    // lost), local resets and connection errors, I/O: the stream may have
    // been sent.
    let failed = h2.reason().is_some() || h2.is_io();
    (if failed { H2Said::MayHaveBeenProcessed } else { H2Said::Nothing }, false)
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

/// The error of a dial shared by several connects (the one that drove it
/// and those that waited for it, each failed when no other attempt served
/// it sooner): the wrapped connector's error itself, in an `Arc`, so that
/// every one of them reaches it, typed, through `source()` (a TLS
/// `rustls::Error` inside hyper-rustls' `io::Error`, an I/O error), as each
/// would through its own dial's error. Each connect's error is an
/// `io::Error` of the dial's kind (the first `io::Error` in its chain,
/// `Other` if none) holding one of these: `get_ref()` is this, its
/// `source()` the dial's error. Never retried (a failed connect).
#[derive(Debug)]
pub(crate) struct DialFailed {
    error: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    /// It reaches a connect that waited for the dial (its `Display` says
    /// so); else the connect that drove it (it says what the dial said).
    waited: bool,
}

impl DialFailed {
    /// `error` as one connect sees it, `waited` if that connect waited for
    /// the dial rather than drove it: an `io::Error` of the dial's kind.
    pub(crate) fn error(
        error: &std::sync::Arc<dyn std::error::Error + Send + Sync>,
        waited: bool,
    ) -> std::io::Error {
        let kind = io_kind(&**error).unwrap_or(std::io::ErrorKind::Other);
        std::io::Error::new(kind, DialFailed { error: error.clone(), waited })
    }
}

/// The kind of the first `io::Error` in `error`'s chain (its `source()`s,
/// and what each `io::Error` holds).
fn io_kind(error: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        next = e.source();
    }
    None
}

impl std::fmt::Display for DialFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.waited {
            write!(f, "the dial this connect waited for failed: {}", self.error)
        } else {
            std::fmt::Display::fmt(&self.error, f)
        }
    }
}

impl std::error::Error for DialFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_dial_says_to_its_waiters_what_it_said_with_its_kind_and_leads_to_the_error_itself() {
        #[derive(Debug)]
        struct Tls;
        impl std::fmt::Display for Tls {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bad certificate")
            }
        }
        impl std::error::Error for Tls {}
        let dial: std::sync::Arc<dyn std::error::Error + Send + Sync> =
            std::sync::Arc::new(std::io::Error::new(std::io::ErrorKind::InvalidData, Tls));
        let e = DialFailed::error(&dial, true);
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(e.to_string(), "the dial this connect waited for failed: bad certificate");
        assert_eq!(
            DialFailed::error(&dial, false).to_string(),
            "bad certificate",
            "the driver's says what it said"
        );
        let held = e.get_ref().and_then(|inner| inner.source()).expect("the dial's error");
        let io = held.downcast_ref::<std::io::Error>().expect("the dial's own io::Error");
        assert!(io.get_ref().is_some_and(|t| t.is::<Tls>()), "its typed source, reached");
    }
}
