//! Which origin a request goes to: its scheme, host and port, as the pool
//! sees them (the default port filled in, never the userinfo), read from
//! the request target the way hyper reads it.

use std::fmt;

use http::header::HOST;
use http::uri::Authority;
use http::{HeaderMap, Uri};

/// What a request says about its origin, kept from the request until its
/// response arrives: the scheme and host copied (into the target itself
/// when they fit, as almost all do: no allocation, no reference count), the
/// port, and the origin's hash.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// `scheme` then `host`, in `inline` or, when too long, on the heap.
    inline: [u8; INLINE],
    heap: Option<Box<[u8]>>,
    scheme_len: u8,
    host_len: u16,
    port: u16,
    hash: u64,
}

/// Bytes of scheme and host a target holds without allocating.
const INLINE: usize = 48;

impl Target {
    /// The origin of a request for `uri` with these `headers`, as hyper
    /// sends it: the URI's authority when it has one (absolute-form, what
    /// hyper-util's `Client` requires); otherwise, for an origin-form URI
    /// (`/path`, what hyper's own connections are sent), its `Host` header,
    /// whose scheme is unknown (shown without one, the port only when the
    /// header has one). `None` when neither names a host.
    pub(crate) fn of(uri: &Uri, headers: &HeaderMap, seed: u64) -> Option<Self> {
        if let Some(authority) = uri.authority() {
            return Target::copy(Parts::split(uri.scheme_str().unwrap_or("http"), authority.as_str()), seed);
        }
        let host = headers.get(HOST)?;
        // Validated as an authority, as hyper would send it; never a userinfo.
        let authority = Authority::try_from(host.as_bytes()).ok()?;
        let parts = Parts::split(uri.scheme_str().unwrap_or(""), authority.as_str());
        (!parts.host.is_empty()).then(|| Target::copy(parts, seed)).flatten()
    }

    fn copy(p: Parts<'_>, seed: u64) -> Option<Self> {
        let (scheme, host) = (p.scheme, p.host);
        let (scheme_len, host_len) = (u8::try_from(scheme.len()).ok()?, u16::try_from(host.len()).ok()?);
        let len = scheme.len() + host.len();
        let mut inline = [0u8; INLINE];
        let heap = if len <= INLINE {
            inline[..scheme.len()].copy_from_slice(scheme);
            inline[scheme.len()..len].copy_from_slice(host);
            None
        } else {
            Some([scheme, host].concat().into_boxed_slice())
        };
        Some(Target { inline, heap, scheme_len, host_len, port: p.port, hash: p.hash(seed) })
    }

    /// The target's origin, borrowed.
    pub(crate) fn parts(&self) -> Parts<'_> {
        let bytes = self.heap.as_deref().unwrap_or(&self.inline);
        let (scheme, rest) = bytes.split_at(usize::from(self.scheme_len));
        Parts { scheme, host: &rest[..usize::from(self.host_len)], port: self.port }
    }

    /// The origin's hash, from the table's seed.
    pub(crate) fn hash(&self) -> u64 {
        self.hash
    }
}

/// An origin's scheme, host and port, borrowed from a request target (the
/// scheme and host as the bytes of `str`s `Uri` validated).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parts<'a> {
    pub(crate) scheme: &'a [u8],
    pub(crate) host: &'a [u8],
    pub(crate) port: u16,
}

impl<'a> Parts<'a> {
    /// Splits an authority (which `Uri` validated) by bytes, as
    /// `Authority::host` and `Authority::port_u16` do, in one pass: they
    /// would each search it again, and this runs on every response.
    fn split(scheme: &'a str, authority: &'a str) -> Self {
        let host_port = match authority.bytes().rposition(|b| b == b'@') {
            Some(at) => &authority[at + 1..],
            None => authority,
        };
        // The port follows the last ':', unless that ':' is inside an IPv6
        // literal's brackets; an empty port is the default port.
        let (host, port) = match host_port.bytes().rposition(|b| b == b':') {
            Some(colon) if !host_port.as_bytes()[colon..].contains(&b']') => {
                (&host_port[..colon], port_number(&host_port.as_bytes()[colon + 1..]))
            }
            _ => (host_port, None),
        };
        let default = match scheme {
            "" => 0, // unknown (a `Host` header without a port, no scheme)
            s if s.eq_ignore_ascii_case("https") => 443,
            _ => 80,
        };
        let port = port.unwrap_or(default);
        Parts { scheme: scheme.as_bytes(), host: host.as_bytes(), port }
    }

    /// A hash of the origin, case-insensitive, from `seed` (random per
    /// table): FNV-1a over the lowercased bytes, a few instructions a byte,
    /// then mixed (murmur3's 64-bit finaliser) so that every bit of the
    /// result depends on every byte: the table picks its part by the top
    /// bits, which FNV's last step (the port) never reaches, so that every
    /// port of one host fell in one part of 16 places. Not collision
    /// resistant, and need not be: the table holds at most 256 origins,
    /// checks every entry's key, and an origin whose hash collides with
    /// another's is simply not tracked. SipHash here was half the layer's
    /// own cost per response when it was tried (docs/benchmarks/, the
    /// instruction counts of section 6).
    pub(crate) fn hash(self, seed: u64) -> u64 {
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut h = seed ^ 0xcbf2_9ce4_8422_2325;
        for part in [self.scheme, self.host] {
            for &b in part {
                h = (h ^ u64::from(b.to_ascii_lowercase())).wrapping_mul(PRIME);
            }
            h = (h ^ 0xff).wrapping_mul(PRIME);
        }
        h = (h ^ u64::from(self.port)).wrapping_mul(PRIME);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// A port as hyper reads it (`Uri::port_u16`, which is `str::parse::<u16>`:
/// an optional `+`, then any number of digits, leading zeros included, up
/// to 65535), so that the key names the server hyper connects to; `None`
/// when empty (the default port) or not a port. Written out because
/// `str::parse` would be most of the lookup's cost.
fn port_number(digits: &[u8]) -> Option<u16> {
    let digits = digits.strip_prefix(b"+").unwrap_or(digits);
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u16, |n, &b| {
        let digit = b.is_ascii_digit().then(|| u16::from(b - b'0'))?;
        n.checked_mul(10)?.checked_add(digit)
    })
}

/// An origin, owned and lowercase: `scheme://host:port`, so
/// `http://alice:secret@API/` and `http://api:80/` are one origin and no
/// credential is kept.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct OriginKey {
    scheme: Box<str>,
    host: Box<str>,
    port: u16,
}

impl OriginKey {
    pub(crate) fn new(p: Parts<'_>) -> Self {
        let lower = |b: &[u8]| String::from_utf8_lossy(b).to_ascii_lowercase().into_boxed_str();
        OriginKey { scheme: lower(p.scheme), host: lower(p.host), port: p.port }
    }

    pub(crate) fn matches(&self, p: Parts<'_>) -> bool {
        // The key is lowercase, and so is almost every URI: compare bytes
        // first.
        let same =
            |key: &str, part: &[u8]| key.as_bytes() == part || key.as_bytes().eq_ignore_ascii_case(part);
        self.port == p.port && same(&self.scheme, p.scheme) && same(&self.host, p.host)
    }
}

impl fmt::Display for OriginKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.scheme.is_empty(), self.port) {
            (false, port) => write!(f, "{}://{}:{port}", self.scheme, self.host),
            (true, 0) => f.write_str(&self.host),
            (true, port) => write!(f, "{}:{port}", self.host),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &Uri) -> Parts<'_> {
        Parts::split(uri.scheme_str().unwrap_or("http"), uri.authority().unwrap().as_str())
    }

    fn key(u: &str) -> OriginKey {
        OriginKey::new(Target::of(&u.parse().unwrap(), &HeaderMap::new(), 7).unwrap().parts())
    }

    #[test]
    fn parts_split_the_authority_as_uri_does() {
        let long = format!("http://{}.example/", "Ab".repeat(70));
        let uris = [
            "http://api.example/x",
            "https://api.example/",
            "HTTPS://API.example:8443/",
            "http://alice:se:cr@et@api.example:81/",
            "http://api.example:/",
            "http://api.example:65535/",
            "http://api.example:0080/",
            "http://[::1]/",
            "http://[::1]:8080/",
            "http://u:p@[fe80::1%25eth0]:9/",
            "ws://api.example/",
            long.as_str(),
        ];
        let state = 0x5eed;
        for u in uris {
            let uri: Uri = u.parse().unwrap();
            let p = parts(&uri);
            let default = if p.scheme.eq_ignore_ascii_case(b"https") { 443 } else { 80 };
            assert_eq!(
                (p.host, p.port),
                (uri.host().unwrap().as_bytes(), uri.port_u16().unwrap_or(default)),
                "{u}"
            );
            let upper: Uri = u.to_ascii_uppercase().replace("%25ETH0", "%25eth0").parse().unwrap();
            assert_eq!(p.hash(state), parts(&upper).hash(state), "{u}: case-insensitive");
        }
        let [a, b] = ["http://a.example/", "http://b.example/"].map(|u| u.parse::<Uri>().unwrap());
        assert_ne!(parts(&a).hash(state), parts(&b).hash(state));
    }

    #[test]
    fn ports_are_read_as_hyper_reads_them() {
        let mut cases: Vec<String> =
            ["", "+", "++80", "-0", "+0", "0", "00000000000000080", "+36635", "65535"]
                .into_iter()
                .chain(["65536", "99999", "080a", " 80", "8 0", "١٢"])
                .map(String::from)
                .collect();
        cases.extend(
            (0..70_000u32).step_by(7).flat_map(|n| [n.to_string(), format!("+{n}"), format!("000{n}")]),
        );
        for digits in &cases {
            assert_eq!(port_number(digits.as_bytes()), digits.parse::<u16>().ok(), "{digits:?}");
        }
        // And through a URI, as hyper-util's connector reads it.
        for authority in ["127.0.0.1:+36635", "127.0.0.1:0000036635", "h:+0", "h:", "[::1]:+8080"] {
            let uri: Uri = format!("http://{authority}/").parse().unwrap();
            assert_eq!(parts(&uri).port, uri.port_u16().unwrap_or(80), "{authority}");
        }
    }

    #[test]
    fn an_origin_form_request_is_keyed_by_its_host_header() {
        let with_host = |host: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(HOST, http::HeaderValue::from_static(host));
            Target::of(&"/path?q".parse().unwrap(), &headers, 7)
                .map(|t| OriginKey::new(t.parts()).to_string())
        };
        assert_eq!(with_host("API.example:8443").as_deref(), Some("api.example:8443"));
        assert_eq!(
            with_host("api.example").as_deref(),
            Some("api.example"),
            "no port, no scheme: neither shown"
        );
        assert_eq!(with_host("[::1]:+9").as_deref(), Some("[::1]:9"), "the port as hyper reads it");
        assert_eq!(with_host("bad host").as_deref(), None, "not an authority");
        assert_eq!(with_host("").as_deref(), None);
        let mut headers = HeaderMap::new();
        headers.insert(HOST, http::HeaderValue::from_static("other.example"));
        let absolute = Target::of(&"http://api.example/".parse().unwrap(), &headers, 7).unwrap();
        assert_eq!(OriginKey::new(absolute.parts()).to_string(), "http://api.example:80", "the URI wins");
    }

    #[test]
    fn origin_keys_drop_userinfo_fill_in_the_default_port_and_ignore_case() {
        assert_eq!(key("http://alice:secret@API.example/x").to_string(), "http://api.example:80");
        assert_eq!(key("http://alice:secret@api.example/"), key("http://api.example:80/y"));
        assert_eq!(key("https://api.example/").to_string(), "https://api.example:443");
        assert_eq!(key("http://[::1]:8080/").to_string(), "http://[::1]:8080");
        assert!(Target::of(&"/relative".parse().unwrap(), &HeaderMap::new(), 7).is_none());
        let long = format!("https://{}.example:8443/", "h".repeat(100));
        assert_eq!(
            key(&long).to_string(),
            format!("https://{}.example:8443", "h".repeat(100)),
            "on the heap"
        );
    }
}
