//! A TCP proxy that counts an HTTP/2 connection's frames: the connections
//! the client opened, the GOAWAY and RST_STREAM frames each side sent, by
//! error code. Put between any HTTP/2 client and any server (h2c), it
//! counts the same way for hyper-util, Go's client, and every server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// What went through a [`FrameCounter`].
#[derive(Default, Debug)]
pub struct Frames {
    /// TCP connections the client opened (each relayed to the server).
    pub connections: AtomicUsize,
    /// GOAWAY frames the client sent with an error code (not NO_ERROR):
    /// hyper's `too_many_internal_resets` is ENHANCE_YOUR_CALM.
    pub goaways: AtomicUsize,
    /// RST_STREAM(CANCEL) the client sent: streams it dropped.
    pub rst_cancel: AtomicUsize,
    /// RST_STREAM(STREAM_CLOSED) the client sent: h2's own resets of DATA
    /// for streams it forgot, the ones that count towards its GOAWAY.
    pub rst_closed: AtomicUsize,
    /// GOAWAY frames the server sent, any code (nginx's graceful one after
    /// `keepalive_requests` is NO_ERROR), before the client closed that
    /// connection or sent a GOAWAY of its own on it (a server answers the
    /// client's going away with its own: not counted).
    pub server_goaways: AtomicUsize,
    /// The error code of the last of those.
    pub server_goaway_code: AtomicUsize,
    /// RST_STREAM frames the server sent, any code (Node refusing a stream
    /// it cannot hold: ENHANCE_YOUR_CALM; REFUSED_STREAM).
    pub server_rst: AtomicUsize,
}

impl Frames {
    fn get(n: &AtomicUsize) -> usize {
        n.load(Ordering::SeqCst)
    }

    /// A plain copy of the counts.
    pub fn snapshot(&self) -> FrameCounts {
        FrameCounts {
            connections: Self::get(&self.connections),
            goaways: Self::get(&self.goaways),
            rst_cancel: Self::get(&self.rst_cancel),
            rst_closed: Self::get(&self.rst_closed),
            server_goaways: Self::get(&self.server_goaways),
            server_goaway_code: Self::get(&self.server_goaway_code),
            server_rst: Self::get(&self.server_rst),
        }
    }
}

/// [`Frames`] at the end of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameCounts {
    pub connections: usize,
    pub goaways: usize,
    pub rst_cancel: usize,
    pub rst_closed: usize,
    pub server_goaways: usize,
    pub server_goaway_code: usize,
    pub server_rst: usize,
}

/// A TCP proxy on `127.0.0.1:0` forwarding both ways unchanged, parsing
/// both sides' HTTP/2 frames (the client's after its 24-byte preface) to
/// count them (see [`Frames`]); over TLS ([`FrameCounter::opaque`]) it
/// counts the connections only. Stops, closing its connections, when
/// dropped.
pub struct FrameCounter {
    addr: SocketAddr,
    pub frames: Arc<Frames>,
    task: JoinHandle<()>,
}

impl FrameCounter {
    pub fn start(rt: &Handle, upstream: SocketAddr) -> FrameCounter {
        FrameCounter::relaying(rt, upstream, true)
    }

    /// A counter of connections only, for traffic it cannot read (TLS).
    pub fn opaque(rt: &Handle, upstream: SocketAddr) -> FrameCounter {
        FrameCounter::relaying(rt, upstream, false)
    }

    fn relaying(rt: &Handle, upstream: SocketAddr, parse: bool) -> FrameCounter {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("address");
        let frames = Arc::new(Frames::default());
        let counts = frames.clone();
        let task = rt.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("listener");
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                counts.connections.fetch_add(1, Ordering::SeqCst);
                conns.spawn(relay(client, upstream, counts.clone(), parse));
                while conns.try_join_next().is_some() {}
            }
        });
        FrameCounter { addr, frames, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn counts(&self) -> FrameCounts {
        self.frames.snapshot()
    }
}

impl Drop for FrameCounter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: TcpStream, upstream: SocketAddr, counts: Arc<Frames>, parse: bool) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let closing = Arc::new(AtomicBool::new(false));
    let up = copy(cr, sw, Parser::new(Side::Client, closing.clone(), parse), counts.clone());
    let down = copy(sr, cw, Parser::new(Side::Server, closing, parse), counts);
    tokio::join!(up, down);
}

/// Forwards `from` to `to`, each read parsed before it is forwarded (so a
/// client's GOAWAY is seen before the server can answer it).
async fn copy(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut parser: Parser, counts: Arc<Frames>) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        parser.feed(&buf[..n], &counts);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    if parser.side == Side::Client {
        parser.closing.store(true, Ordering::SeqCst);
    }
    let _ = to.shutdown().await;
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

/// A streaming parser of one side of an HTTP/2 connection.
struct Parser {
    side: Side,
    /// The client closed the connection or sent a GOAWAY (set by the
    /// client's side, read by the server's).
    closing: Arc<AtomicBool>,
    /// Bytes of the client's preface still to skip.
    preface_left: usize,
    /// The frame header being read.
    header: Vec<u8>,
    /// Payload bytes of the current frame still to skip, and how many of
    /// its first bytes to keep (the error code of RST_STREAM and GOAWAY).
    payload_left: usize,
    kept: Vec<u8>,
    keep: usize,
    kind: u8,
    /// Frames are parsed (not over TLS).
    parse: bool,
}

impl Parser {
    fn new(side: Side, closing: Arc<AtomicBool>, parse: bool) -> Parser {
        let preface_left = if side == Side::Client { 24 } else { 0 };
        Parser {
            side,
            closing,
            preface_left,
            header: Vec::new(),
            payload_left: 0,
            kept: Vec::new(),
            keep: 0,
            kind: 0,
            parse,
        }
    }

    fn feed(&mut self, mut bytes: &[u8], counts: &Frames) {
        if !self.parse {
            return;
        }
        let skip = self.preface_left.min(bytes.len());
        self.preface_left -= skip;
        bytes = &bytes[skip..];
        while !bytes.is_empty() {
            if self.payload_left == 0 {
                let take = (9 - self.header.len()).min(bytes.len());
                self.header.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if self.header.len() < 9 {
                    return;
                }
                let h = std::mem::take(&mut self.header);
                self.payload_left = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
                self.kind = h[3];
                // RST_STREAM: the code is the payload; GOAWAY: after the
                // last stream id.
                self.keep = match self.kind {
                    0x3 => 4,
                    0x7 => 8,
                    _ => 0,
                };
                self.kept.clear();
                if self.payload_left == 0 {
                    continue;
                }
            }
            let take = self.payload_left.min(bytes.len());
            let want = self.keep.saturating_sub(self.kept.len()).min(take);
            self.kept.extend_from_slice(&bytes[..want]);
            self.payload_left -= take;
            bytes = &bytes[take..];
            if self.payload_left == 0 && self.kept.len() == self.keep && self.keep > 0 {
                let code =
                    u32::from_be_bytes(self.kept[self.keep - 4..self.keep].try_into().expect("4 bytes"));
                if (self.side, self.kind) == (Side::Client, 0x7) {
                    self.closing.store(true, Ordering::SeqCst);
                }
                let closing = self.closing.load(Ordering::SeqCst);
                let n = match (self.side, self.kind, code) {
                    (Side::Client, 0x7, 0) => None,
                    (Side::Client, 0x7, _) => Some(&counts.goaways),
                    (Side::Client, 0x3, 0x8) => Some(&counts.rst_cancel),
                    (Side::Client, 0x3, 0x5) => Some(&counts.rst_closed),
                    (Side::Server, 0x7, _) if !closing => {
                        counts.server_goaway_code.store(code as usize, Ordering::SeqCst);
                        Some(&counts.server_goaways)
                    }
                    (Side::Server, 0x3, _) => Some(&counts.server_rst),
                    _ => None,
                };
                if let Some(n) = n {
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}
