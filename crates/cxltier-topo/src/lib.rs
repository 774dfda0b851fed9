//! Discovery of a Linux machine's memory tiers from sysfs.
//!
//! [`Topology::discover`] reads, below a root that is `/` on a live machine or a recorded copy of the
//! relevant parts of `/sys`:
//!
//! - NUMA nodes (`sys/devices/system/node/nodeN`): CPUs, capacity, free memory, SLIT distances;
//! - the firmware's performance figures for each node as the kernel exports them from ACPI HMAT
//!   (`nodeN/access{0,1}/initiators/*`, see the kernel's `Documentation/admin-guide/mm/numaperf.rst`);
//! - the kernel's memory tiers (`sys/devices/virtual/memory_tiering/memory_tierN`);
//! - CXL memory devices and regions (`sys/bus/cxl/devices`) and the node each region became, through
//!   its dax device (`sys/bus/dax/devices/daxX.Y/target_node`);
//! - weighted interleave support and weights (`sys/kernel/mm/mempolicy/weighted_interleave`);
//! - NVMe controllers and namespaces (`sys/class/nvme`, `sys/class/block`);
//! - the kernel's own tiering (`proc/sys/kernel/numa_balancing`, `sys/kernel/mm/numa/
//!   demotion_enabled`, the promotion/demotion counters of `proc/vmstat`, see `ktier.rs`).
//!
//! Also what people write about memory, parsed once for every layer: [`size`] (sizes such as
//! `64M`), [`nodelist`] (node lists such as `0-2,4`) and [`weights`] (weighted-interleave
//! weights in order such as `3:1`: [`Weights`]).
//!
//! Each node is then classified ([`NodeKind`]) with the evidence for it, in words, so that a person
//! can judge how strong it is (see `classify.rs` for the rules and why they are what they are).
//!
//! Missing parts are normal (an old kernel, no CXL, no NVMe) and simply come back empty. The NUMA
//! nodes themselves are essential: if they cannot be read, or their CPU list or meminfo is garbled,
//! discovery fails with a [`TopoError`] naming the file and its content. Garbled non-essential files
//! become [`Topology::warnings`] instead. Nothing here panics on odd sysfs contents.

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod classify;
mod cxl;
mod interleave;
mod ktier;
mod node;
pub mod nodelist;
mod nvme;
pub mod size;
mod sysfs;
mod watch;
pub mod weights;

pub use classify::NodeKind;
pub use cxl::{Cxl, CxlMemdev, CxlRegion, DaxDevice, DaxMode, DaxSource};
pub use interleave::WeightedInterleave;
pub use ktier::{
    counter_rates, nodes_in_words, KernelMoves, KernelTiering, NumaBalancing, Placement,
    DEMOTION_ENABLED, NUMA_BALANCING, VMSTAT,
};
pub use node::{AccessClass, Hmat, MemoryTier, Node, Perf};
pub use nodelist::NodeSet;
pub use nvme::{NvmeController, NvmeNamespace};
pub use watch::{CounterSample, CounterSamples};
pub use weights::{Weights, WeightsError};

use serde::Serialize;
use std::io;
use std::path::{Path, PathBuf};
use sysfs::Sysfs;

/// Where NUMA nodes live, relative to the root.
pub const NODE_DIR: &str = "sys/devices/system/node";

/// Why discovery failed.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// The root has no NUMA node directory: not a Linux sysfs, or not mounted.
    #[error(
        "{} does not exist: is /sys mounted? or pass --sysfs-root pointing at a recorded tree \
         (a directory containing sys/devices/system/node); kernels built without CONFIG_NUMA \
         have no such directory",
        path.display()
    )]
    NoNodes { path: PathBuf },
    /// The node directory exists but lists no `nodeN` entries.
    #[error(
        "{} lists no NUMA nodes (no node0, node1, ...): the kernel may be built without CONFIG_NUMA, \
         or the recorded tree is incomplete",
        path.display()
    )]
    NoNodeEntries { path: PathBuf },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file holds something the kernel would never write there.
    #[error("{}: unexpected content {content:?}: {reason}", path.display())]
    Garbled {
        path: PathBuf,
        content: String,
        reason: String,
    },
    /// A root the user named (`--sysfs-root`) has no NUMA node directory: it is not a recorded
    /// sysfs tree.
    #[error(
        "{} does not exist: the --sysfs-root directory is not a recorded sysfs tree",
        path.display()
    )]
    NotARecordedTree { path: PathBuf },
    /// A failure below a root the user named: their mistake, not the machine's.
    #[error(transparent)]
    NamedRoot(Box<TopoError>),
    /// `/proc/vmstat` is missing below the root: there are no counters to sample.
    #[error(
        "--watch: {} does not exist, so there are no counters to sample",
        path.display()
    )]
    NoCounters { path: PathBuf },
    /// `/proc/vmstat` could not be read, or holds a line that is not `name number`.
    #[error("{0}")]
    Counters(String),
}

impl TopoError {
    /// The error as it reads for a root the user named (`--sysfs-root`): a tree that is not one
    /// (no node directory, no nodes, garbled files) is the user's mistake, not the machine's.
    pub fn below_named_root(self) -> TopoError {
        match self {
            TopoError::NoNodes { path } => TopoError::NotARecordedTree { path },
            e @ (TopoError::NoNodeEntries { .. } | TopoError::Garbled { .. }) => {
                TopoError::NamedRoot(Box::new(e))
            }
            e => e,
        }
    }

    /// Whether the failure is a permission problem (the caller may suggest running as root).
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, TopoError::Read { source, .. } if source.kind() == io::ErrorKind::PermissionDenied)
    }
}

/// Discovery at a live root: no node directory means a kernel without NUMA. (A root the user
/// named that is not a sysfs tree is their mistake: the CLI says so for `--sysfs-root`.)
impl cxltier_error::Classify for TopoError {
    fn class(&self) -> cxltier_error::Class {
        use cxltier_error::Class;
        match self {
            TopoError::NoNodes { .. }
            | TopoError::NoNodeEntries { .. }
            | TopoError::NoCounters { .. } => Class::Unsupported,
            TopoError::NotARecordedTree { .. } | TopoError::NamedRoot(_) => Class::BadInput,
            e if e.is_permission_denied() => Class::Permission,
            _ => Class::Runtime,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            TopoError::NoCounters { .. } => {
                Some("mount /proc (or record proc/vmstat into the --sysfs-root tree)".into())
            }
            TopoError::NotARecordedTree { .. } => Some(
                "pass the directory that contains sys/ (record one with crates/cxltier-topo/tests/fixtures/record.sh), or omit --sysfs-root for this machine".into(),
            ),
            TopoError::NamedRoot(e) => e.hint(),
            e if e.is_permission_denied() => {
                Some("run as root, or record the tree as root and pass --sysfs-root".into())
            }
            _ => None,
        }
    }
}

impl cxltier_error::Classify for size::SizeError {
    fn class(&self) -> cxltier_error::Class {
        cxltier_error::Class::BadInput
    }
}

/// Everything discovered about the machine's memory.
#[derive(Debug, Clone, Serialize)]
pub struct Topology {
    /// All NUMA nodes the kernel shows, by id (memory-less and CPU-less ones included).
    pub nodes: Vec<Node>,
    /// The kernel's memory tiers, by id (lower id = faster). Empty before Linux 6.1 or without
    /// `CONFIG_NUMA`/`CONFIG_MIGRATION`.
    pub memory_tiers: Vec<MemoryTier>,
    /// Memory nodes grouped fastest first, and what the grouping is based on.
    pub tier_order: TierOrder,
    pub cxl: Cxl,
    /// Device-DAX instances (`sys/bus/dax/devices`): how CXL, NVDIMM and firmware-reserved
    /// ("soft reserved") memory becomes a NUMA node.
    pub dax: Vec<DaxDevice>,
    pub weighted_interleave: WeightedInterleave,
    pub nvme: Vec<NvmeController>,
    /// The kernel's own tiering: NUMA balancing, demotion and their counters.
    pub kernel_tiering: KernelTiering,
    /// Non-essential files that could not be read or made no sense, one sentence each.
    pub warnings: Vec<String>,
}

/// Memory nodes grouped by speed, fastest group first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TierOrder {
    pub basis: TierBasis,
    pub groups: Vec<Vec<u32>>,
}

/// What a [`TierOrder`] is based on, from strongest to weakest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TierBasis {
    /// The kernel's memory tiers (which themselves use HMAT/CDAT figures where firmware gives them).
    MemoryTiers,
    /// The kernel's memory tiers, with a tier split where HMAT latencies of its nodes differ.
    MemoryTiersAndHmat,
    /// HMAT read latency (nodes within 10% of each other share a group).
    HmatLatency,
    /// Nodes with CPUs first, CPU-less nodes second: a guess when nothing better is known.
    CpuPresence,
}

impl TierBasis {
    pub fn as_str(&self) -> &'static str {
        match self {
            TierBasis::MemoryTiers => "memory-tiers",
            TierBasis::MemoryTiersAndHmat => "memory-tiers-and-hmat",
            TierBasis::HmatLatency => "hmat-latency",
            TierBasis::CpuPresence => "cpu-presence",
        }
    }
}

impl Topology {
    /// Discover the topology below `root` (`/` for the running machine).
    pub fn discover(root: &Path) -> Result<Topology, TopoError> {
        let fs = Sysfs::new(root);
        let mut warnings = Vec::new();
        let mut nodes = node::read_nodes(&fs, &mut warnings)?;
        let memory_tiers = node::read_memory_tiers(&fs, &mut warnings);
        for tier in &memory_tiers {
            for &id in &tier.nodes {
                if let Some(n) = nodes.iter_mut().find(|n| n.id == id) {
                    n.memory_tier = Some(tier.id);
                }
            }
        }
        let blocks = node::read_memory_blocks(&fs, &nodes, &mut warnings);
        let dax = cxl::read_dax(&fs, &mut warnings);
        let cxl = cxl::read_cxl(&fs, &dax, &blocks, &mut warnings);
        let weighted_interleave = interleave::read(&fs, &mut warnings);
        let nvme = nvme::read(&fs, &mut warnings);
        let kernel_tiering = ktier::read(&fs, &mut warnings);
        classify::classify(&mut nodes, &cxl, &dax, &blocks, &fs);
        let tier_order = order(&nodes);
        Ok(Topology {
            nodes,
            memory_tiers,
            tier_order,
            cxl,
            dax,
            weighted_interleave,
            nvme,
            kernel_tiering,
            warnings,
        })
    }

    /// Discover the running machine (`/`).
    pub fn live() -> Result<Topology, TopoError> {
        Topology::discover(Path::new("/"))
    }

    /// The node with this id.
    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Nodes that hold memory (`MemTotal` above zero), by id.
    pub fn memory_nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.has_memory())
    }

    /// Memory nodes classified as DRAM.
    pub fn dram_nodes(&self) -> impl Iterator<Item = &Node> {
        self.memory_nodes().filter(|n| n.kind == NodeKind::Dram)
    }

    /// Memory nodes classified as CXL.
    pub fn cxl_nodes(&self) -> impl Iterator<Item = &Node> {
        self.memory_nodes().filter(|n| n.kind == NodeKind::Cxl)
    }

    /// Memory nodes outside the fastest group of [`Topology::tier_order`], slowest last.
    pub fn slower_nodes(&self) -> Vec<&Node> {
        self.tier_order
            .groups
            .iter()
            .skip(1)
            .flatten()
            .filter_map(|&id| self.node(id))
            .collect()
    }

    /// Memory nodes grouped fastest first (see [`TierOrder`]).
    pub fn tier_order(&self) -> &TierOrder {
        &self.tier_order
    }

    /// `nodes` grouped by the tier order, fastest group first; nodes the order does not place
    /// (none, on a consistent topology) form a last group.
    pub fn tier_groups(&self, nodes: &[u32]) -> Vec<Vec<u32>> {
        let mut groups: Vec<Vec<u32>> = self
            .tier_order
            .groups
            .iter()
            .map(|g| g.iter().copied().filter(|n| nodes.contains(n)).collect())
            .filter(|g: &Vec<u32>| !g.is_empty())
            .collect();
        let placed: Vec<u32> = groups.iter().flatten().copied().collect();
        let mut rest: Vec<u32> = nodes
            .iter()
            .copied()
            .filter(|n| !placed.contains(n))
            .collect();
        rest.sort_unstable();
        rest.dedup();
        if !rest.is_empty() {
            groups.push(rest);
        }
        groups
    }

    /// The kernel's weighted-interleave state.
    pub fn weighted_interleave(&self) -> &WeightedInterleave {
        &self.weighted_interleave
    }

    /// Read the kernel's tiering counters (`/proc/vmstat`) below `root` again, for rates between
    /// samples: `Ok(None)` when the file is absent, `Err` naming a garbled line.
    pub fn read_kernel_counters(
        root: &Path,
    ) -> Result<Option<std::collections::BTreeMap<String, u64>>, String> {
        ktier::read_counters(&Sysfs::new(root))
    }

    /// The CXL region whose memory became node `id`, if any.
    pub fn cxl_region_for_node(&self, id: u32) -> Option<&CxlRegion> {
        self.cxl.regions.iter().find(|r| r.node == Some(id))
    }
}

/// Group memory nodes fastest first.
///
/// By kernel memory tier when every memory node has one. Within a kernel tier, nodes whose HMAT read
/// latencies differ by more than 10% are split apart, fastest first: kernels before 6.10 put all
/// memory present at boot in the DRAM tier whatever the firmware says about it, so a memory-only
/// node that HMAT describes as 2.5x slower can share DRAM's tier. Without memory tiers, by HMAT read
/// latency when every memory node has one; else nodes with CPUs before CPU-less nodes.
fn order(nodes: &[Node]) -> TierOrder {
    let mem: Vec<&Node> = nodes.iter().filter(|n| n.has_memory()).collect();
    if mem.is_empty() {
        return TierOrder {
            basis: TierBasis::CpuPresence,
            groups: Vec::new(),
        };
    }
    if mem.iter().all(|n| n.memory_tier.is_some()) {
        let mut tiers: Vec<u32> = mem.iter().filter_map(|n| n.memory_tier).collect();
        tiers.sort_unstable();
        tiers.dedup();
        let mut groups = Vec::new();
        let mut split = false;
        for t in tiers {
            let members: Vec<&Node> = mem
                .iter()
                .copied()
                .filter(|n| n.memory_tier == Some(t))
                .collect();
            match by_latency(&members) {
                Some(sub) if sub.len() > 1 => {
                    split = true;
                    groups.extend(sub);
                }
                _ => groups.push(members.iter().map(|n| n.id).collect()),
            }
        }
        let basis = if split {
            TierBasis::MemoryTiersAndHmat
        } else {
            TierBasis::MemoryTiers
        };
        return TierOrder { basis, groups };
    }
    if let Some(groups) = by_latency(&mem) {
        return TierOrder {
            basis: TierBasis::HmatLatency,
            groups,
        };
    }
    let with: Vec<u32> = mem.iter().filter(|n| n.has_cpus()).map(|n| n.id).collect();
    let without: Vec<u32> = mem.iter().filter(|n| !n.has_cpus()).map(|n| n.id).collect();
    let groups = [with, without]
        .into_iter()
        .filter(|g| !g.is_empty())
        .collect();
    TierOrder {
        basis: TierBasis::CpuPresence,
        groups,
    }
}

/// Group nodes by HMAT read latency, fastest first; `None` unless every node has one. Nodes within
/// 10% of their group's fastest member share the group: HMAT figures for the same kind of memory
/// behind different sockets are equal or nearly so.
fn by_latency(nodes: &[&Node]) -> Option<Vec<Vec<u32>>> {
    let mut sorted: Vec<(u64, u32)> = nodes
        .iter()
        .map(|n| n.read_latency_ns().map(|l| (l, n.id)))
        .collect::<Option<_>>()?;
    sorted.sort_unstable();
    let mut groups: Vec<Vec<u32>> = Vec::new();
    let mut base = 0u64;
    for (l, id) in sorted {
        match groups.last_mut() {
            Some(g) if l.saturating_mul(10) <= base.saturating_mul(11) => g.push(id),
            _ => {
                base = l;
                groups.push(vec![id]);
            }
        }
    }
    Some(groups)
}

/// Bytes in binary units for people: `512 B`, `4.0 KiB`, `256 MiB`, `1.5 TiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_for_people() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(256 << 20), "256 MiB");
        assert_eq!(format_bytes(5060198400), "4.7 GiB");
        assert_eq!(format_bytes(3 << 40), "3 TiB");
    }
}
