//! The per-origin table of one layer: every origin's [`Estimates`] behind
//! one lock, bounded to [`MAX_ORIGINS`], the least recently used forgotten
//! first. A response takes that lock once (to find its origin and record
//! what its head says); a drain's end takes it again only to record what
//! the drain measured.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::{Mutex, MutexGuard};

use super::estimates::Estimates;
use super::key::{OriginKey, Target};

/// Origins tracked per layer; the least recently used is forgotten first
/// (found by a scan of the table, only when a new origin comes to a full
/// one: 256 comparisons).
pub(crate) const MAX_ORIGINS: usize = 256;

/// An origin in the table, as a response's drain refers to it later: its
/// entry is found again only if it was not forgotten meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OriginId {
    hash: u64,
    /// Which entry of that hash: a forgotten and re-created origin is another.
    generation: u64,
}

struct Entry {
    key: OriginKey,
    generation: u64,
    /// The table's clock at this origin's last use.
    last_used: u64,
    estimates: Estimates,
}

/// Origins by the hash of their parts, and the clock their `last_used`
/// is read from.
#[derive(Default)]
struct Table {
    by_hash: HashMap<u64, Entry, BuildHasherDefault<PreHashed>>,
    /// Uses so far.
    clock: u64,
    /// Entries created so far.
    generations: u64,
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
}

impl Default for Origins {
    fn default() -> Self {
        Origins { table: Mutex::default(), seed: RandomState::new().hash_one(0u8) }
    }
}

impl Origins {
    /// What a request for `uri` with `headers` says about its origin, for
    /// [`at_response`](Self::at_response) (hashed with this table's seed);
    /// `None` when it names no host (see `Target::of`).
    pub(crate) fn target(&self, uri: &http::Uri, headers: &http::HeaderMap) -> Option<Target> {
        Target::of(uri, headers, self.seed)
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock cannot leave the table invalid.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock a response takes: finds `target`'s origin, created if needed
    /// (forgetting the least recently used when the table is full; the one
    /// allocation, then), and runs `record` on its estimates. `None` in the
    /// unlikely event that two origins' hashes collide (the second is then
    /// not tracked).
    pub(crate) fn at_response<R>(
        &self,
        target: &Target,
        record: impl FnOnce(&mut Estimates) -> R,
    ) -> Option<(OriginId, R)> {
        let parts = target.parts();
        let hash = target.hash();
        let mut guard = self.table();
        let table = &mut *guard;
        table.clock += 1;
        let now = table.clock;
        if table.by_hash.len() >= MAX_ORIGINS && !table.by_hash.contains_key(&hash) {
            let oldest = table.by_hash.iter().min_by_key(|(_, e)| e.last_used).map(|(h, _)| *h);
            if let Some(oldest) = oldest {
                table.by_hash.remove(&oldest);
            }
        }
        let generations = &mut table.generations;
        let entry = table.by_hash.entry(hash).or_insert_with(|| {
            *generations += 1;
            Entry {
                key: OriginKey::new(parts),
                generation: *generations,
                last_used: now,
                estimates: Estimates::default(),
            }
        });
        entry.last_used = now;
        if !entry.key.matches(parts) {
            return None;
        }
        let id = OriginId { hash, generation: entry.generation };
        Some((id, record(&mut entry.estimates)))
    }

    /// Runs `f` on the estimates of origin `id`; `None` if it was forgotten.
    pub(crate) fn with<R>(&self, id: OriginId, f: impl FnOnce(&mut Estimates) -> R) -> Option<R> {
        let mut table = self.table();
        let entry = table.by_hash.get_mut(&id.hash).filter(|e| e.generation == id.generation)?;
        Some(f(&mut entry.estimates))
    }

    /// Every origin's name (`scheme://host:port`) and estimates, sorted by
    /// name; copied under the lock, named outside it.
    pub(crate) fn snapshot(&self) -> Vec<(String, Estimates)> {
        let copied: Vec<(OriginKey, Estimates)> =
            self.table().by_hash.values().map(|e| (e.key.clone(), e.estimates)).collect();
        let mut named: Vec<_> = copied.into_iter().map(|(k, e)| (k.to_string(), e)).collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named
    }

    /// Origins tracked now.
    pub(crate) fn len(&self) -> usize {
        self.table().by_hash.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn id(origins: &Origins, u: &str) -> OriginId {
        origins
            .at_response(&origins.target(&u.parse().unwrap(), &http::HeaderMap::new()).unwrap(), |_| ())
            .unwrap()
            .0
    }

    #[test]
    fn the_table_forgets_the_least_recently_used_origin() {
        let origins = Origins::default();
        let uri = |i: usize| format!("http://h{i}:80/");
        let (first, second) = (id(&origins, &uri(0)), id(&origins, &uri(1)));
        for i in 2..MAX_ORIGINS {
            id(&origins, &uri(i));
        }
        assert_eq!(first, id(&origins, &uri(0)), "found again, and used again");
        id(&origins, &uri(MAX_ORIGINS)); // full: the least recently used (1) goes
        assert_eq!(origins.len(), MAX_ORIGINS);
        assert_eq!(first, id(&origins, &uri(0)), "the recently used one stays");
        assert!(origins.with(second, |_| ()).is_none(), "the oldest was forgotten");
        assert_ne!(second, id(&origins, &uri(1)), "and comes back as another entry");
    }

    #[test]
    fn one_origin_however_its_uri_is_written_and_estimates_kept_between_uses() {
        let origins = Origins::default();
        let target = |u: &str| origins.target(&u.parse().unwrap(), &http::HeaderMap::new()).unwrap();
        let a = origins.at_response(&target("http://alice:secret@API.example/x"), |e| {
            e.record_head(Duration::from_millis(7));
        });
        let (b, rtt) = origins.at_response(&target("http://api.example:80/y"), |e| e.round_trip()).unwrap();
        assert_eq!(a.unwrap().0, b, "one origin");
        assert_eq!(rtt, Some(Duration::from_millis(7)));
        assert_eq!(origins.len(), 1);
        let names: Vec<_> = origins.snapshot().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["http://api.example:80"], "never the userinfo");
    }
}
