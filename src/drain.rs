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

use std::cell::Cell;
use std::future::poll_fn;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
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
use crate::sizing;
use crate::stats::Slot;
use crate::timer::Deadline;

/// Drains `body` within `budget`, counted from now (the drop): hyper's body
/// first here, as far as it has arrived; then, if it has to wait for the
/// server (or is another body), on a task, if the cap and a runtime let it.
/// Never blocks and never waits.
pub(crate) fn start<B>(body: Pin<Box<B>>, budget: DrainBudget, ctx: DropContext, view: Option<OriginView>)
where
    B: Body + Send + 'static,
{
    begin(body, budget, ctx, view, false);
}

/// [`start`] for an HTTP/2 body whose reset its origin's pace refused: the
/// drain runs within `budget` (`sizing::paced`) and reaching the end counts
/// `paced_to_end`.
pub(crate) fn start_paced<B>(
    body: Pin<Box<B>>,
    budget: DrainBudget,
    ctx: DropContext,
    view: Option<OriginView>,
) where
    B: Body + Send + 'static,
{
    begin(body, budget, ctx, view, true);
}

fn begin<B>(
    body: Pin<Box<B>>,
    budget: DrainBudget,
    mut ctx: DropContext,
    view: Option<OriginView>,
    paced: bool,
) where
    B: Body + Send + 'static,
{
    let fetched = ctx.take_runtime();
    let mut drain = Drain {
        allowance: Allowance::from_drop(budget, Instant::now()),
        body: Some(body),
        ctx,
        slot: None,
        recorded: false,
        view,
        bytes: 0,
        first_wait: None,
        crossed: false,
        polled: false,
        paced,
        reset_noted: false,
    };
    if policy::runs_in_the_drop::<B>() {
        // hyper's body does not panic; if it ever did, the drop must not.
        let mut cx = Context::from_waker(Waker::noop());
        match catch_unwind(AssertUnwindSafe(|| drain.poll_drain(&mut cx, None))) {
            Ok(Poll::Pending) => {}
            // An HTTP/2 drain that gives up here may have to go on instead.
            Ok(Poll::Ready(reason)) if !drain.go_on_past(reason) => return drain.finish(reason),
            Ok(Poll::Ready(_)) => {}
            Err(_) => return drain.finish(Reason::BodyPanic),
        }
    }
    let (runtime, fallback) = match runtime::for_drain(fetched, Handle::try_current().ok()) {
        Ok(runtimes) => runtimes,
        Err(refused) => return drain.finish(policy::cannot_wait(refused, drain.bytes > 0)),
    };
    match policy::admit(drain.ctx.shared()) {
        Some(slot) => drain.slot = Some(slot),
        None => return drain.finish(policy::cannot_wait(Reason::Saturated, drain.bytes > 0)),
    }
    spawn(&runtime, drain, fallback);
}

/// Runs `drain` on a task of `runtime`. A runtime that has shut down drops
/// the task unpolled, inside `spawn`: the drain then goes to `fallback`
/// (see [`Task`]). The fallback is kept for that call only: a runtime that
/// shuts down later drops the queued drain, counted `runtime_shutdown`, and
/// no drain keeps a runtime it does not run on (its handle holds the
/// runtime's file descriptors).
fn spawn<B>(runtime: &Handle, drain: Drain<B>, fallback: Option<Handle>)
where
    B: Body + Send + 'static,
{
    let fallback = fallback.map(|handle| Arc::new(Mutex::new(Some(handle))));
    let mut task = Task { drain: Some(drain), fallback: fallback.clone() };
    // Detached: the task ends by itself at the end of the body, on the
    // first error, or at the deadline.
    drop(runtime.spawn(async move {
        let mut drain = task.drain.take().expect("a task is started once");
        drain.polled = true;
        let reason = drain.run().await;
        drain.finish(reason);
    }));
    if let Some(fallback) = fallback {
        drop(take(&fallback));
    }
}

/// A drain on its way to a task: dropped unpolled inside `spawn` (its
/// runtime had shut down), it hands the drain to the fallback runtime, if
/// `spawn` still holds one for it; otherwise the drain counts itself (`Drop
/// for Drain`).
struct Task<B>
where
    B: Body + Send + 'static,
{
    drain: Option<Drain<B>>,
    fallback: Option<Arc<Mutex<Option<Handle>>>>,
}

fn take(fallback: &Mutex<Option<Handle>>) -> Option<Handle> {
    // Only `take` runs under this lock.
    fallback.lock().unwrap_or_else(|e| e.into_inner()).take()
}

impl<B> Drop for Task<B>
where
    B: Body + Send + 'static,
{
    fn drop(&mut self) {
        let fallback = self.fallback.take().and_then(|f| take(&f));
        if let (Some(drain), Some(fallback)) = (self.drain.take(), fallback) {
            spawn(&fallback, drain, None);
        }
    }
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
    /// HTTP/2: the drain runs past its budget, its reset refused by its
    /// origin's pace (see `http2.rs`).
    paced: bool,
    /// HTTP/2: the pace let this drain's reset through (and noted it).
    reset_noted: bool,
}

impl<B> Drain<B>
where
    B: Body,
{
    /// The task's drain: reads until an outcome, waiting for the server
    /// until the deadline (the crate's own timer, which needs no time
    /// driver: see `timer.rs`).
    async fn run(&mut self) -> Reason {
        loop {
            // Registered with the timer only if the body ever has to wait.
            let mut deadline = self.allowance.deadline.map(Deadline::at);
            // A panic of the body ends the drain here, counted, rather than
            // unwinding into the runtime with the drain left to its `Drop`.
            let reason = poll_fn(|cx| {
                catch_unwind(AssertUnwindSafe(|| self.poll_drain(cx, deadline.as_mut())))
                    .unwrap_or(Poll::Ready(Reason::BodyPanic))
            })
            .await;
            if !self.go_on_past(reason) {
                return reason;
            }
        }
    }

    /// Whether a drain that ended with `reason` goes on, past its budget:
    /// an HTTP/2 drain that gave up, whose reset its origin's pace refuses
    /// (see `http2.rs`). Once.
    fn go_on_past(&mut self, reason: Reason) -> bool {
        let ctx = &self.ctx;
        if self.paced || !ctx.http2() || !policy::reset_is_paced(reason) {
            return false;
        }
        if policy::may_reset(ctx.shared(), ctx.origin(), Instant::now()) {
            self.reset_noted = true;
            return false;
        }
        self.paced = true;
        let budget = DrainBudget::new(self.allowance.max_bytes, self.allowance.max_time());
        self.allowance = Allowance::from_drop(sizing::paced(budget), self.allowance.dropped_at);
        true
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
        let elapsed = self.allowance.dropped_at.elapsed();
        let reason = if self.paced && reason == Reason::EndOfBody { Reason::PacedToEnd } else { reason };
        if self.ctx.http2() && !self.reset_noted && policy::resets_the_stream(reason) {
            policy::note_reset(self.ctx.shared(), self.ctx.origin(), Instant::now());
        }
        self.teach_the_origin(reason);
        self.ctx.record(reason, self.bytes, elapsed, self.view);
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
        self.ctx.shared().origins.with(origin.id, |est| {
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
