//! The one place that decides whether an early drop is drained.
//!
//! Two moments feed the decision. When the response head arrives,
//! [`inspect`] reads the request and response headers once and notes any
//! reason the connection cannot be reused whatever we do. When the body is
//! dropped before its end, [`Policy::decide`] adds what is known then (the
//! remaining length, the runtime, the number of drains running) and returns
//! either a reason to skip or a budget and a permit to drain.

use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{Extensions, HeaderMap, Request, Version};
use http_body::SizeHint;
use hyper_util::client::legacy::connect::HttpInfo;
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::adaptive::{self, Origin, OriginKey};
use crate::budget::DrainBudget;
use crate::observe::ConnectionReuse;
use crate::stats::{DrainPermit, DrainStats, SkipReason};

/// The layer's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) max_bytes: u64,
    pub(crate) max_time: Duration,
    pub(crate) max_concurrent_drains: usize,
    /// Media types (lowercase, no parameters) of open-ended streams.
    pub(crate) stream_types: Arc<[String]>,
    /// Budgets follow per-origin estimates (see `adaptive.rs`).
    pub(crate) adaptive: bool,
    /// `max_bytes` / `max_time` were set by the user: in adaptive mode they
    /// are the ceilings, otherwise the adaptive defaults are.
    pub(crate) explicit_bytes: bool,
    pub(crate) explicit_time: bool,
}

impl Config {
    /// The most an adaptive drain may spend.
    pub(crate) fn ceiling(&self) -> DrainBudget {
        DrainBudget::new(
            if self.explicit_bytes { self.max_bytes } else { adaptive::DEFAULT_CEILING_BYTES },
            if self.explicit_time { self.max_time } else { adaptive::DEFAULT_CEILING_TIME },
        )
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_bytes: 256 * 1024,
            max_time: Duration::from_millis(50),
            max_concurrent_drains: 1024,
            stream_types: Arc::from(vec!["text/event-stream".to_string()]),
            adaptive: false,
            explicit_bytes: false,
            explicit_time: false,
        }
    }
}

/// What the request says about its response's drain, read in `call`.
#[derive(Clone, Debug, Default)]
pub(crate) struct RequestInfo {
    /// The request carries `Connection: close`.
    close: bool,
    /// A per-request [`DrainBudget`] from the extensions.
    pub(crate) budget: Option<DrainBudget>,
    /// In adaptive mode: the request's origin, when it was sent, and
    /// whether a drain from that origin was running then.
    adaptive: Option<SentTo>,
}

#[derive(Clone, Debug)]
struct SentTo {
    origin: Arc<Origin>,
    at: StdInstant,
    while_draining: bool,
}

impl Policy {
    /// Reads what `call` needs from the request.
    pub(crate) fn on_request<B>(&self, req: &Request<B>) -> RequestInfo {
        let adaptive = self.config.adaptive.then(|| OriginKey::from_uri(req.uri())).flatten().map(|key| {
            let origin = self.stats.origin_table().get(&key, self.config.ceiling());
            let while_draining = origin.is_draining();
            SentTo { origin, at: StdInstant::now(), while_draining }
        });
        RequestInfo {
            close: has_token(req.headers(), "close"),
            budget: req.extensions().get::<DrainBudget>().copied(),
            adaptive,
        }
    }
}

/// Settings plus the counters they report into; shared by the services built
/// from one layer and by every body they return.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    pub(crate) config: Config,
    pub(crate) stats: DrainStats,
}

/// What a drain may spend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub(crate) max_bytes: u64,
    /// `None` when `max_time` is too large to be represented as an instant.
    pub(crate) deadline: Option<Instant>,
}

pub(crate) enum Decision {
    Skip(SkipReason),
    /// Drain on this runtime, within this budget, holding this slot.
    Drain(Handle, Budget, DrainPermit),
}

impl Policy {
    /// Decides what to do with a body dropped before its end.
    ///
    /// `head` is what [`inspect`] found when the response arrived,
    /// `remaining` the body's size hint at the drop, `runtime` the handle
    /// captured when the response arrived.
    /// `budget` overrides the layer's budgets for this response.
    pub(crate) fn decide(
        &self,
        budget: Option<DrainBudget>,
        origin: Option<&Origin>,
        head: Option<SkipReason>,
        remaining: SizeHint,
        runtime: Option<Handle>,
    ) -> Decision {
        let DrainBudget { max_bytes, max_time } = budget
            .or_else(|| origin?.budget(self.config.ceiling()))
            .unwrap_or(DrainBudget::new(self.config.max_bytes, self.config.max_time));
        if max_bytes == 0 || max_time.is_zero() {
            return Decision::Skip(SkipReason::Disabled);
        }
        if let Some(reason) = head {
            return Decision::Skip(reason);
        }
        // A body that must be longer than the budget is not worth a single
        // read: Go and .NET skip it the same way.
        if remaining.lower() > max_bytes {
            return Decision::Skip(SkipReason::OverBudget);
        }
        let Some(runtime) = runtime else {
            return Decision::Skip(SkipReason::NoRuntime);
        };
        let Some(permit) = self.stats.try_start(self.config.max_concurrent_drains) else {
            return Decision::Skip(SkipReason::Saturated);
        };
        let budget = Budget { max_bytes, deadline: Instant::now().checked_add(max_time) };
        Decision::Drain(runtime, budget, permit)
    }
}

impl Policy {
    /// In adaptive mode, feeds the response head's timing to its origin's
    /// estimates and returns the origin for the body to report to.
    pub(crate) fn observe_head(
        &self,
        request: &RequestInfo,
        reuse: Option<ConnectionReuse>,
        extensions: &Extensions,
    ) -> Option<Arc<Origin>> {
        let sent = request.adaptive.as_ref()?;
        let local_addr = extensions.get::<HttpInfo>().map(HttpInfo::local_addr);
        let observed = reuse.map(|r| (r.reused, r.setup_time));
        sent.origin.record_head(sent.at.elapsed(), sent.while_draining, observed, local_addr);
        Some(sent.origin.clone())
    }

    /// Reads the response head, and what the request said, for a reason why
    /// this connection will not be reused, or this body will not end, whatever
    /// a drain does.
    pub(crate) fn inspect(
        &self,
        request: &RequestInfo,
        version: Version,
        headers: &HeaderMap,
    ) -> Option<SkipReason> {
        if version >= Version::HTTP_2 {
            return Some(SkipReason::Http2);
        }
        if request.close || has_token(headers, "close") {
            return Some(SkipReason::ConnectionClose);
        }
        if version <= Version::HTTP_10 && !has_token(headers, "keep-alive") {
            return Some(SkipReason::ConnectionClose);
        }
        // As hyper frames it: any Transfer-Encoding overrides Content-Length,
        // and one that does not end in chunked is read until the close.
        let framed = if headers.contains_key(TRANSFER_ENCODING) {
            is_chunked(headers)
        } else {
            headers.contains_key(CONTENT_LENGTH)
        };
        if !framed {
            return Some(SkipReason::CloseDelimited);
        }
        if self.is_stream(headers) {
            return Some(SkipReason::Stream);
        }
        None
    }

    /// Whether the `Content-Type` is one of the configured stream types.
    fn is_stream(&self, headers: &HeaderMap) -> bool {
        let types = &self.config.stream_types;
        if types.is_empty() {
            return false;
        }
        let Some(media_type) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let media_type = media_type.split(';').next().unwrap_or_default().trim();
        types.iter().any(|t| t.eq_ignore_ascii_case(media_type))
    }
}

/// Whether any `Connection` header lists `token` (case-insensitive).
fn has_token(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(CONNECTION)
        .iter()
        .any(|value| value.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token))))
}

/// Whether the last transfer coding is `chunked`, as hyper requires.
fn is_chunked(headers: &HeaderMap) -> bool {
    headers
        .get_all(TRANSFER_ENCODING)
        .iter()
        .next_back()
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit(',').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn inspect(request_close: bool, version: Version, headers: &HeaderMap) -> Option<SkipReason> {
        let policy = Policy { config: Config::default(), stats: DrainStats::default() };
        let request = RequestInfo { close: request_close, ..RequestInfo::default() };
        policy.inspect(&request, version, headers)
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
        assert_eq!(inspect(false, Version::HTTP_11, &h), Some(SkipReason::ConnectionClose));
        let h = headers(&[("connection", "closed"), ("content-length", "3")]);
        assert_eq!(inspect(false, Version::HTTP_11, &h), None, "'closed' is not 'close'");
    }

    #[test]
    fn http10_needs_keep_alive() {
        let h = headers(&[("content-length", "3")]);
        assert_eq!(inspect(false, Version::HTTP_10, &h), Some(SkipReason::ConnectionClose));
        let h = headers(&[("content-length", "3"), ("connection", "Keep-Alive")]);
        assert_eq!(inspect(false, Version::HTTP_10, &h), None);
    }

    #[test]
    fn framing_decides_close_delimited() {
        let none = headers(&[]);
        assert_eq!(inspect(false, Version::HTTP_11, &none), Some(SkipReason::CloseDelimited));
        let chunked = headers(&[("transfer-encoding", "gzip, chunked")]);
        assert_eq!(inspect(false, Version::HTTP_11, &chunked), None);
        let not_last = headers(&[("transfer-encoding", "chunked, gzip")]);
        assert_eq!(inspect(false, Version::HTTP_11, &not_last), Some(SkipReason::CloseDelimited));
        // hyper ignores Content-Length beside any Transfer-Encoding.
        let gzip_cl = headers(&[("transfer-encoding", "gzip"), ("content-length", "100")]);
        assert_eq!(inspect(false, Version::HTTP_11, &gzip_cl), Some(SkipReason::CloseDelimited));
        let chunked_cl = headers(&[("transfer-encoding", "chunked"), ("content-length", "100")]);
        assert_eq!(inspect(false, Version::HTTP_11, &chunked_cl), None);
    }

    #[test]
    fn http2_and_request_close_skip() {
        let h = headers(&[("content-length", "3")]);
        assert_eq!(inspect(false, Version::HTTP_2, &h), Some(SkipReason::Http2));
        assert_eq!(inspect(true, Version::HTTP_11, &h), Some(SkipReason::ConnectionClose));
    }

    #[tokio::test]
    async fn budget_checks_come_in_order() {
        let rt = || Some(Handle::current());
        let policy = |max_bytes, max_time| Policy {
            config: Config { max_bytes, max_time, max_concurrent_drains: 1, ..Config::default() },
            stats: DrainStats::default(),
        };
        let ms = Duration::from_millis;
        let skip = |d: Decision| match d {
            Decision::Skip(r) => Some(r),
            Decision::Drain(..) => None,
        };
        let exact = SizeHint::with_exact;
        assert_eq!(
            skip(policy(0, ms(50)).decide(None, None, None, exact(1), rt())),
            Some(SkipReason::Disabled)
        );
        assert_eq!(
            skip(policy(10, ms(0)).decide(None, None, None, exact(1), rt())),
            Some(SkipReason::Disabled)
        );
        assert_eq!(
            skip(policy(10, ms(50)).decide(None, None, None, exact(11), rt())),
            Some(SkipReason::OverBudget)
        );
        assert_eq!(
            skip(policy(10, ms(50)).decide(None, None, None, exact(10), None)),
            Some(SkipReason::NoRuntime)
        );
        let p = policy(10, ms(50));
        let first = p.decide(None, None, None, exact(10), rt());
        assert!(matches!(first, Decision::Drain(..)), "exactly the budget is drained");
        assert_eq!(skip(p.decide(None, None, None, exact(1), rt())), Some(SkipReason::Saturated));
        drop(first);
        assert!(matches!(p.decide(None, None, None, exact(1), rt()), Decision::Drain(..)), "slot freed");
        let huge = policy(10, Duration::MAX);
        match huge.decide(None, None, None, SizeHint::new(), rt()) {
            Decision::Drain(_, budget, _) => assert!(budget.deadline.is_none()),
            Decision::Skip(r) => panic!("unexpected skip {r:?}"),
        }
    }

    #[test]
    fn stream_content_types_match_the_media_type_only() {
        let h = headers(&[
            ("content-type", "Text/Event-Stream; charset=utf-8"),
            ("transfer-encoding", "chunked"),
        ]);
        assert_eq!(inspect(false, Version::HTTP_11, &h), Some(SkipReason::Stream));
        let h = headers(&[("content-type", "text/event-streamer"), ("transfer-encoding", "chunked")]);
        assert_eq!(inspect(false, Version::HTTP_11, &h), None);
        let none = Policy {
            config: Config { stream_types: Arc::from(Vec::new()), ..Config::default() },
            stats: DrainStats::default(),
        };
        let h = headers(&[("content-type", "text/event-stream"), ("transfer-encoding", "chunked")]);
        assert_eq!(none.inspect(&RequestInfo::default(), Version::HTTP_11, &h), None);
    }

    #[tokio::test]
    async fn a_request_budget_replaces_the_layer_budget() {
        let policy = Policy { config: Config::default(), stats: DrainStats::default() };
        let rt = Some(Handle::current());
        let big = Some(DrainBudget::new(1 << 20, Duration::from_secs(1)));
        let exact = SizeHint::with_exact(1 << 19);
        assert!(matches!(
            policy.decide(None, None, None, exact, rt.clone()),
            Decision::Skip(SkipReason::OverBudget)
        ));
        assert!(matches!(policy.decide(big, None, None, exact, rt.clone()), Decision::Drain(..)));
        let off = Some(DrainBudget::disabled());
        assert!(matches!(
            policy.decide(off, None, None, SizeHint::with_exact(1), rt),
            Decision::Skip(SkipReason::Disabled)
        ));
    }
}
