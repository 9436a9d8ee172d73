//! The layer's drain on responses that do not come through its service:
//! requests sent by reqwest, by hyper's own connections, by a pool of
//! yours ([`DrainOnDropLayer::sending`], [`DrainOnDropLayer::wrap_response`],
//! [`DrainOnDropLayer::http1_sender`]).

use http::{Extensions, HeaderMap, Request, Response, Uri};
use http_body::Body;

use crate::body::DrainBody;
use crate::conn::Http1Sender;
#[cfg(feature = "http2")]
use crate::conn::Http2Sender;
use crate::layer::DrainOnDropLayer;
use crate::policy;
use crate::request::RequestInfo;
use crate::sending::Sending;

impl DrainOnDropLayer {
    /// Notes a request about to be sent outside the layer (by reqwest, by
    /// hyper's own `client::conn` connections, by a pool of yours): the
    /// returned [`Sending`] puts the drain on its response, which then gets
    /// what the layer's own responses get (the origin's round trip, timed
    /// from now to the response head; the request's `Connection: close` and
    /// [`DrainBudget`](crate::DrainBudget); adaptive estimates). The origin
    /// is the URI's authority, or, for an origin-form URI (`/path`), the
    /// `Host` header; a request that names neither gets the fixed budgets
    /// and a WARN event, once per layer. Call it just before sending: the
    /// time to the head is a round-trip sample.
    ///
    /// ```
    /// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let addr = listener.local_addr()?;
    /// # tokio::spawn(async move {
    /// #     let (stream, _) = listener.accept().await.unwrap();
    /// #     let svc = hyper::service::service_fn(|_| async {
    /// #         Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from(vec![0u8; 4096]))))
    /// #     });
    /// #     let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), svc).await;
    /// # });
    /// use drain_on_drop::DrainOnDropLayer;
    /// use http_body_util::Empty;
    /// use hyper::body::Bytes;
    ///
    /// let layer = DrainOnDropLayer::new();
    /// // One of hyper's own HTTP/1 connections (a pool of yours keeps them).
    /// let io = hyper_util::rt::TokioIo::new(tokio::net::TcpStream::connect(addr).await?);
    /// let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    /// tokio::spawn(conn);
    /// let req = http::Request::get("/status").header("host", addr.to_string()).body(Empty::<Bytes>::new())?;
    /// let sending = layer.sending(&req);
    /// let res = sending.wrap_response(sender.send_request(req).await?);
    /// drop(res); // dropped unread: drained, and `sender` can send again
    /// # layer.stats().wait_idle(std::time::Duration::from_secs(5)).await;
    /// # assert_eq!(layer.stats().snapshot().drained, 1);
    /// # assert_eq!(layer.origins().len(), 1, "the Host header named the origin");
    /// # Ok(())
    /// # }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
    /// ```
    pub fn sending<B>(&self, req: &Request<B>) -> Sending {
        self.sending_head(req.uri(), req.headers(), req.extensions())
    }

    /// One of hyper's own HTTP/1 connections as a tower `Service` whose
    /// responses carry this layer's drain: see [`Http1Sender`]. For a pool
    /// of yours, or hyper-util's `client::pool::cache`.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use drain_on_drop::DrainOnDropLayer;
    /// use http_body_util::Empty;
    /// use hyper::body::Bytes;
    /// use tower::{Service, ServiceExt};
    ///
    /// let layer = DrainOnDropLayer::new();
    /// let io = hyper_util::rt::TokioIo::new(tokio::net::TcpStream::connect("127.0.0.1:8080").await?);
    /// let (sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(io).await?;
    /// tokio::spawn(conn);
    /// let mut svc = layer.http1_sender(sender);
    /// let req = http::Request::get("/health").header("host", "127.0.0.1:8080").body(Empty::new())?;
    /// let res = svc.ready().await?.call(req).await?;
    /// drop(res); // drained; `svc` is ready again once it is
    /// # Ok(())
    /// # }
    /// ```
    pub fn http1_sender<B>(&self, sender: hyper::client::conn::http1::SendRequest<B>) -> Http1Sender<B> {
        Http1Sender::new(sender, self.shared.clone())
    }

    /// One of hyper's own HTTP/2 connections as a tower `Service` whose
    /// responses carry this layer's drain: see [`Http2Sender`]. Clone it
    /// for each caller. Cargo feature `http2`.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use drain_on_drop::DrainOnDropLayer;
    /// use http_body_util::Empty;
    /// use hyper::body::Bytes;
    /// use hyper_util::rt::{TokioExecutor, TokioIo};
    /// use tower::{Service, ServiceExt};
    ///
    /// let builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
    /// let layer = DrainOnDropLayer::new();
    /// let io = TokioIo::new(tokio::net::TcpStream::connect("127.0.0.1:8080").await?);
    /// let (sender, conn) = builder.handshake::<_, Empty<Bytes>>(io).await?;
    /// tokio::spawn(conn);
    /// let mut svc = layer.http2_sender(sender);
    /// let req = http::Request::get("http://127.0.0.1:8080/events").body(Empty::new())?;
    /// let res = svc.ready().await?.call(req).await?;
    /// drop(res); // its stream is reset: the server stops sending
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "http2")]
    pub fn http2_sender<B>(&self, sender: hyper::client::conn::http2::SendRequest<B>) -> Http2Sender<B> {
        Http2Sender::new(sender, self.shared.clone())
    }

    /// [`sending`](Self::sending) from the parts of a request's head, for a
    /// request that is not an `http::Request` (reqwest's: its URL as a
    /// `Uri`, its headers, and extensions that may hold a
    /// [`DrainBudget`](crate::DrainBudget)).
    pub fn sending_head(&self, uri: &Uri, headers: &HeaderMap, extensions: &Extensions) -> Sending {
        Sending::new(RequestInfo::of_head(&self.shared, uri, headers, extensions, &mut None))
    }

    /// Puts the drain on a response that did not come through a service
    /// built from this layer, without its request (for a request, see
    /// [`sending`](Self::sending)): one from reqwest, or from hyper's own
    /// `client::conn::http1` connections in a pool of yours (see
    /// [`recipes`](crate::recipes)). The body is drained on an early drop
    /// with this layer's budgets, rules and counters, minus what only the
    /// request could say: a request's `Connection: close` or
    /// [`DrainBudget`](crate::DrainBudget), its origin's round trip, and
    /// adaptive estimates (the fixed budgets apply: `max_bytes`, and
    /// `max_time` or its 50 ms default).
    ///
    /// hyper's own body (`hyper::body::Incoming`) is framed as its headers
    /// say, and a close-delimited one is skipped, as for the layer's own
    /// responses. Any other body's headers are not trusted to describe the
    /// wire framing (reqwest removes `Content-Length` from bodies it
    /// decompresses), so a body without `Content-Length` or chunking is
    /// drained within the budgets rather than skipped as close-delimited. A
    /// body that is not hyper's own is never read in the drop: its drain
    /// runs on the runtime current here, where the response is wrapped,
    /// while it runs, else on the one current at the drop (see the [crate
    /// documentation](crate#runtime)).
    ///
    /// A response that already carries a drain (it came through a
    /// `DrainOnDrop`, or was wrapped already) is passed through: it is
    /// drained once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use drain_on_drop::DrainOnDropLayer;
    ///
    /// let layer = DrainOnDropLayer::new();
    /// let res = http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hello")));
    /// let res = layer.wrap_response(res);
    /// drop(res); // dropped unread: drained on this runtime, in the background
    /// # }
    /// ```
    pub fn wrap_response<B>(&self, res: Response<B>) -> Response<DrainBody<B>>
    where
        B: Body + Send + 'static,
    {
        DrainBody::wrap(res, RequestInfo::none(&self.shared, policy::runs_in_the_drop::<B>()))
    }
}
