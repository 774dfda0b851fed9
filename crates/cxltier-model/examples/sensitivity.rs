//! Sensitivity of the model's error on the published read-only sweep to its two shape parameters
//! (`cargo run -p cxltier-model --example sensitivity`). The defaults are not tuned to this grid; it
//! shows how much the result depends on them.

use cxltier_model::published::{median_abs_error, XEON6_READ_SWEEP};
use cxltier_model::{Model, ModelParams, Split};
use cxltier_profile::{Mix, Profile};

fn main() {
    let p = Profile::load("xeon6-6900p-8xcz122").expect("built-in profile");
    let utils = [0.90, 0.95, 0.98];
    println!(
        "| kappa \\ u_peak | {} |",
        utils.map(|u| format!("{u:.2}")).join(" | ")
    );
    println!("|---|---|---|---|");
    for kappa in [0.05, 0.1, 0.2, 0.4] {
        let mut cells = Vec::new();
        for u in utils {
            let m = Model::with_params(
                &p,
                ModelParams {
                    peak_utilization: u,
                    queueing_factor: kappa,
                },
            );
            let rows: Vec<_> = XEON6_READ_SWEEP
                .iter()
                .map(|&(w, measured)| {
                    let predicted = m.peak(&Split(w.to_vec()), Mix::READ_ONLY).bandwidth_gbps;
                    cxltier_model::published::Comparison {
                        weights: w,
                        measured_gbps: measured,
                        predicted_gbps: predicted,
                        error: predicted / measured - 1.0,
                    }
                })
                .collect();
            let max = rows.iter().map(|r| r.error.abs()).fold(0.0, f64::max);
            cells.push(format!(
                "{:.1}% (max {:.1}%)",
                median_abs_error(&rows) * 100.0,
                max * 100.0
            ));
        }
        println!("| {kappa} | {} |", cells.join(" | "));
    }
}
