//! The loaded-latency sweep: which delays, and how a measured curve becomes profile points.
//!
//! Like MLC, the traffic generators run with an injected delay between requests, from a long delay
//! (memory nearly idle) down to none (saturation), while one thread measures load latency. Each
//! delay gives one (bandwidth, latency) point.
//!
//! A profile only accepts curves that make physical sense (`crates/cxltier-profile/src/raw.rs`):
//! latency at least 0.97x the tier's idle latency, bandwidth at most 1.05x its peak for the mix,
//! bandwidth strictly rising and latency never falling. Measured curves wobble (other programs,
//! frequency changes, the chase's own noise), so [`clean`] keeps the longest subsequence of points
//! that obeys those rules and reports every point it dropped and why.

use serde::Serialize;

/// Injected delays per line, in spin iterations (a few cycles each), from nearly idle to flat out.
/// Geometric, denser near zero where bandwidth climbs fastest.
pub const DELAYS: [u64; 19] = [
    8192, 4096, 2048, 1024, 512, 256, 160, 96, 64, 48, 32, 24, 16, 12, 8, 4, 2, 1, 0,
];

/// The delays to sweep: `DELAYS` thinned to at most `max_points`, always keeping the first (most
/// idle) and the last (no delay), in descending order.
pub fn delays(max_points: usize) -> Vec<u64> {
    let n = DELAYS.len();
    let k = max_points.clamp(2, n);
    if k == n {
        return DELAYS.to_vec();
    }
    let mut out: Vec<u64> = (0..k)
        .map(|i| DELAYS[(i * (n - 1) + (k - 1) / 2) / (k - 1)])
        .collect();
    out[0] = DELAYS[0];
    out[k - 1] = 0;
    out.dedup();
    out
}

/// A curve made fit for a profile.
#[derive(Debug, Clone, Serialize)]
pub struct Cleaned {
    /// `[GB/s, ns]` points by rising bandwidth.
    pub points: Vec<[f64; 2]>,
    /// Points left out, each with the reason.
    pub dropped: Vec<String>,
}

/// Turn measured `(GB/s, ns)` points into a curve a profile accepts for a tier with idle latency
/// `idle_ns` and peak bandwidth `peak_gbps` for the mix. Returns no points (and says why) when
/// fewer than two survive. Values are rounded to 0.01 GB/s and 0.1 ns as written to the profile.
pub fn clean(raw: &[(f64, f64)], idle_ns: f64, peak_gbps: f64) -> Cleaned {
    let mut dropped = Vec::new();
    let mut pts: Vec<(f64, f64)> = Vec::new();
    for &(bw, lat) in raw {
        let (bw, lat) = (round(bw, 100.0), round(lat, 10.0));
        if !(bw.is_finite() && lat.is_finite() && bw >= 0.0 && lat > 0.0) {
            dropped.push(format!("[{bw}, {lat}]: not a measurement"));
        } else if lat < idle_ns * 0.97 {
            dropped.push(format!(
                "[{bw}, {lat}]: latency below 0.97x the idle latency {idle_ns:.1} ns (noise)"
            ));
        } else if bw > peak_gbps * 1.05 {
            dropped.push(format!(
                "[{bw}, {lat}]: bandwidth above 1.05x the measured peak {peak_gbps:.2} GB/s"
            ));
        } else {
            pts.push((bw, lat));
        }
    }
    pts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    // Longest chain with strictly rising bandwidth and non-falling latency (O(n^2); n <= 19).
    let n = pts.len();
    let mut len = vec![1usize; n];
    let mut prev = vec![usize::MAX; n];
    for i in 0..n {
        for j in 0..i {
            if pts[j].0 < pts[i].0 && pts[j].1 <= pts[i].1 && len[j] + 1 > len[i] {
                len[i] = len[j] + 1;
                prev[i] = j;
            }
        }
    }
    let mut keep = vec![false; n];
    if let Some(end) = (0..n).max_by_key(|&i| (len[i], i)) {
        let mut i = end;
        loop {
            keep[i] = true;
            if prev[i] == usize::MAX {
                break;
            }
            i = prev[i];
        }
    }
    let mut points = Vec::new();
    for (i, &(bw, lat)) in pts.iter().enumerate() {
        if keep[i] {
            points.push([bw, lat]);
        } else {
            dropped.push(format!(
                "[{bw}, {lat}]: out of order (bandwidth must rise and latency never fall along the curve)"
            ));
        }
    }
    if points.len() < 2 {
        for p in points.drain(..) {
            dropped.push(format!(
                "[{}, {}]: fewer than two consistent points; no curve written",
                p[0], p[1]
            ));
        }
    }
    Cleaned { points, dropped }
}

fn round(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_run_from_idle_to_flat_out() {
        let all = delays(100);
        assert_eq!(all, DELAYS.to_vec());
        assert!(all.windows(2).all(|w| w[0] > w[1]));
        let few = delays(5);
        assert_eq!(few.len(), 5);
        assert_eq!(few[0], 8192);
        assert_eq!(*few.last().unwrap(), 0);
        assert!(few.windows(2).all(|w| w[0] > w[1]), "{few:?}");
        assert_eq!(delays(1), vec![8192, 0]);
    }

    #[test]
    fn a_clean_curve_is_kept_whole() {
        let raw = [(1.0, 100.0), (5.0, 105.0), (9.0, 130.0), (10.0, 200.0)];
        let c = clean(&raw, 100.0, 10.0);
        assert_eq!(c.points.len(), 4);
        assert!(c.dropped.is_empty());
    }

    #[test]
    fn noise_and_impossible_points_are_dropped_with_reasons() {
        let raw = [
            (0.5, 90.0), // below 0.97 x idle
            (1.0, 101.0),
            (3.0, 99.5), // latency dips: out of order
            (5.0, 110.0),
            (8.0, 150.0),
            (12.0, 300.0), // above 1.05 x peak
        ];
        let c = clean(&raw, 100.0, 10.0);
        assert_eq!(c.points, vec![[1.0, 101.0], [5.0, 110.0], [8.0, 150.0]]);
        assert_eq!(c.dropped.len(), 3);
        assert!(c.dropped.iter().any(|d| d.contains("below 0.97x")));
        assert!(c.dropped.iter().any(|d| d.contains("above 1.05x")));
        assert!(c.dropped.iter().any(|d| d.contains("out of order")));
    }

    #[test]
    fn the_result_passes_the_profile_rules() {
        // Wobbly measured curve: bandwidth not monotone in delay, latency jitters.
        let raw = [
            (0.1, 98.0),
            (0.2, 97.5),
            (0.4, 99.0),
            (0.35, 101.0),
            (2.0, 100.0),
            (4.0, 104.0),
            (3.9, 108.0),
            (6.0, 120.0),
            (6.0, 125.0),
            (7.0, 180.0),
        ];
        let idle = 99.0;
        let c = clean(&raw, idle, 7.0);
        assert!(c.points.len() >= 5, "{c:?}");
        for w in c.points.windows(2) {
            assert!(w[1][0] > w[0][0] && w[1][1] >= w[0][1], "{c:?}");
        }
        assert!(c
            .points
            .iter()
            .all(|p| p[1] >= idle * 0.97 && p[0] <= 7.0 * 1.05));
        assert_eq!(c.points.len() + c.dropped.len(), raw.len());
    }

    #[test]
    fn too_few_points_give_no_curve() {
        let c = clean(&[(1.0, 50.0), (2.0, 120.0)], 100.0, 10.0);
        assert!(c.points.is_empty());
        assert_eq!(c.dropped.len(), 2);
    }
}
