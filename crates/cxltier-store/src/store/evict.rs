//! Eviction: the keys a store gives up when it is full (or over a caller's memory limit), chosen
//! as Redis chooses them ([`EvictionPolicy`]): `maxmemory-samples` keys drawn at random from the
//! index each round feed a pool of the 16 best victims seen (Redis's `EvictionPoolLRU`), ranked
//! by the access statistics every key's entry keeps whatever tier its value is in (its LRU clock
//! or LFU counter, `crate::eviction`), and the best goes. A victim is deleted as `DEL` deletes it
//! (a tombstone on the log, its parts with it); the caller announces and replicates it.

use super::{Durability, Store};
use crate::eviction::EvictionPolicy;
use crate::keys::is_internal_key;
use crate::Result;

/// Redis's `EVPOOL_SIZE`.
pub(crate) const POOL_SIZE: usize = 16;

/// The policy and the pool of candidates kept between evictions.
#[derive(Debug, Default)]
pub(crate) struct Eviction {
    policy: EvictionPolicy,
    /// Candidates by ascending score (the best victim last).
    pool: Vec<(u64, Box<[u8]>)>,
    /// A walk of the whole index found no key a volatile policy may evict while the store's
    /// change count was this: nothing to look for until it changes.
    none_volatile_at: Option<u64>,
}

/// How full a store is: bytes used of what it can hold, over the tier that binds (see
/// [`Store::fill`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fill {
    pub used: u64,
    pub capacity: u64,
}

impl Store {
    /// Set the eviction policy, and with it how accesses are recorded (an LFU counter under
    /// `allkeys-lfu` and `volatile-lfu`, the LRU clock otherwise), with Redis's `lfu-log-factor`
    /// and `lfu-decay-time` (minutes; 0: never decay).
    pub fn set_eviction_policy(
        &mut self,
        policy: EvictionPolicy,
        lfu_log_factor: u32,
        lfu_decay_minutes: u32,
    ) {
        if policy != self.eviction.policy {
            self.eviction.pool.clear();
        }
        self.eviction.policy = policy;
        self.access.lfu = policy.is_lfu();
        self.access.log_factor = lfu_log_factor;
        self.access.decay_minutes = lfu_decay_minutes;
    }

    pub fn eviction_policy(&self) -> EvictionPolicy {
        self.eviction.policy
    }

    /// Set `key`'s access statistics as RESTORE's `IDLETIME` or `FREQ` give them (Redis's
    /// `objectSetLRUOrLFU`): under an LFU policy the counter, else the access clock so many
    /// seconds back; the one the policy does not keep is ignored. False when the key is absent.
    pub fn set_access_stats(
        &mut self,
        key: &[u8],
        idle_seconds: Option<u64>,
        freq: Option<u8>,
    ) -> bool {
        let now = self.now_ms();
        let Some(bits) = self.access.restored(idle_seconds, freq, now) else {
            return self.index.contains_key(key);
        };
        match self.index.get_mut(key) {
            Some(e) => {
                e.set_access(bits);
                true
            }
            None => false,
        }
    }

    /// Seed the random draws of eviction sampling and LFU increments (tests).
    pub fn seed_eviction(&mut self, seed: u64) {
        self.access.seed(seed);
    }

    /// Bytes the memory tiers hold for objects (the slots in use) plus the key index: Redis's
    /// `used_memory` (it falls as keys are deleted, unlike the slab pages kept resident).
    pub fn memory_used(&self) -> u64 {
        self.arenas.iter().map(|a| a.used_bytes).sum::<u64>() + self.index_bytes()
    }

    /// How full the store is over all its tiers, by the bound that is nearest: the DRAM budget
    /// against the key index; without an NVMe tier, the memory tiers (slots in use and the
    /// index against DRAM and CXL, in whole slab pages); with one, the log's live bytes against its capacity less
    /// two segments kept for cleaning (plus, when memory is written back without durability,
    /// the memory tiers, whose objects may be on no log).
    pub fn fill(&self) -> Fill {
        // A tier grows by whole slab pages: what is left of its limit below a page is no room.
        let memory = Fill {
            used: self.memory_used(),
            capacity: (0..self.arenas.len())
                .map(|t| {
                    let page = (self.arenas[t].page_size() as u64).max(1);
                    self.tier_limit(t) / page * page
                })
                .sum::<u64>()
                + self.index_bytes(),
        };
        let index = Fill {
            used: self.index_bytes(),
            capacity: self.dram_budget,
        };
        let store = match &self.log {
            None => memory,
            Some(log) => {
                let l = log.stats();
                let segment = l.capacity / u64::from(l.segments.max(1));
                let mut f = Fill {
                    used: l.live_bytes,
                    capacity: l.capacity.saturating_sub(2 * segment),
                };
                if self.durability == Durability::None {
                    f.used += memory.used - self.index_bytes();
                    f.capacity += memory.capacity - self.index_bytes();
                }
                f
            }
        };
        // The fuller of the two, compared as fractions.
        if u128::from(index.used) * u128::from(store.capacity.max(1))
            > u128::from(store.used) * u128::from(index.capacity.max(1))
        {
            index
        } else {
            store
        }
    }

    /// Evict one key by the policy: sample `samples` keys into the pool, delete the best victim
    /// and return it (its store key). `None` when the policy evicts nothing (`noeviction`) or
    /// finds no key it may evict (a volatile policy and no key with a TTL).
    pub fn evict(&mut self, samples: usize) -> Result<Option<Vec<u8>>> {
        let policy = self.eviction.policy;
        if policy == EvictionPolicy::NoEviction || self.index.user_len() == 0 {
            return Ok(None);
        }
        let volatile = policy.volatile_only();
        if volatile && (!self.may_expire || self.eviction.none_volatile_at == Some(self.changes)) {
            return Ok(None);
        }
        let now = self.now_ms();
        let samples = samples.clamp(1, 64);
        let random = matches!(
            policy,
            EvictionPolicy::AllKeysRandom | EvictionPolicy::VolatileRandom
        );
        let candidates = self.sample(if random { 1 } else { samples }, volatile, now);
        if candidates.is_empty() {
            if volatile {
                self.eviction.none_volatile_at = Some(self.changes);
            }
            return Ok(None);
        }
        if random {
            let key = candidates[0].1.to_vec();
            self.delete(&key)?;
            return Ok(Some(key));
        }
        for (score, key) in candidates {
            let pool = &mut self.eviction.pool;
            if pool.iter().any(|(_, k)| *k == key) {
                continue;
            }
            if pool.len() == POOL_SIZE {
                if score <= pool[0].0 {
                    continue;
                }
                pool.remove(0);
            }
            let at = pool.partition_point(|(s, _)| *s <= score);
            pool.insert(at, (score, key));
        }
        while let Some((_, key)) = self.eviction.pool.pop() {
            let live = self
                .index
                .get(&key)
                .is_some_and(|e| !e.is_expired(now) && (!volatile || e.expires() != 0));
            if live {
                self.delete(&key)?;
                return Ok(Some(key.into_vec()));
            }
        }
        Ok(None)
    }

    /// Up to `n` keys the policy may evict, each with its score: slots drawn at random, then,
    /// when those found too few (a volatile policy among keys mostly without TTL), a walk on from
    /// a random slot, over the whole index at most.
    fn sample(&mut self, n: usize, volatile: bool, now: u64) -> Vec<(u64, Box<[u8]>)> {
        let span = self.index.slot_span();
        let mut found: Vec<(u64, Box<[u8]>)> = Vec::with_capacity(n);
        if span == 0 {
            return found;
        }
        let policy = self.eviction.policy;
        let take = |store: &Store, id: usize, found: &mut Vec<(u64, Box<[u8]>)>| {
            let Some((key, e)) = store.index.pair_at(id as u32) else {
                return;
            };
            if is_internal_key(key)
                || e.is_expired(now)
                || (volatile && e.expires() == 0)
                || found.iter().any(|(_, k)| **k == *key)
            {
                return;
            }
            let score = store.access.score(policy, e.access(), e.expires(), now);
            found.push((score, key.into()));
        };
        for _ in 0..n * 4 {
            if found.len() >= n {
                return found;
            }
            let id = (self.access.next_u64() % span as u64) as usize;
            take(self, id, &mut found);
        }
        let start = (self.access.next_u64() % span as u64) as usize;
        for i in 0..span {
            if found.len() >= n {
                break;
            }
            take(self, (start + i) % span, &mut found);
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use crate::{EvictionPolicy, Kind, Store, StoreBuilder};

    fn store() -> Store {
        let mut s = StoreBuilder::new()
            .dram(32 << 20)
            .collection_chunk_bytes(256)
            .durability(crate::Durability::None)
            .build()
            .unwrap();
        s.seed_eviction(42);
        s
    }

    const T0: u64 = 1_700_000_000_000;

    /// Keys k0..k9 written at T0, then read one a second from k0 (k9 last): k0 is the least
    /// recently used.
    fn aged(policy: EvictionPolicy) -> Store {
        let mut s = store();
        s.set_eviction_policy(policy, 10, 1);
        s.freeze_clock(T0);
        for i in 0..10 {
            let ttl = (i % 2 == 1).then_some(T0 + 1_000_000 - i * 1000);
            s.put(format!("k{i}").as_bytes(), Kind::String, b"v", ttl)
                .unwrap();
        }
        for i in 0..10u64 {
            s.freeze_clock(T0 + (i + 1) * 1000);
            s.get(format!("k{i}").as_bytes()).unwrap();
        }
        s.freeze_clock(T0 + 20_000);
        s
    }

    #[test]
    fn allkeys_lru_evicts_the_least_recently_used_of_the_sample() {
        let mut s = aged(EvictionPolicy::AllKeysLru);
        // Ten samples of ten keys see (nearly) all of them: the oldest go in order.
        assert_eq!(s.evict(10).unwrap().as_deref(), Some(&b"k0"[..]));
        assert_eq!(s.evict(10).unwrap().as_deref(), Some(&b"k1"[..]));
        assert!(!s.contains(b"k0") && !s.contains(b"k1") && s.contains(b"k9"));
        assert_eq!(s.len(), 8);
    }

    #[test]
    fn volatile_lru_evicts_only_keys_with_a_ttl_and_then_nothing() {
        let mut s = aged(EvictionPolicy::VolatileLru);
        let mut gone = Vec::new();
        while let Some(k) = s.evict(10).unwrap() {
            gone.push(String::from_utf8(k).unwrap());
        }
        assert_eq!(gone, ["k1", "k3", "k5", "k7", "k9"]);
        assert_eq!(s.len(), 5);
        assert_eq!(s.evict(10).unwrap(), None, "no key with a TTL is left");
    }

    #[test]
    fn volatile_ttl_evicts_the_nearest_expiry_first() {
        let mut s = aged(EvictionPolicy::VolatileTtl);
        // k9 expires first (T0 + 991 s), k1 last.
        assert_eq!(s.evict(10).unwrap().as_deref(), Some(&b"k9"[..]));
        assert_eq!(s.evict(10).unwrap().as_deref(), Some(&b"k7"[..]));
    }

    #[test]
    fn lfu_policies_evict_the_least_frequently_used() {
        let mut s = store();
        s.set_eviction_policy(EvictionPolicy::AllKeysLfu, 0, 1);
        s.freeze_clock(T0);
        for i in 0..10 {
            s.put(format!("k{i}").as_bytes(), Kind::String, b"v", None)
                .unwrap();
        }
        // k3 read once, the others many times (factor 0: every access counts).
        for i in 0..10 {
            let reads = if i == 3 { 1 } else { 20 };
            for _ in 0..reads {
                s.get(format!("k{i}").as_bytes()).unwrap();
            }
        }
        assert_eq!(s.key_info(b"k3").unwrap().lfu_frequency, 6);
        assert_eq!(s.key_info(b"k0").unwrap().lfu_frequency, 25);
        assert_eq!(s.evict(10).unwrap().as_deref(), Some(&b"k3"[..]));
        // volatile-lfu: none has a TTL.
        s.set_eviction_policy(EvictionPolicy::VolatileLfu, 0, 1);
        assert_eq!(s.evict(10).unwrap(), None);
    }

    #[test]
    fn random_policies_and_noeviction() {
        let mut s = aged(EvictionPolicy::AllKeysRandom);
        let k = s.evict(5).unwrap().unwrap();
        assert!(!s.contains(&k));
        s.set_eviction_policy(EvictionPolicy::VolatileRandom, 10, 1);
        let mut gone = 0;
        while let Some(k) = s.evict(5).unwrap() {
            let n: u32 = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
            assert_eq!(n % 2, 1, "only keys with a TTL");
            gone += 1;
        }
        assert!(gone >= 4, "every key with a TTL went");
        assert!(s.len() >= 4);
        s.set_eviction_policy(EvictionPolicy::NoEviction, 10, 1);
        assert_eq!(s.evict(5).unwrap(), None);
    }

    #[test]
    fn collections_go_whole_and_their_parts_are_never_victims() {
        let mut s = store();
        s.set_eviction_policy(EvictionPolicy::AllKeysLru, 10, 1);
        for i in 0..200 {
            s.list_push(
                b"list",
                crate::ListEnd::Right,
                &[format!("item{i}").as_bytes()],
            )
            .unwrap();
        }
        assert_eq!(s.len(), 1);
        assert!(s.stats().tiers[0].objects > 1, "the list has parts");
        assert_eq!(s.evict(5).unwrap().as_deref(), Some(&b"list"[..]));
        assert_eq!(s.evict(5).unwrap(), None);
        assert!(s.is_empty());
        s.check_invariants().unwrap();
    }

    #[test]
    fn fill_counts_the_memory_tiers_without_a_log() {
        let mut s = store();
        let before = s.fill();
        assert!(before.capacity > 30 << 20 && before.used < 1 << 20);
        for i in 0..1000 {
            s.put(format!("k{i}").as_bytes(), Kind::String, &[7u8; 1000], None)
                .unwrap();
        }
        let full = s.fill();
        assert!(full.used > before.used + 1_000_000, "{full:?}");
        for i in 0..1000 {
            s.delete(format!("k{i}").as_bytes()).unwrap();
        }
        assert!(
            s.fill().used < full.used - 1_000_000,
            "deletes free the slots"
        );
    }
}
