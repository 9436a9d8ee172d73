//! Who waits for the last drain to end (`DrainStats::wait_idle` and
//! `wait_idle_blocking`), and how the end of the last drain wakes them
//! without polling.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Waker;

/// The waiters of `DrainStats::wait_idle` and `wait_idle_blocking`, woken
/// when the last drain ends.
///
/// A waiter counts itself in `waiters` and registers (its waker, or its
/// wait on `ended`) under `list`'s lock, then reads `in_flight`; a drain
/// ending decrements `in_flight`, then reads `waiters`, and takes the lock
/// only when someone waits. Both pairs are `SeqCst`: either the drain sees
/// the waiter (and wakes it), or the waiter sees the decrement (and does
/// not wait).
#[derive(Default)]
pub(super) struct Idle {
    /// Waiters alive, registered or not.
    pub(super) waiters: AtomicUsize,
    list: Mutex<Wakers>,
    /// Signalled for blocking waiters when the last drain ends.
    pub(super) ended: Condvar,
}

#[derive(Default)]
pub(super) struct Wakers {
    next_id: u64,
    /// Async waiters' wakers, by waiter id; taken (emptied) when woken.
    pub(super) wakers: Vec<(u64, Waker)>,
}

impl Idle {
    pub(super) fn list(&self) -> MutexGuard<'_, Wakers> {
        // Only the list's own code runs under this lock: no waker is
        // cloned, dropped or woken there.
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The last drain ended: hands every async waiter's waker to the
    /// timer thread and wakes the blocking ones. Runs no waker itself: it
    /// may run in a body's drop or a runtime's shutdown.
    pub(super) fn wake_all(&self) {
        let wakers: Vec<Waker> = {
            let mut list = self.list();
            self.ended.notify_all();
            list.wakers.drain(..).map(|(_, waker)| waker).collect()
        };
        crate::timer::wake_soon(wakers);
    }
}

/// One async waiter for idle: its waker stays registered until it is woken
/// or the waiter is dropped.
pub(super) struct IdleWaiter<'a> {
    idle: &'a Idle,
    id: u64,
}

impl<'a> IdleWaiter<'a> {
    pub(super) fn new(idle: &'a Idle) -> Self {
        let id = {
            let mut list = idle.list();
            list.next_id += 1;
            list.next_id
        };
        idle.waiters.fetch_add(1, Ordering::SeqCst);
        IdleWaiter { idle, id }
    }

    /// Registers (or refreshes) `waker`; the caller reads `in_flight` after.
    pub(super) fn register(&self, waker: &Waker) {
        let mut list = self.idle.list();
        if let Some((_, registered)) = list.wakers.iter().find(|(id, _)| *id == self.id)
            && registered.will_wake(waker)
        {
            return;
        }
        drop(list);
        let waker = waker.clone();
        list = self.idle.list();
        let replaced = match list.wakers.iter_mut().find(|(id, _)| *id == self.id) {
            Some((_, registered)) => Some(std::mem::replace(registered, waker)),
            None => {
                list.wakers.push((self.id, waker));
                None
            }
        };
        drop(list);
        // Dropped after the lock.
        drop(replaced);
    }
}

impl Drop for IdleWaiter<'_> {
    fn drop(&mut self) {
        self.idle.waiters.fetch_sub(1, Ordering::SeqCst);
        let removed = {
            let mut list = self.idle.list();
            list.wakers.iter().position(|(id, _)| *id == self.id).map(|at| list.wakers.swap_remove(at))
        };
        drop(removed);
    }
}
