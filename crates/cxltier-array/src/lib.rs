//! Tiered arrays: a large byte array split in equal chunks that live in memory (each chunk its own
//! mapping, bound with `mbind` to a DRAM or CXL node chosen by weights, and verified with
//! `move_pages`) or, beyond the memory limit, on one or more spill files striped like RAID0 and
//! accessed with `O_DIRECT` through io_uring.
//!
//! [`TieredArray::pass`] runs a pass over groups of chunks ("blocks") as a pipeline with three
//! buffers: while the caller computes on block k, an I/O thread reads block k+1 and writes block
//! k-1 back, as one io_uring batch. Each pass reports how long the caller waited for I/O and how
//! long it computed, so whether compute hides behind I/O is measured, not assumed.
//!
//! The array starts zeroed: fresh mappings are zero pages and spill files are preallocated
//! (`fallocate`, which also refuses a spill that does not fit before anything starts).

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod array;
mod config;
mod pass;

pub use array::{ChunkHome, ChunkPlacement, TieredArray};
pub use config::ArrayConfig;
pub use pass::PassReport;

use std::path::PathBuf;

/// What can go wrong with a tiered array; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ArrayError {
    /// A configuration that cannot work (bad sizes, weights, paths).
    #[error("{0}")]
    Config(String),
    /// The spill space given is smaller than what must be spilled.
    #[error("the array needs {needed} bytes on {path} but only {available} are available: {hint}")]
    NoSpace {
        /// The spill file.
        path: PathBuf,
        /// Bytes this file must hold.
        needed: u64,
        /// Bytes available (the given cap, or what the file system granted).
        available: u64,
        /// What to do.
        hint: String,
    },
    /// A system call on memory failed (mapping, binding, page query).
    #[error(transparent)]
    Sys(#[from] cxltier_sys::SysError),
    /// The file system does not support direct I/O, or opening a spill file failed.
    #[error("cannot open spill file {path}: {source}{hint}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
        /// What to do, if known.
        hint: String,
    },
    /// A read or write of a spilled chunk failed; the pass stopped at that point.
    #[error("{op} of chunk {chunk} ({path}, offset {offset}) failed: {source}; the pass stopped there and the array's contents are no longer consistent")]
    Io {
        /// `read` or `write`.
        op: &'static str,
        /// The chunk.
        chunk: usize,
        /// The file.
        path: PathBuf,
        /// Byte offset in the file.
        offset: u64,
        /// The error.
        source: std::io::Error,
    },
    /// A chunk's pages are not on the node it was bound to.
    #[error("chunk {chunk} was bound to node {expected} but {misplaced} of its {pages} pages are elsewhere (first on {found}); is the node's memory full, or does a cpuset exclude it?")]
    Placement {
        /// The chunk.
        chunk: usize,
        /// The node it was bound to.
        expected: u32,
        /// Pages elsewhere.
        misplaced: usize,
        /// Pages in the chunk.
        pages: usize,
        /// Where the first misplaced page is.
        found: String,
    },
    /// The caller's computation failed; the pass stopped.
    #[error("the computation on block {block} of pass {pass} failed: {message}")]
    Compute {
        /// The pass (0 for a single pass).
        pass: usize,
        /// The block, within its pass.
        block: usize,
        /// The caller's message.
        message: String,
    },
}

impl cxltier_error::Classify for ArrayError {
    fn class(&self) -> cxltier_error::Class {
        use cxltier_error::Class;
        match self {
            ArrayError::Config(_) | ArrayError::NoSpace { .. } => Class::BadInput,
            ArrayError::Sys(s) => match s.kind {
                cxltier_sys::ErrorKind::PermissionDenied => Class::Permission,
                cxltier_sys::ErrorKind::Unsupported => Class::Unsupported,
                cxltier_sys::ErrorKind::InvalidArgument => Class::BadInput,
                _ => Class::Runtime,
            },
            _ => Class::Runtime,
        }
    }
}
