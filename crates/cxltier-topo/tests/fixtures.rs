//! Discovery against sysfs trees checked in under `tests/fixtures/`: recorded from real machines
//! (`this-host`, and `lab-hmat`/`lab-cxl` from the lab's 6.12 kernel when present) and hand-built
//! after real kernels' layouts (`synth.sh`).
//!
//! Every fixture's full JSON is also compared with `tests/fixtures/expected/NAME.json`; after an
//! intended change, regenerate them with `CXLTIER_UPDATE_EXPECTED=1 cargo test -p cxltier-topo`.

use cxltier_topo::{nodelist, DaxMode, DaxSource, Node, NodeKind, TierBasis, TopoError, Topology};
use std::fs;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn discover(name: &str) -> Topology {
    let root = fixtures().join(name);
    Topology::discover(&root).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn ids<'a>(nodes: impl IntoIterator<Item = &'a cxltier_topo::Node>) -> Vec<u32> {
    nodes.into_iter().map(|n| n.id).collect()
}

fn has(evidence: &[String], needle: &str) -> bool {
    evidence.iter().any(|e| e.contains(needle))
}

/// Node `id` of `t`, asserted to be of `kind`.
fn node_is(t: &Topology, id: u32, kind: NodeKind) -> &Node {
    let n = t.node(id).unwrap();
    assert_eq!(n.kind, kind, "node {id}: {:?}", n.evidence);
    n
}

/// Asserts that each of `needles` is said by a line of `evidence`.
fn assert_evidence(evidence: &[String], needles: &[&str]) {
    for needle in needles {
        assert!(has(evidence, needle), "{needle:?} is not in {evidence:#?}");
    }
}

/// JSON with the fixture's absolute path replaced, so it does not depend on the checkout location.
fn normalized_json(topo: &Topology, root: &Path) -> String {
    let text = serde_json::to_string_pretty(topo).unwrap();
    text.replace(&root.display().to_string(), "<root>") + "\n"
}

fn check_expected(name: &str) {
    let root = fixtures().join(name);
    let actual = normalized_json(&discover(name), &root);
    let path = fixtures().join("expected").join(format!("{name}.json"));
    if std::env::var_os("CXLTIER_UPDATE_EXPECTED").is_some() {
        fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (create it with CXLTIER_UPDATE_EXPECTED=1)",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "{name}: JSON differs from {}; if the change is intended, rerun with CXLTIER_UPDATE_EXPECTED=1\n{actual}",
        path.display()
    );
}

const SYNTHETIC: [&str; 7] = [
    "two-socket",
    "cxl-ram",
    "hbm-flat",
    "old-kernel-hmat",
    "kernel-6.6-no-hmat",
    "pmem-kmem",
    "garbled",
];

/// Recorded from real kernels: this machine, and the lab's 6.12 guest (`lab/record-sysfs`).
const RECORDED: [&str; 3] = ["this-host", "lab-hmat", "lab-cxl"];

#[test]
fn json_matches_expected() {
    for name in SYNTHETIC.iter().chain(&RECORDED) {
        if fixtures().join(name).join("sys").is_dir() {
            check_expected(name);
        }
    }
}

#[test]
fn this_host_single_dram_node() {
    // Recorded from a 2-CPU, 1-node VM with Linux 6.18: no HMAT, no CXL, no NVMe.
    let t = discover("this-host");
    assert_eq!(t.nodes.len(), 1);
    let n = &t.nodes[0];
    assert_eq!((n.id, n.kind, n.online), (0, NodeKind::Dram, true));
    assert_eq!(n.cpus, vec![0, 1]);
    assert!(n.mem_total_bytes > n.mem_free_bytes && n.mem_free_bytes > 0);
    assert_eq!(n.memory_tier, Some(4));
    assert!(n.hmat.access0.is_none() && n.hmat.access1.is_none());
    assert!(
        t.cxl.memdevs.is_empty()
            && t.cxl.regions.is_empty()
            && t.dax.is_empty()
            && t.nvme.is_empty()
    );
    // This kernel names the auto switch `__auto_type` (the `auto` macro of 6.18's compiler_types.h
    // got into the attribute name).
    let wi = t.weighted_interleave();
    assert!(wi.supported);
    assert_eq!(wi.auto, Some(true));
    assert_eq!(wi.auto_file.as_deref(), Some("__auto_type"));
    assert_eq!(wi.weight(0), Some(1));
    assert_eq!(t.tier_order().groups, vec![vec![0]]);
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
}

#[test]
fn two_socket_hmat_and_nvme() {
    let t = discover("two-socket");
    assert_eq!(ids(t.dram_nodes()), vec![0, 1]);
    assert_eq!(t.cxl_nodes().count(), 0);
    let n0 = t.node(0).unwrap();
    assert_eq!(nodelist::format(&n0.cpus), "0-27,56-83");
    assert_eq!(n0.mem_total_bytes, 263855748 * 1024);
    assert_eq!(n0.mem_free_bytes, 251345012 * 1024);
    assert_eq!(n0.distances.get(&1), Some(&21));
    let a = n0.hmat.access0.as_ref().unwrap();
    assert_eq!(a.perf.read_bandwidth_mbps, Some(153600));
    assert_eq!(a.perf.write_latency_ns, Some(110));
    assert_eq!(a.initiators, vec![0]);
    assert_eq!(
        t.node(1).unwrap().hmat.access1.as_ref().unwrap().initiators,
        vec![1]
    );
    assert_eq!(t.tier_order().basis, TierBasis::MemoryTiers);
    assert_eq!(t.tier_order().groups, vec![vec![0, 1]]);
    assert!(t.slower_nodes().is_empty());
    let wi = t.weighted_interleave();
    assert!(wi.supported);
    assert_eq!(wi.auto, None, "6.8 has no auto switch");
    assert_eq!(wi.weights_for(&[0, 1]), Some(vec![1, 1]));
    assert_eq!(wi.weights_for(&[0, 2]), None);

    assert_eq!(t.nvme.len(), 2);
    let c0 = &t.nvme[0];
    assert_eq!(
        c0.model.as_deref(),
        Some("SAMSUNG MZQL23T8HCLS-00A07"),
        "padding trimmed"
    );
    assert_eq!(c0.serial.as_deref(), Some("S64HNE0T500123"));
    assert_eq!(c0.numa_node, Some(1));
    assert_eq!(c0.address.as_deref(), Some("0000:c1:00.0"));
    // Multipath: the controller holds nvme0c0n1, reported as its head nvme0n1.
    assert_eq!(c0.namespaces.len(), 1);
    assert_eq!(c0.namespaces[0].name, "nvme0n1");
    assert_eq!(c0.namespaces[0].size_bytes, 7501476528 * 512);
    assert_eq!(c0.namespaces[0].logical_block_size, Some(512));
    let c1 = &t.nvme[1];
    assert_eq!(c1.namespaces[0].name, "nvme1n1");
    assert_eq!(c1.namespaces[0].logical_block_size, Some(4096));
    assert_eq!(
        c1.numa_node,
        Some(0),
        "from the PCI function (device/numa_node)"
    );
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
}

#[test]
fn cxl_region_onlined_as_node() {
    let t = discover("cxl-ram");
    let n1 = node_is(&t, 1, NodeKind::Cxl);
    assert!(n1.cpus.is_empty());
    assert_eq!(n1.mem_total_bytes, 256 << 20);
    assert_eq!(n1.memory_tier, Some(22));
    assert_evidence(
        &n1.evidence,
        &[
            "no CPUs",
            "CXL region0 (ram, 256 MiB on mem0): onlined into this node by dax0.0 (kmem)",
            "tier 22",
        ],
    );
    assert_eq!(t.node(0).unwrap().kind, NodeKind::Dram);
    assert_eq!(ids(t.cxl_nodes()), vec![1]);
    assert_eq!(ids(t.dram_nodes()), vec![0]);
    assert_eq!(ids(t.slower_nodes()), vec![1]);
    assert_eq!(t.tier_order().groups, vec![vec![0], vec![1]]);

    // Memdevs are matched through the region's endpoint decoder, not by name or position: mem0 is
    // the device behind the second root port.
    let mem0 = &t.cxl.memdevs[0];
    assert_eq!(mem0.name, "mem0");
    assert_eq!(mem0.pci_address.as_deref(), Some("0000:0e:00.0"));
    assert_eq!(mem0.serial, Some(1));
    assert_eq!(mem0.firmware_version.as_deref(), Some("BWFW VERSION 00"));
    assert_eq!((mem0.ram_bytes, mem0.pmem_bytes), (256 << 20, 0));
    assert_eq!(mem0.numa_node, None, "-1 means no affinity");
    assert_eq!(mem0.payload_max, Some(2048));
    assert_eq!(mem0.region.as_deref(), Some("region0"));
    assert_eq!(mem0.node, Some(1));
    let mem1 = &t.cxl.memdevs[1];
    assert_eq!(mem1.pci_address.as_deref(), Some("0000:0d:00.0"));
    assert_eq!((mem1.region.as_deref(), mem1.node), (None, None));

    let r = &t.cxl.regions[0];
    assert_eq!(
        (r.name.as_str(), r.mode.as_str(), r.size_bytes),
        ("region0", "ram", 256 << 20)
    );
    assert_eq!(r.resource, Some(0x290000000));
    assert_eq!(r.interleave_ways, Some(1));
    assert_eq!(r.committed, Some(true));
    assert_eq!(r.memdevs, vec!["mem0"]);
    assert_eq!(r.decoders, vec!["decoder2.0"]);
    assert_eq!(r.dax, vec!["dax0.0"]);
    assert_eq!(r.node, Some(1));
    assert_eq!(r.node_source.as_deref(), Some("dax"));
    assert_eq!(
        t.cxl_region_for_node(1).map(|r| r.name.as_str()),
        Some("region0")
    );

    let d = &t.dax[0];
    assert_eq!(
        (d.name.as_str(), d.target_node, d.mode, d.source),
        ("dax0.0", Some(1), DaxMode::SystemRam, DaxSource::Cxl)
    );
    assert_eq!(d.region.as_deref(), Some("region0"));
    assert_eq!(
        t.weighted_interleave().weights_for(&[0, 1]),
        Some(vec![1, 1])
    );
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
}

#[test]
fn cxl_region_found_by_memory_blocks_without_dax() {
    // Firmware-onlined CXL memory: the region exists but no dax device; its address range lies in
    // node 1's memory blocks.
    let tmp = copy_of("cxl-ram");
    fs::remove_file(tmp.path().join("sys/bus/dax/devices/dax0.0")).unwrap();
    fs::remove_dir_all(
        tmp.path()
            .join("sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0"),
    )
    .unwrap();
    let t = Topology::discover(tmp.path()).unwrap();
    let r = &t.cxl.regions[0];
    assert_eq!(
        (r.node, r.node_source.as_deref()),
        (Some(1), Some("memory-blocks"))
    );
    let n1 = node_is(&t, 1, NodeKind::Cxl);
    assert_evidence(&n1.evidence, &["address range 0x290000000-0x29fffffff lies in this node's memory (2 of 2 memory blocks)"]);
}

#[test]
fn hbm_flat_mode() {
    let t = discover("hbm-flat");
    let n1 = node_is(&t, 1, NodeKind::Hbm);
    assert_evidence(
        &n1.evidence,
        &[
            "read bandwidth 819200 MB/s (3.1x node 0)",
            "read latency 140 ns (1.2x node 0)",
        ],
    );
    assert_eq!(
        t.tier_order().groups,
        vec![vec![1], vec![0]],
        "the kernel tiers HBM above DRAM"
    );
    assert_eq!(t.weighted_interleave().auto, Some(true));
    assert_eq!(t.weighted_interleave().auto_file.as_deref(), Some("auto"));
}

#[test]
fn old_kernel_without_tiers_or_weighted_interleave() {
    let t = discover("old-kernel-hmat");
    assert!(t.memory_tiers.is_empty());
    let wi = t.weighted_interleave();
    assert!(!wi.supported);
    assert_eq!((wi.auto, wi.weights.len()), (None, 0));
    let n1 = node_is(&t, 1, NodeKind::MemoryOnly);
    assert_eq!(n1.memory_tier, None);
    let a = n1.hmat.access0.as_ref().unwrap();
    assert_eq!(
        (a.perf.read_latency_ns, a.perf.read_bandwidth_mbps),
        (Some(250), Some(40960))
    );
    assert_eq!(a.initiators, vec![0]);
    assert!(n1.hmat.access1.is_none());
    assert_evidence(
        &n1.evidence,
        &["read latency 250 ns (2.5x node 0)", "technology unknown"],
    );
    assert_eq!(t.tier_order().basis, TierBasis::HmatLatency);
    assert_eq!(t.tier_order().groups, vec![vec![0], vec![1]]);
}

#[test]
fn cpu_less_node_in_dram_tier_is_weak_dram() {
    let t = discover("kernel-6.6-no-hmat");
    let n1 = node_is(&t, 1, NodeKind::Dram);
    assert_evidence(&n1.evidence, &["no CPUs", "weak"]);
    assert!(!t.weighted_interleave().supported);
    assert_eq!(t.tier_order().groups, vec![vec![0, 1]]);
    assert_eq!(t.tier_order().basis, TierBasis::MemoryTiers);
}

#[test]
fn hmat_splits_a_kernel_tier() {
    // Kernels before 6.10 tier boot-time memory-only nodes as DRAM whatever HMAT says.
    let tmp = copy_of("old-kernel-hmat");
    write_file(
        tmp.path(),
        "sys/devices/virtual/memory_tiering/memory_tier4/nodelist",
        "0-1\n",
    );
    let t = Topology::discover(tmp.path()).unwrap();
    assert_eq!(t.tier_order().basis, TierBasis::MemoryTiersAndHmat);
    assert_eq!(t.tier_order().groups, vec![vec![0], vec![1]]);
    let n1 = node_is(&t, 1, NodeKind::MemoryOnly);
    assert_evidence(&n1.evidence, &["HMAT says it is slower"]);
}

#[test]
fn pmem_through_kmem() {
    let t = discover("pmem-kmem");
    let n2 = node_is(&t, 2, NodeKind::Pmem);
    assert_evidence(
        &n2.evidence,
        &["dax0.0 on NVDIMM region0 (persistent memory) is onlined into this node by kmem"],
    );
    assert_eq!(ids(t.dram_nodes()), vec![0, 1]);
    assert_eq!(t.tier_order().groups, vec![vec![0, 1], vec![2]]);
    let d1 = t.dax.iter().find(|d| d.name == "dax1.0").unwrap();
    assert_eq!(
        (d1.mode, d1.source, d1.target_node),
        (DaxMode::Devdax, DaxSource::Nvdimm, Some(3))
    );
    assert!(t.node(3).is_none(), "node 3 is not online");
    assert_eq!(t.node(0).unwrap().distances.get(&2), Some(&17));
}

#[test]
fn garbled_files_become_warnings() {
    let t = discover("garbled");
    let w = |needle: &str| {
        assert!(
            t.warnings.iter().any(|w| w.contains(needle)),
            "no warning containing {needle:?} in {:#?}",
            t.warnings
        )
    };
    w("node0/distance: unexpected content \"10 x\"");
    w("access0/initiators/read_latency: unexpected content \"abc\"");
    w("memory_tier22/nodelist: unexpected content \"1-x\"");
    w("block_size_bytes: unexpected content \"not-hex\"");
    w("weighted_interleave/auto: unexpected content \"maybe\"");
    w("weighted_interleave/node0: unexpected content \"0\"");
    w("weighted_interleave/node1: unexpected content \"banana\"");
    w("mem0/serial: unexpected content \"zzz\"");
    w("mem0/numa_node: unexpected content \"-7\"");
    w("region0/size: unexpected content \"\"");
    w("endpoint decoder decoder9.0");
    w("dax0.0/target_node: unexpected content \"foo\"");
    w("dax1.0: dangling or looping symlink");
    w("nvme0n1/size: unexpected content \"NaN\"");
    // What could be read still is.
    let n1 = t.node(1).unwrap();
    let a = &n1.hmat.access0.as_ref().unwrap().perf;
    assert_eq!((a.read_latency_ns, a.write_latency_ns), (None, Some(250)));
    assert_eq!(n1.distances.get(&0), Some(&20));
    assert!(t.node(0).unwrap().distances.is_empty());
    assert_eq!(t.memory_tiers.len(), 1);
    let wi = t.weighted_interleave();
    assert!(wi.supported && wi.weights.is_empty() && wi.auto.is_none());
    assert_eq!(t.cxl.memdevs[0].serial, None);
    assert_eq!(
        t.cxl.memdevs[0].pci_address.as_deref(),
        Some("0000:0d:00.0")
    );
    assert_eq!(t.nvme[0].namespaces.len(), 0);
    assert_eq!(
        t.tier_order().basis,
        TierBasis::CpuPresence,
        "node 1's tier is unreadable"
    );
}

// --- fatal errors: the NUMA nodes themselves must be readable ---

#[test]
fn missing_node_dir_says_what_to_do() {
    let tmp = TempDir::new();
    let err = Topology::discover(tmp.path()).unwrap_err();
    assert!(matches!(err, TopoError::NoNodes { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains(
            &tmp.path()
                .join("sys/devices/system/node")
                .display()
                .to_string()
        ),
        "{msg}"
    );
    assert!(
        msg.contains("is /sys mounted?") && msg.contains("--sysfs-root"),
        "{msg}"
    );
}

#[test]
fn node_dir_without_nodes() {
    let tmp = TempDir::new();
    fs::create_dir_all(tmp.path().join("sys/devices/system/node")).unwrap();
    let err = Topology::discover(tmp.path()).unwrap_err();
    assert!(matches!(err, TopoError::NoNodeEntries { .. }), "{err}");
}

#[test]
fn garbled_cpulist_is_an_error_naming_file_and_content() {
    let tmp = copy_of("cxl-ram");
    write_file(tmp.path(), "sys/devices/system/node/node0/cpulist", "0-a\n");
    let err = Topology::discover(tmp.path()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, TopoError::Garbled { .. }));
    assert!(
        msg.contains("node0/cpulist") && msg.contains("\"0-a\""),
        "{msg}"
    );
}

#[test]
fn garbled_meminfo_is_an_error() {
    let tmp = copy_of("cxl-ram");
    let path = tmp.path().join("sys/devices/system/node/node1/meminfo");
    fs::write(&path, "Node 1 MemTotal: lots kB\nNode 1 MemFree: 1 kB\n").unwrap();
    let msg = Topology::discover(tmp.path()).unwrap_err().to_string();
    assert!(
        msg.contains("node1/meminfo") && msg.contains("\"lots\""),
        "{msg}"
    );
    fs::write(&path, "hello\n").unwrap();
    let msg = Topology::discover(tmp.path()).unwrap_err().to_string();
    assert!(
        msg.contains("expected \"Node 1 MemTotal: <n> kB\""),
        "{msg}"
    );
    fs::remove_file(&path).unwrap();
    let err = Topology::discover(tmp.path()).unwrap_err();
    assert!(matches!(err, TopoError::Read { .. }));
    assert!(err.to_string().contains("node1/meminfo"), "{err}");
}

#[test]
fn symlinks_cannot_escape_the_root() {
    // An absolute link in a recording resolves inside the recording, never on the host.
    let tmp = copy_of("cxl-ram");
    let wi = tmp
        .path()
        .join("sys/kernel/mm/mempolicy/weighted_interleave");
    fs::remove_dir_all(&wi).unwrap();
    write_file(tmp.path(), "elsewhere/wi/node0", "7\n");
    std::os::unix::fs::symlink("/elsewhere/wi", &wi).unwrap();
    let t = Topology::discover(tmp.path()).unwrap();
    assert_eq!(
        t.weighted_interleave().weight(0),
        Some(7),
        "absolute link not taken inside the root"
    );
    // `..` stops at the root: this climbs far above it, then names the same in-root directory.
    fs::remove_file(&wi).unwrap();
    std::os::unix::fs::symlink("../../../../../../../../../../elsewhere/wi", &wi).unwrap();
    let t = Topology::discover(tmp.path()).unwrap();
    assert_eq!(t.weighted_interleave().weight(0), Some(7));
    // A link to a host path that is absent from the recording is just absent.
    fs::remove_file(&wi).unwrap();
    std::os::unix::fs::symlink("/proc/self", &wi).unwrap();
    let t = Topology::discover(tmp.path()).unwrap();
    assert!(!t.weighted_interleave().supported);
}

#[test]
fn recording_a_fixture_reproduces_it() {
    // record.sh run over a tree (as it runs over /) must keep everything discovery reads.
    let Some(sh) = ["/bin/sh", "/usr/bin/sh"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        eprintln!("no /bin/sh; skipping");
        return;
    };
    for name in SYNTHETIC.iter().chain(&RECORDED) {
        if !fixtures().join(name).join("sys").is_dir() {
            continue;
        }
        let tmp = TempDir::new();
        let out = tmp.path().join("rec");
        let src = fixtures().join(name);
        let status = std::process::Command::new(sh)
            .arg(fixtures().join("record.sh"))
            .arg(&out)
            .arg(&src)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "record.sh failed on {name}");
        let a = normalized_json(&discover(name), &src);
        let b = normalized_json(&Topology::discover(&out).unwrap(), &out);
        assert_eq!(a, b, "{name}: the recording differs from the original");
    }
}

#[test]
fn discovers_the_running_machine_without_panicking() {
    // Whatever this machine is, discovery either works or fails with a message; it never panics.
    match Topology::discover(Path::new("/")) {
        Ok(t) => assert!(!t.nodes.is_empty()),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

// --- the lab's recordings from a real 6.12 kernel in QEMU (see LAB.md), committed ---

/// A committed recording: a missing one fails the test (it is part of the repository, so its
/// absence is a broken checkout or a lost file, not a reason to pass).
fn lab(name: &str) -> Topology {
    let root = fixtures().join(name);
    assert!(
        root.join("sys").is_dir(),
        "{} is missing: the lab recording is committed with the tests; restore it from git or \
         record it again with lab/record-sysfs",
        root.display()
    );
    Topology::discover(&root).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn lab_hmat_memory_only_node() {
    let t = lab("lab-hmat");
    let n0 = t.node(0).unwrap();
    let n1 = t.node(1).unwrap();
    assert_eq!(n0.kind, NodeKind::Dram);
    assert!(n1.cpus.is_empty() && n1.has_memory());
    // QEMU `hmat-lb`: 100 ns / 100G for node 0, 250 ns / 40G for node 1, both from initiator 0. The
    // kernel shows the bandwidths in MiB/s (100 GiB/s = 102400).
    for (n, lat, bw) in [(n0, 100, 102400), (n1, 250, 40960)] {
        for a in [
            n.hmat.access0.as_ref().unwrap(),
            n.hmat.access1.as_ref().unwrap(),
        ] {
            assert_eq!(a.initiators, vec![0]);
            assert_eq!(
                (a.perf.read_latency_ns, a.perf.write_latency_ns),
                (Some(lat), Some(lat))
            );
            assert_eq!(
                (a.perf.read_bandwidth_mbps, a.perf.write_bandwidth_mbps),
                (Some(bw), Some(bw))
            );
        }
    }
    // Linux 6.12 tiers the CPU-less node by its HMAT figures: 576 x 2.5 x 2.5 = 3600, tier 28.
    assert_eq!((n0.memory_tier, n1.memory_tier), (Some(4), Some(28)));
    assert_eq!(n1.kind, NodeKind::MemoryOnly, "{:?}", n1.evidence);
    assert_evidence(&n1.evidence, &["read latency 250 ns (2.5x node 0)"]);
    assert_eq!(t.tier_order().basis, TierBasis::MemoryTiers);
    assert_eq!(t.tier_order().groups, vec![vec![0], vec![1]]);
    let wi = t.weighted_interleave();
    assert!(wi.supported);
    assert_eq!(wi.auto, None, "6.12 has no auto switch");
    assert_eq!(wi.weights_for(&[0, 1]), Some(vec![1, 1]));
    assert!(t.cxl.memdevs.is_empty());
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
}

#[test]
fn lab_cxl_region_node() {
    let t = lab("lab-cxl");
    let n1 = t.node(1).unwrap();
    assert_eq!(n1.kind, NodeKind::Cxl, "{:?}", n1.evidence);
    assert_eq!(n1.memory_tier, Some(22));
    assert_eq!(n1.mem_total_bytes, 256 << 20);
    assert_evidence(
        &n1.evidence,
        &["CXL region0 (ram, 256 MiB on mem0): onlined into this node by dax0.0 (kmem)"],
    );
    assert_eq!(ids(t.cxl_nodes()), vec![1]);
    assert_eq!(ids(t.dram_nodes()), vec![0]);
    assert_eq!(t.tier_order().groups, vec![vec![0], vec![1]]);
    let region = t.cxl_region_for_node(1).expect("a region became node 1");
    assert_eq!(
        (region.name.as_str(), region.mode.as_str()),
        ("region0", "ram")
    );
    assert_eq!(region.size_bytes, 256 << 20);
    assert_eq!(region.committed, Some(true));
    assert_eq!(region.decoders, vec!["decoder2.0"]);
    assert_eq!(region.memdevs, vec!["mem0"]);
    assert_eq!(region.dax, vec!["dax0.0"]);
    assert_eq!(region.node_source.as_deref(), Some("dax"));
    // QEMU's cxl-vmem0 (root port 13, 0000:0d:00.0) came up as mem1; the region is on mem0, the
    // device behind the second root port.
    let mem0 = t.cxl.memdevs.iter().find(|m| m.name == "mem0").unwrap();
    assert_eq!(mem0.pci_address.as_deref(), Some("0000:0e:00.0"));
    assert_eq!(
        (mem0.region.as_deref(), mem0.node),
        (Some("region0"), Some(1))
    );
    assert_eq!((mem0.ram_bytes, mem0.pmem_bytes), (256 << 20, 0));
    assert_eq!(mem0.firmware_version.as_deref(), Some("BWFW VERSION 00"));
    let mem1 = t.cxl.memdevs.iter().find(|m| m.name == "mem1").unwrap();
    assert_eq!(mem1.pci_address.as_deref(), Some("0000:0d:00.0"));
    assert_eq!((mem1.region.as_deref(), mem1.node), (None, None));
    let dax = &t.dax[0];
    assert_eq!(
        (dax.target_node, dax.mode, dax.source),
        (Some(1), DaxMode::SystemRam, DaxSource::Cxl)
    );
    assert!(t.weighted_interleave().supported);
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
}

// --- temporary directories and tree copies ---

/// `tempfile`'s directory, removed on drop.
struct TempDir(tempfile::TempDir);

impl TempDir {
    fn new() -> TempDir {
        TempDir(
            tempfile::Builder::new()
                .prefix("cxltier-topo-test-")
                .tempdir()
                .unwrap(),
        )
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
}

/// A copy of the recorded fixture `name` in a fresh temporary directory.
fn copy_of(name: &str) -> TempDir {
    let tmp = TempDir::new();
    copy_tree(&fixtures().join(name), tmp.path());
    tmp
}

/// Writes `text` to the file `rel` below `root`, making its directories.
fn write_file(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// Copy a tree, keeping symlinks as symlinks.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let ty = entry.file_type().unwrap();
        if ty.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if ty.is_dir() {
            copy_tree(&src, &dst);
        } else {
            fs::copy(&src, &dst).unwrap();
        }
    }
}
