//! A TCP proxy on loopback that adds a round-trip time, and optionally a
//! bandwidth limit on one link shared by all its connections.
//!
//! Default model ([`LatencyProxy::start`]): every chunk read from one side
//! is written to the other side `rtt / 2` after it was read, in order.
//! Delays overlap (a pipe with latency, not a sleep per chunk that would add
//! up), and there is no bandwidth limit and no slow start. The upstream
//! connection is opened one `rtt` after the client connected, and nothing
//! the client sent is read before then: that models the TCP handshake, so
//! the client's first byte reaches the server 1.5 RTT after it called
//! `connect`.
//!
//! Shared-link model ([`LatencyProxy::start_with_link`], see [`Link`]): every
//! byte of every connection, in both directions, queues on one link of a
//! given bandwidth, first in first out across connections; a byte reaches
//! the other side `rtt / 2` after the link finished transmitting it. Each
//! direction of each connection may have at most a window of bytes in the
//! proxy (queued, or transmitted and propagating); the proxy stops reading
//! from the sender while the window is full, so a sender cannot dump a whole
//! body into the link queue at once when its window is smaller. When one side
//! closes, what is queued towards it and not yet transmitted is discarded
//! (it no longer occupies the link), and what is propagating is lost.
//!
//! With [`LinkConfig::slow_start`], each direction of each connection also
//! has a congestion window, as TCP slow start: it starts at 14,600 bytes
//! (10 segments), a byte is acknowledged one `rtt / 2` after it reached the
//! receiver, and every acknowledged byte grows the window by one byte, up to
//! the flow-control window (no loss, no idle restart). So a new connection
//! delivers a body's last byte about `slow_start_rounds(len) − 1` round
//! trips after its first, and a warm one in about one.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep, sleep_until};

/// A latency proxy on `127.0.0.1:0` in front of one upstream address. Stops
/// (and closes its connections) when dropped.
pub struct LatencyProxy {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl LatencyProxy {
    /// Starts proxying to `upstream` on `rt`, adding `rtt`.
    pub fn start(rt: &Handle, upstream: SocketAddr, rtt: Duration) -> LatencyProxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("proxy address");
        let task = rt.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("tokio listener");
            let mut conns = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                conns.spawn(relay(client, upstream, rtt));
                while conns.try_join_next().is_some() {}
            }
        });
        LatencyProxy { addr, task }
    }

    /// Starts proxying to `upstream` on `rt`, adding `rtt`, with every
    /// connection and both directions sharing one link as `link` says (see
    /// [`Link`]).
    pub fn start_with_link(
        rt: &Handle,
        upstream: SocketAddr,
        rtt: Duration,
        link: LinkConfig,
    ) -> LatencyProxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Link::new(link.bytes_per_second(), rtt / 2));
        let task = rt.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("tokio listener");
            let accept = async {
                let mut conns = JoinSet::new();
                while let Ok((client, _)) = listener.accept().await {
                    conns.spawn(relay_link(client, upstream, shared.clone(), link, rtt / 2));
                    while conns.try_join_next().is_some() {}
                }
            };
            // The link runs as long as the proxy: aborting the proxy stops both.
            tokio::join!(shared.run(), accept);
        });
        LatencyProxy { addr, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for LatencyProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One proxied connection: the handshake delay, then both directions.
async fn relay(client: TcpStream, upstream: SocketAddr, rtt: Duration) {
    sleep(rtt).await;
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let one_way = rtt / 2;
    tokio::join!(pipe(client_read, server_write, one_way), pipe(server_read, client_write, one_way),);
}

/// Copies `from` to `to`, each chunk `delay` after it was read. End of file
/// (or a read error) is passed on as a shutdown after the same delay.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    // `None` stands for the end of the stream.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Option<Bytes>)>();
    let read = async move {
        loop {
            let mut buf = BytesMut::with_capacity(64 * 1024);
            let chunk = match from.read_buf(&mut buf).await {
                Ok(n) if n > 0 => Some(buf.freeze()),
                _ => None,
            };
            let end = chunk.is_none();
            // The writer is gone (its side failed): stop reading.
            if tx.send((Instant::now(), chunk)).is_err() || end {
                return;
            }
        }
    };
    let write = async move {
        while let Some((read_at, chunk)) = rx.recv().await {
            let due = read_at + delay;
            if Instant::now() < due {
                sleep_until(due).await;
            }
            match chunk {
                Some(bytes) => {
                    if to.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                None => {
                    let _ = to.shutdown().await;
                    return;
                }
            }
        }
    };
    tokio::join!(read, write);
}

/// The shared link of [`LatencyProxy::start_with_link`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkConfig {
    /// Bandwidth in bits per second, for every connection and both
    /// directions together.
    pub bits_per_second: u64,
    /// Bytes one direction of one connection may have in the proxy, queued
    /// for the link or transmitted and propagating: its TCP window.
    pub window: usize,
    /// TCP slow start: the congestion window a new connection starts with,
    /// in bytes, grown by every byte acknowledged up to `window`. `None`:
    /// no slow start (the whole window from the first byte).
    pub initial_window: Option<usize>,
}

impl LinkConfig {
    /// The default bandwidth, in Mbit/s.
    pub const DEFAULT_MBIT: u64 = 100;
    /// The default window: 4 MiB, the order of what an autotuned Linux
    /// receive window reaches by default (the buffer grows up to `tcp_rmem`'s
    /// maximum, 6 MiB, part of which is advertised as window), and more than
    /// the bandwidth-delay product of 100 Mbit/s at 100 ms (1.2 MiB), so it
    /// does not limit a transfer at those figures.
    pub const DEFAULT_WINDOW: usize = 4 << 20;

    /// A new connection's congestion window under [`Self::slow_start`]: 10
    /// segments of 1460 bytes (RFC 6928, Linux's default).
    pub const INITIAL_WINDOW: usize = 14_600;

    /// `mbit` Mbit/s (10^6 bits per second), default window, no slow start.
    pub fn mbit(mbit: u64) -> LinkConfig {
        LinkConfig { bits_per_second: mbit * 1_000_000, window: Self::DEFAULT_WINDOW, initial_window: None }
    }

    /// `mbit` Mbit/s, default window, and TCP slow start from
    /// [`Self::INITIAL_WINDOW`].
    pub fn slow_start(mbit: u64) -> LinkConfig {
        LinkConfig { initial_window: Some(Self::INITIAL_WINDOW), ..Self::mbit(mbit) }
    }

    fn bytes_per_second(&self) -> f64 {
        self.bits_per_second as f64 / 8.0
    }
}

impl fmt::Display for LinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shared link {} Mbit/s", self.bits_per_second as f64 / 1e6)?;
        if self.window != Self::DEFAULT_WINDOW {
            write!(f, ", window {} KiB", self.window / 1024)?;
        }
        if let Some(initial) = self.initial_window {
            write!(f, ", slow start from {initial} bytes")?;
        }
        Ok(())
    }
}

/// The largest segment the link transmits at once: data read from a socket
/// is cut into segments of at most this size, so that connections
/// interleave on the link at this granularity and a closed connection's
/// queued data is discarded at it.
const SEGMENT: usize = 16 * 1024;
/// The most the proxy reads from a socket at once.
const READ: usize = 64 * 1024;

/// One link of a given bandwidth shared by every connection of a proxy and
/// both directions (a half-duplex bottleneck), first in, first out.
///
/// - **Transmission, then propagation.** A segment waits for every segment
///   queued before it (any connection, either direction), takes
///   `len / bandwidth` to transmit, then arrives `rtt / 2` after its
///   transmission ended. The link keeps its own clock of when it is next
///   free, so tokio's 1 ms timer resolution delays deliveries (by up to
///   1 ms) but never lowers the throughput.
/// - **Handshake.** A new connection's SYN and SYN-ACK are segments without
///   payload: they queue like the rest and take no transmission time; the
///   proxy connects to the server when the SYN arrives and starts reading
///   from the client when the SYN-ACK arrived (one RTT, plus queueing).
/// - **Flow control.** Each direction of each connection may have at most
///   `window` bytes in the proxy (read from the sender, not yet written to
///   the receiver); while the window is full the proxy does not read from
///   the sender, whose data then waits in its socket buffer (the sender's
///   send buffer). A byte frees its window when it is written to the
///   receiver's socket (the ACK's way back is not modelled), unless the
///   link has slow start.
/// - **Slow start** ([`LinkConfig::slow_start`]): the window is also
///   bounded by a congestion window, starting at 14,600 bytes; a byte frees
///   its place and grows the congestion window by one byte `rtt / 2` after
///   it was written to the receiver (its ACK's way back). Without it, a new
///   connection may send a full window at once. Not modelled either way:
///   congestion avoidance, fair queueing, loss, idle restart, header
///   overhead (only payload bytes count).
/// - **Close.** When the proxy sees one side close (end of stream or an
///   error reading from it, or a write to it failing), the direction
///   towards that side is dead: its segments still queued are discarded
///   without occupying the link, and those transmitted and propagating are
///   lost. The other direction carries on (the closing side's own data, then
///   its end of stream, still reach the peer).
struct Link {
    bytes_per_second: f64,
    one_way: Duration,
    queue: Mutex<VecDeque<Segment>>,
    queued: Notify,
}

struct Segment {
    queued_at: Instant,
    what: Payload,
}

enum Payload {
    /// Bytes of one direction of one connection.
    Data(Arc<Flow>, Bytes),
    /// The end of one direction of one connection (no payload).
    Fin(Arc<Flow>),
    /// A handshake packet (no payload): told when it arrives.
    Handshake(oneshot::Sender<Instant>),
}

impl Link {
    fn new(bytes_per_second: f64, one_way: Duration) -> Link {
        Link { bytes_per_second, one_way, queue: Mutex::default(), queued: Notify::new() }
    }

    fn push(&self, what: Payload) {
        let segment = Segment { queued_at: Instant::now(), what };
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).push_back(segment);
        self.queued.notify_one();
    }

    fn pop(&self) -> Option<Segment> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
    }

    /// Sends a packet without payload across the link and waits until it
    /// arrived on the other side.
    async fn cross(&self) {
        let (tx, rx) = oneshot::channel();
        self.push(Payload::Handshake(tx));
        if let Ok(due) = rx.await {
            wait_until(due).await;
        }
    }

    /// Transmits queued segments one after the other, forever.
    async fn run(&self) {
        let mut free_at = Instant::now();
        loop {
            let Some(segment) = self.pop() else {
                // `notify_one` keeps a permit when nobody waits: no lost wake-up.
                self.queued.notified().await;
                continue;
            };
            let len = match &segment.what {
                Payload::Data(_, bytes) => bytes.len(),
                Payload::Fin(_) | Payload::Handshake(_) => 0,
            };
            if let Payload::Data(flow, _) | Payload::Fin(flow) = &segment.what
                && flow.is_closed()
            {
                // Discarded before transmission: takes no link time.
                flow.release(len);
                continue;
            }
            let start = free_at.max(segment.queued_at);
            let end = start + Duration::from_secs_f64(len as f64 / self.bytes_per_second);
            free_at = end;
            let due = end + self.one_way;
            match segment.what {
                Payload::Data(flow, bytes) => flow.deliver(Delivery::Data(due, bytes)),
                Payload::Fin(flow) => flow.deliver(Delivery::Fin(due)),
                Payload::Handshake(tx) => drop(tx.send(due)),
            }
            // The link is busy until the end of this transmission.
            wait_until(end).await;
        }
    }
}

/// What the link hands to the writer of one direction of one connection.
enum Delivery {
    /// Write these bytes at this instant.
    Data(Instant, Bytes),
    /// Shut the writing side down at this instant.
    Fin(Instant),
    /// The receiving side closed: stop.
    Closed,
}

/// One direction of one connection: its windows and its dead flag.
struct Flow {
    window: usize,
    /// The congestion window (slow start), or `window` without slow start.
    congestion: AtomicUsize,
    /// Acknowledgements: with slow start, a byte frees its window (and grows
    /// the congestion window) one way after it reached the receiver.
    ack_delay: Option<Duration>,
    /// The receiving side closed.
    closed: AtomicBool,
    /// Bytes read from the sender and not yet written to the receiver (or
    /// discarded).
    in_proxy: AtomicUsize,
    /// Window freed, or the flow closed.
    room: Notify,
    writer: mpsc::UnboundedSender<Delivery>,
}

impl Flow {
    fn new(link: LinkConfig, one_way: Duration) -> (Arc<Flow>, mpsc::UnboundedReceiver<Delivery>) {
        let (writer, rx) = mpsc::unbounded_channel();
        let window = link.window;
        let flow = Flow {
            window,
            congestion: AtomicUsize::new(link.initial_window.map_or(window, |w| w.min(window))),
            ack_delay: link.initial_window.map(|_| one_way),
            closed: AtomicBool::new(false),
            in_proxy: AtomicUsize::new(0),
            room: Notify::new(),
            writer,
        };
        (Arc::new(flow), rx)
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// The receiving side closed: nothing more is transmitted or written.
    fn close(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            let _ = self.writer.send(Delivery::Closed);
            self.room.notify_one();
        }
    }

    fn charge(&self, n: usize) {
        self.in_proxy.fetch_add(n, Ordering::SeqCst);
    }

    fn release(&self, n: usize) {
        if n > 0 {
            self.in_proxy.fetch_sub(n, Ordering::SeqCst);
            self.room.notify_one();
        }
    }

    /// Hands a transmitted segment to the writer (its window is freed if the
    /// writer is gone).
    fn deliver(&self, delivery: Delivery) {
        if let Err(mpsc::error::SendError(Delivery::Data(_, bytes))) = self.writer.send(delivery) {
            self.release(bytes.len());
        }
    }

    /// `n` bytes reached the receiver: with slow start they are
    /// acknowledged one way later (freeing the window and growing the
    /// congestion window by `n`), otherwise at once.
    fn acknowledge(self: &Arc<Self>, n: usize) {
        match self.ack_delay {
            None => self.release(n),
            Some(delay) => {
                let flow = self.clone();
                tokio::spawn(async move {
                    sleep(delay).await;
                    let grown = flow.congestion.load(Ordering::SeqCst).saturating_add(n).min(flow.window);
                    flow.congestion.store(grown, Ordering::SeqCst);
                    flow.release(n);
                });
            }
        }
    }

    /// Waits until the window (the smaller of flow control and congestion)
    /// has room, and returns how much (the whole window once the flow is
    /// closed: the reader then discards).
    async fn room(&self) -> usize {
        loop {
            let used = self.in_proxy.load(Ordering::SeqCst);
            if self.is_closed() {
                return self.window;
            }
            let window = self.congestion.load(Ordering::SeqCst).min(self.window);
            if used < window {
                return window - used;
            }
            self.room.notified().await;
        }
    }
}

/// One proxied connection on the shared link: the handshake, then both
/// directions.
async fn relay_link(
    client: TcpStream,
    upstream: SocketAddr,
    link: Arc<Link>,
    config: LinkConfig,
    one_way: Duration,
) {
    // SYN: the proxy connects to the server once it arrives.
    link.cross().await;
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    // SYN-ACK: the client's data is read from now on.
    link.cross().await;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let (up, up_rx) = Flow::new(config, one_way);
    let (down, down_rx) = Flow::new(config, one_way);
    tokio::join!(
        send_side(client_read, up.clone(), down.clone(), &link),
        receive_side(up_rx, server_write, up.clone()),
        send_side(server_read, down.clone(), up, &link),
        receive_side(down_rx, client_write, down),
    );
}

/// Reads what one side sends into `flow`, within its window, and queues it
/// on the link. `back` is the direction towards this side: when this side
/// closes, `back` is dead.
async fn send_side(mut from: OwnedReadHalf, flow: Arc<Flow>, back: Arc<Flow>, link: &Link) {
    loop {
        let room = flow.room().await;
        let mut buf = BytesMut::zeroed(room.min(READ));
        let n = match from.read(&mut buf).await {
            Ok(n) if n > 0 => n,
            _ => {
                back.close();
                link.push(Payload::Fin(flow));
                return;
            }
        };
        // The receiving side is gone: read on (so the sender is not stuck)
        // and discard.
        if flow.is_closed() {
            continue;
        }
        buf.truncate(n);
        flow.charge(n);
        let mut bytes = buf.freeze();
        while !bytes.is_empty() {
            let segment = bytes.split_to(bytes.len().min(SEGMENT));
            link.push(Payload::Data(flow.clone(), segment));
        }
    }
}

/// Writes what the link delivers for `flow` to the receiving side, each
/// segment at its arrival time.
async fn receive_side(mut rx: mpsc::UnboundedReceiver<Delivery>, mut to: OwnedWriteHalf, flow: Arc<Flow>) {
    while let Some(delivery) = rx.recv().await {
        match delivery {
            Delivery::Closed => return,
            Delivery::Fin(due) => {
                wait_until(due).await;
                let _ = to.shutdown().await;
                return;
            }
            Delivery::Data(due, bytes) => {
                wait_until(due).await;
                // Propagating when the receiver closed: lost.
                if flow.is_closed() {
                    flow.release(bytes.len());
                    continue;
                }
                let written = to.write_all(&bytes).await;
                flow.acknowledge(bytes.len());
                if written.is_err() {
                    flow.close();
                    return;
                }
            }
        }
    }
}

/// Sleeps until `at`, unless it has passed.
async fn wait_until(at: Instant) {
    if Instant::now() < at {
        sleep_until(at).await;
    }
}
