//! Dynamic circuits: mid-circuit measurements, resets and `if(creg==n)` conditions, sampled
//! shot by shot as Qiskit Aer defines them.
//!
//! The unitary prefix (the gates before the first measurement, reset or condition) runs once.
//! What follows runs in one of two ways:
//!
//! - **branches**: at a measurement (or reset) of a state that `s` shots share, the shots are
//!   split between outcome 0 and 1 by a binomial draw with the outcome's probability; when both
//!   get shots, the state is copied, the branch with fewer shots runs first (projected on its
//!   outcome), and the other resumes from the copy afterwards. Depth first, with a stack of
//!   copies instead of recursion: a copy is open only for branches whose sibling with fewer
//!   shots is running, so at most `log2(shots)` copies (and at most one per measurement) are
//!   open at once. Work is one run per distinct outcome path, not per shot.
//! - **trajectories**: when those copies would not fit, the prefix's state is saved once and
//!   each shot starts from it and follows its own outcomes.
//!
//! A measurement with outcome `m` is the projection `diag(1/sqrt(p0), 0)` or
//! `diag(0, 1/sqrt(p1))` (a reset after outcome 1: `[[0, 1/sqrt(p1)], [0, 0]]`), applied as a
//! one-qubit gate by the same kernels (in memory and out of core), fused with the gates after
//! it. Measurements that end the circuit (nothing but measurements after them) are not
//! branched: each branch samples them from its final state.

use std::collections::BTreeMap;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::fusion::Op;
use crate::gates::{Complex, Matrix};
use crate::kernel::Real;
use crate::progress::Progress;
use crate::qasm::{Circuit, Instruction, Operation};
use crate::sim::{Counts, Options, SavedState, Simulation};
use crate::Result;

/// What running shots needs of a state: a [`Simulation`] in one process, or one rank's part of
/// a state split over MPI ranks, where every rank runs the same shots in step (every value the
/// runner decides on is the same on every rank).
pub(crate) trait ShotState {
    /// A copy of the state to resume a branch from.
    type Saved;
    /// Apply `ops` (on logical qubits).
    fn apply(&mut self, ops: &[Op]) -> Result<()>;
    /// The squared norms of the state's part with logical qubit `q` at 0 and at 1.
    fn weights_of(&mut self, q: usize) -> Result<[f64; 2]>;
    /// A copy of the state and its layout.
    fn save(&mut self) -> Result<Self::Saved>;
    /// Make `saved` the state again.
    fn restore(&mut self, saved: &mut Self::Saved) -> Result<()>;
    /// Sample `shots` measurements of `qubits` as [`Simulation::sample`] does.
    fn sample(&mut self, shots: usize, qubits: &[usize], seed: u64) -> Result<Counts>;
    /// Where progress is reported, if anywhere.
    fn progress(&self) -> Option<&Progress>;
}

impl<T: Real> ShotState for Simulation<T> {
    type Saved = SavedState;
    fn apply(&mut self, ops: &[Op]) -> Result<()> {
        Simulation::apply(self, ops)
    }
    fn weights_of(&mut self, q: usize) -> Result<[f64; 2]> {
        Simulation::weights_of(self, q)
    }
    fn save(&mut self) -> Result<SavedState> {
        Simulation::save(self)
    }
    fn restore(&mut self, saved: &mut SavedState) -> Result<()> {
        Simulation::restore(self, saved)
    }
    fn sample(&mut self, shots: usize, qubits: &[usize], seed: u64) -> Result<Counts> {
        Simulation::sample(self, shots, qubits, seed)
    }
    fn progress(&self) -> Option<&Progress> {
        Simulation::progress(self)
    }
}

/// Out of core, at most this many copies of the state are kept open on the SSD for branches:
/// each takes the state's size there, and each resumption reads and writes the whole state.
pub const MAX_SPILLED_COPIES: usize = 4;

/// How the shots of a dynamic circuit run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    /// Branches while their copies of the state fit (in memory: half the memory available; out
    /// of core: [`MAX_SPILLED_COPIES`] on the SSD), trajectories otherwise.
    #[default]
    Auto,
    /// Always branches.
    Branches,
    /// Always one trajectory per shot.
    Trajectories,
}

impl std::str::FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Method, String> {
        match s {
            "auto" => Ok(Method::Auto),
            "branches" => Ok(Method::Branches),
            "trajectories" => Ok(Method::Trajectories),
            other => Err(format!(
                "{other:?} is not a method: give auto, branches or trajectories"
            )),
        }
    }
}

/// How the shots of a dynamic circuit ran (`"dynamic"` in the JSON report).
#[derive(Debug, Clone, Serialize)]
pub struct DynamicReport {
    /// `branches` or `trajectories`.
    pub method: &'static str,
    /// Distinct outcome paths run to the end (branches), or shots run one by one (trajectories).
    pub branches: u64,
    /// Shots.
    pub shots: u64,
    /// Gates of the unitary prefix, run once.
    pub prefix_gates: usize,
    /// Instructions after the prefix, before the final measurements.
    pub dynamic_instructions: usize,
    /// Measurements and resets there (each may split the shots).
    pub dynamic_measurements: usize,
    /// Final measurements, sampled from each branch's state.
    pub final_measurements: usize,
    /// Copies the branches would need at most: min(measurements, log2(shots)).
    pub copies_needed: usize,
    /// Copies the budget allows (bytes of copy space over the state's size).
    pub copies_allowed: u64,
    /// Copies of the state made (branches: one per split; trajectories: the prefix's).
    pub copies_made: u64,
    /// Most copies open at once.
    pub open_copies_max: usize,
    /// Scans of the state for an outcome's probability.
    pub probability_scans: u64,
}

/// A branch waiting for its turn: it resumes from `state`, taking `outcome` at instruction
/// `at` with `shots` shots.
struct Waiting<Saved> {
    at: usize,
    outcome: usize,
    weights: [f64; 2],
    shots: u64,
    clbits: Vec<bool>,
    state: Saved,
}

/// The projection of one qubit on `outcome`, renormalised by the outcome's weight; after a
/// reset, outcome 1 is also moved to 0.
fn projection(outcome: usize, weight: f64, reset: bool) -> Matrix {
    let z = Complex::new(0.0, 0.0);
    let s = Complex::new(1.0 / weight.sqrt(), 0.0);
    let rows = match (outcome, reset) {
        (0, _) => vec![s, z, z, z],
        (_, false) => vec![z, z, z, s],
        (_, true) => vec![z, s, z, z],
    };
    Matrix::from_rows(1, rows)
}

/// Split `shots` between outcome 0 and 1: the number that read 1, each with probability `p1`.
/// Exact (a Bernoulli draw per shot): the work is one draw per shot per level of the tree.
fn binomial(rng: &mut impl Rng, shots: u64, p1: f64) -> u64 {
    if p1 <= 0.0 {
        return 0;
    }
    if p1 >= 1.0 {
        return shots;
    }
    (0..shots).filter(|_| rng.random::<f64>() < p1).count() as u64
}

/// The copies a branch run needs at most: one per measurement along a path, and at most
/// `log2(shots)`, since the branch that runs while its sibling waits has at most half the shots.
pub fn copies_needed(measurements: usize, shots: u64) -> usize {
    let halvings = if shots <= 1 {
        0
    } else {
        shots.ilog2() as usize
    };
    measurements.min(halvings)
}

/// A dynamic circuit cut where its shots part: the unitary prefix, the body (from the first
/// measurement, reset or condition to the final measurements) and the final measurements.
pub(crate) struct ShotPlan<'c> {
    circuit: &'c Circuit,
    /// The gates before the first measurement, reset or condition: run once.
    pub(crate) prefix: Vec<Op>,
    body: &'c [Instruction],
    /// (qubit, classical bit) of each final measurement.
    finals: Vec<(usize, usize)>,
    /// Measurements and resets in the body.
    measurements: usize,
}

impl<'c> ShotPlan<'c> {
    /// Cut `circuit`.
    pub(crate) fn new(circuit: &'c Circuit) -> ShotPlan<'c> {
        let instructions = &circuit.instructions;
        let prefix_end = instructions
            .iter()
            .position(|i| !matches!((i.operation, i.condition), (Operation::Gate(_), None)))
            .unwrap_or(instructions.len());
        let is_final_measure = |i: &Instruction| {
            matches!(
                (i.operation, i.condition),
                (Operation::Measure { .. }, None)
            )
        };
        let body_end = instructions.len()
            - instructions[prefix_end..]
                .iter()
                .rev()
                .take_while(|i| is_final_measure(i))
                .count();
        let finals = instructions[body_end..]
            .iter()
            .map(|i| match i.operation {
                Operation::Measure { qubit, clbit } => (qubit, clbit),
                _ => unreachable!("only final measurements"),
            })
            .collect();
        let body = &instructions[prefix_end..body_end];
        let measurements = body
            .iter()
            .filter(|i| !matches!(i.operation, Operation::Gate(_)))
            .count();
        let prefix = instructions[..prefix_end]
            .iter()
            .map(|i| match i.operation {
                Operation::Gate(g) => Op {
                    qubits: circuit.gates[g].qubits.clone(),
                    matrix: circuit.gates[g].matrix.clone(),
                },
                _ => unreachable!("the prefix is gates"),
            })
            .collect();
        ShotPlan {
            circuit,
            prefix,
            body,
            finals,
            measurements,
        }
    }

    /// The widest gate of the circuit.
    pub(crate) fn widest(&self) -> usize {
        self.circuit
            .gates
            .iter()
            .map(|g| g.qubits.len())
            .max()
            .unwrap_or(1)
    }

    /// Run `shots` shots on `state`, which holds the prefix's state, from a seed; `allowed` is
    /// the number of copies of the state that fit ([`copies_allowed`]). The counts are keyed as
    /// Qiskit's `get_counts()` ([`Circuit::counts_key`]).
    pub(crate) fn run<S: ShotState>(
        &self,
        state: &mut S,
        method: Method,
        allowed: u64,
        shots: u64,
        seed: u64,
    ) -> Result<(DynamicReport, Counts)> {
        let needed = copies_needed(self.measurements, shots);
        let branches = match method {
            Method::Auto => needed as u64 <= allowed,
            Method::Branches => true,
            Method::Trajectories => false,
        };
        let mut report = DynamicReport {
            method: if branches { "branches" } else { "trajectories" },
            branches: 0,
            shots,
            prefix_gates: self.prefix.len(),
            dynamic_instructions: self.body.len(),
            dynamic_measurements: self.measurements,
            final_measurements: self.finals.len(),
            copies_needed: needed,
            copies_allowed: allowed,
            copies_made: 0,
            open_copies_max: 0,
            probability_scans: 0,
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut runner = Runner {
            circuit: self.circuit,
            body: self.body,
            finals: &self.finals,
            counts: &mut counts,
            report: &mut report,
            rng: &mut rng,
        };
        if branches {
            runner.branches(state, shots)?;
        } else if shots > 0 {
            let mut saved = state.save()?;
            runner.report.copies_made += 1;
            runner.report.open_copies_max = 1;
            for shot in 0..shots {
                if shot > 0 {
                    state.restore(&mut saved)?;
                }
                runner.trajectory(state)?;
            }
        }
        Ok((report, counts))
    }
}

/// Copies of `sim`'s state (or of a rank's part) that fit: in memory, half the memory
/// available over the state's size; out of core, [`MAX_SPILLED_COPIES`] on the SSD.
pub(crate) fn copies_allowed<T: Real>(sim: &Simulation<T>) -> u64 {
    if sim.in_memory() {
        crate::memory::available(std::path::Path::new("/")).map_or(u64::MAX, |a| a / 2)
            / sim.state_bytes()
    } else {
        MAX_SPILLED_COPIES as u64
    }
}

/// Run `shots` shots of a dynamic circuit from a seed; the counts are keyed as Qiskit's
/// `get_counts()` ([`Circuit::counts_key`]). Returns the simulation (holding the last state run)
/// with `report().dynamic` filled in.
pub fn run_shots<T: Real>(
    circuit: &Circuit,
    options: &Options,
    shots: u64,
    seed: u64,
) -> Result<(Simulation<T>, Counts)> {
    let plan = ShotPlan::new(circuit);
    // The automatic fusion rule judged by the circuit's gates run once (a trajectory's shots
    // run parts of them again, each part fused on its own).
    let options = &options.for_run(circuit.gates.len(), circuit.num_qubits);
    let mut sim = Simulation::<T>::start(circuit.num_qubits, plan.widest(), options)?;
    let started = Instant::now();
    if let Some(p) = sim.progress() {
        p.shots_planned(shots);
    }
    sim.apply(&plan.prefix)?;
    let prefix_pass_reports = sim.report().pass_reports.len();
    let allowed = copies_allowed(&sim);
    let (report, counts) = plan.run(&mut sim, options.dynamic_method, allowed, shots, seed)?;
    let r = sim.report_mut();
    // One report per pass would grow with every shot: the prefix's passes are listed, and
    // `passes` counts them all.
    r.pass_reports.truncate(prefix_pass_reports);
    r.gates = circuit.gates.len();
    r.simulate_seconds = started.elapsed().as_secs_f64();
    r.dynamic = Some(report);
    Ok((sim, counts))
}

/// The state of a run over a dynamic circuit's instructions.
struct Runner<'a, R: Rng> {
    circuit: &'a Circuit,
    body: &'a [Instruction],
    finals: &'a [(usize, usize)],
    counts: &'a mut BTreeMap<String, u64>,
    report: &'a mut DynamicReport,
    rng: &'a mut R,
}

impl<R: Rng> Runner<'_, R> {
    fn gate(&self, g: usize) -> Op {
        Op {
            qubits: self.circuit.gates[g].qubits.clone(),
            matrix: self.circuit.gates[g].matrix.clone(),
        }
    }

    /// Measure (or reset) instruction `at` on the state: the weights of outcome 0 and 1, after
    /// applying the gates still pending.
    fn weights<S: ShotState>(
        &mut self,
        sim: &mut S,
        pending: &mut Vec<Op>,
        qubit: usize,
    ) -> Result<[f64; 2]> {
        sim.apply(pending)?;
        pending.clear();
        self.report.probability_scans += 1;
        sim.weights_of(qubit)
    }

    /// Take `outcome` at measurement or reset `instruction`: its projection joins the pending
    /// gates and a measurement records its bit.
    fn take(
        instruction: &Instruction,
        outcome: usize,
        weights: [f64; 2],
        pending: &mut Vec<Op>,
        clbits: &mut [bool],
    ) {
        let (qubit, reset) = match instruction.operation {
            Operation::Measure { qubit, clbit } => {
                clbits[clbit] = outcome == 1;
                (qubit, false)
            }
            Operation::Reset { qubit } => (qubit, true),
            Operation::Gate(_) => unreachable!("only measurements and resets split"),
        };
        pending.push(Op {
            qubits: vec![qubit],
            matrix: projection(outcome, weights[outcome], reset),
        });
    }

    /// The end of a path with `shots` shots: sample the final measurements from the state.
    fn leaf<S: ShotState>(
        &mut self,
        sim: &mut S,
        pending: &mut Vec<Op>,
        shots: u64,
        clbits: &mut [bool],
    ) -> Result<()> {
        self.report.branches += 1;
        if let Some(p) = sim.progress() {
            p.shots_counted(shots);
        }
        if self.finals.is_empty() {
            *self
                .counts
                .entry(self.circuit.counts_key(clbits))
                .or_insert(0) += shots;
            return Ok(());
        }
        sim.apply(pending)?;
        pending.clear();
        let qubits: Vec<usize> = self.finals.iter().map(|&(q, _)| q).collect();
        let seed = self.rng.random::<u64>();
        let sampled = sim.sample(shots as usize, &qubits, seed)?;
        for (key, n) in sampled {
            // The sample's key has qubits[0] as its last character; measurements into the same
            // bit: the later one wins, as in program order.
            for (&(_, clbit), bit) in self.finals.iter().zip(key.chars().rev()) {
                clbits[clbit] = bit == '1';
            }
            *self
                .counts
                .entry(self.circuit.counts_key(clbits))
                .or_insert(0) += n;
        }
        Ok(())
    }

    /// Run the body from instruction `at` with `shots` shots on the state, splitting at
    /// measurements when `split`; returns at the end of the body, or at a split with the
    /// branch left for later.
    #[allow(clippy::too_many_arguments)]
    fn run_from<S: ShotState>(
        &mut self,
        sim: &mut S,
        mut at: usize,
        shots: &mut u64,
        clbits: &mut [bool],
        pending: &mut Vec<Op>,
        waiting: Option<&mut Vec<Waiting<S::Saved>>>,
    ) -> Result<()> {
        let mut waiting = waiting;
        while at < self.body.len() {
            let instruction = self.body[at];
            if instruction.condition.is_some_and(|c| !c.holds(clbits)) {
                at += 1;
                continue;
            }
            let qubit = match instruction.operation {
                Operation::Gate(g) => {
                    pending.push(self.gate(g));
                    at += 1;
                    continue;
                }
                Operation::Measure { qubit, .. } | Operation::Reset { qubit } => qubit,
            };
            let weights = self.weights(sim, pending, qubit)?;
            let total = weights[0] + weights[1];
            let ones = binomial(self.rng, *shots, weights[1] / total);
            let split = [*shots - ones, ones];
            let outcome = match waiting.as_deref_mut() {
                Some(stack) if split[0] > 0 && split[1] > 0 => {
                    // The branch with fewer shots runs now; the other waits on a copy.
                    let now = usize::from(split[1] < split[0]);
                    let later = 1 - now;
                    stack.push(Waiting {
                        at,
                        outcome: later,
                        weights,
                        shots: split[later],
                        clbits: clbits.to_vec(),
                        state: sim.save()?,
                    });
                    self.report.copies_made += 1;
                    self.report.open_copies_max = self.report.open_copies_max.max(stack.len());
                    now
                }
                _ => usize::from(split[1] > 0),
            };
            *shots = split[outcome];
            Self::take(&instruction, outcome, weights, pending, clbits);
            at += 1;
        }
        Ok(())
    }

    /// All shots as one tree of branches, depth first.
    fn branches<S: ShotState>(&mut self, sim: &mut S, shots: u64) -> Result<()> {
        if shots == 0 {
            return Ok(());
        }
        let mut stack: Vec<Waiting<S::Saved>> = Vec::new();
        let mut pending: Vec<Op> = Vec::new();
        let mut clbits = vec![false; self.circuit.num_clbits];
        let mut shots = shots;
        let mut at = 0;
        loop {
            self.run_from(
                sim,
                at,
                &mut shots,
                &mut clbits,
                &mut pending,
                Some(&mut stack),
            )?;
            self.leaf(sim, &mut pending, shots, &mut clbits)?;
            let Some(mut next) = stack.pop() else {
                return Ok(());
            };
            pending.clear();
            sim.restore(&mut next.state)?;
            drop(next.state);
            clbits = next.clbits;
            shots = next.shots;
            Self::take(
                &self.body[next.at],
                next.outcome,
                next.weights,
                &mut pending,
                &mut clbits,
            );
            at = next.at + 1;
        }
    }

    /// One shot from the state as it is.
    fn trajectory<S: ShotState>(&mut self, sim: &mut S) -> Result<()> {
        let mut pending = Vec::new();
        let mut clbits = vec![false; self.circuit.num_clbits];
        let mut shots = 1;
        self.run_from(sim, 0, &mut shots, &mut clbits, &mut pending, None)?;
        self.leaf(sim, &mut pending, 1, &mut clbits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_needed_is_bounded_by_measurements_and_halvings() {
        assert_eq!(copies_needed(10, 1), 0);
        assert_eq!(copies_needed(10, 2), 1);
        assert_eq!(copies_needed(10, 1000), 9);
        assert_eq!(copies_needed(3, 1000), 3);
    }

    #[test]
    fn binomial_splits_keep_the_shots_and_follow_p() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        assert_eq!(binomial(&mut rng, 100, 0.0), 0);
        assert_eq!(binomial(&mut rng, 100, 1.0), 100);
        let ones = binomial(&mut rng, 100_000, 0.3);
        // Standard deviation 145: 6 of them either side.
        assert!((29_130..=30_870).contains(&ones), "{ones}");
    }
}
