//! The outcome model: what happened to a body dropped before its end, and why.

use std::fmt;

/// What happened to one early drop (a response body dropped before its end).
///
/// Every early drop has exactly one outcome, given by its [`Reason`]. Bodies
/// read to their end are not early drops and are not counted.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// The drain read the body to its end: hyper can pool the connection.
    Drained,
    /// A drain was started and given up (a budget ran out, or its runtime
    /// shut down): the rest of the body was dropped.
    Abandoned,
    /// No drain was started: the body was dropped at once, as hyper alone
    /// would, because draining could not save the connection or was not
    /// allowed.
    Skipped,
    /// The drain ended on an error of the body (reset, malformed framing,
    /// early end of file) or a panic in it: the connection is closed.
    Failed,
}

impl Outcome {
    /// Every outcome, in a fixed order.
    pub const ALL: [Outcome; 4] = [Outcome::Drained, Outcome::Abandoned, Outcome::Skipped, Outcome::Failed];

    /// The name used as the `outcome` field of the tracing event and as a
    /// metrics label: `"drained"`, `"abandoned"`, `"skipped"`, `"failed"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Drained => "drained",
            Outcome::Abandoned => "abandoned",
            Outcome::Skipped => "skipped",
            Outcome::Failed => "failed",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

macro_rules! reasons {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $outcome:ident; )+) => {
        /// Why an early drop ended the way it did: one variant per counter of
        /// [`DrainSnapshot`](crate::DrainSnapshot), each belonging to one
        /// [`Outcome`].
        ///
        /// [`as_str`](Reason::as_str) is the `reason` field of the tracing
        /// event and a stable metrics label. New reasons may be added in minor
        /// releases; iterate [`Reason::ALL`] (or
        /// [`DrainSnapshot::iter`](crate::DrainSnapshot::iter)) rather than
        /// naming every variant.
        #[non_exhaustive]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason {
            $( $(#[$doc])* $variant, )+
        }

        impl Reason {
            /// Every reason, in a fixed order: by outcome (drained, abandoned,
            /// skipped, failed), then as declared.
            pub const ALL: [Reason; [$(Reason::$variant),+].len()] = [$(Reason::$variant),+];

            /// The name used as the `reason` field of the tracing event and
            /// as a metrics label, such as `"over_time"`.
            pub const fn as_str(self) -> &'static str {
                match self { $( Reason::$variant => $name, )+ }
            }

            /// The outcome this reason belongs to.
            pub const fn outcome(self) -> Outcome {
                match self { $( Reason::$variant => Outcome::$outcome, )+ }
            }
        }
    };
}

reasons! {
    /// The drain read the body to its end.
    EndOfBody = "end_of_body", Drained;

    /// More than the byte budget would have had to be read.
    OverBytes = "over_bytes", Abandoned;
    /// The time budget ran out.
    OverTime = "over_time", Abandoned;
    /// The runtime shut down while the drain ran.
    RuntimeShutdown = "runtime_shutdown", Abandoned;
    /// The drop read what had already arrived of hyper's body, then the rest
    /// had to wait for the server and the drain could not wait:
    /// `max_concurrent_drains` drains were running, or there was no runtime
    /// to wait on. The same with nothing read is skipped (`saturated`,
    /// `no_runtime`).
    CannotWait = "cannot_wait", Abandoned;

    /// Draining is off: a byte or time budget of zero (for the layer or
    /// through a [`DrainBudget`](crate::DrainBudget)), or
    /// `max_concurrent_drains(0)`.
    Disabled = "disabled", Skipped;
    /// `Connection: close` on the request or the response, or an HTTP/1.0
    /// response without keep-alive: the connection will not be reused anyway.
    ConnectionClose = "connection_close", Skipped;
    /// A body with neither `Content-Length` nor chunked framing: it ends when
    /// the server closes the connection, which is never pooled.
    CloseDelimited = "close_delimited", Skipped;
    /// The remaining length was known and above the byte budget: not worth a
    /// single read.
    DeclaredOverBudget = "declared_over_budget", Skipped;
    /// In adaptive mode, the origin's estimates say a new connection costs
    /// less than reading any of the body (a byte or time budget that rounds
    /// to zero).
    ReconnectCheaper = "reconnect_cheaper", Skipped;
    /// An open-ended stream (a content type listed in
    /// [`stream_content_types`](crate::DrainOnDropLayer::stream_content_types)).
    Stream = "stream", Skipped;
    /// HTTP/2 (and later): the body was dropped at once, unread, and its
    /// stream reset (RST_STREAM CANCEL, sent by hyper's h2 unless the whole
    /// body had already arrived): the server stops sending, the connection
    /// is kept, and nothing waits for the stream.
    Reset = "reset", Skipped;
    /// `max_concurrent_drains` drains were already running in the
    /// background when this body had to wait for the server, or its origin
    /// already held three quarters of them (once the layer has seen another
    /// origin: 768 of the default 1024). Nothing was
    /// read (see `cannot_wait`).
    Saturated = "saturated", Skipped;
    /// The drain needed a task and there was no tokio runtime to run it
    /// on: the response arrived outside any runtime and none was current at
    /// the drop, or those runtimes had shut down. Nothing was read (see
    /// `cannot_wait`). Only hyper's own body is ever read in the drop; any
    /// other body needs a task.
    NoRuntime = "no_runtime", Skipped;
    /// The body was dropped while its thread was unwinding from a panic: a
    /// drain would have run, but the layer reads nothing and starts nothing
    /// then, and the body is dropped as hyper alone would drop it.
    Unwinding = "unwinding", Skipped;

    /// The body returned an error while drained.
    BodyError = "body_error", Failed;
    /// The body panicked while drained (the panic is contained in the drain).
    BodyPanic = "body_panic", Failed;
}

impl Reason {
    /// Number of reasons.
    pub(crate) const COUNT: usize = Reason::ALL.len();

    /// Index into per-reason arrays.
    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_listed_once_in_order_with_unique_names() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?} is listed at its discriminant");
        }
        let mut names: Vec<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Reason::COUNT, "reason names are unique");
        let outcomes: Vec<_> = Reason::ALL.iter().map(|r| r.outcome()).collect();
        assert!(outcomes.is_sorted(), "reasons are grouped by outcome: {outcomes:?}");
        for o in Outcome::ALL {
            assert!(outcomes.contains(&o), "{o} has at least one reason");
        }
    }
}
