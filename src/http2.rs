//! HTTP/2: what an early drop does to a stream, and when. Every rule of
//! it lives here, beside the facts from h2 (0.4) it rests on; the policy
//! and the drain ask this room and keep no HTTP/2 state of their own.
//!
//! **The facts.** Dropping an HTTP/2 body before its end makes h2 send
//! RST_STREAM(CANCEL): the server stops sending, the stream is freed, the
//! connection is kept. h2 then remembers the stream as reset, at most
//! `max_concurrent_reset_streams` of them (50 unless set: see
//! [`ResetMemory`]), each for at least 1 s (`reset_stream_duration`), and
//! ignores DATA still arriving for a stream it remembers. It does not
//! evict: past its memory a newly reset stream is not remembered at all,
//! and a remembered one is forgotten only when the connection task next
//! clears expired streams (once per poll of the connection, which under
//! load can come late). DATA for a forgotten stream is answered with a
//! reset of h2's own (STREAM_CLOSED), counted against the connection and
//! never forgotten: past 1,024 the client sends GOAWAY ENHANCE_YOUR_CALM
//! "too_many_internal_resets" and every request in flight fails
//! (hyperium/h2#856). A reset costs nothing when nothing more of the
//! stream arrives: a stalled server's, one whose data has all arrived.
//!
//! **The rule.** On HTTP/2 a kept stream saves nothing (the connection is
//! kept either way), but a reset is not free either: it must fit the
//! connection's reset memory, and some servers pay for it (Node 20's never
//! gives back the memory it counted for the bytes queued on a reset
//! stream, and refuses every new stream once 10 MB are counted). So a
//! dropped body is read while it flows, up to the stream's flow-control
//! window (`sizing::http2`: what the server may send before it hears a
//! reset anyway), and ends without a reset; a body that stalls before it
//! flowed (no frame for [`stall_after`] its origin's round trip), a longer
//! one, and an open-ended stream (see `stream_content_types`) are reset,
//! as long as the connection can remember the reset: the layer counts the
//! resets of each origin over the last [`RESET_WINDOW`] and lets its own
//! take at most [`ROOM_SHARE`] fifths of the connection's reset memory
//! ([`Streams::try_reset`]). Past that room the reset waits for room: an
//! open-ended stream is held unread meanwhile (its server sends at most
//! its stream window, 2 MiB with hyper's defaults, then waits), any other
//! body is read on, and one that ends meanwhile needs no reset. The wait
//! ends within [`RESET_WINDOW`], when the oldest counted reset leaves it,
//! or at [`MAX_WAIT`] at the latest.
//!
//! **The bound on streams.** Drains hold streams: at most [`HELD_STREAMS`]
//! per origin before a new request to that origin waits (in its response
//! future, before hyper-util's client sends it) for one of them to end, as
//! a caller reading its body would wait for its end: each drain that ends
//! lets the oldest waiting request go in its place, and every waiting
//! request goes once fewer than [`HELD_STREAMS`] are left. So an origin's
//! drains and requests never hold more streams than its callers would
//! reading every body, plus [`HELD_STREAMS`]; drains never take every
//! stream of a connection (servers allow 100 or more; RFC 9113 advises no
//! less), a server that announces no limit (Node's) is not flooded, and a
//! request waits only while its origin's drops come faster than drains
//! end. A client that sends a request as soon as it is called (tonic's
//! `Channel`, hyper's own connections) has the request at the server while
//! it waits: each caller can then hold one stream more.
//!
//! **Told the client's reset memory** (`http2_reset_memory`), the layer
//! resets every dropped body at once instead, reading only what has
//! arrived, for as long as the larger room lasts: with 10,000, 8,000 resets
//! in 2 s, as Go's client does (Go ignores late DATA altogether). That is
//! for servers that take resets well (hyper's, Go's, nginx): Node's refuses
//! a client that resets more than 1,000 streams in a burst, then 33 a
//! second (its nghttp2's limit), Go's client included.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A client whose HTTP/2 connections' reset memory can be set: how many
/// streams each connection remembers after resetting them (h2's
/// `max_concurrent_reset_streams`, 50 by default). See
/// [`DrainOnDropLayer::http2_reset_memory`](crate::DrainOnDropLayer::http2_reset_memory),
/// which sets it on the client and in the layer in one call.
///
/// Implemented for hyper-util's legacy `Client` builder and hyper's
/// `client::conn::http2::Builder` (cargo feature `http2`), and for any
/// `FnMut(usize)` closure, for a client built otherwise (tonic's
/// `Endpoint::http2_max_concurrent_reset_streams`).
pub trait ResetMemory {
    /// Sets how many locally reset streams each HTTP/2 connection of the
    /// client remembers.
    fn set_reset_memory(&mut self, streams: usize);
}

#[cfg(feature = "http2")]
impl ResetMemory for hyper_util::client::legacy::Builder {
    fn set_reset_memory(&mut self, streams: usize) {
        self.http2_max_concurrent_reset_streams(streams);
    }
}

#[cfg(feature = "http2")]
impl<E: Clone> ResetMemory for hyper::client::conn::http2::Builder<E> {
    fn set_reset_memory(&mut self, streams: usize) {
        self.max_concurrent_reset_streams(streams);
    }
}

impl<F: FnMut(usize)> ResetMemory for F {
    fn set_reset_memory(&mut self, streams: usize) {
        self(streams)
    }
}

/// How many reset streams h2 remembers per connection unless told
/// otherwise (h2's `DEFAULT_RESET_STREAM_MAX`).
pub(crate) const H2_RESET_MEMORY: usize = 50;

/// How long the layer counts a reset against its connection's memory: h2
/// remembers a reset stream for at least 1 s and forgets it only when the
/// connection task next clears expired streams, which under load comes up
/// to a second later (measured with an earlier pace of 25 a second: 32 a
/// second let late DATA through, so h2 held more than 50 at once).
pub(crate) const RESET_WINDOW: Duration = Duration::from_secs(2);

/// The share of the connection's reset memory the layer's own resets take
/// in any [`RESET_WINDOW`], in fifths: four (40 of h2's 50), leaving the
/// rest for resets it does not see (requests cancelled before their heads,
/// bodies that never came through it). So 40 drops at once are all reset,
/// and 20 a second are, for as long as they come.
pub(crate) const ROOM_SHARE: usize = 4;

/// Drains that may hold one origin's streams before new requests to it
/// wait: each stands for a caller that would otherwise read its body, so
/// every stream beyond the callers' own is one a server would not see if
/// they did. Few, then: Node's server counts the bytes queued on every open
/// stream against 10 MB per connection, and 16 callers reading bodies of
/// 512 KiB written at once already take 8 (tests/http2_node.rs: 8 held
/// drains made it refuse streams on a busy machine, 2 never). Enough,
/// still, that drains keep up (`cargo bench --bench http2`, at 2: 1.01 to
/// 1.28 times the rate of reading every body on hyper's, Node's and Go's
/// servers). A stream with nothing more to come is not held: it stalls
/// and is reset.
pub(crate) const HELD_STREAMS: usize = 2;

/// The longest a reset waits for room before it goes anyway: room comes
/// within [`RESET_WINDOW`] unless many drains wait for it; this only keeps
/// a drain from waiting for ever.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(5);

/// How long an HTTP/2 drain of a body that has not flowed (less than
/// [`FLOWING`] came: a stalled server, a trickle, a slow stream) waits for
/// the next frame before it calls the body stalled and resets the stream:
/// twice the origin's round trip (a flow-control window's worth takes
/// about one), plus [`STALL_SLACK`]; [`STALL_UNKNOWN`] when the round trip
/// is not known. A body that has flowed is not called stalled when it
/// pauses (it does when a busy machine does, and a reset would drop what
/// the server has queued for it): its time budget bounds it.
pub(crate) fn stall_after(round_trip: Option<Duration>) -> Duration {
    round_trip.map_or(STALL_UNKNOWN, |rtt| rtt.saturating_mul(2).saturating_add(STALL_SLACK))
}

/// Data bytes after which a drained body counts as flowing.
pub(crate) const FLOWING: u64 = 16 * 1024;
/// Added to twice the round trip before a body that has not flowed is
/// called stalled: what a busy server or client adds between two frames.
const STALL_SLACK: Duration = Duration::from_millis(5);
/// How long a drain waits for the next frame when the origin's round trip
/// is not known.
const STALL_UNKNOWN: Duration = Duration::from_millis(50);

/// Granularity of the reset count: resets are counted by the interval they
/// fall in, each for [`RESET_WINDOW`] plus one interval.
const SLICE: Duration = Duration::from_millis(100);
/// Slices kept: one more than the window covers.
const SLICES: usize = 21;

/// The resets of one origin's connection lately: counted by slice of time.
#[derive(Debug, Default)]
struct Room {
    /// When each slice began (`None`: unused), a ring.
    began: [Option<Instant>; SLICES],
    count: [usize; SLICES],
    /// The slice being filled.
    last: usize,
}

impl Room {
    /// Whether the slice `i` still counts `now`.
    fn counts(&self, i: usize, now: Instant) -> bool {
        self.began[i].is_some_and(|at| now.saturating_duration_since(at) < RESET_WINDOW + SLICE)
    }

    /// Resets counted `now`.
    fn total(&self, now: Instant) -> usize {
        (0..SLICES).filter(|&i| self.counts(i, now)).map(|i| self.count[i]).sum()
    }

    /// Counts a reset made `now`.
    fn add(&mut self, now: Instant) {
        let current = self.began[self.last].is_some_and(|at| now.saturating_duration_since(at) < SLICE);
        if !current {
            self.last = (self.last + 1) % SLICES;
            (self.began[self.last], self.count[self.last]) = (Some(now), 0);
        }
        self.count[self.last] += 1;
    }

    /// When the oldest slice counted `now` stops counting.
    fn frees_at(&self, now: Instant) -> Instant {
        let oldest = (0..SLICES).filter(|&i| self.counts(i, now)).filter_map(|i| self.began[i]).min();
        oldest.map_or(now, |at| at + RESET_WINDOW + SLICE)
    }
}

/// One origin's HTTP/2 streams, as far as the layer's drops touch them: the
/// resets lately (the room), the drains that hold a stream, and the
/// requests waiting for fewer of those.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    room: Mutex<Room>,
    /// Drains running on a task (reading, or waiting for room).
    held: AtomicUsize,
    /// Requests waiting for `held` to drop below [`HELD_STREAMS`], or for
    /// a drain to end.
    waiting: Mutex<Waiting>,
}

/// The requests of one origin waiting to be sent, oldest first, and the
/// passes handed to them by drains that ended.
#[derive(Debug, Default)]
struct Waiting {
    wakers: VecDeque<Waker>,
    /// Requests that may go although `held` is at the bound: one for each
    /// drain that ended while requests waited, taken by the next request
    /// polled (the one woken for it, unless another came first).
    passes: usize,
}

impl Streams {
    /// Lets a reset through `now` if the resets of the last [`RESET_WINDOW`]
    /// leave room in a connection that remembers `memory` reset streams
    /// (and counts it); otherwise says when to ask again.
    pub(crate) fn try_reset(&self, memory: usize, now: Instant) -> Result<(), Instant> {
        let mut room = lock(&self.room);
        if room.total(now) < room_for(memory) {
            room.add(now);
            Ok(())
        } else {
            Err(room.frees_at(now))
        }
    }

    /// Counts a reset made `now` whatever the room (one the layer cannot
    /// defer: no slot or runtime to wait with, a drop while unwinding).
    pub(crate) fn note_reset(&self, now: Instant) {
        lock(&self.room).add(now);
    }

    /// A drain starts running on a task, holding its stream.
    pub(crate) fn hold(&self) {
        self.held.fetch_add(1, Ordering::AcqRel);
    }

    /// A drain is done with its stream: the oldest waiting request goes
    /// on in its place, as a caller that read its body to the end would
    /// send its next request; once fewer drains than [`HELD_STREAMS`]
    /// hold streams, every waiting request does.
    pub(crate) fn release(&self) {
        let before = self.held.fetch_sub(1, Ordering::AcqRel);
        let mut waiting = lock(&self.waiting);
        // Woken outside the lock.
        if before <= HELD_STREAMS {
            waiting.passes = 0;
            let all = std::mem::take(&mut waiting.wakers);
            drop(waiting);
            all.into_iter().for_each(Waker::wake);
        } else if let Some(oldest) = waiting.wakers.pop_front() {
            waiting.passes += 1;
            drop(waiting);
            oldest.wake();
        }
    }

    /// `Ready` when a new request to this origin may be sent: fewer than
    /// [`HELD_STREAMS`] drains hold its streams, or a drain that ended
    /// left a pass. Otherwise `cx` is woken when one ends (oldest waiting
    /// first), or when fewer than [`HELD_STREAMS`] are left.
    pub(crate) fn poll_send(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.held.load(Ordering::Acquire) < HELD_STREAMS {
            return Poll::Ready(());
        }
        let mut waiting = lock(&self.waiting);
        // Asked again under the lock `release` takes after its decrement:
        // a release either sees this waker or happened before this load.
        if self.held.load(Ordering::Acquire) < HELD_STREAMS {
            return Poll::Ready(());
        }
        if waiting.passes > 0 {
            waiting.passes -= 1;
            // Not woken again for a pass it no longer needs.
            waiting.wakers.retain(|w| !w.will_wake(cx.waker()));
            return Poll::Ready(());
        }
        if !waiting.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            waiting.wakers.push_back(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// The resets the layer may make in a [`RESET_WINDOW`] on a connection
/// that remembers `memory` reset streams.
fn room_for(memory: usize) -> usize {
    (memory / 5).saturating_mul(ROOM_SHARE).max(1)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain counts and wakers: valid whatever a panic interrupted.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forty_resets_at_once_then_twenty_a_second() {
        let t0 = Instant::now();
        let streams = Streams::default();
        let ms = Duration::from_millis;
        let burst = (0..100).filter(|_| streams.try_reset(H2_RESET_MEMORY, t0).is_ok()).count();
        assert_eq!(burst, 40, "four fifths of h2's 50 at once");
        let again = streams.try_reset(H2_RESET_MEMORY, t0 + ms(1999)).unwrap_err();
        assert!(again >= t0 + RESET_WINDOW, "no room until the burst leaves the window: {:?}", again - t0);
        assert!(streams.try_reset(H2_RESET_MEMORY, again).is_ok(), "room once it left");
        // Sustained: one every 10 ms for 10 s; at most 40 in any 2 s.
        let start = t0 + Duration::from_secs(10);
        let through: Vec<Instant> = (0..1000)
            .map(|i| start + ms(10 * i))
            .filter(|&at| streams.try_reset(H2_RESET_MEMORY, at).is_ok())
            .collect();
        for (i, at) in through.iter().enumerate() {
            let in_window = through[i..].iter().take_while(|b| **b - *at < RESET_WINDOW).count();
            assert!(in_window <= 40, "{in_window} resets within {RESET_WINDOW:?} from {:?}", *at - start);
        }
        assert!(through.len() >= 150, "about 20 a second for 10 s: {}", through.len());
    }

    #[test]
    fn a_larger_memory_gives_a_larger_room_and_noted_resets_count() {
        let now = Instant::now();
        let streams = Streams::default();
        assert_eq!((0..10_000).filter(|_| streams.try_reset(10_000, now).is_ok()).count(), 8_000);
        let s = Streams::default();
        (0..40).for_each(|_| s.note_reset(now));
        assert!(s.try_reset(H2_RESET_MEMORY, now).is_err(), "resets the layer could not defer take room too");
    }

    /// A waker counting its wakes.
    fn counting_waker() -> (Waker, std::sync::Arc<AtomicUsize>) {
        struct Count(std::sync::Arc<AtomicUsize>);
        impl std::task::Wake for Count {
            fn wake(self: std::sync::Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let woken = std::sync::Arc::new(AtomicUsize::new(0));
        (Waker::from(std::sync::Arc::new(Count(woken.clone()))), woken)
    }

    #[test]
    fn requests_wait_while_held_streams_are_at_the_bound_and_go_on_when_one_is_released() {
        let streams = Streams::default();
        let (waker, woken) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        (0..HELD_STREAMS).for_each(|_| streams.hold());
        assert!(streams.poll_send(&mut cx).is_pending());
        assert!(streams.poll_send(&mut cx).is_pending(), "registered once");
        streams.release();
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        assert!(streams.poll_send(&mut cx).is_ready());
    }

    #[test]
    fn a_drain_that_ends_lets_the_oldest_waiting_request_go_in_its_place() {
        let streams = Streams::default();
        let (a, a_woken) = counting_waker();
        let (b, b_woken) = counting_waker();
        let (mut a, mut b) = (Context::from_waker(&a), Context::from_waker(&b));
        // Many callers dropped at once: more drains than the bound.
        (0..HELD_STREAMS + 3).for_each(|_| streams.hold());
        assert!(streams.poll_send(&mut a).is_pending());
        assert!(streams.poll_send(&mut b).is_pending());
        streams.release();
        assert_eq!(
            (a_woken.load(Ordering::SeqCst), b_woken.load(Ordering::SeqCst)),
            (1, 0),
            "the oldest only"
        );
        assert!(streams.poll_send(&mut a).is_ready(), "in the place of the drain that ended");
        assert!(streams.poll_send(&mut b).is_pending(), "one pass per drain that ended");
        streams.release();
        assert_eq!(b_woken.load(Ordering::SeqCst), 1);
        assert!(streams.poll_send(&mut b).is_ready());
        // A pass whose request went away is taken by the next one polled.
        assert!(streams.poll_send(&mut a).is_pending());
        assert!(streams.poll_send(&mut b).is_pending());
        streams.release(); // `a`'s pass: `a` is never polled again
        assert_eq!(a_woken.load(Ordering::SeqCst), 2);
        assert!(streams.poll_send(&mut b).is_ready(), "the pass left unused goes to `b`");
        // Below the bound, every waiting request goes.
        assert!(streams.poll_send(&mut a).is_pending());
        assert!(streams.poll_send(&mut b).is_pending());
        streams.release();
        assert_eq!((a_woken.load(Ordering::SeqCst), b_woken.load(Ordering::SeqCst)), (3, 2));
        assert!(streams.poll_send(&mut a).is_ready() && streams.poll_send(&mut b).is_ready());
    }
}
