//! The simulator: lay the state out as a tiered array, run the circuit in memory or in
//! out-of-core passes, and read results out.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use cxltier_array::{ArrayConfig, ChunkPlacement, PassReport, TieredArray};
use cxltier_sys::uring::AlignedBuf;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::fusion::{self, Op};
use crate::kernel::{Amp, Real};
use crate::progress::Progress;
use crate::qasm::Circuit;
use crate::Result;
use crate::{sweep, QsimError};

/// The least memory limit a run can keep to: one chunk of the state's array, the smallest unit
/// it places in memory or spills (a page, the alignment of `O_DIRECT` I/O). However few its
/// qubits, a state takes one whole chunk.
pub const MIN_MEMORY_LIMIT: u64 = cxltier_sys::uring::ALIGN as u64;

/// Refuse a memory limit that no run can keep to: below [`MIN_MEMORY_LIMIT`].
pub fn check_memory_limit(bytes: u64) -> Result<()> {
    if bytes < MIN_MEMORY_LIMIT {
        return Err(QsimError::Config(format!(
            "--memory-limit {bytes} is less than one chunk of the state's array, the least that \
             any state takes: give at least {MIN_MEMORY_LIMIT} bytes (4K)"
        )));
    }
    Ok(())
}

/// The most worker threads a run (or a benchmark) may ask for.
pub const MAX_THREADS: usize = 1024;

/// Refuse a thread count no pool should have: 0, or more than [`MAX_THREADS`].
pub fn check_threads(threads: usize) -> Result<usize> {
    if threads == 0 || threads > MAX_THREADS {
        return Err(QsimError::Config(format!(
            "--threads {threads}: give 1 to {MAX_THREADS}"
        )));
    }
    Ok(threads)
}

/// Sampled counts: the shots that gave each key, a string of the measured qubits' values (the
/// first qubit its rightmost character, as in Qiskit's counts).
pub type Counts = BTreeMap<String, u64>;

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
    pub(crate) dynamic_method: crate::dynamic::Method,
    pub(crate) progress: Option<Arc<Progress>>,
    pub(crate) exchange_message: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memory_limit: None,
            ssd: Vec::new(),
            weights: Vec::new(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            fuse: fusion::Width::Auto(fusion::MAX_FUSE),
            max_extra: 6,
            blocking: sweep::Blocking::default(),
            dynamic_method: crate::dynamic::Method::Auto,
            progress: None,
            exchange_message: DEFAULT_EXCHANGE_MESSAGE,
        }
    }
}

impl Options {
    /// Defaults: no memory limit, all available threads, fusion up to [`fusion::MAX_FUSE`]
    /// qubits priced by measured cost where the run is long enough to repay the measuring
    /// ([`Options::fuse_auto`]).
    pub fn new() -> Options {
        Options::default()
    }
    /// At most `bytes` of memory for the state (and, out of core, the pipeline's buffers); at
    /// least [`MIN_MEMORY_LIMIT`], or the run is refused.
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
    /// Fuse every gate while the fused gate stays within `qubits` qubits, whatever it costs
    /// (qsim's rule, [`fusion::Width::Fixed`]; 1 turns fusion off; at most 5).
    pub fn fuse(mut self, qubits: usize) -> Self {
        self.fuse = fusion::Width::Fixed(qubits.clamp(1, fusion::MAX_FUSE));
        self
    }
    /// Advance `progress` as the run goes (read it from another thread to show it).
    pub fn progress(mut self, progress: Arc<Progress>) -> Self {
        self.progress = Some(progress);
        self
    }
    /// Fuse gates into gates of at most `qubits` qubits (1 to 5) where it pays by the kernels'
    /// cost measured on this machine ([`fusion::Width::Measured`]: kernel costs in cache,
    /// sweeps, and the state's streaming time; a merge is kept only where the wider gate costs
    /// less than the gates apart). The default, at 5: timing the kernels takes 3-7 ms once
    /// per process, and pricing the candidates a few fusions of the circuit.
    pub fn fuse_up_to(mut self, qubits: usize) -> Self {
        self.fuse = fusion::Width::Measured(qubits.clamp(1, fusion::MAX_FUSE));
        self
    }
    /// As [`Options::fuse_up_to`] for runs of at least [`fusion::PRICED_FROM`]
    /// gate-amplitudes, and as [`Options::fuse`] at 2 qubits (or `qubits`, when fewer) for
    /// shorter ones, which the measuring would slow more than any fusion could speed up
    /// ([`fusion::Width::Auto`]). The default, at 5.
    pub fn fuse_auto(mut self, qubits: usize) -> Self {
        self.fuse = fusion::Width::Auto(qubits.clamp(1, fusion::MAX_FUSE));
        self
    }
    /// Fuse as `width` says (as [`Options::fuse`], [`Options::fuse_up_to`] or
    /// [`Options::fuse_auto`]), for a width parsed by [`fusion::Width::parse`].
    pub fn fusion(self, width: fusion::Width) -> Self {
        match width {
            fusion::Width::Fixed(w) => self.fuse(w),
            fusion::Width::Measured(w) => self.fuse_up_to(w),
            fusion::Width::Auto(w) => self.fuse_auto(w),
        }
    }

    /// These options for a run of `gates` gates on `n` qubits: an automatic fusion rule
    /// resolved ([`fusion::Width::for_run`]).
    pub(crate) fn for_run(&self, gates: usize, n: usize) -> Options {
        let mut options = self.clone();
        options.fuse = self.fuse.for_run(gates, 1u64 << n.min(63));
        options
    }
    /// Bytes of the state one thread works on at once in a cache-blocked sweep
    /// ([`sweep::CACHE_BYTES`] by default); smaller states are applied one fused gate at a time.
    pub fn cache_bytes(mut self, bytes: usize) -> Self {
        self.blocking.group_bytes = bytes.max(1);
        self
    }
    /// How the shots of a dynamic circuit run ([`crate::dynamic::Method::Auto`] by default:
    /// branches while their copies of the state fit, trajectories otherwise).
    pub fn dynamic_method(mut self, method: crate::dynamic::Method) -> Self {
        self.dynamic_method = method;
        self
    }
    /// Out of core: at most `qubits` non-local qubits gathered per pass (smaller means larger,
    /// faster I/O units but more passes).
    pub fn max_extra(mut self, qubits: usize) -> Self {
        self.max_extra = qubits;
        self
    }
    /// Over MPI ranks: send an exchange in messages of at most `bytes` (rounded down to a power
    /// of two of amplitudes), each in flight while the next is gathered and the last scattered.
    pub fn exchange_message(mut self, bytes: u64) -> Self {
        self.exchange_message = bytes;
        self
    }
}

/// The default largest message of an exchange: small enough that several are in flight per
/// chunk of the array (the pipeline has stages to overlap), large enough that a message's
/// latency is small against its transfer.
pub const DEFAULT_EXCHANGE_MESSAGE: u64 = 256 * 1024;

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
    /// The widest a fused gate could be with `--fuse-rule greedy` (`--fuse`); by measured cost,
    /// the widest fused gate of the fusion kept (the widest over all sweeps and passes).
    pub fuse_width: usize,
    /// The rule that merged gates: `cost` (by measured cost) or `greedy` (every gate that
    /// fits), as asked or, under `--fuse-rule auto`, as the run's length chose
    /// ([`fusion::Width::for_run`]).
    pub fuse_rule: &'static str,
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
    /// For a circuit with mid-circuit measurements, resets or conditions: how its shots ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic: Option<crate::dynamic::DynamicReport>,
}

/// The sum of `|a|^2`, in four independent sums so that the loop vectorises (a single running
/// sum of floats cannot be reordered by the compiler).
fn squared_norm<T: Real>(amps: &[Amp<T>]) -> f64 {
    let mut lanes = [0.0f64; 4];
    let mut quads = amps.chunks_exact(4);
    for quad in &mut quads {
        for (lane, a) in lanes.iter_mut().zip(quad) {
            *lane += a[0].to_f64() * a[0].to_f64() + a[1].to_f64() * a[1].to_f64();
        }
    }
    let rest: f64 = quads
        .remainder()
        .iter()
        .map(|a| a[0].to_f64() * a[0].to_f64() + a[1].to_f64() * a[1].to_f64())
        .sum();
    lanes.iter().sum::<f64>() + rest
}

/// Copy every chunk of `from` into `to` (arrays of the same length and chunk size).
fn copy_chunks(from: &mut TieredArray, to: &mut TieredArray) -> Result<()> {
    let chunk = from.chunk_bytes();
    let mut buf = AlignedBuf::new(chunk);
    for i in 0..from.chunks() {
        from.read_chunk(i, &mut buf)?;
        to.write_chunk(i, &buf)?;
    }
    Ok(())
}

/// How the state is laid out, fixed when the run starts, so that later gates (of a dynamic
/// circuit) run the same way.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// All in memory, held as pieces of `2^piece_bits` amplitudes.
    Memory { piece_bits: usize },
    /// Out of core: chunks of `2^low` amplitudes, buffers of `2^c`, `extra` gathered qubits.
    OutOfCore { low: usize, c: usize, extra: usize },
}

/// What applying a list of gates did.
struct Applied {
    fused_gates: usize,
    fuse_width: usize,
    passes: usize,
    pass_reports: Vec<PassInfo>,
    passes_without_relabelling: Option<usize>,
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
    layout: Layout,
    pool: rayon::ThreadPool,
    fuse: fusion::Width,
    blocking: sweep::Blocking,
    progress: Option<Arc<Progress>>,
    /// Where copies of the state go ([`Simulation::save`]): memory when the state is in memory,
    /// the `--ssd` directories when it is out of core.
    copy_config: ArrayConfig,
    /// Whether the state is still |0...0> (any relabelling of the qubits is then free).
    fresh: bool,
    _t: std::marker::PhantomData<T>,
}

fn amp_bytes<T: Real>() -> usize {
    std::mem::size_of::<Amp<T>>()
}

pub(crate) fn ops_of(circuit: &Circuit) -> Vec<Op> {
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
    /// Run `circuit` (its unitary gates, `circuit.gates`) from |0...0>.
    pub fn run(circuit: &Circuit, options: &Options) -> Result<Simulation<T>> {
        let ops = ops_of(circuit);
        let widest = ops.iter().map(|o| o.qubits.len()).max().unwrap_or(1);
        let options = &options.for_run(ops.len(), circuit.num_qubits);
        let mut sim = Self::start(circuit.num_qubits, widest, options)?;
        let start = Instant::now();
        sim.apply(&ops)?;
        sim.report.gates = ops.len();
        sim.report.simulate_seconds = start.elapsed().as_secs_f64();
        Ok(sim)
    }

    /// Lay out |0...0> on `n` qubits for gates of up to `widest` qubits.
    pub(crate) fn start(n: usize, widest: usize, options: &Options) -> Result<Simulation<T>> {
        let a = amp_bytes::<T>();
        if let Some(limit) = options.memory_limit {
            check_memory_limit(limit)?;
        }
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
        let fits = options.memory_limit.is_none_or(|m| state_bytes <= m);
        let setup = Instant::now();
        let (array, layout, per_chunk, copy_config) = if fits {
            // In memory: enough pieces that gates on the top qubits still leave groups for
            // every thread.
            let piece_bits = memory_piece_bits(n, a);
            // Without weights (one node), memory chunks of 2 MiB or more, each holding several
            // pieces: fewer mappings to bind and verify, and transparent huge pages. (At 20
            // qubits, 256 chunks of 32 KiB made setup a tenth of the run.) Weighted placement
            // keeps a chunk per piece, so that the weights split the state finely.
            let chunk_bits = if options.weights.len() > 1 {
                piece_bits
            } else {
                memory_chunk_bits(n, a)
            };
            let chunk = (1usize << chunk_bits) * a;
            let len = state_bytes.max(chunk as u64);
            let config = ArrayConfig::new(len, chunk).weights(options.weights.clone());
            let mut array = TieredArray::create(&config)?;
            {
                let mut chunks = array.memory_chunks_mut().expect("all chunks are in memory");
                bytemuck::cast_slice_mut::<u8, Amp<T>>(chunks[0])[0] =
                    [T::from_f64(1.0), T::default()];
            }
            // Copies are backups that are only read back: their placement is not checked.
            let copy_config = ArrayConfig::new(len, chunk).verify_placement(false);
            (
                array,
                Layout::Memory {
                    piece_bits: piece_bits.min(n),
                },
                (1usize << chunk_bits).min(1 << n),
                copy_config,
            )
        } else {
            let limit = options.memory_limit.expect("checked: a limit is set");
            if options.ssd.is_empty() {
                return Err(QsimError::Config(format!(
                    "the state of {n} qubits needs {state_bytes} bytes, more than --memory-limit \
                     {limit}: give --ssd DIR (a directory on an NVMe file system) to spill it, or \
                     raise the limit"
                )));
            }
            let (low, c, extra) = out_of_core_shape(n, widest, limit, a, options.max_extra)?;
            let chunk = (1usize << low) * a;
            let buffers = 3 * (1u64 << c) * a as u64;
            let config = options.ssd.iter().fold(
                ArrayConfig::new(state_bytes, chunk)
                    .memory_limit(limit - buffers)
                    .weights(options.weights.clone()),
                |cfg, (dir, cap)| cfg.spill_dir(dir.clone(), *cap),
            );
            let mut array = TieredArray::create(&config)?;
            let mut first = AlignedBuf::new(chunk);
            array.read_chunk(0, &mut first)?;
            bytemuck::cast_slice_mut::<u8, Amp<T>>(&mut first[..chunk])[0] =
                [T::from_f64(1.0), T::default()];
            array.write_chunk(0, &first)?;
            // Copies of a state beyond memory go where its spilled part goes.
            let copy_config = options.ssd.iter().fold(
                ArrayConfig::new(state_bytes, chunk).memory_limit(0),
                |cfg, (dir, cap)| cfg.spill_dir(dir.clone(), *cap),
            );
            (
                array,
                Layout::OutOfCore { low, c, extra },
                1 << low,
                copy_config,
            )
        };
        if matches!(options.fuse, fusion::Width::Measured(w) | fusion::Width::Auto(w) if w > 1) {
            // The kernels' costs are timed once per process (3-7 ms on two threads here): at
            // setup, so that the first sweep or out-of-core pass does not carry it, on the
            // run's threads.
            pool.install(crate::bench::fusion_costs::<T>);
        }
        let setup_seconds = setup.elapsed().as_secs_f64();
        let report = RunReport {
            qubits: n,
            precision: T::NAME,
            state_bytes,
            mode: match layout {
                Layout::Memory { .. } => "memory",
                Layout::OutOfCore { .. } => "out_of_core",
            },
            gates: 0,
            fused_gates: 0,
            fuse_width: 0,
            fuse_rule: options.fuse.rule(),
            passes: 0,
            passes_without_relabelling: match layout {
                Layout::Memory { .. } => None,
                Layout::OutOfCore { .. } => Some(0),
            },
            local_qubits: match layout {
                Layout::Memory { .. } => None,
                Layout::OutOfCore { low, .. } => Some(low),
            },
            placement: array.placement().clone(),
            pass_reports: Vec::new(),
            setup_seconds,
            simulate_seconds: 0.0,
            threads: options.threads,
            dynamic: None,
        };
        Ok(Simulation {
            array,
            n,
            perm: (0..n).collect(),
            per_chunk,
            report,
            layout,
            pool,
            fuse: options.fuse,
            blocking: options.blocking,
            progress: options.progress.clone(),
            copy_config,
            fresh: true,
            _t: std::marker::PhantomData,
        })
    }

    #[cfg(feature = "mpi")]
    /// Lay out one rank's part of a state split over ranks: `m` qubits, all zero but for
    /// amplitude 0 on the rank that holds index 0 (`origin`). Qubits are never relabelled (the
    /// exchanges between ranks address physical positions), so gates go in as they are placed.
    pub(crate) fn start_part(
        m: usize,
        widest: usize,
        options: &Options,
        origin: bool,
    ) -> Result<Simulation<T>> {
        let mut sim = Self::start(m, widest, options)?;
        sim.fresh = false;
        if !origin {
            let mut first = AlignedBuf::new(sim.array.chunk_bytes());
            sim.array.read_chunk(0, &mut first)?;
            bytemuck::cast_slice_mut::<u8, Amp<T>>(&mut first[..])[0] = [T::default(); 2];
            sim.array.write_chunk(0, &first)?;
        }
        Ok(sim)
    }

    #[cfg(feature = "mpi")]
    /// Amplitudes of the state per chunk of its array (a power of two).
    pub(crate) fn amplitudes_per_chunk(&self) -> usize {
        self.per_chunk
    }

    #[cfg(feature = "mpi")]
    /// The array holding the state, in physical order.
    pub(crate) fn array_mut(&mut self) -> &mut TieredArray {
        &mut self.array
    }

    #[cfg(feature = "mpi")]
    /// Whether logical qubit `q` sits inside one chunk of the array (its physical position is
    /// below the chunk's bits), so that a gate on such qubits can be applied chunk by chunk.
    pub(crate) fn in_chunk(&self, q: usize) -> bool {
        self.perm[q] < self.per_chunk.trailing_zeros() as usize
    }

    #[cfg(feature = "mpi")]
    /// Trips through the state [`Simulation::apply`] makes for `ops` (on logical qubits):
    /// sweeps in memory, passes out of core. A measured fusion width is counted as 2 (or its
    /// cap, when narrower).
    pub(crate) fn trips(&self, ops: &[Op]) -> usize {
        let physical = fusion::relabel(ops, &self.perm);
        match self.layout {
            Layout::Memory { piece_bits } => {
                let width = match self.fuse {
                    fusion::Width::Fixed(w) => w,
                    fusion::Width::Measured(w) | fusion::Width::Auto(w) => w.min(2),
                };
                sweep::sweeps_of(
                    &physical,
                    width,
                    self.n,
                    piece_bits,
                    amp_bytes::<T>(),
                    self.blocking.group_bytes,
                )
            }
            Layout::OutOfCore { low, extra, .. } => {
                fusion::plan_passes(&physical, self.n, low, extra).len()
            }
        }
    }

    #[cfg(feature = "mpi")]
    /// `ops` (on logical qubits, all [`Simulation::in_chunk`]) placed at their physical
    /// positions and fused once, to be applied to one chunk at a time
    /// ([`Simulation::apply_chunk_gates`]). A measured fusion width would time the kernels on
    /// the whole state, which a chunk's work cannot wait for: those gates fuse to 2 qubits (or the
    /// cap, when narrower).
    pub(crate) fn chunk_gates(&mut self, ops: &[Op]) -> ChunkGates {
        let width = match self.fuse {
            fusion::Width::Fixed(w) => w,
            fusion::Width::Measured(w) | fusion::Width::Auto(w) => w.min(2),
        };
        let fused = fusion::fuse(&fusion::relabel(ops, &self.perm), width);
        self.report.fused_gates += fused.len();
        ChunkGates {
            ops: fused,
            width,
            gates: ops.len(),
        }
    }

    #[cfg(feature = "mpi")]
    /// Apply `gates` to one chunk's amplitudes (`bytes`, read from the array or held by an
    /// exchange) with the sweeps' kernels on the run's threads, as an out-of-core pass applies
    /// a block's gates to its buffer.
    pub(crate) fn apply_chunk_gates(&self, gates: &ChunkGates, bytes: &mut [u8]) {
        apply_in_chunk::<T>(&self.pool, self.blocking, self.per_chunk, gates, bytes);
    }

    #[cfg(feature = "mpi")]
    /// Apply `gates` to chunk `c` where it is: in place in memory; out of core read into
    /// `scratch` (a chunk's buffer), applied and written back.
    pub(crate) fn apply_chunk_gates_at(
        &mut self,
        gates: &ChunkGates,
        c: usize,
        scratch: &mut AlignedBuf,
    ) -> Result<()> {
        if let Some(mut chunks) = self.array.memory_chunks_mut() {
            apply_in_chunk::<T>(&self.pool, self.blocking, self.per_chunk, gates, chunks[c]);
            return Ok(());
        }
        self.array.read_chunk(c, scratch)?;
        self.apply_chunk_gates(gates, scratch);
        self.array.write_chunk(c, scratch)?;
        Ok(())
    }

    /// Apply `ops` (on logical qubits) to the state, adding what was done to the report. While
    /// the state is |0...0>, the qubits are first relabelled to make the passes few.
    pub(crate) fn apply(&mut self, ops: &[Op]) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        let applied = self.apply_ops(ops)?;
        self.fresh = false;
        let r = &mut self.report;
        r.fused_gates += applied.fused_gates;
        r.fuse_width = r.fuse_width.max(applied.fuse_width);
        r.passes += applied.passes;
        r.pass_reports.extend(applied.pass_reports);
        if let Some(p) = applied.passes_without_relabelling {
            *r.passes_without_relabelling.get_or_insert(0) += p;
        }
        Ok(())
    }

    fn apply_ops(&mut self, ops: &[Op]) -> Result<Applied> {
        let n = self.n;
        let (fuse, blocking) = (self.fuse, self.blocking);
        let progress = self.progress.clone();
        match self.layout {
            Layout::Memory { piece_bits } => {
                let relabel = self.fresh;
                let physical;
                let ops = if relabel {
                    ops
                } else {
                    physical = fusion::relabel(ops, &self.perm);
                    &physical
                };
                let mut chunks = self
                    .array
                    .memory_chunks_mut()
                    .expect("all chunks are in memory");
                // Pieces in physical order: each chunk's amplitudes cut into pieces; a state
                // smaller than one chunk is its first piece.
                let mut pieces: Vec<&mut [Amp<T>]> = chunks
                    .iter_mut()
                    .flat_map(|c| {
                        bytemuck::cast_slice_mut::<u8, Amp<T>>(c).chunks_mut(1 << piece_bits)
                    })
                    .take((1usize << n >> piece_bits).max(1))
                    .collect();
                let swept = self.pool.install(|| {
                    sweep::run(
                        &mut pieces,
                        piece_bits,
                        n,
                        ops,
                        fuse,
                        relabel,
                        blocking,
                        progress.as_deref(),
                    )
                });
                if relabel {
                    self.perm = swept.perm;
                }
                Ok(Applied {
                    fused_gates: swept.fused_gates,
                    fuse_width: swept.fuse_width,
                    passes: swept.sweeps,
                    pass_reports: Vec::new(),
                    passes_without_relabelling: None,
                })
            }
            Layout::OutOfCore { low, c, extra } => {
                let unrelabelled = if self.fresh {
                    let (perm, _) = fusion::choose_layout(ops, n, low, extra);
                    self.perm = perm;
                    fusion::plan_passes(ops, n, low, extra).len()
                } else {
                    fusion::plan_passes(&fusion::relabel(ops, &self.perm), n, low, extra).len()
                };
                let physical = fusion::relabel(ops, &self.perm);
                let passes = fusion::plan_passes(&physical, n, low, extra);
                let chunk_index_bits = n - low;
                // Each pass's gates in buffer coordinates and its blocks (the chunks gathered
                // into one buffer), planned up front: the passes then run as one pipeline that
                // never drains.
                let mut locals: Vec<Vec<Op>> = Vec::with_capacity(passes.len());
                let mut pass_blocks: Vec<Vec<Vec<usize>>> = Vec::with_capacity(passes.len());
                for pass in &passes {
                    // Buffer coordinates: physical q < low stays; the i-th gathered qubit is
                    // low + i.
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
                let block_lists: Vec<&[Vec<usize>]> =
                    pass_blocks.iter().map(Vec::as_slice).collect();
                let pool = &self.pool;
                if let Some(progress) = &progress {
                    progress.blocks_planned(block_lists.iter().map(|b| b.len()).sum());
                }
                // The pipeline runs pass after pass: a block of a later pass ends the ones before.
                let mut in_pass = 0;
                let io = self.array.passes(&block_lists, |p, _, bytes| {
                    if let Some(progress) = &progress {
                        if p > in_pass {
                            progress.passes_finished(p - in_pass);
                            in_pass = p;
                        }
                        progress.block_done(bytes.len());
                    }
                    let amps = bytemuck::cast_slice_mut::<u8, Amp<T>>(bytes);
                    let mut pieces: Vec<&mut [Amp<T>]> = amps.chunks_mut(1 << piece_bits).collect();
                    let swept = pool.install(|| {
                        sweep::run(
                            &mut pieces,
                            piece_bits,
                            c,
                            &locals[p],
                            fuse,
                            false,
                            blocking,
                            None,
                        )
                    });
                    fused_gates[p] = swept.fused_gates;
                    fuse_width = fuse_width.max(swept.fuse_width);
                    Ok(())
                })?;
                if let Some(progress) = &progress {
                    progress.passes_finished(passes.len() - in_pass);
                }
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
                Ok(Applied {
                    fused_gates: fused_gates.iter().sum(),
                    fuse_width,
                    passes: passes.len(),
                    pass_reports,
                    passes_without_relabelling: Some(unrelabelled),
                })
            }
        }
    }

    /// A copy of the state and its layout (in memory, or on the `--ssd` directories out of
    /// core).
    pub(crate) fn save(&mut self) -> Result<SavedState> {
        let mut copy = TieredArray::create(&self.copy_config)?;
        copy_chunks(&mut self.array, &mut copy)?;
        Ok(SavedState {
            array: copy,
            perm: self.perm.clone(),
        })
    }

    /// Make `saved` (from [`Simulation::save`]) the state again, in the layout it had.
    pub(crate) fn restore(&mut self, saved: &mut SavedState) -> Result<()> {
        copy_chunks(&mut saved.array, &mut self.array)?;
        self.perm.clone_from(&saved.perm);
        Ok(())
    }

    /// Move every logical qubit to its own physical position (qubit `q` at index bit `q`), so
    /// that the state's physical order is its logical order. Sampling walks the basis states in
    /// that order, so that it draws the same shots from a seed whatever layout the run chose
    /// (in memory, out of core, or over ranks). One batch of swap gates, run as any other (a
    /// sweep in memory, the passes it needs out of core); nothing when the layout is home.
    pub(crate) fn bring_home(&mut self) -> Result<()> {
        let mut logical_at = vec![0; self.n];
        for (q, &p) in self.perm.iter().enumerate() {
            logical_at[p] = q;
        }
        let swaps = swaps_to_identity(&logical_at);
        if swaps.is_empty() {
            return Ok(());
        }
        // `apply` places logical qubits by the layout as it is before the batch: each swap of
        // physical positions is named by the logical qubits found there now.
        let ops: Vec<Op> = swaps
            .iter()
            .map(|&(a, b)| Op {
                qubits: vec![logical_at[a], logical_at[b]],
                matrix: crate::gates::swap(),
            })
            .collect();
        self.apply(&ops)?;
        self.perm = (0..self.n).collect();
        Ok(())
    }

    /// The squared norms of the state's part with logical qubit `q` at 0 and at 1.
    pub(crate) fn weights_of(&mut self, q: usize) -> Result<[f64; 2]> {
        let bit = 1u64 << self.perm[q];
        let mut sums = [0.0f64; 2];
        self.scan(|first, amps| {
            if bit >= amps.len() as u64 {
                // The whole chunk is on one side.
                sums[usize::from(first & bit != 0)] += squared_norm(amps);
            } else {
                // Chunks start at multiples of their length, so runs of `bit` amplitudes
                // alternate between the sides, starting with 0: no test per amplitude.
                for (k, run) in amps.chunks(bit as usize).enumerate() {
                    sums[k & 1] += squared_norm(run);
                }
            }
        })?;
        Ok(sums)
    }

    /// Bytes of the state.
    pub(crate) fn state_bytes(&self) -> u64 {
        self.report.state_bytes
    }

    /// Whether the state lives in memory (copies then take memory too).
    pub(crate) fn in_memory(&self) -> bool {
        matches!(self.layout, Layout::Memory { .. })
    }

    /// Where the run's progress goes, when a caller asked for it.
    pub(crate) fn progress(&self) -> Option<&Progress> {
        self.progress.as_deref()
    }

    pub(crate) fn report_mut(&mut self) -> &mut RunReport {
        &mut self.report
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
    pub(crate) fn scan(&mut self, mut f: impl FnMut(u64, &[Amp<T>])) -> Result<()> {
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
    pub fn amplitudes(&mut self, indices: &[u64]) -> Result<Vec<[f64; 2]>> {
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
    pub fn statevector(&mut self) -> Result<Vec<[f64; 2]>> {
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
    pub fn norm(&mut self) -> Result<f64> {
        let mut sum = 0.0;
        self.scan(|_, amps| {
            sum += amps
                .iter()
                .map(|a| a[0].to_f64().powi(2) + a[1].to_f64().powi(2))
                .sum::<f64>();
        })?;
        Ok(sum)
    }

    /// For each of `targets` (sorted, in `[0, squared norm)`), the index of the amplitude where
    /// the running sum of probabilities passes it, appended to `hits` (reserved by the caller):
    /// one pass over the state, in memory or out of core. Rounding can leave the last targets
    /// just above the sum: they take the last amplitude with any probability.
    pub(crate) fn resolve_targets(&mut self, targets: &[f64], hits: &mut Vec<u64>) -> Result<()> {
        let wanted = hits.len() + targets.len();
        let (mut acc, mut next, mut last) = (0.0, 0, 0u64);
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
        while hits.len() < wanted {
            hits.push(last);
        }
        Ok(())
    }

    /// Sample `shots` measurements of `qubits` (in order: the first is the rightmost character of
    /// each key, as in Qiskit's counts), with a seeded generator: each shot is the basis state,
    /// in Qiskit's order, where the running sum of probabilities passes a uniform draw, so a
    /// seed gives the same counts in memory, out of core and over any number of ranks (up to
    /// the rounding of amplitudes that lie on a draw's boundary). The qubits are brought home
    /// first ([`Simulation::bring_home`]).
    pub fn sample(&mut self, shots: usize, qubits: &[usize], seed: u64) -> Result<Counts> {
        self.bring_home()?;
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
        self.resolve_targets(&targets, &mut hits)?;
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

/// The smallest piece of a state: one `O_DIRECT` alignment unit of amplitudes of `a` bytes.
fn min_bits(a: usize) -> usize {
    (cxltier_sys::uring::ALIGN / a).trailing_zeros() as usize
}

/// Bits of the pieces an in-memory state of `n` qubits is swept in: enough pieces that gates on
/// the top qubits still leave groups for every thread.
pub(crate) fn memory_piece_bits(n: usize, a: usize) -> usize {
    n.saturating_sub(8).max(min_bits(a))
}

/// Bits of the chunks of an in-memory state of `n` qubits placed without weights: 2 MiB or
/// more, each holding several pieces (fewer mappings to bind and verify, and transparent huge
/// pages).
pub(crate) fn memory_chunk_bits(n: usize, a: usize) -> usize {
    let huge_bits = ((2usize << 20) / a).trailing_zeros() as usize;
    memory_piece_bits(n, a).max(huge_bits.min(n))
}

/// How a state of `n` qubits (amplitudes of `a` bytes) runs out of core under `limit` bytes for
/// gates of up to `widest` qubits: `(low, c, extra)`, the bits of a chunk (the unit of I/O),
/// of each of the three block buffers, and the qubits a pass gathers above a chunk.
pub(crate) fn out_of_core_shape(
    n: usize,
    widest: usize,
    limit: u64,
    a: usize,
    max_extra: usize,
) -> Result<(usize, usize, usize)> {
    let min_bits = min_bits(a);
    // Three block buffers of 2^c amplitudes must fit under the limit.
    let c = ((limit / (3 * a as u64)).max(1).ilog2() as usize).min(n - 1);
    let extra = max_extra.max(widest).min(c.saturating_sub(min_bits));
    if c < min_bits + widest || extra < widest {
        let need = 3 * (1u64 << (min_bits + widest)) * a as u64;
        return Err(QsimError::Config(format!(
            "--memory-limit {limit} is too small to run this circuit out of core: its widest \
             gate has {widest} qubits, which needs three buffers of 2^{} amplitudes ({need} \
             bytes); raise the limit to at least {need}",
            min_bits + widest
        )));
    }
    // Chunks are the unit of I/O: keep them at least 256 KiB (where the buffers allow) so that
    // the device streams, even if that leaves fewer extra qubits per pass.
    let io_bits = ((256usize << 10) / a).trailing_zeros() as usize;
    let low = (c - extra).max(io_bits.min(c - widest));
    Ok((low, c, c - low))
}

#[cfg(feature = "mpi")]
/// Gates on qubits inside one chunk, at their physical positions and fused, to apply chunk by
/// chunk ([`Simulation::chunk_gates`]).
pub(crate) struct ChunkGates {
    ops: Vec<Op>,
    width: usize,
    /// Gates of the circuit they came from (before fusion).
    pub(crate) gates: usize,
}

#[cfg(feature = "mpi")]
/// Apply `gates` to the first `per_chunk` amplitudes of `bytes` on `pool`.
fn apply_in_chunk<T: Real>(
    pool: &rayon::ThreadPool,
    blocking: sweep::Blocking,
    per_chunk: usize,
    gates: &ChunkGates,
    bytes: &mut [u8],
) {
    let low = per_chunk.trailing_zeros() as usize;
    let amps = bytemuck::cast_slice_mut::<u8, Amp<T>>(&mut bytes[..per_chunk * amp_bytes::<T>()]);
    // Pieces as an out-of-core pass cuts its buffer: a 64th of it.
    let piece_bits = low.saturating_sub(6);
    let mut pieces: Vec<&mut [Amp<T>]> = amps.chunks_mut(1 << piece_bits).collect();
    pool.install(|| {
        sweep::run(
            &mut pieces,
            piece_bits,
            low,
            &gates.ops,
            fusion::Width::Fixed(gates.width),
            false,
            blocking,
            None,
        )
    });
}

/// A copy of a state and the layout it was in ([`Simulation::save`]).
pub(crate) struct SavedState {
    array: TieredArray,
    perm: Vec<usize>,
}

/// Swaps of physical positions that put every logical qubit at its own position, given the
/// logical qubit at each position (a permutation of `0..len`): at most `len - 1`, one per
/// position out of place but the last of each cycle.
pub(crate) fn swaps_to_identity(logical_at: &[usize]) -> Vec<(usize, usize)> {
    let mut at = logical_at.to_vec();
    let mut swaps = Vec::new();
    for p in 0..at.len() {
        while at[p] != p {
            let q = at[p];
            swaps.push((p, q));
            at.swap(p, q);
        }
    }
    swaps
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

impl Precision {
    /// `f64` or `f32`, as reports and `--precision` name it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F64 => "f64",
            Precision::F32 => "f32",
        }
    }

    /// Bytes of one amplitude (a complex number).
    pub fn amplitude_bytes(self) -> usize {
        match self {
            Precision::F64 => 16,
            Precision::F32 => 8,
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Precision {
    type Err = QsimError;

    /// `f64` or `f32`; anything else is refused, naming `--precision`.
    fn from_str(text: &str) -> Result<Precision> {
        match text {
            "f64" => Ok(Precision::F64),
            "f32" => Ok(Precision::F32),
            other => Err(QsimError::Config(format!(
                "--precision {other}: give f64 or f32"
            ))),
        }
    }
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
    ) -> Result<AnySimulation> {
        Ok(match precision {
            Precision::F64 => AnySimulation::F64(Simulation::run(circuit, options)?),
            Precision::F32 => AnySimulation::F32(Simulation::run(circuit, options)?),
        })
    }
    /// Run `shots` shots of a dynamic circuit (see [`crate::dynamic::run_shots`]): the
    /// simulation holding the last state run, and the counts keyed as Qiskit's `get_counts()`.
    pub fn run_shots(
        circuit: &Circuit,
        options: &Options,
        precision: Precision,
        shots: u64,
        seed: u64,
    ) -> Result<(AnySimulation, Counts)> {
        Ok(match precision {
            Precision::F64 => {
                let (s, c) = crate::dynamic::run_shots(circuit, options, shots, seed)?;
                (AnySimulation::F64(s), c)
            }
            Precision::F32 => {
                let (s, c) = crate::dynamic::run_shots(circuit, options, shots, seed)?;
                (AnySimulation::F32(s), c)
            }
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
    pub fn norm(&mut self) -> Result<f64> {
        match self {
            AnySimulation::F64(s) => s.norm(),
            AnySimulation::F32(s) => s.norm(),
        }
    }
    /// See [`Simulation::amplitudes`].
    pub fn amplitudes(&mut self, indices: &[u64]) -> Result<Vec<[f64; 2]>> {
        match self {
            AnySimulation::F64(s) => s.amplitudes(indices),
            AnySimulation::F32(s) => s.amplitudes(indices),
        }
    }
    /// See [`Simulation::sample`].
    pub fn sample(&mut self, shots: usize, qubits: &[usize], seed: u64) -> Result<Counts> {
        match self {
            AnySimulation::F64(s) => s.sample(shots, qubits, seed),
            AnySimulation::F32(s) => s.sample(shots, qubits, seed),
        }
    }
    /// See [`Simulation::statevector`].
    pub fn statevector(&mut self) -> Result<Vec<[f64; 2]>> {
        match self {
            AnySimulation::F64(s) => s.statevector(),
            AnySimulation::F32(s) => s.statevector(),
        }
    }
}
