//! Replication, the master's side, as Redis 7.0 does it: `SYNC`/`PSYNC` hand a replica an RDB
//! snapshot of the store ([`crate::rdb`]) and then the write stream, the commands that changed
//! something, as RESP arrays; REPLCONF, ROLE, WAIT and CLUSTER. The stream itself (its offset,
//! units and replicas) is [`crate::write_stream`]; dispatch feeds it.
//!
//! What is propagated follows Redis's `call()`: a write command goes into the stream only if it
//! changed the store ([`cxltier_store::Store::changes`] moved: Redis's `server.dirty`), as
//! itself or as what its handler rewrote it to ([`crate::context::Session::propagate`]: `SET
//! k v PXAT ms` for `SET ... EX`, `pexpireat` for the `EXPIRE` family, `del` for `GETDEL`,
//! ...). The operations of one execution unit (a command, or an `EXEC` with its queued
//! commands, or a parked command when it is served) are collected and written together at its
//! end, wrapped in `multi` ... `exec` when there is more than one (Redis's
//! `propagatePendingCommands`), unless the command touches arbitrary keys (the table's
//! `TOUCHES_ARBITRARY_KEYS`: `SCAN`, `KEYS`, `RANDOMKEY`; the keys they found expired go as
//! plain `del`s). A key found expired is
//! propagated as `del` (or `unlink` with `lazyfree-lazy-expire yes`) within the unit that found
//! it; keys the store's background sampling expired each go alone. `select <db>` comes before
//! the first command and whenever the database changes, from the session's database
//! ([`crate::context::Session::db`]).
//!
//! The stream is built only once a replica attached (Redis creates its backlog then): with no
//! replica ever, a write costs nothing more than before.

use std::time::Instant;

use cxltier_store::StoreError;

use crate::context::{fail, Block, BusyCtx, BusyOutcome, Ctx, Effect, Snapshot, SyncStart};
use crate::resp::reply;
use crate::write_stream::ReplicaInfo;

/// SYNC: the connection becomes a replica; it is sent the snapshot, then the write stream.
pub(crate) fn sync(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    full_sync(ctx, false)
}

/// PSYNC replid offset: a partial resync is never offered (no backlog is kept for it), so the
/// answer is always `+FULLRESYNC <replid> <offset>`, then what SYNC sends.
pub(crate) fn psync(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    full_sync(ctx, true)
}

fn full_sync(ctx: &mut Ctx<'_>, psync: bool) -> Result<Effect, StoreError> {
    if ctx.session.is_replica {
        // Redis ignores a SYNC from a connection that is a replica already.
        return Ok(Effect::Read);
    }
    ctx.info.repl.attach();
    ctx.store.track_expired(true);
    let offset = ctx.info.repl.offset;
    let snapshot = match make_snapshot(ctx, offset) {
        Ok(s) => s,
        Err(e) => {
            return fail(
                ctx,
                &format!("ERR the snapshot for the replica could not be made: {e}"),
            )
        }
    };
    if psync {
        reply::simple(ctx.out, &format!("FULLRESYNC {} {offset}", ctx.info.run_id));
    }
    let ip = ctx
        .info
        .clients
        .get(&ctx.session.id)
        .map(|m| peer_ip(&m.addr))
        .unwrap_or_default();
    ctx.info.repl.replicas.insert(
        ctx.session.id,
        ReplicaInfo {
            ip,
            port: ctx.session.replica_port,
            ack_offset: 0,
            ack_time: Instant::now(),
            online: false,
        },
    );
    ctx.session.is_replica = true;
    ctx.session.sync = Some(SyncStart { snapshot, offset });
    Ok(Effect::Read)
}

/// The host part of `ip:port` (or `[v6]:port`).
fn peer_ip(addr: &str) -> String {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

/// The snapshot, written in the event loop: to a temporary file in the store's directory,
/// unlinked at once (the descriptor keeps it until it is sent), or to memory without one.
fn make_snapshot(ctx: &mut Ctx<'_>, offset: u64) -> Result<Snapshot, crate::rdb::RdbError> {
    let info = crate::rdb::SnapshotInfo {
        replid: ctx.info.run_id.clone(),
        offset,
        used_memory: crate::memory::memory_figures(&ctx.store.stats()).0,
        functions: ctx
            .info
            .scripts
            .functions
            .libraries()
            .map(|l| l.code.clone())
            .collect(),
    };
    // Every database clients can select, as the store keeps it now (SWAPDB moves the map).
    let dbs: Vec<(u32, u8)> = (0..ctx.info.dbs.count())
        .map(|db| (db as u32, ctx.info.dbs.physical(db)))
        .collect();
    let Some(dir) = ctx.info.snapshot_dir.clone() else {
        let (bytes, _) = crate::rdb::write_snapshot(ctx.store, &info, &dbs, Vec::new())?;
        return Ok(Snapshot::Memory(bytes));
    };
    let path = dir.join(format!(
        ".cxltier-sync-{}-{}.rdb",
        std::process::id(),
        ctx.session.id
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("creating {}: {e}", path.display())))?;
    // Gone from the directory at once: nothing is left behind whatever happens next.
    let _ = std::fs::remove_file(&path);
    let out = std::io::BufWriter::with_capacity(256 << 10, file);
    let (out, counts) = crate::rdb::write_snapshot(ctx.store, &info, &dbs, out)?;
    let mut file = out.into_inner().map_err(|e| e.into_error())?;
    use std::io::Seek;
    file.rewind()?;
    Ok(Snapshot::File(file, counts.bytes))
}

/// REPLCONF option value ...: `listening-port`, `ip-address`, `capa` and the like are
/// accepted (+OK); `ACK offset` (a replica saying how far it has applied the stream) and
/// `GETACK` (a master asking a replica) are answered with nothing, as Redis does.
pub(crate) fn replconf(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    if args.len() % 2 == 0 {
        return fail(ctx, crate::errors::SYNTAX);
    }
    for pair in args[1..].chunks(2) {
        let (opt, value) = (pair[0].to_ascii_lowercase(), pair[1]);
        match opt.as_slice() {
            b"listening-port" => {
                let Some(port) = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<u16>().ok())
                else {
                    return fail(ctx, "ERR value is not an integer or out of range");
                };
                ctx.session.replica_port = port;
                if let Some(r) = ctx.info.repl.replicas.get_mut(&ctx.session.id) {
                    r.port = port;
                }
            }
            b"ack" => {
                let Some(off) = crate::context::parse_i64(value) else {
                    return Ok(Effect::Read);
                };
                if let Some(r) = ctx.info.repl.replicas.get_mut(&ctx.session.id) {
                    r.ack_offset = r.ack_offset.max(off.max(0) as u64);
                    r.ack_time = Instant::now();
                }
                return Ok(Effect::Read);
            }
            b"getack" => return Ok(Effect::Read),
            b"ip-address" | b"capa" | b"rdb-only" | b"rdb-filter-only" => {}
            _ => {
                return fail(
                    ctx,
                    &format!(
                        "ERR Unrecognized REPLCONF option: {}",
                        String::from_utf8_lossy(pair[0])
                    ),
                )
            }
        }
    }
    reply::ok(ctx.out);
    Ok(Effect::Read)
}

/// ROLE: `master`, the stream offset, and each replica's ip, port and acknowledged offset.
pub(crate) fn role(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    let r = &ctx.info.repl;
    reply::array(ctx.out, 3);
    reply::bulk(ctx.out, b"master");
    reply::int(ctx.out, r.offset as i64);
    let online: Vec<&ReplicaInfo> = r.replicas.values().filter(|r| r.online).collect();
    reply::array(ctx.out, online.len());
    for rep in online {
        reply::array(ctx.out, 3);
        reply::bulk(ctx.out, rep.ip.as_bytes());
        reply::bulk(ctx.out, rep.port.to_string().as_bytes());
        reply::bulk(ctx.out, rep.ack_offset.to_string().as_bytes());
    }
    Ok(Effect::Read)
}

/// REPLICAOF/SLAVEOF: cxltier serve is a master only. `NO ONE` (be a master) is what it is
/// already.
pub(crate) fn replicaof(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    if args[1].eq_ignore_ascii_case(b"NO") && args[2].eq_ignore_ascii_case(b"ONE") {
        reply::ok(ctx.out);
        return Ok(Effect::Read);
    }
    fail(
        ctx,
        "ERR cxltier serve is a master only and cannot replicate another server: point the other server's `replicaof` at this one instead",
    )
}

/// WAIT numreplicas timeout: the number of replicas that acknowledged the stream up to now,
/// once `numreplicas` did or `timeout` milliseconds passed (0: no limit). The connection is
/// parked meanwhile (other clients go on) and the replicas are asked for an acknowledgement.
pub(crate) fn wait(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(want) = crate::context::parse_i64(args[1]) else {
        return fail(ctx, crate::errors::NOT_INT);
    };
    let timeout = match crate::context::parse_i64(args[2]) {
        None => return fail(ctx, "ERR timeout is not an integer or out of range"),
        Some(t) if t < 0 => return fail(ctx, "ERR timeout is negative"),
        Some(t) => t as u64,
    };
    let offset = ctx.info.repl.offset;
    let acked = ctx.info.repl.acked(offset);
    // Inside EXEC nothing blocks: the count now (Redis does the same in MULTI).
    if ctx.session.in_exec || acked as i64 >= want {
        reply::int(ctx.out, acked as i64);
        return Ok(Effect::Read);
    }
    ctx.session.block = Some(Block {
        keys: Vec::new(),
        deadline: (timeout > 0).then(|| Instant::now() + std::time::Duration::from_millis(timeout)),
        wait: Some((offset, want.max(0) as u64)),
        args: None,
    });
    ctx.info.repl.want_acks = true;
    Ok(Effect::Read)
}

/// CLUSTER: cxltier serve is a standalone server, and Redis without cluster support answers
/// every CLUSTER subcommand (HELP included) with this error, which clients test for.
pub(crate) fn cluster(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    fail(ctx, "ERR This instance has cluster support disabled")
}

/// REPLCONF while a script is busy: a replica's ACK has no reply and is taken silently (the
/// loop reads the next ones after the script: an ACK is only a position, the latest one
/// counts); the rest waits for the script's end.
pub(crate) fn replconf_while_busy(b: &mut BusyCtx<'_>, args: &[&[u8]]) -> BusyOutcome {
    if args.get(1).is_some_and(|a| a.eq_ignore_ascii_case(b"ACK")) {
        BusyOutcome::Answered
    } else {
        b.refuse()
    }
}

#[cfg(test)]
mod tests {

    /// The stream as commands, each as its words joined by spaces.
    fn commands(bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        let mut at = 0;
        let line = |at: &mut usize| {
            let end = at_crlf(bytes, *at);
            let l = std::str::from_utf8(&bytes[*at..end]).unwrap().to_string();
            *at = end + 2;
            l
        };
        while at < bytes.len() {
            let n: usize = line(&mut at)[1..].parse().unwrap();
            let mut words = Vec::new();
            for _ in 0..n {
                let len: usize = line(&mut at)[1..].parse().unwrap();
                words.push(String::from_utf8_lossy(&bytes[at..at + len]).into_owned());
                at += len + 2;
            }
            out.push(words.join(" "));
        }
        out
    }

    fn at_crlf(b: &[u8], from: usize) -> usize {
        from + b[from..].windows(2).position(|w| w == b"\r\n").unwrap()
    }

    /// A database with replication on, as after a replica attached.
    fn replicated() -> crate::testdb::Db {
        let mut db = crate::testdb::Db::new();
        db.info.repl.attach();
        db.store.track_expired(true);
        db
    }

    /// Every command in `lines`, then the stream they made (the stars of numbers that depend
    /// on the clock replaced by `*`).
    fn stream_of(db: &mut crate::testdb::Db, lines: &[&str]) -> Vec<String> {
        for l in lines {
            db.cmd(l);
        }
        let cmds = commands(&db.info.repl.pending);
        db.info.repl.pending.clear();
        cmds.into_iter()
            .map(|c| {
                c.split(' ')
                    .map(|w| {
                        if w.len() >= 12 && w.bytes().all(|b| b.is_ascii_digit()) {
                            "*"
                        } else {
                            w
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    /// `lines` run on a fresh replicated database make the stream `want`.
    fn replicates(lines: &[&str], want: &[&str]) {
        let mut db = replicated();
        assert_eq!(stream_of(&mut db, lines), want, "the stream of {lines:?}");
    }

    #[test]
    fn without_a_replica_no_rewrite_is_built_and_no_stream() {
        let mut db = crate::testdb::Db::new();
        db.cmd("SET k v EX 100");
        db.cmd("SADD s a b");
        db.cmd("SPOP s 2");
        assert!(db.session.propagate.is_none());
        assert!(!db.session.replicating);
        assert!(db.info.repl.pending.is_empty());
        assert_eq!(db.info.repl.offset, 0);
        // The rewrite is not even built.
        let mut session = crate::context::Session::new(1, true);
        session.propagate_as(|| panic!("a rewrite built with no stream"));
        session.replicating = true;
        session.propagate_as(|| vec![vec![b"x".to_vec()]]);
        assert_eq!(session.propagate, Some(vec![vec![b"x".to_vec()]]));
    }

    #[test]
    fn writes_that_change_nothing_are_not_replicated() {
        replicates(
            &[
                "SET k v",
                "GET k",
                "DEL nope",
                "SREM nokey a",
                "EXPIRE nope 10",
                "LPOP nolist",
                "SET k v",
            ],
            &["select 0", "SET k v", "SET k v"],
        );
    }

    #[test]
    fn expiry_commands_are_replicated_as_absolute_times() {
        replicates(
            &[
                "SET foo bar EX 200",
                "SET foo bar PX 100000",
                "SETEX foo 100 bar",
                "PSETEX foo 100000 bar",
                "EXPIRE foo 100",
                "PEXPIRE foo 200000 GT",
                "EXPIREAT foo 100",
                "SET foo bar",
                "GETEX foo EX 200",
                "GETEX foo PERSIST",
                "GETEX foo PERSIST",
                "GETEX foo PXAT 100",
            ],
            &[
                "select 0",
                "set foo bar PXAT *",
                "set foo bar PXAT *",
                "set foo bar PXAT *",
                "set foo bar PXAT *",
                "pexpireat foo *",
                "pexpireat foo * GT",
                "del foo",
                "SET foo bar",
                "pexpireat foo *",
                "persist foo",
                "del foo",
            ],
        );
    }

    #[test]
    fn computed_and_random_writes_are_replicated_as_their_results() {
        replicates(
            &[
                "SET n 1.5",
                "INCRBYFLOAT n 1",
                "HINCRBYFLOAT h f 2.5",
                "GETSET n 7",
                "GETDEL n",
                "SADD s a",
                "SPOP s",
                "SADD s a b",
                "SPOP s 5",
                "RPUSH l a b c",
                "LMPOP 2 nol l LEFT COUNT 10",
                "RPUSH l a",
                "BRPOP l 0",
                "ZADD z 1 a 2 b",
                "ZMPOP 1 z MAX COUNT 1",
                "BZPOPMIN z 0",
                "RPUSH l x",
                "BLMOVE l m LEFT RIGHT 0",
                "BRPOPLPUSH m l 0",
            ],
            &[
                "select 0",
                "SET n 1.5",
                "set n 2.5 KEEPTTL",
                "hset h f 2.5",
                "set n 7",
                "del n",
                "SADD s a",
                "srem s a",
                "SADD s a b",
                "del s",
                "RPUSH l a b c",
                "lpop l 3",
                "RPUSH l a",
                "rpop l",
                "ZADD z 1 a 2 b",
                "zpopmax z 1",
                "zpopmin z",
                "RPUSH l x",
                "lmove l m LEFT RIGHT",
                "rpoplpush m l",
            ],
        );
    }

    #[test]
    fn a_transaction_of_several_writes_is_wrapped_and_one_is_not() {
        replicates(
            &[
                "MULTI", "SET a 1", "GET a", "INCR a", "EXEC", "MULTI", "SET b 1", "GET b", "EXEC",
                "MULTI", "GET a", "EXEC",
            ],
            &["select 0", "multi", "SET a 1", "INCR a", "exec", "SET b 1"],
        );
    }

    #[test]
    fn expired_keys_are_deleted_in_the_stream() {
        let mut db = replicated();
        db.cmd("SET gone v PX 1");
        db.cmd("SET other v PX 1");
        db.info.repl.pending.clear();
        std::thread::sleep(std::time::Duration::from_millis(5));
        // A read that finds the key expired: its DEL alone. A write over an expired key: the
        // DEL and the write in one unit, so in MULTI/EXEC (as Redis 7.0 does).
        let s = stream_of(&mut db, &["GET gone", "SET other w"]);
        assert_eq!(s, ["del gone", "multi", "del other", "SET other w", "exec"]);
        db.cmd("CONFIG SET lazyfree-lazy-expire yes");
        db.cmd("SET x v PX 1");
        db.info.repl.pending.clear();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(stream_of(&mut db, &["EXISTS x"]), ["unlink x"]);
    }

    #[test]
    fn flushall_and_publish_are_replicated_even_when_they_change_nothing() {
        replicates(
            &["FLUSHALL", "PUBLISH ch hi"],
            &["select 0", "FLUSHALL", "PUBLISH ch hi"],
        );
    }

    #[test]
    fn restore_with_a_relative_ttl_is_replicated_with_the_absolute_time() {
        let mut db = replicated();
        db.cmd("SET src v");
        let out = db.run(&[b"DUMP", b"src"]);
        // The bulk's payload.
        let at = at_crlf(&out, 0);
        let payload = out[at + 2..out.len() - 2].to_vec();
        db.info.repl.pending.clear();
        let out = db.run(&[b"RESTORE", b"dst", b"100000", &payload]);
        assert_eq!(out, b"+OK\r\n");
        let s = commands(&db.info.repl.pending);
        let words: Vec<&str> = s[0].split(' ').collect();
        assert_eq!(words[0], "RESTORE");
        assert!(words[2].parse::<u64>().unwrap() > crate::context::now_ms());
        assert_eq!(*words.last().unwrap(), "ABSTTL");
    }
}
