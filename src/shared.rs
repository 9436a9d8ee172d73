//! What one layer's services, responses and drains share: the settings, the
//! counters and the adaptive origin table. Below everything else: the
//! policy, the body and the drain read it; the layer builds it.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::keepalive::IdleTimeout;
use crate::origin::Origins;
use crate::sizing;
use crate::stats::DrainStats;

/// Media types of open-ended streams unless the user lists others: server-
/// sent events, and gRPC (`application/grpc`, `application/grpc+proto`, …),
/// whose streams a client cancels by resetting them. An entry ending in `*`
/// matches every media type that starts with what comes before it
/// (`headers::inspect`).
const DEFAULT_STREAM_TYPES: [&str; 3] = ["text/event-stream", "application/grpc", "application/grpc+*"];

/// The layer's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    /// Draining is on (see `DrainOnDropLayer::enabled`).
    pub(crate) enabled: bool,
    /// What one drain may spend, and how that is sized (`sizing.rs`).
    pub(crate) budgets: sizing::Settings,
    pub(crate) max_concurrent_drains: usize,
    /// Media types (lowercase, no parameters) of open-ended streams.
    pub(crate) stream_types: Arc<[String]>,
    /// The origin of requests that name none (`default_origin`).
    pub(crate) default_origin: Option<http::Uri>,
    /// How pooled HTTP/1 connections meet their servers' idle timeouts
    /// (`server_idle_timeout`).
    pub(crate) idle_timeout: IdleTimeout,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: true,
            budgets: sizing::Settings::default(),
            max_concurrent_drains: 1024,
            stream_types: Arc::from(DEFAULT_STREAM_TYPES.iter().map(|t| t.to_string()).collect::<Vec<_>>()),
            default_origin: None,
            idle_timeout: IdleTimeout::Learned,
        }
    }
}

/// What every service built from one layer, every body they return and
/// every drain share, behind one `Arc`: cloned once per response, released
/// when its body (or its drain) is done. Holds no runtime and nothing of a
/// runtime, so a layer outliving its runtimes keeps none of them open.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) stats: DrainStats,
    pub(crate) origins: Arc<Origins>,
    /// The warning that adaptive mode has no observer was emitted.
    pub(crate) warned_unobserved: AtomicBool,
    /// The warning that a request named no origin was emitted.
    pub(crate) warned_unknown_origin: AtomicBool,
}

impl Clone for Shared {
    /// The settings, counters and origins of a layer being configured; a
    /// warning not yet emitted.
    fn clone(&self) -> Self {
        Shared {
            config: self.config.clone(),
            stats: self.stats.clone(),
            origins: self.origins.clone(),
            warned_unobserved: AtomicBool::new(false),
            warned_unknown_origin: AtomicBool::new(false),
        }
    }
}

impl Shared {
    /// In adaptive mode, a response came on a connection no observer
    /// opened: says so once per layer, at WARN, since adaptive mode then
    /// silently falls back to the default budget.
    pub(crate) fn warn_unobserved_once(&self) {
        if once(&self.warned_unobserved) {
            tracing::warn!(
                target: "drain_on_drop",
                "adaptive mode without an observer: nothing measures what a new connection costs, so \
                 the default budget applies; wrap the client's connector with `layer.observe(connector)` \
                 (DrainOnDropLayer::origins shows `Adaptive::NoObserver`)"
            );
        }
    }
}

impl Shared {
    /// A request named no origin (an origin-form URI without a `Host`
    /// header): says so once per layer, at WARN, since its drains then get
    /// the fixed budget rather than one that follows the round trip.
    pub(crate) fn warn_unknown_origin_once(&self) {
        if once(&self.warned_unknown_origin) {
            tracing::warn!(
                target: "drain_on_drop",
                "a request named no origin (no authority in its URI, no valid `Host` header): its drains get \
                 the fixed budget (max_bytes, and max_time or 50 ms), not one that follows the origin's round \
                 trip; send absolute URIs or a `Host` header, or, where the origin is added below the layer (tonic's \
                 Channel), name it with `DrainOnDropLayer::default_origin` (DrainOnDropLayer::origins lists the \
                 origins known)"
            );
        }
    }
}

/// Whether this is the first time `flag` is raised (a load first, so that
/// after the first time no write happens).
fn once(flag: &AtomicBool) -> bool {
    !flag.load(Ordering::Relaxed) && !flag.swap(true, Ordering::Relaxed)
}

impl fmt::Debug for Shared {
    /// The settings and counters; origins by number only (their names are
    /// hosts the user may not want in logs).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("stats", &self.stats)
            .field("origins", &self.origins.len())
            .finish()
    }
}
