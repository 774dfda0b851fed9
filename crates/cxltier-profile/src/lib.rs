//! Platform profiles: what each memory tier of a machine delivers.
//!
//! A profile is a small TOML file (format documented in `docs/profiles.md`) listing a platform's tiers,
//! fastest first or in any order, each with its capacity, idle latency, peak bandwidth per read:write
//! mix (with and without non-temporal writes) and, optionally, loaded-latency points. Profiles come from
//! three places: built in (the published platforms, see [`builtin_names`]), a file written by hand or
//! by the probe, or the live machine's firmware tables (built by the caller from the topology).
//!
//! Loading never accepts a half-valid profile: every problem is reported with the file, the line and
//! the reason ([`ProfileError`]).

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod mix;
mod raw;

pub use mix::{Mix, MixError};

use serde::Serialize;
use std::path::Path;

/// A platform's memory tiers and what each delivers.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// Where the figures come from (a paper, a probe run, firmware tables).
    pub source: String,
    /// Where this profile was loaded from: a path, `builtin:NAME`, or `live:...`.
    pub origin: String,
    pub platform: Platform,
    /// The tiers, sorted fastest first (by idle latency).
    pub tiers: Vec<Tier>,
}

/// Platform-wide facts the model uses.
#[derive(Debug, Clone, Serialize)]
pub struct Platform {
    /// Cores that generated the peak-bandwidth figures, if known (informational).
    pub cores: Option<u32>,
    /// Bytes per memory request (cache line).
    pub line_bytes: u32,
}

/// What kind of memory a tier is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TierKind {
    Dram,
    Cxl,
    Hbm,
    Pmem,
    MemoryOnly,
}

impl TierKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            TierKind::Dram => "dram",
            TierKind::Cxl => "cxl",
            TierKind::Hbm => "hbm",
            TierKind::Pmem => "pmem",
            TierKind::MemoryOnly => "memory-only",
        }
    }

    /// The tier kind for a topology node kind name (`cxltier_topo::NodeKind::as_str`): the memory
    /// kinds map one to one, anything else (`memory-only`, `cpu-only`, ...) is `MemoryOnly`.
    pub fn for_node_kind(name: &str) -> TierKind {
        TierKind::parse(name).unwrap_or(TierKind::MemoryOnly)
    }

    /// Parse a kind as written in profiles: `dram`, `cxl`, `hbm`, `pmem` or `memory-only`.
    pub fn parse(s: &str) -> Option<TierKind> {
        Some(match s {
            "dram" => TierKind::Dram,
            "cxl" => TierKind::Cxl,
            "hbm" => TierKind::Hbm,
            "pmem" => TierKind::Pmem,
            "memory-only" => TierKind::MemoryOnly,
            _ => return None,
        })
    }
}

/// One memory tier of a platform.
#[derive(Debug, Clone, Serialize)]
pub struct Tier {
    pub name: String,
    pub kind: TierKind,
    /// NUMA nodes that make up this tier on the live machine (empty when unknown).
    pub nodes: Vec<u32>,
    pub capacity_bytes: u64,
    /// Latency of a dependent load with the tier otherwise idle, in ns.
    pub idle_latency_ns: f64,
    /// Peak bandwidth in GB/s (10^9 bytes per second) per mix, sorted by mix.
    pub bandwidth: Vec<MixBandwidth>,
    /// Bandwidth the firmware (HMAT/CDAT) reports, in GB/s, which is what the kernel's `auto`
    /// weights are derived from. `None` means "use the read-only peak".
    pub firmware_bandwidth_gbps: Option<f64>,
    /// Measured loaded-latency curves, if any.
    pub loaded_latency: Vec<LoadedLatency>,
}

/// Peak bandwidth of a tier for one mix.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct MixBandwidth {
    pub mix: Mix,
    pub gbps: f64,
}

/// A loaded-latency curve: (bandwidth GB/s, latency ns) points for one mix, by rising bandwidth.
#[derive(Debug, Clone, Serialize)]
pub struct LoadedLatency {
    pub mix: Mix,
    pub points: Vec<(f64, f64)>,
}

impl Tier {
    /// Peak bandwidth for `mix`, in GB/s.
    ///
    /// A mix the profile lists is returned as listed. Any other mix is interpolated linearly in the
    /// read fraction between the nearest listed mixes of the same write kind (non-temporal or not),
    /// and held flat beyond the outermost ones. A non-temporal mix on a tier that lists none uses the
    /// regular-store figures: the tier then has no evidence that non-temporal stores behave differently.
    pub fn peak_bandwidth(&self, mix: Mix) -> f64 {
        if let Some(exact) = self.bandwidth.iter().find(|b| b.mix == mix) {
            return exact.gbps;
        }
        let same_kind: Vec<&MixBandwidth> = self
            .bandwidth
            .iter()
            .filter(|b| b.mix.is_non_temporal() == mix.is_non_temporal() || b.mix.is_read_only())
            .collect();
        let pool: Vec<&MixBandwidth> =
            if same_kind.iter().any(|b| !b.mix.is_read_only()) || !mix.is_non_temporal() {
                same_kind
            } else {
                self.bandwidth
                    .iter()
                    .filter(|b| !b.mix.is_non_temporal())
                    .collect()
            };
        interpolate(&pool, mix.read_fraction())
    }

    /// The bandwidth the kernel would see in firmware tables, in GB/s.
    pub fn firmware_bandwidth(&self) -> f64 {
        self.firmware_bandwidth_gbps
            .unwrap_or_else(|| self.peak_bandwidth(Mix::READ_ONLY))
    }

    /// The measured loaded-latency curve for `mix`, if the profile has one.
    pub fn loaded_latency_for(&self, mix: Mix) -> Option<&LoadedLatency> {
        self.loaded_latency.iter().find(|c| c.mix == mix)
    }
}

fn interpolate(points: &[&MixBandwidth], read_fraction: f64) -> f64 {
    let mut pts: Vec<(f64, f64)> = points
        .iter()
        .map(|b| (b.mix.read_fraction(), b.gbps))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.dedup_by(|a, b| a.0 == b.0);
    match pts.as_slice() {
        [] => 0.0,
        [only] => only.1,
        _ => {
            if read_fraction <= pts[0].0 {
                return pts[0].1;
            }
            for w in pts.windows(2) {
                let ((x0, y0), (x1, y1)) = (w[0], w[1]);
                if read_fraction <= x1 {
                    return y0 + (y1 - y0) * (read_fraction - x0) / (x1 - x0);
                }
            }
            pts[pts.len() - 1].1
        }
    }
}

impl Profile {
    /// Every mix any tier lists a bandwidth for, once each: read-only first, then by falling read
    /// share, regular stores before non-temporal ones.
    pub fn bandwidth_mixes(&self) -> Vec<Mix> {
        let mut mixes: Vec<Mix> = Vec::new();
        for t in &self.tiers {
            for b in &t.bandwidth {
                if !mixes.contains(&b.mix) {
                    mixes.push(b.mix);
                }
            }
        }
        mixes.sort_by(|a, b| {
            b.read_fraction()
                .total_cmp(&a.read_fraction())
                .then(a.is_non_temporal().cmp(&b.is_non_temporal()))
        });
        mixes
    }

    /// Load a profile by built-in name or by path. A spec that names a built-in profile wins over a
    /// file of the same name only when no such file exists.
    pub fn load(spec: &str) -> Result<Profile, ProfileError> {
        let path = Path::new(spec);
        if path.exists() {
            return Profile::from_file(path);
        }
        if let Some(text) = builtin(spec) {
            return Profile::parse(text, &format!("builtin:{spec}"));
        }
        Err(ProfileError {
            origin: spec.to_string(),
            line: None,
            column: None,
            reason: format!(
                "no such profile: not a file, and not a built-in profile (built-in: {})",
                builtin_names().join(", ")
            ),
        })
    }

    /// Load a profile from a TOML file.
    pub fn from_file(path: &Path) -> Result<Profile, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|e| ProfileError {
            origin: path.display().to_string(),
            line: None,
            column: None,
            reason: format!("cannot read: {e}"),
        })?;
        Profile::parse(&text, &path.display().to_string())
    }

    /// Parse and validate profile text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Profile, ProfileError> {
        raw::parse(text, origin)
    }

    /// Build a profile from figures obtained elsewhere (the live machine's firmware tables, a probe).
    /// The same consistency rules as for files apply.
    pub fn from_parts(
        name: &str,
        description: &str,
        source: &str,
        origin: &str,
        platform: Platform,
        mut tiers: Vec<Tier>,
    ) -> Result<Profile, ProfileError> {
        let err = |reason: String| ProfileError {
            origin: origin.to_string(),
            line: None,
            column: None,
            reason,
        };
        if tiers.is_empty() {
            return Err(err("a profile needs at least one tier".into()));
        }
        for t in &tiers {
            if !(t.idle_latency_ns.is_finite() && t.idle_latency_ns > 0.0) {
                return Err(err(format!(
                    "tier {}: idle latency must be a positive number of ns",
                    t.name
                )));
            }
            if t.bandwidth.iter().all(|b| !b.mix.is_read_only()) {
                return Err(err(format!(
                    "tier {}: a read-only (R) bandwidth figure is required",
                    t.name
                )));
            }
            if t.bandwidth
                .iter()
                .any(|b| !(b.gbps.is_finite() && b.gbps > 0.0))
            {
                return Err(err(format!(
                    "tier {}: bandwidth figures must be positive GB/s",
                    t.name
                )));
            }
        }
        tiers.sort_by(|a, b| a.idle_latency_ns.total_cmp(&b.idle_latency_ns));
        Ok(Profile {
            name: name.to_string(),
            description: description.to_string(),
            source: source.to_string(),
            origin: origin.to_string(),
            platform,
            tiers,
        })
    }

    /// The tier with this name.
    pub fn tier(&self, name: &str) -> Option<&Tier> {
        self.tiers.iter().find(|t| t.name == name)
    }
}

/// A profile that could not be loaded: which file, where in it, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ProfileError {
    /// The file path, `builtin:NAME`, or the spec that was given.
    pub origin: String,
    /// 1-based line, when the problem has a place in the file.
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub reason: String,
}

/// A profile is input: whatever is wrong with it is the user's to fix.
impl cxltier_error::Classify for ProfileError {
    fn class(&self) -> cxltier_error::Class {
        cxltier_error::Class::BadInput
    }
}

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{}:{}:{}: {}", self.origin, l, c, self.reason),
            (Some(l), None) => write!(f, "{}:{}: {}", self.origin, l, self.reason),
            _ => write!(f, "{}: {}", self.origin, self.reason),
        }
    }
}

const BUILTIN: &[(&str, &str)] = &[(
    "xeon6-6900p-8xcz122",
    include_str!("../profiles/xeon6-6900p-8xcz122.toml"),
)];

/// Names of the built-in profiles.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

/// The TOML text of a built-in profile.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// The profile used when nothing else is known.
pub const DEFAULT_BUILTIN: &str = "xeon6-6900p-8xcz122";
