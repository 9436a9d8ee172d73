//! The http2 bench's fault cells: hyper-util alone, the README's HTTP/2
//! stack and Go's client, each with a server, proxy and client of its own,
//! over TLS by ALPN, when something goes wrong between them:
//!
//! - [`Fault::Stalled`]: a TCP proxy ([`StallProxy`]) in front of the
//!   server accepts every `every`th new connection, the first among them,
//!   and never answers it (nothing forwarded, held open until the end of
//!   the run), forwarding the others: a stuck backend behind a balancer.
//!   hyper-rustls puts no limit on a handshake.
//! - [`Fault::FailingDials`]: no server, a listener ([`ClosingListener`])
//!   that accepts each connection and closes it unanswered after a while:
//!   every dial fails, late.
//! - [`Fault::Recycling`]: the cell's server ends each connection after a
//!   number of requests with GOAWAY NO_ERROR (nginx's `keepalive_requests`).
//! - [`Fault::OneRefusal`]: Node's server refuses one stream in its life with
//!   RST_STREAM ENHANCE_YOUR_CALM, after the client's 2nd reset on that
//!   connection (`/calm/N` of `tests/node/h2server.js`).
//! - [`Fault::RandomLimits`]: a server punishing each connection once the
//!   client's resets on it pass a limit of its own, drawn between `lo` and
//!   `hi` (`h2limits.rs`: refusals, then GOAWAY); it counts the connections
//!   it punished.
//!
//! Each caller sends GETs one after the other, dropping each body right
//! after its head, each request under a time limit of its own (it fails
//! when that expires), until the run's requests were sent or its time limit
//! passed (no request starts after it). Per run: requests failed (an error,
//! a timeout, or a status other than 200), each request's time from the
//! call to its head or failure (p50, p99; failed requests included, a
//! timed-out one with its time limit), when the last failure came (from the
//! run's start), the connections dialed (the TLS connections a
//! [`FrameCounter`] in front of everything counts), and the client
//! process's memory: the growth of its resident memory over the run (VmRSS
//! in `/proc/self/status`, the resident pages `/proc/self/statm` gives,
//! before the client is built and after the last request, the client still
//! alive) and its most resident memory (VmHWM). So that this is the
//! client's alone, the Rust clients run in a process of their own: this
//! bench's binary again, `--fault-client` ([`client_main`]); the servers,
//! proxies and the frame counter stay in the bench's process (or their
//! own). Go's client measures itself the same way (`goclient h2 -timeout D
//! -latency`).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, RetryRefusedLayer};
use http::{Request, Response, Uri};
use http_body_util::Empty;
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::task::{JoinHandle, JoinSet};
use tower::{Service, ServiceExt};

use super::BoxError;
use super::frames::FrameCounter;
#[path = "h2limits.rs"]
mod h2limits;
use super::h2::{Road, Run};
use super::h2report::{FaultFigures, Figures, Policy};
use super::run::Runtimes;
use super::servers::{Server, ServerKind};
use super::tls::Tls;
use h2limits::{LimitServer, Limits};

/// What goes wrong in a fault cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Every `every`th new TCP connection, the first among them, accepted
    /// by a proxy in front of the server and never answered.
    Stalled { every: usize },
    /// Every connection accepted and closed unanswered after `after_ms`; no
    /// server.
    FailingDials { after_ms: u64 },
    /// The cell's server ends each connection with GOAWAY NO_ERROR after a
    /// number of requests (`ServerKind::Nginx(Some(n))`).
    Recycling,
    /// Node refuses one stream in its life with ENHANCE_YOUR_CALM, after
    /// the client's 2nd reset on a connection (`/calm/N`).
    OneRefusal,
    /// Each connection punished past a limit of resets of its own, drawn
    /// between `lo` and `hi` (`h2limits.rs`); no other server.
    RandomLimits { lo: usize, hi: usize },
}

impl Fault {
    /// The words a cell's label starts with (after `fault: `).
    pub fn label(self) -> String {
        match self {
            Fault::Stalled { every } => format!("every {}th handshake stalled", every),
            Fault::FailingDials { after_ms } => format!("dials closed after {after_ms} ms"),
            Fault::Recycling => "recycling".into(),
            Fault::OneRefusal => "one refusal then none".into(),
            Fault::RandomLimits { lo, hi } => format!("random limits {lo}-{hi}"),
        }
    }

    /// Whether the cell runs the cell's server (failing dials have none;
    /// random limits, its own).
    pub fn has_server(self) -> bool {
        !matches!(self, Fault::FailingDials { .. } | Fault::RandomLimits { .. })
    }
}

/// One fault cell's run, as `benches/http2.rs` sets it.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    pub fault: Fault,
    pub server: ServerKind,
    /// Body length asked for.
    pub len: usize,
    pub callers: usize,
    /// Requests in all, unless `limit` passes first.
    pub requests: usize,
    /// No request starts after this.
    pub limit: Duration,
    /// Each request's own time limit.
    pub timeout: Duration,
}

impl Setup {
    /// The path asked for: `/` of hyper's server, `/calm/N` of Node's when
    /// it refuses once, else `/len/N`.
    fn path(&self) -> String {
        match (self.server, self.fault) {
            (ServerKind::Hyper, _) | (_, Fault::RandomLimits { .. }) => "/".into(),
            (_, Fault::OneRefusal) => format!("/calm/{}", self.len),
            _ => format!("/len/{}", self.len),
        }
    }
}

/// One run of `policy` (`None`: read-to-end, which the fault cells skip,
/// or Go's client when it was not built).
pub fn run(
    runtimes: &Runtimes,
    tls: &Tls,
    go: Option<&Path>,
    policy: Policy,
    setup: &Setup,
) -> Result<Option<Figures>, BoxError> {
    match policy {
        Policy::ReadToEnd => return Ok(None),
        Policy::Go if go.is_none() => return Ok(None),
        _ => {}
    }
    let rt = runtimes.server.handle();
    let server = match setup.fault.has_server() {
        true => Some(Server::start(setup.server, rt, setup.len, Some(tls))?),
        false => None,
    };
    // client -> frame counter -> [stall proxy | closing listener] -> server
    let mut stall = None;
    let mut closing = None;
    let mut limited = None;
    let upstream = match (setup.fault, &server) {
        (Fault::RandomLimits { lo, hi }, _) => {
            let s = LimitServer::start(rt, tls, Limits { lo, hi, seed: 54 })?;
            let addr = s.addr();
            limited = Some(s);
            addr
        }
        (Fault::FailingDials { after_ms }, _) => {
            let l = ClosingListener::start(rt, Duration::from_millis(after_ms));
            let addr = l.addr();
            closing = Some(l);
            addr
        }
        (Fault::Stalled { every }, Some(server)) => {
            let p = StallProxy::start(rt, server.addr(), every);
            let addr = p.addr();
            stall = Some(p);
            addr
        }
        (_, Some(server)) => server.addr(),
        (_, None) => return Err("a fault cell without a server".into()),
    };
    let counter = FrameCounter::opaque(rt, upstream);
    let uri: Uri = format!("https://localhost:{}{}", counter.addr().port(), setup.path()).parse()?;
    let mut notes = Vec::new();
    let (run, mut fault) = match policy {
        Policy::Go => {
            let bin = go.expect("checked");
            let g = super::go::h2_faults(
                bin,
                &uri,
                setup.callers,
                setup.requests,
                setup.limit,
                setup.timeout,
                tls.ca_pem_path(),
            )?;
            let run = Run {
                sent: g.run.sent,
                failed: g.run.failed,
                elapsed: g.run.elapsed,
                first_error: g.run.first_error,
            };
            let fault = FaultFigures {
                p50: g.p50,
                p99: g.p99,
                last_failure: g.last_failure,
                rss_growth_kib: g.rss_growth_kib,
                max_rss_kib: Some(g.max_rss_kib),
                punished: None,
            };
            (run, fault)
        }
        Policy::HyperAlone | Policy::Stack => {
            let child = run_child(policy, &uri, setup, tls.ca_pem_path())?;
            if !child.notes.is_empty() {
                notes.push(child.notes);
            }
            (child.run, child.fault)
        }
        Policy::ReadToEnd => unreachable!("read-to-end returned above"),
    };
    // The proxies' counts catch up with the client's last connections.
    std::thread::sleep(Duration::from_millis(100));
    let frames = counter.counts();
    if let Some(p) = &stall {
        notes.push(format!("held {}", p.held()));
    }
    if let Some(l) = &closing {
        notes.push(format!("closed {}", l.accepted()));
    }
    if let Some(s) = &limited {
        fault.punished = Some(s.punished());
        if s.accepted() != frames.connections {
            notes.push(format!("server accepted {}", s.accepted()));
        }
    }
    if let Some(server) = &server {
        let note = server.note(&runtimes.client, frames.connections);
        if !note.is_empty() {
            notes.push(note);
        }
    }
    let total = run.elapsed;
    Ok(Some(Figures { run, frames, total, drains: None, note: notes.join("; "), fault: Some(fault) }))
}

/// The first argument of this bench's binary run as a fault cell's client.
pub const CLIENT_FLAG: &str = "--fault-client";

/// What a client process reported.
struct ChildRun {
    run: Run,
    fault: FaultFigures,
    /// The layer's drain reasons (the stack).
    notes: String,
}

/// Runs `policy`'s client (hyper-util alone or the README's stack) in a
/// process of its own: this binary with [`CLIENT_FLAG`] (see
/// [`client_main`]).
fn run_child(policy: Policy, uri: &Uri, setup: &Setup, ca_pem: &Path) -> Result<ChildRun, BoxError> {
    let name = match policy {
        Policy::HyperAlone => "alone",
        Policy::Stack => "stack",
        _ => return Err(format!("no client process for {policy:?}").into()),
    };
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args([CLIENT_FLAG, name, &uri.to_string()]);
    cmd.args([setup.callers, setup.requests].map(|n| n.to_string()));
    cmd.args([setup.limit, setup.timeout].map(|d| d.as_millis().to_string()));
    cmd.arg(ca_pem);
    let out = cmd.output().map_err(|e| format!("running {cmd:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{cmd:?} failed ({}): {}", out.status, stderr.trim()).into());
    }
    stdout
        .lines()
        .rev()
        .find_map(parse_child)
        .ok_or_else(|| format!("{cmd:?} printed no {CLIENT_LINE} line: {stdout:?}").into())
}

/// The first word of a client process's line.
const CLIENT_LINE: &str = "FAULT-CLIENT";

/// Reads a client process's line: [`CLIENT_LINE`], then tab-separated
/// sent, failed, elapsed, p50, p99 (µs), the last failure (µs, `-`: none),
/// the memory growth and the most resident (KiB), the notes, the first
/// error (may be empty).
fn parse_child(line: &str) -> Option<ChildRun> {
    let mut f = line.strip_prefix(CLIENT_LINE)?.strip_prefix('\t')?.splitn(10, '\t');
    let mut n = || f.next()?.parse::<i64>().ok();
    let (sent, failed, elapsed, p50, p99) = (n()?, n()?, n()?, n()?, n()?);
    let us = |v: i64| Duration::from_micros(v.max(0) as u64);
    let last = f.next()?;
    let last_failure = if last == "-" { None } else { Some(us(last.parse().ok()?)) };
    let mut n = || f.next()?.parse::<i64>().ok();
    let (growth, max) = (n()?, n()?);
    let notes = f.next()?.to_string();
    let first_error = f.next().filter(|e| !e.is_empty()).map(str::to_string);
    let run = Run { sent: sent as usize, failed: failed as usize, elapsed: us(elapsed), first_error };
    let fault = FaultFigures {
        p50: us(p50),
        p99: us(p99),
        last_failure,
        rss_growth_kib: growth,
        max_rss_kib: Some(max.max(0) as u64),
        punished: None,
    };
    Some(ChildRun { run, fault, notes })
}

/// The client process of a fault cell, `http2 --fault-client POLICY URI
/// CALLERS REQUESTS LIMIT_MS TIMEOUT_MS CA_PEM` (`args` without the
/// program): POLICY `alone` (hyper-util's client over hyper-rustls) or
/// `stack` (the README's HTTP/2 stack), on the TLS ALPN road, trusting the
/// certificate in CA_PEM, on a runtime as the bench's client runtime (2
/// workers). Prints one [`CLIENT_LINE`] line (see [`parse_child`]).
pub fn client_main(args: &[String]) -> Result<(), BoxError> {
    let [policy, uri, callers, requests, limit, timeout, ca] = args else {
        return Err(format!(
            "{CLIENT_FLAG} POLICY URI CALLERS REQUESTS LIMIT_MS TIMEOUT_MS CA_PEM, got {args:?}"
        )
        .into());
    };
    let uri: Uri = uri.parse()?;
    let ms = |v: &String| v.parse().map(Duration::from_millis);
    let load = Load {
        callers: callers.parse()?,
        requests: requests.parse()?,
        limit: ms(limit)?,
        timeout: ms(timeout)?,
    };
    let config = super::tls::client_trusting(Path::new(ca))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("client")
        .enable_all()
        .build()?;
    let before = status_kib("VmRSS");
    let (calls, notes) = match policy.as_str() {
        "alone" => {
            let client = super::h2::client_with(&config, Road::Alpn);
            let calls = rt.block_on(calls(&client, uri, load));
            (calls, String::new())
        }
        "stack" => {
            let l = DrainOnDropLayer::new();
            let svc = tower::ServiceBuilder::new()
                .layer(RetryRefusedLayer::new())
                .layer(l.clone())
                .service(super::h2::stack_client_with(&config, Road::Alpn));
            let calls = rt.block_on(calls(&svc, uri, load));
            let snapshot = l.stats().snapshot();
            let reasons: Vec<String> =
                snapshot.iter().filter(|(_, n)| *n > 0).map(|(r, n)| format!("{r} {n}")).collect();
            (calls, reasons.join(", "))
        }
        other => return Err(format!("{CLIENT_FLAG}: no policy {other:?} (alone, stack)").into()),
    };
    // The client is still alive here (dropped with its runtime below).
    let growth = status_kib("VmRSS") - before;
    let max = status_kib("VmHWM");
    let (run, fault) = calls.figures(growth);
    let us = |d: Duration| d.as_micros().to_string();
    let fields = [
        run.sent.to_string(),
        run.failed.to_string(),
        us(run.elapsed),
        us(fault.p50),
        us(fault.p99),
        fault.last_failure.map_or("-".into(), us),
        growth.to_string(),
        max.to_string(),
        notes,
        run.first_error.unwrap_or_default().replace(['\t', '\n'], " "),
    ];
    println!("{CLIENT_LINE}\t{}", fields.join("\t"));
    // Background dials stuck on a stalled handshake would keep the runtime
    // waiting on drop: leave them.
    rt.shutdown_background();
    Ok(())
}

/// What the Rust clients' callers saw.
struct Calls {
    run: Run,
    /// Each request's time from the call to its head or failure.
    took: Vec<Duration>,
    /// The last failure's time from the run's start.
    last_failure: Option<Duration>,
}

impl Calls {
    fn figures(mut self, rss_growth_kib: i64) -> (Run, FaultFigures) {
        self.took.sort_unstable();
        let fault = FaultFigures {
            p50: percentile(&self.took, 50.0),
            p99: percentile(&self.took, 99.0),
            last_failure: self.last_failure,
            rss_growth_kib,
            max_rss_kib: None,
            punished: None,
        };
        (self.run, fault)
    }
}

/// The nearest-rank `p`th percentile of `sorted` (zero when empty).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// What the callers of a client process do: [`Setup`]'s numbers.
#[derive(Clone, Copy, Debug)]
struct Load {
    callers: usize,
    requests: usize,
    limit: Duration,
    timeout: Duration,
}

/// `load.callers` tasks sharing `svc` send GETs for `uri` one after the
/// other until `load.requests` were sent or `load.limit` passed, each
/// under `load.timeout`, each body dropped right after its head.
async fn calls<S, B>(svc: &S, uri: Uri, load: Load) -> Calls
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug + Send,
    B: Send + 'static,
{
    struct Shared {
        run: Run,
        took: Vec<Duration>,
        last_failure: Option<Duration>,
    }
    let tickets = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Mutex::new(Shared { run: Run::default(), took: Vec::new(), last_failure: None }));
    let Load { callers, requests, limit, timeout } = load;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (mut svc, uri, tickets, stop, shared) =
            (svc.clone(), uri.clone(), tickets.clone(), stop.clone(), shared.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) && tickets.fetch_add(1, Ordering::Relaxed) < requests {
                if start.elapsed() >= limit {
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
                let req = Request::get(uri.clone()).body(Empty::new()).expect("request");
                let began = Instant::now();
                let head = tokio::time::timeout(timeout, async {
                    let ready = svc.ready().await.map_err(|e| format!("{e:?}"))?;
                    ready.call(req).await.map_err(|e| format!("{e:?}"))
                })
                .await;
                let took = began.elapsed();
                let result = match head {
                    Ok(Ok(res)) if res.status() == http::StatusCode::OK => Ok(()),
                    Ok(Ok(res)) => Err(format!("status {}", res.status())),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(format!("no head in {timeout:?}")),
                };
                let mut shared = shared.lock().expect("calls");
                shared.run.sent += 1;
                shared.took.push(took);
                if let Err(e) = result {
                    shared.run.failed += 1;
                    shared.run.first_error.get_or_insert(e);
                    shared.last_failure = Some(start.elapsed());
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("caller");
    }
    let elapsed = start.elapsed();
    let mut shared = shared.lock().expect("calls");
    let mut run = std::mem::take(&mut shared.run);
    run.elapsed = elapsed;
    Calls { run, took: std::mem::take(&mut shared.took), last_failure: shared.last_failure }
}

/// A figure of this process's `/proc/self/status` in KiB (`VmRSS`: resident
/// now, `VmHWM`: the most resident so far); 0 where it cannot be read.
pub fn status_kib(key: &str) -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A TCP proxy on `127.0.0.1:0` in front of `upstream` that holds every
/// `every`th new connection, the first among them, accepted and never
/// answered (nothing read from it or forwarded), open until the proxy is
/// dropped, and forwards the others both ways unchanged. Stops, closing
/// every connection, when dropped.
pub struct StallProxy {
    addr: SocketAddr,
    held: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl StallProxy {
    pub fn start(rt: &Handle, upstream: SocketAddr, every: usize) -> StallProxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("address");
        let held = Arc::new(AtomicUsize::new(0));
        let count = held.clone();
        let every = every.max(1);
        let task = rt.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("listener");
            let mut stalled = Vec::new();
            let mut relays = JoinSet::new();
            let mut n = 0usize;
            while let Ok((mut client, _)) = listener.accept().await {
                let k = n;
                n += 1;
                if k.is_multiple_of(every) {
                    count.fetch_add(1, Ordering::SeqCst);
                    stalled.push(client);
                    continue;
                }
                relays.spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else { return };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
                while relays.try_join_next().is_some() {}
            }
        });
        StallProxy { addr, held, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections held so far.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A listener on `127.0.0.1:0` that accepts every connection and closes it
/// `after` later without reading or writing a byte. Stops when dropped.
pub struct ClosingListener {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl ClosingListener {
    pub fn start(rt: &Handle, after: Duration) -> ClosingListener {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let task = rt.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("listener");
            let mut conns = JoinSet::new();
            while let Ok((conn, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                conns.spawn(async move {
                    tokio::time::sleep(after).await;
                    drop(conn);
                });
                while conns.try_join_next().is_some() {}
            }
        });
        ClosingListener { addr, accepted, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted (and closed, or to be) so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for ClosingListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}
