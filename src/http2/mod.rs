//! HTTP/2: what an early drop does to a stream, when a connection is dialed
//! and when it moves on, and which failed requests may be sent again. Every
//! rule of it lives here, beside the facts from h2, hyper and hyper-util it
//! rests on; the policy, the connector and the retry ask this room and keep
//! no rule of their own.
//!
//! **Drops** (h2 0.4.21 and later, which the `http2` feature requires).
//! Dropping an HTTP/2 body before its end makes h2 send RST_STREAM(CANCEL),
//! unless the whole body had already arrived (the stream is then closed,
//! and nothing is sent): the server stops sending, the stream is freed, the
//! connection is kept. h2 remembers a reset stream for 5 s, up to 8,192 of
//! them on a client that announces no SETTINGS_MAX_CONCURRENT_STREAMS of its
//! own (hyper's and hyper-util's announce none), forgetting the oldest
//! first, and ignores the DATA still arriving for a stream it remembers.
//! (h2 0.4.20 and older remembered 50 for 1 s: resets at once lost
//! requests, hyperium/h2#856.) So a dropped HTTP/2 body is not read at all:
//! it is reset at once, as Go 1.27's client does ([`early_drop`]). A drain
//! would save nothing (the connection is kept either way), and a body read
//! or held to spare a reset holds a stream and its share of the
//! connection's window, and whatever request would wait for either.
//!
//! **Dials** ([`gates`], [`patience`]). hyper-util's pool takes its
//! one-connection lock for HTTP/2 only when the client is `http2_only`;
//! over TLS with ALPN, each request that finds no connection dials its own,
//! and all but the first to negotiate h2 are thrown away after their
//! handshakes (hyperium/hyper#1485): after every connection lost, as many
//! handshakes as requests waiting. Go's transport does the same; undici
//! queues requests behind one probe (nodejs/undici#5799), Go's x/net/http2
//! behind one dial (`dialCall`). The [`Http2Connector`](crate::Http2Connector)
//! dials an origin once at a time while it speaks HTTP/2 (or might: an
//! `https` origin none of whose connections said yet); a connect that finds
//! a dial on its way waits for it, and hyper-util hands its request that
//! dial's connection from its pool. But one dial must not become every
//! caller's fate (hyper-util alone rides through each of these):
//! - a handshake that never ends (a balancer that accepts and never
//!   answers; hyper-rustls bounds no handshake) is raced, after the
//!   origin's [`patience`], by a second attempt, the first going on (RFC
//!   8305's Happy Eyeballs races attempts the same way, from measured round
//!   trips): the first to connect serves everyone, and with `http2_only`,
//!   whose own lock holds every other request behind this dial, the race
//!   is what frees them; those waiting give the race as long again, then
//!   each dials its own, as hyper-util alone would have from the start; a
//!   race is armed only when someone waits ([`race_at`]);
//! - a dial that fails fails those waiting for it at once, with its error
//!   ([`DialFailed`]): a failing origin fails each caller no later than
//!   its own dial would have, never one after another;
//! - a connect left waiting when the pool could not hand its request that
//!   dial's connection (a client without a pool, or one handed a
//!   connection that closed at that instant) dials its own once that
//!   connection is in use ([`SERVED_GRACE`] later), so its connection is a
//!   real one, with the wrapped connector's extras;
//! - a caller that gives up leaves nothing, and takes nothing: the dial is
//!   its origin's, polled by whichever waiting connect's turn it is, and
//!   goes on for those who wait (the last to go drops it);
//! - a failed attempt fails at once those no other attempt could serve
//!   sooner than their own dial would have ([`waits_after_failure`]);
//! - a connection whose server's streams are all taken moves on, so that
//!   the next request dials another ([`fills`]).
//!
//! **Moves** ([`moves_on`], [`Share`], [`punishes`]). Some servers
//! punish a connection for resets. Node's nghttp2 takes 1,000 RST_STREAM
//! frames in a burst, then 33 a second, then sends GOAWAY INTERNAL_ERROR
//! (harmless: what it refused above the last stream id goes again). Node 20
//! also never gives back the session memory it counted for response bytes
//! still queued on a stream the client resets, and a session whose 10 MB
//! are spent refuses every new stream with RST_STREAM ENHANCE_YOUR_CALM (and
//! after some 100 refusals in a row closes the connection). Apache's
//! mod_http2 sends GOAWAY INTERNAL_ERROR after a few thousand. Go's client
//! dials another connection once its resets outrun the server's PING
//! answers. Most servers punish nothing: Go's net/http, nginx, h2o, hyper.
//! So a connection is charged for what it may yet reset: the RST_STREAM
//! frames written on it (counted by the connector: a body that had all
//! arrived sends none), its streams in flight (each one a drop may reset;
//! one the server ended, or reset, gives its charge back), and the requests
//! hyper-util's pool handed it that have not gone out yet (counted as the
//! pool hands them, under its lock). It moves on (hyper-util's
//! `Connected::poison`: no new request goes on it, the ones on it finish)
//! at the checkout that spends its share: a share of n means no server sees
//! more than n resets of one connection, but for a new connection's first
//! requests (hyper-util hands it to every request waiting for it at once,
//! before its first response brings the view of it that poisons it: one a
//! caller at most). The connector reads the frame headers the server sends
//! too: a stream refused with ENHANCE_YOUR_CALM, or a GOAWAY with
//! ENHANCE_YOUR_CALM or INTERNAL_ERROR, after resets, punishes the
//! connection ([`punishes`]): it takes no new request, and its origin
//! learns a share, half the resets the connection had sent before its
//! punishment (those written before the refused stream, or before the first
//! stream above the GOAWAY's last id), never more than it knew: a lowered
//! limit is learned at its first punishment, and a server whose limits vary
//! teaches the lowest. A connection that moved on unpunished still reads
//! what its server says for [`LINGER`] once hyper closes it: a GOAWAY for
//! its last resets comes after hyper stopped reading. A lesson is then
//! tested, as TCP probes a congestion window: after [`FIRST_HOLD`]
//! connections moved on at that share unpunished, the next may take twice
//! the resets of the lesson; unpunished, the next takes twice that, then
//! twice again, then any number (once its server answered a request sent
//! after it bore 16 times the lesson, it forgets the lesson, and the origin
//! keeps one connection again; punished after all, it keeps it);
//! punished at any of them, the lesson holds twice as long before the next
//! test, 3, 6, 12 ... 192 connections: a server that punishes every
//! connection, at any limits, punishes one connection per test at most. A
//! lesson punished once only is forgotten at its first unpunished test (one
//! refusal for another reason costs a few connections, not one per reset).
//!
//! **Retries** ([`retries`]). A request the server refused before
//! processing it (RFC 9113, 8.7) goes again, whatever its method: one on a
//! stream above the last stream id of a GOAWAY it received (h2 fails those,
//! and any opened after it, with the remote GOAWAY), one reset with
//! REFUSED_STREAM. So does one hyper-util failed before writing a byte of
//! it: a pool checkout handed a connection that closed
//! at that instant, a connect hyper-util cancelled because another took
//! its HTTP/2 lock, a request hyper gave back unsent. Anything else may
//! have been processed: hyper's `is_canceled` (a request that waited for a
//! stream slot is failed so even when h2 sent it after a graceful GOAWAY's
//! first phase), a reason hyper rebuilt without saying who sent it, any
//! other reset (Node's ENHANCE_YOUR_CALM included), a connection that
//! broke. Such a request goes again only if its method is idempotent (RFC
//! 9110, 9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE), sending it twice
//! then being harmless by definition; a POST or PATCH never. A failed
//! connect is not retried. A request goes again at once, and, failing
//! again, after 25 ms, doubling, 6 times at most
//! (Go: 6, the first at once).

#[cfg(feature = "http2")]
mod dials;
#[cfg(feature = "http2")]
mod retries;

#[cfg(feature = "http2")]
pub(crate) use self::dials::*;
#[cfg(feature = "http2")]
pub(crate) use self::retries::{DialFailed, H2Said, Superseded, h2_failure};

use crate::outcome::Reason;

/// What becomes of an HTTP/2 body dropped before its end, given what its
/// head said (`headers::inspect`: only ever an open-ended stream on
/// HTTP/2): reset at once, unread, counted `stream` if it was one and
/// `reset` otherwise.
pub(crate) fn early_drop(head: Option<Reason>) -> Reason {
    head.unwrap_or(Reason::Reset)
}

/// What an origin's last connection spoke, as far as its connector knows.
#[cfg(feature = "http2")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proto {
    /// No connection said yet.
    Unknown,
    Http1,
    Http2,
}

/// Whether a connection moves on: it could yet reset `may_reset` streams
/// (the resets it sent, and its streams in flight, each of which a drop may
/// reset), under its `allowance` (`0`: none, never). Counting the streams
/// in flight is what keeps the word of a share of n: no server sees more
/// than n resets of one connection (but for requests hyper-util had already
/// handed it: at most one a caller).
#[cfg(feature = "http2")]
pub(crate) fn moves_on(may_reset: usize, allowance: usize) -> bool {
    allowance > 0 && may_reset >= allowance
}

/// Whether a frame the server sent punishes the connection for what it
/// did: a stream refused with ENHANCE_YOUR_CALM (Node, its session memory
/// spent), or a GOAWAY with ENHANCE_YOUR_CALM or INTERNAL_ERROR (nghttp2's
/// and Apache's answer to too many resets). A GOAWAY NO_ERROR (a server
/// recycling connections, as nginx's `keepalive_requests`) or
/// REFUSED_STREAM (a stream limit) punishes nothing.
#[cfg(feature = "http2")]
pub(crate) fn punishes(frame: Received) -> bool {
    use h2::Reason as R;
    match frame {
        Received::Reset(code) => code == R::ENHANCE_YOUR_CALM,
        Received::GoAway(code) => matches!(code, R::ENHANCE_YOUR_CALM | R::INTERNAL_ERROR),
    }
}

/// A frame the server sent that may punish a connection (see [`punishes`]).
#[cfg(feature = "http2")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Received {
    /// RST_STREAM with this error code.
    Reset(h2::Reason),
    /// GOAWAY with this error code.
    GoAway(h2::Reason),
}

/// Connections that move on unpunished at a lesson's share before the
/// first test (see [`Share`]); each punishment doubles it.
#[cfg(feature = "http2")]
pub(crate) const FIRST_HOLD: u32 = 3;
/// Times a lesson's hold doubles, at most (3 x 64 = 192 connections
/// between tests).
#[cfg(feature = "http2")]
const MOST_CONFIRMED: u32 = 6;
/// The test that takes no share: after tests of 2, 4 and 8 times the
/// lesson's resets went unpunished, one in a row, the next connection
/// takes any number; unpunished past [`FORGET_AT`] times them, the lesson
/// is forgotten.
#[cfg(feature = "http2")]
const UNBOUND: u32 = 4;
/// Times the lesson's resets that the unbounded test bears unpunished
/// before the lesson is forgotten.
#[cfg(feature = "http2")]
const FORGET_AT: usize = 16;

/// What a new connection is to its origin's lesson.
#[cfg(feature = "http2")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// It moves on at the origin's share, whatever it is when its resets
    /// are counted (none, or the user's, or the lesson's).
    Share,
    /// It tests the lesson learned `lesson`-th (a count that tells a test of
    /// a lesson since relearned): it may take `2^level` times its resets
    /// ([`UNBOUND`]: any number).
    Test { level: u32, lesson: u64 },
}

/// An origin's share of resets per connection, as its servers taught it
/// (see the module's Moves): none until a connection is punished; then
/// half the fewest resets a punished connection had sent before its
/// punishment, never raised by a later punishment. After a hold of
/// unpunished moves ([`FIRST_HOLD`] connections, twice as many after each
/// punishment, up to 192), a connection tests it, taking twice the
/// lesson's resets; unpunished, the next one takes twice that, then twice
/// again, then any number, and bearing [`FORGET_AT`] times the lesson's
/// resets unpunished (its server answered a request sent after them),
/// forgets it; punished after all, that test keeps the lesson as it was,
/// held twice as long. A lesson punished once only (one refusal
/// for another reason) is forgotten at its first unpunished test; one
/// learned again after a lesson was forgotten starts with twice the hold
/// the forgotten one had come to. So a server that punishes every
/// connection, at any limits, punishes one connection per test at most,
/// and the tests come ever more rarely.
#[cfg(feature = "http2")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Share {
    lesson: Option<Lesson>,
    /// Lessons learned, to tell a test of an earlier one.
    learned: u64,
    /// The last lesson forgotten, if any: one learned again starts tested
    /// as rarely as that one had come to be, and once more (a server
    /// punishing again is no one-off).
    forgotten: Option<Lesson>,
}

#[cfg(feature = "http2")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lesson {
    /// The fewest resets a punished connection had sent before it was
    /// punished.
    bore: usize,
    /// Unpunished moves left before a connection tests the lesson.
    hold: u32,
    /// Punishments since it was learned (at most [`MOST_CONFIRMED`]).
    confirmed: u32,
    /// The next test's level (1: twice `bore`).
    level: u32,
    /// A connection is testing it now.
    testing: bool,
}

#[cfg(feature = "http2")]
impl Share {
    /// Resets a connection of [`Role::Share`] may yet reset before it moves
    /// on (`0`: it does not): half the lesson's.
    pub(crate) fn allowance(&self) -> usize {
        self.lesson.map_or(0, |l| (l.bore / 2).max(1))
    }

    /// What a new connection is: the test, once the hold is over and no
    /// connection tests already.
    pub(crate) fn role(&mut self) -> Role {
        match &mut self.lesson {
            Some(l) if l.hold == 0 && !l.testing => {
                l.testing = true;
                Role::Test { level: l.level, lesson: self.learned }
            }
            _ => Role::Share,
        }
    }

    /// What a connection of `role` may yet reset before it moves on (`0`:
    /// any number).
    pub(crate) fn allowance_of(&self, role: Role) -> usize {
        match (role, self.lesson) {
            (Role::Test { level, lesson }, Some(l)) if lesson == self.learned && level < UNBOUND => {
                l.bore.saturating_mul(1 << level)
            }
            (Role::Test { lesson, .. }, Some(_)) if lesson == self.learned => 0,
            _ => self.allowance(),
        }
    }

    /// Resets after which the unbounded test forgets the lesson, if `role`
    /// is that test.
    pub(crate) fn forgets_after(&self, role: Role) -> Option<usize> {
        match (role, self.lesson) {
            (Role::Test { level: UNBOUND.., lesson }, Some(l)) if lesson == self.learned => {
                Some(l.bore.saturating_mul(FORGET_AT))
            }
            _ => None,
        }
    }

    /// A connection of `role` was punished after sending `bore` resets
    /// (those it had sent before the server punished it). A punishment
    /// after no reset teaches nothing: moving on would not have spared it.
    pub(crate) fn punished(&mut self, bore: usize, role: Role) {
        if bore == 0 {
            return;
        }
        let Some(l) = &mut self.lesson else {
            let confirmed = self.forgotten.map_or(0, |f| (f.confirmed + 1).min(MOST_CONFIRMED));
            let hold = FIRST_HOLD << confirmed;
            let mut lesson = Lesson { bore, hold, confirmed, level: 1, testing: false };
            match self.forgotten {
                // The test that forgot the lesson, punished after all (its
                // server punishes at its next stream, not at the reset that
                // passes its limit): the lesson holds, as if never forgotten.
                Some(forgotten) if matches!(role, Role::Test { lesson, .. } if lesson == self.learned) => {
                    lesson.bore = bore.min(forgotten.bore);
                }
                _ => self.learned += 1,
            }
            self.lesson = Some(lesson);
            return;
        };
        l.bore = l.bore.min(bore);
        l.confirmed = (l.confirmed + 1).min(MOST_CONFIRMED);
        l.hold = FIRST_HOLD << l.confirmed;
        l.level = 1;
        if matches!(role, Role::Test { lesson, .. } if lesson == self.learned) {
            l.testing = false;
        }
    }

    /// A connection of `role` moved on unpunished at its allowance (or, the
    /// unbounded test, bore [`forgets_after`](Self::forgets_after)): one
    /// more move of the hold, or a test passed.
    pub(crate) fn passed(&mut self, role: Role) {
        let Some(l) = &mut self.lesson else { return };
        match role {
            Role::Test { level, lesson } if lesson == self.learned => {
                l.testing = false;
                if l.confirmed == 0 || level >= UNBOUND {
                    self.forgotten = self.lesson.take();
                } else {
                    l.level = level + 1;
                }
            }
            Role::Test { .. } => {}
            Role::Share => l.hold = l.hold.saturating_sub(1),
        }
    }

    /// A connection of `role` ended unpunished before its allowance (its
    /// server recycled it, the client closed it): it proved nothing, and a
    /// test it was goes to the next connection.
    pub(crate) fn ended(&mut self, role: Role) {
        if let (Some(l), Role::Test { lesson, .. }) = (&mut self.lesson, role)
            && lesson == self.learned
        {
            l.testing = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_http2_body_is_reset_and_an_open_ended_stream_counted_as_one() {
        assert_eq!(early_drop(None), Reason::Reset);
        assert_eq!(early_drop(Some(Reason::Stream)), Reason::Stream);
    }

    #[cfg(feature = "http2")]
    #[test]
    fn dials_queue_for_http2_and_for_tls_origins_not_yet_heard_never_for_http1() {
        assert!(gates(Proto::Http2, false) && gates(Proto::Http2, true));
        assert!(gates(Proto::Unknown, true));
        assert!(!gates(Proto::Unknown, false), "plain TCP: ALPN cannot pick HTTP/2");
        assert!(!gates(Proto::Http1, true));
    }

    #[cfg(feature = "http2")]
    #[test]
    fn no_connection_moves_until_a_server_punished_then_at_half_what_it_bore() {
        let mut share = Share::default();
        assert_eq!(share.allowance(), 0, "no share: one connection");
        assert!(!moves_on(1_000_000, share.allowance()));
        share.punished(0, Role::Share);
        assert_eq!(share.allowance(), 0, "punished before any reset: moving would not help");
        share.punished(500, Role::Share);
        assert_eq!(share.allowance(), 250);
        assert!(!moves_on(249, 250) && moves_on(250, 250), "resets and streams in flight, counted together");
        let mut one = Share::default();
        one.punished(1, Role::Share);
        assert_eq!(one.allowance(), 1, "at least one");
    }

    /// The connections a lesson makes, each one's allowance, until it is
    /// forgotten, every one unpunished.
    #[cfg(feature = "http2")]
    fn unpunished(share: &mut Share, most: usize) -> Vec<usize> {
        let mut allowances = Vec::new();
        while share.lesson.is_some() && allowances.len() < most {
            let role = share.role();
            allowances.push(share.allowance_of(role));
            share.passed(role);
        }
        allowances
    }

    #[cfg(feature = "http2")]
    #[test]
    fn a_lesson_punished_once_is_forgotten_at_its_first_unpunished_test() {
        // One refusal after 2 resets, never again: a few connections, then
        // one connection again.
        let mut share = Share::default();
        share.punished(2, Role::Share);
        assert_eq!(
            unpunished(&mut share, 100),
            [1, 1, 1, 4],
            "three moves at the lesson, one test, then none"
        );
        assert_eq!(share.allowance(), 0);
        share.punished(2, Role::Share);
        assert_eq!(
            unpunished(&mut share, 100),
            [1, 1, 1, 1, 1, 1, 4, 8, 16, 0],
            "punished again: held twice as long, then tested up to any number"
        );
        assert_eq!(share.allowance(), 0);
    }

    /// Unpunished moves through the lesson's hold, to its first test.
    #[cfg(feature = "http2")]
    fn first_test(share: &mut Share) -> Role {
        loop {
            match share.role() {
                Role::Share => share.passed(Role::Share),
                test => break test,
            }
        }
    }

    #[cfg(feature = "http2")]
    #[test]
    fn a_confirmed_lesson_unpunished_is_tested_higher_at_once_then_forgotten() {
        // A server that punished twice, then stopped.
        let mut share = Share::default();
        share.punished(20, Role::Share);
        share.punished(30, Role::Share);
        let allowances = unpunished(&mut share, 100);
        assert_eq!(&allowances[..6], [10; 6], "a hold of 6 after a second punishment");
        assert_eq!(&allowances[6..], [40, 80, 160, 0], "tests of 2, 4 and 8 times, then unbounded");
        assert_eq!(share.allowance(), 0, "forgotten once the unbounded test bore 16 times, unpunished");
        let mut stale = Share::default();
        stale.punished(20, Role::Share);
        let test = first_test(&mut stale);
        stale.ended(test);
        assert!(matches!(stale.role(), Role::Test { .. }), "a test that proved nothing goes to the next");
    }

    #[cfg(feature = "http2")]
    #[test]
    fn the_test_that_forgot_a_lesson_punished_after_all_keeps_it() {
        // Its server punishes at its next stream: the punishment of a limit
        // just above the resets the test bore comes after it forgot.
        let mut share = Share::default();
        share.punished(12, Role::Share);
        share.punished(30, Role::Share);
        let unbounded = loop {
            let role = share.role();
            match (role, share.allowance_of(role)) {
                (Role::Test { .. }, 0) => break role,
                _ => share.passed(role),
            }
        };
        assert_eq!(share.forgets_after(unbounded), Some(192));
        share.passed(unbounded);
        assert_eq!(share.allowance(), 0, "forgotten");
        share.punished(197, unbounded);
        assert_eq!(share.allowance(), 6, "kept: not relearned from the 197 resets the test bore");
        assert_eq!(&unpunished(&mut share, 100)[..12], [6; 12], "and held twice as long as before");
        let mut again = Share::default();
        again.punished(12, Role::Share);
        let test = first_test(&mut again);
        again.passed(test);
        assert_eq!(again.allowance(), 0, "punished once: forgotten at its first test");
        again.punished(60, Role::Share);
        assert_eq!(again.allowance(), 30, "punished again later by another connection: learned anew");
    }

    #[cfg(feature = "http2")]
    #[test]
    fn a_punishment_never_raises_the_share_and_a_lowered_limit_is_learned_at_once() {
        let mut share = Share::default();
        share.punished(201, Role::Share);
        assert_eq!(share.allowance(), 100);
        share.punished(21, Role::Share);
        assert_eq!(share.allowance(), 10, "the limit fell to 20: learned at its first punishment");
        share.punished(400, Role::Share);
        assert_eq!(share.allowance(), 10, "a connection that bore more teaches no more");
    }

    /// A server punishing each connection past a limit of its own, drawn
    /// from `lo..=hi`: connections punished among `n`, and the gaps between
    /// tests.
    #[cfg(feature = "http2")]
    fn against_limits(lo: usize, hi: usize, n: usize) -> (usize, Vec<usize>) {
        let mut share = Share::default();
        let mut seed = 54u64;
        let (mut punished, mut gaps, mut since_test) = (0, Vec::new(), 0);
        for _ in 0..n {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let limit = lo + (seed >> 33) as usize % (hi - lo + 1);
            let role = share.role();
            if let Role::Test { level: 1, .. } = role {
                gaps.push(since_test);
                since_test = 0;
            }
            since_test += 1;
            let allowance = share.allowance_of(role);
            if allowance == 0 || allowance > limit {
                punished += 1;
                share.punished(limit + 1, role);
            } else {
                share.passed(role);
            }
        }
        (punished, gaps)
    }

    #[cfg(feature = "http2")]
    #[test]
    fn a_server_that_punishes_every_connection_is_tested_ever_more_rarely() {
        let n = 4_000;
        let (punished, gaps) = against_limits(20, 200, n);
        assert!(
            punished <= 7 + n / 193,
            "{punished} connections punished of {n}; gaps between tests {gaps:?}"
        );
        for pair in gaps.windows(2) {
            assert!(pair[1] >= pair[0].min(192), "the gaps between tests grow: {gaps:?}");
        }
        let (fixed, _) = against_limits(20, 20, n);
        assert!(fixed <= 7 + n / 193, "a fixed limit of 20: {fixed} punished of {n}");
    }

    #[cfg(feature = "http2")]
    #[test]
    fn patience_is_twice_the_median_handshake_within_rfc_8305s_bounds() {
        let ms = std::time::Duration::from_millis;
        assert_eq!(patience(&[]), ms(500), "before any handshake");
        assert_eq!(patience(&[ms(2), ms(3), ms(1)]), ms(250), "loopback: the floor");
        assert_eq!(
            patience(&[ms(200), ms(210), ms(5_000), ms(190)]),
            ms(420),
            "one slow one is not the median"
        );
        assert_eq!(patience(&[ms(3_000)]), ms(2_000), "the ceiling");
    }

    #[cfg(feature = "http2")]
    #[test]
    fn only_refusals_for_what_the_connection_did_punish_it() {
        use h2::Reason as R;
        assert!(punishes(Received::Reset(R::ENHANCE_YOUR_CALM)));
        assert!(punishes(Received::GoAway(R::ENHANCE_YOUR_CALM)));
        assert!(punishes(Received::GoAway(R::INTERNAL_ERROR)));
        assert!(!punishes(Received::GoAway(R::NO_ERROR)), "a server recycling connections");
        assert!(!punishes(Received::Reset(R::REFUSED_STREAM)), "a stream limit");
        assert!(!punishes(Received::Reset(R::CANCEL)));
    }
}
