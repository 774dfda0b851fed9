//! SVG line plots for curves and sweeps (weight sweeps now; loaded-latency curves and tier occupancy
//! over time later), because people read curves faster than tables.

use crate::error::CliError;
use plotters::prelude::*;
use std::path::Path;

/// One named curve.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// A point to mark on the curve (the recommended choice).
    pub marked: Option<(f64, f64)>,
    /// Points to mark with a name beside them (the defaults a choice is compared with).
    pub labels: Vec<Label>,
}

/// A named point on a curve.
pub struct Label {
    pub text: String,
    pub at: (f64, f64),
}

/// Write a line plot of `series` to `path` as SVG.
pub fn line_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), CliError> {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for &(x, y) in all() {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() || !y0.is_finite() {
        return Err(CliError::runtime("nothing to plot"));
    }
    let pad = ((y1 - y0) * 0.08).max(1.0);
    let (y0, y1) = ((y0 - pad).max(0.0), y1 + pad);
    let fail = |e: &dyn std::fmt::Display| {
        CliError::runtime(format!("cannot write SVG {}: {e}", path.display()))
            .with_hint("check that the directory exists and is writable")
    };
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| fail(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| fail(&e))?
            .label(s.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 2, color.filled())))
            .map_err(|e| fail(&e))?;
        if let Some(m) = s.marked {
            chart
                .draw_series(std::iter::once(Circle::new(m, 6, color.stroke_width(2))))
                .map_err(|e| fail(&e))?;
        }
        for label in &s.labels {
            chart
                .draw_series(std::iter::once(TriangleMarker::new(
                    label.at,
                    6,
                    color.filled(),
                )))
                .map_err(|e| fail(&e))?;
            chart
                .draw_series(std::iter::once(Text::new(
                    label.text.clone(),
                    label.at,
                    ("sans-serif", 12).into_font().color(&color),
                )))
                .map_err(|e| fail(&e))?;
        }
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}
