//! INFO: its sections and fields as Redis 7.0 names them (tools read them), and the memory
//! figures INFO, CONFIG GET maxmemory, the OOM refusal and the metrics share.

use cxltier_store::{Store, StoreError};

use crate::context::*;
use crate::memory::memory_figures;
use crate::resp::reply;
use crate::version::REDIS_VERSION;

pub(crate) fn info(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sections: Vec<String> = args[1..]
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .collect();
    let text = info_text(ctx.store, ctx.info, &sections);
    reply::verbatim(ctx.out, ctx.session.proto, "txt", text.as_bytes());
    Ok(Effect::Read)
}

/// The sections INFO gives without an argument (Redis's default set, and cxltier's own).
const DEFAULT_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "recovery",
    "stats",
    "replication",
    "cpu",
    "errorstats",
    "tiers",
    "poison",
    "keyspace",
];

/// Bytes as Redis's `*_human` fields write them: `1.50M`.
fn human_bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if n >= size {
            return format!("{:.2}{unit}", n as f64 / size as f64);
        }
    }
    format!("{n}B")
}

/// A section of INFO: its title line (`# title`), then a `name:value` line a field. The blank
/// line that ends it is the caller's, after any lines of its own.
fn section(t: &mut String, title: &str, fields: &[(&str, &dyn std::fmt::Display)]) {
    use std::fmt::Write;
    let _ = write!(t, "# {title}\r\n");
    for (name, value) in fields {
        let _ = write!(t, "{name}:{value}\r\n");
    }
}

fn info_text(store: &Store, info: &mut ServerInfo, sections: &[String]) -> String {
    use std::fmt::Write;
    let st = store.stats();
    let everything = sections.iter().any(|s| s == "all" || s == "everything");
    let default = sections.is_empty() || sections.iter().any(|s| s == "default");
    let mut t = String::new();
    let want = |s: &str| {
        everything || (default && DEFAULT_SECTIONS.contains(&s)) || sections.iter().any(|x| x == s)
    };
    if want("server") {
        let uptime = info.started.map(|s| s.elapsed().as_secs()).unwrap_or(0);
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros());
        let executable = std::env::current_exe().map(|p| p.display().to_string());
        section(
            &mut t,
            "Server",
            &[
                ("redis_version", &REDIS_VERSION),
                ("cxltier_version", &env!("CARGO_PKG_VERSION")),
                ("redis_git_sha1", &"00000000"),
                ("redis_git_dirty", &0),
                ("redis_build_id", &0),
                ("redis_mode", &"standalone"),
                (
                    "os",
                    &format_args!("Linux {} {}", release.trim(), std::env::consts::ARCH),
                ),
                ("arch_bits", &usize::BITS),
                ("multiplexing_api", &"epoll"),
                ("process_id", &std::process::id()),
                ("process_supervised", &"no"),
                ("run_id", &info.run_id),
                ("tcp_port", &info.port),
                ("server_time_usec", &now_us),
                ("uptime_in_seconds", &uptime),
                ("uptime_in_days", &(uptime / 86_400)),
                ("hz", &10),
                ("configured_hz", &10),
                ("executable", &executable.unwrap_or_default()),
                ("config_file", &""),
            ],
        );
        t.push_str("\r\n");
    }
    if want("clients") {
        let watching = info
            .watchers
            .values()
            .flatten()
            .collect::<hashbrown::HashSet<_>>();
        section(
            &mut t,
            "Clients",
            &[
                ("connected_clients", &info.connected_clients),
                ("cluster_connections", &0),
                ("maxclients", &info.max_clients),
                (
                    "client_recent_max_input_buffer",
                    &info.client_peak_input_buffer,
                ),
                (
                    "client_recent_max_output_buffer",
                    &info.client_peak_output_buffer,
                ),
                ("client_peak_input_buffer", &info.client_peak_input_buffer),
                ("client_peak_output_buffer", &info.client_peak_output_buffer),
                // Those CLIENT PAUSE holds count too, as in Redis (BLOCKED_POSTPONE).
                ("blocked_clients", &(info.blocked.len() + info.paused.len())),
                ("tracking_clients", &info.tracking.clients.len()),
                ("clients_in_timeout_table", &0),
                ("pubsub_clients", &info.pubsub.subscribers()),
                ("watching_clients", &watching.len()),
            ],
        );
        t.push_str("\r\n");
    }
    if want("memory") {
        let (used, max) = memory_figures(&st);
        info.used_memory_peak = info.used_memory_peak.max(used);
        let peak = info.used_memory_peak;
        let rss = crate::memory::resident_bytes();
        let lua = info.scripts.used_memory() as u64;
        let functions = &info.scripts.functions;
        let vm_functions = functions.used_memory() as u64;
        let (function_count, library_count, functions_overhead) = (
            functions.function_count(),
            functions.library_count(),
            functions.overhead(),
        );
        section(
            &mut t,
            "Memory",
            &[
                ("used_memory", &used),
                ("used_memory_human", &human_bytes(used)),
                ("used_memory_rss", &rss),
                ("used_memory_rss_human", &human_bytes(rss)),
                ("used_memory_peak", &peak),
                ("used_memory_peak_human", &human_bytes(peak)),
                ("used_memory_lua", &lua),
                ("used_memory_vm_eval", &lua),
                ("used_memory_lua_human", &human_bytes(lua)),
                ("number_of_cached_scripts", &info.scripts.cached()),
                ("number_of_functions", &function_count),
                ("number_of_libraries", &library_count),
                ("used_memory_vm_functions", &vm_functions),
                ("used_memory_vm_total", &(lua + vm_functions)),
                (
                    "used_memory_vm_total_human",
                    &human_bytes(lua + vm_functions),
                ),
                ("used_memory_functions", &functions_overhead),
                ("maxmemory", &max),
                ("maxmemory_human", &human_bytes(max)),
                ("maxmemory_policy", &store.eviction_policy().name()),
                // UNLINK, FLUSHDB ASYNC and the lazyfree-lazy-* settings do what DEL and FLUSHDB
                // do, before the command answers: nothing is ever pending, and nothing was
                // freed in the background.
                // used_memory holds no client or replication buffers at all (it is the
                // store's slots and index), so none of it is left out of eviction's count.
                ("mem_not_counted_for_evict", &0),
                ("lazyfree_pending_objects", &0),
                ("lazyfreed_objects", &0),
                ("index_bytes", &st.index_bytes),
            ],
        );
        t.push_str("\r\n");
    }
    if want("persistence") {
        section(
            &mut t,
            "Persistence",
            &[
                ("loading", &0),
                (
                    "rdb_changes_since_last_save",
                    &store.changes().saturating_sub(info.changes_at_save),
                ),
                ("aof_enabled", &((st.durability != "none") as u8)),
                ("durability", &st.durability),
            ],
        );
        t.push_str("\r\n");
    }
    if want("recovery") {
        // What the store's recovery could not read at start (non-zero only with
        // --recover-anyway) and the keys it served although they may be stale.
        let r = store.recovery();
        section(
            &mut t,
            "Recovery",
            &[
                ("recovery_keys_recovered", &r.keys_recovered),
                ("recovery_records", &r.records),
                ("recovery_damaged_ranges", &r.damaged_ranges.len()),
                ("recovery_damaged_bytes", &r.damaged_bytes),
                ("recovery_keys_possibly_stale", &r.keys_possibly_stale),
                (
                    "recovery_torn_tail_bytes",
                    &r.torn_tail.as_ref().map_or(0, |d| d.bytes),
                ),
                ("recovery_headers_repaired", &r.headers_repaired),
            ],
        );
        for (i, d) in r.damaged_ranges.iter().enumerate() {
            let _ = write!(
                t,
                "recovery_damage_{i}:segment={},offset={},bytes={},file_offset={}\r\n",
                d.segment, d.offset, d.bytes, d.file_offset
            );
        }
        t.push_str("\r\n");
    }
    if want("stats") {
        section(
            &mut t,
            "Stats",
            &[
                ("total_connections_received", &info.total_connections),
                ("total_commands_processed", &info.total_commands),
                ("instantaneous_ops_per_sec", &info.ops_per_sec()),
                ("rejected_connections", &info.rejected_connections),
                ("expired_keys", &info.expired_keys),
                ("evicted_keys", &info.evicted_keys),
                ("keyspace_hits", &info.keyspace_hits),
                ("keyspace_misses", &info.keyspace_misses),
                ("pubsub_channels", &info.pubsub.channels.len()),
                ("pubsub_patterns", &info.pubsub.patterns.len()),
                ("pubsubshard_channels", &info.pubsub.shard_channels.len()),
                ("tracking_total_keys", &info.tracking.totals().0),
                ("tracking_total_items", &info.tracking.totals().1),
                ("tracking_total_prefixes", &info.tracking.totals().2),
                (
                    "client_query_buffer_limit_disconnections",
                    &info.client_query_buffer_limit_disconnections,
                ),
                (
                    "client_output_buffer_limit_disconnections",
                    &info.client_output_buffer_limit_disconnections,
                ),
                ("total_error_replies", &info.errors.total()),
                ("migrate_cached_sockets", &info.migrate_sockets.len()),
                ("eventloop_cycles", &info.eventloop_cycles),
                (
                    "eventloop_connections_visited",
                    &info.eventloop_connections_visited,
                ),
            ],
        );
        t.push_str("\r\n");
    }
    if want("replication") {
        let r = &info.repl;
        let now = std::time::Instant::now();
        let _ = write!(
            t,
            "# Replication\r\nrole:master\r\nconnected_slaves:{}\r\n",
            r.replicas.len()
        );
        // Redis's slaveN line; `state` is wait_bgsave until the snapshot is sent whole.
        for (n, rep) in r.replicas.values().enumerate() {
            let _ = write!(
                t,
                "slave{n}:ip={},port={},state={},offset={},lag={}\r\n",
                rep.ip,
                rep.port,
                if rep.online { "online" } else { "wait_bgsave" },
                rep.ack_offset,
                now.saturating_duration_since(rep.ack_time).as_secs()
            );
        }
        let _ = write!(
            t,
            "master_failover_state:no-failover\r\nmaster_replid:{}\r\nmaster_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:{}\r\nsecond_repl_offset:-1\r\nrepl_backlog_active:{}\r\nrepl_backlog_size:0\r\nrepl_backlog_first_byte_offset:0\r\nrepl_backlog_histlen:0\r\n\r\n",
            info.run_id,
            r.offset,
            u8::from(r.active)
        );
    }
    if want("cpu") {
        use cxltier_sys::Whose;
        let secs = |w: Whose| {
            cxltier_sys::cpu_times(w)
                .map(|c| (c.system.as_secs_f64(), c.user.as_secs_f64()))
                .unwrap_or_default()
        };
        let (sys, user) = secs(Whose::Process);
        let (csys, cuser) = secs(Whose::Children);
        // Commands run on the thread that answers INFO (the event loop).
        let (msys, muser) = secs(Whose::Thread);
        let _ = write!(
            t,
            "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:{csys:.6}\r\nused_cpu_user_children:{cuser:.6}\r\nused_cpu_sys_main_thread:{msys:.6}\r\nused_cpu_user_main_thread:{muser:.6}\r\n\r\n"
        );
    }
    // Not in the default set (Redis's rule): INFO commandstats, all or everything.
    if everything || sections.iter().any(|x| x == "commandstats") {
        let mut names: Vec<_> = info
            .command_stats
            .iter()
            .map(|(n, s)| (n.stat_name(), s))
            .collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        t.push_str("# Commandstats\r\n");
        for (name, s) in names {
            let per_call = if s.calls == 0 {
                0.0
            } else {
                s.usec as f64 / s.calls as f64
            };
            let _ = write!(
                t,
                "cmdstat_{}:calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}\r\n",
                name,
                s.calls,
                s.usec,
                s.rejected_calls,
                s.failed_calls
            );
        }
        t.push_str("\r\n");
    }
    if want("errorstats") {
        t.push_str("# Errorstats\r\n");
        for (code, count) in info.errors.codes() {
            let _ = write!(t, "errorstat_{code}:count={count}\r\n");
        }
        t.push_str("\r\n");
    }
    // Not in the default set either: INFO latencystats, all or everything.
    if everything || sections.iter().any(|x| x == "latencystats") {
        t.push_str("# Latencystats\r\n");
        if info.knobs.latency().1 {
            let pcts = info
                .knobs
                .get("latency-tracking-info-percentiles")
                .and_then(crate::latency::parse_percentiles)
                .unwrap_or_default();
            for (key, h) in info.latency.histograms() {
                t.push_str(&crate::latency::info_line(key, h, &pcts));
            }
        }
        t.push_str("\r\n");
    }
    if want("tiers") {
        section(
            &mut t,
            "Tiers",
            &[
                ("keys", &st.keys),
                ("index_bytes", &st.index_bytes),
                ("misses", &st.misses),
                ("evictions_to_nvme", &st.evictions_to_nvme),
                ("admissions_rejected", &st.admissions_rejected),
                ("slab_pages_moved", &st.slab_pages_moved),
                ("slab_objects_moved", &st.slab_objects_moved),
                ("slab_pages_compacted", &st.slab_pages_compacted),
                ("spare_slot_writes", &st.spare_slot_writes),
                (
                    "write_amplification",
                    &format_args!("{:.3}", st.write_amplification),
                ),
                ("segments_cleaned", &st.segments_cleaned),
                ("cxl_emulated_on_dram", &(st.cxl_emulated_on_dram as u8)),
            ],
        );
        for tier in &st.tiers {
            let p = format!("tier_{}_", tier.tier);
            let node = tier
                .node
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into());
            let _ = write!(
                t,
                "{p}node:{node}\r\n{p}capacity_bytes:{}\r\n{p}resident_bytes:{}\r\n{p}objects:{}\r\n{p}bytes:{}\r\n{p}hits:{}\r\n{p}promotions:{}\r\n{p}demotions:{}\r\n",
                tier.capacity_bytes, tier.resident_bytes, tier.objects, tier.bytes, tier.hits, tier.promotions, tier.demotions
            );
            if tier.tier == "nvme" {
                let _ = write!(
                    t,
                    "{p}reads:{}\r\n{p}writes:{}\r\n{p}read_bytes:{}\r\n{p}write_bytes:{}\r\n",
                    tier.reads, tier.writes, tier.read_bytes, tier.write_bytes
                );
                // Latency of the record reads since start or CONFIG RESETSTAT: zeros before any.
                let l = st.nvme_read_latency.unwrap_or(cxltier_store::ReadLatency {
                    reads: 0,
                    p50_us: 0,
                    p99_us: 0,
                    p999_us: 0,
                    max_us: 0,
                });
                let _ = write!(
                    t,
                    "{p}read_latency_reads:{}\r\n{p}read_latency_p50_us:{}\r\n{p}read_latency_p99_us:{}\r\n{p}read_latency_p999_us:{}\r\n{p}read_latency_max_us:{}\r\n",
                    l.reads, l.p50_us, l.p99_us, l.p999_us, l.max_us
                );
            }
        }
        if let Ok(placement) = store.placement() {
            for p in placement {
                let pages: Vec<String> = p
                    .pages_by_node
                    .iter()
                    .map(|(n, c)| format!("node{n}={c}"))
                    .collect();
                let _ = write!(t, "tier_{}_pages_on:{}\r\n", p.tier, pages.join(","));
            }
        }
        t.push_str("\r\n");
    }
    if want("poison") {
        t.push_str(&crate::quarantine::info_section(store, &info.poison));
    }
    if want("keyspace") {
        // Redis's lines, one per database holding keys, by the number clients select; avg_ttl
        // is the mean remaining TTL in ms of the keys that have one (Redis estimates it from
        // its expiry sampling; this is the exact mean, from a walk of the index).
        t.push_str("# Keyspace\r\n");
        let mut dbs: Vec<(usize, cxltier_store::DbKeyspace)> = store
            .keyspace(now_ms())
            .into_iter()
            .filter_map(|d| Some((info.dbs.logical(d.db)?, d)))
            .collect();
        dbs.sort_unstable_by_key(|&(logical, _)| logical);
        for (logical, d) in dbs {
            let avg_ttl = if d.expires == 0 {
                0
            } else {
                d.ttl_ms_sum / u128::from(d.expires)
            };
            let _ = write!(
                t,
                "db{logical}:keys={},expires={},avg_ttl={avg_ttl}\r\n",
                d.keys, d.expires
            );
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use cxltier_store::StoreBuilder;

    use super::*;

    use crate::testdb::*;

    /// INFO has Redis's cpu section by default and commandstats on request (Redis's
    /// info-command tests), with calls, rejected and failed calls counted per command.
    #[test]
    fn info_reports_cpu_time_and_per_command_counters() {
        let mut db = Db::large();
        db.cmd("SET a 1");
        db.cmd("GET a");
        db.cmd("GET a");
        db.cmd("GET");
        db.cmd("INCR a");
        db.cmd("SET a x");
        db.cmd("INCR a");
        for arg in ["", " all", " default", " everything", " cpu"] {
            let info = db.cmd(&format!("INFO{arg}"));
            assert!(info.contains("used_cpu_user:"), "{arg}: {info}");
            assert!(info.contains("used_cpu_sys_main_thread:"), "{arg}");
            let all = arg == " all" || arg == " everything";
            assert_eq!(info.contains("rejected_calls"), all, "{arg}");
        }
        let stats = db.cmd("INFO commandSTATS");
        assert!(!stats.contains("used_memory"));
        assert_has(
            &stats,
            &[
                "cmdstat_get:calls=2,usec=",
                ",rejected_calls=1,failed_calls=0\r\n",
                "cmdstat_incr:calls=2,",
                ",rejected_calls=0,failed_calls=1\r\n",
            ],
        );
        db.cmd("CONFIG RESETSTAT");
        assert!(!db.cmd("INFO commandstats").contains("cmdstat_get"));
    }

    /// INFO errorstats and total_error_replies as Redis's info tests count them: each error
    /// once, where it was made (a queued command's inside EXEC, a script's `redis.pcall`), the
    /// refusals before a command runs included, and EXECABORT under its own code.
    #[test]
    fn error_replies_are_counted_once_by_code() {
        let mut db = Db::large();
        let errorstats = |db: &mut Db| {
            let info = db.cmd("INFO errorstats");
            let total = db.cmd("INFO stats");
            let total = total
                .lines()
                .find_map(|l| l.strip_prefix("total_error_replies:"))
                .unwrap()
                .to_string();
            let codes: Vec<String> = info
                .lines()
                .filter(|l| l.starts_with("errorstat_"))
                .map(String::from)
                .collect();
            (total, codes)
        };
        assert_eq!(errorstats(&mut db), ("0".into(), vec![]));
        db.cmd("NOSUCHCOMMAND");
        db.cmd("SET k");
        db.cmd("SET s v");
        db.cmd("LPUSH s x");
        assert_eq!(
            errorstats(&mut db),
            (
                "3".into(),
                vec![
                    "errorstat_ERR:count=2".into(),
                    "errorstat_WRONGTYPE:count=1".into()
                ]
            )
        );
        db.cmd("CONFIG RESETSTAT");
        // A queued command's error inside EXEC is the command's; EXEC's array is no error.
        db.cmd("MULTI");
        db.cmd("SET a b");
        db.cmd("LPUSH s x");
        assert!(db.cmd("EXEC").starts_with("*2\r\n+OK\r\n-WRONGTYPE"));
        assert_eq!(
            errorstats(&mut db),
            ("1".into(), vec!["errorstat_WRONGTYPE:count=1".into()])
        );
        // A command refused while queued, then EXECABORT.
        db.cmd("CONFIG RESETSTAT");
        db.cmd("MULTI");
        db.cmd("SET");
        assert!(db.cmd("EXEC").starts_with("-EXECABORT"));
        assert_eq!(
            errorstats(&mut db),
            (
                "2".into(),
                vec![
                    "errorstat_ERR:count=1".into(),
                    "errorstat_EXECABORT:count=1".into()
                ]
            )
        );
        // A script: the error of the command it ran counts; the script's error passing it on
        // does not count again; an error the script makes up counts under its code.
        db.cmd("CONFIG RESETSTAT");
        let pcall = db.run(&[b"EVAL", b"redis.pcall('LPUSH', 's', 'x') return 1", b"0"]);
        assert_eq!(pcall, b":1\r\n");
        let call = db.run(&[b"EVAL", b"return redis.call('LPUSH', 's', 'x')", b"0"]);
        assert!(
            call.starts_with(b"-WRONGTYPE"),
            "{}",
            String::from_utf8_lossy(&call)
        );
        let own = db.run(&[
            b"EVAL",
            b"return redis.error_reply('MY_CODE made up')",
            b"0",
        ]);
        assert_eq!(own, b"-MY_CODE made up\r\n");
        assert_eq!(
            errorstats(&mut db),
            (
                "3".into(),
                vec![
                    "errorstat_MY_CODE:count=1".into(),
                    "errorstat_WRONGTYPE:count=2".into()
                ]
            )
        );
    }

    /// Hits and misses as Redis counts them: the keys read commands look up. A write is
    /// neither (an HSET of a new key used to count a miss).
    #[test]
    fn keyspace_hits_and_misses_count_reads_only() {
        let mut db = Db::large();
        db.cmd("HSET h f v");
        db.cmd("SET k v");
        db.cmd("INCR n");
        db.cmd("DEL nothing");
        // Writes that read what they change look it up for writing: no misses either (they
        // used to count some).
        for w in [
            "APPEND a x",
            "SETRANGE r 0 x",
            "SETBIT b 1 1",
            "INCRBYFLOAT f 1",
            "HINCRBY hi f 1",
            "HSETNX hn f v",
        ] {
            db.cmd(w);
        }
        assert_eq!(info_field(&mut db, "stats", "keyspace_misses"), "0");
        assert_eq!(info_field(&mut db, "stats", "keyspace_hits"), "0");
        db.cmd("GET k");
        db.cmd("GET missing");
        db.cmd("MGET k h missing");
        db.cmd("HGET h f");
        db.cmd("EXISTS k missing");
        db.cmd("TTL k");
        // Each input of a set operation is a read, its STORE form's too.
        db.cmd("SINTERSTORE d missing");
        assert_eq!(info_field(&mut db, "stats", "keyspace_hits"), "6");
        assert_eq!(info_field(&mut db, "stats", "keyspace_misses"), "4");
        db.cmd("CONFIG RESETSTAT");
        assert_eq!(info_field(&mut db, "stats", "keyspace_hits"), "0");
    }

    #[test]
    fn info_has_the_fields_tools_read() {
        let mut db = Db::large();
        // INFO keyspace has a line per database holding keys (none for an empty one).
        assert!(!db.cmd("INFO keyspace").contains("db0:"));
        db.cmd("SET k v");
        let all = db.cmd("INFO");
        for field in [
            "redis_version:7.0.15\r\n",
            "cxltier_version:",
            "redis_mode:standalone",
            "os:Linux ",
            "arch_bits:64",
            "process_id:",
            "run_id:",
            "uptime_in_seconds:",
            "connected_clients:",
            "blocked_clients:0",
            "maxclients:",
            "used_memory:",
            "used_memory_human:",
            "used_memory_peak:",
            "maxmemory:",
            "maxmemory_human:",
            "maxmemory_policy:noeviction",
            "total_connections_received:",
            "total_commands_processed:",
            "instantaneous_ops_per_sec:",
            "evicted_keys:0",
            "role:master",
            "connected_slaves:0",
            "tier_dram_objects:",
            "db0:keys=",
        ] {
            assert!(all.contains(field), "INFO lacks {field}");
        }
        // Several sections by name, only those.
        let two = db.cmd("INFO server replication");
        assert!(two.contains("# Server") && two.contains("# Replication"));
        assert!(!two.contains("# Clients") && !two.contains("# Tiers"));
        assert!(db.cmd("INFO everything").contains("# Poison"));
        // Samples taken 100 ms apart, 50 commands between them: 500/s.
        let t0 = std::time::Instant::now();
        db.info.total_commands = 1000;
        db.info.sample_ops(t0);
        db.info.total_commands = 1050;
        db.info
            .sample_ops(t0 + std::time::Duration::from_millis(100));
        assert_eq!(db.info.ops_per_sec(), 500);
    }

    /// used_memory within maxmemory, both from the budget, with the store as full as it gets.
    #[test]
    fn used_memory_stays_within_maxmemory() {
        let mut db = Db {
            store: StoreBuilder::new()
                .dram(8 << 20)
                .durability(cxltier_store::Durability::None)
                .build()
                .unwrap(),
            info: ServerInfo::default(),
            session: Session::new(0, true),
        };
        let value = "v".repeat(3000);
        let mut full = false;
        for i in 0..20_000 {
            let r = db.cmd(&format!("SET key{i} {value}"));
            if r.starts_with("-OOM") {
                full = true;
                break;
            }
        }
        assert!(full, "the store never filled");
        let used: u64 = info_field(&mut db, "memory", "used_memory")
            .parse()
            .unwrap();
        let max: u64 = info_field(&mut db, "memory", "maxmemory").parse().unwrap();
        assert!(used <= max, "used_memory {used} > maxmemory {max}");
        assert!(
            used > max / 2,
            "used_memory {used} of {max}: the store is full"
        );
        assert_eq!(max, 8 << 20, "maxmemory is the budget");
        // Emptied at once, as DEL would: nothing left for a background free.
        db.cmd("FLUSHDB ASYNC");
        assert_eq!(
            info_field(&mut db, "memory", "lazyfree_pending_objects"),
            "0"
        );
        assert_eq!(info_field(&mut db, "memory", "lazyfreed_objects"), "0");
        assert_eq!(db.cmd("DBSIZE"), ":0\r\n");
        let cfg = db.cmd("CONFIG GET maxmemory");
        assert!(
            cfg.ends_with(&format!("${}\r\n{max}\r\n", max.to_string().len())),
            "{cfg}"
        );
    }

    /// INFO keyspace: a line per database holding keys, by the number clients select (after a
    /// SWAPDB too), with the keys that have a TTL and their mean remaining TTL in ms.
    #[test]
    fn info_keyspace_counts_keys_expires_and_the_mean_ttl_per_database() {
        let mut db = Db::large();
        assert_eq!(db.cmd("INFO keyspace"), "$12\r\n# Keyspace\r\n\r\n");
        db.cmd("SET a 1");
        db.cmd("SET b 1 EX 100");
        db.cmd("SET c 1 EX 300");
        db.cmd("SELECT 7");
        db.cmd("RPUSH l x");
        let text = db.cmd("INFO keyspace");
        let line = |text: &str, d: usize| -> Option<(u64, u64, u64)> {
            let l = text.lines().find(|l| l.starts_with(&format!("db{d}:")))?;
            let f: Vec<u64> = l
                .split(['=', ','])
                .skip(1)
                .step_by(2)
                .map(|v| v.parse().unwrap())
                .collect();
            Some((f[0], f[1], f[2]))
        };
        let (keys, expires, avg) = line(&text, 0).expect("db0");
        assert_eq!((keys, expires), (3, 2));
        // The mean of ~100 s and ~300 s, less the few ms the test took.
        assert!((199_000..=200_000).contains(&avg), "{avg}");
        assert_eq!(line(&text, 7), Some((1, 0, 0)));
        assert_eq!(text.matches("db").count(), 2, "{text}");
        db.cmd("SWAPDB 0 4");
        let text = db.cmd("INFO keyspace");
        assert!(line(&text, 0).is_none());
        assert_eq!(line(&text, 4).map(|l| l.0), Some(3));
    }
}
