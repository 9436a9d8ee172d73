//! The per-origin table of one layer: every origin's state behind an `Arc`,
//! found when a request is called (by a service whose last request went
//! elsewhere: see `request::LastOrigin`) and kept by the request's response
//! and drain from then on without the table. The table is in [`SHARDS`]
//! parts by hash, each behind its own short lock, so that callers of many
//! origins do not take turns on one lock. Bounded to [`MAX_ORIGINS`] (a part
//! holds up to twice its even share while the table has room, so that
//! origins that happen to hash to one part are kept all the same), the
//! least recently used of a part forgotten first: a forgotten origin lives
//! on for the responses and drains that hold it.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::Origin;
use super::key::{OriginKey, Target};

/// Origins tracked per layer (and one more for each part that was empty
/// when the table filled: 15 at most); the least recently used of a part is
/// forgotten first, when a new origin comes to a part that holds
/// [`MOST_PER_SHARD`], or to a table that holds this many (found by a scan
/// of the part: 32 comparisons at most).
pub(crate) const MAX_ORIGINS: usize = 256;
/// Parts of the table, each behind its own lock.
pub(crate) const SHARDS: usize = 16;
/// Origins a part holds at most: twice its even share. 64 origins of one
/// host spread by hash over 16 parts of 16 places put 17 in one part in
/// about 3 tables of a million, which then forgot one with the table a
/// quarter full; 33 in one part is beyond any test of chance.
const MOST_PER_SHARD: usize = 2 * MAX_ORIGINS / SHARDS;

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

/// Which part of the table holds the origin of `hash`: its high bits (the
/// map keys on the hash itself, the low bits).
fn part_of(hash: u64) -> usize {
    (hash >> 60) as usize % SHARDS
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
        let shard = &self.shards[part_of(hash)];
        // A panic while holding the lock cannot leave the table invalid.
        shard.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `target`'s origin, created if needed (forgetting the least recently
    /// used of its part when the part or the table is full; the one
    /// allocation, then). `None` in the
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
        let held = table.by_hash.len();
        let full =
            held >= MOST_PER_SHARD || (held > 0 && self.tracked.load(Ordering::Relaxed) >= MAX_ORIGINS);
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

    /// Origins of `origins` that fall in the part of the table `h0`'s does.
    fn one_part(origins: &Origins, n: usize) -> (impl Fn(usize) -> Target + '_, Vec<usize>) {
        let target = |i: usize| {
            origins.target(&format!("http://h{i}:80/").parse().unwrap(), &http::HeaderMap::new()).unwrap()
        };
        let part = |i: usize| part_of(target(i).hash());
        let same = (0..).filter(|&i| part(i) == part(0)).take(n).collect();
        (target, same)
    }

    #[test]
    fn each_part_of_the_table_forgets_its_least_recently_used_origin() {
        let origins = Origins::default();
        let (target, same) = one_part(&origins, MOST_PER_SHARD + 1);
        let find = |i: usize| origins.find(&target(i)).unwrap();
        let (first, second) = (find(same[0]), find(same[1]));
        for &i in &same[2..MOST_PER_SHARD] {
            find(i);
        }
        assert_eq!(origins.len(), MOST_PER_SHARD, "a part holds twice its share while the table has room");
        assert!(Arc::ptr_eq(&first, &find(same[0])), "found again, and used again");
        find(same[MOST_PER_SHARD]); // full: the least recently used (the second) goes
        assert_eq!(origins.len(), MOST_PER_SHARD);
        assert!(Arc::ptr_eq(&first, &find(same[0])), "the recently used one stays");
        assert!(!Arc::ptr_eq(&second, &find(same[1])), "the oldest was forgotten: another entry");
    }

    #[test]
    fn a_full_table_forgets_in_the_part_a_new_origin_comes_to() {
        let origins = Origins::default();
        let (target, same) = one_part(&origins, 3);
        let first = origins.find(&target(same[0])).unwrap();
        let second = origins.find(&target(same[1])).unwrap();
        // Fill the table with origins of the other parts.
        let mut i = 0;
        while origins.len() < MAX_ORIGINS {
            let t = origins
                .target(&format!("http://o{i}:80/").parse().unwrap(), &http::HeaderMap::new())
                .unwrap();
            if part_of(t.hash()) != part_of(target(0).hash()) {
                origins.find(&t);
            }
            i += 1;
        }
        origins.find(&target(same[0]));
        origins.find(&target(same[2]));
        assert_eq!(origins.len(), MAX_ORIGINS, "full: a new origin takes the place of one of its part");
        assert!(Arc::ptr_eq(&first, &origins.find(&target(same[0])).unwrap()), "the recently used one stays");
        assert!(!Arc::ptr_eq(&second, &origins.find(&target(same[1])).unwrap()), "its part's oldest went");
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
            part_of(target.hash())
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
