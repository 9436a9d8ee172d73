//! The one place that decides what happens to an early drop.
//!
//! Three moments feed the decision. When the response head arrives,
//! [`inspect`] reads the request and response headers once and notes any
//! reason the connection cannot be reused whatever a drain does. When the
//! body is dropped before its end, [`decide`] adds what is known then (the
//! budget, the remaining length, whether the thread is unwinding) and
//! returns either a reason to skip or what the drain may spend. When the
//! drain has to wait for the server, [`admit`] says whether the cap lets it
//! and [`runtimes`] where its task runs. When a drain ends without an
//! outcome of its own, or cannot wait, [`unfinished`] and [`cannot_wait`]
//! name why.

use std::time::Duration;

use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderValue, Version};
use http_body::SizeHint;
use tokio::runtime::Handle;

use crate::budget::DrainBudget;
use crate::origin::{Origin, slow_start_rounds};
use crate::outcome::Reason;
use crate::shared::{Config, Shared};
use crate::stats::Slot;

/// What the request said about its response's drain, for [`inspect`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RequestSays {
    /// The request carries `Connection: close`.
    pub(crate) close: bool,
    /// The response did not come from the client below the layer (see
    /// `wrap_response`): its headers may no longer describe the wire framing
    /// (reqwest removes `Content-Length` from bodies it decompresses), so
    /// the body is not taken for close-delimited.
    pub(crate) framing_unknown: bool,
}

impl RequestSays {
    pub(crate) fn read(headers: &HeaderMap) -> Self {
        RequestSays { close: has_token(headers, "close"), framing_unknown: false }
    }

    /// For a response that came without its request, with a body that is
    /// not hyper's own.
    pub(crate) fn unknown() -> Self {
        RequestSays { close: false, framing_unknown: true }
    }
}

/// Reads the response head, and what the request said, for a reason why
/// this connection will not be reused, or this body will not end, whatever
/// a drain does. `exact_length` is whether the body knows its exact length
/// (hyper's `Incoming` does for `Content-Length` framing): such a body is
/// framed and ends, so only `Connection` is looked up.
pub(crate) fn inspect(
    config: &Config,
    request: RequestSays,
    version: Version,
    headers: &HeaderMap,
    exact_length: bool,
) -> Option<Reason> {
    if version >= Version::HTTP_2 {
        return Some(Reason::Http2);
    }
    // A body of exact length only needs `Connection`, which most responses
    // lack: look at the names alone first.
    if exact_length && !request.close && !headers.keys().any(|name| name == CONNECTION) {
        return (version <= Version::HTTP_10).then_some(Reason::ConnectionClose);
    }
    // One pass over the headers (a handful on most responses), comparing
    // names, rather than a hashed lookup per header of interest.
    let mut head = Head::default();
    for (name, value) in headers {
        if name == CONNECTION {
            head.close |= lists(value, "close");
            head.keep_alive |= lists(value, "keep-alive");
        } else if name == TRANSFER_ENCODING {
            head.transfer_encoding = true;
            // As hyper frames it: the last coding of the last header decides.
            head.chunked = last_coding_is_chunked(value);
        } else if name == CONTENT_LENGTH {
            head.content_length = true;
        } else if name == CONTENT_TYPE && !exact_length {
            head.stream = is_stream(config, value);
        }
    }
    if request.close || head.close {
        return Some(Reason::ConnectionClose);
    }
    if version <= Version::HTTP_10 && !head.keep_alive {
        return Some(Reason::ConnectionClose);
    }
    if exact_length {
        return None;
    }
    // Any Transfer-Encoding overrides Content-Length, and one that does not
    // end in chunked is read until the close.
    let framed = if head.transfer_encoding { head.chunked } else { head.content_length };
    if !framed && !request.framing_unknown {
        return Some(Reason::CloseDelimited);
    }
    if head.stream {
        return Some(Reason::Stream);
    }
    None
}

/// What [`inspect`] reads off the response headers.
#[derive(Default)]
struct Head {
    close: bool,
    keep_alive: bool,
    transfer_encoding: bool,
    chunked: bool,
    content_length: bool,
    stream: bool,
}

/// What is known when a body is dropped before its end.
pub(crate) struct AtDrop<'a> {
    /// What [`inspect`] found when the response arrived.
    pub(crate) head: Option<Reason>,
    /// The request's own budget, overriding the layer's.
    pub(crate) request_budget: Option<DrainBudget>,
    /// In adaptive mode, the response's origin.
    pub(crate) origin: Option<&'a Origin>,
    /// The body's size hint now.
    pub(crate) remaining: SizeHint,
    /// Data bytes the caller read.
    pub(crate) read: u64,
    /// The thread is unwinding from a panic.
    pub(crate) unwinding: bool,
}

/// What to do with a body dropped before its end.
pub(crate) enum Decision {
    /// Drop it now, as hyper alone would.
    Skip(Reason),
    /// Drain it within this budget (counted from the drop): hyper's own body
    /// at once as far as it has arrived, then, if [`admit`] lets it, on a
    /// task.
    Drain(DrainBudget),
}

/// Decides what to do with a body dropped before its end. Also returns the
/// budget it was decided with, when it got that far, for the event.
pub(crate) fn decide(shared: &Shared, at: &AtDrop<'_>) -> (Decision, Option<DrainBudget>) {
    let config = &shared.config;
    let mut decided_with = None;
    let decision = 'decide: {
        if !config.enabled || config.max_concurrent_drains == 0 {
            break 'decide Decision::Skip(Reason::Disabled);
        }
        if let Some(budget) = at.request_budget {
            if !budget.is_enabled() {
                break 'decide Decision::Skip(Reason::Disabled);
            }
        } else if !config.budget().is_enabled() {
            break 'decide Decision::Skip(Reason::Disabled);
        }
        if let Some(reason) = at.head {
            break 'decide Decision::Skip(reason);
        }
        let (budget, adaptive) = match (at.request_budget, at.origin) {
            (Some(budget), _) => (budget, false),
            (None, None) => (config.budget(), false),
            (None, Some(origin)) => {
                let size = at.remaining.exact().map_or(config.max_bytes, |rest| rest.saturating_add(at.read));
                origin_budget(config, origin, |default| {
                    origin.adaptive_budget(config.ceiling(), default, size)
                })
            }
        };
        decided_with = Some(budget);
        if adaptive && !budget.is_enabled() {
            break 'decide Decision::Skip(Reason::ReconnectCheaper);
        }
        // A body that must be longer than the budget is not worth a single
        // read: Go and .NET skip it the same way.
        if at.remaining.lower() > budget.max_bytes {
            break 'decide Decision::Skip(Reason::DeclaredOverBudget);
        }
        // A drain would run, but not from a drop made while the thread
        // unwinds: no read, no task, only the count.
        if at.unwinding {
            break 'decide Decision::Skip(Reason::Unwinding);
        }
        // The cap is not asked here: a body that ends in the drop takes no
        // place under it (see `admit`).
        Decision::Drain(budget)
    };
    (decision, decided_with)
}

/// The budget an origin's early drops get without a request budget: in
/// adaptive mode, what `adaptive` gives from the origin's estimates (and
/// `true`), once its setup cost is measured; otherwise the default budget
/// ([`default_budget`], from the origin's round trip).
pub(crate) fn origin_budget(
    config: &Config,
    origin: &Origin,
    adaptive: impl FnOnce(DrainBudget) -> Option<DrainBudget>,
) -> (DrainBudget, bool) {
    let default = default_budget(config, origin.round_trip());
    match config.adaptive.then(|| adaptive(default)).flatten() {
        Some(budget) => (budget, true),
        None => (default, false),
    }
}

/// The default budget of an early drop: `max_bytes`, and a time budget that
/// follows the origin's round trip, long enough for a new connection's TCP
/// slow start to deliver `max_bytes` (`slow_start_rounds(max_bytes)` round
/// trips) plus one round trip, never below `max_time`'s default (50 ms) nor
/// above 1 s. A LAN origin (a round trip under 8 ms at the default 256 KiB)
/// gets 50 ms; one 100 ms away, 600 ms. An explicit `max_time` is the time
/// budget, whatever the round trip; so is the default with no round trip
/// measured yet.
pub(crate) fn default_budget(config: &Config, round_trip: Option<Duration>) -> DrainBudget {
    match round_trip {
        Some(rtt) if !config.explicit_time => {
            let rounds = slow_start_rounds(config.max_bytes) + 1;
            let time = rtt.saturating_mul(rounds).clamp(config.max_time, config.ceiling().max_time);
            DrainBudget::new(config.max_bytes, time)
        }
        _ => config.budget(),
    }
}

/// Where a drain stands against its byte allowance after a data frame.
pub(crate) enum Budget {
    /// Read on.
    Within,
    /// This frame took the drain past the allowance: read one more frame, to
    /// see whether the body ends there (only its end marker or trailers left).
    Crossed,
    /// Give up (`over_bytes`).
    Spent,
}

/// The byte rule of a running drain, after a data frame of `len` bytes
/// brought it to `read` of `max_bytes`: more data after the crossing frame,
/// or a rest known to be longer than what is left, is over the budget. So a
/// drain reads at most `max_bytes` plus two frames.
pub(crate) fn after_frame(read: u64, len: u64, max_bytes: u64, crossed: bool, rest: SizeHint) -> Budget {
    if crossed && len > 0 {
        return Budget::Spent;
    }
    if rest.lower() > max_bytes.saturating_sub(read) {
        return Budget::Spent;
    }
    if read > max_bytes { Budget::Crossed } else { Budget::Within }
}

/// Where a drain that has to wait for the server runs: on the runtime its
/// response arrived on (`fetched`: hyper's connection task runs there), and
/// if that one has shut down, on the one current at the drop (`current`),
/// when that is another runtime. The first choice and the fallback;
/// `no_runtime` when there is neither. Asked only at a drop that has to
/// wait, so that responses read to the end never touch it.
pub(crate) fn runtimes(
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

/// Admits a drain that has to wait for the server to the background, under
/// `max_concurrent_drains`: its slot, or `None` (`saturated`) when that many
/// drains are running. A drain that ends in the drop holds no slot.
pub(crate) fn admit(shared: &Shared) -> Option<Slot> {
    shared.stats.try_acquire(shared.config.max_concurrent_drains)
}

/// Why a drain that had to wait for the server could not: `refused` says
/// why not (no slot, no runtime, no timer), which is the reason when the
/// drop read nothing; a drop that had read part of the body did start a
/// drain, and gives it up (`cannot_wait`).
pub(crate) fn cannot_wait(refused: Reason, read_any: bool) -> Reason {
    if read_any { Reason::CannotWait } else { refused }
}

/// Why a drain task ended without reaching an outcome of its own: dropped
/// while running (its runtime shut down, whatever else the thread was
/// doing: a panic of the body is caught where it happens and counted
/// `body_panic` there), or dropped before it ever ran (every runtime it
/// could run on had shut down), which is [`cannot_wait`] for want of a
/// runtime.
pub(crate) fn unfinished(polled: bool, read_any: bool) -> Reason {
    if polled { Reason::RuntimeShutdown } else { cannot_wait(Reason::NoRuntime, read_any) }
}

/// Whether a `Content-Type` value is one of the configured stream types.
fn is_stream(config: &Config, value: &HeaderValue) -> bool {
    let types = &config.stream_types;
    if types.is_empty() {
        return false;
    }
    let media_type = value.as_bytes().split(|&b| b == b';').next().unwrap_or_default().trim_ascii();
    types.iter().any(|t| t.as_bytes().eq_ignore_ascii_case(media_type))
}

/// Whether a `Connection` value lists `token` (case-insensitive).
fn lists(value: &HeaderValue, token: &str) -> bool {
    value.as_bytes().split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// Whether the last coding of a `Transfer-Encoding` value is `chunked`.
fn last_coding_is_chunked(value: &HeaderValue) -> bool {
    let codings = value.as_bytes();
    let last = codings.rsplit(|&b| b == b',').next().unwrap_or_default();
    last.trim_ascii().eq_ignore_ascii_case(b"chunked")
}

/// Whether any `Connection` header lists `token`.
fn has_token(headers: &HeaderMap, token: &str) -> bool {
    !headers.is_empty() && headers.get_all(CONNECTION).iter().any(|value| lists(value, token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn inspect(request_close: bool, version: Version, headers: &HeaderMap) -> Option<Reason> {
        super::inspect(
            &Config::default(),
            RequestSays { close: request_close, framing_unknown: false },
            version,
            headers,
            false,
        )
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn connection_tokens_are_matched_case_insensitively_in_any_header() {
        let h = headers(&[("connection", "Upgrade"), ("connection", "foo, CLOSE")]);
        assert_eq!(inspect(false, Version::HTTP_11, &h), Some(Reason::ConnectionClose));
        let h = headers(&[("connection", "closed"), ("content-length", "3")]);
        assert_eq!(inspect(false, Version::HTTP_11, &h), None, "'closed' is not 'close'");
    }

    #[test]
    fn http10_needs_keep_alive() {
        let h = headers(&[("content-length", "3")]);
        assert_eq!(inspect(false, Version::HTTP_10, &h), Some(Reason::ConnectionClose));
        let h = headers(&[("content-length", "3"), ("connection", "Keep-Alive")]);
        assert_eq!(inspect(false, Version::HTTP_10, &h), None);
    }

    #[test]
    fn framing_decides_close_delimited() {
        let none = headers(&[]);
        assert_eq!(inspect(false, Version::HTTP_11, &none), Some(Reason::CloseDelimited));
        let chunked = headers(&[("transfer-encoding", "gzip, chunked")]);
        assert_eq!(inspect(false, Version::HTTP_11, &chunked), None);
        let not_last = headers(&[("transfer-encoding", "chunked, gzip")]);
        assert_eq!(inspect(false, Version::HTTP_11, &not_last), Some(Reason::CloseDelimited));
        // hyper ignores Content-Length beside any Transfer-Encoding.
        let gzip_cl = headers(&[("transfer-encoding", "gzip"), ("content-length", "100")]);
        assert_eq!(inspect(false, Version::HTTP_11, &gzip_cl), Some(Reason::CloseDelimited));
        let chunked_cl = headers(&[("transfer-encoding", "chunked"), ("content-length", "100")]);
        assert_eq!(inspect(false, Version::HTTP_11, &chunked_cl), None);
    }

    #[test]
    fn http2_and_request_close_skip() {
        let h = headers(&[("content-length", "3")]);
        assert_eq!(inspect(false, Version::HTTP_2, &h), Some(Reason::Http2));
        assert_eq!(inspect(true, Version::HTTP_11, &h), Some(Reason::ConnectionClose));
    }

    fn shared(max_bytes: u64, max_time: Duration, cap: usize) -> Shared {
        let config = Config { max_bytes, max_time, max_concurrent_drains: cap, ..Config::default() };
        Shared { config, ..Shared::default() }
    }

    fn at(budget: Option<DrainBudget>, remaining: u64) -> AtDrop<'static> {
        AtDrop {
            head: None,
            request_budget: budget,
            origin: None,
            remaining: SizeHint::with_exact(remaining),
            read: 0,
            unwinding: false,
        }
    }

    fn skip(d: (Decision, Option<DrainBudget>)) -> Option<Reason> {
        match d.0 {
            Decision::Skip(r) => Some(r),
            Decision::Drain(..) => None,
        }
    }

    #[test]
    fn budget_checks_come_in_order() {
        let ms = Duration::from_millis;
        assert_eq!(skip(decide(&shared(0, ms(50), 1), &at(None, 1))), Some(Reason::Disabled));
        assert_eq!(skip(decide(&shared(10, ms(0), 1), &at(None, 1))), Some(Reason::Disabled));
        assert_eq!(skip(decide(&shared(10, ms(50), 0), &at(None, 1))), Some(Reason::Disabled), "cap 0");
        let mut close = at(None, 1);
        close.head = Some(Reason::ConnectionClose);
        assert_eq!(skip(decide(&shared(10, ms(50), 1), &close)), Some(Reason::ConnectionClose));
        assert_eq!(skip(decide(&shared(10, ms(50), 1), &at(None, 11))), Some(Reason::DeclaredOverBudget));
        let unwinding = AtDrop { unwinding: true, ..at(None, 10) };
        assert_eq!(skip(decide(&shared(10, ms(50), 1), &unwinding)), Some(Reason::Unwinding));
        let over_and_unwinding = AtDrop { unwinding: true, ..at(None, 11) };
        assert_eq!(
            skip(decide(&shared(10, ms(50), 1), &over_and_unwinding)),
            Some(Reason::DeclaredOverBudget),
            "a drop that would not drain anyway says why"
        );
        let s = shared(10, ms(50), 1);
        assert!(matches!(decide(&s, &at(None, 10)).0, Decision::Drain(..)), "exactly the budget is drained");
        let running = admit(&s).expect("one slot");
        assert!(admit(&s).is_none(), "the cap holds");
        assert!(
            matches!(decide(&s, &at(None, 1)).0, Decision::Drain(..)),
            "the cap is asked only of a drain that has to wait"
        );
        drop(running);
        assert!(admit(&s).is_some(), "slot freed");
        match decide(&shared(10, Duration::MAX, 1), &at(None, 1)).0 {
            Decision::Drain(budget) => {
                let now = std::time::Instant::now();
                assert!(crate::budget::Allowance::from_drop(budget, now).deadline.is_none(), "no deadline")
            }
            Decision::Skip(r) => panic!("unexpected skip {r:?}"),
        }
    }

    #[test]
    fn a_body_of_exact_length_still_honours_connection_close_and_http10() {
        let says = |close| RequestSays { close, framing_unknown: false };
        let cfg = Config::default();
        let cl = headers(&[("content-length", "3")]);
        assert_eq!(super::inspect(&cfg, says(false), Version::HTTP_11, &cl, true), None);
        assert_eq!(
            super::inspect(&cfg, says(true), Version::HTTP_11, &cl, true),
            Some(Reason::ConnectionClose)
        );
        assert_eq!(
            super::inspect(&cfg, says(false), Version::HTTP_10, &cl, true),
            Some(Reason::ConnectionClose)
        );
        let close = headers(&[("content-length", "3"), ("connection", "close")]);
        assert_eq!(
            super::inspect(&cfg, says(false), Version::HTTP_11, &close, true),
            Some(Reason::ConnectionClose)
        );
        let keep = headers(&[("content-length", "3"), ("connection", "keep-alive")]);
        assert_eq!(super::inspect(&cfg, says(false), Version::HTTP_10, &keep, true), None);
        let sse = headers(&[("content-length", "3"), ("content-type", "text/event-stream")]);
        assert_eq!(
            super::inspect(&cfg, says(false), Version::HTTP_11, &sse, true),
            None,
            "a known length ends"
        );
    }

    #[test]
    fn a_drain_reads_one_frame_past_the_budget_then_gives_up_on_more_data() {
        let none = SizeHint::new();
        assert!(matches!(after_frame(10, 10, 10, false, none), Budget::Within), "exactly the budget");
        assert!(matches!(after_frame(11, 5, 10, false, none), Budget::Crossed));
        assert!(matches!(after_frame(12, 1, 10, true, none), Budget::Spent), "data after the crossing frame");
        assert!(matches!(after_frame(11, 0, 10, true, none), Budget::Crossed), "an empty frame is no data");
        assert!(
            matches!(after_frame(4, 4, 10, false, SizeHint::with_exact(7)), Budget::Spent),
            "rest known too long"
        );
    }

    #[test]
    fn an_adaptive_budget_of_zero_is_reconnect_cheaper_not_disabled() {
        let mut layer = shared(256 * 1024, Duration::from_millis(50), 1024);
        layer.config.adaptive = true;
        let origin = layer.origins.get(&"http://lan.example/".parse().unwrap()).unwrap();
        // A connection that costs nothing to open, on a measured link.
        origin.record_connection(Some((false, Duration::ZERO)));
        origin.record_drain(1 << 20, Duration::from_millis(10), true);
        let at = AtDrop { origin: Some(&origin), ..at(None, 100) };
        let (decision, budget) = decide(&layer, &at);
        assert_eq!(skip((decision, budget)), Some(Reason::ReconnectCheaper));
        assert_eq!(budget.map(|b| b.max_bytes()), Some(0), "decided with a zero budget");
    }

    #[test]
    fn a_drain_waits_on_the_runtime_of_its_response_then_on_the_runtime_of_the_drop() {
        let id = |r: Result<(Handle, Option<Handle>), Reason>| r.map(|(h, f)| (h.id(), f.map(|f| f.id())));
        let rt = || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (fetched, current) = (rt(), rt());
        let (f, c) = (fetched.handle().clone(), current.handle().clone());
        assert_eq!(id(runtimes(None, None)), Err(Reason::NoRuntime), "no runtime anywhere");
        assert_eq!(id(runtimes(Some(f.clone()), Some(c.clone()))), Ok((f.id(), Some(c.id()))));
        assert_eq!(id(runtimes(Some(f.clone()), Some(f.clone()))), Ok((f.id(), None)), "one runtime, once");
        assert_eq!(id(runtimes(None, Some(c.clone()))), Ok((c.id(), None)), "fetched outside any runtime");
        assert_eq!(id(runtimes(Some(f.clone()), None)), Ok((f.id(), None)), "dropped on a plain thread");
        let timerless = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let t = timerless.handle().clone();
        assert_eq!(id(runtimes(Some(t.clone()), None)), Ok((t.id(), None)), "no time driver is needed");
    }

    #[test]
    fn the_default_time_budget_follows_the_round_trip_between_50_ms_and_1_s() {
        let ms = Duration::from_millis;
        let time = |config: &Config, rtt: Option<u64>| default_budget(config, rtt.map(ms)).max_time;
        let default = Config::default();
        assert_eq!(time(&default, None), ms(50), "no round trip measured yet: the fixed default");
        assert_eq!(time(&default, Some(0)), ms(50), "loopback");
        assert_eq!(time(&default, Some(8)), ms(50), "a LAN: today's 50 ms");
        // 256 KiB take 5 round trips of slow start on a new connection; one more.
        assert_eq!(time(&default, Some(20)), ms(120));
        assert_eq!(time(&default, Some(100)), ms(600));
        assert_eq!(time(&default, Some(150)), ms(900));
        assert_eq!(time(&default, Some(400)), ms(1000), "capped");
        assert_eq!(default_budget(&default, Some(ms(100))).max_bytes, 256 * 1024, "bytes as set");
        let big = Config { max_bytes: 1 << 20, explicit_bytes: true, ..Config::default() };
        assert_eq!(time(&big, Some(100)), ms(800), "1 MiB: 7 rounds, and one more");
        let fixed = Config { max_time: ms(70), explicit_time: true, ..Config::default() };
        assert_eq!(time(&fixed, Some(100)), ms(70), "an explicit max_time is the budget");
    }

    #[test]
    fn unfinished_drains_name_their_cause() {
        assert_eq!(unfinished(false, false), Reason::NoRuntime);
        assert_eq!(unfinished(false, true), Reason::CannotWait, "a drain that read is not a skip");
        assert_eq!(unfinished(true, true), Reason::RuntimeShutdown);
        assert_eq!(unfinished(true, false), Reason::RuntimeShutdown, "whatever else the thread does");
        assert_eq!(cannot_wait(Reason::Saturated, false), Reason::Saturated);
        assert_eq!(cannot_wait(Reason::Saturated, true), Reason::CannotWait);
        for reason in [Reason::Saturated, Reason::NoRuntime] {
            assert_eq!(reason.outcome(), crate::Outcome::Skipped);
        }
        assert_eq!(Reason::CannotWait.outcome(), crate::Outcome::Abandoned);
    }

    #[test]
    fn stream_content_types_match_the_media_type_only() {
        let h = headers(&[
            ("content-type", "Text/Event-Stream; charset=utf-8"),
            ("transfer-encoding", "chunked"),
        ]);
        assert_eq!(inspect(false, Version::HTTP_11, &h), Some(Reason::Stream));
        let h = headers(&[("content-type", "text/event-streamer"), ("transfer-encoding", "chunked")]);
        assert_eq!(inspect(false, Version::HTTP_11, &h), None);
        let none = Config { stream_types: std::sync::Arc::from(Vec::new()), ..Config::default() };
        let h = headers(&[("content-type", "text/event-stream"), ("transfer-encoding", "chunked")]);
        assert_eq!(super::inspect(&none, RequestSays::default(), Version::HTTP_11, &h, false), None);
    }

    #[test]
    fn a_request_budget_replaces_the_layer_budget() {
        let layer = shared(256 * 1024, Duration::from_millis(50), 1024);
        let big = Some(DrainBudget::new(1 << 20, Duration::from_secs(1)));
        assert_eq!(skip(decide(&layer, &at(None, 1 << 19))), Some(Reason::DeclaredOverBudget));
        assert_eq!(skip(decide(&layer, &at(big, 1 << 19))), None);
        let off = Some(DrainBudget::disabled());
        assert_eq!(skip(decide(&layer, &at(off, 1))), Some(Reason::Disabled));
        let disabled_layer = shared(0, Duration::ZERO, 1024);
        assert_eq!(skip(decide(&disabled_layer, &at(big, 1))), None, "the request budget wins");
    }
}
