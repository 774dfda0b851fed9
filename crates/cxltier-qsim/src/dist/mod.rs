//! The state vector split over MPI ranks: [`plan`] decides which qubits are local when (always
//! compiled, pure), and `mpi` (feature `mpi`) runs the plan with one part of the state per rank.

pub mod plan;
