//! The one place that drains: a background task that reads a dropped body to
//! its end, within its budget, then drops it.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Buf;
use http_body::Body;
use tokio::runtime::Handle;

use crate::adaptive::Origin;
use crate::policy::Budget;
use crate::stats::{DrainPermit, Outcome};

/// Spawns the drain of `body` on `handle`.
///
/// Never blocks. If the runtime is shutting down the task is dropped unpolled,
/// which drops the body (hyper closes the connection) and the permit counts
/// the drop as skipped.
pub(crate) fn spawn<B>(
    handle: &Handle,
    body: B,
    budget: Budget,
    mut permit: DrainPermit,
    origin: Option<Arc<Origin>>,
) where
    B: Body + Send + Unpin + 'static,
{
    // The join handle is dropped: the task is detached and ends by itself at
    // the end of the body, on the first error, or at the deadline.
    let draining = origin.map(Origin::start_drain);
    drop(handle.spawn(async move {
        permit.running();
        let outcome = match budget.deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, drain(body, budget.max_bytes, &mut permit))
                .await
                .unwrap_or(Outcome::OverTime),
            None => drain(body, budget.max_bytes, &mut permit).await,
        };
        if let Some(draining) = draining {
            draining.origin().record_transfer(permit.bytes(), permit.elapsed());
        }
        permit.finish(outcome);
    }));
}

/// Reads and discards frames until the end of `body` or until more than
/// `max_bytes` data bytes would have been read. The body is dropped when this
/// returns (or when the future is dropped at the deadline), so its connection
/// is pooled only if the end was reached.
async fn drain<B>(mut body: B, max_bytes: u64, permit: &mut DrainPermit) -> Outcome
where
    B: Body + Unpin,
{
    loop {
        if body.is_end_stream() {
            return Outcome::Drained;
        }
        let frame = match poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            None => return Outcome::Drained,
            Some(Err(_)) => return Outcome::Failed,
            Some(Ok(frame)) => frame,
        };
        // Trailers carry no data bytes; they are read and dropped like data.
        if let Some(data) = frame.data_ref() {
            permit.add_bytes(data.remaining() as u64);
        }
        let left = max_bytes.saturating_sub(permit.bytes());
        // Over budget already, or the rest is known to be longer than what is left.
        if permit.bytes() > max_bytes || body.size_hint().lower() > left {
            return Outcome::OverBytes;
        }
    }
}
