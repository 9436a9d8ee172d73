//! The connection matrix: for one server, each body size is a cell; each cell
//! runs `N` sequential GETs with seven clients, each with its own fresh
//! hyper-util `Client` (own pool, own counting connector) and a fresh count
//! at the server (two readings subtracted):
//!
//! - `alone`: hyper-util alone, body dropped unread;
//! - `layer`: under `DrainOnDropLayer::new()` (the default budgets, as
//!   shipped), body dropped unread;
//! - `layer 30 s`: the same with a time budget of [`SECONDS`], so that only
//!   bytes and framing decide, whatever the machine's speed;
//! - `alone, 1 frame`, `layer, 1 frame` and `layer 30 s, 1 frame`: the same
//!   after reading one data frame;
//! - `read-to-end`: hyper-util alone, every body read to its end (the control).
//!
//! Asserted in every cell and run, on any machine (the 30 s clients): every
//! early drop is drained or decided by the byte budget (none runs out of
//! time, fails or is skipped for another reason), and where the layer drained every
//! early drop and hyper alone loses most connections, the layer keeps at
//! least half of them against the read-to-end control
//! ([`assert_keeps_half`](crate::support::assert_keeps_half)'s argument).
//! Reported, not asserted: the default budgets' columns and issue 10's bound
//! on them (with the layer, no more connections than hyper-util alone, and
//! no more than read-to-end + 1 where it drained): both rest on
//! hyper-util's checkout race and on 50 ms drains, which a busy machine
//! changes.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, DrainSnapshot, Reason};
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderValue, Request, Response};
use http_body_util::Empty;
use tower::{Service, ServiceBuilder, ServiceExt};

use crate::servers::{Server, ServerCounts};
use crate::support::{self, CountingConnector, KIB, SECONDS, keeps_half_bound, read_all, read_one_frame};

/// Sequential requests per client and cell.
pub(crate) const N: usize = 100;

/// How the server frames the body, asserted on every response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    ContentLength,
    Chunked,
}

/// One kind of response of one server: a row group of the table.
pub(crate) struct Target {
    pub(crate) name: &'static str,
    /// Path and query for a body of `len` bytes (the runner adds `i=`).
    pub(crate) path: fn(usize) -> String,
    pub(crate) framing: Framing,
    /// Sent with `Accept-Encoding: gzip`; the response must be gzip-encoded.
    pub(crate) gzip: bool,
    pub(crate) sizes_kib: &'static [usize],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    Unread,
    OneFrame,
    ToEnd,
}

/// The time budget of a client with the layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TimeBudget {
    /// `DrainOnDropLayer::new()`'s.
    Default,
    /// [`SECONDS`].
    Seconds,
}

#[derive(Clone, Copy, Debug)]
struct Variant {
    layer: Option<TimeBudget>,
    read: Read,
    label: &'static str,
}

const VARIANTS: [Variant; 7] = [
    Variant { layer: None, read: Read::Unread, label: "alone" },
    Variant { layer: Some(TimeBudget::Default), read: Read::Unread, label: "layer" },
    Variant { layer: Some(TimeBudget::Seconds), read: Read::Unread, label: "layer 30 s" },
    Variant { layer: None, read: Read::OneFrame, label: "alone, 1 frame" },
    Variant { layer: Some(TimeBudget::Default), read: Read::OneFrame, label: "layer, 1 frame" },
    Variant { layer: Some(TimeBudget::Seconds), read: Read::OneFrame, label: "layer 30 s, 1 frame" },
    Variant { layer: None, read: Read::ToEnd, label: "read-to-end" },
];
const ALONE: usize = 0;
const LAYER: usize = 1;
const LAYER_30: usize = 2;
const ALONE_ONE_FRAME: usize = 3;
const LAYER_ONE_FRAME: usize = 4;
const LAYER_30_ONE_FRAME: usize = 5;
const TO_END: usize = 6;

/// What one client saw in one cell.
struct Run {
    /// New connections counted at the client's connector (= the server's `accepted`).
    connections: u64,
    /// Of those, connections that carried a request, counted at the server.
    served: u64,
    snapshot: Option<DrainSnapshot>,
    /// Body bytes of the last response read to its end (on the wire, before
    /// any decoding).
    body_len: Option<usize>,
}

/// How many times each cell runs: `INTEROP_RUNS`, default 5. Every run is
/// judged on its own; the runs show how the counts spread (issue 10's bound
/// on the default budgets is reported on medians: one run's count at the
/// floor, 1 against 2, is the noise of hyper-util's checkout race, which the
/// read-to-end control shows too).
pub(crate) fn runs() -> usize {
    std::env::var("INTEROP_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5).max(1)
}

/// One cell over every run: its name, each variant's connections per run,
/// and per default-budget layer variant whether it counted early drops and
/// drained any.
type CellRuns = (String, [Vec<u64>; 7], [(bool, bool); 2]);

/// What the cells of a group are held to, on any machine (the 30 s clients).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bound {
    /// Every early drop drained or decided by the byte budget; where the
    /// layer drained every early drop and hyper alone loses most connections, the layer
    /// keeps at least half of them against read-to-end.
    KeepsHalf,
    /// Only the outcomes: servers that send the body a Nagle delay after the
    /// head, where the next request of a caller that does not wait for the
    /// body dials while the drain waits for the delayed ACK (read-to-end
    /// waits ~40 ms per request instead), however long the time budget.
    OutcomesOnly,
}

/// Whether `INTEROP_CELLS` (a comma-separated list of substrings; all cells
/// when unset) selects this cell, to rerun a few while investigating.
fn selected(cell: &str) -> bool {
    std::env::var("INTEROP_CELLS").map_or(true, |f| f.split(',').any(|part| cell.contains(part.trim())))
}

/// Every reason with a count, by its name (`over_bytes`, `declared_over_budget`, ...).
pub(crate) fn reasons(s: &DrainSnapshot) -> impl Iterator<Item = (&'static str, u64)> + '_ {
    s.iter().filter(|&(r, _)| r != drain_on_drop::Reason::EndOfBody).map(|(r, n)| (r.as_str(), n))
}

/// `drained 98, abandoned 2 (abandoned_over_bytes 2)`: outcomes and the
/// reasons that are not zero.
pub(crate) fn outcomes(s: &DrainSnapshot) -> String {
    let mut out: Vec<String> =
        [("drained", s.drained), ("abandoned", s.abandoned), ("skipped", s.skipped), ("failed", s.failed)]
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
    let why: Vec<String> =
        reasons(s).filter(|&(_, n)| n > 0).map(|(name, n)| format!("{name} {n}")).collect();
    if !why.is_empty() {
        out.push(format!("({})", why.join(", ")));
    }
    if out.is_empty() { "no early drop counted".into() } else { out.join(", ") }
}

/// What breaks, on any machine, in one run of one cell: a 30 s client with
/// an early drop that was neither drained nor decided by the byte budget
/// (it ran out of time, failed, or was skipped for another reason), or (for
/// [`Bound::KeepsHalf`]) one that drained every early drop yet kept less
/// than half of what hyper alone lost against read-to-end.
fn check(results: &[Run], bound: Bound) -> Vec<String> {
    let mut broken = Vec::new();
    for (layer, alone) in [(LAYER_30, ALONE), (LAYER_30_ONE_FRAME, ALONE_ONE_FRAME)] {
        let what = VARIANTS[layer].label;
        let Some(s) = results[layer].snapshot else { continue };
        // What bytes and framing decide: drained, skipped for a declared
        // length over the byte budget, or given up past it.
        let by_bytes = s.drained + s.count(Reason::DeclaredOverBudget) + s.count(Reason::OverBytes);
        if by_bytes != s.drained + s.abandoned + s.skipped + s.failed {
            broken.push(format!(
                "{what}: an early drop neither drained nor decided by the byte budget (out of {SECONDS:?}, \
                 failed, skipped): {}",
                outcomes(&s)
            ));
        }
        let early = s.drained + s.abandoned + s.skipped + s.failed;
        let (conns, alone, control) =
            (results[layer].connections, results[alone].connections, results[TO_END].connections);
        let bound_applies = bound == Bound::KeepsHalf && early > 0 && s.drained == early;
        if bound_applies && alone >= N as u64 / 2 {
            let most = keeps_half_bound(alone as usize, control as usize) as u64;
            if conns > most {
                broken.push(format!(
                    "{what} {conns} > {most}: keeps half of what hyper alone ({alone}) loses against read-to-end ({control})"
                ));
            }
        }
    }
    for i in [LAYER, LAYER_ONE_FRAME] {
        if let Some(s) = results[i].snapshot
            && s.failed > 0
        {
            broken.push(format!("{}: an early drop failed: {}", VARIANTS[i].label, outcomes(&s)));
        }
    }
    broken
}

/// Runs every cell of `targets` `runs()` times, prints a table per run and a
/// summary, and returns what broke (see [`check`]).
pub(crate) async fn matrix(server: &Server, targets: &[Target], bound: Bound) -> Vec<String> {
    let runs = runs();
    let mut failures = Vec::new();
    // (target, size) -> per variant, the connections of every run; and per
    // default-budget layer variant whether it counted early drops, and
    // drained any.
    let mut all: Vec<CellRuns> = Vec::new();
    for run in 1..=runs {
        let mut table = format!(
            "\n{} ({}), run {run} of {runs}: {N} sequential GETs per client, new connections (client = server):\n\
             | cell | body on the wire | alone | layer | layer 30 s | alone, 1 frame | layer, 1 frame | layer 30 s, 1 frame | read-to-end | layer outcomes | layer, 1 frame outcomes | layer 30 s outcomes | layer 30 s, 1 frame outcomes | issue 10 bound (reported) | holds |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
            server.name, server.version
        );
        let mut cell_index = 0;
        for target in targets {
            for &kib in target.sizes_kib {
                let cell = format!("{} {kib} KiB", target.name);
                if !selected(&cell) {
                    continue;
                }
                let mut results = Vec::new();
                for variant in VARIANTS {
                    results.push(run_variant(server, target, kib * KIB, variant).await);
                }
                let conns: Vec<u64> = results.iter().map(|r| r.connections).collect();
                let acted = [LAYER, LAYER_ONE_FRAME].map(|i| {
                    results[i].snapshot.as_ref().map_or((false, false), |s| {
                        (s.drained + s.abandoned + s.skipped + s.failed > 0, s.drained > 0)
                    })
                });
                let issue_10 = issue_10_bound(&conns.iter().map(|&c| vec![c]).collect::<Vec<_>>(), acted);
                let broken = check(&results, bound);
                let wire = results[TO_END].body_len.map_or("?".into(), |n| {
                    format!("{n} B{}", if target.gzip { " gzip, chunked" } else { "" })
                });
                let shown = |i: usize| {
                    let r = &results[i];
                    if r.served == r.connections {
                        r.connections.to_string()
                    } else {
                        format!("{} ({} served)", r.connections, r.served)
                    }
                };
                let snap = |i: usize| results[i].snapshot.as_ref().map_or(String::new(), outcomes);
                let verdict = |v: &[String]| {
                    if v.is_empty() { "yes".to_string() } else { format!("**NO**: {}", v.join("; ")) }
                };
                writeln!(
                    table,
                    "| {cell} | {wire} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    shown(ALONE),
                    shown(LAYER),
                    shown(LAYER_30),
                    shown(ALONE_ONE_FRAME),
                    shown(LAYER_ONE_FRAME),
                    shown(LAYER_30_ONE_FRAME),
                    shown(TO_END),
                    snap(LAYER),
                    snap(LAYER_ONE_FRAME),
                    snap(LAYER_30),
                    snap(LAYER_30_ONE_FRAME),
                    verdict(&issue_10),
                    verdict(&broken),
                )
                .unwrap();
                for b in broken {
                    failures.push(format!("{cell}, run {run}: {b}"));
                }
                if all.len() <= cell_index {
                    all.push((cell.clone(), Default::default(), [(false, false); 2]));
                }
                for (i, &c) in conns.iter().enumerate() {
                    all[cell_index].1[i].push(c);
                }
                for (k, (early, drained)) in acted.into_iter().enumerate() {
                    all[cell_index].2[k].0 |= early;
                    all[cell_index].2[k].1 |= drained;
                }
                cell_index += 1;
            }
        }
        println!("{table}");
    }
    if runs > 1 {
        let mut summary = format!(
            "\n{} ({}), {runs} runs: median [min-max] new connections per {N} GETs:\n\
             | cell | alone | layer | layer 30 s | alone, 1 frame | layer, 1 frame | layer 30 s, 1 frame | read-to-end | issue 10 bound on medians (reported) |\n|---|---|---|---|---|---|---|---|---|\n",
            server.name, server.version
        );
        for (cell, per_variant, acted) in &all {
            let cols: Vec<String> = per_variant.iter().map(|v| spread(v)).collect();
            let issue_10 = issue_10_bound(per_variant, *acted);
            let verdict =
                if issue_10.is_empty() { "yes".to_string() } else { format!("no: {}", issue_10.join("; ")) };
            writeln!(summary, "| {cell} | {} | {verdict} |", cols.join(" | ")).unwrap();
        }
        println!("{summary}");
    }
    failures
}

/// Issue 10's bound on the default budgets, reported (not asserted): the
/// median of the layer's runs against each control's worst run (hyper alone
/// and read-to-end both vary at the floor: 1 or 2 connections per 100, a
/// dial that lost hyper-util's checkout race showing as "2 (1 served)"). A
/// layer variant that counted no early drop (a one-frame read that took the
/// whole body) did what hyper alone did and is not judged; read-to-end + 1
/// applies where the layer drained bodies (not to bodies declared over its
/// budget, which it skips exactly as hyper alone closes them). The
/// read-to-end control itself varies from run to run (1 to 23 new
/// connections per 100 seen on the multi-thread runtime) with hyper-util's
/// checkout race, and 50 ms drains run out of time on a busy machine.
fn issue_10_bound(per_variant: &[Vec<u64>], acted: [(bool, bool); 2]) -> Vec<String> {
    let median = |i: usize| {
        let mut v = per_variant[i].clone();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let worst_read_to_end = per_variant[TO_END].iter().copied().max().unwrap_or(0);
    let mut broken = Vec::new();
    for (k, (layer, alone)) in [(LAYER, ALONE), (LAYER_ONE_FRAME, ALONE_ONE_FRAME)].into_iter().enumerate() {
        let (early, drained) = acted[k];
        if !early {
            continue;
        }
        let what = VARIANTS[layer].label;
        let worst_alone = per_variant[alone].iter().copied().max().unwrap_or(0);
        if median(layer) > worst_alone {
            broken.push(format!("{what} {} > hyper alone {worst_alone}", median(layer)));
        }
        if drained && median(layer) > worst_read_to_end + 1 {
            broken.push(format!("{what} {} > read-to-end {worst_read_to_end} + 1", median(layer)));
        }
    }
    broken
}

/// `median [min-max]` of the values (`median` alone when they are all equal).
pub(crate) fn spread(values: &[u64]) -> String {
    let mut v = values.to_vec();
    v.sort_unstable();
    let (min, max, median) = (v[0], v[v.len() - 1], v[v.len() / 2]);
    if min == max { format!("{median}") } else { format!("{median} [{min}-{max}]") }
}

/// One client, `N` requests, then the counts once everything settled.
async fn run_variant(server: &Server, target: &Target, len: usize, variant: Variant) -> Run {
    let before = server.counts().await;
    let (client, connector) = support::client();
    let (body_len, snapshot) = if let Some(budget) = variant.layer {
        let layer = match budget {
            TimeBudget::Default => DrainOnDropLayer::new(),
            TimeBudget::Seconds => DrainOnDropLayer::new().max_time(SECONDS),
        };
        let stats = layer.stats();
        let svc = ServiceBuilder::new().layer(layer).service(client);
        let body_len = requests(svc, server, target, len, variant).await;
        let deadline = SECONDS + Duration::from_secs(5);
        assert!(stats.wait_idle(deadline).await, "the layer's drains should end: {stats:?}");
        (body_len, Some(stats.snapshot()))
    } else {
        (requests(client, server, target, len, variant).await, None)
    };
    let counts = settle(server, before, &connector, N as u64).await;
    let what = format!("{} {} KiB {}", target.name, len / KIB, variant.label);
    assert!(counts.served <= counts.accepted, "{what}: served connections ≤ accepted: {counts:?}");
    Run { connections: counts.accepted, served: counts.served, snapshot, body_len }
}

/// Waits (at most 5 s) until the server saw `requests` requests and accepted
/// exactly the connections the client opened (a dial that lost hyper-util's
/// checkout race finishes in the background), and returns its counts.
pub(crate) async fn settle(
    server: &Server,
    before: ServerCounts,
    connector: &CountingConnector,
    requests: u64,
) -> ServerCounts {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let delta = server.counts().await - before;
        let client = connector.count() as u64;
        if delta.requests == requests && delta.accepted == client {
            return delta;
        }
        assert!(
            Instant::now() < deadline,
            "{}: the connections counted at the client ({client}) and at the server ({delta:?}) \
             agree, and the server saw {requests} requests, within 5 s",
            server.name
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends `N` GETs one after the other through `svc`, reading each body as
/// the variant says; returns the length of the last body read to the end.
/// The query names the request and the client (`i=7&client=layer`), for the
/// server's logs.
async fn requests<S, B>(
    mut svc: S,
    server: &Server,
    target: &Target,
    len: usize,
    variant: Variant,
) -> Option<usize>
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    let mut body_len = None;
    let read = variant.read;
    let client = variant.label.replace(", ", "-").replace(' ', "-");
    for i in 0..N {
        let path = (target.path)(len);
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut req = support::get(server.uri(&format!("{path}{sep}i={i}&client={client}")));
        if target.gzip {
            req.headers_mut().insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        }
        let what = format!("{} {} KiB, request {i} ({read:?})", target.name, len / KIB);
        let res = svc
            .ready()
            .await
            .expect("client ready")
            .call(req)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        check_head(&res, target, len, &what);
        let mut body = res.into_body();
        match read {
            Read::Unread => {}
            Read::OneFrame => {
                read_one_frame(&mut body).await.unwrap_or_else(|| panic!("{what}: at least one data frame"));
            }
            Read::ToEnd => {
                let n = read_all(&mut body).await.unwrap_or_else(|e| panic!("{what}: {e:?}")).len();
                if !target.gzip {
                    assert_eq!(n, len, "{what}: the whole body arrives");
                }
                body_len = Some(n);
            }
        }
        drop(body);
    }
    body_len
}

/// The response is a 200 framed (and encoded) the way the cell says.
fn check_head<B>(res: &Response<B>, target: &Target, len: usize, what: &str) {
    let header = |name| res.headers().get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    assert_eq!(res.status(), 200, "{what}: status");
    match target.framing {
        Framing::ContentLength => {
            assert_eq!(
                header(CONTENT_LENGTH),
                Some(len.to_string().as_str()),
                "{what}: Content-Length framing"
            );
        }
        Framing::Chunked => {
            assert_eq!(header(CONTENT_LENGTH), None, "{what}: no Content-Length");
            assert_eq!(header(TRANSFER_ENCODING), Some("chunked"), "{what}: chunked framing");
        }
    }
    if target.gzip {
        assert_eq!(header(CONTENT_ENCODING), Some("gzip"), "{what}: compressed on the fly");
    }
}
