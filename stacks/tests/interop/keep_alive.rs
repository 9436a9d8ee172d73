//! A pooled connection that the server closes for being idle, and a request
//! sent on it at that instant.
//!
//! Node advertises `Keep-Alive: timeout=N` and destroys an idle socket
//! `keepAliveTimeout` + 1 s after its last response. Each trial reads one
//! response, waits until the instant the server closes (measured first, then
//! shifted by an offset from the list below), and sends a second request on
//! the same client.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::servers::Server;
use crate::support::{self, CountingConnector};

/// Trials per client configuration; they run staggered, in parallel.
pub(crate) const TRIALS: usize = 12;
/// Stagger between trial starts, so that no two trials hit their boundary at once.
const STAGGER: Duration = Duration::from_millis(60);

/// Where trial `i` sends its second request, relative to the measured close:
/// -5.5 ms to +5.5 ms, every 1 ms. The window where a request fails is about
/// 1 to 3 ms wide, and the probes' estimate of where it lies is off by up to
/// a few ms on a busy machine, so the sweep is wide.
pub(crate) fn offset_us(i: usize) -> i64 {
    -5500 + 1000 * i as i64
}

/// How long after its last response the server closes an idle connection,
/// and the `Keep-Alive` header it sent: the median of three raw TCP probes.
pub(crate) async fn idle_close(server: &Server) -> (Duration, String) {
    idle_close_of(server, "/cl?len=16").await
}

/// [`idle_close`] after a GET of `path` (a body of 16 bytes or more).
pub(crate) async fn idle_close_of(server: &Server, path: &'static str) -> (Duration, String) {
    let port = server.uri("/").port_u16().unwrap();
    let probes: Vec<_> = (0..3).map(|_| tokio::spawn(probe(port, path))).collect();
    let mut results = Vec::new();
    for probe in probes {
        results.push(probe.await.unwrap());
    }
    results.sort();
    results.swap_remove(1)
}

async fn probe(port: u16, path: &str) -> (Duration, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let keep_alive = loop {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the server answers the probe");
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        if buf.len() - end - 4 >= support::content_length_of(&head) {
            break head.lines().find_map(|l| l.strip_prefix("keep-alive:")).unwrap_or("").trim().to_string();
        }
    };
    let read_at = Instant::now();
    let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk))
        .await
        .expect("the server closes the idle connection within 30 s")
        .unwrap_or(0);
    assert_eq!(n, 0, "nothing after the response but the close");
    (read_at.elapsed(), keep_alive)
}

/// What the second request of one trial met.
#[derive(Debug)]
pub(crate) struct Trial {
    pub(crate) offset_us: i64,
    /// Connections the client opened for its two requests.
    pub(crate) connections: usize,
    /// `Ok`, or the error's kind (`IncompleteMessage`, `ConnectionReset`, ...).
    pub(crate) result: Result<(), String>,
}

/// Runs `TRIALS` trials for each client configuration, all staggered in one
/// batch: `pool_idle_timeout` of `Some(d)`, and hyper-util's default (90 s).
pub(crate) async fn trials(
    server: &Server,
    close_after: Duration,
    idle_timeout: Duration,
) -> (Vec<Trial>, Vec<Trial>) {
    let mut handles = Vec::new();
    for i in 0..TRIALS {
        for (c, timeout) in [Some(idle_timeout), None].into_iter().enumerate() {
            let start_after = STAGGER * (2 * i + c) as u32;
            let uri = server.uri("/cl?len=1024");
            handles.push(tokio::spawn(trial(uri, timeout, start_after, close_after, offset_us(i))));
        }
    }
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for (k, handle) in handles.into_iter().enumerate() {
        let trial = handle.await.unwrap();
        if k % 2 == 0 { with.push(trial) } else { without.push(trial) }
    }
    (with, without)
}

async fn trial(
    uri: http::Uri,
    idle_timeout: Option<Duration>,
    start_after: Duration,
    close_after: Duration,
    offset_us: i64,
) -> Trial {
    tokio::time::sleep(start_after).await;
    let connector = CountingConnector::new();
    let mut builder = Client::builder(TokioExecutor::new());
    builder.pool_timer(TokioTimer::new());
    if let Some(timeout) = idle_timeout {
        builder.pool_idle_timeout(timeout);
    }
    let client: support::TestClient = builder.build(connector.clone());
    let first = client.request(support::get(uri.clone())).await.expect("first request");
    first.into_body().collect().await.expect("first body");
    let boundary = if offset_us >= 0 {
        Instant::now() + close_after + Duration::from_micros(offset_us as u64)
    } else {
        Instant::now() + close_after - Duration::from_micros(offset_us.unsigned_abs())
    };
    // Sleep to just before the instant, then spin: the timer has 1 ms steps.
    tokio::time::sleep_until((boundary - Duration::from_millis(3)).into()).await;
    while Instant::now() < boundary {
        std::hint::spin_loop();
    }
    let result = match client.request(support::get(uri)).await {
        Ok(res) => res.into_body().collect().await.map(|_| ()).map_err(|e| kind(&e)),
        Err(e) => Err(kind(&e)),
    };
    Trial { offset_us, connections: connector.count(), result }
}

/// `IncompleteMessage`, an `io::ErrorKind` such as `ConnectionReset`, or the
/// error's text: the first recognised error in the source chain.
fn kind(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(hyper) = e.downcast_ref::<hyper::Error>()
            && hyper.is_incomplete_message()
        {
            return "IncompleteMessage".into();
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return format!("{:?}", io.kind());
        }
        current = e.source();
    }
    error.to_string()
}

/// One line per trial, and the tally.
pub(crate) fn report(label: &str, trials: &[Trial]) -> String {
    let mut out =
        format!("{label}:\n| offset from the close | connections | second request |\n|---|---|---|\n");
    for t in trials {
        let result = match &t.result {
            Ok(()) => "ok".to_string(),
            Err(kind) => format!("**{kind}**"),
        };
        writeln!(out, "| {:+.1} ms | {} | {result} |", t.offset_us as f64 / 1000.0, t.connections).unwrap();
    }
    let failed = trials.iter().filter(|t| t.result.is_err()).count();
    let reused = trials.iter().filter(|t| t.result.is_ok() && t.connections == 1).count();
    writeln!(
        out,
        "{failed} of {} failed; {reused} succeeded on the pooled connection, {} on a new one",
        trials.len(),
        trials.len() - failed - reused
    )
    .unwrap();
    out
}

/// What the README's HTTP/1 stack met over one sweep: the failures, and
/// what the layer counted.
pub(crate) struct StackSweep {
    pub(crate) failed: Vec<String>,
    pub(crate) reuse: drain_on_drop::ReuseSnapshot,
}

/// The README's HTTP/1 stack (`RetryRefusedLayer` above `layer`, over a
/// client built on `layer.observe(HttpConnector)`) on a fresh client.
fn stack(
    layer: &drain_on_drop::DrainOnDropLayer,
) -> tower::util::BoxCloneService<
    http::Request<http_body_util::Empty<bytes::Bytes>>,
    http::Response<drain_on_drop::DrainBody<hyper::body::Incoming>>,
    hyper_util::client::legacy::Error,
> {
    use hyper_util::client::legacy::connect::HttpConnector;
    let client = Client::builder(TokioExecutor::new())
        .build::<_, http_body_util::Empty<bytes::Bytes>>(layer.observe(HttpConnector::new()));
    let svc = tower::ServiceBuilder::new()
        .layer(drain_on_drop::RetryRefusedLayer::new())
        .layer(layer.clone())
        .service(client);
    tower::util::BoxCloneService::new(svc)
}

/// The layer sees one idle close of `server`, as a long-lived service
/// has: a GET of `path`, its connection then left idle until the server
/// closes it.
pub(crate) async fn warm_up(
    server: &Server,
    path: &str,
    layer: &drain_on_drop::DrainOnDropLayer,
    close_after: Duration,
) {
    use tower::{Service, ServiceExt};
    let mut svc = stack(layer);
    let req = support::get(server.uri(path));
    drop(svc.ready().await.unwrap().call(req).await.expect("the warm-up request"));
    let seen = || layer.origins().iter().map(|o| o.idle_closes).sum::<u64>() >= 1;
    support::wait_for("the layer to see the server's idle close", close_after + support::SLACK, seen).await;
}

/// [`TRIALS`] x 2 trials (GET, then POST) on fresh clients sharing `layer`:
/// a GET of `path` whose body is dropped (the layer drains it), then the
/// method at the server's idle close + an offset, staggered in one batch.
pub(crate) async fn stack_sweep(
    server: &Server,
    path: &'static str,
    close_after: Duration,
    layer: &drain_on_drop::DrainOnDropLayer,
) -> StackSweep {
    let before = layer.stats().reuse();
    let mut handles = Vec::new();
    for (m, method) in [http::Method::GET, http::Method::POST].into_iter().enumerate() {
        for i in 0..TRIALS {
            let (layer, uri) = (layer.clone(), server.uri(path));
            let start_after = STAGGER * (2 * i + m) as u32;
            handles.push(tokio::spawn(stack_trial(
                layer,
                uri,
                method.clone(),
                start_after,
                close_after,
                offset_us(i),
            )));
        }
    }
    let mut failed = Vec::new();
    for handle in handles {
        failed.extend(handle.await.unwrap());
    }
    StackSweep { failed, reuse: layer.stats().reuse().since(&before) }
}

async fn stack_trial(
    layer: drain_on_drop::DrainOnDropLayer,
    uri: http::Uri,
    method: http::Method,
    start_after: Duration,
    close_after: Duration,
    offset_us: i64,
) -> Option<String> {
    use tower::{Service, ServiceExt};
    tokio::time::sleep(start_after).await;
    let mut svc = stack(&layer);
    let first = svc.ready().await.unwrap().call(support::get(uri.clone())).await;
    drop(first.expect("first request"));
    assert!(layer.stats().wait_idle(support::SECONDS).await, "the drain ends");
    let boundary = if offset_us >= 0 {
        Instant::now() + close_after + Duration::from_micros(offset_us as u64)
    } else {
        Instant::now() + close_after - Duration::from_micros(offset_us.unsigned_abs())
    };
    tokio::time::sleep_until((boundary - Duration::from_millis(3)).into()).await;
    while Instant::now() < boundary {
        std::hint::spin_loop();
    }
    let mut req = support::get(uri);
    *req.method_mut() = method.clone();
    match svc.ready().await.unwrap().call(req).await {
        Ok(res) => res
            .into_body()
            .collect()
            .await
            .err()
            .map(|e| format!("{method} {offset_us} us: body {}", kind(&e))),
        Err(e) => Some(format!("{method} {offset_us} us: {}", kind(&e))),
    }
}
