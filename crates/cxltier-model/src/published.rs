//! Published measurements the model is checked against (MISSION figures for the Xeon 6 6900P with
//! eight CZ122 CXL modules, built-in profile `xeon6-6900p-8xcz122`). They are used only to report the
//! model's error; nothing in the model is fitted to them.

use crate::model::{Model, Split};
use cxltier_profile::{Mix, Profile};
use serde::Serialize;

/// The built-in profile the published figures were measured on.
pub const XEON6_PROFILE: &str = "xeon6-6900p-8xcz122";

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

/// Measured peak bandwidth (GB/s) of each tier alone by read:write mix: (mix, DRAM, CXL).
pub const XEON6_SINGLE_TIER: &[(&str, f64, f64)] = &[
    ("R", 556.0, 205.0),
    ("3:1", 486.0, 214.0),
    ("2:1", 474.0, 208.0),
    ("2:1nt", 466.0, 189.0),
    ("1:1", 446.0, 214.0),
];

/// Whether the model had a figure as input or had to predict it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FigureKind {
    /// A tier alone: the profile holds this figure, so the model only has to reproduce it.
    Input,
    /// A split over both tiers: nothing in the profile gives it, the model predicts it.
    Predicted,
}

/// One published figure next to the model's prediction.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub mix: Mix,
    pub weights: [u32; 2],
    pub kind: FigureKind,
    pub measured_gbps: f64,
    pub predicted_gbps: f64,
    /// (predicted - measured) / measured.
    pub error: f64,
}

/// Median and largest absolute relative error over a set of figures.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ErrorSummary {
    pub figures: usize,
    pub median_abs_error: f64,
    pub max_abs_error: f64,
}

impl ErrorSummary {
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a Comparison>) -> ErrorSummary {
        let rows: Vec<&Comparison> = rows.into_iter().collect();
        let mut e: Vec<f64> = rows.iter().map(|r| r.error.abs()).collect();
        e.sort_by(f64::total_cmp);
        ErrorSummary {
            figures: e.len(),
            median_abs_error: median_of_sorted(&e),
            max_abs_error: e.last().copied().unwrap_or(0.0),
        }
    }
}

/// The model against every published bandwidth figure: each row, the summary over all of them, and
/// the summary over the predicted ones alone (the inputs say little about the model).
#[derive(Debug, Clone, Serialize)]
pub struct ErrorReport {
    pub profile: String,
    pub all: ErrorSummary,
    pub predicted: ErrorSummary,
    pub rows: Vec<Comparison>,
}

fn compare(model: &Model, mix: Mix, weights: [u32; 2], measured: f64) -> Comparison {
    let predicted = model.peak(&Split(weights.to_vec()), mix).bandwidth_gbps;
    Comparison {
        mix,
        weights,
        kind: if weights.contains(&0) {
            FigureKind::Input
        } else {
            FigureKind::Predicted
        },
        measured_gbps: measured,
        predicted_gbps: predicted,
        error: predicted / measured - 1.0,
    }
}

/// The model's prediction for every row of the published read-only sweep.
pub fn compare_read_sweep(profile: &Profile) -> Vec<Comparison> {
    let model = Model::new(profile);
    XEON6_READ_SWEEP
        .iter()
        .map(|&(weights, measured)| compare(&model, Mix::READ_ONLY, weights, measured))
        .collect()
}

/// The model's prediction for every published figure: the single-tier table (each mix, each tier)
/// and the read-only interleave sweep.
pub fn compare_all(profile: &Profile) -> Vec<Comparison> {
    compare_all_with(&Model::new(profile))
}

/// [`compare_all`] for a model with other shape parameters.
pub fn compare_all_with(model: &Model) -> Vec<Comparison> {
    let mut rows = Vec::new();
    for &(mix, dram, cxl) in XEON6_SINGLE_TIER {
        let mix: Mix = mix.parse().expect("published mixes parse");
        rows.push(compare(model, mix, [1, 0], dram));
        rows.push(compare(model, mix, [0, 1], cxl));
    }
    for &(weights, measured) in XEON6_READ_SWEEP {
        rows.push(compare(model, Mix::READ_ONLY, weights, measured));
    }
    rows
}

/// The error report over every published figure, on the built-in profile they were measured on.
pub fn error_report() -> ErrorReport {
    let profile = Profile::load(XEON6_PROFILE).expect("built-in profile is valid");
    let rows = compare_all(&profile);
    ErrorReport {
        profile: profile.name.clone(),
        all: ErrorSummary::of(&rows),
        predicted: ErrorSummary::of(rows.iter().filter(|r| r.kind == FigureKind::Predicted)),
        rows,
    }
}

/// The model's stated error: the median absolute error over the published figures it predicts (splits
/// over both tiers). Two predictions closer than this cannot be told apart by the model.
pub fn stated_error() -> f64 {
    error_report().predicted.median_abs_error
}

/// Median of the absolute relative errors.
pub fn median_abs_error(rows: &[Comparison]) -> f64 {
    ErrorSummary::of(rows).median_abs_error
}

fn median_of_sorted(e: &[f64]) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_covers_every_published_figure() {
        let report = error_report();
        // Five mixes x two tiers alone, plus the seven-point read sweep.
        assert_eq!(report.rows.len(), 17);
        assert_eq!(report.all.figures, 17);
        // The five splits over both tiers in the sweep are the predicted figures.
        assert_eq!(report.predicted.figures, 5);
        for &(mix, dram, cxl) in XEON6_SINGLE_TIER {
            let mix: Mix = mix.parse().unwrap();
            for (weights, measured) in [([1, 0], dram), ([0, 1], cxl)] {
                assert!(
                    report.rows.iter().any(|r| r.mix == mix
                        && r.weights == weights
                        && r.measured_gbps == measured),
                    "{mix} {weights:?} {measured} missing"
                );
            }
        }
        for &(weights, measured) in XEON6_READ_SWEEP {
            assert!(report.rows.iter().any(|r| r.mix == Mix::READ_ONLY
                && r.weights == weights
                && r.measured_gbps == measured));
        }
    }

    #[test]
    fn median_and_max_come_from_the_rows() {
        let report = error_report();
        let mut errs: Vec<f64> = report.rows.iter().map(|r| r.error.abs()).collect();
        errs.sort_by(f64::total_cmp);
        // 17 figures: the median is the 9th smallest error.
        assert_eq!(report.all.median_abs_error, errs[8]);
        assert_eq!(report.all.max_abs_error, errs[16]);
        // Dropping the worst figure changes the maximum: the summary is not a constant.
        let without_worst: Vec<Comparison> = {
            let worst = report
                .rows
                .iter()
                .map(|r| r.error.abs())
                .fold(0.0, f64::max);
            report
                .rows
                .iter()
                .filter(|r| r.error.abs() != worst)
                .cloned()
                .collect()
        };
        assert!(ErrorSummary::of(&without_worst).max_abs_error < report.all.max_abs_error);
        assert_eq!(stated_error(), report.predicted.median_abs_error);
    }

    #[test]
    fn summary_of_known_errors() {
        let row = |error: f64| Comparison {
            mix: Mix::READ_ONLY,
            weights: [1, 1],
            kind: FigureKind::Predicted,
            measured_gbps: 100.0,
            predicted_gbps: 100.0 * (1.0 + error),
            error,
        };
        let s = ErrorSummary::of(&[row(0.01), row(-0.04), row(0.02), row(0.03)]);
        assert_eq!(s.figures, 4);
        assert!((s.median_abs_error - 0.025).abs() < 1e-12);
        assert!((s.max_abs_error - 0.04).abs() < 1e-12);
    }
}
