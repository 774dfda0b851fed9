//! Kernels in explicit AVX-512, for the layouts where LLVM's vectoriser does poorly.
//!
//! - *Rows* ([`rows`]): gates of 4-6 qubits with a target among the bits that number a batch's
//!   groups (where the batch kernel gathers every amplitude on its own). `G` groups at a time:
//!   each group's `D` outputs are computed as vectors of rows, `out += column_c * x_c` for every
//!   column `c` of the matrix (the column's entries contiguous, the group's amplitude `x_c`
//!   broadcast), so every amplitude is read once as a scalar and written once, and nothing is
//!   gathered. LLVM, given the same loops in plain Rust, vectorised them with 128-bit
//!   multiply-adds, gathers and scatters (a 4-qubit gate ran 20 to 40 times slower than this).
//! - *512-bit blocks* ([`blocks`], [`blocks_low`]): gates of up to three qubits, by the block
//!   kernels' method on whole 512-bit vectors (LLVM keeps the generic block kernels at 256 bits
//!   on these CPUs); targets inside a 64-byte vector are mixed by lane-crossing permutations.
//!
//! Safe code: the intrinsics are methods of `pulp`'s AVX-512 token, which exists only on a CPU
//! that has the features, and vectors go in and out of slices through `bytemuck`, never through
//! raw pointers. One generic kernel serves both precisions through [`Zmm`].

use core::arch::x86_64::{__m512, __m512d};

use pulp::core_arch::x86::Avx512f;
use pulp::x86::V4;

use super::{Amp, Real, WidePlan};

/// One precision's 512-bit vector and the operations the kernels use on it.
pub(super) trait Zmm: Real {
    /// The vector.
    type V: Copy;
    /// A vector's reals in memory: the unit the block kernel indexes the state by.
    type Block: bytemuck::Pod;
    /// Reals per vector.
    const REALS: usize;
    fn zero(f: Avx512f) -> Self::V;
    fn splat(f: Avx512f, x: Self) -> Self::V;
    /// The vector of the first [`Zmm::REALS`] reals of `reals`.
    fn load(reals: &[Self]) -> Self::V;
    /// The vector's reals into the first [`Zmm::REALS`] of `out`.
    fn store(v: Self::V, out: &mut [Self]);
    fn load_block(block: &Self::Block) -> Self::V;
    fn store_block(v: Self::V, out: &mut Self::Block);
    fn vadd(f: Avx512f, a: Self::V, b: Self::V) -> Self::V;
    fn vmul(f: Avx512f, a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c`.
    fn fmadd(f: Avx512f, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `c - a * b`.
    fn fnmadd(f: Avx512f, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// Each amplitude's real and imaginary parts exchanged.
    fn swap(f: Avx512f, v: Self::V) -> Self::V;
    /// The rows' real parts `re` and imaginary parts `im` as amplitudes, into the first
    /// `2 REALS` reals of `out` (two permutations).
    fn interleave(f: Avx512f, re: Self::V, im: Self::V, out: &mut [Self]);
    /// A permutation of a vector's amplitudes: the index of the real each real is taken from.
    type Index: bytemuck::Pod;
    /// The permutation taking amplitude `source[e]` into amplitude `e` (both parts).
    fn index(source: &[usize]) -> Self::Index;
    /// `v` permuted by `index` (one lane-crossing permutation).
    fn permute(f: Avx512f, index: &Self::Index, v: Self::V) -> Self::V;
}

/// [`Zmm`] for one precision: its vector and block types, and the intrinsics that are the same
/// operation under each precision's name (`_ps` at f32, `_pd` at f64). What differs in more
/// than a name is given in each invocation after the intrinsics: the lane exchange's immediate,
/// and the indices of the permutations that interleave real and imaginary parts (the first
/// vector's amplitudes, then the second's).
macro_rules! impl_zmm {
    (
        $real:ident: $v:ty, $reals:literal reals, index $index:ty;
        $setzero:ident, $set1:ident, $add:ident, $mul:ident, $fmadd:ident, $fnmadd:ident,
        $permutexvar:ident;
        swap $permute:ident::<$exchange:literal>;
        interleave $permutex2var:ident by $set:ident([$($low:literal),*], [$($high:literal),*]);
    ) => {
        impl Zmm for $real {
            type V = $v;
            type Block = [$real; $reals];
            const REALS: usize = $reals;
            #[inline(always)]
            fn zero(f: Avx512f) -> $v {
                f.$setzero()
            }
            #[inline(always)]
            fn splat(f: Avx512f, x: $real) -> $v {
                f.$set1(x)
            }
            #[inline(always)]
            fn load(reals: &[$real]) -> $v {
                let reals: &[$real; $reals] =
                    reals[..$reals].try_into().expect(concat!($reals, " reals"));
                bytemuck::cast(*reals)
            }
            #[inline(always)]
            fn store(v: $v, out: &mut [$real]) {
                out[..$reals].copy_from_slice(&bytemuck::cast::<$v, [$real; $reals]>(v));
            }
            #[inline(always)]
            fn load_block(block: &[$real; $reals]) -> $v {
                bytemuck::cast(*block)
            }
            #[inline(always)]
            fn store_block(v: $v, out: &mut [$real; $reals]) {
                *out = bytemuck::cast(v);
            }
            #[inline(always)]
            fn vadd(f: Avx512f, a: $v, b: $v) -> $v {
                f.$add(a, b)
            }
            #[inline(always)]
            fn vmul(f: Avx512f, a: $v, b: $v) -> $v {
                f.$mul(a, b)
            }
            #[inline(always)]
            fn fmadd(f: Avx512f, a: $v, b: $v, c: $v) -> $v {
                f.$fmadd(a, b, c)
            }
            #[inline(always)]
            fn fnmadd(f: Avx512f, a: $v, b: $v, c: $v) -> $v {
                f.$fnmadd(a, b, c)
            }
            type Index = $index;
            fn index(source: &[usize]) -> $index {
                std::array::from_fn(|i| (2 * source[i / 2] + i % 2) as _)
            }
            #[inline(always)]
            fn permute(f: Avx512f, index: &$index, v: $v) -> $v {
                f.$permutexvar(bytemuck::cast(*index), v)
            }
            #[inline(always)]
            fn swap(f: Avx512f, v: $v) -> $v {
                f.$permute::<$exchange>(v)
            }
            #[inline(always)]
            fn interleave(f: Avx512f, re: $v, im: $v, out: &mut [$real]) {
                let low = f.$set($($low),*);
                let high = f.$set($($high),*);
                Self::store(f.$permutex2var(re, low, im), &mut out[..$reals]);
                Self::store(f.$permutex2var(re, high, im), &mut out[$reals..2 * $reals]);
            }
        }
    };
}

impl_zmm! {
    f32: __m512, 16 reals, index [i32; 16];
    _mm512_setzero_ps, _mm512_set1_ps, _mm512_add_ps, _mm512_mul_ps, _mm512_fmadd_ps,
    _mm512_fnmadd_ps, _mm512_permutexvar_ps;
    swap _mm512_permute_ps::<0b1011_0001>;
    interleave _mm512_permutex2var_ps by _mm512_set_epi32(
        [23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0],
        [31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8]
    );
}

impl_zmm! {
    f64: __m512d, 8 reals, index [i64; 8];
    _mm512_setzero_pd, _mm512_set1_pd, _mm512_add_pd, _mm512_mul_pd, _mm512_fmadd_pd,
    _mm512_fnmadd_pd, _mm512_permutexvar_pd;
    swap _mm512_permute_pd::<0b0101_0101>;
    interleave _mm512_permutex2var_pd by _mm512_set_epi64(
        [11, 3, 10, 2, 9, 1, 8, 0], [15, 7, 14, 6, 13, 5, 12, 4]
    );
}

/// A plan's run on a group, for `simd.vectorize`: a [`WidePlan`] by rows ([`rows`]) or by
/// 512-bit blocks ([`wide_blocks`]) as it asks, a [`ZmmPlan`] by 512-bit blocks
/// ([`zmm_unroll`] bases at a time). A type whose `call` is inlined into pulp's function that
/// enables the features (a closure there was compiled apart, without them, and every intrinsic
/// became a call: 50 times slower).
pub(super) struct Run<'a, 'g, T, P> {
    pub simd: V4,
    pub group: &'a mut [&'g mut [Amp<T>]],
    pub plan: &'a P,
}

impl<T: Zmm> pulp::NullaryFnOnce for Run<'_, '_, T, WidePlan<T>> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let Run { simd, group, plan } = self;
        if plan.by_rows {
            rows_of(simd, group, plan)
        } else {
            match plan.dim {
                8 => wide_blocks::<T, 8>(simd, group, plan),
                16 => wide_blocks::<T, 16>(simd, group, plan),
                32 => wide_blocks::<T, 32>(simd, group, plan),
                64 => wide_blocks::<T, 64>(simd, group, plan),
                other => unreachable!("wide block plans have 8 to 64 lanes, not {other}"),
            }
        }
    }
}

/// [`rows`] for the plan's dimension: `G` groups and row blocks of `RB` vectors such that
/// `2 G RB = 16` accumulators.
#[inline(always)]
fn rows_of<T: Zmm>(simd: V4, group: &mut [&mut [Amp<T>]], plan: &WidePlan<T>) {
    // Groups made of one, two or four runs of at least 4 consecutive amplitudes are read
    // in place (`RUN`), others copied first (`RUN` 0).
    macro_rules! run {
        ($d:literal, $g:literal, $rv:literal, $rb:literal) => {
            match plan.row_run {
                $d => rows::<T, $d, $g, $rv, $rb, $d>(simd, group, plan),
                r if r * 2 == $d && r >= 4 => {
                    rows::<T, $d, $g, $rv, $rb, { $d / 2 }>(simd, group, plan)
                }
                r if r * 4 == $d && r >= 4 => {
                    rows::<T, $d, $g, $rv, $rb, { $d / 4 }>(simd, group, plan)
                }
                _ => rows::<T, $d, $g, $rv, $rb, 0>(simd, group, plan),
            }
        };
    }
    match (T::REALS, plan.dim) {
        (8, 8) => run!(8, 8, 1, 1),
        (8, 16) => run!(16, 4, 2, 2),
        (8, 32) => run!(32, 2, 4, 4),
        (8, 64) => run!(64, 1, 8, 8),
        (16, 16) => run!(16, 8, 1, 1),
        (16, 32) => run!(32, 4, 2, 2),
        (16, 64) => run!(64, 2, 4, 4),
        other => unreachable!("row plans have rows of one vector or more, not {other:?}"),
    }
}

/// `G` groups at a time, each group's `D` outputs as `RV` vectors of rows, computed `RB`
/// vectors at a time: `2 G RB = 16` accumulators (real and imaginary parts) stay in the 32
/// registers with the column's entries; each column's `RB` entry vectors serve `G` groups. Run
/// it inside `simd.vectorize` (it is inlined there, where the features are enabled).
// The column index selects the group's amplitude and the column's entries together.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn rows<
    T: Zmm,
    const D: usize,
    const G: usize,
    const RV: usize,
    const RB: usize,
    const RUN: usize,
>(
    simd: V4,
    group: &mut [&mut [Amp<T>]],
    plan: &WidePlan<T>,
) {
    let f = simd.avx512f;
    let l = T::REALS;
    assert!(
        RV * l == D && RV % RB == 0,
        "{D} rows in {RV} vectors of {l}"
    );
    let member: [usize; D] = std::array::from_fn(|j| plan.member[j]);
    let offset: [usize; D] = std::array::from_fn(|j| plan.offset[j]);
    let column_re = &plan.column_re[..D * D];
    let column_im = &plan.column_im[..D * D];
    let taken = plan.target_mask;
    let run = plan.row_run;
    let piece_len = group[0].len();
    let zero = T::zero(f);
    let mut base = 0usize;
    while base < piece_len {
        let bases: [usize; G] = next_bases(&mut base, taken);
        // Every input read before any output is written (the gate works in place).
        let mut x = [[[T::default(); 2]; D]; G];
        if RUN == 0 {
            for (xg, &at) in x.iter_mut().zip(&bases) {
                read_group(group, &member, &offset, run, at, xg);
            }
        }
        let mut y = [[[T::default(); 2]; D]; G];
        {
            // A group held in runs of `RUN` consecutive amplitudes is broadcast from the state
            // itself, not from a copy just stored: a scalar load out of a 64-byte store waits
            // for it (f32 4-qubit gates on 0-3 in cache, 2 threads: 0.44-0.57 ns per amplitude
            // from the copy, 0.29-0.34 in place). Run `r` of group `g` is `direct[g][r]`.
            let direct: [[&[Amp<T>; RUN]; D]; G] = std::array::from_fn(|g| {
                std::array::from_fn(|r| {
                    // Nothing to look up when the group was copied (`RUN` 0 folds this away).
                    let j = (r * RUN) % D;
                    let (piece, from): (&[Amp<T>], usize) = if RUN == 0 {
                        (&[], 0)
                    } else {
                        (group[member[j]], bases[g] + offset[j])
                    };
                    piece[from..from + RUN].try_into().expect("RUN amplitudes")
                })
            });
            let input = |g: usize, c: usize| -> Amp<T> {
                if RUN == 0 {
                    x[g][c]
                } else {
                    direct[g][c / RUN.max(1)][c % RUN.max(1)]
                }
            };
            let mut rv0 = 0;
            while rv0 < RV {
                let mut re = [[zero; RB]; G];
                let mut im = [[zero; RB]; G];
                for c in 0..D {
                    for g in 0..G {
                        let [xr, xi] = input(g, c);
                        let (xr, xi) = (T::splat(f, xr), T::splat(f, xi));
                        for rb in 0..RB {
                            let at = c * D + (rv0 + rb) * l;
                            let mre = T::load(&column_re[at..]);
                            let mim = T::load(&column_im[at..]);
                            re[g][rb] = T::fmadd(f, mre, xr, re[g][rb]);
                            im[g][rb] = T::fmadd(f, mre, xi, im[g][rb]);
                            re[g][rb] = T::fnmadd(f, mim, xi, re[g][rb]);
                            im[g][rb] = T::fmadd(f, mim, xr, im[g][rb]);
                        }
                    }
                }
                for g in 0..G {
                    for rb in 0..RB {
                        let rows = &mut y[g][(rv0 + rb) * l..(rv0 + rb + 1) * l];
                        T::interleave(f, re[g][rb], im[g][rb], bytemuck::cast_slice_mut(rows));
                    }
                }
                rv0 += RB;
            }
        }
        for (g, &at) in bases.iter().enumerate() {
            write_group(group, &member, &offset, run, at, &y[g]);
        }
    }
}

/// Read a group's `D` amplitudes (matrix index `j` at `at + offset[j]` in piece `member[j]`)
/// into `x`, `run` at a time where the plan found runs of consecutive offsets in one piece
/// (all of them when the targets are the lowest qubits): a bounds check and an index per run,
/// not per amplitude, which at f32 cost as much as the arithmetic of a 4-qubit gate.
#[inline(always)]
fn read_group<T: Copy, const D: usize>(
    group: &[&mut [Amp<T>]],
    member: &[usize; D],
    offset: &[usize; D],
    run: usize,
    at: usize,
    x: &mut [Amp<T>; D],
) {
    if run >= 4 {
        for (j, chunk) in x.chunks_exact_mut(run).enumerate() {
            let from = at + offset[j * run];
            chunk.copy_from_slice(&group[member[j * run]][from..from + run]);
        }
    } else {
        for j in 0..D {
            x[j] = group[member[j]][at + offset[j]];
        }
    }
}

/// Write a group's `D` amplitudes back, as [`read_group`] reads them.
#[inline(always)]
fn write_group<T: Copy, const D: usize>(
    group: &mut [&mut [Amp<T>]],
    member: &[usize; D],
    offset: &[usize; D],
    run: usize,
    at: usize,
    y: &[Amp<T>],
) {
    if run >= 4 {
        for (j, chunk) in y[..D].chunks_exact(run).enumerate() {
            let to = at + offset[j * run];
            group[member[j * run]][to..to + run].copy_from_slice(chunk);
        }
    } else {
        for j in 0..D {
            group[member[j]][at + offset[j]] = y[j];
        }
    }
}

/// A gate of up to three qubits for the 512-bit block kernels ([`blocks`], [`blocks_low`]).
/// Where every target lies above a 64-byte block (bit 3 at f32, 2 at f64), each matrix index's
/// amplitudes form whole blocks that stay interleaved (re, im) as in memory; output block `h`
/// is the sum over input blocks `h2` of `A x + B swap(x)`, `A` the entry's real part in every
/// real, `B` its imaginary part with alternating signs, `swap` exchanging re and im (the block
/// kernels' method, at twice their vector width: LLVM keeps those at 256 bits), computed as
/// `A x + swap(B' x)` with `B' = swap(B)` (`swap` is a lane permutation, so it distributes
/// over the lane-wise products and the sum).
pub(super) struct ZmmPlan<T> {
    pub simd: V4,
    /// Lanes: one per value of the targets above the block.
    lanes: usize,
    /// Values of the targets inside the block (1 when there are none).
    nl: usize,
    /// The targets inside the block (bit positions, ascending): the matrix's lowest bits.
    low: Vec<usize>,
    /// The state is streamed from memory, not held in the caches ([`zmm_unroll`]).
    streaming: bool,
    /// Member piece and in-piece offset of each lane.
    member: Vec<usize>,
    offset: Vec<usize>,
    /// The block's bits and the in-piece targets: the bits bases skip.
    taken: usize,
    /// `A` and `B'` of each (output lane, input lane, low value), 64 bytes each, row-major:
    /// for every amplitude of the block, the entry of its row.
    coef_a: super::CacheAligned<T>,
    coef_b: super::CacheAligned<T>,
}

impl<T: super::Real> ZmmPlan<T> {
    /// The plan, or `None` where the 512-bit block kernels do not apply (more than three
    /// qubits, pieces too short for the bases they take at once, or no AVX-512).
    pub(super) fn new(
        gate: &super::Prepared<T>,
        member: &[usize],
        offset: &[usize],
        piece_len: usize,
        streaming: bool,
    ) -> Option<ZmmPlan<T>> {
        let reals = 64 / std::mem::size_of::<T>();
        let amps = reals / 2;
        let block_bits = amps.trailing_zeros() as usize;
        let k = gate.positions.len();
        let dim = 1usize << k;
        // Positions are sorted: the targets inside the block are the matrix's lowest bits.
        let l = gate.positions.iter().filter(|&&p| p < block_bits).count();
        let (lanes, nl) = (1usize << (k - l), 1usize << l);
        let taken = (amps - 1) | (0..lanes).fold(0, |m, h| m | offset[h << l]);
        let bases = piece_len >> taken.count_ones();
        // Measured on one thread against the 256-bit block kernels (ns per amplitude, in
        // cache): 2-qubit gates 0.32-0.33 against 0.38-0.42 at f32, 0.69-0.71 against
        // 0.74-0.83 at f64; 3-qubit gates at f32 on 3, 4, 5 0.58 against 1.00, on 3, 7, 11
        // 0.82 against 0.79 (and 0.97 against 1.68 with the state far beyond the caches);
        // 1-qubit gates 0.22 against 0.26 at f32. With targets inside the block
        // ([`blocks_low`]), 2-qubit gates on 0, 1 at 0.32-0.41 against 0.50 (f32) and 0.44
        // against 0.81 (f64), 1-qubit gates at f64 0.34-0.49 against 0.52-0.66 (2026-12-02).
        if k > 3
            || piece_len < amps
            || !piece_len.is_power_of_two()
            || bases
                < if l > 0 {
                    zmm_low_unroll(dim, streaming)
                } else {
                    zmm_unroll(dim, streaming)
                }
        {
            return None;
        }
        let simd = V4::try_new()?;
        // `B` with its re and im lanes exchanged: the kernel sums `B' x` and exchanges the
        // lanes of the sum once per output, not of every input.
        let (coef_a, coef_b) = super::block_coefficients(gate, l, reals, true);
        Some(ZmmPlan {
            simd,
            lanes,
            nl,
            low: gate.positions[..l].to_vec(),
            streaming,
            member: (0..lanes).map(|h| member[h << l]).collect(),
            offset: (0..lanes).map(|h| offset[h << l]).collect(),
            taken,
            coef_a: super::CacheAligned::new(&coef_a),
            coef_b: super::CacheAligned::new(&coef_b),
        })
    }

    /// Each of the `D` lanes' member piece and offset in whole vectors.
    fn lanes<const D: usize>(&self) -> ([usize; D], [usize; D]) {
        let shift = (32 / std::mem::size_of::<T>()).trailing_zeros();
        (
            std::array::from_fn(|h| self.member[h]),
            std::array::from_fn(|h| self.offset[h] >> shift),
        )
    }

    /// For each low value `lp` (in matrix bit order), the block amplitude each amplitude `e`
    /// reads: `e` with its low target bits replaced by `lp`'s.
    fn sources(&self) -> Vec<Vec<usize>> {
        let amps = 32 / std::mem::size_of::<T>();
        let mask: usize = self.low.iter().map(|&p| 1 << p).sum();
        (0..self.nl)
            .map(|lp| {
                let bits: usize = self
                    .low
                    .iter()
                    .enumerate()
                    .map(|(i, &p)| ((lp >> i) & 1) << p)
                    .sum();
                (0..amps).map(|e| (e & !mask) | bits).collect()
            })
            .collect()
    }
}

impl<T: Zmm> pulp::NullaryFnOnce for Run<'_, '_, T, ZmmPlan<T>> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let Run { simd, group, plan } = self;
        // Lane `h` in piece `h / (lanes / pieces)`, as [`Pieces`] takes it.
        let per_piece = plan.lanes / group.len();
        assert!(
            (0..plan.lanes).all(|h| plan.member[h] == h / per_piece),
            "lanes lie in the group's pieces in order"
        );
        // Pieces hold a power of two of amplitudes, a whole number of vectors (the plan asks
        // for both): the lanes' indices may be taken modulo the vectors.
        let vectors = group[0].len() * 2 / T::REALS;
        assert!(vectors.is_power_of_two(), "{vectors} vectors per piece");
        if plan.member.iter().all(|&m| m == 0) {
            let piece: &mut [T::Block] = bytemuck::cast_slice_mut(&mut *group[0]);
            let mut one = OnePiece::<T>(&mut piece[..vectors]);
            blocks_of(simd, &mut one, vectors, plan);
            return;
        }
        if plan.lanes == 8 {
            let mut pieces = PieceList::<T> {
                pieces: group
                    .iter_mut()
                    .map(|p| &mut bytemuck::cast_slice_mut(p)[..vectors])
                    .collect(),
                mask: vectors - 1,
            };
            blocks_of(simd, &mut pieces, vectors, plan);
            return;
        }
        match group.len() {
            2 => blocks_in_pieces::<T, 2>(simd, group, vectors, plan),
            4 => blocks_in_pieces::<T, 4>(simd, group, vectors, plan),
            8 => blocks_in_pieces::<T, 8>(simd, group, vectors, plan),
            n => unreachable!("a gate of up to three qubits spans 2, 4 or 8 pieces, not {n}"),
        }
    }
}

/// [`blocks_of`] over the group's `P` pieces as [`Pieces`].
#[inline(always)]
fn blocks_in_pieces<T: Zmm, const P: usize>(
    simd: V4,
    group: &mut [&mut [Amp<T>]],
    vectors: usize,
    plan: &ZmmPlan<T>,
) {
    blocks_of(
        simd,
        &mut Pieces::<T, P>::new(group, vectors),
        vectors,
        plan,
    );
}

/// [`blocks`] (or [`blocks_low`], for targets inside the block) for the plan's lanes and loop
/// order.
#[inline(always)]
fn blocks_of<T: Zmm, S: LaneStore<T>>(simd: V4, lanes: &mut S, vectors: usize, plan: &ZmmPlan<T>) {
    macro_rules! low {
        ($d:literal, $nl:literal) => {
            if plan.streaming {
                blocks_low::<T, $d, $nl, { zmm_low_unroll($d * $nl, true) }, _>(
                    simd, lanes, vectors, plan,
                )
            } else {
                blocks_low::<T, $d, $nl, { zmm_low_unroll($d * $nl, false) }, _>(
                    simd, lanes, vectors, plan,
                )
            }
        };
    }
    match (plan.lanes, plan.nl, plan.streaming) {
        (2, 1, _) => blocks::<T, 2, { zmm_unroll(2, false) }, false, _>(simd, lanes, vectors, plan),
        (4, 1, false) => {
            blocks::<T, 4, { zmm_unroll(4, false) }, false, _>(simd, lanes, vectors, plan)
        }
        (4, 1, true) => {
            blocks::<T, 4, { zmm_unroll(4, true) }, true, _>(simd, lanes, vectors, plan)
        }
        (8, 1, false) => {
            blocks::<T, 8, { zmm_unroll(8, false) }, false, _>(simd, lanes, vectors, plan)
        }
        (8, 1, true) => {
            blocks::<T, 8, { zmm_unroll(8, true) }, true, _>(simd, lanes, vectors, plan)
        }
        (1, 2, _) => low!(1, 2),
        (1, 4, _) => low!(1, 4),
        (1, 8, _) => low!(1, 8),
        (2, 2, _) => low!(2, 2),
        (2, 4, _) => low!(2, 4),
        (4, 2, _) => low!(4, 2),
        (d, nl, _) => unreachable!(
            "512-bit block plans have up to three qubits, not {d} lanes of {nl} low values"
        ),
    }
}

/// Where the 512-bit block kernel reads and writes its lanes, as vectors (index `i` is the
/// vector of amplitudes `i * REALS / 2 ..`): lane `h` of the `D` lanes at vector `at`. The
/// group's pieces, or one piece when every lane is in it. Indices are taken modulo the piece's
/// vectors (`& mask`, a power of two less one), which they never exceed: a slice of `mask + 1`
/// vectors so indexed needs no bounds check, which was a third of the kernel's instructions.
trait LaneStore<T: Zmm> {
    /// Lane `h` of `D`, in the group's piece `member`, at vector `at` of it.
    fn block<const D: usize>(&self, h: usize, member: usize, at: usize) -> &T::Block;
    fn block_mut<const D: usize>(&mut self, h: usize, member: usize, at: usize) -> &mut T::Block;
}

/// The group's `P` pieces, as vectors, lane `h` of `D` in piece `h / (D / P)` (the gate's targets
/// above the pieces are its highest, hence a lane's highest bits: a [`ZmmPlan`]'s [`Run`] checks
/// it). The piece of each lane is then a constant of the unrolled kernel and the pieces a local
/// array, whose addresses LLVM keeps in registers; looked up in a `Vec` by a lane's member index,
/// they were reloaded after every store (which might have changed them, as far as LLVM could tell).
/// Measured on one thread (2026-12-02, AMD EPYC, 2-qubit gates at f32 over 64 runs of 32 KiB, ns
/// per amplitude): gates on two qubits above the runs 0.26 that way, against 0.16 for the same
/// gates inside one piece.
struct Pieces<'a, T: Zmm, const P: usize> {
    pieces: [&'a mut [T::Block]; P],
    mask: usize,
}

impl<'a, T: Zmm, const P: usize> Pieces<'a, T, P> {
    /// The `P` pieces of `group`, `vectors` vectors each.
    fn new(group: &'a mut [&mut [Amp<T>]], vectors: usize) -> Self {
        let mut pieces = group
            .iter_mut()
            .map(|p| &mut bytemuck::cast_slice_mut::<Amp<T>, T::Block>(p)[..vectors]);
        Pieces {
            pieces: std::array::from_fn(|_| pieces.next().expect("P pieces")),
            mask: vectors - 1,
        }
    }
}

impl<T: Zmm, const P: usize> LaneStore<T> for Pieces<'_, T, P> {
    #[inline(always)]
    fn block<const D: usize>(&self, h: usize, _: usize, at: usize) -> &T::Block {
        &self.pieces[h / (D / P)][at & self.mask]
    }
    #[inline(always)]
    fn block_mut<const D: usize>(&mut self, h: usize, _: usize, at: usize) -> &mut T::Block {
        &mut self.pieces[h / (D / P)][at & self.mask]
    }
}

/// The group's pieces, as vectors, looked up by each lane's member index: for gates of eight
/// lanes, which [`Pieces`] made slower (their eight lanes' offsets, bases and the pieces'
/// addresses are more than the general registers hold). Measured on one thread (2026-12-02,
/// AMD EPYC, 3-qubit gates at f32 over 64 runs of 32 KiB, ns per amplitude, targets above the
/// runs): 0.47 this way, 0.55 through [`Pieces`].
struct PieceList<'a, T: Zmm> {
    pieces: Vec<&'a mut [T::Block]>,
    mask: usize,
}

impl<T: Zmm> LaneStore<T> for PieceList<'_, T> {
    #[inline(always)]
    fn block<const D: usize>(&self, _: usize, member: usize, at: usize) -> &T::Block {
        &self.pieces[member][at & self.mask]
    }
    #[inline(always)]
    fn block_mut<const D: usize>(&mut self, _: usize, member: usize, at: usize) -> &mut T::Block {
        &mut self.pieces[member][at & self.mask]
    }
}

/// One piece holding every lane, as vectors.
struct OnePiece<'a, T: Zmm>(&'a mut [T::Block]);

impl<T: Zmm> LaneStore<T> for OnePiece<'_, T> {
    #[inline(always)]
    fn block<const D: usize>(&self, _: usize, _: usize, at: usize) -> &T::Block {
        let mask = self.0.len() - 1;
        &self.0[at & mask]
    }
    #[inline(always)]
    fn block_mut<const D: usize>(&mut self, _: usize, _: usize, at: usize) -> &mut T::Block {
        let mask = self.0.len() - 1;
        &mut self.0[at & mask]
    }
}

/// Bases the 512-bit block kernel takes at a time for a gate of `dim` lanes, on a state that
/// stays in the caches (`streaming` false: a sweep's group) or one streamed from memory: the
/// inputs (`dim` vectors a base) and `2 U` accumulators stay in the 32 vector registers, and in
/// cache each coefficient loaded serves `U` bases; streamed, each base is done in turn
/// ([`blocks`]).
/// Measured on one thread (2026-11-27, AMD EPYC, ns per amplitude): 2-qubit gates on 3, 7 at
/// f64 0.34 with 4 bases at a time against 0.43 with 2 in a 4 MiB state, but 1.48 against 1.0
/// over 256 MiB; 3-qubit gates on 3, 7, 11 at f32 0.67 with 2 against 0.95 with 1 in cache,
/// 1.05 against 0.99 streamed.
pub(super) const fn zmm_unroll(dim: usize, streaming: bool) -> usize {
    match (dim, streaming) {
        (2, _) | (4, false) => 4,
        (4, true) | (8, false) => 2,
        _ => 1,
    }
}

/// [`zmm_unroll`] for [`blocks_low`]: 3-qubit gates take two bases at a time streamed as well,
/// the coefficients' loads (one per multiply-add, `D * NL` of them per output) binding the
/// loop otherwise. Measured on 2 threads over a 24-qubit state (2026-12-02, AMD EPYC, ns per
/// amplitude): on 0, 1, 2 at f64 0.52-0.54 against 0.82-0.86 with one base, at f32 0.27-0.29 against
/// 0.40-0.42; on 0, 1, 3 at f64 0.51-0.58 against 0.79-0.81.
pub(super) const fn zmm_low_unroll(dim: usize, streaming: bool) -> usize {
    match (dim, streaming) {
        (8, true) => 2,
        _ => zmm_unroll(dim, streaming),
    }
}

/// How many vectors (2 KiB) ahead of each base [`blocks`] prefetches its lanes in a streamed
/// state. Lanes far apart are as many streams as the gate has lanes, more than the hardware
/// prefetchers follow well. Measured on 2 threads over 128 MiB at f32 (2026-12-02, AMD EPYC,
/// ns per amplitude, the state's streaming rate 0.22-0.29): 3-qubit gates on 3, 7, 11 at
/// 0.28-0.30 against 0.45-0.47 without, 2-qubit ones on 3, 7 0.26-0.27 against 0.37-0.39,
/// 1-qubit ones on 7 0.26 against 0.34-0.42. (Prefetching for the first of the `U` bases only,
/// the lines of the others were missed: 0.34 on 3, 7.) 16 vectors ahead did less (0.36 on 3,
/// 7, 11), 64 no more. At f64 it changed nothing measurable (memory's rate bound there).
const ZMM_PREFETCH_AHEAD: usize = 32;

/// `D` lanes of one 512-bit vector of amplitudes each, `U` bases at a time. Bases and offsets
/// count vectors. `STREAMED` picks the loop order ([`zmm_unroll`]):
/// - in cache (false): for each output, `2 U` independent accumulator chains (`A x` and `B' x`
///   apart, `B'` being `B` with re and im exchanged, so that one exchange of the sum replaces
///   one per input), each coefficient loaded once for the `U` bases: the loads, not the FMAs,
///   bound the loop where a 512-bit load takes a cycle (2-qubit gates at f32 took 0.36 ns per
///   amplitude in cache with a coefficient load per FMA, 0.22 this way);
/// - streamed (true): each base's outputs computed and stored in turn, every input exchanged
///   (`A x + B swap(x)`, with `B = swap(B')`), as the kernel was before: faster there (f32
///   2-qubit gates on 3, 7 at 0.37 ns per amplitude on 2 threads over 128 MiB against 0.43).
// The lane index selects the input vectors and the coefficients together.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn blocks<T: Zmm, const D: usize, const U: usize, const STREAMED: bool, S: LaneStore<T>>(
    simd: V4,
    group: &mut S,
    vectors: usize,
    plan: &ZmmPlan<T>,
) {
    let f = simd.avx512f;
    let l = T::REALS;
    let (member, offset) = plan.lanes::<D>();
    let coef_a = &plan.coef_a.as_slice()[..D * D * l];
    let coef_b = &plan.coef_b.as_slice()[..D * D * l];
    let taken = plan.taken >> (l / 2).trailing_zeros();
    let zero = T::zero(f);
    let mut base = 0usize;
    while base < vectors {
        let bases: [usize; U] = next_bases(&mut base, taken);
        // Every input read before any output is written (the gate works in place). Plain
        // loops, not `array::from_fn`: with a fallible closure that was compiled as a call
        // per element.
        // Each input's vector ZMM_PREFETCH_AHEAD on (taken modulo the piece like every index:
        // a hint past the piece's end lands in it); a prefetch never faults.
        if plan.streaming {
            for u in 0..U {
                for h in 0..D {
                    let ahead: *const T::Block =
                        group.block::<D>(h, member[h], bases[u] + offset[h] + ZMM_PREFETCH_AHEAD);
                    simd.sse
                        ._mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(ahead.cast());
                }
            }
        }
        let mut x = [[zero; D]; U];
        for u in 0..U {
            for h in 0..D {
                x[u][h] = T::load_block(group.block::<D>(h, member[h], bases[u] + offset[h]));
            }
        }
        if STREAMED {
            for u in 0..U {
                let mut swapped = [zero; D];
                for h in 0..D {
                    swapped[h] = T::swap(f, x[u][h]);
                }
                for h in 0..D {
                    let coef = |c: &[T], h2: usize| T::load(&c[(h * D + h2) * l..]);
                    let mut a = T::vmul(f, coef(coef_a, 0), x[u][0]);
                    let mut b = T::vmul(f, T::swap(f, coef(coef_b, 0)), swapped[0]);
                    for h2 in 1..D {
                        a = T::fmadd(f, coef(coef_a, h2), x[u][h2], a);
                        b = T::fmadd(f, T::swap(f, coef(coef_b, h2)), swapped[h2], b);
                    }
                    T::store_block(
                        T::vadd(f, a, b),
                        group.block_mut::<D>(h, member[h], bases[u] + offset[h]),
                    );
                }
            }
            continue;
        }
        for h in 0..D {
            let coef = |c: &[T], h2: usize| T::load(&c[(h * D + h2) * l..]);
            let (ca, cb) = (coef(coef_a, 0), coef(coef_b, 0));
            let mut a = [zero; U];
            let mut b = [zero; U];
            for u in 0..U {
                a[u] = T::vmul(f, ca, x[u][0]);
                b[u] = T::vmul(f, cb, x[u][0]);
            }
            for h2 in 1..D {
                let (ca, cb) = (coef(coef_a, h2), coef(coef_b, h2));
                for u in 0..U {
                    a[u] = T::fmadd(f, ca, x[u][h2], a[u]);
                    b[u] = T::fmadd(f, cb, x[u][h2], b[u]);
                }
            }
            store_sums::<T, D, U, S>(f, group, h, member[h], offset[h], &bases, &a, &b);
        }
    }
}

/// The next `N` bases from `base` on, counting up in the bits outside `taken` only; `base`
/// moves past them. (A plain loop, not `array::from_fn`, as the kernels read their inputs.)
#[inline(always)]
fn next_bases<const N: usize>(base: &mut usize, taken: usize) -> [usize; N] {
    let mut bases = [0usize; N];
    for b in bases.iter_mut() {
        *b = *base;
        *base = ((*base | taken) + 1) & !taken;
    }
    bases
}

/// Stores output lane `h` (in the group's piece `member`, `offset` vectors in) of each of the
/// `U` bases: `a + swap(b)`, the products with `A` plus the exchanged products with `B'`.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
#[inline(always)]
fn store_sums<T: Zmm, const D: usize, const U: usize, S: LaneStore<T>>(
    f: Avx512f,
    group: &mut S,
    h: usize,
    member: usize,
    offset: usize,
    bases: &[usize; U],
    a: &[T::V; U],
    b: &[T::V; U],
) {
    for u in 0..U {
        T::store_block(
            T::vadd(f, a[u], T::swap(f, b[u])),
            group.block_mut::<D>(h, member, bases[u] + offset),
        );
    }
}

/// [`blocks`] for gates with targets inside the block (`NL` values of them, in the vector's
/// low amplitude bits) and `D` lanes above it, `U` bases at a time: every input vector is
/// permuted once per low value `lp` (a lane-crossing permutation that puts, in amplitude `e`,
/// the amplitude `e` with its low target bits replaced by `lp`'s), and output `h` is the sum
/// over lanes `h2` and low values `lp` of `A x + swap(B' x)` of the permuted inputs, where `A`
/// and `B'` hold, for every amplitude of the vector, the entry of its own row. (The 256-bit
/// block kernels mix such gates by shuffles inside 32-byte blocks and copy tiles for targets
/// just above them: 0.42-0.55 ns per amplitude for 2-qubit gates on qubits 0-3 at f32 in cache,
/// against 0.25 for targets above the block.)
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn blocks_low<T: Zmm, const D: usize, const NL: usize, const U: usize, S: LaneStore<T>>(
    simd: V4,
    group: &mut S,
    vectors: usize,
    plan: &ZmmPlan<T>,
) {
    let f = simd.avx512f;
    let l = T::REALS;
    let shift = (l / 2).trailing_zeros();
    let (member, offset) = plan.lanes::<D>();
    let sources = plan.sources();
    let index: [T::Index; NL] = std::array::from_fn(|lp| T::index(&sources[lp]));
    let coef_a = &plan.coef_a.as_slice()[..D * D * NL * l];
    let coef_b = &plan.coef_b.as_slice()[..D * D * NL * l];
    let taken = plan.taken >> shift;
    let zero = T::zero(f);
    let mut base = 0usize;
    while base < vectors {
        let bases: [usize; U] = next_bases(&mut base, taken);
        // Every input read (and permuted) before any output is written: the gate works in
        // place.
        let mut p = [[[zero; NL]; D]; U];
        for u in 0..U {
            for h2 in 0..D {
                let x = T::load_block(group.block::<D>(h2, member[h2], bases[u] + offset[h2]));
                for lp in 0..NL {
                    p[u][h2][lp] = T::permute(f, &index[lp], x);
                }
            }
        }
        for h in 0..D {
            let mut a = [zero; U];
            let mut b = [zero; U];
            for h2 in 0..D {
                for lp in 0..NL {
                    let at = ((h * D + h2) * NL + lp) * l;
                    let (ca, cb) = (T::load(&coef_a[at..]), T::load(&coef_b[at..]));
                    for u in 0..U {
                        a[u] = T::fmadd(f, ca, p[u][h2][lp], a[u]);
                        b[u] = T::fmadd(f, cb, p[u][h2][lp], b[u]);
                    }
                }
            }
            store_sums::<T, D, U, S>(f, group, h, member[h], offset[h], &bases, &a, &b);
        }
    }
}

/// Gates of 3 qubits or more whose targets all lie above a 64-byte block, by blocks: each lane
/// a 512-bit vector of interleaved amplitudes, output `h` the sum over lanes `h2` of
/// `re[h][h2] x + im[h][h2] (swap(x) * (-1, 1, ..))` with the entries broadcast from memory (a
/// table of vectors as the block kernels keep would be 32 KiB at 4 qubits); eight outputs at a
/// time, eight independent chains, the lanes read from the stack.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn wide_blocks<T: Zmm, const D: usize>(simd: V4, group: &mut [&mut [Amp<T>]], plan: &WidePlan<T>) {
    let f = simd.avx512f;
    let l = T::REALS;
    let amps = l / 2;
    let member: [usize; D] = std::array::from_fn(|j| plan.member[j]);
    let offset: [usize; D] = std::array::from_fn(|j| plan.offset[j]);
    let re = &plan.re[..D * D];
    let im = &plan.im[..D * D];
    let signs: Vec<T> = (0..l)
        .map(|i| T::from_f64(if i % 2 == 0 { -1.0 } else { 1.0 }))
        .collect();
    let signs = T::load(&signs);
    let taken = (amps - 1) | plan.target_mask;
    let piece_len = group[0].len();
    let zero = T::zero(f);
    let mut x = [zero; D];
    let mut xs = [zero; D];
    let prefetch = plan.prefetch.then(super::Prefetch::new);
    let mut base = 0usize;
    let mut ahead = base;
    for _ in 0..super::PREFETCH_AHEAD * 2 {
        ahead = ((ahead | taken) + 1) & !taken;
    }
    while base < piece_len {
        if let Some(prefetch) = prefetch.filter(|_| ahead < piece_len) {
            for h in 0..D {
                prefetch.lines(&group[member[h]][ahead + offset[h]..][..amps]);
            }
        }
        ahead = ((ahead | taken) + 1) & !taken;
        for h in 0..D {
            let at = base + offset[h];
            x[h] = T::load(bytemuck::cast_slice(&group[member[h]][at..at + amps]));
            xs[h] = T::vmul(f, T::swap(f, x[h]), signs);
        }
        let mut o0 = 0;
        while o0 < D {
            let mut acc = [zero; 8];
            for h2 in 0..D {
                for o in 0..8 {
                    let at = (o0 + o) * D + h2;
                    acc[o] = T::fmadd(f, T::splat(f, re[at]), x[h2], acc[o]);
                    acc[o] = T::fmadd(f, T::splat(f, im[at]), xs[h2], acc[o]);
                }
            }
            for o in 0..8 {
                let at = base + offset[o0 + o];
                T::store(
                    acc[o],
                    bytemuck::cast_slice_mut(&mut group[member[o0 + o]][at..at + amps]),
                );
            }
            o0 += 8;
        }
        base = ((base | taken) + 1) & !taken;
    }
}
