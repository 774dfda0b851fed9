//! Print the model's error against the published Xeon 6 read-only sweep as a Markdown table
//! (the table in docs/model.md is produced by `cargo run -p cxltier-model --example validate`).

use cxltier_model::published::{error_report, ErrorSummary};
use cxltier_model::{plan, Goal, Model, PlanRequest, Split};
use cxltier_profile::{Mix, Profile};

fn main() {
    let p = Profile::load("xeon6-6900p-8xcz122").expect("built-in profile");
    let report = error_report();
    println!("| mix | DRAM:CXL | input or predicted | measured GB/s | predicted GB/s | error |");
    println!("|---|---|---|---|---|---|");
    for r in &report.rows {
        println!(
            "| {} | {}:{} | {} | {:.0} | {:.1} | {:+.1}% |",
            r.mix,
            r.weights[0],
            r.weights[1],
            match r.kind {
                cxltier_model::published::FigureKind::Input => "input",
                cxltier_model::published::FigureKind::Predicted => "predicted",
            },
            r.measured_gbps,
            r.predicted_gbps,
            r.error * 100.0
        );
    }
    let line = |what: &str, s: &ErrorSummary| {
        println!(
            "{what} ({} figures): median absolute error {:.1}%, max {:.1}%",
            s.figures,
            s.median_abs_error * 100.0,
            s.max_abs_error * 100.0
        )
    };
    println!();
    line("all published figures", &report.all);
    line("predicted figures", &report.predicted);

    println!("\nAdvice per mix, full search (weights 1..=10), bandwidth goal, tolerance = the median error above:");
    println!("\n| mix | advice | weights | GB/s | best predicted | GB/s | equivalent |");
    println!("|---|---|---|---|---|---|---|");
    for mix in Mix::common() {
        let pl = plan(&p, &PlanRequest::new(mix, Goal::Bandwidth)).expect("plan");
        let eq: Vec<String> = pl
            .recommended
            .equivalent
            .iter()
            .map(|w| Split(w.clone()).to_string())
            .collect();
        println!(
            "| {} | {} | {} | {:.1} | {} | {:.1} | {} |",
            mix,
            pl.recommended.action,
            Split(pl.recommended.weights.clone()),
            pl.recommended.bandwidth_gbps,
            Split(pl.best_predicted.weights.clone()),
            pl.best_predicted.bandwidth_gbps,
            eq.join(", ")
        );
    }
    {
        let pl = plan(&p, &PlanRequest::new(Mix::READ_ONLY, Goal::Latency)).expect("plan");
        println!(
            "\nMix R, latency goal at {:.0} GB/s: {} ({}, {:.1} ns); best interleave ratio {:.1} ns.",
            pl.demand_gbps.unwrap_or_default(),
            pl.recommended.action,
            Split(pl.recommended.weights.clone()),
            pl.recommended.latency_ns,
            pl.sweep
                .iter()
                .filter(|c| c.weights.iter().all(|&w| w > 0))
                .filter_map(|c| c.latency_at_demand_ns)
                .fold(f64::INFINITY, f64::min)
        );
    }
    println!("\nBest predictions (before the tolerance):");
    println!("\n| mix | best of 1:1,2:1,5:2,3:1,4:1 | GB/s | gain vs DRAM | best of full search | GB/s | kernel auto | GB/s |");
    println!("|---|---|---|---|---|---|---|---|");
    for mix in Mix::common() {
        let mut req = PlanRequest::new(mix, Goal::Bandwidth);
        let full = plan(&p, &req).expect("plan");
        req.candidates = Some(vec![
            vec![1, 1],
            vec![2, 1],
            vec![5, 2],
            vec![3, 1],
            vec![4, 1],
        ]);
        let named = req.candidates.clone().unwrap();
        let pl = plan(&p, &req).expect("plan");
        let cand = pl
            .sweep
            .iter()
            .find(|c| named.contains(&c.weights))
            .expect("a named candidate");
        println!(
            "| {} | {} | {:.1} | {:+.1}% | {} | {:.1} | {} | {:.1} |",
            mix,
            Split(cand.weights.clone()),
            cand.bandwidth_gbps,
            (cand.gain_vs_dram_only - 1.0) * 100.0,
            Split(full.best_predicted.weights.clone()),
            full.best_predicted.bandwidth_gbps,
            Split(full.kernel_auto.weights.clone()),
            full.kernel_auto.bandwidth_gbps,
        );
    }

    println!("\nLatency-optimal split (read-only) by demand, among 1:0 (DRAM only), 9:1, 4:1, 3:1, 5:2, 2:1, 1:1 and the auto weights:");
    println!("\n| demand GB/s | best predicted | latency ns | DRAM-only latency ns | advice |");
    println!("|---|---|---|---|---|");
    let model = Model::new(&p);
    for demand in [
        10.0, 100.0, 200.0, 300.0, 400.0, 450.0, 500.0, 550.0, 600.0, 650.0, 700.0,
    ] {
        let mut req = PlanRequest::new(Mix::READ_ONLY, Goal::Latency);
        req.demand_gbps = Some(demand);
        req.candidates = Some(vec![
            vec![1, 0],
            vec![9, 1],
            vec![4, 1],
            vec![3, 1],
            vec![5, 2],
            vec![2, 1],
            vec![1, 1],
        ]);
        let dram = model.at_demand(&Split(vec![1, 0]), Mix::READ_ONLY, demand);
        match plan(&p, &req) {
            Ok(pl) => println!(
                "| {demand:.0} | {} | {:.0} | {} | {} {} |",
                Split(pl.best_predicted.weights.clone()),
                pl.best_predicted.latency_ns,
                dram.map_or("saturated".to_string(), |d| format!("{:.0}", d.latency_ns)),
                pl.recommended.action,
                Split(pl.recommended.weights.clone()),
            ),
            Err(e) => println!("| {demand:.0} | none: {e} | | |"),
        }
    }
}
