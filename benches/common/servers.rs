//! The HTTP/2 servers of the http2 bench, each started for one run on
//! loopback and stopped when dropped: hyper's server (`h2`), Node 20's
//! `http2.createServer` / `createSecureServer` (`tests/node/h2server.js`),
//! Go 1.27's net/http (`benches/go/goserver`, built by `bash
//! benches/go.sh`), and Debian's nginx 1.22, Apache 2.4 (mod_http2) and h2o
//! 2.2 (static files; `apt-get install -y nginx apache2 h2o`). Each serves
//! h2c with prior knowledge, or, given a certificate, TLS: hyper's, Go's,
//! nginx, Apache and h2o offer h2 and http/1.1 by ALPN (and pick h2 when
//! the client offers it), Node's `createSecureServer` h2 alone; Apache and
//! h2o run over TLS only here. Node and Go serve N bytes with
//! content-length at `/len/N` (Node also in one `stream.end` at
//! `/whole/N`, and at `/calm/N` refuses one stream in its life), nginx,
//! Apache and h2o the files `/len/65536` and `/len/1048576`.

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
    /// Node's server, no stream limit announced, a session holding up to
    /// this many MB (`maxSessionMemory`; Node's default is 10) before it
    /// refuses new streams.
    NodeMemory(u32),
    /// Go's net/http server: 250 streams unless `Some(n)`.
    Go(Option<u32>),
    /// nginx 1.22 with Debian's defaults for static files (128 streams),
    /// `keepalive_requests` 1000 unless `Some(n)`: it sends a graceful
    /// GOAWAY with its `n`th response on a connection.
    Nginx(Option<u32>),
    /// Apache 2.4 with mod_http2 (mpm_event, mod_ssl), TLS only; Debian's
    /// defaults (apache2.conf, mpm_event.conf) otherwise, mod_http2's own
    /// (100 streams).
    Apache,
    /// h2o 2.2, TLS only, its defaults (100 streams, 2 threads here: one
    /// per core).
    H2o,
}

impl ServerKind {
    pub fn label(self) -> String {
        match self {
            ServerKind::Hyper => "hyper".into(),
            ServerKind::Node(None) => "Node".into(),
            ServerKind::Node(Some(n)) => format!("Node max {n}"),
            ServerKind::NodeMemory(mb) => format!("Node maxSessionMemory {mb} MB"),
            ServerKind::Go(None) => "Go server".into(),
            ServerKind::Go(Some(n)) => format!("Go server max {n}"),
            ServerKind::Nginx(None) => "nginx".into(),
            ServerKind::Nginx(Some(n)) => format!("nginx keepalive_requests {n}"),
            ServerKind::Apache => "Apache".into(),
            ServerKind::H2o => "h2o".into(),
        }
    }

    /// Why this server cannot run here, if it cannot.
    pub fn missing(self) -> Option<String> {
        let found = match self {
            ServerKind::Hyper => return None,
            ServerKind::Node(_) | ServerKind::NodeMemory(_) => {
                node().is_some_and(|_| node_script().is_file())
            }
            ServerKind::Go(_) => go_server().is_some(),
            ServerKind::Nginx(_) => nginx().is_some(),
            ServerKind::Apache => apache().is_some(),
            ServerKind::H2o => h2o().is_some(),
        };
        (!found).then(|| {
            match self {
                ServerKind::Node(_) | ServerKind::NodeMemory(_) => {
                    "Node not found (node on PATH or DRAIN_BENCH_NODE, tests/node/h2server.js)"
                }
                ServerKind::Go(_) => "Go server not built, or older than its source (bash benches/go.sh, or DRAIN_BENCH_GO_SERVER)",
                ServerKind::Apache => {
                    "Apache not found (apt-get install apache2: /usr/sbin/apache2 and its modules in \
                     /usr/lib/apache2/modules, or DRAIN_BENCH_APACHE)"
                }
                ServerKind::H2o => "h2o not found (apt-get install h2o, or DRAIN_BENCH_H2O)",
                _ => "nginx not found (apt-get install nginx, or INTEROP_NGINX)",
            }
            .to_string()
        })
    }
}

/// The repository (`benches/` is a package of its own).
pub(super) fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository")
}

pub(super) fn env_or(var: &str, default: impl FnOnce() -> Option<PathBuf>) -> Option<PathBuf> {
    match std::env::var_os(var).filter(|p| !p.is_empty()) {
        Some(path) => Some(PathBuf::from(path)),
        None => default(),
    }
}

pub(super) fn on_path(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file())
}

pub(super) fn node() -> Option<PathBuf> {
    env_or("DRAIN_BENCH_NODE", || on_path("node"))
}

fn node_script() -> PathBuf {
    repo().join("tests/node/h2server.js")
}

fn go_server() -> Option<PathBuf> {
    env_or("DRAIN_BENCH_GO_SERVER", || Some(repo().join("target/go/goserver")).filter(|p| p.is_file()))
        .and_then(|bin| super::go::current(bin, "goserver"))
}

pub(super) fn nginx() -> Option<PathBuf> {
    env_or("INTEROP_NGINX", || {
        on_path("nginx").or_else(|| Some(PathBuf::from("/usr/sbin/nginx")).filter(|p| p.is_file()))
    })
}

/// Debian's Apache: `$DRAIN_BENCH_APACHE`, else `/usr/sbin/apache2` when
/// the modules the bench loads are in [`APACHE_MODULES`].
fn apache() -> Option<PathBuf> {
    let found = Path::new(APACHE_MODULES).join("mod_http2.so").is_file();
    env_or("DRAIN_BENCH_APACHE", || {
        on_path("apache2")
            .or_else(|| Some(PathBuf::from("/usr/sbin/apache2")))
            .filter(|p| p.is_file() && found)
    })
}

/// Where Debian keeps Apache's modules.
pub(super) const APACHE_MODULES: &str = "/usr/lib/apache2/modules";

fn h2o() -> Option<PathBuf> {
    env_or("DRAIN_BENCH_H2O", || {
        on_path("h2o").or_else(|| Some(PathBuf::from("/usr/bin/h2o")).filter(|p| p.is_file()))
    })
}

/// One server, running until dropped.
pub struct Server {
    addr: SocketAddr,
    kind: ServerKind,
    hyper: Option<H2Server>,
    process: Option<(Child, Option<ChildStdin>)>,
    /// Stopped with SIGTERM, not SIGKILL (Apache's parent and h2o then
    /// stop their children).
    term: bool,
    /// nginx's, Apache's or h2o's prefix (config, document root, logs),
    /// removed at the end.
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
            term: false,
            prefix: None,
            tls: tls.cloned(),
        };
        match kind {
            ServerKind::Hyper => {
                let h = H2Server::start(rt, len, tls.map(|t| t.acceptor.clone()));
                server.addr = h.addr();
                server.hyper = Some(h);
            }
            ServerKind::Node(_) | ServerKind::NodeMemory(_) | ServerKind::Go(_) => {
                let is_node = matches!(kind, ServerKind::Node(_) | ServerKind::NodeMemory(_));
                let mut cmd = match is_node {
                    true => {
                        let mut cmd = Command::new(node().ok_or("no node")?);
                        cmd.arg(node_script());
                        cmd
                    }
                    false => Command::new(go_server().ok_or("no goserver")?),
                };
                let max = match kind {
                    ServerKind::Node(max) | ServerKind::Go(max) => max,
                    _ => None,
                };
                if let ServerKind::NodeMemory(mb) = kind {
                    cmd.args(["--max-session-memory", &mb.to_string()]);
                }
                if let Some(n) = max {
                    cmd.args([if is_node { "--max-streams" } else { "-max-streams" }, &n.to_string()]);
                }
                if let Some(tls) = tls {
                    match is_node {
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
            ServerKind::Apache => server.start_apache()?,
            ServerKind::H2o => server.start_h2o()?,
        }
        Ok(server)
    }

    /// A fresh prefix under the temporary directory for a static-file
    /// server called `name`: `root/len/65536` and `root/len/1048576`
    /// (`fill` bytes), everything readable by others (Apache serves as
    /// www-data).
    fn static_prefix(&mut self, name: &str, fill: u8) -> Result<PathBuf, BoxError> {
        use std::os::unix::fs::PermissionsExt;
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, Ordering::SeqCst);
        let prefix = std::env::temp_dir().join(format!("drain-bench-{name}-{}-{run}", std::process::id()));
        std::fs::create_dir_all(prefix.join("root/len"))?;
        self.prefix = Some(prefix.clone());
        for len in [1 << 20, 1 << 16] {
            let file = prefix.join(format!("root/len/{len}"));
            std::fs::write(&file, vec![fill; len])?;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
        }
        for dir in [&prefix, &prefix.join("root"), &prefix.join("root/len")] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(prefix)
    }

    /// Runs a server configured by a file on a port found free (released,
    /// then given to the server: retried if taken meanwhile): `conf(port)`
    /// is the configuration, written to `prefix/conf_name`, and
    /// `command(conf_path)` starts the server in the foreground. Ready
    /// once it accepts a connection.
    fn start_configured(
        &mut self,
        what: &str,
        prefix: &Path,
        conf_name: &str,
        conf: impl Fn(u16) -> Result<String, BoxError>,
        command: impl Fn(&Path) -> Result<Command, BoxError>,
    ) -> Result<(), BoxError> {
        let mut last = String::new();
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let conf_path = prefix.join(conf_name);
            std::fs::write(&conf_path, conf(port)?)?;
            let mut cmd = command(&conf_path)?;
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
            let mut child = cmd.spawn().map_err(|e| format!("starting {cmd:?}: {e}"))?;
            self.addr.set_port(port);
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                if let Some(status) = child.try_wait()? {
                    last = format!("{what} exited ({status}): {}", read_log(prefix));
                    break;
                }
                if std::net::TcpStream::connect(self.addr).is_ok() {
                    self.process = Some((child, None));
                    return Ok(());
                }
                if Instant::now() > deadline {
                    stop(&mut child, self.term);
                    last = format!("{what} did not listen in 5 s: {}", read_log(prefix));
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Err(last.into())
    }

    /// Apache (mpm_event, mod_ssl, mod_http2) in the foreground, over TLS,
    /// with a configuration of its own.
    fn start_apache(&mut self) -> Result<(), BoxError> {
        let tls = self.tls.clone().ok_or("Apache runs over TLS only here")?;
        let prefix = self.static_prefix("apache", b'a')?;
        self.term = true;
        let p = prefix.to_str().ok_or("prefix")?.to_string();
        let conf = |port: u16| {
            Ok(APACHE_CONF
                .replace("@PREFIX@", &p)
                .replace("@MODULES@", APACHE_MODULES)
                .replace("@PORT@", &port.to_string())
                .replace("@CERT@", tls.ca_pem_path().to_str().ok_or("certificate path")?)
                .replace("@KEY@", tls.key_pem_path().to_str().ok_or("key path")?))
        };
        let command = |conf: &Path| {
            let mut cmd = Command::new(apache().ok_or("no apache2")?);
            cmd.arg("-f").arg(conf).arg("-DFOREGROUND");
            Ok(cmd)
        };
        self.start_configured("Apache", &prefix, "apache2.conf", conf, command)
    }

    /// h2o in the foreground, over TLS.
    fn start_h2o(&mut self) -> Result<(), BoxError> {
        let tls = self.tls.clone().ok_or("h2o runs over TLS only here")?;
        let prefix = self.static_prefix("h2o", b'o')?;
        self.term = true;
        let p = prefix.to_str().ok_or("prefix")?.to_string();
        let conf = |port: u16| {
            Ok(H2O_CONF
                .replace("@PREFIX@", &p)
                .replace("@PORT@", &port.to_string())
                .replace("@CERT@", tls.ca_pem_path().to_str().ok_or("certificate path")?)
                .replace("@KEY@", tls.key_pem_path().to_str().ok_or("key path")?))
        };
        let command = |conf: &Path| {
            let mut cmd = Command::new(h2o().ok_or("no h2o")?);
            cmd.arg("-c").arg(conf);
            Ok(cmd)
        };
        self.start_configured("h2o", &prefix, "h2o.conf", conf, command)
    }

    /// nginx on a port found free (released, then given to nginx: retried
    /// if taken meanwhile), ready once it accepts a connection.
    fn start_nginx(&mut self, keepalive_requests: u32) -> Result<(), BoxError> {
        let prefix = self.static_prefix("nginx", b'n')?;
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
        let p = prefix.to_str().ok_or("prefix")?.to_string();
        let conf = |port: u16| {
            Ok(NGINX_CONF
                .replace("@PREFIX@", &p)
                .replace("@PORT@", &port.to_string())
                .replace("@LISTEN@", &listen)
                .replace("@KEEPALIVE_REQUESTS@", &keepalive_requests.to_string()))
        };
        let command = |conf: &Path| {
            let mut cmd = Command::new(nginx().ok_or("no nginx")?);
            cmd.arg("-p").arg(&prefix).arg("-c").arg(conf).arg("-e").arg(prefix.join("error.log"));
            Ok(cmd)
        };
        self.start_configured("nginx", &prefix, "nginx.conf", conf, command)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the server itself counted, in a few words: Node's refused
    /// streams, broken sessions and most streams open at once; Go's most
    /// handlers at once; hyper's accepted connections when they differ
    /// from `connections` (the frame counter's); nothing for nginx, Apache
    /// and h2o.
    pub fn note(&self, client: &Runtime, connections: usize) -> String {
        match self.kind {
            ServerKind::Hyper => match self.hyper.as_ref().map_or(0, H2Server::accepted) {
                n if n != connections => format!("server accepted {n}"),
                _ => String::new(),
            },
            ServerKind::Nginx(_) | ServerKind::Apache | ServerKind::H2o => String::new(),
            ServerKind::Node(_) | ServerKind::NodeMemory(_) | ServerKind::Go(_) => {
                let Ok(json) = client.block_on(get_stats(self.addr, self.tls.as_ref())) else {
                    return "no /stats".into();
                };
                let n = |key: &str| number(&json, key).unwrap_or(0);
                if matches!(self.kind, ServerKind::Go(_)) {
                    return format!("max open {}", n("max_open"));
                }
                let mut words = vec![format!("max open {}", n("streams_max_open"))];
                let counts = [
                    ("refused", "refused"),
                    ("sessions_broken", "broken sessions"),
                    ("calm_refused", "refused once by /calm/"),
                ];
                for (key, word) in counts {
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
            stop(&mut child, self.term);
        }
        if let Some(prefix) = self.prefix.take() {
            let _ = std::fs::remove_dir_all(prefix);
        }
    }
}

/// Stops `child`: SIGKILL, or with `term` SIGTERM (SIGKILL after 5 s).
pub(super) fn stop(child: &mut Child, term: bool) {
    if term {
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).stderr(Stdio::null()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

pub(super) fn read_log(prefix: &Path) -> String {
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

/// Apache 2.4 in the foreground (`apache2 -f CONF -DFOREGROUND`) with the
/// modules HTTP/2 over TLS needs, Debian's defaults (apache2.conf,
/// mpm_event.conf, ssl.conf's session cache) and mod_http2's own; its
/// workers serve as www-data.
const APACHE_CONF: &str = r#"ServerRoot "@PREFIX@"
ServerName localhost
Listen 127.0.0.1:@PORT@
PidFile @PREFIX@/apache2.pid
Mutex file:@PREFIX@ default
DefaultRuntimeDir @PREFIX@
ErrorLog @PREFIX@/error.log
LogLevel warn
User www-data
Group www-data
LoadModule mpm_event_module @MODULES@/mod_mpm_event.so
LoadModule authz_core_module @MODULES@/mod_authz_core.so
LoadModule mime_module @MODULES@/mod_mime.so
LoadModule socache_shmcb_module @MODULES@/mod_socache_shmcb.so
LoadModule ssl_module @MODULES@/mod_ssl.so
LoadModule http2_module @MODULES@/mod_http2.so
Timeout 300
KeepAlive On
MaxKeepAliveRequests 100
KeepAliveTimeout 5
StartServers 2
MinSpareThreads 25
MaxSpareThreads 75
ThreadLimit 64
ThreadsPerChild 25
MaxRequestWorkers 150
MaxConnectionsPerChild 0
TypesConfig /etc/mime.types
SSLRandomSeed startup builtin
SSLSessionCache shmcb:@PREFIX@/ssl_scache(512000)
SSLSessionCacheTimeout 300
<VirtualHost 127.0.0.1:@PORT@>
    Protocols h2 http/1.1
    SSLEngine on
    SSLCertificateFile @CERT@
    SSLCertificateKeyFile @KEY@
    DocumentRoot @PREFIX@/root
    <Directory @PREFIX@/root>
        Require all granted
    </Directory>
</VirtualHost>
"#;

/// h2o 2.2 in the foreground (`h2o -c CONF`), TLS on its port, static
/// files, no access log, no OCSP updater (a child process per certificate
/// otherwise).
const H2O_CONF: &str = r#"user: root
pid-file: @PREFIX@/h2o.pid
error-log: @PREFIX@/error.log
listen:
  host: 127.0.0.1
  port: @PORT@
  ssl:
    certificate-file: @CERT@
    key-file: @KEY@
    ocsp-update-interval: 0
hosts:
  default:
    paths:
      /:
        file.dir: @PREFIX@/root
"#;
