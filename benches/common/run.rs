//! Request loops: each run gets a fresh server (and proxy) and a fresh
//! client with its own pool, and ends once every dial and drain has ended.

use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use drain_on_drop::{DrainSnapshot, OriginSnapshot};
use http::Uri;
use tokio::runtime::{Builder, Runtime};
use tokio::task::JoinSet;

use super::BoxError;
use super::client::{BenchClient, Kind, Read};
use super::server::{Endpoint, Framing, Net};
use super::table::ms;

/// How long a run may take to go quiet after its last request.
const SETTLE: Duration = Duration::from_secs(5);

/// What each request asks for and how the caller treats the body.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub len: usize,
    pub framing: Framing,
    pub read: Read,
}

/// The median run of one policy in one cell of a bench comparing
/// policies, with the layer's estimates at the end of that run.
pub struct Measured {
    pub outcome: Outcome,
    pub origins: Vec<OriginSnapshot>,
    /// The total time of every run.
    pub times: Vec<Duration>,
}

impl Measured {
    /// Median absolute deviation of the runs' times from the median run.
    pub fn mad(&self) -> Duration {
        let median = self.outcome.elapsed;
        let mut deviations: Vec<Duration> = self.times.iter().map(|t| t.abs_diff(median)).collect();
        deviations.sort_unstable();
        deviations.get(deviations.len() / 2).copied().unwrap_or_default()
    }

    /// Whether `self` missing `self <= factor * other` (by the medians) is
    /// within the noise: by no more than the larger median absolute
    /// deviation of the two policies' runs. Never with a single run.
    pub fn within_noise(&self, other: &Measured, factor: f64) -> bool {
        let excess = self.outcome.elapsed.as_secs_f64() - factor * other.outcome.elapsed.as_secs_f64();
        self.times.len() > 1 && excess <= self.mad().max(other.mad()).as_secs_f64()
    }

    /// `min-max` of the runs' times, or `-` for a single run.
    pub fn spread(&self) -> String {
        match (self.times.iter().min(), self.times.iter().max()) {
            (Some(min), Some(max)) if self.times.len() > 1 => format!("{}-{}", ms(*min), ms(*max)),
            _ => "-".to_string(),
        }
    }
}

/// `repeat` rounds of every policy of a cell, each round running every
/// policy once (starting one policy further each round), so that drift on
/// the shared machine hits all policies alike; the median run of each.
/// `run(policy, round)` runs one, `round` counting from 1, and returns its
/// outcome and the layer's estimates at its end.
pub fn measure_rounds<P: Copy>(
    policies: &[P],
    repeat: usize,
    mut run: impl FnMut(P, usize) -> Result<(Outcome, Vec<OriginSnapshot>), BoxError>,
) -> Result<Vec<(P, Measured)>, BoxError> {
    let mut runs: Vec<Vec<(Outcome, Vec<OriginSnapshot>)>> = policies.iter().map(|_| Vec::new()).collect();
    for round in 1..=repeat {
        for k in 0..policies.len() {
            let i = (k + round - 1) % policies.len();
            runs[i].push(run(policies[i], round)?);
        }
    }
    let measured = policies.iter().zip(runs).map(|(policy, runs)| {
        let times = runs.iter().map(|(o, _)| o.elapsed).collect();
        let median = Outcome::median(runs.iter().map(|(o, _)| *o).collect());
        let origins =
            runs.into_iter().find(|(o, _)| o.elapsed == median.elapsed).map(|(_, s)| s).unwrap_or_default();
        (*policy, Measured { outcome: median, origins, times })
    });
    Ok(measured.collect())
}

/// What one run measured.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// Connections the client's connector opened.
    pub connections: usize,
    /// Connections the server accepted (should equal `connections`).
    pub accepted: usize,
    /// Of `connections`, those opened after half the requests had completed:
    /// what is left once the pool has warmed up.
    pub second_half: usize,
    pub requests: usize,
    /// From the first request to the last response handled.
    pub elapsed: Duration,
    /// Per-request latency (request sent to body dropped or read).
    pub p50: Duration,
    pub p99: Duration,
    /// The layer's counters, for the layer's runs.
    pub drains: Option<DrainSnapshot>,
    /// Dials and drains ended, and the server's count caught up, in time.
    pub settled: bool,
}

impl Outcome {
    pub fn requests_per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// The median of each figure over several runs (the drain counters are
    /// those of the run with the median time).
    pub fn median(mut runs: Vec<Outcome>) -> Outcome {
        assert!(!runs.is_empty(), "at least one run");
        fn mid<T: Ord + Copy>(mut v: Vec<T>) -> T {
            v.sort_unstable();
            v[v.len() / 2]
        }
        let connections = mid(runs.iter().map(|r| r.connections).collect());
        let accepted = mid(runs.iter().map(|r| r.accepted).collect());
        let second_half = mid(runs.iter().map(|r| r.second_half).collect());
        let p50 = mid(runs.iter().map(|r| r.p50).collect());
        let p99 = mid(runs.iter().map(|r| r.p99).collect());
        let settled = runs.iter().all(|r| r.settled);
        runs.sort_by_key(|r| r.elapsed);
        Outcome { connections, accepted, second_half, p50, p99, settled, ..runs[runs.len() / 2] }
    }

    /// Waits for the run to go quiet, then reads the counters. `at_half`:
    /// connections opened when half the requests had completed.
    async fn of(
        client: &BenchClient,
        endpoint: &Endpoint,
        elapsed: Duration,
        mut latencies: Vec<Duration>,
        at_half: usize,
    ) -> Outcome {
        let settled = client.settle(|| endpoint.accepted(), SETTLE).await;
        latencies.sort_unstable();
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
        Outcome {
            connections: client.connections(),
            accepted: endpoint.accepted(),
            second_half: client.connections() - at_half,
            requests: latencies.len(),
            elapsed,
            p50: at(0.50),
            p99: at(0.99),
            drains: client.drains(),
            settled,
        }
    }
}

/// The client runtime (where callers, hyper-util's connection tasks and the
/// drains run) and the server runtime (servers and proxies), 2 worker
/// threads each, so that the server's work is not scheduled behind the
/// client's tasks.
/// `n` sequential requests by `client` to `endpoint`, the `i`th (from 1) to
/// the URI and with the read that `request(i)` gives; `each` sees every
/// request's latency.
pub async fn sequential_on(
    endpoint: &Endpoint,
    mut client: BenchClient,
    n: usize,
    mut request: impl FnMut(usize) -> (Uri, Read),
    mut each: impl FnMut(usize, Duration, &BenchClient),
) -> Result<Outcome, BoxError> {
    let mut latencies = Vec::with_capacity(n);
    let mut at_half = 0;
    let start = Instant::now();
    for i in 1..=n {
        let (uri, read) = request(i);
        let sent = Instant::now();
        black_box(client.get(uri, read).await?);
        let latency = sent.elapsed();
        latencies.push(latency);
        each(i, latency, &client);
        if i == n / 2 {
            at_half = client.connections();
        }
    }
    let elapsed = start.elapsed();
    Ok(Outcome::of(&client, endpoint, elapsed, latencies, at_half).await)
}

pub struct Runtimes {
    pub client: Runtime,
    pub server: Runtime,
}

impl Runtimes {
    pub fn new() -> Runtimes {
        let build = |name: &str| {
            Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name(name)
                .enable_all()
                .build()
                .expect("tokio runtime")
        };
        Runtimes { client: build("client"), server: build("server") }
    }

    /// `repeat` runs of `run`, each on the client runtime; the median.
    fn median<F, Fut>(&self, repeat: usize, run: F) -> Outcome
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Outcome, BoxError>>,
    {
        let runs = (0..repeat.max(1)).map(|_| self.client.block_on(run()).expect("bench run")).collect();
        Outcome::median(runs)
    }

    /// `n` sequential requests by a fresh `kind` client to a fresh server.
    pub fn sequential(&self, net: &Net, kind: Kind, case: Case, n: usize, repeat: usize) -> Outcome {
        self.median(repeat, || self.sequential_run(net, BenchClient::new(kind, net), case, n, |_, _, _| {}))
    }

    /// One run (on the caller's runtime): `n` sequential requests by
    /// `client` (fresh, with its own pool) to a fresh server. `each` is
    /// called after every request with its number (from 1), its latency and
    /// the client.
    pub async fn sequential_run(
        &self,
        net: &Net,
        client: BenchClient,
        case: Case,
        n: usize,
        each: impl FnMut(usize, Duration, &BenchClient),
    ) -> Result<Outcome, BoxError> {
        let endpoint = Endpoint::start(self.server.handle(), net);
        let uri = endpoint.uri(case.len, case.framing);
        sequential_on(&endpoint, client, n, |_| (uri.clone(), case.read), each).await
    }

    /// `callers` tasks sharing one fresh `kind` client (one pool), each
    /// sending `per_caller` sequential requests to one fresh server.
    pub fn concurrent(
        &self,
        net: &Net,
        kind: Kind,
        case: Case,
        callers: usize,
        per_caller: usize,
        repeat: usize,
    ) -> Outcome {
        self.median(repeat, || async {
            let endpoint = Endpoint::start(self.server.handle(), net);
            let client = BenchClient::new(kind, net);
            let uri = endpoint.uri(case.len, case.framing);
            let half = callers * per_caller / 2;
            let done = Arc::new(AtomicUsize::new(0));
            let at_half = Arc::new(AtomicUsize::new(0));
            let start = Instant::now();
            let mut tasks = JoinSet::new();
            for _ in 0..callers {
                let (mut client, uri) = (client.clone(), uri.clone());
                let (done, at_half) = (done.clone(), at_half.clone());
                tasks.spawn(async move {
                    let mut latencies = Vec::with_capacity(per_caller);
                    for _ in 0..per_caller {
                        let sent = Instant::now();
                        black_box(client.get(uri.clone(), case.read).await?);
                        latencies.push(sent.elapsed());
                        if done.fetch_add(1, Ordering::SeqCst) + 1 == half {
                            at_half.store(client.connections(), Ordering::SeqCst);
                        }
                    }
                    Ok::<_, BoxError>(latencies)
                });
            }
            let mut latencies = Vec::with_capacity(callers * per_caller);
            while let Some(done) = tasks.join_next().await {
                latencies.extend(done??);
            }
            let elapsed = start.elapsed();
            let at_half = at_half.load(Ordering::SeqCst);
            Ok(Outcome::of(&client, &endpoint, elapsed, latencies, at_half).await)
        })
    }
}
