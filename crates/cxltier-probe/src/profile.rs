//! Writing a probe's results as a profile (format 1, `docs/profiles.md`) that `cxltier plan` and
//! `cxltier topo --profile` read.
//!
//! One tier per probed node (interleaved buffers are placements, not tiers). Each tier gets the
//! node's classification as its kind, `MemTotal` as its capacity, the median idle latency, the
//! memory-traffic bandwidth of each mix (what the memory moved, read-for-ownership included: the
//! quantity the published MLC tables and the model use), the firmware's bandwidth figure when the
//! node has one, and the loaded-latency curves cleaned to the profile's rules
//! ([`crate::loaded::clean`]).

use crate::report::{Report, TargetReport};
use crate::ProbeError;
use cxltier_profile::{LoadedLatency, Mix, MixBandwidth, Profile, ProfileError, Tier, TierKind};
use std::fmt::Write as _;
use std::path::Path;

/// The tier a node target becomes (`None` for an interleaved target).
pub fn tier(t: &TargetReport, name: &str) -> Option<Tier> {
    let kind = t.kind?;
    let node = *t.nodes.first()?;
    let mut bandwidth: Vec<MixBandwidth> = t
        .bandwidth
        .iter()
        .map(|b| MixBandwidth {
            mix: b.mix,
            gbps: round(b.traffic_gbps, 100.0),
        })
        .filter(|b| b.gbps > 0.0)
        .collect();
    bandwidth.sort_by_key(|b| b.mix);
    let loaded_latency = t
        .loaded_latency
        .iter()
        .filter(|c| c.profile.points.len() >= 2)
        .map(|c| LoadedLatency {
            mix: c.mix,
            points: c.profile.points.iter().map(|p| (p[0], p[1])).collect(),
        })
        .collect();
    Some(Tier {
        name: name.to_string(),
        kind,
        nodes: vec![node],
        capacity_bytes: t.capacity_bytes,
        idle_latency_ns: round(t.idle_latency.ns, 10.0),
        bandwidth,
        firmware_bandwidth_gbps: t.firmware_bandwidth_gbps.filter(|g| *g > 0.0),
        loaded_latency,
    })
}

/// Tier names: the kind (`dram`, `cxl`), with `-nN` added when two nodes share a kind.
pub fn tier_names(targets: &[&TargetReport]) -> Vec<String> {
    let kinds: Vec<TierKind> = targets.iter().filter_map(|t| t.kind).collect();
    targets
        .iter()
        .map(|t| {
            let kind = t.kind.unwrap_or(TierKind::MemoryOnly);
            let shared = kinds.iter().filter(|k| **k == kind).count() > 1;
            let node = t.nodes.first().copied().unwrap_or(0);
            if shared {
                format!("{}-n{node}", kind.as_str())
            } else {
                kind.as_str().to_string()
            }
        })
        .collect()
}

/// The profile's TOML text for a report. `name` names the platform.
pub fn to_toml(report: &Report, name: &str) -> String {
    let targets: Vec<&TargetReport> = report.targets.iter().filter(|t| t.kind.is_some()).collect();
    let names = tier_names(&targets);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Written by cxltier probe. Figures are measurements of this machine."
    );
    let _ = writeln!(s, "format = 1");
    let _ = writeln!(s, "name = {}", quote(name));
    let _ = writeln!(
        s,
        "description = {}",
        quote(&format!(
            "{} ({}), measured by cxltier probe",
            report.host.hostname, report.host.cpu_model
        ))
    );
    let _ = writeln!(s, "source = {}", quote(&report.source_line()));
    let _ = writeln!(s);
    let _ = writeln!(s, "[platform]");
    let threads = targets.iter().map(|t| t.threads).max().unwrap_or(1);
    let _ = writeln!(s, "cores = {threads}");
    let _ = writeln!(s, "line_bytes = 64");
    for (t, tier_name) in targets.iter().zip(&names) {
        let Some(tier) = tier(t, tier_name) else {
            continue;
        };
        let _ = writeln!(s);
        let _ = writeln!(s, "[[tier]]");
        let _ = writeln!(s, "name = {}", quote(&tier.name));
        let _ = writeln!(s, "kind = {}", quote(tier.kind.as_str()));
        let _ = writeln!(
            s,
            "nodes = [{}]",
            tier.nodes
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        let gib = tier.capacity_bytes as f64 / (1u64 << 30) as f64;
        let _ = writeln!(s, "capacity_gib = {}", num(round(gib, 1000.0).max(0.001)));
        let _ = writeln!(s, "idle_latency_ns = {}", num(tier.idle_latency_ns));
        if let Some(fw) = tier.firmware_bandwidth_gbps {
            let _ = writeln!(s, "firmware_bandwidth_gbps = {}", num(round(fw, 100.0)));
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "[tier.bandwidth_gbps]           # memory traffic, read-for-ownership included"
        );
        for b in &tier.bandwidth {
            let _ = writeln!(s, "{} = {}", quote(&b.mix.to_string()), num(b.gbps));
        }
        for c in &tier.loaded_latency {
            let _ = writeln!(s);
            let _ = writeln!(s, "[[tier.loaded_latency]]");
            let _ = writeln!(s, "mix = {}", quote(&c.mix.to_string()));
            let pts: Vec<String> = c
                .points
                .iter()
                .map(|(bw, lat)| format!("[{}, {}]", num(*bw), num(*lat)))
                .collect();
            let _ = writeln!(s, "points = [{}]", pts.join(", "));
        }
    }
    s
}

/// Checks, before measuring, that the directory `out` is to be written in exists (a typo does
/// not cost a whole probe).
pub fn check_destination(out: &Path) -> Result<(), ProbeError> {
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if dir.is_dir() {
        Ok(())
    } else {
        Err(ProbeError::OutDir {
            out: out.to_path_buf(),
            dir: dir.to_path_buf(),
        })
    }
}

/// Writes `report` to `out` as a profile named `name` (default `probe-HOSTNAME`), once its text
/// parses back as a valid profile.
pub fn write(report: &Report, name: Option<&str>, out: &Path) -> Result<(), ProbeError> {
    let name = name.map_or_else(|| format!("probe-{}", report.host.hostname), str::to_string);
    let text = to_toml(report, &name);
    check(&text, &out.display().to_string()).map_err(ProbeError::ProfileInvalid)?;
    std::fs::write(out, &text).map_err(|source| ProbeError::WriteProfile {
        path: out.to_path_buf(),
        source,
    })
}

/// Parse the written text back, as `cxltier plan --profile` will.
pub fn check(text: &str, origin: &str) -> Result<Profile, ProfileError> {
    Profile::parse(text, origin)
}

/// The peak a loaded-latency curve of `mix` is checked against: the tier's figure for the mix, or
/// the profile's interpolation when the mix was not measured on its own.
pub fn peak_for(bandwidth: &[(Mix, f64)], mix: Mix) -> f64 {
    let tier = Tier {
        name: String::new(),
        kind: TierKind::Dram,
        nodes: vec![],
        capacity_bytes: 0,
        idle_latency_ns: 1.0,
        bandwidth: bandwidth
            .iter()
            .map(|&(mix, gbps)| MixBandwidth {
                mix,
                gbps: round(gbps, 100.0),
            })
            .collect(),
        firmware_bandwidth_gbps: None,
        loaded_latency: vec![],
    };
    tier.peak_bandwidth(mix)
}

fn round(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

/// A TOML float that always parses as a float (`12.0`, not `12`).
fn num(x: f64) -> String {
    let s = format!("{x}");
    if s.contains('.') || s.contains('e') || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

/// A TOML basic string.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn round_trips_through_the_profile_parser() {
        let report = sample_report();
        let text = to_toml(&report, "probe-test \"host\"");
        let p = check(&text, "probe.toml").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(p.name, "probe-test \"host\"");
        assert_eq!(p.tiers.len(), 2, "interleaved targets are not tiers");
        let dram = p.tier("dram").unwrap();
        let cxl = p.tier("cxl").unwrap();
        assert_eq!(dram.nodes, vec![0]);
        assert_eq!(cxl.nodes, vec![1]);
        assert_eq!(dram.idle_latency_ns, 95.3);
        assert_eq!(cxl.idle_latency_ns, 212.4);
        assert_eq!(dram.peak_bandwidth(Mix::READ_ONLY), 20.0);
        // Traffic, not requested bytes: 1:1 with regular stores counts the RFO.
        assert_eq!(dram.peak_bandwidth("1:1".parse().unwrap()), 18.0);
        assert_eq!(dram.capacity_bytes, 16 << 30);
        assert_eq!(cxl.firmware_bandwidth_gbps, Some(40.0));
        let curve = dram.loaded_latency_for(Mix::READ_ONLY).unwrap();
        assert_eq!(curve.points.len(), 3);
        // Sorted fastest first.
        assert_eq!(p.tiers[0].name, "dram");
    }

    #[test]
    fn names_are_unique() {
        let report = sample_report();
        let mut a = report.targets[1].clone();
        let mut b = report.targets[1].clone();
        a.nodes = vec![0];
        b.nodes = vec![2];
        assert_eq!(tier_names(&[&a, &b]), vec!["dram-n0", "dram-n2"]);
    }

    #[test]
    fn strings_and_numbers_are_valid_toml() {
        assert_eq!(quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
        assert_eq!(num(12.0), "12.0");
        assert_eq!(num(1.25), "1.25");
    }

    #[test]
    fn unmeasured_mixes_are_interpolated_for_the_peak() {
        let bw = [(Mix::READ_ONLY, 20.0), ("1:1".parse().unwrap(), 10.0)];
        assert_eq!(peak_for(&bw, "3:1".parse().unwrap()), 15.0);
    }
}
