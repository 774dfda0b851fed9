//! Published measurements the model is checked against (MISSION figures for the Xeon 6 6900P with
//! eight CZ122 CXL modules, built-in profile `xeon6-6900p-8xcz122`). They are used only to report the
//! model's error; nothing in the model is fitted to them.

use crate::model::{Model, Split};
use cxltier_profile::{Mix, Profile};
use serde::Serialize;

/// Measured total read-only bandwidth (GB/s) by DRAM:CXL weights.
pub const XEON6_READ_SWEEP: &[([u32; 2], f64)] = &[
    ([1, 0], 556.0),
    ([1, 1], 394.0),
    ([2, 1], 590.0),
    ([5, 2], 669.0),
    ([3, 1], 690.0),
    ([4, 1], 677.0),
    ([0, 1], 205.0),
];

/// One published figure next to the model's prediction.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub weights: [u32; 2],
    pub measured_gbps: f64,
    pub predicted_gbps: f64,
    /// (predicted - measured) / measured.
    pub error: f64,
}

/// The model's prediction for every row of the published read-only sweep.
pub fn compare_read_sweep(profile: &Profile) -> Vec<Comparison> {
    let model = Model::new(profile);
    XEON6_READ_SWEEP
        .iter()
        .map(|&(weights, measured)| {
            let predicted = model
                .peak(&Split(weights.to_vec()), Mix::READ_ONLY)
                .bandwidth_gbps;
            Comparison {
                weights,
                measured_gbps: measured,
                predicted_gbps: predicted,
                error: predicted / measured - 1.0,
            }
        })
        .collect()
}

/// Median of the absolute relative errors.
pub fn median_abs_error(rows: &[Comparison]) -> f64 {
    let mut e: Vec<f64> = rows.iter().map(|r| r.error.abs()).collect();
    e.sort_by(f64::total_cmp);
    let n = e.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        e[n / 2]
    } else {
        0.5 * (e[n / 2 - 1] + e[n / 2])
    }
}
