//! A model of a run split over MPI ranks, to size a cluster before running on it
//! (`cxltier qsim CIRCUIT --plan-cluster SPEC`): per rank, the time in gates, in exchanges and
//! in NVMe I/O, from the communication plan ([`super::plan`]), the sweeps and passes each rank's
//! engine would make, and the rates of the machine (each kernel width's cost and the memory's
//! streaming bandwidth, measured here) and of the cluster (network, latency, NVMe, given).
//!
//! Each rank's time is the sum of its steps, as the run does them one after another:
//!
//! - a **local batch** is fused as the run fuses it and cut into the sweeps (in memory) or the
//!   passes (out of core) the engine makes; a sweep costs the larger of its arithmetic (the
//!   kernels' cost per amplitude over the rank's share of the node's cores) and one streaming
//!   read and write of the part at the rank's share of the node's bandwidth; a pass the larger
//!   of that and reading and writing the part on the rank's NVMe (the three-buffer pipeline
//!   overlaps them);
//! - an **exchange** of `k` pairs sends and receives `1 - 2^-k` of the part in messages of at
//!   most the message size: the bytes over the network bandwidth plus a latency per message,
//!   plus gathering the amplitudes into messages and scattering the replies (measured per
//!   amplitude, on the rank's one thread, at its share of a core); out of core each chunk is
//!   also read and written once per partner.
//!
//! Steps add up, but for one overlap the run makes: the gates of the batch after an exchange
//! that act inside one chunk of the rank's array and can go first, when that saves the batch a
//! trip through the part ([`super::plan::overlap_batch`]), are applied by the exchange to each chunk as it writes it back, and to the chunks it does not
//! touch while messages are in flight. They cost their arithmetic (and, for the untouched
//! chunks, a read and write of those). With one rank a node, that work hides behind the
//! network's transfer of the exchange (a network card moves the bytes while the rank computes):
//! the exchange and its hoisted gates cost the larger of the two, plus the copying and chunk I/O
//! that run on the same thread. Ranks that share a node exchange through shared memory, which
//! their own cores copy, so there the two add up. The rest of the batch is priced as a batch;
//! the hoisted gates need no sweep (or pass) of their own, which is the saving.

use serde::Serialize;

use crate::fusion::{self, Op};
use crate::QsimError;
use crate::Result;

/// The cluster a run is planned for.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSpec {
    /// Ranks (a power of two).
    pub ranks: usize,
    /// Nodes the ranks are spread over evenly (at most `ranks`).
    pub nodes: usize,
    /// Cores of each node, shared by its ranks (a rank uses at most `threads` of them).
    pub cores_per_node: f64,
    /// Worker threads of each rank (`--threads`).
    pub threads: usize,
    /// DRAM each rank has for its part (`None`: all of it fits); with `cxl_per_rank`, a
    /// larger part spills to CXL memory, and beyond both it runs out of core.
    pub memory_per_rank: Option<u64>,
    /// CXL memory each rank has for what of its part DRAM does not hold.
    pub cxl_per_rank: Option<u64>,
    /// Bandwidth of a node's CXL memory (streaming read and write), shared by its ranks; needed
    /// when a part reaches CXL.
    pub cxl_stream_bytes_per_second: Option<f64>,
    /// Bytes per second a rank sends (and receives at once) to another; needed for more than
    /// one rank.
    pub network_bytes_per_second: Option<f64>,
    /// Seconds per message beyond its bytes.
    pub latency_seconds: f64,
    /// Bytes per second of each rank's NVMe, reads and writes together (a pass does both at
    /// once); needed when a part exceeds its memory.
    pub ssd_bytes_per_second: Option<f64>,
    /// Memory bandwidth of a node (streaming read and write), shared by its ranks; `None`:
    /// this machine's, measured.
    pub stream_bytes_per_second: Option<f64>,
    /// Largest exchange message (`--exchange-message`).
    pub message_bytes: u64,
}

/// What the machine's parts cost, measured here ([`crate::bench::machine_rates`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MachineRates {
    /// Seconds per amplitude of a dense `k`-qubit gate on one thread in cache (index `k`).
    pub gate_seconds: Vec<f64>,
    /// Streaming read and write bandwidth of the whole node, bytes per second.
    pub stream_bytes_per_second: f64,
    /// Seconds per amplitude to gather an exchange's amplitudes into a message and scatter the
    /// reply back, on one thread.
    pub exchange_copy_seconds: f64,
}

/// The model's prediction for one rank (every rank does the same work).
#[derive(Debug, Clone, Serialize)]
pub struct ClusterPrediction {
    /// Qubits of the whole state.
    pub qubits: usize,
    /// Ranks and nodes.
    pub ranks: usize,
    pub nodes: usize,
    /// Bytes of amplitudes per rank.
    pub part_bytes: u64,
    /// `in_memory` or `out_of_core` (the part exceeds the rank's DRAM and CXL).
    pub mode: &'static str,
    /// Bytes of the part in DRAM and in CXL memory (in memory; out of core, what the run's
    /// memory holds besides its buffers is not counted).
    pub dram_bytes_per_rank: u64,
    pub cxl_bytes_per_rank: u64,
    /// Threads a rank's gates run on: its threads, or its share of the node's cores if less.
    pub threads_per_rank: f64,
    /// Exchanges planned, and one per gate on a global qubit without planning.
    pub exchanges: usize,
    pub naive_exchanges: usize,
    /// Bytes each rank sends, planned and naive.
    pub exchange_bytes_per_rank: u64,
    pub naive_exchange_bytes_per_rank: u64,
    /// Messages each rank sends.
    pub messages_per_rank: u64,
    /// Sweeps (in memory) or passes (out of core) over each rank's part.
    pub sweeps: usize,
    pub passes: usize,
    /// Bytes each rank reads and writes on its NVMe (passes and out-of-core exchanges).
    pub io_bytes_per_rank: u64,
    /// Seconds per rank in local batches (including their I/O), in exchanges, and in all.
    pub compute_seconds: f64,
    pub exchange_seconds: f64,
    pub io_seconds: f64,
    pub total_seconds: f64,
    /// Gates of the batches after exchanges applied inside the exchanges (chunk by chunk), and
    /// the seconds of that work (within `exchange_seconds`; with one rank a node it hides
    /// behind the transfer up to the transfer's time).
    pub overlapped_gates: usize,
    pub overlap_seconds: f64,
    /// The rates the prediction used.
    pub rates: MachineRates,
    pub network_bytes_per_second: Option<f64>,
    pub latency_seconds: f64,
    pub ssd_bytes_per_second: Option<f64>,
    /// Ranks of a node beyond its cores: their time slices are not priced, so the run will be
    /// slower than predicted.
    pub oversubscribed: bool,
}

/// Predict the run of `circuit` (amplitudes of `amp_bytes`, fused as `fuse` says) over
/// `spec`'s cluster.
pub fn predict_circuit(
    circuit: &crate::qasm::Circuit,
    amp_bytes: usize,
    fuse: fusion::Width,
    spec: &ClusterSpec,
    rates: &MachineRates,
) -> Result<ClusterPrediction> {
    if let Some(line) = circuit.dynamic {
        return Err(QsimError::Config(format!(
            "line {line} makes the circuit dynamic: the model prices a circuit's gates, and a \
             dynamic circuit's work depends on its shots' outcomes; plan the circuit without its \
             mid-circuit measurements, resets and conditions"
        )));
    }
    let ops = crate::sim::ops_of(circuit);
    let max_extra = crate::sim::Options::new().max_extra;
    predict(
        &ops,
        circuit.num_qubits,
        amp_bytes,
        fuse,
        max_extra,
        spec,
        rates,
    )
}

/// Predict the run of `ops` on `n` qubits (amplitudes of `amp_bytes`, fused as `fuse` says)
/// over `spec`'s cluster, with `rates` for the arithmetic and the memory. A measured fusion is
/// priced by the rank's model ([`fusion::fuse_cheapest`] over `rates`), as the run prices it by
/// its own measurements.
pub fn predict(
    ops: &[Op],
    n: usize,
    amp_bytes: usize,
    fuse: fusion::Width,
    max_extra: usize,
    spec: &ClusterSpec,
    rates: &MachineRates,
) -> Result<ClusterPrediction> {
    if !spec.ranks.is_power_of_two() {
        return Err(QsimError::Config(format!(
            "ranks={}: the state splits into equal parts over a power of two of ranks only",
            spec.ranks
        )));
    }
    if spec.nodes == 0 || spec.nodes > spec.ranks || spec.ranks % spec.nodes != 0 {
        return Err(QsimError::Config(format!(
            "nodes={}: give 1 to {} nodes, dividing the {} ranks evenly",
            spec.nodes, spec.ranks, spec.ranks
        )));
    }
    let g = spec.ranks.trailing_zeros() as usize;
    let network = match spec.network_bytes_per_second {
        Some(rate) => rate,
        None if spec.ranks == 1 => f64::INFINITY,
        None => {
            return Err(QsimError::Config(format!(
                "{} ranks exchange amplitudes: give network=RATE, the bytes per second a rank \
                 sends to another (e.g. 12.5G for 100 Gb/s InfiniBand; `mpirun -np 2 cxltier \
                 qsim --bench-network` measures it)",
                spec.ranks
            )))
        }
    };
    let mut plan = super::plan::plan(ops, n, g)?;
    let m = n - g;
    let part_bytes = (1u64 << m) * amp_bytes as u64;
    let ranks_per_node = (spec.ranks / spec.nodes) as f64;
    let threads = (spec.threads as f64).min(spec.cores_per_node / ranks_per_node);
    let core_share = (spec.cores_per_node / ranks_per_node).min(1.0);
    let stream = spec
        .stream_bytes_per_second
        .unwrap_or(rates.stream_bytes_per_second)
        / ranks_per_node;
    let widest = ops.iter().map(|o| o.qubits.len()).max().unwrap_or(1);
    // DRAM first, then CXL memory; the run's memory limit is both together.
    let memory = spec
        .memory_per_rank
        .map(|dram| dram.saturating_add(spec.cxl_per_rank.unwrap_or(0)));
    let ooc = match memory {
        Some(limit) if part_bytes > limit => Some(crate::sim::out_of_core_shape(
            m, widest, limit, amp_bytes, max_extra,
        )?),
        _ => None,
    };
    let (dram_bytes, cxl_bytes) = match (ooc, spec.memory_per_rank) {
        (None, Some(dram)) => (part_bytes.min(dram), part_bytes.saturating_sub(dram)),
        (None, None) => (part_bytes, 0),
        (Some(_), _) => (0, 0),
    };
    let cxl_stream = match (cxl_bytes, spec.cxl_stream_bytes_per_second) {
        (0, _) => f64::INFINITY,
        (_, Some(rate)) => rate / ranks_per_node,
        (_, None) => {
            return Err(QsimError::Config(format!(
                "{cxl_bytes} bytes of each rank's part live in CXL memory: give \
                 cxl-stream=RATE, the bytes per second a node's CXL memory streams (e.g. 30G)"
            )))
        }
    };
    let ssd = match (ooc, spec.ssd_bytes_per_second) {
        (None, _) => f64::INFINITY,
        (Some(_), Some(rate)) => rate,
        (Some(_), None) => {
            return Err(QsimError::Config(format!(
                "each rank's part of {part_bytes} bytes exceeds its memory (DRAM and CXL) of {} \
                 bytes, so it streams through NVMe: give ssd=RATE, the bytes per second a rank's \
                 drive reads and writes (e.g. 3G)",
                memory.unwrap_or(0)
            )))
        }
    };
    // DRAM and CXL stream their shares at once (the run interleaves its chunks over them).
    let stream_part = match ooc {
        None => (2.0 * dram_bytes as f64 / stream).max(2.0 * cxl_bytes as f64 / cxl_stream),
        Some(_) => 2.0 * part_bytes as f64 / stream,
    };
    let io_part = 2.0 * part_bytes as f64 / ssd;
    // Reading and writing `bytes` of the rank's part once: its seconds, those of them that are
    // I/O, and the bytes of I/O (streamed through memory, or through the SSDs out of core).
    let read_write = |bytes: f64| -> (f64, f64, u64) {
        match ooc {
            None => (stream_part * bytes / part_bytes as f64, 0.0, 0),
            Some(_) => (2.0 * bytes / ssd, 2.0 * bytes / ssd, 2 * bytes as u64),
        }
    };
    let arithmetic = |widths: &[usize]| -> f64 {
        widths.iter().map(|&k| rates.gate_seconds[k]).sum::<f64>() * (1u64 << m) as f64 / threads
    };
    // The rank's cost model, for a measured fusion: its threads' share of the arithmetic folded
    // into the per-amplitude costs (the share may be a fraction of a core).
    let cost = fusion::CostModel {
        gate_seconds: rates.gate_seconds.iter().map(|s| s / threads).collect(),
        threads: 1,
        amplitudes: 1 << m,
        stream_seconds: stream_part,
    };
    let fuse_ops = |ops: &[Op],
                    pricing: fusion::Pricing,
                    sweeps: &dyn Fn(&[Op]) -> Vec<Vec<usize>>|
     -> Vec<Op> {
        match fuse {
            fusion::Width::Fixed(w) => fusion::fuse(ops, w),
            // A distributed run prices its fusion whatever its length (`Auto` as measured).
            fusion::Width::Measured(max) | fusion::Width::Auto(max) => {
                fusion::fuse_cheapest(ops, max, &cost, pricing, sweeps).1
            }
        }
    };
    let one_sweep = |fused: &[Op]| vec![fused.iter().map(|o| o.qubits.len()).collect()];
    // Trips through the state as the run counts them ([`crate::sim::Simulation::trips`]).
    let trips_width = match fuse {
        fusion::Width::Fixed(w) => w,
        fusion::Width::Measured(w) | fusion::Width::Auto(w) => w.min(2),
    };
    let (mut compute, mut io, mut io_bytes) = (0.0, 0.0, 0u64);
    let (mut sweeps, mut passes) = (0, 0);
    let (mut exchange_seconds, mut messages) = (0.0, 0u64);
    let (mut overlapped_gates, mut overlap_seconds) = (0, 0.0);
    // The chunks of the rank's array, as the run lays it out.
    let chunk_bits = ooc.map_or_else(
        || crate::sim::memory_chunk_bits(m, amp_bytes),
        |(low, _, _)| low,
    );
    // The steps as the run does them: each exchange with the gates it hoists out of the batch
    // after it, and the rest of that batch.
    let mut steps: Vec<(super::plan::Step, Vec<Op>)> = Vec::with_capacity(plan.steps.len());
    let mut planned = std::mem::take(&mut plan.steps).into_iter().peekable();
    while let Some(step) = planned.next() {
        match (step, planned.peek()) {
            (exchange @ super::plan::Step::Exchange(_), Some(super::plan::Step::Local(batch))) => {
                let trips = |ops: &[Op]| match ooc {
                    None => crate::sweep::sweeps_of(
                        ops,
                        trips_width,
                        m,
                        crate::sim::memory_piece_bits(m, amp_bytes).min(m),
                        amp_bytes,
                        crate::sweep::CACHE_BYTES,
                    ),
                    Some((low, _, extra)) => fusion::plan_passes(ops, m, low, extra).len(),
                };
                let (hoisted, rest) = super::plan::overlap_batch(batch, |q| q < chunk_bits, trips);
                planned.next();
                steps.push((exchange, hoisted));
                if !rest.is_empty() {
                    steps.push((super::plan::Step::Local(rest), Vec::new()));
                }
            }
            (step, _) => steps.push((step, Vec::new())),
        }
    }
    for (step, hoisted) in &steps {
        match step {
            super::plan::Step::Local(batch) => match ooc {
                None => {
                    let piece_bits = crate::sim::memory_piece_bits(m, amp_bytes);
                    let cut = |fused: &[Op]| {
                        crate::sweep::sweep_widths(fused, widest, m, piece_bits, amp_bytes)
                    };
                    let pricing = match crate::sweep::group_shape(
                        m,
                        piece_bits,
                        amp_bytes,
                        crate::sweep::CACHE_BYTES,
                        widest,
                    ) {
                        Some(_) => fusion::Pricing::SharedSweeps,
                        None => fusion::Pricing::SweepPerGate,
                    };
                    let fused = fuse_ops(batch, pricing, &cut);
                    for sweep in
                        crate::sweep::sweep_widths(&fused, widest, m, piece_bits, amp_bytes)
                    {
                        sweeps += 1;
                        compute += arithmetic(&sweep).max(stream_part);
                    }
                }
                Some((low, _, extra)) => {
                    for pass in fusion::plan_passes(batch, m, low, extra) {
                        passes += 1;
                        let fused = fuse_ops(
                            &batch[pass.gates],
                            fusion::Pricing::SharedSweeps,
                            &one_sweep,
                        );
                        let widths: Vec<usize> = fused.iter().map(|o| o.qubits.len()).collect();
                        let work = arithmetic(&widths);
                        compute += work.max(io_part);
                        io += io_part;
                        io_bytes += 2 * part_bytes;
                    }
                }
            },
            super::plan::Step::Exchange(pairs) => {
                let k = pairs.len();
                let share = 1.0 - 0.5f64.powi(k as i32);
                let bytes = share * part_bytes as f64;
                // Messages as the run cuts them: a power of two of amplitudes, at most the
                // message size, never across a chunk of the rank's array.
                let below = pairs.iter().filter(|&&(_, pl)| pl < chunk_bits).count();
                let in_chunk = 1u64 << (chunk_bits - below);
                let cap = 1u64 << (spec.message_bytes / amp_bytes as u64).max(1).ilog2();
                let per_partner = (1u64 << (m - k)) / in_chunk.min(cap);
                let sent = per_partner * ((1u64 << k) - 1);
                messages += sent;
                // The gathering and scattering run on the rank's one thread, at its share of
                // a core when the node's ranks outnumber its cores.
                let moved = share * (1u64 << m) as f64;
                let transfer = bytes / network;
                let mut t = sent as f64 * spec.latency_seconds
                    + moved * rates.exchange_copy_seconds / core_share;
                // For each partner, every chunk holding some of its amplitudes is read from the
                // rank's array and written back: all chunks when a pair's local position is
                // inside a chunk, half of them for each position above.
                let above = pairs.iter().filter(|&&(_, pl)| pl >= chunk_bits).count();
                let touched = ((1u64 << k) - 1) as f64 * part_bytes as f64 / (1u64 << above) as f64;
                let (seconds, chunk_io, chunk_io_bytes) = read_write(touched);
                t += seconds;
                io += chunk_io;
                io_bytes += chunk_io_bytes;
                // The hoisted gates: their arithmetic on every chunk, and the chunks no
                // partner's set falls in (a 2^-k share, when every pair is above a chunk) read
                // and written for them alone. That work runs while messages are in flight.
                let mut hoisted_work = 0.0;
                if !hoisted.is_empty() {
                    let fused = fuse_ops(hoisted, fusion::Pricing::SharedSweeps, &one_sweep);
                    let widths: Vec<usize> = fused.iter().map(|o| o.qubits.len()).collect();
                    hoisted_work += arithmetic(&widths);
                    if above == k {
                        let untouched = part_bytes as f64 / (1u64 << k) as f64;
                        let (seconds, filler_io, filler_io_bytes) = read_write(untouched);
                        hoisted_work += seconds;
                        io += filler_io;
                        io_bytes += filler_io_bytes;
                    }
                }
                overlapped_gates += hoisted.len();
                overlap_seconds += hoisted_work;
                // The transfer hides that work only when a network card moves the bytes while
                // the rank computes: ranks alone on their nodes. Ranks that share a node
                // exchange through shared memory, which their own cores copy (measured here:
                // the hoisted work added to the exchange whole).
                exchange_seconds += t + if spec.ranks == spec.nodes {
                    transfer.max(hoisted_work)
                } else {
                    transfer + hoisted_work
                };
            }
        }
    }
    Ok(ClusterPrediction {
        qubits: n,
        ranks: spec.ranks,
        nodes: spec.nodes,
        part_bytes,
        dram_bytes_per_rank: dram_bytes,
        cxl_bytes_per_rank: cxl_bytes,
        mode: if ooc.is_some() {
            "out_of_core"
        } else {
            "in_memory"
        },
        threads_per_rank: threads,
        exchanges: plan.exchanges,
        naive_exchanges: plan.naive_exchanges,
        exchange_bytes_per_rank: plan.bytes_per_rank(part_bytes),
        naive_exchange_bytes_per_rank: plan.naive_bytes_per_rank(part_bytes),
        messages_per_rank: messages,
        sweeps,
        passes,
        io_bytes_per_rank: io_bytes,
        compute_seconds: compute,
        exchange_seconds,
        io_seconds: io,
        total_seconds: compute + exchange_seconds,
        overlapped_gates,
        overlap_seconds,
        rates: rates.clone(),
        network_bytes_per_second: spec.network_bytes_per_second,
        latency_seconds: spec.latency_seconds,
        ssd_bytes_per_second: spec.ssd_bytes_per_second,
        oversubscribed: ranks_per_node > spec.cores_per_node,
    })
}

/// What `--plan-cluster` does not say, from the rest of the command line and this machine.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterDefaults {
    /// `--threads`, if given.
    pub threads: Option<usize>,
    /// `--memory-limit` in bytes, if given: each rank's DRAM unless `memory=` says.
    pub memory_per_rank: Option<u64>,
    /// `--exchange-message` in bytes.
    pub message_bytes: u64,
    /// This machine's cores: a node's unless `cores=` says.
    pub cores_here: usize,
    /// A sweep over rank counts is required (`--plot` draws one).
    pub needs_sweep: bool,
}

/// `--plan-cluster SPEC` parsed: the cluster, and the sweep over rank counts if one was asked.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterRequest {
    /// The cluster (with a sweep, at its first rank count).
    pub spec: ClusterSpec,
    /// `ranks=A..B`: every power of two from A to B, a rank per node.
    pub sweep: Option<(usize, usize)>,
    /// Threads were given (`threads=` or `--threads`): a sweep keeps them per rank.
    pub explicit_threads: bool,
}

impl ClusterRequest {
    /// The clusters to predict: the one asked, or one per rank count of the sweep (a rank per
    /// node, each using every core of its node unless threads were given).
    pub fn points(&self) -> Vec<ClusterSpec> {
        let Some((a, b)) = self.sweep else {
            return vec![self.spec.clone()];
        };
        let mut points = Vec::new();
        let mut r = a;
        while r <= b {
            points.push(ClusterSpec {
                ranks: r,
                nodes: r,
                threads: if self.explicit_threads {
                    self.spec.threads
                } else {
                    (self.spec.cores_per_node.ceil() as usize).max(1)
                },
                ..self.spec.clone()
            });
            r *= 2;
        }
        points
    }
}

impl ClusterRequest {
    /// Predict `circuit`'s run (named `name` in the report) on each cluster of
    /// [`ClusterRequest::points`], by the kernel costs and the memory bandwidth measured on this
    /// machine at `precision`, fused as `fuse` says.
    pub fn predict(
        &self,
        circuit: &crate::qasm::Circuit,
        name: &str,
        precision: crate::Precision,
        fuse: fusion::Width,
    ) -> Result<Vec<CircuitPrediction>> {
        let rates = match precision {
            crate::Precision::F64 => crate::bench::machine_rates::<f64>(),
            crate::Precision::F32 => crate::bench::machine_rates::<f32>(),
        };
        self.points()
            .iter()
            .map(|point| {
                Ok(CircuitPrediction {
                    circuit: name.to_string(),
                    precision: precision.name(),
                    fuse: fuse.max(),
                    fuse_rule: fuse.rule(),
                    prediction: predict_circuit(
                        circuit,
                        precision.amplitude_bytes(),
                        fuse,
                        point,
                        &rates,
                    )?,
                })
            })
            .collect()
    }
}

/// One prediction as `--plan-cluster` reports it: the circuit, how its gates are fused, and the
/// model's figures.
#[derive(Debug, Clone, Serialize)]
pub struct CircuitPrediction {
    /// The circuit's file, as named.
    pub circuit: String,
    /// `f64` or `f32`.
    pub precision: &'static str,
    /// The widest fused gate.
    pub fuse: usize,
    /// The rule the ranks fuse by: `cost` or `greedy` (a distributed run prices its fusion
    /// whatever its length, so `--fuse-rule auto` is `cost` there).
    pub fuse_rule: &'static str,
    #[serde(flatten)]
    pub prediction: ClusterPrediction,
}

/// The keys `--plan-cluster` takes.
const CLUSTER_KEYS: [&str; 11] = [
    "ranks",
    "nodes",
    "cores",
    "threads",
    "memory",
    "cxl",
    "cxl-stream",
    "network",
    "latency",
    "ssd",
    "stream",
];

/// Parse `--plan-cluster`'s `key=value,...` (e.g. `ranks=16,nodes=4,network=12.5G`), each
/// error naming the key and the form it takes.
pub fn parse_cluster_spec(text: &str, defaults: &ClusterDefaults) -> Result<ClusterRequest> {
    let bad = |message: String| QsimError::Config(message);
    let mut fields: std::collections::BTreeMap<&str, &str> = Default::default();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(bad(format!(
                "--plan-cluster {text}: {item:?} is not key=value; give e.g. \
                 ranks=16,nodes=4,network=12.5G"
            )));
        };
        if !CLUSTER_KEYS.contains(&key.trim()) {
            return Err(bad(format!(
                "--plan-cluster: unknown key {:?}; the keys are {}",
                key.trim(),
                CLUSTER_KEYS.join(", ")
            )));
        }
        fields.insert(key.trim(), value.trim());
    }
    let count = |key: &str| -> Result<Option<usize>> {
        fields
            .get(key)
            .map(|v| match v.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(bad(format!(
                    "--plan-cluster {key}={v}: give a whole number, 1 or more"
                ))),
            })
            .transpose()
    };
    let size =
        |v: &str| cxltier_topo::size::parse_size(v).map_err(|e| QsimError::Config(e.to_string()));
    let Some(ranks_text) = fields.get("ranks").copied() else {
        return Err(bad(
            "--plan-cluster: give ranks=R (a power of two), e.g. ranks=16,nodes=4,network=12.5G, \
             or a sweep ranks=A..B"
                .into(),
        ));
    };
    // ranks=A..B: every power of two from A to B, a rank per node.
    let sweep = match ranks_text.split_once("..") {
        None => None,
        Some((a, b)) => {
            let not_a_sweep = || {
                bad(format!(
                    "--plan-cluster ranks={ranks_text}: a sweep is ranks=A..B with A and B powers \
                     of two, A at most B (e.g. ranks=1..64)"
                ))
            };
            let (a, b) = (
                a.trim().parse::<usize>().map_err(|_| not_a_sweep())?,
                b.trim().parse::<usize>().map_err(|_| not_a_sweep())?,
            );
            if !a.is_power_of_two() || !b.is_power_of_two() || a > b {
                return Err(not_a_sweep());
            }
            if fields.contains_key("nodes") {
                return Err(bad(format!(
                    "--plan-cluster ranks={ranks_text}: a sweep puts a rank on each node; drop \
                     nodes=, or plan one rank count with ranks=R,nodes=N"
                )));
            }
            Some((a, b))
        }
    };
    if sweep.is_none() && defaults.needs_sweep {
        return Err(bad(format!(
            "--plot draws a sweep over rank counts: give ranks=A..B (e.g. ranks=1..64), not \
             ranks={ranks_text}"
        )));
    }
    let ranks = match sweep {
        Some((a, _)) => a,
        None => count("ranks")?.expect("given"),
    };
    let nodes = count("nodes")?.unwrap_or(ranks);
    let cores = match fields.get("cores") {
        Some(v) => match v.parse::<f64>() {
            Ok(c) if c.is_finite() && c > 0.0 => c,
            _ => {
                return Err(bad(format!(
                    "--plan-cluster cores={v}: give the cores of a node, e.g. 32"
                )))
            }
        },
        None => defaults.cores_here as f64,
    };
    let per_node = (ranks / nodes.max(1)).max(1);
    let threads = match count("threads")? {
        Some(t) => t,
        None => defaults
            .threads
            .unwrap_or(((cores / per_node as f64).ceil() as usize).max(1)),
    };
    let memory = match fields.get("memory") {
        Some(v) => Some(size(v)?),
        None => defaults.memory_per_rank,
    };
    let network = fields
        .get("network")
        .map(|v| parse_rate("network", v))
        .transpose()?;
    let cxl = fields.get("cxl").map(|v| size(v)).transpose()?;
    if cxl.is_some() && memory.is_none() {
        return Err(bad(
            "--plan-cluster: cxl=SIZE is what of a rank's part DRAM does not hold: give \
             memory=SIZE (its DRAM) too"
                .into(),
        ));
    }
    let cxl_stream = fields
        .get("cxl-stream")
        .map(|v| parse_rate("cxl-stream", v))
        .transpose()?;
    let latency = fields
        .get("latency")
        .map(|v| parse_time("latency", v))
        .transpose()?
        .unwrap_or(0.0);
    let ssd = fields
        .get("ssd")
        .map(|v| parse_rate("ssd", v))
        .transpose()?;
    let stream = fields
        .get("stream")
        .map(|v| parse_rate("stream", v))
        .transpose()?;
    Ok(ClusterRequest {
        spec: ClusterSpec {
            ranks,
            nodes,
            cores_per_node: cores,
            threads,
            memory_per_rank: memory,
            cxl_per_rank: cxl,
            cxl_stream_bytes_per_second: cxl_stream,
            network_bytes_per_second: network,
            latency_seconds: latency,
            ssd_bytes_per_second: ssd,
            stream_bytes_per_second: stream,
            message_bytes: defaults.message_bytes,
        },
        sweep,
        explicit_threads: fields.contains_key("threads") || defaults.threads.is_some(),
    })
}

/// Bytes per second, `K/M/G/T` powers of 1000: `12.5G`, `800M`, `3e9`.
fn parse_rate(key: &str, text: &str) -> Result<f64> {
    let t = text.trim();
    let t = t
        .strip_suffix("B/s")
        .or_else(|| t.strip_suffix("/s"))
        .unwrap_or(t);
    let (number, scale) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1e3),
        Some((i, 'M')) => (&t[..i], 1e6),
        Some((i, 'G')) => (&t[..i], 1e9),
        Some((i, 'T')) => (&t[..i], 1e12),
        _ => (t, 1.0),
    };
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * scale),
        _ => Err(QsimError::Config(format!(
            "--plan-cluster {key}={text}: give bytes per second, e.g. 12.5G (100 Gb/s), 800M"
        ))),
    }
}

/// Seconds from `2us`, `0.5ms`, `100ns`, `1s` (a bare number is seconds).
fn parse_time(key: &str, text: &str) -> Result<f64> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1e-9)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else {
        (t.strip_suffix('s').unwrap_or(t), 1.0)
    };
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * scale),
        _ => Err(QsimError::Config(format!(
            "--plan-cluster {key}={text}: give a time such as 2us, 0.5ms, 0"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fusion the predictions are priced at: every gate merged up to 2 qubits.
    const GREEDY_2: fusion::Width = fusion::Width::Fixed(2);
    use crate::gates;

    fn spec(ranks: usize) -> ClusterSpec {
        ClusterSpec {
            ranks,
            nodes: ranks,
            cores_per_node: 4.0,
            threads: 4,
            memory_per_rank: None,
            cxl_per_rank: None,
            cxl_stream_bytes_per_second: None,
            network_bytes_per_second: Some(1e9),
            latency_seconds: 1e-6,
            ssd_bytes_per_second: Some(1e9),
            stream_bytes_per_second: None,
            message_bytes: 256 << 10,
        }
    }

    fn rates() -> MachineRates {
        MachineRates {
            gate_seconds: vec![0.0, 1e-9, 2e-9, 4e-9, 8e-9, 16e-9],
            stream_bytes_per_second: 10e9,
            exchange_copy_seconds: 2e-9,
        }
    }

    fn qft(n: usize) -> Vec<Op> {
        let mut ops = Vec::new();
        for j in (0..n).rev() {
            ops.push(Op {
                qubits: vec![j],
                matrix: gates::h(),
            });
            for k in (0..j).rev() {
                ops.push(Op {
                    qubits: vec![k, j],
                    matrix: gates::controlled(
                        &gates::phase(std::f64::consts::PI / (1u64 << (j - k)) as f64),
                        1,
                    ),
                });
            }
        }
        ops
    }

    #[test]
    fn one_rank_exchanges_nothing_and_more_ranks_split_the_work() {
        let ops = qft(20);
        let one = predict(&ops, 20, 16, GREEDY_2, 6, &spec(1), &rates()).unwrap();
        assert_eq!((one.exchanges, one.exchange_bytes_per_rank), (0, 0));
        assert_eq!(one.exchange_seconds, 0.0);
        let four = predict(&ops, 20, 16, GREEDY_2, 6, &spec(4), &rates()).unwrap();
        assert!(four.exchanges >= 1 && four.exchanges <= four.naive_exchanges);
        assert_eq!(four.part_bytes, one.part_bytes / 4);
        // A quarter of the amplitudes each, on a node of its own: the gates take about a
        // quarter of the time (the sweeps differ a little with the part's size).
        let ratio = four.compute_seconds / one.compute_seconds;
        assert!(ratio > 0.15 && ratio < 0.4, "{ratio}");
        // The exchanges' bytes over the network at least.
        assert!(four.exchange_seconds >= four.exchange_bytes_per_rank as f64 / 1e9);
    }

    #[test]
    fn ranks_sharing_a_node_share_its_cores_and_bandwidth() {
        let ops = qft(18);
        let apart = predict(&ops, 18, 16, GREEDY_2, 6, &spec(4), &rates()).unwrap();
        let together = ClusterSpec {
            nodes: 1,
            ..spec(4)
        };
        let shared = predict(&ops, 18, 16, GREEDY_2, 6, &together, &rates()).unwrap();
        assert_eq!(shared.threads_per_rank, 1.0);
        // The gates, whether in batches or overlapping the exchanges.
        assert!(
            shared.compute_seconds + shared.overlap_seconds
                > 3.0 * (apart.compute_seconds + apart.overlap_seconds)
        );
    }

    /// The gates an exchange takes from the next batch hide behind its transfer when every rank
    /// has a node (a network card moves the bytes), and add to it when ranks share a node
    /// (their cores copy the messages): the same ranks, cores and bandwidth a rank otherwise.
    #[test]
    fn an_exchange_hides_the_gates_it_takes_only_between_nodes() {
        let ops = qft(18);
        let apart = predict(&ops, 18, 16, GREEDY_2, 6, &spec(4), &rates()).unwrap();
        let together = ClusterSpec {
            nodes: 1,
            cores_per_node: 16.0,
            stream_bytes_per_second: Some(4.0 * rates().stream_bytes_per_second),
            ..spec(4)
        };
        let shared = predict(&ops, 18, 16, GREEDY_2, 6, &together, &rates()).unwrap();
        assert!(apart.overlapped_gates > 0 && apart.overlap_seconds > 0.0);
        assert_eq!(apart.overlapped_gates, shared.overlapped_gates);
        assert_eq!(apart.compute_seconds, shared.compute_seconds);
        let hidden = shared.exchange_seconds - apart.exchange_seconds;
        assert!(
            hidden > 0.0 && hidden <= apart.overlap_seconds * (1.0 + 1e-12),
            "{hidden} hidden of {}",
            apart.overlap_seconds
        );
    }

    #[test]
    fn a_part_beyond_dram_streams_from_cxl_at_its_bandwidth() {
        let ops = qft(20);
        // 16 MiB a rank: 4 MiB in DRAM, 12 MiB on CXL at a tenth of DRAM's bandwidth.
        let tiered = ClusterSpec {
            memory_per_rank: Some(4 << 20),
            cxl_per_rank: Some(64 << 20),
            cxl_stream_bytes_per_second: Some(1e9),
            stream_bytes_per_second: Some(10e9),
            ..spec(1)
        };
        let p = predict(&ops, 20, 16, GREEDY_2, 6, &tiered, &rates()).unwrap();
        assert_eq!(p.mode, "in_memory");
        assert_eq!(
            (p.dram_bytes_per_rank, p.cxl_bytes_per_rank),
            (4 << 20, 12 << 20)
        );
        let dram = predict(
            &ops,
            20,
            16,
            GREEDY_2,
            6,
            &ClusterSpec {
                stream_bytes_per_second: Some(10e9),
                ..spec(1)
            },
            &rates(),
        )
        .unwrap();
        assert!(p.compute_seconds > dram.compute_seconds, "{p:?}");
        // Every sweep at least streams the CXL share at the CXL bandwidth.
        let floor = p.sweeps as f64 * 2.0 * (12u64 << 20) as f64 / 1e9;
        assert!(
            p.compute_seconds >= floor * 0.999,
            "{} < {floor}",
            p.compute_seconds
        );
        let e = predict(
            &ops,
            20,
            16,
            GREEDY_2,
            6,
            &ClusterSpec {
                cxl_stream_bytes_per_second: None,
                ..tiered
            },
            &rates(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("cxl-stream=RATE"), "{e}");
    }

    #[test]
    fn a_part_beyond_memory_streams_through_nvme() {
        let ops = qft(20);
        let small = ClusterSpec {
            memory_per_rank: Some(1 << 20),
            ..spec(2)
        };
        let p = predict(&ops, 20, 16, GREEDY_2, 6, &small, &rates()).unwrap();
        assert_eq!(p.mode, "out_of_core");
        assert!(p.passes >= 1);
        // Every pass reads and writes the part; each exchange's chunks too.
        assert!(p.io_bytes_per_rank >= 2 * p.part_bytes * p.passes as u64);
        assert!(p.io_seconds >= p.io_bytes_per_rank as f64 / 1e9 * 0.999);
        assert!(p.total_seconds >= p.io_seconds);
    }

    #[test]
    fn bad_cluster_shapes_are_refused_with_the_fix() {
        let (qft10, qft14) = (qft(10), qft(14));
        // `spec(ranks)` changed by `change`.
        let with = |ranks: usize, change: fn(&mut ClusterSpec)| {
            let mut s = spec(ranks);
            change(&mut s);
            s
        };
        for (ops, n, cluster, fix) in [
            (&qft10, 10, spec(3), "power of two"),
            (&qft10, 10, with(4, |s| s.nodes = 3), "dividing"),
            (
                &qft10,
                10,
                with(2, |s| s.network_bytes_per_second = None),
                "network=RATE",
            ),
            (
                &qft14,
                14,
                with(1, |s| {
                    s.memory_per_rank = Some(64 << 10);
                    s.ssd_bytes_per_second = None;
                }),
                "ssd=RATE",
            ),
        ] {
            let e = predict(ops, n, 16, GREEDY_2, 6, &cluster, &rates()).unwrap_err();
            assert!(e.to_string().contains(fix), "{fix}: {e}");
        }
    }
}
