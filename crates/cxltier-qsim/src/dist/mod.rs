//! The state vector split over MPI ranks: [`plan`] decides which qubits are local when (always
//! compiled, pure), [`model`] predicts a run's time on a cluster from the plan, and `mpi`
//! (feature `mpi`) runs the plan with one part of the state per rank.

pub(crate) mod exchange;
pub mod model;
pub mod plan;

use serde::Serialize;

/// One rank's time, as gathered on rank 0.
#[derive(Debug, Clone, Serialize)]
pub struct RankTimes {
    /// The rank.
    pub rank: usize,
    /// Seconds running local gate batches (including out-of-core passes).
    pub compute_seconds: f64,
    /// Seconds in exchanges (chunk reads and writes, copying, and the messages).
    pub exchange_seconds: f64,
    /// Of `exchange_seconds`, the time blocked on messages: the transfer that the pipelined
    /// copying and chunk I/O did not hide.
    pub message_wait_seconds: f64,
    /// Messages this rank sent (and received) in exchanges.
    pub messages: u64,
    /// Of `compute_seconds`, the out-of-core pipeline's wait for I/O.
    pub io_wait_seconds: f64,
    /// Of `exchange_seconds`, applying the next batch's gates inside one chunk to the chunks
    /// as the exchanges write them back (or while their messages are in flight): work that
    /// overlaps the exchanges instead of following them.
    pub overlap_seconds: f64,
    /// Gates of the circuit applied that way.
    pub overlapped_gates: u64,
}

/// What the distribution of a run cost, as planned and as measured.
#[derive(Debug, Clone, Serialize)]
pub struct DistReport {
    /// Qubits held at global positions (`log2` of the ranks).
    pub global_qubits: usize,
    /// Exchanges run.
    pub exchanges: usize,
    /// Qubit swaps over those exchanges.
    pub swaps: usize,
    /// Bytes each rank sent (and received) in them.
    pub exchange_bytes_per_rank: u64,
    /// Exchanges with one per gate on a global qubit (no planning).
    pub naive_exchanges: usize,
    /// Bytes each rank would have sent with those.
    pub naive_exchange_bytes_per_rank: u64,
    /// Each rank's time.
    pub rank_timings: Vec<RankTimes>,
}

#[cfg(feature = "mpi")]
pub mod mpi;

/// The number of ranks `mpirun` (Open MPI) started this process among, from
/// `OMPI_COMM_WORLD_SIZE`; `None` when it was not started by `mpirun`, so that a plain run never
/// initialises MPI.
pub fn launched_ranks() -> Option<usize> {
    std::env::var("OMPI_COMM_WORLD_SIZE").ok()?.parse().ok()
}
