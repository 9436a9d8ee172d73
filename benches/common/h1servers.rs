//! The HTTP/1.1 servers of the keepalive bench, each with an idle timeout of
//! 1 s, started on a free port of 127.0.0.1 and stopped when dropped:
//!
//! - Node 20's `http.createServer`, `keepAliveTimeout` 1000
//!   (`benches/common/h1server.js`);
//! - Debian's nginx 1.22, `keepalive_timeout 1s` (static file; a POST is
//!   answered with the file too, by `error_page 405 =200`);
//! - Go 1.27's net/http server, `IdleTimeout` 1 s (`benches/go/kaserver`,
//!   built by `bash benches/go.sh`);
//! - Debian's Apache 2.4, event MPM, `KeepAliveTimeout 1` (static file;
//!   Apache's default handler answers a POST with the file);
//! - uvicorn with its h11 protocol, `--timeout-keep-alive 1`, a plain ASGI
//!   app (`benches/common/h1asgi.py`; uvicorn in the venv that
//!   `bash benches/common/keepalive.sh` makes under target/).
//!
//! Each answers every GET and POST of `/ka?id=N` with 64 KiB and a
//! content-length, and records each request it read with the client's port
//! (its connection) and its id: Node, Go and uvicorn on their stdout (a
//! line `REQ <port> <method> <target>` read here by a thread), nginx and
//! Apache in an access log of the same format. [`H1Server::requests`] reads
//! that record, so that the bench can tell a request processed twice and a
//! request the server never saw.
//!
//! Where a server cannot run here, [`H1Kind::missing`] says why and how to
//! install it; the bench skips it and says so.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::BoxError;
use super::servers::{APACHE_MODULES, env_or, nginx, node, on_path, read_log, repo, stop};

/// The response body's length, the same on every server.
pub const BODY_LEN: usize = 64 * 1024;

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum H1Kind {
    Node,
    Nginx,
    Go,
    Apache,
    Uvicorn,
}

impl H1Kind {
    pub const ALL: [H1Kind; 5] = [H1Kind::Node, H1Kind::Nginx, H1Kind::Go, H1Kind::Apache, H1Kind::Uvicorn];

    /// The name `KEEPALIVE_SERVERS` takes.
    pub fn name(self) -> &'static str {
        match self {
            H1Kind::Node => "node",
            H1Kind::Nginx => "nginx",
            H1Kind::Go => "go",
            H1Kind::Apache => "apache",
            H1Kind::Uvicorn => "uvicorn",
        }
    }

    /// The server and its idle-timeout setting.
    pub fn label(self) -> &'static str {
        match self {
            H1Kind::Node => "Node (keepAliveTimeout 1000)",
            H1Kind::Nginx => "nginx (keepalive_timeout 1s)",
            H1Kind::Go => "Go net/http (IdleTimeout 1 s)",
            H1Kind::Apache => "Apache event (KeepAliveTimeout 1)",
            H1Kind::Uvicorn => "uvicorn h11 (--timeout-keep-alive 1)",
        }
    }

    /// Why this server cannot run here, if it cannot: what is missing and
    /// how to install it.
    pub fn missing(self) -> Option<String> {
        let found = match self {
            H1Kind::Node => node().is_some(),
            H1Kind::Nginx => nginx().is_some(),
            H1Kind::Go => go_server().is_some(),
            H1Kind::Apache => apache().is_some(),
            H1Kind::Uvicorn => python_with_uvicorn().is_some(),
        };
        (!found).then(|| {
            match self {
                H1Kind::Node => "node not found (apt-get install -y nodejs: Node 20; or DRAIN_BENCH_NODE)",
                H1Kind::Nginx => "nginx not found (apt-get install -y nginx, or INTEROP_NGINX)",
                H1Kind::Go => {
                    "target/go/kaserver not built, or older than its source (bash benches/go.sh: Go 1.27.3 from PyPI; or \
                     DRAIN_BENCH_KASERVER)"
                }
                H1Kind::Apache => {
                    "Apache not found (apt-get install -y apache2: /usr/sbin/apache2 and the event \
                     MPM in /usr/lib/apache2/modules; or DRAIN_BENCH_APACHE)"
                }
                H1Kind::Uvicorn => {
                    "no python with uvicorn (bash benches/common/keepalive.sh: a venv in \
                     target/keepalive-venv, pip install uvicorn; or DRAIN_BENCH_PYTHON)"
                }
            }
            .to_string()
        })
    }
}

fn go_server() -> Option<PathBuf> {
    env_or("DRAIN_BENCH_KASERVER", || Some(repo().join("target/go/kaserver")).filter(|p| p.is_file()))
        .and_then(|bin| super::go::current(bin, "kaserver"))
}

fn apache() -> Option<PathBuf> {
    let found = Path::new(APACHE_MODULES).join("mod_mpm_event.so").is_file();
    env_or("DRAIN_BENCH_APACHE", || {
        on_path("apache2")
            .or_else(|| Some(PathBuf::from("/usr/sbin/apache2")))
            .filter(|p| p.is_file() && found)
    })
}

/// `$DRAIN_BENCH_PYTHON`, else the venv of `benches/common/keepalive.sh`,
/// else `python3` on the PATH, when it imports uvicorn.
fn python_with_uvicorn() -> Option<PathBuf> {
    let candidates = match std::env::var_os("DRAIN_BENCH_PYTHON").filter(|p| !p.is_empty()) {
        Some(p) => vec![PathBuf::from(p)],
        None => [Some(repo().join("target/keepalive-venv/bin/python")), on_path("python3")]
            .into_iter()
            .flatten()
            .collect(),
    };
    candidates.into_iter().find(|python| {
        Command::new(python)
            .args(["-c", "import uvicorn, h11"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// One request as the server recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The client's port: one per connection.
    pub port: u16,
    pub method: String,
    /// The `id` of the query, 0 without one.
    pub id: u64,
}

/// Reads `REQ <port> <method> <target> ...`.
fn parse_seen(line: &str) -> Option<Seen> {
    let mut words = line.strip_prefix("REQ ")?.split_whitespace();
    let port = words.next()?.parse().ok()?;
    let method = words.next()?.to_string();
    let target = words.next()?;
    let id = target
        .split_once('?')
        .and_then(|(_, q)| q.split('&').find_map(|kv| kv.strip_prefix("id=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Some(Seen { port, method, id })
}

/// Where a server records the requests it read.
enum Record {
    /// Lines of its stdout, read by a thread.
    Stdout(Arc<Mutex<Vec<String>>>),
    /// An access log.
    File(PathBuf),
}

/// One server, running until dropped.
pub struct H1Server {
    kind: H1Kind,
    addr: SocketAddr,
    version: String,
    process: Option<(Child, Option<ChildStdin>)>,
    /// Stopped with SIGTERM (Apache's parent then stops its children).
    term: bool,
    /// nginx's or Apache's prefix (config, document root, logs), removed
    /// at the end.
    prefix: Option<PathBuf>,
    record: Record,
}

impl H1Server {
    /// Starts `kind` on a free port of 127.0.0.1.
    pub fn start(kind: H1Kind) -> Result<H1Server, BoxError> {
        if let Some(why) = kind.missing() {
            return Err(why.into());
        }
        match kind {
            H1Kind::Node => {
                let mut cmd = Command::new(node().ok_or("no node")?);
                cmd.arg(repo().join("benches/common/h1server.js")).args(["--keep-alive-timeout", "1000"]);
                H1Server::start_child(kind, cmd)
            }
            H1Kind::Go => {
                let mut cmd = Command::new(go_server().ok_or("no kaserver")?);
                cmd.args(["-idle-timeout", "1s"]);
                H1Server::start_child(kind, cmd)
            }
            H1Kind::Uvicorn => {
                let mut cmd = Command::new(python_with_uvicorn().ok_or("no python with uvicorn")?);
                cmd.arg(repo().join("benches/common/h1asgi.py")).args(["--timeout-keep-alive", "1"]);
                H1Server::start_child(kind, cmd)
            }
            H1Kind::Nginx => H1Server::start_nginx(),
            H1Kind::Apache => H1Server::start_apache(),
        }
    }

    /// A server that prints `READY <port> <version>` and then one `REQ`
    /// line per request on stdout, and exits when its stdin closes.
    fn start_child(kind: H1Kind, mut cmd: Command) -> Result<H1Server, BoxError> {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().map_err(|e| format!("starting {cmd:?}: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let kept = lines.clone();
        // The first line, then every other for the child's life.
        std::thread::spawn(move || {
            let mut it = BufReader::new(stdout).lines();
            let _ = tx.send(it.next());
            for line in it.map_while(Result::ok) {
                kept.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
        let mut server = H1Server {
            kind,
            addr: ([127, 0, 0, 1], 0).into(),
            version: String::new(),
            process: Some((child, stdin)),
            term: false,
            prefix: None,
            record: Record::Stdout(lines),
        };
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Some(Ok(line))) => line,
            other => return Err(format!("{cmd:?} did not print READY <port>: {other:?}").into()),
        };
        let rest = line.strip_prefix("READY ").ok_or_else(|| format!("{cmd:?} printed {line:?}"))?;
        let (port, version) = rest.split_once(' ').unwrap_or((rest, ""));
        server.addr.set_port(port.trim().parse().map_err(|_| format!("{cmd:?} printed {line:?}"))?);
        server.version = version.trim().to_string();
        Ok(server)
    }

    /// A fresh prefix under the temporary directory for a static-file
    /// server called `name`, with `root/ka` (64 KiB of `fill`), everything
    /// readable by others (Apache serves as www-data).
    fn static_prefix(name: &str, fill: u8) -> Result<PathBuf, BoxError> {
        use std::os::unix::fs::PermissionsExt;
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, Ordering::SeqCst);
        let prefix =
            std::env::temp_dir().join(format!("drain-keepalive-{name}-{}-{run}", std::process::id()));
        let _ = std::fs::remove_dir_all(&prefix);
        std::fs::create_dir_all(prefix.join("root"))?;
        let file = prefix.join("root/ka");
        std::fs::write(&file, vec![fill; BODY_LEN])?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
        for dir in [&prefix, &prefix.join("root")] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(prefix)
    }

    /// Runs a server configured by a file on a port found free (released,
    /// then given to the server: retried if taken meanwhile): `conf(port)`
    /// is written to `prefix/conf_name` and `command(conf_path)` starts the
    /// server in the foreground. Ready once it accepts a connection.
    fn start_configured(
        kind: H1Kind,
        version: String,
        prefix: PathBuf,
        term: bool,
        conf_name: &str,
        conf: impl Fn(u16) -> String,
        command: impl Fn(&Path) -> Result<Command, BoxError>,
    ) -> Result<H1Server, BoxError> {
        let mut server = H1Server {
            kind,
            addr: ([127, 0, 0, 1], 0).into(),
            version,
            process: None,
            term,
            prefix: Some(prefix.clone()),
            record: Record::File(prefix.join("access.log")),
        };
        let mut last = String::new();
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let conf_path = prefix.join(conf_name);
            std::fs::write(&conf_path, conf(port))?;
            let mut cmd = command(&conf_path)?;
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
            let mut child = cmd.spawn().map_err(|e| format!("starting {cmd:?}: {e}"))?;
            server.addr.set_port(port);
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                if let Some(status) = child.try_wait()? {
                    last = format!("{} exited ({status}): {}", kind.name(), read_log(&prefix));
                    break;
                }
                if std::net::TcpStream::connect(server.addr).is_ok() {
                    server.process = Some((child, None));
                    return Ok(server);
                }
                if Instant::now() > deadline {
                    stop(&mut child, term);
                    last = format!("{} did not listen in 5 s: {}", kind.name(), read_log(&prefix));
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Err(last.into())
    }

    fn start_nginx() -> Result<H1Server, BoxError> {
        let binary = nginx().ok_or("no nginx")?;
        let version = first_line(&binary, "-v").replace("nginx version: ", "");
        let prefix = H1Server::static_prefix("nginx", b'x')?;
        let p = prefix.display().to_string();
        let conf = |port: u16| NGINX_CONF.replace("@PREFIX@", &p).replace("@PORT@", &port.to_string());
        let command = |conf: &Path| {
            let mut cmd = Command::new(&binary);
            cmd.arg("-p").arg(&prefix).arg("-c").arg(conf).arg("-e").arg(prefix.join("error.log"));
            Ok(cmd)
        };
        H1Server::start_configured(H1Kind::Nginx, version, prefix.clone(), false, "nginx.conf", conf, command)
    }

    fn start_apache() -> Result<H1Server, BoxError> {
        let binary = apache().ok_or("no apache2")?;
        let version = first_line(&binary, "-v").replace("Server version: ", "");
        let prefix = H1Server::static_prefix("apache", b'a')?;
        let p = prefix.display().to_string();
        let conf = |port: u16| {
            APACHE_CONF
                .replace("@PREFIX@", &p)
                .replace("@MODULES@", APACHE_MODULES)
                .replace("@PORT@", &port.to_string())
        };
        let command = |conf: &Path| {
            let mut cmd = Command::new(&binary);
            cmd.arg("-f").arg(conf).arg("-DFOREGROUND");
            Ok(cmd)
        };
        H1Server::start_configured(
            H1Kind::Apache,
            version,
            prefix.clone(),
            true,
            "apache2.conf",
            conf,
            command,
        )
    }

    pub fn kind(&self) -> H1Kind {
        self.kind
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's version, as it reports it.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// `http://127.0.0.1:PORT/ka`; the bench appends `?id=N`.
    pub fn base_url(&self) -> String {
        format!("http://{}/ka", self.addr)
    }

    /// Every request the server recorded so far, in its order.
    pub fn requests(&self) -> Vec<Seen> {
        let text = match &self.record {
            Record::Stdout(lines) => lines.lock().unwrap_or_else(|e| e.into_inner()).join("\n"),
            Record::File(path) => std::fs::read_to_string(path).unwrap_or_default(),
        };
        text.lines().filter_map(parse_seen).collect()
    }
}

impl Drop for H1Server {
    fn drop(&mut self) {
        if let Some((mut child, stdin)) = self.process.take() {
            // Node, Go's server and uvicorn exit when their stdin closes.
            drop(stdin);
            stop(&mut child, self.term);
        }
        if let Some(prefix) = self.prefix.take() {
            let _ = std::fs::remove_dir_all(prefix);
        }
    }
}

/// The first line `binary flag` prints, on stdout or stderr.
fn first_line(binary: &Path, flag: &str) -> String {
    let Ok(out) = Command::new(binary).arg(flag).output() else {
        return String::new();
    };
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    text.lines().next().unwrap_or_default().trim().to_string()
}

/// nginx in the foreground (no daemon, no master), one worker,
/// `keepalive_timeout 1s` (one value: no `Keep-Alive` header, as by
/// default), static file `/ka`; a POST to it is answered with the file
/// (`error_page 405 =200`). The access log records the request line as
/// received (`$request`), before the internal redirect.
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
    keepalive_timeout 1s;
    keepalive_requests 1000;
    default_type application/octet-stream;
    client_body_temp_path @PREFIX@/client_body;
    proxy_temp_path @PREFIX@/proxy;
    fastcgi_temp_path @PREFIX@/fastcgi;
    uwsgi_temp_path @PREFIX@/uwsgi;
    scgi_temp_path @PREFIX@/scgi;
    log_format ka 'REQ $remote_port $request';
    access_log @PREFIX@/access.log ka;
    server {
        listen 127.0.0.1:@PORT@;
        root @PREFIX@/root;
        error_page 405 =200 $uri;
    }
}
"#;

/// Apache 2.4 in the foreground (`apache2 -f CONF -DFOREGROUND`), event
/// MPM with Debian's settings (mpm_event.conf), `KeepAliveTimeout 1`,
/// static file `/ka` (its default handler answers a POST with the file
/// too); the access log records the request line; workers serve as
/// www-data.
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
LogFormat "REQ %{remote}p %r" ka
CustomLog @PREFIX@/access.log ka
Timeout 300
KeepAlive On
MaxKeepAliveRequests 100
KeepAliveTimeout 1
StartServers 2
MinSpareThreads 25
MaxSpareThreads 75
ThreadLimit 64
ThreadsPerChild 25
MaxRequestWorkers 150
MaxConnectionsPerChild 0
DocumentRoot @PREFIX@/root
<Directory @PREFIX@/root>
    Require all granted
</Directory>
"#;
