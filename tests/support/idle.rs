//! [`IdleServer`]: a raw HTTP/1.1 server on 127.0.0.1 that closes a
//! keep-alive connection idle for exactly its idle timeout, with a FIN and
//! nothing else (as nginx, Apache, uvicorn and Go's server do), optionally
//! saying so (`Keep-Alive: timeout=N`, as Node does). It counts what it
//! served by request id (the `id` query parameter), so a test sees a request
//! processed twice, and the idle closes it made. It can be stopped (every
//! connection closed, as a restart does) and started again on the same port
//! with another timeout.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Uri;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use super::body_bytes;

/// How an [`IdleServer`] behaves.
#[derive(Clone, Debug)]
pub struct Idle {
    /// A connection idle this long after its last response is closed.
    pub timeout: Duration,
    /// The value of a `Keep-Alive` header on every response, if any.
    pub says: Option<String>,
    /// Body length of every response (`Content-Length`).
    pub body: usize,
    /// Requests after a connection's first wait this long before their
    /// answer (a slow backend).
    pub slow_after_first: Duration,
}

impl Idle {
    /// Closes after `timeout` idle, says nothing, answers 64 KiB at once.
    pub fn after(timeout: Duration) -> Idle {
        Idle { timeout, says: None, body: 64 * 1024, slow_after_first: Duration::ZERO }
    }
}

/// What the server saw, shared by its connections.
#[derive(Default, Debug)]
pub struct Seen {
    /// Connections accepted.
    pub accepted: usize,
    /// Connections it closed for being idle.
    pub idle_closes: usize,
    /// Requests served, by their `id` query parameter.
    pub served: HashMap<String, usize>,
}

/// The server (see the module).
pub struct IdleServer {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Seen>>,
    tasks: JoinSet<()>,
    /// Resolves once the listener was dropped.
    stopped: tokio::sync::oneshot::Receiver<()>,
}

impl IdleServer {
    /// Starts on a free port.
    pub async fn start(idle: Idle) -> IdleServer {
        IdleServer::start_on("127.0.0.1:0".parse().unwrap(), idle, Arc::default()).await
    }

    /// Starts on `addr`, counting into `seen`.
    async fn start_on(addr: SocketAddr, idle: Idle, seen: Arc<Mutex<Seen>>) -> IdleServer {
        let listener = super::retry_bind(addr).await;
        let addr = listener.local_addr().unwrap();
        let mut tasks = JoinSet::new();
        let counts = seen.clone();
        let (listening, stopped) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn(async move {
            // Dropped last: the listener is gone when the restart hears it.
            let _listening = listening;
            let listener = listener;
            let mut connections = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                stream.set_nodelay(true).unwrap();
                counts.lock().unwrap().accepted += 1;
                connections.spawn(serve(stream, idle.clone(), counts.clone()));
            }
        });
        IdleServer { addr, seen, tasks, stopped }
    }

    /// Closes every connection and stops listening, then listens again on
    /// the same port with `idle`: a restart with another setting. What it
    /// saw is kept.
    pub async fn restart(self, idle: Idle) -> IdleServer {
        let IdleServer { addr, seen, mut tasks, stopped } = self;
        tasks.abort_all();
        // The listener and the connections go with the aborted task.
        let _ = stopped.await;
        IdleServer::start_on(addr, idle, seen).await
    }

    pub fn uri(&self, path: &str) -> Uri {
        format!("http://{}{}", self.addr, path).parse().unwrap()
    }

    pub fn accepted(&self) -> usize {
        self.seen.lock().unwrap().accepted
    }

    pub fn idle_closes(&self) -> usize {
        self.seen.lock().unwrap().idle_closes
    }

    /// How many times the request with this id was served.
    pub fn served(&self, id: &str) -> usize {
        self.seen.lock().unwrap().served.get(id).copied().unwrap_or(0)
    }

    /// Ids served more than once.
    pub fn twice(&self) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.served.iter().filter(|(_, n)| **n > 1).map(|(id, _)| id.clone()).collect()
    }
}

/// One connection: a request, its answer, and again, until it sat idle for
/// `idle.timeout` (then closed, FIN) or the client closed it.
async fn serve(mut stream: TcpStream, idle: Idle, seen: Arc<Mutex<Seen>>) {
    let mut buf = Vec::new();
    let mut nth = 0;
    loop {
        let head = if nth == 0 {
            read_head(&mut stream, &mut buf).await
        } else {
            match tokio::time::timeout(idle.timeout, read_head(&mut stream, &mut buf)).await {
                Ok(head) => head,
                Err(_) => {
                    seen.lock().unwrap().idle_closes += 1;
                    let _ = stream.shutdown().await;
                    return;
                }
            }
        };
        let Some(path) = head else { return };
        if let Some(id) = path.split(['?', '&']).find_map(|p| p.strip_prefix("id=")) {
            *seen.lock().unwrap().served.entry(id.to_string()).or_default() += 1;
        }
        if nth > 0 && !idle.slow_after_first.is_zero() {
            tokio::time::sleep(idle.slow_after_first).await;
        }
        nth += 1;
        let mut response = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n", idle.body);
        if let Some(says) = &idle.says {
            response.push_str(&format!("keep-alive: {says}\r\n"));
        }
        response.push_str("\r\n");
        let mut bytes = response.into_bytes();
        bytes.extend_from_slice(&body_bytes(nth as u64, idle.body));
        if stream.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// Reads one request head and its `Content-Length` body; the path, or
/// `None` when the client closed.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            buf.drain(..end + 4);
            let path = text.split(' ').nth(1)?.to_string();
            let len = super::content_length_of(&text);
            while buf.len() < len {
                let mut chunk = [0u8; 8192];
                let n = stream.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.drain(..len);
            return Some(path);
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
}
