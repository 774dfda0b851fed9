//! Applying a dense `k`-qubit gate to a state held as equal pieces (chunks of one array, or
//! slices of one buffer), in parallel over groups of pieces that no other group touches.

use bytemuck::Pod;
use multiversion::target::selected_target;
use rayon::prelude::*;

use crate::gates::Matrix;

#[cfg(target_arch = "x86_64")]
mod avx512;

/// `fn`s compiled for several vector extensions, the widest the CPU has running: the one list
/// of targets the kernels' dispatchers (and the FMA benchmark, [`crate::bench`]) are built for.
macro_rules! multiversioned {
    ($($(#[$attr:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block)*) => {
        $(
            $(#[$attr])*
            #[::multiversion::multiversion(targets(
                "x86_64+avx512f+avx512vl+avx2+fma+avx+sse4.2",
                "x86_64+avx2+fma+avx+sse4.2",
                "x86_64+sse4.2",
                "aarch64+neon"
            ))]
            fn $name($($arg: $ty),*) $(-> $ret)? $body
        )*
    };
}
pub(crate) use multiversioned;

/// The amplitude type: `f64` or `f32`.
pub trait Real:
    sealed::BlockKernels
    + Pod
    + Send
    + Sync
    + Default
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Neg<Output = Self>
{
    /// `self * a + b`, fused (one rounding; a single instruction where the CPU has FMA).
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// From f64 (rounded for f32).
    fn from_f64(x: f64) -> Self;
    /// To f64.
    fn to_f64(self) -> f64;
    /// `"f64"` or `"f32"`.
    const NAME: &'static str;
}

impl Real for f64 {
    #[inline(always)]
    fn mul_add(self, a: f64, b: f64) -> f64 {
        f64::mul_add(self, a, b)
    }
    fn from_f64(x: f64) -> f64 {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
    const NAME: &'static str = "f64";
}

impl Real for f32 {
    #[inline(always)]
    fn mul_add(self, a: f32, b: f32) -> f32 {
        f32::mul_add(self, a, b)
    }
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    const NAME: &'static str = "f32";
}

/// An amplitude: `[re, im]`.
pub type Amp<T> = [T; 2];

/// A gate ready to apply: its qubits as bit positions in the state's index, and its matrix in
/// the state's precision.
#[derive(Debug, Clone)]
pub struct Prepared<T> {
    /// Bit positions; bit `i` of the matrix index is position `positions[i]`.
    pub positions: Vec<usize>,
    /// Row-major matrix entries.
    pub matrix: Vec<Amp<T>>,
}

impl<T: Real> Prepared<T> {
    /// Prepare `matrix` acting on bit `positions`. The positions are sorted (and the matrix
    /// permuted to match), so that the fast paths can walk the state in address order.
    pub fn new(matrix: &Matrix, positions: Vec<usize>) -> Prepared<T> {
        assert_eq!(matrix.qubits(), positions.len());
        let k = positions.len();
        let mut order: Vec<usize> = (0..k).collect();
        order.sort_by_key(|&i| positions[i]);
        // Sorted bit b is original bit order[b].
        let to_original = |s: usize| -> usize { (0..k).map(|b| ((s >> b) & 1) << order[b]).sum() };
        let dim = 1 << k;
        let mut entries = Vec::with_capacity(dim * dim);
        for r in 0..dim {
            for c in 0..dim {
                let z = matrix.at(to_original(r), to_original(c));
                entries.push([T::from_f64(z.re), T::from_f64(z.im)]);
            }
        }
        Prepared {
            positions: order.iter().map(|&i| positions[i]).collect(),
            matrix: entries,
        }
    }
}

/// Insert a zero bit at each of the sorted `positions` into `x`.
#[inline]
fn insert_zeros(mut x: usize, sorted_positions: &[usize]) -> usize {
    for &p in sorted_positions {
        let low = x & ((1 << p) - 1);
        x = ((x >> p) << (p + 1)) | low;
    }
    x
}

/// Apply `gate` to the state made of `pieces` (each `1 << piece_bits` amplitudes; piece `i` holds
/// indices `i << piece_bits ..`). Groups of pieces run in parallel on the current rayon pool.
pub fn apply<T: Real>(pieces: &mut [&mut [Amp<T>]], piece_bits: usize, gate: &Prepared<T>) {
    apply_with(pieces, piece_bits, gate, true, Route::Chosen)
}

/// [`apply`] on the calling thread only (for callers that already split the work between
/// threads, such as the cache-blocked sweeps).
pub fn apply_serial<T: Real>(pieces: &mut [&mut [Amp<T>]], piece_bits: usize, gate: &Prepared<T>) {
    apply_with(pieces, piece_bits, gate, false, Route::Chosen)
}

/// Which kernel applies a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The one [`uses_blocks`] picks.
    Chosen,
    /// The block kernels (gates of up to three qubits on pieces of at least a block).
    Blocks,
    /// The block kernels as they run on a state streamed from memory (their loop order and
    /// prefetching), whatever the state's size: so that those paths' results are checked on
    /// states small enough for a test.
    BlocksStreamed,
    /// The 256-bit block kernels, even where the CPU has AVX-512 (so that their results are
    /// checked on any CPU).
    Blocks256,
    /// The wide kernel.
    Wide,
}

/// [`apply_serial`] through the kernel `route` names, to compare the kernels on the same gate.
pub fn apply_serial_routed<T: Real>(
    pieces: &mut [&mut [Amp<T>]],
    piece_bits: usize,
    gate: &Prepared<T>,
    route: Route,
) {
    apply_with(pieces, piece_bits, gate, false, route)
}

fn apply_with<T: Real>(
    pieces: &mut [&mut [Amp<T>]],
    piece_bits: usize,
    gate: &Prepared<T>,
    parallel: bool,
    route: Route,
) {
    let k = gate.positions.len();
    let high: Vec<usize> = gate
        .positions
        .iter()
        .filter(|&&p| p >= piece_bits)
        .map(|&p| p - piece_bits)
        .collect();
    let mut high_sorted = high.clone();
    high_sorted.sort_unstable();
    let members = 1usize << high.len();
    let ngroups = pieces.len() >> high.len();
    // Group g holds the pieces whose index has the gate's high bits cleared equal to
    // insert_zeros(g), ordered by member m = the high bits in `high_sorted` order.
    let mut slots: Vec<Option<&mut [Amp<T>]>> = pieces.iter_mut().map(|p| Some(&mut **p)).collect();
    let mut groups: Vec<Vec<&mut [Amp<T>]>> = Vec::with_capacity(ngroups);
    for g in 0..ngroups {
        let base = insert_zeros(g, &high_sorted);
        let group = (0..members)
            .map(|m| {
                let idx = base
                    | high_sorted
                        .iter()
                        .enumerate()
                        .map(|(i, &h)| ((m >> i) & 1) << h)
                        .sum::<usize>();
                slots[idx].take().expect("each piece is in one group")
            })
            .collect();
        groups.push(group);
    }
    // For each matrix index j: the member piece and the offset inside it.
    let dim = 1usize << k;
    let mut member = vec![0usize; dim];
    let mut offset = vec![0usize; dim];
    for j in 0..dim {
        for (i, &p) in gate.positions.iter().enumerate() {
            if (j >> i) & 1 == 1 {
                if p >= piece_bits {
                    let h = high_sorted
                        .iter()
                        .position(|&x| x == p - piece_bits)
                        .expect("high");
                    member[j] |= 1 << h;
                } else {
                    offset[j] |= 1 << p;
                }
            }
        }
    }
    let mut low: Vec<usize> = gate
        .positions
        .iter()
        .copied()
        .filter(|&p| p < piece_bits)
        .collect();
    low.sort_unstable();
    let piece_len = groups.first().map_or(0, |g| g[0].len());
    // One- and two-qubit gates in the block kernels; three-qubit gates in the block kernels
    // or the wide kernel, whichever is faster for their targets ([`uses_blocks`]).
    let fits_blocks = piece_len >= BlockPlan::<T>::block() && k <= 3;
    // A state this large is streamed from memory rather than held in the caches (a sweep's
    // groups are at most `sweep::CACHE_BYTES`); some kernels unroll differently for it.
    let streaming = route == Route::BlocksStreamed
        || groups.len()
            * groups.first().map_or(0, |g| g.len())
            * piece_len
            * std::mem::size_of::<Amp<T>>()
            > STREAMING_BYTES;
    let for_zmm = zmm_blocks_beat_wide::<T>(&gate.positions, piece_bits, streaming);
    let use_blocks = match route {
        Route::Chosen => (uses_blocks::<T>(&gate.positions) || for_zmm) && fits_blocks,
        Route::Blocks | Route::BlocksStreamed | Route::Blocks256 => {
            assert!(
                fits_blocks,
                "the block kernels take up to three qubits, not {k}"
            );
            true
        }
        Route::Wide => false,
    };
    #[allow(unused_mut)]
    let mut blocked =
        use_blocks.then(|| BlockPlan::new(gate, &member, &offset, piece_len, streaming));
    #[cfg(target_arch = "x86_64")]
    if route == Route::Blocks256 {
        if let Some(plan) = blocked.as_mut() {
            plan.zmm = None;
        }
    }
    // A gate sent to the block kernels for their 512-bit versions goes to the wide kernel
    // where those do not take it (pieces too short): the 256-bit ones are ten times slower on
    // such targets.
    #[cfg(target_arch = "x86_64")]
    if route == Route::Chosen
        && !uses_blocks::<T>(&gate.positions)
        && blocked.as_ref().is_some_and(|plan| plan.zmm.is_none())
    {
        blocked = None;
    }
    // Wider gates (and narrower ones on pieces too short for blocks) go through the wide
    // kernel, in batches of amplitude groups (one group at a time in pieces too short for a
    // batch).
    let wide = blocked
        .is_none()
        .then(|| WidePlan::new(gate, &member, &offset, &low, piece_len));
    let work = |group: &mut Vec<&mut [Amp<T>]>| match (&blocked, &wide) {
        (Some(plan), _) => T::run_blocks(group, plan),
        (None, Some(plan)) => T::run_wide(group, plan),
        (None, None) => unreachable!("a gate has a block plan or a wide plan"),
    };
    if groups.len() == 1 || !parallel {
        groups.iter_mut().for_each(work);
    } else {
        groups.par_iter_mut().for_each(work);
    }
}

/// Whether a gate on the bit `positions` goes through the block kernels (else the wide kernel,
/// unless [`zmm_blocks_beat_wide`]),
/// at `T`'s precision: one- and two-qubit gates always; three-qubit gates when a target lies
/// among the bits that number a wide batch's groups (below bit 4 at f32, 3 at f64), where the
/// wide kernel would gather its batches amplitude by amplitude. Measured in cache (the
/// `route_timings` test, every layout of three targets among qubits 0-6, 9 and 12), the
/// block kernels took 1.0-2.1 ns per amplitude there at f32 against the wide kernel's
/// 2.2-2.4 (qubits 0, 1, 2: 1.04 against 2.40), and 2.1-4.1 against 3.7-3.9 at f64; with
/// every target above those bits the wide kernel's batches are contiguous and it took
/// 1.3-1.4 ns at f32 against the block kernels' 13.8-14.4 (1.7-2.1 against 2.0-2.5 at f64).
pub fn uses_blocks<T: Real>(positions: &[usize]) -> bool {
    let batch_bits = WidePlan::<T>::batch().trailing_zeros() as usize;
    match positions.len() {
        0..=2 => true,
        3 => positions.iter().any(|&p| p < batch_bits),
        _ => false,
    }
}

/// Whether the 512-bit block kernels ([`avx512::ZmmPlan`], where the CPU has AVX-512) take a
/// three-qubit gate that [`uses_blocks`] leaves to the wide kernel (every target at or above a
/// batch's bits): in cache always, and streamed while its lanes lie in one piece within
/// [`ZMM_LANES_SPAN`] bytes. Lanes further apart are as many separate streams from memory as
/// the gate has lanes, which the wide kernel's prefetching of whole batches feeds better.
/// Measured on one thread (2026-12-02, AMD EPYC, ns per amplitude, block kernels against the
/// wide kernel): in a 1 MiB state at f64 on 3, 7, 11 1.02-1.05 against 1.24-1.27, on 3, 4, 5
/// 0.90 against 1.28, on 4, 9, 14 0.97 against 1.19-1.22, at f32 on 4, 5, 6 0.63-0.78 against
/// 0.72-0.99 and on 5, 10, 15 0.60-0.77 against 0.61-0.83; streamed (64 MiB) at f64 on 3, 7,
/// 11 1.13-1.15 against 1.32-1.33 and on 4, 9, 14 1.65-1.72 against 1.33, at f32 (32 MiB) on 4,
/// 8, 12 0.54-0.62 against 0.63-0.67 and on 5, 10, 15 0.78 against 0.61-0.63.
fn zmm_blocks_beat_wide<T: Real>(positions: &[usize], piece_bits: usize, streaming: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let top = positions.iter().copied().max().unwrap_or(0);
        positions.len() == 3
            && pulp::x86::V4::try_new().is_some()
            && (!streaming
                || (top < piece_bits
                    && (1usize << top) * std::mem::size_of::<Amp<T>>() < ZMM_LANES_SPAN))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (positions, piece_bits, streaming);
        false
    }
}

/// The span of a streamed three-qubit gate's lanes within which [`zmm_blocks_beat_wide`].
const ZMM_LANES_SPAN: usize = 64 << 10;

/// Bytes per block: the block kernels work on runs of consecutive amplitudes that fill one
/// 256-bit vector register (4 amplitudes at f32, 2 at f64), kept interleaved (re, im) as in
/// memory so that a block is one vector load and store.
const BLOCK_BYTES: usize = 32;

/// A gate applied to more bytes than this at once streams them from memory: beyond the last
/// level cache's share of a core here (a sweep's groups are 4 MiB, `sweep::CACHE_BYTES`).
const STREAMING_BYTES: usize = 16 << 20;

/// A gate of up to three qubits laid out for the block kernels. Its targets inside a block
/// (`low_mask`) are mixed by fixed shuffles; the others select `lanes` blocks (in other pieces
/// or further along the same piece), whose amplitudes are mixed element-wise. Output lane `h` is
/// the sum over input lanes `h2` and low-bit values `lp` of coefficient
/// `(h * lanes + h2) * 2^low + lp` times `shuffle_lp(lane h2)`, where a coefficient holds, for
/// every amplitude of the block, the matrix entry of its row.
struct BlockPlan<T> {
    /// Amplitudes per block.
    block: usize,
    lanes: usize,
    low_mask: usize,
    /// Member piece and in-piece offset of each lane.
    member: Vec<usize>,
    offset: Vec<usize>,
    /// In-piece target bits at or above the block (ascending): they separate the lanes.
    lane_bits: Vec<usize>,
    /// Per coefficient, `A` and `B` of [`blocks`] for every real of the block (2 * block reals
    /// each, one after the other).
    coef_a: CacheAligned<T>,
    coef_b: CacheAligned<T>,
    /// The same gate for the 512-bit block kernels ([`avx512::ZmmPlan`]), when the CPU has
    /// AVX-512.
    #[cfg(target_arch = "x86_64")]
    zmm: Option<avx512::ZmmPlan<T>>,
}

/// Reals stored from the start of a cache line: a 32-byte load from a `Vec<f32>` (aligned to
/// 16 bytes by the allocator) straddles two cache lines every other time, and the kernels load
/// a coefficient for every multiply-add. Aligning them made a dense two-qubit gate 25% faster;
/// the 512-bit kernels' 64-byte loads from a 16-byte-aligned `Vec` would split a line three
/// times in four (with glibc's malloc a 3-qubit gate on 0, 1, 2 at f32 ran at 0.62 ns per
/// amplitude where mimalloc, which happened to align them, gave 0.39). (A `Vec` with a few
/// spare elements in front, the start found with `align_offset`: no unsafe code, no derive.)
struct CacheAligned<T> {
    storage: Vec<T>,
    start: usize,
    len: usize,
}

/// The line size [`CacheAligned`] aligns to.
const CACHE_LINE: usize = 64;

impl<T: Real> CacheAligned<T> {
    fn new(reals: &[T]) -> CacheAligned<T> {
        let spare = CACHE_LINE / std::mem::size_of::<T>();
        let mut storage = vec![T::default(); reals.len() + spare];
        let start = storage.as_ptr().align_offset(CACHE_LINE);
        assert!(
            start < spare,
            "a Vec of reals can start a cache line within {spare} elements"
        );
        storage[start..start + reals.len()].copy_from_slice(reals);
        CacheAligned {
            storage,
            start,
            len: reals.len(),
        }
    }

    fn as_slice(&self) -> &[T] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl<T: Real> BlockPlan<T> {
    fn block() -> usize {
        (BLOCK_BYTES / std::mem::size_of::<Amp<T>>()).max(1)
    }

    fn new(
        gate: &Prepared<T>,
        member: &[usize],
        offset: &[usize],
        piece_len: usize,
        streaming: bool,
    ) -> BlockPlan<T> {
        let block = Self::block();
        let block_bits = block.trailing_zeros() as usize;
        let k = gate.positions.len();
        // Positions are sorted, so the targets inside a block are the matrix's lowest bits.
        let l = gate.positions.iter().filter(|&&p| p < block_bits).count();
        let low_mask: usize = gate.positions[..l].iter().map(|&p| 1 << p).sum();
        let lanes = 1usize << (k - l);
        let (coef_a, coef_b) = block_coefficients(gate, l, 2 * block, false);
        BlockPlan {
            block,
            lanes,
            low_mask,
            member: (0..lanes).map(|h| member[h << l]).collect(),
            offset: (0..lanes).map(|h| offset[h << l]).collect(),
            lane_bits: gate.positions[l..]
                .iter()
                .copied()
                .filter(|&p| offset.iter().any(|&o| o & (1 << p) != 0))
                .collect(),
            coef_a: CacheAligned::new(&coef_a),
            coef_b: CacheAligned::new(&coef_b),
            #[cfg(target_arch = "x86_64")]
            zmm: avx512::ZmmPlan::new(gate, member, offset, piece_len, streaming),
        }
    }
}

/// The block kernels' coefficients `A` and `B` of each (output lane `h`, input lane `h2`, low
/// value `lp`) of a gate whose `l` lowest targets lie inside a block of `reals` reals,
/// row-major: for every real `i` of the block, the entry of the row of its amplitude `i / 2`.
/// `A` holds the entry's real part, `B` its imaginary part with alternating signs, `-` on the
/// real lanes, or `+` there where `swapped` (`B` with its re and im lanes exchanged, for
/// kernels that exchange the sum's lanes once instead of every input's).
fn block_coefficients<T: Real>(
    gate: &Prepared<T>,
    l: usize,
    reals: usize,
    swapped: bool,
) -> (Vec<T>, Vec<T>) {
    let k = gate.positions.len();
    let (lanes, nl, dim) = (1usize << (k - l), 1usize << l, 1usize << k);
    let low_of = |e: usize| low_value(e, &gate.positions[..l]);
    let mut coef_a = Vec::with_capacity(lanes * lanes * nl * reals);
    let mut coef_b = Vec::with_capacity(lanes * lanes * nl * reals);
    for h in 0..lanes {
        for h2 in 0..lanes {
            for lp in 0..nl {
                let col = lp | (h2 << l);
                for i in 0..reals {
                    let entry = gate.matrix[((low_of(i / 2) | (h << l)) * dim) + col];
                    coef_a.push(entry[0]);
                    coef_b.push(if (i % 2 == 0) != swapped {
                        -entry[1]
                    } else {
                        entry[1]
                    });
                }
            }
        }
    }
    (coef_a, coef_b)
}

mod sealed {
    use super::{Amp, BlockPlan, WidePlan};

    /// The block kernels of one precision. They are implemented for `f32` and `f64` (concrete
    /// types, not a generic function), so they are compiled once, optimised, in this crate,
    /// and only for that precision's block size, instead of again in every crate that runs a
    /// simulation (the kernels are many: lane counts x low targets x vector extensions).
    /// The module is private, so nothing outside this crate can name the trait or call it with
    /// the private plan type: hence the allowed `private_interfaces`.
    #[allow(private_interfaces)]
    pub trait BlockKernels: Sized {
        fn run_blocks(group: &mut [&mut [Amp<Self>]], plan: &BlockPlan<Self>);
        fn run_wide(group: &mut [&mut [Amp<Self>]], plan: &WidePlan<Self>);
    }
}

/// [`sealed::BlockKernels`] for one precision: the 512-bit kernels where they apply, else that
/// precision's multiversioned dispatchers.
macro_rules! block_kernels {
    ($real:ty, $run_blocks:ident, $run_wide:ident) => {
        impl sealed::BlockKernels for $real {
            #[allow(private_interfaces)]
            fn run_blocks(group: &mut [&mut [Amp<$real>]], plan: &BlockPlan<$real>) {
                if !run_blocks_avx512(group, plan) {
                    $run_blocks(group, plan)
                }
            }
            #[allow(private_interfaces)]
            fn run_wide(group: &mut [&mut [Amp<$real>]], plan: &WidePlan<$real>) {
                if !run_wide_avx512(group, plan) {
                    $run_wide(group, plan)
                }
            }
        }
    };
}
block_kernels!(f32, run_blocks_f32, run_wide_f32);
block_kernels!(f64, run_blocks_f64, run_wide_f64);

/// Run a block plan in the 512-bit block kernels if it has a plan for them (only where the CPU
/// has AVX-512); whether it ran.
#[cfg(target_arch = "x86_64")]
fn run_blocks_avx512<T: avx512::Zmm>(group: &mut [&mut [Amp<T>]], plan: &BlockPlan<T>) -> bool {
    let Some(zmm) = &plan.zmm else {
        return false;
    };
    zmm.simd.vectorize(avx512::Run {
        simd: zmm.simd,
        group,
        plan: zmm,
    });
    true
}

#[cfg(not(target_arch = "x86_64"))]
fn run_blocks_avx512<T>(_: &mut [&mut [Amp<T>]], _: &BlockPlan<T>) -> bool {
    false
}

/// Run a wide plan in the AVX-512 row or block kernels if it asks for one and the CPU has
/// AVX-512; whether it ran.
#[cfg(target_arch = "x86_64")]
fn run_wide_avx512<T: avx512::Zmm>(group: &mut [&mut [Amp<T>]], plan: &WidePlan<T>) -> bool {
    if !(plan.by_rows || plan.by_blocks) {
        return false;
    }
    let Some(simd) = pulp::x86::V4::try_new() else {
        return false;
    };
    simd.vectorize(avx512::Run { simd, group, plan });
    true
}

#[cfg(not(target_arch = "x86_64"))]
fn run_wide_avx512<T>(_: &mut [&mut [Amp<T>]], _: &WidePlan<T>) -> bool {
    false
}

multiversioned! {
    /// Dispatch an f32 block plan (blocks of 4 amplitudes) to the kernel specialised for its lane
    /// count and low targets. Compiled for several vector extensions; the widest the CPU has runs.
    fn run_blocks_f32(group: &mut [&mut [Amp<f32>]], plan: &BlockPlan<f32>) {
        type T = f32;
        match (plan.block, plan.lanes, plan.low_mask) {
            (4, 2, 0) => blocks::<T, 2, 0, 1, 4, 8>(group, plan),
            (4, 4, 0) => blocks::<T, 4, 0, 1, 4, 8>(group, plan),
            (4, 8, 0) => blocks::<T, 8, 0, 1, 4, 8>(group, plan),
            (4, 1, 1) => blocks::<T, 1, 1, 2, 4, 8>(group, plan),
            (4, 1, 2) => blocks::<T, 1, 2, 2, 4, 8>(group, plan),
            (4, 2, 1) => blocks::<T, 2, 1, 2, 4, 8>(group, plan),
            (4, 2, 2) => blocks::<T, 2, 2, 2, 4, 8>(group, plan),
            (4, 4, 1) => blocks::<T, 4, 1, 2, 4, 8>(group, plan),
            (4, 4, 2) => blocks::<T, 4, 2, 2, 4, 8>(group, plan),
            (4, 1, 3) => blocks::<T, 1, 3, 4, 4, 8>(group, plan),
            (4, 2, 3) => blocks::<T, 2, 3, 4, 4, 8>(group, plan),
            other => {
                unreachable!("f32 block plans have blocks of 4 and at most three qubits, not {other:?}")
            }
        }
    }

    /// Dispatch an f64 block plan (blocks of 2 amplitudes); as [`run_blocks_f32`].
    fn run_blocks_f64(group: &mut [&mut [Amp<f64>]], plan: &BlockPlan<f64>) {
        type T = f64;
        match (plan.block, plan.lanes, plan.low_mask) {
            (2, 2, 0) => blocks::<T, 2, 0, 1, 2, 4>(group, plan),
            (2, 4, 0) => blocks::<T, 4, 0, 1, 2, 4>(group, plan),
            (2, 8, 0) => blocks::<T, 8, 0, 1, 2, 4>(group, plan),
            (2, 1, 1) => blocks::<T, 1, 1, 2, 2, 4>(group, plan),
            (2, 2, 1) => blocks::<T, 2, 1, 2, 2, 4>(group, plan),
            (2, 4, 1) => blocks::<T, 4, 1, 2, 2, 4>(group, plan),
            other => {
                unreachable!("f64 block plans have blocks of 2 and at most three qubits, not {other:?}")
            }
        }
    }
}

/// For each low-bit value `lp` (in matrix bit order) of the targets in `LM`, the block amplitude
/// that amplitude `e` reads: `e` with its target bits replaced by `lp`.
const fn shuffles<const LM: usize, const NL: usize, const B: usize>() -> [[usize; B]; NL] {
    let mut out = [[0; B]; NL];
    let mut lp = 0;
    while lp < NL {
        let mut dep = 0;
        let mut bit = 0;
        let mut i = 0;
        while (1 << bit) < B {
            if LM & (1 << bit) != 0 {
                dep |= ((lp >> i) & 1) << bit;
                i += 1;
            }
            bit += 1;
        }
        let mut e = 0;
        while e < B {
            out[lp][e] = (e & !LM) | dep;
            e += 1;
        }
        lp += 1;
    }
    out
}

/// The block kernel: `D` lanes, low targets `LM` (`NL` = 2^popcount(LM) values), blocks of `B`
/// amplitudes (`F` = 2B reals). A complex multiply-add of coefficient `c` into `o` is
/// `o += A * x + B * swap(x)` with `A = (c.re, c.re, ...)`, `B = (-c.im, c.im, ...)` and `swap`
/// exchanging re and im: two fused multiply-adds on the interleaved block.
#[inline(always)]
fn blocks<
    T: Real,
    const D: usize,
    const LM: usize,
    const NL: usize,
    const B: usize,
    const F: usize,
>(
    group: &mut [&mut [Amp<T>]],
    plan: &BlockPlan<T>,
) {
    let shuffle = const { shuffles::<LM, NL, B>() };
    let member: [usize; D] = std::array::from_fn(|h| plan.member[h]);
    let offset: [usize; D] = std::array::from_fn(|h| plan.offset[h]);
    // Lanes in address order (piece, then offset), for splitting pieces into lanes.
    let mut order: [usize; D] = std::array::from_fn(|h| h);
    order.sort_unstable_by_key(|&h| (member[h], offset[h]));
    let coef_a = &plan.coef_a.as_slice()[..D * D * NL * F];
    let coef_b = &plan.coef_b.as_slice()[..D * D * NL * F];
    let piece_len = group[0].len();
    // Lane bits just above the block (runs of one or two blocks) are handled inside tiles.
    let short = plan
        .lane_bits
        .iter()
        .take_while(|&&b| (1usize << b) < 4 * B)
        .count();
    if short > 0 {
        match D >> short {
            1 => tiled::<T, D, 1, NL, B, F>(group, plan, short, &shuffle, coef_a, coef_b),
            2 => tiled::<T, D, 2, NL, B, F>(group, plan, short, &shuffle, coef_a, coef_b),
            4 => tiled::<T, D, 4, NL, B, F>(group, plan, short, &shuffle, coef_a, coef_b),
            other => unreachable!("{D} lanes with {short} short lane bits leave {other}"),
        }
        return;
    }
    // A run: the stretch below the lowest in-piece lane bit, contiguous in every lane.
    let run_len = plan.lane_bits.first().map_or(piece_len, |&b| 1 << b);
    let runs = (piece_len / run_len) >> plan.lane_bits.len();
    for r in 0..runs {
        let base = insert_zeros(r * run_len, &plan.lane_bits);
        let lanes = split_lanes(group, &member, &offset, &order, base, run_len);
        let mut blocks = lanes.map(|lane| lane.chunks_exact_mut(B));
        for _ in 0..run_len / B {
            // An opaque no-op: without it, LLVM's loop vectoriser widens this loop across
            // blocks for the one- and two-lane kernels, turning each block's straight vector
            // code into shuffles and spills (a one-qubit gate took 0.84 ns per amplitude
            // instead of 0.28, a gate on qubits 0 and 1 1.03 instead of 0.59).
            std::hint::black_box(());
            let mut run: [&mut [Amp<T>; B]; D] = std::array::from_fn(|h| {
                blocks[h]
                    .next()
                    .and_then(|b| b.try_into().ok())
                    .expect("lanes hold whole blocks")
            });
            kernel_block::<T, D, NL, F, B>(&mut run, &shuffle, coef_a, coef_b);
        }
    }
}

/// The block kernel for gates whose lowest lane bits (`short` of them) lie just above the block,
/// where a run holds only one or two blocks. A *tile* spans those bits (at most four blocks);
/// the remaining `DH` lanes (one per value of the higher lane bits) are split into runs of whole
/// tiles as in [`blocks`], and each tile's blocks are copied into registers, mixed, and stored
/// back. Lane `h` is high lane `h / SL` and short lane `h % SL`, `SL = D / DH`, because the short
/// bits are the gate's lowest targets above the block.
#[inline(always)]
fn tiled<
    T: Real,
    const D: usize,
    const DH: usize,
    const NL: usize,
    const B: usize,
    const F: usize,
>(
    group: &mut [&mut [Amp<T>]],
    plan: &BlockPlan<T>,
    short: usize,
    shuffle: &[[usize; B]; NL],
    coef_a: &[T],
    coef_b: &[T],
) {
    let sl = D / DH;
    let (short_bits, high_bits) = plan.lane_bits.split_at(short);
    let tile_bits = short_bits[short - 1] + 1;
    let tile = 1usize << tile_bits;
    let block_bits = B.trailing_zeros() as usize;
    let free: Vec<usize> = (block_bits..tile_bits)
        .filter(|b| !short_bits.contains(b))
        .collect();
    // Blocks of a tile per kernel call (at most two calls per tile: a tile has at most four
    // blocks and at least two lanes), and for each call the block index of every lane.
    let calls = (tile / B) / sl;
    let mut at = [[0usize; D]; 2];
    for (f, row) in at.iter_mut().enumerate().take(calls) {
        for (h, block) in row.iter_mut().enumerate() {
            *block = (deposit(f, &free) | deposit(h % sl, short_bits)) / B;
        }
    }
    let member: [usize; DH] = std::array::from_fn(|hh| plan.member[hh * sl]);
    let offset: [usize; DH] = std::array::from_fn(|hh| plan.offset[hh * sl]);
    let mut order: [usize; DH] = std::array::from_fn(|hh| hh);
    order.sort_unstable_by_key(|&hh| (member[hh], offset[hh]));
    let piece_len = group[0].len();
    let run_len = high_bits.first().map_or(piece_len, |&b| 1 << b);
    let runs = (piece_len / run_len) >> high_bits.len();
    for r in 0..runs {
        let base = insert_zeros(r * run_len, high_bits);
        let lanes = split_lanes(group, &member, &offset, &order, base, run_len);
        let mut tiles = lanes.map(|lane| lane.chunks_exact_mut(tile));
        for _ in 0..run_len / tile {
            let t: [&mut [Amp<T>]; DH] =
                std::array::from_fn(|hh| tiles[hh].next().expect("lanes hold whole tiles"));
            for row in at.iter().take(calls) {
                let mut copy: [[Amp<T>; B]; D] = std::array::from_fn(|h| {
                    let i = row[h] * B;
                    t[h / sl][i..i + B]
                        .try_into()
                        .expect("blocks lie inside their tile")
                });
                {
                    let mut run: [&mut [Amp<T>; B]; D] = copy.each_mut();
                    kernel_block::<T, D, NL, F, B>(&mut run, shuffle, coef_a, coef_b);
                }
                for h in 0..D {
                    let i = row[h] * B;
                    t[h / sl][i..i + B].copy_from_slice(&copy[h]);
                }
            }
        }
    }
}

/// The value, in matrix bit order, of the gate's targets inside a block (`low`, its lowest
/// positions) in block amplitude `e`: bit `i` is bit `low[i]` of `e`.
fn low_value(e: usize, low: &[usize]) -> usize {
    low.iter()
        .enumerate()
        .map(|(i, &p)| ((e >> p) & 1) << i)
        .sum()
}

/// Spread the bits of `x` over the (ascending) bit `positions`: bit `i` of `x` goes to
/// `positions[i]`.
#[inline]
fn deposit(x: usize, positions: &[usize]) -> usize {
    positions
        .iter()
        .enumerate()
        .map(|(i, &p)| ((x >> i) & 1) << p)
        .sum()
}

/// The lanes of one run: lane `h` is `group[member[h]][base + offset[h]..][..len]`, split off the
/// pieces in address `order` (lanes never overlap).
#[inline(always)]
fn split_lanes<'a, T, const D: usize>(
    group: &'a mut [&mut [Amp<T>]],
    member: &[usize; D],
    offset: &[usize; D],
    order: &[usize; D],
    base: usize,
    len: usize,
) -> [&'a mut [Amp<T>]; D] {
    let mut out: [Option<&'a mut [Amp<T>]>; D] = std::array::from_fn(|_| None);
    let mut pieces = group.iter_mut().enumerate();
    let mut current: Option<(usize, &'a mut [Amp<T>], usize)> = None;
    for &h in order {
        if current.as_ref().is_none_or(|c| c.0 != member[h]) {
            let (i, piece) = pieces
                .find(|(i, _)| *i == member[h])
                .expect("lanes are in piece order");
            current = Some((i, &mut **piece, 0));
        }
        let (_, rest, consumed) = current.as_mut().expect("set above");
        let tail = std::mem::take(rest);
        let (_, tail) = tail.split_at_mut(base + offset[h] - *consumed);
        let (lane, tail) = tail.split_at_mut(len);
        *rest = tail;
        *consumed = base + offset[h] + len;
        out[h] = Some(lane);
    }
    out.map(|lane| lane.expect("every lane is split off"))
}

/// One block of every lane through the gate.
#[inline(always)]
fn kernel_block<T: Real, const D: usize, const NL: usize, const F: usize, const B: usize>(
    run: &mut [&mut [Amp<T>; B]; D],
    shuffle: &[[usize; B]; NL],
    coef_a: &[T],
    coef_b: &[T],
) {
    {
        // Read every lane (and its shuffles) before writing any.
        let mut x = [[[T::default(); F]; NL]; D];
        let mut xs = [[[T::default(); F]; NL]; D];
        for h in 0..D {
            for lp in 0..NL {
                x[h][lp] = std::array::from_fn(|i| run[h][shuffle[lp][i / 2]][i % 2]);
                xs[h][lp] = std::array::from_fn(|i| run[h][shuffle[lp][i / 2]][1 - i % 2]);
            }
        }
        // All outputs at once, each with two accumulators (the `A` and the `B` terms): 2D
        // independent chains of fused multiply-adds keep both FMA units busy despite their
        // latency.
        let mut oa = [[T::default(); F]; D];
        let mut ob = [[T::default(); F]; D];
        for h2 in 0..D {
            for lp in 0..NL {
                let (v, vs) = (&x[h2][lp], &xs[h2][lp]);
                for h in 0..D {
                    let c = ((h * D + h2) * NL + lp) * F;
                    let a: &[T; F] = coef_a[c..c + F].try_into().expect("F reals");
                    let bb: &[T; F] = coef_b[c..c + F].try_into().expect("F reals");
                    for i in 0..F {
                        oa[h][i] = a[i].mul_add(v[i], oa[h][i]);
                    }
                    for i in 0..F {
                        ob[h][i] = bb[i].mul_add(vs[i], ob[h][i]);
                    }
                }
            }
        }
        for h in 0..D {
            for e in 0..B {
                run[h][e] = [
                    oa[h][2 * e] + ob[h][2 * e],
                    oa[h][2 * e + 1] + ob[h][2 * e + 1],
                ];
            }
        }
    }
}

/// Output rows of a `dim`-lane wide kernel computed at once: `want`, or all of them.
const fn rows(dim: usize, want: usize) -> usize {
    if dim < want {
        dim
    } else {
        want
    }
}

/// The widest gate the kernels apply (fusion stops at [`crate::fusion::MAX_FUSE`]; six is
/// there to measure what one more qubit would cost).
pub const MAX_GATE_QUBITS: usize = 6;

/// A gate laid out for the wide kernel: amplitude groups (the `D = 2^k` amplitudes a gate mixes)
/// are taken `batch` at a time, copied into a small buffer (lane `j` of the buffer holds matrix
/// index `j` of every group of the batch, real parts apart from imaginary parts), multiplied by
/// the matrix with the batch as the vector dimension (each complex multiply-add is four fused
/// multiply-adds of a broadcast matrix entry), and stored back. The batch's groups start at the offsets `sub` from
/// a base; bases are walked without recomputing any index per amplitude.
struct WidePlan<T> {
    dim: usize,
    /// Groups per batch: [`WidePlan::batch`], or 1 in pieces too short for a batch.
    batch: usize,
    /// Member piece and in-piece offset of matrix index `j`.
    member: Vec<usize>,
    offset: Vec<usize>,
    /// In-piece bits that are not free for bases: the gate's in-piece targets and the bits
    /// that number a batch's groups.
    taken_mask: usize,
    /// Offsets of the batch's groups from their base (the batch index deposited on the lowest
    /// free in-piece bits).
    sub: Vec<usize>,
    /// The length of the runs of consecutive offsets in `sub` (a power of two, at most
    /// `batch`): `batch` when every lane of a batch is one contiguous slice, 8 at f32 when the
    /// lowest in-piece target is bit 3, 1 when it is bit 0.
    run: usize,
    /// Matrix entries, real and imaginary parts, row-major.
    re: Vec<T>,
    im: Vec<T>,
    /// Whether the plan runs by rows (the AVX-512 row kernels, where the CPU has them) rather
    /// than by batches of groups: a target among the bits that number a batch's groups.
    by_rows: bool,
    /// Whether the plan runs by 512-bit blocks (`avx512::WideBlocks`, where the CPU has
    /// AVX-512): f32 gates whose targets all lie above a 64-byte block.
    by_blocks: bool,
    /// For the row kernels: the in-piece target bits (the bits its bases skip), and the matrix
    /// column-major (column `c`'s entries, real and imaginary parts, contiguous).
    target_mask: usize,
    /// Whether [`wide_batches`] prefetches the lanes: when they lie in more than one piece or
    /// span [`PREFETCH_SPAN`] bytes or more (more streams than the hardware follows). Lanes
    /// within a few pages are prefetched by the hardware, and prefetching them too made a
    /// gate on qubits 4-7 20% slower.
    prefetch: bool,
    /// For the row kernels: the length of the runs of consecutive offsets in one piece that
    /// the matrix indices make (a power of two; `dim` when the targets are the lowest qubits).
    row_run: usize,
    column_re: Vec<T>,
    column_im: Vec<T>,
}

impl<T: Real> WidePlan<T> {
    /// Groups per batch: 128 bytes of amplitudes per lane, whose real parts fill one 512-bit
    /// vector (or two 256-bit ones) and imaginary parts another.
    fn batch() -> usize {
        128 / std::mem::size_of::<Amp<T>>()
    }

    /// Groups the row kernels take at once for a `dim`-lane gate: as many as make sixteen
    /// 512-bit accumulators with the row blocks they use (eight at most).
    const fn row_groups(dim: usize) -> usize {
        let g = 512 / (dim * std::mem::size_of::<T>());
        if g < 1 {
            1
        } else if g > 8 {
            8
        } else {
            g
        }
    }

    fn new(
        gate: &Prepared<T>,
        member: &[usize],
        offset: &[usize],
        low: &[usize],
        piece_len: usize,
    ) -> WidePlan<T> {
        assert!(
            gate.positions.len() <= MAX_GATE_QUBITS,
            "gates on more than {MAX_GATE_QUBITS} qubits are not supported"
        );
        let batch = if (piece_len >> low.len()) >= Self::batch() {
            Self::batch()
        } else {
            1
        };
        let low_mask: usize = low.iter().map(|&p| 1 << p).sum();
        let sub: Vec<usize> = (0..batch).map(|v| insert_zeros(v, low)).collect();
        let batch_mask = sub[batch - 1];
        let dim = 1 << gate.positions.len();
        let run = contiguous_run(&sub);
        let row_run = (0..=gate.positions.len())
            .rev()
            .map(|b| 1usize << b)
            .find(|&run| {
                (0..dim).all(|j| {
                    let head = j - j % run;
                    member[j] == member[head] && offset[j] == offset[head] + j % run
                })
            })
            .unwrap_or(1);
        let by_rows = run < batch
            && (run == 1 || row_run >= 4)
            && dim * std::mem::size_of::<T>() >= 64
            && (piece_len >> low.len()) >= Self::row_groups(dim);
        let by_column = |part: usize| -> Vec<T> {
            (0..dim * dim)
                .map(|i| gate.matrix[(i % dim) * dim + i / dim][part])
                .collect()
        };
        WidePlan {
            dim,
            batch,
            member: member.to_vec(),
            offset: offset.to_vec(),
            taken_mask: low_mask | batch_mask,
            run,
            sub,
            re: gate.matrix.iter().map(|a| a[0]).collect(),
            im: gate.matrix.iter().map(|a| a[1]).collect(),
            by_rows,
            // At f32 only: in cache on one thread (ns per amplitude, batch kernel against
            // blocks) 4 qubits on 3, 7, 11, 15 1.03 against 0.75, on 4-7 1.00 against 0.77,
            // 5 qubits 1.62 against 1.34, 3 qubits on 4-6 0.69 against 0.47; at f64 within
            // 10% either way in cache and twice as slow far beyond it.
            by_blocks: std::mem::size_of::<T>() == 4
                && !by_rows
                && dim >= 8
                && piece_len >= 8
                && gate.positions.iter().all(|&p| p >= 3),
            target_mask: low_mask,
            row_run,
            prefetch: member.iter().any(|&m| m != member[0])
                || offset
                    .iter()
                    .max()
                    .map_or(0, |&o| o * std::mem::size_of::<Amp<T>>())
                    >= PREFETCH_SPAN,
            column_re: by_column(0),
            column_im: by_column(1),
        }
    }
}

/// The longest power-of-two run length `r` such that `sub` is made of runs of `r` consecutive
/// offsets, each starting at a multiple of `r` in `sub`.
fn contiguous_run(sub: &[usize]) -> usize {
    let mut run = sub.len();
    while run > 1
        && !sub
            .iter()
            .enumerate()
            .all(|(v, &s)| s == sub[v - v % run] + v % run)
    {
        run /= 2;
    }
    run
}

/// A precision's wide-plan dispatcher: the kernel for the plan's dimension, in batches of
/// `$batch` groups (a vector of reals) or of one.
macro_rules! run_wide {
    ($(#[$attr:meta])* fn $name:ident: $real:ty, batch $batch:literal) => {
        multiversioned! {
            $(#[$attr])*
            fn $name(group: &mut [&mut [Amp<$real>]], plan: &WidePlan<$real>) {
                type T = $real;
                let c = plan.run;
                // Accumulators: 2 x rows x batch reals. AVX-512's 32 registers hold 8 vectors of
                // them and room for the lanes and broadcasts; AVX2's 16 hold 8 half-size ones.
                const WIDE_ROWS: usize = if selected_target!().supports_feature_str("avx512f") {
                    4
                } else {
                    2
                };
                match (plan.dim, plan.batch) {
                    (2, $batch) => wide::<T, 2, { rows(2, WIDE_ROWS) }, $batch>(group, plan, c),
                    (4, $batch) => wide::<T, 4, { rows(4, WIDE_ROWS) }, $batch>(group, plan, c),
                    (8, $batch) => wide::<T, 8, { rows(8, WIDE_ROWS) }, $batch>(group, plan, c),
                    (16, $batch) => wide::<T, 16, { rows(16, WIDE_ROWS) }, $batch>(group, plan, c),
                    (32, $batch) => wide::<T, 32, { rows(32, WIDE_ROWS) }, $batch>(group, plan, c),
                    (64, $batch) => wide::<T, 64, { rows(64, WIDE_ROWS) }, $batch>(group, plan, c),
                    (2, 1) => wide::<T, 2, { rows(2, 4) }, 1>(group, plan, c),
                    (4, 1) => wide::<T, 4, { rows(4, 4) }, 1>(group, plan, c),
                    (8, 1) => wide::<T, 8, { rows(8, 4) }, 1>(group, plan, c),
                    (16, 1) => wide::<T, 16, { rows(16, 4) }, 1>(group, plan, c),
                    (32, 1) => wide::<T, 32, { rows(32, 4) }, 1>(group, plan, c),
                    (64, 1) => wide::<T, 64, { rows(64, 4) }, 1>(group, plan, c),
                    other => unreachable!(
                        "wide plans have 2 to 64 lanes and batches of 1 or {}, not {other:?}",
                        $batch
                    ),
                }
            }
        }
    };
}

run_wide! {
    /// Dispatch an f32 wide plan to the kernel for its dimension, compiled for several vector
    /// extensions (the widest the CPU has runs).
    fn run_wide_f32: f32, batch 16
}
run_wide! {
    /// Dispatch an f64 wide plan; as [`run_wide_f32`].
    fn run_wide_f64: f64, batch 8
}

/// The wide kernel: `D` lanes, `R` output rows computed at once, batches of `V` groups.
///
/// A batch is held split, as qsim holds its state: `xr[j]` the real parts of lane `j`'s `V`
/// amplitudes and `xi[j]` their imaginary parts, so that the complex multiply-add of one matrix
/// entry `(a, b)` (broadcast) into `V` outputs is four whole-vector fused multiply-adds:
/// `re += a xr - b xi`, `im += a xi + b xr`. With `V` reals filling one 256-bit vector, the
/// `2R` accumulators, two lanes and two broadcasts fit AVX2's sixteen registers. (Interleaved
/// `(re, im)` lanes needed a turned copy of every lane, and LLVM split their multiply-adds into
/// 128-bit ones: a 3-qubit gate ran at a third of the machine's bound.)
#[inline(always)]
fn wide<T: Real, const D: usize, const R: usize, const V: usize>(
    group: &mut [&mut [Amp<T>]],
    plan: &WidePlan<T>,
    run: usize,
) {
    // Runs of 8 amplitudes (one 512-bit vector at f32, the lowest target at bit 3) are
    // copied a run at a time; shorter runs amplitude by amplitude.
    // Prefetching is a separate version: the bookkeeping for it slowed gates whose lanes the
    // hardware prefetches (qubits 4-7 at f64: 1.9 against 1.65 ns per amplitude).
    match (run >= V, V > 8 && run >= 8, plan.prefetch) {
        (true, _, true) => wide_batches::<T, D, R, V, V, true>(group, plan),
        (true, _, false) => wide_batches::<T, D, R, V, V, false>(group, plan),
        (false, true, true) => wide_batches::<T, D, R, V, 8, true>(group, plan),
        (false, true, false) => wide_batches::<T, D, R, V, 8, false>(group, plan),
        (false, false, _) => wide_batches::<T, D, R, V, 1, false>(group, plan),
    }
}

/// How many batches ahead [`wide_batches`] prefetches.
const PREFETCH_AHEAD: usize = 2;

/// The span of a batch's lanes from which [`wide_batches`] prefetches them.
const PREFETCH_SPAN: usize = 16 << 10;

/// Software prefetch of the cache lines of a slice, where the CPU has it (x86-64: always).
/// In a state far larger than the caches, a wide gate with targets far apart reads its lanes as
/// `2^k` separate streams, more than the hardware prefetchers follow: without this a 5-qubit
/// gate on qubits 3, 7, 11, 15, 19 ran at half its in-cache speed. `_mm_prefetch` through
/// pulp's SSE token is a safe call (a prefetch never faults; the address is only a hint).
#[derive(Clone, Copy)]
struct Prefetch {
    #[cfg(target_arch = "x86_64")]
    sse: Option<pulp::x86::V1>,
}

impl Prefetch {
    #[inline(always)]
    fn new() -> Prefetch {
        Prefetch {
            #[cfg(target_arch = "x86_64")]
            sse: pulp::x86::V1::try_new(),
        }
    }

    #[inline(always)]
    fn lines<T>(&self, slice: &[T]) {
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = self.sse {
            let bytes = std::mem::size_of_val(slice);
            let start = slice.as_ptr().cast::<i8>();
            let mut at = 0;
            while at < bytes {
                simd.sse
                    ._mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(start.wrapping_add(at));
                at += 64;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slice;
    }
}

#[inline(always)]
fn wide_batches<
    T: Real,
    const D: usize,
    const R: usize,
    const V: usize,
    const RUN: usize,
    const PREFETCH: bool,
>(
    group: &mut [&mut [Amp<T>]],
    plan: &WidePlan<T>,
) {
    // Every lane of a batch one slice.
    let contiguous = RUN == V;
    let member: [usize; D] = std::array::from_fn(|j| plan.member[j]);
    let offset: [usize; D] = std::array::from_fn(|j| plan.offset[j]);
    let sub: [usize; V] = std::array::from_fn(|v| plan.sub[v]);
    let re = &plan.re[..D * D];
    let im = &plan.im[..D * D];
    let taken = plan.taken_mask;
    let piece_len = group[0].len();
    let mut xr = [[T::default(); V]; D];
    let mut xi = [[T::default(); V]; D];
    let prefetch = Prefetch::new();
    let mut base = 0usize;
    // The batch PREFETCH_AHEAD batches on, whose lanes are prefetched while this one runs.
    let mut ahead = base;
    if PREFETCH {
        for _ in 0..PREFETCH_AHEAD {
            ahead = ((ahead | taken) + 1) & !taken;
        }
    }
    while base < piece_len {
        if PREFETCH {
            if ahead < piece_len {
                for j in 0..D {
                    let lane = &group[member[j]];
                    for i in (0..V).step_by(RUN) {
                        prefetch.lines(&lane[ahead + offset[j] + sub[i]..][..RUN]);
                    }
                }
            }
            ahead = ((ahead | taken) + 1) & !taken;
        }
        for j in 0..D {
            // An opaque no-op: each lane's copy is vectorised over its amplitudes. Without it,
            // with 16 lanes of f32 (a 512-bit vector's worth), LLVM vectorised across lanes
            // with gathers and scatters, and a 4-qubit gate ran 15 times slower.
            std::hint::black_box(());
            let piece = &group[member[j]];
            let at = base + offset[j];
            if contiguous {
                let amps: &[Amp<T>; V] = piece[at..at + V]
                    .try_into()
                    .expect("a batch lies inside its piece");
                for v in 0..V {
                    xr[j][v] = amps[v][0];
                    xi[j][v] = amps[v][1];
                }
            } else {
                // Gathered into a contiguous copy first, then split as above. Split straight
                // from the scattered amplitudes, LLVM built each vector from 64-bit pieces
                // through the stack, and a 4-qubit f32 gate ran 15 times slower.
                // A run at a time: with runs of 8 (the lowest target at bit 3), a 3-qubit f32
                // gate copied amplitude by amplitude ran at a third of the bound.
                let mut amps = [[T::default(); 2]; V];
                for (i, chunk) in amps.chunks_exact_mut(RUN).enumerate() {
                    let from = at + sub[i * RUN];
                    let src: &[Amp<T>; RUN] = piece[from..from + RUN]
                        .try_into()
                        .expect("a run lies inside its piece");
                    chunk.copy_from_slice(src);
                }
                std::hint::black_box(&mut amps);
                for v in 0..V {
                    xr[j][v] = amps[v][0];
                    xi[j][v] = amps[v][1];
                }
            }
        }
        // Opaque: the lanes are then read from memory, a whole vector at a time.
        std::hint::black_box((&mut xr, &mut xi));
        let mut r0 = 0;
        while r0 < D {
            let mut acc_re = [[T::default(); V]; R];
            let mut acc_im = [[T::default(); V]; R];
            // An opaque column count: the loop over the matrix's columns stays a loop whose
            // body is 4R whole-vector multiply-adds. Unrolled over the columns of an 8- or
            // 16-lane f32 gate, LLVM vectorised it 128 bits wide, 20 times slower.
            let columns = std::hint::black_box(D);
            let rows: [&[T]; R] = std::array::from_fn(|rr| &re[(r0 + rr) * D..][..D]);
            let rows_im: [&[T]; R] = std::array::from_fn(|rr| &im[(r0 + rr) * D..][..D]);
            for c in 0..columns.min(D) {
                let (xrc, xic) = (&xr[c], &xi[c]);
                for rr in 0..R {
                    let (a, b) = (rows[rr][c], rows_im[rr][c]);
                    for v in 0..V {
                        acc_re[rr][v] = a.mul_add(xrc[v], acc_re[rr][v]);
                        acc_im[rr][v] = a.mul_add(xic[v], acc_im[rr][v]);
                    }
                    for v in 0..V {
                        acc_re[rr][v] = (-b).mul_add(xic[v], acc_re[rr][v]);
                        acc_im[rr][v] = b.mul_add(xrc[v], acc_im[rr][v]);
                    }
                }
            }
            for rr in 0..R {
                let r = r0 + rr;
                let piece = &mut group[member[r]];
                let at = base + offset[r];
                if contiguous {
                    let amps: &mut [Amp<T>; V] = (&mut piece[at..at + V])
                        .try_into()
                        .expect("a batch lies inside its piece");
                    for v in 0..V {
                        amps[v] = [acc_re[rr][v], acc_im[rr][v]];
                    }
                } else {
                    let mut amps = [[T::default(); 2]; V];
                    for v in 0..V {
                        amps[v] = [acc_re[rr][v], acc_im[rr][v]];
                    }
                    std::hint::black_box(&mut amps);
                    for (i, chunk) in amps.chunks_exact(RUN).enumerate() {
                        let to = at + sub[i * RUN];
                        piece[to..to + RUN].copy_from_slice(chunk);
                    }
                }
            }
            r0 += R;
        }
        // The next base: count up in the free bits only.
        base = ((base | taken) + 1) & !taken;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates;

    /// A dense reference: apply a matrix on bit positions to a whole state vector.
    fn reference(state: &[Amp<f64>], m: &Matrix, pos: &[usize]) -> Vec<Amp<f64>> {
        let mut out = vec![[0.0; 2]; state.len()];
        let mask: usize = pos.iter().map(|p| 1 << p).sum();
        for (i, o) in out.iter_mut().enumerate() {
            let r: usize = pos
                .iter()
                .enumerate()
                .map(|(b, p)| ((i >> p) & 1) << b)
                .sum();
            for c in 0..m.dim() {
                let j = (i & !mask)
                    | pos
                        .iter()
                        .enumerate()
                        .map(|(b, p)| ((c >> b) & 1) << p)
                        .sum::<usize>();
                let a = m.at(r, c);
                o[0] += a.re * state[j][0] - a.im * state[j][1];
                o[1] += a.re * state[j][1] + a.im * state[j][0];
            }
        }
        out
    }

    fn check<T: Real>(tolerance: f64) {
        let n = 7;
        let state: Vec<Amp<f64>> = (0..1 << n)
            .map(|i| [((i * 7) % 11) as f64 - 5.0, ((i * 3) % 5) as f64])
            .collect();
        let dense2 = gates::controlled(&gates::u3(0.3, 0.2, 0.9), 1)
            .times(&gates::u3(1.1, -0.4, 2.0).expand(&[0], &[0, 1]));
        let m3 = gates::controlled(&gates::u3(0.3, 0.2, 0.9), 2)
            .times(&gates::u3(0.7, 0.1, -1.3).expand(&[1], &[0, 1, 2]));
        let mut cases: Vec<(Matrix, Vec<usize>)> = vec![
            (gates::controlled(&gates::x(), 4), vec![0, 6, 2, 5, 3]),
            (gates::controlled(&gates::x(), 3), vec![1, 6, 2, 5]),
        ];
        for a in 0..n {
            cases.push((gates::u3(1.0, 2.0, 3.0), vec![a]));
            for b in 0..n {
                if a != b {
                    cases.push((dense2.clone(), vec![a, b]));
                }
            }
        }
        for pos in [
            [0, 1, 2],
            [2, 1, 0],
            [4, 1, 6],
            [6, 5, 4],
            [0, 3, 6],
            [1, 2, 5],
            [3, 0, 4],
            [5, 6, 1],
        ] {
            cases.push((m3.clone(), pos.to_vec()));
        }
        for (m, pos) in cases {
            let want = reference(&state, &m, &pos);
            for piece_bits in [n, 5, 3, 2, 1] {
                let mut s: Vec<Amp<T>> = state
                    .iter()
                    .map(|a| [T::from_f64(a[0]), T::from_f64(a[1])])
                    .collect();
                {
                    let mut pieces: Vec<&mut [Amp<T>]> = s.chunks_mut(1 << piece_bits).collect();
                    apply(&mut pieces, piece_bits, &Prepared::new(&m, pos.clone()));
                }
                for (a, b) in s.iter().zip(&want) {
                    assert!(
                        (a[0].to_f64() - b[0]).abs() < tolerance
                            && (a[1].to_f64() - b[1]).abs() < tolerance,
                        "{} {pos:?} {piece_bits}",
                        T::NAME
                    );
                }
            }
        }
    }

    /// Every gate of two and three qubits on the low nine bits whose targets include a lane
    /// bit just above the block (bits 2 and 3 at f32, 1 and 2 at f64), so that the tiled
    /// kernel runs, against the dense reference, whole and split into pieces.
    fn check_tiled<T: Real>(tolerance: f64) {
        let n = 9;
        let block_bits = BlockPlan::<T>::block().trailing_zeros() as usize;
        let short = [block_bits, block_bits + 1];
        let state: Vec<Amp<f64>> = (0..1 << n)
            .map(|i| {
                [
                    ((i * 13) % 17) as f64 / 8.0 - 1.0,
                    ((i * 5) % 7) as f64 / 4.0,
                ]
            })
            .collect();
        let m2 = gates::controlled(&gates::u3(0.4, -0.7, 1.9), 1)
            .times(&gates::u3(2.1, 0.5, -0.3).expand(&[1], &[0, 1]));
        let m3 = gates::controlled(&gates::u3(1.3, 0.6, -2.2), 1)
            .expand(&[0, 2], &[0, 1, 2])
            .times(&m2.expand(&[1, 0], &[0, 1, 2]));
        let mut cases: Vec<(Matrix, Vec<usize>)> = Vec::new();
        for a in 0..n {
            for b in 0..n {
                if a != b && (short.contains(&a) || short.contains(&b)) {
                    cases.push((m2.clone(), vec![a, b]));
                    for c in 0..n {
                        if c != a && c != b && a < b {
                            cases.push((m3.clone(), vec![a, b, c]));
                        }
                    }
                }
            }
        }
        let mut tiled_cases = 0;
        for (m, pos) in cases {
            let want = reference(&state, &m, &pos);
            for piece_bits in [n, 5, 4] {
                let gate = Prepared::<T>::new(&m, pos.clone());
                let in_piece: Vec<usize> = gate
                    .positions
                    .iter()
                    .copied()
                    .filter(|&p| p >= block_bits && p < piece_bits)
                    .collect();
                if in_piece.first().is_some_and(|p| short.contains(p)) {
                    tiled_cases += 1;
                }
                let s: Vec<Amp<T>> = state
                    .iter()
                    .map(|a| [T::from_f64(a[0]), T::from_f64(a[1])])
                    .collect();
                // As chosen (the 512-bit kernels where the CPU has them), and by the 256-bit
                // block kernels, whose tiles this is about.
                for route in [Route::Chosen, Route::Blocks256] {
                    let mut s = s.clone();
                    {
                        let mut pieces: Vec<&mut [Amp<T>]> =
                            s.chunks_mut(1 << piece_bits).collect();
                        apply_serial_routed(&mut pieces, piece_bits, &gate, route);
                    }
                    for (i, (a, b)) in s.iter().zip(&want).enumerate() {
                        assert!(
                            (a[0].to_f64() - b[0]).abs() < tolerance
                                && (a[1].to_f64() - b[1]).abs() < tolerance,
                            "{} {pos:?} pieces of 2^{piece_bits} by {route:?}: amplitude {i} \
                             is {:?}, want {b:?}",
                            T::NAME,
                            [a[0].to_f64(), a[1].to_f64()]
                        );
                    }
                }
            }
        }
        assert!(
            tiled_cases > 100,
            "only {tiled_cases} cases reach the tiled kernel"
        );
    }

    /// Every gate width the kernels take (1 to [`MAX_GATE_QUBITS`] qubits), each with a random
    /// dense matrix (not unitary: every entry counts, and a kernel that dropped or swapped
    /// one could not pass) on random positions of a 10-qubit random state, against the dense
    /// reference, whole and split into pieces so that the gate's qubits fall inside pieces,
    /// across pieces, and in pieces too short for a batch of groups.
    /// Runs `apply` on `state` (converted to `T`) cut into pieces of 2^`piece_bits` amplitudes
    /// and compares every amplitude with `want`, the reference result of a `dim`-square gate on
    /// `pos`.
    fn check_in_pieces<T: Real>(
        state: &[Amp<f64>],
        want: &[Amp<f64>],
        piece_bits: usize,
        tolerance: f64,
        dim: usize,
        pos: &[usize],
        apply: impl FnOnce(&mut [&mut [Amp<T>]]),
    ) {
        let mut s: Vec<Amp<T>> = state
            .iter()
            .map(|a| [T::from_f64(a[0]), T::from_f64(a[1])])
            .collect();
        {
            let mut pieces: Vec<&mut [Amp<T>]> = s.chunks_mut(1 << piece_bits).collect();
            apply(&mut pieces);
        }
        // Entries and amplitudes are at most 1, so an output is at most 2^k * 2.
        let scale = (2 * dim) as f64;
        for (i, (a, b)) in s.iter().zip(want).enumerate() {
            assert!(
                (a[0].to_f64() - b[0]).abs() < tolerance * scale
                    && (a[1].to_f64() - b[1]).abs() < tolerance * scale,
                "{} {pos:?} pieces of 2^{piece_bits}: amplitude {i} is {:?}, want {b:?}",
                T::NAME,
                [a[0].to_f64(), a[1].to_f64()]
            );
        }
    }

    fn check_random_matrices<T: Real>(tolerance: f64) {
        use rand::seq::SliceRandom;
        use rand::{Rng, SeedableRng};
        let n = 10;
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_4b17);
        let state: Vec<Amp<f64>> = (0..1 << n)
            .map(|_| [rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0)])
            .collect();
        let mut wide_batches = 0;
        let mut single_groups = 0;
        for k in 1..=MAX_GATE_QUBITS {
            let dim = 1 << k;
            for trial in 0..12 {
                let entries = (0..dim * dim)
                    .map(|_| {
                        gates::Complex::new(
                            rng.random_range(-1.0..1.0),
                            rng.random_range(-1.0..1.0),
                        )
                    })
                    .collect();
                let m = Matrix::from_rows(k, entries);
                // The lowest qubits (inside the vector), the highest, and random ones.
                let mut pos: Vec<usize> = match trial {
                    0 => (0..k).collect(),
                    1 => (n - k..n).collect(),
                    _ => {
                        let mut all: Vec<usize> = (0..n).collect();
                        all.shuffle(&mut rng);
                        all[..k].to_vec()
                    }
                };
                if trial % 2 == 1 {
                    pos.reverse();
                }
                let want = reference(&state, &m, &pos);
                for piece_bits in [n, 7, 5, 3, 1] {
                    let gate = Prepared::<T>::new(&m, pos.clone());
                    let low = gate.positions.iter().filter(|&&p| p < piece_bits).count();
                    if (1usize << piece_bits >> low) >= WidePlan::<T>::batch() {
                        wide_batches += 1;
                    } else {
                        single_groups += 1;
                    }
                    check_in_pieces::<T>(&state, &want, piece_bits, tolerance, dim, &pos, |p| {
                        apply(p, piece_bits, &gate)
                    });
                    // The block kernels' streamed paths, and the 256-bit block kernels, which
                    // the CPUs with AVX-512 skip.
                    if k <= 3 && (1usize << piece_bits) >= BlockPlan::<T>::block() {
                        for route in [Route::BlocksStreamed, Route::Blocks256] {
                            check_in_pieces::<T>(
                                &state,
                                &want,
                                piece_bits,
                                tolerance,
                                dim,
                                &pos,
                                |p| apply_serial_routed(p, piece_bits, &gate, route),
                            );
                        }
                    }
                }
            }
        }
        assert!(
            wide_batches > 50 && single_groups > 20,
            "batches {wide_batches}, single groups {single_groups}"
        );
    }

    /// Wide gates with a target among the bits that number a batch's groups are planned by
    /// rows (the batch kernel would gather them amplitude by amplitude), with the runs of
    /// consecutive amplitudes the row kernels copy at once; the others by batches. (The
    /// amplitudes of both are checked against the reference by `random_matrices_*`, which
    /// run these layouts.)
    #[test]
    fn wide_gates_on_low_targets_are_planned_by_rows() {
        fn plan<T: Real>(positions: &[usize], n: usize) -> WidePlan<T> {
            let gate = Prepared::<T>::new(
                &crate::bench::dense_gate(positions.len()),
                positions.to_vec(),
            );
            let dim = 1 << positions.len();
            let offset: Vec<usize> = (0..dim).map(|j| deposit(j, &gate.positions)).collect();
            WidePlan::new(&gate, &vec![0; dim], &offset, &gate.positions, 1 << n)
        }
        let rows = |p: &WidePlan<f64>| (p.by_rows, p.row_run);
        assert_eq!(rows(&plan::<f64>(&[0, 1, 2, 3, 4], 12)), (true, 32));
        assert_eq!(rows(&plan::<f64>(&[4, 0, 2, 1, 3], 12)), (true, 32));
        assert_eq!(rows(&plan::<f64>(&[0, 1, 2, 7, 9], 12)), (true, 8));
        assert_eq!(rows(&plan::<f64>(&[0, 5, 9, 11], 12)), (true, 2));
        assert!(!plan::<f64>(&[3, 7, 11, 15], 16).by_rows);
        assert!(plan::<f32>(&[0, 1, 2, 3], 12).by_rows);
        // At f32 a batch spans bits 0-3: with the lowest target at bit 3 the batch kernel
        // copies runs of 8, faster than rows of single amplitudes.
        assert!(!plan::<f32>(&[3, 7, 11, 15], 16).by_rows);
        // There it goes by 512-bit blocks; at f64 by batches.
        assert!(plan::<f32>(&[3, 7, 11, 15], 16).by_blocks);
        assert!(plan::<f32>(&[4, 5, 6], 12).by_blocks);
        assert!(!plan::<f32>(&[2, 7, 11, 15], 16).by_blocks);
        assert!(!plan::<f64>(&[3, 7, 11, 15], 16).by_blocks);
        // Rows of fewer reals than a vector stay in the batch kernel.
        assert!(!plan::<f32>(&[0, 1, 2], 12).by_rows);
        // A piece too short for the row kernels' groups.
        assert!(!plan::<f64>(&[0, 1, 2, 3, 4, 5], 6).by_rows);
    }

    /// Gates of up to three qubits take the 512-bit block kernels where the CPU has AVX-512,
    /// whether their targets lie above a 64-byte block or inside it; wider gates do not. (Their amplitudes are checked by the tests above, which run
    /// such layouts.)
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn gates_of_up_to_three_qubits_take_the_512_bit_kernels_where_the_cpu_has_them() {
        fn zmm<T: Real>(positions: &[usize]) -> bool {
            let gate = Prepared::<T>::new(
                &crate::bench::dense_gate(positions.len()),
                positions.to_vec(),
            );
            let dim = 1 << positions.len();
            let offset: Vec<usize> = (0..dim).map(|j| deposit(j, &gate.positions)).collect();
            avx512::ZmmPlan::new(&gate, &vec![0; dim], &offset, 1 << 10, false).is_some()
        }
        let has = pulp::x86::V4::try_new().is_some();
        assert_eq!(zmm::<f32>(&[3, 7]), has);
        assert_eq!(zmm::<f32>(&[9, 4, 3]), has);
        assert_eq!(zmm::<f32>(&[5]), has);
        assert_eq!(zmm::<f32>(&[2, 7]), has);
        assert_eq!(zmm::<f32>(&[0]), has);
        assert_eq!(zmm::<f32>(&[0, 1, 2]), has);
        assert_eq!(zmm::<f32>(&[1, 2, 9]), has);
        assert_eq!(zmm::<f64>(&[2, 5]), has);
        assert_eq!(zmm::<f64>(&[1, 5]), has);
        assert_eq!(zmm::<f64>(&[0, 1]), has);
        assert_eq!(zmm::<f64>(&[0, 1, 4]), has);
        assert_eq!(zmm::<f64>(&[5]), has);
        assert_eq!(zmm::<f64>(&[0]), has);
        assert!(!zmm::<f32>(&[3, 4, 5, 6]));
    }

    /// [`uses_blocks`] sends three-qubit gates with a target among a wide batch's bits to the
    /// block kernels (the wide kernel gathered those amplitude by amplitude, at twice the
    /// time at f32), and the others to the wide kernel.
    #[test]
    fn three_qubit_gates_take_the_faster_kernel_for_their_targets() {
        assert!(uses_blocks::<f32>(&[0, 1]));
        assert!(uses_blocks::<f32>(&[0, 1, 2]));
        assert!(uses_blocks::<f32>(&[3, 9, 12]));
        assert!(!uses_blocks::<f32>(&[4, 5, 6]));
        assert!(uses_blocks::<f64>(&[2, 5, 6]));
        assert!(!uses_blocks::<f64>(&[3, 4, 5]));
        assert!(!uses_blocks::<f64>(&[0, 1, 2, 3]));
    }

    /// Where the CPU has AVX-512, three-qubit gates above a batch's bits take the 512-bit block
    /// kernels in cache, and streamed while their lanes lie within 64 KiB of one piece; the
    /// wide kernel keeps lanes further apart. Without AVX-512 the wide kernel keeps them all.
    #[test]
    fn three_qubit_gates_above_the_batch_take_the_512_bit_kernels_where_they_are_faster() {
        #[cfg(target_arch = "x86_64")]
        let has = pulp::x86::V4::try_new().is_some();
        #[cfg(not(target_arch = "x86_64"))]
        let has = false;
        assert_eq!(zmm_blocks_beat_wide::<f64>(&[3, 7, 11], 20, false), has);
        assert_eq!(zmm_blocks_beat_wide::<f64>(&[3, 7, 11], 20, true), has);
        assert_eq!(zmm_blocks_beat_wide::<f64>(&[4, 9, 14], 20, false), has);
        assert!(!zmm_blocks_beat_wide::<f64>(&[4, 9, 14], 20, true));
        assert_eq!(zmm_blocks_beat_wide::<f32>(&[4, 8, 12], 20, true), has);
        assert!(!zmm_blocks_beat_wide::<f32>(&[5, 10, 15], 20, true));
        // Lanes in other pieces.
        assert!(!zmm_blocks_beat_wide::<f32>(&[4, 5, 12], 10, true));
        assert!(!zmm_blocks_beat_wide::<f64>(&[3, 7], 20, false));
        assert!(!zmm_blocks_beat_wide::<f64>(&[3, 7, 11, 15], 20, false));
    }

    /// Time both kernels on three-qubit layouts among the lowest qubits and check that the
    /// chosen one is within 25% of the faster (a timing, so run on demand, in release:
    /// `cargo test --release -p cxltier-qsim -- --ignored --nocapture route_timings`).
    #[test]
    #[ignore]
    // The timings are the point of running it.
    #[allow(clippy::print_stdout)]
    fn route_timings() {
        fn time<T: Real>() {
            let n = 14;
            let mut state: Vec<Amp<T>> = (0..1usize << n)
                .map(|i| [T::from_f64((i % 13) as f64 * 1e-3), T::from_f64(1e-3)])
                .collect();
            let mut pieces: Vec<&mut [Amp<T>]> = state.chunks_mut(1 << 10).collect();
            let m = crate::bench::dense_gate(3);
            let mut layouts = vec![];
            for a in 0..6 {
                for b in a + 1..7 {
                    for c in [b + 1, 9, 12] {
                        if c > b && c < n {
                            layouts.push(vec![a, b, c]);
                        }
                    }
                }
            }
            for pos in layouts {
                let gate = Prepared::<T>::new(&m, pos.clone());
                let mut best = [f64::INFINITY; 2];
                for _ in 0..9 {
                    for (i, route) in [Route::Blocks, Route::Wide].into_iter().enumerate() {
                        let t = std::time::Instant::now();
                        apply_serial_routed(&mut pieces, 10, &gate, route);
                        best[i] = best[i].min(t.elapsed().as_secs_f64() * 1e9 / (1 << n) as f64);
                    }
                }
                println!(
                    "{} {:?} blocks {:.3} wide {:.3} ns",
                    T::NAME,
                    pos,
                    best[0],
                    best[1]
                );
                let chosen = if uses_blocks::<T>(&pos) {
                    best[0]
                } else {
                    best[1]
                };
                assert!(
                    chosen <= 1.25 * best[0].min(best[1]),
                    "{pos:?} at {}: blocks {:.3}, wide {:.3} ns",
                    T::NAME,
                    best[0],
                    best[1]
                );
            }
        }
        time::<f32>();
        time::<f64>();
    }

    /// Each copy path of the wide kernel (whole lanes, runs of 8, single amplitudes), for every
    /// gate width from 3 to 5 qubits, equals the reference on random matrices at both
    /// precisions: targets from bit 4 up (contiguous lanes at f32 and f64), from bit 3 (runs
    /// of 8 at f32, whole lanes at f64), and from bit 0 (single amplitudes).
    fn check_wide_copy_paths<T: Real>(tolerance: f64) {
        use rand::{Rng, SeedableRng};
        let n = 14;
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x0c0f_fee5);
        let state: Vec<Amp<f64>> = (0..1 << n)
            .map(|_| [rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0)])
            .collect();
        let batch = WidePlan::<T>::batch();
        for k in 3..=5 {
            let dim = 1 << k;
            let entries = (0..dim * dim)
                .map(|_| {
                    gates::Complex::new(rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0))
                })
                .collect();
            let m = Matrix::from_rows(k, entries);
            for (lowest, run) in [(4, batch), (3, batch.min(8)), (0, 1)] {
                // Spread targets: the lowest at `lowest`, the others two bits apart.
                let pos: Vec<usize> = (0..k).map(|i| lowest + 2 * i).collect();
                let want = reference(&state, &m, &pos);
                for piece_bits in [n, 10] {
                    let gate = Prepared::<T>::new(&m, pos.clone());
                    let low: Vec<usize> = pos.iter().copied().filter(|&p| p < piece_bits).collect();
                    let sub: Vec<usize> = (0..batch).map(|v| insert_zeros(v, &low)).collect();
                    assert_eq!(contiguous_run(&sub), run, "{} {pos:?}", T::NAME);
                    check_in_pieces::<T>(&state, &want, piece_bits, tolerance, dim, &pos, |p| {
                        apply_serial_routed(p, piece_bits, &gate, Route::Wide)
                    });
                }
            }
        }
    }

    #[test]
    fn every_wide_copy_path_matches_the_reference() {
        check_wide_copy_paths::<f64>(1e-13);
        check_wide_copy_paths::<f32>(1e-5);
    }

    #[test]
    fn every_gate_width_matches_the_reference_on_random_matrices() {
        check_random_matrices::<f64>(1e-13);
        check_random_matrices::<f32>(1e-5);
    }

    #[test]
    fn the_tiled_kernel_matches_the_reference() {
        check_tiled::<f64>(1e-12);
        check_tiled::<f32>(1e-4);
    }

    #[test]
    fn matches_the_reference_for_any_positions_and_piece_split() {
        check::<f64>(1e-12);
        check::<f32>(1e-4);
    }
}
