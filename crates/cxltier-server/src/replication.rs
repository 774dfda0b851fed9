//! Replication, the master's side, as Redis 7.0 does it: `SYNC`/`PSYNC` hand a replica an RDB
//! snapshot of the store ([`crate::rdb`]) and then the write stream, the commands that changed
//! something, as RESP arrays.
//!
//! What is propagated follows Redis's `call()`: a write command goes into the stream only if it
//! changed the store ([`cxltier_store::Store::changes`] moved: Redis's `server.dirty`), as
//! itself or as what its handler rewrote it to ([`crate::context::Session::propagate`]: `SET
//! k v PXAT ms` for `SET ... EX`, `pexpireat` for the `EXPIRE` family, `del` for `GETDEL`,
//! ...). The operations of one execution unit (a command, or an `EXEC` with its queued
//! commands, or a parked command when it is served) are collected and written together at its
//! end, wrapped in `multi` ... `exec` when there is more than one (Redis's
//! `propagatePendingCommands`), unless the command touches arbitrary keys (`SCAN`,
//! `RANDOMKEY`: the keys they found expired go as plain `del`s). A key found expired is
//! propagated as `del` (or `unlink` with `lazyfree-lazy-expire yes`) within the unit that found
//! it; keys the store's background sampling expired each go alone. `select <db>` comes before
//! the first command and whenever the database changes, from the session's database
//! ([`crate::context::Session::db`]).
//!
//! The stream is built only once a replica attached (Redis creates its backlog then): with no
//! replica ever, a write costs nothing more than before.

use std::collections::BTreeMap;
use std::time::Instant;

use cxltier_store::StoreError;

use crate::context::{fail, Block, Ctx, Effect, Snapshot, SyncStart};
use crate::resp::reply;

/// One command of the stream: its arguments, name first.
pub type Op = Vec<Vec<u8>>;

/// What the master knows of one replica (INFO replication, ROLE, WAIT).
#[derive(Debug, Clone)]
pub struct ReplicaInfo {
    pub ip: String,
    /// The port it listens on (`REPLCONF listening-port`), 0 when not told.
    pub port: u16,
    /// The stream offset it last acknowledged (`REPLCONF ACK`).
    pub ack_offset: u64,
    /// When it last acknowledged (or attached).
    pub ack_time: Instant,
    /// Its snapshot has been sent whole: it follows the stream.
    pub online: bool,
}

/// The master's replication state.
#[derive(Debug, Default)]
pub struct Replication {
    /// A replica attached at least once: from then on the write stream is built (and counted in
    /// the offset) whether or not a replica is attached now, as Redis keeps its backlog.
    pub active: bool,
    /// `master_repl_offset`: bytes of stream produced since the first replica attached.
    pub offset: u64,
    /// The stream bytes not yet handed to the replicas' connections (the last bytes before
    /// `offset`); the server moves them after each turn.
    pub pending: Vec<u8>,
    /// The database the stream last selected; `None` makes the next command select again (a
    /// new replica attached: its stream starts with a `select`).
    seldb: Option<u32>,
    /// The operations of the execution unit running, with their databases.
    unit: Vec<(u32, Op)>,
    /// How deep dispatch is nested (EXEC runs its commands through it): the unit ends at 0.
    depth: u32,
    /// The replicas attached, by connection id.
    pub replicas: BTreeMap<u64, ReplicaInfo>,
    /// A WAIT parked: ask the replicas for an acknowledgement (`REPLCONF GETACK *`) before
    /// the loop sleeps, once.
    pub want_acks: bool,
    /// When the replicas were last sent a PING.
    pub last_ping: Option<Instant>,
}

impl Replication {
    /// Start building the stream (the first replica is attaching). A replica attaching makes
    /// the next command select its database again, as Redis does.
    pub fn attach(&mut self) {
        self.active = true;
        self.seldb = None;
    }

    /// A command begins; returns whether it is the outermost (its end ends the unit).
    pub fn enter(&mut self) -> bool {
        self.depth += 1;
        self.depth == 1
    }

    /// Add `op` to the unit running (Redis's `alsoPropagate`).
    pub fn also_propagate(&mut self, db: u32, op: Op) {
        if self.active {
            self.unit.push((db, op));
        }
    }

    /// The command ends; at the outermost, the unit's operations go into the stream, in
    /// `multi` ... `exec` when there are several and `wrap` allows.
    pub fn leave(&mut self, wrap: bool) {
        self.depth = self.depth.saturating_sub(1);
        if self.depth > 0 || self.unit.is_empty() {
            return;
        }
        let unit = std::mem::take(&mut self.unit);
        let transaction = wrap && unit.len() > 1;
        if transaction {
            self.emit(unit[0].0, &[b"multi".to_vec()]);
        }
        let last_db = unit.last().map_or(0, |u| u.0);
        for (db, op) in unit {
            self.emit(db, &op);
        }
        if transaction {
            self.emit(last_db, &[b"exec".to_vec()]);
        }
    }

    /// Write `op` into the stream now, after a `select` when the database is not the one the
    /// stream last selected.
    pub fn emit(&mut self, db: u32, op: &[Vec<u8>]) {
        if !self.active {
            return;
        }
        if self.seldb != Some(db) {
            let select = [b"select".to_vec(), db.to_string().into_bytes()];
            self.write(&select);
            self.seldb = Some(db);
        }
        self.write(&user_keys(op));
    }

    /// Bytes into the stream as they are: a PING to the replicas, which Redis sends without a
    /// `select` (it is no command of a database).
    pub fn emit_raw(&mut self, op: &[Vec<u8>]) {
        if self.active {
            self.write(op);
        }
    }

    fn write(&mut self, op: &[Vec<u8>]) {
        let before = self.pending.len();
        reply::array(&mut self.pending, op.len());
        for a in op {
            reply::bulk(&mut self.pending, a);
        }
        self.offset += (self.pending.len() - before) as u64;
    }

    /// How many replicas acknowledged at least `offset`.
    pub fn acked(&self, offset: u64) -> u64 {
        self.replicas
            .values()
            .filter(|r| r.online && r.ack_offset >= offset)
            .count() as u64
    }

    /// Replicas whose last acknowledgement is at most `max_lag` seconds old
    /// (`min-replicas-to-write` counts these).
    pub fn good_replicas(&self, max_lag: u64, now: Instant) -> u64 {
        self.replicas
            .values()
            .filter(|r| r.online && now.saturating_duration_since(r.ack_time).as_secs() <= max_lag)
            .count() as u64
    }
}

/// Whether `name`'s unit is never wrapped in `multi`/`exec` (Redis's
/// `CMD_TOUCHES_ARBITRARY_KEYS`: the keys such a command found expired are deleted one by one).
pub fn touches_arbitrary_keys(name: &str) -> bool {
    matches!(name, "SCAN" | "RANDOMKEY" | "KEYS")
}

/// SYNC: the connection becomes a replica; it is sent the snapshot, then the write stream.
/// `op` as the stream carries it: the commands ran with each key argument carrying its
/// database's byte (dispatch gives it, and rewrites and expiries are built from those keys);
/// the stream, like Redis's, names the user's keys under a `select`. The key arguments are the
/// command table's key positions of `op`'s command.
fn user_keys(op: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out = op.to_vec();
    let Some(cmd) = op.first().and_then(|name| crate::table::lookup(name)) else {
        return out;
    };
    let args: Vec<&[u8]> = op.iter().map(Vec::as_slice).collect();
    crate::table::for_each_key_position(cmd, &args, |i| {
        if !out[i].is_empty() {
            out[i].remove(0);
        }
    });
    out
}

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
        used_memory: crate::info::memory_figures(&ctx.store.stats()).0,
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
    });
    ctx.info.repl.want_acks = true;
    Ok(Effect::Read)
}

/// CLUSTER: cxltier serve is a standalone server, and Redis without cluster support answers
/// every CLUSTER subcommand (HELP included) with this error, which clients test for.
pub(crate) fn cluster(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    fail(ctx, "ERR This instance has cluster support disabled")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: &Replication) -> String {
        String::from_utf8_lossy(&r.pending).into_owned()
    }

    #[test]
    fn nothing_is_built_before_a_replica_attaches() {
        let mut r = Replication::default();
        r.enter();
        r.also_propagate(0, vec![b"set".to_vec(), b"k".to_vec(), b"v".to_vec()]);
        r.leave(true);
        assert!(r.pending.is_empty());
        assert_eq!(r.offset, 0);
    }

    /// A key argument as dispatch hands it on: its database's byte first (the stream drops it).
    fn key(db: u8, name: &str) -> Vec<u8> {
        cxltier_store::db_key(db, name.as_bytes())
    }

    #[test]
    fn select_first_then_only_on_a_change_and_offset_counts_bytes() {
        let mut r = Replication::default();
        r.attach();
        r.emit(0, &[b"del".to_vec(), key(0, "a")]);
        r.emit(0, &[b"del".to_vec(), key(0, "b")]);
        r.emit(3, &[b"del".to_vec(), key(3, "c")]);
        assert_eq!(
            text(&r),
            "*2\r\n$6\r\nselect\r\n$1\r\n0\r\n*2\r\n$3\r\ndel\r\n$1\r\na\r\n*2\r\n$3\r\ndel\r\n$1\r\nb\r\n*2\r\n$6\r\nselect\r\n$1\r\n3\r\n*2\r\n$3\r\ndel\r\n$1\r\nc\r\n"
        );
        assert_eq!(r.offset, r.pending.len() as u64);
        // A new replica: the next command selects again.
        r.attach();
        r.pending.clear();
        r.emit(3, &[b"del".to_vec(), key(3, "d")]);
        assert!(text(&r).starts_with("*2\r\n$6\r\nselect\r\n$1\r\n3\r\n"));
    }

    #[test]
    fn a_unit_of_several_is_wrapped_unless_told_not_to() {
        let mut r = Replication::default();
        r.attach();
        r.emit(0, &[b"ping".to_vec()]);
        r.pending.clear();
        assert!(r.enter());
        assert!(!r.enter());
        r.also_propagate(0, vec![b"incr".to_vec(), key(0, "a")]);
        r.leave(true);
        r.also_propagate(0, vec![b"incr".to_vec(), key(0, "b")]);
        assert!(r.pending.is_empty(), "nothing goes before the unit ends");
        r.leave(true);
        assert_eq!(
            text(&r),
            "*1\r\n$5\r\nmulti\r\n*2\r\n$4\r\nincr\r\n$1\r\na\r\n*2\r\n$4\r\nincr\r\n$1\r\nb\r\n*1\r\n$4\r\nexec\r\n"
        );
        r.pending.clear();
        r.enter();
        r.also_propagate(0, vec![b"del".to_vec(), key(0, "x")]);
        r.also_propagate(0, vec![b"del".to_vec(), key(0, "y")]);
        r.leave(false);
        assert!(!text(&r).contains("multi"));
        // One operation alone is never wrapped.
        r.pending.clear();
        r.enter();
        r.also_propagate(0, vec![b"del".to_vec(), key(0, "z")]);
        r.leave(true);
        assert!(!text(&r).contains("multi"));
    }

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
        let mut db = replicated();
        let s = stream_of(
            &mut db,
            &[
                "SET k v",
                "GET k",
                "DEL nope",
                "SREM nokey a",
                "EXPIRE nope 10",
                "LPOP nolist",
                "SET k v",
            ],
        );
        assert_eq!(s, ["select 0", "SET k v", "SET k v"]);
    }

    #[test]
    fn expiry_commands_are_replicated_as_absolute_times() {
        let mut db = replicated();
        let s = stream_of(
            &mut db,
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
        );
        assert_eq!(
            s,
            [
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
            ]
        );
    }

    #[test]
    fn computed_and_random_writes_are_replicated_as_their_results() {
        let mut db = replicated();
        let s = stream_of(
            &mut db,
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
        );
        assert_eq!(
            s,
            [
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
            ]
        );
    }

    #[test]
    fn a_transaction_of_several_writes_is_wrapped_and_one_is_not() {
        let mut db = replicated();
        let s = stream_of(
            &mut db,
            &[
                "MULTI", "SET a 1", "GET a", "INCR a", "EXEC", "MULTI", "SET b 1", "GET b", "EXEC",
                "MULTI", "GET a", "EXEC",
            ],
        );
        assert_eq!(
            s,
            ["select 0", "multi", "SET a 1", "INCR a", "exec", "SET b 1"]
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
        let mut db = replicated();
        let s = stream_of(&mut db, &["FLUSHALL", "PUBLISH ch hi"]);
        assert_eq!(s, ["select 0", "FLUSHALL", "PUBLISH ch hi"]);
    }

    #[test]
    fn restore_with_a_relative_ttl_is_replicated_with_the_absolute_time() {
        let mut db = replicated();
        db.cmd("SET src v");
        let mut out = Vec::new();
        crate::dispatch::execute(
            &mut db.store,
            &mut db.info,
            &mut db.session,
            &[b"DUMP", b"src"],
            &mut out,
        );
        // The bulk's payload.
        let at = at_crlf(&out, 0);
        let payload = out[at + 2..out.len() - 2].to_vec();
        db.info.repl.pending.clear();
        let mut out = Vec::new();
        crate::dispatch::execute(
            &mut db.store,
            &mut db.info,
            &mut db.session,
            &[b"RESTORE", b"dst", b"100000", &payload],
            &mut out,
        );
        assert_eq!(out, b"+OK\r\n");
        let s = commands(&db.info.repl.pending);
        let words: Vec<&str> = s[0].split(' ').collect();
        assert_eq!(words[0], "RESTORE");
        assert!(words[2].parse::<u64>().unwrap() > crate::context::now_ms());
        assert_eq!(*words.last().unwrap(), "ABSTTL");
    }
}
