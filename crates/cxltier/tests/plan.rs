//! `cxltier plan` as scripts use it: the JSON contract, choices, and bad input.

mod util;
use std::process::Command;
use util::{cxltier, fails, json_ok, stdout_ok};

/// The built-in profile the plans are made for.
const PROFILE: &str = "xeon6-6900p-8xcz122";

/// `plan --profile PROFILE` with `extra`.
fn plan<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    [&["plan", "--profile", PROFILE][..], extra].concat()
}

fn json(args: &[&str]) -> serde_json::Value {
    let v = json_ok(args);
    assert_eq!(v["command"], "plan");
    // With --mix the document has the one shape of every plan: a list of plans, here of one.
    if args.contains(&"--mix") {
        let plans = v["plans"].as_array().expect("plans");
        assert_eq!(plans.len(), 1, "{v}");
        return plans[0].clone();
    }
    v
}

const CANDIDATES: &str = "1:1,2:1,5:2,3:1,4:1";

#[test]
fn json_contract_for_one_mix() {
    let v = json(&plan(&["--mix", "R", "--candidates", CANDIDATES, "--json"]));
    assert_eq!(v["mix"], "R");
    assert_eq!(v["goal"], "bandwidth");
    // 3:1 is the best of the named ratios but the kernel's auto weights are predicted as good: keep them.
    assert_eq!(v["recommended"]["weights"], serde_json::json!([23, 8]));
    assert_eq!(v["recommended"]["action"], "keep auto");
    assert!(v["recommended"]["reason"]
        .as_str()
        .unwrap()
        .contains("23:8"));
    assert!(v["recommended"]["equivalent"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!([3, 1])));
    let gap = v["best_predicted"]["bandwidth_gbps"].as_f64().unwrap()
        / v["kernel_auto"]["bandwidth_gbps"].as_f64().unwrap()
        - 1.0;
    assert!(gap <= v["tolerance"].as_f64().unwrap(), "{gap}");
    assert!(v["tolerance"].as_f64().unwrap() > 0.0);
    assert_eq!(v["model_error"]["all"]["figures"], 17);
    for key in ["median_abs_error", "max_abs_error"] {
        assert!(
            v["model_error"]["predicted"][key].as_f64().is_some(),
            "{key}"
        );
    }
    assert_eq!(
        v["recommended"]["tiers"],
        serde_json::json!(["dram", "cxl"])
    );
    for key in ["bandwidth_gbps", "latency_ns", "gain_vs_dram_only"] {
        assert!(
            v["recommended"][key].as_f64().is_some(),
            "recommended.{key}"
        );
        assert!(
            v["kernel_auto"][key].as_f64().is_some(),
            "kernel_auto.{key}"
        );
    }
    assert_eq!(v["kernel_auto"]["weights"], serde_json::json!([23, 8]));
    let sweep = v["sweep"].as_array().unwrap();
    // The five named ratios plus DRAM only and the kernel's auto weights.
    assert_eq!(sweep.len(), 7);
    for default in [serde_json::json!([1, 0]), serde_json::json!([23, 8])] {
        assert!(sweep.iter().any(|c| c["weights"] == default), "{default}");
    }
    assert!(sweep.iter().all(|c| c["weights"].is_array()
        && c["bandwidth_gbps"].is_f64()
        && c["latency_ns"].is_f64()));
}

#[test]
fn mix_aliases_mean_the_same_mix() {
    let a = json(&plan(&["--mix", "W10", "--json"]));
    let b = json(&plan(&["--mix", "2:1nt", "--json"]));
    assert_eq!(a["mix"], "2:1nt");
    assert_eq!(a["recommended"], b["recommended"]);
}

#[test]
fn default_plan_covers_each_common_mix() {
    let v = json(&plan(&["--json"]));
    let mixes: Vec<&str> = v["plans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["mix"].as_str().unwrap())
        .collect();
    assert_eq!(mixes, ["R", "3:1", "2:1", "1:1", "2:1nt"]);
    // Human output of the main job works without arguments on any machine.
    let text = stdout_ok(&["plan"]);
    assert!(
        text.contains("kernel auto") && text.contains("2:1nt"),
        "{text}"
    );
}

#[test]
fn full_search_respects_max_weight() {
    let v = json(&plan(&["--mix", "1:1", "--max-weight", "4", "--json"]));
    let defaults = [serde_json::json!([1, 0]), serde_json::json!([23, 8])];
    for c in v["sweep"].as_array().unwrap() {
        if defaults.contains(&c["weights"]) {
            continue;
        }
        assert!(c["weights"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| (1..=4).contains(&w.as_u64().unwrap())));
    }
    assert_eq!(v["sweep"].as_array().unwrap().len(), 11 + defaults.len());
}

#[test]
fn latency_goal_prefers_dram_heavy_splits_at_low_load() {
    let v = json(&plan(&[
        "--mix",
        "R",
        "--goal",
        "latency",
        "--demand",
        "50",
        "--candidates",
        "1:1,2:1,3:1,9:1",
        "--json",
    ]));
    // DRAM only is always a candidate, and at low load nothing beats it.
    assert_eq!(v["recommended"]["weights"], serde_json::json!([1, 0]));
    assert_eq!(v["recommended"]["action"], "do not interleave");
    // Among the interleave ratios asked for, the DRAM-heaviest is the fastest.
    let first_named = v["sweep"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["weights"] != serde_json::json!([1, 0]) && c["weights"] != serde_json::json!([23, 8])
        })
        .unwrap();
    assert_eq!(first_named["weights"], serde_json::json!([9, 1]));
    assert_eq!(v["demand_gbps"], 50.0);
}

#[test]
fn latency_goal_for_read_only_never_recommends_worse_than_dram_only() {
    // Full search at the default demand (half of DRAM's peak): every interleave ratio is slower.
    let latency = plan(&["--mix", "R", "--goal", "latency"]);
    let v = json(&[&latency[..], &["--json"]].concat());
    assert_eq!(v["recommended"]["action"], "do not interleave");
    assert_eq!(v["recommended"]["weights"], serde_json::json!([1, 0]));
    let dram = v["dram_only"]["latency_ns"].as_f64().unwrap();
    for c in v["sweep"].as_array().unwrap() {
        if let Some(l) = c["latency_at_demand_ns"].as_f64() {
            assert!(
                l >= dram,
                "{} at {l} ns beats DRAM only at {dram} ns",
                c["weights"]
            );
        }
    }
    let text = String::from_utf8(cxltier(&latency).stdout).unwrap();
    assert!(text.contains("do not interleave"), "{text}");
}

#[test]
fn equivalents_and_tolerance() {
    // 1:1 mix among the published ratios: 5:2 and 2:1 are under 1% apart, well inside the error.
    let args = |tolerance: &'static str| {
        let mut a = plan(&["--mix", "1:1", "--candidates", CANDIDATES, "--json"]);
        if !tolerance.is_empty() {
            a.extend(["--tolerance", tolerance]);
        }
        a
    };
    let v = json(&args(""));
    assert_eq!(v["recommended"]["action"], "interleave");
    assert_eq!(v["recommended"]["weights"], serde_json::json!([5, 2]));
    assert!(v["recommended"]["equivalent"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!([2, 1])));
    // With a zero tolerance nothing is equivalent.
    let strict = json(&args("0"));
    assert_eq!(strict["recommended"]["equivalent"], serde_json::json!([]));
    assert_eq!(strict["tolerance"], 0.0);
    fails(
        &args("-1"),
        2,
        "--tolerance must be a non-negative percentage",
    );
}

#[test]
fn bad_input_is_named() {
    for (args, needle) in [
        (vec!["plan", "--mix", "3:x"], "invalid mix \"3:x\""),
        (plan(&["--goal", "speed"]), "unknown goal"),
        (plan(&["--candidates", "3:1,7"]), "expected 2 weights"),
        (plan(&["--max-weight", "0"]), "--max-weight"),
        (
            plan(&["--mix", "R", "--goal", "latency", "--demand", "5000"]),
            "no candidate can carry",
        ),
        (vec!["plan", "--profile", "no-such"], "no such profile"),
    ] {
        fails(&args, 2, needle);
    }
}

#[test]
fn malformed_and_single_tier_profiles() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "format = 1\nname = \"x\"\n[[tier]]\nname = \"d\"\nkind = \"dram\"\ncapacity_gib = 1\nidle_latency_ns = -3\n[tier.bandwidth_gbps]\nR = 5\n").unwrap();
    fails(
        &["plan", "--profile", bad.to_str().unwrap()],
        2,
        &format!("{}:7:", bad.display()),
    );
    let single = dir.join("single.toml");
    std::fs::write(&single, "format = 1\nname = \"x\"\n[[tier]]\nname = \"d\"\nkind = \"dram\"\ncapacity_gib = 1\nidle_latency_ns = 90\n[tier.bandwidth_gbps]\nR = 5\n").unwrap();
    fails(
        &["plan", "--profile", single.to_str().unwrap()],
        4,
        "single memory tier",
    );
}

#[test]
fn svg_sweep_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("sweep.svg");
    stdout_ok(&plan(&["--svg", path.to_str().unwrap()]));
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(
        svg.starts_with("<svg")
            && svg.contains("mix R (keep auto 23:8)")
            && svg.contains("DRAM only")
            && svg.contains("auto 23:8"),
        "{}",
        &svg[..200.min(svg.len())]
    );
}

/// A reader that goes away (`cxltier plan --json | head -1`) ends the report quietly, by SIGPIPE
/// as C tools end, not by a panic on EPIPE with a backtrace on stderr.
#[test]
fn a_report_whose_reader_left_ends_by_sigpipe_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    for args in [
        &["plan", "--json"][..],
        &["topo", "--json"][..],
        &["plan"][..],
    ] {
        // The read end is closed before the command starts: its first write finds no reader.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(util::BIN)
            .args(args)
            .stdout(writer)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(
            out.status.signal(),
            Some(13),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}
