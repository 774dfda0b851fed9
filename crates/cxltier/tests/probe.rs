//! `cxltier probe` on this machine, briefly: the JSON contract, the profile it writes (read back by
//! `topo` and `plan`), plots, and bad input refused before any measurement.

mod util;
use std::path::PathBuf;
use util::{assert_refused, build_no_mbind, cxltier, json_ok, stdout_ok, without_mbind};

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("cxltier-probe-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The first node with memory on this machine.
fn memory_node() -> String {
    json_ok(&["topo", "--json"])["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["mem_total_bytes"].as_u64().unwrap_or(0) > 0)
        .map(|n| n["id"].to_string())
        .expect("a memory node")
}

const QUICK: [&str; 6] = ["--buffer", "64M", "--duration", "0.2", "--runs", "3"];

#[test]
fn json_contract_and_profile_accepted_by_topo_and_plan() {
    let dir = scratch("json");
    let out_path = dir.join("probe.toml");
    let node = memory_node();
    let mut args = vec!["probe", "--nodes", &node, "--json", "--out"];
    let out_str = out_path.to_str().unwrap();
    args.push(out_str);
    args.extend(QUICK);
    let v = json_ok(&args);

    assert_eq!(v["settings"]["buffer_bytes"], 64u64 << 20);
    assert_eq!(
        v["settings"]["mixes"],
        serde_json::json!(["R", "3:1", "2:1", "1:1", "2:1nt"])
    );
    assert!(v["host"]["vector_isa"].is_string());
    assert_eq!(v["profile"], out_str);
    let t = &v["targets"][0];
    assert_eq!(t["name"], format!("node{node}"));
    assert_eq!(t["policy"], "bind");
    assert_eq!(t["kind"], "dram");
    assert!(t["threads"].as_u64().unwrap() >= 1);
    for buf in ["chase_placement", "traffic_placement"] {
        assert_eq!(t[buf]["verified"], true, "{buf}");
        assert!(t[buf]["pages_checked"].as_u64().unwrap() >= 16384, "{buf}");
        let per_node = t[buf]["pages_per_node"].as_object().unwrap();
        assert_eq!(per_node.keys().collect::<Vec<_>>(), vec![&node], "{buf}");
    }
    let idle = &t["idle_latency"];
    assert!(idle["ns"].as_f64().unwrap() > 0.0);
    assert_eq!(idle["runs_ns"].as_array().unwrap().len(), 3);
    assert_eq!(idle["chase_lines"], (64u64 << 20) / 64);
    let bw = t["bandwidth"].as_array().unwrap();
    assert_eq!(bw.len(), 5);
    for b in bw {
        let req = b["requested_gbps"].as_f64().unwrap();
        let traffic = b["traffic_gbps"].as_f64().unwrap();
        assert!(req > 0.0, "{b}");
        let ratio = b["traffic_per_requested_byte"].as_f64().unwrap();
        assert!((traffic / req - ratio).abs() < 1e-6, "{b}");
        let expect = match b["mix"].as_str().unwrap() {
            "R" | "2:1nt" => 1.0,
            "3:1" => 1.25,
            "2:1" => 4.0 / 3.0,
            "1:1" => 1.5,
            other => panic!("unexpected mix {other}"),
        };
        assert!((ratio - expect).abs() < 1e-9, "{b}");
    }
    assert!(t["loaded_latency"].as_array().unwrap().is_empty());

    // The profile: topo reads it; plan says a single tier cannot be planned.
    let text = std::fs::read_to_string(&out_path).unwrap();
    assert!(
        text.contains("format = 1") && text.contains("[tier.bandwidth_gbps]"),
        "{text}"
    );
    assert!(stdout_ok(&["topo", "--profile", out_str]).contains("dram"));
    let plan = ["plan", "--profile", out_str, "--mix", "R"];
    let msg = assert_refused(plan, &cxltier(&plan), 4, &["tier"]);
    assert!(!msg.contains("panicked"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn loaded_latency_curve_and_plots() {
    let dir = scratch("svg");
    let node = memory_node();
    let svg = dir.join("plots");
    let mut args = vec![
        "probe",
        "--nodes",
        &node,
        "--mixes",
        "R",
        "--threads",
        "2",
        "--loaded-latency",
        "--json",
        "--svg",
        svg.to_str().unwrap(),
    ];
    args.extend(QUICK);
    let v = json_ok(&args);
    let curve = &v["targets"][0]["loaded_latency"][0];
    assert_eq!(curve["mix"], "R");
    let points = curve["points"].as_array().unwrap();
    assert_eq!(points.len(), 19);
    assert!(points[0]["delay"].as_u64().unwrap() > points[18]["delay"].as_u64().unwrap());
    assert_eq!(points[18]["delay"], 0);
    for p in points {
        assert!(
            p["latency_ns"].as_f64().unwrap() > 0.0 && p["traffic_gbps"].as_f64().unwrap() > 0.0
        );
    }
    // What a profile would get: rising bandwidth, latency never falling.
    let kept = curve["profile"]["points"].as_array().unwrap();
    for w in kept.windows(2) {
        assert!(w[1][0].as_f64() > w[0][0].as_f64() && w[1][1].as_f64() >= w[0][1].as_f64());
    }
    let dropped = curve["profile"]["dropped"].as_array().unwrap();
    // Points of equal bandwidth are merged; none is lost without a reason.
    assert!(
        kept.len() >= 2 && kept.len() + dropped.len() <= 19,
        "{curve}"
    );
    for p in kept {
        assert!(
            p[1].as_f64().unwrap()
                >= v["targets"][0]["idle_latency"]["ns"].as_f64().unwrap() * 0.97
        );
    }
    for f in ["bandwidth.svg", "loaded-latency-R.svg"] {
        let text = std::fs::read_to_string(svg.join(f)).unwrap_or_default();
        assert!(text.contains("<svg"), "{f} missing or not SVG");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A clean refusal: the exit code, a message containing every `words`, no measurement output.
fn refused(args: &[&str], code: i32, words: &[&str]) {
    let out = cxltier(args);
    let msg = assert_refused(args, &out, code, words);
    assert!(!msg.contains("panicked"), "{msg}");
    assert!(
        out.stdout.is_empty(),
        "{args:?} printed results: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn bad_input_is_refused_before_measuring() {
    let node = memory_node();
    let node = node.as_str();
    for (args, words) in [
        (
            &["--nodes", node, "--buffer", "100T"][..],
            &["free", "--buffer"][..],
        ),
        (&["--nodes", "999"], &["node 999 does not exist"]),
        (&["--nodes", "0-"], &["--nodes"]),
        (
            &["--nodes", node, "--mixes", "R,3:x"],
            &["invalid mix \"3:x\""],
        ),
        (&["--nodes", node, "--buffer", "lots"], &["invalid size"]),
        (&["--nodes", node, "--duration", "0"], &["--duration"]),
        (
            &["--nodes", node, "--weights", "3:1"],
            &["two or more nodes"],
        ),
        (
            &["--nodes", node, "--mixes", "3:1", "--out", "/tmp/x.toml"],
            &["R"],
        ),
        (
            &[
                "--nodes",
                node,
                "--out",
                "/nonexistent-dir/p.toml",
                "--buffer",
                "64M",
            ],
            &["does not exist"],
        ),
    ] {
        refused(&[&["probe"][..], args].concat(), 2, words);
    }
}

#[test]
fn no_permission_to_bind_is_refused_before_measuring() {
    let dir = scratch("eperm");
    let Some(launcher) = build_no_mbind(&dir) else {
        return;
    };
    let node = memory_node();
    let args = [&["probe", "--nodes", &node][..], &QUICK].concat();
    let Some(out) = without_mbind(&launcher, &args) else {
        return;
    };
    assert_refused(&args, &out, 3, &["mbind", "not permitted", "hint:"]);
    assert!(out.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
