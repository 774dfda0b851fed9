//! `CONFIG GET|SET|RESETSTAT|REWRITE`: the parameters that mean something here, and Redis's
//! encoding knobs, which are accepted, stored and reported (OBJECT ENCODING answers by them).

use cxltier_store::{EvictionPolicy, Store, StoreError};

use crate::config_param::{pf, Kind, Param};
use crate::config_specs::PARAMS;
use crate::context::{fail, Ctx, Effect};
use crate::knobs::{param, KNOBS};
use crate::limits::BULK_MARGIN;
use crate::resp::reply;

/// The parameters whose value is the server's own setting (the rest are knobs or stored).
fn live_settings(ctx: &Ctx<'_>) -> Vec<(String, String)> {
    let info = &*ctx.info;
    let st = ctx.store.stats();
    let (_, memory) = crate::memory::memory_figures(&st);
    vec![
        (
            "maxmemory".into(),
            info.maxmemory_limit.unwrap_or(memory).to_string(),
        ),
        (
            "maxmemory-policy".into(),
            ctx.store.eviction_policy().name().into(),
        ),
        (
            "appendonly".into(),
            if st.durability == "none" { "no" } else { "yes" }.into(),
        ),
        (
            "appendfsync".into(),
            match st.durability {
                "always" => "always",
                "everysec" => "everysec",
                _ => "no",
            }
            .into(),
        ),
        ("databases".into(), info.dbs.count().to_string()),
        (
            "notify-keyspace-events".into(),
            crate::notify::format_flags(info.notify.flags()),
        ),
        ("bind".into(), info.bind.clone()),
        ("port".into(), info.port.to_string()),
        (
            "proto-max-bulk-len".into(),
            info.proto_max_bulk_len.to_string(),
        ),
        ("maxclients".into(), info.max_clients.to_string()),
        (
            "requirepass".into(),
            info.requirepass.clone().unwrap_or_default(),
        ),
        (
            "client-query-buffer-limit".into(),
            info.client_query_buffer_limit.to_string(),
        ),
        (
            "client-output-buffer-limit".into(),
            format!(
                "normal {} {} {} slave {} {} {} pubsub {} {} {}",
                info.client_output_buffer_limit.0,
                info.client_output_buffer_limit.1,
                info.client_output_buffer_limit.2,
                crate::limits::REPLICA_OUTPUT_LIMIT.hard,
                crate::limits::REPLICA_OUTPUT_LIMIT.soft,
                crate::limits::REPLICA_OUTPUT_LIMIT.soft_seconds,
                crate::limits::PUBSUB_OUTPUT_LIMIT.hard,
                crate::limits::PUBSUB_OUTPUT_LIMIT.soft,
                crate::limits::PUBSUB_OUTPUT_LIMIT.soft_seconds,
            ),
        ),
    ]
}

/// What CONFIG GET answers for Redis's parameter `p`: the server's own setting, a knob's
/// value, or what CONFIG SET stored (its default until then).
fn value_of(ctx: &Ctx<'_>, live: &[(String, String)], p: &'static Param) -> String {
    if let Some((_, v)) = live.iter().find(|(k, _)| k == p.name) {
        return v.clone();
    }
    if let Some(v) = ctx.info.knobs.get(p.name) {
        return v.to_string();
    }
    match (&p.kind, p.name) {
        // Where Redis writes its files: this process's directory (it writes none).
        (Kind::Special, "dir") => std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        (Kind::Special, "oom-score-adj-values") if ctx.info.knobs.is_unset(p.name) => {
            "0 200 800".into()
        }
        _ => ctx.info.knobs.param_value(p),
    }
}

/// CONFIG GET pattern...: a name without glob characters is looked up as given (hidden
/// parameters too, and answered under the name asked); a pattern matches every name and alias
/// of the parameters that are not hidden.
fn get(ctx: &mut Ctx<'_>, patterns: &[&[u8]]) {
    let live = live_settings(ctx);
    let mut matched: Vec<(String, &'static Param)> = Vec::new();
    for pat in patterns {
        if !pat.iter().any(|b| matches!(b, b'[' | b'*' | b'?')) {
            let name = String::from_utf8_lossy(pat).into_owned();
            if let Some(p) = param(&name) {
                if !matched.iter().any(|(n, _)| *n == name) {
                    matched.push((name, p));
                }
            }
            continue;
        }
        for p in PARAMS.iter().filter(|p| !p.has(pf::HIDDEN)) {
            for name in std::iter::once(p.name).chain(p.alias) {
                if crate::glob::matches(pat, name.as_bytes(), true)
                    && !matched.iter().any(|(n, _)| n == name)
                {
                    matched.push((name.to_string(), p));
                }
            }
        }
    }
    reply::map(ctx.out, ctx.session.proto, matched.len());
    for (name, p) in matched {
        let value = value_of(ctx, &live, p);
        reply::bulk(ctx.out, name.as_bytes());
        reply::bulk(ctx.out, value.as_bytes());
    }
}

/// Why a parameter Redis can change while it runs cannot change here, and how to change it
/// (CONFIG SET of its current value is accepted: nothing changes).
fn read_only(name: &str) -> Option<&'static str> {
    Some(match name {
        "appendonly" | "appendfsync" => {
            "durability is chosen at start: restart with --durability always|everysec|none"
        }
        "bind" | "port" => "restart cxltier serve with the new option",
        "client-query-buffer-limit" | "client-output-buffer-limit" => {
            "restart cxltier serve with --client-query-buffer-limit / --client-output-buffer-limit"
        }
        _ => return None,
    })
}

/// A new proto-max-bulk-len (Redis's memory syntax): the largest value (`--max-object`) is it
/// less the margin the parser keeps, between 1 MiB (Redis's least) and what the store accepts
/// (512M).
fn bulk_len(value: &str) -> Result<usize, String> {
    let n = crate::limits::parse_memory(value)
        .ok_or_else(|| "argument must be a memory value".to_string())?;
    let max = cxltier_store::MAX_VALUE + BULK_MARGIN;
    if n < 1 << 20 || n > max {
        return Err(format!(
            "argument must be between 1048576 and {max} (the largest value this server stores, 512M, and a margin of {BULK_MARGIN})"
        ));
    }
    Ok(n)
}

/// `save`'s value checked as Redis does (pairs of seconds and changes, none negative) and
/// written as CONFIG GET shows it; `None` when it is not.
fn save_params(value: &str) -> Option<String> {
    let words: Vec<&str> = value.split_ascii_whitespace().collect();
    if words.len() % 2 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(words.len());
    for w in words {
        let n: i64 = w.parse().ok().filter(|&n| n >= 0)?;
        out.push(n.to_string());
    }
    Some(out.join(" "))
}

fn set_failed(ctx: &mut Ctx<'_>, name: &str, why: &str) -> Result<Effect, StoreError> {
    reply::error(
        ctx.out,
        &format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"),
    );
    Ok(Effect::Read)
}

/// A parameter of the configuration file, before the first client is served: CONFIG SET's
/// checks and effects, immutable and protected parameters included, as Redis applies its file.
/// `Err` is why it was refused (CONFIG SET's error, without `ERR `).
pub(crate) fn set_at_start(ctx: &mut Ctx<'_>, name: &str, value: &str) -> Result<(), String> {
    let before = ctx.out.len();
    set(ctx, &[name.as_bytes(), value.as_bytes()], true).map_err(|e| e.to_string())?;
    let reply = String::from_utf8_lossy(&ctx.out[before..]).into_owned();
    ctx.out.truncate(before);
    match reply.strip_prefix('-') {
        Some(err) => {
            let err = err.trim_end();
            let err = err.strip_prefix("ERR ").unwrap_or(err);
            // "CONFIG SET failed (possibly related to argument 'x') - why": the why.
            Err(err
                .rsplit_once(") - ")
                .map_or(err, |(_, why)| why)
                .to_string())
        }
        None => Ok(()),
    }
}

/// Whether CONFIG SET may change the protected parameters (`enable-protected-configs yes`,
/// which only a configuration file can set).
fn protected_enabled(ctx: &Ctx<'_>) -> bool {
    param("enable-protected-configs").is_some_and(|p| ctx.info.knobs.param_value(p) == "yes")
}

/// CONFIG SET name value [name value ...]: all checked before any is applied, as Redis 7 does.
/// `at_start`: from the configuration file, where immutable parameters may be set too.
fn set(ctx: &mut Ctx<'_>, pairs: &[&[u8]], at_start: bool) -> Result<Effect, StoreError> {
    if pairs.len() < 2 {
        reply::error(
            ctx.out,
            "ERR wrong number of arguments for 'config|set' command",
        );
        return Ok(Effect::Read);
    }
    if pairs.len() % 2 != 0 {
        return fail(ctx, crate::errors::SYNTAX);
    }
    // First the names, as Redis: an unknown, immutable, protected or repeated one refuses the
    // whole command before any value is looked at.
    let mut chosen: Vec<(&'static Param, String, String)> = Vec::new();
    for pair in pairs.chunks(2) {
        let name = String::from_utf8_lossy(pair[0]).into_owned();
        let value = String::from_utf8_lossy(pair[1]).into_owned();
        let Some(p) = param(&name) else {
            reply::error(
                ctx.out,
                &format!("ERR Unknown option or number of arguments for CONFIG SET - '{name}'"),
            );
            return Ok(Effect::Read);
        };
        if p.has(pf::IMMUTABLE) && !at_start {
            return set_failed(ctx, &name, "can't set immutable config");
        }
        // `enable-protected-configs` is "no" unless the configuration file says otherwise.
        if p.has(pf::PROTECTED) && !at_start && !protected_enabled(ctx) {
            return set_failed(ctx, &name, "can't set protected config");
        }
        if chosen.iter().any(|(q, _, _)| std::ptr::eq(*q, p)) {
            return set_failed(ctx, &name, "duplicate parameter");
        }
        chosen.push((p, name, value));
    }
    // Then the values, all checked before any is applied.
    let live = live_settings(ctx);
    let mut changes: Vec<(&'static str, String)> = Vec::new();
    for (p, name, value) in chosen {
        if let Some(why) = read_only(p.name) {
            let same = match p.parse(&value) {
                Some(Ok(v)) => v == value_of(ctx, &live, p),
                _ => value == value_of(ctx, &live, p),
            };
            // appendfsync means something only with appendonly yes, which is refused.
            if same || (at_start && p.name == "appendfsync") {
                continue;
            }
            return set_failed(ctx, &name, why);
        }
        let name = name.as_str();
        match p.name {
            "maxclients" => match value.parse::<usize>() {
                Ok(n) if n >= 1 => {}
                _ => {
                    return set_failed(
                        ctx,
                        name,
                        "argument must be between 1 and 4294967295 inclusive",
                    )
                }
            },
            "requirepass" => {}
            "maxmemory" => {
                if crate::limits::parse_memory(&value).is_none() {
                    return set_failed(ctx, name, "argument must be a memory value");
                }
            }
            "maxmemory-policy" => {
                if EvictionPolicy::parse(&value).is_none() {
                    let names: Vec<&str> = EvictionPolicy::ALL.iter().map(|p| p.name()).collect();
                    return set_failed(
                        ctx,
                        name,
                        &format!(
                            "argument(s) must be one of the following: {}",
                            names.join(", ")
                        ),
                    );
                }
            }
            "maxmemory-samples" => {
                if !matches!(value.parse::<i64>(), Ok(1..=64)) {
                    return set_failed(ctx, name, "argument must be between 1 and 64 inclusive");
                }
            }
            "maxmemory-eviction-tenacity" => {
                if !matches!(value.parse::<i64>(), Ok(0..=100)) {
                    return set_failed(ctx, name, "argument must be between 0 and 100 inclusive");
                }
            }
            "lfu-log-factor" | "lfu-decay-time" => {
                if !matches!(value.parse::<i64>(), Ok(0..=2147483647)) {
                    return set_failed(
                        ctx,
                        name,
                        "argument must be between 0 and 2147483647 inclusive",
                    );
                }
            }
            "proto-max-bulk-len" => {
                if let Err(why) = bulk_len(&value) {
                    return set_failed(ctx, name, &why);
                }
            }
            "latency-tracking" => {
                if !["yes", "no"].iter().any(|b| value.eq_ignore_ascii_case(b)) {
                    return set_failed(ctx, name, "argument must be 'yes' or 'no'");
                }
            }
            "latency-tracking-info-percentiles" => {
                if value
                    .split_ascii_whitespace()
                    .any(|p| p.parse::<f64>().is_err())
                {
                    return set_failed(
                        ctx,
                        name,
                        "Invalid latency-tracking-info-percentiles parameters",
                    );
                }
                let Some(percentiles) = crate::latency::parse_percentiles(&value) else {
                    return set_failed(
                        ctx,
                        name,
                        "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]",
                    );
                };
                // As Redis shows them: "%f" without its trailing zeros (`0.0` is `0`).
                let shown: Vec<String> = percentiles
                    .iter()
                    .map(|p| {
                        let f = format!("{p:.6}");
                        f.trim_end_matches('0').trim_end_matches('.').to_string()
                    })
                    .collect();
                changes.push((p.name, shown.join(" ")));
                continue;
            }
            // Redis 7.0's bounds: -1 (off) and 0 (empty) up.
            "slowlog-log-slower-than" | "slowlog-max-len" => {
                let least = if p.name == "slowlog-max-len" { 0 } else { -1 };
                match value.parse::<i64>() {
                    Err(_) => {
                        return set_failed(ctx, name, "argument couldn't be parsed into an integer")
                    }
                    Ok(n) if n < least => {
                        return set_failed(
                            ctx,
                            name,
                            &format!(
                                "argument must be between {least} and 9223372036854775807 inclusive"
                            ),
                        )
                    }
                    Ok(_) => {}
                }
            }
            "notify-keyspace-events" => {
                if crate::notify::parse_flags(value.as_bytes()).is_none() {
                    return set_failed(ctx, name, crate::notify::INVALID_FLAGS);
                }
            }
            "save" => match save_params(&value) {
                Some(v) => {
                    changes.push((p.name, v));
                    continue;
                }
                None => return set_failed(ctx, name, "Invalid save parameters"),
            },
            "oom-score-adj-values" => {
                let values: Vec<i64> = value
                    .split_ascii_whitespace()
                    .filter_map(|v| crate::numbers::int_arg(v.as_bytes()))
                    .filter(|v| (-2000..=2000).contains(v))
                    .collect();
                if value.split_ascii_whitespace().count() != 3 {
                    return set_failed(ctx, name, "wrong number of arguments");
                }
                if values.len() != 3 {
                    return set_failed(
                        ctx,
                        name,
                        "Invalid oom-score-adj-values, elements must be between -2000 and 2000.",
                    );
                }
                let text: Vec<String> = values.iter().map(i64::to_string).collect();
                changes.push((p.name, text.join(" ")));
                continue;
            }
            _ => match p.parse(&value) {
                Some(Ok(v)) => {
                    changes.push((p.name, v));
                    continue;
                }
                Some(Err(why)) => return set_failed(ctx, name, &why),
                None => {
                    return set_failed(
                        ctx,
                        name,
                        "this parameter cannot be changed in cxltier serve",
                    )
                }
            },
        }
        changes.push((p.name, value));
    }
    let mut policy = ctx.store.eviction_policy();
    for (name, value) in changes {
        match name {
            "maxmemory-policy" => policy = EvictionPolicy::parse(&value).unwrap_or(policy),
            // Connections beyond the new limit are refused from now on; those open stay.
            "maxclients" => ctx.info.max_clients = value.parse().unwrap_or(ctx.info.max_clients),
            // Connections already authenticated stay so, as in Redis.
            "requirepass" => {
                let pass = (!value.is_empty()).then_some(value);
                let catalog = ctx.commands.acl();
                let users = ctx.info.acl.users_mut();
                users.set_default_password(catalog, pass.as_deref().map(str::as_bytes));
                ctx.info.requirepass = pass;
            }
            "acllog-max-len" => ctx.info.acl.trim_log(value.parse().unwrap_or(usize::MAX)),
            // 0, or at least the budget: the budget alone. Below it: a write limit (the budget
            // itself is chosen at start with --dram and --cxl).
            "maxmemory" => {
                let (_, budget) = crate::memory::memory_figures(&ctx.store.stats());
                ctx.info.maxmemory_limit = crate::limits::parse_memory(&value)
                    .map(|n| n as u64)
                    .filter(|&n| n > 0 && n < budget);
            }
            // The store keeps the keys it expires only while someone is told of them.
            "notify-keyspace-events" => {
                let flags = crate::notify::parse_flags(value.as_bytes()).expect("checked above");
                ctx.info.notify.set_flags(flags);
                // Replication takes them too: kept while either does.
                let wanted = ctx.info.notify.wants(crate::notify::class::EXPIRED);
                ctx.store.track_expired(
                    wanted || ctx.info.repl.active || !ctx.info.tracking.clients.is_empty(),
                );
            }
            "proto-max-bulk-len" => {
                let n = bulk_len(&value).expect("checked above");
                ctx.store.set_max_object(n - BULK_MARGIN)?;
                ctx.info.proto_max_bulk_len = n;
                ctx.info.max_object = n - BULK_MARGIN;
            }
            // A knob under its canonical name; any other of Redis's parameters stored and
            // reported (docs/server.md says which mean nothing here).
            _ => match KNOBS.iter().find(|k| k.name == name) {
                Some(k) => ctx.info.knobs.store(k.canonical, value),
                None => ctx.info.knobs.store(name, value),
            },
        }
    }
    // The policy, and how accesses are counted for it (lfu-log-factor, lfu-decay-time).
    let knob = |name| u32::try_from(ctx.info.knobs.int(name)).unwrap_or(0);
    let (factor, decay) = (knob("lfu-log-factor"), knob("lfu-decay-time"));
    ctx.store.set_eviction_policy(policy, factor, decay);
    // A lower limit or a policy that evicts takes effect at once, as Redis's updateMaxmemory;
    // inside EXEC at the next command, so that the deletes follow the transaction in the
    // write stream, as Redis's do.
    if !ctx.session.in_exec {
        crate::memory::perform_evictions(ctx.store, ctx.info);
    }
    reply::ok(ctx.out);
    Ok(Effect::Read)
}

pub(crate) fn config(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let n = args.len();
    let sub = args[1].to_ascii_uppercase();
    match (sub.as_slice(), n) {
        (b"GET", 3..) => get(ctx, &args[2..]),
        (b"SET", _) => return set(ctx, &args[2..], false),
        (b"RESETSTAT", 2) => {
            // As Redis: the activity counters start again from zero (the store's and the
            // server's); what is stored is untouched.
            reset_stats(ctx.store, ctx.info);
            reply::ok(ctx.out);
        }
        (b"REWRITE", 2) => reply::error(
            ctx.out,
            "ERR The server is running without a config file (cxltier serve takes its settings from its command line)",
        ),
        _ => reply::error(
            ctx.out,
            &crate::errors::unknown_subcommand("CONFIG", args[1]),
        ),
    }
    Ok(Effect::Read)
}

fn reset_stats(store: &mut Store, info: &mut crate::context::ServerInfo) {
    store.reset_stats();
    info.total_commands = 0;
    info.total_connections = 0;
    info.rejected_connections = 0;
    info.eventloop_cycles = 0;
    info.eventloop_connections_visited = 0;
    info.client_query_buffer_limit_disconnections = 0;
    info.client_output_buffer_limit_disconnections = 0;
    info.client_peak_input_buffer = 0;
    info.client_peak_output_buffer = 0;
    info.keyspace_hits = 0;
    info.expired_keys = 0;
    info.evicted_keys = 0;
    info.keyspace_misses = 0;
    info.used_memory_peak = 0;
    info.ops_samples.clear();
    info.command_stats.clear();
    info.errors.reset();
    info.command_latency.reset();
    info.latency.reset_histograms();
}

#[cfg(test)]
mod tests {

    use crate::testdb::*;

    #[test]
    fn config_set_stores_knobs_and_refuses_what_it_cannot_change() {
        let mut db = Db::large();
        db.replies(&[
            (
                "CONFIG GET hash-max-listpack-entries",
                "*2\r\n$25\r\nhash-max-listpack-entries\r\n$3\r\n128\r\n",
            ),
            // An alias and its listpack name are one setting.
            ("CONFIG SET hash-max-ziplist-entries 4", "+OK\r\n"),
        ]);
        assert!(db
            .cmd("CONFIG GET hash-max-listpack-entries")
            .ends_with("$1\r\n4\r\n"));
        assert_eq!(
            db.cmd("CONFIG SET set-max-intset-entries 10 zset-max-listpack-value 32"),
            "+OK\r\n"
        );
        assert!(db
            .cmd("CONFIG GET zset-max-ziplist-value")
            .ends_with("$2\r\n32\r\n"));
        assert!(db
            .cmd("CONFIG SET hash-max-listpack-value big")
            .starts_with(
                "-ERR CONFIG SET failed (possibly related to argument 'hash-max-listpack-value')"
            ));
        assert_eq!(
            db.cmd("CONFIG SET no-such-thing 1"),
            "-ERR Unknown option or number of arguments for CONFIG SET - 'no-such-thing'\r\n"
        );
        assert!(db
            .cmd("CONFIG SET maxmemory bla")
            .contains("argument must be a memory value"));
        // One bad pair and nothing is applied.
        assert!(db
            .cmd("CONFIG SET timeout 5 maxmemory bla")
            .starts_with("-ERR"));
        assert!(db.cmd("CONFIG GET timeout").ends_with("$1\r\n0\r\n"));
        assert_eq!(db.cmd("CONFIG SET maxclients 7"), "+OK\r\n");
        assert_eq!(db.info.max_clients, 7);
        assert_eq!(db.cmd("CONFIG SET requirepass pw"), "+OK\r\n");
        assert_eq!(db.info.requirepass.as_deref(), Some("pw"));
        // An empty password clears it.
        assert_eq!(db.cmd("CONFIG SET requirepass "), "+OK\r\n");
        assert_eq!(db.info.requirepass, None);
        assert!(db
            .cmd("CONFIG REWRITE")
            .starts_with("-ERR The server is running without a config file"));
        assert_eq!(db.cmd("CONFIG RESETSTAT"), "+OK\r\n");
    }
}
