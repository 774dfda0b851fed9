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
use crate::QsimError;
use crate::Result;

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

/// How much lower a fusion must price than the one kept to replace it in [`fuse_cheapest`]: the
/// model's error. Prices from in-cache kernel timings missed sweep times by 5-10% either way
/// (2026-11-27: a 24-qubit f64 Ising circuit priced 3.4% below the 2-qubit fusion with some
/// chain links merged to three qubits, and ran 8% slower), so a smaller saving is noise.
pub const MODEL_MARGIN: f64 = 0.05;

/// How wide fused gates may be, and by which rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// Every gate is fused while the fused gate stays within this many qubits (1 to
    /// [`MAX_FUSE`]), whatever the wider gate costs: qsim's rule.
    Fixed(usize),
    /// At most this many qubits (1 to [`MAX_FUSE`]), each merge priced by a [`CostModel`]
    /// measured on this machine (each gate width's kernel cost in cache,
    /// [`crate::bench::fusion_costs`], the sweeps the gates take, and the time to stream the
    /// state through memory once per sweep): a gate joins a block only where the wider gate
    /// costs less than the two apart, as Qiskit Aer's cost-based fusion does under its
    /// `fusion_max_qubit`. The run then keeps whichever of that fusion and each fixed width up
    /// to the cap the model prices lowest ([`fuse_cheapest`]).
    Measured(usize),
    /// [`Width::Measured`] up to this many qubits where the run is long enough to repay
    /// measuring the costs, [`Width::Fixed`] at 2 qubits (or this cap, when narrower) where it
    /// is not ([`Width::for_run`], [`PRICED_FROM`]). Until a run resolves it, it counts as
    /// measured.
    Auto(usize),
}

/// Runs of at least this many gate-amplitudes (gates before fusion times the state's
/// amplitudes) are fused by measured cost under [`Width::Auto`]; shorter ones greedily to 2
/// qubits. Timing the kernels and the state's streaming and pricing the candidates take 5-10 ms
/// here; 2^31 gate-amplitudes fuse to about 2^29.5 amplitudes of 2-qubit gates, 0.15 s or more
/// on this machine's two cores, so the pricing stays within about 5% of the runs that take it.
/// Below, the fusion it would keep rarely differs from 2-qubit greedy fusion (it kept that on
/// every layered and Ising circuit measured), and could not save what the timing costs.
pub const PRICED_FROM: f64 = (1u64 << 31) as f64;

impl Width {
    /// The widest a fused gate may be.
    pub fn max(self) -> usize {
        match self {
            Width::Fixed(w) | Width::Measured(w) | Width::Auto(w) => w.clamp(1, MAX_FUSE),
        }
    }

    /// The width a run of `gates` gates over a state of `amplitudes` amplitudes uses:
    /// [`Width::Auto`] resolved by [`PRICED_FROM`], the others as they are.
    pub fn for_run(self, gates: usize, amplitudes: u64) -> Width {
        match self {
            Width::Auto(max) if gates as f64 * amplitudes as f64 >= PRICED_FROM => {
                Width::Measured(max)
            }
            Width::Auto(max) => Width::Fixed(max.clamp(1, 2)),
            other => other,
        }
    }

    /// The rule that merges gates, as reports name it: `greedy` or `cost`.
    pub fn rule(self) -> &'static str {
        match self {
            Width::Fixed(_) => "greedy",
            Width::Measured(_) | Width::Auto(_) => "cost",
        }
    }

    /// The width `--fuse` (`1` to [`MAX_FUSE`] qubits, or `auto`: [`MAX_FUSE`]) and
    /// `--fuse-rule` (`auto`, `cost` or `greedy`) ask for.
    pub fn parse(fuse: &str, rule: &str) -> Result<Width> {
        let max = match fuse.trim() {
            "auto" => MAX_FUSE,
            text => match text.parse::<usize>() {
                Ok(width) if (1..=MAX_FUSE).contains(&width) => width,
                _ => {
                    return Err(QsimError::Config(format!(
                        "--fuse {text}: give 1 (no fusion) to {MAX_FUSE} qubits, or auto (up to \
                         {MAX_FUSE}, merged where it pays by the kernels' cost measured on this \
                         machine)"
                    )))
                }
            },
        };
        match rule.trim() {
            "auto" => Ok(Width::Auto(max)),
            "cost" => Ok(Width::Measured(max)),
            "greedy" => Ok(Width::Fixed(max)),
            other => Err(QsimError::Config(format!(
                "--fuse-rule {other}: give auto (cost for long runs, greedy up to 2 qubits for \
                 short ones), cost (merge where the wider gate is cheaper, by measured kernel \
                 costs) or greedy (merge every gate that fits in --fuse qubits)"
            ))),
        }
    }
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
    /// Seconds of arithmetic for one `k`-qubit gate over the whole state, shared by the threads.
    pub fn compute_seconds(&self, k: usize) -> f64 {
        self.gate_seconds[k] * self.amplitudes as f64 / self.threads.max(1) as f64
    }

    /// Seconds for one sweep that applies fused gates of these widths.
    pub fn sweep_seconds(&self, widths: &[usize]) -> f64 {
        let compute: f64 = widths.iter().map(|&k| self.compute_seconds(k)).sum();
        compute.max(self.stream_seconds)
    }

    /// Seconds for a run of `sweeps` (the widths of each sweep's fused gates).
    pub fn run_seconds(&self, sweeps: &[Vec<usize>]) -> f64 {
        sweeps.iter().map(|s| self.sweep_seconds(s)).sum()
    }
}

/// The price of one fused gate of each width that a per-merge decision weighs: what adding
/// such a gate adds to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pricing {
    /// Each fused gate sweeps the state on its own: its arithmetic or one stream of the state,
    /// whichever is longer ([`CostModel::sweep_seconds`] of the one gate).
    SweepPerGate,
    /// Fused gates share cache-blocked sweeps, whose streaming the gates do not add to: the
    /// gate's arithmetic alone ([`CostModel::compute_seconds`]).
    SharedSweeps,
}

impl Pricing {
    /// Seconds a `k`-qubit fused gate adds to a run priced by `model`.
    pub fn price(self, model: &CostModel, k: usize) -> f64 {
        match self {
            Pricing::SweepPerGate => model.sweep_seconds(&[k]),
            Pricing::SharedSweeps => model.compute_seconds(k),
        }
    }
}

/// Fuse `ops` at each width from 1 to `max`, and once merge by merge as `pricing` prices the
/// gates by `model` ([`fuse_priced`]); cut each fusion into sweeps as the run will (`sweeps`
/// gives the widths of each sweep's fused gates), and keep the one whose run `model` prices
/// lowest. Returns the widest gate of the kept fusion (at most `max`) and its gates. A later
/// candidate replaces the one kept only when it prices [`MODEL_MARGIN`] lower: near-equal prices
/// keep the earlier, the narrower fixed width, then the fixed widths over the priced merges.
pub fn fuse_cheapest(
    ops: &[Op],
    max: usize,
    model: &CostModel,
    pricing: Pricing,
    sweeps: impl Fn(&[Op]) -> Vec<Vec<usize>>,
) -> (usize, Vec<Op>) {
    let max = max.clamp(1, MAX_FUSE);
    let price = |k: usize| pricing.price(model, k);
    // Candidates are priced by their shapes alone (which gates act on which qubits): only the
    // one kept multiplies its matrices.
    let candidate = |c: usize, matrices: bool| -> Vec<Op> {
        if c <= max {
            fuse_by(ops, c, None, matrices)
        } else {
            fuse_by(ops, max, Some(&price), matrices)
        }
    };
    let last = if max > 1 { max + 1 } else { max };
    let mut best: Option<(f64, usize)> = None;
    for c in 1..=last {
        let total = model.run_seconds(&sweeps(&candidate(c, false)));
        if best.is_none_or(|(b, _)| total < b * (1.0 - MODEL_MARGIN)) {
            best = Some((total, c));
        }
    }
    let (_, kept) = best.expect("at least one width");
    let fused = candidate(kept, true);
    // A gate wider than the cap is applied unfused: it says nothing of the fusion.
    (widest(&fused).min(max), fused)
}

/// The widest gate of `ops` (1 when there are none).
pub fn widest(ops: &[Op]) -> usize {
    ops.iter().map(|o| o.qubits.len()).max().unwrap_or(1)
}

/// The sweeps of a run that applies each fused gate in a sweep of its own.
pub fn one_gate_per_sweep(fused: &[Op]) -> Vec<Vec<usize>> {
    fused.iter().map(|op| vec![op.qubits.len()]).collect()
}

/// Fuse `ops` into gates on at most `max` qubits (1 to [`MAX_FUSE`]), preserving the circuit's
/// unitary: every gate joins the open blocks it touches while their union has room
/// ([`Width::Fixed`]).
pub fn fuse(ops: &[Op], max: usize) -> Vec<Op> {
    fuse_by(ops, max, None, true)
}

/// Fuse `ops` into gates on at most `max` qubits, preserving the circuit's unitary, merging only
/// where it pays by `price` (seconds a fused gate of `k` qubits adds to the run): a gate joins
/// the subset of the open blocks it touches that lowers the total most (the others are
/// flushed), and a gate touching none joins the newest block with room only when the wider
/// gate costs no more than the two apart.
pub fn fuse_priced(ops: &[Op], max: usize, price: impl Fn(usize) -> f64) -> Vec<Op> {
    fuse_by(ops, max, Some(&price), true)
}

/// Of `touching` (the open blocks a gate on `op` qubits shares qubits with, at most
/// [`MAX_FUSE`] of them), the subset to merge the gate with, as a bit mask: the one whose
/// merged gate, less the blocks it replaces, costs least; the empty set (the gate alone) when
/// no merge pays.
fn cheapest_merge(
    touching: &[Block],
    op: &[usize],
    max: usize,
    price: &dyn Fn(usize) -> f64,
) -> usize {
    let mut best = (price(op.len()), 0usize);
    for mask in 1usize..1 << touching.len() {
        let mut union: Vec<usize> = op.to_vec();
        let mut replaced = 0.0;
        for (i, b) in touching.iter().enumerate() {
            if mask & (1 << i) != 0 {
                union.extend(b.qubits.iter().copied().filter(|q| !op.contains(q)));
                replaced += price(b.qubits.len());
            }
        }
        if union.len() > max {
            continue;
        }
        let added = price(union.len()) - replaced;
        // Equal cost: merge, which leaves fewer gates.
        if added <= best.0 {
            best = (added, mask);
        }
    }
    best.1
}

/// The qubits of `blocks` (disjoint) and of a gate on `qubits`, each once.
fn union_of(blocks: &[Block], qubits: &[usize]) -> Vec<usize> {
    let mut union: Vec<usize> = blocks
        .iter()
        .flat_map(|b| b.qubits.iter().copied())
        .collect();
    for &q in qubits {
        if !union.contains(&q) {
            union.push(q);
        }
    }
    union
}

/// The fusion of [`fuse`] (no `price`) or [`fuse_priced`]; without `matrices`, the shape alone:
/// each fused gate's qubits, with a placeholder matrix (for pricing candidates).
fn fuse_by(
    ops: &[Op],
    max: usize,
    price: Option<&dyn Fn(usize) -> f64>,
    matrices: bool,
) -> Vec<Op> {
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
        let mut touching = touching;
        // The touching blocks the gate does not join: flushed before it (they act on qubits
        // disjoint from the ones it joins, so emitting them first keeps the unitary).
        let mut apart: Vec<Block> = Vec::new();
        match price {
            _ if op.qubits.len() > max => apart = std::mem::take(&mut touching),
            None => {
                if union_of(&touching, &op.qubits).len() > max {
                    apart = std::mem::take(&mut touching);
                }
            }
            Some(price) => {
                let mask = cheapest_merge(&touching, &op.qubits, max, price);
                for (i, b) in std::mem::take(&mut touching).into_iter().enumerate() {
                    if mask & (1 << i) != 0 {
                        touching.push(b);
                    } else {
                        apart.push(b);
                    }
                }
            }
        }
        if touching.is_empty() && (apart.is_empty() || price.is_some()) {
            // Nothing to merge with: join the newest open block that has room (the two act on
            // disjoint qubits, so they commute), which saves a sweep over the state; priced,
            // only where the wider gate costs no more than the two apart.
            let k = op.qubits.len();
            let pays = |b: &Block| {
                let m = b.qubits.len();
                m + k <= max && price.is_none_or(|p| p(m + k) <= p(m) + p(k))
            };
            if let Some(i) = (0..open.len()).rev().find(|&i| pays(&open[i])) {
                touching.push(open.remove(i));
            }
        }
        apart.sort_by_key(|b| b.order);
        for b in apart {
            flush(b, &mut out);
        }
        if touching.is_empty() {
            order += 1;
            open.push(Block {
                qubits: op.qubits.clone(),
                matrix: if matrices {
                    op.matrix.clone()
                } else {
                    crate::gates::identity(0)
                },
                order,
            });
            continue;
        }
        let mut union = union_of(&touching, &op.qubits);
        union.sort_unstable();
        let mut m = crate::gates::identity(if matrices { union.len() } else { 0 });
        let mut first = usize::MAX;
        for b in touching {
            first = first.min(b.order);
            if matrices {
                m = b.matrix.expand(&b.qubits, &union).times(&m);
            }
        }
        if matrices {
            m = op.matrix.expand(&op.qubits, &union).times(&m);
        }
        open.push(Block {
            qubits: union,
            matrix: m,
            order: first,
        });
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
    use crate::gates::{self, Matrix};

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

    /// [`fuse_cheapest`] up to the cap, each fused gate in a sweep of its own.
    fn cheapest_per_gate(ops: &[Op], costs: &CostModel) -> (usize, Vec<Op>) {
        fuse_cheapest(
            ops,
            MAX_FUSE,
            costs,
            Pricing::SweepPerGate,
            one_gate_per_sweep,
        )
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
    /// The automatic rule prices runs of at least [`PRICED_FROM`] gate-amplitudes and fuses
    /// shorter ones greedily to 2 qubits (or the cap, when narrower); the other rules stay as
    /// they are, and each names its rule.
    #[test]
    fn the_automatic_rule_prices_only_long_runs() {
        let short = (PRICED_FROM as u64 >> 20) as usize - 1;
        assert_eq!(Width::Auto(5).for_run(short, 1 << 20), Width::Fixed(2));
        assert_eq!(Width::Auto(1).for_run(short, 1 << 20), Width::Fixed(1));
        assert_eq!(
            Width::Auto(5).for_run(short + 1, 1 << 20),
            Width::Measured(5)
        );
        assert_eq!(Width::Auto(3).for_run(1, 1 << 40), Width::Measured(3));
        assert_eq!(Width::Measured(5).for_run(1, 2), Width::Measured(5));
        assert_eq!(
            Width::Fixed(4).for_run(usize::MAX, 1 << 40),
            Width::Fixed(4)
        );
        assert_eq!(Width::Auto(5).for_run(short, 1 << 20).rule(), "greedy");
        assert_eq!(Width::Auto(5).rule(), "cost");
        assert_eq!(Width::Measured(2).rule(), "cost");
        assert_eq!(Width::Auto(4).max(), 4);
    }

    #[test]
    fn in_cache_the_least_arithmetic_wins() {
        let ops = layered_ops();
        let flat = model([0.0, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9], 0.0);
        let (width, fused) = cheapest_per_gate(&ops, &flat);
        let fewest = (1..=MAX_FUSE).map(|w| fuse(&ops, w).len()).min().unwrap();
        assert_eq!(fused.len(), fewest, "width {width}");
        assert!(width >= 4, "flat costs chose width {width}");
        let steep = model([0.0, 1e-9, 2e-9, 16e-9, 128e-9, 1024e-9], 0.0);
        let (width, fused) = cheapest_per_gate(&ops, &steep);
        assert!(width <= 2, "steep costs chose width {width}");
        // Priced merge by merge, the one-qubit gates join the two-qubit blocks (no wider, so
        // free) and pairs of one-qubit gates become two-qubit ones: fewer gates than any fixed
        // width gives at these costs, and a run priced no higher than the cheapest of them.
        let kept = steep.run_seconds(&one_gate_per_sweep(&fused));
        let cost = |w: usize| steep.run_seconds(&one_gate_per_sweep(&fuse(&ops, w)));
        assert!((1..=MAX_FUSE).all(|w| kept * (1.0 - MODEL_MARGIN) <= cost(w)));
        assert_eq!(
            fused.len(),
            fuse_priced(&ops, MAX_FUSE, |k| steep.sweep_seconds(&[k])).len()
        );
        assert!(fused.len() < fuse(&ops, 2).len());
    }

    /// The whole unitary of `ops` on `n` qubits, as a dense matrix.
    fn unitary(ops: &[Op], n: usize) -> Matrix {
        let all: Vec<usize> = (0..n).collect();
        ops.iter().fold(gates::identity(n), |m, op| {
            op.matrix.expand(&op.qubits, &all).times(&m)
        })
    }

    fn assert_same_unitary(a: &[Op], b: &[Op], n: usize) {
        let (ua, ub) = (unitary(a, n), unitary(b, n));
        for r in 0..1 << n {
            for c in 0..1 << n {
                let (x, y) = (ua.at(r, c), ub.at(r, c));
                assert!(
                    (x.re - y.re).abs() < 1e-12 && (x.im - y.im).abs() < 1e-12,
                    "entry ({r}, {c}): {x:?} against {y:?}"
                );
            }
        }
    }

    /// A transverse-field Ising step (rzz as cx-rz-cx along a chain, then rx on every qubit):
    /// the chain's blocks grow to three qubits where a three-qubit gate costs less than two
    /// two-qubit ones, and stay at two where it costs more, whatever the cap; every fusion keeps
    /// the circuit's unitary, including the partial merges (a gate joining one of the two
    /// blocks it touches).
    #[test]
    fn priced_merges_happen_only_where_the_wider_gate_is_cheaper() {
        let n = 6;
        let mut ops = Vec::new();
        for step in 0..2 {
            for q in 0..n - 1 {
                ops.push(op("cx", &[q, q + 1]));
                ops.push(Op {
                    qubits: vec![q + 1],
                    matrix: gates::rz(0.1 + 0.01 * (step * n + q) as f64),
                });
                ops.push(op("cx", &[q, q + 1]));
            }
            for q in 0..n {
                ops.push(Op {
                    qubits: vec![q],
                    matrix: gates::rx(0.2 + 0.03 * q as f64),
                });
            }
        }
        let widest = |f: &[Op]| f.iter().map(|o| o.qubits.len()).max().unwrap();
        // Three qubits at 1.5 times two: a chain link costs half a two-qubit gate more.
        let cheap_three = |k: usize| [0.0, 1.0, 2.0, 3.0, 40.0, 80.0][k];
        let fused = fuse_priced(&ops, MAX_FUSE, cheap_three);
        assert_eq!(widest(&fused), 3);
        assert!(fused.len() < fuse(&ops, 2).len());
        assert_same_unitary(&ops, &fused, n);
        // Three qubits at 2.5 times two: never worth it, even with room for five.
        let dear_three = |k: usize| [0.0, 1.0, 2.0, 5.0, 40.0, 80.0][k];
        let fused = fuse_priced(&ops, MAX_FUSE, dear_three);
        assert_eq!(widest(&fused), 2);
        assert_eq!(fused.len(), fuse(&ops, 2).len());
        assert_same_unitary(&ops, &fused, n);
        // Flat prices: as wide as the cap allows, as the greedy rule.
        let flat = |_: usize| 1.0;
        for cap in 1..=MAX_FUSE {
            let fused = fuse_priced(&ops, cap, flat);
            assert!(widest(&fused) <= cap.max(2));
            assert_same_unitary(&ops, &fused, n);
            assert_same_unitary(&ops, &fuse(&ops, cap), n);
        }
        // A gate that touches a 2- and a 3-qubit block with room for 4: it joins the one that
        // pays (the 2-qubit block) and the other is flushed first.
        let touching = vec![
            op("cx", &[0, 1]),
            op("ccx", &[2, 3, 4]),
            op("cx", &[1, 2]),
            op("h", &[2]),
        ];
        let fused = fuse_priced(&touching, 4, cheap_three);
        assert_same_unitary(&touching, &fused, 5);
        assert_eq!(
            fused.len(),
            2,
            "{:?}",
            fused.iter().map(|o| &o.qubits).collect::<Vec<_>>()
        );
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
        let (narrow, _) = cheapest_per_gate(&ops, &in_cache);
        // A stream of 1 s outweighs any one gate's arithmetic (at most 1024e-9 * 2^19 = 0.54 s):
        // every sweep costs the stream, and the width with fewest gates wins.
        let memory_bound = model(costs, 1.0);
        let (wide, fused) = cheapest_per_gate(&ops, &memory_bound);
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
        let (blocked, _) = fuse_cheapest(
            &ops,
            MAX_FUSE,
            &model(costs, 1e-3),
            Pricing::SharedSweeps,
            one_sweep,
        );
        let (blocked_in_cache, _) =
            fuse_cheapest(&ops, MAX_FUSE, &in_cache, Pricing::SharedSweeps, one_sweep);
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
