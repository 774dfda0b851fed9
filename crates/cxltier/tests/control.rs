//! The control commands (`apply`, `run`, `show`, `touch`) run for real on this machine.
//!
//! Memory policy, page placement and process inspection use the live kernel. Writes to the
//! weighted-interleave table go to a scratch sysfs tree (`--sysfs-root`), never to this machine's
//! `/sys`: the lab suite checks real table writes inside a throwaway kernel.

mod util;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use util::{assert_ok, assert_refused, cxltier, fails, json_of, json_ok, stderr, stdout_ok, BIN};

const WI: &str = "sys/kernel/mm/mempolicy/weighted_interleave";

/// The live kernel's weighted-interleave weight of node 0, if it has the table.
fn live_weight0() -> Option<u32> {
    std::fs::read_to_string(Path::new("/").join(WI).join("node0"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
}

/// A scratch sysfs tree mirroring this machine's memory nodes, with a weighted-interleave table
/// (in `tempfile`'s directory, removed on drop).
struct Tree(tempfile::TempDir);

impl Tree {
    fn new(tag: &str, weights: &[(u32, u32)], auto: Option<&str>) -> Tree {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("cxltier-control-test-{tag}-"))
            .tempdir()
            .unwrap();
        let root = tmp.path().to_path_buf();
        let nodes = root.join("sys/devices/system/node");
        for id in live_nodes() {
            let dir = nodes.join(format!("node{id}"));
            std::fs::create_dir_all(&dir).unwrap();
            let live = Path::new("/sys/devices/system/node").join(format!("node{id}"));
            for f in ["cpulist", "meminfo"] {
                std::fs::copy(live.join(f), dir.join(f)).unwrap();
            }
        }
        let wi = root.join(WI);
        std::fs::create_dir_all(&wi).unwrap();
        for (n, w) in weights {
            std::fs::write(wi.join(format!("node{n}")), format!("{w}\n")).unwrap();
        }
        if let Some(a) = auto {
            std::fs::write(wi.join("auto"), a).unwrap();
        }
        Tree(tmp)
    }
    fn root(&self) -> &str {
        self.0.path().to_str().unwrap()
    }
    fn weight(&self, node: u32) -> String {
        std::fs::read_to_string(self.0.path().join(WI).join(format!("node{node}")))
            .unwrap()
            .trim()
            .to_string()
    }
    fn file(&self, name: &str) -> PathBuf {
        self.0.path().join(WI).join(name)
    }
}

/// This machine's NUMA nodes with memory.
fn live_nodes() -> Vec<u32> {
    let mut ids: Vec<u32> = std::fs::read_dir("/sys/devices/system/node")
        .unwrap()
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse()
                .ok()
        })
        .collect();
    ids.sort_unstable();
    ids
}

// ---- touch ----

#[test]
fn touch_16m_lands_every_page_on_this_machines_nodes() {
    let v = json_ok(&["touch", "16M", "--json"]);
    assert_eq!(v["bytes"], 16 << 20);
    let page = v["page_size"].as_u64().unwrap();
    assert_eq!(v["pages"].as_u64().unwrap(), (16 << 20) / page);
    assert_eq!(v["failed"], 0);
    assert_eq!(v["policy"], "default");
    assert!(v["policy_nodes"].as_array().unwrap().is_empty());
    let nodes = v["pages_per_node"].as_object().unwrap();
    let total: u64 = nodes.values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(total, v["pages"].as_u64().unwrap());
    if live_nodes() == [0] {
        assert_eq!(nodes.len(), 1);
        assert_eq!(v["pages_per_node"]["0"], v["pages"]);
    }
}

#[test]
fn touch_prints_a_table_for_people() {
    let text = stdout_ok(&["touch", "4M"]);
    assert!(text.starts_with("touched 4 MiB ("), "{text}");
    assert!(text.contains("node  pages"), "{text}");
    assert!(text.contains('%'), "{text}");
}

#[test]
fn touch_accepts_size_forms() {
    for (size, bytes) in [("4096", 4096u64), ("64K", 64 << 10), ("1MiB", 1 << 20)] {
        let v = json_ok(&["touch", size, "--json"]);
        assert_eq!(v["bytes"], bytes, "{size}");
    }
}

#[test]
fn touch_rejects_nonsense_sizes() {
    for bad in ["64Q", "lots", "0", "1.2.3G", "64 megabytes"] {
        fails(&["touch", bad], 2, "invalid size");
    }
    // A leading '-' reads as an option: still bad input.
    fails(&["touch", "-1M"], 2, "");
    fails(&["touch", "4K", "--hold", "-1"], 2, "");
}

// ---- run ----

#[test]
fn run_bind_0_touch() {
    let v = json_ok(&["run", "--bind", "0", "--", BIN, "touch", "8M", "--json"]);
    assert_eq!(v["policy"], "bind");
    assert_eq!(v["policy_nodes"], serde_json::json!([0]));
    assert_eq!(v["pages_per_node"]["0"], v["pages"]);
    assert_eq!(v["failed"], 0);
}

#[test]
fn run_interleave_and_preferred_set_their_modes() {
    let v = json_ok(&["run", "--interleave", "--", BIN, "touch", "1M", "--json"]);
    assert_eq!(v["policy"], "interleave");
    let nodes: Vec<Value> = live_nodes().into_iter().map(Value::from).collect();
    assert_eq!(v["policy_nodes"], Value::Array(nodes));
    let v = json_ok(&[
        "run",
        "--preferred",
        "0",
        "--",
        BIN,
        "touch",
        "1M",
        "--json",
    ]);
    assert_eq!(v["policy"], "preferred");
    assert_eq!(v["pages_per_node"]["0"], v["pages"]);
}

#[test]
fn run_without_dashes_passes_the_commands_own_flags() {
    let v = json_ok(&["run", "--bind", "0", BIN, "touch", "1M", "--json"]);
    assert_eq!(v["policy"], "bind");
}

#[test]
fn run_weights_matching_the_table_needs_no_write() {
    let Some(w) = live_weight0() else {
        // A kernel without weighted interleave: a clear "unsupported".
        fails(
            &["run", "--weights", "1", "--", "true"],
            4,
            "weighted interleave",
        );
        return;
    };
    if live_nodes() != [0] {
        return; // the lab suite covers multi-node machines
    }
    let w = w.to_string();
    let args = ["run", "--weights", &w, "--", BIN, "touch", "8M", "--json"];
    let out = cxltier(&args);
    let v = json_of(args, &out);
    assert!(
        !stderr(&out).contains("system-wide"),
        "no table change: {}",
        stderr(&out)
    );
    assert_eq!(v["policy"], "weighted-interleave");
    assert_eq!(v["policy_nodes"], serde_json::json!([0]));
    assert_eq!(v["pages_per_node"]["0"], v["pages"]);
}

#[test]
fn run_bind_to_missing_node_exits_2_naming_it() {
    let args = ["run", "--bind", "5", "--", "true"];
    assert_refused(
        args,
        &cxltier(&args),
        2,
        &["node 5 does not exist", "memory nodes"],
    );
}

#[test]
fn run_rejects_bad_node_lists_and_weight_counts() {
    fails(&["run", "--bind", "0-x", "--", "true"], 2, "");
    let n = live_nodes().len();
    let weights = vec!["1"; n + 1].join(":");
    // Without weighted interleave the count is still checked first (it is bad input anyway).
    fails(
        &["run", "--weights", &weights, "--", "true"],
        2,
        "weight(s) for nodes",
    );
    let out = cxltier(&["run", "--weights", "0", "--", "true"]);
    assert!(
        matches!(out.status.code(), Some(2) | Some(4)),
        "{}",
        stderr(&out)
    );
}

#[test]
fn run_needs_a_policy_and_a_command() {
    for args in [
        &["run", "--", "true"][..],
        &["run", "--bind", "0"],
        &["run", "--bind", "0", "--preferred", "0", "--", "true"],
    ] {
        fails(args, 2, "");
    }
}

#[test]
fn run_passes_the_exit_status_through() {
    let out = cxltier(&["run", "--bind", "0", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let out = cxltier(&["run", "--bind", "0", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(stderr(&out).contains("/nonexistent/program"));
}

#[test]
fn run_help_documents_the_global_table() {
    let out = cxltier(&["run", "--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("ONE global weight table"), "{help}");
    assert!(help.contains("writes the previous weights back"), "{help}");
    assert!(help.contains("SIGKILL"), "{help}");
}

#[test]
fn run_with_a_table_change_writes_then_restores() {
    if live_weight0().is_none() || live_nodes() != [0] {
        return; // needs a kernel with weighted interleave; the lab suite covers the rest
    }
    let tree = Tree::new("run-change", &[(0, 1)], Some("true\n"));
    let w0 = tree.file("node0");
    let script = format!("cat {}; exit 3", w0.display());
    let out = cxltier(&[
        "run",
        "--sysfs-root",
        tree.root(),
        "--weights",
        "3",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "3",
        "the child ran under weight 3"
    );
    let err = stderr(&out);
    assert!(err.contains("system-wide"), "{err}");
    assert!(err.contains("node0 1 -> 3"), "{err}");
    assert!(err.contains("auto: on -> off"), "{err}");
    assert!(
        err.contains("restored the weighted-interleave table: node0 3 -> 1"),
        "{err}"
    );
    assert_eq!(tree.weight(0), "1");
    assert_eq!(
        std::fs::read_to_string(tree.file("auto")).unwrap().trim(),
        "1"
    );
}

#[test]
fn run_forwards_sigterm_and_still_restores() {
    if live_weight0().is_none() || live_nodes() != [0] {
        return;
    }
    let tree = Tree::new("run-signal", &[(0, 2)], None);
    let mut child = Command::new(BIN)
        .args([
            "run",
            "--sysfs-root",
            tree.root(),
            "--weights",
            "node0=9",
            "--",
            "sleep",
            "30",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while tree.weight(0) != "9" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "weight never written"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "the child was not stopped"
    );
    assert_eq!(status.signal(), Some(15), "dies by the child's signal");
    assert_eq!(tree.weight(0), "2", "restored after the signal");
}

#[test]
fn run_restores_when_the_command_cannot_start() {
    if live_weight0().is_none() || live_nodes() != [0] {
        return;
    }
    let tree = Tree::new("run-nocmd", &[(0, 1)], None);
    let out = cxltier(&[
        "run",
        "--sysfs-root",
        tree.root(),
        "--weights",
        "4",
        "--",
        "/nonexistent/program",
    ]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    assert_eq!(tree.weight(0), "1");
}

#[test]
fn run_plan_needs_two_tiers() {
    if live_nodes().len() != 1 {
        return;
    }
    let out = cxltier(&["run", "--plan", "R", "--", "true"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
}

// ---- show ----

/// Start `cxltier touch SIZE --json --hold 30` and return it with its report.
fn holding_touch(size: &str) -> (std::process::Child, Value) {
    let mut child = Command::new(BIN)
        .args(["touch", size, "--json", "--hold", "30"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut text = String::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let end = line == "}";
        text.push_str(&line);
        text.push('\n');
        if end {
            break;
        }
    }
    (child, serde_json::from_str(&text).expect("touch JSON"))
}

/// A child process killed and reaped when dropped, a failed assertion included.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn show_sees_the_memory_of_a_holding_touch() {
    let (child, touched) = holding_touch("16M");
    let _reaped = Reaped(child);
    let pid = touched["pid"].as_u64().unwrap().to_string();
    let v = json_ok(&["show", "--pid", &pid, "--json"]);
    let human = cxltier(&["show", &pid]);

    assert_eq!(v["pid"].as_u64().unwrap().to_string(), pid);
    assert_eq!(v["command"], "show");
    assert_eq!(v["process_name"], "cxltier");
    let total = v["total_bytes"].as_u64().unwrap();
    assert!(total >= 16 << 20, "{total}");
    let by_node: u64 = util::sum_values(&v["bytes_per_node"]);
    assert_eq!(by_node, total);
    let mappings = v["mappings"].as_array().unwrap();
    let touched_map = mappings
        .iter()
        .find(|m| m["bytes"].as_u64() == Some(16 << 20))
        .expect("a mapping holding exactly the 16 MiB touched");
    assert_eq!(touched_map["kind"], "anon");
    assert!(touched_map["start"].as_str().unwrap().starts_with("0x"));
    assert!(touched_map["end"].as_str().unwrap().starts_with("0x"));
    assert_eq!(touched_map["policy"], "default");
    if live_nodes() == [0] {
        assert_eq!(touched_map["bytes_per_node"]["0"], 16 << 20);
    }
    assert!(mappings.iter().any(|m| m["kind"] == "file"));
    assert!(mappings.iter().any(|m| m["kind"] == "stack"));

    // The summary by kind: every kind, adding up to the total, per node too; the touched
    // memory is private anonymous.
    let by_kind = v["by_kind"].as_object().unwrap();
    let mut kinds: Vec<&str> = by_kind.keys().map(String::as_str).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["anon", "file", "heap", "huge", "other", "stack"]);
    let kind_sum: u64 = by_kind.values().map(|k| k["bytes"].as_u64().unwrap()).sum();
    assert_eq!(kind_sum, total);
    for (node, bytes) in v["bytes_per_node"].as_object().unwrap() {
        let per_kind: u64 = by_kind
            .values()
            .map(|k| k["bytes_per_node"][node].as_u64().unwrap())
            .sum();
        assert_eq!(Some(per_kind), bytes.as_u64(), "node {node}");
    }
    assert!(by_kind["anon"]["bytes"].as_u64().unwrap() >= 16 << 20);
    assert!(by_kind["file"]["bytes"].as_u64().unwrap() > 0);

    assert!(human.status.success());
    let text = String::from_utf8(human.stdout).unwrap();
    assert!(
        text.starts_with(&format!(
            "Per-node process memory usage (in MiB) for PID {pid} (cxltier):"
        )),
        "{text}"
    );
    let row = |label: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(label))
            .unwrap_or_else(|| panic!("no {label} row in\n{text}"))
            .to_string()
    };
    // The human table is a second look at a live process: the holder may fault in a page or
    // two of its own code or stack between the two runs, so its Total is held to the JSON's
    // within 1 MiB, and exactly (to the table's rounding) to the sum of its own rows.
    let mut kinds_sum = 0.0;
    for label in ["Heap", "Stack", "Anon", "File", "Huge", "Other", "Total"] {
        let row = row(label);
        let last: f64 = row.split_whitespace().last().unwrap().parse().unwrap();
        if label == "Anon" {
            assert!(last >= 16.0, "{row}");
        }
        if label == "Total" {
            assert!(
                (last - kinds_sum).abs() < 0.035,
                "{row}: the rows add up to {kinds_sum}"
            );
            assert!(
                (last - total as f64 / (1 << 20) as f64).abs() < 1.0,
                "{row}: the JSON said {total} bytes"
            );
        } else {
            kinds_sum += last;
        }
    }
    // The 16 MiB mapping leads the largest mappings; the rest wait for --top or --all.
    let listed = text
        .split("Largest mappings")
        .nth(1)
        .unwrap_or_else(|| panic!("no largest mappings in\n{text}"));
    let first_row = listed.lines().nth(2).unwrap();
    assert!(
        first_row.contains(" anon ") && first_row.contains("16.00"),
        "{text}"
    );
    let rows = |args: &[&str]| {
        let out = cxltier(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let text = String::from_utf8(out.stdout).unwrap();
        let rows = text
            .lines()
            .skip_while(|l| !l.starts_with("mapping"))
            .skip(1)
            .take_while(|l| !l.starts_with('('))
            .count();
        (rows, text)
    };
    let (ten, _) = rows(&["show", &pid]);
    assert_eq!(ten, 10, "--top defaults to 10");
    let (three, _) = rows(&["show", &pid, "--top", "3"]);
    assert_eq!(three, 3);
    let (every, all_text) = rows(&["show", &pid, "--all"]);
    assert_eq!(every, mappings.len(), "{all_text}");
}

#[test]
fn show_arguments_are_checked() {
    let pid = std::process::id().to_string();
    for (args, why) in [
        (vec!["show"], "PID"),
        (vec!["show", &pid, "--pid", &pid], "cannot be used with"),
        (
            vec!["show", &pid, "--top", "3", "--all"],
            "cannot be used with",
        ),
        (
            vec!["show", &pid, "--top=-1"],
            "invalid value '-1' for '--top <N>'",
        ),
        (vec!["show", "self"], "invalid value 'self'"),
    ] {
        fails(&args, 2, why);
    }
}

#[test]
fn show_of_a_missing_process_exits_2() {
    fails(
        &["show", "--pid", "2147483646"],
        2,
        "no process with pid 2147483646",
    );
}

// ---- apply ----

#[test]
fn apply_zero_weight_dry_run_exits_2() {
    let args = ["apply", "--weights", "node0=0", "--dry-run"];
    if live_weight0().is_none() {
        fails(&args, 4, "");
        return;
    }
    fails(&args, 2, "weight 0 for node 0");
}

#[test]
fn apply_dry_run_on_the_live_table_changes_nothing() {
    let Some(w) = live_weight0() else { return };
    let other = if w == 255 { 254 } else { w + 1 };
    let v = json_ok(&[
        "apply",
        "--weights",
        &format!("node0={other}"),
        "--dry-run",
        "--json",
    ]);
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["changed"], true);
    assert_eq!(v["nodes"]["0"]["old"], w);
    assert_eq!(v["nodes"]["0"]["new"], other);
    assert_eq!(live_weight0(), Some(w), "the dry run wrote nothing");
}

#[test]
fn apply_writes_shows_old_and_new_and_warns() {
    let tree = Tree::new("apply", &[(0, 1), (1, 1)], Some("true\n"));
    let args = [
        "apply",
        "--sysfs-root",
        tree.root(),
        "--weights",
        "node0=3,node1=1",
        "--json",
    ];
    let out = cxltier(&args);
    let v = json_of(args, &out);
    assert!(stderr(&out).contains("system-wide"), "{}", stderr(&out));
    assert_eq!(v["dry_run"], false);
    assert_eq!(v["changed"], true);
    assert_eq!(
        v["nodes"],
        serde_json::json!({
            "0": {"old": 1, "new": 3, "changed": true},
            "1": {"old": 1, "new": 1, "changed": false}
        })
    );
    assert_eq!(v["auto"], serde_json::json!({"old": true, "new": false}));
    assert_eq!(
        v["undo"].as_str().unwrap().split(" --sysfs-root").next(),
        Some("cxltier apply --auto")
    );
    assert_eq!(tree.weight(0), "3");
    assert_eq!(tree.weight(1), "1");

    // Human form; the same weights again change nothing.
    let out = cxltier(&["apply", "--sysfs-root", tree.root(), "--weights", "node0=3"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("nothing to change"), "{text}");
    assert!(!stderr(&out).contains("system-wide"));
}

#[test]
fn apply_dry_run_on_a_tree_writes_nothing() {
    let tree = Tree::new("apply-dry", &[(0, 1)], None);
    let text = stdout_ok(&[
        "apply",
        "--sysfs-root",
        tree.root(),
        "--weights",
        "node0=5",
        "--dry-run",
    ]);
    assert!(text.contains("dry run: nothing written"), "{text}");
    assert!(text.contains("would change"), "{text}");
    assert_eq!(tree.weight(0), "1");
}

#[test]
fn apply_bad_input_changes_nothing() {
    let tree = Tree::new("apply-bad", &[(0, 1), (1, 1)], None);
    for (spec, code, needle) in [
        ("node0=3,node7=1", 2, "node 7 has no weight"),
        ("node0=3,node1=0", 2, "weight 0 for node 1"),
        ("node0=300", 2, "weight 300 for node 0"),
        ("node0=3,node0=2", 2, "more than once"),
        ("node0:3", 2, "invalid weights"),
    ] {
        fails(
            &["apply", "--sysfs-root", tree.root(), "--weights", spec],
            code,
            needle,
        );
        assert_eq!((tree.weight(0), tree.weight(1)), ("1".into(), "1".into()));
    }
    let out = cxltier(&[
        "apply",
        "--sysfs-root",
        tree.root(),
        "--weights",
        "node0=3,node7=1",
    ]);
    assert!(
        stderr(&out).contains("nodes with weights: 0-1"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn apply_on_a_kernel_without_weighted_interleave_exits_4() {
    let tree = Tree::new("apply-nowi", &[], None);
    std::fs::remove_dir(tree.0.path().join(WI)).unwrap();
    fails(
        &[
            "apply",
            "--sysfs-root",
            tree.root(),
            "--weights",
            "node0=3",
            "--dry-run",
        ],
        4,
        "this kernel has no weighted interleave (Linux 6.9+ with CONFIG_NUMA;",
    );
}

#[test]
fn apply_rolls_back_a_partial_write() {
    // node2 reads as a valid weight but refuses writes even from root: a read-only sysctl.
    let readonly = Path::new("/proc/sys/kernel/cap_last_cap");
    let Some(w2) = std::fs::read_to_string(readonly)
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        .filter(|w| (1..=254).contains(w))
    else {
        return;
    };
    let tree = Tree::new("apply-rollback", &[(0, 1), (1, 1)], None);
    std::os::unix::fs::symlink(readonly, tree.file("node2")).unwrap();
    let spec = format!("node0=3,node1=2,node2={}", w2 + 1);
    let args = ["apply", "--sysfs-root", tree.root(), "--weights", &spec];
    assert_refused(
        args,
        &cxltier(&args),
        1,
        &["node2", "rolled back node1=1,node0=1"],
    );
    assert_eq!((tree.weight(0), tree.weight(1)), ("1".into(), "1".into()));
}

#[test]
fn apply_weights_and_plan_are_exclusive() {
    fails(&["apply", "--weights", "node0=1", "--plan", "R"], 2, "");
    fails(&["apply"], 2, "");
}

#[test]
fn apply_auto_switches_the_kernel_weights_back_on() {
    let tree = Tree::new("apply-auto", &[(0, 3)], Some("false\n"));
    assert!(
        stdout_ok(&["apply", "--sysfs-root", tree.root(), "--auto"]).contains("auto: off -> on")
    );
    assert_eq!(
        std::fs::read_to_string(tree.file("auto")).unwrap().trim(),
        "1"
    );
    let tree = Tree::new("apply-noauto", &[(0, 3)], None);
    fails(&["apply", "--sysfs-root", tree.root(), "--auto"], 4, "");
}

// ---- without privilege ----

/// Run cxltier as user `nobody` (only when the tests run as root and `setpriv` exists).
fn as_nobody(args: &[&str]) -> Option<Output> {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find(|l| l.starts_with("Uid:"))?
        .split_whitespace()
        .nth(2)?
        == "0";
    if !root {
        return None;
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .args(args)
        .output()
        .ok()?;
    // setpriv missing or not permitted, or the binary unreadable for nobody: skip.
    if out.status.code() == Some(127) || stderr(&out).contains("setpriv:") {
        return None;
    }
    Some(out)
}

#[test]
fn show_of_another_users_process_exits_3() {
    let Some(out) = as_nobody(&["show", "--pid", "1"]) else {
        return;
    };
    assert_refused("show --pid 1 as nobody", &out, 3, &["try sudo"]);
}

#[test]
fn writing_the_live_table_without_root_exits_3_and_changes_nothing() {
    let Some(w) = live_weight0() else { return };
    let other = format!("node0={}", if w == 255 { 254 } else { w + 1 });
    let Some(out) = as_nobody(&["apply", "--weights", &other]) else {
        return;
    };
    assert_refused("apply as nobody", &out, 3, &["needs root (try sudo)"]);
    assert!(
        !stderr(&out).contains("changed a system-wide"),
        "{}",
        stderr(&out)
    );
    let out = as_nobody(&["run", "--weights", &other, "--", "true"]).unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(live_weight0(), Some(w));
    // The dry run needs no root.
    let out = as_nobody(&["apply", "--weights", &other, "--dry-run"]).unwrap();
    assert_ok("apply --dry-run as nobody", &out);
}

/// `touch --hot` is stopped by a signal the way --duration stops it: with its final integrity check
/// and line, exit 0. The lab's tierd check stops it once it has seen what it needs.
#[test]
fn touch_hot_stops_at_sigterm_with_its_final_check() {
    let mut child = Command::new(BIN)
        .args(["touch", "1M", "--hot", "256K", "--shift-every", "0.2"])
        .args(["--report-every", "0.05", "--duration", "3600", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cxltier touch --hot");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    // Two reports: the workload is past its setup and in its loop.
    while lines.len() < 2 {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "touch ended early");
        lines.push(line);
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}, last output: {rest}");
    let last: Value = serde_json::from_str(rest.lines().last().expect("a final line")).unwrap();
    assert_eq!(last["done"], true, "{last}");
    assert_eq!(last["intact"], true, "{last}");
}

/// A scratch tree after the `cxl-ram` fixture (node0: DRAM with CPUs in memory tier 4, node1: CXL
/// in tier 22) with a weight table and the kernel's tiering settings.
fn kernel_tiering_tree(numa_balancing: &str, demotion: &str) -> tempfile::TempDir {
    let (w0, w1) = (format!("{WI}/node0"), format!("{WI}/node1"));
    util::sysfs_copy(
        "cxl-ram",
        &[
            (&w0, "1\n"),
            (&w1, "1\n"),
            ("proc/sys/kernel/numa_balancing", numa_balancing),
            ("sys/kernel/mm/numa/demotion_enabled", demotion),
        ],
    )
}

#[test]
fn apply_warns_when_the_kernel_demotes_interleaved_pages() {
    let tmp = kernel_tiering_tree("2\n", "true\n");
    let root = tmp.path().to_str().unwrap();
    let apply = |root: &str| {
        let args = [
            "apply",
            "--sysfs-root",
            root,
            "--weights",
            "node0=3,node1=1",
            "--dry-run",
            "--json",
        ];
        let out = cxltier(&args);
        (json_of(args, &out), stderr(&out))
    };
    let (v, err) = apply(root);
    assert!(
        err.contains("cxltier apply: warning: the kernel demotes cold pages on node(s) 0")
            && err.contains("`echo false > /sys/kernel/mm/numa/demotion_enabled`"),
        "{err}"
    );
    // NUMA balancing leaves interleaved pages alone (no MPOL_F_MOF): no warning about it.
    assert!(!err.contains("numa_balancing"), "{err}");
    let w = v["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{v}");
    assert!(w[0].as_str().unwrap().contains("demotion_enabled"));

    // Demotion off: no warnings, an empty list.
    let tmp = kernel_tiering_tree("2\n", "false\n");
    let (v, err) = apply(tmp.path().to_str().unwrap());
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(v["warnings"], serde_json::json!([]));
}
