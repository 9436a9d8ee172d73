//! Adversarial and fault tests: servers that stall, lie, smuggle, reset or
//! never end; runtimes and clients that go away while drains run; floods of
//! early drops. Each test states what the caller sees, whether the connection
//! was reused, and how the early drop was counted.
//!
//! - `scenarios`: the peers' framing and budget scenarios (CONTEXT.md 1–13,
//!   17, 18), numbered `sNN_` after that list.
//! - `hostile`: lying lengths, bytes past the end, broken chunked framing,
//!   FIN and RST mid-drain, infinite streams, one-byte chunks (9, 14–16).
//! - `request_body`: a response that ends before the upload does (19).
//! - `lifecycle`: runtime flavors, drops on other threads, tasks and
//!   runtimes, the client or the runtime going away, drops outside any
//!   runtime, idle connections closed by the server (20–22).
//! - `concurrency`: the cap on running drains, many callers at once (21).
//!
//! Not here: HTTP/2 (prior-knowledge h2c) is covered elsewhere.

#[path = "../support/mod.rs"]
mod support;

mod concurrency;
mod faults;
mod harness;
mod hostile;
mod lifecycle;
mod request_body;
mod scenarios;
