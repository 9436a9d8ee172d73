//! A response that ends before the request body was fully sent.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use drain_on_drop::{DrainOnDrop, DrainOnDropLayer, DrainStats};
use http_body::{Body, Frame};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc;
use tower::{Layer, Service, ServiceExt};

use crate::faults::EarlyAnswerServer;
use crate::harness::*;
use crate::support::*;

type ReqBody = UnsyncBoxBody<Bytes, std::io::Error>;

const LEN: usize = 16 * KIB;

/// A request body the test streams by hand: each message is a data frame or
/// an error; the body ends when the sender is dropped.
struct ChanBody(mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl Body for ChanBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.0.poll_recv(cx).map(|m| m.map(|r| r.map(Frame::data)))
    }
}

type UploadTx = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// An upload of unknown length (sent chunked) whose body the test streams.
fn upload(uri: http::Uri) -> (UploadTx, http::Request<ReqBody>) {
    let (tx, rx) = mpsc::channel(4);
    let req = http::Request::post(uri).body(ChanBody(rx).boxed_unsync()).unwrap();
    (tx, req)
}

fn empty() -> ReqBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// An upload in progress whose early answer was dropped unread and drained.
struct Upload {
    server: EarlyAnswerServer,
    connector: CountingConnector,
    stats: DrainStats,
    svc: DrainOnDrop<Client<CountingConnector, ReqBody>>,
    /// The rest of the upload.
    tx: UploadTx,
    /// The connection the answer came on.
    first: SocketAddr,
}

/// Starts an upload of unknown length, sends its first part, drops the
/// server's early answer unread, and waits for the drain.
async fn drop_answer_mid_upload() -> Upload {
    let server = EarlyAnswerServer::start(19, LEN).await;
    let connector = CountingConnector::new();
    let client = Client::builder(TokioExecutor::new()).build(connector.clone());
    let layer = DrainOnDropLayer::new().max_time(GENEROUS);
    let stats = layer.stats();
    let mut svc = layer.layer(client);
    let (tx, req) = upload(server.uri("/upload"));
    tx.send(Ok(Bytes::from_static(b"first part of the upload;"))).await.unwrap();
    let first = drop_unread(&mut svc, req).await;
    settle(&stats, GENEROUS).await;
    Upload { server, connector, stats, svc, tx, first }
}

/// The server answers (16 KiB) as soon as the head of the upload arrives.
/// The caller drops the answer unread while still sending the upload: the
/// drain reads the answer to its end at once, but hyper-util pools the
/// connection only once the upload is finished too. Then the next request
/// reuses it.
#[tokio::test]
async fn response_drained_before_the_upload_ends_is_reused_after_it() {
    let Upload { server, connector, stats, mut svc, tx, first } = drop_answer_mid_upload().await;
    let s = stats.snapshot();
    assert_eq!(counted(&s), Counted::drained(1), "{s:?}");
    assert_eq!(s.bytes_drained, LEN as u64, "the whole answer");
    assert_eq!(server.bodies_read(), 0, "the upload is still going on");

    tx.send(Ok(Bytes::from_static(b"second part;"))).await.unwrap();
    drop(tx); // the end of the upload
    wait_for("the server to read the whole upload", SLACK, || server.bodies_read() == 1).await;

    // Dials held: only the pooled connection can serve this.
    connector.hold(true);
    let req = http::Request::get(server.uri("/next")).body(empty()).unwrap();
    let res = tokio::time::timeout(SLACK, svc.ready().await.unwrap().call(req))
        .await
        .expect("the connection came back to the pool after the upload ended")
        .expect("the next request works");
    connector.hold(false);
    assert_eq!(conn(&res), first, "reused once both directions were done");
    let body = read_all(res.into_body()).await.unwrap();
    assert!(body == body_bytes(19, LEN), "intact body");
    assert_eq!(server.accepted(), 1, "one connection");
}

/// Same, but the caller aborts the upload after the answer was drained: the
/// drain still counts as drained (the answer was read to its end), but hyper
/// closes the connection for the broken request, and the next request dials.
#[tokio::test]
async fn upload_aborted_after_the_drain_closes_the_connection() {
    let Upload { server, stats, mut svc, tx, first, .. } = drop_answer_mid_upload().await;
    assert_eq!(counted(&stats.snapshot()), Counted::drained(1));
    // The connection is not idle (the upload is in progress), so it is not
    // in the pool whether or not hyper has acted on the abort yet.
    tx.send(Err(std::io::Error::other("the caller gave up on the upload"))).await.unwrap();

    let req = http::Request::get(server.uri("/next")).body(empty()).unwrap();
    let res = svc.ready().await.unwrap().call(req).await.unwrap();
    assert_ne!(conn(&res), first, "the aborted upload's connection is closed");
    let body = read_all(res.into_body()).await.unwrap();
    assert!(body == body_bytes(19, LEN), "intact body");
    wait_for("the server to finish the second request", SLACK, || server.bodies_read() == 1).await;
    assert_eq!(server.accepted(), 2, "the aborted upload's connection was not reused");
}
