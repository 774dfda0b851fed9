//! Redis's eviction policies and the access statistics they choose by, kept per key in the 24
//! bits of the index entry that hold its access clock (as Redis keeps them in an object's 24
//! `lru` bits): under an LRU (or any non-LFU) policy the clock of seconds of the last access;
//! under an LFU policy a 16-bit time of the last decrement, in minutes, above an 8-bit
//! logarithmic access counter. Switching between the two reinterprets the bits, as in Redis
//! ("LRU and LFU data will take some time to adjust"). Imports nothing of the crate but the
//! index's clock.

use crate::index::{access_clock, idle_seconds, CLOCK_MAX};

/// Redis's `maxmemory-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EvictionPolicy {
    #[default]
    NoEviction,
    AllKeysLru,
    AllKeysLfu,
    AllKeysRandom,
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
}

impl EvictionPolicy {
    /// Every policy, in Redis's order.
    pub const ALL: [EvictionPolicy; 8] = [
        EvictionPolicy::VolatileLru,
        EvictionPolicy::VolatileLfu,
        EvictionPolicy::VolatileRandom,
        EvictionPolicy::VolatileTtl,
        EvictionPolicy::AllKeysLru,
        EvictionPolicy::AllKeysLfu,
        EvictionPolicy::AllKeysRandom,
        EvictionPolicy::NoEviction,
    ];

    /// Redis's name of the policy.
    pub fn name(self) -> &'static str {
        match self {
            EvictionPolicy::NoEviction => "noeviction",
            EvictionPolicy::AllKeysLru => "allkeys-lru",
            EvictionPolicy::AllKeysLfu => "allkeys-lfu",
            EvictionPolicy::AllKeysRandom => "allkeys-random",
            EvictionPolicy::VolatileLru => "volatile-lru",
            EvictionPolicy::VolatileLfu => "volatile-lfu",
            EvictionPolicy::VolatileRandom => "volatile-random",
            EvictionPolicy::VolatileTtl => "volatile-ttl",
        }
    }

    /// The policy Redis calls `name` (any case).
    pub fn parse(name: &str) -> Option<EvictionPolicy> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// Whether the policy keeps LFU counters in the access bits (`allkeys-lfu`, `volatile-lfu`).
    pub fn is_lfu(self) -> bool {
        matches!(
            self,
            EvictionPolicy::AllKeysLfu | EvictionPolicy::VolatileLfu
        )
    }

    /// Whether only keys with a TTL may be evicted.
    pub fn volatile_only(self) -> bool {
        matches!(
            self,
            EvictionPolicy::VolatileLru
                | EvictionPolicy::VolatileLfu
                | EvictionPolicy::VolatileRandom
                | EvictionPolicy::VolatileTtl
        )
    }
}

/// Redis's `LFU_INIT_VAL`: a new key's counter, so that it is not evicted before it had a
/// chance to be read again.
pub(crate) const LFU_INIT_VAL: u8 = 5;

/// Redis's `LFUGetTimeInMinutes`: minutes since the epoch, 16 bits.
fn lfu_minutes(now_ms: u64) -> u32 {
    ((now_ms / 60_000) & 0xffff) as u32
}

/// How keys' accesses are recorded: the policy's kind and Redis's `lfu-log-factor` and
/// `lfu-decay-time`, and the random numbers the LFU counter's increments draw.
#[derive(Debug, Clone)]
pub(crate) struct AccessTracker {
    pub(crate) lfu: bool,
    pub(crate) log_factor: u32,
    pub(crate) decay_minutes: u32,
    rng: u64,
}

impl Default for AccessTracker {
    fn default() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        AccessTracker {
            lfu: false,
            log_factor: 10,
            decay_minutes: 1,
            rng: seed | 1,
        }
    }
}

impl AccessTracker {
    /// The next random number in [0, 1) (xorshift64*).
    pub(crate) fn random(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Seed the random numbers (tests: a fixed seed makes LFU increments repeatable).
    pub(crate) fn seed(&mut self, seed: u64) {
        self.rng = seed | 1;
    }

    /// The access bits of a key written for the first time at `now_ms`: the clock, or the
    /// initial counter (Redis's `createObject`).
    pub(crate) fn fresh(&self, now_ms: u64) -> u32 {
        if self.lfu {
            lfu_minutes(now_ms) << 8 | u32::from(LFU_INIT_VAL)
        } else {
            access_clock(now_ms)
        }
    }

    /// The access bits RESTORE's IDLETIME or FREQ give a key at `now_ms` (Redis's
    /// `objectSetLRUOrLFU`): under LFU the counter `freq` now, else the clock `idle_seconds`
    /// back; `None` when the policy's statistic is not given.
    pub(crate) fn restored(
        &self,
        idle_seconds: Option<u64>,
        freq: Option<u8>,
        now_ms: u64,
    ) -> Option<u32> {
        if self.lfu {
            return freq.map(|f| lfu_minutes(now_ms) << 8 | u32::from(f));
        }
        let idle = idle_seconds? % (u64::from(CLOCK_MAX) + 1);
        let now = u64::from(access_clock(now_ms));
        Some(((now + u64::from(CLOCK_MAX) + 1 - idle) % (u64::from(CLOCK_MAX) + 1)) as u32)
    }

    /// The access bits after an access at `now_ms` to a key whose bits were `bits` (Redis's
    /// `updateLFU`: the counter decays by the periods elapsed, then grows logarithmically).
    pub(crate) fn accessed(&mut self, bits: u32, now_ms: u64) -> u32 {
        if !self.lfu {
            return access_clock(now_ms);
        }
        let counter = self.decayed(bits, now_ms);
        let counter = self.log_incr(counter);
        lfu_minutes(now_ms) << 8 | u32::from(counter)
    }

    /// Redis's `LFULogIncr`: the counter grows with probability 1 / ((counter - 5) * factor + 1).
    fn log_incr(&mut self, counter: u8) -> u8 {
        if counter == u8::MAX {
            return counter;
        }
        let base = f64::from(counter.saturating_sub(LFU_INIT_VAL));
        let p = 1.0 / (base * f64::from(self.log_factor) + 1.0);
        if self.random() < p {
            counter + 1
        } else {
            counter
        }
    }

    /// Redis's `LFUDecrAndReturn`: the counter less one per `lfu-decay-time` minutes since its
    /// last decrement (`OBJECT FREQ`).
    pub(crate) fn decayed(&self, bits: u32, now_ms: u64) -> u8 {
        let ldt = bits >> 8 & 0xffff;
        let counter = (bits & 0xff) as u8;
        let now = lfu_minutes(now_ms);
        let elapsed = if now >= ldt {
            now - ldt
        } else {
            0xffff - ldt + now
        };
        let periods = elapsed.checked_div(self.decay_minutes).unwrap_or(0);
        counter.saturating_sub(periods.min(255) as u8)
    }

    /// How good a victim a key is under `policy` (higher goes first), as Redis's eviction pool
    /// ranks them: idle milliseconds, 255 less the decayed counter, or the nearer expiry.
    pub(crate) fn score(
        &self,
        policy: EvictionPolicy,
        bits: u32,
        expires: u64,
        now_ms: u64,
    ) -> u64 {
        match policy {
            EvictionPolicy::VolatileTtl => u64::MAX - expires,
            p if p.is_lfu() => 255 - u64::from(self.decayed(bits, now_ms)),
            _ => idle_seconds(bits, access_clock(now_ms)) * 1000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_have_redis_names() {
        for p in EvictionPolicy::ALL {
            assert_eq!(EvictionPolicy::parse(p.name()), Some(p));
        }
        assert_eq!(
            EvictionPolicy::parse("ALLKEYS-LRU"),
            Some(EvictionPolicy::AllKeysLru)
        );
        assert_eq!(EvictionPolicy::parse("lru"), None);
        assert!(
            EvictionPolicy::VolatileLfu.is_lfu() && EvictionPolicy::VolatileLfu.volatile_only()
        );
        assert!(!EvictionPolicy::AllKeysRandom.volatile_only());
    }

    #[test]
    fn the_lfu_counter_grows_logarithmically_and_decays_per_period() {
        let mut t = AccessTracker {
            lfu: true,
            ..AccessTracker::default()
        };
        t.seed(7);
        let now = 1_700_000_000_000;
        let mut bits = t.fresh(now);
        assert_eq!(t.decayed(bits, now), LFU_INIT_VAL);
        for _ in 0..100 {
            bits = t.accessed(bits, now);
        }
        let after_100 = t.decayed(bits, now);
        // With factor 10, a hundred hits take the counter to about 10 (Redis's table: 100 hits
        // give 10 at factor 10).
        assert!((8..=14).contains(&after_100), "{after_100}");
        for _ in 0..10_000 {
            bits = t.accessed(bits, now);
        }
        assert!(t.decayed(bits, now) > after_100 + 5);
        // One minute later (decay time 1): one less; 300 minutes later: zero.
        let c = t.decayed(bits, now);
        assert_eq!(t.decayed(bits, now + 60_000), c - 1);
        assert_eq!(t.decayed(bits, now + 300 * 60_000), 0);
        t.decay_minutes = 0;
        assert_eq!(
            t.decayed(bits, now + 300 * 60_000),
            c,
            "decay time 0: never"
        );
        // The counter saturates at 255.
        t.log_factor = 0;
        for _ in 0..300 {
            bits = t.accessed(bits, now);
        }
        assert_eq!(t.decayed(bits, now), 255);
    }

    #[test]
    fn scores_rank_idle_rare_and_expiring_keys_first() {
        let mut t = AccessTracker::default();
        let now = 1_700_000_000_000;
        let old = t.fresh(now - 50_000);
        let new = t.fresh(now);
        let lru = EvictionPolicy::AllKeysLru;
        assert_eq!(t.score(lru, old, 0, now), 50_000);
        assert!(t.score(lru, old, 0, now) > t.score(lru, new, 0, now));
        let ttl = EvictionPolicy::VolatileTtl;
        assert!(t.score(ttl, 0, now + 10, now) > t.score(ttl, 0, now + 20, now));
        t.lfu = true;
        let rare = t.fresh(now);
        let mut hot = rare;
        t.log_factor = 0;
        for _ in 0..10 {
            hot = t.accessed(hot, now);
        }
        let lfu = EvictionPolicy::AllKeysLfu;
        assert!(t.score(lfu, rare, 0, now) > t.score(lfu, hot, 0, now));
    }
}
