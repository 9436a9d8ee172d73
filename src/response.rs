//! What the layer does once, when a response head arrives: counts the
//! observer's tag, records the origin's head time and connection (the one
//! lock a response takes), reads the headers, and keeps what an early drop
//! of the body will need ([`DropContext`]). A body read to its end uses
//! none of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Response, Version};
use http_body::{Body, SizeHint};
use tokio::runtime::Handle;

use crate::budget::DrainBudget;
use crate::event::{OriginView, Report, Trace};
use crate::headers;
use crate::keepalive::{IdleTimeout, Said};
use crate::observe::{Connection1, ConnectionTag};
use crate::origin::{Origin, OriginAt};
use crate::outcome::Reason;
use crate::policy::AtDrop;
use crate::request::RequestInfo;
use crate::shared::Shared;

/// Everything known about a response when its body is dropped early.
pub(crate) struct DropContext {
    shared: Arc<Shared>,
    /// Reason the connection will not be reused whatever we do, from the head.
    head: Option<Reason>,
    /// The request's own budget, overriding the layer's (boxed: few
    /// requests carry one, and every response moves this context).
    request_budget: Option<Box<DrainBudget>>,
    status: u16,
    /// The body's size hint when the response arrived: what the drop knows
    /// of the rest of a body whose code it does not run.
    declared: SizeHint,
    /// Data bytes the caller read.
    caller_read: u64,
    trace: Option<Box<Trace>>,
    origin: Option<OriginAt>,
    /// The response came on a connection that had carried one before (as
    /// an observer says): its drain is past TCP slow start.
    warm: bool,
    /// HTTP/2 or later: a drop resets a stream, not the connection.
    http2: bool,
    /// The runtime the response arrived on, if any: where its drain waits.
    runtime: Option<Handle>,
    /// The HTTP/1 connection it came on, as an observer tagged it, and the
    /// request it answers there: idle once the body ended
    /// ([`ended`](Self::ended)).
    conn: Option<Connection1>,
    request: u32,
}

/// The response head arrived for `request`: everything the layer does then.
/// `None` when nothing is left to drain (HEAD, 204, 304,
/// `Content-Length: 0`): no state, nothing at the drop.
pub(crate) fn at_response<B: Body>(response: &mut Response<B>, request: RequestInfo) -> Option<DropContext> {
    let shared = request.shared;
    let (reuse, conn, request_number) = if shared.stats.is_observed() {
        observed(&shared, response, request.origin.as_ref())
    } else {
        (None, None, 0)
    };
    let observed = reuse.map(|conn| (conn.reused, conn.setup_time));
    #[cfg(feature = "http2")]
    if response.version() >= Version::HTTP_2 {
        links(response, request.origin.as_deref(), request.captured);
    }
    let origin = request.origin.map(|origin| {
        if let Some(sent_at) = request.sent_at {
            let now = Instant::now();
            origin.record_head(now, now.saturating_duration_since(sent_at));
        }
        // The origin's own lock, only when there is something to record
        // beyond the round trip: what an observer said, or (adaptive mode,
        // which needs an observer) that none did.
        if observed.is_some() || shared.config.budgets.adaptive() {
            origin.with(|est| est.record_connection(observed));
        }
        OriginAt { origin }
    });
    if reuse.is_none() && shared.config.budgets.adaptive() {
        shared.warn_unobserved_once();
    }
    if response.body().is_end_stream() {
        if let Some(conn) = conn {
            conn.ended(request_number);
        }
        return None;
    }
    let declared = response.body().size_hint();
    let head = headers::inspect(
        &shared.config,
        request.says,
        response.version(),
        response.headers(),
        declared.exact().is_some(),
    );
    Some(DropContext {
        shared,
        head,
        request_budget: request.budget.map(Box::new),
        status: response.status().as_u16(),
        declared,
        caller_read: 0,
        trace: request.trace,
        origin,
        warm: reuse.is_some_and(|conn| conn.reused),
        http2: response.version() >= Version::HTTP_2,
        runtime: Handle::try_current().ok(),
        conn,
        request: request_number,
    })
}

/// A response with an observer's tag (`observe.rs`): counted, described
/// ([`ConnectionReuse`](crate::ConnectionReuse)), and, on HTTP/1, what its
/// server said of its idle timeout goes to its `origin` and its connection,
/// which the response keeps with the request it answers, to mark it idle
/// when the body ends (`keepalive.rs`); not on HTTP/2, nor when the layer
/// ignores idle timeouts. Out of line: unobserved responses skip it.
#[inline(never)]
fn observed<B>(
    shared: &Shared,
    response: &mut Response<B>,
    origin: Option<&Arc<Origin>>,
) -> (Option<crate::ConnectionReuse>, Option<Connection1>, u32) {
    let Some((reuse, tag)) = ConnectionTag::take(response.extensions_mut()) else { return (None, None, 0) };
    shared.stats.response(reuse.reused);
    let setting = shared.config.idle_timeout;
    let (Some(origin), false) =
        (origin, response.version() >= Version::HTTP_2 || setting == IdleTimeout::Ignored)
    else {
        return (Some(reuse), None, 0);
    };
    tag.http1(origin, setting, Said::read(response.headers()));
    let (conn, request) = tag.into_parts();
    (Some(reuse), Some(conn), request)
}

/// An HTTP/2 response on an `Http2Connector`'s connection: the connection
/// takes hyper-util's view of itself from `captured` if it lacks it (or,
/// moved on, poisons it again through it before this caller's next
/// request); and its origin's requests are all captured while one of the
/// connector's connections to it may have to move on (it has a share of
/// resets, or lacks that view), so that each connection has it from its
/// first response on, before any caller sends a second request on it.
#[cfg(feature = "http2")]
fn links<B>(
    response: &Response<B>,
    origin: Option<&crate::origin::Origin>,
    captured: Option<hyper_util::client::legacy::connect::CaptureConnection>,
) {
    let Some(link) = crate::connector::LinkTag::of_response(response.extensions()) else { return };
    if let Some(captured) = captured {
        link.offer_handle(captured);
    }
    if let Some(origin) = origin {
        origin.want_capture(link.wants_captures());
    }
}

/// A request on its way, whose connection is captured: once hyper-util
/// handed it a connection (before it is sent), that connection (an
/// `Http2Connector`'s) takes hyper-util's view of itself from the capture
/// if it lacks it, so that it can move on before its first response comes
/// (see [`links`]).
#[cfg(feature = "http2")]
pub(crate) fn sent_on(request: &RequestInfo) {
    let Some(captured) = &request.captured else { return };
    let link = captured.connection_metadata().as_ref().and_then(crate::connector::LinkTag::of_connected);
    if let Some(link) = link {
        link.offer_handle(captured.clone());
    }
}

impl DropContext {
    /// What the policy needs to know at the drop, with what is left of the
    /// body (`remaining`).
    pub(crate) fn at_drop(&self, remaining: SizeHint) -> AtDrop {
        AtDrop {
            head: self.head,
            request_budget: self.request_budget.as_deref().copied(),
            origin: self.origin.clone(),
            remaining,
            read: self.caller_read,
            unwinding: std::thread::panicking(),
            http2: self.http2,
        }
    }

    /// The whole body arrived and was read or drained: its connection is
    /// idle until its next request (`keepalive.rs`).
    #[inline]
    pub(crate) fn ended(&self) {
        if let Some(conn) = &self.conn {
            conn.ended(self.request);
        }
    }

    /// The state of the layer the response came through.
    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The response's origin.
    pub(crate) fn origin(&self) -> Option<&OriginAt> {
        self.origin.as_ref()
    }

    /// The response came on a reused connection (as an observer says).
    pub(crate) fn warm(&self) -> bool {
        self.warm
    }

    /// The runtime the response arrived on, taken by the drain that waits
    /// there (or falls back elsewhere).
    pub(crate) fn take_runtime(&mut self) -> Option<Handle> {
        self.runtime.take()
    }

    /// The origin's estimates for the drop's DEBUG event, decided with
    /// `budget`: read (one lock) only when the request found the event
    /// enabled.
    pub(crate) fn view(&self, budget: Option<DrainBudget>) -> Option<OriginView> {
        let (origin, budget, _) = (self.origin.as_ref()?, budget?, self.trace.as_ref()?);
        let round_trip = origin.round_trip();
        Some(origin.origin.with(|est| OriginView::of(est, round_trip, budget)))
    }

    /// Counts `n` more data bytes read by the caller.
    pub(crate) fn caller_read(&mut self, n: u64) {
        self.caller_read = self.caller_read.saturating_add(n);
    }

    /// What is left of a body whose code the drop does not run: the size
    /// hint it had when the response arrived, less what the caller read.
    pub(crate) fn remaining(&self) -> SizeHint {
        let read = self.caller_read;
        let mut rest = SizeHint::new();
        rest.set_lower(self.declared.lower().saturating_sub(read));
        if let Some(upper) = self.declared.upper() {
            rest.set_upper(upper.saturating_sub(read).max(rest.lower()));
        }
        rest
    }

    /// Counts the drop under `reason` and emits its event, with the
    /// origin's estimates it was decided with (`view`, for the event).
    pub(crate) fn record(
        &self,
        reason: Reason,
        bytes_drained: u64,
        elapsed: Duration,
        view: Option<OriginView>,
    ) {
        self.shared.stats.record(&Report {
            reason,
            bytes_drained,
            caller_read: self.caller_read,
            elapsed,
            status: self.status,
            trace: self.trace.as_deref(),
            origin: view,
        });
    }
}
