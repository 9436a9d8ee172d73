//! The server side: an HTTP/1.1 hyper server (plain or TLS) on
//! `127.0.0.1:0`, optionally behind the latency proxy (with or without a
//! shared link).

use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use super::proxy::{LatencyProxy, LinkConfig};
use super::tls::Tls;

/// Size of each chunk of a chunked body (the tests use the same).
pub const CHUNK: usize = 16 * 1024;

/// How the response body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    ContentLength,
    /// `Transfer-Encoding: chunked`, chunks of [`CHUNK`] bytes.
    Chunked,
}

impl fmt::Display for Framing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Framing::ContentLength => "Content-Length",
            Framing::Chunked => "chunked",
        })
    }
}

/// Where requests go.
#[derive(Clone)]
pub enum Net {
    /// Plain HTTP straight to the server over loopback.
    Loopback,
    /// HTTPS (TLS 1.3) through a [`LatencyProxy`] adding `rtt`, and with
    /// `link` sharing one link of limited bandwidth.
    Tls { rtt: Duration, tls: Tls, link: Option<LinkConfig> },
}

impl Net {
    /// HTTPS through the latency proxy, with a fresh certificate.
    pub fn tls(rtt: Duration) -> Net {
        Net::Tls { rtt, tls: Tls::generate(), link: None }
    }

    /// HTTPS through the latency proxy with a shared link, with a fresh
    /// certificate.
    pub fn tls_shared_link(rtt: Duration, link: LinkConfig) -> Net {
        Net::Tls { rtt, tls: Tls::generate(), link: Some(link) }
    }
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Net::Loopback => f.write_str("loopback, plain HTTP"),
            Net::Tls { rtt, link: None, .. } => write!(f, "TLS 1.3 via proxy, RTT {} ms", rtt.as_millis()),
            Net::Tls { rtt, link: Some(link), .. } => {
                write!(f, "TLS 1.3 via proxy, RTT {} ms, {link}", rtt.as_millis())
            }
        }
    }
}

/// A hyper HTTP/1.1 server on `127.0.0.1:0` (TCP_NODELAY) answering
/// `GET /{len}` with `len` bytes (`Content-Length`) and `GET /{len}?chunked`
/// with a chunked body. Counts the connections it accepts. Stops (and closes
/// its connections) when dropped.
pub struct Server {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Server {
    /// Starts serving on `rt`, over TLS when `tls` is given.
    pub fn start(rt: &Handle, tls: Option<TlsAcceptor>) -> Server {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind server");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("server address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let task = rt.spawn({
            let accepted = accepted.clone();
            async move {
                let listener = TcpListener::from_std(listener).expect("tokio listener");
                // Dropping the set (when the task is aborted) aborts every connection.
                let mut conns = JoinSet::new();
                while let Ok((stream, _)) = listener.accept().await {
                    stream.set_nodelay(true).expect("nodelay");
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let tls = tls.clone();
                    conns.spawn(async move {
                        match tls {
                            Some(acceptor) => {
                                if let Ok(stream) = acceptor.accept(stream).await {
                                    serve(stream).await;
                                }
                            }
                            None => serve(stream).await,
                        }
                    });
                    while conns.try_join_next().is_some() {}
                }
            }
        });
        Server { addr, accepted, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve<I>(io: I)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(|req: Request<Incoming>| async move {
        // `?think=MS`: a slow endpoint, answering after MS milliseconds.
        if let Some(ms) =
            req.uri().query().and_then(|q| q.strip_prefix("think=")).and_then(|v| v.parse().ok())
        {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        Ok::<_, Infallible>(respond(req.uri()))
    });
    // Errors are the client going away mid-response: expected when bodies are dropped.
    let _ = http1::Builder::new().serve_connection(TokioIo::new(io), service).await;
}

fn respond(uri: &Uri) -> Response<Served> {
    let len = uri.path().trim_start_matches('/').parse().unwrap_or(0);
    let chunk = (uri.query() == Some("chunked")).then_some(CHUNK);
    Response::new(Served { data: payload(len), chunk })
}

/// `len` bytes of body, sliced from one shared buffer (no copy per response).
fn payload(len: usize) -> Bytes {
    const SHARED: usize = 1024 * 1024;
    static BUF: OnceLock<Bytes> = OnceLock::new();
    if len > SHARED {
        return Bytes::from(vec![b'x'; len]);
    }
    BUF.get_or_init(|| Bytes::from(vec![b'x'; SHARED])).slice(..len)
}

/// A response body: one frame with an exact size (hyper sends
/// `Content-Length`), or frames of `chunk` bytes with no size (hyper sends
/// `Transfer-Encoding: chunked`).
struct Served {
    data: Bytes,
    chunk: Option<usize>,
}

impl Body for Served {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.data.is_empty() {
            return Poll::Ready(None);
        }
        let n = this.chunk.unwrap_or(usize::MAX).min(this.data.len());
        Poll::Ready(Some(Ok(Frame::data(this.data.split_to(n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        match self.chunk {
            None => SizeHint::with_exact(self.data.len() as u64),
            Some(_) => SizeHint::default(),
        }
    }
}

/// A server reached through [`Net`]: the server, the proxy in front of it if
/// any, and the base of the URIs to request.
pub struct Endpoint {
    server: Server,
    proxy: Option<LatencyProxy>,
    base: String,
}

impl Endpoint {
    /// A fresh server (and proxy) on `rt` for `net`.
    pub fn start(rt: &Handle, net: &Net) -> Endpoint {
        match net {
            Net::Loopback => {
                let server = Server::start(rt, None);
                let base = format!("http://{}", server.addr());
                Endpoint { server, proxy: None, base }
            }
            Net::Tls { rtt, tls, link } => {
                let server = Server::start(rt, Some(tls.acceptor.clone()));
                let proxy = match link {
                    None => LatencyProxy::start(rt, server.addr(), *rtt),
                    Some(link) => LatencyProxy::start_with_link(rt, server.addr(), *rtt, *link),
                };
                // An IP literal: no name resolution; the connector sends SNI `localhost`.
                let base = format!("https://{}", proxy.addr());
                Endpoint { server, proxy: Some(proxy), base }
            }
        }
    }

    /// The URI serving `len` bytes framed as `framing`.
    pub fn uri(&self, len: usize, framing: Framing) -> Uri {
        let query = match framing {
            Framing::ContentLength => "",
            Framing::Chunked => "?chunked",
        };
        format!("{}/{len}{query}", self.base).parse().expect("valid URI")
    }

    /// The URI serving `len` bytes with `Content-Length` after `think`.
    pub fn slow_uri(&self, len: usize, think: std::time::Duration) -> Uri {
        format!("{}/{len}?think={}", self.base, think.as_millis()).parse().expect("valid URI")
    }

    /// Connections the server accepted.
    pub fn accepted(&self) -> usize {
        self.server.accepted()
    }
}
