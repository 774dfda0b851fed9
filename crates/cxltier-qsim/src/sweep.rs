//! Cache-blocked sweeps: applying a list of gates to a state in memory with as few trips through
//! DRAM as possible.
//!
//! Applying fused gates one after another streams the whole state through memory once per gate,
//! which makes large states memory-bound. Instead, the gates are cut into *sweeps* exactly as an
//! out-of-core run cuts them into passes ([`fusion::plan_passes`]), but at the scale of a core's
//! cache: the state is viewed as runs of `2^run_bits` amplitudes, and a sweep gathers, for every
//! group, the runs that differ in a few chosen higher qubits (at most a cache's worth,
//! [`CACHE_BYTES`]). Every gate of the sweep acts inside each group, so a thread takes a group,
//! copies it into a contiguous buffer of its own (in place, runs a power of two apart would
//! evict each other from the cache), applies all of the sweep's gates to it while it stays in
//! cache, copies it back, and moves on: the state goes through DRAM once per sweep instead of
//! once per gate.

use rayon::prelude::*;

use crate::fusion::{self, Op};
use crate::kernel::{self, Amp, Prepared, Real};
use crate::progress::Progress;

/// Bytes of amplitudes a thread works on at once: 4 MiB, so that the groups of two threads stay
/// in a 32 MiB last-level cache while all of a sweep's gates run over them. (Groups the size of
/// the 512 KiB L2 were tried as a second level inside these and were no faster.)
pub const CACHE_BYTES: usize = 4 << 20;

/// Higher qubits gathered per sweep: more make sweeps carry more gates, fewer make the runs
/// (contiguous in memory) longer. Six leaves runs of 8 KiB at f32 and f64 in a 512 KiB group.
const GATHERED: usize = 6;

/// States of this many bytes or more are swept through a per-thread copy of each group
/// (a buffer each thread keeps for its lifetime); smaller ones in place.
///
/// A group's runs lie a power of two apart in the state (the gathered qubits are high bits).
/// In a large state, gates on the gathered qubits then ran several times slower in place than
/// on the same amount of contiguous data: with 64 runs 32 MiB apart, a two-qubit gate took
/// 0.33 s over a 28-qubit f32 state instead of 0.07 (the runs compete for the same cache sets
/// and DRAM banks). Copying costs a serial stream in and out per group, which the in-place
/// sweep overlaps with its first and last gate. Measured here (simulate seconds, in place
/// against copied, 10-layer random circuits): 512 MiB states 2.79–2.94 against 3.15–3.30,
/// 1 GiB 6.34–6.88 against 6.55–6.76, 2 GiB 15.8–16.2 against 13.4–14.2 (f32) and 13.6–13.9
/// against 11.9–12.4 (f64). Hence the copy from 2 GiB up.
pub const COPY_GROUPS_FROM: usize = 2 << 30;

thread_local! {
    /// The calling thread's copy of the group it works on, for states of
    /// [`COPY_GROUPS_FROM`] bytes or more: the thread copies its group here, applies the
    /// sweep's gates, and copies it back. The buffer lives as long as the thread (a pool's
    /// worker); it holds at most [`CACHE_BYTES`] (or the caller's [`Blocking::group_bytes`]).
    static GROUP_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The group buffer starts on a cache line, so that the block kernels' vector loads never
/// straddle two.
const LINE: usize = 64;

/// What a sweep run did.
#[derive(Debug, Clone)]
pub struct SweepReport {
    /// Trips through the whole state.
    pub sweeps: usize,
    /// Fused gates applied (summed over sweeps).
    pub fused_gates: usize,
    /// Physical bit position of each qubit of the ops (the identity unless relabelled).
    pub perm: Vec<usize>,
    /// The widest a fused gate could be (as asked, or chosen by measured cost).
    pub fuse_width: usize,
}

/// Fuse `ops` as `width` says: the width and the fused gates. A measured width prices each
/// merge by `pricing` and each candidate's run on the state `pieces`, cut into sweeps by
/// `sweeps`.
fn fuse_as<T: Real>(
    ops: &[Op],
    width: fusion::Width,
    pieces: &mut [&mut [Amp<T>]],
    pricing: fusion::Pricing,
    sweeps: impl Fn(&[Op]) -> Vec<Vec<usize>>,
) -> (usize, Vec<Op>) {
    match width {
        fusion::Width::Fixed(w) => (w, fusion::fuse(ops, w)),
        // Nothing to choose between: no timing.
        fusion::Width::Measured(max) | fusion::Width::Auto(max) if max == 1 || ops.len() < 2 => {
            (fusion::widest(ops).min(max), fusion::fuse(ops, max))
        }
        fusion::Width::Measured(max) | fusion::Width::Auto(max) => {
            fusion::fuse_cheapest(ops, max, &crate::bench::cost_model(pieces), pricing, sweeps)
        }
    }
}

/// How a sweep blocks the state for the cache.
#[derive(Debug, Clone, Copy)]
pub struct Blocking {
    /// Bytes of amplitudes a thread works on at once ([`CACHE_BYTES`] by default).
    pub group_bytes: usize,
    /// States of this many bytes or more copy each group into a per-thread buffer
    /// ([`COPY_GROUPS_FROM`] by default).
    pub copy_groups_from: usize,
}

impl Default for Blocking {
    fn default() -> Self {
        Blocking {
            group_bytes: CACHE_BYTES,
            copy_groups_from: COPY_GROUPS_FROM,
        }
    }
}

/// How [`run`] groups a state of `n` qubits held in pieces of `2^piece_bits` amplitudes of
/// `amp_bytes`, for gates of up to `widest` qubits: the bits of each contiguous run and the
/// qubits each sweep gathers above them; `None` when the state is too small for groups of short
/// runs plus the widest gate (then one fused gate at a time sweeps the whole state).
pub(crate) fn group_shape(
    n: usize,
    piece_bits: usize,
    amp_bytes: usize,
    group_bytes: usize,
    widest: usize,
) -> Option<(usize, usize)> {
    // At least four groups, so that both threads of a small state have work.
    let cache_bits = ((group_bytes / amp_bytes).max(1).ilog2() as usize).min(n.saturating_sub(2));
    let run_bits = piece_bits.min(cache_bits.saturating_sub(GATHERED));
    (run_bits >= 3 && cache_bits >= run_bits + widest).then(|| (run_bits, cache_bits - run_bits))
}

/// The sweeps [`run`] makes over an in-memory state of `n` qubits held in pieces of
/// `2^piece_bits` amplitudes of `amp_bytes`, in groups of `group_bytes`, for `ops` fused to
/// `width` qubits, without relabelling.
pub(crate) fn sweeps_of(
    ops: &[Op],
    width: usize,
    n: usize,
    piece_bits: usize,
    amp_bytes: usize,
    group_bytes: usize,
) -> usize {
    if ops.is_empty() {
        return 0;
    }
    let widest = ops.iter().map(|o| o.qubits.len()).max().unwrap_or(1);
    let fused = fusion::fuse(ops, width);
    match group_shape(n, piece_bits, amp_bytes, group_bytes, widest) {
        None => fused.len(),
        Some((run_bits, extra)) => fusion::plan_passes(&fused, n, run_bits, extra).len(),
    }
}

/// The widths of each sweep's fused gates when `fused` (whose unfused gates were at most
/// `widest` qubits) runs over an in-memory state as [`run`] cuts it, without relabelling: what
/// a cost model prices.
pub(crate) fn sweep_widths(
    fused: &[Op],
    widest: usize,
    n: usize,
    piece_bits: usize,
    amp_bytes: usize,
) -> Vec<Vec<usize>> {
    match group_shape(n, piece_bits, amp_bytes, CACHE_BYTES, widest) {
        None => fusion::one_gate_per_sweep(fused),
        Some((run_bits, extra)) => fusion::plan_passes(fused, n, run_bits, extra)
            .into_iter()
            .map(|pass| fused[pass.gates].iter().map(|o| o.qubits.len()).collect())
            .collect(),
    }
}

/// Apply `ops` (qubits given as bit positions of the state's index, `n` bits) to the state held
/// as `pieces` of `2^piece_bits` amplitudes, fusing up to `fuse` qubits, on the current rayon
/// pool, in groups as `blocking` says. With `relabel`, the qubits are first relabelled to make
/// the sweeps few (valid only while the state is |0...0>, which any relabelling leaves
/// unchanged); the report says where each qubit went. `progress` counts the fused gates and
/// sweeps as they are done.
// The state, its layout and the run's settings: a struct for them would be built once per call
// site and taken apart here.
#[allow(clippy::too_many_arguments)]
pub fn run<T: Real>(
    pieces: &mut [&mut [Amp<T>]],
    piece_bits: usize,
    n: usize,
    ops: &[Op],
    fuse: fusion::Width,
    relabel: bool,
    blocking: Blocking,
    progress: Option<&Progress>,
) -> SweepReport {
    let copy_groups = (1usize << n) * std::mem::size_of::<Amp<T>>() >= blocking.copy_groups_from;
    let widest = ops.iter().map(|o| o.qubits.len()).max().unwrap_or(1);
    let shape = group_shape(
        n,
        piece_bits,
        std::mem::size_of::<Amp<T>>(),
        blocking.group_bytes,
        widest,
    );
    let Some((run_bits, extra)) = shape else {
        let (fuse_width, fused) = fuse_as(
            ops,
            fuse,
            pieces,
            fusion::Pricing::SweepPerGate,
            fusion::one_gate_per_sweep,
        );
        if let Some(p) = progress {
            p.gates_planned(fused.len());
        }
        for op in &fused {
            kernel::apply(
                pieces,
                piece_bits,
                &Prepared::new(&op.matrix, op.qubits.clone()),
            );
            if let Some(p) = progress {
                p.sweep_done(1);
            }
        }
        return SweepReport {
            sweeps: fused.len(),
            fused_gates: fused.len(),
            perm: (0..n).collect(),
            fuse_width,
        };
    };
    // Fuse first, over the whole list, so that cutting it into sweeps does not split blocks.
    let sweeps = |fused: &[Op]| -> Vec<Vec<usize>> {
        let relabelled;
        let fused = if relabel {
            let (perm, _) = fusion::choose_layout(fused, n, run_bits, extra);
            relabelled = fusion::relabel(fused, &perm);
            &relabelled[..]
        } else {
            fused
        };
        fusion::plan_passes(fused, n, run_bits, extra)
            .into_iter()
            .map(|pass| fused[pass.gates].iter().map(|o| o.qubits.len()).collect())
            .collect()
    };
    let (fuse_width, fused) = fuse_as(ops, fuse, pieces, fusion::Pricing::SharedSweeps, sweeps);
    let (perm, fused) = if relabel {
        let (perm, _) = fusion::choose_layout(&fused, n, run_bits, extra);
        let relabelled = fusion::relabel(&fused, &perm);
        (perm, relabelled)
    } else {
        ((0..n).collect(), fused)
    };
    let passes = fusion::plan_passes(&fused, n, run_bits, extra);
    if let Some(p) = progress {
        p.gates_planned(fused.len());
    }
    for pass in &passes {
        let to_group = |q: usize| -> usize {
            if q < run_bits {
                q
            } else {
                run_bits + pass.extra.iter().position(|&e| e == q).expect("gathered")
            }
        };
        let prepared: Vec<Prepared<T>> = fused[pass.gates.clone()]
            .iter()
            .map(|op| Prepared::new(&op.matrix, op.qubits.iter().map(|&q| to_group(q)).collect()))
            .collect();
        let group_bits = run_bits + pass.extra.len();
        let mut groups = gather(pieces, run_bits, n, &pass.extra);
        if !copy_groups {
            groups.par_iter_mut().for_each(|group| {
                for g in &prepared {
                    kernel::apply_serial(group, run_bits, g);
                }
            });
        } else {
            groups.par_iter_mut().for_each(|group| {
                GROUP_BUFFER.with_borrow_mut(|bytes| {
                    let want = (std::mem::size_of::<Amp<T>>() << group_bits) + LINE;
                    if bytes.len() < want {
                        bytes.resize(want, 0);
                    }
                    let start = bytes.as_ptr().align_offset(LINE);
                    let buffer = bytemuck::cast_slice_mut::<u8, Amp<T>>(
                        &mut bytes[start..start + want - LINE],
                    );
                    for (run, copy) in group.iter().zip(buffer.chunks_exact_mut(1 << run_bits)) {
                        copy.copy_from_slice(run);
                    }
                    for g in &prepared {
                        kernel::apply_serial(&mut [&mut *buffer], group_bits, g);
                    }
                    for (run, copy) in group.iter_mut().zip(buffer.chunks_exact(1 << run_bits)) {
                        run.copy_from_slice(copy);
                    }
                })
            });
        }
        if let Some(p) = progress {
            p.sweep_done(pass.gates.len());
        }
    }
    SweepReport {
        sweeps: passes.len(),
        fused_gates: fused.len(),
        perm,
        fuse_width,
    }
}

/// Split the state into runs of `2^run_bits` amplitudes and group them: group members differ
/// exactly in the `gathered` qubits (member `m` has gathered qubit `i` set when bit `i` of `m`
/// is), so that each group is a state of `run_bits + gathered.len()` qubits.
fn gather<'a, T>(
    pieces: &'a mut [&mut [Amp<T>]],
    run_bits: usize,
    n: usize,
    gathered: &[usize],
) -> Vec<Vec<&'a mut [Amp<T>]>> {
    let mut slots: Vec<Option<&mut [Amp<T>]>> = pieces
        .iter_mut()
        .flat_map(|p| p.chunks_mut(1 << run_bits))
        .map(Some)
        .collect();
    debug_assert_eq!(slots.len(), 1 << (n - run_bits));
    let gathered: Vec<usize> = gathered.iter().map(|&q| q - run_bits).collect();
    let free: Vec<usize> = (0..n - run_bits)
        .filter(|b| !gathered.contains(b))
        .collect();
    let deposit = |x: usize, bits: &[usize]| -> usize {
        bits.iter()
            .enumerate()
            .map(|(i, &b)| ((x >> i) & 1) << b)
            .sum()
    };
    (0..1usize << free.len())
        .map(|f| {
            let base = deposit(f, &free);
            (0..1usize << gathered.len())
                .map(|m| {
                    slots[base | deposit(m, &gathered)]
                        .take()
                        .expect("each run is in one group")
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates;

    /// `layers` layers on `n` qubits: a distinct one-qubit rotation on every qubit, then the CNOTs
    /// on the pairs `pairs(layer)` names.
    fn layered_ops(n: usize, layers: usize, pairs: impl Fn(usize) -> Vec<[usize; 2]>) -> Vec<Op> {
        let mut ops = Vec::new();
        for layer in 0..layers {
            for q in 0..n {
                let t = (layer * n + q) as f64;
                ops.push(Op {
                    qubits: vec![q],
                    matrix: gates::u3(0.3 + t * 0.1, t * 0.2, -0.5 + t * 0.05),
                });
            }
            for [c, t] in pairs(layer) {
                ops.push(Op {
                    qubits: vec![c, t],
                    matrix: gates::controlled(&gates::x(), 1),
                });
            }
        }
        ops
    }

    /// `ops` on `n` qubits from |0...0>, swept at `width` (relabelling qubits or not) over pieces
    /// of 64 amplitudes in groups of 16 KiB, copied from `copy_groups_from` bytes of state on:
    /// the state and the report.
    fn swept(
        n: usize,
        ops: &[Op],
        width: fusion::Width,
        relabel: bool,
        copy_groups_from: usize,
    ) -> (Vec<Amp<f64>>, SweepReport) {
        let mut state = vec![[0.0f64; 2]; 1 << n];
        state[0] = [1.0, 0.0];
        let piece_bits = 6;
        let mut pieces: Vec<&mut [Amp<f64>]> = state.chunks_mut(1 << piece_bits).collect();
        let blocking = Blocking {
            group_bytes: 16 << 10,
            copy_groups_from,
        };
        let report = run(
            &mut pieces,
            piece_bits,
            n,
            ops,
            width,
            relabel,
            blocking,
            None,
        );
        (state, report)
    }

    /// Asserts that the states `a` and `b` (named `an` and `bn` in a message) agree within 1e-12.
    fn assert_same_state(a: &[Amp<f64>], b: &[Amp<f64>], an: &str, bn: &str) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x[0] - y[0]).abs() < 1e-12 && (x[1] - y[1]).abs() < 1e-12,
                "amplitude {i}: {an} {x:?}, {bn} {y:?}"
            );
        }
    }

    /// A measured fusion width (which streams the state twice to time it, and prices every
    /// width's sweeps) leaves the same state as a fixed width: the timing changes nothing.
    #[test]
    fn a_measured_width_gives_the_fixed_width_state() {
        let n = 12;
        let ops = layered_ops(n, 4, |_| (0..n - 1).map(|q| [q, q + 1]).collect());
        let mut states = Vec::new();
        for width in [fusion::Width::Fixed(2), fusion::Width::Measured(5)] {
            let (state, report) = swept(n, &ops, width, false, usize::MAX);
            assert!((1..=fusion::MAX_FUSE).contains(&report.fuse_width));
            states.push(state);
        }
        assert_same_state(&states[0], &states[1], "fixed", "measured");
    }

    /// Sweeping in place and through the per-thread group copies gives the same state, with
    /// groups small enough that a 12-qubit state has many sweeps and gathered qubits.
    #[test]
    fn copied_groups_give_the_in_place_result() {
        let n = 12;
        let ops = layered_ops(n, 6, |layer| {
            (layer % 2..n - 1)
                .step_by(2)
                .map(|q| [q, (q + 1 + layer) % n])
                .collect()
        });
        let mut states = Vec::new();
        for copy_groups_from in [usize::MAX, 0] {
            let (state, report) = swept(n, &ops, fusion::Width::Fixed(2), true, copy_groups_from);
            assert!(report.sweeps > 3, "only {} sweeps", report.sweeps);
            states.push(state);
        }
        let norm: f64 = states[1].iter().map(|a| a[0] * a[0] + a[1] * a[1]).sum();
        assert!((norm - 1.0).abs() < 1e-9, "norm {norm}");
        assert_same_state(&states[0], &states[1], "in place", "copied");
    }
}
