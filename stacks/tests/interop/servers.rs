//! Real servers as child processes of the test, on free ports of 127.0.0.1,
//! each with counters read at the server.
//!
//! - nginx: a foreground process (no daemon, no master) with a generated
//!   config (`nginx.conf.in`) in a temporary prefix that also holds its pid
//!   file, logs and document root. TCP connections come from `stub_status`
//!   (`accepts`), connections that served a request from the access log's
//!   `$connection` serial numbers.
//! - Node (`server.js`) and uvicorn (`asgi_app.py`): they bind port 0, print
//!   `READY <port>`, and report their counters on `GET /stats`.
//!
//! A server that cannot be started panics with what to install: these tests
//! fail when their servers are missing, they never skip.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::Uri;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The directory of this test target's configs and scripts.
fn interop_dir() -> PathBuf {
    // This file is built by the `stacks` member, from its sibling directory.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

/// Counters read at the server since it started. Cells subtract two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ServerCounts {
    /// TCP connections accepted (the counters' own connections excluded).
    pub(crate) accepted: u64,
    /// Of `accepted`: connections that carried at least one request.
    pub(crate) served: u64,
    /// Requests served (the counters' own excluded).
    pub(crate) requests: u64,
}

impl std::ops::Sub for ServerCounts {
    type Output = ServerCounts;
    fn sub(self, before: ServerCounts) -> ServerCounts {
        ServerCounts {
            accepted: self.accepted - before.accepted,
            served: self.served - before.served,
            requests: self.requests - before.requests,
        }
    }
}

/// A child process that is killed (by its pid) and reaped when dropped.
struct Process {
    child: Child,
    /// Node and Python exit when this closes, should the test be killed
    /// before it can kill them.
    _stdin: Option<ChildStdin>,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One running server.
pub(crate) struct Server {
    pub(crate) name: &'static str,
    /// The server's version, as it reports it.
    pub(crate) version: String,
    port: u16,
    /// nginx's HTTP/2 port (h2c, `keepalive_requests 100`).
    h2_port: Option<u16>,
    kind: Kind,
    _process: Process,
}

enum Kind {
    Nginx {
        prefix: PathBuf,
        /// `/stats` queries made so far: each is a connection `accepts` counts.
        stats_queries: AtomicU64,
    },
    /// Reports its counters as JSON on `GET /stats`.
    Json,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Kind::Nginx { prefix, .. } = &self.kind {
            // Kill nginx before its files go (`Process` would only kill it after this).
            let _ = self._process.child.kill();
            let _ = self._process.child.wait();
            // INTEROP_KEEP=1 keeps the prefix (access.log, error.log) to look at.
            if std::env::var_os("INTEROP_KEEP").is_none() {
                let _ = std::fs::remove_dir_all(prefix);
            }
        }
    }
}

/// The sizes of the random files nginx serves, in KiB (`/static/{n}k.bin`).
pub(crate) const NGINX_FILE_KIB: [usize; 4] = [1, 64, 256, 257];

impl Server {
    /// Starts nginx on a free port with `nginx.conf.in`.
    pub(crate) async fn nginx() -> Server {
        Server::nginx_keepalive("75s").await
    }

    /// Starts nginx with `nginx.conf.in`, its `keepalive_timeout` set to
    /// `timeout` (75 s there, Debian's default).
    pub(crate) async fn nginx_keepalive(timeout: &str) -> Server {
        let binary = nginx_binary();
        let version = command_version(&binary, "-v", NGINX_HELP);
        let mut last_error = String::new();
        // The port is found free, released, then given to nginx: retry if
        // someone took it in between.
        for _ in 0..3 {
            let prefix = temp_dir("nginx");
            let root = prefix.join("root");
            std::fs::create_dir_all(root.join("static")).unwrap();
            for (i, kib) in NGINX_FILE_KIB.into_iter().enumerate() {
                let path = root.join(format!("static/{kib}k.bin"));
                std::fs::write(path, random_bytes(kib * 1024, i as u64 + 1)).unwrap();
            }
            let (port, h2_port) = (free_port(), free_port());
            let template = std::fs::read_to_string(interop_dir().join("nginx.conf.in")).unwrap();
            let config = template
                .replace("@PREFIX@", prefix.to_str().unwrap())
                .replace("@ROOT@", root.to_str().unwrap())
                .replace("@PORT@", &port.to_string())
                .replace("@H2_PORT@", &h2_port.to_string())
                .replace("keepalive_timeout 75s;", &format!("keepalive_timeout {timeout};"));
            let config_path = prefix.join("nginx.conf");
            std::fs::write(&config_path, config).unwrap();
            let child = Command::new(&binary)
                .arg("-p")
                .arg(&prefix)
                .arg("-c")
                .arg(&config_path)
                .arg("-e")
                .arg(prefix.join("error.log"))
                .stdin(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("could not start {binary:?}: {e}; {NGINX_HELP}"));
            let mut server = Server {
                name: "nginx",
                version: version.clone(),
                port,
                h2_port: Some(h2_port),
                kind: Kind::Nginx { prefix: prefix.clone(), stats_queries: AtomicU64::new(0) },
                _process: Process { child, _stdin: None },
            };
            match server.wait_ready().await {
                Ok(()) => return server,
                Err(e) => {
                    let log = std::fs::read_to_string(prefix.join("error.log")).unwrap_or_default();
                    last_error = format!("{e}; error.log:\n{log}");
                    if !log.contains("Address already in use") {
                        break;
                    }
                }
            }
        }
        panic!("nginx did not start: {last_error}");
    }

    /// Starts `node server.js ARGS`.
    pub(crate) async fn node(args: &[&str]) -> Server {
        let binary = std::env::var("INTEROP_NODE").unwrap_or_else(|_| "node".into());
        let version = command_version(&binary, "-v", NODE_HELP);
        let mut command = Command::new(&binary);
        command.arg(interop_dir().join("server.js")).args(args);
        let mut server = Server::child("node", version, command, NODE_HELP).await;
        server.wait_ready().await.unwrap_or_else(|e| panic!("node did not answer: {e}"));
        server
    }

    /// Starts `python3 asgi_app.py ARGS` (uvicorn with the h11 protocol, starlette).
    pub(crate) async fn uvicorn(args: &[&str]) -> Server {
        let python = std::env::var("INTEROP_PYTHON").unwrap_or_else(|_| "python3".into());
        let version = {
            let out = Command::new(&python)
                .args(["-c", "import uvicorn, starlette, h11; print(f'uvicorn {uvicorn.__version__}, starlette {starlette.__version__}, h11 {h11.__version__}')"])
                .output()
                .unwrap_or_else(|e| panic!("could not run {python:?}: {e}; {UVICORN_HELP}"));
            assert!(
                out.status.success(),
                "{python:?} cannot import uvicorn and starlette: {}; {UVICORN_HELP}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let mut command = Command::new(&python);
        command.arg(interop_dir().join("asgi_app.py")).args(args);
        let mut server = Server::child("uvicorn", version, command, UVICORN_HELP).await;
        server.wait_ready().await.unwrap_or_else(|e| panic!("uvicorn did not answer: {e}"));
        server
    }

    /// Spawns a server that prints `READY <port>` on stdout.
    async fn child(name: &'static str, version: String, mut command: Command, help: &str) -> Server {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {command:?}: {e}; {help}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads the first line, then keeps the pipe open (and drained) for the child's life.
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            for _ in lines {}
        });
        let process = Process { child, _stdin: stdin };
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Some(Ok(line))) => line,
            other => panic!("{name} ({command:?}) did not print READY <port>: {other:?}; {help}"),
        };
        let port = line
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} printed {line:?}, not READY <port>"));
        Server { name, version, port, h2_port: None, kind: Kind::Json, _process: process }
    }

    /// Polls the counters until they answer (at most 10 s).
    async fn wait_ready(&mut self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self._process.child.try_wait() {
                return Err(format!("{} exited with {status}", self.name));
            }
            match self.try_counts().await {
                Ok(_) => return Ok(()),
                Err(e) if start.elapsed() > Duration::from_secs(10) => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    pub(crate) fn uri(&self, path_and_query: &str) -> Uri {
        format!("http://127.0.0.1:{}{path_and_query}", self.port).parse().unwrap()
    }

    /// nginx's HTTP/2 server (h2c, a graceful GOAWAY every 100 requests).
    pub(crate) fn h2_uri(&self, path_and_query: &str) -> Uri {
        let port = self.h2_port.expect("only nginx serves HTTP/2 here");
        format!("http://127.0.0.1:{port}{path_and_query}").parse().unwrap()
    }

    /// The server's counters now.
    pub(crate) async fn counts(&self) -> ServerCounts {
        self.try_counts().await.unwrap_or_else(|e| panic!("{} counters: {e}", self.name))
    }

    /// A field of the JSON that `GET /stats` returns (Node, uvicorn).
    pub(crate) async fn stat(&self, key: &str) -> u64 {
        let body = self.get_stats().await.unwrap();
        json_u64(&body, key).unwrap_or_else(|| panic!("no {key} in {body}"))
    }

    async fn try_counts(&self) -> Result<ServerCounts, String> {
        match &self.kind {
            Kind::Json => {
                let body = self.get_stats().await?;
                let field = |k| json_u64(&body, k).ok_or_else(|| format!("no {k} in {body}"));
                Ok(ServerCounts {
                    accepted: field("accepted")?,
                    served: field("served")?,
                    requests: field("requests")?,
                })
            }
            Kind::Nginx { prefix, stats_queries } => {
                let body = self.get_stats_counted(stats_queries).await?;
                // "server accepts handled requests\n 16 16 31 \n"
                let accepts: u64 = body
                    .lines()
                    .skip_while(|l| !l.starts_with("server accepts"))
                    .nth(1)
                    .and_then(|l| l.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| format!("no accepts in {body:?}"))?;
                let log = std::fs::read_to_string(prefix.join("access.log")).unwrap_or_default();
                let mut connections: Vec<&str> =
                    log.lines().filter_map(|l| l.split(' ').next()).filter(|c| !c.is_empty()).collect();
                let requests = connections.len() as u64;
                connections.sort_unstable();
                connections.dedup();
                Ok(ServerCounts {
                    accepted: accepts - stats_queries.load(Ordering::SeqCst),
                    served: connections.len() as u64,
                    requests,
                })
            }
        }
    }

    async fn get_stats_counted(&self, queries: &AtomicU64) -> Result<String, String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).await.map_err(|e| e.to_string())?;
        // Connected: nginx counts this connection in `accepts`.
        queries.fetch_add(1, Ordering::SeqCst);
        stats_request(&mut stream).await
    }

    async fn get_stats(&self) -> Result<String, String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).await.map_err(|e| e.to_string())?;
        stats_request(&mut stream).await
    }
}

/// `GET /stats` on its own connection; returns the body.
async fn stats_request(stream: &mut TcpStream) -> Result<String, String> {
    stream
        .write_all(b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .map_err(|_| "no answer to /stats in 5 s".to_string())?
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| format!("bad /stats response {text:?}"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("/stats answered {head:?}"));
    }
    Ok(body.to_string())
}

/// The unsigned integer value of `"key":` in a flat JSON object.
fn json_u64(json: &str, key: &str) -> Option<u64> {
    let rest = &json[json.find(&format!("\"{key}\":"))? + key.len() + 3..];
    let digits: String = rest.trim_start().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

const NGINX_HELP: &str =
    "install nginx (`apt-get install nginx`) or set INTEROP_NGINX; `.ci/run` installs it";
const NODE_HELP: &str = "install Node.js 20 or set INTEROP_NODE; `.ci/run` installs it";
const UVICORN_HELP: &str = "install uvicorn and starlette (`pip install uvicorn starlette`) or set INTEROP_PYTHON; `.ci/run` installs them";

/// `nginx` from INTEROP_NGINX, the PATH, or Debian's `/usr/sbin` (not on a
/// non-root PATH).
fn nginx_binary() -> PathBuf {
    if let Ok(path) = std::env::var("INTEROP_NGINX") {
        return path.into();
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("nginx")).find(|p| p.is_file()))
        .unwrap_or_default();
    on_path
        .or_else(|| Some(PathBuf::from("/usr/sbin/nginx")).filter(|p| p.is_file()))
        .unwrap_or_else(|| panic!("nginx not found on PATH nor in /usr/sbin: {NGINX_HELP}"))
}

/// The first line `binary flag` prints (nginx prints its version on stderr).
fn command_version(binary: impl AsRef<std::ffi::OsStr>, flag: &str, help: &str) -> String {
    let binary = binary.as_ref();
    let out = Command::new(binary)
        .arg(flag)
        .output()
        .unwrap_or_else(|e| panic!("could not run {binary:?} {flag}: {e}; {help}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    text.lines().next().unwrap_or_default().trim().to_string()
}

/// A fresh directory under the system's temporary directory.
fn temp_dir(what: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let dir = std::env::temp_dir().join(format!(
        "drain-on-drop-interop-{what}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A port that was free on 127.0.0.1 a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `len` pseudo-random bytes (xorshift64*): incompressible, so gzip keeps them large.
pub(crate) fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}
