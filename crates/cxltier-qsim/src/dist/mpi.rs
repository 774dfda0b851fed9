//! Running a [`Plan`] with one part of the state per MPI rank (feature `mpi`).
//!
//! Each of the `R = 2^g` ranks holds the `2^m` amplitudes (`m = n - g`) whose top `g` index bits
//! are its rank number, in its own [`Simulation`] (in memory, or out of core under its own
//! `--memory-limit` and `--ssd`), and runs the plan's local batches on it with the usual engine
//! (fusion, sweeps, passes). An exchange of `k` (global, local) pairs is done chunk by chunk:
//! for each of the `2^k - 1` partners (rank xor a pattern of the `k` rank bits, taken in the same
//! order by every rank, so that partners always meet), the amplitudes whose local bits at the
//! pair positions equal the partner's rank bits are sent and replaced by the partner's
//! (`MPI_Sendrecv`). A message is at most the amplitudes of one chunk that are in the set, so
//! an exchange holds one chunk and two such buffers whatever the state's size.

use std::collections::BTreeMap;
use std::time::Instant;

use cxltier_sys::uring::AlignedBuf;
use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;
use rand::{Rng, SeedableRng};

use crate::dist::plan::{self, Plan, Step};
use crate::dist::{DistReport, RankTimes};
use crate::kernel::{Amp, Real};
use crate::qasm::Circuit;
use crate::sim::{ops_of, Options, Precision, RunReport, Simulation};
use crate::QsimError;

/// The number of ranks `mpirun` (Open MPI) started this process among, from
/// `OMPI_COMM_WORLD_SIZE`; `None` when it was not started by `mpirun`, so that a plain run never
/// initialises MPI.
pub fn launched_ranks() -> Option<usize> {
    std::env::var("OMPI_COMM_WORLD_SIZE").ok()?.parse().ok()
}

/// The ranks of this run (MPI's world), initialised once.
pub struct Cluster {
    _universe: Universe,
    world: SimpleCommunicator,
}

impl Cluster {
    /// Initialise MPI. Every rank refuses a number of ranks that is not a power of two.
    pub fn init() -> Result<Cluster, QsimError> {
        let universe = mpi::initialize()
            .ok_or_else(|| QsimError::Config("MPI is initialised already".into()))?;
        let world = universe.world();
        let size = world.size() as usize;
        if !size.is_power_of_two() {
            return Err(QsimError::Config(format!(
                "mpirun -np {size}: the state splits into equal parts over a power of two of \
                 ranks only; run with -np 1, 2, 4, 8, ..."
            )));
        }
        Ok(Cluster {
            _universe: universe,
            world,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.world.size() as usize
    }

    /// End every rank of the run (`MPI_Abort`): what a rank does when it fails part-way, since
    /// the others would otherwise wait for it forever.
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }
}

/// One rank's part of a distributed run, ready to read out. Every read-out method is
/// collective: all ranks call it with the same arguments.
pub struct DistSimulation<'c, T: Real> {
    cluster: &'c Cluster,
    local: Simulation<T>,
    plan: Plan,
    report: RunReport,
    dist: DistReport,
}

impl<'c, T: Real> DistSimulation<'c, T> {
    /// Run `circuit` (its unitary gates) from |0...0> over the cluster's ranks.
    pub fn run(
        cluster: &'c Cluster,
        circuit: &Circuit,
        options: &Options,
    ) -> Result<DistSimulation<'c, T>, QsimError> {
        let (rank, size) = (cluster.rank(), cluster.size());
        let n = circuit.num_qubits;
        let g = size.trailing_zeros() as usize;
        let ops = ops_of(circuit);
        let plan = plan::plan(&ops, n, g)?;
        let m = n - g;
        if m == 0 {
            return Err(QsimError::Config(format!(
                "{size} ranks for {n} qubits leave each rank one amplitude and no local qubit: \
                 use at most 2^{} ranks",
                n - 1
            )));
        }
        let widest = ops.iter().map(|o| o.qubits.len()).max().unwrap_or(1);
        // Setting up can fail on one rank only (its memory, its disk): the ranks agree on it
        // before the first exchange, so that none waits for a partner that has given up.
        let started = Simulation::<T>::start_part(m, widest, options, rank == 0);
        let mut ready = vec![0u8; size];
        cluster
            .world
            .all_gather_into(&u8::from(started.is_ok()), &mut ready[..]);
        let mut local = match started {
            Err(e) => return Err(e),
            Ok(_) if ready.contains(&0) => {
                let failed: Vec<String> = (0..size)
                    .filter(|&r| ready[r] == 0)
                    .map(|r| r.to_string())
                    .collect();
                return Err(QsimError::Config(format!(
                    "rank {} could not set up its part of the state (its own message says why)",
                    failed.join(", rank ")
                )));
            }
            Ok(local) => local,
        };
        let started = Instant::now();
        let (mut compute, mut exchange_seconds) = (0.0, 0.0);
        let mut exchanged = ExchangeTimes::default();
        for step in &plan.steps {
            let t = Instant::now();
            match step {
                Step::Local(batch) => {
                    local.apply(batch)?;
                    compute += t.elapsed().as_secs_f64();
                }
                Step::Exchange(pairs) => {
                    let times = exchange(
                        &mut local,
                        &cluster.world,
                        m,
                        pairs,
                        options.exchange_message,
                    )?;
                    exchanged.message_wait += times.message_wait;
                    exchanged.messages += times.messages;
                    exchange_seconds += t.elapsed().as_secs_f64();
                }
            }
        }
        let simulate_seconds = started.elapsed().as_secs_f64();
        // Folded from +0.0: an empty f64 sum is -0.0.
        let io_wait = local
            .report()
            .pass_reports
            .iter()
            .fold(0.0, |sum, p| sum + p.io.io_wait_seconds);
        let mine = [
            compute,
            exchange_seconds,
            exchanged.message_wait,
            io_wait,
            exchanged.messages as f64,
        ];
        let mut all = vec![0.0f64; mine.len() * size];
        cluster.world.all_gather_into(&mine[..], &mut all[..]);
        let rank_timings = all
            .chunks(mine.len())
            .enumerate()
            .map(|(rank, t)| RankTimes {
                rank,
                compute_seconds: t[0],
                exchange_seconds: t[1],
                message_wait_seconds: t[2],
                io_wait_seconds: t[3],
                // Counted exactly: far below 2^53.
                messages: t[4] as u64,
            })
            .collect();
        let part_bytes = (1u64 << m) * std::mem::size_of::<Amp<T>>() as u64;
        let dist = DistReport {
            global_qubits: g,
            exchanges: plan.exchanges,
            swaps: plan.swaps,
            exchange_bytes_per_rank: plan.bytes_per_rank(part_bytes),
            naive_exchanges: plan.naive_exchanges,
            naive_exchange_bytes_per_rank: plan.naive_bytes_per_rank(part_bytes),
            rank_timings,
        };
        // The whole state's figures; the placement and passes are this rank's (every rank's
        // part is laid out alike).
        let mut report = local.report().clone();
        report.qubits = n;
        report.state_bytes = part_bytes * size as u64;
        report.gates = ops.len();
        report.simulate_seconds = simulate_seconds;
        Ok(DistSimulation {
            cluster,
            local,
            plan,
            report,
            dist,
        })
    }

    /// What the run did (the whole state's figures; placement and passes of one rank).
    pub fn report(&self) -> &RunReport {
        &self.report
    }

    /// What distributing it cost.
    pub fn dist_report(&self) -> &DistReport {
        &self.dist
    }

    fn m(&self) -> usize {
        self.plan.n - self.plan.g
    }

    /// Physical index of logical basis state `logical`.
    fn physical(&self, logical: u64) -> u64 {
        (0..self.plan.n)
            .map(|q| ((logical >> q) & 1) << self.plan.final_position[q])
            .sum()
    }

    /// The squared norm of the whole state, on every rank.
    pub fn norm(&mut self) -> Result<f64, QsimError> {
        let mine = self.local.norm()?;
        let mut sum = 0.0f64;
        self.cluster
            .world
            .all_reduce_into(&mine, &mut sum, SystemOperation::sum());
        Ok(sum)
    }

    /// The amplitudes of logical basis states `indices`, on every rank (each from the rank
    /// that holds it).
    pub fn amplitudes(&mut self, indices: &[u64]) -> Result<Vec<[f64; 2]>, QsimError> {
        let n = self.plan.n;
        if let Some(&bad) = indices.iter().find(|&&i| i >> n != 0) {
            return Err(QsimError::Config(format!(
                "amplitude index {bad} is out of range: {n} qubits have indices 0 to {}",
                (1u64 << n) - 1
            )));
        }
        let m = self.m();
        let rank = self.cluster.rank() as u64;
        let mut mine = vec![0.0f64; 2 * indices.len()];
        for (k, &i) in indices.iter().enumerate() {
            let p = self.physical(i);
            if p >> m == rank {
                let a = self.local.amplitudes(&[p & ((1u64 << m) - 1)])?[0];
                mine[2 * k..2 * k + 2].copy_from_slice(&a);
            }
        }
        // Exactly one rank holds each value; the others add zeros, which is exact.
        let mut all = vec![0.0f64; mine.len()];
        self.cluster
            .world
            .all_reduce_into(&mine[..], &mut all[..], SystemOperation::sum());
        Ok(all.chunks(2).map(|c| [c[0], c[1]]).collect())
    }

    /// Sample `shots` measurements of `qubits` as [`Simulation::sample`] does, on every rank:
    /// the same seeded targets on every rank, each rank resolving those that fall in its part of
    /// the running sum. The parts are walked in physical order, so the counts follow the same
    /// distribution as a one-rank run's but are not the same draw.
    pub fn sample(
        &mut self,
        shots: usize,
        qubits: &[usize],
        seed: u64,
    ) -> Result<BTreeMap<String, u64>, QsimError> {
        let (rank, size) = (self.cluster.rank(), self.cluster.size());
        let mine = self.local.norm()?;
        let mut norms = vec![0.0f64; size];
        self.cluster.world.all_gather_into(&mine, &mut norms[..]);
        let total: f64 = norms.iter().sum();
        let start: f64 = norms[..rank].iter().sum();
        let last_holder = norms.iter().rposition(|&x| x > 0.0).unwrap_or(0);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut targets: Vec<f64> = Vec::new();
        targets.try_reserve_exact(shots).map_err(|_| {
            QsimError::Config(format!(
                "--shots {shots}: sampling needs {} bytes of memory per rank, which cannot be had: \
                 ask for fewer shots",
                shots as u128 * crate::SAMPLE_BYTES_PER_SHOT as u128
            ))
        })?;
        // Every rank draws all targets, so that the draw does not depend on the ranks; each
        // keeps those in its share (rounding past the total goes to the last rank holding any).
        for _ in 0..shots {
            let t = rng.random::<f64>() * total;
            let ours = t >= start && (t < start + mine || (rank == last_holder && mine > 0.0));
            if ours && rank <= last_holder {
                targets.push(t - start);
            }
        }
        targets.sort_by(f64::total_cmp);
        let mut hits: Vec<u64> = Vec::with_capacity(targets.len());
        self.local.resolve_targets(&targets, &mut hits)?;
        // Each hit as the measured bits (bit j is qubits[j]), counted here, then gathered.
        let m = self.m();
        let mut logical_of = vec![0usize; self.plan.n];
        for (q, &p) in self.plan.final_position.iter().enumerate() {
            logical_of[p] = q;
        }
        let mut local_counts: BTreeMap<u64, u64> = BTreeMap::new();
        for h in hits {
            let physical = ((rank as u64) << m) | h;
            let mut key = 0u64;
            for (j, &q) in qubits.iter().enumerate() {
                let p = self.plan.final_position[q];
                key |= ((physical >> p) & 1) << j;
            }
            *local_counts.entry(key).or_insert(0) += 1;
        }
        let pairs: Vec<u64> = local_counts.iter().flat_map(|(&k, &c)| [k, c]).collect();
        let mut lens = vec![0 as Count; size];
        self.cluster
            .world
            .all_gather_into(&(pairs.len() as Count), &mut lens[..]);
        let displs: Vec<Count> = lens
            .iter()
            .scan(0, |acc, &x| {
                let at = *acc;
                *acc += x;
                Some(at)
            })
            .collect();
        let mut all = vec![0u64; lens.iter().map(|&l| l as usize).sum()];
        {
            let mut partition = PartitionMut::new(&mut all[..], lens, &displs[..]);
            self.cluster
                .world
                .all_gather_varcount_into(&pairs[..], &mut partition);
        }
        let mut counts = BTreeMap::new();
        for pair in all.chunks(2) {
            let key: String = (0..qubits.len())
                .rev()
                .map(|j| if (pair[0] >> j) & 1 == 1 { '1' } else { '0' })
                .collect();
            *counts.entry(key).or_insert(0) += pair[1];
        }
        Ok(counts)
    }
}

/// Where an exchange's time went on this rank.
#[derive(Debug, Default, Clone, Copy)]
struct ExchangeTimes {
    /// Blocked waiting for messages (the part of the transfer that nothing overlapped).
    message_wait: f64,
    /// Messages sent (and as many received).
    messages: u64,
}

/// One chunk of the array held by an exchange's pipeline.
struct Held {
    chunk: usize,
    data: AlignedBuf,
}

/// Swap the (global position, local position) `pairs` in one exchange with the partner ranks.
///
/// For each partner the amplitudes to swap are cut into messages of at most `max_message`
/// bytes (within one chunk of the array) and pipelined: while message `i` is in flight
/// (non-blocking send and receive), message `i - 1`'s reply is scattered into its chunk, a chunk
/// whose messages are all back is written to the array, and message `i + 1` is gathered, its
/// chunk read first if it is not held yet. Out of core the reads and writes are the rank's NVMe
/// I/O, so they too overlap the network. At most three chunks and four messages are held,
/// whatever the state's size.
fn exchange<T: Real>(
    local: &mut Simulation<T>,
    world: &SimpleCommunicator,
    m: usize,
    pairs: &[(usize, usize)],
    max_message: u64,
) -> Result<ExchangeTimes, QsimError> {
    let rank = world.rank() as usize;
    let a = std::mem::size_of::<Amp<T>>();
    if max_message < a as u64 {
        return Err(QsimError::Config(format!(
            "--exchange-message {max_message}: a message must hold at least one amplitude of \
             {a} bytes; give {a} or more (default {})",
            crate::sim::DEFAULT_EXCHANGE_MESSAGE
        )));
    }
    let k = pairs.len();
    let per = local.amplitudes_per_chunk();
    let low = per.trailing_zeros() as usize;
    // (local position, rank bit) in ascending local position: the order bits are inserted in.
    let mut bits: Vec<(usize, usize)> = pairs.iter().map(|&(pg, pl)| (pl, pg - m)).collect();
    bits.sort_unstable();
    let below = bits.iter().filter(|&&(l, _)| l < low).count();
    // Amplitudes of one chunk in a partner's set, cut into messages of a power of two.
    let in_chunk = 1usize << (low - below);
    let cap = 1usize << (max_message / a as u64).min(1 << 40).ilog2();
    let message = in_chunk.min(cap);
    let set = 1usize << (m - k);
    let messages = set / message;
    let own: usize = bits
        .iter()
        .enumerate()
        .map(|(j, &(_, b))| ((rank >> b) & 1) << j)
        .sum();
    let chunk_bytes = local.array_mut().chunk_bytes();
    let mut free: Vec<AlignedBuf> = (0..3).map(|_| AlignedBuf::new(chunk_bytes)).collect();
    let mut held: Vec<Held> = Vec::with_capacity(3);
    let mut send = [vec![0u8; message * a], vec![0u8; message * a]];
    let mut recv = [vec![0u8; message * a], vec![0u8; message * a]];
    let mut times = ExchangeTimes::default();
    // Partner patterns in the same order on every rank: at step d every rank talks to rank xor
    // d's bits, which talks back to it at the same step. The pipeline drains between partners,
    // since a later partner's messages may fall in a chunk an earlier one still holds.
    for d in 1..1usize << k {
        let v = own ^ d;
        let partner = rank
            ^ bits
                .iter()
                .enumerate()
                .map(|(j, &(_, b))| ((d >> j) & 1) << b)
                .sum::<usize>();
        let process = world.process_at_rank(partner as i32);
        // The t-th local index whose bits at the pair positions read v.
        let deposit = |t: usize| -> usize {
            bits.iter().enumerate().fold(t, |x, (j, &(l, _))| {
                ((x >> l) << (l + 1)) | (((v >> j) & 1) << l) | (x & ((1 << l) - 1))
            })
        };
        let chunk_of = |i: usize| deposit(i * message) >> low;
        // Message i's amplitudes gathered from its chunk (read from the array unless held).
        let gather = |local: &mut Simulation<T>,
                      held: &mut Vec<Held>,
                      free: &mut Vec<AlignedBuf>,
                      out: &mut [u8],
                      i: usize|
         -> Result<(), QsimError> {
            let c = chunk_of(i);
            if !held.iter().any(|h| h.chunk == c) {
                let mut data = free.pop().expect("the pipeline holds at most three chunks");
                local.array_mut().read_chunk(c, &mut data)?;
                held.push(Held { chunk: c, data });
            }
            let h = held.iter().find(|h| h.chunk == c).expect("read above");
            let amps = bytemuck::cast_slice::<u8, Amp<T>>(&h.data[..per * a]);
            let out = bytemuck::cast_slice_mut::<u8, Amp<T>>(out);
            let (base, offset) = (i * message, c * per);
            for (j, s) in out.iter_mut().enumerate() {
                *s = amps[deposit(base + j) - offset];
            }
            Ok(())
        };
        // Message i's reply scattered into its chunk; the chunk written back when it was the
        // chunk's last message.
        let scatter = |local: &mut Simulation<T>,
                       held: &mut Vec<Held>,
                       free: &mut Vec<AlignedBuf>,
                       got: &[u8],
                       i: usize|
         -> Result<(), QsimError> {
            let c = chunk_of(i);
            let at = held
                .iter()
                .position(|h| h.chunk == c)
                .expect("a message's chunk is held until its last reply");
            {
                let amps = bytemuck::cast_slice_mut::<u8, Amp<T>>(&mut held[at].data[..per * a]);
                let got = bytemuck::cast_slice::<u8, Amp<T>>(got);
                let (base, offset) = (i * message, c * per);
                for (j, r) in got.iter().enumerate() {
                    amps[deposit(base + j) - offset] = *r;
                }
            }
            if i + 1 == messages || chunk_of(i + 1) != c {
                let done = held.swap_remove(at);
                local.array_mut().write_chunk(c, &done.data)?;
                free.push(done.data);
            }
            Ok(())
        };
        gather(local, &mut held, &mut free, &mut send[0], 0)?;
        for i in 0..messages {
            let [send0, send1] = &mut send;
            let (sending, next) = if i % 2 == 0 {
                (send0, send1)
            } else {
                (send1, send0)
            };
            let [recv0, recv1] = &mut recv;
            let (receiving, last) = if i % 2 == 0 {
                (recv0, recv1)
            } else {
                (recv1, recv0)
            };
            let overlapped = mpi::request::scope(|scope| -> Result<(), QsimError> {
                let incoming = process.immediate_receive_into(scope, &mut receiving[..]);
                let outgoing = process.immediate_send(scope, &sending[..]);
                // Work while message i is in flight; an error waits for the requests first,
                // since their buffers must outlive them.
                let work = (|| {
                    if i > 0 {
                        scatter(local, &mut held, &mut free, &last[..], i - 1)?;
                    }
                    if i + 1 < messages {
                        gather(local, &mut held, &mut free, &mut next[..], i + 1)?;
                    }
                    Ok(())
                })();
                let t = Instant::now();
                incoming.wait();
                outgoing.wait();
                times.message_wait += t.elapsed().as_secs_f64();
                work
            });
            overlapped?;
            times.messages += 1;
        }
        let last = if (messages - 1) % 2 == 0 {
            &recv[0]
        } else {
            &recv[1]
        };
        scatter(local, &mut held, &mut free, &last[..], messages - 1)?;
        debug_assert!(held.is_empty(), "every chunk is written back per partner");
    }
    Ok(times)
}

/// A distributed simulation in either precision.
pub enum AnyDistSimulation<'c> {
    /// Double precision.
    F64(DistSimulation<'c, f64>),
    /// Single precision.
    F32(DistSimulation<'c, f32>),
}

macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnyDistSimulation::F64($s) => $e,
            AnyDistSimulation::F32($s) => $e,
        }
    };
}

impl<'c> AnyDistSimulation<'c> {
    /// Run `circuit` at `precision` over the cluster.
    pub fn run(
        cluster: &'c Cluster,
        circuit: &Circuit,
        options: &Options,
        precision: Precision,
    ) -> Result<AnyDistSimulation<'c>, QsimError> {
        Ok(match precision {
            Precision::F64 => {
                AnyDistSimulation::F64(DistSimulation::run(cluster, circuit, options)?)
            }
            Precision::F32 => {
                AnyDistSimulation::F32(DistSimulation::run(cluster, circuit, options)?)
            }
        })
    }
    /// See [`DistSimulation::report`].
    pub fn report(&self) -> &RunReport {
        each!(self, s => s.report())
    }
    /// See [`DistSimulation::dist_report`].
    pub fn dist_report(&self) -> &DistReport {
        each!(self, s => s.dist_report())
    }
    /// See [`DistSimulation::norm`].
    pub fn norm(&mut self) -> Result<f64, QsimError> {
        each!(self, s => s.norm())
    }
    /// See [`DistSimulation::amplitudes`].
    pub fn amplitudes(&mut self, indices: &[u64]) -> Result<Vec<[f64; 2]>, QsimError> {
        each!(self, s => s.amplitudes(indices))
    }
    /// See [`DistSimulation::sample`].
    pub fn sample(
        &mut self,
        shots: usize,
        qubits: &[usize],
        seed: u64,
    ) -> Result<BTreeMap<String, u64>, QsimError> {
        each!(self, s => s.sample(shots, qubits, seed))
    }
}
