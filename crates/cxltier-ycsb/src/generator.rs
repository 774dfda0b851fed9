//! YCSB 0.17.0's number generators, reimplemented to the same arithmetic (`site.ycsb.generator`):
//! the tests compare them with YCSB's own classes.

use rand::Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// YCSB's `Utils.FNV_OFFSET_BASIS_64` and `FNV_PRIME_64`.
const FNV_OFFSET_BASIS_64: i64 = 0xCBF2_9CE4_8422_2325_u64 as i64;
const FNV_PRIME_64: i64 = 1_099_511_628_211;

/// `Utils.fnvhash64`: FNV-1a over the 8 bytes of `val`, low byte first, with Java's signed
/// arithmetic and its `Math.abs` at the end (which leaves `Long.MIN_VALUE` negative).
pub fn fnvhash64(val: i64) -> i64 {
    let mut val = val;
    let mut hash = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        let octet = val & 0xff;
        val >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    hash.wrapping_abs()
}

/// `CoreWorkload.buildKeyName` with `orderedinserts=false` and `zeropadding`.
pub fn key_name(keynum: i64, zero_padding: usize) -> String {
    let value = fnvhash64(keynum).to_string();
    let fill = zero_padding.saturating_sub(value.len());
    let mut key = String::with_capacity(4 + fill + value.len());
    key.push_str("user");
    key.extend(std::iter::repeat_n('0', fill));
    key.push_str(&value);
    key
}

/// Java's `String.hashCode()` (the score YCSB's Redis binding indexes keys by).
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// `ZipfianGenerator.ZIPFIAN_CONSTANT`.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// `ScrambledZipfianGenerator.ITEM_COUNT` and `ZETAN` (zeta of ITEM_COUNT at 0.99, precomputed).
pub const SCRAMBLED_ITEM_COUNT: i64 = 10_000_000_000;
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// `ZipfianGenerator.zeta(st, n, theta, initialsum)`: sum of 1/(i+1)^theta for i in st..n.
pub fn zeta(st: i64, n: i64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in st..n {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// `ZipfianGenerator`: values in [base, base + items) with P(i) ∝ 1/(i+1)^theta, drawn with the
/// algorithm of Gray et al. (SIGMOD 1994) exactly as YCSB draws them.
#[derive(Debug, Clone)]
pub struct Zipfian {
    items: i64,
    base: i64,
    theta: f64,
    zeta2theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: i64,
}

impl Zipfian {
    /// `new ZipfianGenerator(min, max, constant, zetan)`.
    pub fn with_zetan(min: i64, max: i64, theta: f64, zetan: f64) -> Zipfian {
        let items = max - min + 1;
        let zeta2theta = zeta(0, 2, theta, 0.0);
        Zipfian {
            items,
            base: min,
            theta,
            zeta2theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2theta / zetan),
            count_for_zeta: items,
        }
    }

    /// `new ZipfianGenerator(min, max)` (zeta computed; slow for huge ranges).
    pub fn new(min: i64, max: i64) -> Zipfian {
        let items = max - min + 1;
        Self::with_zetan(
            min,
            max,
            ZIPFIAN_CONSTANT,
            zeta(0, items, ZIPFIAN_CONSTANT, 0.0),
        )
    }

    /// `nextLong(itemcount)`, with YCSB's incremental zeta when the item count grows.
    pub fn next_with(&mut self, rng: &mut impl Rng, itemcount: i64) -> i64 {
        if itemcount > self.count_for_zeta {
            self.zetan = zeta(self.count_for_zeta, itemcount, self.theta, self.zetan);
            self.eta = (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta))
                / (1.0 - self.zeta2theta / self.zetan);
            self.count_for_zeta = itemcount;
        }
        let u: f64 = rng.random();
        self.value_at(u, itemcount)
    }

    /// The value the uniform draw `u` maps to (the deterministic part, for tests).
    pub fn value_at(&self, u: f64, itemcount: i64) -> i64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        self.base + (itemcount as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as i64
    }

    pub fn next(&mut self, rng: &mut impl Rng) -> i64 {
        self.next_with(rng, self.items)
    }
}

/// `ScrambledZipfianGenerator(min, max)`: zipfian popularity over 10^10 ranks, hashed onto the
/// items so that the popular ones are spread over the key space.
#[derive(Debug, Clone)]
pub struct ScrambledZipfian {
    min: i64,
    itemcount: i64,
    gen: Zipfian,
}

impl ScrambledZipfian {
    pub fn new(min: i64, max: i64) -> ScrambledZipfian {
        ScrambledZipfian {
            min,
            itemcount: max - min + 1,
            gen: Zipfian::with_zetan(0, SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN),
        }
    }

    pub fn scramble(&self, rank: i64) -> i64 {
        self.min + fnvhash64(rank) % self.itemcount
    }

    pub fn next(&mut self, rng: &mut impl Rng) -> i64 {
        let rank = self.gen.next(rng);
        self.scramble(rank)
    }
}

/// `UniformLongGenerator(lb, ub)`.
#[derive(Debug, Clone, Copy)]
pub struct Uniform {
    lb: i64,
    interval: i64,
}

impl Uniform {
    pub fn new(lb: i64, ub: i64) -> Uniform {
        Uniform {
            lb,
            interval: ub - lb + 1,
        }
    }
    pub fn next(&self, rng: &mut impl Rng) -> i64 {
        (rng.random::<i64>().wrapping_abs() % self.interval).abs() + self.lb
    }
}

/// `HotspotIntegerGenerator(lb, ub, hotsetfraction, hotopnfraction)`.
#[derive(Debug, Clone, Copy)]
pub struct Hotspot {
    lb: i64,
    hot_interval: i64,
    cold_interval: i64,
    hot_opn_fraction: f64,
}

impl Hotspot {
    pub fn new(lb: i64, ub: i64, hot_set_fraction: f64, hot_opn_fraction: f64) -> Hotspot {
        let interval = ub - lb + 1;
        let hot_interval = (interval as f64 * hot_set_fraction) as i64;
        Hotspot {
            lb,
            hot_interval,
            cold_interval: interval - hot_interval,
            hot_opn_fraction,
        }
    }
    pub fn next(&self, rng: &mut impl Rng) -> i64 {
        if rng.random::<f64>() < self.hot_opn_fraction {
            self.lb + (rng.random::<i64>().wrapping_abs() % self.hot_interval).abs()
        } else {
            self.lb
                + self.hot_interval
                + (rng.random::<i64>().wrapping_abs() % self.cold_interval).abs()
        }
    }
}

/// `AcknowledgedCounterGenerator`: hands out insert key numbers; `last_value` is the highest
/// number below which every insert has been acknowledged (so readers never ask for a key that
/// is still being written).
#[derive(Debug)]
pub struct AckCounter {
    next: AtomicU64,
    limit: AtomicU64,
    pending: Mutex<std::collections::BTreeSet<u64>>,
}

impl AckCounter {
    pub fn new(start: u64) -> AckCounter {
        AckCounter {
            next: AtomicU64::new(start),
            limit: AtomicU64::new(start.wrapping_sub(1)),
            pending: Mutex::new(Default::default()),
        }
    }
    pub fn next_value(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }
    pub fn last_value(&self) -> i64 {
        self.limit.load(Ordering::Acquire) as i64
    }
    pub fn acknowledge(&self, value: u64) {
        let mut pending = self.pending.lock().expect("ack lock");
        pending.insert(value);
        let mut limit = self.limit.load(Ordering::Acquire);
        while pending.remove(&limit.wrapping_add(1)) {
            limit = limit.wrapping_add(1);
        }
        self.limit.store(limit, Ordering::Release);
    }
}

/// `SkewedLatestGenerator`: recent inserts are the most popular.
#[derive(Debug, Clone)]
pub struct SkewedLatest {
    zipfian: Zipfian,
}

impl SkewedLatest {
    pub fn new(last_value: i64) -> SkewedLatest {
        SkewedLatest {
            zipfian: Zipfian::new(0, last_value.max(1) - 1),
        }
    }
    pub fn next(&mut self, rng: &mut impl Rng, last_value: i64) -> i64 {
        last_value - self.zipfian.next_with(rng, last_value)
    }
}

/// `DiscreteGenerator`: picks a value with probability proportional to its weight, walking the
/// values in the order they were added, as YCSB does.
#[derive(Debug, Clone)]
pub struct Discrete<T: Copy> {
    values: Vec<(f64, T)>,
    sum: f64,
}

impl<T: Copy> Discrete<T> {
    pub fn new() -> Self {
        Discrete {
            values: Vec::new(),
            sum: 0.0,
        }
    }
    pub fn add(&mut self, weight: f64, value: T) {
        if weight > 0.0 {
            self.values.push((weight, value));
            self.sum += weight;
        }
    }
    pub fn next(&self, rng: &mut impl Rng) -> T {
        let mut val: f64 = rng.random();
        for &(w, v) in &self.values {
            let pw = w / self.sum;
            if val < pw {
                return v;
            }
            val -= pw;
        }
        self.values.last().expect("at least one weighted value").1
    }
}

impl<T: Copy> Default for Discrete<T> {
    fn default() -> Self {
        Self::new()
    }
}
