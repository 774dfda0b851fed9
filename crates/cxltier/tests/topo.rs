//! `cxltier topo` end to end: the built binary run over the recorded sysfs trees of cxltier-topo.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cxltier-topo/tests/fixtures")
        .canonicalize()
        .unwrap()
}

fn cxltier(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cxltier"))
        .args(args)
        .output()
        .expect("run cxltier")
}

fn topo(fixture: &str, extra: &[&str]) -> (Output, PathBuf) {
    let root = fixtures().join(fixture);
    let mut args = vec!["topo", "--sysfs-root", root.to_str().unwrap()];
    args.extend_from_slice(extra);
    (cxltier(&args), root)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
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
        let expected =
            std::fs::read_to_string(fixtures().join("expected").join(format!("{name}.json")))
                .unwrap();
        assert_eq!(actual, expected, "{name}");
    }
}

#[test]
fn json_field_names() {
    // Names other tools rely on.
    let (out, _) = topo("cxl-ram", &["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let node = &v["nodes"][1];
    for key in [
        "id",
        "cpus",
        "online",
        "kind",
        "evidence",
        "memory_tier",
        "mem_total_bytes",
        "mem_free_bytes",
        "hmat",
    ] {
        assert!(node.get(key).is_some(), "nodes[].{key}");
    }
    assert_eq!(node["kind"], "cxl");
    assert_eq!(node["memory_tier"], 22);
    assert!(node["hmat"]["access0"].is_null() && node["hmat"]["access1"].is_null());
    assert_eq!(v["memory_tiers"][1]["id"], 22);
    assert_eq!(v["memory_tiers"][1]["nodes"][0], 1);
    let m = &v["cxl"]["memdevs"][0];
    for key in [
        "name",
        "serial",
        "firmware_version",
        "ram_bytes",
        "pmem_bytes",
        "pci_address",
        "numa_node",
        "region",
        "node",
    ] {
        assert!(m.get(key).is_some(), "cxl.memdevs[].{key}");
    }
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
    let out = cxltier(&["topo", "--sysfs-root", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("sys/devices/system/node does not exist"),
        "{err}"
    );
    assert!(
        err.contains("hint: pass the directory that contains sys/"),
        "{err}"
    );
}

#[test]
fn profile_instead_of_the_machine() {
    let out = cxltier(&["topo", "--profile", "xeon6-6900p-8xcz122"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("profile xeon6-6900p-8xcz122"), "{text}");
    assert!(text.contains("R GB/s"), "{text}");

    let out = cxltier(&["topo", "--profile", "xeon6-6900p-8xcz122", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
