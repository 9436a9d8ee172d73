//! Integrity under random traffic: sequences of requests with random body
//! sizes, framing, read patterns and server pauses, on one client per
//! sequence. Every byte a caller reads is the right byte, and every early
//! drop is counted exactly once, with the outcome its remaining length
//! implies.
//!
//! `cargo test --test integrity` runs 96 sequences (about 3,000 requests);
//! `DRAIN_PROPTEST_CASES=1000 cargo test --release --test integrity` runs more.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use drain_on_drop::{DrainOnDropLayer, Reason};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use support::*;
use tokio::runtime::{Builder, Runtime};
use tower::{Service, ServiceBuilder, ServiceExt};

/// A small byte budget keeps the sequences fast; bodies go up to twice it.
const BUDGET: u64 = 16 * KIB as u64;
const MAX_LEN: usize = 2 * BUDGET as usize;
const DEFAULT_CASES: u32 = 96;

#[derive(Clone, Copy, Debug)]
enum Framing {
    ContentLength,
    Chunked { chunk: usize },
}

#[derive(Clone, Copy, Debug)]
enum Read {
    /// Drop the body unread.
    Nothing,
    /// Read this many data frames (or up to the end), then drop.
    Frames(usize),
    /// Read to the end.
    All,
}

#[derive(Clone, Copy, Debug)]
struct Exchange {
    len: usize,
    framing: Framing,
    read: Read,
    /// The server pauses this long halfway through the body.
    pause_ms: u64,
}

fn exchange() -> impl Strategy<Value = Exchange> {
    let len = prop_oneof![
        1 => Just(0usize),
        1 => Just(BUDGET as usize),
        1 => Just(BUDGET as usize + 1),
        8 => 0..=MAX_LEN,
    ];
    let framing = prop_oneof![
        1 => Just(Framing::ContentLength),
        1 => (1usize..=64).prop_map(|chunk| Framing::Chunked { chunk }),
        2 => (65usize..=8192).prop_map(|chunk| Framing::Chunked { chunk }),
    ];
    let read = prop_oneof![
        2 => Just(Read::Nothing),
        2 => (1usize..=4).prop_map(Read::Frames),
        1 => Just(Read::All),
    ];
    let pause = prop_oneof![3 => Just(0u64), 1 => 1u64..=3];
    (len, framing, read, pause).prop_map(|(len, framing, read, pause_ms)| Exchange {
        len,
        framing,
        read,
        pause_ms,
    })
}

/// `GET /?seed=S&len=N&chunk=C&pause=P` (`chunk=0`: `Content-Length`).
fn script(head: &Head) -> Vec<Step> {
    let q = |name| query(&head.path, name).unwrap_or(0);
    let (seed, len, chunk, pause) = (q("seed"), q("len") as usize, q("chunk") as usize, q("pause"));
    let half = len / 2;
    let pause = Step::Sleep(Duration::from_millis(pause));
    let body = body_bytes(seed, len);
    if chunk == 0 {
        let mut first = cl_head(len);
        first.extend_from_slice(&body[..half]);
        vec![Step::Write(first), pause, Step::Write(body[half..].to_vec())]
    } else {
        // The second half starts with a fresh chunk; chunk contents are the
        // same bytes either way.
        let mut steps = vec![Step::Write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec())];
        for (part, range) in [(0, 0..half), (1, half..len)] {
            if part == 1 {
                steps.push(pause.clone());
            }
            let mut frames = Vec::new();
            for piece in body[range].chunks(chunk) {
                frames.extend(format!("{:x}\r\n", piece.len()).into_bytes());
                frames.extend_from_slice(piece);
                frames.extend_from_slice(b"\r\n");
            }
            steps.push(Step::Write(frames));
        }
        steps.push(Step::Write(b"0\r\n\r\n".to_vec()));
        steps
    }
}

/// What the layer must have counted after a sequence.
#[derive(Debug, Default, PartialEq, Eq)]
struct Expected {
    drained: u64,
    declared_over_budget: u64,
    over_bytes: u64,
    /// Exact bytes drained by the drains that reached the end.
    drained_bytes: u64,
    /// Chunked drops whose remainder ends within one chunk past the budget:
    /// drained if the frame that crossed the budget was the last, else
    /// abandoned over bytes (hyper may split chunks into smaller frames).
    either: u64,
    /// Largest frame that may cross the budget in an abandoned drain.
    max_chunk: u64,
}

/// Runs one sequence on a fresh server and client; `Err` describes the
/// first broken promise.
async fn run(exchanges: Vec<Exchange>) -> Result<(), String> {
    let server = RawServer::start(script).await;
    let (client, _connector) = client();
    // Seconds of time budget: the expected outcomes follow from the bytes
    // alone, on any machine.
    let layer = DrainOnDropLayer::new().max_bytes(BUDGET).max_time(SECONDS);
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);
    let mut expected = Expected::default();
    for (i, x) in exchanges.iter().enumerate() {
        let seed = i as u64;
        let chunk = match x.framing {
            Framing::ContentLength => 0,
            Framing::Chunked { chunk } => chunk,
        };
        let uri = server.uri(&format!("/?seed={seed}&len={}&chunk={chunk}&pause={}", x.len, x.pause_ms));
        let res = svc
            .ready()
            .await
            .map_err(|e| format!("#{i} {x:?}: not ready: {e:?}"))?
            .call(get(uri))
            .await
            .map_err(|e| format!("#{i} {x:?}: request failed: {e:?}"))?;
        if res.status() != 200 {
            return Err(format!("#{i} {x:?}: status {}", res.status()));
        }
        let want = body_bytes(seed, x.len);
        let mut body = res.into_body();
        let (mut got, mut ended) = (Vec::new(), false);
        let frames = match x.read {
            Read::Nothing => 0,
            Read::Frames(n) => n,
            Read::All => usize::MAX,
        };
        let mut seen = 0;
        while seen < frames {
            use http_body_util::BodyExt;
            match body.frame().await {
                None => {
                    ended = true;
                    break;
                }
                Some(Err(e)) => return Err(format!("#{i} {x:?}: body error {e:?}")),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        got.extend_from_slice(&data);
                        seen += 1;
                    }
                }
            }
        }
        // Every byte delivered is the right one, in order.
        if got[..] != want[..got.len().min(want.len())] || got.len() > want.len() {
            return Err(format!(
                "#{i} {x:?}: delivered bytes differ from the expected body \
                 ({} bytes read of {})",
                got.len(),
                x.len
            ));
        }
        if matches!(x.read, Read::All) && got.len() != x.len {
            return Err(format!("#{i} {x:?}: read {} of {} bytes", got.len(), x.len));
        }
        drop(body);
        // Which drops are early: the end was not seen, and (for
        // Content-Length, where hyper knows) not every byte was delivered.
        let every_byte = matches!(x.framing, Framing::ContentLength) && got.len() == x.len;
        if !ended && !every_byte {
            let remaining = (x.len - got.len()) as u64;
            match (x.framing, remaining > BUDGET) {
                (_, false) => {
                    expected.drained += 1;
                    expected.drained_bytes += remaining;
                }
                (Framing::ContentLength, true) => expected.declared_over_budget += 1,
                (Framing::Chunked { chunk }, true) => {
                    if remaining <= BUDGET + chunk as u64 {
                        expected.either += 1;
                    } else {
                        expected.over_bytes += 1;
                    }
                    expected.max_chunk = expected.max_chunk.max(chunk as u64);
                }
            }
        }
    }
    if !stats.wait_idle(SECONDS + SLACK).await {
        return Err(format!("drains still running after {:?}: {stats:?}", SECONDS + SLACK));
    }
    let s = stats.snapshot();
    let counted = (
        s.drained,
        s.count(Reason::EndOfBody),
        s.skipped,
        s.count(Reason::DeclaredOverBudget),
        s.abandoned,
        s.count(Reason::OverBytes),
        s.failed,
    );
    // Of the drops that may go either way, those counted drained.
    let finished = s.drained.saturating_sub(expected.drained).min(expected.either);
    let want = (
        expected.drained + finished,
        expected.drained + finished,
        expected.declared_over_budget,
        expected.declared_over_budget,
        expected.over_bytes + expected.either - finished,
        expected.over_bytes + expected.either - finished,
        0,
    );
    if counted != want {
        return Err(format!(
            "counted (drained, end_of_body, skipped, declared_over_budget, abandoned, \
             over_bytes, failed) = {counted:?}, expected {want:?}: {s:?}"
        ));
    }
    // Past the budget a drain reads at most the crossing frame and one more.
    let past = expected.over_bytes + expected.either;
    let low = expected.drained_bytes + past * (BUDGET + 1);
    let high = expected.drained_bytes + past * (BUDGET + 2 * expected.max_chunk);
    if !(low..=high).contains(&s.bytes_drained) {
        return Err(format!(
            "bytes_drained {} outside {low}..={high} (exact for finished drains, \
             at most two frames past the budget for the others): {s:?}",
            s.bytes_drained
        ));
    }
    Ok(())
}

fn runtime(multi_thread: bool) -> Runtime {
    let mut b = if multi_thread {
        let mut b = Builder::new_multi_thread();
        b.worker_threads(2);
        b
    } else {
        Builder::new_current_thread()
    };
    b.enable_all().build().unwrap()
}

#[test]
fn every_delivered_byte_is_right_and_every_early_drop_is_counted_once() {
    let cases =
        std::env::var("DRAIN_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CASES);
    let runtimes = [runtime(false), runtime(true)];
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    });
    let started = Instant::now();
    let requests = std::cell::Cell::new(0usize);
    let strategy = (any::<bool>(), prop::collection::vec(exchange(), 1..=60));
    let result = runner.run(&strategy, |(multi_thread, exchanges)| {
        requests.set(requests.get() + exchanges.len());
        runtimes[usize::from(multi_thread)].block_on(run(exchanges)).map_err(TestCaseError::fail)
    });
    println!("{cases} sequences, {} requests in {:?}", requests.get(), started.elapsed());
    if let Err(e) = result {
        panic!("{e}");
    }
}
