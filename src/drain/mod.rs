//! The one place that drains: reads a dropped body to its end, within its
//! allowance, and drops it.
//!
//! hyper's own body (`hyper::body::Incoming`) is first read in the drop, as
//! far as hyper has handed it over: that runs no code but hyper's, never
//! waits, and lets a body whose rest is there end at once, with no task.
//! Anything that has to wait for the server, and every other body (whose
//! code could block or take a lock the caller holds), is read on a
//! background task, on the runtime `runtime::for_drain` chooses.
//!
//! The time budget counts from the drop and is checked before every frame,
//! in the drop and on the task alike, so the outcome is known within
//! `max_time` of the drop plus the time of one frame, whatever the body.
//!
//! HTTP/2 bodies never come here: a dropped one is reset at once, unread
//! (the HTTP/2 room, `http2`, says why).

use std::cell::Cell;
use std::future::poll_fn;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};
use std::time::Instant;

use bytes::Buf;
use http_body::Body;
use tokio::runtime::Handle;

use crate::budget::{Allowance, DrainBudget, Spending};
use crate::event::OriginView;
use crate::outcome::Reason;
use crate::policy;
use crate::response::DropContext;
use crate::runtime;
use crate::stats::Slot;
use crate::timer::Deadline;

mod task;

/// Drains `body` within `budget`, counted from now (the drop): hyper's body
/// first here, as far as it has arrived; then, if it has to wait for the
/// server (or is another body), on a task, if the cap and a runtime let it.
/// Never blocks and never waits.
pub(crate) fn start<B>(body: Pin<Box<B>>, budget: DrainBudget, mut ctx: DropContext, view: Option<OriginView>)
where
    B: Body + Send + 'static,
{
    let fetched = ctx.take_runtime();
    let now = Instant::now();
    let mut drain = Drain {
        allowance: Allowance::from_drop(budget, now),
        body: Some(body),
        ctx,
        slot: None,
        origin_slot: false,
        recorded: false,
        view,
        bytes: 0,
        first_wait: None,
        crossed: false,
        polled: false,
    };
    if policy::runs_in_the_drop::<B>() {
        // hyper's body does not panic; if it ever did, the drop must not.
        let mut cx = Context::from_waker(Waker::noop());
        match catch_unwind(AssertUnwindSafe(|| drain.poll_drain(&mut cx, None))) {
            Ok(Poll::Pending) => {}
            Ok(Poll::Ready(reason)) => return drain.finish(reason),
            Err(_) => return drain.finish(Reason::BodyPanic),
        }
    }
    let (runtime, fallback) = match runtime::for_drain(fetched, Handle::try_current().ok()) {
        Ok(runtimes) => runtimes,
        Err(refused) => return drain.finish(policy::cannot_wait(refused, drain.bytes > 0)),
    };
    match policy::admit(drain.ctx.shared(), drain.ctx.origin().map(|o| &*o.origin)) {
        Some((slot, origin_slot)) => (drain.slot, drain.origin_slot) = (Some(slot), origin_slot),
        None => return drain.finish(policy::cannot_wait(Reason::Saturated, drain.bytes > 0)),
    }
    task::spawn(&runtime, drain, fallback);
}

/// One drain: owns the body (and, on a task, its slot) until the outcome is
/// recorded, however it ends (finished, dropped unpolled, cancelled,
/// unwinding).
struct Drain<B> {
    /// `None` once dropped.
    body: Option<Pin<Box<B>>>,
    ctx: DropContext,
    /// The byte allowance and the deadline, fixed at the drop.
    allowance: Allowance,
    /// Its place under `max_concurrent_drains`, once it goes to a task.
    slot: Option<Slot>,
    /// It also took one of its origin's share of those places.
    origin_slot: bool,
    /// The outcome was recorded.
    recorded: bool,
    view: Option<OriginView>,
    /// Data bytes read so far.
    bytes: u64,
    /// When the body first had to wait for the server, and the bytes read
    /// before: what came after is the link's throughput, a sample the origin
    /// keeps if the connection was warm (`policy::samples_throughput`).
    first_wait: Option<(Instant, u64)>,
    /// A data frame took `bytes` past the allowance: one more frame is read
    /// to see whether the body ends there.
    crossed: bool,
    /// The task ran: dropped without an outcome, it was cancelled rather
    /// than never run (read only then, by `Drop`).
    polled: bool,
}

impl<B> Drain<B>
where
    B: Body,
{
    /// The task's drain: every way a drain ends. Within its budget it reads
    /// until an outcome ([`poll_drain`](Self::poll_drain): the end of the
    /// body, an error, the byte allowance, the deadline), waiting for the
    /// server until the deadline (the crate's own timer, which needs no time
    /// driver: see `timer.rs`); a panic of the body ends it too
    /// ([`poll_guarded`](Self::poll_guarded)).
    async fn run(&mut self) -> Reason {
        let mut deadline = self.allowance.deadline.map(Deadline::at);
        poll_fn(|cx| self.poll_guarded(cx, deadline.as_mut())).await
    }

    /// [`poll_drain`](Self::poll_drain), a panic of the body ending the
    /// drain here, counted, rather than unwinding into the runtime with the
    /// drain left to its `Drop`.
    fn poll_guarded(&mut self, cx: &mut Context<'_>, deadline: Option<&mut Deadline>) -> Poll<Reason> {
        catch_unwind(AssertUnwindSafe(|| self.poll_drain(cx, deadline)))
            .unwrap_or(Poll::Ready(Reason::BodyPanic))
    }

    /// Reads and discards the frames of the body that are ready, until its
    /// end, an error, the deadline (checked before every frame), or the byte
    /// allowance: a body whose known remaining length exceeds what is left is
    /// given up at once; one of unknown length is read one frame past the
    /// allowance, and then one more frame to see whether the body ends there
    /// (only its end marker or trailers left: drained), else given up.
    /// `Pending` when the body waits for the server (with a `deadline`,
    /// woken by it when it passes), or after [`FRAMES_PER_POLL`] frames to
    /// let other tasks run.
    fn poll_drain(&mut self, cx: &mut Context<'_>, deadline: Option<&mut Deadline>) -> Poll<Reason> {
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(Reason::EndOfBody);
        };
        for _ in 0..FRAMES_PER_POLL {
            if body.is_end_stream() {
                return Poll::Ready(Reason::EndOfBody);
            }
            if self.allowance.deadline.is_some_and(|at| Instant::now() >= at) {
                return Poll::Ready(Reason::OverTime);
            }
            let frame = match body.as_mut().poll_frame(cx) {
                Poll::Pending => {
                    if self.first_wait.is_none() && self.ctx.origin().is_some() {
                        self.first_wait = Some((Instant::now(), self.bytes));
                    }
                    if let Some(deadline) = deadline {
                        ready!(deadline.poll_elapsed(cx));
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
            match self.allowance.after_frame(self.bytes, len, self.crossed, body.size_hint()) {
                Spending::Within => {}
                Spending::Crossed => self.crossed = true,
                Spending::Spent => return Poll::Ready(Reason::OverBytes),
            }
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
        drop_for_a_drain(self.body.take());
        if self.recorded {
            return;
        }
        self.recorded = true;
        if reason == Reason::EndOfBody {
            self.ctx.ended();
        }
        let elapsed = self.allowance.dropped_at.elapsed();
        self.teach_the_origin(reason);
        self.ctx.record(reason, self.bytes, elapsed, self.view);
        if self.origin_slot
            && let Some(origin) = self.ctx.origin()
        {
            origin.origin.give_back_slot();
        }
        drop(self.slot.take());
    }
}

impl<B> Drain<B> {
    /// What a drain that ended with `reason` teaches its origin's estimates:
    /// a throughput sample, and (in adaptive mode) whether it reached the end,
    /// for probes; at most one lock, and none when there is nothing to say.
    fn teach_the_origin(&self, reason: Reason) {
        let Some(origin) = self.ctx.origin() else { return };
        let sample = self.first_wait.filter(|_| policy::samples_throughput(reason, self.ctx.warm()));
        let outcome =
            policy::counts_for_probes(reason).filter(|_| self.ctx.shared().config.budgets.adaptive());
        if sample.is_none() && outcome.is_none() {
            return;
        }
        let bytes = self.bytes;
        origin.origin.with(|est| {
            if let Some((at, before)) = sample {
                est.record_drain(bytes - before, at.elapsed(), Instant::now());
            }
            if let Some(reached_the_end) = outcome {
                est.record_outcome(reached_the_end);
            }
        });
    }
}

impl<B> Drop for Drain<B> {
    fn drop(&mut self) {
        if !self.recorded {
            self.finish(policy::unfinished(self.polled, self.bytes > 0));
        }
    }
}

thread_local! {
    /// Set while the layer drops a body it took over at an early drop.
    static DROPPING_FOR_A_DRAIN: Cell<bool> = const { Cell::new(false) };
}

/// Drops `body` as the layer does once it owns a dropped body's fate (a
/// skip, or a drain's end): any armed `DrainBody` inside it gives up its own
/// drain (see [`dropping_for_a_drain`]), so a response whose extensions were lost between two layers (the
/// marker with them) still drains and counts once, in the outer layer.
pub(crate) fn drop_for_a_drain<T>(body: T) {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            DROPPING_FOR_A_DRAIN.set(self.0);
        }
    }
    let _restore = Restore(DROPPING_FOR_A_DRAIN.replace(true));
    drop(body);
}

/// Whether the body being dropped on this thread is dropped by the layer
/// for a drain or a skip it decided ([`drop_for_a_drain`]): a `DrainBody`
/// dropped inside it leaves its response's fate to that decision.
pub(crate) fn dropping_for_a_drain() -> bool {
    DROPPING_FOR_A_DRAIN.get()
}

/// Frames read in one poll before the drain yields to other tasks: a body
/// that always has a frame ready must not hold a worker thread.
const FRAMES_PER_POLL: usize = 64;
