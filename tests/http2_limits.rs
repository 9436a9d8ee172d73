//! HTTP/2 servers that punish a connection for its resets, each connection
//! at a limit of its own (issue 54): a hand-written h2c server
//! (`support::h2::LimitH2`) draws each connection's limit from a seed and
//! punishes it once the client's RST_STREAM frames on it pass that limit,
//! with RST_STREAM ENHANCE_YOUR_CALM refusals then GOAWAY, or with GOAWAY
//! ENHANCE_YOUR_CALM at once. 16 callers send GET and POST in turn, each
//! response dropped at its head (the server never ends a body, so each
//! drop resets its stream), every POST's body unique, so that one
//! processed twice shows at the server.
//!
//! 1. A fixed share (`resets_per_connection(10)`) takes effect before the
//!    connection's next request: against limits of 20-200, no connection
//!    carries more than the share plus the requests already in flight (26),
//!    none is punished, no request fails.
//! 2. A learned share settles: on a server that punishes every connection
//!    (limits of 20-200), connections are punished only as the documented
//!    tests allow (between tests 3, 6, 12 ... 192 connections: at most 7,
//!    plus one per 193 connections), and POSTs fail no more than those
//!    punishments refused.
//! 3. A lowered limit is learned at its first punishment: after a restart
//!    from 200 to 20, at most 5 connections are punished; after another to
//!    none, none, and the lesson is forgotten (one connection again).
//! 4. Kept: no POST is processed twice; never more failures or connections
//!    than hyper-util alone; one connection where nothing is punished.
//!
//! Counters are read once every caller is done and the layer has nothing
//! in flight. Each run prints what the server saw, beside hyper-util alone
//! where the test runs it.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use drain_on_drop::{DrainOnDropLayer, Http2Connector, RetryRefusedLayer};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tower::{Service, ServiceBuilder, ServiceExt};

use support::h2::{LimitH2, LimitSummary, Limits, Punish};
use support::*;

const CALLERS: usize = 16;

/// The limits of issue 54: each connection's drawn between 20 and 200.
const RANDOM: Limits = Limits { lo: 20, hi: 200, seed: 54 };

/// A request may take this long before the test calls it stuck.
const STUCK: Duration = Duration::from_secs(20);

/// hyper-util's client, h2c, over a plain `HttpConnector` (nodelay).
fn http() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http
}

/// hyper-util alone: its `Client`, h2c, no layer.
fn alone() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).http2_only(true).build(http())
}

/// The README's HTTP/2 stack over h2c.
type Stack = drain_on_drop::RetryRefused<
    drain_on_drop::DrainOnDrop<Client<Http2Connector<HttpConnector>, Full<Bytes>>>,
>;

/// The README's HTTP/2 stack, h2c, its connector's share fixed where
/// `share` says; and its layer, whose `in_flight` the counters wait for.
fn stack(share: Option<usize>) -> (Stack, DrainOnDropLayer) {
    let connector = match share {
        Some(n) => Http2Connector::new(http()).resets_per_connection(n),
        None => Http2Connector::new(http()),
    };
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build(connector);
    let layer = DrainOnDropLayer::new();
    let svc = ServiceBuilder::new().layer(RetryRefusedLayer::new()).layer(layer.clone()).service(client);
    (svc, layer)
}

/// What the callers of one run saw.
#[derive(Debug, Default)]
struct Run {
    gets: usize,
    posts: usize,
    failed_gets: usize,
    failed_posts: usize,
    /// Failures by kind (the error's `Debug`, stream ids left out).
    kinds: BTreeMap<String, usize>,
}

impl Run {
    fn failed(&self) -> usize {
        self.failed_gets + self.failed_posts
    }
}

/// `e`'s `Debug` with the number of every `StreamId(n)` left out.
fn kind(e: &str) -> String {
    let mut out = String::new();
    let mut rest = e;
    while let Some(at) = rest.find("StreamId(") {
        let (head, tail) = rest.split_at(at + "StreamId(".len());
        out.push_str(head);
        rest = tail.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

/// [`CALLERS`] callers sharing `svc`, each sending `each` requests to
/// `server`, GET and POST in turn (each POST's body unique: `tag`, the
/// caller, the request), each response dropped at its head.
async fn drops<S, B>(svc: S, server: &LimitH2, tag: &str, each: usize) -> Run
where
    S: Service<http::Request<Full<Bytes>>, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug + Send,
    B: Send + 'static,
{
    let run = Arc::new(Mutex::new(Run::default()));
    let mut callers = Vec::new();
    for caller in 0..CALLERS {
        let (mut svc, uri, run, tag) = (svc.clone(), server.uri("/"), run.clone(), tag.to_owned());
        callers.push(tokio::spawn(async move {
            for i in 0..each {
                let post = i % 2 == 1;
                let req = if post {
                    let body = format!("{tag} caller {caller} request {i}");
                    http::Request::post(uri.clone()).body(Full::new(Bytes::from(body))).unwrap()
                } else {
                    http::Request::get(uri.clone()).body(Full::new(Bytes::new())).unwrap()
                };
                let result = tokio::time::timeout(STUCK, async { svc.ready().await?.call(req).await })
                    .await
                    .unwrap_or_else(|_| panic!("{tag}: caller {caller}'s request {i} stuck for {STUCK:?}"));
                let mut run = run.lock().unwrap();
                if post {
                    run.posts += 1;
                } else {
                    run.gets += 1;
                }
                match result {
                    Ok(res) => {
                        assert_eq!(res.status(), http::StatusCode::OK);
                        drop(res);
                    }
                    Err(e) => {
                        if post {
                            run.failed_posts += 1;
                        } else {
                            run.failed_gets += 1;
                        }
                        *run.kinds.entry(kind(&format!("{e:?}"))).or_insert(0) += 1;
                    }
                }
            }
        }));
    }
    for caller in callers {
        caller.await.unwrap();
    }
    Arc::try_unwrap(run).unwrap().into_inner().unwrap()
}

/// Waits until `layer` has nothing in flight (every drop settled).
async fn settled(layer: &DrainOnDropLayer) {
    let stats = layer.stats();
    wait_for("the layer to have nothing in flight", SLACK, || stats.snapshot().in_flight == 0).await;
}

/// The server's counters once every connection it punished or recycled
/// had time to say so (its GOAWAYs are written before the count can change
/// no more: the count is stable over one check).
async fn summary(server: &LimitH2) -> LimitSummary {
    summary_of(server, 0..=usize::MAX).await
}

async fn summary_of(server: &LimitH2, generations: std::ops::RangeInclusive<usize>) -> LimitSummary {
    let mut last = server.summary_of(generations.clone());
    let stable = Duration::from_millis(50);
    let deadline = tokio::time::Instant::now() + SLACK;
    loop {
        tokio::time::sleep(stable).await;
        let now = server.summary_of(generations.clone());
        if now == last || tokio::time::Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// (1) `resets_per_connection(10)`, 16 callers x 2,000 drops, limits of
/// 20-200, punished by refusals and by GOAWAY at once: no connection takes
/// more than the share plus the requests already in flight on it (10 +
/// 16), none is punished (a share of 10 means no server sees more than 10
/// resets of a connection, but for those in flight when it was spent), no
/// request fails, no POST is processed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_share_takes_effect_before_the_next_request_whatever_the_callers() {
    const SHARE: usize = 10;
    const EACH: usize = 2_000;
    for punish in [Punish::Refuse, Punish::GoAway] {
        let server = LimitH2::start(punish, Some(RANDOM)).await;
        let (svc, layer) = stack(Some(SHARE));
        let run = drops(svc, &server, "fixed", EACH).await;
        settled(&layer).await;
        let seen = summary(&server).await;
        println!(
            "{punish:?}, resets_per_connection({SHARE}), {CALLERS} x {EACH}: {run:?}\n  server: {seen:?}"
        );
        for c in server.conns().iter().filter(|c| c.requests > SHARE + CALLERS) {
            println!("  {} requests, resets before each: {:?}", c.requests, c.resets_before);
        }
        assert_eq!(run.gets + run.posts, CALLERS * EACH);
        assert_eq!(run.failed(), 0, "{punish:?}: no request fails: {run:?}; {seen:?}");
        assert_eq!(seen.punished, 0, "{punish:?}: no connection punished: {seen:?}");
        assert_eq!(seen.posts_twice, 0, "{punish:?}: no POST processed twice: {seen:?}");
        assert!(
            seen.most_requests <= SHARE + CALLERS,
            "{punish:?}: a connection carried {} requests, at most the share plus those in flight ({}) \
             expected: {seen:?}",
            seen.most_requests,
            SHARE + CALLERS
        );
    }
}

/// (2) The learned share (the README's stack as it comes), 16 callers x
/// 4,000 drops, on a server that punishes every connection past a limit
/// drawn between 20 and 200, with refusals: connections are punished only
/// as the documented tests allow (the first punishment, then one per test,
/// the tests 3, 6, 12 ... 192 connections apart: at most 7, plus one per
/// 193 connections); the POSTs that fail are the ones those punishments
/// refused, no GET fails (refused GETs go again), no POST is processed
/// twice; and fewer requests fail, and fewer connections are punished,
/// than with hyper-util alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_share_settles_on_a_server_that_always_punishes() {
    const EACH: usize = 4_000;
    let server = LimitH2::start(Punish::Refuse, Some(RANDOM)).await;
    let alone_run = drops(alone(), &server, "alone", EACH).await;
    let alone_seen = summary(&server).await;
    println!("hyper-util alone, {CALLERS} x {EACH}: {alone_run:?}\n  server: {alone_seen:?}");
    assert!(
        alone_seen.punished > 100 && alone_run.failed() > 0,
        "the premise: the server punishes every connection, and alone fails requests: {alone_seen:?}"
    );
    drop(server);

    for punish in [Punish::Refuse, Punish::GoAway] {
        let server = LimitH2::start(punish, Some(RANDOM)).await;
        let (svc, layer) = stack(None);
        let run = drops(svc, &server, "learned", EACH).await;
        settled(&layer).await;
        let seen = summary(&server).await;
        let bound = 7 + seen.connections / 193;
        let punished_at: Vec<_> = server
            .conns()
            .iter()
            .enumerate()
            .filter(|(_, c)| c.punished)
            .map(|(i, c)| (i, c.limit.unwrap_or(0), c.requests, c.resets))
            .collect();
        println!(
            "{punish:?}, the stack, {CALLERS} x {EACH}: {run:?}\n  server: {seen:?}\n  punished: {punished_at:?}"
        );
        assert_eq!(run.gets + run.posts, CALLERS * EACH);
        assert!(
            seen.punished <= bound,
            "{punish:?}: {} connections punished, at most {bound} expected (7, plus one per 193 of {} \
             connections); punished: {punished_at:?}",
            seen.punished,
            seen.connections
        );
        assert_eq!(run.failed_gets, 0, "{punish:?}: refused GETs go again: {run:?}");
        assert!(
            run.failed_posts <= seen.refused_posts,
            "{punish:?}: a POST fails only when a punishment refused it: {run:?}; {seen:?}"
        );
        assert_eq!(seen.posts_twice, 0, "{punish:?}: no POST processed twice: {seen:?}");
        assert!(run.failed() <= alone_run.failed(), "{punish:?}: no more failures than alone: {run:?}");
        assert!(seen.punished <= alone_seen.punished, "{punish:?}: no more punished than alone: {seen:?}");
    }
}

/// (3) A server restarted with a lower limit, then with none: 16 callers x
/// 500 drops a phase through the README's stack, GOAWAY ENHANCE_YOUR_CALM
/// past the limit. At 200 the origin learns its share; after the restart to
/// 20 it learns the lower one at the first punishment (from the resets sent
/// before it, not after): at most 5 connections punished in that phase;
/// after the restart to none, none, and the lesson is forgotten: the last
/// connection carries a quarter of the phase's requests or more (a share
/// kept would move it on after some tens).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_limit_is_learned_at_its_first_punishment_and_forgotten_when_gone() {
    const EACH: usize = 500;
    let phases = [Some(Limits { lo: 200, hi: 200, seed: 1 }), Some(Limits { lo: 20, hi: 20, seed: 2 }), None];
    let server = LimitH2::start(Punish::GoAway, phases[0]).await;
    let (svc, layer) = stack(None);
    let mut seen = Vec::new();
    for (generation, limits) in phases.iter().enumerate() {
        if generation > 0 {
            server.restart(*limits);
        }
        let run = drops(svc.clone(), &server, &format!("phase {generation}"), EACH).await;
        settled(&layer).await;
        let phase = summary_of(&server, generation..=generation).await;
        println!("limits {limits:?}: {run:?}\n  server: {phase:?}");
        assert_eq!(run.failed(), 0, "limits {limits:?}: GOAWAY refuses nothing processed: {run:?}");
        seen.push(phase);
    }
    assert!(seen[0].punished >= 1, "the premise: a limit of 200 punishes: {:?}", seen[0]);
    assert!(
        seen[1].punished <= 5,
        "a limit lowered to 20 is learned at its first punishment: {} connections punished, 5 at most",
        seen[1].punished
    );
    assert_eq!(seen[2].punished, 0, "a server that punishes nothing: {:?}", seen[2]);
    assert_eq!(server.summary().posts_twice, 0, "no POST processed twice");
    let last = server.conns().last().cloned().expect("a connection");
    assert!(
        last.generation == 2 && last.requests >= CALLERS * EACH / 4,
        "the lesson forgotten once the server stopped punishing: its last connection carried {} \
         requests, {} at least expected ({} connections in that phase)",
        last.requests,
        CALLERS * EACH / 4,
        seen[2].connections
    );
}

/// (4) A server that punishes nothing: 16 callers x 1,000 drops through the
/// README's stack go on one connection (a second may be dialed and left
/// unused at the start), none fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_punishes_nothing_keeps_one_connection() {
    const EACH: usize = 1_000;
    let server = LimitH2::start(Punish::Refuse, None).await;
    let (svc, layer) = stack(None);
    let run = drops(svc, &server, "nothing", EACH).await;
    settled(&layer).await;
    let seen = summary(&server).await;
    let requests: Vec<_> = server.conns().iter().map(|c| c.requests).collect();
    println!("a server that punishes nothing: {run:?}\n  server: {seen:?}; requests on each: {requests:?}");
    assert_eq!(run.failed(), 0, "{run:?}");
    assert_eq!(requests.iter().filter(|&&n| n > 0).count(), 1, "one connection carries them: {requests:?}");
    assert!(requests.len() <= 2, "one dial, another at most, unused: {requests:?}");
}
