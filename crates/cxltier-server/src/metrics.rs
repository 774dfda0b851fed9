//! The server's Prometheus exposition (`cxltier serve --metrics-addr`): the store's tiers,
//! hits and misses, commands (per command of the table, and a latency histogram), clients,
//! NVMe I/O and memory, rendered by the event loop into a `cxltier_metrics::Published` that a
//! listener thread serves.
//!
//! The figures belong to the loop's thread, so the loop renders them itself, between turns,
//! from the store's constant-time statistics (`Store::quick_stats`: running counts, no walk of
//! the index), at most once a second; should a snapshot ever take long, the next waits until
//! snapshots have taken no more than [`MAX_SHARE`] of the loop's time.

use std::fmt::Display;
use std::time::{Duration, Instant};

use cxltier_metrics::text::Label;
use cxltier_metrics::{Figure, Writer};
use cxltier_store::StoreStats;

use crate::context::{CommandStat, ServerInfo};
use crate::memory::memory_figures;

/// The most of the loop's time snapshots may take.
pub const MAX_SHARE: f64 = 0.01;
/// The least time between two snapshots.
pub const MIN_PERIOD: Duration = Duration::from_secs(1);

/// When the loop publishes next, from how long the last snapshot took.
#[derive(Debug)]
pub struct Publisher {
    published: cxltier_metrics::Published,
    next: Instant,
    /// How long the last snapshot took (reported as a metric too).
    last_cost: Duration,
}

impl Publisher {
    /// Publishing into `published`; the first snapshot is due at once.
    pub fn new(published: cxltier_metrics::Published) -> Publisher {
        Publisher {
            published,
            next: Instant::now(),
            last_cost: Duration::ZERO,
        }
    }

    /// Whether a snapshot is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Take a snapshot with `snapshot` (timed) and publish it; the next is due after
    /// [`MIN_PERIOD`], or after the snapshot's cost divided by [`MAX_SHARE`] if that is later.
    pub fn publish(&mut self, snapshot: impl FnOnce(Duration) -> String) {
        let started = Instant::now();
        let text = snapshot(self.last_cost);
        self.published.publish(text);
        self.last_cost = started.elapsed();
        self.next = Instant::now() + MIN_PERIOD.max(self.last_cost.div_f64(MAX_SHARE));
    }
}

/// The exposition for `stats` (the store's `quick_stats`) and `info` (the server's);
/// `snapshot_cost` is how long the previous snapshot took.
pub fn render(stats: &StoreStats, info: &ServerInfo, snapshot_cost: Duration) -> String {
    let mut w = Writer::new();
    cxltier_metrics::build_info(&mut w);
    w.info(
        "cxltier_serve_config_info",
        "What the server runs with: durability, whether the CXL tier is emulated on DRAM, client and database limits.",
    )
    .info(&[
        ("durability", &stats.durability),
        ("cxl_emulated_on_dram", &stats.cxl_emulated_on_dram),
        ("maxclients", &info.max_clients),
        ("databases", &info.dbs.count()),
        ("proto_max_bulk_len", &info.proto_max_bulk_len),
    ]);
    if let Some(started) = info.started {
        let start = std::time::SystemTime::now()
            .checked_sub(started.elapsed())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs_f64());
        w.gauge(
            "cxltier_serve_start_time_seconds",
            "When the server started, in seconds since the Unix epoch.",
        )
        .sample(&[], start.floor());
    }
    tiers(&mut w, stats);
    let (used, budget) = memory_figures(stats);
    w.gauge(
        "cxltier_serve_used_memory_bytes",
        "Memory the store uses (INFO used_memory): the memory tiers' resident slab pages and the key index.",
    )
    .sample(&[], used);
    w.gauge(
        "cxltier_serve_maxmemory_bytes",
        "The memory limit (INFO maxmemory): the DRAM and CXL budgets, or CONFIG SET maxmemory when lower.",
    )
    .sample(&[], info.maxmemory_limit.map_or(budget, |l| l.min(budget)));
    w.gauge(
        "cxltier_serve_index_bytes",
        "Bytes of the key index, counted inside the DRAM budget.",
    )
    .sample(&[], stats.index_bytes);
    w.gauge("cxltier_serve_keys", "Keys in the store, all databases.")
        .sample(&[], stats.keys);
    w.counter(
        "cxltier_serve_keyspace_hits_total",
        "Keys read commands found (INFO keyspace_hits).",
    )
    .sample(&[], info.keyspace_hits);
    w.counter(
        "cxltier_serve_keyspace_misses_total",
        "Keys read commands looked up and did not find (INFO keyspace_misses).",
    )
    .sample(&[], info.keyspace_misses);
    w.counter(
        "cxltier_serve_expired_keys_total",
        "Keys removed because their time to live passed.",
    )
    .sample(&[], info.expired_keys);
    w.counter(
        "cxltier_serve_evicted_to_nvme_total",
        "Objects demoted out of memory to NVMe only.",
    )
    .sample(&[], stats.evictions_to_nvme);
    w.counter(
        "cxltier_serve_admissions_rejected_total",
        "Objects read from NVMe that the admission filter kept out of memory.",
    )
    .sample(&[], stats.admissions_rejected);
    w.counter(
        "cxltier_serve_nvme_segments_cleaned_total",
        "NVMe log segments cleaned (their live records moved, the segment reused).",
    )
    .sample(&[], stats.segments_cleaned);
    commands(&mut w, info);
    w.gauge(
        "cxltier_serve_connected_clients",
        "Open client connections.",
    )
    .sample(&[], info.connected_clients);
    w.gauge(
        "cxltier_serve_blocked_clients",
        "Clients waiting in a blocking command (BLPOP ...) or held by CLIENT PAUSE.",
    )
    .sample(&[], info.blocked.len() + info.paused.len());
    w.counter(
        "cxltier_serve_connections_total",
        "Client connections accepted.",
    )
    .sample(&[], info.total_connections);
    w.counter(
        "cxltier_serve_rejected_connections_total",
        "Connections refused at maxclients.",
    )
    .sample(&[], info.rejected_connections);
    w.gauge(
        "cxltier_serve_metrics_snapshot_seconds",
        "How long the previous metrics snapshot took the event loop (snapshots are spaced to take at most 1% of its time).",
    )
    .sample(&[], snapshot_cost.as_secs_f64());
    w.finish()
}

fn tiers(w: &mut Writer, stats: &StoreStats) {
    /// How a per-tier family is written.
    enum Type {
        Gauge,
        Counter,
    }
    /// A per-tier family: its type, name and help, whether only the memory tiers (those on a
    /// node) have it, and its value.
    type TierFamily = (
        Type,
        &'static str,
        &'static str,
        bool,
        fn(&cxltier_store::TierStats) -> u64,
    );
    let families: [TierFamily; 7] = [
        (
            Type::Gauge,
            "cxltier_serve_tier_capacity_bytes",
            "The tier's capacity: its budget (DRAM: after the index), or the NVMe log's size.",
            false,
            |t| t.capacity_bytes,
        ),
        (
            Type::Gauge,
            "cxltier_serve_tier_resident_bytes",
            "Bytes of the memory tier's slab pages in use (resident).",
            true,
            |t| t.resident_bytes,
        ),
        (
            Type::Gauge,
            "cxltier_serve_tier_objects",
            "Objects in the memory tier (collection chunks included); nvme: objects only on NVMe.",
            false,
            |t| t.objects,
        ),
        (
            Type::Counter,
            "cxltier_serve_tier_hits_total",
            "Object reads served from the tier.",
            false,
            |t| t.hits,
        ),
        (
            Type::Counter,
            "cxltier_serve_tier_promotions_total",
            "Objects moved up out of the tier (nvme: admitted to memory after a read).",
            false,
            |t| t.promotions,
        ),
        (
            Type::Counter,
            "cxltier_serve_tier_demotions_total",
            "Objects moved down out of the tier.",
            false,
            |t| t.demotions,
        ),
        (
            Type::Gauge,
            "cxltier_serve_tier_used_bytes",
            "Bytes of the memory tier's slots in use (each object's slot: key, value and header, rounded up to its size class).",
            true,
            |t| t.bytes,
        ),
    ];
    for (kind, name, help, memory_only, value) in families {
        let mut f = match kind {
            Type::Gauge => w.gauge(name, help),
            Type::Counter => w.counter(name, help),
        };
        for t in &stats.tiers {
            if memory_only && t.node.is_none() {
                continue;
            }
            f.sample(&[("tier", &t.tier)], value(t));
        }
    }
    let Some(nvme) = stats.tiers.iter().find(|t| t.tier == "nvme") else {
        return;
    };
    w.gauge(
        "cxltier_serve_nvme_live_bytes",
        "Bytes of the NVMe log's live records (objects only on NVMe, and the copies of those also in memory).",
    )
    .sample(&[], nvme.bytes);
    w.counter(
        "cxltier_serve_nvme_reads_total",
        "Reads issued to the NVMe device.",
    )
    .sample(&[], nvme.reads);
    w.counter(
        "cxltier_serve_nvme_writes_total",
        "Writes issued to the NVMe device.",
    )
    .sample(&[], nvme.writes);
    w.counter(
        "cxltier_serve_nvme_read_bytes_total",
        "Bytes read from the NVMe device.",
    )
    .sample(&[], nvme.read_bytes);
    w.counter(
        "cxltier_serve_nvme_written_bytes_total",
        "Bytes written to the NVMe device.",
    )
    .sample(&[], nvme.write_bytes);
    if let Some(l) = &stats.nvme_read_latency {
        let mut f = w.gauge(
            "cxltier_serve_nvme_read_latency_seconds",
            "NVMe record reads from start to collection since start (or CONFIG RESETSTAT), by percentile.",
        );
        for (p, us) in [
            ("50", l.p50_us),
            ("99", l.p99_us),
            ("99.9", l.p999_us),
            ("100", l.max_us),
        ] {
            f.sample(&[("percentile", &p)], us as f64 / 1e6);
        }
    }
}

fn commands(w: &mut Writer, info: &ServerInfo) {
    // By name, so that a scrape's series come in a stable order.
    let mut stats: Vec<_> = info.command_stats.iter().collect();
    stats.sort_unstable_by_key(|(name, _)| **name);
    let lower: Vec<String> = stats.iter().map(|(n, _)| n.stat_name()).collect();
    let by_command: Vec<([Label<'_>; 1], &CommandStat)> = stats
        .iter()
        .zip(&lower)
        .map(|((_, s), cmd)| ([("cmd", cmd as &dyn Display)], *s))
        .collect();
    let counters: [Figure<&CommandStat>; 3] = [
        Figure::counter(
            "cxltier_serve_commands_total",
            "Commands run, by the command table's name (INFO commandstats calls).",
            |s| s.calls,
        ),
        Figure::counter(
            "cxltier_serve_commands_failed_total",
            "Commands that ran and answered an error.",
            |s| s.failed_calls,
        ),
        Figure::counter(
            "cxltier_serve_commands_rejected_total",
            "Commands refused before running (arity, NOAUTH, OOM, NOREPLICAS, inside MULTI).",
            |s| s.rejected_calls,
        ),
    ];
    w.figures(&counters, &by_command);
    let seconds: [Figure<&CommandStat, f64>; 1] = [Figure::counter(
        "cxltier_serve_command_seconds_total",
        "Time commands took to run, by command (INFO commandstats usec).",
        |s| s.usec as f64 / 1e6,
    )];
    w.figures(&seconds, &by_command);
    w.histogram(
        "cxltier_serve_command_duration_seconds",
        "Time one command took to run, every command.",
    )
    .histogram(&[], &info.command_latency);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_that_took_long_spaces_the_next_out() {
        let mut p = Publisher::new(cxltier_metrics::Published::new());
        assert!(p.due(Instant::now()));
        p.publish(|_| "a\n".into());
        assert!(!p.due(Instant::now()));
        assert!(p.due(Instant::now() + MIN_PERIOD));
        // 30 ms (or more, on a loaded machine) of snapshot: the next no sooner than 100 times
        // that on (1%).
        p.publish(|_| {
            std::thread::sleep(Duration::from_millis(30));
            "b\n".into()
        });
        let after = Instant::now();
        let cost = p.last_cost;
        assert!(cost >= Duration::from_millis(30), "{cost:?}");
        assert!(!p.due(after + cost.mul_f64(99.0)));
        assert!(p.due(after + cost.mul_f64(101.0)));
        assert_eq!(&*p.published.text(), "b\n");
        // The cost is handed to the next snapshot.
        p.publish(|cost| {
            assert!(cost >= Duration::from_millis(30), "{cost:?}");
            String::new()
        });
    }
}
