//! Measuring the kernels against what the machine can do: the fused multiply-add throughput
//! (a tight loop of independent FMA chains) and the memory bandwidth (a streaming read and
//! write of the state's array), both in the same run, so that each k-qubit kernel's time per
//! amplitude is set against the bound that binds it on this CPU now. The same per-k costs,
//! measured on a state that stays in cache, choose the fusion width ([`fusion_costs`]).

use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;

use crate::gates::{self, Matrix};
use crate::kernel::{self, multiversioned, Amp, Prepared, Real};
use crate::Result;

/// Independent FMA chains in the throughput loop: two FMA units with a latency of four cycles
/// need eight in flight; twelve leave room.
const CHAINS: usize = 12;
/// Reals per chain: one 512-bit vector of f32 (two 256-bit ones).
const CHAIN_WIDTH: usize = 16;

multiversioned! {
    /// `iterations` rounds of [`CHAINS`] x [`CHAIN_WIDTH`] fused multiply-adds at f32; returns a
    /// value that depends on all of them (so none is optimised away).
    fn fma_loop_f32(iterations: usize, scale: f32, add: f32) -> f32 {
        fma_loop::<f32>(iterations, scale, add)
    }

    /// As [`fma_loop_f32`], at f64.
    fn fma_loop_f64(iterations: usize, scale: f64, add: f64) -> f64 {
        fma_loop::<f64>(iterations, scale, add)
    }
}

#[inline(always)]
fn fma_loop<T: Real>(iterations: usize, scale: T, add: T) -> T {
    // One flat array of contiguous chains: the vectoriser makes each round CHAINS vector
    // FMAs (nested arrays were vectorised across chains, with scatters).
    let mut acc = [add; CHAINS * CHAIN_WIDTH];
    for _ in 0..iterations {
        for x in acc.iter_mut() {
            *x = x.mul_add(scale, add);
        }
    }
    acc.iter().fold(T::default(), |sum, &x| sum + x)
}

fn fma_round<T: Real>(iterations: usize) -> T {
    // Opaque operands: a contraction (x = x * 1 + 0) must not be folded away.
    let scale = std::hint::black_box(T::from_f64(0.999_999));
    let add = std::hint::black_box(T::from_f64(1e-7));
    if T::NAME == "f32" {
        let r = fma_loop_f32(iterations, scale.to_f64() as f32, add.to_f64() as f32);
        T::from_f64(r as f64)
    } else {
        T::from_f64(fma_loop_f64(iterations, scale.to_f64(), add.to_f64()))
    }
}

/// Real fused multiply-adds per second over the current rayon pool (every thread runs the
/// loop), best of `rounds`.
pub fn fma_per_second<T: Real>(rounds: usize) -> f64 {
    let threads = rayon::current_num_threads();
    let iterations = 2_000_000;
    let mut best = 0.0f64;
    for _ in 0..rounds.max(1) {
        let start = Instant::now();
        let sum: f64 = (0..threads)
            .into_par_iter()
            .map(|_| fma_round::<T>(iterations).to_f64())
            .sum();
        let seconds = start.elapsed().as_secs_f64();
        std::hint::black_box(sum);
        best = best.max((threads * iterations * CHAINS * CHAIN_WIDTH) as f64 / seconds);
    }
    best
}

/// Seconds for one streaming read and write of every amplitude of `pieces` (each negated in
/// place) over the current rayon pool, best of `rounds`.
pub fn stream_seconds<T: Real>(pieces: &mut [&mut [Amp<T>]], rounds: usize) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..rounds.max(1) {
        let start = Instant::now();
        pieces.par_iter_mut().for_each(|piece| {
            for a in piece.iter_mut() {
                *a = [-a[0], -a[1]];
            }
        });
        best = best.min(start.elapsed().as_secs_f64());
    }
    best
}

/// A dense gate on `k` qubits with every entry non-zero (a product of one-qubit rotations and
/// controlled rotations), so that no kernel can skip work.
pub fn dense_gate(k: usize) -> Matrix {
    let mut m = gates::identity(k);
    let all: Vec<usize> = (0..k).collect();
    for q in 0..k {
        let t = q as f64;
        let one = gates::u3(0.7 + 0.3 * t, 0.2 - 0.1 * t, 1.1 + 0.2 * t).expand(&[q], &all);
        m = one.times(&m);
        if q + 1 < k {
            let two =
                gates::controlled(&gates::u3(1.3, 0.4 * t, -0.6), 1).expand(&[q, q + 1], &all);
            m = two.times(&m);
        }
    }
    m
}

/// Where a benchmark's gate acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Targets {
    /// Qubits `0..k`: inside the vector registers, the hardest layout.
    Low,
    /// Qubits spread over the index, every fourth from qubit 3 (`3, 7, 11, ..`): targets
    /// in different cache lines and pages.
    Spread,
}

impl Targets {
    /// The bit positions of a `k`-qubit gate on an `n`-qubit state.
    pub fn positions(self, k: usize, n: usize) -> Vec<usize> {
        match self {
            Targets::Low => (0..k).collect(),
            Targets::Spread => (0..k).map(|i| (3 + 4 * i).min(n - k + i)).collect(),
        }
    }
}

/// One kernel measured.
#[derive(Debug, Clone, Serialize)]
pub struct KernelTime {
    /// Qubits of the gate.
    pub k: usize,
    /// Where it acts.
    pub targets: Targets,
    /// The bit positions.
    pub positions: Vec<usize>,
    /// Nanoseconds per amplitude (best of the rounds).
    pub ns_per_amplitude: f64,
    /// The arithmetic's bound: 4 * 2^k real multiply-adds per amplitude at the measured rate.
    pub fma_bound_ns: f64,
    /// The memory's bound: one streaming read and write of the state, per amplitude.
    pub memory_bound_ns: f64,
    /// The larger of the two bounds.
    pub bound_ns: f64,
    /// `bound_ns / ns_per_amplitude`: 1 is as fast as the machine allows.
    pub fraction_of_bound: f64,
}

/// A kernel benchmark run.
#[derive(Debug, Clone, Serialize)]
pub struct KernelBench {
    /// `f32` or `f64`.
    pub precision: &'static str,
    /// Qubits of the state.
    pub qubits: usize,
    /// Threads of the pool.
    pub threads: usize,
    /// Measured real fused multiply-adds per second (all threads).
    pub fma_per_second: f64,
    /// Measured streaming read+write bandwidth of the state, bytes per second each way.
    pub stream_bytes_per_second: f64,
    /// Each kernel.
    pub kernels: Vec<KernelTime>,
}

/// The state as the in-memory simulator holds it: `2^n` amplitudes cut into 256 pieces (fewer
/// for small states).
fn state_pieces<T: Real>(state: &mut [Amp<T>], n: usize) -> (Vec<&mut [Amp<T>]>, usize) {
    let piece_bits = n.saturating_sub(8).max(n.min(4));
    (state.chunks_mut(1 << piece_bits).collect(), piece_bits)
}

/// Seconds for one application of `matrix` on `positions`, best of `rounds`.
fn kernel_seconds<T: Real>(
    pieces: &mut [&mut [Amp<T>]],
    piece_bits: usize,
    matrix: &Matrix,
    positions: &[usize],
    rounds: usize,
) -> f64 {
    let gate = Prepared::<T>::new(matrix, positions.to_vec());
    let mut best = f64::INFINITY;
    for _ in 0..rounds.max(1) {
        let start = Instant::now();
        kernel::apply(pieces, piece_bits, &gate);
        best = best.min(start.elapsed().as_secs_f64());
    }
    best
}

/// A benchmark of every gate width's kernel (1 to [`kernel::MAX_GATE_QUBITS`] qubits, by
/// [`bench_kernels`]) on a state of `qubits` qubits, refused before it starts where the state
/// would not fit in the memory available.
#[derive(Debug, Clone)]
pub struct KernelBenchConfig {
    qubits: usize,
    precision: crate::Precision,
    threads: Option<usize>,
}

impl KernelBenchConfig {
    /// The fewest and the most qubits of the benchmark's state: past the caches at the low end,
    /// 256 GiB of f64 amplitudes at the top.
    pub const QUBITS: std::ops::RangeInclusive<usize> = 10..=34;
    /// Each kernel's time is the best of this many runs.
    pub const ROUNDS: usize = 5;

    /// A benchmark on `qubits` qubits, in f64, on every CPU.
    pub fn new(qubits: usize) -> KernelBenchConfig {
        KernelBenchConfig {
            qubits,
            precision: crate::Precision::F64,
            threads: None,
        }
    }

    /// The amplitudes' precision.
    pub fn precision(mut self, precision: crate::Precision) -> Self {
        self.precision = precision;
        self
    }

    /// Threads of the pool (checked by [`crate::check_threads`] when the benchmark runs).
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads);
        self
    }

    /// Check the state's size and the threads, then measure.
    pub fn run(&self) -> Result<KernelBench> {
        let n = self.qubits;
        let amp_bytes = self.precision.amplitude_bytes() as u64;
        if !Self::QUBITS.contains(&n) {
            return Err(crate::QsimError::Config(format!(
                "--bench-qubits {n}: give 10 to 34 (the state takes 2^N amplitudes of {amp_bytes} \
                 bytes; 24 is 2^24, past the caches)"
            )));
        }
        let state_bytes = (1u64 << n) * amp_bytes;
        if let Some(available) = crate::memory::available(std::path::Path::new("/")) {
            if state_bytes > available {
                return Err(crate::QsimError::Config(format!(
                    "--bench-qubits {n}: the state needs {state_bytes} bytes, more than the \
                     {available} available: give fewer qubits"
                )));
            }
        }
        let threads = match self.threads {
            Some(t) => crate::check_threads(t)?,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let ks: Vec<usize> = (1..=kernel::MAX_GATE_QUBITS).collect();
        match self.precision {
            crate::Precision::F64 => bench_kernels::<f64>(n, &ks, Self::ROUNDS, threads),
            crate::Precision::F32 => bench_kernels::<f32>(n, &ks, Self::ROUNDS, threads),
        }
    }
}

/// Measure the FMA rate, the state's streaming bandwidth and every k-qubit kernel (k in
/// `ks`, both target layouts) on an `n`-qubit state, on a pool of `threads` threads, each
/// the best of `rounds`.
pub fn bench_kernels<T: Real>(
    n: usize,
    ks: &[usize],
    rounds: usize,
    threads: usize,
) -> Result<KernelBench> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| crate::QsimError::Config(format!("cannot start {threads} threads: {e}")))?;
    Ok(pool.install(|| bench_on_pool::<T>(n, ks, rounds)))
}

fn bench_on_pool<T: Real>(n: usize, ks: &[usize], rounds: usize) -> KernelBench {
    let len = 1usize << n;
    let mut state: Vec<Amp<T>> = (0..len)
        .map(|i| {
            let x = (i % 97) as f64 / 97.0;
            [T::from_f64(x * 1e-3), T::from_f64((1.0 - x) * 1e-3)]
        })
        .collect();
    let (mut pieces, piece_bits) = state_pieces(&mut state, n);
    let fma = fma_per_second::<T>(rounds);
    let stream = stream_seconds(&mut pieces, rounds);
    let memory_bound_ns = stream * 1e9 / len as f64;
    let mut kernels = Vec::new();
    for &k in ks {
        let matrix = dense_gate(k);
        let fma_bound_ns = 4.0 * (1u64 << k) as f64 / fma * 1e9;
        for targets in [Targets::Low, Targets::Spread] {
            let positions = targets.positions(k, n);
            let seconds = kernel_seconds(&mut pieces, piece_bits, &matrix, &positions, rounds);
            let ns = seconds * 1e9 / len as f64;
            let bound_ns = fma_bound_ns.max(memory_bound_ns);
            kernels.push(KernelTime {
                k,
                targets,
                positions,
                ns_per_amplitude: ns,
                fma_bound_ns,
                memory_bound_ns,
                bound_ns,
                fraction_of_bound: bound_ns / ns,
            });
        }
    }
    KernelBench {
        precision: T::NAME,
        qubits: n,
        threads: rayon::current_num_threads(),
        fma_per_second: fma,
        stream_bytes_per_second: (len * std::mem::size_of::<Amp<T>>()) as f64 / stream,
        kernels,
    }
}

/// The time per amplitude (seconds) of a dense `k`-qubit gate, index `k` (1 to
/// [`crate::fusion::MAX_FUSE`]; index 0 unused), measured once per process and precision on
/// the calling thread over a state that stays in cache (as a sweep's gates run): the mean over
/// the layouts of [`fusion_layouts`], best of seven rounds taken in turn over the
/// widths, so that a moment of load elsewhere on the machine does not fall on one width only.
pub fn fusion_costs<T: Real>() -> Vec<f64> {
    static F32: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    static F64: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    let cell = if T::NAME == "f32" { &F32 } else { &F64 };
    cell.get_or_init(measure_fusion_costs::<T>).clone()
}

/// The target layouts a `k`-qubit gate's in-cache cost is averaged over, on an `n`-qubit
/// state: the lowest qubits, the spread ones, and six drawn at random (with a fixed seed) from
/// all `n`, as a sweep's fused gates fall. (Timed on the lowest and spread layouts only, the
/// costs made three-qubit gates look cheaper against two-qubit ones than they ran in sweeps,
/// and a 22-qubit f64 Ising circuit was fused to 3 qubits, 1.28 times slower than at 2.)
fn fusion_layouts(k: usize, n: usize) -> Vec<Vec<usize>> {
    let mut layouts = vec![
        Targets::Low.positions(k, n),
        Targets::Spread.positions(k, n),
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15 ^ k as u64;
    let mut next = move || {
        // SplitMix64: a fixed sequence, so every run measures the same layouts.
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for _ in 0..6 {
        let mut positions: Vec<usize> = Vec::with_capacity(k);
        while positions.len() < k {
            let q = (next() % n as u64) as usize;
            if !positions.contains(&q) {
                positions.push(q);
            }
        }
        layouts.push(positions);
    }
    layouts
}

fn measure_fusion_costs<T: Real>() -> Vec<f64> {
    let max = crate::fusion::MAX_FUSE;
    // The widths are timed on the current pool's threads at once, each on a state of its own
    // (a core's caches and multiply-add units are its own; the sweeps themselves run on all
    // the cores together): the widest alone, the others together, whose arithmetic (2^k per
    // amplitude) sums to about the widest's. That halves the time the timing takes (about 7 ms
    // at f32 and 12 ms at f64 on one thread here, before every run the cost rule prices).
    let widths: Vec<usize> = (1..=max).collect();
    let (narrow, wide) = widths.split_at(max.saturating_sub(1));
    let (narrow, wide) = if rayon::current_num_threads() > 1 {
        rayon::join(
            || time_fusion_widths::<T>(narrow),
            || time_fusion_widths::<T>(wide),
        )
    } else {
        (
            time_fusion_widths::<T>(narrow),
            time_fusion_widths::<T>(wide),
        )
    };
    let mut best = vec![0.0; max + 1];
    for (k, seconds) in narrow.into_iter().chain(wide) {
        best[k] = seconds;
    }
    best
}

/// Seconds per amplitude of a dense gate of each of `widths` qubits, in cache, averaged over
/// its [`fusion_layouts`], best of five.
fn time_fusion_widths<T: Real>(widths: &[usize]) -> Vec<(usize, f64)> {
    // 2^14 amplitudes: 128 KiB at f32, 256 KiB at f64, in a core's L2 cache, cut into runs as
    // a sweep's group is.
    let n = 14;
    let piece_bits = 10;
    let mut state: Vec<Amp<T>> = (0..1usize << n)
        .map(|i| [T::from_f64((i % 13) as f64 * 1e-3), T::from_f64(1e-3)])
        .collect();
    let mut pieces: Vec<&mut [Amp<T>]> = state.chunks_mut(1 << piece_bits).collect();
    let gates: Vec<(usize, Vec<Prepared<T>>)> = widths
        .iter()
        .map(|&k| {
            let matrix = dense_gate(k);
            let layouts = fusion_layouts(k, n)
                .into_iter()
                .map(|positions| Prepared::new(&matrix, positions))
                .collect();
            (k, layouts)
        })
        .collect();
    let mut best = vec![f64::INFINITY; widths.len()];
    for _ in 0..5 {
        for (i, (_, layouts)) in gates.iter().enumerate() {
            let start = Instant::now();
            for gate in layouts {
                kernel::apply_serial(&mut pieces, piece_bits, gate);
            }
            let seconds = start.elapsed().as_secs_f64() / layouts.len() as f64;
            best[i] = best[i].min(seconds / (1u64 << n) as f64);
        }
    }
    widths.iter().copied().zip(best).collect()
}

/// States larger than this are timed on their first pieces of about this many bytes, scaled
/// to the whole: twice the last-level cache here, so the sample streams from memory as the
/// whole state would, and the timing stays under about 10 ms (a 128 MiB state took 20 ms).
const STREAM_SAMPLE_BYTES: usize = 64 << 20;

/// Seconds for one streaming read and write of the state held as `pieces`, measured on the
/// state itself (so that it says whether the state stays in the last-level cache; on the first
/// [`STREAM_SAMPLE_BYTES`] of a larger state, scaled) over the current rayon pool, best of two;
/// the state is left as it was (negated twice, which is exact). Measured once per process for
/// each state size and precision.
pub fn state_stream_seconds<T: Real>(pieces: &mut [&mut [Amp<T>]]) -> f64 {
    static MEASURED: std::sync::Mutex<Vec<(usize, &'static str, f64)>> =
        std::sync::Mutex::new(Vec::new());
    let len: usize = pieces.iter().map(|p| p.len()).sum();
    let known = |m: &Vec<(usize, &'static str, f64)>| {
        m.iter()
            .find(|(l, p, _)| *l == len && *p == T::NAME)
            .map(|m| m.2)
    };
    if let Some(seconds) = known(&MEASURED.lock().unwrap_or_else(|e| e.into_inner())) {
        return seconds;
    }
    let sample_len = STREAM_SAMPLE_BYTES / std::mem::size_of::<Amp<T>>();
    let mut sampled = 0;
    let count = pieces
        .iter()
        .take_while(|p| {
            let take = sampled == 0 || sampled + p.len() <= sample_len;
            sampled += if take { p.len() } else { 0 };
            take
        })
        .count();
    let seconds = stream_seconds(&mut pieces[..count], 2) * len as f64 / sampled.max(1) as f64;
    MEASURED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((len, T::NAME, seconds));
    seconds
}

/// The cost model of [`crate::fusion::Width::Measured`] for the state held as `pieces`, on the
/// current rayon pool.
pub fn cost_model<T: Real>(pieces: &mut [&mut [Amp<T>]]) -> crate::fusion::CostModel {
    crate::fusion::CostModel {
        gate_seconds: fusion_costs::<T>(),
        threads: rayon::current_num_threads(),
        amplitudes: pieces.iter().map(|p| p.len()).sum(),
        stream_seconds: state_stream_seconds(pieces),
    }
}

/// This machine's rates for the cluster model ([`crate::dist::model`]): each kernel width's
/// cost in cache ([`fusion_costs`]) and the streaming bandwidth of all its cores over a state
/// of 256 MiB (far beyond any last-level cache here), best of three.
pub fn machine_rates<T: Real>() -> crate::dist::model::MachineRates {
    let amplitudes = (256usize << 20) / std::mem::size_of::<Amp<T>>();
    let mut state = vec![[T::default(); 2]; amplitudes];
    let mut pieces: Vec<&mut [Amp<T>]> = state.chunks_mut(1 << 16).collect();
    let seconds = stream_seconds(&mut pieces, 3);
    crate::dist::model::MachineRates {
        gate_seconds: fusion_costs::<T>(),
        // A read and a write of every byte.
        stream_bytes_per_second: 2.0 * (256u64 << 20) as f64 / seconds,
        exchange_copy_seconds: exchange_copy_seconds::<T>(),
    }
}

/// Seconds per amplitude to gather an exchange's amplitudes out of a chunk into a message and
/// scatter the reply back, on one thread (the run's own code, [`crate::dist::exchange`]): a
/// chunk of 1 MiB, one pair at a middle position, best of five.
fn exchange_copy_seconds<T: Real>() -> f64 {
    let per = (1usize << 20) / std::mem::size_of::<Amp<T>>();
    let mut chunk = vec![[T::from_f64(0.5), T::default()]; per];
    let mut message = vec![[T::default(); 2]; per / 2];
    let bits = [(5usize, 0usize)];
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..8 {
            crate::dist::exchange::gather(&bits, 1, &chunk, 0, 0, &mut message);
            crate::dist::exchange::scatter(&bits, 1, &mut chunk, 0, 0, &message);
        }
        best = best.min(start.elapsed().as_secs_f64() / (8 * message.len()) as f64);
    }
    std::hint::black_box(&chunk);
    best
}
