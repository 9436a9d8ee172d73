//! HTTP/2 pieces of the benches: an h2c server answering with N bytes in
//! 16 KiB DATA frames, a proxy that counts the client's GOAWAY and
//! RST_STREAM frames, hyper-util's HTTP/2-only client, and the traffic of
//! C callers dropping (or reading) bodies right after their heads.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
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

/// An h2c server on `127.0.0.1:0` (TCP_NODELAY), every response `len`
/// bytes in 16 KiB frames; counts the connections it accepts. Stops when
/// dropped.
pub struct H2Server {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl H2Server {
    pub fn start(rt: &Handle, len: usize) -> H2Server {
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
                conns.spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service),
                );
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

/// What the client sent, by frame type, as [`FrameCounter`] parsed it.
#[derive(Default)]
pub struct ClientFrames {
    /// GOAWAY frames with an error code (not NO_ERROR).
    pub goaways: AtomicUsize,
    /// RST_STREAM(CANCEL): streams the client dropped.
    pub rst_cancel: AtomicUsize,
    /// RST_STREAM(STREAM_CLOSED): h2's own resets of DATA for streams it
    /// forgot, the ones that count towards its GOAWAY.
    pub rst_closed: AtomicUsize,
}

/// A TCP proxy on `127.0.0.1:0` forwarding both ways unchanged, parsing the
/// client's HTTP/2 frames (after the 24-byte preface: 9-byte headers) to
/// count GOAWAY and RST_STREAM by error code. Stops when dropped.
pub struct FrameCounter {
    addr: SocketAddr,
    pub frames: Arc<ClientFrames>,
    task: JoinHandle<()>,
}

impl FrameCounter {
    pub fn start(rt: &Handle, upstream: SocketAddr) -> FrameCounter {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("address");
        let frames = Arc::new(ClientFrames::default());
        let counts = frames.clone();
        let task = rt.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("listener");
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                conns.spawn(relay(client, upstream, counts.clone()));
                while conns.try_join_next().is_some() {}
            }
        });
        FrameCounter { addr, frames, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for FrameCounter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: TcpStream, upstream: SocketAddr, counts: Arc<ClientFrames>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async move {
        let mut parser = Parser::default();
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = cr.read(&mut buf).await {
            if n == 0 || sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
            parser.feed(&buf[..n], &counts);
        }
        let _ = sw.shutdown().await;
    };
    let down = async move {
        let _ = tokio::io::copy(&mut sr, &mut cw).await;
        let _ = cw.shutdown().await;
    };
    tokio::join!(up, down);
}

/// A streaming parser of the client's side of an HTTP/2 connection.
#[derive(Default)]
struct Parser {
    /// Bytes of the preface still to skip (set on the first feed).
    preface_left: Option<usize>,
    /// The frame header being read.
    header: Vec<u8>,
    /// Payload bytes of the current frame still to skip, and how many of
    /// its first bytes to keep (the error code of RST_STREAM and GOAWAY).
    payload_left: usize,
    kept: Vec<u8>,
    keep: usize,
    kind: u8,
}

impl Parser {
    fn feed(&mut self, mut bytes: &[u8], counts: &ClientFrames) {
        let preface = self.preface_left.get_or_insert(24);
        let skip = (*preface).min(bytes.len());
        *preface -= skip;
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
                match (self.kind, code) {
                    (0x7, 0) => {}
                    (0x7, _) => drop(counts.goaways.fetch_add(1, Ordering::Relaxed)),
                    (0x3, 0x8) => drop(counts.rst_cancel.fetch_add(1, Ordering::Relaxed)),
                    (0x3, 0x5) => drop(counts.rst_closed.fetch_add(1, Ordering::Relaxed)),
                    _ => {}
                }
            }
        }
    }
}

/// hyper-util's pooled client, HTTP/2 only (h2c), TCP_NODELAY, otherwise
/// hyper-util's defaults.
pub fn client() -> Client<HttpConnector, Empty<Bytes>> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    Client::builder(TokioExecutor::new()).http2_only(true).build(http)
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
/// right after its head.
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
