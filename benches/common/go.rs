//! The Go 1.27 client (`benches/go/goclient`, built by `bash benches/go.sh`),
//! run as a child process against the benches' own servers and proxies, so
//! that its figures come from the same run as the Rust clients'.
//!
//! The calls block until the client exits: the servers and proxies run on
//! their own runtimes meanwhile. The client prints one JSON line, read here
//! by hand (see [`parse`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use http::Uri;

use super::BoxError;
use super::tls::SERVER_NAME;

/// What one run of the Go client reported.
#[derive(Clone, Debug, PartialEq)]
pub struct GoRun {
    /// Requests sent (`seq` and `far`: all of them).
    pub sent: usize,
    /// Of those, requests that failed or had a status other than 200.
    pub failed: usize,
    /// From the first request to the last response handled.
    pub elapsed: Duration,
    /// The first failure's message.
    pub first_error: Option<String>,
}

/// The Go client: `$DRAIN_BENCH_GO` if set, else `target/go/goclient` of
/// the repository if built; either one only if [`current`].
pub fn client() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("DRAIN_BENCH_GO").filter(|p| !p.is_empty()) {
        return current(PathBuf::from(path), "goclient");
    }
    // `benches/` is a package of its own: the repository is its parent.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    current(Some(repo.join("target/go/goclient")).filter(|p| p.is_file())?, "goclient")
}

/// Says how to get the Go figures when [`client`] finds no client.
pub fn missing_note() -> &'static str {
    "Go 1.27 not measured: no Go client built from the current source (run `bash benches/go.sh` to \
     build target/go/goclient, or set DRAIN_BENCH_GO to a goclient binary)."
}

/// `bin` if it was built after the last change to its source,
/// `benches/go/<cmd>/` of this repository; else `None`, said on standard
/// error: a binary built before a route or flag was added answers the
/// bench's requests with 404s or usage errors, which would void its cells
/// without a word.
pub fn current(bin: PathBuf, cmd: &str) -> Option<PathBuf> {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("go").join(cmd);
    let newest = std::fs::read_dir(&source)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| modified(&entry.path()))
        .max();
    match (modified(&bin), newest) {
        (Some(built), Some(changed)) if built < changed => {
            eprintln!(
                "{} is older than its source {}: not used (rebuild: bash benches/go.sh)",
                bin.display(),
                source.display()
            );
            None
        }
        _ => Some(bin),
    }
}

/// `n` sequential GETs of `url` over plain HTTP/1.1, each body closed
/// unread, or after one read of up to 16 KiB when `read_one` (`goclient
/// seq`).
pub fn seq(bin: &Path, url: &Uri, n: usize, read_one: bool) -> Result<GoRun, BoxError> {
    let mut cmd = Command::new(bin);
    cmd.args(["seq", "-url", &url.to_string(), "-n", &n.to_string()]);
    if read_one {
        cmd.arg("-read-one");
    }
    run(cmd, "seq")
}

/// `n` sequential GETs of `url` over HTTP/1.1 and TLS, trusting `ca_pem`,
/// each body closed unread (`goclient far`).
pub fn far(bin: &Path, url: &Uri, n: usize, ca_pem: &Path) -> Result<GoRun, BoxError> {
    let mut cmd = Command::new(bin);
    cmd.args(["far", "-url", &url.to_string(), "-n", &n.to_string(), "-servername", SERVER_NAME]);
    cmd.arg("-ca").arg(ca_pem);
    run(cmd, "far")
}

/// `callers` goroutines sharing one HTTP/2 client, sending GETs of `url`
/// until `n` were sent in all or `secs` seconds passed, each body closed
/// unread after the head (`goclient h2`): h2c with prior knowledge for
/// `http://`; for `https://`, TLS trusting `ca_pem`, offering h2 alone,
/// or with `alpn` h2 and http/1.1 as Go's default transport does (`-alpn`).
pub fn h2(
    bin: &Path,
    url: &Uri,
    alpn: bool,
    callers: usize,
    n: usize,
    secs: u64,
    ca_pem: Option<&Path>,
) -> Result<GoRun, BoxError> {
    let mut cmd = Command::new(bin);
    let (callers, n, secs) = (callers.to_string(), n.to_string(), secs.to_string());
    cmd.args(["h2", "-url", &url.to_string(), "-callers", &callers, "-n", &n, "-secs", &secs]);
    if let Some(ca) = ca_pem {
        cmd.arg("-ca").arg(ca).args(["-servername", SERVER_NAME]);
    }
    if alpn {
        cmd.arg("-alpn");
    }
    run(cmd, "h2")
}

/// What one run of the Go client reported in a fault cell
/// (`goclient h2 -timeout D -latency`).
#[derive(Clone, Debug, PartialEq)]
pub struct GoFaultRun {
    pub run: GoRun,
    /// Each request's time from the call to its head or failure (failed
    /// ones included), nearest rank.
    pub p50: Duration,
    pub p99: Duration,
    /// When the last failure came, from the start.
    pub last_failure: Option<Duration>,
    /// The client process's resident memory, its growth over the run
    /// (`/proc/self/statm` before the first request and after the last),
    /// and its most (`ru_maxrss`), in KiB.
    pub rss_growth_kib: i64,
    pub max_rss_kib: u64,
}

/// [`h2`] over TLS by ALPN (h2 and http/1.1) for a fault cell: `callers`
/// goroutines, `n` requests or `limit`, each request under `timeout`
/// (`-timeout`), with latencies, the last failure's time and memory
/// (`-latency`).
pub fn h2_faults(
    bin: &Path,
    url: &Uri,
    callers: usize,
    n: usize,
    limit: Duration,
    timeout: Duration,
    ca_pem: &Path,
) -> Result<GoFaultRun, BoxError> {
    let mut cmd = Command::new(bin);
    let (callers, n) = (callers.to_string(), n.to_string());
    let secs = format!("{:.3}", limit.as_secs_f64());
    let timeout = format!("{}ms", timeout.as_millis());
    cmd.args(["h2", "-url", &url.to_string(), "-callers", &callers, "-n", &n, "-secs", &secs]);
    cmd.arg("-ca").arg(ca_pem).args(["-servername", SERVER_NAME, "-alpn"]);
    cmd.args(["-timeout", &timeout, "-latency"]);
    let out = cmd.output().map_err(|e| format!("running {cmd:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{cmd:?} failed ({}): {}", out.status, stderr.trim()).into());
    }
    let line = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    parse_faults(line).ok_or_else(|| format!("{cmd:?} printed no h2 -latency result: {stdout:?}").into())
}

/// Reads the line of `goclient h2 -latency`: [`parse`]'s keys and
/// `p50_ms`, `p99_ms`, `last_failure_ms` (0: no failure),
/// `rss_growth_kib` (may be negative), `max_rss_kib`.
pub fn parse_faults(line: &str) -> Option<GoFaultRun> {
    let run = parse(line, "h2")?;
    let ms = |key| number(line, key).map(|v| Duration::from_secs_f64(v / 1e3));
    let last = ms("last_failure_ms")?;
    Some(GoFaultRun {
        run,
        p50: ms("p50_ms")?,
        p99: ms("p99_ms")?,
        last_failure: (!last.is_zero()).then_some(last),
        rss_growth_kib: signed(line, "rss_growth_kib")? as i64,
        max_rss_kib: number(line, "max_rss_kib")? as u64,
    })
}

/// One goroutine: `drops` GETs of `drop_url` (endless bodies), each closed
/// right after its head, then one GET of `url`, h2c with prior knowledge
/// (`goclient endless`); `elapsed` is that last request's time to its head.
pub fn endless(bin: &Path, drop_url: &Uri, drops: usize, url: &Uri) -> Result<GoRun, BoxError> {
    let mut cmd = Command::new(bin);
    cmd.args(["endless", "-drop-url", &drop_url.to_string(), "-drops", &drops.to_string()]);
    cmd.args(["-url", &url.to_string()]);
    run(cmd, "endless")
}

fn run(mut cmd: Command, mode: &str) -> Result<GoRun, BoxError> {
    let out = cmd.output().map_err(|e| format!("running {cmd:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{cmd:?} failed ({}): {}", out.status, stderr.trim()).into());
    }
    let line = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    parse(line, mode).ok_or_else(|| format!("{cmd:?} printed no {mode} result: {stdout:?}").into())
}

/// Reads the client's line, `{"mode":"far","requests":N,"failed":F,
/// "elapsed_ms":T,"first_error":"..."}` (`seq`: the same; `h2` and
/// `endless`: `sent` for `requests`).
/// Each key is taken at its first occurrence: `first_error`, the only
/// free text, comes last.
pub fn parse(line: &str, mode: &str) -> Option<GoRun> {
    if string(line, "mode")? != mode {
        return None;
    }
    let sent = number(line, if mode == "h2" || mode == "endless" { "sent" } else { "requests" })?;
    let first_error = string(line, "first_error").filter(|e| !e.is_empty());
    Some(GoRun {
        sent: sent as usize,
        failed: number(line, "failed")? as usize,
        elapsed: Duration::from_secs_f64(number(line, "elapsed_ms")? / 1e3),
        first_error,
    })
}

/// One trial of `goclient keepalive`, as it reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoKeepaliveTrial {
    /// The second request's method.
    pub method: String,
    /// Where the second request went, from the measured close.
    pub offset_us: i64,
    /// The second request's id.
    pub id: u64,
    /// Connections the trial's client dialed.
    pub connections: usize,
    /// Connections the second request was given (more than one: the
    /// Transport sent it again).
    pub attempts: usize,
    /// `Ok`, or the second request's error (`first: ...` when the first
    /// failed).
    pub result: Result<(), String>,
}

/// The keep-alive race (`goclient keepalive`): `trials` trials per method
/// of `methods` (interleaved), started `stagger` apart and run in parallel,
/// each on a client of its own: a GET of `base_url?id=B+2k` closed unread,
/// then the method's request (`id=B+2k+1`) at `close` + the trial's offset
/// after the first response, offsets taken in turn from `offsets_us`.
#[allow(clippy::too_many_arguments)]
pub fn keepalive(
    bin: &Path,
    base_url: &str,
    close: Duration,
    offsets_us: &[i64],
    methods: &[&str],
    trials: usize,
    stagger: Duration,
    id_base: u64,
) -> Result<(GoRun, Vec<GoKeepaliveTrial>), BoxError> {
    let mut cmd = Command::new(bin);
    let offsets: Vec<String> = offsets_us.iter().map(|o| o.to_string()).collect();
    cmd.args(["keepalive", "-url", base_url, "-close-ms", &format!("{:.3}", close.as_secs_f64() * 1e3)]);
    cmd.args(["-offsets-us", &offsets.join(","), "-methods", &methods.join(",")]);
    cmd.args(["-trials", &trials.to_string(), "-stagger-ms", &format!("{:.3}", stagger.as_secs_f64() * 1e3)]);
    cmd.args(["-id-base", &id_base.to_string()]);
    let out = cmd.output().map_err(|e| format!("running {cmd:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{cmd:?} failed ({}): {}", out.status, stderr.trim()).into());
    }
    let line = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    parse_keepalive(line).ok_or_else(|| format!("{cmd:?} printed no keepalive result: {stdout:?}").into())
}

/// Reads the line of `goclient keepalive`: [`parse`]'s keys (`sent` for
/// `requests`) and `trials`, `METHOD,offset_us,id,connections,attempts,result`
/// separated by `;`.
pub fn parse_keepalive(line: &str) -> Option<(GoRun, Vec<GoKeepaliveTrial>)> {
    if string(line, "mode")? != "keepalive" {
        return None;
    }
    let run = GoRun {
        sent: number(line, "sent")? as usize,
        failed: number(line, "failed")? as usize,
        elapsed: Duration::from_secs_f64(number(line, "elapsed_ms")? / 1e3),
        first_error: string(line, "first_error").filter(|e| !e.is_empty()),
    };
    let mut trials = Vec::new();
    for entry in string(line, "trials")?.split(';').filter(|e| !e.is_empty()) {
        let mut fields = entry.splitn(6, ',');
        let method = fields.next()?.to_string();
        let offset_us = fields.next()?.parse().ok()?;
        let id = fields.next()?.parse().ok()?;
        let connections = fields.next()?.parse().ok()?;
        let attempts = fields.next()?.parse().ok()?;
        let result = match fields.next()? {
            "ok" => Ok(()),
            error => Err(error.to_string()),
        };
        trials.push(GoKeepaliveTrial { method, offset_us, id, connections, attempts, result });
    }
    Some((run, trials))
}

/// What follows `"key":`.
fn value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!("\"{key}\":"))?;
    Some(line[at + key.len() + 3..].trim_start())
}

fn number(line: &str, key: &str) -> Option<f64> {
    signed(line, key).filter(|x: &f64| *x >= 0.0)
}

/// A number, negative ones too.
fn signed(line: &str, key: &str) -> Option<f64> {
    let v = value(line, key)?;
    let end = v.find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c))).unwrap_or(v.len());
    v[..end].parse().ok()
}

/// A JSON string value, unescaped.
fn string(line: &str, key: &str) -> Option<String> {
    let mut chars = value(line, key)?.strip_prefix('"')?.chars();
    let mut out = String::new();
    loop {
        match chars.next()? {
            '"' => return Some(out),
            '\\' => out.push(match chars.next()? {
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                'b' => '\u{8}',
                'f' => '\u{c}',
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    char::from_u32(u32::from_str_radix(&hex, 16).ok()?).unwrap_or('\u{fffd}')
                }
                c => c, // `"`, `\`, `/`
            }),
            c => out.push(c),
        }
    }
}

/// Bench targets have no test harness (cargo strips `#[test]` functions):
/// run by hand, with this file as a module `common::go` of a `rustc --test`
/// crate that defines `common::BoxError` and `common::tls::SERVER_NAME`.
#[cfg(test)]
mod tests {
    #[test]
    fn parses_the_clients_lines() {
        use super::parse;
        use std::time::Duration;

        let far = r#"{"mode":"far","requests":30,"failed":0,"elapsed_ms":9190.123,"first_error":""}"#;
        let run = parse(far, "far").expect("far line");
        assert_eq!((run.sent, run.failed, run.first_error), (30, 0, None));
        assert_eq!(run.elapsed, Duration::from_micros(9_190_123));
        assert_eq!(parse(far, "h2"), None);
        assert_eq!(parse(far, "seq"), None);

        let seq = r#"{"mode":"seq","requests":100,"failed":0,"elapsed_ms":41.5,"first_error":""}"#;
        let run = parse(seq, "seq").expect("seq line");
        assert_eq!((run.sent, run.failed, run.first_error), (100, 0, None));
        assert_eq!(run.elapsed, Duration::from_micros(41_500));

        let h2 = r#"{"mode":"h2","sent":2000,"failed":2,"elapsed_ms":12,"first_error":"Get \"http://x/\": a\\b \u00e9 \"sent\":1"}"#;
        let run = parse(h2, "h2").expect("h2 line");
        assert_eq!((run.sent, run.failed), (2000, 2));
        assert_eq!(run.elapsed, Duration::from_millis(12));
        assert_eq!(run.first_error.as_deref(), Some(r#"Get "http://x/": a\b é "sent":1"#));
        assert_eq!(parse("not json", "h2"), None);

        let faults = r#"{"mode":"h2","sent":24,"failed":24,"elapsed_ms":1603.2,"p50_ms":401.5,"p99_ms":402.75,"last_failure_ms":1602.5,"rss_growth_kib":-12,"max_rss_kib":14336,"first_error":"EOF"}"#;
        let f = super::parse_faults(faults).expect("h2 -latency line");
        assert_eq!((f.run.sent, f.run.failed, f.rss_growth_kib, f.max_rss_kib), (24, 24, -12, 14336));
        assert_eq!((f.p50, f.p99), (Duration::from_micros(401_500), Duration::from_micros(402_750)));
        assert_eq!(f.last_failure, Some(Duration::from_micros(1_602_500)));
        assert_eq!(super::parse_faults(h2), None);

        let endless = r#"{"mode":"endless","sent":34,"failed":0,"elapsed_ms":0.528,"first_error":""}"#;
        let run = parse(endless, "endless").expect("endless line");
        assert_eq!((run.sent, run.failed, run.first_error), (34, 0, None));
        assert_eq!(run.elapsed, Duration::from_micros(528));
    }
}

/// Run by hand as [`tests`] is.
#[cfg(test)]
mod keepalive_tests {
    #[test]
    fn parses_the_keepalive_line() {
        let line = r#"{"mode":"keepalive","sent":3,"failed":1,"elapsed_ms":1301.5,"trials":"GET,-500,101,1,1,ok;POST,500,103,2,1,Post 'http://127.0.0.1:1/ka?id=103': EOF;GET,1500,105,2,2,ok","first_error":"Post \"http://127.0.0.1:1/ka?id=103\": EOF"}"#;
        let (run, trials) = super::parse_keepalive(line).expect("keepalive line");
        assert_eq!((run.sent, run.failed), (3, 1));
        assert_eq!(trials.len(), 3);
        assert_eq!((trials[0].method.as_str(), trials[0].offset_us, trials[0].id), ("GET", -500, 101));
        assert_eq!(trials[1].result, Err("Post 'http://127.0.0.1:1/ka?id=103': EOF".to_string()));
        assert_eq!((trials[2].connections, trials[2].attempts, trials[2].result.clone()), (2, 2, Ok(())));
        assert_eq!(super::parse_keepalive(r#"{"mode":"h2","sent":1}"#), None);
    }
}
