//! The HTTP/2 servers of the http2 bench, each started for one run on
//! loopback and stopped when dropped: hyper's server (`h2`), Node 20's
//! `http2.createServer` / `createSecureServer` (`tests/node/h2server.js`),
//! Go 1.27's net/http (`benches/go/goserver`, built by `bash
//! benches/go.sh`) and Debian's nginx 1.22 (static files). Each serves h2c
//! with prior knowledge, or, given a certificate, TLS: hyper's, Go's and
//! nginx offer h2 and http/1.1 by ALPN (and pick h2 when the client offers
//! it), Node's `createSecureServer` h2 alone. Node and Go serve N bytes
//! with content-length at `/len/N` (Node also in one `stream.end` at
//! `/whole/N`), nginx the files `/len/65536` and `/len/1048576`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::runtime::{Handle, Runtime};

use super::BoxError;
use super::h2::H2Server;
use super::tls::Tls;

/// Which server, and the stream limit it announces where one is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// hyper's HTTP/2 server, h2c or TLS (announces 200 streams); every
    /// path gets the cell's body length, with content-length.
    Hyper,
    /// Node's `http2.createServer`: no stream limit announced unless
    /// `Some(n)` (`maxConcurrentStreams: n`).
    Node(Option<u32>),
    /// Go's net/http server: 250 streams unless `Some(n)`.
    Go(Option<u32>),
    /// nginx 1.22 with Debian's defaults for static files (128 streams),
    /// `keepalive_requests` 1000 unless `Some(n)`: it sends a graceful
    /// GOAWAY with its `n`th response on a connection.
    Nginx(Option<u32>),
}

impl ServerKind {
    pub fn label(self) -> String {
        match self {
            ServerKind::Hyper => "hyper".into(),
            ServerKind::Node(None) => "Node".into(),
            ServerKind::Node(Some(n)) => format!("Node max {n}"),
            ServerKind::Go(None) => "Go server".into(),
            ServerKind::Go(Some(n)) => format!("Go server max {n}"),
            ServerKind::Nginx(None) => "nginx".into(),
            ServerKind::Nginx(Some(n)) => format!("nginx keepalive_requests {n}"),
        }
    }

    /// Why this server cannot run here, if it cannot.
    pub fn missing(self) -> Option<String> {
        let found = match self {
            ServerKind::Hyper => return None,
            ServerKind::Node(_) => node().is_some_and(|_| node_script().is_file()),
            ServerKind::Go(_) => go_server().is_some(),
            ServerKind::Nginx(_) => nginx().is_some(),
        };
        (!found).then(|| {
            match self {
                ServerKind::Node(_) => {
                    "Node not found (node on PATH or DRAIN_BENCH_NODE, tests/node/h2server.js)"
                }
                ServerKind::Go(_) => "Go server not built (bash benches/go.sh, or DRAIN_BENCH_GO_SERVER)",
                _ => "nginx not found (apt-get install nginx, or INTEROP_NGINX)",
            }
            .to_string()
        })
    }
}

/// The repository (`benches/` is a package of its own).
fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository")
}

fn env_or(var: &str, default: impl FnOnce() -> Option<PathBuf>) -> Option<PathBuf> {
    match std::env::var_os(var).filter(|p| !p.is_empty()) {
        Some(path) => Some(PathBuf::from(path)),
        None => default(),
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file())
}

fn node() -> Option<PathBuf> {
    env_or("DRAIN_BENCH_NODE", || on_path("node"))
}

fn node_script() -> PathBuf {
    repo().join("tests/node/h2server.js")
}

fn go_server() -> Option<PathBuf> {
    env_or("DRAIN_BENCH_GO_SERVER", || Some(repo().join("target/go/goserver")).filter(|p| p.is_file()))
}

fn nginx() -> Option<PathBuf> {
    env_or("INTEROP_NGINX", || {
        on_path("nginx").or_else(|| Some(PathBuf::from("/usr/sbin/nginx")).filter(|p| p.is_file()))
    })
}

/// One server, running until dropped.
pub struct Server {
    addr: SocketAddr,
    kind: ServerKind,
    hyper: Option<H2Server>,
    process: Option<(Child, Option<ChildStdin>)>,
    /// nginx's prefix (config, document root, logs), removed at the end.
    prefix: Option<PathBuf>,
    /// It serves TLS with this certificate.
    tls: Option<Tls>,
}

impl Server {
    /// Starts `kind` on loopback, h2c, or over TLS with `tls`; hyper's
    /// serves `len` bytes on every path.
    pub fn start(kind: ServerKind, rt: &Handle, len: usize, tls: Option<&Tls>) -> Result<Server, BoxError> {
        let mut server = Server {
            addr: ([127, 0, 0, 1], 0).into(),
            kind,
            hyper: None,
            process: None,
            prefix: None,
            tls: tls.cloned(),
        };
        match kind {
            ServerKind::Hyper => {
                let h = H2Server::start(rt, len, tls.map(|t| t.acceptor.clone()));
                server.addr = h.addr();
                server.hyper = Some(h);
            }
            ServerKind::Node(max) | ServerKind::Go(max) => {
                let mut cmd = match kind {
                    ServerKind::Node(_) => {
                        let mut cmd = Command::new(node().ok_or("no node")?);
                        cmd.arg(node_script());
                        cmd
                    }
                    _ => Command::new(go_server().ok_or("no goserver")?),
                };
                let node = matches!(kind, ServerKind::Node(_));
                if let Some(n) = max {
                    cmd.args([if node { "--max-streams" } else { "-max-streams" }, &n.to_string()]);
                }
                if let Some(tls) = tls {
                    match node {
                        true => cmd.arg("--tls").arg(tls.ca_pem_path()).arg(tls.key_pem_path()),
                        false => cmd
                            .arg("-tls-cert")
                            .arg(tls.ca_pem_path())
                            .arg("-tls-key")
                            .arg(tls.key_pem_path()),
                    };
                }
                cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
                let mut child = cmd.spawn().map_err(|e| format!("starting {cmd:?}: {e}"))?;
                let stdin = child.stdin.take();
                let mut line = String::new();
                let stdout = child.stdout.take().expect("piped stdout");
                BufReader::new(stdout).read_line(&mut line)?;
                server.process = Some((child, stdin));
                let port: u16 = line
                    .strip_prefix("READY ")
                    .and_then(|p| p.trim().parse().ok())
                    .ok_or_else(|| format!("{cmd:?} printed {line:?}, not READY <port>"))?;
                server.addr.set_port(port);
            }
            ServerKind::Nginx(keepalive_requests) => {
                server.start_nginx(keepalive_requests.unwrap_or(1000))?
            }
        }
        Ok(server)
    }

    /// nginx on a port found free (released, then given to nginx: retried
    /// if taken meanwhile), ready once it accepts a connection.
    fn start_nginx(&mut self, keepalive_requests: u32) -> Result<(), BoxError> {
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, Ordering::SeqCst);
        let prefix = std::env::temp_dir().join(format!("drain-bench-nginx-{}-{run}", std::process::id()));
        std::fs::create_dir_all(prefix.join("root/len"))?;
        std::fs::write(prefix.join("root/len/1048576"), vec![b'n'; 1 << 20])?;
        std::fs::write(prefix.join("root/len/65536"), vec![b'n'; 1 << 16])?;
        let listen = match &self.tls {
            // nginx 1.22's default `ssl_protocols` lack TLS 1.3, the only
            // version the bench's certificate is offered with.
            Some(tls) => format!(
                "ssl http2;\n        ssl_protocols TLSv1.2 TLSv1.3;\n        ssl_certificate {};\n        \
                 ssl_certificate_key {}",
                tls.ca_pem_path().display(),
                tls.key_pem_path().display()
            ),
            None => "http2".to_string(),
        };
        self.prefix = Some(prefix.clone());
        let mut last = String::new();
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let conf = NGINX_CONF
                .replace("@PREFIX@", prefix.to_str().ok_or("prefix")?)
                .replace("@PORT@", &port.to_string())
                .replace("@LISTEN@", &listen)
                .replace("@KEEPALIVE_REQUESTS@", &keepalive_requests.to_string());
            let conf_path = prefix.join("nginx.conf");
            std::fs::write(&conf_path, conf)?;
            let mut cmd = Command::new(nginx().ok_or("no nginx")?);
            cmd.arg("-p").arg(&prefix).arg("-c").arg(&conf_path).arg("-e").arg(prefix.join("error.log"));
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
            let mut child = cmd.spawn().map_err(|e| format!("starting {cmd:?}: {e}"))?;
            self.addr.set_port(port);
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                if let Some(status) = child.try_wait()? {
                    last = format!("nginx exited ({status}): {}", read_log(&prefix));
                    break;
                }
                if std::net::TcpStream::connect(self.addr).is_ok() {
                    self.process = Some((child, None));
                    return Ok(());
                }
                if Instant::now() > deadline {
                    let _ = (child.kill(), child.wait());
                    last = format!("nginx did not listen in 5 s: {}", read_log(&prefix));
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Err(last.into())
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the server itself counted, in a few words: Node's refused
    /// streams, broken sessions and most streams open at once; Go's most
    /// handlers at once; hyper's accepted connections when they differ
    /// from `connections` (the frame counter's); nothing for nginx.
    pub fn note(&self, client: &Runtime, connections: usize) -> String {
        match self.kind {
            ServerKind::Hyper => match self.hyper.as_ref().map_or(0, H2Server::accepted) {
                n if n != connections => format!("server accepted {n}"),
                _ => String::new(),
            },
            ServerKind::Nginx(_) => String::new(),
            ServerKind::Node(_) | ServerKind::Go(_) => {
                let Ok(json) = client.block_on(get_stats(self.addr, self.tls.as_ref())) else {
                    return "no /stats".into();
                };
                let n = |key: &str| number(&json, key).unwrap_or(0);
                if matches!(self.kind, ServerKind::Go(_)) {
                    return format!("max open {}", n("max_open"));
                }
                let mut words = vec![format!("max open {}", n("streams_max_open"))];
                for (key, word) in [("refused", "refused"), ("sessions_broken", "broken sessions")] {
                    if n(key) > 0 {
                        words.push(format!("{word} {}", n(key)));
                    }
                }
                words.join(", ")
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some((mut child, stdin)) = self.process.take() {
            // Node and goserver exit when their stdin closes; kill anyway.
            drop(stdin);
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(prefix) = self.prefix.take() {
            let _ = std::fs::remove_dir_all(prefix);
        }
    }
}

fn read_log(prefix: &Path) -> String {
    std::fs::read_to_string(prefix.join("error.log")).unwrap_or_default().trim().to_string()
}

/// `GET /stats` (h2c, or TLS with `tls`), on a client of its own (not
/// through the run's frame counter).
async fn get_stats(addr: SocketAddr, tls: Option<&Tls>) -> Result<String, BoxError> {
    let uri: http::Uri = match tls {
        Some(_) => format!("https://localhost:{}/stats", addr.port()).parse()?,
        None => format!("http://{addr}/stats").parse()?,
    };
    let road = if tls.is_some() { super::h2::Road::H2Only } else { super::h2::Road::H2c };
    let client = super::h2::client(&tls.cloned().unwrap_or_else(Tls::h2), road);
    let req = http::Request::get(uri).body(http_body_util::Empty::<Bytes>::new())?;
    let res = tokio::time::timeout(Duration::from_secs(5), client.request(req)).await??;
    let body = res.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The whole number after `"key":` in a flat JSON object.
fn number(json: &str, key: &str) -> Option<u64> {
    let at = json.find(&format!("\"{key}\":"))? + key.len() + 3;
    let v = json[at..].trim_start();
    v[..v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len())].parse().ok()
}

/// nginx as `stacks/tests/interop` runs it (one foreground process, no
/// master, Debian's defaults for static files), h2c or TLS on its port.
const NGINX_CONF: &str = r#"daemon off;
master_process off;
worker_processes 1;
error_log @PREFIX@/error.log warn;
pid @PREFIX@/nginx.pid;
events {
    worker_connections 1024;
}
http {
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests @KEEPALIVE_REQUESTS@;
    default_type application/octet-stream;
    client_body_temp_path @PREFIX@/client_body;
    proxy_temp_path @PREFIX@/proxy;
    fastcgi_temp_path @PREFIX@/fastcgi;
    uwsgi_temp_path @PREFIX@/uwsgi;
    scgi_temp_path @PREFIX@/scgi;
    access_log off;
    server {
        listen 127.0.0.1:@PORT@ @LISTEN@;
        root @PREFIX@/root;
    }
}
"#;
