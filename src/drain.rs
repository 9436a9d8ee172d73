//! The one place that drains: a background task that reads a dropped body to
//! its end, within its budget, then drops it.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Buf;
use http_body::Body;
use tokio::runtime::Handle;

use crate::adaptive::{Draining, Origin};
use crate::policy::Budget;
use crate::stats::{DrainPermit, Outcome};

/// Drains `body` within `budget` on a task spawned on `handle`.
///
/// Never blocks. If the runtime is shutting down the task is dropped unpolled,
/// which drops the body (hyper closes the connection) and the permit counts
/// the drop as skipped.
pub(crate) fn spawn<B>(
    handle: &Handle,
    mut body: B,
    budget: Budget,
    mut permit: DrainPermit,
    origin: Option<Arc<Origin>>,
) where
    B: Body + Send + Unpin + 'static,
{
    let draining = origin.map(Origin::start_drain);
    // The join handle is dropped: the task is detached and ends by itself at
    // the end of the body, on the first error, or at the deadline.
    drop(handle.spawn(async move {
        permit.running();
        let drain = poll_fn(|cx| poll_drain(&mut body, cx, budget.max_bytes, &mut permit));
        let outcome = match budget.deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, drain).await.unwrap_or(Outcome::OverTime),
            None => drain.await,
        };
        // The body goes first, so the connection is back with hyper before
        // the outcome is reported.
        drop(body);
        finish(permit, outcome, draining);
    }));
}

fn finish(permit: DrainPermit, outcome: Outcome, draining: Option<Draining>) {
    if let Some(draining) = draining {
        draining.origin().record_transfer(permit.bytes(), permit.elapsed());
    }
    permit.finish(outcome);
}

/// Frames read in one poll before the drain yields to other tasks (and to
/// its own deadline): a body that always has a frame ready must not hold a
/// worker thread past `max_time`.
const FRAMES_PER_POLL: usize = 64;

/// Reads and discards the frames of `body` that are ready, until its end or
/// until more than `max_bytes` data bytes would have been read. `Pending`
/// when the body waits for the server (or after [`FRAMES_PER_POLL`] frames,
/// to let other tasks run). The caller drops the body once this is ready, so
/// its connection is pooled only if the end was reached.
fn poll_drain<B>(
    body: &mut B,
    cx: &mut Context<'_>,
    max_bytes: u64,
    permit: &mut DrainPermit,
) -> Poll<Outcome>
where
    B: Body + Unpin,
{
    for _ in 0..FRAMES_PER_POLL {
        if body.is_end_stream() {
            return Poll::Ready(Outcome::Drained);
        }
        let frame = match ready!(Pin::new(&mut *body).poll_frame(cx)) {
            None => return Poll::Ready(Outcome::Drained),
            Some(Err(_)) => return Poll::Ready(Outcome::Failed),
            Some(Ok(frame)) => frame,
        };
        // Trailers carry no data bytes; they are read and dropped like data.
        if let Some(data) = frame.data_ref() {
            permit.add_bytes(data.remaining() as u64);
        }
        let left = max_bytes.saturating_sub(permit.bytes());
        // Over budget already, or the rest is known to be longer than what is left.
        if permit.bytes() > max_bytes || body.size_hint().lower() > left {
            return Poll::Ready(Outcome::OverBytes);
        }
    }
    cx.waker().wake_by_ref();
    Poll::Pending
}
