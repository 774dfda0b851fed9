//! tierd's Prometheus exposition: the latest report of every current target, what left, the
//! quarantine, the build and the configuration, written with `cxltier-metrics` (which also
//! serves it over HTTP).
//!
//! Names follow Prometheus' conventions: `cxltier_tierd_` and a base unit (`_bytes`,
//! `_seconds`), counters end in `_total`, facts are labels of an `_info` gauge. A target's
//! series exist while it is one: once it exited or left the cgroup they are dropped, and it is
//! counted in `cxltier_tierd_targets_departed_total{reason}`.

use std::collections::BTreeMap;
use std::fmt::Display;

use cxltier_metrics::text::Label;
use cxltier_metrics::{Figure, Writer};

use crate::engine::{IntervalReport, MemoryReport, NodeStats, Status, Tiers};
use crate::policy::Policy;
use crate::quarantine::QuarantineReport;

/// What the daemon runs with, shown as `cxltier_tierd_config_info`'s labels.
#[derive(Debug, Clone)]
pub struct ConfigInfo {
    /// The access source in use (`damon`, `idle-page`).
    pub access_source: &'static str,
    pub dry_run: bool,
    pub policy: Policy,
    pub tiers: Tiers,
}

/// The figures the exposition is rendered from, updated by the daemon after each round.
#[derive(Debug)]
pub struct TierdMetrics {
    config: ConfigInfo,
    /// The latest report of each current target.
    targets: BTreeMap<u32, IntervalReport>,
    /// Targets no longer followed, by why: `exited` or `left`.
    departed: BTreeMap<&'static str, u64>,
    quarantine: Option<QuarantineReport>,
    /// The base page size, which the quarantine's page counts are in.
    page_size: u64,
}

impl TierdMetrics {
    pub fn new(config: ConfigInfo) -> TierdMetrics {
        TierdMetrics {
            config,
            targets: BTreeMap::new(),
            departed: BTreeMap::new(),
            quarantine: None,
            page_size: cxltier_sys::page_size() as u64,
        }
    }

    /// Take a target's report: a running target's replaces its last one; a target that exited
    /// or left is dropped (its series go) and counted as departed.
    pub fn observe(&mut self, report: &IntervalReport) {
        let reason = match report.status {
            Status::Running => {
                self.targets.insert(report.pid, report.clone());
                return;
            }
            Status::Exited => "exited",
            Status::Left => "left",
        };
        if self.targets.remove(&report.pid).is_some() {
            *self.departed.entry(reason).or_default() += 1;
        }
    }

    /// Take the round's quarantine report; `None` (nothing quarantined now) keeps the running
    /// count of pages moved off but no ranges.
    pub fn observe_quarantine(&mut self, report: Option<&QuarantineReport>) {
        match (report, self.quarantine.as_mut()) {
            (Some(r), _) => self.quarantine = Some(r.clone()),
            (None, Some(q)) => {
                q.nodes.clear();
                q.ranges = 0;
            }
            (None, None) => {}
        }
    }

    /// The exposition, in Prometheus' text format 0.0.4.
    pub fn render(&self) -> String {
        let mut w = Writer::new();
        cxltier_metrics::build_info(&mut w);
        self.config_info(&mut w);
        w.gauge(
            "cxltier_tierd_targets",
            "Processes tierd places now (they exited or left the cgroup: no longer counted).",
        )
        .sample(&[], self.targets.len());
        let mut departed = w.counter(
            "cxltier_tierd_targets_departed_total",
            "Targets no longer followed, by reason: exited, or left the cgroup.",
        );
        for reason in ["exited", "left"] {
            departed.sample(
                &[("reason", &reason)],
                self.departed.get(reason).copied().unwrap_or(0),
            );
        }
        let reports: Vec<&IntervalReport> = self.targets.values().collect();
        let by_node: Vec<([Label<'_>; 3], &NodeStats)> = reports
            .iter()
            .flat_map(|r| {
                r.nodes.iter().map(|(node, n)| {
                    let pid: &dyn Display = &r.pid;
                    ([("pid", pid), ("node", node), ("tier", &n.tier)], n)
                })
            })
            .collect();
        let per_node: [Figure<&NodeStats>; 4] = [
            Figure::gauge(
                "cxltier_tierd_resident_bytes",
                "Resident private anonymous bytes of the target on the node.",
                |n| n.resident_bytes,
            ),
            Figure::gauge(
                "cxltier_tierd_hot_bytes",
                "Bytes of the target on the node that the policy counts as hot.",
                |n| n.hot_bytes,
            ),
            Figure::gauge(
                "cxltier_tierd_warm_bytes",
                "Bytes of the target on the node that are neither hot nor cold.",
                |n| n.warm_bytes,
            ),
            Figure::gauge(
                "cxltier_tierd_cold_bytes",
                "Bytes of the target on the node that the policy counts as cold.",
                |n| n.cold_bytes,
            ),
        ];
        w.figures(&per_node, &by_node);
        let mut f = w.gauge(
            "cxltier_tierd_access_bytes",
            "Bytes by access frequency: the percentage of the access source's samples that saw the page accessed (DAMON: its region; idle-page: its last intervals), in buckets of 10.",
        );
        for r in &reports {
            for (node, n) in &r.nodes {
                for (i, b) in n.access_histogram_bytes.iter().enumerate() {
                    let range = format!("{}-{}", i * 10, i * 10 + 10);
                    f.sample(
                        &[("pid", &r.pid), ("node", node), ("access_percent", &range)],
                        *b,
                    );
                }
            }
        }
        let mut f = w.counter(
            "cxltier_tierd_moved_in_bytes_total",
            "Bytes of the target moved onto the node since tierd began following it.",
        );
        for r in &reports {
            for (node, n) in &r.nodes {
                f.sample(
                    &[("pid", &r.pid), ("node", node), ("tier", &n.tier)],
                    n.moved_in_pages * r.page_size,
                );
            }
        }
        let by_target: Vec<([Label<'_>; 1], &IntervalReport)> = reports
            .iter()
            .map(|r| ([("pid", &r.pid as &dyn Display)], *r))
            .collect();
        let per_target: [Figure<&IntervalReport>; 3] = [
            Figure::counter(
                "cxltier_tierd_promoted_bytes_total",
                "Bytes of the target moved to the fast tier.",
                |r| r.total.promoted_pages * r.page_size,
            ),
            Figure::counter(
                "cxltier_tierd_demoted_bytes_total",
                "Bytes of the target moved off the fast tier.",
                |r| r.total.demoted_pages * r.page_size,
            ),
            Figure::counter(
                "cxltier_tierd_migrated_bytes_total",
                "Bytes of the target moved, either way.",
                |r| r.total.migrated_bytes,
            ),
        ];
        w.figures(&per_target, &by_target);
        let mut f = w.counter(
            "cxltier_tierd_failed_move_bytes_total",
            "Bytes of the target the kernel did not move (tried again later), by its per-page error.",
        );
        for r in &reports {
            for (why, n) in &r.total.failures {
                f.sample(&[("pid", &r.pid), ("error", why)], n * r.page_size);
            }
        }
        let mut f = w.gauge(
            "cxltier_tierd_retry_pending_bytes",
            "Bytes of the target whose last move failed, to be tried again.",
        );
        for r in &reports {
            f.sample(&[("pid", &r.pid)], r.retry_pending as u64 * r.page_size);
        }
        let mut f = w.gauge(
            "cxltier_tierd_fast_tier_budget_bytes",
            "The most bytes of the target on the fast tier (--dram-budget); absent when unbounded.",
        );
        for r in &reports {
            if let Some(b) = r.dram_budget_bytes {
                f.sample(&[("pid", &r.pid)], b);
            }
        }
        self.memory_metrics(&mut w, &reports);
        if let Some(q) = &self.quarantine {
            self.quarantine_metrics(&mut w, q);
        }
        w.finish()
    }

    fn config_info(&self, w: &mut Writer) {
        let c = &self.config;
        let nodes = |ns: &[u32]| ns.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let (fast, slow) = (nodes(&c.tiers.fast), nodes(&c.tiers.slow));
        let p = &c.policy;
        let interval = p.limits.interval_ms as f64 / 1000.0;
        let rate = p.limits.max_migrate_mbps * 1e6;
        let budget = p
            .limits
            .dram_budget
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        w.info(
            "cxltier_tierd_config_info",
            "What tierd runs with: access source, dry run, fast and slow nodes, loop interval (seconds), migration rate limit (bytes per second), hot and cold thresholds (percent of samples), DRAM budget.",
        )
        .info(&[
            ("access_source", &c.access_source),
            ("dry_run", &c.dry_run),
            ("fast_nodes", &fast),
            ("slow_nodes", &slow),
            ("interval_seconds", &interval),
            ("max_migrate_bytes_per_second", &rate),
            ("hot_percent", &p.placement.hot_percent),
            ("cold_percent", &p.placement.cold_percent),
            ("dram_budget", &budget),
        ]);
    }

    /// Memory mode's series (`--nvme`), present only when it is on.
    fn memory_metrics(&self, w: &mut Writer, reports: &[&IntervalReport]) {
        let with: Vec<(&IntervalReport, &MemoryReport)> = reports
            .iter()
            .filter_map(|r| r.memory.as_ref().map(|m| (*r, m)))
            .collect();
        let Some((_, first)) = with.first() else {
            return;
        };
        let mut f = w.gauge(
            "cxltier_tierd_tier_bytes",
            "Bytes of the target per tier in memory mode: dram (fast nodes), cxl (slower nodes), nvme (in swap, VmSwap).",
        );
        for (r, m) in &with {
            for (tier, b) in &m.bytes {
                f.sample(&[("pid", &r.pid), ("tier", tier)], *b);
            }
        }
        let by_target: Vec<([Label<'_>; 1], (&IntervalReport, &MemoryReport))> = with
            .iter()
            .map(|&(r, m)| ([("pid", &r.pid as &dyn Display)], (r, m)))
            .collect();
        let per_target: [Figure<(&IntervalReport, &MemoryReport)>; 5] = [
            Figure::gauge(
                "cxltier_tierd_memory_keep_bytes",
                "The most bytes of the target kept in memory (DRAM + CXL budgets); beyond it, the coldest pages are paged out.",
                |(_, m)| m.keep_bytes,
            ),
            Figure::counter(
                "cxltier_tierd_pageout_bytes_total",
                "Bytes of the target advised out to NVMe (process_madvise MADV_PAGEOUT).",
                |(r, m)| m.pageout_pages_total * r.page_size,
            ),
            Figure::counter(
                "cxltier_tierd_prefetch_bytes_total",
                "Bytes of the target read back from NVMe ahead of their fault (MADV_WILLNEED: their region is hot again).",
                |(r, m)| m.prefetch_pages_total * r.page_size,
            ),
            Figure::counter(
                "cxltier_tierd_prefetch_hits_total",
                "Pages read back ahead of their fault that were resident and hot at the next interval (wanted, not paged out again).",
                |(_, m)| m.prefetch_hits_total,
            ),
            Figure::gauge(
                "cxltier_tierd_pageout_allowance_bytes",
                "The most bytes a target may page out in one interval: the rate limit's, or the SLA controller's figure.",
                |(r, m)| m.allowance_pages * r.page_size,
            ),
        ];
        w.figures(&per_target, &by_target);
        if let Some(free) = first.nvme_free_bytes {
            w.gauge(
                "cxltier_tierd_nvme_free_bytes",
                "Free bytes in tierd's swap area.",
            )
            .sample(&[], free);
            w.gauge(
                "cxltier_tierd_nvme_full",
                "1 when tierd's swap area is full and offloading has stopped.",
            )
            .sample(&[], u64::from(first.nvme_full));
        }
        if let (Some(some), Some(full)) = (first.stall_some_pct, first.stall_full_pct) {
            let mut f = w.gauge(
                "cxltier_tierd_memory_stall_percent",
                "Percent of the last interval that tasks stalled on memory (PSI some/full, from the totals).",
            );
            f.sample(&[("kind", &"some")], some);
            f.sample(&[("kind", &"full")], full);
        }
        if let Some(goal) = first.max_stall_pct {
            w.gauge(
                "cxltier_tierd_memory_stall_goal_percent",
                "The stall goal (--max-stall-pct) the pageout rate follows.",
            )
            .sample(&[], goal);
        }
        if with.iter().any(|(_, m)| m.refaults.is_some()) {
            let mut f = w.gauge(
                "cxltier_tierd_refaults_last_interval",
                "Anonymous pages read back from swap soon after reclaim in the last interval (workingset_refault_anon of the target's cgroup; system-wide where it has no cgroup v2).",
            );
            for (r, m) in &with {
                if let Some(refaults) = m.refaults {
                    f.sample(&[("pid", &r.pid)], refaults);
                }
            }
        }
    }

    fn quarantine_metrics(&self, w: &mut Writer, q: &QuarantineReport) {
        let mut f = w.gauge(
            "cxltier_tierd_quarantined_ranges",
            "Poisoned ranges in the quarantine file, by the node they are on.",
        );
        for (n, r) in &q.nodes {
            f.sample(&[("node", n)], r.ranges);
        }
        let mut f = w.gauge(
            "cxltier_tierd_quarantined_bytes",
            "Bytes of poisoned ranges in the quarantine file, by the node they are on.",
        );
        for (n, r) in &q.nodes {
            f.sample(&[("node", n)], r.bytes);
        }
        w.counter(
            "cxltier_tierd_quarantine_moved_off_bytes_total",
            "Bytes of target pages moved off quarantined frames.",
        )
        .sample(&[], q.moved_off_pages_total * self.page_size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{IntervalStats, NodeStats, Totals};
    use crate::quarantine::QuarantinedNode;

    fn config() -> ConfigInfo {
        ConfigInfo {
            access_source: "damon",
            dry_run: false,
            policy: Policy::default().with_dram_budget("64M".parse().unwrap()),
            tiers: Tiers {
                fast: vec![0],
                slow: vec![1, 2],
            },
        }
    }

    fn report(pid: u32, status: Status) -> IntervalReport {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            0,
            NodeStats {
                tier: "fast",
                resident_bytes: 8192,
                hot_bytes: 4096,
                moved_in_pages: 5,
                access_histogram_bytes: [4096, 0, 0, 0, 0, 0, 0, 0, 0, 4096],
                ..Default::default()
            },
        );
        nodes.insert(
            1,
            NodeStats {
                tier: "slow",
                resident_bytes: 4096,
                cold_bytes: 4096,
                ..Default::default()
            },
        );
        let mut total = Totals {
            promoted_pages: 3,
            demoted_pages: 1,
            migrated_bytes: 16384,
            failed_pages: 2,
            ..Default::default()
        };
        total.failures.insert("EBUSY".into(), 2);
        IntervalReport {
            t_s: 1.0,
            pid,
            status,
            source: "damon",
            dry_run: false,
            regions: 10,
            page_size: 4096,
            dram_budget_bytes: Some(64 << 20),
            fast_bytes: 8192,
            huge_pages: Some(0),
            nodes,
            interval: IntervalStats::default(),
            total,
            retry_pending: 1,
            rate_limit_bytes_per_s: 1e6,
            rate_limit_bound_bytes: 2e6,
            memory: None,
            sampled: None,
        }
    }

    fn quarantine() -> QuarantineReport {
        let mut q = QuarantineReport {
            ranges: 2,
            moved_off_pages_total: 3,
            ..Default::default()
        };
        q.nodes.insert(
            1,
            QuarantinedNode {
                ranges: 2,
                bytes: 128,
            },
        );
        q
    }

    #[test]
    fn names_are_in_base_units_and_counters_end_in_total() {
        let mut m = TierdMetrics::new(config());
        m.observe(&report(42, Status::Running));
        m.observe_quarantine(Some(&quarantine()));
        let text = m.render();
        for line in [
            "cxltier_tierd_resident_bytes{pid=\"42\",node=\"0\",tier=\"fast\"} 8192",
            "cxltier_tierd_moved_in_bytes_total{pid=\"42\",node=\"0\",tier=\"fast\"} 20480",
            "cxltier_tierd_promoted_bytes_total{pid=\"42\"} 12288",
            "cxltier_tierd_demoted_bytes_total{pid=\"42\"} 4096",
            "cxltier_tierd_migrated_bytes_total{pid=\"42\"} 16384",
            "cxltier_tierd_failed_move_bytes_total{pid=\"42\",error=\"EBUSY\"} 8192",
            "cxltier_tierd_retry_pending_bytes{pid=\"42\"} 4096",
            "cxltier_tierd_access_bytes{pid=\"42\",node=\"0\",access_percent=\"90-100\"} 4096",
            "cxltier_tierd_fast_tier_budget_bytes{pid=\"42\"} 67108864",
            "cxltier_tierd_targets 1",
            "cxltier_tierd_targets_departed_total{reason=\"exited\"} 0",
            "cxltier_tierd_quarantined_ranges{node=\"1\"} 2",
            "cxltier_tierd_quarantine_moved_off_bytes_total ",
            "# TYPE cxltier_tierd_moved_in_bytes_total counter",
            "# TYPE cxltier_build_info gauge",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        assert!(text.contains(
            "cxltier_tierd_config_info{access_source=\"damon\",dry_run=\"false\",fast_nodes=\"0\",slow_nodes=\"1,2\",interval_seconds=\"1\",max_migrate_bytes_per_second=\"64000000\",hot_percent=\""
        ), "{text}");
        assert!(
            !text.contains("_pages"),
            "pages are not a base unit:\n{text}"
        );
        // Every family has its HELP; every counter (and nothing else) ends in _total.
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let mut parts = line.split(' ').skip(2);
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "{name} has no HELP"
            );
            assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
        }
        cxltier_metrics::promtool::assert_clean("tierd's exposition", &text);
        // The dashboard in docs/ asks for names tierd has.
        let dashboard = include_str!("../../../docs/grafana-cxltier.json");
        let mut asked = 0;
        for (i, _) in dashboard.match_indices("cxltier_tierd_") {
            let name: String = dashboard[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            asked += 1;
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "docs/grafana-cxltier.json asks for {name}, which tierd does not have"
            );
        }
        assert!(asked >= 10, "{asked} tierd names in the dashboard");
    }

    #[test]
    fn memory_mode_series_appear_only_with_memory_mode() {
        let mut m = TierdMetrics::new(config());
        m.observe(&report(42, Status::Running));
        assert!(!m.render().contains("cxltier_tierd_tier_bytes"));
        let mut r = report(42, Status::Running);
        r.memory = Some(MemoryReport {
            bytes: BTreeMap::from([("dram", 8192), ("cxl", 4096), ("nvme", 12288)]),
            keep_bytes: 12288,
            pageout_pages_total: 3,
            prefetch_pages_total: 2,
            prefetch_hits_total: 1,
            allowance_pages: 10,
            nvme_free_bytes: Some(1 << 20),
            stall_some_pct: Some(2.5),
            stall_full_pct: Some(0.5),
            max_stall_pct: Some(5.0),
            refaults: Some(7),
            ..MemoryReport::default()
        });
        m.observe(&r);
        let text = m.render();
        for line in [
            "cxltier_tierd_tier_bytes{pid=\"42\",tier=\"nvme\"} 12288",
            "cxltier_tierd_tier_bytes{pid=\"42\",tier=\"dram\"} 8192",
            "cxltier_tierd_pageout_bytes_total{pid=\"42\"} 12288",
            "cxltier_tierd_prefetch_bytes_total{pid=\"42\"} 8192",
            "cxltier_tierd_prefetch_hits_total{pid=\"42\"} 1",
            "cxltier_tierd_pageout_allowance_bytes{pid=\"42\"} 40960",
            "cxltier_tierd_memory_keep_bytes{pid=\"42\"} 12288",
            "cxltier_tierd_nvme_free_bytes 1048576",
            "cxltier_tierd_nvme_full 0",
            "cxltier_tierd_memory_stall_percent{kind=\"some\"} 2.5",
            "cxltier_tierd_memory_stall_goal_percent 5",
            "cxltier_tierd_refaults_last_interval{pid=\"42\"} 7",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        cxltier_metrics::promtool::assert_clean("tierd's memory-mode exposition", &text);
    }

    #[test]
    fn a_target_that_exits_or_leaves_has_its_series_dropped() {
        let mut m = TierdMetrics::new(config());
        for pid in [41, 42, 43] {
            m.observe(&report(pid, Status::Running));
        }
        assert!(m.render().contains("pid=\"41\""));
        m.observe(&report(41, Status::Exited));
        m.observe(&report(42, Status::Left));
        // A report of a target already gone is not counted twice.
        m.observe(&report(42, Status::Left));
        let text = m.render();
        for gone in ["pid=\"41\"", "pid=\"42\""] {
            assert!(!text.contains(gone), "{gone} still in\n{text}");
        }
        assert!(
            text.contains("cxltier_tierd_resident_bytes{pid=\"43\""),
            "{text}"
        );
        assert!(text.contains("cxltier_tierd_targets 1\n"), "{text}");
        assert!(text.contains("cxltier_tierd_targets_departed_total{reason=\"exited\"} 1\n"));
        assert!(text.contains("cxltier_tierd_targets_departed_total{reason=\"left\"} 1\n"));
        // Nothing quarantined any more: no ranges, but what was moved off stays counted.
        m.observe_quarantine(Some(&quarantine()));
        m.observe_quarantine(None);
        let text = m.render();
        assert!(
            !text.contains("cxltier_tierd_quarantined_ranges{"),
            "{text}"
        );
        assert!(text.contains("cxltier_tierd_quarantine_moved_off_bytes_total "));
    }
}
