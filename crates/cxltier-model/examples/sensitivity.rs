//! Sensitivity of the model's error on the published figures (the predicted splits, then all) to its two shape parameters
//! (`cargo run -p cxltier-model --example sensitivity`). The defaults are not tuned to this grid; it
//! shows how much the result depends on them.

use cxltier_model::published::{compare_all_with, ErrorSummary, FigureKind};
use cxltier_model::{Model, ModelParams};
use cxltier_profile::Profile;

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
            let rows = compare_all_with(&m);
            let predicted =
                ErrorSummary::of(rows.iter().filter(|r| r.kind == FigureKind::Predicted));
            let all = ErrorSummary::of(&rows);
            cells.push(format!(
                "{:.1}% (max {:.1}%); all {:.1}% (max {:.1}%)",
                predicted.median_abs_error * 100.0,
                predicted.max_abs_error * 100.0,
                all.median_abs_error * 100.0,
                all.max_abs_error * 100.0
            ));
        }
        println!("| {kappa} | {} |", cells.join(" | "));
    }
}
