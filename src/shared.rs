//! What one layer's services, responses and drains share: the settings, the
//! counters and the adaptive origin table. Below everything else: the
//! policy, the body and the drain read it; the layer builds it.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::budget::DrainBudget;
use crate::origin::{self, Origins};
use crate::stats::DrainStats;

/// The layer's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    /// Draining is on (see `DrainOnDropLayer::enabled`).
    pub(crate) enabled: bool,
    pub(crate) max_bytes: u64,
    pub(crate) max_time: Duration,
    pub(crate) max_concurrent_drains: usize,
    /// Media types (lowercase, no parameters) of open-ended streams.
    pub(crate) stream_types: Arc<[String]>,
    /// Budgets follow the adaptive estimates (see `origin.rs`).
    pub(crate) adaptive: bool,
    /// `max_bytes` / `max_time` were set by the user: they are then the
    /// budgets (and the ceilings of adaptive mode); otherwise the time
    /// budget follows the origin's round trip, and adaptive mode has
    /// ceilings of its own.
    pub(crate) explicit_bytes: bool,
    pub(crate) explicit_time: bool,
}

impl Config {
    /// The fixed budgets.
    pub(crate) fn budget(&self) -> DrainBudget {
        DrainBudget::new(self.max_bytes, self.max_time)
    }

    /// The most an adaptive drain may spend.
    pub(crate) fn ceiling(&self) -> DrainBudget {
        DrainBudget::new(
            if self.explicit_bytes { self.max_bytes } else { origin::DEFAULT_CEILING_BYTES },
            if self.explicit_time { self.max_time } else { origin::DEFAULT_CEILING_TIME },
        )
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: true,
            max_bytes: 256 * 1024,
            max_time: Duration::from_millis(50),
            max_concurrent_drains: 1024,
            stream_types: Arc::from(vec!["text/event-stream".to_string()]),
            adaptive: false,
            explicit_bytes: false,
            explicit_time: false,
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
        }
    }
}

impl Shared {
    /// In adaptive mode, a response came on a connection no observer
    /// opened: says so once per layer, at WARN, since adaptive mode then
    /// silently falls back to the default budget.
    pub(crate) fn warn_unobserved_once(&self) {
        // A load first: after the warning, no write per response.
        if !self.warned_unobserved.load(Ordering::Relaxed)
            && !self.warned_unobserved.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                target: "drain_on_drop",
                "adaptive mode without an observer: nothing measures what a new connection costs, so \
                 the default budget applies; wrap the client's connector with `layer.observe(connector)` \
                 (DrainOnDropLayer::origins shows `Adaptive::NoObserver`)"
            );
        }
    }
}

impl fmt::Debug for Shared {
    /// The settings and counters; origins by number only (their names are
    /// hosts the user may not want in logs).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DrainOnDrop")
            .field("config", &self.config)
            .field("stats", &self.stats)
            .field("origins", &self.origins.len())
            .finish()
    }
}
