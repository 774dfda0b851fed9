//! `cxltier topo` end to end: the built binary run over the recorded sysfs trees of cxltier-topo.

mod util;
use std::path::PathBuf;
use std::process::{Command, Output};
use util::{assert_refused, cxltier, json_ok, stderr, stdout, stdout_ok, sysfs_copy, topo_fixture};

fn topo(fixture: &str, extra: &[&str]) -> (Output, PathBuf) {
    let root = topo_fixture(fixture);
    let mut args = vec!["topo", "--sysfs-root", root.to_str().unwrap()];
    args.extend_from_slice(extra);
    (cxltier(&args), root)
}

/// Asserts that `v` (`what`, in a message) has every one of `keys`.
fn assert_has(v: &serde_json::Value, what: &str, keys: &[&str]) {
    for key in keys {
        assert!(v.get(key).is_some(), "{what}.{key}");
    }
}

#[test]
fn json_is_stable() {
    // The JSON is an interface: it must match the checked-in expectation field for field (the
    // same files the library's tests check; regenerate both with CXLTIER_UPDATE_EXPECTED=1 cargo
    // test -p cxltier-topo).
    for name in [
        "cxl-ram",
        "two-socket",
        "hbm-flat",
        "old-kernel-hmat",
        "pmem-kmem",
        "garbled",
        "this-host",
    ] {
        let (out, root) = topo(name, &["--json"]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let actual = stdout(&out).replace(&root.display().to_string(), "<root>");
        // The library's JSON inside the CLI's envelope (docs/json.md).
        let expected =
            std::fs::read_to_string(topo_fixture("expected").join(format!("{name}.json")))
                .unwrap()
                .replacen(
                    "{\n",
                    "{\n  \"schema_version\": 1,\n  \"command\": \"topo\",\n",
                    1,
                );
        assert_eq!(actual, expected, "{name}");
    }
}

#[test]
fn json_field_names() {
    // Names other tools rely on.
    let (out, _) = topo("cxl-ram", &["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let node = &v["nodes"][1];
    assert_has(
        node,
        "nodes[]",
        &[
            "id",
            "cpus",
            "online",
            "kind",
            "evidence",
            "memory_tier",
            "mem_total_bytes",
            "mem_free_bytes",
            "hmat",
        ],
    );
    assert_eq!(node["kind"], "cxl");
    assert_eq!(node["memory_tier"], 22);
    assert!(node["hmat"]["access0"].is_null() && node["hmat"]["access1"].is_null());
    assert_eq!(v["memory_tiers"][1]["id"], 22);
    assert_eq!(v["memory_tiers"][1]["nodes"][0], 1);
    let m = &v["cxl"]["memdevs"][0];
    assert_has(
        m,
        "cxl.memdevs[]",
        &[
            "name",
            "serial",
            "firmware_version",
            "ram_bytes",
            "pmem_bytes",
            "pci_address",
            "numa_node",
            "region",
            "node",
        ],
    );
    assert_eq!(m["pci_address"], "0000:0e:00.0");
    assert_eq!(m["region"], "region0");
    assert_eq!(m["node"], 1);
    let r = &v["cxl"]["regions"][0];
    assert_eq!(r["name"], "region0");
    assert_eq!(r["mode"], "ram");
    assert_eq!(r["size_bytes"], 268435456u64);
    assert_eq!(r["memdevs"][0], "mem0");
    assert_eq!(r["dax"][0], "dax0.0");
    assert_eq!(r["node"], 1);
    let wi = &v["weighted_interleave"];
    assert_eq!(wi["supported"], true);
    assert!(wi["auto"].is_null());
    assert_eq!(wi["weights"]["0"], 1);
    assert_eq!(wi["weights"]["1"], 1);
    assert!(v["nvme"].as_array().unwrap().is_empty());
    assert!(v["warnings"].as_array().unwrap().is_empty());

    let (out, _) = topo("two-socket", &["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &v["nodes"][0]["hmat"]["access0"];
    assert_eq!(a["read_bandwidth_mbps"], 153600);
    assert_eq!(a["write_bandwidth_mbps"], 153600);
    assert_eq!(a["read_latency_ns"], 110);
    assert_eq!(a["write_latency_ns"], 110);
    assert_eq!(a["initiators"][0], 0);
    let c = &v["nvme"][0];
    assert_eq!(c["name"], "nvme0");
    assert_eq!(c["numa_node"], 1);
    assert_eq!(c["namespaces"][0]["name"], "nvme0n1");
    assert_eq!(c["namespaces"][0]["size_bytes"], 7501476528u64 * 512);
    assert_eq!(c["namespaces"][0]["logical_block_size"], 512);
}

#[test]
fn human_output_like_numactl_and_cxl_list() {
    let (out, _) = topo("cxl-ram", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for line in [
        "node  kind  cpus  total      free       tier",
        "   1  cxl   -     256 MiB    255 MiB      22",
        "tier order, fastest first: [0] > [1]  (by memory-tiers)",
        "node 1 is cxl:",
        "  - CXL region0 (ram, 256 MiB on mem0): onlined into this node by dax0.0 (kmem)",
        "mem0       0x1  BWFW VERSION 00  256 MiB  0 B   0000:0e:00.0  -         region0     1",
        "region0  ram   256 MiB     1  mem0     dax0.0     1",
        "weighted interleave: supported, manual (this kernel has no auto mode); weights: node0=1 node1=1",
        "NVMe: none",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }

    let (out, _) = topo("old-kernel-hmat", &[]);
    let text = stdout(&out);
    assert!(text.contains("   1  memory-only  -     512 MiB    507.9 MiB  -         250       250      40960       40960"), "{text}");
    assert!(
        text.contains("weighted interleave: not supported by this kernel"),
        "{text}"
    );

    let (out, _) = topo("garbled", &[]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("warnings:\n  - "), "{}", stdout(&out));
}

#[test]
fn not_a_sysfs_tree_is_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let args = ["topo", "--sysfs-root", tmp.path().to_str().unwrap()];
    assert_refused(
        args,
        &cxltier(&args),
        2,
        &[
            "sys/devices/system/node does not exist",
            "hint: pass the directory that contains sys/",
        ],
    );
}

#[test]
fn profile_instead_of_the_machine() {
    let text = stdout_ok(&["topo", "--profile", "xeon6-6900p-8xcz122"]);
    assert!(text.contains("profile xeon6-6900p-8xcz122"), "{text}");
    assert!(text.contains("R GB/s"), "{text}");

    let v = json_ok(&["topo", "--profile", "xeon6-6900p-8xcz122", "--json"]);
    assert_eq!(v["name"], "xeon6-6900p-8xcz122");
    assert!(v["tiers"].as_array().unwrap().len() >= 2);

    let out = cxltier(&["topo", "--profile", "no-such-profile"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no-such-profile"));

    let out = cxltier(&[
        "topo",
        "--profile",
        "xeon6-6900p-8xcz122",
        "--sysfs-root",
        "/",
    ]);
    assert_eq!(out.status.code(), Some(2), "the two are exclusive");
}

/// A scratch copy of the `cxl-ram` fixture (node0: DRAM with CPUs in memory tier 4, node1: CXL in
/// tier 22) with the kernel's tiering settings and counters added.
fn kernel_tiering_tree(numa_balancing: &str, demotion: &str, vmstat: &str) -> tempfile::TempDir {
    tree_with_kernel_tiering("cxl-ram", numa_balancing, demotion, vmstat)
}

/// A scratch copy of `fixture` with the kernel's tiering settings and counters added.
fn tree_with_kernel_tiering(
    fixture: &str,
    numa_balancing: &str,
    demotion: &str,
    vmstat: &str,
) -> tempfile::TempDir {
    sysfs_copy(
        fixture,
        &[
            ("proc/sys/kernel/numa_balancing", numa_balancing),
            ("sys/kernel/mm/numa/demotion_enabled", demotion),
            ("proc/vmstat", vmstat),
        ],
    )
}

const VMSTAT: &str = "nr_free_pages 100\npgpromote_success 12\npgpromote_candidate 30\n\
                      pgdemote_kswapd 7\nnuma_hint_faults 40\npgmigrate_success 19\n";

#[test]
fn kernel_tiering_in_human_output() {
    let tmp = kernel_tiering_tree("2\n", "true\n", VMSTAT);
    let text = stdout_ok(&["topo", "--sysfs-root", tmp.path().to_str().unwrap()]);
    for needle in [
        "kernel tiering:",
        "NUMA balancing: memory-tiering (kernel.numa_balancing = 2); promotes hot pages from node(s) 1",
        "demotion: on (demotion_enabled = true); reclaim demotes cold pages from node(s) 0",
        "memory tiers: memory_tier4 = node(s) 0; memory_tier22 = node(s) 1 (fastest first)",
        "pgpromote_success",
        "pgdemote_kswapd",
        "numa_hint_faults",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    assert!(!text.contains("nr_free_pages"), "{text}");

    // One memory node: every mode on, nothing to move.
    let tmp = tree_with_kernel_tiering("this-host", "3\n", "true\n", VMSTAT);
    let out = cxltier(&["topo", "--sysfs-root", tmp.path().to_str().unwrap()]);
    let text = stdout(&out);
    for needle in [
        "normal+memory-tiering (kernel.numa_balancing = 3); nothing to move between (one memory node); nothing to promote",
        "demotion: on (demotion_enabled = true); nothing to demote to",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }

    // A kernel without any of it: said, not an error.
    let (out, _) = topo("cxl-ram", &[]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.contains("NUMA balancing: not supported by this kernel"),
        "{text}"
    );
    assert!(text.contains("demotion: not supported by this kernel"));
    assert!(text.contains("counters (/proc/vmstat): not supported by this kernel"));
}

#[test]
fn kernel_tiering_in_json() {
    let tmp = kernel_tiering_tree("3\n", "false\n", VMSTAT);
    let v = json_ok(&[
        "topo",
        "--json",
        "--sysfs-root",
        tmp.path().to_str().unwrap(),
    ]);
    let k = &v["kernel_tiering"];
    assert_eq!(k["numa_balancing"]["value"], 3);
    assert_eq!(k["numa_balancing"]["mode"], "normal+memory-tiering");
    assert_eq!(k["demotion_enabled"], false);
    assert_eq!(k["counters"]["pgpromote_success"], 12);
    assert!(k["counters"].get("nr_free_pages").is_none());
    // Existing fields stay.
    assert!(v["memory_tiers"].is_array() && v["nodes"].is_array());
}

#[test]
fn watch_prints_rates_per_second() {
    let tmp = kernel_tiering_tree("2\n", "true\n", VMSTAT);
    let root = tmp.path().to_str().unwrap();
    let lines: Vec<serde_json::Value> = stdout_ok(&[
        "topo",
        "--sysfs-root",
        root,
        "--watch",
        "0.05",
        "--count",
        "2",
        "--json",
    ])
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    assert_eq!(lines.len(), 3, "a first sample and two with rates");
    assert!(lines[0]["rates_per_s"].is_null());
    assert_eq!(lines[0]["counters"]["pgdemote_kswapd"], 7);
    for l in &lines[1..] {
        assert!(l["interval_s"].as_f64().unwrap() >= 0.05);
        assert_eq!(l["rates_per_s"]["pgpromote_success"], 0.0);
    }

    // The counters moving between samples: bumped once the first sample is taken (the line
    // announcing the watch comes after it).
    let vmstat = tmp.path().join("proc/vmstat");
    let mut child = Command::new(util::BIN)
        .args([
            "topo",
            "--sysfs-root",
            root,
            "--watch",
            "0.6",
            "--count",
            "1",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    loop {
        let mut line = String::new();
        assert!(
            std::io::BufRead::read_line(&mut reader, &mut line).unwrap() > 0,
            "no watch line in\n{text}"
        );
        text.push_str(&line);
        if line.starts_with("watching the kernel's tiering counters") {
            break;
        }
    }
    std::fs::write(
        &vmstat,
        VMSTAT.replace("pgpromote_success 12", "pgpromote_success 1012"),
    )
    .unwrap();
    std::io::Read::read_to_string(&mut reader, &mut text).unwrap();
    assert!(child.wait().unwrap().success());
    let (_, rates) = text
        .split_once("\nover ")
        .unwrap_or_else(|| panic!("no rates in\n{text}"));
    let row = rates
        .lines()
        .find(|l| l.starts_with("pgpromote_success"))
        .unwrap_or_else(|| panic!("no rate row in\n{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1..3], ["1012", "+1000"], "{row}");
    // 1000 over at least 0.6 s.
    let rate: f64 = cells[3].parse().unwrap();
    assert!(rate > 0.0 && rate <= 1000.0 / 0.6 + 0.1, "{row}");
    assert!(
        !rates.contains("pgdemote_kswapd"),
        "unchanged counters are left out:\n{rates}"
    );

    // Without /proc/vmstat there is nothing to watch: exit 4, naming the file.
    std::fs::remove_file(&vmstat).unwrap();
    let args = ["topo", "--sysfs-root", root, "--watch", "1", "--count", "1"];
    assert_refused(args, &cxltier(&args), 4, &["proc/vmstat does not exist"]);
    let args = ["topo", "--sysfs-root", root, "--watch", "0"];
    assert_refused(args, &cxltier(&args), 2, &["--watch 0"]);
}
