//! A server that punishes each HTTP/2 connection for its resets past a limit
//! of its own (issue 54), for the http2 bench's `random limits` fault cell:
//! over TLS (ALPN h2), it speaks the frames itself; each connection's limit
//! is drawn between `lo` and `hi` from a seed and the connection's number;
//! once the client's RST_STREAM frames on a connection pass it, every
//! request arriving there is refused with RST_STREAM ENHANCE_YOUR_CALM
//! (never processed), and after 8 refusals the connection gets GOAWAY
//! ENHANCE_YOUR_CALM (its last stream id the highest request it saw; those
//! still arriving are answered) and is closed 200 ms later. Every other
//! request gets a `200` head and a body that never ends, so that a body
//! dropped at its head resets its stream. Counts the connections punished.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::super::tls::Tls;

/// Refusals a punished connection sends before its GOAWAY.
const REFUSALS_BEFORE_GOAWAY: usize = 8;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// Each connection's limit of resets, drawn between `lo` and `hi` (both
/// included) from `seed` and the connection's number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub lo: usize,
    pub hi: usize,
    pub seed: u64,
}

impl Limits {
    /// The limit of connection `conn` (SplitMix64, as the tests' server).
    pub fn of(&self, conn: usize) -> usize {
        let mut z = self.seed ^ (conn as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        self.lo + (z % (self.hi - self.lo + 1) as u64) as usize
    }
}

/// The server, running on a runtime until dropped.
pub struct LimitServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    punished: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl LimitServer {
    /// Starts it on `rt`, over `tls`.
    pub fn start(rt: &Handle, tls: &Tls, limits: Limits) -> std::io::Result<LimitServer> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let acceptor = tls.acceptor.clone();
        let (accepted, punished) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (a, p) = (accepted.clone(), punished.clone());
        let task = rt.spawn(async move {
            let Ok(listener) = TcpListener::from_std(std_listener) else { return };
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let limit = limits.of(a.fetch_add(1, Ordering::Relaxed));
                let (acceptor, punished) = (acceptor.clone(), p.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let _ = serve(tls, limit, punished).await;
                });
            }
        });
        Ok(LimitServer { addr, accepted, punished, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections punished so far.
    pub fn punished(&self) -> usize {
        self.punished.load(Ordering::Relaxed)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for LimitServer {
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

fn go_away(last: u32, code: u32) -> Vec<u8> {
    let mut payload = last.to_be_bytes().to_vec();
    payload.extend_from_slice(&code.to_be_bytes());
    frame(0x7, 0, 0, &payload)
}

/// The next frame: type, flags, stream id, payload.
async fn next_frame<S: AsyncRead + Unpin>(io: &mut S) -> std::io::Result<(u8, u8, u32, Vec<u8>)> {
    let mut h = [0u8; 9];
    io.read_exact(&mut h).await?;
    let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
    let mut payload = vec![0; len];
    io.read_exact(&mut payload).await?;
    let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
    Ok((h[3], h[4], id, payload))
}

/// Serves one connection whose limit of resets is `limit`.
async fn serve<S>(mut io: S, limit: usize, punished: Arc<AtomicUsize>) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut preface = [0u8; 24];
    io.read_exact(&mut preface).await?;
    io.write_all(&frame(0x4, 0, 0, &[])).await?;
    io.flush().await?;
    let (mut resets, mut refusals, mut last_seen) = (0usize, 0usize, 0u32);
    let mut arriving: HashMap<u32, ()> = HashMap::new();
    let mut closing: Option<(u32, tokio::time::Instant)> = None;
    loop {
        let next = match closing {
            Some((_, at)) => match tokio::time::timeout_at(at, next_frame(&mut io)).await {
                Ok(frame) => frame,
                Err(_) => return Ok(()),
            },
            None => next_frame(&mut io).await,
        };
        let (kind, flags, id, payload) = next?;
        let mut out = Vec::new();
        let ended = match kind {
            0x4 if flags & 0x1 == 0 => {
                out.extend(frame(0x4, 0x1, 0, &[]));
                false
            }
            0x6 if flags & 0x1 == 0 => {
                out.extend(frame(0x6, 0x1, 0, &payload));
                false
            }
            0x1 if closing.is_some_and(|(last, _)| id > last) => false,
            0x1 => {
                arriving.insert(id, ());
                last_seen = last_seen.max(id);
                flags & 0x1 != 0
            }
            0x0 => {
                if !payload.is_empty() {
                    let credit = (payload.len() as u32).to_be_bytes();
                    out.extend(frame(0x8, 0, 0, &credit));
                    out.extend(frame(0x8, 0, id, &credit));
                }
                flags & 0x1 != 0
            }
            0x3 => {
                arriving.remove(&id);
                resets += 1;
                false
            }
            _ => false,
        };
        if ended && arriving.remove(&id).is_some() {
            if closing.is_none() && resets > limit {
                if refusals == 0 {
                    punished.fetch_add(1, Ordering::Relaxed);
                }
                out.extend(frame(0x3, 0, id, &ENHANCE_YOUR_CALM.to_be_bytes()));
                refusals += 1;
                if refusals == REFUSALS_BEFORE_GOAWAY {
                    out.extend(go_away(last_seen, ENHANCE_YOUR_CALM));
                    closing = Some((last_seen, tokio::time::Instant::now() + Duration::from_millis(200)));
                }
            } else {
                // `:status: 200` (HPACK static index 8), the stream left open.
                out.extend(frame(0x1, 0x4, id, &[0x88]));
            }
        }
        if !out.is_empty() {
            io.write_all(&out).await?;
            io.flush().await?;
        }
    }
}
