//! Where a drain goes when it has to wait: a task of the runtime chosen at
//! the drop, or, should that runtime have shut down meanwhile, of the
//! fallback runtime.

use std::sync::{Arc, Mutex};

use http_body::Body;
use tokio::runtime::Handle;

use super::Drain;

/// Runs `drain` on a task of `runtime`. A runtime that has shut down drops
/// the task unpolled, inside `spawn`: the drain then goes to `fallback`
/// (see [`Task`]). The fallback is kept for that call only: a runtime that
/// shuts down later drops the queued drain, counted `runtime_shutdown`, and
/// no drain keeps a runtime it does not run on (its handle holds the
/// runtime's file descriptors).
pub(super) fn spawn<B>(runtime: &Handle, drain: Drain<B>, fallback: Option<Handle>)
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
