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
//! an exchange holds one chunk and two such buffers whatever the state's size. The gates of the
//! next batch that act inside one chunk and can go first are applied by the exchange itself, to
//! each chunk as it writes it back for the last time (and to the chunks it does not touch while
//! its messages are in flight), so that they overlap the exchange instead of following it.

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

use crate::dist::exchange;
use crate::dist::plan::{self, Step};
use crate::dist::{DistReport, RankTimes};
use crate::dynamic::{copies_allowed, ShotPlan, ShotState};
use crate::fusion::Op;
use crate::kernel::{Amp, Real};
use crate::progress::Progress;
use crate::qasm::Circuit;
use crate::sim::{
    ops_of, ChunkGates, Counts, Options, Precision, RunReport, SavedState, Simulation,
};
use crate::QsimError;
use crate::Result;

/// The ranks of this run (MPI's world), initialised once.
pub struct Cluster {
    _universe: Universe,
    world: SimpleCommunicator,
}

impl Cluster {
    /// Initialise MPI. Every rank refuses a number of ranks that is not a power of two.
    pub fn init() -> Result<Cluster> {
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

/// What the network between ranks gives, measured by [`bench_network`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct NetworkBench {
    /// Ranks that took part (in pairs: rank xor 1).
    pub ranks: usize,
    /// Bytes of each message in the bandwidth test.
    pub message_bytes: u64,
    /// Bytes per second each rank sent while it received as many, the slowest rank's.
    pub bytes_per_second: f64,
    /// Seconds for an 8-byte message one way (half a round trip), the slowest rank's.
    pub latency_seconds: f64,
}

/// Measure the network as exchanges use it: every rank swaps messages of `message_bytes` with
/// rank xor 1 (non-blocking send and receive, as an exchange's pipeline does) for about
/// `seconds`, then times 8-byte round trips. Collective; needs an even number of ranks.
pub fn bench_network(cluster: &Cluster, message_bytes: u64, seconds: f64) -> Result<NetworkBench> {
    let (rank, size) = (cluster.rank(), cluster.size());
    if size < 2 {
        return Err(QsimError::Config(
            "--bench-network measures between ranks: run it under mpirun -np 2 (or more)".into(),
        ));
    }
    let partner = cluster.world.process_at_rank((rank ^ 1) as i32);
    let len = usize::try_from(message_bytes)
        .unwrap_or(usize::MAX)
        .clamp(8, 1 << 30);
    let send = vec![1u8; len];
    let mut recv = vec![0u8; len];
    let swap = |recv: &mut [u8]| {
        mpi::request::scope(|scope| {
            let incoming = partner.immediate_receive_into(scope, recv);
            let outgoing = partner.immediate_send(scope, &send[..]);
            incoming.wait();
            outgoing.wait();
        });
    };
    // Warm up, then agree on a round count from rank 0's timing, so that all stop together.
    for _ in 0..4 {
        swap(&mut recv);
    }
    let t = Instant::now();
    for _ in 0..8 {
        swap(&mut recv);
    }
    let per = t.elapsed().as_secs_f64() / 8.0;
    let mut rounds = ((seconds / per.max(1e-9)) as u64).clamp(8, 1 << 20);
    cluster.world.process_at_rank(0).broadcast_into(&mut rounds);
    cluster.world.barrier();
    let t = Instant::now();
    for _ in 0..rounds {
        swap(&mut recv);
    }
    let bandwidth = (rounds * len as u64) as f64 / t.elapsed().as_secs_f64();
    let mut small = [0u8; 8];
    let trips = 2000u32;
    cluster.world.barrier();
    let t = Instant::now();
    for _ in 0..trips {
        if rank & 1 == 0 {
            partner.send(&small[..]);
            partner.receive_into(&mut small[..]);
        } else {
            partner.receive_into(&mut small[..]);
            partner.send(&small[..]);
        }
    }
    let latency = t.elapsed().as_secs_f64() / (2.0 * f64::from(trips));
    let mut all = vec![0.0f64; 2 * size];
    cluster
        .world
        .all_gather_into(&[bandwidth, latency][..], &mut all[..]);
    Ok(NetworkBench {
        ranks: size,
        message_bytes: len as u64,
        bytes_per_second: all.chunks(2).map(|c| c[0]).fold(f64::INFINITY, f64::min),
        latency_seconds: all.chunks(2).map(|c| c[1]).fold(0.0, f64::max),
    })
}

/// One rank's part of a distributed run. Every method but the plain getters is collective:
/// all ranks call it with the same arguments, in the same order.
pub struct DistSimulation<'c, T: Real> {
    cluster: &'c Cluster,
    local: Simulation<T>,
    /// Qubits of the whole state.
    n: usize,
    /// Global qubits (`log2` of the ranks).
    g: usize,
    exchange_message: u64,
    /// Physical position of each logical qubit (the identity at the start).
    position: Vec<usize>,
    /// Shares of a part sent, planned and naive, summed over everything applied.
    parts_sent: f64,
    naive_parts_sent: f64,
    /// This rank's time in local batches and in exchanges, and the messages' part of it.
    compute_seconds: f64,
    exchange_seconds: f64,
    exchanged: ExchangeTimes,
    report: RunReport,
    dist: DistReport,
}

impl<'c, T: Real> DistSimulation<'c, T> {
    /// Run `circuit` (its unitary gates) from |0...0> over the cluster's ranks.
    pub fn run(
        cluster: &'c Cluster,
        circuit: &Circuit,
        options: &Options,
    ) -> Result<DistSimulation<'c, T>> {
        let ops = ops_of(circuit);
        let widest = ops.iter().map(|o| o.qubits.len()).max().unwrap_or(1);
        let mut sim = Self::start(cluster, circuit.num_qubits, widest, options)?;
        let started = Instant::now();
        sim.apply(&ops)?;
        sim.settle(ops.len(), started.elapsed().as_secs_f64());
        Ok(sim)
    }

    /// Run `shots` shots of a dynamic circuit over the cluster's ranks from a seed, as
    /// [`crate::dynamic::run_shots`] does in one process: every rank runs the same shots in
    /// step on its part (the same seeded draws from the same gathered weights), and the copies
    /// that branches take are each rank's copy of its part. The counts, on every rank, are
    /// the one-process run's for the same seed (up to the rounding of a weight that lies on a
    /// draw's boundary).
    pub fn run_shots(
        cluster: &'c Cluster,
        circuit: &Circuit,
        options: &Options,
        shots: u64,
        seed: u64,
    ) -> Result<(DistSimulation<'c, T>, Counts)> {
        let plan = ShotPlan::new(circuit);
        let mut sim = Self::start(cluster, circuit.num_qubits, plan.widest(), options)?;
        let started = Instant::now();
        sim.apply(&plan.prefix)?;
        // Every rank must take the same way (branches or trajectories): the fewest copies any
        // rank can hold decides.
        let mine = copies_allowed(&sim.local);
        let mut all = vec![0u64; cluster.size()];
        cluster.world.all_gather_into(&mine, &mut all[..]);
        let allowed = all.into_iter().min().unwrap_or(0);
        let (dynamic, counts) = plan.run(&mut sim, options.dynamic_method, allowed, shots, seed)?;
        sim.settle(circuit.gates.len(), started.elapsed().as_secs_f64());
        // One report per pass would grow with every shot: the passes are counted, not listed.
        sim.report.pass_reports.clear();
        sim.report.dynamic = Some(dynamic);
        Ok((sim, counts))
    }

    /// Set up this rank's part of `n` qubits at |0...0>, every rank agreeing that all could.
    fn start(
        cluster: &'c Cluster,
        n: usize,
        widest: usize,
        options: &Options,
    ) -> Result<DistSimulation<'c, T>> {
        let (rank, size) = (cluster.rank(), cluster.size());
        let g = size.trailing_zeros() as usize;
        if g > n {
            return Err(QsimError::Config(format!(
                "{size} ranks for {n} qubits: each rank needs at least one amplitude; use at \
                 most 2^{n} ranks"
            )));
        }
        let m = n - g;
        if m == 0 {
            return Err(QsimError::Config(format!(
                "{size} ranks for {n} qubits leave each rank one amplitude and no local qubit: \
                 use at most 2^{} ranks",
                n - 1
            )));
        }
        if widest > m {
            return Err(QsimError::Config(format!(
                "a gate on {widest} qubits needs {widest} local qubits, but with 2^{g} ranks \
                 each rank holds only {m} of the {n}: use at most 2^{} ranks",
                n - widest
            )));
        }
        // Setting up can fail on one rank only (its memory, its disk): the ranks agree on it
        // before the first exchange, so that none waits for a partner that has given up.
        let started = Simulation::<T>::start_part(m, widest, options, rank == 0);
        let mut ready = vec![0u8; size];
        cluster
            .world
            .all_gather_into(&u8::from(started.is_ok()), &mut ready[..]);
        let local = match started {
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
        let report = local.report().clone();
        Ok(DistSimulation {
            cluster,
            local,
            n,
            g,
            exchange_message: options.exchange_message,
            position: (0..n).collect(),
            parts_sent: 0.0,
            naive_parts_sent: 0.0,
            compute_seconds: 0.0,
            exchange_seconds: 0.0,
            exchanged: ExchangeTimes::default(),
            report,
            dist: DistReport {
                global_qubits: g,
                exchanges: 0,
                swaps: 0,
                exchange_bytes_per_rank: 0,
                naive_exchanges: 0,
                naive_exchange_bytes_per_rank: 0,
                rank_timings: Vec::new(),
            },
        })
    }

    /// Apply `ops` (on logical qubits) from the layout as it is: planned over the ranks, local
    /// batches run on each part, exchanges between them.
    ///
    /// The batch after an exchange overlaps it when that saves a trip through the part
    /// ([`plan::overlap_batch`]): its gates inside one chunk that can go first are applied by
    /// the exchange to each chunk as it is written back for the last time, and to the chunks it
    /// does not touch while messages are in flight; the rest of the batch runs after it.
    fn apply(&mut self, ops: &[Op]) -> Result<()> {
        let plan = plan::plan_from(ops, self.n, self.g, &self.position)?;
        let mut steps = plan.steps.iter().peekable();
        while let Some(step) = steps.next() {
            match step {
                Step::Local(batch) => self.compute(batch)?,
                Step::Exchange(pairs) => {
                    let (hoisted, rest) = match steps.peek() {
                        Some(Step::Local(batch)) => {
                            steps.next();
                            plan::overlap_batch(
                                batch,
                                |q| self.local.in_chunk(q),
                                |ops| self.local.trips(ops),
                            )
                        }
                        _ => (Vec::new(), Vec::new()),
                    };
                    let hoisted = (!hoisted.is_empty()).then(|| self.local.chunk_gates(&hoisted));
                    self.exchange(pairs, hoisted.as_ref())?;
                    self.compute(&rest)?;
                }
            }
        }
        self.position = plan.final_position;
        self.dist.exchanges += plan.exchanges;
        self.dist.swaps += plan.swaps;
        self.dist.naive_exchanges += plan.naive_exchanges;
        self.parts_sent += plan.parts_sent;
        self.naive_parts_sent += plan.naive_parts_sent;
        Ok(())
    }

    /// Run a local batch on this rank's part, timed.
    fn compute(&mut self, batch: &[Op]) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let t = Instant::now();
        self.local.apply(batch)?;
        self.compute_seconds += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Swap the (global position, local position) `pairs` with the partner ranks, timed,
    /// applying `hoisted` to every chunk of the part on the way.
    fn exchange(&mut self, pairs: &[(usize, usize)], hoisted: Option<&ChunkGates>) -> Result<()> {
        let t = Instant::now();
        let m = self.m();
        let times = exchange(
            &mut self.local,
            &self.cluster.world,
            m,
            pairs,
            self.exchange_message,
            hoisted,
        )?;
        self.exchanged.message_wait += times.message_wait;
        self.exchanged.messages += times.messages;
        self.exchanged.overlap += times.overlap;
        self.exchanged.overlapped_gates += hoisted.map_or(0, |h| h.gates as u64);
        self.exchange_seconds += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Gather every rank's timings and fill the reports: the whole state's figures, and the
    /// placement and passes of this rank (every rank's part is laid out alike).
    fn settle(&mut self, gates: usize, simulate_seconds: f64) {
        // Folded from +0.0: an empty f64 sum is -0.0.
        let io_wait = self
            .local
            .report()
            .pass_reports
            .iter()
            .fold(0.0, |sum, p| sum + p.io.io_wait_seconds);
        let mine = [
            self.compute_seconds,
            self.exchange_seconds,
            self.exchanged.message_wait,
            io_wait,
            self.exchanged.messages as f64,
            self.exchanged.overlap,
            self.exchanged.overlapped_gates as f64,
        ];
        let size = self.cluster.size();
        let mut all = vec![0.0f64; mine.len() * size];
        self.cluster.world.all_gather_into(&mine[..], &mut all[..]);
        self.dist.rank_timings = all
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
                overlap_seconds: t[5],
                overlapped_gates: t[6] as u64,
            })
            .collect();
        let part_bytes = self.part_bytes();
        self.dist.exchange_bytes_per_rank = (self.parts_sent * part_bytes as f64).round() as u64;
        self.dist.naive_exchange_bytes_per_rank =
            (self.naive_parts_sent * part_bytes as f64).round() as u64;
        let mut report = self.local.report().clone();
        report.qubits = self.n;
        report.state_bytes = part_bytes * size as u64;
        report.gates = gates;
        report.simulate_seconds = simulate_seconds;
        self.report = report;
    }

    fn part_bytes(&self) -> u64 {
        (1u64 << self.m()) * std::mem::size_of::<Amp<T>>() as u64
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
        self.n - self.g
    }

    /// Physical index of logical basis state `logical`.
    fn physical(&self, logical: u64) -> u64 {
        (0..self.n)
            .map(|q| ((logical >> q) & 1) << self.position[q])
            .sum()
    }

    /// The values of every rank for `mine` (the same on every rank, in rank order).
    fn gather<V: Equivalence + Copy + Default>(&self, mine: V) -> Vec<V> {
        let mut all = vec![V::default(); self.cluster.size()];
        self.cluster.world.all_gather_into(&mine, &mut all[..]);
        all
    }

    /// The squared norm of the whole state, on every rank (summed in rank order, so that every
    /// rank has the same value).
    pub fn norm(&mut self) -> Result<f64> {
        let mine = self.local.norm()?;
        Ok(self.gather(mine).iter().sum())
    }

    /// The squared norms of the state's part with logical qubit `q` at 0 and at 1, the same on
    /// every rank (each rank's sums gathered and added in rank order: a reduction may round
    /// differently on different ranks, which would send them different ways).
    fn weights_of(&mut self, q: usize) -> Result<[f64; 2]> {
        let m = self.m();
        let p = self.position[q];
        let rank = self.cluster.rank();
        let mine = if p < m {
            self.local.weights_of(p)?
        } else {
            let mut w = [0.0; 2];
            w[(rank >> (p - m)) & 1] = self.local.norm()?;
            w
        };
        let mut all = vec![0.0f64; 2 * self.cluster.size()];
        self.cluster.world.all_gather_into(&mine[..], &mut all[..]);
        Ok(all
            .chunks(2)
            .fold([0.0, 0.0], |s, w| [s[0] + w[0], s[1] + w[1]]))
    }

    /// Move every logical qubit to its own position, as [`Simulation::bring_home`] does: one
    /// exchange for the qubits whose home is local but that sit at a global position (and as
    /// many the other way), then one local batch of swaps. The global qubits may stay in
    /// another order among themselves: that only renumbers the ranks, which sampling reads.
    fn bring_home(&mut self) -> Result<()> {
        let m = self.m();
        let mut logical_at = vec![0; self.n];
        for (q, &p) in self.position.iter().enumerate() {
            logical_at[p] = q;
        }
        let away: Vec<usize> = (m..self.n).filter(|&p| logical_at[p] < m).collect();
        let strangers: Vec<usize> = (0..m).filter(|&p| logical_at[p] >= m).collect();
        debug_assert_eq!(away.len(), strangers.len(), "as many each way");
        if !away.is_empty() {
            let pairs: Vec<(usize, usize)> = away.iter().copied().zip(strangers).collect();
            self.exchange(&pairs, None)?;
            for &(pg, pl) in &pairs {
                logical_at.swap(pg, pl);
            }
            self.dist.exchanges += 1;
            self.dist.swaps += pairs.len();
            self.parts_sent += 1.0 - 0.5f64.powi(pairs.len() as i32);
        }
        let swaps = crate::sim::swaps_to_identity(&logical_at[..m]);
        if !swaps.is_empty() {
            let ops: Vec<Op> = swaps
                .iter()
                .map(|&(a, b)| Op {
                    qubits: vec![a, b],
                    matrix: crate::gates::swap(),
                })
                .collect();
            self.compute(&ops)?;
            for (a, b) in swaps {
                logical_at.swap(a, b);
            }
        }
        for (p, &q) in logical_at.iter().enumerate() {
            self.position[q] = p;
        }
        Ok(())
    }

    /// The amplitudes of logical basis states `indices`, on every rank (each from the rank
    /// that holds it).
    pub fn amplitudes(&mut self, indices: &[u64]) -> Result<Vec<[f64; 2]>> {
        let n = self.n;
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
    /// the qubits are brought home ([`DistSimulation::bring_home`]), every rank draws the same
    /// seeded targets over the whole state's running sum in Qiskit's order (the parts in the
    /// order of the logical qubits at the global positions), and each resolves those that fall
    /// in its part. The same draw as a one-process run's from the same seed.
    pub fn sample(&mut self, shots: usize, qubits: &[usize], seed: u64) -> Result<Counts> {
        self.bring_home()?;
        let (rank, size) = (self.cluster.rank(), self.cluster.size());
        let m = self.m();
        let mine = self.local.norm()?;
        let norms = self.gather(mine);
        // The rank that holds each run of 2^m logical basis states: rank bit j is the logical
        // qubit at global position m + j.
        let logical_rank = |r: usize| -> usize {
            (0..self.g)
                .map(|j| {
                    ((r >> j) & 1)
                        << (self
                            .position
                            .iter()
                            .position(|&p| p == m + j)
                            .expect("a qubit at every position")
                            - m)
                })
                .sum()
        };
        let mut order: Vec<usize> = (0..size).collect();
        order.sort_by_key(|&r| logical_rank(r));
        let total: f64 = order.iter().map(|&r| norms[r]).sum();
        let start: f64 = order
            .iter()
            .take_while(|&&r| r != rank)
            .map(|&r| norms[r])
            .sum();
        let last_holder = order
            .iter()
            .rev()
            .find(|&&r| norms[r] > 0.0)
            .copied()
            .unwrap_or(order[size - 1]);
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
            if ours {
                targets.push(t - start);
            }
        }
        targets.sort_by(f64::total_cmp);
        let mut hits: Vec<u64> = Vec::with_capacity(targets.len());
        self.local.resolve_targets(&targets, &mut hits)?;
        // Each hit as the measured bits (bit j is qubits[j]), counted here, then gathered.
        let mut local_counts: BTreeMap<u64, u64> = BTreeMap::new();
        for h in hits {
            let physical = ((rank as u64) << m) | h;
            let mut key = 0u64;
            for (j, &q) in qubits.iter().enumerate() {
                let p = self.position[q];
                key |= ((physical >> p) & 1) << j;
            }
            *local_counts.entry(key).or_insert(0) += 1;
        }
        let pairs: Vec<u64> = local_counts.iter().flat_map(|(&k, &c)| [k, c]).collect();
        let lens = self.gather(pairs.len() as Count);
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

/// A copy of one rank's part and the layout it was in.
pub struct DistSaved {
    part: SavedState,
    position: Vec<usize>,
}

impl<T: Real> ShotState for DistSimulation<'_, T> {
    type Saved = DistSaved;
    fn apply(&mut self, ops: &[Op]) -> Result<()> {
        DistSimulation::apply(self, ops)
    }
    fn weights_of(&mut self, q: usize) -> Result<[f64; 2]> {
        DistSimulation::weights_of(self, q)
    }
    fn save(&mut self) -> Result<DistSaved> {
        Ok(DistSaved {
            part: self.local.save()?,
            position: self.position.clone(),
        })
    }
    fn restore(&mut self, saved: &mut DistSaved) -> Result<()> {
        self.local.restore(&mut saved.part)?;
        self.position.clone_from(&saved.position);
        Ok(())
    }
    fn sample(&mut self, shots: usize, qubits: &[usize], seed: u64) -> Result<Counts> {
        DistSimulation::sample(self, shots, qubits, seed)
    }
    fn progress(&self) -> Option<&Progress> {
        self.local.progress()
    }
}

/// Where an exchange's time went on this rank.
#[derive(Debug, Default, Clone, Copy)]
struct ExchangeTimes {
    /// Blocked waiting for messages (the part of the transfer that nothing overlapped).
    message_wait: f64,
    /// Messages sent (and as many received).
    messages: u64,
    /// Applying the next batch's hoisted gates to chunks inside the exchange.
    overlap: f64,
    /// Gates of the circuit applied that way.
    overlapped_gates: u64,
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
///
/// `hoisted` (gates inside one chunk, of the batch that follows) overlap the exchange too: a
/// chunk gets them when it is written back after its last partner's replies (before that a
/// later partner would still take some of its amplitudes), and the chunks no partner's set
/// falls in (when every pair's local position is above a chunk) get them a few at a time
/// while messages are in flight, spread evenly over the exchange's messages. Out of core the
/// gates then cost no pass of their own over the part.
fn exchange<T: Real>(
    local: &mut Simulation<T>,
    world: &SimpleCommunicator,
    m: usize,
    pairs: &[(usize, usize)],
    max_message: u64,
    hoisted: Option<&ChunkGates>,
) -> Result<ExchangeTimes> {
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
    // For each chunk of the part, the last partner step whose set falls in it (0: none): the
    // set of step d has, at each pair's local position above a chunk, the bit of own ^ d.
    let chunks = (1usize << m) / per;
    let touches = |c: usize, d: usize| {
        bits.iter()
            .enumerate()
            .all(|(j, &(l, _))| l < low || (c >> (l - low)) & 1 == ((own ^ d) >> j) & 1)
    };
    let last_partner: Vec<usize> = match hoisted {
        None => Vec::new(),
        Some(_) => (0..chunks)
            .map(|c| (1..1usize << k).rev().find(|&d| touches(c, d)).unwrap_or(0))
            .collect(),
    };
    let untouched: Vec<usize> = (0..last_partner.len())
        .filter(|&c| last_partner[c] == 0)
        .collect();
    let mut spare = (!untouched.is_empty()).then(|| AlignedBuf::new(chunk_bytes));
    let mut filled = 0;
    let all_messages = ((1usize << k) - 1) * messages;
    let overlap = std::cell::Cell::new(0.0f64);
    // The untouched chunks' gates, up to the first `upto` of them.
    let fill = |local: &mut Simulation<T>,
                spare: &mut Option<AlignedBuf>,
                filled: &mut usize,
                upto: usize|
     -> Result<()> {
        let (Some(gates), Some(spare)) = (hoisted, spare.as_mut()) else {
            return Ok(());
        };
        while *filled < upto.min(untouched.len()) {
            let t = Instant::now();
            local.apply_chunk_gates_at(gates, untouched[*filled], spare)?;
            overlap.set(overlap.get() + t.elapsed().as_secs_f64());
            *filled += 1;
        }
        Ok(())
    };
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
        let chunk_of = |i: usize| exchange::deposit(&bits, v, i * message) >> low;
        // Message i's amplitudes gathered from its chunk (read from the array unless held).
        let gather = |local: &mut Simulation<T>,
                      held: &mut Vec<Held>,
                      free: &mut Vec<AlignedBuf>,
                      out: &mut [u8],
                      i: usize|
         -> Result<()> {
            let c = chunk_of(i);
            if !held.iter().any(|h| h.chunk == c) {
                let mut data = free.pop().expect("the pipeline holds at most three chunks");
                local.array_mut().read_chunk(c, &mut data)?;
                held.push(Held { chunk: c, data });
            }
            let h = held.iter().find(|h| h.chunk == c).expect("read above");
            let amps = bytemuck::cast_slice::<u8, Amp<T>>(&h.data[..per * a]);
            let out = bytemuck::cast_slice_mut::<u8, Amp<T>>(out);
            exchange::gather(&bits, v, amps, c * per, i * message, out);
            Ok(())
        };
        // Message i's reply scattered into its chunk; the chunk written back when it was the
        // chunk's last message.
        let scatter = |local: &mut Simulation<T>,
                       held: &mut Vec<Held>,
                       free: &mut Vec<AlignedBuf>,
                       got: &[u8],
                       i: usize|
         -> Result<()> {
            let c = chunk_of(i);
            let at = held
                .iter()
                .position(|h| h.chunk == c)
                .expect("a message's chunk is held until its last reply");
            {
                let amps = bytemuck::cast_slice_mut::<u8, Amp<T>>(&mut held[at].data[..per * a]);
                let got = bytemuck::cast_slice::<u8, Amp<T>>(got);
                exchange::scatter(&bits, v, amps, c * per, i * message, got);
            }
            if i + 1 == messages || chunk_of(i + 1) != c {
                let mut done = held.swap_remove(at);
                if let Some(gates) = hoisted {
                    debug_assert!(
                        last_partner[c] >= d,
                        "a later partner's set is in chunk {c}"
                    );
                    if last_partner[c] == d {
                        let t = Instant::now();
                        local.apply_chunk_gates(gates, &mut done.data);
                        overlap.set(overlap.get() + t.elapsed().as_secs_f64());
                    }
                }
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
            // Untouched chunks' gates done by the end of this message, in proportion.
            let due = (times.messages as usize + 1) * untouched.len() / all_messages.max(1);
            let overlapped = mpi::request::scope(|scope| -> Result<()> {
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
                    fill(local, &mut spare, &mut filled, due)
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
    fill(local, &mut spare, &mut filled, untouched.len())?;
    times.overlap = overlap.get();
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
    ) -> Result<AnyDistSimulation<'c>> {
        Ok(match precision {
            Precision::F64 => {
                AnyDistSimulation::F64(DistSimulation::run(cluster, circuit, options)?)
            }
            Precision::F32 => {
                AnyDistSimulation::F32(DistSimulation::run(cluster, circuit, options)?)
            }
        })
    }
    /// Run `shots` shots of a dynamic circuit at `precision` over the cluster (see
    /// [`DistSimulation::run_shots`]).
    pub fn run_shots(
        cluster: &'c Cluster,
        circuit: &Circuit,
        options: &Options,
        precision: Precision,
        shots: u64,
        seed: u64,
    ) -> Result<(AnyDistSimulation<'c>, Counts)> {
        Ok(match precision {
            Precision::F64 => {
                let (s, c) = DistSimulation::run_shots(cluster, circuit, options, shots, seed)?;
                (AnyDistSimulation::F64(s), c)
            }
            Precision::F32 => {
                let (s, c) = DistSimulation::run_shots(cluster, circuit, options, shots, seed)?;
                (AnyDistSimulation::F32(s), c)
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
    pub fn norm(&mut self) -> Result<f64> {
        each!(self, s => s.norm())
    }
    /// See [`DistSimulation::amplitudes`].
    pub fn amplitudes(&mut self, indices: &[u64]) -> Result<Vec<[f64; 2]>> {
        each!(self, s => s.amplitudes(indices))
    }
    /// See [`DistSimulation::sample`].
    pub fn sample(&mut self, shots: usize, qubits: &[usize], seed: u64) -> Result<Counts> {
        each!(self, s => s.sample(shots, qubits, seed))
    }
}
