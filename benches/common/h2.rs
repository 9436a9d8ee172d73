//! HTTP/2 pieces of the benches: a server answering with N bytes in 16 KiB
//! DATA frames (h2c, or TLS offering h2 and http/1.1 by ALPN), hyper-util's
//! client on each [`Road`] (h2c; TLS with ALPN h2 and http/1.1; TLS with
//! `http2_only`), alone or over `drain_on_drop::Http2Connector`, the
//! traffic of C callers dropping (or reading) bodies right after their
//! heads, and one caller dropping endless bodies then timing one request.
//! The frame counter is in `frames`, the other servers in `servers`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::Http2Connector;
use http::{Request, Response, Uri};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tower::{Service, ServiceExt};

/// `left` bytes in `chunk`-byte frames, its length known (`Content-Length`
/// is sent), END_STREAM on an empty DATA frame after the last chunk, as
/// hyper sends stream bodies.
struct Chunks {
    left: usize,
    chunk: usize,
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let n = self.left.min(self.chunk);
        self.left -= n;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'h'; n])))))
    }
}

/// An HTTP/2 server on `127.0.0.1:0` (TCP_NODELAY), h2c or, with `tls`,
/// TLS (the acceptor's ALPN list: [`Tls::h2`](super::tls::Tls::h2) offers
/// h2 then http/1.1; a connection that negotiated http/1.1 is served
/// HTTP/1.1), every response `len` bytes in 16 KiB frames; counts the
/// connections it accepts. Stops when dropped.
pub struct H2Server {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl H2Server {
    pub fn start(rt: &Handle, len: usize, tls: Option<tokio_rustls::TlsAcceptor>) -> H2Server {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let task = rt.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("listener");
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                count.fetch_add(1, Ordering::SeqCst);
                let service =
                    hyper::service::service_fn(move |_req: Request<hyper::body::Incoming>| async move {
                        let res = Response::builder()
                            .header("content-length", len)
                            .body(Chunks { left: len, chunk: 16 * 1024 })
                            .expect("response");
                        Ok::<_, Infallible>(res)
                    });
                let tls = tls.clone();
                conns.spawn(async move {
                    let http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                    let _ = match tls {
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(stream) if stream.get_ref().1.alpn_protocol() == Some(b"http/1.1") => {
                                hyper::server::conn::http1::Builder::new()
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await
                            }
                            Ok(stream) => http2.serve_connection(TokioIo::new(stream), service).await,
                            Err(_) => return,
                        },
                        None => http2.serve_connection(TokioIo::new(stream), service).await,
                    };
                });
                while conns.try_join_next().is_some() {}
            }
        });
        H2Server { addr, accepted, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for H2Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How a client reaches an HTTP/2 server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Road {
    /// Cleartext HTTP/2 with prior knowledge (`http://`, `http2_only`).
    H2c,
    /// TLS, the client offering h2 and http/1.1 by ALPN and speaking what
    /// the server picks (hyper-rustls' `enable_all_versions`, no
    /// `http2_only`): how users run hyper-util over hyper-rustls.
    Alpn,
    /// TLS, the client offering h2 alone, `http2_only(true)`.
    H2Only,
}

impl Road {
    /// Whether the road is over TLS (`https://`).
    pub fn tls(self) -> bool {
        self != Road::H2c
    }

    /// Words for a cell's label: nothing for h2c.
    pub fn label(self) -> &'static str {
        match self {
            Road::H2c => "",
            Road::Alpn => ", TLS ALPN",
            Road::H2Only => ", TLS h2 only",
        }
    }
}

/// hyper-rustls' connector over `HttpConnector`.
pub type Https = HttpsConnector<HttpConnector>;

/// The benches' HTTP/2 client: hyper-util's pooled client over
/// hyper-rustls' connector.
pub type H2Client = Client<Https, Empty<Bytes>>;

/// The README's HTTP/2 client: hyper-util's pooled client over
/// `Http2Connector` over hyper-rustls' connector.
pub type StackClient = Client<Http2Connector<Https>, Empty<Bytes>>;

/// hyper-rustls' connector for `road` (TLS as `client` says, trusting the
/// bench's certificate alone, offering h2, or h2 and http/1.1 on
/// [`Road::Alpn`]; plain `http://` for h2c), TCP_NODELAY.
fn https(client: &rustls::ClientConfig, road: Road) -> Https {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    // hyper-rustls sets the ALPN protocols itself (`enable_http2`,
    // `enable_all_versions`).
    let mut config = client.clone();
    config.alpn_protocols.clear();
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config).https_or_http();
    match road {
        Road::Alpn => builder.enable_all_versions().wrap_connector(http),
        Road::H2c | Road::H2Only => builder.enable_http2().wrap_connector(http),
    }
}

/// hyper-util's builder for `road`: `http2_only` except on [`Road::Alpn`].
/// With `DRAIN_BENCH_GO_WINDOWS` set (not to `0`), every hyper-util client
/// announces Go's flow-control windows (1 GiB per connection, 4 MiB per
/// stream) instead of hyper's (5 MiB, 2 MiB).
fn builder(road: Road) -> hyper_util::client::legacy::Builder {
    let mut builder = Client::builder(TokioExecutor::new());
    if road != Road::Alpn {
        builder.http2_only(true);
    }
    if std::env::var("DRAIN_BENCH_GO_WINDOWS").is_ok_and(|v| !v.is_empty() && v != "0") {
        builder.http2_initial_connection_window_size(1 << 30).http2_initial_stream_window_size(4 << 20);
    }
    builder
}

/// hyper-util's pooled client on `road` (h2c with prior knowledge for an
/// `http://` URI; TLS trusting `tls`'s certificate alone for an `https://`
/// one), TCP_NODELAY, otherwise hyper-util's defaults, as a user builds it.
pub fn client(tls: &super::tls::Tls, road: Road) -> H2Client {
    client_with(&tls.client, road)
}

/// [`client`] with TLS as `config` says (a process that trusts the
/// certificate of a [`Tls`](super::tls::Tls) it did not generate, see
/// [`client_trusting`](super::tls::client_trusting)).
pub fn client_with(config: &rustls::ClientConfig, road: Road) -> H2Client {
    builder(road).build(https(config, road))
}

/// [`client`] over `Http2Connector::new`, as the README's HTTP/2 stack
/// builds it (with `http2_only` on the h2c and h2-only roads).
pub fn stack_client(tls: &super::tls::Tls, road: Road) -> StackClient {
    stack_client_with(&tls.client, road)
}

/// [`stack_client`] with TLS as `config` says.
pub fn stack_client_with(config: &rustls::ClientConfig, road: Road) -> StackClient {
    builder(road).build(Http2Connector::new(https(config, road)))
}

/// What one run of [`traffic`] saw.
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub sent: usize,
    pub failed: usize,
    pub elapsed: Duration,
    pub first_error: Option<String>,
}

/// `callers` tasks sharing `svc` send GETs for `uri` until `requests` were
/// sent or `limit` passed; each body read to its end (`read`) or dropped
/// right after its head; a status other than 2xx fails.
pub async fn traffic<S, B>(
    svc: S,
    uri: Uri,
    callers: usize,
    requests: usize,
    limit: Duration,
    read: bool,
) -> Run
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug + Send,
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: std::fmt::Debug,
{
    let tickets = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let run = Arc::new(std::sync::Mutex::new(Run::default()));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (mut svc, uri, tickets, stop, run) =
            (svc.clone(), uri.clone(), tickets.clone(), stop.clone(), run.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) && tickets.fetch_add(1, Ordering::Relaxed) < requests {
                if start.elapsed() >= limit {
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
                let req = Request::get(uri.clone()).body(Empty::new()).expect("request");
                let result = match svc.ready().await {
                    Ok(ready) => ready.call(req).await,
                    Err(e) => Err(e),
                };
                let result = match result {
                    // An answer that is not the body asked for (a stale Go
                    // server's 404) fails, as Go's client counts it.
                    Ok(res) if !res.status().is_success() => Err(format!("status {}", res.status())),
                    Ok(res) if read => {
                        res.into_body().collect().await.map(drop).map_err(|e| format!("{e:?}"))
                    }
                    Ok(res) => {
                        drop(res);
                        Ok(())
                    }
                    Err(e) => Err(format!("{e:?}")),
                };
                let mut run = run.lock().expect("run");
                run.sent += 1;
                if let Err(e) = result {
                    run.failed += 1;
                    run.first_error.get_or_insert(e);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("caller");
    }
    let mut run = std::mem::take(&mut *run.lock().expect("run"));
    run.elapsed = start.elapsed();
    run
}

/// The longest [`endless`] waits for its timed request's head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(60);

/// One caller: `drops` GETs of `drop_uri` (an endless body), each dropped
/// right after its head, then one GET of `uri`. `elapsed` is that last
/// request's time from sending to its head ([`HEAD_TIMEOUT`] at most: then
/// it failed); `sent` counts them all.
pub async fn endless<S, B>(mut svc: S, drop_uri: Uri, drops: usize, uri: Uri) -> Run
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    let mut run = Run::default();
    let note = |run: &mut Run, e: String| {
        run.failed += 1;
        run.first_error.get_or_insert(e);
    };
    for _ in 0..drops {
        let req = Request::get(drop_uri.clone()).body(Empty::new()).expect("request");
        run.sent += 1;
        match svc.ready().await {
            Ok(ready) => match ready.call(req).await {
                Ok(res) if !res.status().is_success() => note(&mut run, format!("status {}", res.status())),
                Ok(res) => drop(res),
                Err(e) => note(&mut run, format!("{e:?}")),
            },
            Err(e) => note(&mut run, format!("{e:?}")),
        }
    }
    let req = Request::get(uri).body(Empty::new()).expect("request");
    run.sent += 1;
    let start = Instant::now();
    let head = tokio::time::timeout(HEAD_TIMEOUT, async {
        let ready = svc.ready().await.map_err(|e| format!("{e:?}"))?;
        ready.call(req).await.map_err(|e| format!("{e:?}"))
    });
    match head.await {
        Ok(Ok(res)) => {
            run.elapsed = start.elapsed();
            drop(res);
        }
        Ok(Err(e)) => {
            run.elapsed = start.elapsed();
            note(&mut run, e);
        }
        Err(_) => {
            run.elapsed = HEAD_TIMEOUT;
            note(&mut run, format!("no head in {HEAD_TIMEOUT:?}"));
        }
    }
    run
}
