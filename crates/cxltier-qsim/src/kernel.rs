//! Applying a dense `k`-qubit gate to a state held as equal pieces (chunks of one array, or
//! slices of one buffer), in parallel over groups of pieces that no other group touches.

use bytemuck::Pod;
use multiversion::multiversion;
use rayon::prelude::*;

use crate::gates::Matrix;

/// The amplitude type: `f64` or `f32`.
pub trait Real:
    Pod
    + Send
    + Sync
    + Default
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
{
    /// From f64 (rounded for f32).
    fn from_f64(x: f64) -> Self;
    /// To f64.
    fn to_f64(self) -> f64;
    /// `"f64"` or `"f32"`.
    const NAME: &'static str;
}

impl Real for f64 {
    fn from_f64(x: f64) -> f64 {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
    const NAME: &'static str = "f64";
}

impl Real for f32 {
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
/// indices `i << piece_bits ..`). Runs on the current rayon pool.
pub fn apply<T: Real>(pieces: &mut [&mut [Amp<T>]], piece_bits: usize, gate: &Prepared<T>) {
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
    let fast = fast_path(k, high.len());
    let work = |group: &mut Vec<&mut [Amp<T>]>| match (fast, k) {
        (true, _) => run_fast(group, &low, &gate.matrix),
        (false, 1) => run::<T, 2>(group, &member, &offset, &low, piece_len, &gate.matrix),
        (false, 2) => run::<T, 4>(group, &member, &offset, &low, piece_len, &gate.matrix),
        (false, 3) => run::<T, 8>(group, &member, &offset, &low, piece_len, &gate.matrix),
        (false, 4) => run::<T, 16>(group, &member, &offset, &low, piece_len, &gate.matrix),
        (false, 5) => run::<T, 32>(group, &member, &offset, &low, piece_len, &gate.matrix),
        _ => panic!("gates on more than 5 qubits are not supported"),
    };
    if groups.len() == 1 {
        work(&mut groups[0]);
    } else {
        groups.par_iter_mut().for_each(work);
    }
}

/// Whether the iterator-based path handles a gate of `k` qubits, `high` of them across pieces.
fn fast_path(k: usize, high: usize) -> bool {
    matches!((k, high), (1, 0) | (1, 1) | (2, 0) | (2, 1) | (2, 2))
}

#[inline(always)]
fn mul<T: Real, const D: usize>(m: &[Amp<T>], v: &[Amp<T>; D]) -> [Amp<T>; D] {
    let mut out = [[T::default(); 2]; D];
    for (r, o) in out.iter_mut().enumerate() {
        let row = &m[r * D..r * D + D];
        let (mut re, mut im) = (T::default(), T::default());
        for c in 0..D {
            re = re + row[c][0] * v[c][0] - row[c][1] * v[c][1];
            im = im + row[c][0] * v[c][1] + row[c][1] * v[c][0];
        }
        *o = [re, im];
    }
    out
}

/// One- and two-qubit gates by walking the pieces with split slices: no index arithmetic and no
/// bounds checks in the inner loops. `low` holds the in-piece target bits, ascending; the matrix
/// is in sorted-position order (low targets first, then the piece-selecting ones). Compiled for
/// several vector extensions; the widest the CPU has runs.
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx2+fma+avx+sse4.2",
    "x86_64+avx2+fma+avx+sse4.2",
    "x86_64+sse4.2",
    "aarch64+neon"
))]
fn run_fast<T: Real>(group: &mut [&mut [Amp<T>]], low: &[usize], matrix: &[Amp<T>]) {
    let m2: [Amp<T>; 4] = std::array::from_fn(|i| {
        if matrix.len() == 4 {
            matrix[i]
        } else {
            [T::default(); 2]
        }
    });
    let m4: [Amp<T>; 16] = std::array::from_fn(|i| {
        if matrix.len() == 16 {
            matrix[i]
        } else {
            [T::default(); 2]
        }
    });
    match (group, low) {
        // Targets among the lowest qubits leave runs too short to vectorise along: take STEP
        // independent index groups at a time instead.
        ([s], &[p]) if p < 3 => strided::<T, 2>(s, &m2, [0, 1 << p], low),
        ([s], &[p0, p1]) if p0 < 3 => {
            strided::<T, 4>(s, &m4, [0, 1 << p0, 1 << p1, (1 << p0) | (1 << p1)], low)
        }
        ([s], [p]) => {
            for blk in s.chunks_exact_mut(2 << p) {
                let (a, b) = blk.split_at_mut(1 << p);
                pair(&m2, a, b);
            }
        }
        ([g0, g1], []) => pair(&m2, g0, g1),
        ([s], [p0, p1]) => {
            for blk in s.chunks_exact_mut(2 << p1) {
                let (a, b) = blk.split_at_mut(1 << p1);
                for (ca, cb) in a.chunks_exact_mut(2 << p0).zip(b.chunks_exact_mut(2 << p0)) {
                    let (a0, a1) = ca.split_at_mut(1 << p0);
                    let (b0, b1) = cb.split_at_mut(1 << p0);
                    quad(&m4, a0, a1, b0, b1);
                }
            }
        }
        ([g0, g1], [p]) => {
            for (ca, cb) in g0.chunks_exact_mut(2 << p).zip(g1.chunks_exact_mut(2 << p)) {
                let (a0, a1) = ca.split_at_mut(1 << p);
                let (b0, b1) = cb.split_at_mut(1 << p);
                quad(&m4, a0, a1, b0, b1);
            }
        }
        ([g0, g1, g2, g3], []) => quad(&m4, g0, g1, g2, g3),
        _ => unreachable!("fast_path admits only these shapes"),
    }
}

/// Amplitudes per step of the lane loop: de-interleaved into arrays of this many reals, so that
/// the compiler keeps them in vector registers (8 f32 = one AVX register, 8 f64 = two).
const STEP: usize = 8;

/// Apply a `D x D` matrix to `D` equally long lanes: element `i` of every lane forms one vector.
/// Runs of `STEP` elements are split into real and imaginary arrays and multiplied lane-parallel;
/// the remainder goes one element at a time.
#[inline(always)]
fn lanes<T: Real, const D: usize>(m: &[Amp<T>], lanes: &mut [&mut [Amp<T>]; D]) {
    let len = lanes[0].len();
    let mut mre = [[T::default(); D]; D];
    let mut mim = [[T::default(); D]; D];
    for r in 0..D {
        for c in 0..D {
            mre[r][c] = m[r * D + c][0];
            mim[r][c] = m[r * D + c][1];
        }
    }
    let mut start = 0;
    while start + STEP <= len {
        let mut re = [[T::default(); STEP]; D];
        let mut im = [[T::default(); STEP]; D];
        for (j, lane) in lanes.iter().enumerate() {
            let run = &lane[start..start + STEP];
            for e in 0..STEP {
                re[j][e] = run[e][0];
                im[j][e] = run[e][1];
            }
        }
        for (r, lane) in lanes.iter_mut().enumerate() {
            let mut ore = [T::default(); STEP];
            let mut oim = [T::default(); STEP];
            for c in 0..D {
                let (a, b) = (mre[r][c], mim[r][c]);
                for e in 0..STEP {
                    ore[e] = ore[e] + a * re[c][e] - b * im[c][e];
                    oim[e] = oim[e] + a * im[c][e] + b * re[c][e];
                }
            }
            let run = &mut lane[start..start + STEP];
            for e in 0..STEP {
                run[e] = [ore[e], oim[e]];
            }
        }
        start += STEP;
    }
    for i in start..len {
        let v: [Amp<T>; D] = std::array::from_fn(|j| lanes[j][i]);
        let o = mul::<T, D>(m, &v);
        for (j, lane) in lanes.iter_mut().enumerate() {
            lane[i] = o[j];
        }
    }
}

/// Apply a `D x D` matrix to the index groups of `s` (offsets `off` from each base; bases skip
/// the `low` target bits), `STEP` groups at a time with the arithmetic on de-interleaved arrays.
#[inline(always)]
fn strided<T: Real, const D: usize>(
    s: &mut [Amp<T>],
    m: &[Amp<T>],
    off: [usize; D],
    low: &[usize],
) {
    let bases = s.len() >> low.len();
    let mut mre = [[T::default(); D]; D];
    let mut mim = [[T::default(); D]; D];
    for r in 0..D {
        for c in 0..D {
            mre[r][c] = m[r * D + c][0];
            mim[r][c] = m[r * D + c][1];
        }
    }
    let mut outer = 0;
    while outer + STEP <= bases {
        let idx: [usize; STEP] = std::array::from_fn(|e| insert_zeros(outer + e, low));
        let mut re = [[T::default(); STEP]; D];
        let mut im = [[T::default(); STEP]; D];
        for j in 0..D {
            for e in 0..STEP {
                let a = s[idx[e] + off[j]];
                re[j][e] = a[0];
                im[j][e] = a[1];
            }
        }
        for r in 0..D {
            let mut ore = [T::default(); STEP];
            let mut oim = [T::default(); STEP];
            for c in 0..D {
                let (a, b) = (mre[r][c], mim[r][c]);
                for e in 0..STEP {
                    ore[e] = ore[e] + a * re[c][e] - b * im[c][e];
                    oim[e] = oim[e] + a * im[c][e] + b * re[c][e];
                }
            }
            for e in 0..STEP {
                s[idx[e] + off[r]] = [ore[e], oim[e]];
            }
        }
        outer += STEP;
    }
    for base in outer..bases {
        let i = insert_zeros(base, low);
        let v: [Amp<T>; D] = std::array::from_fn(|j| s[i + off[j]]);
        let o = mul::<T, D>(m, &v);
        for j in 0..D {
            s[i + off[j]] = o[j];
        }
    }
}

#[inline(always)]
fn pair<T: Real>(m: &[Amp<T>; 4], a: &mut [Amp<T>], b: &mut [Amp<T>]) {
    lanes::<T, 2>(m, &mut [a, b]);
}

#[inline(always)]
fn quad<T: Real>(
    m: &[Amp<T>; 16],
    a: &mut [Amp<T>],
    b: &mut [Amp<T>],
    c: &mut [Amp<T>],
    d: &mut [Amp<T>],
) {
    lanes::<T, 4>(m, &mut [a, b, c, d]);
}

#[inline(always)]
fn run<T: Real, const D: usize>(
    group: &mut [&mut [Amp<T>]],
    member: &[usize],
    offset: &[usize],
    low: &[usize],
    piece_len: usize,
    matrix: &[Amp<T>],
) {
    let mut m = [[T::default(); 2]; 1024];
    m[..D * D].copy_from_slice(&matrix[..D * D]);
    let mut mem = [0usize; D];
    let mut off = [0usize; D];
    mem.copy_from_slice(&member[..D]);
    off.copy_from_slice(&offset[..D]);
    // Contiguous runs below the lowest in-piece target bit.
    let run_bits = low
        .first()
        .copied()
        .unwrap_or(usize::BITS as usize)
        .min(piece_len.trailing_zeros() as usize);
    let run = 1usize << run_bits;
    let bases = piece_len >> low.len();
    let mut v = [[T::default(); 2]; D];
    let mut outer = 0;
    while outer < bases {
        let base = insert_zeros(outer, low);
        for t in 0..run.min(bases) {
            let idx = base + t;
            for j in 0..D {
                v[j] = group[mem[j]][idx + off[j]];
            }
            for r in 0..D {
                let row = &m[r * D..r * D + D];
                let (mut re, mut im) = (T::default(), T::default());
                for c in 0..D {
                    re = re + row[c][0] * v[c][0] - row[c][1] * v[c][1];
                    im = im + row[c][0] * v[c][1] + row[c][1] * v[c][0];
                }
                group[mem[r]][idx + off[r]] = [re, im];
            }
        }
        outer += run;
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

    #[test]
    fn matches_the_reference_for_any_positions_and_piece_split() {
        let n = 7;
        let state: Vec<Amp<f64>> = (0..1 << n)
            .map(|i| [((i * 7) % 11) as f64 - 5.0, ((i * 3) % 5) as f64])
            .collect();
        let m3 = gates::controlled(&gates::u3(0.3, 0.2, 0.9), 2);
        let cases: Vec<(Matrix, Vec<usize>)> = vec![
            (gates::h(), vec![0]),
            (gates::h(), vec![6]),
            (gates::u3(1.0, 2.0, 3.0), vec![3]),
            (gates::controlled(&gates::x(), 1), vec![6, 0]),
            (gates::controlled(&gates::x(), 1), vec![2, 5]),
            (m3.clone(), vec![4, 1, 6]),
            (m3, vec![6, 5, 4]),
            (gates::controlled(&gates::x(), 4), vec![0, 6, 2, 5, 3]),
        ];
        for (m, pos) in cases {
            let want = reference(&state, &m, &pos);
            for piece_bits in [n, 5, 3, 1] {
                let mut s = state.clone();
                {
                    let mut pieces: Vec<&mut [Amp<f64>]> = s.chunks_mut(1 << piece_bits).collect();
                    apply(&mut pieces, piece_bits, &Prepared::new(&m, pos.clone()));
                }
                for (a, b) in s.iter().zip(&want) {
                    assert!(
                        (a[0] - b[0]).abs() < 1e-12 && (a[1] - b[1]).abs() < 1e-12,
                        "{pos:?} {piece_bits}"
                    );
                }
            }
        }
    }
}
