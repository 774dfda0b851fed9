//! What to measure, checked against the machine before anything is allocated.
//!
//! Every problem the user can fix (an unknown node, a node without memory, a buffer that does not
//! fit, an unparsable mix, bad weights) is found here, before any measurement starts.

use crate::host::Host;
use crate::size::{round_down, round_up, short};
use crate::ProbeError;
use cxltier_profile::{Mix, TierKind};
use cxltier_topo::size::Size;
use cxltier_topo::{format_bytes, nodelist, Node, Topology};
use std::time::Duration;

/// What the user asked for, as given on the command line.
#[derive(Debug, Clone)]
pub struct Config {
    /// Nodes to probe (`0,1`, `0-3`); `None`: every memory node.
    pub nodes: Option<String>,
    /// Mixes, comma separated (`R,3:1,2:1,1:1,2:1nt`).
    pub mixes: String,
    /// Threads per node; `None`: every CPU near the node.
    pub threads: Option<usize>,
    /// Size of each buffer; `None`: chosen from the last-level cache size.
    pub buffer: Option<Size>,
    /// Seconds per bandwidth measurement (and for the idle-latency runs together).
    pub duration_s: f64,
    pub loaded_latency: bool,
    /// Weighted-interleave weights over `nodes` (`3:1`): adds an interleaved target.
    pub weights: Option<String>,
    /// Whether a profile will be written (it needs the R mix).
    pub want_profile: bool,
    /// Idle-latency runs per node.
    pub latency_runs: usize,
    /// Huge pages where the kernel gives them.
    pub huge_pages: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            nodes: None,
            mixes: "R,3:1,2:1,1:1,2:1nt".into(),
            threads: None,
            buffer: None,
            duration_s: 2.0,
            loaded_latency: false,
            weights: None,
            want_profile: false,
            latency_runs: 7,
            huge_pages: true,
        }
    }
}

/// How a target's memory is placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetPolicy {
    /// `mbind(MPOL_BIND)` to one node.
    Node(u32),
    /// `mbind(MPOL_WEIGHTED_INTERLEAVE)` over nodes, with the kernel's weights set to these.
    Weighted { nodes: Vec<u32>, weights: Vec<u32> },
}

impl TargetPolicy {
    /// The memory policy's name: `bind` or `weighted-interleave`.
    pub fn policy_name(&self) -> &'static str {
        match self {
            TargetPolicy::Node(_) => "bind",
            TargetPolicy::Weighted { .. } => "weighted-interleave",
        }
    }

    /// The weights of an interleaved placement.
    pub fn weights(&self) -> Option<&[u32]> {
        match self {
            TargetPolicy::Node(_) => None,
            TargetPolicy::Weighted { weights, .. } => Some(weights),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            TargetPolicy::Node(n) => format!("node {n}"),
            TargetPolicy::Weighted { nodes, weights } => format!(
                "nodes {} under weighted interleave {}",
                join(nodes, ","),
                join(weights, ":")
            ),
        }
    }

    pub fn nodes(&self) -> Vec<u32> {
        match self {
            TargetPolicy::Node(n) => vec![*n],
            TargetPolicy::Weighted { nodes, .. } => nodes.clone(),
        }
    }
}

fn join<T: ToString>(xs: &[T], sep: &str) -> String {
    xs.iter().map(T::to_string).collect::<Vec<_>>().join(sep)
}

/// One thing to measure: a node, or an interleaved set of nodes.
#[derive(Debug, Clone)]
pub struct Target {
    /// `node0`, or `node0+node1@3:1` for an interleaved buffer.
    pub name: String,
    pub placement: TargetPolicy,
    /// The node whose CPUs run the measurement threads.
    pub initiator_node: u32,
    /// Those CPUs (restricted to the ones this process may use).
    pub cpus: Vec<u32>,
    pub threads: usize,
    /// Tier kind from the topology's classification (node targets).
    pub kind: Option<TierKind>,
    /// `MemTotal` of the node(s).
    pub capacity_bytes: u64,
    /// What HMAT/CDAT say the node's read bandwidth is, GB/s, if anything.
    pub firmware_bandwidth_gbps: Option<f64>,
}

/// A checked plan.
#[derive(Debug, Clone)]
pub struct ProbePlan {
    pub targets: Vec<Target>,
    pub mixes: Vec<Mix>,
    pub buffer_bytes: u64,
    pub buffer_auto: bool,
    pub duration: Duration,
    pub loaded_latency: bool,
    pub latency_runs: usize,
    pub huge_pages: bool,
    pub host: Host,
    pub warnings: Vec<String>,
}

/// Parse a comma-separated list of mixes.
pub fn parse_mixes(text: &str) -> Result<Vec<Mix>, ProbeError> {
    let mut mixes: Vec<Mix> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let m: Mix = part.parse()?;
        if !mixes.contains(&m) {
            mixes.push(m);
        }
    }
    if mixes.is_empty() {
        return Err(ProbeError::NoMixes);
    }
    Ok(mixes)
}

/// Parse `3:1` weights ([`cxltier_topo::Weights`]' rules) for `nodes`, one per node.
pub fn parse_weights(text: &str, nodes: usize) -> Result<Vec<u32>, ProbeError> {
    let err = |reason: String| ProbeError::Weights {
        given: text.to_string(),
        reason,
    };
    let weights = cxltier_topo::Weights::parse(text)
        .map_err(|e| err(e.reason))?
        .into_vec();
    if nodes < 2 {
        return Err(err(
            "weighted interleave needs two or more nodes in --nodes".to_string(),
        ));
    }
    if weights.len() != nodes {
        return Err(err(format!(
            "{} weights for {} nodes: give one weight per node, in --nodes order",
            weights.len(),
            nodes
        )));
    }
    Ok(weights)
}

/// Headroom left free on a node besides the buffers: 2% of its memory, between 16 MiB and 512 MiB.
pub fn headroom(mem_total: u64) -> u64 {
    (mem_total / 50).clamp(16 << 20, 512 << 20)
}

/// The smallest buffer the probe accepts.
pub const MIN_BUFFER: u64 = 4 << 20;

/// Round a buffer size to what is allocated: whole 2 MiB huge pages from 4 MiB up.
pub fn round_buffer(bytes: u64) -> u64 {
    if bytes >= MIN_BUFFER {
        round_up(bytes, crate::buffer::HUGE)
    } else {
        round_up(bytes, 4096)
    }
}

/// The automatic buffer size: 4x the last-level cache (so that at most a quarter of chased lines
/// could still be cached), at least 256 MiB, rounded up to a power of two.
pub fn auto_buffer(llc: u64) -> u64 {
    (llc.saturating_mul(4)).max(256 << 20).next_power_of_two()
}

/// The node whose CPUs should drive traffic to `node`: itself if it has CPUs; else the firmware's
/// best initiator (HMAT access class 0, then 1); else the nearest node with CPUs by SLIT distance.
pub fn initiator(topo: &Topology, node: &Node) -> Option<u32> {
    if node.has_cpus() {
        return Some(node.id);
    }
    let with_cpus = |id: &u32| topo.node(*id).is_some_and(|n| n.has_cpus());
    for class in [&node.hmat.access0, &node.hmat.access1]
        .into_iter()
        .flatten()
    {
        if let Some(&i) = class.initiators.iter().find(|i| with_cpus(i)) {
            return Some(i);
        }
    }
    topo.nodes
        .iter()
        .filter(|n| n.has_cpus())
        .min_by_key(|n| (node.distances.get(&n.id).copied().unwrap_or(u32::MAX), n.id))
        .map(|n| n.id)
}

/// Check `config` against the machine and decide what to measure.
pub fn plan(config: &Config, topo: &Topology, host: Host) -> Result<ProbePlan, ProbeError> {
    let mut warnings = Vec::new();
    let mixes = parse_mixes(&config.mixes)?;
    if config.want_profile && !mixes.iter().any(Mix::is_read_only) {
        return Err(ProbeError::ProfileNeedsReadOnly);
    }
    if !(config.duration_s.is_finite() && config.duration_s > 0.0) {
        return Err(ProbeError::Duration(config.duration_s.to_string()));
    }
    if config.threads == Some(0) {
        return Err(ProbeError::NoThreads);
    }

    let known = || nodelist::format(&topo.nodes.iter().map(|n| n.id).collect::<Vec<_>>());
    let node_ids: Vec<u32> = match &config.nodes {
        Some(list) => {
            let ids = nodelist::parse(list)?;
            if ids.is_empty() {
                return Err(ProbeError::NodeList(nodelist::ParseError {
                    list: list.clone(),
                    reason: "no node given".into(),
                }));
            }
            ids
        }
        None => topo.memory_nodes().map(|n| n.id).collect(),
    };
    if node_ids.is_empty() {
        return Err(ProbeError::NoNodes);
    }
    let mut nodes: Vec<&Node> = Vec::new();
    for &id in &node_ids {
        let node = topo.node(id).ok_or_else(|| ProbeError::UnknownNode {
            node: id,
            known: known(),
        })?;
        if !node.has_memory() {
            return Err(ProbeError::NoMemory { node: id });
        }
        nodes.push(node);
    }
    let weights = match &config.weights {
        Some(w) => Some(parse_weights(w, nodes.len())?),
        None => None,
    };

    let explicit = match &config.buffer {
        Some(size) => {
            let b = size.bytes();
            if b < MIN_BUFFER {
                return Err(ProbeError::Size {
                    given: size.to_string(),
                    reason: format!(
                        "buffers smaller than {} measure caches, not memory",
                        short(MIN_BUFFER)
                    ),
                });
            }
            Some(round_buffer(b))
        }
        None => None,
    };
    // Memory each node must give, per byte of buffer: two buffers (chase and traffic), split by
    // weight when interleaved.
    let mut need_per_buffer_byte: Vec<(u32, f64)> = nodes.iter().map(|n| (n.id, 2.0)).collect();
    if let Some(w) = &weights {
        let sum: u32 = w.iter().sum();
        for (slot, wi) in need_per_buffer_byte.iter_mut().zip(w) {
            // The interleaved target runs after the single-node ones, so only the larger need counts.
            slot.1 = slot.1.max(2.0 * f64::from(*wi) / f64::from(sum));
        }
    }
    // The largest buffer every node can hold.
    let fits = |node: &Node, factor: f64| -> u64 {
        let avail = node
            .mem_available_bytes
            .saturating_sub(headroom(node.mem_total_bytes));
        round_down((avail as f64 / factor) as u64, crate::buffer::HUGE)
    };
    let largest = nodes
        .iter()
        .zip(&need_per_buffer_byte)
        .map(|(n, (_, f))| fits(n, *f))
        .min()
        .unwrap_or(0);
    let auto = auto_buffer(host.llc_bytes);
    let buffer_bytes = match explicit {
        Some(b) => b,
        None => auto.min(largest),
    };
    for (node, (_, factor)) in nodes.iter().zip(&need_per_buffer_byte) {
        let need_buffers = (buffer_bytes as f64 * factor) as u64;
        let hr = headroom(node.mem_total_bytes);
        // Available, not free: the page cache a long-running machine fills its memory with is
        // given back as the buffers are touched, before anything is measured.
        if need_buffers + hr > node.mem_available_bytes || buffer_bytes < MIN_BUFFER {
            let f = fits(node, *factor);
            return Err(ProbeError::NotEnoughMemory {
                node: node.id,
                available: format_bytes(node.mem_available_bytes),
                need: format_bytes(need_buffers + hr),
                buffers: format!(
                    "{} for the chase and traffic buffers of {} each",
                    format_bytes(need_buffers),
                    format_bytes(buffer_bytes)
                ),
                headroom: format_bytes(hr),
                fits: (f >= MIN_BUFFER).then(|| format!("{}M", f >> 20)),
            });
        }
    }
    if host.llc_bytes > 0 && buffer_bytes < host.llc_bytes.saturating_mul(4) {
        warnings.push(format!(
            "the buffer ({}) is less than 4x the last-level cache ({}): some loads hit the cache, so \
             latency reads low and bandwidth high",
            format_bytes(buffer_bytes),
            format_bytes(host.llc_bytes)
        ));
    }
    if host.is_emulated() {
        warnings.push(
            "this CPU is emulated (QEMU TCG): every figure is an emulator timing, fit for checking \
             behaviour, not for judging the memory's speed"
                .to_string(),
        );
    }
    if config.huge_pages && !host.thp_possible() {
        warnings.push(format!(
            "transparent huge pages are {} here: buffers use base pages, and latency includes TLB misses",
            host.thp_mode
        ));
    }

    let allowed = &host.allowed_cpus;
    let mut targets = Vec::new();
    let make_target = |name: String,
                       placement: TargetPolicy,
                       first: &Node,
                       kind: Option<TierKind>,
                       capacity: u64,
                       fw: Option<f64>|
     -> Result<Target, ProbeError> {
        let init = initiator(topo, first).ok_or_else(|| ProbeError::NoCpus {
            node: first.id,
            allowed: nodelist::format(allowed),
        })?;
        let init_node = topo.node(init).expect("initiator exists");
        let cpus: Vec<u32> = init_node
            .cpus
            .iter()
            .copied()
            .filter(|c| allowed.contains(c))
            .collect();
        if cpus.is_empty() {
            return Err(ProbeError::NoCpus {
                node: first.id,
                allowed: nodelist::format(allowed),
            });
        }
        let threads = config.threads.unwrap_or(cpus.len());
        Ok(Target {
            name,
            placement,
            initiator_node: init,
            cpus,
            threads,
            kind,
            capacity_bytes: capacity,
            firmware_bandwidth_gbps: fw,
        })
    };
    for node in &nodes {
        let fw = node.read_bandwidth_mbps().map(|m| m as f64 / 1000.0);
        targets.push(make_target(
            format!("node{}", node.id),
            TargetPolicy::Node(node.id),
            node,
            Some(TierKind::for_node_kind(node.kind.as_str())),
            node.mem_total_bytes,
            fw,
        )?);
    }
    if let Some(w) = weights {
        if !topo.weighted_interleave().supported {
            return Err(ProbeError::NoWeightedInterleave);
        }
        let ids: Vec<u32> = nodes.iter().map(|n| n.id).collect();
        let name = format!(
            "{}@{}",
            ids.iter()
                .map(|i| format!("node{i}"))
                .collect::<Vec<_>>()
                .join("+"),
            join(&w, ":")
        );
        let capacity = nodes.iter().map(|n| n.mem_total_bytes).sum();
        targets.push(make_target(
            name,
            TargetPolicy::Weighted {
                nodes: ids,
                weights: w,
            },
            nodes[0],
            None,
            capacity,
            None,
        )?);
    }
    for t in &targets {
        if config.loaded_latency && t.threads < 2 {
            return Err(ProbeError::LoadedNeedsThreads { threads: t.threads });
        }
        if t.threads > t.cpus.len() {
            warnings.push(format!(
                "{}: {} threads on {} CPUs: threads share CPUs, which lowers per-thread bandwidth",
                t.name,
                t.threads,
                t.cpus.len()
            ));
        }
        let per_thread = buffer_bytes / t.threads as u64;
        if per_thread < (1 << 20) {
            return Err(ProbeError::BufferTooSmall {
                bytes: buffer_bytes,
                threads: t.threads,
                min: "1M".into(),
            });
        }
    }
    if explicit.is_none() && buffer_bytes < auto {
        warnings.push(format!(
            "the automatic buffer size ({}) was reduced to {} to fit the nodes' free memory",
            format_bytes(auto),
            format_bytes(buffer_bytes)
        ));
    }

    Ok(ProbePlan {
        targets,
        mixes,
        buffer_bytes,
        buffer_auto: explicit.is_none(),
        duration: Duration::from_secs_f64(config.duration_s),
        loaded_latency: config.loaded_latency,
        latency_runs: config.latency_runs.max(1),
        huge_pages: config.huge_pages,
        host,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Classify;

    fn host() -> Host {
        Host {
            hostname: "test".into(),
            cpu_model: "test".into(),
            llc_bytes: 32 << 20,
            allowed_cpus: (0..64).collect(),
            thp_mode: "madvise".into(),
            kernel: "6.12".into(),
            vector_isa: "avx2".into(),
            nt_store_isa: "avx2".into(),
        }
    }

    /// A recorded sysfs tree with the given nodes: (id, cpulist, MemTotal kB, MemFree kB).
    fn tree(nodes: &[(u32, &str, u64, u64)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("sys/devices/system/node");
        std::fs::create_dir_all(&base).unwrap();
        let ids: Vec<String> = nodes.iter().map(|n| n.0.to_string()).collect();
        std::fs::write(base.join("online"), ids.join(",") + "\n").unwrap();
        std::fs::write(base.join("possible"), ids.join(",") + "\n").unwrap();
        for (id, cpus, total, free) in nodes {
            let d = base.join(format!("node{id}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpulist"), format!("{cpus}\n")).unwrap();
            std::fs::write(
                d.join("meminfo"),
                format!(
                    "Node {id} MemTotal:       {total} kB\nNode {id} MemFree:        {free} kB\nNode {id} MemUsed:        {} kB\n",
                    total - free
                ),
            )
            .unwrap();
            let dist: Vec<String> = nodes
                .iter()
                .map(|o| {
                    if o.0 == *id {
                        "10".into()
                    } else {
                        "20".to_string()
                    }
                })
                .collect();
            std::fs::write(d.join("distance"), dist.join(" ") + "\n").unwrap();
        }
        dir
    }

    const GIB_KB: u64 = 1 << 20;

    fn topo(dir: &tempfile::TempDir) -> Topology {
        Topology::discover(dir.path()).unwrap()
    }

    fn config(nodes: &str, buffer: &str) -> Config {
        Config {
            nodes: Some(nodes.into()),
            buffer: Some(buffer.parse().unwrap()),
            ..Config::default()
        }
    }

    #[test]
    fn memory_held_by_the_page_cache_counts_as_available() {
        // A machine up for a while: 24 GiB, 200 MiB free, 22 GiB of page cache (the state of the
        // development machine after a build). MemFree alone refused every probe.
        let d = tree(&[(0, "0-1", 24 * GIB_KB, 200 << 10)]);
        let meminfo = d.path().join("sys/devices/system/node/node0/meminfo");
        let mut text = std::fs::read_to_string(&meminfo).unwrap();
        text.push_str(
            "Node 0 Active(file):   13000000 kB
Node 0 Inactive(file):  9000000 kB
Node 0 SReclaimable:     400000 kB
",
        );
        std::fs::write(&meminfo, text).unwrap();
        let t = topo(&d);
        let n = &t.nodes[0];
        assert_eq!(n.mem_free_bytes, 200 << 20);
        assert_eq!(
            n.mem_available_bytes,
            (200 * 1024 + 11_000_000 + 200_000) * 1024,
            "free + half the file pages + half the reclaimable slab"
        );
        plan(&config("0", "256M"), &t, host()).unwrap();
        // Without the cache lines, only MemFree counts: the same request does not fit.
        let d = tree(&[(0, "0-1", 24 * GIB_KB, 200 << 10)]);
        let e = plan(&config("0", "256M"), &topo(&d), host()).unwrap_err();
        assert!(
            matches!(e, ProbeError::NotEnoughMemory { node: 0, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("200 MiB available"), "{e}");
    }

    #[test]
    fn plans_a_dram_and_a_cpuless_node() {
        let d = tree(&[
            (0, "0-3", 16 * GIB_KB, 12 * GIB_KB),
            (1, "", 8 * GIB_KB, 8 * GIB_KB),
        ]);
        let p = plan(&config("0,1", "256M"), &topo(&d), host()).unwrap();
        assert_eq!(p.targets.len(), 2);
        assert_eq!(p.targets[1].name, "node1");
        // The CPU-less node is driven from node 0's CPUs.
        assert_eq!(p.targets[1].initiator_node, 0);
        assert_eq!(p.targets[1].cpus, vec![0, 1, 2, 3]);
        assert_eq!(p.targets[1].threads, 4);
        assert_eq!(p.buffer_bytes, 256 << 20);
        assert_eq!(p.mixes.len(), 5);
    }

    #[test]
    fn refuses_what_cannot_be_done_before_measuring() {
        let d = tree(&[
            (0, "0-1", 16 * GIB_KB, 12 * GIB_KB),
            (1, "", 512 << 10, 300 << 10),
            (2, "2", 0, 0),
        ]);
        let t = topo(&d);
        let e = plan(&config("7", "64M"), &t, host()).unwrap_err();
        assert!(matches!(e, ProbeError::UnknownNode { node: 7, .. }), "{e}");
        assert!(e.to_string().contains("nodes: 0-2"), "{e}");
        let e = plan(&config("2", "64M"), &t, host()).unwrap_err();
        assert!(matches!(e, ProbeError::NoMemory { node: 2 }), "{e}");
        // 300 MiB free on node 1: two 256 MiB buffers cannot fit; the hint names a size that does.
        let e = plan(&config("1", "256M"), &t, host()).unwrap_err();
        assert!(
            matches!(e, ProbeError::NotEnoughMemory { node: 1, .. }),
            "{e}"
        );
        assert_eq!(
            e.hint().unwrap(),
            "use --buffer 142M or less, or free memory on that node"
        );
        let mut c = config("0", "64M");
        c.mixes = "R,3:x".into();
        let e = plan(&c, &t, host()).unwrap_err();
        assert!(e.to_string().contains("invalid mix \"3:x\""), "{e}");
        assert_eq!(crate::Classify::class(&e), crate::Class::BadInput);
        // The size parses where it is read (the CLI's flag); plan refuses one that measures caches.
        let e = plan(&config("0", "1M"), &t, host()).unwrap_err();
        assert!(matches!(e, ProbeError::Size { .. }));
        let e = plan(&config("0-", "64M"), &t, host()).unwrap_err();
        assert!(matches!(e, ProbeError::NodeList(_)), "{e}");
        let mut c = config("0", "64M");
        c.mixes = "3:1".into();
        c.want_profile = true;
        assert!(matches!(
            plan(&c, &t, host()).unwrap_err(),
            ProbeError::ProfileNeedsReadOnly
        ));
    }

    #[test]
    fn weights_need_matching_nodes_and_kernel_support() {
        let d = tree(&[
            (0, "0-1", 16 * GIB_KB, 12 * GIB_KB),
            (1, "", 8 * GIB_KB, 8 * GIB_KB),
        ]);
        let t = topo(&d);
        let mut c = config("0,1", "64M");
        c.weights = Some("3:1:1".into());
        assert!(matches!(
            plan(&c, &t, host()).unwrap_err(),
            ProbeError::Weights { .. }
        ));
        c.weights = Some("3:0".into());
        assert!(plan(&c, &t, host())
            .unwrap_err()
            .to_string()
            .contains("1..=255"));
        c.weights = Some("3:1".into());
        // The recorded tree has no weighted_interleave directory: an old kernel.
        let e = plan(&c, &t, host()).unwrap_err();
        assert!(matches!(e, ProbeError::NoWeightedInterleave), "{e}");
        assert_eq!(crate::Classify::class(&e), crate::Class::Unsupported);
        let wi = d.path().join("sys/kernel/mm/mempolicy/weighted_interleave");
        std::fs::create_dir_all(&wi).unwrap();
        std::fs::write(wi.join("node0"), "1\n").unwrap();
        std::fs::write(wi.join("node1"), "1\n").unwrap();
        let p = plan(&c, &topo(&d), host()).unwrap();
        assert_eq!(p.targets.len(), 3);
        assert_eq!(p.targets[2].name, "node0+node1@3:1");
        let mut one = config("0", "64M");
        one.weights = Some("3".into());
        assert!(plan(&one, &t, host())
            .unwrap_err()
            .to_string()
            .contains("two or more nodes"));
    }

    #[test]
    fn automatic_buffer_fits_the_node() {
        let d = tree(&[(0, "0-1", GIB_KB, 600 << 10)]);
        let c = Config {
            nodes: Some("0".into()),
            ..Config::default()
        };
        let p = plan(&c, &topo(&d), host()).unwrap();
        // 4 x 32 MiB LLC = 128 MiB -> at least 256 MiB; 600 MiB free minus headroom holds 2 x 256.
        assert_eq!(p.buffer_bytes, 256 << 20);
        let small = tree(&[(0, "0-1", GIB_KB, 300 << 10)]);
        let p = plan(&c, &topo(&small), host()).unwrap();
        assert!(p.buffer_bytes < 256 << 20 && p.buffer_bytes >= MIN_BUFFER);
        assert!(
            p.warnings.iter().any(|w| w.contains("reduced")),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn loaded_latency_needs_two_threads() {
        let d = tree(&[(0, "0", 16 * GIB_KB, 12 * GIB_KB)]);
        let mut c = config("0", "64M");
        c.loaded_latency = true;
        let e = plan(&c, &topo(&d), host()).unwrap_err();
        assert!(
            matches!(e, ProbeError::LoadedNeedsThreads { threads: 1 }),
            "{e}"
        );
        c.threads = Some(2);
        let p = plan(&c, &topo(&d), host()).unwrap();
        assert!(p.warnings.iter().any(|w| w.contains("share CPUs")));
    }

    #[test]
    fn sizes_round_to_huge_pages() {
        assert_eq!(round_buffer(5 << 20), 6 << 20);
        assert_eq!(auto_buffer(504 << 20), 2 << 30);
        assert_eq!(auto_buffer(0), 256 << 20);
    }
}
