//! One dial others wait for ([`Dial`]), owned by its origin and by every
//! connect that takes part in it, never by the one that started it: as in
//! hyper-util's `client::pool::singleton`, the attempts live in the dial,
//! and whichever member's turn it is polls them (the driver); a member that
//! goes (its caller gave up, or hyper-util's pool served its request) gives
//! the turn to another, and takes nothing with it. Only when no member is
//! left are the attempts dropped, as hyper-util alone drops the connect of
//! a request that gave up. A failed attempt is told to each member whom no
//! other attempt still serves sooner (the HTTP/2 room's
//! `waits_after_failure`), each a view of one shared error.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::http2;

/// The error of a dial, shared by every member it fails.
pub(crate) type SharedError = Arc<dyn std::error::Error + Send + Sync>;

/// What a dial has come to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Its attempts are on their way (or about to start).
    Dialing,
    /// An attempt's connection went to hyper-util, which sets it up and
    /// hands it from its pool to the requests waiting there.
    Connected,
    /// A request went on it. `pooled`: hyper-util's pool handed it out
    /// (without a pool, nobody else gets it).
    Serving { pooled: bool },
    /// Over without a connection for those still waiting: unused (dropped
    /// before a request went on it), HTTP/1, failed, or no member left.
    Over,
}

/// What a member of a dial is to do next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Poll the attempts: it is this member's turn to drive the dial.
    Drive,
    /// The dial failed for this member.
    Failed(SharedError),
    /// Its connection is in use (see [`Phase::Serving`]).
    Served { pooled: bool },
    /// Over without a connection for this member: through the gate again.
    Again,
}

struct Member {
    arrived: Instant,
    waker: Option<Waker>,
    failed: Option<SharedError>,
}

struct State {
    phase: Phase,
    members: Vec<Option<Member>>,
    free: Vec<usize>,
    count: usize,
    /// The member whose turn it is to poll the attempts.
    driver: Option<usize>,
    /// The member that started it, while it takes part.
    starter: Option<usize>,
    /// The attempts (the connector's `connect::Attempts`), while dialing
    /// and not being polled.
    work: Option<Box<dyn Any + Send>>,
}

/// One dial to an origin (see the module).
pub(crate) struct Dial {
    started: Instant,
    patience: Duration,
    state: Mutex<State>,
}

impl Dial {
    pub(crate) fn new(patience: Duration) -> Arc<Dial> {
        let state = State {
            phase: Phase::Dialing,
            members: Vec::new(),
            free: Vec::new(),
            count: 0,
            driver: None,
            starter: None,
            work: None,
        };
        Arc::new(Dial { started: Instant::now(), patience, state: Mutex::new(state) })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No waker is woken or dropped and no connector code runs under the
        // lock; the state stays valid whatever happens.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When members other than its driver stop waiting and dial their own:
    /// twice the patience after it began (the raced attempt had one).
    pub(crate) fn expires(&self) -> Instant {
        self.started + self.patience.saturating_mul(2)
    }

    /// Whether a connect arriving now may still join it.
    pub(crate) fn joinable(&self, now: Instant) -> bool {
        now < self.expires() && matches!(self.lock().phase, Phase::Dialing | Phase::Connected)
    }

    #[cfg(test)]
    pub(crate) fn phase(&self) -> Phase {
        self.lock().phase
    }

    /// A connect takes part (`starter`: it started the dial): its key. A
    /// member joining a dial past its patience wakes the driver, whose
    /// second attempt is armed only now that someone waits.
    pub(crate) fn join(&self, starter: bool) -> usize {
        let (key, woken) = {
            let mut state = self.lock();
            let member = Member { arrived: Instant::now(), waker: None, failed: None };
            let key = match state.free.pop() {
                Some(key) => {
                    state.members[key] = Some(member);
                    key
                }
                None => {
                    state.members.push(Some(member));
                    state.members.len() - 1
                }
            };
            state.count += 1;
            if starter {
                state.starter = Some(key);
            }
            let driver = state.driver.and_then(|d| state.members[d].as_mut()).and_then(|m| m.waker.take());
            (key, driver)
        };
        if let Some(waker) = woken {
            waker.wake();
        }
        key
    }

    /// What member `key` is to do; while it is to wait, `cx` is woken when
    /// that changes.
    pub(crate) fn poll_step(&self, key: usize, cx: &mut Context<'_>) -> Poll<Step> {
        let mut state = self.lock();
        let phase = state.phase;
        let Some(member) = state.members.get_mut(key).and_then(Option::as_mut) else {
            return Poll::Ready(Step::Again);
        };
        if let Some(error) = &member.failed {
            return Poll::Ready(Step::Failed(error.clone()));
        }
        match phase {
            Phase::Serving { pooled } => return Poll::Ready(Step::Served { pooled }),
            Phase::Over => return Poll::Ready(Step::Again),
            Phase::Connected => {}
            Phase::Dialing => {
                if state.driver.is_none() {
                    state.driver = Some(key);
                }
                if state.driver == Some(key) {
                    return Poll::Ready(Step::Drive);
                }
            }
        }
        let member = state.members[key].as_mut().expect("checked above");
        match &member.waker {
            Some(kept) if kept.will_wake(cx.waker()) => {}
            _ => {
                let old = member.waker.replace(cx.waker().clone());
                drop(state);
                drop(old); // outside the lock: a waker's drop is the executor's code
            }
        }
        Poll::Pending
    }

    /// Whether someone besides the connect that started it takes part: a
    /// second attempt is armed only then (or, with nobody waiting, only
    /// after [`http2::LONE_RACE`]).
    fn someone_waits(state: &State) -> bool {
        state.count > 1 || (state.count == 1 && state.starter.is_none())
    }

    /// When its second attempt goes, as things stand (see
    /// [`http2::race_at`]); `None` with no patience (nothing waits for it).
    pub(crate) fn race_at(&self) -> Option<Instant> {
        let waits = Self::someone_waits(&self.lock());
        (!self.patience.is_zero()).then(|| http2::race_at(self.started, self.patience, waits))
    }

    /// The driver takes the attempts to poll them (`None`: not started).
    pub(crate) fn take_work(&self) -> Option<Box<dyn Any + Send>> {
        self.lock().work.take()
    }

    /// The driver puts the attempts back, still on their way.
    pub(crate) fn put_work(&self, work: Box<dyn Any + Send>) {
        let mut state = self.lock();
        if state.phase == Phase::Dialing {
            state.work = Some(work);
            return;
        }
        drop(state);
        drop(work);
    }

    /// Member `key` goes. Returns whether the dial is now over for want of
    /// members (its attempts, if any, are dropped).
    pub(crate) fn leave(&self, key: usize) -> bool {
        let (waker, work, next, over) = {
            let mut state = self.lock();
            let Some(member) = state.members.get_mut(key).and_then(Option::take) else {
                return false;
            };
            state.free.push(key);
            state.count -= 1;
            if state.starter == Some(key) {
                state.starter = None;
            }
            let mut next = None;
            if state.driver == Some(key) {
                state.driver = None;
                // The turn goes to another member, which polls the attempts
                // when woken.
                if let Some(at) = state.members.iter().position(Option::is_some) {
                    state.driver = Some(at);
                    next = state.members[at].as_mut().and_then(|m| m.waker.take());
                }
            }
            let over = state.count == 0 && state.phase == Phase::Dialing;
            let work = if over {
                state.phase = Phase::Over;
                state.work.take()
            } else {
                None
            };
            (member.waker, work, next, over)
        };
        drop((waker, work));
        if let Some(next) = next {
            next.wake();
        }
        over
    }

    /// An attempt connected: the dial's connection goes to hyper-util (by
    /// the driver's connect), the other attempt is dropped, and the other
    /// members wait for hyper-util's pool to hand it out.
    pub(crate) fn connected(&self) {
        let work = {
            let mut state = self.lock();
            if state.phase != Phase::Dialing {
                return;
            }
            state.phase = Phase::Connected;
            state.work.take()
        };
        drop(work);
    }

    /// The dial ends in `phase` ([`Phase::Serving`] or [`Phase::Over`]):
    /// every member still waiting looks again.
    pub(crate) fn end(&self, phase: Phase) {
        let (wakers, work) = {
            let mut state = self.lock();
            if matches!(state.phase, Phase::Serving { .. } | Phase::Over) {
                return;
            }
            state.phase = phase;
            let wakers: Vec<Waker> =
                state.members.iter_mut().flatten().filter_map(|m| m.waker.take()).collect();
            (wakers, state.work.take())
        };
        drop(work);
        wakers.into_iter().for_each(Waker::wake);
    }

    /// An attempt that began at `began` failed after `took` with `error`,
    /// `running` the attempts still on their way (when each began, and how
    /// long it has run), `driver` the member that polled it. Each member
    /// whom no running attempt serves sooner than its own dial would have
    /// (`http2::waits_after_failure`) is failed; with none running, every
    /// member. Returns what the driver is to fail with, if it is among
    /// them: the error itself when no other member shares it, and whether
    /// the dial is over (no attempt left).
    pub(crate) fn attempt_failed(
        &self,
        error: crate::connector::BoxError,
        took: Duration,
        running: &[(Instant, Duration)],
        driver: usize,
    ) -> (Option<DriverFailure>, bool) {
        let mut state = self.lock();
        let failing: Vec<usize> = state
            .members
            .iter()
            .enumerate()
            .filter_map(|(key, m)| {
                let m = m.as_ref()?;
                (m.failed.is_none() && !http2::waits_after_failure(m.arrived, took, running)).then_some(key)
            })
            .collect();
        let over = running.is_empty();
        if over {
            state.phase = Phase::Over;
        }
        if failing.is_empty() {
            return (None, over);
        }
        if failing == [driver] {
            return (Some(DriverFailure::Own(error)), over);
        }
        let shared: SharedError = Arc::from(error);
        let mut wakers = Vec::new();
        for &key in &failing {
            let member = state.members[key].as_mut().expect("listed above");
            member.failed = Some(shared.clone());
            wakers.extend(member.waker.take());
        }
        let mine = failing.contains(&driver).then(|| DriverFailure::Shared(shared));
        drop(state);
        wakers.into_iter().for_each(Waker::wake);
        (mine, over)
    }
}

/// What the driver of a failed attempt fails with.
pub(crate) enum DriverFailure {
    /// The error itself: no other member shares it.
    Own(crate::connector::BoxError),
    /// A view of it shared with other members.
    Shared(SharedError),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx() -> Context<'static> {
        Context::from_waker(Waker::noop())
    }

    #[test]
    fn the_turn_to_drive_passes_to_a_member_that_stays_and_the_last_to_go_ends_it() {
        let dial = Dial::new(Duration::from_millis(500));
        let first = dial.join(true);
        let second = dial.join(false);
        assert!(matches!(dial.poll_step(first, &mut cx()), Poll::Ready(Step::Drive)));
        assert!(dial.poll_step(second, &mut cx()).is_pending(), "one driver at a time");
        dial.put_work(Box::new(7u32));
        assert!(!dial.leave(first), "a member stays: the dial goes on");
        assert!(matches!(dial.poll_step(second, &mut cx()), Poll::Ready(Step::Drive)), "the turn passed");
        assert_eq!(dial.take_work().and_then(|w| w.downcast::<u32>().ok()).map(|w| *w), Some(7));
        dial.put_work(Box::new(8u32));
        assert!(dial.leave(second), "the last member gone: the dial is over");
        assert_eq!(dial.phase(), Phase::Over);
        assert!(dial.take_work().is_none(), "its attempts dropped");
    }

    #[test]
    fn a_second_attempt_is_armed_only_when_someone_waits() {
        let patience = Duration::from_millis(300);
        let dial = Dial::new(patience);
        let starter = dial.join(true);
        let lone = dial.race_at().unwrap().saturating_duration_since(dial.started);
        assert!(lone >= http2::LONE_RACE, "nobody waits: raced only after {lone:?}");
        let waiter = dial.join(false);
        assert_eq!(dial.race_at(), Some(dial.started + patience), "someone waits: raced at the patience");
        dial.leave(waiter);
        dial.leave(starter);
        let zero = Dial::new(Duration::ZERO);
        zero.join(true);
        assert_eq!(zero.race_at(), None, "no patience: no race");
    }

    #[test]
    fn a_failure_fails_at_once_the_members_no_running_attempt_serves_sooner() {
        let dial = Dial::new(Duration::from_millis(500));
        let starter = dial.join(true);
        let early = dial.join(false);
        std::thread::sleep(Duration::from_millis(5));
        let raced_at = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        let late = dial.join(false);
        let error: crate::connector::BoxError = "refused".into();
        let running = [(raced_at, Duration::from_millis(1))];
        let (mine, over) = dial.attempt_failed(error, Duration::from_millis(800), &running, starter);
        assert!(matches!(mine, Some(DriverFailure::Shared(_))), "the driver shares the failure");
        assert!(!over, "the raced attempt goes on");
        assert!(matches!(dial.poll_step(early, &mut cx()), Poll::Ready(Step::Failed(_))));
        let Poll::Ready(Step::Drive) = ({
            dial.leave(starter);
            dial.leave(early);
            dial.poll_step(late, &mut cx())
        }) else {
            panic!("the member that arrived after the raced attempt began waits for it, and drives it")
        };
        let (mine, over) = dial.attempt_failed("again".into(), Duration::from_millis(800), &[], late);
        assert!(matches!(mine, Some(DriverFailure::Own(_))), "alone in its failure: the error itself");
        assert!(over);
    }
}
