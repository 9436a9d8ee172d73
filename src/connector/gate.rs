//! One dial at a time to an origin that speaks HTTP/2: the state of each
//! origin the [`Http2Connector`](crate::Http2Connector) dials ([`DialOrigin`]:
//! what its last connection spoke, the dial in flight, its share of
//! resets), and of each dial others wait for ([`Dial`]). When to wait is
//! `http2::gates`'s; the futures that wait are `mod.rs`'s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use http::Uri;

use crate::http2::{self, Proto};

/// What one dial has come to, as those waiting for it see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Connecting (TCP, TLS).
    Dialing,
    /// Connected, and (by ALPN, or not yet known) HTTP/2: hyper-util has it
    /// and has not written on it yet.
    Handed,
    /// hyper-util wrote its HTTP/2 preface on it: hyper-util holds its
    /// one-HTTP/2-connection lock for the origin and pools the connection
    /// next. A connect now gets a stand-in, which hyper-util cancels in
    /// favour of this connection (`io.rs`, `Lazy`).
    Written,
    /// A request went on it (a HEADERS frame written): it is in hyper-util's
    /// pool, and a connect from now on means the pool lost it.
    Serving,
    /// Failed, dropped, or HTTP/1: a waiting connect goes through the gate
    /// again.
    Over,
}

/// One dial others may wait for.
pub(crate) struct Dial {
    state: Mutex<(Phase, Vec<Waker>)>,
}

impl Dial {
    fn new() -> Arc<Dial> {
        Arc::new(Dial { state: Mutex::new((Phase::Dialing, Vec::new())) })
    }

    fn lock(&self) -> MutexGuard<'_, (Phase, Vec<Waker>)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its phase; while it is still to be waited for, `cx` is woken when it
    /// changes.
    pub(crate) fn poll_phase(&self, cx: &mut Context<'_>) -> Poll<Phase> {
        let mut state = self.lock();
        match state.0 {
            Phase::Dialing | Phase::Handed => {
                if !state.1.iter().any(|w| w.will_wake(cx.waker())) {
                    state.1.push(cx.waker().clone());
                }
                Poll::Pending
            }
            phase => Poll::Ready(phase),
        }
    }

    fn phase(&self) -> Phase {
        self.lock().0
    }

    /// Moves on to `phase` (never back; `Over` is the end), waking those
    /// waiting once it is no longer to be waited for.
    fn set(&self, phase: Phase) {
        let wakers = {
            let mut state = self.lock();
            if state.0 == Phase::Over || (phase != Phase::Over && phase <= state.0) {
                return;
            }
            state.0 = phase;
            if phase == Phase::Handed {
                return;
            }
            std::mem::take(&mut state.1)
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// One origin, as the connector's connections see it.
pub(crate) struct DialOrigin {
    /// Its scheme is `https` (ALPN may pick HTTP/2).
    https: bool,
    gate: Mutex<Gate>,
    /// Resets a connection takes before it moves on (`0`: it does not).
    share: AtomicUsize,
    /// The user fixed `share`: nothing is learned.
    fixed: bool,
}

struct Gate {
    /// What its last connection spoke.
    proto: Proto,
    /// The dial others wait for, until it is written on or over.
    dial: Option<Arc<Dial>>,
}

/// How a connect goes through the gate.
pub(crate) enum Entry {
    /// No gate: dial.
    Free,
    /// Dial, and others wait for this dial.
    Dial(Arc<Dial>),
    /// Wait for another's dial.
    Wait(Arc<Dial>),
    /// Another's connection is being pooled: stand in for it (`io.rs`,
    /// `Lazy`).
    StandIn,
}

impl Entry {
    /// A word for traces.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Entry::Free => "free",
            Entry::Dial(_) => "dial",
            Entry::Wait(_) => "wait",
            Entry::StandIn => "stand-in",
        }
    }
}

impl DialOrigin {
    fn new(https: bool, share: Option<usize>) -> Self {
        DialOrigin {
            https,
            gate: Mutex::new(Gate { proto: Proto::Unknown, dial: None }),
            share: AtomicUsize::new(share.unwrap_or(0)),
            fixed: share.is_some(),
        }
    }

    fn gate(&self) -> MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connect to this origin: whether it dials, waits, or stands in.
    pub(crate) fn enter(&self) -> Entry {
        let mut gate = self.gate();
        if !http2::gates(gate.proto, self.https) {
            return Entry::Free;
        }
        if let Some(dial) = &gate.dial {
            match dial.phase() {
                Phase::Dialing | Phase::Handed => return Entry::Wait(dial.clone()),
                Phase::Written => return Entry::StandIn,
                Phase::Serving | Phase::Over => {}
            }
        }
        Entry::Dial(Self::new_dial(&mut gate))
    }

    /// A stand-in hyper-util kept must dial after all (the connection it
    /// stood in for was pooled and lost): others wait for this dial.
    pub(crate) fn start_dial(&self) -> Arc<Dial> {
        Self::new_dial(&mut self.gate())
    }

    fn new_dial(gate: &mut Gate) -> Arc<Dial> {
        let dial = Dial::new();
        gate.dial = Some(dial.clone());
        dial
    }

    /// What it spoke on its last connection, as far as is known.
    pub(crate) fn proto(&self) -> Proto {
        self.gate().proto
    }

    /// Whether its scheme lets ALPN choose.
    pub(crate) fn https(&self) -> bool {
        self.https
    }

    /// `dial` connected, to a connection that is (by ALPN) or may be HTTP/2:
    /// those waiting go on waiting, until its first write.
    pub(crate) fn handed(&self, dial: &Dial) {
        dial.set(Phase::Handed);
    }

    /// A connection's first write told what it speaks: HTTP/2 (those
    /// waiting for its dial stand in for it) or HTTP/1 (they go through the
    /// gate again).
    pub(crate) fn spoke(&self, dial: Option<&Arc<Dial>>, proto: Proto) {
        let mut gate = self.gate();
        gate.proto = proto;
        if let Some(dial) = dial {
            if proto == Proto::Http2 {
                dial.set(Phase::Written);
            } else {
                Self::end(&mut gate, dial, Phase::Over);
            }
        }
    }

    /// A request went on `dial`'s connection: it is pooled.
    pub(crate) fn serving(&self, dial: &Arc<Dial>) {
        Self::end(&mut self.gate(), dial, Phase::Serving);
    }

    /// `dial` failed, or was dropped before a request went on it.
    pub(crate) fn abandoned(&self, dial: &Arc<Dial>) {
        Self::end(&mut self.gate(), dial, Phase::Over);
    }

    fn end(gate: &mut Gate, dial: &Arc<Dial>, phase: Phase) {
        dial.set(phase);
        if gate.dial.as_ref().is_some_and(|d| Arc::ptr_eq(d, dial)) {
            gate.dial = None;
        }
    }

    /// Resets one of its connections takes before it moves on.
    pub(crate) fn share(&self) -> usize {
        self.share.load(Ordering::Relaxed)
    }

    /// A connection of this origin was refused after `resets` resets: the
    /// share is what the rule learns from that (unless the user fixed it).
    pub(crate) fn learn(&self, resets: usize) {
        if self.fixed {
            return;
        }
        let _ = self.share.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |share| {
            Some(http2::learned_share(share, resets))
        });
    }
}

/// The origins of one connector (and of its clones).
pub(crate) struct Origins {
    by_key: Mutex<HashMap<Box<str>, Arc<DialOrigin>>>,
    /// The share the user fixed (`Http2Connector::resets_per_connection`).
    share: Option<usize>,
}

/// Origins kept before those no connection or dial uses are forgotten.
const KEPT: usize = 1024;

impl Origins {
    pub(crate) fn new(share: Option<usize>) -> Self {
        Origins { by_key: Mutex::default(), share }
    }

    /// The origin of `dst` (scheme, host and port: never a userinfo).
    pub(crate) fn of(&self, dst: &Uri) -> Arc<DialOrigin> {
        let scheme = dst.scheme_str().unwrap_or("");
        let host = dst.host().unwrap_or("");
        let port = dst.port_u16().unwrap_or(if scheme == "https" { 443 } else { 80 });
        let key = format!("{scheme}://{host}:{port}").into_boxed_str();
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        if by_key.len() >= KEPT && !by_key.contains_key(&key) {
            by_key.retain(|_, origin| Arc::strong_count(origin) > 1);
        }
        by_key.entry(key).or_insert_with(|| Arc::new(DialOrigin::new(scheme == "https", self.share))).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(https: bool) -> DialOrigin {
        DialOrigin::new(https, None)
    }

    fn cx() -> Context<'static> {
        Context::from_waker(Waker::noop())
    }

    #[test]
    fn an_https_origin_dials_once_until_its_first_connection_says_what_it_speaks() {
        let o = origin(true);
        let Entry::Dial(first) = o.enter() else { panic!("the first connect dials") };
        let Entry::Wait(waited) = o.enter() else { panic!("a second waits") };
        assert!(Arc::ptr_eq(&first, &waited));
        o.handed(&first);
        assert!(matches!(o.enter(), Entry::Wait(_)), "handed to hyper-util, not written on yet");
        assert!(waited.poll_phase(&mut cx()).is_pending());
        o.spoke(Some(&first), Proto::Http2);
        assert_eq!(waited.poll_phase(&mut cx()), Poll::Ready(Phase::Written));
        assert!(matches!(o.enter(), Entry::StandIn), "being pooled: stand in for it");
        o.serving(&first);
        assert!(matches!(o.enter(), Entry::Dial(_)), "a connect after that means the pool lost it");
    }

    #[test]
    fn http1_origins_are_never_gated_and_a_failed_dial_lets_the_next_dial() {
        let o = origin(true);
        let Entry::Dial(first) = o.enter() else { panic!() };
        o.spoke(Some(&first), Proto::Http1);
        assert_eq!(first.poll_phase(&mut cx()), Poll::Ready(Phase::Over));
        assert!(matches!(o.enter(), Entry::Free), "HTTP/1: every connect dials");
        let h2 = origin(true);
        let Entry::Dial(failed) = h2.enter() else { panic!() };
        h2.abandoned(&failed);
        assert!(matches!(h2.enter(), Entry::Dial(_)), "the next one dials");
        assert!(matches!(origin(false).enter(), Entry::Free), "http:// is not gated until it spoke HTTP/2");
    }

    #[test]
    fn the_share_is_learned_unless_fixed_and_keys_carry_no_userinfo() {
        let learned = origin(true);
        assert_eq!(learned.share(), 0, "no share until a server refuses");
        learned.learn(300);
        assert_eq!(learned.share(), http2::learned_share(0, 300));
        let fixed = DialOrigin::new(true, Some(7));
        fixed.learn(300);
        assert_eq!(fixed.share(), 7);
        let origins = Origins::new(None);
        let a = origins.of(&"https://user:secret@example.com".parse().unwrap());
        let b = origins.of(&"https://example.com:443".parse().unwrap());
        assert!(Arc::ptr_eq(&a, &b), "one origin, however spelled");
        let key_has_secret = origins.by_key.lock().unwrap().keys().any(|k| k.contains("secret"));
        assert!(!key_has_secret);
    }
}
