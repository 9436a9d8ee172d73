//! Server behaviour the shared `RawServer` cannot script: answering a
//! request before reading its body.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::support::{body_bytes, cl_head, content_length_of};

/// Answers every request with `body_bytes(seed, len)` (`Content-Length`) as
/// soon as the request head has arrived, and only then reads and discards
/// the request body (chunked or `Content-Length`), before serving the next
/// request on the connection.
pub(crate) struct EarlyAnswerServer {
    pub(crate) addr: std::net::SocketAddr,
    accepted: Arc<AtomicUsize>,
    bodies_read: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl EarlyAnswerServer {
    pub(crate) async fn start(seed: u64, len: usize) -> EarlyAnswerServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let bodies_read = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let (accepted, bodies_read) = (accepted.clone(), bodies_read.clone());
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    stream.set_nodelay(true).unwrap();
                    accepted.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(serve(stream, seed, len, bodies_read.clone()));
                }
            }
        });
        EarlyAnswerServer { addr, accepted, bodies_read, task }
    }

    pub(crate) fn uri(&self, path: &str) -> http::Uri {
        format!("http://{}{}", self.addr, path).parse().unwrap()
    }

    /// Connections accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Request bodies read to their end so far.
    pub(crate) fn bodies_read(&self) -> usize {
        self.bodies_read.load(Ordering::SeqCst)
    }
}

impl Drop for EarlyAnswerServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, seed: u64, len: usize, bodies_read: Arc<AtomicUsize>) {
    let mut buf = Vec::new();
    loop {
        // The head.
        let end = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            if !read_more(&mut stream, &mut buf).await {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        buf.drain(..end + 4);
        // The answer, before the body.
        let mut response = cl_head(len);
        response.extend(body_bytes(seed, len));
        if stream.write_all(&response).await.is_err() {
            return;
        }
        // Then the body. Request bodies in these tests never contain the
        // last-chunk marker, so finding it is enough.
        if head.contains("transfer-encoding: chunked") {
            loop {
                if let Some(end) = buf.windows(5).position(|w| w == b"0\r\n\r\n") {
                    buf.drain(..end + 5);
                    break;
                }
                if !read_more(&mut stream, &mut buf).await {
                    return;
                }
            }
        } else {
            let body_len = content_length_of(&head);
            while buf.len() < body_len {
                if !read_more(&mut stream, &mut buf).await {
                    return;
                }
            }
            buf.drain(..body_len);
        }
        bodies_read.fetch_add(1, Ordering::SeqCst);
    }
}

/// Reads more bytes into `buf`; `false` at the end of the stream or on error.
async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8192];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}
