//! The server's administration commands that have no module of their own (Redis's `server`
//! group): DBSIZE, FLUSHALL/FLUSHDB, SWAPDB, MEMORY, TIME, LASTSAVE, SAVE, BGSAVE,
//! BGREWRITEAOF, DEBUG and SHUTDOWN.

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

/// MEMORY USAGE key [SAMPLES n]: the bytes the key costs: its key and value bytes and its
/// 32-byte index entry (the value's bytes in whichever tier holds it).
pub(crate) fn memory(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sub = args[1].to_ascii_uppercase();
    let proto = ctx.session.proto;
    match sub.as_slice() {
        b"USAGE"
            if args.len() == 3 || (args.len() == 5 && args[3].eq_ignore_ascii_case(b"SAMPLES")) =>
        {
            if args.len() == 5 && parse_i64(args[4]).is_none() {
                return fail(ctx, NOT_INT);
            }
            let key = args[2];
            // A collection changed earlier in this batch is written back first: peek shows
            // the stored root.
            ctx.store.settle(key)?;
            let len = match ctx.store.peek(key) {
                Some(o) => Some(o.value.len()),
                None => ctx.store.get(key)?.map(|o| o.value.len()),
            };
            match len {
                Some(len) => reply::int(ctx.out, (key.len() + len + INDEX_ENTRY_BYTES) as i64),
                None => reply::null(ctx.out, proto),
            }
            Ok(Effect::Read)
        }
        _ => fail(ctx, &crate::errors::unknown_subcommand("MEMORY", args[1])),
    }
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

pub(crate) fn debug(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    fail(
        ctx,
        &format!(
            "ERR DEBUG {} is not supported by cxltier serve (no DEBUG subcommand is)",
            String::from_utf8_lossy(args[1]).to_ascii_uppercase()
        ),
    )
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
    match arity_ok {
        None => {
            return fail(
                ctx,
                &format!(
                    "ERR unknown subcommand '{}'. Try SLOWLOG HELP.",
                    String::from_utf8_lossy(args[1])
                ),
            )
        }
        Some(false) => {
            return fail(
                ctx,
                &format!(
                    "ERR wrong number of arguments for 'slowlog|{}' command",
                    String::from_utf8_lossy(args[1]).to_ascii_lowercase()
                ),
            )
        }
        Some(true) => {}
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
                Some(a) => match crate::args::int_arg(a) {
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
    match arity_ok {
        None => {
            return fail(
                ctx,
                &format!(
                    "ERR unknown subcommand '{}'. Try LATENCY HELP.",
                    String::from_utf8_lossy(args[1])
                ),
            )
        }
        Some(false) => {
            return fail(
                ctx,
                &format!(
                    "ERR wrong number of arguments for 'latency|{}' command",
                    String::from_utf8_lossy(args[1]).to_ascii_lowercase()
                ),
            )
        }
        Some(true) => {}
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
        assert!(db
            .cmd("DEBUG SLEEP 0")
            .starts_with("-ERR DEBUG SLEEP is not supported"));
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
