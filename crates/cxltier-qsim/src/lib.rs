//! A state-vector quantum circuit simulator over tiered arrays.
//!
//! [`qasm::parse`] reads OpenQASM 2.0 with the qelib1 gates ([`qasm::parse_reader`] as it is
//! read, bounded by [`ParseOptions`]); [`Simulation::run`] lays the state
//! (2^n amplitudes, 16 bytes each in f64, 8 in f32) out as a [`cxltier_array::TieredArray`] and
//! applies the circuit:
//!
//! - **in memory** when the state fits under the memory limit: chunks placed over DRAM and CXL
//!   nodes by weight, gates fused ([`fusion::fuse`]) and applied in cache-blocked sweeps
//!   ([`sweep::run`]) by the parallel block kernels ([`kernel::apply`]);
//! - **out of core** otherwise: the circuit is split into passes ([`fusion::plan_passes`]), each
//!   of which gathers the chunk's qubits plus a few others into a buffer, so that every gate of the
//!   pass is local; qubits are relabelled first to make the passes few
//!   ([`fusion::choose_layout`]), and each pass streams the state through the array's
//!   triple-buffered pipeline (read k+1, compute k, write k-1).
//!
//! Circuits with mid-circuit measurements, resets and conditions run shot by shot
//! ([`dynamic::run_shots`]: branches per outcome, or trajectories).
//!
//! Basis states are numbered as in Qiskit: qubit 0 is the least significant bit.

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod bench;
pub mod dist;
pub mod dynamic;
pub mod fusion;
pub mod gates;
pub mod kernel;
pub mod memory;
pub mod progress;
pub mod qasm;
mod sim;
pub mod sweep;

pub use dynamic::{DynamicReport, Method};
pub use kernel::Real;
pub use progress::{Progress, ProgressSnapshot};
pub use qasm::{
    parse, parse_reader, Circuit, ClassicalRegister, Condition, Instruction, Operation,
    ParseOptions,
};
pub use sim::{
    check_memory_limit, AnySimulation, Counts, Options, PassInfo, Precision, RunReport, Simulation,
    MIN_MEMORY_LIMIT, SAMPLE_BYTES_PER_SHOT,
};

/// What can go wrong in the simulator; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum QsimError {
    /// Malformed or unsupported OpenQASM, with the line.
    #[error("line {line}: {message}")]
    Parse {
        /// 1-based line of the program.
        line: usize,
        /// What is wrong and what to do.
        message: String,
    },
    /// The program could not be read (an I/O error), at this line.
    #[error("line {line}: cannot read the program: {source}")]
    Read {
        /// 1-based line of the program being read.
        line: usize,
        /// What the reader reported.
        source: std::io::Error,
    },
    /// Options or a circuit that cannot run as asked.
    #[error("{0}")]
    Config(String),
    /// The tiered array failed (spill space, placement, I/O).
    #[error(transparent)]
    Array(#[from] cxltier_array::ArrayError),
}

impl cxltier_error::Classify for QsimError {
    fn class(&self) -> cxltier_error::Class {
        match self {
            QsimError::Parse { .. } | QsimError::Config(_) => cxltier_error::Class::BadInput,
            QsimError::Read { .. } => cxltier_error::Class::Runtime,
            QsimError::Array(e) => cxltier_error::Classify::class(e),
        }
    }
}
