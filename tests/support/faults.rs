//! Faults in front of (or instead of) a server, for the tests of what a
//! dial gate must survive, all on `127.0.0.1:0`:
//!
//! - [`StallProxy`]: a TCP proxy that accepts the first connection (or
//!   every one) and never answers it, holding it open until the proxy is
//!   dropped (a stuck backend behind a TCP balancer), and forwards the
//!   others to the server at once.
//! - [`Unanswered`]: a listener that accepts every connection and closes it
//!   after a while without a byte written (a dial that fails after a while).
//! - [`ScriptedH2`]: an HTTP/2 server speaking the frames itself, over TCP
//!   (h2c) or any transport a test wraps it in (TLS with ALPN), each
//!   request's fate scripted when it arrives whole, with the connection's
//!   count of RST_STREAM frames from the client at hand: answer, answer and
//!   leave the stream open (so that a dropped body is reset), refuse with
//!   RST_STREAM, answer and then GOAWAY NO_ERROR (a server recycling its
//!   connections, finishing the streams the GOAWAY covers), or GOAWAY with
//!   an error covering the request and close.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::h2::{ANSWER, NO_ERROR};

/// Which connections [`StallProxy`] holds unanswered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// The first connection it accepts; every later one is forwarded.
    First,
    /// Every connection.
    All,
}

/// What a proxy does with a connection it accepted.
enum Hold {
    /// Never answers it: nothing forwarded, nothing written, held open
    /// until the proxy is dropped.
    Forever,
    /// Forwards it both ways after this long.
    For(Duration),
}

/// A TCP proxy on `127.0.0.1:0` in front of `target` that does with its
/// `nth` connection (from 0) what `hold(nth)` says: its address, the
/// connections it accepted so far, and its task (aborting it closes the
/// connections held).
async fn proxy(
    target: SocketAddr,
    hold: impl Fn(usize) -> Hold + Send + 'static,
) -> (SocketAddr, Arc<AtomicUsize>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    let task = tokio::spawn(async move {
        // The connections held, open until this task ends.
        let mut held = Vec::new();
        while let Ok((mut client, _)) = listener.accept().await {
            let _ = client.set_nodelay(true);
            let delay = match hold(count.fetch_add(1, Ordering::SeqCst)) {
                Hold::Forever => {
                    held.push(client);
                    continue;
                }
                Hold::For(delay) => delay,
            };
            tokio::spawn(async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let Ok(mut server) = TcpStream::connect(target).await else { return };
                let _ = server.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    (addr, seen, task)
}

/// A TCP proxy on `127.0.0.1:0` in front of `target`: the connections
/// [`Stall`] names are accepted and never answered (nothing forwarded,
/// nothing written, held open until the proxy is dropped), the others are
/// forwarded at once.
pub struct StallProxy {
    pub addr: SocketAddr,
    seen: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl StallProxy {
    pub async fn start(target: SocketAddr, stall: Stall) -> StallProxy {
        let hold = move |nth| match stall == Stall::All || nth == 0 {
            true => Hold::Forever,
            false => Hold::For(Duration::ZERO),
        };
        let (addr, seen, task) = proxy(target, hold).await;
        StallProxy { addr, seen, task }
    }

    /// Connections accepted so far (stalled or forwarded).
    pub fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }
}

impl Drop for StallProxy {
    /// Closes the stalled connections.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A TCP proxy on `127.0.0.1:0` in front of `target` that holds each
/// connection `delay` before it forwards anything (so that a TLS handshake
/// through it takes about that long, as to a far server), then forwards
/// both ways.
pub struct SlowProxy {
    pub addr: SocketAddr,
    seen: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl SlowProxy {
    pub async fn start(target: SocketAddr, delay: Duration) -> SlowProxy {
        let (addr, seen, task) = proxy(target, move |_| Hold::For(delay)).await;
        SlowProxy { addr, seen, task }
    }

    /// Connections accepted so far.
    pub fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A listener on `127.0.0.1:0` that accepts every connection, reads and
/// discards what the client sends, writes nothing, and closes it (FIN)
/// `after` its accept.
pub struct Unanswered {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Unanswered {
    pub async fn start(after: Duration) -> Unanswered {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let deadline = tokio::time::Instant::now() + after;
                    let mut sink = [0u8; 4096];
                    let _ = tokio::time::timeout_at(deadline, async {
                        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                    })
                    .await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Unanswered { addr, accepted, task }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A request that reached [`ScriptedH2`] whole (END_STREAM seen), as its
/// script sees it.
#[derive(Debug)]
pub struct Req<'a> {
    /// The connection's number, from 0, in the order accepted.
    pub conn: usize,
    /// The request's number on its connection, from 0.
    pub nth_on_conn: usize,
    /// The stream's id.
    pub id: u32,
    /// RST_STREAM frames the client had sent on this connection when the
    /// request arrived.
    pub resets_on_conn: usize,
    /// The request's body.
    pub body: &'a [u8],
}

/// What [`ScriptedH2`] does with a request that arrived whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `200` with the body [`ANSWER`], END_STREAM.
    Answer,
    /// `200`, HEADERS only: the stream stays open (a body that never ends),
    /// so a client that drops it resets it.
    Open,
    /// RST_STREAM with this code: refused.
    Refuse(u32),
    /// [`Answer`](Self::Answer), then GOAWAY NO_ERROR whose last stream id
    /// is this request's; the requests at or below it that are still
    /// arriving are answered when they arrive whole, those above it never
    /// (not processed); once none at or below it is open (or after 2 s),
    /// the connection is closed. A server recycling its connections.
    AnswerThenGoAway,
    /// GOAWAY with this code whose last stream id is this request's (it may
    /// have been processed), no answer, and the connection closed.
    GoAwayAndClose(u32),
}

/// What [`ScriptedH2`] saw and did.
#[derive(Debug, Default)]
pub struct ScriptedCounts {
    pub connections: AtomicUsize,
    /// Requests that arrived whole and went to the script.
    pub requests: AtomicUsize,
    /// The body of every request answered (processed), in order:
    /// [`Reply::Answer`], [`Reply::Open`], [`Reply::AnswerThenGoAway`], and
    /// those a GOAWAY covered that arrived after it.
    pub answered: Mutex<Vec<Vec<u8>>>,
    /// Requests refused with RST_STREAM ([`Reply::Refuse`]).
    pub refused: AtomicUsize,
    /// RST_STREAM frames the client sent, on every connection.
    pub resets: AtomicUsize,
    /// Every GOAWAY sent: the connection and the error code.
    pub go_aways: Mutex<Vec<(usize, u32)>>,
    /// Requests that arrived above a GOAWAY's last stream id: never
    /// processed, never answered.
    pub above_last: AtomicUsize,
    /// Requests at or below a GOAWAY's last stream id that had not arrived
    /// whole 2 s after it (the connection was closed without them).
    pub never_finished: AtomicUsize,
    /// Connections that failed before HTTP/2 began (transport wrapper,
    /// preface).
    pub not_h2: AtomicUsize,
}

impl ScriptedCounts {
    /// Connections that received a GOAWAY with `code`.
    pub fn go_aways_with(&self, code: u32) -> usize {
        self.go_aways.lock().unwrap().iter().filter(|(_, c)| *c == code).count()
    }
}

/// A transport [`ScriptedH2`] can speak HTTP/2 over.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// What a future a [`Wrap`] returns.
pub type Wrapped = Pin<Box<dyn Future<Output = Option<Box<dyn Io>>> + Send>>;

/// Turns an accepted TCP connection into the transport the server speaks
/// over (a TLS handshake, say); `None` if that failed.
pub type Wrap = Arc<dyn Fn(TcpStream) -> Wrapped + Send + Sync>;

type ScriptFn = Arc<dyn Fn(&Req<'_>) -> Reply + Send + Sync>;

/// An HTTP/2 server speaking the frames itself (see the module). Its
/// SETTINGS announce nothing; it returns the window of every request body
/// at once. Stops (its accept loop) when dropped.
pub struct ScriptedH2 {
    pub addr: SocketAddr,
    pub counts: Arc<ScriptedCounts>,
    task: JoinHandle<()>,
}

impl ScriptedH2 {
    /// Over TCP, prior knowledge (h2c).
    pub async fn h2c(script: impl Fn(&Req<'_>) -> Reply + Send + Sync + 'static) -> ScriptedH2 {
        let plain: Wrap = Arc::new(|tcp| Box::pin(async move { Some(Box::new(tcp) as Box<dyn Io>) }));
        ScriptedH2::start(plain, script).await
    }

    /// Over what `wrap` makes of each TCP connection.
    pub async fn start(wrap: Wrap, script: impl Fn(&Req<'_>) -> Reply + Send + Sync + 'static) -> ScriptedH2 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(ScriptedCounts::default());
        let script: ScriptFn = Arc::new(script);
        let c = counts.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let conn = c.connections.fetch_add(1, Ordering::SeqCst);
                let (c, script, wrap) = (c.clone(), script.clone(), wrap.clone());
                tokio::spawn(async move {
                    let Some(io) = wrap(tcp).await else {
                        c.not_h2.fetch_add(1, Ordering::SeqCst);
                        return;
                    };
                    let _ = scripted_connection(io, conn, script, c).await;
                });
            }
        });
        ScriptedH2 { addr, counts, task }
    }

    pub fn connections(&self) -> usize {
        self.counts.connections.load(Ordering::SeqCst)
    }

    pub fn refused(&self) -> usize {
        self.counts.refused.load(Ordering::SeqCst)
    }

    pub fn resets(&self) -> usize {
        self.counts.resets.load(Ordering::SeqCst)
    }
}

impl Drop for ScriptedH2 {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HEADERS (END_HEADERS) with `:status: 200` (HPACK static index 8), and
/// END_STREAM if `end`.
fn head_200(id: u32, end: bool) -> Vec<u8> {
    frame(0x1, 0x4 | u8::from(end), id, &[0x88])
}

/// HEADERS, then DATA [`ANSWER`] with END_STREAM.
fn answer(id: u32) -> Vec<u8> {
    let mut out = head_200(id, false);
    out.extend(frame(0x0, 0x1, id, ANSWER));
    out
}

fn go_away(last: u32, code: u32) -> Vec<u8> {
    let mut payload = last.to_be_bytes().to_vec();
    payload.extend_from_slice(&code.to_be_bytes());
    frame(0x7, 0, 0, &payload)
}

/// A frame's type, flags, stream id and payload (padding left in).
async fn read_frame(io: &mut Box<dyn Io>) -> std::io::Result<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    io.read_exact(&mut head).await?;
    let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
    let mut payload = vec![0u8; len];
    io.read_exact(&mut payload).await?;
    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    Ok((head[3], head[4], id, payload))
}

/// A frame's payload without its padding (flag PADDED, 0x8), for DATA and
/// HEADERS.
fn unpadded(flags: u8, payload: &[u8]) -> &[u8] {
    if flags & 0x8 == 0 || payload.is_empty() {
        return payload;
    }
    let pad = usize::from(payload[0]);
    &payload[1..payload.len().saturating_sub(pad).max(1)]
}

/// How long a connection that sent a GOAWAY waits for the requests it
/// covers, and then for the client to close.
const CLOSING: Duration = Duration::from_secs(2);

async fn scripted_connection(
    mut io: Box<dyn Io>,
    conn: usize,
    script: ScriptFn,
    counts: Arc<ScriptedCounts>,
) -> std::io::Result<()> {
    let mut preface = [0u8; 24];
    io.read_exact(&mut preface).await?;
    if &preface != b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" {
        counts.not_h2.fetch_add(1, Ordering::SeqCst);
        return Ok(());
    }
    io.write_all(&frame(0x4, 0, 0, &[])).await?;
    io.flush().await?;
    // Requests whose HEADERS came and whose END_STREAM did not yet: their body so far.
    let mut arriving: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut resets = 0;
    let mut nth = 0;
    // Once a GOAWAY NO_ERROR went: its last stream id, and until when the
    // requests it covers may still arrive.
    let mut closing: Option<(u32, tokio::time::Instant)> = None;
    loop {
        if closing.is_some_and(|(last, _)| !arriving.keys().any(|&id| id <= last)) {
            break;
        }
        let next = match closing {
            None => read_frame(&mut io).await,
            Some((last, deadline)) => match tokio::time::timeout_at(deadline, read_frame(&mut io)).await {
                Ok(next) => next,
                Err(_) => {
                    let left = arriving.keys().filter(|&&id| id <= last).count();
                    counts.never_finished.fetch_add(left, Ordering::SeqCst);
                    break;
                }
            },
        };
        let (kind, flags, id, payload) = next?;
        let ended = match kind {
            // SETTINGS: acknowledged, unless an acknowledgement itself.
            0x4 if flags & 0x1 == 0 => {
                io.write_all(&frame(0x4, 0x1, 0, &[])).await?;
                io.flush().await?;
                false
            }
            // PING: answered.
            0x6 if flags & 0x1 == 0 => {
                io.write_all(&frame(0x6, 0x1, 0, &payload)).await?;
                io.flush().await?;
                false
            }
            // HEADERS: a request starts (its header block is not decoded).
            0x1 => {
                arriving.entry(id).or_default();
                flags & 0x1 != 0
            }
            // DATA: the request's body; its window given back at once.
            0x0 => {
                let data = unpadded(flags, &payload);
                arriving.entry(id).or_default().extend_from_slice(data);
                if !payload.is_empty() {
                    let credit = (payload.len() as u32).to_be_bytes();
                    io.write_all(&frame(0x8, 0, 0, &credit)).await?;
                    io.write_all(&frame(0x8, 0, id, &credit)).await?;
                    io.flush().await?;
                }
                flags & 0x1 != 0
            }
            // RST_STREAM: counted; a request still arriving is gone.
            0x3 => {
                resets += 1;
                counts.resets.fetch_add(1, Ordering::SeqCst);
                arriving.remove(&id);
                false
            }
            _ => false,
        };
        if !ended {
            continue;
        }
        let body = arriving.remove(&id).unwrap_or_default();
        if let Some((last, _)) = closing {
            if id <= last {
                io.write_all(&answer(id)).await?;
                io.flush().await?;
                counts.answered.lock().unwrap().push(body);
            } else {
                counts.above_last.fetch_add(1, Ordering::SeqCst);
            }
            continue;
        }
        counts.requests.fetch_add(1, Ordering::SeqCst);
        let reply = script(&Req { conn, nth_on_conn: nth, id, resets_on_conn: resets, body: &body });
        nth += 1;
        match reply {
            Reply::Answer => {
                io.write_all(&answer(id)).await?;
                counts.answered.lock().unwrap().push(body);
            }
            Reply::Open => {
                io.write_all(&head_200(id, false)).await?;
                counts.answered.lock().unwrap().push(body);
            }
            Reply::Refuse(code) => {
                io.write_all(&frame(0x3, 0, id, &code.to_be_bytes())).await?;
                counts.refused.fetch_add(1, Ordering::SeqCst);
            }
            Reply::AnswerThenGoAway => {
                io.write_all(&answer(id)).await?;
                counts.answered.lock().unwrap().push(body);
                io.write_all(&go_away(id, NO_ERROR)).await?;
                counts.go_aways.lock().unwrap().push((conn, NO_ERROR));
                closing = Some((id, tokio::time::Instant::now() + CLOSING));
            }
            Reply::GoAwayAndClose(code) => {
                io.write_all(&go_away(id, code)).await?;
                io.flush().await?;
                counts.go_aways.lock().unwrap().push((conn, code));
                break;
            }
        }
        io.flush().await?;
    }
    // Closed as servers close after a GOAWAY: FIN (TLS: close_notify
    // first), then what the client still sends is read and discarded until
    // it closes too, so that nothing unread turns the close into a reset
    // that could take the GOAWAY with it.
    io.flush().await?;
    io.shutdown().await?;
    let mut sink = [0u8; 4096];
    let _ =
        tokio::time::timeout(CLOSING, async { while matches!(io.read(&mut sink).await, Ok(n) if n > 0) {} })
            .await;
    Ok(())
}
