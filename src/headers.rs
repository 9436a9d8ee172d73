//! Header inspection: what a request and its response head say about the
//! connection's future (`Connection: close`, HTTP/1.0 keep-alive), the
//! body's framing (length, chunked, close-delimited) and its kind (an
//! open-ended stream), read once when the response arrives.

use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderValue, Version};

use crate::outcome::Reason;
use crate::shared::Config;

/// What the request said about its response's drain, and whether the
/// response's headers describe its body's wire framing, for [`inspect`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestSays {
    /// The request carries `Connection: close`.
    close: bool,
    /// The body is hyper's own, framed as its headers say. Another body (one
    /// given to `wrap_response`) may not be: reqwest removes
    /// `Content-Length` from bodies it decompresses, so such a body is not
    /// taken for close-delimited.
    framing_trusted: bool,
}

impl RequestSays {
    /// What a request's headers say, for the body hyper returns for it.
    pub(crate) fn read(headers: &HeaderMap) -> Self {
        RequestSays { close: has_token(headers, "close"), framing_trusted: true }
    }

    /// The same, for a response whose body is hyper's own or not
    /// (`hyper_body`): only hyper's is framed as its headers say.
    pub(crate) fn for_body(self, hyper_body: bool) -> Self {
        RequestSays { framing_trusted: hyper_body, ..self }
    }

    /// For a response that came without its request: `hyper_body` whether
    /// its body is hyper's own.
    pub(crate) fn no_request(hyper_body: bool) -> Self {
        RequestSays { close: false, framing_trusted: hyper_body }
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
        // Framed by END_STREAM, with no connection-level headers: only an
        // open-ended stream is not worth draining.
        let stream = !exact_length && headers.get_all(CONTENT_TYPE).iter().any(|v| is_stream(config, v));
        return stream.then_some(Reason::Stream);
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
    if !framed && request.framing_trusted {
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

/// Whether a `Content-Type` value is one of the configured stream types.
fn is_stream(config: &Config, value: &HeaderValue) -> bool {
    let types = &config.stream_types;
    if types.is_empty() {
        return false;
    }
    let media_type = value.as_bytes().split(|&b| b == b';').next().unwrap_or_default().trim_ascii();
    types.iter().any(|t| matches_type(t.as_bytes(), media_type))
}

/// Whether `media_type` is `listed` (lowercase), or starts with what comes
/// before a `listed` entry's final `*`; case-insensitively.
fn matches_type(listed: &[u8], media_type: &[u8]) -> bool {
    match listed.strip_suffix(b"*") {
        Some(prefix) => {
            media_type.len() > prefix.len() && media_type[..prefix.len()].eq_ignore_ascii_case(prefix)
        }
        None => listed.eq_ignore_ascii_case(media_type),
    }
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

    fn inspect(request_close: bool, version: Version, headers: &HeaderMap) -> Option<Reason> {
        super::inspect(
            &Config::default(),
            RequestSays { close: request_close, framing_trusted: true },
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
    fn http2_is_framed_and_only_streams_are_named() {
        let h = headers(&[("content-length", "3")]);
        assert_eq!(inspect(false, Version::HTTP_2, &h), None, "nothing to say: the policy resets it");
        assert_eq!(inspect(true, Version::HTTP_2, &h), None, "no connection-level headers there");
        let sse = headers(&[("content-type", "text/event-stream")]);
        assert_eq!(inspect(false, Version::HTTP_2, &sse), Some(Reason::Stream));
        assert_eq!(inspect(true, Version::HTTP_11, &h), Some(Reason::ConnectionClose));
    }

    #[test]
    fn a_body_of_exact_length_still_honours_connection_close_and_http10() {
        let says = |close| RequestSays { close, framing_trusted: true };
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
    fn stream_content_types_match_the_media_type_only() {
        let h = headers(&[
            ("content-type", "Text/Event-Stream; charset=utf-8"),
            ("transfer-encoding", "chunked"),
        ]);
        assert_eq!(inspect(false, Version::HTTP_11, &h), Some(Reason::Stream));
        let h = headers(&[("content-type", "text/event-streamer"), ("transfer-encoding", "chunked")]);
        assert_eq!(inspect(false, Version::HTTP_11, &h), None);
        for grpc in ["application/grpc", "Application/gRPC+proto", "application/grpc+json; charset=x"] {
            let h = headers(&[("content-type", grpc)]);
            assert_eq!(
                inspect(false, Version::HTTP_2, &h),
                Some(Reason::Stream),
                "{grpc}: open-ended by default"
            );
        }
        for other in ["application/grpc-web", "application/grpc+", "application/json"] {
            let h = headers(&[("content-type", other)]);
            assert_eq!(inspect(false, Version::HTTP_2, &h), None, "{other}");
        }
        let none = Config { stream_types: std::sync::Arc::from(Vec::new()), ..Config::default() };
        let h = headers(&[("content-type", "text/event-stream"), ("transfer-encoding", "chunked")]);
        assert_eq!(super::inspect(&none, RequestSays::no_request(true), Version::HTTP_11, &h, false), None);
    }
}
