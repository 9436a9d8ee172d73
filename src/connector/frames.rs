//! What an HTTP/2 connection carries, read frame by frame: the
//! [`Http2Connector`](crate::Http2Connector) reads, of what hyper's h2
//! writes, each request (HEADERS of a new stream) and each RST_STREAM it
//! actually writes (a dropped body whose every byte had arrived is closed,
//! not reset, and sends none), so a connection is charged only for what it
//! may yet reset; and, of what the server sends, each stream it ends
//! (END_STREAM) or resets, and what it says of the resets (a stream refused
//! with ENHANCE_YOUR_CALM, a GOAWAY's last stream id and error code), which
//! a request on a connection the server closed never sees.
//!
//! Only frame headers are read (RFC 9113, 4.1: 24-bit length, type, flags,
//! stream id), and the first octets of the server's RST_STREAM and GOAWAY
//! payloads (their error codes, GOAWAY's last stream id); other payloads
//! are skipped by their length, never copied. The client's connection
//! preface (24 octets) comes first on what it writes. Anything that is not
//! HTTP/2 (an HTTP/1 request line) stops the reading for good.

use crate::http2::Proto;

/// The client connection preface (RFC 9113, 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame type DATA.
const DATA: u8 = 0x0;
/// Frame type HEADERS: a request (or its trailers), or a response's head.
const HEADERS: u8 = 0x1;
/// Frame type RST_STREAM: payload, the error code (4 octets).
const RST_STREAM: u8 = 0x3;
/// Frame type SETTINGS: payload, settings of 6 octets each (a 16-bit id, a
/// 32-bit value); flag ACK (0x1) on an acknowledgement, which has none.
const SETTINGS: u8 = 0x4;
/// SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113, 6.5.2).
const MAX_CONCURRENT_STREAMS: u16 = 0x3;
/// Frame type GOAWAY: payload, the last stream id then the error code.
const GOAWAY: u8 = 0x7;
/// Flag END_STREAM (DATA, HEADERS).
const END_STREAM: u8 = 0x1;

/// A frame that matters to what a connection may yet reset, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// HEADERS on stream `id` (the client's: a request, or its trailers;
    /// the server's: a response's head or trailers), with END_STREAM if
    /// `end`.
    Headers { id: u32, end: bool },
    /// The server's DATA with END_STREAM on stream `id`.
    DataEnd { id: u32 },
    /// RST_STREAM on stream `id`; the server's with its error code.
    Reset { id: u32, code: Option<h2::Reason> },
    /// The server's GOAWAY: its last stream id and error code.
    GoAway { last: u32, code: h2::Reason },
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS: the streams the client
    /// may have open at once on the connection.
    MaxStreams(u32),
}

/// Reads one direction of a connection's bytes, in order.
#[derive(Debug)]
pub(crate) struct Frames {
    state: State,
    /// The server's side: RST_STREAM and GOAWAY payloads are read.
    server: bool,
    /// A frame header split over calls, and how much of it is here.
    header: [u8; 9],
    have: usize,
    /// The first octets of a payload that is read.
    code: [u8; 8],
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Matching the preface: this many octets of it seen.
    Preface(usize),
    /// Reading a frame header.
    Header,
    /// In a payload: octets left, and, of a frame whose payload is read,
    /// its type, stream id and the octets of `code` still to come.
    Payload { left: usize, kind: u8, id: u32, want: usize },
    /// In the server's SETTINGS: octets left, and of the setting being
    /// read, how many are in `code`.
    Settings { left: usize, have: usize },
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
            State::Header | State::Payload { .. } | State::Settings { .. } => Some(Proto::Http2),
        }
    }

    /// Reads `bytes`, the next ones, telling `on` each frame that matters
    /// once what it needs of it was read, in order.
    pub(crate) fn read(&mut self, mut bytes: &[u8], on: &mut impl FnMut(Frame)) {
        while !bytes.is_empty() {
            match self.state {
                State::Off => return,
                State::Preface(matched) => {
                    let n = (PREFACE.len() - matched).min(bytes.len());
                    if bytes[..n] != PREFACE[matched..matched + n] {
                        self.state = State::Off;
                        return;
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
                        self.state = self.header_read(on);
                    }
                }
                State::Settings { left, mut have } => {
                    let n = left.min(bytes.len());
                    for &octet in &bytes[..n] {
                        self.code[have] = octet;
                        have += 1;
                        if have == 6 {
                            have = 0;
                            let setting = u16::from_be_bytes([self.code[0], self.code[1]]);
                            if setting == MAX_CONCURRENT_STREAMS {
                                let c = &self.code;
                                on(Frame::MaxStreams(u32::from_be_bytes([c[2], c[3], c[4], c[5]])));
                            }
                        }
                    }
                    bytes = &bytes[n..];
                    self.state =
                        if n == left { State::Header } else { State::Settings { left: left - n, have } };
                }
                State::Payload { left, kind, id, mut want } => {
                    let n = left.min(bytes.len());
                    if want > 0 {
                        let full = if kind == GOAWAY { 8 } else { 4 };
                        let take = want.min(n);
                        let at = full - want;
                        self.code[at..at + take].copy_from_slice(&bytes[..take]);
                        want -= take;
                        if want == 0 {
                            on(self.payload_read(kind, id));
                        }
                    }
                    bytes = &bytes[n..];
                    self.state = if n == left {
                        State::Header
                    } else {
                        State::Payload { left: left - n, kind, id, want }
                    };
                }
            }
        }
    }

    /// A whole frame header is in `header`: what it tells at once, and what
    /// is read next.
    fn header_read(&self, on: &mut impl FnMut(Frame)) -> State {
        let h = &self.header;
        let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        let (kind, flags) = (h[3], h[4]);
        let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        let end = flags & END_STREAM != 0;
        match (kind, self.server) {
            (HEADERS, false) => on(Frame::Headers { id, end }),
            (HEADERS, true) => on(Frame::Headers { id, end }),
            (DATA, true) if end => on(Frame::DataEnd { id }),
            (RST_STREAM, false) => on(Frame::Reset { id, code: None }),
            _ => {}
        }
        // The server's RST_STREAM code (its 4 octets), and GOAWAY's last
        // stream id and code (8): a shorter payload is malformed, and h2
        // ends the connection for it.
        let want = match kind {
            RST_STREAM if self.server && len >= 4 => 4,
            GOAWAY if self.server && len >= 8 => 8,
            _ => 0,
        };
        if kind == SETTINGS && self.server && flags & 0x1 == 0 && len > 0 && len % 6 == 0 {
            return State::Settings { left: len, have: 0 };
        }
        if len == 0 { State::Header } else { State::Payload { left: len, kind, id, want } }
    }

    /// The read octets of a frame's payload, `code`, for a frame of `kind`
    /// on stream `id`.
    fn payload_read(&self, kind: u8, id: u32) -> Frame {
        let word = |at: usize| {
            u32::from_be_bytes([self.code[at], self.code[at + 1], self.code[at + 2], self.code[at + 3]])
        };
        if kind == GOAWAY {
            Frame::GoAway { last: word(0) & 0x7fff_ffff, code: h2::Reason::from(word(4)) }
        } else {
            Frame::Reset { id, code: Some(h2::Reason::from(word(0))) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        frame_with(kind, 0, stream, payload)
    }

    fn frame_with(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
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

    fn all(frames: &mut Frames, bytes: &[u8], size: usize) -> Vec<Frame> {
        let mut seen = Vec::new();
        for chunk in bytes.chunks(size) {
            frames.read(chunk, &mut |f| seen.push(f));
        }
        seen
    }

    #[test]
    fn every_request_and_reset_is_read_once_however_the_writes_split_the_frames() {
        let bytes = stream();
        let expected = [
            Frame::Headers { id: 1, end: false },
            Frame::Reset { id: 1, code: None },
            Frame::Reset { id: 3, code: None },
            Frame::Headers { id: 5, end: false },
        ];
        let mut whole = Frames::client();
        assert_eq!(all(&mut whole, &bytes, bytes.len()), expected);
        assert_eq!(whole.speaks(), Some(Proto::Http2));
        for size in [1, 2, 7, 9, 10, 24, 25, 1000] {
            assert_eq!(all(&mut Frames::client(), &bytes, size), expected, "writes of {size} octets");
        }
    }

    #[test]
    fn http1_is_never_read_as_frames() {
        let mut frames = Frames::client();
        assert_eq!(all(&mut frames, b"GET / HTTP/1.1\r\nhost: a\r\n\r\n", 100), []);
        assert_eq!(frames.speaks(), Some(Proto::Http1));
        assert_eq!(all(&mut frames, &stream(), 100), [], "off for good");
        let mut partial = Frames::client();
        assert_eq!(all(&mut partial, &PREFACE[..10], 100), []);
        assert_eq!(partial.speaks(), None, "not yet: the preface is not whole");
    }

    #[test]
    fn the_servers_ends_refusals_and_goaways_are_read_with_their_ids_and_codes_however_split() {
        use h2::Reason as R;
        // SETTINGS: HEADER_TABLE_SIZE 4096, MAX_CONCURRENT_STREAMS 100.
        let mut bytes = frame(0x4, 0, &[0, 1, 0, 0, 0x10, 0, 0, 3, 0, 0, 0, 100]);
        bytes.extend(frame_with(0x4, 0x1, 0, &[])); // its acknowledgement
        bytes.extend(frame(0x1, 1, &[0x88])); // HEADERS, the stream left open
        bytes.extend(frame(0x0, 1, &[b'x'; 20_000])); // DATA
        bytes.extend(frame_with(0x1, END_STREAM, 3, &[0x88])); // HEADERS, END_STREAM
        bytes.extend(frame_with(0x0, END_STREAM, 1, b"end")); // DATA, END_STREAM
        bytes.extend(frame(RST_STREAM, 5, &0xbu32.to_be_bytes())); // ENHANCE_YOUR_CALM
        let mut payload = 7u32.to_be_bytes().to_vec();
        payload.extend(2u32.to_be_bytes()); // INTERNAL_ERROR
        payload.extend(b"debug data");
        bytes.extend(frame(GOAWAY, 0, &payload));
        let expected = [
            Frame::MaxStreams(100),
            Frame::Headers { id: 1, end: false },
            Frame::Headers { id: 3, end: true },
            Frame::DataEnd { id: 1 },
            Frame::Reset { id: 5, code: Some(R::ENHANCE_YOUR_CALM) },
            Frame::GoAway { last: 7, code: R::INTERNAL_ERROR },
        ];
        for size in [1, 3, 8, 9, 13, 4096, bytes.len()] {
            assert_eq!(all(&mut Frames::server(), &bytes, size), expected, "reads of {size} octets");
        }
    }
}
