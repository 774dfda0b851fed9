//! Print the model's error against the published Xeon 6 read-only sweep as a Markdown table
//! (the table in docs/model.md is produced by `cargo run -p cxltier-model --example validate`).

use cxltier_model::published::{compare_read_sweep, median_abs_error};
use cxltier_model::{plan, Goal, Model, PlanRequest, Split};
use cxltier_profile::{Mix, Profile};

fn main() {
    let p = Profile::load("xeon6-6900p-8xcz122").expect("built-in profile");
    let rows = compare_read_sweep(&p);
    println!("| DRAM:CXL | measured GB/s | predicted GB/s | error |");
    println!("|---|---|---|---|");
    for r in &rows {
        println!(
            "| {}:{} | {:.0} | {:.1} | {:+.1}% |",
            r.weights[0],
            r.weights[1],
            r.measured_gbps,
            r.predicted_gbps,
            r.error * 100.0
        );
    }
    println!(
        "\nmedian absolute error: {:.1}%",
        median_abs_error(&rows) * 100.0
    );

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
        let cand = plan(&p, &req).expect("plan");
        println!(
            "| {} | {} | {:.1} | {:+.1}% | {} | {:.1} | {} | {:.1} |",
            mix,
            Split(cand.recommended.weights.clone()),
            cand.recommended.bandwidth_gbps,
            (cand.recommended.gain_vs_dram_only - 1.0) * 100.0,
            Split(full.recommended.weights.clone()),
            full.recommended.bandwidth_gbps,
            Split(full.kernel_auto.weights.clone()),
            full.kernel_auto.bandwidth_gbps,
        );
    }

    println!("\nLatency-optimal split (read-only) by demand, among 1:0 (DRAM only), 9:1, 4:1, 3:1, 5:2, 2:1, 1:1:");
    println!("\n| demand GB/s | best | latency ns | DRAM-only latency ns |");
    println!("|---|---|---|---|");
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
                "| {demand:.0} | {} | {:.0} | {} |",
                Split(pl.recommended.weights.clone()),
                pl.recommended.latency_ns,
                dram.map_or("saturated".to_string(), |d| format!("{:.0}", d.latency_ns))
            ),
            Err(e) => println!("| {demand:.0} | none: {e} | | |"),
        }
    }
}
