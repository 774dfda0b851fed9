//! `cxltier probe` on this machine, briefly: the JSON contract, the profile it writes (read back by
//! `topo` and `plan`), plots, and bad input refused before any measurement.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cxltier(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cxltier"))
        .args(args)
        .output()
        .expect("run cxltier")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

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
    let out = cxltier(&["topo", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["nodes"]
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
    let out = cxltier(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");

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
    let topo = cxltier(&["topo", "--profile", out_str]);
    assert!(topo.status.success(), "{}", stderr(&topo));
    assert!(String::from_utf8_lossy(&topo.stdout).contains("dram"));
    let plan = cxltier(&["plan", "--profile", out_str, "--mix", "R"]);
    assert_eq!(plan.status.code(), Some(4), "{}", stderr(&plan));
    let msg = stderr(&plan);
    assert!(msg.contains("tier") && !msg.contains("panicked"), "{msg}");
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
    let out = cxltier(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
    let msg = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {msg}");
    for w in words {
        assert!(msg.contains(w), "{args:?}: message lacks {w:?}: {msg}");
    }
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
    refused(
        &["probe", "--nodes", &node, "--buffer", "100T"],
        2,
        &["free", "--buffer"],
    );
    refused(
        &["probe", "--nodes", "999"],
        2,
        &["node 999 does not exist"],
    );
    refused(&["probe", "--nodes", "0-"], 2, &["--nodes"]);
    refused(
        &["probe", "--nodes", &node, "--mixes", "R,3:x"],
        2,
        &["invalid mix \"3:x\""],
    );
    refused(
        &["probe", "--nodes", &node, "--buffer", "lots"],
        2,
        &["invalid size"],
    );
    refused(
        &["probe", "--nodes", &node, "--duration", "0"],
        2,
        &["--duration"],
    );
    refused(
        &["probe", "--nodes", &node, "--weights", "3:1"],
        2,
        &["two or more nodes"],
    );
    refused(
        &[
            "probe",
            "--nodes",
            &node,
            "--mixes",
            "3:1",
            "--out",
            "/tmp/x.toml",
        ],
        2,
        &["R"],
    );
    refused(
        &[
            "probe",
            "--nodes",
            &node,
            "--out",
            "/nonexistent-dir/p.toml",
            "--buffer",
            "64M",
        ],
        2,
        &["does not exist"],
    );
}

/// A launcher that makes `mbind` fail with EPERM (a seccomp filter, as a restrictive container
/// runtime would install), then runs its arguments.
const NO_MBIND_C: &str = r#"
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mbind, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { sizeof filter / sizeof filter[0], filter };
    if (argc < 2) return 125;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("seccomp");
        return 125;
    }
    execv(argv[1], argv + 1);
    perror("execv");
    return 126;
}
"#;

fn build_no_mbind(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("no-mbind.c");
    let bin = dir.join("no-mbind");
    std::fs::write(&src, NO_MBIND_C).ok()?;
    let ok = Command::new("cc")
        .arg("-O1")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .status()
        .ok()?
        .success();
    ok.then_some(bin)
}

#[test]
fn no_permission_to_bind_is_refused_before_measuring() {
    let dir = scratch("eperm");
    let Some(launcher) = build_no_mbind(&dir) else {
        eprintln!("skipped: no C compiler to build the seccomp launcher");
        return;
    };
    let node = memory_node();
    let out = Command::new(&launcher)
        .arg(env!("CARGO_BIN_EXE_cxltier"))
        .args(["probe", "--nodes", &node])
        .args(QUICK)
        .output()
        .unwrap();
    let msg = stderr(&out);
    if out.status.code() == Some(125) {
        eprintln!("skipped: seccomp filters are not available here: {msg}");
        return;
    }
    assert_eq!(out.status.code(), Some(3), "{msg}");
    assert!(
        msg.contains("mbind") && msg.contains("not permitted"),
        "{msg}"
    );
    assert!(msg.contains("hint:"), "{msg}");
    assert!(out.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
