//! A circuit run from its simulation to what is read out of it: the amplitudes asked for, counts
//! keyed as Qiskit keys them, the state's norm and where the time went, as one [`RunOutput`]
//! (the report a `--json` line is made of).
//!
//! ```text
//! Run::new(&circuit, "bell.qasm").options(options).shots(1000)  (the run asked for)
//!     .simulate()?                                              (one process: Simulated)
//!     .read_out()?                                              (RunOutput)
//! ```
//!
//! Over MPI ranks (feature `mpi`), [`Run::simulate_ranks`] does both on every rank.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use crate::dist::DistReport;
use crate::Result;
use crate::{AnySimulation, Circuit, Options, Precision, QsimError, RunReport};

/// Where the time went, in seconds.
#[derive(Debug, Clone, Serialize)]
pub struct Timings {
    /// Reading and parsing the circuit (measured by the caller, who reads it).
    pub parse_seconds: f64,
    /// Laying out the state.
    pub setup_seconds: f64,
    /// Applying the gates (and a dynamic circuit's shots).
    pub simulate_seconds: f64,
    /// The norm, the amplitudes and the samples.
    pub readout_seconds: f64,
}

/// What a run did and what was read out of it.
#[derive(Debug, Clone, Serialize)]
pub struct RunOutput {
    /// The circuit, as the caller names it (its file).
    pub circuit: String,
    #[serde(flatten)]
    pub run: RunReport,
    /// The sum of the probabilities (1 but for rounding).
    pub norm: f64,
    /// The amplitudes asked for, [re, im] by basis state.
    pub amplitudes: BTreeMap<String, [f64; 2]>,
    /// Their probabilities by basis state.
    pub probabilities: BTreeMap<String, f64>,
    /// Sampled outcomes, keyed as Qiskit's `get_counts()`.
    pub counts: BTreeMap<String, u64>,
    /// Gates of the circuit over the simulation's seconds.
    pub gates_per_second: f64,
    pub timings: Timings,
    /// Over MPI ranks only: how many, and what splitting the state cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distribution: Option<DistReport>,
    /// The basis states asked for, in the order asked (repeats kept), and their amplitudes.
    #[serde(skip)]
    pub indices: Vec<u64>,
    #[serde(skip)]
    pub values: Vec<[f64; 2]>,
}

/// `--amplitudes`: basis states in decimal or `0b` binary, comma-separated.
pub fn parse_amplitude_indices(text: &str) -> Result<Vec<u64>> {
    text.split(',')
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| {
            let parsed = match s.strip_prefix("0b") {
                Some(bits) => u64::from_str_radix(bits, 2),
                None => s.parse(),
            };
            parsed.map_err(|_| {
                QsimError::Config(format!(
                    "--amplitudes: {s:?} is not an index (give decimal like 5 or binary like 0b101)"
                ))
            })
        })
        .collect()
}

/// Refuse `shots` whose sampling buffers ([`crate::SAMPLE_BYTES_PER_SHOT`] each) exceed the
/// memory available, before the simulation runs rather than after it.
pub fn check_sampling_memory(shots: usize) -> Result<()> {
    let per_shot = crate::SAMPLE_BYTES_PER_SHOT;
    let sampling = (shots as u64).saturating_mul(per_shot);
    match crate::memory::available(std::path::Path::new("/")) {
        Some(available) if sampling > available => Err(QsimError::Config(format!(
            "--shots {shots}: sampling needs {sampling} bytes of memory ({per_shot} per shot), but {available} are available: ask for fewer shots, or take them in several runs with other --seed values"
        ))),
        _ => Ok(()),
    }
}

/// A run asked for: the circuit, how to simulate it, and what to read out.
#[derive(Debug, Clone)]
pub struct Run<'c> {
    circuit: &'c Circuit,
    name: String,
    options: Options,
    precision: Precision,
    shots: usize,
    seed: u64,
    indices: Vec<u64>,
    parse_seconds: f64,
}

impl<'c> Run<'c> {
    /// A run of `circuit` (named `name` in the output) with default options, in f64, reading
    /// out only the norm.
    pub fn new(circuit: &'c Circuit, name: impl Into<String>) -> Run<'c> {
        Run {
            circuit,
            name: name.into(),
            options: Options::new(),
            precision: Precision::F64,
            shots: 0,
            seed: 1,
            indices: Vec::new(),
            parse_seconds: 0.0,
        }
    }

    /// How to simulate (memory, spill directories, placement, fusion, threads, progress).
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// Sample this many shots (a dynamic circuit needs some: each follows its own outcomes).
    pub fn shots(mut self, shots: usize) -> Self {
        self.shots = shots;
        self
    }

    /// The seed of the samples (the same seed draws the same shots whatever the layout).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Read out these basis states' amplitudes.
    pub fn amplitudes(mut self, indices: Vec<u64>) -> Self {
        self.indices = indices;
        self
    }

    /// The seconds the caller took to read and parse the circuit, for [`Timings`].
    pub fn parse_seconds(mut self, seconds: f64) -> Self {
        self.parse_seconds = seconds;
        self
    }

    /// A dynamic circuit has no single state vector to read amplitudes from: it needs shots and
    /// no amplitudes.
    pub fn check_dynamic(&self) -> Result<()> {
        let Some(line) = self.circuit.dynamic else {
            return Ok(());
        };
        if self.shots > 0 && self.indices.is_empty() {
            return Ok(());
        }
        Err(QsimError::NoSingleState {
            line,
            message: format!(
                "this line makes the circuit dynamic (a reset, an `if`, or an operation on a \
                 qubit after it was measured): each shot ends in a state of its own, so there is \
                 no single state vector{}; give --shots N to sample its counts",
                if self.indices.is_empty() {
                    ""
                } else {
                    " to read --amplitudes from (drop --amplitudes)"
                }
            ),
        })
    }

    /// Simulate in this process: a dynamic circuit shot by shot (its counts then come from its
    /// shots), any other once to its final state.
    pub fn simulate(&self) -> Result<Simulated<'_, 'c>> {
        let (sim, shot_counts) = self.shots_or_once(
            |shots, seed| {
                AnySimulation::run_shots(self.circuit, &self.options, self.precision, shots, seed)
            },
            || AnySimulation::run(self.circuit, &self.options, self.precision),
        )?;
        Ok(Simulated {
            run: self,
            sim,
            shot_counts,
        })
    }

    /// Simulate over the ranks of `cluster` and read out, every rank taking part (the read-out
    /// is collective); every rank returns the output, which one of them prints.
    #[cfg(feature = "mpi")]
    pub fn simulate_ranks(&self, cluster: &crate::dist::mpi::Cluster) -> Result<RunOutput> {
        use crate::dist::mpi::AnyDistSimulation;
        let (circuit, options, precision) = (self.circuit, &self.options, self.precision);
        let (mut sim, shot_counts) = self.shots_or_once(
            |shots, seed| {
                AnyDistSimulation::run_shots(cluster, circuit, options, precision, shots, seed)
            },
            || AnyDistSimulation::run(cluster, circuit, options, precision),
        )?;
        let readout = Instant::now();
        let norm = sim.norm()?;
        let values = sim.amplitudes(&self.indices)?;
        let counts = match shot_counts {
            Some(counts) => counts,
            None => self.sampled_counts(|shots, qubits, seed| sim.sample(shots, qubits, seed))?,
        };
        let dist = (cluster.size(), sim.dist_report().clone());
        Ok(self.output(sim.report(), Some(dist), norm, values, counts, readout))
    }

    /// A dynamic circuit run shot by shot (checked first: it has no single state), with the
    /// counts of its shots; any other run once, its counts left to the read-out.
    fn shots_or_once<S>(
        &self,
        shots: impl FnOnce(u64, u64) -> Result<(S, BTreeMap<String, u64>)>,
        once: impl FnOnce() -> Result<S>,
    ) -> Result<(S, Option<BTreeMap<String, u64>>)> {
        if self.circuit.dynamic.is_none() {
            return Ok((once()?, None));
        }
        self.check_dynamic()?;
        let (sim, counts) = shots(self.shots as u64, self.seed)?;
        Ok((sim, Some(counts)))
    }

    /// A unitary circuit's counts: `shots` samples of its measured qubits (all of them when it
    /// measures none), keyed by classical register; none without shots.
    fn sampled_counts(
        &self,
        sample: impl FnOnce(usize, &[usize], u64) -> Result<BTreeMap<String, u64>>,
    ) -> Result<BTreeMap<String, u64>> {
        if self.shots == 0 {
            return Ok(BTreeMap::new());
        }
        let (qubits, by_clbit) = measured_qubits(self.circuit);
        let raw = sample(self.shots, &qubits, self.seed)?;
        Ok(keyed_counts(self.circuit, raw, by_clbit.as_deref()))
    }

    fn output(
        &self,
        run: &RunReport,
        dist: Option<(usize, DistReport)>,
        norm: f64,
        values: Vec<[f64; 2]>,
        counts: BTreeMap<String, u64>,
        readout: Instant,
    ) -> RunOutput {
        let pairs = || self.indices.iter().zip(&values);
        let amplitudes = pairs().map(|(i, v)| (i.to_string(), *v)).collect();
        let probabilities = pairs()
            .map(|(i, v)| (i.to_string(), v[0] * v[0] + v[1] * v[1]))
            .collect();
        let (ranks, distribution) = dist.unzip();
        RunOutput {
            circuit: self.name.clone(),
            norm,
            amplitudes,
            probabilities,
            counts,
            gates_per_second: if run.simulate_seconds > 0.0 {
                run.gates as f64 / run.simulate_seconds
            } else {
                0.0
            },
            timings: Timings {
                parse_seconds: self.parse_seconds,
                setup_seconds: run.setup_seconds,
                simulate_seconds: run.simulate_seconds,
                readout_seconds: readout.elapsed().as_secs_f64(),
            },
            ranks,
            distribution,
            indices: self.indices.clone(),
            values,
            run: run.clone(),
        }
    }
}

/// A simulation done in this process, its state ready to read out.
pub struct Simulated<'r, 'c> {
    run: &'r Run<'c>,
    sim: AnySimulation,
    /// A dynamic circuit's counts, drawn shot by shot.
    shot_counts: Option<BTreeMap<String, u64>>,
}

impl Simulated<'_, '_> {
    /// The norm, the amplitudes asked for and the counts (a dynamic circuit's from its shots,
    /// with no amplitudes: it has no single state).
    pub fn read_out(mut self) -> Result<RunOutput> {
        let run = self.run;
        let readout = Instant::now();
        let norm = self.sim.norm()?;
        let (values, counts) = match self.shot_counts.take() {
            Some(counts) => (Vec::new(), counts),
            None => {
                let values = self.sim.amplitudes(&run.indices)?;
                let sim = &mut self.sim;
                let counts =
                    run.sampled_counts(|shots, qubits, seed| sim.sample(shots, qubits, seed))?;
                (values, counts)
            }
        };
        Ok(run.output(self.sim.report(), None, norm, values, counts, readout))
    }
}

/// The qubits sampled for counts: every qubit when nothing is measured, else the measured ones
/// by classical bit, with the classical bit of each (for [`keyed_counts`]).
pub fn measured_qubits(circuit: &Circuit) -> (Vec<usize>, Option<Vec<Option<usize>>>) {
    if circuit.measurements.is_empty() {
        return ((0..circuit.num_qubits).collect(), None);
    }
    let mut by_clbit = vec![None; circuit.num_clbits];
    for &(q, c) in &circuit.measurements {
        by_clbit[c] = Some(q);
    }
    (by_clbit.iter().flatten().copied().collect(), Some(by_clbit))
}

/// Counts keyed as Qiskit's get_counts(): each classical register with its bit 0 rightmost, the
/// last declared register first, registers separated by a space; unmeasured bits read 0.
pub fn keyed_counts(
    circuit: &Circuit,
    raw: BTreeMap<String, u64>,
    by_clbit: Option<&[Option<usize>]>,
) -> BTreeMap<String, u64> {
    let Some(by_clbit) = by_clbit else {
        return raw;
    };
    let mut counts = BTreeMap::new();
    let mut bits = vec![false; circuit.num_clbits];
    for (key, n) in raw {
        // The sample's key has the first measured qubit as its last character.
        let mut sampled = key.chars().rev();
        for (bit, qubit) in bits.iter_mut().zip(by_clbit) {
            *bit = qubit.is_some() && sampled.next() == Some('1');
        }
        *counts.entry(circuit.counts_key(&bits)).or_insert(0) += n;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_decimal_or_binary() {
        assert_eq!(
            parse_amplitude_indices("0, 5,0b101,,").unwrap(),
            vec![0, 5, 5]
        );
        let err = parse_amplitude_indices("0b2").unwrap_err().to_string();
        assert!(
            err.starts_with("--amplitudes: \"0b2\" is not an index"),
            "{err}"
        );
    }

    #[test]
    fn counts_are_keyed_by_classical_register() {
        let circuit = crate::parse(
            "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[2];\ncreg a[1];\ncreg b[1];\n\
             x q[1];\nmeasure q[1] -> a[0];\nmeasure q[0] -> b[0];\n",
        )
        .unwrap();
        let (qubits, by_clbit) = measured_qubits(&circuit);
        assert_eq!(qubits, vec![1, 0]);
        // The sample's last character is the first measured qubit (q[1], into a[0]).
        let raw = BTreeMap::from([("01".to_string(), 7)]);
        let counts = keyed_counts(&circuit, raw, by_clbit.as_deref());
        assert_eq!(counts, BTreeMap::from([("0 1".to_string(), 7)]));
    }

    #[test]
    fn errors_at_a_line_are_placed_in_the_file() {
        use cxltier_error::{Class, Classify};
        let path = std::path::Path::new("c.qasm");
        let parse = QsimError::Parse {
            line: 3,
            message: "bad".into(),
        };
        assert_eq!(parse.in_file(path).to_string(), "c.qasm:3: bad");
        let read = QsimError::Read {
            line: 1,
            source: std::io::Error::other("is a directory"),
        }
        .in_file(path);
        assert_eq!(
            read.to_string(),
            "cannot read circuit c.qasm (at line 1): is a directory"
        );
        assert_eq!(read.class(), Class::BadInput);
        let config = QsimError::Config("--threads 0: give 1 to 1024".into()).in_file(path);
        assert_eq!(config.to_string(), "--threads 0: give 1 to 1024");
    }

    #[test]
    fn a_dynamic_circuit_needs_shots_and_no_amplitudes() {
        let circuit = crate::parse(
            "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[1];\ncreg c[1];\nmeasure q[0] -> c[0];\n\
             reset q[0];\n",
        )
        .unwrap();
        let run = Run::new(&circuit, "reset.qasm");
        assert!(matches!(
            run.check_dynamic(),
            Err(QsimError::NoSingleState { line: 6, .. })
        ));
        assert!(run.clone().shots(10).check_dynamic().is_ok());
        let err = run
            .shots(10)
            .amplitudes(vec![0])
            .check_dynamic()
            .unwrap_err();
        assert!(err.to_string().contains("drop --amplitudes"), "{err}");
    }
}
