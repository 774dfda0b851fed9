//! Acting on memory placement, the library behind `cxltier apply`, `run`, `show` and `touch`.
//!
//! - [`weights`]: the kernel's global weighted-interleave table: read it, validate a change and show
//!   it as old → new, write it with rollback on failure, restore it afterwards.
//! - [`policy`]: memory-policy requests (`--weights 3:1`, `--interleave`, `--bind 0-1`,
//!   `--preferred 1`) resolved against the topology into a concrete policy and per-node weights.
//! - [`launch`]: run a program under a policy, either by `exec` (the program replaces us) or as a
//!   supervised child (signals forwarded, so the caller can clean up after it exits).
//! - [`placement`]: where memory is: [`placement::touch`] allocates and touches memory and asks the
//!   kernel which node each page landed on; [`placement::show`] reads a process's
//!   `/proc/PID/numa_maps` into bytes per node, per mapping and per kind of mapping
//!   ([`placement::MappingKind`]: heap, stack, anon, file, huge, other).
//! - [`size`]: sizes such as `64M`, `1G`, `64MiB`, `4096`.
//!
//! Nothing here prints or exits. Every failure is a [`ControlError`] whose message says what went
//! wrong and how to fix it, and whose [`ControlError::class`] tells a front end which exit code fits.

// A library reports through its return values and sinks; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod launch;
pub mod placement;
pub mod policy;
pub mod size;
pub mod weights;

use std::io;
use std::path::PathBuf;

pub use cxltier_sys::SysError;
pub use cxltier_topo::TopoError;

pub use cxltier_error::{Class, Classify};

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The weighted-interleave sysfs directory is missing.
    #[error(
        "this kernel has no weighted interleave (Linux 6.9+ with CONFIG_NUMA; {} missing)",
        dir.display()
    )]
    NoWeightedInterleave { dir: PathBuf },

    /// The kernel has no `auto` switch for the weights.
    #[error(
        "this kernel has no automatic interleave weights (Linux 6.16+; no auto file in {})",
        dir.display()
    )]
    NoAutoSwitch { dir: PathBuf },

    /// A requested node has no entry in the weighted-interleave table.
    #[error(
        "node {node} has no weight in the kernel's weighted-interleave table (nodes with weights: {})",
        list(known)
    )]
    UnknownNode { node: u32, known: Vec<u32> },

    /// A weight of zero.
    #[error(
        "weight 0 for node {node}: weights run from 1 to 255 (to keep memory off a node, leave the \
         node out instead)"
    )]
    ZeroWeight { node: u32 },

    /// A weight above 255.
    #[error(
        "weight {weight} for node {node} is too large: the kernel takes weights from 1 to 255"
    )]
    WeightTooLarge { node: u32, weight: u64 },

    /// The same node twice in one request.
    #[error("node {node} is given more than once in {spec:?}")]
    DuplicateNode { node: u32, spec: String },

    /// A weight specification that does not parse.
    #[error("invalid weights {spec:?}: {reason}")]
    BadWeights { spec: String, reason: String },

    /// Writing the table needs privilege we lack.
    #[error(
        "cannot write {}: permission denied: changing the kernel's weighted-interleave table needs \
         root (try sudo); nothing was changed",
        path.display()
    )]
    NeedsRoot { path: PathBuf },

    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// A write to the table failed after validation; `rollback` says what was undone.
    #[error("cannot write {}: {source}; {rollback}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
        rollback: String,
    },

    /// A kernel file held something the kernel would not write there.
    #[error("{}: unexpected content {content:?} (expected {expected})", path.display())]
    Garbled {
        path: PathBuf,
        content: String,
        expected: &'static str,
    },

    /// A node that does not exist.
    #[error(
        "node {node} does not exist (this machine's memory nodes: {})",
        list(memory_nodes)
    )]
    NoSuchNode { node: u32, memory_nodes: Vec<u32> },

    /// A node without memory (a CPU-only or empty node).
    #[error(
        "node {node} has no memory (this machine's memory nodes: {})",
        list(memory_nodes)
    )]
    NoMemory { node: u32, memory_nodes: Vec<u32> },

    /// An option that needs nodes got none.
    #[error("{what} needs at least one node")]
    NoNodes { what: &'static str },

    /// The number of weights fits neither the nodes nor their tiers.
    #[error(
        "{weights} weight(s) for nodes {}: give one weight per node ({} here), or one per tier, \
         fastest first ({} here: {})",
        list(nodes),
        nodes.len(),
        tiers.len(),
        tiers.iter().map(|t| list(t)).collect::<Vec<_>>().join(" | ")
    )]
    WeightCount {
        weights: usize,
        nodes: Vec<u32>,
        tiers: Vec<Vec<u32>>,
    },

    /// A node list that does not parse.
    #[error(transparent)]
    NodeList(#[from] cxltier_topo::nodelist::ParseError),

    /// The topology could not be read.
    #[error("cannot read the machine's topology: {0}")]
    Topology(#[from] TopoError),

    /// A system call failed.
    #[error(transparent)]
    Sys(#[from] SysError),

    /// A size that does not parse.
    #[error(
        "invalid size {text:?}: {reason} (expected bytes, or a number with a unit: 4096, 64K, 64M, \
         1G, 64MiB, 1.5G; K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000)"
    )]
    BadSize { text: String, reason: String },

    /// The process does not exist.
    #[error("no process with pid {pid} (it may have exited)")]
    NoProcess { pid: u32 },

    /// The process's memory map may not be read by us.
    #[error(
        "cannot read {}: permission denied: process {pid} belongs to another user (or ptrace access \
         is restricted); run as root (try sudo)",
        path.display()
    )]
    ProcessPermission { pid: u32, path: PathBuf },

    /// The kernel has no `numa_maps`.
    #[error("{} does not exist although the process does: the kernel is built without CONFIG_NUMA", path.display())]
    NoNumaMaps { path: PathBuf },

    /// A `numa_maps` line that does not parse.
    #[error("{}:{line}: cannot parse {text:?}: {reason}", path.display())]
    NumaMaps {
        path: PathBuf,
        line: usize,
        text: String,
        reason: String,
    },

    /// The program to run could not be started.
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },

    /// The running kernel has no `MPOL_WEIGHTED_INTERLEAVE` policy.
    #[error("the kernel lacks weighted interleave (MPOL_WEIGHTED_INTERLEAVE needs Linux 6.9+)")]
    NoWeightedInterleavePolicy,
}

impl ControlError {
    /// The exit status for a program that could not be started, as shells and env(1) give it:
    /// 127 when it is not found, 126 when it cannot be executed; `None` for other failures.
    pub fn exec_status(&self) -> Option<u8> {
        match self {
            ControlError::Spawn { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                Some(127)
            }
            ControlError::Spawn { .. } => Some(126),
            _ => None,
        }
    }
}

impl Classify for ControlError {
    /// The class of the failure, for exit codes.
    fn class(&self) -> Class {
        use ControlError::*;
        match self {
            UnknownNode { .. }
            | ZeroWeight { .. }
            | WeightTooLarge { .. }
            | DuplicateNode { .. }
            | BadWeights { .. }
            | NoSuchNode { .. }
            | NoMemory { .. }
            | NoNodes { .. }
            | WeightCount { .. }
            | NodeList(_)
            | BadSize { .. }
            | NoProcess { .. } => Class::BadInput,
            NoWeightedInterleave { .. }
            | NoAutoSwitch { .. }
            | NoNumaMaps { .. }
            | NoWeightedInterleavePolicy => Class::Unsupported,
            NeedsRoot { .. } | ProcessPermission { .. } => Class::Permission,
            Read { source, .. } if source.kind() == io::ErrorKind::PermissionDenied => {
                Class::Permission
            }
            Topology(e) if e.is_permission_denied() => Class::Permission,
            Sys(e) => match e.kind {
                cxltier_sys::ErrorKind::Unsupported => Class::Unsupported,
                cxltier_sys::ErrorKind::PermissionDenied => Class::Permission,
                cxltier_sys::ErrorKind::InvalidArgument => Class::BadInput,
                cxltier_sys::ErrorKind::NoSuchProcess => Class::BadInput,
                _ => Class::Runtime,
            },
            _ => Class::Runtime,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            ControlError::NoWeightedInterleave { .. } => Some(
                "use --interleave for plain interleave, or boot a Linux 6.9+ kernel built with CONFIG_NUMA"
                    .into(),
            ),
            ControlError::UnknownNode { .. } | ControlError::NoSuchNode { .. } => {
                Some("see the machine's nodes with `cxltier topo`".into())
            }
            ControlError::NoWeightedInterleavePolicy => {
                Some("use --interleave for plain interleave".into())
            }
            _ => None,
        }
    }
}

/// Node ids in the kernel's list syntax (`0-1,3`), or `none`.
pub(crate) fn list(ids: &[u32]) -> String {
    if ids.is_empty() {
        "none".to_string()
    } else {
        cxltier_topo::nodelist::format(ids)
    }
}

#[cfg(test)]
pub(crate) mod testdir {
    //! A scratch directory (`tempfile`'s, removed on drop) with helpers to lay out files.

    use std::path::Path;

    pub struct TempDir(tempfile::TempDir);

    impl TempDir {
        pub fn new(tag: &str) -> TempDir {
            TempDir(
                tempfile::Builder::new()
                    .prefix(&format!("cxltier-control-{tag}-"))
                    .tempdir()
                    .unwrap(),
            )
        }
        pub fn path(&self) -> &Path {
            self.0.path()
        }
        /// Write `content` to `rel`, creating parent directories.
        pub fn write(&self, rel: &str, content: &str) {
            let p = self.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        pub fn read(&self, rel: &str) -> String {
            std::fs::read_to_string(self.path().join(rel)).unwrap()
        }
    }
}
