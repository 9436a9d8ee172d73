//! Deadlines that need no runtime timer: one thread for the process wakes
//! whoever waits on a deadline when it passes. Started by the first
//! deadline awaited, it ends as soon as none is left, so it outlives no
//! drain and no waiter.
//!
//! Why not tokio's timer: a runtime built without `enable_time` has none,
//! tokio offers no way to ask, and creating a `tokio::time::Sleep` there
//! panics (a process built with `panic = "abort"` dies). A drain must keep
//! its time budget on any runtime hyper-util's client runs on, and hyper's
//! client needs no timer. The cost on the main road: a drain that waits for
//! the server registers its deadline once (one short lock and a map
//! insert) and removes it when it ends; the thread wakes only when a
//! deadline passes or an earlier one arrives.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// What the thread waits on.
struct Timers {
    /// Waiting deadlines: `(when, id)` to the waker to wake then.
    waiting: BTreeMap<(Instant, u64), Waker>,
    /// The id of the next deadline registered.
    next_id: u64,
    /// The thread runs; it stops when `waiting` is empty.
    running: bool,
}

static TIMERS: Mutex<Timers> = Mutex::new(Timers { waiting: BTreeMap::new(), next_id: 0, running: false });
/// Signalled when a deadline earlier than every other one is registered.
static EARLIER: Condvar = Condvar::new();

fn timers() -> MutexGuard<'static, Timers> {
    // No code but the map's runs under this lock (no waker is cloned,
    // dropped or woken there), and the map stays valid whatever happens.
    TIMERS.lock().unwrap_or_else(|e| e.into_inner())
}

impl Timers {
    /// Registers `waker` to be woken at `at`, and returns its key; gives it
    /// back when no thread can wake it (none runs and none could be
    /// started).
    fn register(&mut self, at: Instant, waker: Waker) -> Result<(Instant, u64), Waker> {
        let key = (at, self.next_id);
        self.next_id += 1;
        let earliest = self.waiting.first_key_value().is_none_or(|(first, _)| key < *first);
        if !self.running {
            if start_thread().is_err() {
                return Err(waker);
            }
            self.running = true;
        } else if earliest {
            EARLIER.notify_one();
        }
        self.waiting.insert(key, waker);
        Ok(key)
    }
}

/// A point in time to wait for, without a runtime timer. Registered with
/// the thread only once polled before it passed; removed when dropped.
#[derive(Debug)]
pub(crate) struct Deadline {
    at: Instant,
    /// Its place among the waiting deadlines, once registered.
    key: Option<(Instant, u64)>,
}

impl Deadline {
    pub(crate) fn at(at: Instant) -> Self {
        Deadline { at, key: None }
    }

    /// When it passes.
    #[cfg(feature = "http2")]
    pub(crate) fn when(&self) -> Instant {
        self.at
    }

    /// `Ready` once the deadline has passed; until then, `cx`'s waker is
    /// woken when it does. The waker is cloned, and a replaced one dropped,
    /// outside the timers' lock: they run the executor's code.
    pub(crate) fn poll_elapsed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.at {
            self.unregister();
            return Poll::Ready(());
        }
        let Some(key) = self.key else {
            let waker = cx.waker().clone();
            let registered = timers().register(self.at, waker);
            return match registered {
                Ok(key) => {
                    self.key = Some(key);
                    Poll::Pending
                }
                // No thread, no wake-up: the deadline is treated as passed,
                // so that nothing waits on it forever.
                Err(_waker) => Poll::Ready(()),
            };
        };
        match timers().waiting.get(&key) {
            Some(waker) if waker.will_wake(cx.waker()) => return Poll::Pending,
            Some(_) => {}
            // Fired since it was polled: it has passed.
            None => {
                self.key = None;
                return Poll::Ready(());
            }
        }
        let mut waker = cx.waker().clone();
        let fired = match timers().waiting.get_mut(&key) {
            Some(registered) => {
                std::mem::swap(registered, &mut waker);
                false
            }
            None => true,
        };
        // `waker` (the replaced one, or the clone when it fired meanwhile)
        // is dropped here, after the lock.
        drop(waker);
        if fired {
            self.key = None;
            return Poll::Ready(());
        }
        Poll::Pending
    }

    fn unregister(&mut self) {
        if let Some(key) = self.key.take() {
            let removed = timers().waiting.remove(&key);
            // Dropped after the lock.
            drop(removed);
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.unregister();
    }
}

/// Wakes `wakers` from the timer thread, as soon as it can: for code that
/// must run no waker itself (the end of the last drain, which may come in a
/// body's drop or a runtime's shutdown). When no thread can be started,
/// wakes them here, each guarded against a panic, unless this thread is
/// unwinding already (a second panic would abort the process).
pub(crate) fn wake_soon(wakers: Vec<Waker>) {
    if wakers.is_empty() {
        return;
    }
    let now = Instant::now();
    let mut left = Vec::new();
    {
        let mut timers = timers();
        for waker in wakers {
            if let Err(waker) = timers.register(now, waker) {
                left.push(waker);
            }
        }
    }
    if !std::thread::panicking() {
        left.into_iter().for_each(wake_guarded);
    }
}

/// Wakes `waker`; a waker that panics (an executor's bug) stops neither
/// the caller nor the other wakers.
fn wake_guarded(waker: Waker) {
    let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
}

fn start_thread() -> std::io::Result<()> {
    std::thread::Builder::new().name("drain-on-drop-timer".into()).spawn(run).map(drop)
}

/// Marks the thread stopped if it ever unwinds (nothing it runs should
/// panic: wakers are guarded), so that the next deadline starts another.
struct Running;

impl Drop for Running {
    fn drop(&mut self) {
        if std::thread::panicking() {
            timers().running = false;
        }
    }
}

/// The thread: wakes each deadline when it passes, and ends when none is
/// left (under the lock, so a deadline registered later starts a new one).
/// Wakers run outside the lock, each guarded: a waker that panics when
/// woken stops neither the thread nor the deadlines due with it.
fn run() {
    let _running = Running;
    let mut due = Vec::new();
    let mut timers = timers();
    loop {
        let now = Instant::now();
        while let Some(entry) = timers.waiting.first_entry() {
            if entry.key().0 > now {
                break;
            }
            due.push(entry.remove());
        }
        if !due.is_empty() {
            drop(timers);
            due.drain(..).for_each(wake_guarded);
            timers = self::timers();
            continue;
        }
        let Some(&(next, _)) = timers.waiting.keys().next() else {
            timers.running = false;
            return;
        };
        let wait = next.saturating_duration_since(now);
        timers = EARLIER.wait_timeout(timers, wait).unwrap_or_else(|e| e.into_inner()).0;
    }
}

#[cfg(test)]
impl std::future::Future for Deadline {
    type Output = ();

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().poll_elapsed(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn runtime_without_timer() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().build().unwrap()
    }

    #[test]
    fn a_deadline_fires_on_a_runtime_without_a_time_driver() {
        let start = Instant::now();
        runtime_without_timer().block_on(Deadline::at(start + Duration::from_millis(20)));
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn deadlines_fire_in_order_and_the_thread_ends_when_none_is_left() {
        let rt = runtime_without_timer();
        let start = Instant::now();
        let order = std::sync::Arc::new(Mutex::new(Vec::new()));
        rt.block_on(async {
            let mut tasks = Vec::new();
            for ms in [30u64, 10, 20] {
                let order = order.clone();
                tasks.push(tokio::spawn(async move {
                    Deadline::at(start + Duration::from_millis(ms)).await;
                    order.lock().unwrap().push(ms);
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        assert_eq!(*order.lock().unwrap(), [10, 20, 30]);
        let stopped = Instant::now() + Duration::from_secs(5);
        while timers().running && Instant::now() < stopped {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Other tests of this binary may hold deadlines of their own.
        let t = timers();
        assert!(!t.running || !t.waiting.is_empty(), "the thread ends once no deadline waits");
    }

    #[test]
    fn a_dropped_deadline_is_forgotten() {
        let rt = runtime_without_timer();
        rt.block_on(async {
            let mut far = Deadline::at(Instant::now() + Duration::from_secs(3600));
            let waker = Waker::noop();
            assert!(far.poll_elapsed(&mut Context::from_waker(waker)).is_pending());
            let key = far.key.expect("registered");
            assert!(timers().waiting.contains_key(&key));
            drop(far);
            assert!(!timers().waiting.contains_key(&key));
        });
    }

    /// Counts its wakes; panics when woken if it was made to, as an
    /// executor whose `wake` does `try_send(..).expect(..)` on a full queue.
    struct Counting {
        wakes: std::sync::atomic::AtomicUsize,
        panics: bool,
    }

    impl std::task::Wake for Counting {
        fn wake(self: std::sync::Arc<Self>) {
            self.wakes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            assert!(!self.panics, "a waker that panics when woken (this test's)");
        }
    }

    fn counting(panics: bool) -> (std::sync::Arc<Counting>, Waker) {
        let counting = std::sync::Arc::new(Counting { wakes: Default::default(), panics });
        (counting.clone(), Waker::from(counting))
    }

    /// Waits (30 s at most) until `c` was woken `n` times.
    fn woken(c: &Counting, n: usize, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.wakes.load(std::sync::atomic::Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_waker_that_panics_when_woken_stops_no_deadline() {
        let (panicking, waker) = counting(true);
        let mut first = Deadline::at(Instant::now() + Duration::from_millis(5));
        assert!(first.poll_elapsed(&mut Context::from_waker(&waker)).is_pending());
        woken(&panicking, 1, "the panicking waker is woken at its deadline");
        // Then two deadlines due together, the panicking waker's first: the
        // thread survived the first panic, and the second one neither stops
        // it nor keeps the working waker from being woken.
        let (working, ok) = counting(false);
        let at = Instant::now() + Duration::from_millis(5);
        let mut second = Deadline::at(at);
        let mut third = Deadline::at(at);
        assert!(second.poll_elapsed(&mut Context::from_waker(&waker)).is_pending());
        assert!(third.poll_elapsed(&mut Context::from_waker(&ok)).is_pending());
        woken(&panicking, 2, "the second panicking waker is woken too");
        woken(&working, 1, "a deadline due with a panicking waker still fires");
        assert!(third.poll_elapsed(&mut Context::from_waker(&ok)).is_ready());
    }

    #[test]
    fn wake_soon_wakes_from_the_timer_thread() {
        let (tx, rx) = std::sync::mpsc::channel::<Waker>();
        let handing = std::thread::spawn(move || {
            let waker = rx.recv().unwrap();
            wake_soon(vec![waker]);
        });
        let mut sent = false;
        // Woken by nothing but `wake_soon`, on a runtime without a timer.
        runtime_without_timer().block_on(std::future::poll_fn(|cx| {
            if sent {
                return Poll::Ready(());
            }
            sent = true;
            tx.send(cx.waker().clone()).unwrap();
            Poll::Pending
        }));
        handing.join().unwrap();
    }
}
