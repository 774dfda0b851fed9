//! RAS for CXL memory: what devices there are, what is wrong with them, and what it touches.
//!
//! - [`Inventory`]: every CXL memory device (`memN`) with its serial, firmware, capacity, the
//!   region, NUMA node and memory tier its memory became, and the health the kernel exposes
//!   without a mailbox command (PCIe link, AER counters, security state), read below a root
//!   directory (`/` or a recorded tree).
//! - [`Tracefs`] and [`Watch`]: a private tracefs instance with the `cxl` event group enabled, read
//!   from its `trace_pipe`. A private instance leaves the global tracing state as it was; it is
//!   removed again when the [`Watch`] is dropped.
//! - [`RasEvent`]: a CXL trace event (AER correctable/uncorrectable, poison, general media, DRAM,
//!   memory module, ...) parsed from its text ([`trace`]) and mapped to memdev, region, node and
//!   tier, and for an address, the physical range it covers.
//! - [`poison`]: the device's poison list (`trigger_poison_list`, reported through `cxl_poison`
//!   events), and soft-offlining of poisoned pages.
//! - [`procmap`]: which processes map a physical range (`/proc/PID/pagemap`, root only).
//! - [`Watcher`]: the `--watch` loop (events mapped and reported to a [`WatchSink`], poison lists
//!   read periodically, quarantine, AER masks cleared while it runs).
//! - [`quarantine`]: the file of poisoned ranges `--quarantine` appends to and the store's server
//!   and the tiering daemon follow.

// A library reports through its return values and sinks; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod aer;
pub mod event;
pub mod inventory;
pub mod poison;
pub mod procmap;
pub mod quarantine;
pub mod trace;
pub mod tracefs;
pub mod watcher;

pub use cxltier_error::{Class, Classify};
pub use event::{EventType, PhysRange, RasEvent};
pub use inventory::{Device, DeviceReport, Health, Inventory, InventoryReport};
pub use tracefs::{Tracefs, Watch};
pub use watcher::{WatchError, WatchRecord, WatchSink, Watcher};

use cxltier_error::PathError;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Writes `value` to an existing sysfs or tracefs attribute. The file is opened write-only, never
/// created or truncated: `fs::write` opens with `O_CREAT`, and on sysfs an attribute that is not
/// there (a device being re-probed, e.g. after a fatal error's recovery) then fails with EACCES,
/// which reads as "permission denied" even for root. Without `O_CREAT` it is ENOENT, as it should
/// be. `write_all` retries on EINTR and continues after a short write.
pub fn write_attr(path: &Path, value: &str) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

/// Why a RAS operation failed. Each message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum RasError {
    /// No tracefs below the root.
    #[error(
        "no tracefs: neither {} nor {} has trace events; mount it with \
         `mount -t tracefs nodev /sys/kernel/tracing` (the kernel needs CONFIG_TRACING)",
        tried[0].display(), tried[1].display()
    )]
    NoTracefs { tried: Vec<PathBuf> },
    /// tracefs exists but has no `cxl` event group.
    #[error(
        "{} does not exist: the kernel has no CXL trace events loaded; load the CXL drivers \
         (`modprobe cxl_pci cxl_mem`; the events live in cxl_core) or use a kernel built with CONFIG_CXL_BUS",
        path.display()
    )]
    NoCxlEvents { path: PathBuf },
    /// No CXL memory device is present.
    #[error(
        "no CXL memory devices in {}: this machine has none, or the CXL drivers are not loaded \
         (`modprobe cxl_acpi cxl_pci cxl_mem`)",
        path.display()
    )]
    NoDevices { path: PathBuf },
    /// A device named on the command line does not exist.
    #[error("no CXL memory device {name}: the devices are {known}")]
    UnknownDevice { name: String, known: String },
    /// A name given for a device is not spelled as the kernel names them (`memN`).
    #[error("--memdev {name:?} is not a memory device name")]
    NotADeviceName { name: String },
    /// Reading or writing a file failed (for want of privilege or otherwise).
    #[error(transparent)]
    Path(#[from] PathError),
    /// Topology discovery failed.
    #[error(transparent)]
    Topo(#[from] cxltier_topo::TopoError),
    /// A failure below a root the user named (a recorded tree without CXL devices or NUMA
    /// nodes): their mistake, not the machine's.
    #[error(transparent)]
    NamedRoot(Box<RasError>),
}

/// Without CXL tracing or devices the platform lacks the feature; a device that is not there was
/// named wrongly. (For a recorded tree named with `--sysfs-root`, the CLI makes "no devices" and
/// "no nodes" the user's mistake.)
impl cxltier_error::Classify for RasError {
    fn class(&self) -> cxltier_error::Class {
        use cxltier_error::Class;
        match self {
            RasError::NoTracefs { .. }
            | RasError::NoCxlEvents { .. }
            | RasError::NoDevices { .. } => Class::Unsupported,
            RasError::UnknownDevice { .. } | RasError::NotADeviceName { .. } => Class::BadInput,
            RasError::Path(e) => e.class(),
            RasError::Topo(t) if t.is_permission_denied() => Class::Permission,
            RasError::Topo(_) => Class::Runtime,
            RasError::NamedRoot(_) => Class::BadInput,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            RasError::Path(PathError::Permission { .. }) => Some(
                "run as root; without root, `cxltier ras --no-poison` shows the inventory".into(),
            ),
            RasError::NamedRoot(e) => match **e {
                RasError::NoDevices { .. } => Some(
                    "pass a tree recorded on a machine with CXL devices (lab/record-sysfs cxl DIR)"
                        .into(),
                ),
                ref e => e.hint(),
            },
            RasError::NotADeviceName { .. } => Some(
                "name devices as the kernel does: mem0,mem1 (see `cxltier ras --no-poison`)".into(),
            ),
            _ => None,
        }
    }
}

impl RasError {
    /// The error as it reads for a root the user named (`--sysfs-root`): a tree without CXL
    /// devices or NUMA nodes is the user's mistake, not the machine's.
    pub fn below_named_root(self) -> RasError {
        use cxltier_topo::TopoError;
        match self {
            e @ (RasError::NoDevices { .. }
            | RasError::Topo(TopoError::NoNodes { .. } | TopoError::NoNodeEntries { .. })) => {
                RasError::NamedRoot(Box::new(e))
            }
            e => e,
        }
    }
}
