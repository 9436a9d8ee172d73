//! A TCP proxy on loopback that adds a round-trip time.
//!
//! Model: every chunk read from one side is written to the other side
//! `rtt / 2` after it was read, in order. Delays overlap (a pipe with
//! latency, not a sleep per chunk that would add up), and there is no
//! bandwidth limit and no slow start. The upstream connection is opened one
//! `rtt` after the client connected, and nothing the client sent is read
//! before then: that models the TCP handshake, so the client's first byte
//! reaches the server 1.5 RTT after it called `connect`.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
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
