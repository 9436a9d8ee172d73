//! The per-origin table of one layer: every origin's state behind an `Arc`,
//! found by one short lock on the table when a request is called, and kept
//! by the request's response and drain from then on without the table.
//! Bounded to [`MAX_ORIGINS`], the least recently used forgotten first: a
//! forgotten origin lives on for the responses and drains that hold it.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::Origin;
use super::key::{OriginKey, Target};

/// Origins tracked per layer; the least recently used is forgotten first
/// (found by a scan of the table, only when a new origin comes to a full
/// one: 256 comparisons).
pub(crate) const MAX_ORIGINS: usize = 256;

/// Origins by the hash of their parts, and the clock their `last_used`
/// is read from.
#[derive(Default)]
struct Table {
    by_hash: HashMap<u64, Arc<Origin>, BuildHasherDefault<PreHashed>>,
    /// Lookups so far.
    clock: u64,
}

/// The table's keys are hashes already, seeded by [`Origins`]' own
/// random seed: used as they are rather than hashed a second time.
#[derive(Default)]
struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here (`write_u64`); any other input is
        // still a valid, if slow, hash.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The per-origin table of one layer.
pub(crate) struct Origins {
    table: Mutex<Table>,
    /// Seeds the origins' hashes, differently in every table.
    seed: u64,
    /// Origins in the table, readable without its lock.
    tracked: AtomicUsize,
}

impl Default for Origins {
    fn default() -> Self {
        Origins {
            table: Mutex::default(),
            seed: RandomState::new().hash_one(0u8),
            tracked: AtomicUsize::new(0),
        }
    }
}

impl Origins {
    /// What a request for `uri` with `headers` says about its origin, for
    /// [`find`](Self::find) (hashed with this table's seed); `None` when it
    /// names no host (see `Target::of`).
    pub(crate) fn target(&self, uri: &http::Uri, headers: &http::HeaderMap) -> Option<Target> {
        Target::of(uri, headers, self.seed)
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock cannot leave the table invalid.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `target`'s origin, created if needed (forgetting the least recently
    /// used when the table is full; the one allocation, then). `None` in the
    /// unlikely event that two origins' hashes collide (the second is then
    /// not tracked).
    pub(crate) fn find(&self, target: &Target) -> Option<Arc<Origin>> {
        let parts = target.parts();
        let hash = target.hash();
        let mut guard = self.table();
        let table = &mut *guard;
        table.clock += 1;
        let now = table.clock;
        if let Some(origin) = table.by_hash.get(&hash) {
            origin.last_used.store(now, Ordering::Relaxed);
            return origin.key.matches(parts).then(|| origin.clone());
        }
        if table.by_hash.len() >= MAX_ORIGINS {
            let oldest = table
                .by_hash
                .iter()
                .min_by_key(|(_, o)| o.last_used.load(Ordering::Relaxed))
                .map(|(h, _)| *h);
            if let Some(oldest) = oldest {
                table.by_hash.remove(&oldest);
            }
        }
        let origin = Arc::new(Origin::new(OriginKey::new(parts), now));
        table.by_hash.insert(hash, origin.clone());
        self.tracked.store(table.by_hash.len(), Ordering::Relaxed);
        Some(origin)
    }

    /// Every origin tracked, sorted by name; collected under the lock, named
    /// and read outside it.
    pub(crate) fn all(&self) -> Vec<Arc<Origin>> {
        let mut all: Vec<Arc<Origin>> = self.table().by_hash.values().cloned().collect();
        all.sort_by_cached_key(|o| o.key.to_string());
        all
    }

    /// Origins tracked now (without the table's lock: as of a moment ago).
    pub(crate) fn len(&self) -> usize {
        self.tracked.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn find(origins: &Origins, u: &str) -> Arc<Origin> {
        origins.find(&origins.target(&u.parse().unwrap(), &http::HeaderMap::new()).unwrap()).unwrap()
    }

    #[test]
    fn the_table_forgets_the_least_recently_used_origin() {
        let origins = Origins::default();
        let uri = |i: usize| format!("http://h{i}:80/");
        let (first, second) = (find(&origins, &uri(0)), find(&origins, &uri(1)));
        for i in 2..MAX_ORIGINS {
            find(&origins, &uri(i));
        }
        assert!(Arc::ptr_eq(&first, &find(&origins, &uri(0))), "found again, and used again");
        find(&origins, &uri(MAX_ORIGINS)); // full: the least recently used (1) goes
        assert_eq!(origins.len(), MAX_ORIGINS);
        assert!(Arc::ptr_eq(&first, &find(&origins, &uri(0))), "the recently used one stays");
        assert!(!Arc::ptr_eq(&second, &find(&origins, &uri(1))), "the oldest was forgotten: another entry");
    }

    #[test]
    fn one_origin_however_its_uri_is_written_and_estimates_kept_between_uses() {
        let origins = Origins::default();
        let a = find(&origins, "http://alice:secret@API.example/x");
        a.record_head(std::time::Instant::now(), Duration::from_millis(7));
        let b = find(&origins, "http://api.example:80/y");
        assert!(Arc::ptr_eq(&a, &b), "one origin");
        assert_eq!(b.round_trip(), Some(Duration::from_millis(7)));
        assert_eq!(origins.len(), 1);
        let names: Vec<_> = origins.all().iter().map(|o| o.name()).collect();
        assert_eq!(names, ["http://api.example:80"], "never the userinfo");
    }
}
