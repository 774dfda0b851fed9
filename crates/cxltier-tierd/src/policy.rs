//! The placement policy: what counts as hot and cold, how much DRAM a target may hold, how fast
//! pages may move. Read from a TOML file (documented in docs/tierd.md), every field optional;
//! command-line options override the file. [`Policy::validate`] checks every value before anything
//! is written to the kernel.

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

use crate::access::AccessSource;
use crate::idle::MAX_HISTORY;
use crate::TierdError;
use cxltier_topo::size::Size;

/// The longest DAMON interval a policy may ask for (sampling, aggregation, update): an hour.
pub const MAX_INTERVAL_MS: u64 = 3_600_000;

/// How access is tracked: which source, and how DAMON samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tracking {
    /// `auto` (DAMON when the kernel has its sysfs interface, else idle-page tracking), `damon`
    /// or `idle-page`.
    pub access_source: AccessSource,
    /// Idle-page tracking: how many intervals of each page's history make its access frequency
    /// (a page accessed in k of its last `idle_history` intervals has k accesses out of
    /// `idle_history`; 1 to 64).
    pub idle_history: u32,
    /// DAMON's sampling interval: how often it checks one page per region for access.
    pub sample_ms: u64,
    /// DAMON's aggregation interval: accesses are counted over this long (so a region's
    /// `nr_accesses` runs from 0 to aggregation_ms / sample_ms).
    pub aggregation_ms: u64,
    /// How often DAMON refreshes the target's mappings.
    pub update_ms: u64,
    /// Fewest and most regions DAMON splits a target into (more: finer, costlier).
    pub min_regions: u64,
    pub max_regions: u64,
    /// Also track written pages, page by page, with soft-dirty bits (`/proc/PID/clear_refs` and
    /// `pagemap`): a page written in the last interval counts as hot, whatever its region says.
    pub soft_dirty: bool,
    /// A target with more than this many MiB of resident anonymous memory (`RssAnon`) is
    /// tracked in chunks from a fixed-size sample of its pages (`chunks`), so that an interval's
    /// cost does not grow with its footprint; smaller ones page by page. DAMON only (idle-page tracking
    /// reads every page anyway). 0: always in chunks.
    pub sampled_above_mib: u64,
    /// Pages asked per interval and target in chunks (1 to 1048576; more: finer, costlier).
    pub sample_pages: u64,
}

impl Default for Tracking {
    fn default() -> Self {
        Tracking {
            access_source: AccessSource::Auto,
            idle_history: 10,
            sample_ms: 10,
            aggregation_ms: 200,
            update_ms: 1000,
            min_regions: 100,
            max_regions: 1000,
            soft_dirty: true,
            sampled_above_mib: 256,
            sample_pages: 4096,
        }
    }
}

/// What is hot, what is cold, and the hysteresis between them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlacementRules {
    /// A region is hot when DAMON saw it accessed in at least this percentage of the samples of
    /// an aggregation interval.
    pub hot_percent: f64,
    /// A region is cold when it was accessed in at most this percentage of samples ...
    pub cold_percent: f64,
    /// ... and has kept its access level for at least this many aggregation intervals.
    pub cold_min_age: u32,
    /// A page moved is not moved again for this long (no ping-pong between tiers).
    pub min_residency_ms: u64,
    /// Promote into a node only while its free memory stays above this percentage of its size
    /// (the node's watermark); demote likewise.
    pub min_free_percent: f64,
}

impl Default for PlacementRules {
    fn default() -> Self {
        PlacementRules {
            hot_percent: 10.0,
            cold_percent: 0.0,
            cold_min_age: 5,
            min_residency_ms: 3000,
            min_free_percent: 2.0,
        }
    }
}

/// Budgets and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Most bytes of each target on the fastest tier ("64M", "2G"); none: as much as fits.
    pub dram_budget: Option<Size>,
    /// Most bytes moved per second, over all targets, in MB/s (10^6 bytes).
    pub max_migrate_mbps: f64,
    /// How often the placement loop runs.
    pub interval_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            dram_budget: None,
            max_migrate_mbps: 64.0,
            interval_ms: 1000,
        }
    }
}

/// The whole policy.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    pub tracking: Tracking,
    pub placement: PlacementRules,
    pub limits: Limits,
}

/// The command line's settings that take the place of the policy file's ([`Policy::resolve`]).
#[derive(Debug, Clone, Default)]
pub struct PolicyOverrides {
    pub dram_budget: Option<Size>,
    pub max_migrate_mbps: Option<f64>,
    pub interval_ms: Option<u64>,
    /// As written (`auto`, `damon`, `idle-page`), to be said back when it is none of them.
    pub access_source: Option<String>,
}

impl Policy {
    /// Parse a policy from TOML text (`origin` names it in errors).
    pub fn parse(text: &str, origin: &Path) -> Result<Policy, TierdError> {
        let policy: Policy = toml::from_str(text).map_err(|e| TierdError::Policy {
            path: origin.to_path_buf(),
            message: e.to_string().trim_end().replace('\n', " "),
        })?;
        policy.validate().map_err(|e| TierdError::Policy {
            path: origin.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(policy)
    }

    /// The policy file at `file` (the defaults without one) with the command line's `overrides`
    /// over it, validated: what the daemon runs with.
    pub fn resolve(file: Option<&Path>, overrides: PolicyOverrides) -> Result<Policy, TierdError> {
        let mut p = match file {
            Some(path) => Policy::load(path)?,
            None => Policy::default(),
        };
        if let Some(b) = overrides.dram_budget {
            p = p.with_dram_budget(b);
        }
        if let Some(r) = overrides.max_migrate_mbps {
            p = p.with_max_migrate_mbps(r);
        }
        if let Some(ms) = overrides.interval_ms {
            p = p.with_interval_ms(ms);
        }
        if let Some(src) = &overrides.access_source {
            let source: AccessSource = src.parse().map_err(|_: TierdError| {
                TierdError::invalid(format!(
                    "--access-source {src:?}: expected auto, damon or idle-page"
                ))
            })?;
            p = p.with_access_source(source);
        }
        p.validate().map_err(|e| {
            TierdError::invalid_with_hint(
                e.to_string(),
                "see docs/tierd.md for the policy settings",
            )
        })?;
        Ok(p)
    }

    /// Read and parse a policy file.
    pub fn load(path: &Path) -> Result<Policy, TierdError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| TierdError::io("cannot read", path, e))?;
        Policy::parse(&text, path)
    }

    /// Set the DRAM budget.
    pub fn with_dram_budget(mut self, budget: Size) -> Self {
        self.limits.dram_budget = Some(budget);
        self
    }

    /// Set the migration rate limit.
    pub fn with_max_migrate_mbps(mut self, mbps: f64) -> Self {
        self.limits.max_migrate_mbps = mbps;
        self
    }

    /// Set the loop interval.
    pub fn with_interval_ms(mut self, ms: u64) -> Self {
        self.limits.interval_ms = ms;
        self
    }

    /// The DRAM budget in bytes, if any.
    pub fn dram_budget_bytes(&self) -> Option<u64> {
        self.limits.dram_budget.as_ref().map(Size::bytes)
    }

    /// Set the access source.
    pub fn with_access_source(mut self, source: AccessSource) -> Self {
        self.tracking.access_source = source;
        self
    }

    /// The highest `nr_accesses` DAMON can report in one aggregation interval.
    pub fn max_accesses(&self) -> u32 {
        (self.tracking.aggregation_ms / self.tracking.sample_ms.max(1)).max(1) as u32
    }

    /// The loop interval.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.limits.interval_ms)
    }

    /// Check every value; the message names the setting and the allowed range.
    pub fn validate(&self) -> Result<(), TierdError> {
        fn bad(setting: &'static str, message: impl Into<String>) -> Result<(), TierdError> {
            Err(TierdError::Setting {
                setting,
                message: message.into(),
            })
        }
        let t = &self.tracking;
        let p = &self.placement;
        let l = &self.limits;
        if t.sample_ms == 0 {
            return bad("sample_ms", "must be at least 1");
        }
        if t.aggregation_ms < t.sample_ms {
            return bad(
                "aggregation_ms",
                format!(
                    "{} is shorter than sample_ms {}: make it a multiple of it",
                    t.aggregation_ms, t.sample_ms
                ),
            );
        }
        if !(1..=MAX_HISTORY).contains(&t.idle_history) {
            return bad(
                "idle_history",
                format!("{}: expected 1 to {MAX_HISTORY} intervals", t.idle_history),
            );
        }
        if t.update_ms == 0 {
            return bad("update_ms", "must be at least 1");
        }
        // DAMON takes its intervals in microseconds (ms * 1000 must not overflow), and
        // `max_accesses` (aggregation_ms / sample_ms) must fit the u32 the planner counts in.
        for (setting, ms) in [
            ("sample_ms", t.sample_ms),
            ("aggregation_ms", t.aggregation_ms),
            ("update_ms", t.update_ms),
        ] {
            if ms > MAX_INTERVAL_MS {
                return bad(
                    setting,
                    format!("{ms} ms: expected at most {MAX_INTERVAL_MS} ms (an hour)"),
                );
            }
        }
        if t.min_regions < 3 || t.max_regions < t.min_regions {
            return bad(
                "min_regions/max_regions",
                format!(
                    "{}..{}: DAMON needs at least 3 regions and max_regions >= min_regions",
                    t.min_regions, t.max_regions
                ),
            );
        }
        if !(1..=1 << 20).contains(&t.sample_pages) {
            return bad(
                "sample_pages",
                format!(
                    "{}: expected 1 to 1048576 pages per interval (the default is 4096)",
                    t.sample_pages
                ),
            );
        }
        if t.sampled_above_mib > 1 << 40 {
            return bad(
                "sampled_above_mib",
                format!("{}: expected at most 2^40 MiB", t.sampled_above_mib),
            );
        }
        let pct = |v: f64| v.is_finite() && (0.0..=100.0).contains(&v);
        if !pct(p.hot_percent) || p.hot_percent == 0.0 {
            return bad(
                "hot_percent",
                format!(
                    "{}: expected a percentage above 0, at most 100",
                    p.hot_percent
                ),
            );
        }
        if !pct(p.cold_percent) || p.cold_percent >= p.hot_percent {
            return bad(
                "cold_percent",
                format!(
                    "{}: expected a percentage below hot_percent ({}) so that pages between the two stay put",
                    p.cold_percent, p.hot_percent
                ),
            );
        }
        if !pct(p.min_free_percent) || p.min_free_percent >= 100.0 {
            return bad(
                "min_free_percent",
                format!("{}: expected 0 to below 100", p.min_free_percent),
            );
        }
        if !(l.max_migrate_mbps.is_finite() && l.max_migrate_mbps > 0.0) {
            return bad(
                "max_migrate_rate",
                format!("{}: expected MB/s above 0", l.max_migrate_mbps),
            );
        }
        if l.interval_ms < 10 {
            return bad(
                "interval",
                format!("{} ms: expected at least 10 ms", l.interval_ms),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Policy, TierdError> {
        Policy::parse(text, Path::new("p.toml"))
    }

    /// Each policy text is refused with an error naming every one of its words.
    fn assert_refused(cases: &[(&str, &[&str])]) {
        for (text, words) in cases {
            let e = parse(text).expect_err(text).to_string();
            for w in *words {
                assert!(e.contains(w), "{text:?}: {e:?} does not name {w:?}");
            }
        }
    }

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(parse("").unwrap(), Policy::default());
        Policy::default().validate().unwrap();
    }

    #[test]
    fn fields_override_defaults() {
        let p = parse(
            "[tracking]\nsample_ms = 5\naggregation_ms = 100\n[limits]\ndram_budget = \"2M\"\nmax_migrate_mbps = 8\n",
        )
        .unwrap();
        assert_eq!(p.max_accesses(), 20);
        assert_eq!(p.dram_budget_bytes(), Some(2 << 20));
        assert_eq!(p.limits.max_migrate_mbps, 8.0);
        assert_eq!(p.placement, PlacementRules::default());
        assert_eq!(p.tracking.access_source, AccessSource::Auto);
        let p = parse("[tracking]\naccess_source = \"idle-page\"\nidle_history = 20\n").unwrap();
        assert_eq!(p.tracking.access_source, AccessSource::IdlePage);
        assert_eq!(p.tracking.idle_history, 20);
    }

    #[test]
    fn damon_intervals_are_bounded_so_that_their_consumers_can_take_them() {
        // What the `policy` fuzz target checks of every accepted policy: a ratio aggregation_ms / sample_ms above u32::MAX
        // was truncated by max_accesses() (4294967296 became 0: nothing could ever be hot), and
        // an interval above u64::MAX / 1000 ms overflowed when damon.rs wrote it in microseconds.
        assert_refused(&[
            (
                "[tracking]\nsample_ms = 1\naggregation_ms = 4294967296\n",
                &["aggregation_ms", "3600000"],
            ),
            (
                "[tracking]\nupdate_ms = 18446744073709552\n",
                &["update_ms", "3600000"],
            ),
            (
                "[tracking]\nsample_ms = 18446744073709552\naggregation_ms = 18446744073709552\n",
                &["_ms", "3600000"],
            ),
        ]);
        // An hour is the most, and is taken as it stands.
        let p = parse("[tracking]\nsample_ms = 1\naggregation_ms = 3600000\nupdate_ms = 3600000\n")
            .unwrap();
        assert_eq!(p.max_accesses(), 3_600_000);
    }

    #[test]
    fn unknown_fields_and_bad_values_are_named() {
        assert_refused(&[
            ("[placement]\nhot_pct = 3\n", &["hot_pct", "p.toml"]),
            (
                "[placement]\nhot_percent = 5\ncold_percent = 5\n",
                &["cold_percent"],
            ),
            ("[limits]\ndram_budget = \"lots\"\n", &["dram_budget"]),
            ("[tracking]\nsample_ms = 0\n", &["sample_ms"]),
            (
                "[tracking]\naccess_source = \"idle\"\n",
                &["access_source", "idle-page"],
            ),
            ("[tracking]\nidle_history = 65\n", &["idle_history"]),
        ]);
        let e = Policy::default()
            .with_max_migrate_mbps(0.0)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_migrate_rate"), "{e}");
    }
}
