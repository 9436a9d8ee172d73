//! One dial at a time to an origin that speaks HTTP/2, and never longer
//! than the origin's patience: the state of each origin the
//! [`Http2Connector`](crate::Http2Connector) dials ([`DialOrigin`]: what its
//! last connection spoke, the dial others wait for, its recent handshakes,
//! its share of resets), and of each dial ([`Dial`]: its phase, and those
//! waiting for it, each in a place of its own that it gives back when it
//! goes). When to wait, how long, and what a share is are the HTTP/2 room's (`http2`)
//! (`gates`, `patience`, `Share`); the futures that wait are `mod.rs`'s.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::Settings;
use crate::http2::{self, DialFailed, Proto, Role, Share};

/// What one dial has come to, as those waiting for it see it.
#[derive(Clone, Debug)]
pub(crate) enum Phase {
    /// Connecting (TCP, TLS).
    Dialing,
    /// Connected, and (by ALPN, or not yet known) HTTP/2: hyper-util has it,
    /// sets it up, and hands it from its pool to the requests waiting there.
    Connected,
    /// hyper-util did not use it (it was not needed: another connection to
    /// the origin took its HTTP/2 lock; or its set-up failed, which fails
    /// the requests waiting in its pool too). Those still waiting wait on,
    /// within their patience: a connection is being pooled.
    Unused,
    /// A request went on it: it is in hyper-util's pool, which handed it to
    /// every request that waited there. A connect that still waits was not
    /// among them (a client without a pool; a checkout handed a connection
    /// that closed at that instant): it dials its own.
    Serving,
    /// The dial failed: those waiting fail with what it said.
    Failed(Arc<DialFailed>),
    /// The dial was dropped before it connected (its caller gave up): those
    /// waiting go through the gate again.
    Abandoned,
    /// It speaks HTTP/1: those waiting go through the gate again (each
    /// dials its own; HTTP/1 needs a connection per request).
    Http1,
}

impl Phase {
    /// Whether a connect waits on, unless its patience ran out.
    fn waits(&self) -> bool {
        matches!(self, Phase::Dialing | Phase::Connected | Phase::Unused)
    }
}

/// One dial others may wait for.
pub(crate) struct Dial {
    /// When it races a second attempt (its origin's patience; none with
    /// none).
    race_at: Option<Instant>,
    /// When those waiting stop waiting and dial their own (twice the
    /// patience: the raced attempt had one).
    expires: Instant,
    state: Mutex<DialState>,
}

struct DialState {
    phase: Phase,
    waiters: Waiters,
}

/// Those waiting for a dial, each in its own place: found, updated and
/// given back in constant time (no scan), and a waker is kept only while
/// its connect waits (a caller that gave up leaves nothing: its task's
/// memory is freed with it).
#[derive(Default)]
struct Waiters {
    slots: Vec<Slot>,
    free: Vec<usize>,
}

enum Slot {
    Free,
    /// Taken, its waker woken (or not yet given).
    Taken,
    Waiting(Waker),
}

impl Waiters {
    /// Keeps `waker` in place `key`, taking a place first if it has none.
    fn keep(&mut self, key: &mut Option<usize>, waker: &Waker) {
        let at = match *key {
            Some(at) => at,
            None => {
                let at = self.free.pop().unwrap_or_else(|| {
                    self.slots.push(Slot::Free);
                    self.slots.len() - 1
                });
                *key = Some(at);
                at
            }
        };
        match &mut self.slots[at] {
            Slot::Waiting(kept) if kept.will_wake(waker) => {}
            slot => *slot = Slot::Waiting(waker.clone()),
        }
    }

    /// Gives place `key` back, dropping its waker.
    fn give_back(&mut self, key: usize) -> Option<Waker> {
        self.free.push(key);
        match std::mem::replace(&mut self.slots[key], Slot::Free) {
            Slot::Waiting(waker) => Some(waker),
            _ => None,
        }
    }

    /// Every waker kept, taken to be woken (their places stay taken).
    fn take_all(&mut self) -> Vec<Waker> {
        let mut woken = Vec::new();
        for slot in &mut self.slots {
            if matches!(slot, Slot::Waiting(_))
                && let Slot::Waiting(waker) = std::mem::replace(slot, Slot::Taken)
            {
                woken.push(waker);
            }
        }
        woken
    }
}

impl Dial {
    fn new(now: Instant, patience: Duration) -> Arc<Dial> {
        let state = Mutex::new(DialState { phase: Phase::Dialing, waiters: Waiters::default() });
        let race_at = (!patience.is_zero()).then(|| now + patience);
        Arc::new(Dial { race_at, expires: now + patience.saturating_mul(2), state })
    }

    /// When it races a second attempt, if it does (a patience of zero
    /// waits for nothing: no connect waits for it, and it races nothing).
    pub(crate) fn race_at(&self) -> Option<Instant> {
        self.race_at
    }

    fn lock(&self) -> MutexGuard<'_, DialState> {
        // Only this module's code runs under the lock (no waker is woken or
        // dropped there), and the state stays valid whatever happens.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When those waiting for it dial their own.
    pub(crate) fn expires(&self) -> Instant {
        self.expires
    }

    /// Its phase; while it is still to be waited for, `cx` is woken, in
    /// place `key` (taken on the first call, given back by [`leave`]), when
    /// it changes.
    ///
    /// [`leave`]: Dial::leave
    pub(crate) fn poll_phase(&self, key: &mut Option<usize>, cx: &mut Context<'_>) -> Poll<Phase> {
        let mut state = self.lock();
        if state.phase.waits() {
            state.waiters.keep(key, cx.waker());
            return Poll::Pending;
        }
        Poll::Ready(state.phase.clone())
    }

    /// A connect that waited in place `key` goes: its place and waker are
    /// given back.
    pub(crate) fn leave(&self, key: usize) {
        let waker = self.lock().waiters.give_back(key);
        drop(waker); // outside the lock: a waker's drop is the executor's code
    }

    fn phase(&self) -> Phase {
        self.lock().phase.clone()
    }

    /// Moves on to `phase` (never back from a phase no one waits in): the
    /// wakers of those waiting, to be woken once no lock is held, when
    /// they are to look again.
    #[must_use = "wake them, outside any lock"]
    fn set(&self, phase: Phase) -> Vec<Waker> {
        let mut state = self.lock();
        let allowed = match (&state.phase, &phase) {
            (Phase::Dialing, _) => true,
            (Phase::Connected, Phase::Dialing | Phase::Connected) => false,
            (Phase::Connected, _) => true,
            _ => false,
        };
        if !allowed {
            return Vec::new();
        }
        state.phase = phase;
        if state.phase.waits() { Vec::new() } else { state.waiters.take_all() }
    }
}

/// One origin, as the connector's connections see it.
pub(crate) struct DialOrigin {
    /// Its scheme is `https` (ALPN may pick HTTP/2).
    https: bool,
    gate: Mutex<Gate>,
    /// Resets a connection takes before it moves on (`0`: it does not):
    /// `Gate::share`'s allowance, or the user's, read on every reset.
    allowance: AtomicUsize,
    /// The user fixed the allowance: nothing is learned.
    fixed_share: bool,
    /// Its connections that lack hyper-util's view of themselves.
    unhandled: AtomicUsize,
    /// The patience the user fixed, if any.
    fixed_patience: Option<Duration>,
}

struct Gate {
    /// What its last connection spoke.
    proto: Proto,
    /// The dial others wait for, until it is used, over, or past its
    /// patience.
    current: Option<Arc<Dial>>,
    /// Its last handshakes (most recent last), for its patience.
    handshakes: VecDeque<Duration>,
    /// What its servers taught of resets.
    share: Share,
}

/// How a connect goes through the gate.
pub(crate) enum Entry {
    /// No gate: dial.
    Free,
    /// Dial, and others wait for this dial.
    Dial(Arc<Dial>),
    /// Wait for another's dial.
    Wait(Arc<Dial>),
}

impl Entry {
    /// A word for traces.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Entry::Free => "free",
            Entry::Dial(_) => "dial",
            Entry::Wait(_) => "wait",
        }
    }
}

impl DialOrigin {
    pub(super) fn new(https: bool, settings: Settings) -> Self {
        DialOrigin {
            https,
            gate: Mutex::new(Gate {
                proto: Proto::Unknown,
                current: None,
                handshakes: VecDeque::with_capacity(http2::HANDSHAKES_KEPT),
                share: Share::default(),
            }),
            allowance: AtomicUsize::new(settings.share.unwrap_or(0)),
            fixed_share: settings.share.is_some(),
            unhandled: AtomicUsize::new(0),
            fixed_patience: settings.patience,
        }
    }

    fn gate(&self) -> MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connect to this origin: whether it dials, or waits for a dial on
    /// its way that is still within its patience.
    pub(crate) fn enter(&self) -> Entry {
        let mut gate = self.gate();
        if !http2::gates(gate.proto, self.https) {
            return Entry::Free;
        }
        let now = Instant::now();
        if let Some(dial) = &gate.current
            && now < dial.expires
            && matches!(dial.phase(), Phase::Dialing | Phase::Connected)
        {
            return Entry::Wait(dial.clone());
        }
        let patience =
            self.fixed_patience.unwrap_or_else(|| http2::patience(gate.handshakes.make_contiguous()));
        let dial = Dial::new(now, patience);
        gate.current = Some(dial.clone());
        Entry::Dial(dial)
    }

    /// What it spoke on its last connection, as far as is known.
    pub(crate) fn proto(&self) -> Proto {
        self.gate().proto
    }

    /// Whether its scheme lets ALPN choose.
    pub(crate) fn https(&self) -> bool {
        self.https
    }

    /// A dial connected after `took` (a handshake, for the patience); if
    /// others wait for it, they go on waiting: its connection is being set
    /// up.
    pub(crate) fn connected(&self, dial: Option<&Arc<Dial>>, took: Duration) {
        let mut gate = self.gate();
        if gate.handshakes.len() == http2::HANDSHAKES_KEPT {
            gate.handshakes.pop_front();
        }
        gate.handshakes.push_back(took);
        drop(gate);
        if let Some(dial) = dial {
            wake(dial.set(Phase::Connected));
        }
    }

    /// A connection's first write (or, over TLS, its ALPN) told what it
    /// speaks: HTTP/1 ends its dial's wait.
    pub(crate) fn spoke(&self, dial: Option<&Arc<Dial>>, proto: Proto) {
        let woken = {
            let mut gate = self.gate();
            gate.proto = proto;
            match dial {
                Some(dial) if proto == Proto::Http1 => Self::end(&mut gate, dial, Phase::Http1),
                _ => Vec::new(),
            }
        };
        wake(woken);
    }

    /// A request went on `dial`'s connection: it is pooled.
    pub(crate) fn serving(&self, dial: &Arc<Dial>) {
        let woken = Self::end(&mut self.gate(), dial, Phase::Serving);
        wake(woken);
    }

    /// `dial` failed: those waiting for it fail with what it said.
    pub(crate) fn failed(&self, dial: &Arc<Dial>, failure: DialFailed) {
        let woken = Self::end(&mut self.gate(), dial, Phase::Failed(Arc::new(failure)));
        wake(woken);
    }

    /// `dial` was dropped before a request went on its connection: before
    /// it connected (its caller gave up), or after, unused.
    pub(crate) fn abandoned(&self, dial: &Arc<Dial>) {
        let phase = match dial.phase() {
            Phase::Dialing => Phase::Abandoned,
            _ => Phase::Unused,
        };
        let woken = Self::end(&mut self.gate(), dial, phase);
        wake(woken);
    }

    /// `dial` is over (or, unused, to be waited for by no one new): the
    /// wakers of those to wake.
    #[must_use = "wake them, outside any lock"]
    fn end(gate: &mut Gate, dial: &Arc<Dial>, phase: Phase) -> Vec<Waker> {
        if gate.current.as_ref().is_some_and(|d| Arc::ptr_eq(d, dial)) {
            gate.current = None;
        }
        dial.set(phase)
    }

    /// Resets a connection of [`Role::Share`] may yet reset before it moves
    /// on (`0`: no share).
    pub(crate) fn share(&self) -> usize {
        self.allowance.load(Ordering::Relaxed)
    }

    /// What a new connection is to the origin's lesson, its own allowance
    /// if it tests the lesson (`0`: any number), and the resets after which
    /// it forgets it (the unbounded test); a fixed share has none to test.
    pub(crate) fn terms(&self) -> (Role, Option<usize>, Option<usize>) {
        if self.fixed_share {
            return (Role::Share, None, None);
        }
        let mut gate = self.gate();
        match gate.share.role() {
            Role::Share => (Role::Share, None, None),
            test => (test, Some(gate.share.allowance_of(test)), gate.share.forgets_after(test)),
        }
    }

    /// One of its connections, of `role`, was punished after `bore` resets.
    pub(crate) fn punished(&self, bore: usize, role: Role) {
        self.learn(|share| share.punished(bore, role));
    }

    /// One of its connections, of `role`, moved on unpunished at its
    /// allowance.
    pub(crate) fn passed(&self, role: Role) {
        self.learn(|share| share.passed(role));
    }

    /// One of its connections, of `role`, ended unpunished before its
    /// allowance.
    pub(crate) fn ended(&self, role: Role) {
        self.learn(|share| share.ended(role));
    }

    fn learn(&self, lesson: impl FnOnce(&mut Share)) {
        if self.fixed_share {
            return;
        }
        let mut gate = self.gate();
        lesson(&mut gate.share);
        self.allowance.store(gate.share.allowance(), Ordering::Relaxed);
    }

    /// A connection opened that lacks hyper-util's view of itself (`true`),
    /// or one that lacked it was given it, or went (`false`).
    pub(crate) fn unhandled(&self, more: bool) {
        if more {
            self.unhandled.fetch_add(1, Ordering::Relaxed);
        } else {
            self.unhandled.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether the layer is to capture every request's connection to this
    /// origin: while one of its connections may have to move on (it has a
    /// share: a lesson, or the user's), or lacks hyper-util's view of itself
    /// (through which it moves on: a captured request's).
    pub(crate) fn wants_captures(&self) -> bool {
        self.share() > 0 || self.unhandled.load(Ordering::Relaxed) > 0
    }
}

/// Wakes `wakers`: called with no lock held (a waker is the executor's
/// code).
fn wake(wakers: Vec<Waker>) {
    wakers.into_iter().for_each(Waker::wake);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(https: bool) -> DialOrigin {
        DialOrigin::new(https, Settings::default())
    }

    fn cx() -> Context<'static> {
        Context::from_waker(Waker::noop())
    }

    fn dial(entry: Entry) -> Arc<Dial> {
        match entry {
            Entry::Dial(dial) => dial,
            other => panic!("expected to dial, got {}", other.name()),
        }
    }

    #[test]
    fn an_https_origin_dials_once_until_its_first_connection_is_used() {
        let o = origin(true);
        let first = dial(o.enter());
        let Entry::Wait(waited) = o.enter() else { panic!("a second waits") };
        assert!(Arc::ptr_eq(&first, &waited));
        let mut key = None;
        assert!(waited.poll_phase(&mut key, &mut cx()).is_pending());
        o.connected(Some(&first), Duration::from_millis(3));
        assert!(matches!(o.enter(), Entry::Wait(_)), "connected, being set up: wait");
        assert!(waited.poll_phase(&mut key, &mut cx()).is_pending(), "the pool hands it over, not the gate");
        o.spoke(Some(&first), Proto::Http2);
        o.serving(&first);
        assert!(matches!(waited.poll_phase(&mut key, &mut cx()), Poll::Ready(Phase::Serving)));
        dial(o.enter()); // a connect after that means the pool lost it
        waited.leave(key.unwrap());
    }

    #[test]
    fn http1_origins_are_never_gated_and_a_failed_dial_fails_its_waiters() {
        let o = origin(true);
        let first = dial(o.enter());
        o.spoke(Some(&first), Proto::Http1);
        assert!(matches!(first.poll_phase(&mut None, &mut cx()), Poll::Ready(Phase::Http1)));
        assert!(matches!(o.enter(), Entry::Free), "HTTP/1: every connect dials");
        let h2 = origin(true);
        let failing = dial(h2.enter());
        let Entry::Wait(waiting) = h2.enter() else { panic!() };
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        h2.failed(&failing, DialFailed::of(&refused));
        let Poll::Ready(Phase::Failed(failure)) = waiting.poll_phase(&mut None, &mut cx()) else {
            panic!("the waiter fails at once")
        };
        assert_eq!(failure.error().kind(), std::io::ErrorKind::ConnectionRefused);
        dial(h2.enter()); // the next one dials
        assert!(matches!(origin(false).enter(), Entry::Free), "http:// is not gated until it spoke HTTP/2");
    }

    #[test]
    fn a_dial_past_its_patience_is_waited_for_by_no_one() {
        let o = DialOrigin::new(true, Settings { patience: Some(Duration::ZERO), ..Settings::default() });
        let stuck = dial(o.enter());
        let next = dial(o.enter());
        assert!(!Arc::ptr_eq(&stuck, &next), "the next connect dials its own");
        assert_eq!(stuck.race_at(), None, "with no patience, no second attempt either");
        let unknown = origin(true);
        let d = dial(unknown.enter());
        let race = d.race_at().expect("a patience").saturating_duration_since(Instant::now());
        let wait = d.expires().saturating_duration_since(Instant::now());
        assert!(race <= http2::PATIENCE_UNKNOWN, "a second attempt after the patience: {race:?}");
        assert!(
            wait > http2::PATIENCE_UNKNOWN,
            "waiters give the raced attempt a patience of its own: {wait:?}"
        );
    }

    #[test]
    fn a_waiter_that_goes_leaves_no_waker_and_its_place_is_reused() {
        let o = origin(true);
        let d = dial(o.enter());
        let counter = Arc::new(Counting);
        let waker = Waker::from(counter.clone());
        let mut keys = Vec::new();
        for _ in 0..1_000 {
            let mut key = None;
            assert!(d.poll_phase(&mut key, &mut Context::from_waker(&waker)).is_pending());
            assert_eq!(Arc::strong_count(&counter), 3, "one waker kept, besides ours");
            d.leave(key.unwrap());
            assert_eq!(Arc::strong_count(&counter), 2, "given back with its place");
            keys.push(key.unwrap());
        }
        assert!(keys.iter().all(|&k| k == keys[0]), "one place, reused");
        assert_eq!(d.lock().waiters.slots.len(), 1);
    }

    struct Counting;
    impl std::task::Wake for Counting {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn the_share_is_learned_unless_fixed_and_keys_carry_no_userinfo() {
        let learned = origin(true);
        assert_eq!(learned.share(), 0, "no share until a server punishes");
        learned.punished(300, Role::Share);
        assert_eq!(learned.share(), 150);
        let fixed = DialOrigin::new(true, Settings { share: Some(7), ..Settings::default() });
        fixed.punished(300, Role::Share);
        assert_eq!(fixed.share(), 7);
        let origins = super::super::Origins::new(Settings::default());
        let a = origins.of(&"https://user:secret@example.com".parse().unwrap());
        let b = origins.of(&"https://example.com:443".parse().unwrap());
        assert!(Arc::ptr_eq(&a, &b), "one origin, however spelled");
        let key_has_secret = origins.by_key.lock().unwrap().keys().any(|k| k.contains("secret"));
        assert!(!key_has_secret);
    }
}
