//! Transactions: MULTI, EXEC, DISCARD, WATCH and UNWATCH (queuing itself happens in dispatch,
//! before any handler runs).

use cxltier_store::StoreError;

use crate::context::*;
use crate::resp::reply;

pub(crate) fn multi(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    if ctx.session.multi.is_some() {
        return fail(ctx, "ERR MULTI calls can not be nested");
    }
    ctx.session.multi = Some(Vec::new());
    ctx.session.multi_failed = false;
    reply::ok(ctx.out);
    Ok(Effect::Read)
}

pub(crate) fn discard(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    if ctx.session.multi.take().is_none() {
        return fail(ctx, "ERR DISCARD without MULTI");
    }
    ctx.session.multi_failed = false;
    ctx.info.unwatch(ctx.session);
    reply::ok(ctx.out);
    Ok(Effect::Read)
}

/// EXEC: the queued commands, one after the other with nothing in between (the loop runs one
/// command at a time), their replies in one array; or EXECABORT after a queueing error, or a
/// null array when a watched key changed. The server has waited for every NVMe read the
/// queued commands need before running it, and commits the turn's writes once after it.
pub(crate) fn exec(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(queued) = ctx.session.multi.take() else {
        return fail(ctx, "ERR EXEC without MULTI");
    };
    let failed = std::mem::take(&mut ctx.session.multi_failed);
    let now = now_ms();
    let expired = ctx
        .session
        .watched
        .iter()
        .any(|(_, at)| at.is_some_and(|t| t <= now));
    let dirty = ctx.info.dirty.contains(&ctx.session.id) || expired;
    ctx.info.unwatch(ctx.session);
    if failed {
        return fail(
            ctx,
            "EXECABORT Transaction discarded because of previous errors.",
        );
    }
    if dirty {
        reply::null_array(ctx.out, ctx.session.proto);
        return Ok(Effect::Read);
    }
    reply::array(ctx.out, queued.len());
    let mut effect = Effect::Read;
    ctx.session.in_exec = true;
    for args in &queued {
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        ctx.info.total_commands += 1;
        if (ctx.run_queued)(ctx, &args) == Effect::Wrote {
            effect = Effect::Wrote;
        }
    }
    ctx.session.in_exec = false;
    Ok(effect)
}

pub(crate) fn watch(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    if ctx.session.multi.is_some() {
        return fail(ctx, "ERR WATCH inside MULTI is not allowed");
    }
    for &key in &args[1..] {
        // Kept by logical database (see `crate::db`), as the watchers are.
        let logical = ctx.info.dbs.to_logical_key(key);
        if ctx.session.watched.iter().any(|(k, _)| *k == logical) {
            continue;
        }
        // The expiry, from the index (no read of the value); a key already expired is absent
        // (a stale key watched does not fail EXEC, as in Redis).
        let now = now_ms();
        let expires = ctx.store.expiry_of(key).flatten().filter(|&t| t > now);
        ctx.session.watched.push((logical, expires));
        ctx.info
            .watchers
            .entry(ctx.info.dbs.to_logical_key(key))
            .or_default()
            .push(ctx.session.id);
    }
    reply::ok(ctx.out);
    Ok(Effect::Read)
}

pub(crate) fn unwatch(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    ctx.info.unwatch(ctx.session);
    reply::ok(ctx.out);
    Ok(Effect::Read)
}

/// MULTI while a script is busy: the transaction is the connection's own, so it opens (its
/// commands are then refused BUSY, which aborts it at EXEC).
pub(crate) fn multi_while_busy(b: &mut BusyCtx<'_>, _args: &[&[u8]]) -> BusyOutcome {
    if b.session.multi.is_some() {
        reply::error(b.out, "ERR MULTI calls can not be nested");
    } else {
        b.session.multi = Some(Vec::new());
        b.session.multi_failed = false;
        reply::ok(b.out);
    }
    BusyOutcome::Answered
}

/// DISCARD while a script is busy: drops the connection's own transaction.
pub(crate) fn discard_while_busy(b: &mut BusyCtx<'_>, _args: &[&[u8]]) -> BusyOutcome {
    if b.session.multi.is_none() {
        reply::error(b.out, "ERR DISCARD without MULTI");
    } else {
        b.session.multi = None;
        b.session.multi_failed = false;
        reply::ok(b.out);
    }
    BusyOutcome::Answered
}

#[cfg(test)]
mod tests {

    use super::*;

    use crate::testdb::*;

    #[test]
    fn multi_exec_queues_and_runs_in_order() {
        let mut db = Db::large();
        db.replies(&[
            ("EXEC", "-ERR EXEC without MULTI\r\n"),
            ("DISCARD", "-ERR DISCARD without MULTI\r\n"),
            ("MULTI", "+OK\r\n"),
            ("MULTI", "-ERR MULTI calls can not be nested\r\n"),
            ("SET a 1", "+QUEUED\r\n"),
            ("INCR a", "+QUEUED\r\n"),
            ("SET s x", "+QUEUED\r\n"),
            // A runtime error does not stop the others.
            ("INCR s", "+QUEUED\r\n"),
            ("GET a", "+QUEUED\r\n"),
        ]);
        assert_eq!(
            db.cmd("EXEC"),
            format!("*5\r\n+OK\r\n:2\r\n+OK\r\n-{}\r\n$1\r\n2\r\n", NOT_INT)
        );
        // A queueing error aborts the whole transaction.
        db.cmd("MULTI");
        assert_eq!(db.cmd("SET a 5"), "+QUEUED\r\n");
        db.replies_starting(&[
            ("SET a", "-ERR wrong number"),
            ("NOSUCH x", "-ERR unknown command"),
        ]);
        db.replies(&[
            ("WATCH a", "-ERR WATCH inside MULTI is not allowed\r\n"),
            (
                "EXEC",
                "-EXECABORT Transaction discarded because of previous errors.\r\n",
            ),
            ("GET a", "$1\r\n2\r\n"),
        ]);
        db.cmd("MULTI");
        assert_eq!(
            db.cmd("SHUTDOWN"),
            "-ERR Command not allowed inside a transaction\r\n"
        );
        assert!(db.cmd("EXEC").starts_with("-EXECABORT"));
        db.cmd("MULTI");
        db.cmd("SET a 9");
        db.replies(&[
            ("DISCARD", "+OK\r\n"),
            ("GET a", "$1\r\n2\r\n"),
            ("MULTI", "+OK\r\n"),
            ("EXEC", "*0\r\n"),
        ]);
        // Commands that would write other than one reply each are refused inside EXEC.
        db.cmd("MULTI");
        for line in ["CLIENT REPLY OFF", "SUBSCRIBE a b", "UNSUBSCRIBE", "PING"] {
            assert_eq!(db.cmd(line), "+QUEUED\r\n");
        }
        assert_eq!(
            db.cmd("EXEC"),
            "*4\r\n-ERR CLIENT REPLY is not allowed inside a transaction\r\n-ERR SUBSCRIBE isn't allowed inside a transaction\r\n-ERR UNSUBSCRIBE isn't allowed inside a transaction\r\n+PONG\r\n"
        );
        assert!(!db.session.drop_reply() && !db.session.subscribed());
    }

    #[test]
    fn smove_of_a_member_the_destination_holds_leaves_its_watchers_alone() {
        let (mut db, mut other) = Db::two_connections();
        db.cmd("SADD src a b");
        db.cmd("SADD dst a");
        db.cmd("WATCH dst");
        assert_eq!(run_as(&mut db, &mut other, "SMOVE src dst a"), ":1\r\n");
        db.cmd("MULTI");
        db.cmd("SADD dst c");
        assert_eq!(db.cmd("EXEC"), "*1\r\n:1\r\n");
        // A member new to the destination is a change of it.
        db.cmd("WATCH dst");
        assert_eq!(run_as(&mut db, &mut other, "SMOVE src dst b"), ":1\r\n");
        db.cmd("MULTI");
        db.cmd("SADD dst d");
        assert_eq!(db.cmd("EXEC"), "*-1\r\n");
    }

    #[test]
    fn watch_fails_exec_when_a_watched_key_changes() {
        let (mut db, mut other) = Db::two_connections();
        db.cmd("SET k 1");
        // Written by another connection: EXEC answers null and runs nothing.
        assert_eq!(db.cmd("WATCH k"), "+OK\r\n");
        assert_eq!(run_as(&mut db, &mut other, "SET k 2"), "+OK\r\n");
        db.cmd("MULTI");
        db.cmd("SET k 3");
        db.replies(&[("EXEC", "*-1\r\n"), ("GET k", "$1\r\n2\r\n")]);
        // The watch ended with EXEC: the next transaction runs.
        db.cmd("MULTI");
        db.cmd("SET k 3");
        assert_eq!(db.cmd("EXEC"), "*1\r\n+OK\r\n");
        assert!(db.info.watchers.is_empty() && db.info.dirty.is_empty());
        // Reads and writes to other keys do not touch it; a write inside the transaction
        // itself does not either.
        db.cmd("WATCH k");
        run_as(&mut db, &mut other, "GET k");
        run_as(&mut db, &mut other, "SET other 1");
        db.cmd("MULTI");
        db.cmd("INCR k");
        assert_eq!(db.cmd("EXEC"), "*1\r\n:4\r\n");
        // UNWATCH forgets.
        db.cmd("WATCH k");
        db.cmd("UNWATCH");
        run_as(&mut db, &mut other, "DEL k");
        db.cmd("MULTI");
        assert_eq!(db.cmd("EXEC"), "*0\r\n");
        // FLUSHALL touches a watched key that exists, not one that does not.
        db.cmd("SET k 1");
        db.cmd("WATCH k nothing");
        run_as(&mut db, &mut other, "FLUSHALL");
        db.cmd("MULTI");
        assert_eq!(db.cmd("EXEC"), "*-1\r\n");
        db.cmd("WATCH nothing");
        run_as(&mut db, &mut other, "FLUSHALL");
        db.cmd("MULTI");
        assert_eq!(db.cmd("EXEC"), "*0\r\n");
        // A watched key that expires is a change; in RESP3 the aborted EXEC is a null. The key
        // must still exist when WATCH runs: on a loaded machine a short TTL can pass before it
        // (and a key absent at WATCH does not abort by expiring), so the TTL grows until PTTL,
        // right after WATCH, still finds the key.
        db.cmd("HELLO 3");
        let mut ttl_ms = 20u64;
        loop {
            db.cmd(&format!("SET t 1 PX {ttl_ms}"));
            db.cmd("WATCH t");
            let left: i64 = db.cmd("PTTL t")[1..].trim_end().parse().unwrap();
            if left > 0 {
                break;
            }
            db.cmd("UNWATCH");
            ttl_ms *= 4;
            assert!(ttl_ms < 100_000, "a key never outlived SET to WATCH");
        }
        std::thread::sleep(std::time::Duration::from_millis(ttl_ms + 5));
        db.cmd("MULTI");
        assert_eq!(db.cmd("EXEC"), "_\r\n");
    }

    /// The sequence the property test found: a RESP3 subscriber that publishes to its own channel
    /// inside MULTI/EXEC got its message in the middle of EXEC's array.
    #[test]
    fn a_self_publish_inside_exec_stays_out_of_execs_reply() {
        let mut db = Db::large();
        let mut last = Vec::new();
        for line in ["HELLO 3", "SUBSCRIBE a b", "MULTI", "PUBLISH a m", "EXEC"] {
            let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            last = db.run(&words);
        }
        assert_eq!(
            frame_len(&last),
            Ok(last.len()),
            "{:?}",
            String::from_utf8_lossy(&last)
        );
        assert_eq!(String::from_utf8_lossy(&last), "*1\r\n:1\r\n");
        // The message itself goes out after the turn.
        assert_eq!(db.info.pubsub.outbox.len(), 1);
    }

    /// WATCH is per database: a write of the same name in another database leaves the
    /// transaction alone; FLUSHDB touches only its own database's watched keys that exist;
    /// SWAPDB touches the watched keys that exist in either database (Redis's rules).
    #[test]
    fn watched_keys_belong_to_their_database() {
        let (mut db, mut other) = Db::two_connections();
        let exec_after = |db: &mut Db, other: &mut Session, lines: &[&str]| -> String {
            db.cmd("WATCH k");
            for l in lines {
                run_as(db, other, l);
            }
            db.cmd("MULTI");
            db.cmd("PING");
            db.cmd("EXEC")
        };
        db.cmd("SELECT 1");
        // What the other connection does between WATCH and EXEC, and EXEC's answer, in order.
        let cases: &[(&[&str], &str)] = &[
            // Written in database 0 (the other connection's): not a change of database 1's k.
            (&["SET k 1"], "*1\r\n+PONG\r\n"),
            (&["SELECT 1", "SET k 1", "SELECT 0"], "*-1\r\n"),
            // FLUSHDB of database 0 does not touch database 1's k; FLUSHDB of 1 does.
            (&["FLUSHDB"], "*1\r\n+PONG\r\n"),
            (&["SELECT 1", "FLUSHDB", "SELECT 0"], "*-1\r\n"),
            // SWAPDB of two databases without k touches nothing; with k in either, it does.
            (&["SWAPDB 1 2"], "*1\r\n+PONG\r\n"),
            (&["SET k 0", "SWAPDB 1 3"], "*1\r\n+PONG\r\n"),
            (&["SWAPDB 0 1"], "*-1\r\n"),
            // And the watch follows the logical database: k is now database 1's, and a write
            // of it there is seen.
            (&["SELECT 1", "SET k 2", "SELECT 0"], "*-1\r\n"),
        ];
        for (lines, want) in cases {
            assert_eq!(exec_after(&mut db, &mut other, lines), *want, "{lines:?}");
        }
        assert!(db.info.watchers.is_empty());
    }

    /// Redis's "EXEC fail on WATCHed key modified by SORT with STORE even if the result is
    /// empty": a SORT ... STORE that deletes its destination for an empty result wrote it. The
    /// old server touched the source (the table's key) instead and this EXEC ran.
    #[test]
    fn sort_store_touches_the_watchers_of_its_destination_not_its_source() {
        let (mut db, mut other) = Db::two_connections();
        db.cmd("LPUSH foo bar");
        db.cmd("LPUSH src 1");
        assert_eq!(db.cmd("WATCH foo"), "+OK\r\n");
        assert_eq!(
            run_as(&mut db, &mut other, "SORT emptylist STORE foo"),
            ":0\r\n"
        );
        db.cmd("MULTI");
        db.cmd("PING");
        db.replies(&[
            ("EXEC", "*-1\r\n"),
            // Watching the source: a SORT STORE elsewhere reads it, writes nothing of it.
            ("WATCH src", "+OK\r\n"),
        ]);
        assert_eq!(run_as(&mut db, &mut other, "SORT src STORE dst"), ":1\r\n");
        db.cmd("MULTI");
        db.cmd("PING");
        assert_eq!(db.cmd("EXEC"), "*1\r\n+PONG\r\n");
    }
}
