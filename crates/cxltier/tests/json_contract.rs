//! The JSON contract (`docs/json.md`): every JSON-producing command's output validates against its
//! schema in `docs/json/`, errors under `--json` are one JSON object on stderr, and the schemas are
//! strict enough that a renamed or unknown field fails.
//!
//! The commands run on recorded sysfs trees, built-in profiles and scratch files where they can;
//! `touch`, `show`, `qsim`, `probe` and `ycsb` run for real on this machine (small sizes). `tierd`
//! and `ras --watch` need a tiered machine and CXL tracefs: their lines are checked in the
//! binary's unit tests (`cmd/tierd.rs`, `cmd/ras.rs`) from the structures they print.

mod common;
mod util;
use cxltier_store::testing::temp_file;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::{
    assert_conforms, assert_ok, build_no_mbind, cxltier, damage, json_of, repo, schema, stderr,
    topo_fixture, violations, without_mbind, write_marked_log, BIN,
};

fn fixture(name: &str) -> String {
    topo_fixture(name).display().to_string()
}

/// Runs `args`, expects success, and checks stdout (one JSON document) against `name`.
fn check_document(name: &str, args: &[&str]) -> Value {
    let doc = json_of(args, &cxltier(args));
    assert_conforms(name, &doc);
    doc
}

/// Runs `args`, expects success, and checks every line of its JSON-lines stream against `name`;
/// returns the lines.
fn check_lines(name: &str, args: &[&str]) -> Vec<Value> {
    let text = assert_ok(args, &cxltier(args));
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(!lines.is_empty(), "no lines");
    for l in &lines {
        assert_conforms(name, l);
    }
    lines
}

/// Checks that a failed command given `--json` printed only the error object, with `code`.
fn check_error(args: &[&str], code: u8, command: &str, needle: &str) -> Value {
    let out = cxltier(args);
    assert_eq!(out.status.code(), Some(i32::from(code)), "{args:?}");
    assert!(out.stdout.is_empty(), "{args:?}: stdout {:?}", out.stdout);
    let text = String::from_utf8_lossy(&out.stderr);
    let mut lines = text.lines();
    let err: Value = serde_json::from_str(lines.next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{args:?}: stderr is not a JSON object ({e}): {text}"));
    assert_eq!(
        lines.next(),
        None,
        "{args:?}: more than the object on stderr: {text}"
    );
    assert_conforms("error.schema.json", &err);
    assert_eq!(err["exit_code"], code, "{err}");
    assert_eq!(err["command"], command, "{err}");
    assert!(
        err["error"].as_str().unwrap().contains(needle),
        "{args:?}: {err}"
    );
    err
}

#[test]
fn every_schema_is_a_valid_draft_2020_12_schema_and_strict() {
    let dir = repo().join("docs/json");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 15, "{names:?}");
    let guide = std::fs::read_to_string(repo().join("docs/json.md")).unwrap();
    for name in &names {
        assert!(
            guide.contains(&format!("(json/{name})")),
            "docs/json.md does not list {name}"
        );
        assert!(name.ends_with(".schema.json"), "{name}");
        let s = schema(name);
        jsonschema::meta::validate(&s).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            s["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{name}"
        );
        // Every object the schema describes with properties is closed: a field that is renamed
        // or unknown fails validation instead of passing unnoticed.
        let mut open = Vec::new();
        closed_objects(&s, name.clone(), &mut open);
        assert!(open.is_empty(), "objects open to unknown fields: {open:?}");
    }
}

fn closed_objects(s: &Value, path: String, open: &mut Vec<String>) {
    match s {
        Value::Object(m) => {
            if m.contains_key("properties") && m.get("additionalProperties") != Some(&false.into())
            {
                open.push(path.clone());
            }
            for (k, v) in m {
                closed_objects(v, format!("{path}/{k}"), open);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                closed_objects(v, format!("{path}/{i}"), open);
            }
        }
        _ => {}
    }
}

#[test]
fn a_renamed_missing_or_unknown_field_fails_validation() {
    let doc = check_document(
        "topo.schema.json",
        &["topo", "--sysfs-root", &fixture("cxl-ram"), "--json"],
    );
    let mut renamed = doc.clone();
    let nodes = renamed.as_object_mut().unwrap().remove("nodes").unwrap();
    renamed["node_list"] = nodes;
    assert!(!violations("topo.schema.json", &renamed).is_empty());

    let mut unknown = doc.clone();
    unknown["cxl"]["memdevs"][0]["serial_number"] = "1".into();
    assert!(!violations("topo.schema.json", &unknown).is_empty());

    // A 64-bit identifier as a number (the old shape) is refused.
    let mut number = doc.clone();
    number["cxl"]["memdevs"][0]["serial"] = 1.into();
    assert!(!violations("topo.schema.json", &number).is_empty());

    let mut version = doc;
    version["schema_version"] = 2.into();
    assert!(!violations("topo.schema.json", &version).is_empty());
}

#[test]
fn topo_on_every_recorded_tree_and_profile() {
    for tree in [
        "cxl-ram",
        "hbm-flat",
        "kernel-6.6-no-hmat",
        "lab-cxl",
        "lab-hmat",
        "old-kernel-hmat",
        "pmem-kmem",
        "this-host",
        "two-socket",
        "garbled",
    ] {
        let doc = check_document(
            "topo.schema.json",
            &["topo", "--sysfs-root", &fixture(tree), "--json"],
        );
        assert_eq!(doc["command"], "topo");
        assert_eq!(doc["schema_version"], 1);
    }
    check_document("topo.schema.json", &["topo", "--json"]);
    let profile = check_document(
        "topo-profile.schema.json",
        &["topo", "--profile", "xeon6-6900p-8xcz122", "--json"],
    );
    assert_eq!(profile["name"], "xeon6-6900p-8xcz122");

    // A profile with a loaded-latency curve on its last tier (as `probe --loaded-latency --out`
    // writes one), between the tier's idle latency and its peak bandwidth.
    let last = profile["tiers"].as_array().unwrap().last().unwrap();
    let idle = last["idle_latency_ns"].as_f64().unwrap();
    let peak = last["bandwidth"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["mix"] == "R")
        .unwrap()["gbps"]
        .as_f64()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("curve.toml");
    let builtin = repo().join("crates/cxltier-profile/profiles/xeon6-6900p-8xcz122.toml");
    let text = std::fs::read_to_string(builtin).unwrap()
        + &format!(
            "\n[[tier.loaded_latency]]\nmix = \"R\"\npoints = [[{}, {}], [{}, {}]]\n",
            peak * 0.1,
            idle * 1.1,
            peak * 0.5,
            idle * 1.5
        );
    std::fs::write(&path, text).unwrap();
    let curve = check_document(
        "topo-profile.schema.json",
        &["topo", "--profile", path.to_str().unwrap(), "--json"],
    );
    let tiers = curve["tiers"].as_array().unwrap();
    assert_eq!(
        tiers.last().unwrap()["loaded_latency"][0]["points"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn topo_watch_lines() {
    let lines = check_lines(
        "topo-watch.schema.json",
        &["topo", "--watch", "0.05", "--count", "2", "--json"],
    );
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|l| l["event"] == "sample"));
    assert!(lines[0]["rates_per_s"].is_null() && lines[1]["rates_per_s"].is_object());
}

#[test]
fn plan_has_one_shape_with_and_without_mix() {
    let all = check_document("plan.schema.json", &["plan", "--json"]);
    let one = check_document("plan.schema.json", &["plan", "--json", "--mix", "2:1"]);
    assert!(all["plans"].as_array().unwrap().len() > 1);
    assert_eq!(one["plans"].as_array().unwrap().len(), 1);
    assert_eq!(one["plans"][0]["mix"], "2:1");
    check_document(
        "plan.schema.json",
        &["plan", "--json", "--mix", "R", "--goal", "latency"],
    );
}

#[test]
fn apply_on_a_scratch_table() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for entry in std::fs::read_dir("/sys/devices/system/node").unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !name.starts_with("node") || !name[4..].bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let dir = root.join("sys/devices/system/node").join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let live = Path::new("/sys/devices/system/node").join(&name);
        for f in ["cpulist", "meminfo"] {
            std::fs::copy(live.join(f), dir.join(f)).unwrap();
        }
    }
    let wi = root.join("sys/kernel/mm/mempolicy/weighted_interleave");
    std::fs::create_dir_all(&wi).unwrap();
    std::fs::write(wi.join("node0"), "1\n").unwrap();
    std::fs::write(wi.join("auto"), "true\n").unwrap();
    let root = root.to_str().unwrap();
    let doc = check_document(
        "apply.schema.json",
        &[
            "apply",
            "--sysfs-root",
            root,
            "--weights",
            "node0=3",
            "--json",
        ],
    );
    assert_eq!(
        doc["nodes"],
        serde_json::json!({"0": {"old": 1, "new": 3, "changed": true}})
    );
    check_document(
        "apply.schema.json",
        &[
            "apply",
            "--sysfs-root",
            root,
            "--weights",
            "node0=5",
            "--dry-run",
            "--json",
        ],
    );
}

#[test]
fn touch_and_show_say_pages_and_bytes_per_node() {
    let doc = check_document("touch.schema.json", &["touch", "1M", "--json"]);
    let pages: u64 = util::sum_values(&doc["pages_per_node"]);
    assert_eq!(pages, doc["pages"].as_u64().unwrap());

    // This test process: `show` reads its numa_maps.
    let pid = std::process::id().to_string();
    let doc = check_document("show.schema.json", &["show", "--pid", &pid, "--json"]);
    let bytes: u64 = util::sum_values(&doc["bytes_per_node"]);
    assert_eq!(bytes, doc["total_bytes"].as_u64().unwrap());
}

#[test]
fn touch_streams() {
    let lines = check_lines(
        "touch-lines.schema.json",
        &[
            "touch",
            "1M",
            "--hot",
            "256K",
            "--shift-every",
            "0.1",
            "--report-every",
            "0.1",
            "--duration",
            "0.3",
            "--json",
        ],
    );
    assert_eq!(lines.last().unwrap()["event"], "hot_set_summary");
    assert!(lines[..lines.len() - 1]
        .iter()
        .all(|l| l["event"] == "hot_set"));

    let dir = tempfile::tempdir().unwrap();
    let progress = dir.path().join("progress");
    let go = dir.path().join("go");
    std::fs::write(&go, "").unwrap();
    let lines = check_lines(
        "touch-lines.schema.json",
        &[
            "touch",
            "1M",
            "--stream",
            "--progress-file",
            progress.to_str().unwrap(),
            "--duration",
            "0.2",
            "--fresh",
            "64K",
            "--fresh-when",
            go.to_str().unwrap(),
            "--json",
        ],
    );
    let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["ready", "fresh_buffer", "stream_summary"]);
    assert_eq!(lines[2]["intact"], true);
}

#[test]
fn touch_chase_lines() {
    let lines = check_lines(
        "touch-lines.schema.json",
        &[
            "touch",
            "1M",
            "--chase",
            "--warmup",
            "0.05",
            "--duration",
            "0.1",
            "--json",
        ],
    );
    let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["ready", "chase_summary"]);
    assert_eq!(lines[1]["lines"], (1 << 20) / 64);
    assert_eq!(lines[1]["intact"], true);
}

#[test]
fn qsim_in_memory_and_out_of_core() {
    let dir = tempfile::tempdir().unwrap();
    let n = 14;
    let mut circuit =
        format!("OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[{n}];\ncreg c[{n}];\nh q[0];\n");
    for q in 1..n {
        circuit += &format!("cx q[{}],q[{q}];\n", q - 1);
    }
    circuit += "measure q -> c;\n";
    let file = dir.path().join("ghz.qasm");
    std::fs::write(&file, circuit).unwrap();
    let file = file.to_str().unwrap();
    let mem = check_document(
        "qsim.schema.json",
        &[
            "qsim",
            file,
            "--amplitudes",
            "0,16383",
            "--shots",
            "10",
            "--json",
        ],
    );
    // Pages per node are a map keyed by node, not a list of pairs.
    assert!(mem["placement"]["pages_per_node"].is_object());
    let ssd = dir.path().to_str().unwrap();
    let ooc = check_document(
        "qsim.schema.json",
        &[
            "qsim",
            file,
            "--memory-limit",
            "64K",
            "--ssd",
            ssd,
            "--amplitudes",
            "0",
            "--json",
        ],
    );
    assert_eq!(ooc["mode"], "out_of_core");
    // Several classical registers: Qiskit's keys, registers separated by a space.
    let regs = dir.path().join("regs.qasm");
    std::fs::write(
        &regs,
        "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[2];\ncreg a[1];\ncreg b[1];\nx q[1];\n\
         measure q[0] -> a[0];\nmeasure q[1] -> b[0];\n",
    )
    .unwrap();
    let doc = check_document(
        "qsim.schema.json",
        &["qsim", regs.to_str().unwrap(), "--shots", "4", "--json"],
    );
    assert_eq!(doc["counts"], serde_json::json!({"1 0": 4}));
    // A dynamic circuit (a condition on a mid-circuit measurement, a reset): its shots' report.
    let dynamic = dir.path().join("dynamic.qasm");
    std::fs::write(
        &dynamic,
        "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[2];\ncreg c[1];\ncreg d[2];\nh q[0];\n\
         measure q[0] -> c[0];\nif(c==1) x q[1];\nreset q[0];\nmeasure q -> d;\n",
    )
    .unwrap();
    for method in ["branches", "trajectories"] {
        let doc = check_document(
            "qsim.schema.json",
            &[
                "qsim",
                dynamic.to_str().unwrap(),
                "--shots",
                "16",
                "--dynamic-method",
                method,
                "--json",
            ],
        );
        assert_eq!(doc["dynamic"]["method"], method);
    }
    let kernels = check_document(
        "qsim-kernels.schema.json",
        &[
            "qsim",
            "--bench-kernels",
            "--bench-qubits",
            "10",
            "--threads",
            "1",
            "--json",
        ],
    );
    assert_eq!(kernels["kernels"].as_array().unwrap().len(), 12);
    let planned = check_document(
        "qsim-plan-cluster.schema.json",
        &[
            "qsim",
            file,
            "--plan-cluster",
            "ranks=2,nodes=2,cores=4,memory=64K,network=12.5G,ssd=2G",
            "--json",
        ],
    );
    assert_eq!(planned["mode"], "out_of_core");
    // A sweep over rank counts: one line per count, each a prediction.
    let lines = check_lines(
        "qsim-plan-cluster.schema.json",
        &[
            "qsim",
            file,
            "--plan-cluster",
            "ranks=1..4,network=12.5G",
            "--json",
        ],
    );
    let ranks: Vec<u64> = lines.iter().map(|l| l["ranks"].as_u64().unwrap()).collect();
    assert_eq!(ranks, [1, 2, 4]);
    assert_eq!(lines[0]["exchanges"], 0);
}

#[test]
fn ras_inventory_and_an_empty_machine() {
    let doc = check_document(
        "ras.schema.json",
        &["ras", "--sysfs-root", &fixture("lab-cxl"), "--json"],
    );
    assert!(doc["devices"][0]["serial"].is_string());
    // This machine: with no CXL memory device, `--json` is an empty inventory and exit 0.
    let has_memdevs = std::fs::read_dir("/sys/bus/cxl/devices").is_ok_and(|d| {
        d.filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with("mem"))
    });
    if !has_memdevs {
        let doc = check_document("ras.schema.json", &["ras", "--json"]);
        assert_eq!(doc["devices"], serde_json::json!([]));
        assert!(doc["warnings"][0]
            .as_str()
            .unwrap()
            .contains("no CXL memory devices"));
    }
}

#[test]
fn store_check_clean_and_damaged() {
    let log = temp_file("cxltier-json-store-", "log");
    write_marked_log(log.as_ref(), 500, 250);
    let path = log.as_ref().to_str().unwrap();
    let clean = check_document(
        "store-check.schema.json",
        &["store", "check", path, "--json"],
    );
    assert_eq!(clean["command"], "store check");
    damage(log.as_ref());
    // A damaged log exits 1 (a start would be refused) with the same document.
    let out = cxltier(&["store", "check", path, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_conforms("store-check.schema.json", &doc);
    assert!(!doc["damaged"].as_array().unwrap().is_empty());
}

/// A `cxltier serve` on a free port, stopped on drop.
struct Server(std::process::Child, String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server() -> Server {
    for _ in 0..5 {
        let port = common::free_port();
        let addr = format!("127.0.0.1:{port}");
        let none = std::env::temp_dir().join(format!("cxltier-json-no-quarantine-{port}.jsonl"));
        let child = Command::new(BIN)
            .args(["serve", "--bind", &addr, "--dram", "64M"])
            .args(["--quarantine-file", none.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut s = Server(child, addr);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            if s.0.try_wait().unwrap().is_some() {
                break; // the port was taken: try another
            }
            match common::who_answers(&s.1, None, s.0.id(), Duration::from_secs(20)) {
                common::Answer::Ours => return s,
                common::Answer::Other => break,
                common::Answer::Nothing => {}
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("no server came up on five free ports");
}

#[test]
fn ycsb_keeps_a_seed_above_2_pow_53_exact() {
    let s = server();
    let addr = s.1.as_str();
    let load = check_document(
        "ycsb.schema.json",
        &[
            "ycsb",
            "load",
            "--workload",
            "a",
            "--records",
            "200",
            "--addr",
            addr,
            "--json",
        ],
    );
    assert_eq!(load["command"], "ycsb");
    // 2^64 - 59: a double holds it as 18446744073709551616.
    let seed = "18446744073709551557";
    let run = check_document(
        "ycsb.schema.json",
        &[
            "ycsb",
            "run",
            "--workload",
            "a",
            "--records",
            "200",
            "--ops",
            "500",
            "--addr",
            addr,
            "--seed",
            seed,
            "--json",
        ],
    );
    assert_eq!(run["seed"], seed);
    let bound = check_document(
        "ycsb-hit-bound.schema.json",
        &[
            "ycsb",
            "hit-bound",
            "--workload",
            "c",
            "--records",
            "1000",
            "--cache-objects",
            "100,500",
            "--draws",
            "5000",
            "--seed",
            seed,
            "--json",
        ],
    );
    assert_eq!(bound["seed"], seed);
    assert_eq!(bound["bounds"].as_array().unwrap().len(), 2);
    let pages = check_document(
        "ycsb-page-bound.schema.json",
        &[
            "ycsb",
            "page-bound",
            "--workload",
            "c",
            "--records",
            "1000",
            "--page-layout",
            "80,450,1120",
            "--cache-pages",
            "10,100",
            "--draws",
            "5000",
            "--seed",
            seed,
            "--json",
        ],
    );
    assert_eq!(pages["seed"], seed);
    let rows = pages["bounds"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    // A larger cache never faults more, and no policy beats the best.
    assert!(rows[1]["best_faults_per_op"].as_f64() <= rows[0]["best_faults_per_op"].as_f64());
    assert!(rows[0]["best_faults_per_op"].as_f64() <= rows[0]["lru_faults_per_op"].as_f64());
}

#[test]
fn probe_report() {
    let args = [
        "probe",
        "--nodes",
        "0",
        "--mixes",
        "R",
        "--buffer",
        "16M",
        "--duration",
        "0.1",
        "--runs",
        "1",
        "--json",
    ];
    let out = cxltier(&args);
    if out.status.code() == Some(2) {
        // The probe refuses to push the kernel into reclaim when the node's free memory (page
        // cache not counted) is short: then the refusal is what there is to check.
        let err: Value = serde_json::from_slice(&out.stderr).unwrap();
        assert_conforms("error.schema.json", &err);
        if err["error"]
            .as_str()
            .unwrap()
            .contains("free, but the probe needs")
        {
            eprintln!("probe report not checked: {}", err["error"]);
            return;
        }
        panic!("{err}");
    }
    let doc = json_of(args, &out);
    assert_conforms("probe.schema.json", &doc);
    assert_eq!(doc["command"], "probe");
}

#[test]
fn errors_under_json_are_one_object_on_stderr() {
    // Bad input found by the command.
    let err = check_error(
        &["plan", "--json", "--mix", "nonsense"],
        2,
        "plan",
        "invalid mix",
    );
    assert!(err["hint"].is_null() || err["hint"].is_string());
    // Bad input found while parsing the arguments.
    let err = check_error(&["topo", "--json", "--bogus"], 2, "topo", "--bogus");
    assert_eq!(err["hint"], "see `cxltier topo --help`");
    // Unsupported: a tree without /proc/vmstat has no counters to watch.
    let err = check_error(
        &[
            "topo",
            "--sysfs-root",
            &fixture("two-socket"),
            "--watch",
            "1",
            "--count",
            "1",
            "--json",
        ],
        4,
        "topo",
        "no counters to sample",
    );
    assert!(err["hint"].as_str().unwrap().contains("/proc"));
    // A tree named explicitly without CXL devices is the user's mistake, with a hint.
    let err = check_error(
        &["ras", "--sysfs-root", &fixture("lab-hmat"), "--json"],
        2,
        "ras",
        "no CXL memory devices",
    );
    assert!(err["hint"].is_string());
    // The error names the command as its document does.
    check_error(
        &["store", "check", "/nonexistent/log", "--json"],
        2,
        "store check",
        "/nonexistent/log",
    );
    check_error(
        &["ycsb", "hit-bound", "--json"],
        2,
        "ycsb hit-bound",
        "--cache-objects",
    );
    check_error(
        &["ycsb", "page-bound", "--json"],
        2,
        "ycsb page-bound",
        "--page-layout",
    );
    // Without --json the error stays text.
    let out = cxltier(&["plan", "--mix", "nonsense"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("cxltier: error: "));
    // `--json` after `--` belongs to the other program.
    let out = cxltier(&["run", "--bind", "99", "--", "true", "--json"]);
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("cxltier: error: "));
}

#[test]
fn a_missing_privilege_under_json_is_the_error_object_with_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let Some(launcher) = build_no_mbind(dir.path()) else {
        return;
    };
    let circuit = dir.path().join("h.qasm");
    std::fs::write(
        &circuit,
        "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[4];\nh q[0];\n",
    )
    .unwrap();
    let args = [
        "qsim",
        circuit.to_str().unwrap(),
        "--interleave",
        "0=1",
        "--json",
    ];
    let Some(out) = without_mbind(&launcher, &args) else {
        return;
    };
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(out.stdout.is_empty());
    let err: Value = serde_json::from_str(text.trim_end())
        .unwrap_or_else(|e| panic!("stderr is not one JSON object ({e}): {text}"));
    assert_conforms("error.schema.json", &err);
    assert_eq!(err["exit_code"], 3);
    assert_eq!(err["command"], "qsim");
    assert!(err["error"].as_str().unwrap().contains("mbind"), "{err}");
}
