//! The dependent pointer chase that measures load latency.
//!
//! The buffer is cut into 64-byte lines. Each line's first word holds the word index of the next
//! line to visit, and the visiting order is one random cycle through every line of the buffer
//! (Sattolo's algorithm draws it uniformly among all single cycles). Each load's address comes from
//! the previous load, so loads cannot overlap: time per step is the latency of one load.
//!
//! Why every line and a uniformly random successor:
//! - the footprint is the whole buffer, so with a buffer several times the last-level cache almost
//!   every load misses all caches (a chase that visits one line per page would only touch
//!   `buffer / page` lines, which may fit in a large LLC);
//! - consecutive loads land in different pages (probability `1 - 1/pages`), which defeats the
//!   next-line, adjacent-line (128-byte pair) and streaming prefetchers: none of them predicts a
//!   jump to a random page;
//! - with 2 MiB huge pages the TLB covers gigabytes, so the figure is the memory's latency rather
//!   than a page walk's; without them each load also pays a TLB miss, and the report says which.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Bytes per chased line.
pub const LINE: usize = 64;
/// u64 words per line.
pub const WORDS_PER_LINE: usize = LINE / 8;

/// A small, fast, well-mixed pseudo-random generator (xoshiro256**, seeded by SplitMix64).
/// Deterministic for a seed, so a chase layout can be reproduced.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform integer in `0..bound` (`bound > 0`), by Lemire's multiply-and-reject method.
    pub fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0);
        loop {
            let m = u128::from(self.next_u64()) * u128::from(bound);
            let low = m as u64;
            if low >= bound.wrapping_neg() % bound {
                return (m >> 64) as u64;
            }
        }
    }
}

/// A uniformly random cyclic permutation of `0..n` (Sattolo's algorithm): `perm[i]` is the
/// successor of `i`, and following successors from any element visits all `n` before returning.
pub fn sattolo(n: u32, rng: &mut Rng) -> Vec<u32> {
    let mut perm: Vec<u32> = (0..n).collect();
    for i in (1..n as usize).rev() {
        let j = rng.below(i as u64) as usize;
        perm.swap(i, j);
    }
    perm
}

/// Why a buffer cannot hold a chase.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChaseError {
    #[error("a pointer-chase buffer needs at least 2 lines of {LINE} bytes, got {0} bytes")]
    TooSmall(usize),
    #[error(
        "a pointer-chase buffer of {0} bytes has more than 2^32 lines; use a smaller --buffer"
    )]
    TooLarge(usize),
}

/// Lay a random single cycle through every line of `buf` (words: 8 per line) and return the word
/// index of the line to start from. Writes each line's first word only; the rest keep their value
/// (the buffer is touched by the caller beforehand so that its pages are placed).
pub fn build(buf: &mut [u64], seed: u64) -> Result<usize, ChaseError> {
    let lines = buf.len() / WORDS_PER_LINE;
    if lines < 2 {
        return Err(ChaseError::TooSmall(buf.len() * 8));
    }
    let lines32 = u32::try_from(lines).map_err(|_| ChaseError::TooLarge(buf.len() * 8))?;
    let mut rng = Rng::new(seed);
    let perm = sattolo(lines32, &mut rng);
    for (line, &next) in perm.iter().enumerate() {
        buf[line * WORDS_PER_LINE] = u64::from(next) * WORDS_PER_LINE as u64;
    }
    Ok(0)
}

/// Follow the chain for `steps` loads (a multiple of 16 is exact; others round up) from word
/// index `start`; returns where it stopped.
#[inline(never)]
pub fn walk(buf: &[u64], start: usize, steps: u64) -> usize {
    let mut i = start;
    for _ in 0..steps.div_ceil(16) {
        // Unrolled: the loop overhead must not add to the per-load time. Each index comes from the
        // previous load; the bounds check is off the dependency chain (predicted branch).
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
        i = buf[i] as usize;
    }
    black_box(i)
}

/// Loads per call of [`walk`] between clock reads: small enough to stop close to a deadline, large
/// enough that reading the clock (~20-50 ns) is noise.
pub const BATCH: u64 = 4096;

/// A chase run: loads done, wall-clock time, and the chasing thread's own CPU time.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    pub loads: u64,
    pub elapsed: Duration,
    /// Time the thread was on a CPU (`CLOCK_THREAD_CPUTIME_ID`), when the clock is available.
    pub cpu: Option<Duration>,
}

impl Run {
    /// Nanoseconds per load. Measured on the thread's CPU time when available: on a busy machine
    /// the scheduler may take the CPU away mid-run, and wall time would count that as latency.
    pub fn ns_per_load(&self) -> f64 {
        if self.loads == 0 {
            return f64::NAN;
        }
        self.cpu.unwrap_or(self.elapsed).as_secs_f64() * 1e9 / self.loads as f64
    }

    /// The share of the run the thread spent on a CPU (1.0 when unknown).
    pub fn on_cpu(&self) -> f64 {
        match self.cpu {
            Some(c) if !self.elapsed.is_zero() => {
                (c.as_secs_f64() / self.elapsed.as_secs_f64()).min(1.0)
            }
            _ => 1.0,
        }
    }
}

fn thread_cpu() -> Option<cpu_time::ThreadTime> {
    cpu_time::ThreadTime::try_now().ok()
}

/// Chase for at least `time` of wall-clock time (and at least one batch); `pos` is carried between
/// runs so that each run continues along the cycle rather than re-reading lines the last one left
/// in cache.
pub fn timed(buf: &[u64], pos: &mut usize, time: Duration) -> Run {
    let cpu0 = thread_cpu();
    let start = Instant::now();
    let mut loads = 0u64;
    loop {
        *pos = walk(buf, *pos, BATCH);
        loads += BATCH.div_ceil(16) * 16;
        let elapsed = start.elapsed();
        if elapsed >= time {
            let cpu = cpu0.and_then(|c| c.try_elapsed().ok());
            return Run {
                loads,
                elapsed,
                cpu,
            };
        }
    }
}

/// The median of `xs` (NaN-free), or NaN when empty.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sattolo_is_a_single_cycle() {
        for (n, seed) in [(2u32, 1u64), (3, 2), (10, 3), (1000, 4), (65_537, 5)] {
            let perm = sattolo(n, &mut Rng::new(seed));
            let mut seen = vec![false; n as usize];
            let mut i = 0usize;
            for _ in 0..n {
                assert!(
                    !seen[i],
                    "n={n}: element {i} visited twice before the cycle closed"
                );
                seen[i] = true;
                i = perm[i] as usize;
            }
            assert_eq!(
                i, 0,
                "n={n}: the walk must return to its start after n steps"
            );
            assert!(seen.iter().all(|&s| s));
            // A single n-cycle has no fixed points.
            assert!(perm.iter().enumerate().all(|(i, &p)| p as usize != i));
        }
    }

    #[test]
    fn sattolo_is_not_sequential() {
        let n = 1 << 16;
        let perm = sattolo(n, &mut Rng::new(42));
        let adjacent = perm
            .iter()
            .enumerate()
            .filter(|&(i, &p)| (p as i64 - i as i64).abs() <= 1)
            .count();
        // A random successor is a neighbour with probability ~2/n: a handful at most.
        assert!(adjacent < 10, "{adjacent} successors are neighbours");
    }

    #[test]
    fn below_is_in_range_and_spread() {
        let mut rng = Rng::new(7);
        let mut counts = [0u32; 6];
        for _ in 0..60_000 {
            let x = rng.below(6);
            counts[x as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn built_chain_visits_every_line() {
        let mut buf = vec![0u64; 8 * 5000];
        let start = build(&mut buf, 9).unwrap();
        let mut seen = vec![false; 5000];
        let mut i = start;
        for _ in 0..5000 {
            assert_eq!(i % WORDS_PER_LINE, 0);
            assert!(!seen[i / WORDS_PER_LINE]);
            seen[i / WORDS_PER_LINE] = true;
            i = buf[i] as usize;
        }
        assert_eq!(i, start);
        // walk() follows the same chain: 5000 * 16 steps come back to the start.
        assert_eq!(walk(&buf, start, 5000 * 16), start);
    }

    #[test]
    fn tiny_buffers_are_refused() {
        let mut buf = vec![0u64; 8];
        assert!(matches!(build(&mut buf, 1), Err(ChaseError::TooSmall(64))));
    }

    #[test]
    fn timed_runs_count_loads() {
        let mut buf = vec![0u64; 8 * 1024];
        let mut pos = build(&mut buf, 3).unwrap();
        let run = timed(&buf, &mut pos, Duration::from_millis(5));
        assert!(run.loads >= BATCH);
        assert!(run.ns_per_load() > 0.0);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
