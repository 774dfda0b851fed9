//! The traffic kernels: wide vector loads and stores, chosen at run time for the CPU, and how the
//! bytes they move are counted.
//!
//! Loads and regular stores are plain safe Rust compiled several times with different target
//! features (`multiversion`); the widest version the CPU supports runs (AVX-512, AVX2, SSE2 on
//! x86-64). Non-temporal stores come from `cxltier_sys::stream`, which wraps the intrinsics.
//!
//! ## The mix kernel
//! A thread works on its own slice, cut into a read region and a write region in the proportion of
//! the mix (3:1 gives three quarters to reads), each walked sequentially and wrapping at its end,
//! the way MLC's traffic generators work. One *unit* of a mix is `r` lines read then `w` lines
//! written (the written lines are derived from the read ones, like STREAM's kernels); units are
//! fused line by line rather than in large blocks, which keeps the read and write streams in
//! flight together. Each region is walked as two interleaved streams (its two halves), and every
//! line read is prefetched [`PREFETCH_LINES`] lines ahead in software: together these keep enough
//! misses in flight to reach the memory's bandwidth with few threads (on the 2-core development VM,
//! read-only bandwidth rose from 22 to 43 GB/s against a single stream without prefetch). The
//! written lines are never read by the kernel, so a regular store to a line that is not in the cache
//! makes the core first read it (read-for-ownership, RFO), then write it back when it is evicted.
//!
//! ## Counting bytes
//! Per line requested by the mix, [`Accounting`] gives:
//! - **requested bytes**: what the program asked for: 64 B per line read plus 64 B per line written;
//! - **memory traffic**: what the memory must move: reads + writes + one RFO read per line written
//!   with a regular store (none for a non-temporal store).
//!
//! A 1:1 mix with regular stores thus moves 3 lines per 2 requested (read, RFO, write-back); with
//! non-temporal stores 2 per 2. Some CPUs (Intel since Ice Lake-SP, "SpecI2M") can skip the RFO for
//! full-line writes, so for regular stores the traffic figure is an upper bound and the requested
//! figure a lower one; for read-only and non-temporal mixes they agree.

use cxltier_profile::Mix;
use cxltier_sys::stream::{line_stores, LineStore, LineStores, RegularStores};
use multiversion::multiversion;

/// Bytes per cache line.
pub const LINE: usize = 64;
/// u64 words per cache line.
pub const WORDS: usize = LINE / 8;

/// Sum (xor) of every word of `src`: forces every line of `src` to be loaded.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512bw+avx2+avx+sse4.2",
    "x86_64+avx2+avx+sse4.2",
    "x86_64+sse4.2",
    "aarch64+neon"
))]
pub fn read(src: &[u64]) -> u64 {
    // Four independent 8-lane accumulators: enough loads in flight per cycle that the xor chains
    // never limit throughput, and exactly one 64-byte vector each on AVX-512.
    let mut acc = [[0u64; 8]; 4];
    let mut blocks = src.chunks_exact(32);
    for b in &mut blocks {
        for (k, a) in acc.iter_mut().enumerate() {
            for (l, x) in a.iter_mut().enumerate() {
                *x ^= b[k * 8 + l];
            }
        }
    }
    let mut r = 0u64;
    for x in blocks.remainder() {
        r ^= *x;
    }
    for a in acc {
        for x in a {
            r ^= x;
        }
    }
    r
}

/// Regular (cached) stores: `dst[i] = seed + i`. The value changes with `i` so the loop is never
/// turned into `memset` (whose large-size paths may use non-temporal or RFO-free string stores).
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512bw+avx2+avx+sse4.2",
    "x86_64+avx2+avx+sse4.2",
    "x86_64+sse4.2",
    "aarch64+neon"
))]
pub fn write(dst: &mut [u64], seed: u64) {
    for (i, d) in dst.iter_mut().enumerate() {
        *d = seed.wrapping_add(i as u64);
    }
}

/// Which vector width the load/store kernels run with on this CPU: `avx512`, `avx2`, `sse4.2`,
/// `neon` or `scalar` (mirrors the `multiversion` targets above, checked in the same order).
pub fn vector_isa() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512vl") && has!("avx512bw") && has!("avx2") {
            return "avx512";
        }
        if has!("avx2") {
            return "avx2";
        }
        if has!("sse4.2") {
            return "sse4.2";
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            return "neon";
        }
    }
    "scalar"
}

/// How many lines a mix reads and writes per unit, and how they are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub reads: u64,
    pub writes: u64,
    pub non_temporal: bool,
}

impl Shape {
    pub fn of(mix: Mix) -> Shape {
        Shape {
            reads: u64::from(mix.reads()),
            writes: u64::from(mix.writes()),
            non_temporal: mix.is_non_temporal(),
        }
    }

    /// Lines per unit (reads + writes).
    pub fn lines(&self) -> u64 {
        self.reads + self.writes
    }
}

/// Bytes counted per unit of a mix: `reads` lines read and `writes` lines written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Accounting {
    /// Bytes the program asked to read.
    pub requested_read: u64,
    /// Bytes the program asked to write.
    pub requested_write: u64,
    /// Bytes read from memory, RFO reads included.
    pub traffic_read: u64,
    /// Bytes written to memory.
    pub traffic_write: u64,
}

impl Accounting {
    pub fn per_unit(shape: Shape) -> Accounting {
        let line = LINE as u64;
        let rfo = if shape.non_temporal { 0 } else { shape.writes };
        Accounting {
            requested_read: shape.reads * line,
            requested_write: shape.writes * line,
            traffic_read: (shape.reads + rfo) * line,
            traffic_write: shape.writes * line,
        }
    }

    pub fn requested(&self) -> u64 {
        self.requested_read + self.requested_write
    }

    pub fn traffic(&self) -> u64 {
        self.traffic_read + self.traffic_write
    }

    /// Memory traffic per requested byte: 1 for read-only and non-temporal mixes, `1 + w/(r+w)`
    /// with regular stores (1.5 for 1:1).
    pub fn traffic_ratio(&self) -> f64 {
        self.traffic() as f64 / self.requested() as f64
    }
}

/// Units of the mix per full-speed step, per stream.
pub const STEP_UNITS: usize = 32;

/// Interleaved streams per region.
pub const STREAMS: usize = 2;

/// How far ahead of each load its line is prefetched, in lines of the same stream (2 KiB).
pub const PREFETCH_LINES: usize = 32;

/// Do units `u0 .. u0 + n` of both streams: for each unit read `r` lines (each prefetched
/// [`PREFETCH_LINES`] ahead) and write `w` lines with `stores`. `per` is units per stream.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512bw+avx2+avx+sse4.2",
    "x86_64+avx2+avx+sse4.2",
    "x86_64+sse4.2",
    "aarch64+neon"
))]
#[allow(clippy::too_many_arguments)]
fn fused<S: LineStore>(
    rd: &[u64],
    wr: &mut [u64],
    r: usize,
    w: usize,
    stores: S,
    per: usize,
    u0: usize,
    n: usize,
    seed: u64,
) -> u64 {
    let mut acc = [0u64; 8];
    for u in u0..u0 + n {
        for s in 0..STREAMS {
            let unit = s * per + u;
            let base = unit * r * WORDS;
            let mut v = [seed; 8];
            for k in 0..r {
                let at = base + k * WORDS;
                cxltier_sys::stream::prefetch(rd, at + PREFETCH_LINES * WORDS);
                let line: &[u64; 8] = rd[at..at + WORDS].try_into().expect("one line");
                for (x, y) in v.iter_mut().zip(line) {
                    *x ^= *y;
                }
            }
            let wbase = unit * w * WORDS;
            for k in 0..w {
                let at = wbase + k * WORDS;
                let dst: &mut [u64; 8] = (&mut wr[at..at + WORDS]).try_into().expect("one line");
                // `v` goes out whole: changing one word of it just before a 64-byte store would defeat
                // store-to-load forwarding and halve non-temporal bandwidth.
                stores.store(dst, &v);
            }
            for (a, x) in acc.iter_mut().zip(&v) {
                *a ^= *x;
            }
        }
    }
    acc.iter().fold(0, |a, b| a ^ b)
}

/// One thread's slice laid out for a mix: a read region and a write region in the mix's ratio, each
/// walked as [`STREAMS`] interleaved streams, and a cursor (in units per stream) that wraps at
/// their end.
#[derive(Debug)]
pub struct Streams<'a> {
    read: &'a [u64],
    write: &'a mut [u64],
    shape: Shape,
    /// Units per stream (a multiple of [`STEP_UNITS`]).
    per: usize,
    at: usize,
    seed: u64,
}

impl<'a> Streams<'a> {
    /// Words a slice needs for one full step of `shape`.
    pub fn min_words(shape: Shape) -> usize {
        shape.lines() as usize * WORDS * STEP_UNITS * STREAMS
    }

    /// Lay out `slice` for `shape`. Returns `None` when the slice holds less than one full step.
    pub fn new(slice: &'a mut [u64], shape: Shape) -> Option<Streams<'a>> {
        let unit_words = shape.lines() as usize * WORDS;
        if unit_words == 0 {
            return None;
        }
        let per = slice.len() / unit_words / STREAMS / STEP_UNITS * STEP_UNITS;
        if per == 0 {
            return None;
        }
        let units = per * STREAMS;
        let read_words = units * shape.reads as usize * WORDS;
        let write_words = units * shape.writes as usize * WORDS;
        let (read, rest) = slice.split_at_mut(read_words);
        let write = &mut rest[..write_words];
        Some(Streams {
            read,
            write,
            shape,
            per,
            at: 0,
            seed: 1,
        })
    }

    /// Do `n` units of the mix in each stream (`n` must divide [`STEP_UNITS`]): `STREAMS * n` units
    /// in all. Returns a value derived from the loads (to keep them alive).
    #[inline]
    pub fn step(&mut self, n: usize) -> u64 {
        debug_assert!(n > 0 && STEP_UNITS % n == 0);
        if self.at + n > self.per {
            // Steps of different sizes (a throttled generator speeding up) need not land on the end.
            self.at = 0;
        }
        let r = self.shape.reads as usize;
        let w = self.shape.writes as usize;
        let nt = self.shape.non_temporal;
        self.seed = self.seed.wrapping_add(1);
        let (rd, wr, per, at, seed) = (self.read, &mut *self.write, self.per, self.at, self.seed);
        // The store instruction is chosen here, once per step; the kernel is compiled for each.
        let sink = if !nt {
            fused(rd, wr, r, w, RegularStores, per, at, n, seed)
        } else {
            match line_stores() {
                LineStores::Avx512(s) => fused(rd, wr, r, w, s, per, at, n, seed),
                LineStores::Avx(s) => fused(rd, wr, r, w, s, per, at, n, seed),
                LineStores::Sse2(s) => fused(rd, wr, r, w, s, per, at, n, seed),
                LineStores::Regular(s) => fused(rd, wr, r, w, s, per, at, n, seed),
            }
        };
        self.at += n;
        if self.at >= self.per {
            self.at = 0;
        }
        sink
    }

    /// Units of the mix one call of `step(n)` does.
    pub fn units_per_step(n: usize) -> u64 {
        (n * STREAMS) as u64
    }

    /// Make the non-temporal stores so far globally visible (call once when done).
    pub fn finish(&self) {
        if self.shape.non_temporal {
            cxltier_sys::stream::store_fence();
        }
    }
}

/// Burn roughly `n` short dependent integer operations (a few cycles each): the injected delay of
/// a throttled traffic generator. Not a sleep: the thread keeps its CPU, as MLC's delay loops do.
#[inline(never)]
pub fn spin(n: u64) -> u64 {
    let mut x = 1u64;
    for _ in 0..n {
        x = std::hint::black_box(x.wrapping_mul(0x5851_F42D_4C95_7F2D).wrapping_add(1));
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(s: &str) -> Mix {
        s.parse().unwrap()
    }

    #[test]
    fn bytes_are_counted_with_rfo() {
        let r = Accounting::per_unit(Shape::of(mix("R")));
        assert_eq!((r.requested(), r.traffic()), (64, 64));
        // 1:1 with regular stores: 2 lines requested, 3 moved (read, RFO, write-back).
        let c = Accounting::per_unit(Shape::of(mix("1:1")));
        assert_eq!((c.requested(), c.traffic()), (128, 192));
        assert_eq!(c.traffic_read, 128);
        assert!((c.traffic_ratio() - 1.5).abs() < 1e-12);
        // 3:1: 4 requested, 5 moved.
        let t = Accounting::per_unit(Shape::of(mix("3:1")));
        assert_eq!((t.requested(), t.traffic()), (256, 320));
        // 2:1 non-temporal: no RFO.
        let n = Accounting::per_unit(Shape::of(mix("2:1nt")));
        assert_eq!((n.requested(), n.traffic()), (192, 192));
        assert_eq!(n.traffic_write, 64);
    }

    #[test]
    fn kernels_compute_what_they_say() {
        let v: Vec<u64> = (0..1000).collect();
        let expect = v.iter().fold(0, |a, b| a ^ b);
        assert_eq!(read(&v), expect);
        let mut d = vec![0u64; 77];
        write(&mut d, 10);
        assert!(d.iter().enumerate().all(|(i, &x)| x == 10 + i as u64));
        assert!(!vector_isa().is_empty());
    }

    #[test]
    fn streams_split_in_the_mix_ratio_and_wrap() {
        let mut buf = vec![0u64; 4 * WORDS * STEP_UNITS * STREAMS * 3 + 5];
        let mut s = Streams::new(&mut buf, Shape::of(mix("3:1"))).unwrap();
        assert_eq!(s.per, 3 * STEP_UNITS);
        assert_eq!(s.read.len(), 3 * s.write.len());
        for _ in 0..7 {
            s.step(STEP_UNITS);
        }
        assert_eq!(s.at, STEP_UNITS);
        s.step(1);
        assert_eq!(s.at, STEP_UNITS + 1);
        // Every written word was set (the kernel writes read data plus a non-zero seed).
        for _ in 0..2 * STEP_UNITS {
            s.step(1);
        }
        assert!(s.write.iter().all(|&x| x != 0));
        let mut small = vec![0u64; 8 * WORDS];
        assert!(Streams::new(&mut small, Shape::of(mix("1:1"))).is_none());
        assert_eq!(
            Streams::units_per_step(STEP_UNITS),
            (STEP_UNITS * STREAMS) as u64
        );
    }

    #[test]
    fn non_temporal_streams_write() {
        let mut buf = vec![0u64; 3 * WORDS * STEP_UNITS * STREAMS];
        let mut s = Streams::new(&mut buf, Shape::of(mix("2:1nt"))).unwrap();
        for _ in 0..STEP_UNITS {
            s.step(1);
        }
        s.finish();
        assert!(s.write.iter().all(|&x| x != 0));
    }

    #[test]
    fn spin_spins() {
        assert_ne!(spin(10), spin(11));
        assert_eq!(spin(0), 1);
    }
}
