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
    fn a_failed_dial_says_to_its_waiters_what_it_said_with_its_kind() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused here");
        let failed = DialFailed::of(&refused);
        let e = failed.error();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
        assert_eq!(e.to_string(), "the dial this connect waited for failed: refused here");
    }
}
