//! The client side: a connector that counts the connections it opens, and
//! the three clients compared.

use std::fmt;
use std::future::Future;
use std::hint::black_box;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::{DrainOnDrop, DrainOnDropLayer, DrainSnapshot, ObserveConnector};
use http::{Request, Response, Uri};
use http_body::Body;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsConnector;
use tower::{Service, ServiceBuilder, ServiceExt};

use super::BoxError;
use super::server::Net;
use super::tls::Tls;

/// The clients compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// hyper-util's legacy `Client`, no layer; bodies dropped as the case says.
    HyperAlone,
    /// The same client under `DrainOnDropLayer::new()` (default budgets).
    Layer,
    /// Control: the bare client, and the caller reads every body to its end.
    ReadToEnd,
    /// Diagnostic: the bare client, and the caller spawns a tokio task that
    /// reads each body to its end (a hand-rolled background drain, no layer).
    SpawnedReadToEnd,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::HyperAlone, Kind::Layer, Kind::ReadToEnd];

    pub fn label(self) -> &'static str {
        match self {
            Kind::HyperAlone => "hyper-util alone",
            Kind::Layer => "with DrainOnDropLayer",
            Kind::ReadToEnd => "read-to-end control",
            Kind::SpawnedReadToEnd => "read-to-end in a spawned task (diagnostic)",
        }
    }
}

/// How much of each body the caller reads before dropping it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// Drops the body unread.
    Unread,
    /// Reads one data frame, then drops the body.
    OneFrame,
    /// Reads the body to its end.
    ToEnd,
    /// Spawns a task that reads the body to its end, and moves on.
    ToEndInTask,
    /// Waits this long, then reads the body to its end (a slow caller).
    ToEndAfter(Duration),
}

impl fmt::Display for Read {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Read::Unread => f.write_str("unread"),
            Read::OneFrame => f.write_str("one frame"),
            Read::ToEnd => f.write_str("to the end"),
            Read::ToEndInTask => f.write_str("to the end, in a spawned task"),
            Read::ToEndAfter(wait) => write!(f, "to the end after {} ms", wait.as_millis()),
        }
    }
}

#[derive(Default)]
struct Counts {
    started: AtomicUsize,
    finished: AtomicUsize,
    connected: AtomicUsize,
}

/// hyper-util's `HttpConnector` (TCP_NODELAY), plus a TLS handshake for
/// [`Net::Tls`], counting dials started and connections established (after
/// the TLS handshake, when there is one).
#[derive(Clone)]
pub struct CountingConnector {
    http: HttpConnector,
    tls: Option<TlsConnector>,
    counts: Arc<Counts>,
}

impl CountingConnector {
    pub fn new(net: &Net) -> CountingConnector {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        let tls = match net {
            Net::Loopback => None,
            Net::Tls { tls, .. } => {
                http.enforce_http(false);
                Some(tls.connector.clone())
            }
        };
        CountingConnector { http, tls, counts: Arc::default() }
    }

    /// Connections established so far.
    pub fn connections(&self) -> usize {
        self.counts.connected.load(Ordering::SeqCst)
    }

    /// Dials started and not finished (hyper-util finishes a dial in the
    /// background when a pooled connection won the race).
    pub fn dials_in_flight(&self) -> usize {
        let c = &self.counts;
        c.started.load(Ordering::SeqCst) - c.finished.load(Ordering::SeqCst)
    }
}

impl Service<Uri> for CountingConnector {
    type Response = TokioIo<Conn>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let counts = self.counts.clone();
        counts.started.fetch_add(1, Ordering::SeqCst);
        let dial = self.http.call(uri);
        let tls = self.tls.clone();
        Box::pin(async move {
            let result = async {
                let tcp = dial.await?.into_inner();
                let io: Box<dyn Io> = match tls {
                    None => Box::new(tcp),
                    Some(tls) => Box::new(tls.connect(Tls::server_name(), tcp).await?),
                };
                Ok::<_, BoxError>(Conn(io))
            }
            .await;
            if result.is_ok() {
                counts.connected.fetch_add(1, Ordering::SeqCst);
            }
            counts.finished.fetch_add(1, Ordering::SeqCst);
            Ok(TokioIo::new(result?))
        })
    }
}

/// A connection's I/O, which reports what hyper-util's `HttpConnector`
/// reports for its TCP connection (`HttpInfo`: the addresses), so that the
/// bench's responses carry the extensions a user's would.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {
    fn connected(&self) -> Connected;
}

impl Io for tokio::net::TcpStream {
    fn connected(&self) -> Connected {
        Connection::connected(self)
    }
}

impl Io for tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    fn connected(&self) -> Connected {
        Connection::connected(self.get_ref().0)
    }
}

/// A client connection: TCP or TLS over TCP, and the TCP connection's
/// addresses (`HttpInfo` in each response's extensions, as with
/// `HttpConnector`).
pub struct Conn(Box<dyn Io>);

impl Connection for Conn {
    fn connected(&self) -> Connected {
        self.0.connected()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

type HyperClient = Client<CountingConnector, Empty<Bytes>>;
type ObservedClient = Client<ObserveConnector<CountingConnector>, Empty<Bytes>>;

#[derive(Clone)]
enum Svc {
    Bare(HyperClient),
    Layer(DrainOnDrop<HyperClient>),
    ObservedBare(ObservedClient),
    ObservedLayer(DrainOnDrop<ObservedClient>),
}

/// One of the clients compared, with its own connection pool and connector.
/// Clones share both.
#[derive(Clone)]
pub struct BenchClient {
    kind: Kind,
    svc: Svc,
    connector: CountingConnector,
    layer: Option<DrainOnDropLayer>,
}

impl BenchClient {
    pub fn new(kind: Kind, net: &Net) -> BenchClient {
        let layer = (kind == Kind::Layer).then(DrainOnDropLayer::new);
        BenchClient::build(kind, layer, CountingConnector::new(net))
    }

    /// A client whose connector is wrapped in the layer's observer (which
    /// adaptive mode needs to measure setup costs): under
    /// `layer` when given (as [`Kind::Layer`]), otherwise bare (observed
    /// into throwaway stats, so every client pays the same), with the
    /// caller behaving as `kind` says.
    pub fn observed(kind: Kind, layer: Option<DrainOnDropLayer>, net: &Net) -> BenchClient {
        let kind = if layer.is_some() { Kind::Layer } else { kind };
        let connector = CountingConnector::new(net);
        let stats = layer.as_ref().map(DrainOnDropLayer::stats).unwrap_or_default();
        let client =
            Client::builder(TokioExecutor::new()).build(ObserveConnector::new(connector.clone(), stats));
        let svc = match &layer {
            None => Svc::ObservedBare(client),
            Some(layer) => Svc::ObservedLayer(ServiceBuilder::new().layer(layer.clone()).service(client)),
        };
        BenchClient { kind, svc, connector, layer }
    }

    fn build(kind: Kind, layer: Option<DrainOnDropLayer>, connector: CountingConnector) -> BenchClient {
        let client = Client::builder(TokioExecutor::new()).build(connector.clone());
        let (svc, stats) = match layer {
            None => (Svc::Bare(client), None),
            Some(layer) => {
                let svc = ServiceBuilder::new().layer(layer.clone()).service(client);
                (Svc::Layer(svc), Some(layer))
            }
        };
        BenchClient { kind, svc, connector, layer: stats }
    }

    /// GETs `uri` and handles the body as `read` says (the read-to-end
    /// control always reads to the end). Returns the data bytes read.
    pub async fn get(&mut self, uri: Uri, read: Read) -> Result<u64, BoxError> {
        let read = match self.kind {
            Kind::ReadToEnd => Read::ToEnd,
            Kind::SpawnedReadToEnd => Read::ToEndInTask,
            Kind::HyperAlone | Kind::Layer => read,
        };
        let req = Request::get(uri).body(Empty::new())?;
        match &mut self.svc {
            Svc::Bare(svc) => send(svc, req, read).await,
            Svc::Layer(svc) => send(svc, req, read).await,
            Svc::ObservedBare(svc) => send(svc, req, read).await,
            Svc::ObservedLayer(svc) => send(svc, req, read).await,
        }
    }

    /// Connections opened, counted at the connector.
    pub fn connections(&self) -> usize {
        self.connector.connections()
    }

    /// The layer's counters (`None` without the layer).
    pub fn drains(&self) -> Option<DrainSnapshot> {
        self.layer.as_ref().map(|l| l.stats().snapshot())
    }

    /// The layer (`None` without it): its stats and adaptive origins.
    pub fn layer(&self) -> Option<&DrainOnDropLayer> {
        self.layer.as_ref()
    }

    /// Waits until no dial and no drain is running and `accepted()` (the
    /// server's count) caught up with the connector's, for at most
    /// `deadline`. Returns whether that happened.
    pub async fn settle(&self, accepted: impl Fn() -> usize, deadline: Duration) -> bool {
        let start = tokio::time::Instant::now();
        loop {
            let quiet = self.connector.dials_in_flight() == 0
                && self.drains().is_none_or(|d| d.in_flight == 0)
                && accepted() >= self.connections();
            if quiet {
                return true;
            }
            if start.elapsed() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Sends `req` through `svc`, checks for a success status, and handles the
/// body as `read` says. Returns the data bytes read.
pub async fn send<S, Req, B>(svc: &mut S, req: Req, read: Read) -> Result<u64, BoxError>
where
    S: Service<Req, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<BoxError>,
{
    let res = svc.ready().await.map_err(Into::into)?.call(req).await.map_err(Into::into)?;
    if !res.status().is_success() {
        return Err(format!("unexpected status {}", res.status()).into());
    }
    let body = res.into_body();
    if let Read::ToEndAfter(wait) = read {
        tokio::time::sleep(wait).await;
    }
    if read == Read::ToEndInTask {
        tokio::spawn(async move { black_box(consume(body, Read::ToEnd).await.is_ok()) });
        return Ok(0);
    }
    consume(body, read).await.map_err(Into::into)
}

/// Reads `body` as `read` says, then drops it. Returns the data bytes read.
pub async fn consume<B>(mut body: B, read: Read) -> Result<u64, B::Error>
where
    B: Body<Data = Bytes> + Unpin,
{
    let frames = match read {
        Read::Unread => 0,
        Read::OneFrame => 1,
        Read::ToEnd | Read::ToEndInTask | Read::ToEndAfter(_) => usize::MAX,
    };
    let (mut bytes, mut seen) = (0, 0);
    while seen < frames {
        let Some(frame) = body.frame().await else {
            break;
        };
        if let Ok(data) = frame?.into_data() {
            bytes += data.len() as u64;
            seen += 1;
        }
    }
    Ok(bytes)
}
