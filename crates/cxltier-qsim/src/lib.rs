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
//! [`run::Run`] takes a parsed circuit from its simulation to what is read out of it (amplitudes,
//! counts keyed as Qiskit keys them, the norm, the timings): the report a command prints.
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
pub mod run;
mod sim;
pub mod sweep;

pub use dynamic::{DynamicReport, Method};
pub use kernel::Real;
pub use progress::{Progress, ProgressSink, ProgressSnapshot, ProgressWatcher, StreamRate};
pub use qasm::{
    parse, parse_reader, Circuit, ClassicalRegister, Condition, Instruction, Operation,
    ParseOptions,
};
pub use sim::{
    check_memory_limit, check_threads, AnySimulation, Counts, Options, PassInfo, Precision,
    RunReport, Simulation, MAX_THREADS, MIN_MEMORY_LIMIT, SAMPLE_BYTES_PER_SHOT,
};

/// The simulator's results: a [`QsimError`] unless said otherwise.
pub type Result<T, E = QsimError> = std::result::Result<T, E>;

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
    /// A dynamic circuit asked for what only a single final state has (amplitudes, or counts
    /// without shots), with the line that makes it dynamic.
    #[error("line {line}: {message}")]
    NoSingleState {
        /// 1-based line of the program.
        line: usize,
        /// What cannot be had and what to do.
        message: String,
    },
    /// Options or a circuit that cannot run as asked.
    #[error("{0}")]
    Config(String),
    /// The tiered array failed (spill space, placement, I/O).
    #[error(transparent)]
    Array(#[from] cxltier_array::ArrayError),
}

impl QsimError {
    /// The program's line an error is at and what it says there, for a caller to place it in
    /// the file it read (`FILE:LINE: message`).
    pub fn at_line(&self) -> Option<(usize, &str)> {
        match self {
            QsimError::Parse { line, message } | QsimError::NoSingleState { line, message } => {
                Some((*line, message))
            }
            _ => None,
        }
    }
}

/// An error of reading or running the circuit of a file, told as the file's: an error at a
/// line placed in the file (`FILE:LINE: message`), and the file's own read error (a directory,
/// say) as the user's to fix. Made by [`QsimError::in_file`].
#[derive(Debug)]
pub struct CircuitFileError {
    path: std::path::PathBuf,
    error: QsimError,
}

impl std::fmt::Display for CircuitFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = self.path.display();
        if let QsimError::Read { line, source } = &self.error {
            return write!(f, "cannot read circuit {path} (at line {line}): {source}");
        }
        match self.error.at_line() {
            Some((line, message)) => write!(f, "{path}:{line}: {message}"),
            None => write!(f, "{}", self.error),
        }
    }
}

impl std::error::Error for CircuitFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl cxltier_error::Classify for CircuitFileError {
    fn class(&self) -> cxltier_error::Class {
        match &self.error {
            QsimError::Read { .. } => cxltier_error::Class::BadInput,
            other => cxltier_error::Classify::class(other),
        }
    }

    fn hint(&self) -> Option<String> {
        cxltier_error::Classify::hint(&self.error)
    }
}

impl QsimError {
    /// This error as the error of the circuit in `path` ([`CircuitFileError`]).
    pub fn in_file(self, path: &std::path::Path) -> CircuitFileError {
        CircuitFileError {
            path: path.to_path_buf(),
            error: self,
        }
    }
}

impl cxltier_error::Classify for QsimError {
    fn class(&self) -> cxltier_error::Class {
        match self {
            QsimError::Parse { .. } | QsimError::NoSingleState { .. } | QsimError::Config(_) => {
                cxltier_error::Class::BadInput
            }
            QsimError::Read { .. } => cxltier_error::Class::Runtime,
            QsimError::Array(e) => cxltier_error::Classify::class(e),
        }
    }
}
