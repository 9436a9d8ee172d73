//! Helpers shared by the bench targets (see `docs/BENCHMARKS.md`).
//!
//! - [`args`]: `--quick` / `DRAIN_BENCH_QUICK`, `--rtt MS`, `--repeat K`,
//!   `--bandwidth MBIT`, and cell names (positional; the http2 bench).
//! - [`server`]: an HTTP/1.1 hyper server on `127.0.0.1:0` (plain or TLS 1.3)
//!   that counts the connections it accepts.
//! - [`proxy`]: a loopback TCP proxy that adds a round-trip time, and
//!   optionally a bandwidth limit on one link shared by all its connections.
//! - [`tls`]: a self-signed certificate and the rustls configs trusting it.
//! - [`client`]: the counting connector and the clients compared
//!   (hyper-util alone, with `DrainOnDropLayer`, read-to-end control, and a
//!   diagnostic reading bodies in a spawned task), or a client under any
//!   given layer.
//! - [`go`]: the Go 1.27 client (`benches/go/goclient`) run as a child
//!   process, and what it reports.
//! - [`h2`]: an HTTP/2 server (h2c or TLS), hyper-util's HTTP/2 client on
//!   each road (h2c, TLS ALPN, TLS h2 only), alone or over `Http2Connector`,
//!   and their traffic.
//! - [`frames`]: a proxy counting connections and both sides' GOAWAY and
//!   RST_STREAM frames.
//! - [`h2report`]: the http2 bench's figures, tables and verdict.
//! - [`servers`]: the http2 bench's servers (hyper, Node, Go's net/http,
//!   nginx, Apache, h2o), one per run.
//! - [`faults`]: the http2 bench's fault cells: a proxy stalling a share of
//!   handshakes, a listener failing every dial, and their runs (latency
//!   percentiles, last failure, memory).
//! - [`h1servers`]: the keepalive bench's HTTP/1.1 servers with a 1 s idle
//!   timeout (Node, nginx, Go's net/http, Apache, uvicorn), each recording
//!   the requests it read.
//! - [`keepalive`]: the keepalive bench's race: idle-close probes, trials
//!   and their figures.
//! - [`run`]: sequential and concurrent request loops and their outcome.
//! - [`table`]: Markdown tables.
//!
//! Each bench target uses part of this module.
#![allow(dead_code, unreachable_pub)]

pub mod args;
pub mod client;
pub mod faults;
pub mod frames;
pub mod go;
pub mod h1servers;
pub mod h2;
pub mod h2report;
pub mod keepalive;
pub mod proxy;
pub mod run;
pub mod server;
pub mod servers;
pub mod table;
pub mod tls;

/// A chunked-looking body that reports it is not at its end and ends when
/// polled: dropping it through the layer starts a drain, which ends on its
/// first poll. (A body that never ended would keep each drain running for
/// `max_time`, and after 1024 of them the layer would skip drains instead.)
pub struct NotAtEnd;

impl http_body::Body for NotAtEnd {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, std::convert::Infallible>>> {
        std::task::Poll::Ready(None)
    }
}

/// One kibibyte.
pub const KIB: usize = 1024;

/// Boxed error for bench plumbing.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
