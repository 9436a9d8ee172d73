//! What an HTTP/2 connection carries, read frame by frame: the
//! [`Http2Connector`](crate::Http2Connector) counts the RST_STREAM frames
//! hyper's h2 actually writes (a dropped body whose every byte had arrived
//! is closed, not reset, and sends none), so a connection is charged only
//! for its own resets; and it reads what the server says of them (a stream
//! refused with ENHANCE_YOUR_CALM, a GOAWAY's error code), which a request
//! on a connection the server closed never sees.
//!
//! Only frame headers are read (RFC 9113, 4.1: 24-bit length, type, flags,
//! stream id), and the first octets of RST_STREAM and GOAWAY payloads (their
//! error codes); other payloads are skipped by their length, never copied.
//! The client's connection preface (24 octets) comes first on what it
//! writes. Anything that is not HTTP/2 (an HTTP/1 request line) stops the
//! reading for good.

use crate::http2::{self, Proto, Received};

/// The client connection preface (RFC 9113, 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame type HEADERS: a request.
const HEADERS: u8 = 0x1;
/// Frame type RST_STREAM: payload, the error code (4 octets).
const RST_STREAM: u8 = 0x3;
/// Frame type GOAWAY: payload, the last stream id then the error code.
const GOAWAY: u8 = 0x7;

/// What some bytes held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    /// RST_STREAM frames.
    pub(crate) resets: usize,
    /// HEADERS frames: requests sent.
    pub(crate) requests: usize,
    /// The first RST_STREAM or GOAWAY read whose code punishes the
    /// connection (`http2::punishes`; the server's side only).
    pub(crate) received: Option<Received>,
}

/// Reads one direction of a connection's bytes, in order.
#[derive(Debug)]
pub(crate) struct Frames {
    state: State,
    /// The server's side: RST_STREAM and GOAWAY codes are read.
    server: bool,
    /// A frame header split over calls, and how much of it is here.
    header: [u8; 9],
    have: usize,
    /// The first octets of a payload whose error code is read.
    code: [u8; 8],
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Matching the preface: this many octets of it seen.
    Preface(usize),
    /// Reading a frame header.
    Header,
    /// In a payload: octets left, and, of a frame whose code is read, its
    /// type and the octets of `code` still to come.
    Payload { left: usize, kind: u8, want: usize },
    /// Not HTTP/2: nothing more is read.
    Off,
}

impl Frames {
    /// What a client writes: the preface, then frames.
    pub(crate) fn client() -> Self {
        Frames { state: State::Preface(0), server: false, header: [0; 9], have: 0, code: [0; 8] }
    }

    /// What a server sends: frames from the first octet.
    pub(crate) fn server() -> Self {
        Frames { state: State::Header, server: true, header: [0; 9], have: 0, code: [0; 8] }
    }

    /// What the bytes written so far say the connection speaks: HTTP/2
    /// once they began with its whole preface, HTTP/1 once they did not;
    /// `None` before that is known.
    pub(crate) fn speaks(&self) -> Option<Proto> {
        match self.state {
            State::Preface(_) => None,
            State::Off => Some(Proto::Http1),
            State::Header | State::Payload { .. } => Some(Proto::Http2),
        }
    }

    /// Reads `bytes`, the next ones: the frames whose headers ended in
    /// them.
    pub(crate) fn read(&mut self, mut bytes: &[u8]) -> Seen {
        let mut seen = Seen::default();
        while !bytes.is_empty() {
            match self.state {
                State::Off => return seen,
                State::Preface(matched) => {
                    let n = (PREFACE.len() - matched).min(bytes.len());
                    if bytes[..n] != PREFACE[matched..matched + n] {
                        self.state = State::Off;
                        return seen;
                    }
                    bytes = &bytes[n..];
                    self.state = if matched + n == PREFACE.len() {
                        State::Header
                    } else {
                        State::Preface(matched + n)
                    };
                }
                State::Header => {
                    let n = (9 - self.have).min(bytes.len());
                    self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
                    self.have += n;
                    bytes = &bytes[n..];
                    if self.have == 9 {
                        self.have = 0;
                        let h = &self.header;
                        let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                        let kind = h[3];
                        match kind {
                            RST_STREAM => seen.resets += 1,
                            HEADERS => seen.requests += 1,
                            _ => {}
                        }
                        // The code's octets: RST_STREAM's first 4, GOAWAY's 4
                        // after the last stream id (a shorter payload is
                        // malformed, and h2 ends the connection for it).
                        let want = match kind {
                            RST_STREAM if self.server && len >= 4 => 4,
                            GOAWAY if self.server && len >= 8 => 8,
                            _ => 0,
                        };
                        self.state =
                            if len == 0 { State::Header } else { State::Payload { left: len, kind, want } };
                    }
                }
                State::Payload { left, kind, mut want } => {
                    let n = left.min(bytes.len());
                    if want > 0 {
                        let full = if kind == GOAWAY { 8 } else { 4 };
                        let take = want.min(n);
                        let at = full - want;
                        self.code[at..at + take].copy_from_slice(&bytes[..take]);
                        want -= take;
                        if want == 0 {
                            let c = &self.code[full - 4..full];
                            let code = h2::Reason::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                            let frame =
                                if kind == GOAWAY { Received::GoAway(code) } else { Received::Reset(code) };
                            if seen.received.is_none() && http2::punishes(frame) {
                                seen.received = Some(frame);
                            }
                        }
                    }
                    bytes = &bytes[n..];
                    self.state =
                        if n == left { State::Header } else { State::Payload { left: left - n, kind, want } };
                }
            }
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, 0];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn stream() -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(0x4, 0, &[0; 12])); // SETTINGS
        bytes.extend(frame(0x1, 1, &[0x82; 40])); // HEADERS
        bytes.extend(frame(RST_STREAM, 1, &8u32.to_be_bytes()));
        bytes.extend(frame(0x8, 0, &1000u32.to_be_bytes())); // WINDOW_UPDATE
        bytes.extend(frame(0x0, 3, &[b'x'; 70_000])); // DATA, longer than 16 bits
        bytes.extend(frame(RST_STREAM, 3, &8u32.to_be_bytes()));
        bytes.extend(frame(0x1, 5, &[0x03; 3])); // a payload that spells RST_STREAM's type
        bytes
    }

    #[test]
    fn every_reset_is_counted_once_however_the_writes_split_the_frames() {
        let bytes = stream();
        let mut whole = Frames::client();
        assert_eq!(whole.read(&bytes), Seen { resets: 2, requests: 2, received: None });
        assert_eq!(whole.speaks(), Some(Proto::Http2));
        for size in [1, 2, 7, 9, 10, 24, 25, 1000] {
            let mut split = Frames::client();
            let resets: usize = bytes.chunks(size).map(|c| split.read(c).resets).sum();
            assert_eq!(resets, 2, "writes of {size} octets");
        }
    }

    #[test]
    fn http1_is_never_read_as_frames() {
        let mut frames = Frames::client();
        assert_eq!(frames.read(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n"), Seen::default());
        assert_eq!(frames.speaks(), Some(Proto::Http1));
        assert_eq!(frames.read(&stream()), Seen::default(), "off for good");
        let mut partial = Frames::client();
        assert_eq!(partial.read(&PREFACE[..10]), Seen::default());
        assert_eq!(partial.speaks(), None, "not yet: the preface is not whole");
    }

    #[test]
    fn the_servers_punishing_frames_are_read_with_their_codes_however_split() {
        let settings_and_data = || {
            let mut bytes = frame(0x4, 0, &[0; 6]); // SETTINGS
            bytes.extend(frame(0x0, 1, &[b'x'; 20_000])); // DATA
            bytes
        };
        let goaway = |code: u32| {
            let mut payload = 7u32.to_be_bytes().to_vec();
            payload.extend(code.to_be_bytes());
            payload.extend(b"debug data");
            frame(GOAWAY, 0, &payload)
        };
        let mut refused = settings_and_data();
        refused.extend(frame(RST_STREAM, 3, &0xbu32.to_be_bytes())); // ENHANCE_YOUR_CALM
        refused.extend(goaway(0)); // NO_ERROR
        let mut cancelled_then_goaway = settings_and_data();
        cancelled_then_goaway.extend(frame(RST_STREAM, 3, &8u32.to_be_bytes())); // CANCEL
        cancelled_then_goaway.extend(goaway(2)); // INTERNAL_ERROR
        let mut recycled = settings_and_data();
        recycled.extend(goaway(0));
        let cases = [
            (refused, Some(Received::Reset(h2::Reason::ENHANCE_YOUR_CALM))),
            (cancelled_then_goaway, Some(Received::GoAway(h2::Reason::INTERNAL_ERROR))),
            (recycled, None),
        ];
        for (bytes, expected) in cases {
            for size in [1, 3, 8, 9, 13, 4096, bytes.len()] {
                let mut server = Frames::server();
                let received = bytes.chunks(size).find_map(|c| server.read(c).received);
                assert_eq!(received, expected, "reads of {size} octets");
            }
        }
        let mut client = Frames::client();
        assert_eq!(client.read(&stream()).received, None, "what the client writes is only counted");
    }
}
