use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Buf;
use http::Response;
use http_body::{Body, Frame, SizeHint};

use crate::drain;
use crate::policy::{self, Decision};
use crate::request::RequestInfo;
use crate::response::{self, DropContext};

/// Response body of [`DrainOnDrop`]: forwards every frame of the inner body
/// unchanged, and when dropped before its end hands the rest to a background
/// drain (see the [crate documentation](crate)).
///
/// `Send` when `B` is, and always `Unpin`: the inner body lives in a box of
/// its own (one allocation per response), so that a drain can take it to a
/// task however it was pinned, and a body that is not `Unpin` (tower-http's
/// `ResponseBodyDeadline`, an `async` stream) can sit below the layer as it
/// is. `size_hint` and `is_end_stream` are the inner body's;
/// `is_end_stream` also stays true once the inner body has returned its
/// last frame, which hyper's chunked bodies do not report themselves.
///
/// [`DrainOnDrop`]: crate::DrainOnDrop
pub struct DrainBody<B> {
    /// `None` only while being dropped.
    inner: Option<Pin<Box<B>>>,
    /// `None` once nothing needs doing at the drop: the end was reached, the
    /// inner body failed, the body was created at its end, or another
    /// `DrainBody` below this one owns the drain.
    armed: Option<Armed<B>>,
    /// The inner body returned `None` from `poll_frame`.
    ended: bool,
}

/// What an early drop needs, captured when the response arrived.
struct Armed<B> {
    ctx: DropContext,
    /// `early_drop::<B>`, taken where `B: Body + Send + 'static` is known, so
    /// that `DrainBody<B>` needs no bounds and its `Drop` can still drain.
    run: fn(Pin<Box<B>>, DropContext),
}

/// Marks a response whose body already carries a drain, so that a
/// `DrainOnDrop` further out, or `wrap_response`, passes it through instead
/// of draining twice. Private: nobody else can insert it.
#[derive(Clone, Copy)]
struct DrainOwned;

impl<B> DrainBody<B>
where
    B: Body + Send + 'static,
{
    /// Puts the drain on a response that arrived for `request`.
    pub(crate) fn wrap(mut response: Response<B>, request: RequestInfo) -> Response<DrainBody<B>> {
        // Marked here, once: a response marked already has a `DrainBody`
        // further in that owns the drain (it came through another
        // `DrainOnDrop`, or was wrapped already).
        if response.extensions_mut().insert(DrainOwned).is_some() {
            return response.map(DrainBody::disarmed);
        }
        let Some(ctx) = response::at_response(&mut response, request) else {
            return response.map(DrainBody::disarmed);
        };
        let armed = Armed { ctx, run: early_drop::<B> };
        response.map(|inner| DrainBody { inner: Some(Box::pin(inner)), armed: Some(armed), ended: false })
    }
}

impl<B> DrainBody<B> {
    fn disarmed(inner: B) -> Self {
        DrainBody { inner: Some(Box::pin(inner)), armed: None, ended: false }
    }
}

/// Runs when a body is dropped before its end: asks the policy, then drains
/// (see `drain/`) or drops the body so that hyper closes the connection.
///
/// Runs no code of a body other than hyper's own: another body's end and
/// size are what the layer saw while the caller read it (its size hint when
/// the response arrived, the bytes read since, whether a frame ended it).
fn early_drop<B>(inner: Pin<Box<B>>, ctx: DropContext)
where
    B: Body + Send + 'static,
{
    let hyper_body = policy::runs_in_the_drop::<B>();
    // Every byte was delivered even if the caller did not poll past the last
    // frame (another body's end was seen in `poll_frame`).
    if hyper_body && inner.is_end_stream() {
        return ctx.ended();
    }
    let at = ctx.at_drop(if hyper_body { inner.size_hint() } else { ctx.remaining() });
    let (decision, decided_with) = policy::decide(ctx.shared(), &at, Instant::now());
    let view = ctx.view(decided_with);
    match decision {
        Decision::Drain(budget) => drain::start(inner, budget, ctx, view),
        Decision::Skip(reason) => {
            // Dropped now, as hyper alone would: HTTP/2 resets the stream.
            drain::drop_for_a_drain(inner);
            ctx.record(reason, 0, Duration::ZERO, view);
        }
    }
}

impl<B> DrainBody<B> {
    /// The inner body.
    pub fn get_ref(&self) -> &B {
        self.inner.as_deref().expect("inner body is present until drop")
    }
}

impl<B> Body for DrainBody<B>
where
    B: Body,
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
        let polled = inner.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(armed) = this.armed.as_mut() {
                    if let Some(data) = frame.data_ref() {
                        armed.ctx.caller_read(data.remaining() as u64);
                    }
                    if inner.is_end_stream() {
                        this.disarm();
                    }
                }
            }
            Poll::Ready(None) => {
                this.ended = true;
                this.disarm();
            }
            // The connection's fate is settled: hyper closes it.
            Poll::Ready(Some(Err(_))) => this.armed = None,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.as_deref().is_some_and(B::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(inner) if !self.ended => inner.size_hint(),
            _ => SizeHint::with_exact(0),
        }
    }
}

impl<B> DrainBody<B> {
    /// The caller reached the end: nothing is left to do at the drop, and
    /// the connection is idle.
    fn disarm(&mut self) {
        if let Some(armed) = &self.armed {
            armed.ctx.ended();
        }
        self.armed = None;
    }
}

impl<B> Drop for DrainBody<B> {
    fn drop(&mut self) {
        if let (Some(armed), Some(inner)) = (self.armed.take(), self.inner.take()) {
            // Inside another `DrainBody`'s drain or skip: that one decided
            // for the whole response (see `drop_for_a_drain`).
            if drain::dropping_for_a_drain() {
                return drop(inner);
            }
            (armed.run)(inner, armed.ctx);
        }
    }
}

impl<B> fmt::Debug for DrainBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DrainBody")
            .field("armed", &self.armed.is_some())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}
