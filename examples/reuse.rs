//! 100 sequential requests whose bodies are dropped unread, with and without
//! `DrainOnDropLayer`, counting the connections the client opens.
//!
//! ```text
//! cargo run --example reuse                       # built-in local server, 64 KiB bodies
//! cargo run --example reuse -- --size 16384 --n 500
//! cargo run --example reuse -- --url http://127.0.0.1:8080/big
//! ```
//!
//! `--url` takes a plain `http://` HTTP/1 endpoint.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use drain_on_drop::DrainOnDropLayer;
use http::Uri;
use http_body_util::{Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower::{Service, ServiceBuilder, ServiceExt};

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    url: Option<Uri>,
    n: usize,
    size: usize,
}

fn parse_args() -> Result<Args, Error> {
    let mut args = Args { url: None, n: 100, size: 64 * 1024 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => args.url = Some(value()?.parse()?),
            "--n" => args.n = value()?.parse()?,
            "--size" => args.size = value()?.parse()?,
            "-h" | "--help" => {
                println!("usage: reuse [--url http://host:port/path] [--n REQUESTS] [--size BODY_BYTES]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other} (try --help)").into()),
        }
    }
    Ok(args)
}

/// Serves `size` bytes with `Content-Length` on `127.0.0.1:0`.
async fn local_server(size: usize) -> Result<Uri, Error> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let body = Bytes::from(vec![b'x'; size]);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let body = body.clone();
            let service = hyper::service::service_fn(move |_req| {
                let body = body.clone();
                async move { Ok::<_, Infallible>(http::Response::new(Full::new(body))) }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    Ok(format!("http://{addr}/").parse()?)
}

/// Sends `n` sequential GETs, dropping every body unread; prints the result.
async fn run(label: &str, url: &Uri, n: usize, layer: DrainOnDropLayer) -> Result<(), Error> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    // The observer counts connections into the layer's stats and tells each
    // response whether its connection was new or reused.
    let connector = layer.observe(http);
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    let stats = layer.stats();
    let mut svc = ServiceBuilder::new().layer(layer).service(client);

    let start = Instant::now();
    for _ in 0..n {
        let req = http::Request::get(url.clone()).body(Empty::new())?;
        let res = svc.ready().await?.call(req).await?;
        // Only the status is looked at; the body is dropped unread.
        if !res.status().is_success() {
            eprintln!("warning: {} answered {}", url, res.status());
        }
    }
    let elapsed = start.elapsed();
    // Let the last drain end (each is bounded by `max_time`) before reporting.
    while stats.snapshot().in_flight > 0 && start.elapsed() < elapsed + Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let s = stats.snapshot();
    let r = stats.reuse();
    println!("{label}");
    println!(
        "  {n} requests in {} ms, {} on a reused connection ({} connections opened)",
        elapsed.as_millis(),
        r.reused,
        r.connections_opened,
    );
    println!(
        "  early drops: {} drained, {} abandoned, {} skipped, {} failed; {} KiB drained",
        s.drained,
        s.abandoned,
        s.skipped,
        s.failed,
        s.bytes_drained / 1024
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = parse_args()?;
    let url = match args.url {
        Some(url) => url,
        None => {
            let url = local_server(args.size).await?;
            println!("local server at {url}, bodies of {} bytes, dropped unread", args.size);
            url
        }
    };
    run(
        "without draining (max_bytes = 0, as hyper-util alone):",
        &url,
        args.n,
        DrainOnDropLayer::new().max_bytes(0),
    )
    .await?;
    run("with DrainOnDropLayer::new() (256 KiB, 50 ms):", &url, args.n, DrainOnDropLayer::new()).await?;
    Ok(())
}
