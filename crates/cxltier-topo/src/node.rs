//! NUMA nodes, their HMAT performance figures and the kernel's memory tiers.

use serde::Serialize;
use std::collections::BTreeMap;

use crate::classify::NodeKind;
use crate::nodelist;
use crate::sysfs::{parse_u64, Sysfs};
use crate::{TopoError, NODE_DIR};

/// One NUMA node.
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    pub id: u32,
    /// CPUs in the node (`nodeN/cpulist`); empty for a CPU-less (memory-only) node.
    pub cpus: Vec<u32>,
    /// Listed in `sys/devices/system/node/online`.
    pub online: bool,
    /// What the memory is, as far as the evidence goes.
    pub kind: NodeKind,
    /// Facts that led to `kind`, in words.
    pub evidence: Vec<String>,
    /// The kernel memory tier holding this node (lower is faster), if the kernel has memory tiers.
    pub memory_tier: Option<u32>,
    /// `MemTotal` from `nodeN/meminfo`, in bytes.
    pub mem_total_bytes: u64,
    /// `MemFree` from `nodeN/meminfo`, in bytes.
    pub mem_free_bytes: u64,
    /// What an allocation on the node can get without swapping, in bytes: `MemFree` plus half of
    /// the page cache (`Active(file)` + `Inactive(file)`) and half of the reclaimable slab, the
    /// lower bound of the kernel's own `MemAvailable` estimate, per node. On a machine that has
    /// been up a while `MemFree` is a sliver (the page cache holds the rest) while the kernel
    /// hands clean cache over at once; a meminfo without those lines gives `MemFree`.
    pub mem_available_bytes: u64,
    /// ACPI SLIT distance to each node (`nodeN/distance`), keyed by node id; 10 is local.
    pub distances: BTreeMap<u32, u32>,
    /// Performance the firmware reports for this node as a memory target.
    pub hmat: Hmat,
}

impl Node {
    /// Whether the node holds memory.
    pub fn has_memory(&self) -> bool {
        self.mem_total_bytes > 0
    }
    /// Whether the node has CPUs.
    pub fn has_cpus(&self) -> bool {
        !self.cpus.is_empty()
    }
    /// HMAT read latency from the node's nearest initiators (access class 0), in ns.
    pub fn read_latency_ns(&self) -> Option<u64> {
        self.hmat.access0.as_ref()?.perf.read_latency_ns
    }
    /// HMAT read bandwidth from the node's nearest initiators (access class 0), in MB/s.
    pub fn read_bandwidth_mbps(&self) -> Option<u64> {
        self.hmat.access0.as_ref()?.perf.read_bandwidth_mbps
    }
}

/// The two HMAT access classes of a memory node.
///
/// Access class 0 is the performance from the node's best initiators of any kind (CPUs or generic
/// initiators such as accelerators); access class 1 is from its best CPU initiators only. On most
/// machines they are equal. `None` when the firmware gives no figures (no HMAT, or a kernel before
/// 5.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Hmat {
    pub access0: Option<AccessClass>,
    pub access1: Option<AccessClass>,
}

/// Performance figures as the kernel reports them.
///
/// Bandwidth is in the kernel's unit, which its ABI document calls MB/s and
/// `Documentation/admin-guide/mm/numaperf.rst` calls MiB/s (the lab's QEMU, given 100 GiB/s, shows
/// 102400); latency is in nanoseconds. The kernel prints 0 for a figure the firmware did not give;
/// that is `None` here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Perf {
    pub read_bandwidth_mbps: Option<u64>,
    pub write_bandwidth_mbps: Option<u64>,
    pub read_latency_ns: Option<u64>,
    pub write_latency_ns: Option<u64>,
}

impl Perf {
    pub fn is_empty(&self) -> bool {
        *self == Perf::default()
    }
}

/// One access class: performance and the initiator nodes it applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AccessClass {
    #[serde(flatten)]
    pub perf: Perf,
    /// Nodes whose CPUs (or other initiators) see this performance (`accessN/initiators/nodeM`).
    pub initiators: Vec<u32>,
}

/// A kernel memory tier (`sys/devices/virtual/memory_tiering/memory_tierN`).
///
/// The id is the tier's abstract distance divided by the chunk size (128 since Linux 6.4): DRAM is
/// tier 4 (abstract distance 576), memory onlined from a dax device without performance figures is
/// tier 22 (five times DRAM's distance), and memory with HMAT/CDAT figures lands according to its
/// latency and bandwidth relative to DRAM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryTier {
    pub id: u32,
    pub nodes: Vec<u32>,
    /// The tier's `abstract_distance` attribute, on kernels that export one (6.12 does not: its
    /// tiers show only `nodelist`, and the distance range follows from the id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abstract_distance: Option<u64>,
}

/// Which node each memory block belongs to, and the block size: used to find the node that a
/// physical address range (a CXL region) became when no dax device says so.
#[derive(Debug, Clone, Default)]
pub(crate) struct MemoryBlocks {
    pub block_bytes: u64,
    pub node_of: BTreeMap<u64, u32>,
}

impl MemoryBlocks {
    /// The node holding most of `[start, start + size)`, with how many of its blocks are online
    /// there and how many blocks the range spans.
    pub(crate) fn node_for_range(&self, start: u64, size: u64) -> Option<(u32, u64, u64)> {
        if self.block_bytes == 0 || size == 0 {
            return None;
        }
        let first = start / self.block_bytes;
        let last = start.checked_add(size - 1)? / self.block_bytes;
        let mut counts: BTreeMap<u32, u64> = BTreeMap::new();
        for (_, &node) in self.node_of.range(first..=last) {
            *counts.entry(node).or_default() += 1;
        }
        let (&node, &count) = counts.iter().max_by_key(|(_, &c)| c)?;
        Some((node, count, last - first + 1))
    }
}

pub(crate) fn read_nodes(fs: &Sysfs, warnings: &mut Vec<String>) -> Result<Vec<Node>, TopoError> {
    if !fs.is_dir(NODE_DIR) {
        return Err(TopoError::NoNodes {
            path: fs.path(NODE_DIR),
        });
    }
    let ids = fs.numbered(NODE_DIR, "node")?;
    if ids.is_empty() {
        return Err(TopoError::NoNodeEntries {
            path: fs.path(NODE_DIR),
        });
    }
    let online = match read_list(fs, &format!("{NODE_DIR}/online")) {
        Ok(list) => list,
        Err(e) => {
            warnings.push(format!("{e}; treating every node as online"));
            None
        }
    };
    let mut nodes = Vec::new();
    for (id, name) in &ids {
        let dir = format!("{NODE_DIR}/{name}");
        let cpulist = format!("{dir}/cpulist");
        let cpus = match read_list(fs, &cpulist)? {
            Some(cpus) => cpus,
            None => return Err(fs_missing(fs, &cpulist)),
        };
        let (mem_total_bytes, mem_free_bytes, mem_available_bytes) =
            read_meminfo(fs, &format!("{dir}/meminfo"), *id)?;
        let distances = read_distances(fs, &dir, &ids, warnings);
        let hmat = Hmat {
            access0: read_access(fs, &dir, 0, warnings),
            access1: read_access(fs, &dir, 1, warnings),
        };
        nodes.push(Node {
            id: *id,
            cpus,
            online: online.as_ref().is_none_or(|o| o.contains(id)),
            kind: NodeKind::MemoryOnly,
            evidence: Vec::new(),
            memory_tier: None,
            mem_total_bytes,
            mem_free_bytes,
            mem_available_bytes,
            distances,
            hmat,
        });
    }
    Ok(nodes)
}

fn fs_missing(fs: &Sysfs, rel: &str) -> TopoError {
    TopoError::Read {
        path: fs.path(rel),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory"),
    }
}

/// A node or CPU list file; `Ok(None)` if absent.
fn read_list(fs: &Sysfs, rel: &str) -> Result<Option<Vec<u32>>, TopoError> {
    let Some(text) = fs.read_opt(rel)? else {
        return Ok(None);
    };
    match nodelist::parse(&text) {
        Ok(ids) => Ok(Some(ids)),
        Err(e) => Err(TopoError::Garbled {
            path: fs.path(rel),
            content: text,
            reason: e.reason,
        }),
    }
}

/// `MemTotal`, `MemFree` and the available estimate ([`Node::mem_available_bytes`]) in bytes from
/// a node's meminfo (`Node 0 MemTotal:  4941600 kB`).
fn read_meminfo(fs: &Sysfs, rel: &str, id: u32) -> Result<(u64, u64, u64), TopoError> {
    let text = fs.read_opt(rel)?.ok_or_else(|| fs_missing(fs, rel))?;
    let garbled = |reason: String| TopoError::Garbled {
        path: fs.path(rel),
        content: text.lines().take(3).collect::<Vec<_>>().join("\\n"),
        reason,
    };
    let mut total = None;
    let mut free = None;
    let (mut active_file, mut inactive_file, mut slab_reclaimable) = (None, None, None);
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        // The kernel prints "Node N Key: value kB" (node_read_meminfo in drivers/base/node.c).
        let (key, value) = match words.as_slice() {
            ["Node", n, key, value, "kB"] if n.parse::<u32>().ok() == Some(id) => (*key, *value),
            ["Node", n, key, value] if n.parse::<u32>().ok() == Some(id) => (*key, *value),
            _ => continue,
        };
        let slot = match key {
            "MemTotal:" => &mut total,
            "MemFree:" => &mut free,
            "Active(file):" => &mut active_file,
            "Inactive(file):" => &mut inactive_file,
            "SReclaimable:" => &mut slab_reclaimable,
            _ => continue,
        };
        let kib: u64 = value
            .parse()
            .map_err(|_| garbled(format!("{key} value {value:?} is not a number of kB")))?;
        *slot = Some(kib.saturating_mul(1024));
    }
    match (total, free) {
        (Some(t), Some(f)) => {
            let cache = active_file.unwrap_or(0) + inactive_file.unwrap_or(0);
            let available = f + cache / 2 + slab_reclaimable.unwrap_or(0) / 2;
            Ok((t, f, available.min(t).max(f)))
        }
        _ => Err(garbled(format!(
            "expected \"Node {id} MemTotal: <n> kB\" and \"Node {id} MemFree: <n> kB\" lines"
        ))),
    }
}

fn read_distances(
    fs: &Sysfs,
    dir: &str,
    ids: &[(u32, String)],
    warnings: &mut Vec<String>,
) -> BTreeMap<u32, u32> {
    let rel = format!("{dir}/distance");
    let text = match fs.read_opt(&rel) {
        Ok(Some(t)) => t,
        Ok(None) => return BTreeMap::new(),
        Err(e) => {
            warnings.push(e.to_string());
            return BTreeMap::new();
        }
    };
    // One distance per online node, in node order (node_read_distance in drivers/base/node.c).
    let values: Option<Vec<u32>> = text.split_whitespace().map(|w| w.parse().ok()).collect();
    match values {
        Some(v) if v.len() == ids.len() => ids.iter().map(|(id, _)| *id).zip(v).collect(),
        _ => {
            warnings.push(format!(
                "{}: unexpected content {text:?}: expected {} distances, one per node; ignoring it",
                fs.display(&rel),
                ids.len()
            ));
            BTreeMap::new()
        }
    }
}

/// `nodeN/accessK/initiators/`: the performance attributes and the `nodeM` links.
fn read_access(
    fs: &Sysfs,
    dir: &str,
    class: u32,
    warnings: &mut Vec<String>,
) -> Option<AccessClass> {
    let base = format!("{dir}/access{class}/initiators");
    if !fs.is_dir(&base) {
        return None;
    }
    let initiators = match fs.numbered(&base, "node") {
        Ok(v) => v.into_iter().map(|(id, _)| id).collect(),
        Err(e) => {
            warnings.push(e.to_string());
            Vec::new()
        }
    };
    let perf = read_perf(fs, &base, warnings);
    Some(AccessClass { perf, initiators })
}

/// The four HMAT-style attributes in `dir` (also used for CXL regions' `accessN`).
pub(crate) fn read_perf(fs: &Sysfs, dir: &str, warnings: &mut Vec<String>) -> Perf {
    let mut get = |attr: &str| -> Option<u64> {
        let rel = format!("{dir}/{attr}");
        match fs.parse_opt(&rel, "a non-negative integer", parse_u64) {
            Ok(v) => v.filter(|&v| v > 0),
            Err(e) => {
                warnings.push(format!("{e}; ignoring it"));
                None
            }
        }
    };
    Perf {
        read_bandwidth_mbps: get("read_bandwidth"),
        write_bandwidth_mbps: get("write_bandwidth"),
        read_latency_ns: get("read_latency"),
        write_latency_ns: get("write_latency"),
    }
}

pub(crate) const TIER_DIR: &str = "sys/devices/virtual/memory_tiering";

pub(crate) fn read_memory_tiers(fs: &Sysfs, warnings: &mut Vec<String>) -> Vec<MemoryTier> {
    let entries = match fs.numbered(TIER_DIR, "memory_tier") {
        Ok(e) => e,
        Err(e) => {
            warnings.push(e.to_string());
            return Vec::new();
        }
    };
    let mut tiers = Vec::new();
    for (id, name) in entries {
        let rel = format!("{TIER_DIR}/{name}/nodelist");
        match read_list(fs, &rel) {
            Ok(Some(nodes)) => {
                let adist_rel = format!("{TIER_DIR}/{name}/abstract_distance");
                let abstract_distance =
                    match fs.parse_opt(&adist_rel, "an abstract distance", parse_u64) {
                        Ok(d) => d,
                        Err(e) => {
                            warnings.push(e.to_string());
                            None
                        }
                    };
                tiers.push(MemoryTier {
                    id,
                    nodes,
                    abstract_distance,
                })
            }
            Ok(None) => warnings.push(format!(
                "{} is missing; ignoring tier {id}",
                fs.display(&rel)
            )),
            Err(e) => warnings.push(format!("{e}; ignoring tier {id}")),
        }
    }
    tiers
}

/// The memory blocks of every node (`nodeN/memoryM` links) and the block size.
pub(crate) fn read_memory_blocks(
    fs: &Sysfs,
    nodes: &[Node],
    warnings: &mut Vec<String>,
) -> MemoryBlocks {
    let rel = "sys/devices/system/memory/block_size_bytes";
    // The kernel prints the block size in hex without a prefix (block_size_bytes_show).
    let block_bytes = match fs.parse_opt(rel, "a hexadecimal block size", |t| {
        u64::from_str_radix(t, 16).ok()
    }) {
        Ok(Some(b)) => b,
        Ok(None) => return MemoryBlocks::default(),
        Err(e) => {
            warnings.push(e.to_string());
            return MemoryBlocks::default();
        }
    };
    let mut node_of = BTreeMap::new();
    for node in nodes {
        match fs.numbered(&format!("{NODE_DIR}/node{}", node.id), "memory") {
            Ok(blocks) => {
                for (block, _) in blocks {
                    node_of.insert(u64::from(block), node.id);
                }
            }
            Err(e) => warnings.push(e.to_string()),
        }
    }
    MemoryBlocks {
        block_bytes,
        node_of,
    }
}

/// Memory-side cache in front of a node (HMAT), total bytes over all levels.
pub(crate) fn memory_side_cache_bytes(fs: &Sysfs, id: u32) -> Option<u64> {
    let dir = format!("{NODE_DIR}/node{id}/memory_side_cache");
    let levels = fs.numbered(&dir, "index").ok()?;
    let total: u64 = levels
        .iter()
        .filter_map(|(_, name)| fs.read_opt(&format!("{dir}/{name}/size")).ok().flatten())
        .filter_map(|t| parse_u64(&t))
        .sum();
    (total > 0).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_ranges() {
        let mut b = MemoryBlocks {
            block_bytes: 128 << 20,
            node_of: BTreeMap::new(),
        };
        for i in 0..8 {
            b.node_of.insert(i, 0);
        }
        for i in 32..34 {
            b.node_of.insert(i, 1);
        }
        assert_eq!(
            b.node_for_range(32 * (128 << 20), 256 << 20),
            Some((1, 2, 2))
        );
        assert_eq!(b.node_for_range(64 * (128 << 20), 256 << 20), None);
        assert_eq!(b.node_for_range(u64::MAX, 2), None);
    }
}
