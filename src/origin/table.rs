//! The per-origin table of one layer: every origin's state behind an `Arc`,
//! found when a request is called (by a service whose last request went
//! elsewhere: see `request::LastOrigin`) and kept by the request's response
//! and drain from then on without the table. The table is in [`SHARDS`]
//! parts by hash, each behind its own short lock, so that callers of many
//! origins do not take turns on one lock. Bounded to [`MAX_ORIGINS`], the
//! least recently used of a part forgotten first: a forgotten origin lives
//! on for the responses and drains that hold it.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::Origin;
use super::key::{OriginKey, Target};

/// Origins tracked per layer, [`MAX_ORIGINS`] / [`SHARDS`] in each part; the
/// least recently used of a part is forgotten first (found by a scan of the
/// part, only when a new origin comes to a full one: 16 comparisons).
pub(crate) const MAX_ORIGINS: usize = 256;
/// Parts of the table, each behind its own lock.
pub(crate) const SHARDS: usize = 16;
const PER_SHARD: usize = MAX_ORIGINS / SHARDS;

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
    shards: [Mutex<Table>; SHARDS],
    /// Seeds the origins' hashes, differently in every table.
    seed: u64,
    /// Origins in the table, readable without its lock.
    tracked: AtomicUsize,
}

impl Default for Origins {
    fn default() -> Self {
        Origins {
            shards: std::array::from_fn(|_| Mutex::default()),
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

    /// The part of the table that holds the origin of `hash`.
    fn shard(&self, hash: u64) -> MutexGuard<'_, Table> {
        // The high bits: the map keys on the hash itself, the low bits.
        let shard = &self.shards[(hash >> 60) as usize % SHARDS];
        // A panic while holding the lock cannot leave the table invalid.
        shard.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `target`'s origin, created if needed (forgetting the least recently
    /// used when the table is full; the one allocation, then). `None` in the
    /// unlikely event that two origins' hashes collide (the second is then
    /// not tracked).
    pub(crate) fn find(&self, target: &Target) -> Option<Arc<Origin>> {
        let parts = target.parts();
        let hash = target.hash();
        let mut guard = self.shard(hash);
        let table = &mut *guard;
        table.clock += 1;
        let now = table.clock;
        if let Some(origin) = table.by_hash.get(&hash) {
            origin.last_used.store(now, Ordering::Relaxed);
            return origin.key.matches(parts).then(|| origin.clone());
        }
        let full = table.by_hash.len() >= PER_SHARD;
        if full {
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
        if !full {
            self.tracked.fetch_add(1, Ordering::Relaxed);
        }
        Some(origin)
    }

    /// Every origin tracked, sorted by name; collected part by part under
    /// its lock, named and read outside them.
    pub(crate) fn all(&self) -> Vec<Arc<Origin>> {
        let mut all: Vec<Arc<Origin>> = Vec::new();
        for shard in &self.shards {
            all.extend(shard.lock().unwrap_or_else(|e| e.into_inner()).by_hash.values().cloned());
        }
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

    fn find_uri(origins: &Origins, u: &str) -> Arc<Origin> {
        origins.find(&origins.target(&u.parse().unwrap(), &http::HeaderMap::new()).unwrap()).unwrap()
    }

    #[test]
    fn each_part_of_the_table_forgets_its_least_recently_used_origin() {
        let origins = Origins::default();
        let target = |i: usize| {
            origins.target(&format!("http://h{i}:80/").parse().unwrap(), &http::HeaderMap::new()).unwrap()
        };
        // Origins that fall in one part of the table.
        let part = |i: usize| (target(i).hash() >> 60) as usize % SHARDS;
        let same: Vec<usize> = (0..).filter(|&i| part(i) == part(0)).take(PER_SHARD + 1).collect();
        let find = |i: usize| origins.find(&target(i)).unwrap();
        let (first, second) = (find(same[0]), find(same[1]));
        for &i in &same[2..PER_SHARD] {
            find(i);
        }
        assert!(Arc::ptr_eq(&first, &find(same[0])), "found again, and used again");
        find(same[PER_SHARD]); // full: the least recently used (the second) goes
        assert_eq!(origins.len(), PER_SHARD);
        assert!(Arc::ptr_eq(&first, &find(same[0])), "the recently used one stays");
        assert!(!Arc::ptr_eq(&second, &find(same[1])), "the oldest was forgotten: another entry");
        let other = (0..).find(|&i| part(i) != part(0)).unwrap();
        find(other);
        assert_eq!(origins.len(), PER_SHARD + 1, "another part has room of its own");
    }

    /// Services behind one gateway, sidecars on localhost, a test suite's
    /// servers: origins that differ by their port alone spread over the
    /// table's parts like any others, and keep their state up to the
    /// table's capacity.
    #[test]
    fn many_origins_on_one_host_keep_their_state() {
        let origins = Origins::default();
        let uri = |port: u16| format!("http://127.0.0.1:{port}/");
        let kept: Vec<Arc<Origin>> = (0..64).map(|i| find_uri(&origins, &uri(8000 + i))).collect();
        for (i, origin) in kept.iter().enumerate() {
            origin.record_head(std::time::Instant::now(), Duration::from_millis(1 + i as u64));
        }
        for _ in 0..3 {
            for (i, origin) in kept.iter().enumerate() {
                let again = find_uri(&origins, &uri(8000 + i as u16));
                assert!(Arc::ptr_eq(origin, &again), "port {}: the same origin, not a new one", 8000 + i);
                assert_eq!(again.round_trip(), Some(Duration::from_millis(1 + i as u64)), "its state kept");
            }
        }
        assert_eq!(origins.len(), 64);
        let part = |port: u16| {
            let target = origins.target(&uri(port).parse().unwrap(), &http::HeaderMap::new()).unwrap();
            (target.hash() >> 60) as usize % SHARDS
        };
        let parts: std::collections::BTreeSet<usize> = (8000..8064).map(part).collect();
        assert!(parts.len() > SHARDS / 2, "spread over the parts: {parts:?}");
    }

    #[test]
    fn one_origin_however_its_uri_is_written_and_estimates_kept_between_uses() {
        let origins = Origins::default();
        let a = find_uri(&origins, "http://alice:secret@API.example/x");
        a.record_head(std::time::Instant::now(), Duration::from_millis(7));
        let b = find_uri(&origins, "http://api.example:80/y");
        assert!(Arc::ptr_eq(&a, &b), "one origin");
        assert_eq!(b.round_trip(), Some(Duration::from_millis(7)));
        assert_eq!(origins.len(), 1);
        let names: Vec<_> = origins.all().iter().map(|o| o.name()).collect();
        assert_eq!(names, ["http://api.example:80"], "never the userinfo");
    }
}
