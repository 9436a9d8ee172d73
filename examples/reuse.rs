//! 100 sequential requests whose bodies are dropped unread, with and without
//! `DrainOnDropLayer`, counting the connections the client opens.
//!
//! ```text
//! cargo run --example reuse                                  # built-in local server, 64 KiB bodies
//! cargo run --example reuse -- -size 16384 -n 500
//! cargo run --example reuse -- -url https://example.com/ -n 20
//! cargo run --example reuse -- -url https://example.com/ -max-bytes 1048576 -max-time 300ms
//! ```
//!
//! `-url` takes `http://` and `https://` (rustls with the webpki roots);
//! flags take one dash or two, as Go's do.

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
    max_bytes: Option<u64>,
    max_time: Option<Duration>,
}

const USAGE: &str = "usage: reuse [-url http(s)://host/path] [-n REQUESTS] [-size BODY_BYTES] \
[-max-bytes BYTES] [-max-time 50ms|1s]";

/// `50ms`, `1s`, `1.5s` or plain milliseconds.
fn parse_duration(v: &str) -> Result<Duration, Error> {
    let (number, unit) = match v.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => v.split_at(i),
        None => (v, "ms"),
    };
    let n: f64 = number.parse()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        other => return Err(format!("unknown unit {other:?} in {v:?} (use ms or s)").into()),
    };
    Ok(Duration::from_secs_f64(secs))
}

fn parse_args() -> Result<Args, Error> {
    let mut args = Args { url: None, n: 100, size: 64 * 1024, max_bytes: None, max_time: None };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        // `-flag value`, `--flag value`, `-flag=value`.
        let (flag, inline) = match arg.trim_start_matches('-').split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg.trim_start_matches('-').to_string(), None),
        };
        let mut value =
            || inline.clone().or_else(|| it.next()).ok_or_else(|| format!("-{flag} needs a value"));
        match flag.as_str() {
            "url" => args.url = Some(value()?.parse()?),
            "n" => args.n = value()?.parse()?,
            "size" => args.size = value()?.parse()?,
            "max-bytes" => args.max_bytes = Some(value()?.parse()?),
            "max-time" => args.max_time = Some(parse_duration(&value()?)?),
            "h" | "help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {arg} ({USAGE})").into()),
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
async fn run(label: &str, url: &Uri, n: usize, layer: DrainOnDropLayer, draining: bool) -> Result<(), Error> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    // rustls with its ring provider, named: a program whose dependencies
    // enable two providers (ring and aws-lc-rs) has no process default.
    // rustls 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
    // repository keeps ring so that nothing builds aws-lc-sys (a C library).
    #[allow(deprecated)]
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    // The observer counts connections into the layer's stats and tells each
    // response whether its connection was new or reused. Around the TLS
    // connector, its setup time includes the TLS handshake.
    let connector = layer.observe(https);
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    let stats = layer.stats();
    let origins = layer.clone();
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
    // Let the last drain end (each is bounded by its time budget, at most
    // 1 s by default) before reporting.
    if !stats.wait_idle(Duration::from_secs(5)).await {
        eprintln!("warning: drains still running after 5 s; the counts below miss them");
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
    for (reason, count) in s.iter().filter(|(_, count)| *count > 0) {
        println!("    {:<9} {:<22} {count}", reason.outcome().as_str(), reason.as_str());
    }
    // What each origin's drains were given: the default time budget follows
    // the round trip the layer measured.
    for origin in origins.origins().into_iter().filter(|_| draining) {
        let budget = match origin.budget {
            Some(b) => format!("{} KiB in {} ms", b.max_bytes() / 1024, b.max_time().as_millis()),
            None => "the fixed budgets".to_string(),
        };
        let rtt =
            origin.round_trip.map_or("none yet".to_string(), |d| format!("{:.1} ms", d.as_secs_f64() * 1e3));
        println!("  origin {}: round trip {rtt}, drain budget {budget}", origin.origin);
    }
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
        "without draining (DrainOnDropLayer::new().enabled(false), as hyper-util alone):",
        &url,
        args.n,
        DrainOnDropLayer::new().enabled(false),
        false,
    )
    .await?;
    let mut layer = DrainOnDropLayer::new();
    let mut label = String::from("with DrainOnDropLayer::new()");
    if let Some(max_bytes) = args.max_bytes {
        layer = layer.max_bytes(max_bytes);
        label.push_str(&format!(".max_bytes({max_bytes})"));
    }
    if let Some(max_time) = args.max_time {
        layer = layer.max_time(max_time);
        label.push_str(&format!(".max_time({max_time:?})"));
    }
    label.push_str(match (args.max_bytes, args.max_time) {
        (None, None) => " (defaults: 256 KiB; time budget six round trips of the origin, 50 ms to 1 s)",
        (Some(_), None) => " (time budget: the default, six round trips of the origin, 50 ms to 1 s)",
        (None, Some(_)) => " (byte budget: the default, 256 KiB)",
        (Some(_), Some(_)) => "",
    });
    run(&format!("{label}:"), &url, args.n, layer, true).await?;
    Ok(())
}
