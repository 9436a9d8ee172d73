//! Many callers dropping bodies at once, and the cap on drains running.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use drain_on_drop::{DrainOnDropLayer, Reason};
use tokio::sync::Barrier;
use tower::{Service, ServiceExt};

use crate::harness::*;
use crate::support::*;

/// A body that stalls: `Content-Length: 4096`, 512 bytes, then nothing.
fn stalled(_: &Head) -> Vec<Step> {
    vec![Step::Write(cat(&[&cl_head(4096), &body_bytes(0, 512)])), Step::Hang]
}

/// 50 callers drop stalled bodies at the same moment with a cap of 4: four
/// drains run (and end on time), the other 46 are refused by the cap at
/// once. Each drop first reads what hyper already holds of its body (512
/// bytes, sent with the head): a refused drop that read them gave a drain up
/// (`cannot_wait`), one that found nothing yet is skipped (`saturated`) and
/// read nothing.
///
/// The four drains must still run when the last caller drops: the time
/// budget is [`SLACK`], the bound of every "at once" here, so no busy
/// machine spreads the 50 drops over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cap_of_4_drains_holds_under_50_simultaneous_early_drops() {
    const CALLERS: usize = 50;
    const CAP: usize = 4;
    let max_time = SLACK;
    let layer = DrainOnDropLayer::new().max_time(max_time).max_concurrent_drains(CAP);
    let rig = Rig::with(layer, max_time, client(), stalled).await;
    let sampler = Sampler::start(rig.stats.clone());
    let barrier = Arc::new(Barrier::new(CALLERS));
    let mut callers = Vec::new();
    for _ in 0..CALLERS {
        let mut svc = rig.svc.clone();
        let req = get(rig.server.uri("/stall"));
        let barrier = barrier.clone();
        callers.push(tokio::spawn(async move {
            let res = svc.ready().await.unwrap().call(req).await.unwrap();
            // Everyone has a response head; now all drop at once.
            barrier.wait().await;
            drop(res);
        }));
    }
    for caller in callers {
        caller.await.expect("no caller panics");
    }
    rig.settle().await;
    let max_seen = sampler.stop();
    let s = rig.stats.snapshot();
    assert!(max_seen <= CAP as u64, "in_flight never exceeds the cap of {CAP}: saw {max_seen}");
    assert_eq!(max_seen, CAP as u64, "the cap is reached: saw {max_seen}");
    let refused_after_reading = s.count(Reason::CannotWait);
    assert_eq!(
        counted(&s),
        Counted::of(&[
            (Reason::OverTime, CAP as u64),
            (Reason::CannotWait, refused_after_reading),
            (Reason::Saturated, (CALLERS - CAP) as u64 - refused_after_reading),
        ]),
        "{CAP} drains ran out of time, the cap refused the rest: {s:?}"
    );
    assert_eq!(
        s.bytes_drained,
        512 * (CAP as u64 + refused_after_reading),
        "a drop refused before it read anything read nothing: {s:?}"
    );
    rig.wait_server_closed("every stalled connection to be closed").await;
}

/// 16 callers, 25 requests each, each reading one frame of a 32 KiB chunked
/// body and dropping the rest, on one shared client: every drop is drained,
/// and connections are reused (without the layer: one per request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_callers_dropping_at_once_are_all_drained_and_reuse_connections() {
    let (conns, s, read) = many_callers(DrainOnDropLayer::new().max_time(GENEROUS)).await;
    let total = (CALLERS * EACH) as u64;
    assert_eq!(counted(&s), Counted::drained(total), "every early drop drained: {s:?}");
    assert_eq!(
        s.bytes_drained + read,
        total * 32 * KIB as u64,
        "every byte was read once, by the caller or by a drain"
    );
    // The control, in the same run: draining disabled (hyper-util alone).
    let (alone, off, _) = many_callers(DrainOnDropLayer::new().max_bytes(0)).await;
    assert_eq!(counted(&off), Counted::of(&[(Reason::Disabled, total)]), "{off:?}");
    println!("{total} requests from {CALLERS} callers: {conns} connections, hyper alone {alone}");
    // Sixteen callers at once keep at most sixteen connections in use, plus
    // those whose drains still run; every drain reached its end, so the
    // argument of `assert_keeps_half` holds per caller.
    assert_keeps_half(&format!("{total} requests from {CALLERS} callers"), conns, alone, 0);
}

const CALLERS: usize = 16;
const EACH: usize = 25;

/// [`CALLERS`] tasks on one client behind `layer`, [`EACH`] requests each,
/// one frame read and the rest dropped; returns the connections opened,
/// the counts once every drain ended, and the bytes the callers read.
async fn many_callers(layer: DrainOnDropLayer) -> (usize, drain_on_drop::DrainSnapshot, u64) {
    let rig = Rig::with(layer, GENEROUS, client(), |head| {
        chunked(query(&head.path, "seed").unwrap(), 32 * KIB, 4 * KIB)
    })
    .await;
    let read = Arc::new(AtomicU64::new(0));
    let mut callers = Vec::new();
    for caller in 0..CALLERS {
        let mut svc = rig.svc.clone();
        let server = rig.server.uri("/");
        let read = read.clone();
        callers.push(tokio::spawn(async move {
            for i in 0..EACH {
                let seed = (caller * EACH + i) as u64;
                let uri = format!("http://{}/?seed={seed}", server.authority().unwrap());
                let res = svc.ready().await.unwrap().call(get(uri.parse().unwrap())).await;
                let mut body = res.expect("every request works").into_body();
                let n = read_one_frame(&mut body).await.expect("a first frame");
                read.fetch_add(n as u64, Ordering::SeqCst);
                // Dropped on whichever worker this task runs on now.
                drop(body);
            }
        }));
    }
    for caller in callers {
        caller.await.expect("no caller panics");
    }
    rig.settle().await;
    (rig.connector.count(), rig.stats.snapshot(), read.load(Ordering::SeqCst))
}

/// One origin cannot take every drain slot: with a cap of 8 and a second
/// origin known to the layer, 20 callers dropping a stalling origin's
/// bodies at once get at most 6 drains (three quarters); a body of the
/// other origin dropped meanwhile, which has to wait 50 ms for its tail,
/// still finds a slot and is drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stalling_origin_leaves_a_quarter_of_the_drain_slots_to_the_others() {
    const CALLERS: usize = 20;
    const CAP: usize = 8;
    let layer = DrainOnDropLayer::new().max_time(SLACK).max_concurrent_drains(CAP);
    let stalling = RawServer::start(stalled).await;
    let other = RawServer::start(|_: &Head| {
        let body = body_bytes(1, 4096);
        vec![
            Step::Write(cat(&[&cl_head(4096), &body[..1024]])),
            Step::Sleep(std::time::Duration::from_millis(50)),
            Step::Write(body[1024..].to_vec()),
        ]
    })
    .await;
    let (client, _) = client();
    let svc = tower::ServiceBuilder::new().layer(layer.clone()).service(client);
    // The layer knows both origins.
    let warm = svc.clone().oneshot(get(other.uri("/warm"))).await.unwrap();
    read_all(warm.into_body()).await.unwrap();
    let barrier = Arc::new(Barrier::new(CALLERS));
    let mut callers = Vec::new();
    for _ in 0..CALLERS {
        let (svc, req, barrier) = (svc.clone(), get(stalling.uri("/stall")), barrier.clone());
        callers.push(tokio::spawn(async move {
            let res = svc.oneshot(req).await.unwrap();
            barrier.wait().await;
            drop(res);
        }));
    }
    for caller in callers {
        caller.await.expect("no caller panics");
    }
    let stalled_drains = layer.stats().snapshot().in_flight;
    assert!(stalled_drains <= 6, "the stalling origin holds at most 3/4 of 8 slots: {stalled_drains}");
    let res = svc.clone().oneshot(get(other.uri("/tail"))).await.unwrap();
    drop(res);
    let s = settle(&layer.stats(), SECONDS).await;
    assert_eq!(s.count(Reason::EndOfBody), 1, "the other origin's drop found a slot and was drained: {s:?}");
    assert_eq!(
        s.count(Reason::OverTime),
        stalled_drains,
        "the stalling origin's drains ran out of time: {s:?}"
    );
}
