//! Why a probe cannot run, with what to do about it.

use cxltier_sys::SysError;

pub use cxltier_error::{Class, Classify};

/// Why a probe cannot run or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("invalid size {given:?}: {reason}")]
    Size { given: String, reason: String },

    #[error("{0}")]
    Mix(#[from] cxltier_profile::MixError),

    #[error("--mixes is empty: give at least one mix, e.g. --mixes R,3:1,2:1,1:1,2:1nt")]
    NoMixes,

    #[error("--nodes: {0}")]
    NodeList(#[from] cxltier_topo::nodelist::ParseError),

    #[error("node {node} does not exist on this machine (nodes: {known})")]
    UnknownNode { node: u32, known: String },

    #[error("node {node} has no memory to probe (it is a CPU-only or empty node)")]
    NoMemory { node: u32 },

    #[error(
        "node {node} has {available} available (free, plus the half of its page cache and reclaimable \
         slab the kernel gives back at once), but the probe needs {need} there ({buffers} plus \
         {headroom} headroom so that the kernel is not pushed into reclaim)"
    )]
    NotEnoughMemory {
        node: u32,
        available: String,
        need: String,
        buffers: String,
        headroom: String,
        /// The largest --buffer that fits, if any.
        fits: Option<String>,
    },

    #[error("no memory node to probe: this machine shows none")]
    NoNodes,

    #[error("no CPU near node {node} is available to this process (allowed CPUs: {allowed})")]
    NoCpus { node: u32, allowed: String },

    #[error("--threads must be at least 1")]
    NoThreads,

    #[error("--duration must be a positive number of seconds, got {0}")]
    Duration(String),

    #[error(
        "--loaded-latency needs at least 2 threads (one chases pointers, the others make traffic), \
         got {threads}"
    )]
    LoadedNeedsThreads { threads: usize },

    #[error("--out needs the read-only mix R among --mixes: every profile tier needs an R figure")]
    ProfileNeedsReadOnly,

    #[error("--weights {given:?}: {reason}")]
    Weights { given: String, reason: String },

    #[error(
        "this kernel has no weighted interleave (MPOL_WEIGHTED_INTERLEAVE needs Linux 6.9 or later)"
    )]
    NoWeightedInterleave,

    #[error("not permitted to set the kernel's weighted-interleave weights ({path}): {source}")]
    WeightsPermission {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("could not write the kernel's weighted-interleave weights ({path}): {source}")]
    WeightsWrite {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot bind memory to {target}: {source}")]
    Bind {
        target: String,
        #[source]
        source: SysError,
    },

    #[error("cannot allocate the {what} buffer for {target}: {source}")]
    Allocate {
        what: &'static str,
        target: String,
        #[source]
        source: SysError,
    },

    #[error("pages of the {what} buffer for {target} are not where they were bound: {detail}")]
    Placement {
        what: &'static str,
        target: String,
        detail: String,
    },

    #[error("cannot verify where the {what} buffer for {target} lives: {source}")]
    Verify {
        what: &'static str,
        target: String,
        #[source]
        source: SysError,
    },

    #[error("{0}")]
    Chase(#[from] crate::chase::ChaseError),

    #[error("the buffer of {bytes} bytes is too small for {threads} threads (each needs at least {min})")]
    BufferTooSmall {
        bytes: u64,
        threads: usize,
        min: String,
    },

    #[error("the topology could not be read: {0}")]
    Topology(#[from] cxltier_topo::TopoError),

    #[error("a measurement thread failed: {0}")]
    Thread(String),

    #[error("--out {}: directory {} does not exist", out.display(), dir.display())]
    OutDir {
        out: std::path::PathBuf,
        dir: std::path::PathBuf,
    },

    #[error("the measured profile does not validate: {0}")]
    ProfileInvalid(cxltier_profile::ProfileError),

    #[error("cannot write {}: {source}", path.display())]
    WriteProfile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Classify for ProbeError {
    /// The class of the error (decides the exit code).
    fn class(&self) -> Class {
        use ProbeError::*;
        match self {
            Size { .. }
            | Mix(_)
            | NoMixes
            | NodeList(_)
            | UnknownNode { .. }
            | NoMemory { .. }
            | NotEnoughMemory { .. }
            | NoCpus { .. }
            | NoThreads
            | Duration(_)
            | LoadedNeedsThreads { .. }
            | ProfileNeedsReadOnly
            | Weights { .. }
            | BufferTooSmall { .. }
            | OutDir { .. }
            | Chase(_) => Class::BadInput,
            WeightsPermission { .. } => Class::Permission,
            NoWeightedInterleave | NoNodes => Class::Unsupported,
            Bind { source, .. } | Allocate { source, .. } | Verify { source, .. } => {
                match source.kind {
                    cxltier_sys::ErrorKind::PermissionDenied => Class::Permission,
                    cxltier_sys::ErrorKind::Unsupported => Class::Unsupported,
                    cxltier_sys::ErrorKind::InvalidArgument => Class::BadInput,
                    _ => Class::Runtime,
                }
            }
            Topology(e) if e.is_permission_denied() => Class::Permission,
            Topology(_)
            | WeightsWrite { .. }
            | Placement { .. }
            | Thread(_)
            | ProfileInvalid(_)
            | WriteProfile { .. } => Class::Runtime,
        }
    }

    /// What the user can do about it, when we know.
    fn hint(&self) -> Option<String> {
        use ProbeError::*;
        Some(match self {
            Size { .. } => "write a size in bytes with an optional unit: 64M, 2G, 512MiB, 1.5G".into(),
            UnknownNode { .. } | NoMemory { .. } => {
                "list the memory nodes with `cxltier topo`, then pass them to --nodes".into()
            }
            NotEnoughMemory { fits: Some(f), .. } => {
                format!("use --buffer {f} or less, or free memory on that node")
            }
            NotEnoughMemory { fits: None, .. } => {
                "free memory on that node, or probe other nodes with --nodes".into()
            }
            NoCpus { .. } => "run the probe with an affinity that includes CPUs of the node's socket (taskset)".into(),
            LoadedNeedsThreads { .. } => "pass --threads 2 or more on a machine with at least 2 CPUs".into(),
            ProfileNeedsReadOnly => "add R to --mixes, e.g. --mixes R,2:1".into(),
            Weights { .. } => {
                "give one weight per --nodes entry, 1 to 255 each, e.g. --nodes 0,1 --weights 3:1".into()
            }
            NoWeightedInterleave => {
                "probe the nodes one at a time (without --weights), or boot a Linux 6.9+ kernel".into()
            }
            WeightsPermission { .. } => {
                "run as root (the weights are a system-wide setting; the probe restores them when done), \
                 or set them first with `cxltier apply --weights ...`"
                    .into()
            }
            Bind { source, .. } if source.kind == cxltier_sys::ErrorKind::PermissionDenied => {
                "the process may not set a memory policy: run as root, or outside a container whose \
                 seccomp profile blocks mbind (docker: --security-opt seccomp=unconfined or --cap-add SYS_NICE)"
                    .into()
            }
            Bind { source, .. } if source.kind == cxltier_sys::ErrorKind::InvalidArgument => {
                "the node may be outside this process's cpuset (see /proc/self/status Mems_allowed)".into()
            }
            Placement { .. } => {
                "another policy (a cpuset, NUMA balancing or memory pressure) moved pages; retry on an idle node".into()
            }
            BufferTooSmall { .. } => "use a larger --buffer or fewer --threads".into(),
            Topology(e) if e.is_permission_denied() => "run as root".into(),
            _ => return None,
        })
    }
}
