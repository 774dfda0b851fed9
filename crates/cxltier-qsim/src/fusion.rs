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
    /// The width (1 to [`MAX_FUSE`]) whose fused gates cost least, by each gate width's
    /// kernel cost measured on this machine ([`crate::bench::fusion_costs`]).
    Measured,
}

/// Fuse `ops` at each width from 1 to [`MAX_FUSE`] and keep the one whose gates cost least:
/// `cost[k]` is the time per amplitude of a `k`-qubit gate. Returns the width and its gates.
pub fn fuse_cheapest(ops: &[Op], cost: &[f64]) -> (usize, Vec<Op>) {
    let mut best: Option<(f64, usize, Vec<Op>)> = None;
    for width in 1..=MAX_FUSE {
        let fused = fuse(ops, width);
        let total: f64 = fused.iter().map(|op| cost[op.qubits.len()]).sum();
        // Strictly cheaper to take a wider width: equal costs keep the narrower one.
        if best.as_ref().is_none_or(|(b, _, _)| total < *b) {
            best = Some((total, width, fused));
        }
    }
    let (_, width, fused) = best.expect("at least one width");
    (width, fused)
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

    /// The width chosen by cost is the one whose fused gates cost least: with wide gates as
    /// cheap as narrow ones, the widest fusion (fewest gates); with each extra qubit costing
    /// eight times more, narrow gates; and the gates returned are that width's fusion.
    #[test]
    fn the_cheapest_width_wins() {
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
        let flat = [0.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        let (width, fused) = fuse_cheapest(&ops, &flat);
        let fewest = (1..=MAX_FUSE).map(|w| fuse(&ops, w).len()).min().unwrap();
        assert_eq!(fused.len(), fewest, "width {width}");
        assert!(width >= 4, "flat costs chose width {width}");
        let steep = [0.0, 1.0, 2.0, 16.0, 128.0, 1024.0];
        let (width, fused) = fuse_cheapest(&ops, &steep);
        assert!(width <= 2, "steep costs chose width {width}");
        assert_eq!(fused.len(), fuse(&ops, width).len());
        let cost = |w: usize| -> f64 { fuse(&ops, w).iter().map(|o| steep[o.qubits.len()]).sum() };
        assert!((1..=MAX_FUSE).all(|w| cost(width) <= cost(w)));
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
