//! The server's administration commands that have no module of their own (Redis's `server`
//! group): DBSIZE, FLUSHALL/FLUSHDB, SWAPDB, MEMORY, TIME, LASTSAVE, SAVE, BGSAVE,
//! BGREWRITEAOF and SHUTDOWN.

use cxltier_store::StoreError;

use crate::context::*;
use crate::resp::reply;

pub(crate) fn dbsize(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    let physical = ctx.info.dbs.physical(ctx.session.db);
    reply::int(ctx.out, ctx.store.db_len(physical) as i64);
    Ok(Effect::Read)
}

/// FLUSHALL (every database) and FLUSHDB (the selected one).
pub(crate) fn flushall(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mode_ok = |m: &&[u8]| m.eq_ignore_ascii_case(b"ASYNC") || m.eq_ignore_ascii_case(b"SYNC");
    if args.len() > 2 || !args.get(1).is_none_or(mode_ok) {
        return fail(ctx, SYNTAX);
    }
    if args[0].eq_ignore_ascii_case(b"FLUSHDB") {
        let physical = ctx.info.dbs.physical(ctx.session.db);
        ctx.store.flush_db(physical)?;
    } else {
        // Nothing is kept anywhere now: every database may as well be where its number says
        // (the map kept in the store went with everything else).
        ctx.store.flush_all()?;
        ctx.info.dbs.reset();
        // FLUSHALL leaves the functions' libraries, as Redis's does; the store's copy of them
        // went with everything else.
        crate::functions::persist(ctx.store, &ctx.info.scripts.functions)?;
    }
    // Clients parked on keys of the flushed databases are tried again, as Redis's
    // `signalFlushedDb` does (an XREADGROUP whose stream went answers so).
    if !ctx.info.blocked.is_empty() {
        let flushed: Vec<usize> = if args[0].eq_ignore_ascii_case(b"FLUSHDB") {
            vec![ctx.session.db]
        } else {
            (0..ctx.info.dbs.count()).collect()
        };
        ctx.info
            .db_swaps
            .extend(flushed.into_iter().map(|d| (d, d)));
    }
    // Replicated even when there was nothing to flush (Redis's forceCommandPropagation).
    ctx.session.force_propagate = true;
    reply::ok(ctx.out);
    Ok(Effect::Wrote)
}

/// SWAPDB a b: the two databases trade contents, in O(1): the logical → physical map swaps
/// two entries and is written to the store in the same batch ([`crate::db`]). Then, as Redis
/// does, transactions watching a key that exists in either database fail, and clients blocked
/// on keys of either are tried again.
pub(crate) fn swapdb(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(a) = parse_i64(args[1]) else {
        return fail(ctx, "ERR invalid first DB index");
    };
    let Some(b) = parse_i64(args[2]) else {
        return fail(ctx, "ERR invalid second DB index");
    };
    let n = ctx.info.dbs.count() as i64;
    if !(0..n).contains(&a) || !(0..n).contains(&b) {
        return fail(ctx, crate::db::OUT_OF_RANGE);
    }
    let (a, b) = (a as usize, b as usize);
    if a != b {
        let (pa, pb) = (ctx.info.dbs.physical(a), ctx.info.dbs.physical(b));
        let watched: Vec<Vec<u8>> = ctx
            .info
            .watchers
            .keys()
            .filter(|k| {
                k.first()
                    .is_some_and(|&d| d as usize == a || d as usize == b)
            })
            .filter(|k| {
                let user = crate::db::user_key(k);
                ctx.store.contains(&crate::db::store_key(pa, user))
                    || ctx.store.contains(&crate::db::store_key(pb, user))
            })
            .cloned()
            .collect();
        // Kept in the store first: a write the store refuses (full) leaves the map as it was,
        // and touches no transaction.
        let mut swapped = ctx.info.dbs.clone();
        swapped.swap(a, b);
        swapped.save(ctx.store)?;
        ctx.info.dbs = swapped;
        for k in watched {
            ctx.info.touch(&k);
        }
        if !ctx.info.blocked.is_empty() {
            ctx.info.db_swaps.push((a, b));
        }
    }
    reply::ok(ctx.out);
    Ok(Effect::Wrote)
}

/// MEMORY USAGE | STATS | DOCTOR | MALLOC-STATS | PURGE | HELP, as Redis 7.0's
/// `memoryCommand` answers them, with the store's figures (see [`memory_stats`]).
pub(crate) fn memory(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sub = args[1].to_ascii_uppercase();
    let proto = ctx.session.proto;
    match (sub.as_slice(), args.len()) {
        (b"HELP", 2) => reply::simple_lines(
            ctx.out,
            &[
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DOCTOR",
                "    Return memory problems reports.",
                "MALLOC-STATS",
                "    Return internal statistics report from the memory allocator.",
                "PURGE",
                "    Attempt to purge dirty pages for reclamation by the allocator.",
                "STATS",
                "    Return information about the memory usage of the server.",
                "USAGE <key> [SAMPLES <count>]",
                "    Return memory in bytes used by <key> and its value. Nested values are",
                "    sampled up to <count> times (default: 5, 0 means sample all).",
                "HELP",
                "    Print this help.",
            ],
        ),
        (b"USAGE", 3..) => {
            // The options as Redis reads them: SAMPLES n, n a whole number of at least 0.
            let mut j = 3;
            while j < args.len() {
                if args[j].eq_ignore_ascii_case(b"SAMPLES") && j + 1 < args.len() {
                    match parse_i64(args[j + 1]) {
                        None => return fail(ctx, NOT_INT),
                        Some(n) if n < 0 => return fail(ctx, SYNTAX),
                        Some(_) => {}
                    }
                    j += 2;
                } else {
                    return fail(ctx, SYNTAX);
                }
            }
            let key = args[2];
            // A collection changed earlier in this batch is written back first: peek shows
            // the stored root. Every member is counted (the store knows the sizes): the
            // samples Redis takes to estimate a collection are not needed.
            ctx.store.settle(key)?;
            let len = match ctx.store.peek(key) {
                Some(o) => Some(o.value.len()),
                None => ctx.store.get(key)?.map(|o| o.value.len()),
            };
            match len {
                Some(len) => reply::int(ctx.out, (key.len() + len + INDEX_ENTRY_BYTES) as i64),
                None => reply::null(ctx.out, proto),
            }
        }
        (b"STATS", 2) => {
            let fields = memory_stats(ctx);
            reply::map(ctx.out, proto, fields.len());
            for (name, value) in fields {
                reply::bulk(ctx.out, name.as_bytes());
                match value {
                    Stat::Int(n) => reply::int(ctx.out, n as i64),
                    Stat::Ratio(r) => reply::double(ctx.out, proto, r),
                    Stat::Db(main) => {
                        reply::map(ctx.out, proto, 3);
                        for (k, v) in [
                            ("overhead.hashtable.main", main),
                            ("overhead.hashtable.expires", 0),
                            ("overhead.hashtable.slot-to-keys", 0),
                        ] {
                            reply::bulk(ctx.out, k.as_bytes());
                            reply::int(ctx.out, v as i64);
                        }
                    }
                }
            }
        }
        (b"DOCTOR", 2) => {
            let report = memory_doctor(ctx);
            reply::verbatim(ctx.out, proto, "txt", report.as_bytes());
        }
        // Redis's answer when its allocator is not jemalloc: the store's memory is its own
        // slab arenas, whose figures MEMORY STATS gives.
        (b"MALLOC-STATS", 2) => {
            reply::bulk(ctx.out, b"Stats not supported for the current allocator")
        }
        // The allocator's free pages go back to the system; the arenas keep their slabs.
        (b"PURGE", 2) => {
            cxltier_sys::heap::release_free_memory();
            reply::ok(ctx.out);
        }
        _ => return fail(ctx, &crate::errors::unknown_subcommand("MEMORY", args[1])),
    }
    Ok(Effect::Read)
}

enum Stat {
    Int(u64),
    Ratio(f64),
    /// A database's map: its index entries' bytes (the hashtable Redis would have).
    Db(u64),
}

/// MEMORY STATS: Redis's fields, from the store: `total.allocated` is INFO's `used_memory`
/// (the memory tiers' slots in use and the index), the overhead is the index, the dataset
/// the rest; the allocator's figures are the memory tiers' resident slab pages and the
/// process's RSS. What cxltier does not keep apart (client buffers, the replication
/// backlog, which it has none of, cluster links, the AOF buffer) is 0. Then the tiers' own
/// figures under `tier.<name>.*`.
fn memory_stats(ctx: &mut Ctx<'_>) -> Vec<(String, Stat)> {
    let st = ctx.store.stats();
    let (used, _) = crate::memory::memory_figures(&st);
    ctx.info.used_memory_peak = ctx.info.used_memory_peak.max(used);
    let peak = ctx.info.used_memory_peak;
    let rss = crate::memory::resident_bytes();
    let overhead = st.index_bytes;
    let dataset = used.saturating_sub(overhead);
    let keys = st.keys;
    let resident: u64 = st
        .tiers
        .iter()
        .filter(|t| t.tier != "nvme")
        .map(|t| t.resident_bytes)
        .sum::<u64>()
        + st.index_bytes;
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let pct = |a: u64, b: u64| {
        if b == 0 {
            0.0
        } else {
            a as f64 * 100.0 / b as f64
        }
    };
    let mut f: Vec<(String, Stat)> = vec![
        ("peak.allocated".into(), Stat::Int(peak)),
        ("total.allocated".into(), Stat::Int(used)),
        ("startup.allocated".into(), Stat::Int(0)),
        ("replication.backlog".into(), Stat::Int(0)),
        ("clients.slaves".into(), Stat::Int(0)),
        ("clients.normal".into(), Stat::Int(0)),
        ("cluster.links".into(), Stat::Int(0)),
        ("aof.buffer".into(), Stat::Int(0)),
        (
            "lua.caches".into(),
            Stat::Int(ctx.info.scripts.used_memory() as u64),
        ),
        ("functions.caches".into(), Stat::Int(0)),
    ];
    for j in 0..ctx.info.dbs.count() {
        let n = ctx.store.db_len(ctx.info.dbs.physical(j));
        if n > 0 {
            f.push((format!("db.{j}"), Stat::Db(n * INDEX_ENTRY_BYTES as u64)));
        }
    }
    f.extend([
        ("overhead.total".into(), Stat::Int(overhead)),
        ("keys.count".into(), Stat::Int(keys)),
        (
            "keys.bytes-per-key".into(),
            Stat::Int(used.checked_div(keys).unwrap_or(0)),
        ),
        ("dataset.bytes".into(), Stat::Int(dataset)),
        ("dataset.percentage".into(), Stat::Ratio(pct(dataset, used))),
        ("peak.percentage".into(), Stat::Ratio(pct(used, peak))),
        ("allocator.allocated".into(), Stat::Int(used)),
        ("allocator.active".into(), Stat::Int(resident)),
        ("allocator.resident".into(), Stat::Int(resident)),
        (
            "allocator-fragmentation.ratio".into(),
            Stat::Ratio(ratio(resident, used)),
        ),
        (
            "allocator-fragmentation.bytes".into(),
            Stat::Int(resident.saturating_sub(used)),
        ),
        ("allocator-rss.ratio".into(), Stat::Ratio(1.0)),
        ("allocator-rss.bytes".into(), Stat::Int(0)),
        (
            "rss-overhead.ratio".into(),
            Stat::Ratio(ratio(rss, resident)),
        ),
        (
            "rss-overhead.bytes".into(),
            Stat::Int(rss.saturating_sub(resident)),
        ),
        ("fragmentation".into(), Stat::Ratio(ratio(rss, used))),
        (
            "fragmentation.bytes".into(),
            Stat::Int(rss.saturating_sub(used)),
        ),
    ]);
    for t in &st.tiers {
        let name = t.tier;
        f.extend([
            (format!("tier.{name}.capacity"), Stat::Int(t.capacity_bytes)),
            (format!("tier.{name}.resident"), Stat::Int(t.resident_bytes)),
            (format!("tier.{name}.objects"), Stat::Int(t.objects)),
            (format!("tier.{name}.bytes"), Stat::Int(t.bytes)),
        ]);
    }
    f
}

/// MEMORY DOCTOR: Redis's report over the checks that have a meaning here (an almost empty
/// instance, a peak well above the memory in use, RSS far above it, many cached scripts).
fn memory_doctor(ctx: &mut Ctx<'_>) -> String {
    let st = ctx.store.stats();
    let (used, _) = crate::memory::memory_figures(&st);
    ctx.info.used_memory_peak = ctx.info.used_memory_peak.max(used);
    let peak = ctx.info.used_memory_peak;
    if used < 5 << 20 {
        return "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.\n".into();
    }
    let rss = crate::memory::resident_bytes();
    let mut issues = Vec::new();
    if peak as f64 / used as f64 > 1.5 {
        issues.push(" * Peak memory: In the past this instance used more than 150% the memory that is currently using. The allocator is normally not able to release memory after a peak, so you can expect to see a big fragmentation ratio, however this is actually harmless and is only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is currently bigger than expected, the memory will be used as soon as you fill the Redis instance with more data. If the memory peak was only occasional and you want to try to reclaim memory, please try the MEMORY PURGE command, otherwise the only other option is to shutdown and restart the instance.\n\n".to_string());
    }
    if rss as f64 / used as f64 > 1.4 && rss.saturating_sub(used) > 10 << 20 {
        issues.push(" * High total RSS: This instance has a memory fragmentation and RSS overhead greater than 1.4 (this means that the Resident Set Size of the Redis process is much larger than the sum of the logical allocations Redis performed). This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. If the problem is a large peak memory, then there is no issue. Otherwise, make sure you are using the Jemalloc allocator and not the default libc malloc. Note: The currently used allocator is \"cxltier slab arenas\".\n\n".to_string());
    }
    if ctx.info.scripts.cached() > 1000 {
        issues.push(" * Many scripts: There seem to be many cached scripts in this instance (more than 1000). This may be because scripts are generated and `EVAL`ed, instead of being parameterized (with KEYS and ARGV), `SCRIPT LOAD`ed and `EVALSHA`ed. Unless `SCRIPT FLUSH` is called periodically, the scripts' caches may end up consuming most of your memory.\n\n".to_string());
    }
    if issues.is_empty() {
        return "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.\n".into();
    }
    let mut s =
        String::from("Sam, I detected a few issues in this Redis instance memory implants:\n\n");
    for i in issues {
        s.push_str(&i);
    }
    s.push_str("I'm here to keep you safe, Sam. I want to help you.\n");
    s
}

/// A key's entry in the index (docs/server.md: 32-byte packed entries).
pub(crate) const INDEX_ENTRY_BYTES: usize = 32;

/// WAIT numreplicas timeout: there are no replicas, so none acknowledged.
pub(crate) fn time(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    reply::array(ctx.out, 2);
    reply::bulk(ctx.out, now.as_secs().to_string().as_bytes());
    reply::bulk(ctx.out, now.subsec_micros().to_string().as_bytes());
    Ok(Effect::Read)
}

pub(crate) fn lastsave(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    reply::int(ctx.out, ctx.info.last_save as i64);
    Ok(Effect::Read)
}

/// SAVE: what is written goes to the log at the turn's group commit, which this command's
/// `Wrote` effect asks for; LASTSAVE then says when.
pub(crate) fn save(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    ctx.store.commit()?;
    ctx.info.last_save = now_ms() / 1000;
    ctx.info.changes_at_save = ctx.store.changes();
    reply::ok(ctx.out);
    Ok(Effect::Wrote)
}

pub(crate) fn bgsave(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    if args.len() > 2
        || args
            .get(1)
            .is_some_and(|a| !a.eq_ignore_ascii_case(b"SCHEDULE"))
    {
        return fail(ctx, SYNTAX);
    }
    ctx.store.commit()?;
    ctx.info.last_save = now_ms() / 1000;
    ctx.info.changes_at_save = ctx.store.changes();
    reply::simple(ctx.out, "Background saving started");
    Ok(Effect::Wrote)
}

pub(crate) fn bgrewriteaof(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    // The NVMe log is cleaned segment by segment as it runs: nothing to rewrite.
    reply::simple(ctx.out, "Background append only file rewriting started");
    Ok(Effect::Read)
}

/// SLOWLOG GET [count] | LEN | RESET | HELP, as Redis 7.0's `slowlogCommand` answers them.
pub(crate) fn slowlog(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sub = args[1].to_ascii_uppercase();
    let n = args.len();
    // The subcommands' own arities (Redis checks them as `slowlog|len`'s).
    let arity_ok = match sub.as_slice() {
        b"GET" => Some(n >= 2),
        b"LEN" | b"RESET" | b"HELP" => Some(n == 2),
        _ => None,
    };
    if let Some(e) = crate::errors::subcommand_arity("SLOWLOG", args[1], arity_ok) {
        return fail(ctx, &e);
    }
    match (sub.as_slice(), n) {
        (b"HELP", _) => {
            let head = format!(
                "{} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                String::from_utf8_lossy(args[0]).to_ascii_uppercase()
            );
            let lines = [
                head.as_str(),
                "GET [<count>]",
                "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                "    Entries are made of:",
                "    id, timestamp, time in microseconds, arguments array, client IP and port,",
                "    client name",
                "LEN",
                "    Return the length of the slowlog.",
                "RESET",
                "    Reset the slowlog.",
                "HELP",
                "    Print this help.",
            ];
            reply::simple_lines(ctx.out, &lines);
        }
        (b"RESET", _) => {
            ctx.info.slowlog.reset();
            reply::ok(ctx.out);
        }
        (b"LEN", _) => reply::int(ctx.out, ctx.info.slowlog.len() as i64),
        (b"GET", 2 | 3) => {
            let count = match args.get(2) {
                None => 10,
                Some(a) => match crate::numbers::int_arg(a) {
                    Some(-1) => ctx.info.slowlog.len(),
                    Some(c) if c >= 0 => usize::try_from(c).unwrap_or(usize::MAX),
                    _ => return fail(ctx, "ERR count should be greater than or equal to -1"),
                },
            };
            let entries: Vec<_> = ctx.info.slowlog.entries().take(count).collect();
            reply::array(ctx.out, entries.len());
            for e in entries {
                reply::array(ctx.out, 6);
                reply::int(ctx.out, e.id as i64);
                reply::int(ctx.out, e.time as i64);
                reply::int(ctx.out, e.duration_us as i64);
                reply::array(ctx.out, e.args.len());
                for a in &e.args {
                    reply::bulk(ctx.out, a);
                }
                reply::bulk(ctx.out, e.addr.as_bytes());
                reply::bulk(ctx.out, &e.name);
            }
        }
        _ => return fail(ctx, &crate::errors::unknown_subcommand("SLOWLOG", args[1])),
    }
    Ok(Effect::Read)
}

/// LATENCY LATEST | HISTORY event | RESET [event ...] | DOCTOR | GRAPH event | HISTOGRAM
/// [command ...] | HELP, as Redis 7.0's `latencyCommand` answers them.
pub(crate) fn latency(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sub = args[1].to_ascii_uppercase();
    let n = args.len();
    let arity_ok = match sub.as_slice() {
        b"HISTORY" | b"GRAPH" => Some(n == 3),
        b"LATEST" | b"DOCTOR" | b"HELP" => Some(n == 2),
        b"RESET" | b"HISTOGRAM" => Some(true),
        _ => None,
    };
    if let Some(e) = crate::errors::subcommand_arity("LATENCY", args[1], arity_ok) {
        return fail(ctx, &e);
    }
    let proto = ctx.session.proto;
    let now = now_us() / 1_000_000;
    match sub.as_slice() {
        b"HISTORY" => match ctx.info.latency.series(args[2]) {
            None => reply::array(ctx.out, 0),
            Some(s) => {
                reply::array(ctx.out, s.samples.len());
                for &(time, ms) in &s.samples {
                    reply::array(ctx.out, 2);
                    reply::int(ctx.out, time as i64);
                    reply::int(ctx.out, ms as i64);
                }
            }
        },
        b"GRAPH" => match ctx.info.latency.series(args[2]) {
            None => {
                return fail(
                    ctx,
                    &format!(
                        "ERR No samples available for event '{}'",
                        String::from_utf8_lossy(args[2])
                    ),
                )
            }
            Some(s) => {
                let event = String::from_utf8_lossy(args[2]);
                let text = crate::latency::graph(&event, s, now);
                reply::verbatim(ctx.out, proto, "txt", text.as_bytes());
            }
        },
        b"LATEST" => {
            let events: Vec<_> = ctx.info.latency.events().collect();
            reply::array(ctx.out, events.len());
            for (event, s) in events {
                let (time, ms) = s.samples.back().copied().unwrap_or((0, 0));
                reply::array(ctx.out, 4);
                reply::bulk(ctx.out, event.as_bytes());
                reply::int(ctx.out, time as i64);
                reply::int(ctx.out, ms as i64);
                reply::int(ctx.out, s.max as i64);
            }
        }
        b"DOCTOR" => {
            let (threshold, _) = ctx.info.knobs.latency();
            let text = crate::latency::doctor(&ctx.info.latency, threshold);
            reply::verbatim(ctx.out, proto, "txt", text.as_bytes());
        }
        b"RESET" => {
            let n = ctx.info.latency.reset(&args[2..]);
            reply::int(ctx.out, n as i64);
        }
        b"HISTOGRAM" => {
            let all = ctx.info.latency.histograms();
            let chosen: Vec<_> = if n == 2 {
                all
            } else {
                // Each name in turn (repeats repeat, unknown names are skipped): a command, a
                // container's every subcommand, or `container|sub`.
                let mut chosen = Vec::new();
                for name in &args[2..] {
                    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
                    let (cmd, sub) = match name.split_once('|') {
                        Some((c, s)) => (c.to_string(), Some(s.to_string())),
                        None => (name, None),
                    };
                    for &((c, s), h) in &all {
                        let same_cmd = c.eq_ignore_ascii_case(&cmd);
                        let same_sub = match (&sub, s) {
                            (None, _) => true,
                            (Some(want), Some(s)) => s == want,
                            (Some(_), None) => false,
                        };
                        if same_cmd && same_sub {
                            chosen.push(((c, s), h));
                        }
                    }
                }
                chosen
            };
            reply::map(ctx.out, proto, chosen.len());
            for (key, h) in chosen {
                reply::bulk(ctx.out, crate::latency::full_name(key).as_bytes());
                reply::map(ctx.out, proto, 2);
                reply::bulk(ctx.out, b"calls");
                reply::int(ctx.out, h.calls as i64);
                reply::bulk(ctx.out, b"histogram_usec");
                let cdf = h.cdf();
                reply::map(ctx.out, proto, cdf.len());
                for (us, count) in cdf {
                    reply::int(ctx.out, us as i64);
                    reply::int(ctx.out, count as i64);
                }
            }
        }
        _ => {
            let head = format!(
                "{} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                String::from_utf8_lossy(args[0]).to_ascii_uppercase()
            );
            let lines = [
                head.as_str(),
                "DOCTOR",
                "    Return a human readable latency analysis report.",
                "GRAPH <event>",
                "    Return an ASCII latency graph for the <event> class.",
                "HISTORY <event>",
                "    Return time-latency samples for the <event> class.",
                "LATEST",
                "    Return the latest latency samples for all events.",
                "RESET [<event> ...]",
                "    Reset latency data of one or more <event> classes.",
                "    (default: reset all data for all event classes)",
                "HISTOGRAM [COMMAND ...]",
                "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
                "    If no commands are specified then all histograms are replied.",
                "HELP",
                "    Print this help.",
            ];
            reply::simple_lines(ctx.out, &lines);
        }
    }
    Ok(Effect::Read)
}

/// MONITOR: the connection is sent every command the server runs from now on (the loop
/// appends the lines, [`crate::monitor`]); refused inside EXEC, as Redis refuses a client that
/// must get one reply per command; a second MONITOR answers nothing, as in Redis.
pub(crate) fn monitor(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    if ctx.session.in_exec {
        return fail(ctx, "ERR MONITOR isn't allowed for DENY BLOCKING client");
    }
    if ctx.session.is_replica || ctx.info.monitors.ids().contains(&ctx.session.id) {
        return Ok(Effect::Read);
    }
    ctx.info.monitors.add(ctx.session.id);
    reply::ok(ctx.out);
    Ok(Effect::Read)
}

pub(crate) fn shutdown(_ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    Ok(Effect::Shutdown)
}

/// SHUTDOWN while a script is busy: NOSAVE stops the script and then the server; without it
/// SHUTDOWN would save, which needs the store the script holds: it waits for the script's end.
pub(crate) fn shutdown_while_busy(b: &mut BusyCtx<'_>, args: &[&[u8]]) -> BusyOutcome {
    if !args
        .get(1)
        .is_some_and(|a| a.eq_ignore_ascii_case(b"NOSAVE"))
    {
        return b.refuse();
    }
    b.run.kill = true;
    b.run.shutdown = true;
    BusyOutcome::Answered
}

#[cfg(test)]
mod tests {

    use crate::testdb::*;

    #[test]
    fn memory_subcommands_answer_as_redis() {
        let mut db = Db::new();
        db.cmd("SET k v");
        let stats = db.cmd("MEMORY STATS");
        for field in [
            "peak.allocated",
            "total.allocated",
            "db.0",
            "overhead.hashtable.main",
            "keys.count",
            "dataset.percentage",
            "fragmentation.bytes",
            "tier.dram.capacity",
        ] {
            assert!(
                stats.contains(&format!("\r\n{field}\r\n")),
                "{field}: {stats}"
            );
        }
        assert!(stats.starts_with("*"), "a flat map in RESP2");
        assert!(db
            .cmd("MEMORY DOCTOR")
            .contains("Hi Sam, this instance is empty"));
        db.replies(&[
            (
                "MEMORY MALLOC-STATS",
                "$45\r\nStats not supported for the current allocator\r\n",
            ),
            ("MEMORY PURGE", "+OK\r\n"),
            ("MEMORY USAGE k SAMPLES", "-ERR syntax error\r\n"),
            ("MEMORY USAGE k SAMPLES -1", "-ERR syntax error\r\n"),
            (
                "MEMORY USAGE k SAMPLES x",
                "-ERR value is not an integer or out of range\r\n",
            ),
            ("MEMORY USAGE missing SAMPLES 0", "$-1\r\n"),
            (
                "MEMORY NOPE",
                "-ERR unknown subcommand or wrong number of arguments for 'NOPE'. Try MEMORY HELP.\r\n",
            ),
        ]);
        assert!(db.cmd("MEMORY USAGE k SAMPLES 0").starts_with(':'));
        assert!(db.cmd("MEMORY HELP").starts_with("*"));
    }

    #[test]
    fn server_commands_without_replicas_scripts_or_debug() {
        let mut db = Db::large();
        // No replica: WAIT 0 answers at once; WAIT 1 parks until its timeout (the server
        // answers it then with the count).
        db.replies(&[("WAIT 0 0", ":0\r\n"), ("WAIT 1 10", "")]);
        let block = db.session.block.take().expect("parked");
        assert_eq!(block.wait, Some((0, 1)));
        assert!(block.deadline.is_some());
        assert_eq!(db.cmd("WAIT 1 -1"), "-ERR timeout is negative\r\n");
        let time = db.cmd("TIME");
        assert!(time.starts_with("*2\r\n$10\r\n"), "{time}");
        let before = db.cmd("LASTSAVE");
        assert!(before.starts_with(':'));
        db.replies(&[
            ("SAVE", "+OK\r\n"),
            ("BGSAVE", "+Background saving started\r\n"),
        ]);
        assert!(db.cmd("LASTSAVE") >= before);
        db.replies(&[
            ("FUNCTION FLUSH", "+OK\r\n"),
            ("FUNCTION FLUSH async", "+OK\r\n"),
            ("FUNCTION LIST", "*0\r\n"),
            ("SCRIPT FLUSH", "+OK\r\n"),
        ]);
        // No library: no function to call, and a library needs its shebang.
        db.replies(&[
            ("FCALL f 0", "-ERR Function not found\r\n"),
            ("FCALL_RO f 0", "-ERR Function not found\r\n"),
            ("FUNCTION LOAD x", "-ERR Missing library metadata\r\n"),
        ]);
        db.cmd("SET k v");
        db.replies(&[
            ("FLUSHALL bogus", "-ERR syntax error\r\n"),
            ("GET k", "$1\r\nv\r\n"),
            ("FLUSHDB ASYNC", "+OK\r\n"),
            ("DBSIZE", ":0\r\n"),
        ]);
        // RESET: back to RESP2, no name, replies on.
        db.cmd("HELLO 3 SETNAME n");
        db.cmd("CLIENT REPLY SKIP");
        assert_eq!(db.cmd("RESET"), "+RESET\r\n");
        assert_eq!(db.session.proto, 2);
        assert_eq!(db.session.name, None);
        assert!(!db.session.drop_reply());
    }
}
