//! One dial at a time to an origin that speaks HTTP/2, each wait bounded:
//! the state of each origin the [`Http2Connector`](crate::Http2Connector)
//! dials ([`DialOrigin`]: what its last connection spoke, the dial others
//! wait for, its recent handshakes, its share of resets, its connections).
//! The dial itself is `dial.rs`'s; when to wait, how long, and what a
//! share is are the HTTP/2 room's (`http2`: `gates`, `patience`, `Share`);
//! the futures that wait are `connect.rs`'s.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::Settings;
use super::dial::{Dial, Phase};
use crate::http2::{self, Proto, Role, Share};

/// What the connector learns of the client it serves, for all its origins.
#[derive(Debug, Default)]
pub(crate) struct ClientFacts {
    /// The client has no pool (`pool_max_idle_per_host(0)`): a dial's
    /// connection went to the request that made it with no hand-out from a
    /// pool. Nothing is gated from then on: each request needs a
    /// connection of its own.
    pub(crate) no_pool: AtomicBool,
}

/// One origin, as the connector's connections see it.
pub(crate) struct DialOrigin {
    /// Its scheme is `https` (ALPN may pick HTTP/2).
    https: bool,
    /// Its key (scheme, host and port), for the failures `RetryRefused`
    /// asks about (`super::failed_since`).
    key: Box<str>,
    gate: Mutex<Gate>,
    /// Resets a connection takes before it moves on (`0`: it does not):
    /// `Gate::share`'s allowance, or the user's, read on every reset.
    allowance: AtomicUsize,
    /// The user fixed the allowance: nothing is learned.
    fixed_share: bool,
    /// Its connections that lack hyper-util's view of themselves.
    unhandled: AtomicUsize,
    /// Its HTTP/2 connections open now (see `Link`).
    open: AtomicUsize,
    /// The most HTTP/2 connections it has open at once for its streams
    /// (`Http2Connector::max_connections_per_origin`).
    max_connections: usize,
    /// The patience the user fixed, if any.
    fixed_patience: Option<Duration>,
    client: Arc<ClientFacts>,
}

struct Gate {
    /// What its last connection spoke.
    proto: Proto,
    /// The dial others wait for, until it is used, over, or past its
    /// patience.
    current: Option<Arc<Dial>>,
    /// Its last handshakes (most recent last), for its patience.
    handshakes: VecDeque<Duration>,
    /// What its servers taught of resets.
    share: Share,
}

/// How a connect goes through the gate.
pub(crate) enum Entry {
    /// No gate: dial.
    Free,
    /// Start a dial others may wait for (and take part in it).
    Dial(Arc<Dial>),
    /// Take part in another's dial.
    Wait(Arc<Dial>),
}

impl Entry {
    /// A word for traces.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Entry::Free => "free",
            Entry::Dial(_) => "dial",
            Entry::Wait(_) => "wait",
        }
    }
}

impl DialOrigin {
    pub(super) fn new(
        key: Box<str>,
        https: bool,
        proto: Proto,
        settings: Settings,
        client: Arc<ClientFacts>,
    ) -> Self {
        DialOrigin {
            https,
            key,
            gate: Mutex::new(Gate {
                proto,
                current: None,
                handshakes: VecDeque::with_capacity(http2::HANDSHAKES_KEPT),
                share: Share::default(),
            }),
            allowance: AtomicUsize::new(settings.share.unwrap_or(0)),
            fixed_share: settings.share.is_some(),
            unhandled: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            max_connections: settings.max_connections,
            fixed_patience: settings.patience,
            client,
        }
    }

    fn gate(&self) -> MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connect to this origin: whether it dials on its own, starts a dial
    /// others may wait for, or waits for one on its way that is still
    /// within its patience.
    pub(crate) fn enter(&self) -> Entry {
        let mut gate = self.gate();
        if !http2::gates(gate.proto, self.https) || self.client.no_pool.load(Ordering::Relaxed) {
            return Entry::Free;
        }
        let now = Instant::now();
        if let Some(dial) = &gate.current
            && dial.joinable(now)
        {
            return Entry::Wait(dial.clone());
        }
        let patience =
            self.fixed_patience.unwrap_or_else(|| http2::patience(gate.handshakes.make_contiguous()));
        let dial = Dial::new(patience);
        gate.current = Some(dial.clone());
        Entry::Dial(dial)
    }

    /// What it spoke on its last connection, as far as is known.
    pub(crate) fn proto(&self) -> Proto {
        self.gate().proto
    }

    /// Its key (scheme, host and port).
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// Whether its scheme lets ALPN choose.
    pub(crate) fn https(&self) -> bool {
        self.https
    }

    /// A dial connected after `took` (a handshake, for the patience).
    pub(crate) fn handshake(&self, took: Duration) {
        let mut gate = self.gate();
        if gate.handshakes.len() == http2::HANDSHAKES_KEPT {
            gate.handshakes.pop_front();
        }
        gate.handshakes.push_back(took);
    }

    /// A connection's first write (or, over TLS, its ALPN) told what it
    /// speaks: HTTP/1 ends its dial (those waiting for it go through the
    /// gate again, and dial their own).
    pub(crate) fn spoke(&self, dial: Option<&Arc<Dial>>, proto: Proto) {
        self.gate().proto = proto;
        if let Some(dial) = dial
            && proto == Proto::Http1
        {
            self.end(dial, Phase::Over);
        }
    }

    /// A request went on `dial`'s connection, which hyper-util's pool handed
    /// out (`pooled`) or not (the client has no pool: nothing is gated from
    /// now on).
    pub(crate) fn serving(&self, dial: &Arc<Dial>, pooled: bool) {
        if !pooled {
            self.client.no_pool.store(true, Ordering::Relaxed);
        }
        self.end(dial, Phase::Serving { pooled });
    }

    /// `dial`'s connection went before a request went on it: those waiting
    /// for it go through the gate again at once.
    pub(crate) fn unused(&self, dial: &Arc<Dial>) {
        self.end(dial, Phase::Over);
    }

    /// `dial` ended in `phase`: no connect waits for it from now on.
    fn end(&self, dial: &Arc<Dial>, phase: Phase) {
        self.forget(dial);
        dial.end(phase);
    }

    /// `dial` is over (failed, or no member left): no connect waits for it
    /// from now on.
    pub(crate) fn forget(&self, dial: &Arc<Dial>) {
        let mut gate = self.gate();
        if gate.current.as_ref().is_some_and(|d| Arc::ptr_eq(d, dial)) {
            gate.current = None;
        }
    }

    /// One of its HTTP/2 connections opened (`true`) or closed.
    pub(crate) fn connection(&self, opened: bool) {
        if opened {
            self.open.fetch_add(1, Ordering::Relaxed);
        } else {
            self.open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether one of its connections may move on for want of streams:
    /// fewer than its bound are open.
    pub(crate) fn may_open_another(&self) -> bool {
        self.open.load(Ordering::Relaxed) < self.max_connections
    }

    /// Resets a connection of [`Role::Share`] may yet reset before it moves
    /// on (`0`: no share).
    pub(crate) fn share(&self) -> usize {
        self.allowance.load(Ordering::Relaxed)
    }

    /// What a new connection is to the origin's lesson, its own allowance
    /// if it tests the lesson (`0`: any number), and the resets after which
    /// it forgets it (the unbounded test); a fixed share has none to test.
    pub(crate) fn terms(&self) -> (Role, Option<usize>, Option<usize>) {
        if self.fixed_share {
            return (Role::Share, None, None);
        }
        let mut gate = self.gate();
        match gate.share.role() {
            Role::Share => (Role::Share, None, None),
            test => (test, Some(gate.share.allowance_of(test)), gate.share.forgets_after(test)),
        }
    }

    /// One of its connections, of `role`, was punished after `bore` resets.
    pub(crate) fn punished(&self, bore: usize, role: Role) {
        self.learn(|share| share.punished(bore, role));
    }

    /// One of its connections, of `role`, moved on unpunished at its
    /// allowance.
    pub(crate) fn passed(&self, role: Role) {
        self.learn(|share| share.passed(role));
    }

    /// One of its connections, of `role`, ended unpunished before its
    /// allowance.
    pub(crate) fn ended(&self, role: Role) {
        self.learn(|share| share.ended(role));
    }

    fn learn(&self, lesson: impl FnOnce(&mut Share)) {
        if self.fixed_share {
            return;
        }
        let mut gate = self.gate();
        lesson(&mut gate.share);
        self.allowance.store(gate.share.allowance(), Ordering::Relaxed);
    }

    /// A connection opened that lacks hyper-util's view of itself (`true`),
    /// or one that lacked it was given it, or went (`false`).
    pub(crate) fn unhandled(&self, more: bool) {
        if more {
            self.unhandled.fetch_add(1, Ordering::Relaxed);
        } else {
            self.unhandled.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether the layer is to capture every request's connection to this
    /// origin: while one of its connections may have to move on (it has a
    /// share: a lesson, or the user's), or lacks hyper-util's view of itself
    /// (through which it moves on: a captured request's).
    pub(crate) fn wants_captures(&self) -> bool {
        self.share() > 0 || self.unhandled.load(Ordering::Relaxed) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(https: bool) -> DialOrigin {
        DialOrigin::new("o".into(), https, Proto::Unknown, Settings::default(), Arc::default())
    }

    fn dial(entry: Entry) -> Arc<Dial> {
        match entry {
            Entry::Dial(dial) => dial,
            other => panic!("expected to dial, got {}", other.name()),
        }
    }

    #[test]
    fn an_https_origin_dials_once_until_its_first_connection_is_used() {
        let o = origin(true);
        let first = dial(o.enter());
        let Entry::Wait(waited) = o.enter() else { panic!("a second waits") };
        assert!(Arc::ptr_eq(&first, &waited));
        first.connected();
        assert!(matches!(o.enter(), Entry::Wait(_)), "connected, being set up: wait");
        o.spoke(Some(&first), Proto::Http2);
        o.serving(&first, true);
        assert_eq!(first.phase(), Phase::Serving { pooled: true });
        dial(o.enter()); // a connect after that means the pool lost it
    }

    #[test]
    fn http1_origins_and_clients_without_a_pool_are_never_gated() {
        let o = origin(true);
        let first = dial(o.enter());
        o.spoke(Some(&first), Proto::Http1);
        assert_eq!(first.phase(), Phase::Over, "those waiting go through the gate again");
        assert!(matches!(o.enter(), Entry::Free), "HTTP/1: every connect dials");
        assert!(matches!(origin(false).enter(), Entry::Free), "http:// is not gated until it spoke HTTP/2");
        let client = Arc::new(ClientFacts::default());
        let a = DialOrigin::new("a".into(), true, Proto::Unknown, Settings::default(), client.clone());
        let b = DialOrigin::new("b".into(), true, Proto::Unknown, Settings::default(), client);
        let d = dial(a.enter());
        a.serving(&d, false);
        assert!(matches!(a.enter(), Entry::Free), "no pool: each request dials its own");
        assert!(matches!(b.enter(), Entry::Free), "the client's other origins too");
    }

    #[test]
    fn a_connection_that_went_unused_ends_its_dial_at_once() {
        let o = origin(true);
        let first = dial(o.enter());
        first.connected();
        o.unused(&first);
        assert_eq!(first.phase(), Phase::Over);
        let next = dial(o.enter());
        assert!(!Arc::ptr_eq(&first, &next), "the next connect dials again");
    }

    #[test]
    fn the_share_is_learned_unless_fixed_and_keys_carry_no_userinfo() {
        let learned = origin(true);
        assert_eq!(learned.share(), 0, "no share until a server punishes");
        learned.punished(300, Role::Share);
        assert_eq!(learned.share(), 150);
        let fixed = DialOrigin::new(
            "f".into(),
            true,
            Proto::Unknown,
            Settings { share: Some(7), ..Settings::default() },
            Arc::default(),
        );
        fixed.punished(300, Role::Share);
        assert_eq!(fixed.share(), 7);
        let origins = super::super::Origins::new(Settings::default());
        let a = origins.of(&"https://user:secret@example.com".parse().unwrap());
        let b = origins.of(&"https://example.com:443".parse().unwrap());
        assert!(Arc::ptr_eq(&a, &b), "one origin, however spelled");
        assert!(!a.key().contains("secret"));
    }
}
