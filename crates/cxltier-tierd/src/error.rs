//! The crate's one error type.

use std::io;
use std::path::PathBuf;

pub use cxltier_error::{Class, Classify};

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum TierdError {
    /// Neither DAMON nor idle-page tracking is available.
    #[error(
        "no access-tracking source: this kernel has neither DAMON's sysfs interface ({damon} \
         missing; needs CONFIG_DAMON_SYSFS and CONFIG_DAMON_VADDR) nor idle-page tracking ({idle} \
         missing; needs CONFIG_IDLE_PAGE_TRACKING); boot a kernel with DAMON (Linux 5.18+)",
        damon = damon.display(),
        idle = idle.display()
    )]
    NoAccessSource { damon: PathBuf, idle: PathBuf },

    /// Idle-page tracking was asked for, and this kernel does not have it.
    #[error(
        "this kernel has no idle-page tracking ({} missing): it needs CONFIG_IDLE_PAGE_TRACKING \
         (Debian's 6.12 kernels are built without it); use --access-source damon, or auto to take \
         whichever the kernel has",
        idle.display()
    )]
    NoIdlePageTracking { idle: PathBuf },

    /// DAMON was asked for, and this kernel does not have its sysfs interface.
    #[error(
        "this kernel has no DAMON sysfs interface ({} missing): it needs CONFIG_DAMON_SYSFS and \
         CONFIG_DAMON_VADDR (Linux 5.18+){}",
        damon.display(),
        if *idle_present { "; it has idle-page tracking: use --access-source idle-page or auto" } else { "" }
    )]
    NoDamon { damon: PathBuf, idle_present: bool },

    /// Frame numbers in pagemap read as 0: idle-page tracking needs them.
    #[error(
        "{} shows no page frame numbers: reading them needs CAP_SYS_ADMIN, and idle-page \
         tracking works on frames; run tierd as root",
        pagemap.display()
    )]
    FramesHidden { pagemap: PathBuf },

    /// The policy names an access source that does not exist.
    #[error("access source {given:?}: expected auto, damon or idle-page")]
    UnknownSource { given: String },

    /// The DAMON kernel has no virtual-address operations set.
    #[error("DAMON here has no virtual-address monitoring (avail_operations: {available}); boot a kernel with CONFIG_DAMON_VADDR")]
    NoVaddr { available: String },

    /// Someone else's kdamonds exist.
    #[error(
        "DAMON's sysfs interface is in use: {count} kdamond(s) already exist in {}; cxltier tierd \
         does not take over another tool's monitors. Stop that tool (or write 'off' to each \
         kdamonds/N/state and 0 to nr_kdamonds) and try again",
        dir.display()
    )]
    DamonBusy { dir: PathBuf, count: u32 },

    /// Writing or reading sysfs/procfs failed.
    #[error("{action} {}: {source}{}", path.display(), permission_hint(source))]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },

    /// A sysfs or procfs file held something unexpected.
    #[error("unexpected content in {}: {content:?} ({why})", path.display())]
    Parse {
        path: PathBuf,
        content: String,
        why: String,
    },

    /// The policy file is wrong.
    #[error("policy {}: {message}", path.display())]
    Policy { path: PathBuf, message: String },

    /// A setting is out of range.
    #[error("{setting}: {message}")]
    Setting {
        setting: &'static str,
        message: String,
    },

    /// A target process does not exist.
    #[error("no process {pid}: check the id with `ps` (it may have exited)")]
    NoSuchProcess { pid: u32 },

    /// The machine has no slower tier to demote to, or no faster one to promote to.
    #[error("{0}")]
    Topology(String),

    /// The filesystem or device cannot hold the NVMe tier.
    #[error("{0}")]
    Unsupported(String),

    /// The NVMe backing ran out of space.
    #[error(
        "no space left for the NVMe tier at {} ({wanted} bytes wanted): free space there, give a \
         smaller SIZE, or name another device",
        path.display()
    )]
    NoSpace { path: PathBuf, wanted: u64 },

    /// A system call failed.
    #[error(transparent)]
    Sys(#[from] cxltier_sys::SysError),

    /// Topology discovery failed.
    #[error(transparent)]
    Topo(#[from] cxltier_topo::TopoError),

    /// The daemon's sink could not write its report (its output is gone).
    #[error("{0}")]
    Output(io::Error),

    /// A value given on the command line is wrong; the message names the flag as written there.
    #[error("{message}")]
    Invalid {
        message: String,
        hint: Option<&'static str>,
    },

    /// A system-wide change was asked for without the privilege to make it.
    #[error("{0}")]
    NeedsRoot(String),

    /// A command to run could not be started (bad input when there is no such program).
    #[error("cannot start {program}: {source}")]
    Spawn { program: String, source: io::Error },

    /// A workload's memory did not hold what was written to it.
    #[error("{0}")]
    Corrupt(String),

    /// The program could not execute itself again (with transparent huge pages disabled).
    #[error("{0}")]
    Exec(String),
}

fn permission_hint(err: &io::Error) -> &'static str {
    if err.kind() == io::ErrorKind::PermissionDenied {
        " (DAMON's sysfs interface, the idle-page bitmap and moving another process's pages need \
         root: try sudo)"
    } else {
        ""
    }
}

impl Classify for TierdError {
    /// The class of this error, for exit codes.
    fn class(&self) -> Class {
        match self {
            TierdError::NoAccessSource { .. }
            | TierdError::NoIdlePageTracking { .. }
            | TierdError::NoDamon { .. }
            | TierdError::NoVaddr { .. } => Class::Unsupported,
            TierdError::Topology(_) | TierdError::Unsupported(_) => Class::Unsupported,
            TierdError::FramesHidden { .. } => Class::Permission,
            TierdError::UnknownSource { .. } => Class::BadInput,
            TierdError::Io { source, .. } if source.kind() == io::ErrorKind::PermissionDenied => {
                Class::Permission
            }
            TierdError::Policy { .. }
            | TierdError::Setting { .. }
            | TierdError::NoSuchProcess { .. }
            | TierdError::Invalid { .. } => Class::BadInput,
            TierdError::NeedsRoot(_) => Class::Permission,
            TierdError::Spawn { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                Class::BadInput
            }
            TierdError::Sys(e) => match e.kind {
                cxltier_sys::ErrorKind::PermissionDenied => Class::Permission,
                cxltier_sys::ErrorKind::NoSuchProcess => Class::BadInput,
                _ => Class::Runtime,
            },
            TierdError::Topo(e) if e.is_permission_denied() => Class::Permission,
            _ => Class::Runtime,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            TierdError::Invalid { hint, .. } => hint.map(str::to_string),
            _ => None,
        }
    }
}

impl TierdError {
    /// A wrong command-line value, said as `message` (which names the flag).
    pub fn invalid(message: impl Into<String>) -> Self {
        TierdError::Invalid {
            message: message.into(),
            hint: None,
        }
    }

    /// A wrong command-line value, with how to fix it.
    pub fn invalid_with_hint(message: impl Into<String>, hint: &'static str) -> Self {
        TierdError::Invalid {
            message: message.into(),
            hint: Some(hint),
        }
    }

    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        TierdError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// An I/O error on a file of process `pid` under `/proc` while doing `action`: the file not
    /// being there means the process is gone ([`TierdError::NoSuchProcess`]).
    pub(crate) fn process_io(
        pid: u32,
        action: &'static str,
        path: impl Into<PathBuf>,
        source: io::Error,
    ) -> Self {
        if source.kind() == io::ErrorKind::NotFound {
            TierdError::NoSuchProcess { pid }
        } else {
            TierdError::io(action, path, source)
        }
    }
}
