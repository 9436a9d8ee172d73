//! Adversarial and fault tests: servers that stall, lie, smuggle, reset or
//! never end; runtimes and clients that go away while drains run; floods of
//! early drops. Each test states what the caller sees, whether the connection
//! was reused, and how the early drop was counted, by reason.
//!
//! - `harness`: the rig every test here uses (a scripted server, a counting
//!   client behind the layer) and what the layer counted.
//! - `scenarios`: framing and budgets: drained and reused, abandoned past a
//!   budget, skipped when the connection cannot be reused, zero settings,
//!   bodiless responses.
//! - `hostile`: lying lengths, bytes past the end, broken chunked framing,
//!   FIN and RST mid-drain, infinite streams.
//! - `request_body`: a response that ends before the upload does.
//! - `lifecycle`: runtime flavors, drops on other threads, tasks and
//!   runtimes, the client or the runtime going away, drops outside any
//!   runtime, idle connections closed by the server.
//! - `concurrency`: the cap on running drains, many callers at once.
//!
//! Not here: HTTP/2 (prior-knowledge h2c), in `tests/behaviour.rs`.

#[path = "../support/mod.rs"]
mod support;

mod concurrency;
mod faults;
mod harness;
mod hostile;
mod lifecycle;
mod request_body;
mod scenarios;
