//! Gate fusion and the out-of-core pass plan.
//!
//! Fusion multiplies neighbouring gates into one dense gate on at most `max` qubits, so that the
//! state is swept once per fused gate instead of once per gate. Open blocks act on disjoint
//! qubits, so gates on unrelated qubits fuse even when they are far apart in the program (they
//! commute); a gate that would make a block too large flushes the blocks it touches.
//!
//! The pass plan splits the gate list into passes for an out-of-core run: each pass may use the
//! `low` always-local qubits plus at most `extra` others, which are gathered into the buffer.

use crate::gates::Matrix;

/// A gate as the planner sees it: qubits (bit `i` of the matrix is `qubits[i]`) and matrix.
#[derive(Debug, Clone)]
pub struct Op {
    /// The qubits.
    pub qubits: Vec<usize>,
    /// The unitary.
    pub matrix: Matrix,
}

struct Block {
    qubits: Vec<usize>,
    matrix: Matrix,
    order: usize,
}

/// The widest fused gate.
pub const MAX_FUSE: usize = 5;

/// How wide fused gates may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// At most this many qubits (1 to [`MAX_FUSE`]).
    Fixed(usize),
    /// The width (1 to [`MAX_FUSE`]) whose run costs least by a [`CostModel`] measured on
    /// this machine: each gate width's kernel cost in cache
    /// ([`crate::bench::fusion_costs`]), the sweeps each width's gates take, and the time to
    /// stream the state through memory once per sweep.
    Measured,
}

/// What a run's parts take on this machine, to price a fusion width by: each sweep over the
/// state costs the larger of its gates' arithmetic and one streaming read and write of the
/// state (the two overlap: a sweep's groups are read while others are computed).
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    /// Seconds per amplitude of a dense `k`-qubit gate on one thread over a state in cache,
    /// index `k` (1 to [`MAX_FUSE`]; [`crate::bench::fusion_costs`]).
    pub gate_seconds: Vec<f64>,
    /// Threads that share each sweep's arithmetic.
    pub threads: usize,
    /// Amplitudes of the state.
    pub amplitudes: usize,
    /// Seconds for one streaming read and write of the whole state, measured on the state
    /// itself ([`crate::bench::state_stream_seconds`]): the DRAM's bandwidth when it does not
    /// fit in the last-level cache, far less when it does.
    pub stream_seconds: f64,
}

impl CostModel {
    /// Seconds for one sweep that applies fused gates of these widths.
    pub fn sweep_seconds(&self, widths: &[usize]) -> f64 {
        let per_amplitude: f64 = widths.iter().map(|&k| self.gate_seconds[k]).sum();
        let compute = per_amplitude * self.amplitudes as f64 / self.threads.max(1) as f64;
        compute.max(self.stream_seconds)
    }

    /// Seconds for a run of `sweeps` (the widths of each sweep's fused gates).
    pub fn run_seconds(&self, sweeps: &[Vec<usize>]) -> f64 {
        sweeps.iter().map(|s| self.sweep_seconds(s)).sum()
    }
}

/// Fuse `ops` at each width from 1 to [`MAX_FUSE`], cut each fusion into sweeps as the run
/// will (`sweeps` gives the widths of each sweep's fused gates), and keep the width whose run
/// `model` prices lowest. Returns the width and its gates.
pub fn fuse_cheapest(
    ops: &[Op],
    model: &CostModel,
    sweeps: impl Fn(&[Op]) -> Vec<Vec<usize>>,
) -> (usize, Vec<Op>) {
    let mut best: Option<(f64, usize, Vec<Op>)> = None;
    for width in 1..=MAX_FUSE {
        let fused = fuse(ops, width);
        let total = model.run_seconds(&sweeps(&fused));
        // Strictly cheaper to take a wider width: equal costs keep the narrower one.
        if best.as_ref().is_none_or(|(b, _, _)| total < *b) {
            best = Some((total, width, fused));
        }
    }
    let (_, width, fused) = best.expect("at least one width");
    (width, fused)
}

/// The sweeps of a run that applies each fused gate in a sweep of its own.
pub fn one_gate_per_sweep(fused: &[Op]) -> Vec<Vec<usize>> {
    fused.iter().map(|op| vec![op.qubits.len()]).collect()
}

/// Fuse `ops` into gates on at most `max` qubits (1 to [`MAX_FUSE`]), preserving the circuit's
/// unitary.
pub fn fuse(ops: &[Op], max: usize) -> Vec<Op> {
    let max = max.clamp(1, MAX_FUSE);
    let mut open: Vec<Block> = Vec::new();
    let mut out: Vec<(usize, Op)> = Vec::new();
    let mut order = 0;
    let flush = |b: Block, out: &mut Vec<(usize, Op)>| {
        out.push((
            b.order,
            Op {
                qubits: b.qubits,
                matrix: b.matrix,
            },
        ))
    };
    for op in ops {
        let (touching, rest): (Vec<Block>, Vec<Block>) = open
            .drain(..)
            .partition(|b| b.qubits.iter().any(|q| op.qubits.contains(q)));
        open = rest;
        let mut union: Vec<usize> = touching
            .iter()
            .flat_map(|b| b.qubits.iter().copied())
            .collect();
        for &q in &op.qubits {
            if !union.contains(&q) {
                union.push(q);
            }
        }
        let mut touching = touching;
        if touching.is_empty() {
            // Nothing to merge with: join the newest open block that has room (the two act on
            // disjoint qubits, so they commute), which saves a sweep over the state.
            if let Some(i) = (0..open.len())
                .rev()
                .find(|&i| open[i].qubits.len() + union.len() <= max)
            {
                let b = open.remove(i);
                union.extend(b.qubits.iter().copied());
                touching.push(b);
            }
        }
        if union.len() <= max && op.qubits.len() <= max {
            union.sort_unstable();
            let mut m = crate::gates::identity(union.len());
            let mut first = usize::MAX;
            for b in touching {
                first = first.min(b.order);
                m = b.matrix.expand(&b.qubits, &union).times(&m);
            }
            m = op.matrix.expand(&op.qubits, &union).times(&m);
            let order_of = if first == usize::MAX {
                order += 1;
                order
            } else {
                first
            };
            open.push(Block {
                qubits: union,
                matrix: m,
                order: order_of,
            });
        } else {
            touching.sort_by_key(|b| b.order);
            for b in touching {
                flush(b, &mut out);
            }
            order += 1;
            open.push(Block {
                qubits: op.qubits.clone(),
                matrix: op.matrix.clone(),
                order,
            });
        }
    }
    open.sort_by_key(|b| b.order);
    for b in open {
        flush(b, &mut out);
    }
    // Blocks are emitted when flushed; a block flushed later may have been opened earlier, but it
    // acts on qubits disjoint from every block emitted in between, so the order is sound.
    out.into_iter().map(|(_, op)| op).collect()
}

/// One pass of an out-of-core run: the gates `gates` (a range of the op list), with the qubits
/// `extra` (all `>= low`) gathered into the buffer beside the `low` always-local qubits.
#[derive(Debug, Clone, PartialEq)]
pub struct Pass {
    /// Indices of the ops of this pass.
    pub gates: std::ops::Range<usize>,
    /// The non-local qubits made local for this pass, ascending; exactly `extra` of them.
    pub extra: Vec<usize>,
}

/// Split `ops` (on `n` qubits) into as few passes as the greedy rule gives: a pass grows while
/// the qubits `>= low` of its gates number at most `extra`.
pub fn plan_passes(ops: &[Op], n: usize, low: usize, extra: usize) -> Vec<Pass> {
    let mut passes = Vec::new();
    let mut start = 0;
    let mut set: Vec<usize> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let mut next = set.clone();
        for &q in &op.qubits {
            if q >= low && !next.contains(&q) {
                next.push(q);
            }
        }
        if next.len() > extra && i > start {
            passes.push((start..i, std::mem::take(&mut set)));
            start = i;
            next = op.qubits.iter().copied().filter(|&q| q >= low).collect();
        }
        set = next;
    }
    if start < ops.len() {
        passes.push((start..ops.len(), set));
    }
    passes
        .into_iter()
        .map(|(gates, mut set)| {
            // Pad with unused qubits so that every block has the same shape.
            let mut q = low;
            while set.len() < extra && q < n {
                if !set.contains(&q) {
                    set.push(q);
                }
                q += 1;
            }
            set.sort_unstable();
            Pass { gates, extra: set }
        })
        .collect()
}

/// Relabel qubits (logical `q` becomes physical `perm[q]`) to make the pass plan short: try the
/// program's own order, most-used qubits lowest, and first-used lowest, and keep the best.
/// Relabelling is free before the first gate: the initial state |0...0> is the same under any.
pub fn choose_layout(ops: &[Op], n: usize, low: usize, extra: usize) -> (Vec<usize>, usize) {
    let identity: Vec<usize> = (0..n).collect();
    let mut uses = vec![0usize; n];
    let mut first = vec![usize::MAX; n];
    for (i, op) in ops.iter().enumerate() {
        for &q in &op.qubits {
            uses[q] += 1;
            first[q] = first[q].min(i);
        }
    }
    let by_key = |key: &dyn Fn(usize) -> (usize, usize)| -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&q| key(q));
        let mut perm = vec![0; n];
        for (phys, &q) in order.iter().enumerate() {
            perm[q] = phys;
        }
        perm
    };
    let most_used = by_key(&|q| (usize::MAX - uses[q], q));
    let first_used = by_key(&|q| (first[q], q));
    let mut best = (identity.clone(), usize::MAX);
    for perm in [identity, most_used, first_used] {
        let relabelled = relabel(ops, &perm);
        let passes = plan_passes(&relabelled, n, low, extra).len();
        if passes < best.1 {
            best = (perm, passes);
        }
    }
    best
}

/// `ops` with every qubit `q` replaced by `perm[q]`.
pub fn relabel(ops: &[Op], perm: &[usize]) -> Vec<Op> {
    ops.iter()
        .map(|op| Op {
            qubits: op.qubits.iter().map(|&q| perm[q]).collect(),
            matrix: op.matrix.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates;

    fn layered_ops() -> Vec<Op> {
        let mut ops = Vec::new();
        for layer in 0..3 {
            for q in 0..5 {
                ops.push(Op {
                    qubits: vec![q],
                    matrix: gates::u3(0.1 * (layer * 5 + q) as f64, 0.2, 0.3),
                });
            }
            for q in 0..4 {
                ops.push(Op {
                    qubits: vec![q, q + 1],
                    matrix: gates::controlled(&gates::x(), 1),
                });
            }
        }
        ops
    }

    fn model(gate_seconds: [f64; 6], stream_seconds: f64) -> CostModel {
        CostModel {
            gate_seconds: gate_seconds.to_vec(),
            threads: 2,
            amplitudes: 1 << 20,
            stream_seconds,
        }
    }

    /// Each fused gate in a sweep of its own, with a state in cache (streaming it costs
    /// nothing): the width whose gates' arithmetic is least wins. Wide gates as cheap as
    /// narrow ones: the widest fusion (fewest gates); each extra qubit costing eight times
    /// more: narrow gates.
    #[test]
    fn in_cache_the_least_arithmetic_wins() {
        let ops = layered_ops();
        let flat = model([0.0, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9], 0.0);
        let (width, fused) = fuse_cheapest(&ops, &flat, one_gate_per_sweep);
        let fewest = (1..=MAX_FUSE).map(|w| fuse(&ops, w).len()).min().unwrap();
        assert_eq!(fused.len(), fewest, "width {width}");
        assert!(width >= 4, "flat costs chose width {width}");
        let steep = model([0.0, 1e-9, 2e-9, 16e-9, 128e-9, 1024e-9], 0.0);
        let (width, fused) = fuse_cheapest(&ops, &steep, one_gate_per_sweep);
        assert!(width <= 2, "steep costs chose width {width}");
        assert_eq!(fused.len(), fuse(&ops, width).len());
        let cost = |w: usize| steep.run_seconds(&one_gate_per_sweep(&fuse(&ops, w)));
        assert!((1..=MAX_FUSE).all(|w| cost(width) <= cost(w)));
    }

    /// The same kernel costs with a state out of cache, where each sweep streams it from
    /// memory: a sweep costs at least the stream, so fewer sweeps win once the stream outweighs
    /// the extra arithmetic, and the arithmetic wins again when all the gates share one sweep.
    #[test]
    fn out_of_cache_sweeps_count() {
        let ops = layered_ops();
        // Arithmetic per amplitude: 1, 2, 16, 128, 1024 ns by width (steep enough that in cache
        // narrow gates win); 2^20 amplitudes over 2 threads.
        let costs = [0.0, 1e-9, 2e-9, 16e-9, 128e-9, 1024e-9];
        let in_cache = model(costs, 0.0);
        let (narrow, _) = fuse_cheapest(&ops, &in_cache, one_gate_per_sweep);
        // A stream of 1 s outweighs any one gate's arithmetic (at most 1024e-9 * 2^19 = 0.54 s):
        // every sweep costs the stream, and the width with fewest gates wins.
        let memory_bound = model(costs, 1.0);
        let (wide, fused) = fuse_cheapest(&ops, &memory_bound, one_gate_per_sweep);
        let fewest = (1..=MAX_FUSE).map(|w| fuse(&ops, w).len()).min().unwrap();
        assert_eq!(fused.len(), fewest);
        assert!(
            wide > narrow,
            "memory-bound chose {wide}, in cache {narrow}"
        );
        // All of a width's gates in one sweep (a cache-blocked run) with a stream shorter than
        // any width's arithmetic (1 ms against at least 27 ns x 2^19 / 27 gates): one stream
        // whatever the width, so the arithmetic decides as in cache.
        let one_sweep = |fused: &[Op]| vec![fused.iter().map(|o| o.qubits.len()).collect()];
        let (blocked, _) = fuse_cheapest(&ops, &model(costs, 1e-3), one_sweep);
        let (blocked_in_cache, _) = fuse_cheapest(&ops, &in_cache, one_sweep);
        assert_eq!(blocked, blocked_in_cache);
        // The price itself: a sweep of a 2- and a 3-qubit gate is the larger of
        // (2 + 16) ns x 2^19 and the stream.
        let sweep = model(costs, 1e-3).sweep_seconds(&[2, 3]);
        assert!((sweep - 18e-9 * (1 << 19) as f64).abs() < 1e-12, "{sweep}");
        assert_eq!(model(costs, 1.0).sweep_seconds(&[2, 3]), 1.0);
    }

    fn op(name: &str, qubits: &[usize]) -> Op {
        Op {
            qubits: qubits.to_vec(),
            matrix: crate::qasm::standard_matrix(name, &[]).unwrap(),
        }
    }

    #[test]
    fn fusion_merges_disjoint_layers_into_blocks() {
        let ops: Vec<Op> = (0..8).map(|q| op("h", &[q])).collect();
        let fused = fuse(&ops, 4);
        assert_eq!(fused.len(), 2);
        assert!(fused.iter().all(|f| f.qubits.len() == 4));
        let ops = vec![
            op("h", &[0]),
            op("cx", &[0, 1]),
            op("cx", &[1, 2]),
            op("h", &[5]),
        ];
        assert_eq!(fuse(&ops, 2).len(), 3);
        assert_eq!(fuse(&ops, 3).len(), 2);
        assert_eq!(fuse(&ops, 4).len(), 1);
        assert_eq!(fuse(&ops, 1).len(), 4);
        let _ = gates::h();
    }

    #[test]
    fn passes_respect_the_extra_qubit_budget() {
        // low = 4 local qubits; qubits 4..8 are not local; budget of 2 extra per pass.
        let ops = vec![
            op("h", &[0]),
            op("cx", &[4, 5]),
            op("h", &[4]),
            op("cx", &[6, 0]),
            op("h", &[7]),
        ];
        let passes = plan_passes(&ops, 8, 4, 2);
        assert_eq!(passes.len(), 2);
        assert_eq!(
            passes[0],
            Pass {
                gates: 0..3,
                extra: vec![4, 5]
            }
        );
        assert_eq!(
            passes[1],
            Pass {
                gates: 3..5,
                extra: vec![6, 7]
            }
        );
        // Cycling over three non-local qubits with room for two takes three passes in program
        // order; relabelling the busy qubits low takes one.
        let cycle: Vec<Op> = [0, 4, 5, 6, 4, 5, 6]
            .iter()
            .map(|&q| op("h", &[q]))
            .collect();
        assert_eq!(plan_passes(&cycle, 8, 4, 2).len(), 3);
        let (perm, n) = choose_layout(&cycle, 8, 4, 2);
        assert_eq!(n, 1, "{perm:?}");
        assert_eq!(plan_passes(&relabel(&cycle, &perm), 8, 4, 2).len(), 1);
        // A single pass pads its gathered set to the budget.
        assert_eq!(plan_passes(&ops[..1], 8, 4, 2)[0].extra, vec![4, 5]);
    }
}
