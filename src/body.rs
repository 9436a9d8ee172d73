use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use tokio::runtime::Handle;

use crate::adaptive::Origin;
use crate::budget::DrainBudget;
use crate::drain;
use crate::policy::{Decision, Policy};
use crate::stats::SkipReason;

/// Response body of [`DrainOnDrop`]: forwards every frame of the inner body
/// unchanged, and when dropped before its end hands the rest to a background
/// drain (see the [crate documentation](crate)).
///
/// `Send` when `B` is, `Unpin` when `B` is (hyper's `Incoming` is both).
/// `size_hint` and `is_end_stream` are the inner body's; `is_end_stream` also
/// stays true once the inner body has returned its last frame, which hyper's
/// chunked bodies do not report themselves.
///
/// [`DrainOnDrop`]: crate::DrainOnDrop
pub struct DrainBody<B> {
    /// `None` only while being dropped.
    inner: Option<B>,
    /// `None` once nothing needs doing at the drop: the end was reached, the
    /// inner body failed, or the body was created at its end.
    on_drop: Option<OnEarlyDrop<B>>,
    /// The inner body returned `None` from `poll_frame`.
    ended: bool,
}

/// What an early drop needs, captured when the response arrived.
struct OnEarlyDrop<B> {
    ctx: DropContext,
    /// `early_drop::<B>`, taken where `B: Body + Send + 'static` is known, so
    /// that `DrainBody<B>` needs no bounds and its `Drop` can still drain.
    run: fn(B, DropContext),
}

struct DropContext {
    policy: Arc<Policy>,
    /// Runtime to drain on; `None` when the response arrived outside one.
    handle: Option<Handle>,
    /// Reason the connection will not be reused whatever we do, from the head.
    head: Option<SkipReason>,
    /// The request's own budget, overriding the layer's.
    budget: Option<DrainBudget>,
    /// In adaptive mode: the origin, and when the head arrived.
    origin: Option<(Arc<Origin>, Instant)>,
    /// Data bytes the caller read, for the tracing event.
    caller_read: u64,
}

impl<B> DrainBody<B>
where
    B: Body + Send + Unpin + 'static,
{
    pub(crate) fn new(
        inner: B,
        policy: Arc<Policy>,
        head: Option<SkipReason>,
        budget: Option<DrainBudget>,
        origin: Option<Arc<Origin>>,
    ) -> Self {
        // Nothing is left to drain (HEAD, 204, 304, `Content-Length: 0`): no
        // runtime handle, no state, nothing at the drop.
        let on_drop = (!inner.is_end_stream()).then(|| OnEarlyDrop {
            ctx: DropContext {
                policy,
                handle: Handle::try_current().ok(),
                head,
                budget,
                origin: origin.map(|o| (o, Instant::now())),
                caller_read: 0,
            },
            run: early_drop::<B>,
        });
        DrainBody { inner: Some(inner), on_drop, ended: false }
    }
}

/// Runs when a body is dropped before its end: asks the policy, then drains
/// in the background or drops the body so that hyper closes the connection.
fn early_drop<B>(inner: B, ctx: DropContext)
where
    B: Body + Send + Unpin + 'static,
{
    // Every byte was delivered even if the caller did not poll past the last frame.
    if inner.is_end_stream() {
        return;
    }
    let origin = ctx.origin.map(|(origin, _)| origin);
    let remaining = inner.size_hint();
    match ctx.policy.decide(ctx.budget, origin.as_deref(), ctx.head, remaining, ctx.handle) {
        Decision::Drain(handle, budget, permit) => drain::spawn(&handle, inner, budget, permit, origin),
        Decision::Skip(reason) => {
            drop(inner);
            ctx.policy.stats.skip(reason, ctx.caller_read);
        }
    }
}

impl<B> DrainBody<B> {
    /// The inner body.
    pub fn get_ref(&self) -> &B {
        self.inner.as_ref().expect("inner body is present until drop")
    }
}

impl<B> Body for DrainBody<B>
where
    B: Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(&mut *inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(on_drop) = this.on_drop.as_mut() {
                    if let Some(data) = frame.data_ref() {
                        on_drop.ctx.caller_read += data.remaining() as u64;
                    }
                    if inner.is_end_stream() {
                        this.read_to_end();
                    }
                }
            }
            Poll::Ready(None) => {
                this.ended = true;
                this.read_to_end();
            }
            // The connection's fate is settled: hyper closes it.
            Poll::Ready(Some(Err(_))) => this.on_drop = None,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.as_ref().is_some_and(B::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(inner) if !self.ended => inner.size_hint(),
            _ => SizeHint::with_exact(0),
        }
    }
}

impl<B> DrainBody<B> {
    /// The caller reached the end: nothing to do at the drop; in adaptive
    /// mode the read is a throughput sample for the origin.
    fn read_to_end(&mut self) {
        if let Some(OnEarlyDrop { ctx, .. }) = self.on_drop.take()
            && let Some((origin, head_at)) = ctx.origin
        {
            origin.record_transfer(ctx.caller_read, head_at.elapsed());
        }
    }
}

impl<B> Drop for DrainBody<B> {
    fn drop(&mut self) {
        if let (Some(on_drop), Some(inner)) = (self.on_drop.take(), self.inner.take()) {
            (on_drop.run)(inner, on_drop.ctx);
        }
    }
}

impl<B> fmt::Debug for DrainBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DrainBody")
            .field("armed", &self.on_drop.is_some())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}
