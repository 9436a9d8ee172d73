//! What a client writes on an HTTP/2 connection, read frame by frame: the
//! [`Http2Connector`](crate::Http2Connector) counts the RST_STREAM frames
//! hyper's h2 actually sends (a dropped body whose every byte had arrived is
//! closed, not reset, and sends none), so a connection is charged only for
//! its own resets.
//!
//! Only frame headers are read (RFC 9113, 4.1: 24-bit length, type, flags,
//! stream id); payloads are skipped by their length, never copied. The
//! client's connection preface (24 octets) comes first. Anything that is
//! not HTTP/2 (an HTTP/1 request line) stops the reading for good.

use crate::http2::Proto;

/// The client connection preface (RFC 9113, 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame type HEADERS: a request.
const HEADERS: u8 = 0x1;
/// Frame type RST_STREAM.
const RST_STREAM: u8 = 0x3;

/// What some bytes written held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    /// RST_STREAM frames.
    pub(crate) resets: usize,
    /// HEADERS frames: requests sent.
    pub(crate) requests: usize,
}

/// Reads a connection's written bytes, in the order written.
#[derive(Debug)]
pub(crate) struct Frames {
    state: State,
    /// A frame header split over writes, and how much of it is here.
    header: [u8; 9],
    have: usize,
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Matching the preface: this many octets of it seen.
    Preface(usize),
    /// Reading a frame header.
    Header,
    /// Skipping a payload: octets left.
    Payload(usize),
    /// Not HTTP/2: nothing more is read.
    Off,
}

impl Frames {
    pub(crate) fn new() -> Self {
        Frames { state: State::Preface(0), header: [0; 9], have: 0 }
    }

    /// What the bytes written so far say the connection speaks: HTTP/2
    /// once they began with its whole preface, HTTP/1 once they did not;
    /// `None` before that is known.
    pub(crate) fn speaks(&self) -> Option<Proto> {
        match self.state {
            State::Preface(_) => None,
            State::Off => Some(Proto::Http1),
            State::Header | State::Payload(_) => Some(Proto::Http2),
        }
    }

    /// Reads `bytes`, the next ones written: the frames whose headers ended
    /// in them.
    pub(crate) fn written(&mut self, mut bytes: &[u8]) -> Seen {
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
                        match h[3] {
                            RST_STREAM => seen.resets += 1,
                            HEADERS => seen.requests += 1,
                            _ => {}
                        }
                        self.state = if len == 0 { State::Header } else { State::Payload(len) };
                    }
                }
                State::Payload(left) => {
                    let n = left.min(bytes.len());
                    bytes = &bytes[n..];
                    self.state = if n == left { State::Header } else { State::Payload(left - n) };
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
        let mut whole = Frames::new();
        assert_eq!(whole.written(&bytes), Seen { resets: 2, requests: 2 });
        assert_eq!(whole.speaks(), Some(Proto::Http2));
        for size in [1, 2, 7, 9, 10, 24, 25, 1000] {
            let mut split = Frames::new();
            let resets: usize = bytes.chunks(size).map(|c| split.written(c).resets).sum();
            assert_eq!(resets, 2, "writes of {size} octets");
        }
    }

    #[test]
    fn http1_is_never_read_as_frames() {
        let mut frames = Frames::new();
        assert_eq!(frames.written(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n"), Seen::default());
        assert_eq!(frames.speaks(), Some(Proto::Http1));
        assert_eq!(frames.written(&stream()), Seen::default(), "off for good");
        let mut partial = Frames::new();
        assert_eq!(partial.written(&PREFACE[..10]), Seen::default());
        assert_eq!(partial.speaks(), None, "not yet: the preface is not whole");
    }
}
