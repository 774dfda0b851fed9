//! What a probe found: the JSON document (`cxltier probe --json`, stable snake_case fields) and the
//! input to the table and the profile writer.

use crate::buffer::PlacementCheck;
use crate::host::Host;
use crate::loaded::Cleaned;
use crate::measure::{Bandwidth, LoadedPoint};
use crate::weights::WeightSetting;
use cxltier_profile::{Mix, TierKind};
use serde::Serialize;

/// The whole result.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub version: String,
    /// When the probe started, UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub started: String,
    pub elapsed_s: f64,
    pub host: Host,
    pub settings: Settings,
    pub targets: Vec<TargetReport>,
    /// Changes made to the kernel's weighted-interleave table for an interleaved target, if any.
    /// `{"<node>": {"before": ..., "during": ...}}` in JSON, the one per-node shape.
    #[serde(serialize_with = "changes_by_node")]
    pub weight_changes: Vec<WeightSetting>,
    pub warnings: Vec<String>,
}

/// The JSON document of `cxltier probe`: the report, and where its profile and plots went.
#[derive(Debug, Serialize)]
pub struct Written<'a> {
    #[serde(flatten)]
    pub report: &'a Report,
    pub profile: Option<String>,
    pub svg: Vec<String>,
}

/// A named curve of (x, y) points, in the order to draw them.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Report {
    /// The targets' thread counts, each once, in the targets' order.
    pub fn thread_counts(&self) -> Vec<usize> {
        let mut counts = Vec::new();
        for t in &self.targets {
            if !counts.contains(&t.threads) {
                counts.push(t.threads);
            }
        }
        counts
    }

    /// How many targets are tiers of the profile written from the report (an interleaved
    /// target is not).
    pub fn profile_tiers(&self) -> usize {
        self.targets.iter().filter(|t| t.kind.is_some()).count()
    }

    /// Memory traffic (GB/s) by read share (% of requests) of each target: a curve for regular
    /// stores, and one for non-temporal stores, where measured.
    pub fn bandwidth_curves(&self) -> Vec<Curve> {
        let mut curves = Vec::new();
        for t in &self.targets {
            for nt in [false, true] {
                let points: Vec<(f64, f64)> = t
                    .bandwidth
                    .iter()
                    .filter(|b| b.mix.is_non_temporal() == nt)
                    .map(|b| (b.mix.read_fraction() * 100.0, b.traffic_gbps))
                    .collect();
                if !points.is_empty() {
                    let suffix = if nt { " (non-temporal stores)" } else { "" };
                    curves.push(Curve {
                        name: format!("{}{suffix}", t.name),
                        points,
                    });
                }
            }
        }
        curves
    }

    /// Each target's loaded-latency curve for `mix`: latency (ns) by memory traffic (GB/s),
    /// by rising bandwidth, the way a loaded-latency curve is read.
    pub fn loaded_latency_curves(&self, mix: Mix) -> Vec<Curve> {
        self.targets
            .iter()
            .filter_map(|t| {
                let c = t.loaded_latency.iter().find(|c| c.mix == mix)?;
                let mut points: Vec<(f64, f64)> = c
                    .points
                    .iter()
                    .map(|p| (p.traffic_gbps, p.latency_ns))
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                Some(Curve {
                    name: t.name.clone(),
                    points,
                })
            })
            .collect()
    }
}

impl TargetReport {
    /// The share of the chase buffer that lies on huge pages, in percent; `None` when no chase
    /// ran.
    pub fn huge_page_percent(&self) -> Option<f64> {
        let len = self.idle_latency.chase_lines * 64;
        (len > 0)
            .then(|| (self.chase_placement.huge_page_bytes as f64 / len as f64 * 100.0).min(100.0))
    }
}

/// How the probe ran.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// Bytes of each of the two buffers per target (chase and traffic).
    pub buffer_bytes: u64,
    /// Whether the size was chosen automatically (4x the last-level cache, at least 256 MiB).
    pub buffer_auto: bool,
    /// Seconds per bandwidth measurement, and for the idle-latency runs together.
    pub duration_s: f64,
    pub mixes: Vec<Mix>,
    pub latency_runs: usize,
    pub loaded_latency: bool,
    pub huge_pages_requested: bool,
}

/// Idle latency of a target.
#[derive(Debug, Clone, Serialize)]
pub struct IdleLatency {
    /// Median of the runs, ns per load.
    pub ns: f64,
    pub runs_ns: Vec<f64>,
    pub min_ns: f64,
    pub max_ns: f64,
    /// (max - min) / median, percent.
    pub spread_pct: f64,
    /// Loads timed, all runs together.
    pub loads: u64,
    /// Lines in the chased cycle.
    pub chase_lines: u64,
    /// What the time per load is measured on: `thread_cpu_time` (the chasing thread's own CPU
    /// time, immune to the scheduler taking the CPU away) or `wall_clock`.
    pub clock: String,
    /// The lowest share of a run the chasing thread spent on its CPU, percent (below ~90 the
    /// machine was busy).
    pub on_cpu_pct: f64,
}

impl IdleLatency {
    pub fn from_runs(runs: &[crate::chase::Run], chase_lines: u64) -> IdleLatency {
        let runs_ns: Vec<f64> = runs.iter().map(|r| r.ns_per_load()).collect();
        let ns = crate::chase::median(&runs_ns);
        let min_ns = runs_ns.iter().copied().fold(f64::INFINITY, f64::min);
        let max_ns = runs_ns.iter().copied().fold(0.0, f64::max);
        let cpu_clock = runs.iter().all(|r| r.cpu.is_some());
        IdleLatency {
            ns,
            spread_pct: (max_ns - min_ns) / ns * 100.0,
            runs_ns,
            min_ns,
            max_ns,
            loads: runs.iter().map(|r| r.loads).sum(),
            chase_lines,
            clock: if cpu_clock {
                "thread_cpu_time"
            } else {
                "wall_clock"
            }
            .into(),
            on_cpu_pct: runs
                .iter()
                .map(|r| r.on_cpu() * 100.0)
                .fold(100.0, f64::min),
        }
    }
}

/// A loaded-latency curve of one mix.
#[derive(Debug, Clone, Serialize)]
pub struct LoadedCurve {
    pub mix: Mix,
    /// Points in sweep order (longest delay first).
    pub points: Vec<LoadedPoint>,
    /// The curve as written to a profile (`[traffic GB/s, ns]`), and the points left out.
    pub profile: Cleaned,
}

fn changes_by_node<S: serde::Serializer>(
    changes: &[WeightSetting],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    #[derive(Serialize)]
    struct Change {
        before: Option<u8>,
        during: u8,
    }
    let mut map = s.serialize_map(Some(changes.len()))?;
    for c in changes {
        map.serialize_entry(
            &c.node.to_string(),
            &Change {
                before: c.before,
                during: c.during,
            },
        )?;
    }
    map.end()
}

/// Results for one target.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    /// `node0`, or `node0+node1@3:1` for an interleaved buffer.
    pub name: String,
    /// `bind` or `weighted-interleave`.
    pub policy: String,
    pub nodes: Vec<u32>,
    /// An interleaved target's weight for each of its nodes (`{"<node>": weight}`, the one
    /// per-node shape of the JSON); `null` for a bound one.
    pub weights: Option<std::collections::BTreeMap<u32, u32>>,
    /// Tier kind from the topology (`dram`, `cxl`, ...); `null` for an interleaved target.
    pub kind: Option<TierKind>,
    pub capacity_bytes: u64,
    pub firmware_bandwidth_gbps: Option<f64>,
    /// The node whose CPUs ran the threads, and those CPUs.
    pub initiator_node: u32,
    pub cpus: Vec<u32>,
    pub threads: usize,
    /// Where the chase buffer's pages are (checked with move_pages), and huge-page use.
    pub chase_placement: PlacementCheck,
    /// The same for the traffic buffer.
    pub traffic_placement: PlacementCheck,
    pub idle_latency: IdleLatency,
    pub bandwidth: Vec<Bandwidth>,
    pub loaded_latency: Vec<LoadedCurve>,
}

impl TargetReport {
    pub fn bandwidth_for(&self, mix: Mix) -> Option<&Bandwidth> {
        self.bandwidth.iter().find(|b| b.mix == mix)
    }
}

impl Report {
    /// One line saying where the figures come from, for a profile's `source`.
    pub fn source_line(&self) -> String {
        let threads: Vec<String> = self
            .targets
            .iter()
            .map(|t| t.threads.to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        format!(
            "cxltier probe {} on {}, {}, {} thread(s), {} buffers, {} s per mix, Linux {}",
            self.version,
            self.host.hostname,
            self.started,
            threads.join("/"),
            crate::size::short(self.settings.buffer_bytes),
            self.settings.duration_s,
            self.host.kernel
        )
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the Unix epoch (UTC, proleptic Gregorian).
pub fn utc_timestamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn check() -> PlacementCheck {
        PlacementCheck {
            pages_checked: 10,
            pages_per_node: BTreeMap::new(),
            share_per_node: BTreeMap::new(),
            verified: true,
            huge_page_bytes: 0,
            huge_pages: false,
        }
    }

    fn bw(mix: &str, requested: f64) -> Bandwidth {
        let mix: Mix = mix.parse().unwrap();
        let acc = crate::kernels::Accounting::per_unit(crate::kernels::Shape::of(mix));
        Bandwidth {
            mix,
            threads: 2,
            requested_gbps: requested,
            traffic_gbps: requested * acc.traffic_ratio(),
            traffic_read_gbps: 0.0,
            traffic_write_gbps: 0.0,
            traffic_per_requested_byte: acc.traffic_ratio(),
            windows_requested_gbps: vec![requested],
            best_requested_gbps: requested,
            spread_pct: 0.0,
            unpinned_threads: 0,
        }
    }

    fn target(
        name: &str,
        node: u32,
        kind: Option<TierKind>,
        idle: f64,
        scale: f64,
    ) -> TargetReport {
        let raw = [
            (1.0 * scale, idle + 1.0),
            (10.0 * scale, idle + 20.0),
            (18.0 * scale, idle + 90.0),
        ];
        TargetReport {
            name: name.into(),
            policy: "bind".into(),
            nodes: vec![node],
            weights: None,
            kind,
            capacity_bytes: 16 << 30,
            firmware_bandwidth_gbps: if node == 1 { Some(40.0) } else { None },
            initiator_node: 0,
            cpus: vec![0, 1],
            threads: 2,
            chase_placement: check(),
            traffic_placement: check(),
            idle_latency: IdleLatency::from_runs(
                &[run(idle), run(idle + 0.2), run(idle - 0.1)],
                100,
            ),
            bandwidth: vec![
                bw("R", 20.0 * scale),
                bw("1:1", 12.0 * scale),
                bw("2:1nt", 15.0 * scale),
            ],
            loaded_latency: vec![LoadedCurve {
                mix: Mix::READ_ONLY,
                points: raw
                    .iter()
                    .map(|&(b, l)| LoadedPoint {
                        delay: 1,
                        latency_ns: l,
                        requested_gbps: b,
                        traffic_gbps: b,
                        chase_gbps: 0.0,
                        on_cpu_pct: 100.0,
                    })
                    .collect(),
                profile: crate::loaded::clean(&raw, idle, 20.0 * scale),
            }],
        }
    }

    /// A run of 1000 loads at `ns` each.
    fn run(ns: f64) -> crate::chase::Run {
        let d = std::time::Duration::from_secs_f64(ns * 1000.0 / 1e9);
        crate::chase::Run {
            loads: 1000,
            elapsed: d,
            cpu: Some(d),
        }
    }

    pub(crate) fn sample_report() -> Report {
        let mut inter = target("node0+node1@3:1", 0, None, 120.0, 1.0);
        inter.policy = "weighted-interleave".into();
        inter.nodes = vec![0, 1];
        inter.weights = Some([(0, 3), (1, 1)].into());
        Report {
            version: "0.1.0".into(),
            started: utc_timestamp(0),
            elapsed_s: 1.0,
            host: Host {
                hostname: "test".into(),
                cpu_model: "Test CPU".into(),
                llc_bytes: 32 << 20,
                allowed_cpus: vec![0, 1],
                thp_mode: "madvise".into(),
                kernel: "6.12".into(),
                vector_isa: "avx2".into(),
                nt_store_isa: "avx2".into(),
            },
            settings: Settings {
                buffer_bytes: 256 << 20,
                buffer_auto: false,
                duration_s: 1.0,
                mixes: vec![Mix::READ_ONLY],
                latency_runs: 3,
                loaded_latency: true,
                huge_pages_requested: true,
            },
            targets: vec![
                target("node1", 1, Some(TierKind::Cxl), 212.4, 0.5),
                target("node0", 0, Some(TierKind::Dram), 95.3, 1.0),
                inter,
            ],
            weight_changes: vec![],
            warnings: vec![],
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_timestamp(1_798_761_599), "2026-12-31T23:59:59Z");
    }

    #[test]
    fn json_fields_are_snake_case_and_stable() {
        let v = serde_json::to_value(sample_report()).unwrap();
        let t = &v["targets"][1];
        for key in [
            "name",
            "policy",
            "nodes",
            "kind",
            "capacity_bytes",
            "initiator_node",
            "cpus",
            "threads",
            "chase_placement",
            "traffic_placement",
            "idle_latency",
            "bandwidth",
            "loaded_latency",
        ] {
            assert!(t.get(key).is_some(), "missing {key}");
        }
        assert_eq!(t["kind"], "dram");
        assert_eq!(t["bandwidth"][1]["mix"], "1:1");
        assert_eq!(t["bandwidth"][1]["traffic_per_requested_byte"], 1.5);
        assert!(t["idle_latency"]["ns"].as_f64().unwrap() > 95.0);
        assert!(v["targets"][2]["kind"].is_null());
        // Per-node figures are keyed by node: the interleaved target's weights, and the changes
        // made to the weighted-interleave table.
        assert_eq!(
            v["targets"][2]["weights"],
            serde_json::json!({"0": 3, "1": 1})
        );
        assert!(v["targets"][1]["weights"].is_null());
        let mut r = sample_report();
        r.weight_changes = vec![WeightSetting {
            node: 1,
            before: Some(1),
            during: 3,
        }];
        let v = serde_json::to_value(r).unwrap();
        assert_eq!(
            v["weight_changes"],
            serde_json::json!({"1": {"before": 1, "during": 3}})
        );
    }

    #[test]
    fn idle_latency_statistics() {
        let l = IdleLatency::from_runs(&[run(100.0), run(102.0), run(101.0), run(99.0)], 10);
        assert!((l.ns - 100.5).abs() < 1e-6);
        assert!((l.min_ns - 99.0).abs() < 1e-6);
        assert!((l.max_ns - 102.0).abs() < 1e-6);
        assert!((l.spread_pct - 300.0 / 100.5).abs() < 1e-6);
        assert_eq!(l.loads, 4000);
        assert_eq!(l.clock, "thread_cpu_time");
        assert!((l.on_cpu_pct - 100.0).abs() < 1e-9);
    }
}
