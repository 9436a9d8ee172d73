//! The one place that drains: reads a dropped body to its end, within its
//! allowance, first in the drop with what is buffered, then on a background
//! task, and drops it.

use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker, ready};
use std::time::Instant;

use bytes::Buf;
use http_body::Body;
use tokio::runtime::Handle;
use tokio::time::Sleep;

use crate::body::DropContext;
use crate::budget::{Allowance, DrainBudget};
use crate::outcome::Reason;
use crate::policy;
use crate::stats::{AdaptiveView, Slot};

/// Drains `body` within `budget`: first, in the drop, what is already
/// there; then, if the body has to wait for the server, on a task spawned on
/// the runtime [`policy::runtime`] names, with a deadline `budget.max_time`
/// after the drop.
///
/// Never blocks: the first step reads only frames that are ready, and reads
/// no clock. If the runtime is shutting down the task is dropped unpolled,
/// which drops the body (hyper closes the connection) and counts the drop as
/// the policy says ([`policy::unfinished`]).
pub(crate) fn start<B>(body: B, budget: DrainBudget, ctx: DropContext, view: Option<AdaptiveView>)
where
    B: Body + Send + Unpin + 'static,
{
    let timed = view.is_some() || tracing::enabled!(target: "drain_on_drop", tracing::Level::DEBUG);
    let mut task = Drain {
        body: Some(body),
        ctx,
        slot: None,
        recorded: false,
        view,
        bytes: 0,
        first_wait: None,
        crossed: false,
        failed: false,
        started: timed.then(Instant::now),
        polled: false,
    };
    // A body whose rest is already buffered ends here: no task, no timer,
    // one hop less before hyper can pool the connection. A panic of the
    // body stays here, as it would in the task (and is not risked while the
    // thread already unwinds).
    if !std::thread::panicking() {
        let mut cx = Context::from_waker(Waker::noop());
        let now = Allowance { max_bytes: budget.max_bytes, deadline: None };
        let first = catch_unwind(AssertUnwindSafe(|| task.poll_drain(&mut cx, now, None)));
        match first {
            Ok(Poll::Pending) => {}
            // Left to the task: a body that fails in a drop made while the
            // runtime tears down (its connection task already gone) counts
            // as the runtime's, when the task is dropped unpolled.
            Ok(Poll::Ready(Reason::BodyError)) => task.failed = true,
            Ok(Poll::Ready(reason)) => return task.finish(reason),
            Err(_) => return task.finish(policy::unfinished(true, true)),
        }
    }
    // It has to wait: a background drain, on a runtime with a timer, if the
    // cap lets it.
    let handle = match policy::runtime(&task.ctx.shared) {
        Ok(handle) => handle,
        Err(reason) => return task.finish(reason),
    };
    let Some(slot) = policy::admit(&task.ctx.shared) else {
        return task.finish(Reason::Saturated);
    };
    task.slot = Some(slot);
    // The time budget counts from the drop, which is now.
    let allowance = Allowance::starting_now(budget);
    // The join handle is dropped: the task is detached and ends by itself at
    // the end of the body, on the first error, or at the deadline.
    drop(handle.spawn(async move {
        task.polled = true;
        let reason = if task.failed { Reason::BodyError } else { task.run(allowance).await };
        task.finish(reason);
    }));
}

/// One drain: owns the body (and, on a task, its slot) until the outcome is recorded,
/// however the task ends (finished, dropped unpolled, cancelled, unwinding).
struct Drain<B> {
    /// `None` once dropped.
    body: Option<B>,
    ctx: DropContext,
    /// Its place under `max_concurrent_drains`, once it goes to a task.
    slot: Option<Slot>,
    /// The outcome was recorded.
    recorded: bool,
    view: Option<AdaptiveView>,
    /// Data bytes read so far.
    bytes: u64,
    /// When the body first had to wait for the server, and the bytes read
    /// before: in adaptive mode, what came after is the link's throughput.
    first_wait: Option<(Instant, u64)>,
    /// A data frame took `bytes` past the allowance: one more frame is read
    /// to see whether the body ends there.
    crossed: bool,
    /// The body failed in the first step, at the drop.
    failed: bool,
    /// When the drain started, when its time is reported (an event or
    /// adaptive mode): the clock is not read otherwise.
    started: Option<Instant>,
    /// The task was polled: dropped without an outcome, it was cancelled
    /// rather than never run (read only then, by `Drop`).
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
    /// end, an error, the deadline, or the byte allowance: a body whose known
    /// remaining length exceeds what is left is given up at once; one of
    /// unknown length is read one frame past the allowance, and then one more
    /// frame to see whether the body ends there (only its end marker or
    /// trailers left: drained), else given up. `Pending` when the body waits
    /// for the server, or after [`FRAMES_PER_POLL`] frames to let other tasks
    /// run.
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
                    if self.first_wait.is_none() && self.ctx.origin.is_some() {
                        self.first_wait = Some((Instant::now(), self.bytes));
                    }
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
            let Some(data) = frame.data_ref() else { continue };
            let len = data.remaining() as u64;
            self.bytes = self.bytes.saturating_add(len);
            match policy::after_frame(self.bytes, len, allowance.max_bytes, self.crossed, body.size_hint()) {
                policy::Budget::Within => {}
                policy::Budget::Crossed => self.crossed = true,
                policy::Budget::Spent => return Poll::Ready(Reason::OverBytes),
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
        if self.recorded {
            return;
        }
        self.recorded = true;
        let elapsed = self.started.map(|at| at.elapsed()).unwrap_or_default();
        let link_limited = matches!(reason, Reason::EndOfBody | Reason::OverBytes | Reason::OverTime);
        if let (Some(origin), Some((at, before)), true) = (&self.ctx.origin, self.first_wait, link_limited) {
            origin.record_drain(self.bytes - before, at.elapsed());
        }
        self.ctx.record(reason, self.bytes, elapsed, self.view);
        drop(self.slot.take());
    }
}

impl<B> Drop for Drain<B> {
    fn drop(&mut self) {
        if !self.recorded {
            self.finish(policy::unfinished(self.polled, std::thread::panicking()));
        }
    }
}

/// Frames read in one poll before the drain yields to other tasks (and to
/// its own deadline): a body that always has a frame ready must not hold a
/// worker thread past `max_time`.
const FRAMES_PER_POLL: usize = 64;
