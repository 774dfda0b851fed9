//! The simulator: lay the state out as a tiered array, run the circuit in memory or in
//! out-of-core passes, and read results out.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use cxltier_array::{ArrayConfig, ChunkPlacement, PassReport, TieredArray};
use cxltier_sys::uring::AlignedBuf;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::fusion::{self, Op};
use crate::kernel::{Amp, Real};
use crate::qasm::Circuit;
use crate::{sweep, QsimError};

/// How to run a circuit.
#[derive(Debug, Clone)]
pub struct Options {
    pub(crate) memory_limit: Option<u64>,
    pub(crate) ssd: Vec<(PathBuf, Option<u64>)>,
    pub(crate) weights: Vec<(u32, u32)>,
    pub(crate) threads: usize,
    pub(crate) fuse: fusion::Width,
    pub(crate) max_extra: usize,
    pub(crate) blocking: sweep::Blocking,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memory_limit: None,
            ssd: Vec::new(),
            weights: Vec::new(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            fuse: fusion::Width::Measured,
            max_extra: 6,
            blocking: sweep::Blocking::default(),
        }
    }
}

impl Options {
    /// Defaults: no memory limit, all available threads, fusion as wide as is cheapest by the
    /// kernels' measured cost.
    pub fn new() -> Options {
        Options::default()
    }
    /// At most `bytes` of memory for the state (and, out of core, the pipeline's buffers).
    pub fn memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit = Some(bytes);
        self
    }
    /// Spill into a directory on an NVMe file system, using at most `cap` bytes there.
    pub fn ssd(mut self, dir: PathBuf, cap: Option<u64>) -> Self {
        self.ssd.push((dir, cap));
        self
    }
    /// Place memory chunks over nodes by weight, e.g. `[(0, 3), (1, 1)]`.
    pub fn weights(mut self, weights: Vec<(u32, u32)>) -> Self {
        self.weights = weights;
        self
    }
    /// Worker threads for the gate kernels.
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }
    /// Fuse gates up to `qubits` qubits (1 turns fusion off; at most [`fusion::MAX_FUSE`]).
    pub fn fuse(mut self, qubits: usize) -> Self {
        self.fuse = fusion::Width::Fixed(qubits.clamp(1, fusion::MAX_FUSE));
        self
    }
    /// Bytes of the state one thread works on at once in a cache-blocked sweep
    /// ([`sweep::CACHE_BYTES`] by default); smaller states are applied one fused gate at a time.
    pub fn cache_bytes(mut self, bytes: usize) -> Self {
        self.blocking.group_bytes = bytes.max(1);
        self
    }
    /// Out of core: at most `qubits` non-local qubits gathered per pass (smaller means larger,
    /// faster I/O units but more passes).
    pub fn max_extra(mut self, qubits: usize) -> Self {
        self.max_extra = qubits;
        self
    }
}

/// One out-of-core pass, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct PassInfo {
    /// Gates of the circuit in this pass.
    pub gates: usize,
    /// Fused gates applied per block.
    pub fused_gates: usize,
    /// The non-local qubits (physical numbering) made local.
    pub gathered_qubits: Vec<usize>,
    /// Where the time went.
    #[serde(flatten)]
    pub io: PassReport,
}

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Qubits.
    pub qubits: usize,
    /// `f64` or `f32`.
    pub precision: &'static str,
    /// Bytes of the state.
    pub state_bytes: u64,
    /// `memory` or `out_of_core`.
    pub mode: &'static str,
    /// Gates in the circuit.
    pub gates: usize,
    /// Gates after fusion (summed over passes out of core).
    pub fused_gates: usize,
    /// The widest a fused gate could be: `--fuse`, or the width chosen by measured cost (the
    /// widest chosen for any pass out of core).
    pub fuse_width: usize,
    /// Trips through the whole state: cache-blocked sweeps in memory, passes out of core.
    pub passes: usize,
    /// Out of core: passes had the qubits not been relabelled.
    pub passes_without_relabelling: Option<usize>,
    /// Qubits always local (the chunk's qubits) out of core.
    pub local_qubits: Option<usize>,
    /// Where the array's chunks are.
    pub placement: ChunkPlacement,
    /// Each out-of-core pass.
    pub pass_reports: Vec<PassInfo>,
    /// Seconds setting up the array (allocation, binding, verification, preallocation).
    pub setup_seconds: f64,
    /// Seconds applying gates (including out-of-core I/O).
    pub simulate_seconds: f64,
    /// Worker threads.
    pub threads: usize,
}

/// A finished simulation: the state in its tiered array, ready to read out.
pub struct Simulation<T: Real> {
    array: TieredArray,
    n: usize,
    /// Physical position of each logical qubit.
    perm: Vec<usize>,
    /// Amplitudes per chunk that belong to the state (less than a chunk for tiny states).
    per_chunk: usize,
    report: RunReport,
    _t: std::marker::PhantomData<T>,
}

fn amp_bytes<T: Real>() -> usize {
    std::mem::size_of::<Amp<T>>()
}

fn ops_of(circuit: &Circuit) -> Vec<Op> {
    circuit
        .gates
        .iter()
        .map(|g| Op {
            qubits: g.qubits.clone(),
            matrix: g.matrix.clone(),
        })
        .collect()
}

impl<T: Real> Simulation<T> {
    /// Run `circuit` from |0...0>.
    pub fn run(circuit: &Circuit, options: &Options) -> Result<Simulation<T>, QsimError> {
        let n = circuit.num_qubits;
        let a = amp_bytes::<T>();
        if n == 0 {
            return Err(QsimError::Config(
                "the circuit declares no qubits (add a qreg)".into(),
            ));
        }
        if n > 50 {
            return Err(QsimError::Config(format!(
                "{n} qubits need 2^{n} amplitudes: more than any memory or SSD array holds"
            )));
        }
        let state_bytes = (1u64 << n) * a as u64;
        // What will be resident (the state, or out of core the limit's worth of chunks and
        // buffers) must fit in the memory there is: checked before anything is allocated, since
        // an array that does not fit is touched page by page until the OOM killer ends it.
        let resident = options
            .memory_limit
            .map_or(state_bytes, |m| m.min(state_bytes));
        if let Some(avail) = crate::memory::available(std::path::Path::new("/")) {
            if resident > avail {
                let f32 = if T::NAME == "f64" {
                    format!(", or --precision f32 (half: {} bytes)", state_bytes / 2)
                } else {
                    String::new()
                };
                return Err(QsimError::Config(match options.memory_limit {
                    Some(limit) if limit < state_bytes => format!(
                        "--memory-limit {limit} is more than the {avail} bytes of memory \
                         available (MemAvailable, cgroup limits): lower it, and the rest of \
                         the state spills to --ssd"
                    ),
                    _ => format!(
                        "the state of {n} qubits needs {state_bytes} bytes at {}, more than \
                         the {avail} bytes of memory available (MemAvailable, cgroup limits): \
                         run it out of core with --memory-limit SIZE (under {avail}) and --ssd \
                         DIR{f32}",
                        T::NAME
                    ),
                }));
            }
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(options.threads)
            .build()
            .map_err(|e| {
                QsimError::Config(format!("cannot start {} threads: {e}", options.threads))
            })?;
        let min_bits = (cxltier_sys::uring::ALIGN / a).trailing_zeros() as usize;
        let ops = ops_of(circuit);
        let fits = options.memory_limit.is_none_or(|m| state_bytes <= m);
        let setup = Instant::now();
        if fits {
            // In memory: enough pieces that gates on the top qubits still leave groups for
            // every thread.
            let piece_bits = n.saturating_sub(8).max(min_bits);
            // Without weights (one node), memory chunks of 2 MiB or more, each holding several
            // pieces: fewer mappings to bind and verify, and transparent huge pages. (At 20
            // qubits, 256 chunks of 32 KiB made setup a tenth of the run.) Weighted placement
            // keeps a chunk per piece, so that the weights split the state finely.
            let chunk_bits = if options.weights.len() > 1 {
                piece_bits
            } else {
                let huge_bits = ((2usize << 20) / a).trailing_zeros() as usize;
                piece_bits.max(huge_bits.min(n))
            };
            let chunk = (1usize << chunk_bits) * a;
            let len = state_bytes.max(chunk as u64);
            let config = ArrayConfig::new(len, chunk).weights(options.weights.clone());
            let mut array = TieredArray::create(&config)?;
            let setup_seconds = setup.elapsed().as_secs_f64();
            let piece_bits = piece_bits.min(n);
            let start = Instant::now();
            let swept = {
                let mut chunks = array.memory_chunks_mut().expect("all chunks are in memory");
                // Pieces in physical order: each chunk's amplitudes cut into pieces; a state
                // smaller than one chunk is its first piece.
                let mut pieces: Vec<&mut [Amp<T>]> = chunks
                    .iter_mut()
                    .flat_map(|c| {
                        bytemuck::cast_slice_mut::<u8, Amp<T>>(c).chunks_mut(1 << piece_bits)
                    })
                    .take((1usize << n >> piece_bits).max(1))
                    .collect();
                pieces[0][0] = [T::from_f64(1.0), T::default()];
                pool.install(|| {
                    sweep::run(
                        &mut pieces,
                        piece_bits,
                        n,
                        &ops,
                        options.fuse,
                        true,
                        options.blocking,
                    )
                })
            };
            let report = RunReport {
                qubits: n,
                precision: T::NAME,
                state_bytes,
                mode: "memory",
                gates: ops.len(),
                fused_gates: swept.fused_gates,
                fuse_width: swept.fuse_width,
                passes: swept.sweeps,
                passes_without_relabelling: None,
                local_qubits: None,
                placement: array.placement().clone(),
                pass_reports: Vec::new(),
                setup_seconds,
                simulate_seconds: start.elapsed().as_secs_f64(),
                threads: options.threads,
            };
            return Ok(Simulation {
                array,
                n,
                perm: swept.perm,
                per_chunk: (1usize << chunk_bits).min(1 << n),
                report,
                _t: std::marker::PhantomData,
            });
        }
        let limit = options.memory_limit.expect("checked: a limit is set");
        if options.ssd.is_empty() {
            return Err(QsimError::Config(format!(
                "the state of {n} qubits needs {state_bytes} bytes, more than --memory-limit \
                 {limit}: give --ssd DIR (a directory on an NVMe file system) to spill it, or \
                 raise the limit"
            )));
        }
        // Out of core: three block buffers of 2^c amplitudes must fit under the limit.
        let widest = ops.iter().map(|o| o.qubits.len()).max().unwrap_or(1);
        let c = ((limit / (3 * a as u64)).max(1).ilog2() as usize).min(n - 1);
        let extra = options
            .max_extra
            .max(widest)
            .min(c.saturating_sub(min_bits));
        if c < min_bits + widest || extra < widest {
            let need = 3 * (1u64 << (min_bits + widest)) * a as u64;
            return Err(QsimError::Config(format!(
                "--memory-limit {limit} is too small to run this circuit out of core: its widest \
                 gate has {widest} qubits, which needs three buffers of 2^{} amplitudes ({need} \
                 bytes); raise the limit to at least {need}",
                min_bits + widest
            )));
        }
        // Chunks are the unit of I/O: keep them at least 256 KiB (where the buffers allow) so
        // that the device streams, even if that leaves fewer extra qubits per pass.
        let io_bits = ((256usize << 10) / a).trailing_zeros() as usize;
        let low = (c - extra).max(io_bits.min(c - widest));
        let extra = c - low;
        let (perm, passes_count) = fusion::choose_layout(&ops, n, low, extra);
        let unrelabelled = fusion::plan_passes(&ops, n, low, extra).len();
        let physical = fusion::relabel(&ops, &perm);
        let passes = fusion::plan_passes(&physical, n, low, extra);
        debug_assert_eq!(passes.len(), passes_count);
        let chunk = (1usize << low) * a;
        let buffers = 3 * (1u64 << c) * a as u64;
        let config = options.ssd.iter().fold(
            ArrayConfig::new(state_bytes, chunk)
                .memory_limit(limit - buffers)
                .weights(options.weights.clone()),
            |cfg, (dir, cap)| cfg.spill_dir(dir.clone(), *cap),
        );
        let mut array = TieredArray::create(&config)?;
        let setup_seconds = setup.elapsed().as_secs_f64();
        let start = Instant::now();
        let mut first = AlignedBuf::new(chunk);
        array.read_chunk(0, &mut first)?;
        bytemuck::cast_slice_mut::<u8, Amp<T>>(&mut first[..chunk])[0] =
            [T::from_f64(1.0), T::default()];
        array.write_chunk(0, &first)?;
        drop(first);
        let chunk_index_bits = n - low;
        // Each pass's gates in buffer coordinates and its blocks (the chunks gathered into one
        // buffer), planned up front: the passes then run as one pipeline that never drains.
        let mut locals: Vec<Vec<Op>> = Vec::with_capacity(passes.len());
        let mut pass_blocks: Vec<Vec<Vec<usize>>> = Vec::with_capacity(passes.len());
        for pass in &passes {
            // Buffer coordinates: physical q < low stays; the i-th gathered qubit is low + i.
            let to_buffer = |q: usize| -> usize {
                if q < low {
                    q
                } else {
                    low + pass
                        .extra
                        .iter()
                        .position(|&e| e == q)
                        .expect("planned as gathered")
                }
            };
            locals.push(
                physical[pass.gates.clone()]
                    .iter()
                    .map(|op| Op {
                        qubits: op.qubits.iter().map(|&q| to_buffer(q)).collect(),
                        matrix: op.matrix.clone(),
                    })
                    .collect(),
            );
            let gathered: Vec<usize> = pass.extra.iter().map(|&q| q - low).collect();
            let free: Vec<usize> = (0..chunk_index_bits)
                .filter(|b| !gathered.contains(b))
                .collect();
            pass_blocks.push(
                (0..1usize << free.len())
                    .map(|f| {
                        let base: usize = free
                            .iter()
                            .enumerate()
                            .map(|(i, &b)| ((f >> i) & 1) << b)
                            .sum();
                        (0..1usize << gathered.len())
                            .map(|m| {
                                base | gathered
                                    .iter()
                                    .enumerate()
                                    .map(|(i, &b)| ((m >> i) & 1) << b)
                                    .sum::<usize>()
                            })
                            .collect()
                    })
                    .collect(),
            );
        }
        let piece_bits = c.saturating_sub(6);
        let mut fused_gates = vec![0; passes.len()];
        let mut fuse_width = 1;
        let block_lists: Vec<&[Vec<usize>]> = pass_blocks.iter().map(Vec::as_slice).collect();
        let io = array.passes(&block_lists, |p, _, bytes| {
            let amps = bytemuck::cast_slice_mut::<u8, Amp<T>>(bytes);
            let mut pieces: Vec<&mut [Amp<T>]> = amps.chunks_mut(1 << piece_bits).collect();
            let swept = pool.install(|| {
                sweep::run(
                    &mut pieces,
                    piece_bits,
                    c,
                    &locals[p],
                    options.fuse,
                    false,
                    options.blocking,
                )
            });
            fused_gates[p] = swept.fused_gates;
            fuse_width = fuse_width.max(swept.fuse_width);
            Ok(())
        })?;
        let fused_total = fused_gates.iter().sum();
        let pass_reports: Vec<PassInfo> = passes
            .iter()
            .zip(io)
            .zip(&fused_gates)
            .map(|((pass, io), &fused_gates)| PassInfo {
                gates: pass.gates.len(),
                fused_gates,
                gathered_qubits: pass.extra.clone(),
                io,
            })
            .collect();
        let report = RunReport {
            qubits: n,
            precision: T::NAME,
            state_bytes,
            mode: "out_of_core",
            gates: ops.len(),
            fused_gates: fused_total,
            fuse_width,
            passes: passes.len(),
            passes_without_relabelling: Some(unrelabelled),
            local_qubits: Some(low),
            placement: array.placement().clone(),
            pass_reports,
            setup_seconds,
            simulate_seconds: start.elapsed().as_secs_f64(),
            threads: options.threads,
        };
        Ok(Simulation {
            array,
            n,
            perm,
            per_chunk: 1 << low,
            report,
            _t: std::marker::PhantomData,
        })
    }

    /// What the run did.
    pub fn report(&self) -> &RunReport {
        &self.report
    }

    fn physical(&self, logical: u64) -> u64 {
        (0..self.n)
            .map(|q| ((logical >> q) & 1) << self.perm[q])
            .sum()
    }

    fn logical(&self, physical: u64) -> u64 {
        (0..self.n)
            .map(|q| ((physical >> self.perm[q]) & 1) << q)
            .sum()
    }

    /// Visit every chunk's amplitudes in physical order: `f(first_physical_index, amplitudes)`.
    fn scan(&mut self, mut f: impl FnMut(u64, &[Amp<T>])) -> Result<(), QsimError> {
        let chunk = self.array.chunk_bytes();
        let mut buf = AlignedBuf::new(chunk);
        let per = self.per_chunk;
        for i in 0..self.array.chunks() {
            self.array.read_chunk(i, &mut buf)?;
            let amps = bytemuck::cast_slice::<u8, Amp<T>>(&buf[..chunk]);
            f((i * per) as u64, &amps[..per]);
        }
        Ok(())
    }

    /// The amplitude of basis state `index` (qubit 0 is the least significant bit, as in Qiskit).
    pub fn amplitudes(&mut self, indices: &[u64]) -> Result<Vec<[f64; 2]>, QsimError> {
        if let Some(&bad) = indices.iter().find(|&&i| i >> self.n != 0) {
            return Err(QsimError::Config(format!(
                "amplitude index {bad} is out of range: {} qubits have indices 0 to {}",
                self.n,
                (1u64 << self.n) - 1
            )));
        }
        let chunk = self.array.chunk_bytes();
        let mut buf = AlignedBuf::new(chunk);
        let mut out = Vec::with_capacity(indices.len());
        for &i in indices {
            let p = self.physical(i);
            let (c, o) = (
                (p / self.per_chunk as u64) as usize,
                (p % self.per_chunk as u64) as usize,
            );
            self.array.read_chunk(c, &mut buf)?;
            let a = bytemuck::cast_slice::<u8, Amp<T>>(&buf[..chunk])[o];
            out.push([a[0].to_f64(), a[1].to_f64()]);
        }
        Ok(out)
    }

    /// The whole state in logical order (for tests and small circuits).
    pub fn statevector(&mut self) -> Result<Vec<[f64; 2]>, QsimError> {
        let mut out = vec![[0.0; 2]; 1 << self.n];
        let n = self.n;
        let perm = self.perm.clone();
        self.scan(|first, amps| {
            for (j, a) in amps.iter().enumerate() {
                let p = first + j as u64;
                let l: u64 = (0..n).map(|q| ((p >> perm[q]) & 1) << q).sum();
                out[l as usize] = [a[0].to_f64(), a[1].to_f64()];
            }
        })?;
        Ok(out)
    }

    /// The squared norm of the state (1 for a correct run, up to rounding).
    pub fn norm(&mut self) -> Result<f64, QsimError> {
        let mut sum = 0.0;
        self.scan(|_, amps| {
            sum += amps
                .iter()
                .map(|a| a[0].to_f64().powi(2) + a[1].to_f64().powi(2))
                .sum::<f64>();
        })?;
        Ok(sum)
    }

    /// Sample `shots` measurements of `qubits` (in order: the first is the rightmost character of
    /// each key, as in Qiskit's counts), with a seeded generator.
    pub fn sample(
        &mut self,
        shots: usize,
        qubits: &[usize],
        seed: u64,
    ) -> Result<BTreeMap<String, u64>, QsimError> {
        let norm = self.norm()?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        // 16 bytes a shot: refused cleanly when the memory is not there, not aborted part-way.
        let too_many = |_| {
            QsimError::Config(format!(
                "--shots {shots}: sampling needs {} bytes of memory ({} per shot), which cannot be had: ask for fewer shots, or take them in several runs with other --seed values",
                (shots as u128) * SAMPLE_BYTES_PER_SHOT as u128,
                SAMPLE_BYTES_PER_SHOT
            ))
        };
        let mut targets: Vec<f64> = Vec::new();
        targets.try_reserve_exact(shots).map_err(too_many)?;
        targets.extend((0..shots).map(|_| rng.random::<f64>() * norm));
        targets.sort_by(f64::total_cmp);
        let mut hits: Vec<u64> = Vec::new();
        hits.try_reserve_exact(shots).map_err(too_many)?;
        let mut acc = 0.0;
        let mut next = 0;
        let mut last = 0u64;
        self.scan(|first, amps| {
            for (j, a) in amps.iter().enumerate() {
                let p = a[0].to_f64().powi(2) + a[1].to_f64().powi(2);
                if p > 0.0 {
                    last = first + j as u64;
                }
                acc += p;
                while next < targets.len() && targets[next] < acc {
                    hits.push(first + j as u64);
                    next += 1;
                }
            }
        })?;
        // Rounding can leave the last targets just above the running sum.
        while hits.len() < shots {
            hits.push(last);
        }
        let mut counts = BTreeMap::new();
        for h in hits {
            let l = self.logical(h);
            let key: String = qubits
                .iter()
                .rev()
                .map(|&q| if (l >> q) & 1 == 1 { '1' } else { '0' })
                .collect();
            *counts.entry(key).or_insert(0) += 1;
        }
        Ok(counts)
    }
}

/// Memory that sampling takes per shot (a target and a hit): [`Simulation::sample`] allocates
/// it all before it scans the state once.
pub const SAMPLE_BYTES_PER_SHOT: u64 = 16;

/// Amplitude precision, chosen at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// Double precision: 16 bytes per amplitude.
    F64,
    /// Single precision: 8 bytes per amplitude.
    F32,
}

/// A simulation in either precision. Its methods are compiled (and optimised) in this crate, so
/// callers built without optimisation still run optimised kernels.
pub enum AnySimulation {
    /// Double precision.
    F64(Simulation<f64>),
    /// Single precision.
    F32(Simulation<f32>),
}

impl AnySimulation {
    /// Run `circuit` at `precision`.
    pub fn run(
        circuit: &Circuit,
        options: &Options,
        precision: Precision,
    ) -> Result<AnySimulation, QsimError> {
        Ok(match precision {
            Precision::F64 => AnySimulation::F64(Simulation::run(circuit, options)?),
            Precision::F32 => AnySimulation::F32(Simulation::run(circuit, options)?),
        })
    }
    /// What the run did.
    pub fn report(&self) -> &RunReport {
        match self {
            AnySimulation::F64(s) => s.report(),
            AnySimulation::F32(s) => s.report(),
        }
    }
    /// See [`Simulation::norm`].
    pub fn norm(&mut self) -> Result<f64, QsimError> {
        match self {
            AnySimulation::F64(s) => s.norm(),
            AnySimulation::F32(s) => s.norm(),
        }
    }
    /// See [`Simulation::amplitudes`].
    pub fn amplitudes(&mut self, indices: &[u64]) -> Result<Vec<[f64; 2]>, QsimError> {
        match self {
            AnySimulation::F64(s) => s.amplitudes(indices),
            AnySimulation::F32(s) => s.amplitudes(indices),
        }
    }
    /// See [`Simulation::sample`].
    pub fn sample(
        &mut self,
        shots: usize,
        qubits: &[usize],
        seed: u64,
    ) -> Result<BTreeMap<String, u64>, QsimError> {
        match self {
            AnySimulation::F64(s) => s.sample(shots, qubits, seed),
            AnySimulation::F32(s) => s.sample(shots, qubits, seed),
        }
    }
    /// See [`Simulation::statevector`].
    pub fn statevector(&mut self) -> Result<Vec<[f64; 2]>, QsimError> {
        match self {
            AnySimulation::F64(s) => s.statevector(),
            AnySimulation::F32(s) => s.statevector(),
        }
    }
}
