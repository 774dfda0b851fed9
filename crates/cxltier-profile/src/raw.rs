//! The on-disk TOML form of a profile and its validation.
//!
//! Values are deserialized with their byte spans so that every semantic error (not only syntax
//! errors) can name the line it comes from.

use crate::{LoadedLatency, Mix, MixBandwidth, Platform, Profile, ProfileError, Tier, TierKind};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ops::Range;
use toml::Spanned;

/// The only format version this build reads.
pub const FORMAT: u32 = 1;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    format: Spanned<u32>,
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    platform: Option<RawPlatform>,
    tier: Spanned<Vec<Spanned<RawTier>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlatform {
    cores: Option<Spanned<u32>>,
    line_bytes: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTier {
    name: Spanned<String>,
    kind: Spanned<String>,
    #[serde(default)]
    nodes: Vec<u32>,
    capacity_gib: Spanned<f64>,
    idle_latency_ns: Spanned<f64>,
    bandwidth_gbps: Spanned<BTreeMap<Spanned<String>, Spanned<f64>>>,
    firmware_bandwidth_gbps: Option<Spanned<f64>>,
    #[serde(default)]
    loaded_latency: Vec<Spanned<RawLoaded>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLoaded {
    mix: Spanned<String>,
    /// `[bandwidth GB/s, latency ns]` pairs.
    points: Spanned<Vec<Spanned<[f64; 2]>>>,
}

struct Ctx<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Ctx<'_> {
    fn at(&self, span: Range<usize>, reason: impl Into<String>) -> ProfileError {
        let (line, column) = line_col(self.text, span.start);
        ProfileError {
            origin: self.origin.to_string(),
            line: Some(line),
            column: Some(column),
            reason: reason.into(),
        }
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rfind('\n').map_or(offset, |nl| offset - nl - 1) + 1;
    (line, column)
}

fn positive(ctx: &Ctx, v: &Spanned<f64>, what: &str) -> Result<f64, ProfileError> {
    let x = *v.get_ref();
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(ctx.at(
            v.span(),
            format!("{what} must be a positive number, got {x}"),
        ))
    }
}

pub fn parse(text: &str, origin: &str) -> Result<Profile, ProfileError> {
    let ctx = Ctx { text, origin };
    let raw: RawProfile = toml::from_str(text).map_err(|e| {
        let reason = e.message().trim().to_string();
        match e.span() {
            Some(span) => ctx.at(span, reason),
            None => ProfileError {
                origin: origin.to_string(),
                line: None,
                column: None,
                reason,
            },
        }
    })?;

    if *raw.format.get_ref() != FORMAT {
        return Err(ctx.at(
            raw.format.span(),
            format!(
                "unsupported profile format {} (this cxltier reads format {FORMAT})",
                raw.format.get_ref()
            ),
        ));
    }
    if raw.name.get_ref().trim().is_empty() {
        return Err(ctx.at(raw.name.span(), "name must not be empty"));
    }

    let mut platform = Platform {
        cores: None,
        line_bytes: 64,
    };
    if let Some(p) = &raw.platform {
        if let Some(c) = &p.cores {
            if *c.get_ref() == 0 {
                return Err(ctx.at(c.span(), "platform.cores must be at least 1"));
            }
            platform.cores = Some(*c.get_ref());
        }
        if let Some(l) = &p.line_bytes {
            let l_val = *l.get_ref();
            if !(16..=1024).contains(&l_val) || !l_val.is_power_of_two() {
                return Err(ctx.at(
                    l.span(),
                    format!("platform.line_bytes must be a power of two in 16..1024, got {l_val}"),
                ));
            }
            platform.line_bytes = l_val;
        }
    }

    if raw.tier.get_ref().is_empty() {
        return Err(ctx.at(raw.tier.span(), "a profile needs at least one [[tier]]"));
    }
    let mut tiers: Vec<Tier> = Vec::new();
    let mut node_owner: BTreeMap<u32, String> = BTreeMap::new();
    for rt in raw.tier.get_ref() {
        let rt_span = rt.span();
        let rt = rt.get_ref();
        let name = rt.name.get_ref().trim().to_string();
        if name.is_empty() {
            return Err(ctx.at(rt.name.span(), "tier name must not be empty"));
        }
        if tiers.iter().any(|t| t.name == name) {
            return Err(ctx.at(rt.name.span(), format!("tier {name:?} is defined twice")));
        }
        let kind = TierKind::parse(rt.kind.get_ref()).ok_or_else(|| {
            ctx.at(
                rt.kind.span(),
                format!(
                    "unknown tier kind {:?} (use dram, cxl, hbm, pmem or memory-only)",
                    rt.kind.get_ref()
                ),
            )
        })?;
        for n in &rt.nodes {
            if let Some(other) = node_owner.insert(*n, name.clone()) {
                return Err(ctx.at(
                    rt_span.clone(),
                    format!("node {n} is listed in both tier {other:?} and tier {name:?}"),
                ));
            }
        }
        let capacity_gib = positive(&ctx, &rt.capacity_gib, "capacity_gib")?;
        let idle = positive(&ctx, &rt.idle_latency_ns, "idle_latency_ns")?;

        let mut bandwidth: Vec<MixBandwidth> = Vec::new();
        for (key, value) in rt.bandwidth_gbps.get_ref() {
            let mix: Mix = key
                .get_ref()
                .parse()
                .map_err(|e: crate::MixError| ctx.at(key.span(), e.to_string()))?;
            if bandwidth.iter().any(|b| b.mix == mix) {
                return Err(ctx.at(
                    key.span(),
                    format!(
                        "mix {mix} is given twice (as {:?} and an equivalent)",
                        key.get_ref()
                    ),
                ));
            }
            let gbps = positive(&ctx, value, &format!("bandwidth for mix {mix}"))?;
            bandwidth.push(MixBandwidth { mix, gbps });
        }
        if !bandwidth.iter().any(|b| b.mix.is_read_only()) {
            return Err(ctx.at(
                rt.bandwidth_gbps.span(),
                format!("tier {name:?}: bandwidth_gbps needs a read-only figure, \"R\""),
            ));
        }
        bandwidth.sort_by_key(|b| b.mix);

        let firmware_bandwidth_gbps = match &rt.firmware_bandwidth_gbps {
            Some(v) => Some(positive(&ctx, v, "firmware_bandwidth_gbps")?),
            None => None,
        };

        let mut loaded_latency: Vec<LoadedLatency> = Vec::new();
        for rl in &rt.loaded_latency {
            let rl = rl.get_ref();
            let mix: Mix = rl
                .mix
                .get_ref()
                .parse()
                .map_err(|e: crate::MixError| ctx.at(rl.mix.span(), e.to_string()))?;
            if loaded_latency.iter().any(|c| c.mix == mix) {
                return Err(ctx.at(
                    rl.mix.span(),
                    format!("a loaded-latency curve for mix {mix} is given twice"),
                ));
            }
            let mut points: Vec<(f64, f64)> = Vec::new();
            for p in rl.points.get_ref() {
                let [bw, lat] = *p.get_ref();
                if !(bw.is_finite() && bw >= 0.0 && lat.is_finite() && lat > 0.0) {
                    return Err(ctx.at(
                        p.span(),
                        format!("loaded-latency point [{bw}, {lat}] must be [GB/s >= 0, ns > 0]"),
                    ));
                }
                // Queueing can only add delay: a loaded latency below the idle latency means the
                // figures were measured on different setups and cannot both be right.
                if lat < idle * 0.97 {
                    return Err(ctx.at(
                        p.span(),
                        format!(
                            "loaded latency {lat} ns is below the tier's idle latency {idle} ns"
                        ),
                    ));
                }
                let peak = bandwidth_for(&bandwidth, mix);
                if bw > peak * 1.05 {
                    return Err(ctx.at(
                        p.span(),
                        format!("loaded-latency point at {bw} GB/s exceeds the tier's peak {peak:.1} GB/s for mix {mix}"),
                    ));
                }
                if let Some(&(pbw, plat)) = points.last() {
                    if bw <= pbw || lat + 1e-9 < plat {
                        return Err(ctx.at(
                            p.span(),
                            "loaded-latency points must be ordered by rising bandwidth with latency that never falls",
                        ));
                    }
                }
                points.push((bw, lat));
            }
            if points.len() < 2 {
                return Err(ctx.at(
                    rl.points.span(),
                    "a loaded-latency curve needs at least two points",
                ));
            }
            loaded_latency.push(LoadedLatency { mix, points });
        }

        tiers.push(Tier {
            name,
            kind,
            nodes: rt.nodes.clone(),
            capacity_bytes: (capacity_gib * (1u64 << 30) as f64) as u64,
            idle_latency_ns: idle,
            bandwidth,
            firmware_bandwidth_gbps,
            loaded_latency,
        });
    }

    Profile::from_parts(
        raw.name.get_ref().trim(),
        raw.description.trim(),
        raw.source.trim(),
        origin,
        platform,
        tiers,
    )
}

fn bandwidth_for(bw: &[MixBandwidth], mix: Mix) -> f64 {
    let probe = Tier {
        name: String::new(),
        kind: TierKind::Dram,
        nodes: vec![],
        capacity_bytes: 0,
        idle_latency_ns: 1.0,
        bandwidth: bw.to_vec(),
        firmware_bandwidth_gbps: None,
        loaded_latency: vec![],
    };
    probe.peak_bandwidth(mix)
}
