//! The http2 bench's figures: one run's, the medians of a cell's runs, the
//! tables (every run's detail, and one summary row per cell as the README
//! shows it) and the verdict against the targets. The fault cells
//! (`common::faults`) have tables of their own, with their own columns
//! (latency percentiles, the last failure's time, memory) and targets.

use std::time::Duration;

use drain_on_drop::DrainSnapshot;

use super::frames::FrameCounts;
use super::h2::Run;
use super::table::Table;

/// The clients compared, the columns; each on the cell's road (h2c, TLS
/// ALPN, TLS h2 only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// hyper-util's client over hyper-rustls' connector, bodies dropped.
    HyperAlone,
    /// The README's HTTP/2 stack: `RetryRefusedLayer` above
    /// `DrainOnDropLayer::new()` above the client built with
    /// `Http2Connector`.
    Stack,
    /// hyper-util alone, every body read to its end.
    ReadToEnd,
    /// Go's net/http client (`benches/go/goclient`).
    Go,
}

impl Policy {
    pub const ALL: [Policy; 4] = [Policy::HyperAlone, Policy::Stack, Policy::ReadToEnd, Policy::Go];

    pub fn label(self) -> &'static str {
        match self {
            Policy::HyperAlone => "hyper-util alone",
            Policy::Stack => "README stack",
            Policy::ReadToEnd => "read to the end",
            Policy::Go => "Go 1.27.3 net/http",
        }
    }
}

/// What the stack's failed requests are held to in a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailTarget {
    /// None wherever Go's client failed none (or did not run).
    NoneWhereGoNone,
    /// No more than Go's client's (Node's `stream.end` server, which
    /// refuses streams once whole bodies queued on reset streams fill a
    /// session, whatever the client does).
    AtMostGo,
    /// A fault cell's target (issue 48's figures).
    Fault(FaultTarget),
}

/// What the README's stack is held to in a fault cell, against hyper-util
/// alone (medians).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultTarget {
    /// Stalled handshakes: no more failed than alone, and a p99 within
    /// alone's + 1 s (a dial's patience on loopback).
    AnsweredAsAlone,
    /// Failing dials: the last failure at most 2 x alone's.
    FailsAsSoonAsAlone,
    /// A recycling server: no request failed.
    NoneLost,
    /// One refusal: at most alone's connections + 8.
    ConnectionsAsAlone,
    /// Random limits (issue 54): no more failed than alone, and connections
    /// punished at most as the documented tests allow (7, plus one per 193
    /// connections).
    Punished,
}

/// The kinds of cells, the targets that apply to each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// hyper's own server, h2c, near and far.
    Hyper,
    /// Every server over TLS (Go's net/http, Node's, nginx, hyper's), and
    /// Go's and Node's h2c.
    Servers,
    /// A server that ends connections early (nginx's `keepalive_requests`).
    Goaway,
    /// Endless bodies dropped, then one request timed to its head.
    Endless,
    /// Something goes wrong: stalled handshakes, failing dials, recycled
    /// connections, one refusal (`common::faults`).
    Faults,
    /// A server's stream limit (issue 53): Go's server announcing 100
    /// streams, each answer after 100 ms.
    Streams,
}

impl Group {
    pub fn label(self) -> &'static str {
        match self {
            Group::Hyper => "hyper's server, h2c",
            Group::Servers => "TLS, and real servers' h2c",
            Group::Goaway => "graceful GOAWAY",
            Group::Endless => "endless",
            Group::Faults => "faults",
            Group::Streams => "the server's stream limit",
        }
    }
}

/// One run's figures.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub run: Run,
    pub frames: FrameCounts,
    /// Until the last drain ended (the layer's traffic runs), else the
    /// traffic's time; endless cells: the timed request's time to its head.
    pub total: Duration,
    pub drains: Option<DrainSnapshot>,
    /// What the server counted (`Server::note`), and in fault cells what
    /// the stalling proxy held or the closing listener closed.
    pub note: String,
    /// Fault cells only.
    pub fault: Option<FaultFigures>,
}

/// A fault cell's run's figures beyond the others (see `common::faults`).
#[derive(Clone, Debug, Default)]
pub struct FaultFigures {
    /// Each request's time from the call to its head or its failure (a
    /// timed-out one: its time limit), failed requests included, nearest
    /// rank.
    pub p50: Duration,
    pub p99: Duration,
    /// When the last failure came, from the run's start.
    pub last_failure: Option<Duration>,
    /// The client process's resident memory growth over the run, KiB
    /// (each client runs in a process of its own).
    pub rss_growth_kib: i64,
    /// Connections the server punished (the random limits cell).
    pub punished: Option<usize>,
    /// The client process's most resident memory, KiB.
    pub max_rss_kib: Option<u64>,
}

impl Figures {
    /// Requests that succeeded, per second of `total`.
    pub fn rate(&self) -> f64 {
        (self.run.sent - self.run.failed) as f64 / self.total.as_secs_f64().max(1e-9)
    }
}

/// A policy's runs in one cell: the median run, and medians and ranges.
pub struct Medians {
    /// The median run (by rate, or by time in endless cells).
    pub run: Figures,
    pub failed: (usize, usize, usize),
    pub connections: usize,
    /// Connections, min and max over the runs.
    pub connection_range: (usize, usize),
    pub goaways: usize,
    pub server_goaways: usize,
    /// Rates (or times to head in ms), min and max over the runs.
    pub range: (f64, f64),
}

fn mid(mut v: Vec<usize>) -> usize {
    v.sort_unstable();
    v[v.len() / 2]
}

impl Medians {
    fn of(mut runs: Vec<Figures>, group: Group) -> Medians {
        let key = |f: &Figures| match (group, &f.fault) {
            (Group::Endless, _) => f.total.as_secs_f64() * 1e3,
            // Fault cells: the median run by p99 latency.
            (Group::Faults, Some(fault)) => fault.p99.as_secs_f64() * 1e3,
            _ => f.rate(),
        };
        runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
        let failed: Vec<usize> = runs.iter().map(|r| r.run.failed).collect();
        Medians {
            failed: (mid(failed.clone()), *failed.iter().min().unwrap(), *failed.iter().max().unwrap()),
            connections: mid(runs.iter().map(|r| r.frames.connections).collect()),
            connection_range: (
                runs.iter().map(|r| r.frames.connections).min().unwrap(),
                runs.iter().map(|r| r.frames.connections).max().unwrap(),
            ),
            goaways: mid(runs.iter().map(|r| r.frames.goaways).collect()),
            server_goaways: mid(runs.iter().map(|r| r.frames.server_goaways).collect()),
            range: (key(&runs[0]), key(&runs[runs.len() - 1])),
            run: runs[runs.len() / 2].clone(),
        }
    }

    fn failed(&self) -> String {
        match self.failed {
            (m, a, b) if a == b => m.to_string(),
            (m, a, b) => format!("{m} ({a}-{b})"),
        }
    }

    fn notes(&self) -> String {
        let mut notes = Vec::new();
        if let Some(d) = &self.run.drains {
            let reasons: Vec<String> =
                d.iter().filter(|(_, n)| *n > 0).map(|(r, n)| format!("{r} {n}")).collect();
            if !reasons.is_empty() {
                notes.push(reasons.join(", "));
            }
        }
        if self.run.frames.server_goaways > 0 {
            notes.push(format!("server GOAWAY {}", code_name(self.run.frames.server_goaway_code)));
        }
        if !self.run.note.is_empty() {
            notes.push(self.run.note.clone());
        }
        if let Some(e) = &self.run.run.first_error {
            notes.push(format!("first error: {}", e.chars().take(160).collect::<String>()));
        }
        notes.join("; ")
    }
}

/// One cell's group, label, failure target, and the medians of each policy
/// that ran.
type CellMedians = (Group, String, FailTarget, Vec<(Policy, Medians)>);

/// Every cell's medians, printed at the end.
pub struct Report {
    cells: Vec<CellMedians>,
}

impl Report {
    pub fn new() -> Report {
        Report { cells: Vec::new() }
    }

    /// A cell's runs, `runs[i]` those of `Policy::ALL[i]`.
    pub fn add(&mut self, group: Group, label: String, fail: FailTarget, runs: Vec<Vec<Figures>>) {
        let medians = Policy::ALL
            .iter()
            .zip(runs)
            .filter(|(_, r)| !r.is_empty())
            .map(|(p, r)| (*p, Medians::of(r, group)))
            .collect();
        self.cells.push((group, label, fail, medians));
    }

    pub fn print(&self, took: Duration) {
        let traffic: Vec<_> =
            self.cells.iter().filter(|c| c.0 != Group::Endless && c.0 != Group::Faults).collect();
        let mut t = Table::new(&[
            "cell",
            "policy",
            "sent",
            "failed",
            "conns",
            "GOAWAYs c / s",
            "RST cancel / closed / s",
            "req/s",
            "runs req/s",
            "time s",
            "notes",
        ]);
        for (_, label, _, medians) in &traffic {
            for (p, m) in medians {
                let f = &m.run.frames;
                t.row(vec![
                    label.clone(),
                    p.label().into(),
                    m.run.run.sent.to_string(),
                    m.failed(),
                    m.connections.to_string(),
                    format!("{} / {}", m.goaways, m.server_goaways),
                    format!("{} / {} / {}", f.rst_cancel, f.rst_closed, f.server_rst),
                    format!("{:.0}", m.run.rate()),
                    format!("{:.0}-{:.0}", m.range.0, m.range.1),
                    format!("{:.2}", m.run.total.as_secs_f64()),
                    m.notes(),
                ]);
            }
        }
        if !traffic.is_empty() {
            println!(
                "\nfailed (min-max if they differ), conns, GOAWAYs: medians of the runs; the rest: the median run by \
             requests per second (succeeded requests / time; for the stack, time until its last drain ended); \
             GOAWAYs c / s: with an error code sent by the client / any sent by the server; RST: RST_STREAM \
             CANCEL / STREAM_CLOSED sent by the client / any sent by the server.\n"
            );
            t.print();
        }
        let mut e =
            Table::new(&["cell", "policy", "head ms", "runs ms", "failed", "conns", "RST c / s", "notes"]);
        let endless: Vec<_> = self.cells.iter().filter(|c| c.0 == Group::Endless).collect();
        for (_, label, _, medians) in &endless {
            for (p, m) in medians {
                let f = &m.run.frames;
                e.row(vec![
                    label.clone(),
                    p.label().into(),
                    format!("{:.2}", m.run.total.as_secs_f64() * 1e3),
                    format!("{:.2}-{:.2}", m.range.0, m.range.1),
                    m.failed(),
                    m.connections.to_string(),
                    format!("{} / {}", f.rst_cancel, f.server_rst),
                    m.notes(),
                ]);
            }
        }
        if !endless.is_empty() {
            println!("Endless: time from the last request to its head (median run, runs min-max).\n");
            e.print();
        }
        self.faults();
        self.summary();
        let misses = self.misses();
        if misses.is_empty() {
            println!("Every target reached.");
        } else {
            println!("Targets missed (medians):\n- {}", misses.join("\n- "));
        }
        println!("\nbench took {:.1} s", took.as_secs_f64());
    }

    /// One row per cell: failed / connections / GOAWAYs (client's, then
    /// server's if any) and requests per second, or the time to the head.
    fn summary(&self) {
        let mut header = vec!["cell"];
        header.extend(Policy::ALL.iter().map(|p| p.label()));
        header.extend(["stack ÷ Go", "stack ÷ alone"]);
        let mut t = Table::new(&header);
        let cells: Vec<_> = self.cells.iter().filter(|c| c.0 != Group::Faults).collect();
        if cells.is_empty() {
            return;
        }
        for (group, label, _, medians) in cells {
            let mut row = vec![label.clone()];
            for p in Policy::ALL {
                row.push(match get(medians, p) {
                    None => "-".into(),
                    Some(m) if *group == Group::Endless => {
                        format!("{:.2} ms, {} failed", m.run.total.as_secs_f64() * 1e3, m.failed.0)
                    }
                    Some(m) => {
                        let server = if m.server_goaways > 0 {
                            format!("+{}", m.server_goaways)
                        } else {
                            String::new()
                        };
                        format!(
                            "{} / {} / {}{server}, {:.0}/s",
                            m.failed.0,
                            m.connections,
                            m.goaways,
                            m.run.rate()
                        )
                    }
                });
            }
            let ratio = |a, b| match (ratio(medians, a, b), *group == Group::Endless) {
                (Some(r), false) => format!("{r:.2}×"),
                _ => "-".into(),
            };
            row.push(ratio(Policy::Stack, Policy::Go));
            row.push(ratio(Policy::Stack, Policy::HyperAlone));
            t.row(row);
        }
        println!(
            "Summary: failed / connections / GOAWAYs (client's, +server's), succeeded requests per second; \
             endless cells: time to the head.\n"
        );
        t.print();
    }

    /// The targets, on the README's stack: no failed request wherever Go's
    /// client failed none (on Node's `stream.end` server, no more than Go's
    /// client's); a rate at least Go's, and at least 0.95 of hyper-util
    /// alone's where alone fails none; at most 2 connections more than Go's
    /// client opened (the frame counter's count); in endless cells, the
    /// stack's head within 10 ms of alone's.
    fn misses(&self) -> Vec<String> {
        let mut misses = Vec::new();
        for (group, label, fail, medians) in &self.cells {
            if let FailTarget::Fault(target) = fail {
                misses.extend(fault_miss(label, *target, medians));
                continue;
            }
            if *group == Group::Endless {
                if let (Some(s), Some(a)) = (get(medians, Policy::Stack), get(medians, Policy::HyperAlone))
                    && s.run.total > a.run.total + Duration::from_millis(10)
                {
                    let ms = |m: &Medians| m.run.total.as_secs_f64() * 1e3;
                    let runs = |m: &Medians| format!("{:.1}-{:.1}", m.range.0, m.range.1);
                    misses.push(format!(
                        "{label}: the stack's head after {:.1} ms ({} ms), hyper-util alone's {:.1} ({} ms)",
                        ms(s),
                        runs(s),
                        ms(a),
                        runs(a)
                    ));
                }
                continue;
            }
            let Some(stack) = get(medians, Policy::Stack) else { continue };
            let go = get(medians, Policy::Go);
            let go_failed = go.map(|g| g.failed.0);
            let failed_miss = match fail {
                FailTarget::NoneWhereGoNone => stack.failed.0 > 0 && go_failed.is_none_or(|f| f == 0),
                FailTarget::AtMostGo => stack.failed.0 > go_failed.unwrap_or(0),
                FailTarget::Fault(_) => false,
            };
            if failed_miss {
                let others = |p| get(medians, p).map_or("-".into(), |m: &Medians| m.failed());
                misses.push(format!(
                    "{label}: the README's stack failed {} (alone {}, Go {}); first error: {}",
                    stack.failed(),
                    others(Policy::HyperAlone),
                    others(Policy::Go),
                    first_error(stack)
                ));
            }
            let ranges = |x: &Medians, y: &Medians| {
                format!("{:.0}-{:.0} against {:.0}-{:.0} req/s", x.range.0, x.range.1, y.range.0, y.range.1)
            };
            let conns = |m: &Medians| {
                let (lo, hi) = m.connection_range;
                if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") }
            };
            if *group == Group::Streams {
                // Issue 53: at least 0.95 of Go's rate, no more connections
                // than Go's client (every run's), and one connection where
                // the callers fit in the server's streams.
                if let Some(go) = go {
                    if stack.run.rate() < 0.95 * go.run.rate() {
                        let r = stack.run.rate() / go.run.rate();
                        misses.push(format!("{label}: stack ÷ Go {r:.2}× ({})", ranges(stack, go)));
                    }
                    if stack.connection_range.1 > go.connection_range.0 {
                        misses.push(format!(
                            "{label}: the stack opened {} connections, Go's client {}",
                            conns(stack),
                            conns(go)
                        ));
                    }
                }
                if label.contains(" 64 callers") && stack.connection_range.1 > 1 {
                    misses
                        .push(format!("{label}: the stack opened {} connections, 1 expected", conns(stack)));
                }
                continue;
            }
            if let Some(go) = go
                && stack.run.rate() < go.run.rate()
            {
                let r = stack.run.rate() / go.run.rate();
                misses.push(format!("{label}: stack ÷ Go {r:.2}× ({})", ranges(stack, go)));
            }
            if let Some(alone) = get(medians, Policy::HyperAlone)
                && alone.failed.0 == 0
                && stack.run.rate() < 0.95 * alone.run.rate()
            {
                let r = stack.run.rate() / alone.run.rate();
                misses.push(format!("{label}: stack ÷ alone {r:.2}× ({})", ranges(stack, alone)));
            }
            if let Some(go) = go
                && stack.connections > go.connections + 2
            {
                misses.push(format!(
                    "{label}: the stack opened {} connections ({}), Go's client {} ({})",
                    stack.connections,
                    conns(stack),
                    go.connections,
                    conns(go)
                ));
            }
        }
        misses
    }
}

impl Report {
    /// The fault cells: every policy's median run with its latencies, last
    /// failure and memory, then one row per cell side by side.
    fn faults(&self) {
        let cells: Vec<_> = self.cells.iter().filter(|c| c.0 == Group::Faults).collect();
        if cells.is_empty() {
            return;
        }
        let mut t = Table::new(&[
            "cell",
            "policy",
            "sent",
            "failed",
            "p50 ms",
            "p99 ms",
            "last failure ms",
            "conns",
            "memory",
            "time s",
            "notes",
        ]);
        for (_, label, _, medians) in &cells {
            for (p, m) in medians {
                let Some(f) = &m.run.fault else { continue };
                t.row(vec![
                    label.clone(),
                    p.label().into(),
                    m.run.run.sent.to_string(),
                    m.failed(),
                    ms(f.p50),
                    ms(f.p99),
                    f.last_failure.map_or("-".into(), ms),
                    conns(m),
                    memory(f),
                    format!("{:.2}", m.run.total.as_secs_f64()),
                    m.notes(),
                ]);
            }
        }
        println!(
            "\nFaults: each request under its own time limit (a timed-out one fails); failed and conns: medians \
             of the runs (min-max if they differ); the rest: the median run by p99. p50 / p99: each request's \
             time from the call to its head or failure, failed ones included (nearest rank); last failure: \
             from the run's start; conns: TLS connections the client opened (the frame counter's); memory: \
             the client process's resident memory growth over the run (VmRSS of /proc/self/status, the \
             resident pages of /proc/self/statm, before the client is built and after its last request) and \
             in brackets its most resident (VmHWM); every client runs in a process of its own (the Rust ones: \
             this binary, --fault-client), the servers and proxies elsewhere. Notes: held = connections the \
             stalling proxy held unanswered, closed = connections the closing listener accepted.\n"
        );
        t.print();
        let mut header = vec!["cell"];
        let policies = [Policy::HyperAlone, Policy::Stack, Policy::Go];
        header.extend(policies.iter().map(|p| p.label()));
        let mut s = Table::new(&header);
        for (_, label, _, medians) in &cells {
            let mut row = vec![label.clone()];
            for p in policies {
                row.push(match get(medians, p) {
                    Some(m @ Medians { run: Figures { fault: Some(f), .. }, .. }) => {
                        let last = f.last_failure.map_or(String::new(), |l| format!(", last at {}", ms(l)));
                        let punished = f.punished.map_or(String::new(), |n| format!(", {n} punished"));
                        format!(
                            "{} failed, {} / {} ms, {} conns{punished}, {}{last}",
                            m.failed.0,
                            ms(f.p50),
                            ms(f.p99),
                            m.connections,
                            memory(f)
                        )
                    }
                    _ => "-".into(),
                });
            }
            s.row(row);
        }
        println!(
            "\nFaults side by side: failed, p50 / p99 ms, connections[, connections the server punished], \
             memory[, when the last failure came, ms].\n"
        );
        s.print();
        println!();
    }
}

/// A duration in ms, to a tenth below 100 ms.
fn ms(d: Duration) -> String {
    let v = d.as_secs_f64() * 1e3;
    if v < 100.0 { format!("{v:.1}") } else { format!("{v:.0}") }
}

/// Connections, median (min-max if the runs differ).
fn conns(m: &Medians) -> String {
    match m.connection_range {
        (lo, hi) if lo == hi => m.connections.to_string(),
        (lo, hi) => format!("{} ({lo}-{hi})", m.connections),
    }
}

/// The memory growth, in MiB, and the most resident.
fn memory(f: &FaultFigures) -> String {
    let growth = format!("{:+.1} MiB", f.rss_growth_kib as f64 / 1024.0);
    match f.max_rss_kib {
        Some(max) => format!("{growth} (max {:.1})", max as f64 / 1024.0),
        None => growth,
    }
}

/// Whether the stack missed a fault cell's target, and how.
fn fault_miss(label: &str, target: FaultTarget, medians: &[(Policy, Medians)]) -> Option<String> {
    let (stack, alone) = (get(medians, Policy::Stack)?, get(medians, Policy::HyperAlone)?);
    let (sf, af) = (stack.run.fault.as_ref()?, alone.run.fault.as_ref()?);
    let miss = match target {
        FaultTarget::AnsweredAsAlone => {
            stack.failed.0 > alone.failed.0 || sf.p99 > af.p99 + Duration::from_secs(1)
        }
        FaultTarget::FailsAsSoonAsAlone => {
            let last = |f: &FaultFigures| f.last_failure.unwrap_or_default();
            last(sf) > 2 * last(af)
        }
        FaultTarget::NoneLost => stack.failed.0 > 0,
        FaultTarget::ConnectionsAsAlone => stack.connections > alone.connections + 8,
        FaultTarget::Punished => {
            stack.failed.0 > alone.failed.0 || sf.punished.unwrap_or(0) > 7 + stack.connections / 193
        }
    };
    let last = |f: &FaultFigures| f.last_failure.map_or("-".into(), ms);
    miss.then(|| {
        format!(
            "{label}: the README's stack failed {}, p99 {} ms, {} connections, last failure at {} ms \
             (alone: {}, {} ms, {}, {} ms){}",
            stack.failed(),
            ms(sf.p99),
            stack.connections,
            last(sf),
            alone.failed(),
            ms(af.p99),
            alone.connections,
            last(af),
            match first_error(stack) {
                e if e.is_empty() => String::new(),
                e => format!("; first error: {e}"),
            }
        )
    })
}

/// An HTTP/2 error code's name (RFC 9113 section 7).
fn code_name(code: usize) -> String {
    const NAMES: [&str; 14] = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
        "CONNECT_ERROR",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED",
    ];
    NAMES.get(code).map_or_else(|| format!("0x{code:x}"), |n| n.to_string())
}

/// The median run's first error, shortened.
fn first_error(m: &Medians) -> String {
    m.run.run.first_error.as_deref().unwrap_or_default().chars().take(120).collect()
}

fn get(medians: &[(Policy, Medians)], p: Policy) -> Option<&Medians> {
    medians.iter().find(|(q, _)| *q == p).map(|(_, m)| m)
}

/// `a`'s requests per second over `b`'s (median runs).
fn ratio(medians: &[(Policy, Medians)], a: Policy, b: Policy) -> Option<f64> {
    Some(get(medians, a)?.run.rate() / get(medians, b)?.run.rate())
}
