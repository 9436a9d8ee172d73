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
//! HTTP/2 is drained otherwise (`http2.rs` says why): the budgets do not
//! apply; a body that does not end in the drop is reset as soon as its
//! connection can remember the reset, and meanwhile read on (or, an
//! open-ended stream, held unread).

use std::cell::Cell;
use std::future::poll_fn;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};
use std::time::{Duration, Instant};

use bytes::Buf;
use http_body::Body;
use tokio::runtime::Handle;

use crate::budget::{Allowance, DrainBudget, Spending};
use crate::event::OriginView;
use crate::http2::{self, MAX_WAIT};
use crate::origin::OriginAt;
use crate::outcome::Reason;
use crate::policy;
use crate::response::DropContext;
use crate::runtime;
use crate::stats::Slot;
use crate::timer::Deadline;

mod task;

/// How a drain starts.
pub(crate) enum Start {
    /// Read within this budget (counted from the drop). On HTTP/2 a body
    /// that stalls is given up too (`stalled`), and one given up has its
    /// stream reset once its connection can remember the reset; or, when
    /// the layer was told to reset at once (`http2_reset_memory`), what has
    /// arrived is read in the drop and the rest reset there.
    Budget(DrainBudget),
    /// HTTP/2: a drop skipped for `reason`, whose reset found no room:
    /// wait for room, asking again at `ask_at`.
    WaitForRoom { reason: Reason, ask_at: Instant },
}

/// Drains `body` as `start` says, counted from now (the drop): hyper's body
/// first here, as far as it has arrived; then, if it has to wait for the
/// server (or is another body), on a task, if the cap and a runtime let it.
/// Never blocks and never waits.
pub(crate) fn start<B>(body: Pin<Box<B>>, start: Start, mut ctx: DropContext, view: Option<OriginView>)
where
    B: Body + Send + 'static,
{
    let fetched = ctx.take_runtime();
    let now = Instant::now();
    let http2 = ctx.http2();
    let resets_at_once = http2 && ctx.shared().config.reset_memory.is_some();
    let (budget, wait) = match start {
        Start::Budget(_) if resets_at_once => (UNLIMITED, None),
        Start::Budget(budget) => (budget, None),
        Start::WaitForRoom { reason, ask_at } => (UNLIMITED, Some(Wait { reason, ask_at, since: now })),
    };
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
        wait,
        reset_counted: false,
        last_frame: None,
    };
    if drain.wait.is_none() && policy::runs_in_the_drop::<B>() {
        // hyper's body does not panic; if it ever did, the drop must not.
        let mut cx = Context::from_waker(Waker::noop());
        match catch_unwind(AssertUnwindSafe(|| drain.poll_drain(&mut cx, None))) {
            Ok(Poll::Pending) => {}
            Ok(Poll::Ready(reason)) => return drain.finish(reason),
            Err(_) => return drain.finish(Reason::BodyPanic),
        }
    }
    // HTTP/2, told to reset at once: a body that has to wait for the
    // server is reset now, if its connection can remember the reset; else
    // it waits for room.
    if resets_at_once && drain.wait.is_none() {
        match policy::may_reset(drain.ctx.shared(), drain.ctx.streams(), now) {
            Ok(()) => {
                drain.reset_counted = true;
                return drain.finish(Reason::Reset);
            }
            Err(ask_at) => drain.wait = Some(Wait { reason: Reason::Reset, ask_at, since: now }),
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
    if http2 {
        drain.ctx.streams().hold();
    }
    task::spawn(&runtime, drain, fallback);
}

/// A budget that never runs out: HTTP/2 drains that wait for room read
/// past their budgets.
const UNLIMITED: DrainBudget = DrainBudget { max_bytes: u64::MAX, max_time: Duration::MAX };

/// HTTP/2: a drain whose reset waits for room (see `http2.rs`).
#[derive(Clone, Copy, Debug)]
struct Wait {
    /// Why the stream is to be reset: the drain's reason if it is.
    reason: Reason,
    /// When to ask the room again.
    ask_at: Instant,
    /// When the wait began.
    since: Instant,
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
    /// HTTP/2: its reset waits for room; it holds a stream meanwhile.
    wait: Option<Wait>,
    /// HTTP/2: the reset this drain ends with was counted by the room.
    reset_counted: bool,
    /// When the last frame came, if any: an HTTP/2 drain whose body sends
    /// nothing for a while has stalled (see [`Drain::read_h2`]).
    last_frame: Option<Instant>,
}

impl<B> Drain<B>
where
    B: Body,
{
    /// The task's drain: every way a drain ends. Within its budget it reads
    /// until an outcome, waiting for the server until the deadline (the
    /// crate's own timer, which needs no time driver: see `timer.rs`); on
    /// HTTP/2 also until the body stalls. An HTTP/2 drain given up resets
    /// its stream if its connection can remember the reset, or else waits
    /// for room: reading on (or, an open-ended stream, holding the body
    /// unread) until the body ends or the room lets the reset through,
    /// asking again when the room says, for at most [`MAX_WAIT`].
    async fn run(&mut self) -> Reason {
        if self.wait.is_none() {
            let mut deadline = self.allowance.deadline.map(Deadline::at);
            let http2 = self.ctx.http2();
            let reason = if http2 {
                self.read_h2(deadline.as_mut()).await
            } else {
                self.read(deadline.as_mut()).await
            };
            if !http2 || !policy::resets_the_stream(reason) {
                return reason;
            }
            let now = Instant::now();
            match policy::may_reset(self.ctx.shared(), self.ctx.streams(), now) {
                Ok(()) => {
                    self.reset_counted = true;
                    return reason;
                }
                Err(ask_at) => {
                    self.allowance = Allowance::from_drop(UNLIMITED, self.allowance.dropped_at);
                    self.crossed = false;
                    self.wait = Some(Wait { reason, ask_at, since: now });
                }
            }
        }
        let Some(wait) = self.wait else { unreachable!("a drain that reaches here waits for room") };
        let reads = policy::reads_while_waiting(wait.reason);
        let give_up = wait.since + MAX_WAIT;
        let mut ask_at = wait.ask_at;
        loop {
            let mut room = Deadline::at(ask_at.min(give_up));
            let ended = poll_fn(|cx| {
                if reads && let Poll::Ready(reason) = self.poll_guarded(cx, None) {
                    return Poll::Ready(Some(reason));
                }
                room.poll_elapsed(cx).map(|()| None)
            })
            .await;
            match ended {
                // Read to the end while waiting: no reset needed.
                Some(Reason::EndOfBody) => return Reason::PacedToEnd,
                Some(reason) => return reason,
                None => {}
            }
            let now = Instant::now();
            match policy::may_reset(self.ctx.shared(), self.ctx.streams(), now) {
                Ok(()) => {
                    self.reset_counted = true;
                    return wait.reason;
                }
                Err(_) if now >= give_up => return wait.reason,
                Err(next) => ask_at = next,
            }
        }
    }

    /// [`read`](Self::read) for HTTP/2, which also gives up (`stalled`) on a
    /// body that has not flowed when no frame came for
    /// [`http2::stall_after`] the origin's round trip: a server with nothing
    /// to send now gets its stream back rather than have it held (a stream,
    /// unlike an HTTP/1 connection, saves nothing by being held).
    async fn read_h2(&mut self, mut deadline: Option<&mut Deadline>) -> Reason {
        let round_trip = self.ctx.origin().and_then(OriginAt::round_trip);
        let started = Instant::now();
        // Fires when the body would have stalled had no frame come since
        // it was set; moved on then (not at every frame) if one came.
        let stall_after = http2::stall_after(round_trip);
        let mut quiet = Deadline::at(started + stall_after);
        poll_fn(|cx| {
            if let Poll::Ready(reason) = self.poll_guarded(cx, deadline.as_deref_mut()) {
                return Poll::Ready(reason);
            }
            // A body that has flowed is bounded by its budgets alone.
            if self.bytes >= http2::FLOWING {
                return Poll::Pending;
            }
            loop {
                ready!(quiet.poll_elapsed(cx));
                let stalls_at = self.last_frame.unwrap_or(started) + stall_after;
                if Instant::now() >= stalls_at {
                    return Poll::Ready(Reason::Stalled);
                }
                quiet = Deadline::at(stalls_at);
            }
        })
        .await
    }

    /// Reads within the budget until an outcome.
    async fn read(&mut self, mut deadline: Option<&mut Deadline>) -> Reason {
        poll_fn(|cx| self.poll_guarded(cx, deadline.as_deref_mut())).await
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
                Poll::Ready(Some(Ok(frame))) => {
                    self.last_frame = Some(Instant::now());
                    frame
                }
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
        if self.ctx.http2() && !self.reset_counted && policy::resets_the_stream(reason) {
            self.ctx.streams().note_reset(Instant::now());
        }
        self.teach_the_origin(reason);
        self.ctx.record(reason, self.bytes, elapsed, self.view);
        if self.ctx.http2() && self.slot.is_some() {
            self.ctx.streams().release();
        }
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
