//! The one place that drains: a background task that reads a dropped body to
//! its end, within its allowance, then drops it.

use std::future::{Future, poll_fn};
use std::panic::catch_unwind;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::Buf;
use http_body::Body;
use tokio::runtime::Handle;
use tokio::time::Sleep;

use crate::adaptive::Draining;
use crate::body::DropContext;
use crate::budget::Allowance;
use crate::outcome::Reason;
use crate::policy;
use crate::stats::{AdaptiveView, Slot};

/// Drains `body` within `allowance` on a task spawned on `handle`.
///
/// Never blocks. If the runtime is shutting down the task is dropped
/// unpolled, which drops the body (hyper closes the connection) and counts
/// the drop as the policy says ([`policy::unfinished`]).
pub(crate) fn spawn<B>(
    handle: &Handle,
    body: B,
    allowance: Allowance,
    slot: Slot,
    ctx: DropContext,
    view: Option<AdaptiveView>,
) where
    B: Body + Send + Unpin + 'static,
{
    let draining = ctx.origin.as_ref().map(|(origin, _)| origin.clone().start_drain());
    let mut task = Drain {
        body: Some(body),
        ctx,
        slot: Some(slot),
        view,
        draining,
        bytes: 0,
        started: Instant::now(),
        polled: false,
    };
    // The join handle is dropped: the task is detached and ends by itself at
    // the end of the body, on the first error, or at the deadline.
    drop(handle.spawn(async move {
        task.polled = true;
        let reason = task.run(allowance).await;
        task.finish(reason);
    }));
}

/// One drain: owns the body and its slot until the outcome is recorded,
/// however the task ends (finished, dropped unpolled, cancelled, unwinding).
struct Drain<B> {
    /// `None` once dropped.
    body: Option<B>,
    ctx: DropContext,
    /// `None` once the outcome was recorded.
    slot: Option<Slot>,
    view: Option<AdaptiveView>,
    draining: Option<Draining>,
    /// Data bytes read so far.
    bytes: u64,
    started: Instant,
    polled: bool,
}

impl<B> Drain<B>
where
    B: Body + Unpin,
{
    async fn run(&mut self, allowance: Allowance) -> Reason {
        // Armed before the first read, but registered with the timer only
        // if the body ever has to wait (`Sleep` registers on first poll).
        let deadline = match allowance.deadline {
            None => None,
            Some(at) => match catch_unwind(|| tokio::time::sleep_until(at)) {
                Ok(sleep) => Some(sleep),
                Err(_) => {
                    policy::found_no_time_driver(&Handle::current());
                    return Reason::NoTimeDriver;
                }
            },
        };
        let mut deadline = pin!(deadline);
        poll_fn(|cx| self.poll_drain(cx, allowance, deadline.as_mut().as_pin_mut())).await
    }

    /// Reads and discards the frames of the body that are ready, until its
    /// end, an error, the deadline, or until more than the allowance of data
    /// bytes would have been read. `Pending` when the body waits for the
    /// server, or after [`FRAMES_PER_POLL`] frames to let other tasks run.
    fn poll_drain(
        &mut self,
        cx: &mut Context<'_>,
        allowance: Allowance,
        deadline: Option<Pin<&mut Sleep>>,
    ) -> Poll<Reason> {
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(Reason::EndOfBody);
        };
        for _ in 0..FRAMES_PER_POLL {
            if body.is_end_stream() {
                return Poll::Ready(Reason::EndOfBody);
            }
            let frame = match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Pending => {
                    if let Some(deadline) = deadline {
                        ready!(deadline.poll(cx));
                        return Poll::Ready(Reason::OverTime);
                    }
                    return Poll::Pending;
                }
                Poll::Ready(None) => return Poll::Ready(Reason::EndOfBody),
                Poll::Ready(Some(Err(_))) => return Poll::Ready(Reason::BodyError),
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            // Trailers carry no data bytes; they are read and dropped like data.
            if let Some(data) = frame.data_ref() {
                self.bytes = self.bytes.saturating_add(data.remaining() as u64);
            }
            let left = allowance.max_bytes.saturating_sub(self.bytes);
            // Over budget already, or the rest is known to be longer than what is left.
            if self.bytes > allowance.max_bytes || body.size_hint().lower() > left {
                return Poll::Ready(Reason::OverBytes);
            }
        }
        // A body that always has a frame ready never lets the timer fire.
        if allowance.deadline.is_some_and(|at| tokio::time::Instant::now() >= at) {
            return Poll::Ready(Reason::OverTime);
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl<B> Drain<B> {
    /// Drops the body, then records `reason`, then frees the slot: the
    /// connection is back with hyper before the outcome is visible, and the
    /// outcome is visible before `in_flight` drops.
    fn finish(&mut self, reason: Reason) {
        drop(self.body.take());
        if self.slot.is_none() {
            return;
        }
        let elapsed = self.started.elapsed();
        if let Some(draining) = self.draining.take() {
            draining.origin().record_transfer(self.bytes, elapsed);
        }
        self.ctx.record(reason, self.bytes, elapsed, self.view);
        drop(self.slot.take());
    }
}

impl<B> Drop for Drain<B> {
    fn drop(&mut self) {
        if self.slot.is_some() {
            self.finish(policy::unfinished(self.polled, std::thread::panicking()));
        }
    }
}

/// Frames read in one poll before the drain yields to other tasks (and to
/// its own deadline): a body that always has a frame ready must not hold a
/// worker thread past `max_time`.
const FRAMES_PER_POLL: usize = 64;
