//! The communication plan of a state vector split over `2^g` ranks.
//!
//! The `n` physical qubits are numbered as amplitude index bits: the low `m = n - g` are *local*
//! (inside each rank's part of `2^m` amplitudes) and the top `g` are *global* (bit `j` of the
//! rank number is physical qubit `m + j`). A gate runs without communication when all its
//! qubits sit at local positions. When the next gate touches a logical qubit held at a global
//! position, the plan inserts an *exchange*: several (global, local) position pairs swapped at
//! once, after which each rank holds other amplitudes. One exchange of `k` pairs sends
//! `1 - 2^-k` of every rank's part (to `2^k - 1` partners), where `k` separate swaps would send
//! `k / 2` of it.
//!
//! The planner works on the circuit's gates before fusion: fusion would merge gates into wider
//! ones (up to five qubits) whose union of qubits is what must be local, so planning first keeps
//! the needed sets small, and each rank then fuses the gates of its local batches itself.
//!
//! Choice of exchanges: at a gate that touches a global qubit, the plan takes the longest run of
//! gates from there whose qubits together fit in the `m` local positions (the *window*), and
//! brings every global qubit of the window in with one exchange; the local qubits sent out are
//! those not in the window whose next use is furthest away (Belady). Since any set of at most
//! `m` qubits can be made local by one exchange, cutting the circuit into the fewest such
//! windows gives the fewest exchanges.

use crate::fusion::Op;
use crate::QsimError;
use crate::Result;

/// One step of a distributed run.
#[derive(Debug, Clone)]
pub enum Step {
    /// Gates on local physical qubits (each below `m`), run by every rank on its part.
    Local(Vec<Op>),
    /// Swap these (global position, local position) pairs, all in one exchange.
    Exchange(Vec<(usize, usize)>),
}

/// The plan for a circuit over `2^g` ranks.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Qubits.
    pub n: usize,
    /// Global qubits (`log2` of the ranks).
    pub g: usize,
    /// Local batches and exchanges in order.
    pub steps: Vec<Step>,
    /// Physical position of each logical qubit at the end.
    pub final_position: Vec<usize>,
    /// Exchanges planned.
    pub exchanges: usize,
    /// Qubit swaps over all exchanges.
    pub swaps: usize,
    /// Fractions of one rank's part sent, summed over exchanges (`1 - 2^-k` each).
    pub parts_sent: f64,
    /// Exchanges without planning: one per gate on a global qubit (qubits never moved).
    pub naive_exchanges: usize,
    /// Fractions of one rank's part sent without planning.
    pub naive_parts_sent: f64,
}

impl Plan {
    /// Bytes each rank sends over the planned exchanges, for parts of `part_bytes`.
    pub fn bytes_per_rank(&self, part_bytes: u64) -> u64 {
        (self.parts_sent * part_bytes as f64).round() as u64
    }

    /// Bytes each rank would send without planning.
    pub fn naive_bytes_per_rank(&self, part_bytes: u64) -> u64 {
        (self.naive_parts_sent * part_bytes as f64).round() as u64
    }
}

/// The share of a rank's part one exchange of `k` pairs sends.
fn sent_share(k: usize) -> f64 {
    1.0 - 0.5f64.powi(k as i32)
}

/// Plan `ops` (on logical qubits `0..n`) over `2^g` ranks, from the identity layout.
pub fn plan(ops: &[Op], n: usize, g: usize) -> Result<Plan> {
    plan_from(ops, n, g, &(0..n).collect::<Vec<_>>())
}

/// Plan `ops` over `2^g` ranks from the layout `start` (the physical position of each logical
/// qubit, as a [`Plan::final_position`] left it).
pub fn plan_from(ops: &[Op], n: usize, g: usize, start: &[usize]) -> Result<Plan> {
    if g > n {
        return Err(QsimError::Config(format!(
            "{} ranks for {n} qubits: each rank needs at least one amplitude; use at most 2^{n} ranks",
            1u64 << g.min(63)
        )));
    }
    let m = n - g;
    if let Some(widest) = ops.iter().map(|o| o.qubits.len()).max() {
        if widest > m {
            return Err(QsimError::Config(format!(
                "a gate on {widest} qubits needs {widest} local qubits, but with 2^{g} ranks each \
                 rank holds only {m} of the {n}: use at most 2^{} ranks",
                n - widest
            )));
        }
    }
    // Next use of each logical qubit at or after each gate: next[i][q] is computed backwards on
    // the fly by a per-qubit list of gate indices.
    let mut uses: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, op) in ops.iter().enumerate() {
        for &q in &op.qubits {
            if uses[q].last() != Some(&i) {
                uses[q].push(i);
            }
        }
    }
    let next_use = |q: usize, from: usize| -> usize {
        let list = &uses[q];
        let k = list.partition_point(|&i| i < from);
        list.get(k).copied().unwrap_or(usize::MAX)
    };

    debug_assert_eq!(start.len(), n, "a position per logical qubit");
    let mut position: Vec<usize> = start.to_vec();
    let mut logical_at: Vec<usize> = vec![0; n];
    for (q, &p) in position.iter().enumerate() {
        logical_at[p] = q;
    }
    let mut steps = Vec::new();
    let mut batch: Vec<Op> = Vec::new();
    let (mut exchanges, mut swaps, mut parts_sent) = (0, 0, 0.0);
    let mut i = 0;
    while i < ops.len() {
        let op = &ops[i];
        if op.qubits.iter().all(|&q| position[q] < m) {
            batch.push(Op {
                qubits: op.qubits.iter().map(|&q| position[q]).collect(),
                matrix: op.matrix.clone(),
            });
            i += 1;
            continue;
        }
        // The window: gates from i on while their qubits together fit in the local positions.
        let mut window: Vec<bool> = vec![false; n];
        let mut size = 0;
        let mut end = i;
        while end < ops.len() {
            let added = ops[end].qubits.iter().filter(|&&q| !window[q]).count();
            if size + added > m {
                break;
            }
            for &q in &ops[end].qubits {
                if !window[q] {
                    window[q] = true;
                    size += 1;
                }
            }
            end += 1;
        }
        let incoming: Vec<usize> = (m..n)
            .map(|p| logical_at[p])
            .filter(|&q| window[q])
            .collect();
        // Local qubits outside the window, furthest next use first (Belady); ties by position.
        let mut candidates: Vec<(usize, usize)> = (0..m)
            .map(|p| logical_at[p])
            .filter(|&q| !window[q])
            .map(|q| (next_use(q, end), q))
            .collect();
        candidates.sort_by(|a, b| b.0.cmp(&a.0).then(position[a.1].cmp(&position[b.1])));
        let mut pairs = Vec::with_capacity(incoming.len());
        for (&q_in, &(_, q_out)) in incoming.iter().zip(&candidates) {
            let (pg, pl) = (position[q_in], position[q_out]);
            pairs.push((pg, pl));
            position.swap(q_in, q_out);
            logical_at.swap(pg, pl);
        }
        debug_assert_eq!(pairs.len(), incoming.len(), "the window leaves room");
        if !batch.is_empty() {
            steps.push(Step::Local(std::mem::take(&mut batch)));
        }
        exchanges += 1;
        swaps += pairs.len();
        parts_sent += sent_share(pairs.len());
        steps.push(Step::Exchange(pairs));
    }
    if !batch.is_empty() {
        steps.push(Step::Local(batch));
    }
    let (mut naive_exchanges, mut naive_parts_sent) = (0, 0.0);
    for op in ops {
        let k = op.qubits.iter().filter(|&&q| q >= m).count();
        if k > 0 {
            naive_exchanges += 1;
            naive_parts_sent += sent_share(k);
        }
    }
    Ok(Plan {
        n,
        g,
        steps,
        final_position: position,
        exchanges,
        swaps,
        parts_sent,
        naive_exchanges,
        naive_parts_sent,
    })
}

/// Split the local batch that follows an exchange into the gates an exchange can apply chunk by
/// chunk as it writes each chunk back (`hoisted`) and the rest, in order. A gate is hoisted when
/// every qubit of it is inside one chunk of the rank's array (`in_chunk`, by the position the
/// rank's simulation places it at) and no earlier gate of the batch that stays shares a qubit
/// with it: it then commutes with every gate it moves ahead of, so applying the hoisted gates
/// first and the rest after leaves the batch's unitary.
pub fn hoist_in_chunk(batch: &[Op], in_chunk: impl Fn(usize) -> bool) -> (Vec<Op>, Vec<Op>) {
    let mut blocked: Vec<usize> = Vec::new();
    let (mut hoisted, mut rest) = (Vec::new(), Vec::new());
    for op in batch {
        let free = op
            .qubits
            .iter()
            .all(|&q| in_chunk(q) && !blocked.contains(&q));
        if free {
            hoisted.push(op.clone());
        } else {
            blocked.extend(op.qubits.iter().copied());
            rest.push(op.clone());
        }
    }
    (hoisted, rest)
}

/// What of the batch after an exchange the exchange applies ([`hoist_in_chunk`]), and the rest:
/// the hoisted gates only when the rest takes fewer trips through the rank's part than the whole
/// batch (`trips`: sweeps in memory, passes out of core), nothing otherwise. Hoisted gates are
/// fused apart from the rest and applied chunk by chunk, which costs more arithmetic than riding
/// along in the batch's trips; on a machine whose cores also move the messages (shared memory,
/// or as many ranks as cores) that arithmetic does not hide behind the transfer, so it pays
/// only when it saves a trip's streaming (or, out of core, a pass's NVMe reads and writes).
pub fn overlap_batch(
    batch: &[Op],
    in_chunk: impl Fn(usize) -> bool,
    trips: impl Fn(&[Op]) -> usize,
) -> (Vec<Op>, Vec<Op>) {
    let (hoisted, rest) = hoist_in_chunk(batch, in_chunk);
    if hoisted.is_empty() || trips(&rest) >= trips(batch) {
        return (Vec::new(), batch.to_vec());
    }
    (hoisted, rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::{self, Complex, Matrix};
    use rand::{Rng, SeedableRng};

    /// Apply `matrix` (bit `i` of its index is `qubits[i]`) to the full state `psi`.
    fn apply_dense(psi: &mut [Complex], qubits: &[usize], matrix: &Matrix) {
        let d = 1usize << qubits.len();
        let mask: usize = qubits.iter().map(|&q| 1usize << q).sum();
        let spread = |j: usize| -> usize {
            qubits
                .iter()
                .enumerate()
                .map(|(b, &q)| ((j >> b) & 1) << q)
                .sum()
        };
        let mut old = vec![Complex::default(); d];
        for base in (0..psi.len()).filter(|b| b & mask == 0) {
            for (j, o) in old.iter_mut().enumerate() {
                *o = psi[base | spread(j)];
            }
            for r in 0..d {
                let mut acc = Complex::default();
                for (c, &o) in old.iter().enumerate() {
                    acc = acc + matrix.at(r, c) * o;
                }
                psi[base | spread(r)] = acc;
            }
        }
    }

    fn run_plain(ops: &[Op], n: usize) -> Vec<Complex> {
        let mut psi = vec![Complex::default(); 1 << n];
        psi[0] = Complex { re: 1.0, im: 0.0 };
        for op in ops {
            apply_dense(&mut psi, &op.qubits, &op.matrix);
        }
        psi
    }

    /// Run the plan on one full vector: local gates as they are, each exchange as the swaps of
    /// physical index bits it stands for; then read it back in logical order.
    fn run_planned(plan: &Plan, n: usize) -> Vec<Complex> {
        let m = n - plan.g;
        let mut psi = vec![Complex::default(); 1 << n];
        psi[0] = Complex { re: 1.0, im: 0.0 };
        for step in &plan.steps {
            match step {
                Step::Local(ops) => {
                    for op in ops {
                        assert!(op.qubits.iter().all(|&p| p < m), "a local gate is local");
                        apply_dense(&mut psi, &op.qubits, &op.matrix);
                    }
                }
                Step::Exchange(pairs) => {
                    for &(pg, pl) in pairs {
                        assert!(pg >= m && pl < m, "pairs are (global, local)");
                        apply_dense(&mut psi, &[pg, pl], &gates::swap());
                    }
                }
            }
        }
        (0..1usize << n)
            .map(|l| {
                let p: usize = (0..n)
                    .map(|q| ((l >> q) & 1) << plan.final_position[q])
                    .sum();
                psi[p]
            })
            .collect()
    }

    fn op(qubits: &[usize], matrix: Matrix) -> Op {
        Op {
            qubits: qubits.to_vec(),
            matrix,
        }
    }

    fn qft(n: usize) -> Vec<Op> {
        let mut ops = Vec::new();
        for q in (0..n).step_by(3) {
            ops.push(op(&[q], gates::x()));
        }
        for j in (0..n).rev() {
            ops.push(op(&[j], gates::h()));
            for k in (0..j).rev() {
                let angle = std::f64::consts::PI / (1u64 << (j - k)) as f64;
                ops.push(op(&[k, j], gates::controlled(&gates::phase(angle), 1)));
            }
        }
        for q in 0..n / 2 {
            ops.push(op(&[q, n - 1 - q], gates::swap()));
        }
        ops
    }

    fn ising(n: usize, steps: usize) -> Vec<Op> {
        let mut ops: Vec<Op> = (0..n).map(|q| op(&[q], gates::h())).collect();
        for s in 0..steps {
            for q in 0..n {
                ops.push(op(&[q, (q + 1) % n], gates::rzz(0.3 + 0.01 * s as f64)));
            }
            for q in 0..n {
                ops.push(op(&[q], gates::rx(0.7)));
            }
        }
        ops
    }

    fn random(n: usize, gates_count: usize, seed: u64) -> Vec<Op> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..gates_count)
            .map(|_| {
                let a = rng.random_range(0..n);
                let mut b = rng.random_range(0..n);
                while b == a {
                    b = rng.random_range(0..n);
                }
                let u = gates::u3(
                    rng.random_range(-3.0..3.0),
                    rng.random_range(-3.0..3.0),
                    rng.random_range(-3.0..3.0),
                );
                match rng.random_range(0..3) {
                    0 => op(&[a], u),
                    1 => op(&[a, b], gates::controlled(&u, 1)),
                    _ => op(&[a, b], gates::rxx(rng.random_range(-3.0..3.0))),
                }
            })
            .collect()
    }

    fn assert_close(a: &[Complex], b: &[Complex]) {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x.re - y.re).abs() < 1e-12 && (x.im - y.im).abs() < 1e-12,
                "amplitude {i}: {x:?} against {y:?}"
            );
        }
    }

    #[test]
    fn planned_runs_equal_the_plain_simulation() {
        let circuits: Vec<(&str, usize, Vec<Op>)> = vec![
            ("qft", 9, qft(9)),
            ("ising", 8, ising(8, 3)),
            ("random", 9, random(9, 120, 7)),
            ("random", 10, random(10, 200, 11)),
        ];
        for (name, n, ops) in &circuits {
            let plain = run_plain(ops, *n);
            for g in 0..=3 {
                let plan = plan(ops, *n, g).unwrap();
                assert_close(&run_planned(&plan, *n), &plain);
                if g > 0 {
                    assert!(plan.exchanges > 0, "{name} on 2^{g} ranks needs exchanges");
                }
                assert!(
                    plan.exchanges <= plan.naive_exchanges,
                    "{name} g={g}: {} planned against {} naive",
                    plan.exchanges,
                    plan.naive_exchanges
                );
            }
        }
    }

    /// Each batch after an exchange applied as the run does with the overlap: its hoisted
    /// gates first (chunks of `2^low` amplitudes), then the rest; the state is the plain one.
    #[test]
    fn hoisting_a_batch_s_in_chunk_gates_leaves_the_state() {
        let circuits: Vec<(usize, Vec<Op>)> =
            vec![(9, qft(9)), (8, ising(8, 3)), (10, random(10, 200, 11))];
        let mut hoisted_any = 0;
        for (n, ops) in &circuits {
            let plain = run_plain(ops, *n);
            for g in 1..=2 {
                for low in [2, 4] {
                    let mut plan = plan(ops, *n, g).unwrap();
                    let mut steps = Vec::new();
                    let mut after_exchange = false;
                    for step in plan.steps.drain(..) {
                        match step {
                            Step::Local(batch) if after_exchange => {
                                let (hoisted, rest) = hoist_in_chunk(&batch, |q| q < low);
                                assert!(hoisted.iter().all(|o| o.qubits.iter().all(|&q| q < low)));
                                assert_eq!(hoisted.len() + rest.len(), batch.len());
                                hoisted_any += hoisted.len();
                                steps.push(Step::Local(hoisted));
                                steps.push(Step::Local(rest));
                                after_exchange = false;
                            }
                            other => {
                                after_exchange = matches!(other, Step::Exchange(_));
                                steps.push(other);
                            }
                        }
                    }
                    plan.steps = steps;
                    assert_close(&run_planned(&plan, *n), &plain);
                }
            }
        }
        assert!(hoisted_any > 0, "some gates were hoisted");
    }

    /// The exchange takes a batch's in-chunk gates only when the rest takes fewer trips.
    #[test]
    fn gates_go_into_the_exchange_only_when_that_saves_a_trip() {
        // Chunks of 3 qubits; a trip gathers qubits 3 and up, two at a time.
        let batch = vec![
            op(&[5], gates::h()),
            op(&[0, 1], gates::swap()),
            op(&[4], gates::h()),
            op(&[1, 3], gates::swap()),
            op(&[2], gates::h()),
            op(&[3], gates::h()),
        ];
        let trips = |ops: &[Op]| crate::fusion::plan_passes(ops, 6, 3, 2).len();
        let (hoisted, rest) = overlap_batch(&batch, |q| q < 3, trips);
        // The swap on 0 and 1 and the H on 2 could go, but the rest (on 5, 4, then 3) would
        // still take the batch's 2 trips: nothing goes.
        assert!(hoisted.is_empty() && rest.len() == batch.len());
        // Those two alone: the whole batch goes, and no trip is left.
        let in_chunk_only: Vec<Op> = batch[1..2].iter().chain(&batch[4..5]).cloned().collect();
        let (hoisted, rest) = overlap_batch(&in_chunk_only, |q| q < 3, trips);
        assert_eq!((hoisted.len(), rest.len()), (2, 0));
    }

    #[test]
    fn one_rank_needs_no_exchange() {
        let plan = plan(&qft(8), 8, 0).unwrap();
        assert_eq!((plan.exchanges, plan.naive_exchanges), (0, 0));
        assert_eq!(plan.steps.len(), 1);
        assert_eq!(plan.final_position, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn qft_exchanges_are_few_and_send_less_than_half_the_naive_bytes() {
        // QFT-30 over 8 and 64 ranks: the naive count is one exchange per gate on a top qubit
        // (about a hundred); the plan needs ten times fewer, and sends at least 2x fewer bytes.
        for g in [3, 6] {
            let plan = plan(&qft(30), 30, g).unwrap();
            let part = 16u64 << (30 - g);
            assert!(
                10 * plan.exchanges <= plan.naive_exchanges,
                "g={g}: {} exchanges",
                plan.exchanges
            );
            assert!(
                2 * plan.bytes_per_rank(part) <= plan.naive_bytes_per_rank(part),
                "g={g}: {} planned bytes against {} naive",
                plan.bytes_per_rank(part),
                plan.naive_bytes_per_rank(part)
            );
        }
    }

    #[test]
    fn several_global_qubits_come_in_one_exchange() {
        // Gates on the three top qubits of 8 over 8 ranks: one exchange of three pairs.
        let ops = vec![
            op(&[7], gates::h()),
            op(&[6], gates::h()),
            op(&[5, 7], gates::swap()),
        ];
        let plan = plan(&ops, 8, 3).unwrap();
        assert_eq!(plan.exchanges, 1);
        assert_eq!(plan.swaps, 3);
        assert_eq!(plan.naive_exchanges, 3);
        assert!((plan.parts_sent - 0.875).abs() < 1e-12);
    }

    #[test]
    fn the_local_qubit_sent_out_is_the_one_used_last() {
        // 4 qubits, 2 ranks (m = 3): qubit 3 is needed; of the local ones 0 is used next, 2
        // never: qubit 2 goes out.
        let ops = vec![
            op(&[0, 1], gates::swap()),
            op(&[3], gates::h()),
            op(&[0], gates::h()),
            op(&[1], gates::h()),
        ];
        let plan = plan(&ops, 4, 1).unwrap();
        match &plan.steps[1] {
            Step::Exchange(pairs) => assert_eq!(pairs, &vec![(3, 2)]),
            other => panic!("expected an exchange, got {other:?}"),
        }
        assert_eq!(plan.final_position, vec![0, 1, 3, 2]);
    }

    #[test]
    fn a_gate_wider_than_the_local_part_is_refused() {
        let ops = vec![op(&[0, 1, 2], gates::controlled(&gates::x(), 2))];
        let err = plan(&ops, 4, 2).unwrap_err().to_string();
        assert!(err.contains("3 local qubits"), "{err}");
        assert!(err.contains("at most 2^1 ranks"), "{err}");
    }
}
