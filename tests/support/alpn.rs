//! A connector whose connections say ALPN chose HTTP/2 over plain TCP, so
//! that hyper-util's `Client` (without `http2_only`) goes the way it goes
//! over TLS: it takes its HTTP/2 lock for an origin only once a dial's
//! connection says h2, and cancels every other dial that says so while the
//! lock is held ("ALPN upgraded to HTTP/2"). A test scripts each dial in
//! call order ([`AlpnDial`]): its connection poisoned, its return held
//! until a [`Signal`], its first write held until another; and each dial
//! tells when it was called, first written to and dropped. With them a
//! test orders the dials of concurrent requests exactly, whatever the
//! machine's speed.
//!
//! And [`HoldingExecutor`]: an executor for the `Client` that, while told
//! to, keeps the tasks it is given (a connection's) and never runs them.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker, ready};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::{BoxError, SLACK};

/// A one-way flag: set once, then set for good. A test waits for it with a
/// deadline (`wait_for(.., || signal.is_set())`); a dial or a connection of
/// [`AlpnConnector`] waits for it from its poll ([`poll_set`](Self::poll_set)).
/// Clones share the flag.
#[derive(Clone, Default)]
pub struct Signal(Arc<SignalState>);

#[derive(Default)]
struct SignalState {
    set: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

impl Signal {
    /// Sets it, and wakes whatever waits for it.
    pub fn set(&self) {
        self.0.set.store(true, Ordering::SeqCst);
        let wakers = std::mem::take(&mut *self.0.wakers.lock().unwrap());
        wakers.into_iter().for_each(Waker::wake);
    }

    pub fn is_set(&self) -> bool {
        self.0.set.load(Ordering::SeqCst)
    }

    /// Ready once it is set; until then `cx` is woken when it is.
    pub fn poll_set(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_set() {
            return Poll::Ready(());
        }
        {
            let mut wakers = self.0.wakers.lock().unwrap();
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
        }
        // Set between the check above and the waker kept: seen here.
        if self.is_set() { Poll::Ready(()) } else { Poll::Pending }
    }
}

/// One dial of an [`AlpnConnector`], in call order: what it does, and (its
/// signals, shared by clones) what befell it. The default dials at once,
/// writes at once, and is healthy.
#[derive(Clone, Default)]
pub struct AlpnDial {
    /// Its connection's `Connected` is poisoned from the start (the pill is
    /// shared by every copy hyper-util keeps): hyper-util sends on it the
    /// request whose connect made it, but its pool takes it for closed, and
    /// a checkout handed it fails ("checked out connection was closed").
    pub poisoned: bool,
    /// The dial returns its connection (connected over TCP) only once this
    /// is set.
    pub returns_after: Option<Signal>,
    /// Its connection's first write (hyper-util's HTTP/2 handshake, the
    /// client preface, which it writes holding its HTTP/2 lock) waits
    /// until this is set: never, if no one sets it.
    pub writes_after: Option<Signal>,
    /// Set when the connector is called for this dial.
    pub called: Signal,
    /// Set when its connection is first asked to write (before
    /// `writes_after` is waited for): hyper-util holds its HTTP/2 lock for
    /// the origin from then until the connection is pooled or dropped.
    pub first_write: Signal,
    /// Set when its connection is dropped (hyper-util cancelled it, or its
    /// request's future was dropped with it).
    pub dropped: Signal,
}

/// A connector that dials `addr` (whatever the URI says) and hands
/// hyper-util a connection whose `Connected` says ALPN chose h2
/// (`negotiated_h2`), each dial as its script says ([`AlpnDial`]; dials
/// beyond the script are default ones).
#[derive(Clone)]
pub struct AlpnConnector {
    addr: SocketAddr,
    dials: Arc<Mutex<Vec<AlpnDial>>>,
    calls: Arc<AtomicUsize>,
}

impl AlpnConnector {
    pub fn new(addr: SocketAddr, dials: Vec<AlpnDial>) -> Self {
        AlpnConnector { addr, dials: Arc::new(Mutex::new(dials)), calls: Arc::new(AtomicUsize::new(0)) }
    }

    /// Dial `n` (from 0, in call order), its signals shared.
    pub fn dial(&self, n: usize) -> AlpnDial {
        let mut dials = self.dials.lock().unwrap();
        if dials.len() <= n {
            dials.resize_with(n + 1, AlpnDial::default);
        }
        dials[n].clone()
    }

    /// Times the connector was called.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl tower::Service<Uri> for AlpnConnector {
    type Response = AlpnIo;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<AlpnIo, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let dial = self.dial(n);
        dial.called.set();
        let addr = self.addr;
        Box::pin(async move {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            if let Some(after) = &dial.returns_after {
                // Bounded: a test whose order never comes fails on its own
                // deadlines, and this dial with it.
                let order = std::future::poll_fn(|cx| after.poll_set(cx));
                if tokio::time::timeout(2 * SLACK, order).await.is_err() {
                    return Err(format!("dial {n}: held, and the test never let it return").into());
                }
            }
            Ok(AlpnIo { io: TokioIo::new(stream), dial, wrote: false })
        })
    }
}

/// A connection of [`AlpnConnector`]: TCP, its `Connected` saying ALPN
/// chose h2.
pub struct AlpnIo {
    io: TokioIo<TcpStream>,
    dial: AlpnDial,
    /// Its first write went (or is going) through.
    wrote: bool,
}

impl AlpnIo {
    /// Ready once the connection may write: its first write waits for its
    /// dial's `writes_after`.
    fn poll_may_write(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.wrote {
            self.dial.first_write.set();
            if let Some(after) = &self.dial.writes_after {
                ready!(after.poll_set(cx));
            }
            self.wrote = true;
        }
        Poll::Ready(())
    }
}

impl Connection for AlpnIo {
    /// ALPN chose h2; poisoned from the start if its dial says so (every
    /// copy hyper-util keeps of what it got shares the pill).
    fn connected(&self) -> Connected {
        let connected = Connected::new().negotiated_h2();
        if self.dial.poisoned {
            connected.poison();
        }
        connected
    }
}

impl Read for AlpnIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl Write for AlpnIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_may_write(cx));
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_may_write(cx));
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_may_write(cx));
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl Drop for AlpnIo {
    fn drop(&mut self) {
        self.dial.dropped.set();
    }
}

/// The tasks [`HoldingExecutor`] keeps.
type Held = Vec<Pin<Box<dyn Future<Output = ()> + Send>>>;

/// An executor for hyper-util's `Client` (`Client::builder`), which hands
/// it a connection's tasks (hyper's connection driver, hyper-util's
/// dispatch task): spawned on tokio, except while it holds
/// ([`hold`](Self::hold)): then kept unpolled, until the test drops them
/// ([`drop_held`](Self::drop_held)), as if the connection died before its
/// tasks ever ran.
#[derive(Clone, Default)]
pub struct HoldingExecutor {
    held: Arc<Mutex<Option<Held>>>,
}

impl HoldingExecutor {
    /// From now on, keeps every task it is given.
    pub fn hold(&self) {
        *self.held.lock().unwrap() = Some(Vec::new());
    }

    /// Drops every task it kept, unpolled, and spawns the next ones again;
    /// returns how many it had kept.
    pub fn drop_held(&self) -> usize {
        let held = self.held.lock().unwrap().take().unwrap_or_default();
        let n = held.len();
        // Outside the lock: a task's drop may hand it another.
        drop(held);
        n
    }
}

impl<F> hyper::rt::Executor<F> for HoldingExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        let mut held = self.held.lock().unwrap();
        if let Some(held) = held.as_mut() {
            held.push(Box::pin(fut));
            return;
        }
        drop(held);
        tokio::spawn(fut);
    }
}
