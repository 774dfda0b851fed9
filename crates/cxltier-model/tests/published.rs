//! The model against the published Xeon 6 figures (targets of the foundation issue).

use cxltier_model::published::{compare_read_sweep, median_abs_error};
use cxltier_model::{plan, Goal, PlanRequest};
use cxltier_profile::{Mix, Profile};

fn xeon6() -> Profile {
    Profile::load("xeon6-6900p-8xcz122").unwrap()
}

#[test]
fn read_sweep_median_error_is_at_most_5_percent() {
    let rows = compare_read_sweep(&xeon6());
    let median = median_abs_error(&rows);
    for r in &rows {
        eprintln!(
            "{:?} measured {} predicted {:.1} error {:+.1}%",
            r.weights,
            r.measured_gbps,
            r.predicted_gbps,
            r.error * 100.0
        );
    }
    assert!(median <= 0.05, "median abs error {:.2}%", median * 100.0);
}

/// The best-predicted of the candidates the request named (the planner adds DRAM only and the kernel's
/// auto weights to every sweep; the published results rank interleave ratios among themselves).
fn best_named(plan: &cxltier_model::WeightPlan, req: &PlanRequest) -> cxltier_model::Candidate {
    let named = req.candidates.as_ref().unwrap();
    plan.sweep
        .iter()
        .find(|c| named.contains(&c.weights))
        .unwrap()
        .clone()
}

fn candidates() -> Option<Vec<Vec<u32>>> {
    Some(vec![
        vec![1, 1],
        vec![2, 1],
        vec![5, 2],
        vec![3, 1],
        vec![4, 1],
    ])
}

#[test]
fn planner_picks_the_measured_best_among_the_published_candidates() {
    let p = xeon6();
    let mut req = PlanRequest::new(Mix::READ_ONLY, Goal::Bandwidth);
    req.candidates = candidates();
    let plan = plan(&p, &req).unwrap();
    let best = best_named(&plan, &req);
    assert_eq!(best.weights, vec![3, 1]);
    // Published: +24% read bandwidth over DRAM alone.
    assert!(
        (best.gain_vs_dram_only - 1.24).abs() < 0.06,
        "{}",
        best.gain_vs_dram_only
    );
}

#[test]
fn the_optimum_moves_with_the_mix() {
    // Published: read-only wants 3:1; mixed read/write wants 5:2 or 2:1 and gains up to 39%.
    let p = xeon6();
    let best = |mix: &str| {
        let mut req = PlanRequest::new(mix.parse().unwrap(), Goal::Bandwidth);
        req.candidates = candidates();
        best_named(&plan(&p, &req).unwrap(), &req)
    };
    assert_eq!(best("R").weights, vec![3, 1]);
    for mix in ["2:1", "1:1"] {
        let b = best(mix);
        assert!(
            b.weights == vec![5, 2] || b.weights == vec![2, 1],
            "{mix}: {:?}",
            b.weights
        );
        assert!(
            b.gain_vs_dram_only > 1.25 && b.gain_vs_dram_only < 1.50,
            "{mix}: {}",
            b.gain_vs_dram_only
        );
    }
    // Over the full search the read-only optimum is DRAM-heavier than the write-heavy optimum.
    let ratio = |mix: &str| {
        let plan = plan(&p, &PlanRequest::new(mix.parse().unwrap(), Goal::Bandwidth)).unwrap();
        f64::from(plan.best_predicted.weights[0]) / f64::from(plan.best_predicted.weights[1])
    };
    assert!(
        ratio("R") > ratio("1:1"),
        "R {} vs 1:1 {}",
        ratio("R"),
        ratio("1:1")
    );
}

#[test]
fn at_low_load_the_dram_heaviest_split_has_the_lowest_latency() {
    // Published: at low load 9:1 gave the lowest latency among the interleave ratios tried.
    let p = xeon6();
    let mut req = PlanRequest::new(Mix::READ_ONLY, Goal::Latency);
    req.candidates = Some(vec![
        vec![1, 1],
        vec![2, 1],
        vec![3, 1],
        vec![5, 2],
        vec![4, 1],
        vec![9, 1],
    ]);
    for demand in [20.0, 100.0, 250.0] {
        req.demand_gbps = Some(demand);
        assert_eq!(
            best_named(&plan(&p, &req).unwrap(), &req).weights,
            vec![9, 1],
            "at {demand} GB/s"
        );
    }
    // Near saturation the latency optimum moves toward the bandwidth optimum.
    req.demand_gbps = Some(640.0);
    let w = best_named(&plan(&p, &req).unwrap(), &req).weights;
    assert!(w != vec![9, 1], "at 640 GB/s: {w:?}");
}
