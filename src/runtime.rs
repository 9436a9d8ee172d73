//! Where a drain that has to wait runs: which tokio runtime, chosen at the
//! drop. Asked only by a drop that has to wait, so that responses read to
//! the end never touch it.

use tokio::runtime::Handle;

use crate::outcome::Reason;

/// The runtime a drain runs on, and the one it falls back to: the runtime
/// its response arrived on (`fetched`: hyper's connection task runs there),
/// and if that one has shut down, the one current at the drop (`current`),
/// when that is another runtime. `no_runtime` when there is neither.
pub(crate) fn for_drain(
    fetched: Option<Handle>,
    current: Option<Handle>,
) -> Result<(Handle, Option<Handle>), Reason> {
    let current = current.filter(|c| fetched.as_ref().is_none_or(|f| f.id() != c.id()));
    match (fetched, current) {
        (Some(first), fallback) => Ok((first, fallback)),
        (None, Some(first)) => Ok((first, None)),
        (None, None) => Err(Reason::NoRuntime),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_waits_on_the_runtime_of_its_response_then_on_the_runtime_of_the_drop() {
        let id = |r: Result<(Handle, Option<Handle>), Reason>| r.map(|(h, f)| (h.id(), f.map(|f| f.id())));
        let rt = || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (fetched, current) = (rt(), rt());
        let (f, c) = (fetched.handle().clone(), current.handle().clone());
        assert_eq!(id(for_drain(None, None)), Err(Reason::NoRuntime), "no runtime anywhere");
        assert_eq!(id(for_drain(Some(f.clone()), Some(c.clone()))), Ok((f.id(), Some(c.id()))));
        assert_eq!(id(for_drain(Some(f.clone()), Some(f.clone()))), Ok((f.id(), None)), "one runtime, once");
        assert_eq!(id(for_drain(None, Some(c.clone()))), Ok((c.id(), None)), "fetched outside any runtime");
        assert_eq!(id(for_drain(Some(f.clone()), None)), Ok((f.id(), None)), "dropped on a plain thread");
        let timerless = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let t = timerless.handle().clone();
        assert_eq!(id(for_drain(Some(t.clone()), None)), Ok((t.id(), None)), "no time driver is needed");
    }
}
