//! Cache-blocked sweeps: applying a list of gates to a state in memory with as few trips through
//! DRAM as possible.
//!
//! Applying fused gates one after another streams the whole state through memory once per gate,
//! which makes large states memory-bound. Instead, the gates are cut into *sweeps* exactly as an
//! out-of-core run cuts them into passes ([`fusion::plan_passes`]), but at the scale of a core's
//! cache: the state is viewed as runs of `2^run_bits` amplitudes, and a sweep gathers, for every
//! group, the runs that differ in a few chosen higher qubits (at most a cache's worth,
//! [`CACHE_BYTES`]). Every gate of the sweep acts inside each group, so a thread takes a group,
//! applies all of the sweep's gates to it while it stays in cache, and moves on: the state goes
//! through DRAM once per sweep instead of once per gate.

use rayon::prelude::*;

use crate::fusion::{self, Op};
use crate::kernel::{self, Amp, Prepared, Real};

/// Bytes of amplitudes a thread works on at once: 4 MiB, so that the groups of two threads stay
/// in a 32 MiB last-level cache while all of a sweep's gates run over them. (Groups the size of
/// the 512 KiB L2 were tried as a second level inside these and were no faster.)
pub const CACHE_BYTES: usize = 4 << 20;

/// Higher qubits gathered per sweep: more make sweeps carry more gates, fewer make the runs
/// (contiguous in memory) longer. Six leaves runs of 8 KiB at f32 and f64 in a 512 KiB group.
const GATHERED: usize = 6;

/// What a sweep run did.
#[derive(Debug, Clone)]
pub struct SweepReport {
    /// Trips through the whole state.
    pub sweeps: usize,
    /// Fused gates applied (summed over sweeps).
    pub fused_gates: usize,
    /// Physical bit position of each qubit of the ops (the identity unless relabelled).
    pub perm: Vec<usize>,
}

/// Apply `ops` (qubits given as bit positions of the state's index, `n` bits) to the state held
/// as `pieces` of `2^piece_bits` amplitudes, fusing up to `fuse` qubits, on the current rayon
/// pool, in groups of `cache_bytes` (see [`CACHE_BYTES`]). With `relabel`, the qubits are first relabelled to make the sweeps few (valid only
/// while the state is |0...0>, which any relabelling leaves unchanged); the report says where
/// each qubit went.
pub fn run<T: Real>(
    pieces: &mut [&mut [Amp<T>]],
    piece_bits: usize,
    n: usize,
    ops: &[Op],
    fuse: usize,
    relabel: bool,
    cache_bytes: usize,
) -> SweepReport {
    // At least four groups, so that both threads of a small state have work.
    let cache_bits = ((cache_bytes / std::mem::size_of::<Amp<T>>()).max(1).ilog2() as usize)
        .min(n.saturating_sub(2));
    let widest = ops.iter().map(|o| o.qubits.len()).max().unwrap_or(1);
    let run_bits = piece_bits.min(cache_bits.saturating_sub(GATHERED));
    // Too small a state for groups of short runs plus the widest gate: one fused gate at a time
    // over the whole state.
    if run_bits < 3 || cache_bits < run_bits + widest {
        let fused = fusion::fuse(ops, fuse);
        for op in &fused {
            kernel::apply(
                pieces,
                piece_bits,
                &Prepared::new(&op.matrix, op.qubits.clone()),
            );
        }
        return SweepReport {
            sweeps: fused.len(),
            fused_gates: fused.len(),
            perm: (0..n).collect(),
        };
    }
    let extra = cache_bits - run_bits;
    // Fuse first, over the whole list, so that cutting it into sweeps does not split blocks.
    let fused = fusion::fuse(ops, fuse);
    let (perm, fused) = if relabel {
        let (perm, _) = fusion::choose_layout(&fused, n, run_bits, extra);
        let relabelled = fusion::relabel(&fused, &perm);
        (perm, relabelled)
    } else {
        ((0..n).collect(), fused)
    };
    let passes = fusion::plan_passes(&fused, n, run_bits, extra);
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
        let mut groups = gather(pieces, run_bits, n, &pass.extra);
        groups.par_iter_mut().for_each(|group| {
            for g in &prepared {
                kernel::apply_serial(group, run_bits, g);
            }
        });
    }
    SweepReport {
        sweeps: passes.len(),
        fused_gates: fused.len(),
        perm,
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
