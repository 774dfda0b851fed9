//! The commands: Redis semantics over the tiered store.

use cxltier_store::{Kind, Store, StoreError};
use hashbrown::HashMap;

use crate::hash;
use crate::notify::class as nc;
use crate::resp::reply;
use crate::table::{self, flag};

/// What a command did beyond its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Read-only.
    Read,
    /// Changed the store: its reply must wait for the group commit.
    Wrote,
    /// Close this connection after the reply (QUIT).
    Close,
    /// Stop the server (SHUTDOWN).
    Shutdown,
}

/// Server-wide settings and counters the commands see.
#[derive(Debug, Default)]
pub struct ServerInfo {
    pub port: u16,
    pub bind: String,
    pub requirepass: Option<String>,
    pub started: Option<std::time::Instant>,
    pub connected_clients: usize,
    pub total_connections: u64,
    pub total_commands: u64,
    pub max_object: usize,
    /// The connection limits in force (CONFIG GET maxclients, proto-max-bulk-len,
    /// client-query-buffer-limit, client-output-buffer-limit as hard, soft, seconds).
    pub max_clients: usize,
    pub proto_max_bulk_len: usize,
    pub client_query_buffer_limit: usize,
    pub client_output_buffer_limit: (usize, usize, u64),
    /// The most memory one connection's input and output buffers have held (INFO clients).
    pub client_peak_input_buffer: usize,
    pub client_peak_output_buffer: usize,
    /// Connections refused at --max-clients, and closed over their buffer limits (INFO stats).
    pub rejected_connections: u64,
    pub client_query_buffer_limit_disconnections: u64,
    pub client_output_buffer_limit_disconnections: u64,
    /// The quarantine file followed and what poison did to the store (`INFO poison`).
    pub poison: crate::quarantine::PoisonInfo,
    /// The connections, by id (CLIENT LIST, CLIENT KILL).
    pub clients: HashMap<u64, ClientMeta>,
    /// Connections CLIENT KILL asked to close: the server closes them after the command.
    pub kill: Vec<u64>,
    /// The id of the next connection (not reset by CONFIG RESETSTAT, unlike the count).
    pub next_client_id: u64,
    /// When the store was last made durable on request (SAVE, BGSAVE), in seconds since the
    /// epoch; the start time before (LASTSAVE).
    pub last_save: u64,
    /// Redis's keyspace hits and misses: the keys read commands looked up (a write of a new
    /// key is no miss).
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    /// The most `used_memory` INFO has reported since start or CONFIG RESETSTAT.
    pub used_memory_peak: u64,
    /// Commands processed, sampled at the loop's tick (instantaneous_ops_per_sec).
    pub ops_samples: std::collections::VecDeque<(std::time::Instant, u64)>,
    /// 40 hex digits, new at each start (INFO's run_id and master_replid).
    pub run_id: String,
    /// CONFIG SET's stored parameters.
    pub knobs: crate::config::Knobs,
    /// WATCHed keys and the connections watching each; the connections whose watched keys
    /// were written since (their EXEC fails).
    pub watchers: HashMap<Vec<u8>, Vec<u64>>,
    pub dirty: hashbrown::HashSet<u64>,
    /// Subscriptions, and the messages for other connections PUBLISH left.
    pub pubsub: crate::pubsub::PubSub,
    /// The SCAN cursors handed out, each standing for the key its scan goes on from.
    pub scan_cursors: crate::keyspace::Cursors,
    /// Keys removed because their TTL passed: found so by a command (lazy expiry) or by the
    /// store's background sampling (active expiry), INFO's `expired_keys`.
    pub expired_keys: u64,
    /// `CONFIG SET maxmemory N` below the memory budget: once `used_memory` is over N,
    /// commands that may grow memory answer OOM (Redis's noeviction policy). `None` (maxmemory
    /// 0, the default): the budget alone bounds memory, and what does not fit goes to NVMe.
    pub maxmemory_limit: Option<u64>,
    /// Per command (the table's name): INFO commandstats.
    pub command_stats: HashMap<CommandName, CommandStat>,
    /// How long each command took to run, every command (the metrics' latency histogram).
    pub command_latency: cxltier_metrics::Histogram,
    /// The last command the server ran (not one inside EXEC or a script) and the time it began,
    /// in µs: its time ends at the next reading of the clock ([`ServerInfo::close_command_time`]),
    /// the next command's start or the end of the loop's turn. One reading per command instead
    /// of two: on this kind of VM a reading costs 50–80 ns, 15% of a short command's time.
    pub timed: Option<(&'static str, u64)>,
    /// The connections parked by a blocking command (BLPOP, ...), kept by the server: INFO's
    /// `blocked_clients` and what CLIENT UNBLOCK may wake.
    pub blocked: hashbrown::HashSet<u64>,
    /// CLIENT UNBLOCK's requests for the server: the connection, and whether it is answered
    /// with an error (else as a timeout).
    pub unblock: Vec<(u64, bool)>,
    /// Keys written while connections were parked: the server tries those waiting on them.
    /// Like every registry of keys here, with their logical database byte ([`crate::db`]).
    pub ready: Vec<Vec<u8>>,
    /// Replicas, the write stream and its offset.
    pub repl: crate::replication::Replication,
    /// Where the snapshot a replica loads is written before it is sent (the store's directory);
    /// `None`: in memory.
    pub snapshot_dir: Option<std::path::PathBuf>,
    /// The databases and where each is kept (`SELECT`, `SWAPDB`).
    pub dbs: crate::db::Databases,
    /// Dispatch's buffer of key arguments with their database byte (kept to spare an allocation
    /// per command; see `dispatch`).
    pub keyed_scratch: Vec<u8>,
    /// SWAPDBs run since the server last looked: the clients blocked on keys of those logical
    /// databases are tried again (Redis's `scanDatabaseForReadyKeys`).
    pub db_swaps: Vec<(usize, usize)>,
    /// `notify-keyspace-events` and the events the running command announced.
    pub notify: crate::notify::Notifier,
    /// The Lua interpreter and its cached scripts (EVAL, SCRIPT LOAD).
    pub scripts: crate::scripting::Scripts,
    /// SHUTDOWN NOSAVE came while a script was busy: the server stops once it has ended.
    pub shutdown_after_script: bool,
    /// Turns of the event loop (INFO stats' `eventloop_cycles`, Redis 7.2's name), and the
    /// connections they looked at (`eventloop_connections_visited`, cxltier's own): a turn looks
    /// at the connections with something to do, not at every one, and this shows it.
    pub eventloop_cycles: u64,
    pub eventloop_connections_visited: u64,
}

/// A command's name from the command table, as the key of its counters. Every name counted
/// comes from the one static table, so two equal names are almost always the same pointer:
/// equality tries that first, where comparing the bytes (two memcmp calls per command, one
/// to count the call and one to add its time) was 2% of a short command's time.
#[derive(Debug, Clone, Copy, PartialOrd, Ord)]
pub struct CommandName(pub &'static str);

impl PartialEq for CommandName {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0) || self.0 == other.0
    }
}

impl Eq for CommandName {}

impl std::hash::Hash for CommandName {
    // As `str` hashes, so that a map keyed by names can be read with a `&str`.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl std::borrow::Borrow<str> for CommandName {
    fn borrow(&self) -> &str {
        self.0
    }
}

/// One command's counters, as Redis's INFO commandstats shows them.
#[derive(Debug, Default, Clone, Copy)]
pub struct CommandStat {
    /// Runs of the handler.
    pub calls: u64,
    /// Microseconds its runs took.
    pub usec: u64,
    /// Refused before running (arity, NOAUTH, OOM, NOREPLICAS, inside MULTI).
    pub rejected_calls: u64,
    /// Ran and answered an error.
    pub failed_calls: u64,
}

/// What a blocking command that found nothing asks of the server: park the connection until
/// one of `keys` is written (then run the command again) or `deadline` passes (then answer
/// the timeout); `None` waits for ever.
#[derive(Debug, Clone)]
pub struct Block {
    pub keys: Vec<Vec<u8>>,
    pub deadline: Option<std::time::Instant>,
    /// WAIT: answered once this many replicas acknowledged this stream offset, or at the
    /// deadline with how many did.
    pub wait: Option<(u64, u64)>,
}

/// What SYNC/PSYNC hands the server: the snapshot to send, and the stream offset it stands
/// for (the replica is fed the stream from there).
#[derive(Debug)]
pub struct SyncStart {
    pub snapshot: Snapshot,
    pub offset: u64,
}

/// A snapshot written for a replica: in an unlinked temporary file, or in memory.
#[derive(Debug)]
pub enum Snapshot {
    File(std::fs::File, u64),
    Memory(Vec<u8>),
}

impl Snapshot {
    pub fn len(&self) -> u64 {
        match self {
            Snapshot::File(_, n) => *n,
            Snapshot::Memory(v) => v.len() as u64,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One connection's state.
#[derive(Debug, Default)]
pub struct Session {
    pub id: u64,
    /// The logical database selected (`SELECT`; 0 at connection, `HELLO`, `RESET`): what a
    /// replication stream names in its `SELECT`. Keys go to the store under
    /// `ServerInfo::dbs.physical(db)`.
    pub db: usize,
    pub authed: bool,
    pub name: Option<Vec<u8>>,
    /// The protocol spoken (HELLO): 2 or 3; 0 before any HELLO, which is RESP2.
    pub proto: u8,
    /// The last command run (CLIENT LIST's `cmd`), as the table names it.
    pub last_cmd: &'static str,
    /// CLIENT REPLY OFF: no replies until CLIENT REPLY ON.
    pub reply_off: bool,
    /// CLIENT REPLY SKIP: the replies of this many commands (it and the next) are dropped.
    pub reply_skip: u8,
    /// CLIENT NO-EVICT ON (Redis: exempt from client eviction; cxltier evicts no clients, so it
    /// is only reported).
    pub no_evict: bool,
    /// Inside MULTI: the commands queued for EXEC.
    pub multi: Option<Vec<Vec<Vec<u8>>>>,
    /// A command could not be queued (unknown, wrong arity, not allowed): EXEC aborts.
    pub multi_failed: bool,
    /// The keys this connection WATCHes, with the expiry each had then (a watched key that
    /// expires is a change, as in Redis).
    pub watched: Vec<(Vec<u8>, Option<u64>)>,
    /// EXEC is running its queued commands: each must write exactly one reply.
    pub in_exec: bool,
    /// The channels, patterns and shard channels it subscribes to (in the order subscribed).
    pub channels: Vec<Vec<u8>>,
    pub patterns: Vec<Vec<u8>>,
    pub shard_channels: Vec<Vec<u8>>,
    /// Set by a blocking command that must wait; the server takes it after the command.
    pub block: Option<Block>,
    /// Key arguments a writing command left unchanged (set by its handler, taken after it):
    /// neither WATCH nor a blocked client sees them written.
    pub unchanged_keys: Vec<Vec<u8>>,
    /// The server is running a parked command again: a key of another type is not an error
    /// then, only not ready (Redis leaves such a client blocked).
    pub block_retry: bool,
    /// What the command that ran is replicated as, if not as itself (set by its handler,
    /// taken after it): Redis's `rewriteClientCommandVector`/`alsoPropagate`. Empty: nothing
    /// (Redis's `preventCommandPropagation`).
    pub propagate: Option<Vec<crate::replication::Op>>,
    /// Replicate the command even if it changed nothing (FLUSHALL, FLUSHDB, PUBLISH).
    pub force_propagate: bool,
    /// SYNC/PSYNC ran: the connection becomes a replica (the server takes it).
    pub sync: Option<SyncStart>,
    /// `REPLCONF listening-port`: the port this connection's replica listens on.
    pub replica_port: u16,
    /// This connection is a replica (it attached with SYNC/PSYNC).
    pub is_replica: bool,
    /// The write stream is being built (set by dispatch for each command): rewrites are made.
    pub replicating: bool,
    /// Keys a writing command changed that are no key position of the table's (SORT's STORE
    /// destination): set by its handler, taken after it, they touch their watchers and wake
    /// blocked clients like the others.
    pub written_keys: Vec<Vec<u8>>,
    /// The spans of the output the running command wrote that are push messages (pub/sub
    /// confirmations and messages, keyspace notifications to itself): CLIENT REPLY OFF and
    /// SKIP drop the command's reply but not these, as in Redis.
    pub pushed: Vec<std::ops::Range<usize>>,
}

impl ServerInfo {
    /// End the time of the command in [`ServerInfo::timed`] at `now_us` (a reading of
    /// [`now_us`]): INFO commandstats' `usec` and the latency histogram get it.
    pub fn close_command_time(&mut self, now_us: u64) {
        if let Some((name, started)) = self.timed.take() {
            let took = now_us.saturating_sub(started);
            self.command_stats
                .entry(CommandName(name))
                .or_default()
                .usec += took;
            self.command_latency.observe(took as f64 / 1e6);
        }
    }

    /// Record the command count at this tick (Redis keeps 16 samples, one per 100 ms).
    pub fn sample_ops(&mut self, now: std::time::Instant) {
        self.ops_samples.push_back((now, self.total_commands));
        while self.ops_samples.len() > 16 {
            self.ops_samples.pop_front();
        }
    }

    /// Commands per second over the samples kept.
    pub fn ops_per_sec(&self) -> u64 {
        match (self.ops_samples.front(), self.ops_samples.back()) {
            (Some(&(t0, n0)), Some(&(t1, n1))) if t1 > t0 => {
                (n1.saturating_sub(n0) as f64 / (t1 - t0).as_secs_f64()).round() as u64
            }
            _ => 0,
        }
    }

    /// A key looked up by a read command (Redis's keyspace_hits / keyspace_misses; a miss is
    /// the `keymiss` event of class `m`).
    pub(crate) fn lookup(&mut self, key: &[u8], found: bool) {
        if found {
            self.keyspace_hits += 1;
        } else {
            self.keyspace_misses += 1;
            self.notify
                .emit(crate::notify::class::KEY_MISS, "keymiss", key);
        }
    }

    /// A write to `key` (a store key: with its physical database byte) that dispatch does not
    /// see among the command's key arguments (MOVE's and COPY ... DB's destination): its
    /// watchers and the clients blocked on it hear of it.
    pub(crate) fn wrote(&mut self, key: &[u8]) {
        let logical = self.dbs.to_logical_key(key);
        self.touch(&logical);
        if !self.blocked.is_empty() {
            self.ready.push(logical);
        }
    }

    /// A write to `key` (with its logical database byte): the transactions watching it will
    /// fail.
    pub(crate) fn touch(&mut self, key: &[u8]) {
        if let Some(ids) = self.watchers.get(key) {
            self.dirty.extend(ids.iter().copied());
        }
    }

    /// A write to a key outside the command's key positions in the table (GEORADIUS's STORE
    /// key): as for those, its watchers' transactions fail and a client blocked on it looks
    /// again once the command is done.
    pub(crate) fn wrote_key(&mut self, key: &[u8]) {
        self.wrote(key);
    }

    /// Forget `session`'s watched keys (UNWATCH, EXEC, DISCARD, RESET, and when it closes).
    pub fn unwatch(&mut self, session: &mut Session) {
        for (key, _) in session.watched.drain(..) {
            if let hashbrown::hash_map::EntryRef::Occupied(mut e) =
                self.watchers.entry_ref(&key[..])
            {
                e.get_mut().retain(|&id| id != session.id);
                if e.get().is_empty() {
                    e.remove();
                }
            }
        }
        self.dirty.remove(&session.id);
    }
}

impl Session {
    /// The (logical) database this connection's commands act on: what the write stream
    /// selects before them.
    pub fn db(&self) -> u32 {
        self.db as u32
    }

    /// Replicate the command that is running as what `ops` builds instead of itself; built
    /// only while the write stream is (a replica attached once), so that a write costs nothing
    /// more before.
    pub(crate) fn propagate_as(&mut self, ops: impl FnOnce() -> Vec<crate::replication::Op>) {
        if self.replicating {
            self.propagate = Some(ops());
        }
    }

    /// The session of a connection just accepted: RESP2, authenticated when no password is set.
    pub fn new(id: u64, authed: bool) -> Session {
        Session {
            id,
            authed,
            proto: 2,
            ..Session::default()
        }
    }

    /// Subscribed to anything (in RESP2, only the pub/sub commands, PING, QUIT and RESET may
    /// run then).
    pub fn subscribed(&self) -> bool {
        !self.channels.is_empty() || !self.patterns.is_empty() || !self.shard_channels.is_empty()
    }

    /// A command failed before it could be queued: the transaction, if any, will abort.
    pub(crate) fn flag_transaction(&mut self) {
        if self.multi.is_some() {
            self.multi_failed = true;
        }
    }

    /// Whether the reply of the command that just ran is dropped (CLIENT REPLY OFF or SKIP);
    /// counts a skipped one. The server calls it after each command.
    pub fn drop_reply(&mut self) -> bool {
        if self.reply_skip > 0 {
            self.reply_skip -= 1;
            return true;
        }
        self.reply_off
    }

    /// Take back what the command that just ran wrote to `out` from `from` on (CLIENT REPLY OFF
    /// or SKIP), but for its push messages: those are no replies, and Redis sends them anyway.
    pub fn drop_output_from(&mut self, out: &mut Vec<u8>, from: usize) {
        let mut kept = Vec::new();
        for r in self.pushed.drain(..) {
            if r.start >= from && r.end <= out.len() {
                kept.extend_from_slice(&out[r]);
            }
        }
        out.truncate(from);
        out.extend_from_slice(&kept);
    }
}

/// What `CLIENT LIST` shows of a connection other than the caller's: kept by the server in
/// [`ServerInfo::clients`], refreshed after each turn in which the connection ran commands.
#[derive(Debug, Clone)]
pub struct ClientMeta {
    pub addr: String,
    pub laddr: String,
    pub fd: i32,
    pub created: std::time::Instant,
    pub last_active: std::time::Instant,
    pub name: Option<Vec<u8>>,
    pub proto: u8,
    pub last_cmd: &'static str,
    pub no_evict: bool,
    pub reply_off: bool,
    /// Bytes of input not run yet, and of replies not sent yet.
    pub qbuf: usize,
    pub omem: usize,
    /// Channels, patterns and shard channels subscribed; commands queued in MULTI (-1 outside).
    pub sub: usize,
    pub psub: usize,
    pub ssub: usize,
    pub multi: i64,
    /// It attached as a replica (SYNC/PSYNC): flag `S`, type `replica`.
    pub replica: bool,
    /// The logical database selected.
    pub db: usize,
}

impl ClientMeta {
    /// Copy what a session says of its connection.
    pub fn update_from(&mut self, s: &Session) {
        if self.name != s.name {
            self.name.clone_from(&s.name);
        }
        self.proto = s.proto;
        self.db = s.db;
        self.last_cmd = s.last_cmd;
        self.no_evict = s.no_evict;
        self.reply_off = s.reply_off;
        self.sub = s.channels.len();
        self.psub = s.patterns.len();
        self.ssub = s.shard_channels.len();
        self.multi = s.multi.as_ref().map_or(-1, |q| q.len() as i64);
        self.replica = s.is_replica;
    }

    /// Redis's client type for LIST and KILL filters: pubsub once subscribed, else normal.
    fn kind(&self) -> &'static str {
        if self.replica {
            "replica"
        } else if self.sub + self.psub + self.ssub > 0 {
            "pubsub"
        } else {
            "normal"
        }
    }
}

pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
pub(crate) const NOT_INT: &str = "ERR value is not an integer or out of range";
pub(crate) const SYNTAX: &str = "ERR syntax error";
/// The Redis version clients are told (HELLO, INFO's redis_version): the one whose commands and
/// replies cxltier follows. Clients branch on it.
pub const REDIS_VERSION: &str = "7.0.15";
const CORRUPT_HASH: &str = "ERR the stored hash is corrupt; DEL the key";
/// Up to this many fields in one HSET/HMGET/HDEL, each is looked for by a scan of the list (no
/// allocation: the common case); beyond, through a hash index, so the work stays linear.
const FEW_FIELDS: usize = 8;

/// Microseconds since the epoch.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// When an expiry given as `t` falls, in ms since the epoch, by Redis 7's rule: `t` in ms (times
/// 1000 for seconds) must fit an i64, and so must `now + ms` for a relative time; `None` is
/// "invalid expire time". Saturating instead turned `EXPIRE k 9223372036854775` into a time in
/// the past (the key was deleted) and `SET k v EX 99999999999999999` into a negative TTL.
pub(crate) fn expire_at_ms(t: i64, seconds: bool, relative: bool) -> Option<i64> {
    let ms = if seconds { t.checked_mul(1000)? } else { t };
    if relative {
        i64::try_from(now_ms()).ok()?.checked_add(ms)
    } else {
        Some(ms)
    }
}

pub(crate) fn parse_i64(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

fn store_error(out: &mut Vec<u8>, e: &StoreError) {
    match e {
        StoreError::Full { .. } => reply::error(out, &format!("OOM {e}")),
        StoreError::TooLarge { .. } => reply::error(out, &format!("ERR {e}")),
        _ => reply::error(out, &format!("ERR {e}")),
    }
}

/// Redis's reply to an expiry time that is not positive or does not fit (`now + ms` overflows).
pub(crate) fn invalid_expire(out: &mut Vec<u8>, cmd: &str) {
    reply::error(
        out,
        &format!(
            "ERR invalid expire time in '{}' command",
            cmd.to_lowercase()
        ),
    );
}

pub(crate) fn arity(out: &mut Vec<u8>, name: &[u8]) {
    reply::error(
        out,
        &format!(
            "ERR wrong number of arguments for '{}' command",
            String::from_utf8_lossy(name).to_lowercase()
        ),
    );
}

/// A hash's fields, or the reply to give when the key holds something else.
enum HashRead {
    Missing,
    Fields(Vec<(Vec<u8>, Vec<u8>)>),
    /// A large hash, kept as a collection: its fields are read from the store as needed.
    Chunked,
    WrongType,
    Corrupt,
}

fn read_hash(store: &mut Store, key: &[u8]) -> Result<HashRead, StoreError> {
    Ok(match store.get(key)? {
        None => HashRead::Missing,
        Some(o) if o.kind == Kind::ChunkedHash => HashRead::Chunked,
        Some(o) if o.kind != Kind::Hash => HashRead::WrongType,
        Some(o) => match hash::decode(o.value) {
            Some(f) => HashRead::Fields(
                f.into_iter()
                    .map(|(f, v)| (f.to_vec(), v.to_vec()))
                    .collect(),
            ),
            None => HashRead::Corrupt,
        },
    })
}

/// What a handler works with: the store, the server's settings and counters, the connection's
/// state, and where its reply goes.
pub struct Ctx<'a> {
    pub store: &'a mut Store,
    pub info: &'a mut ServerInfo,
    pub session: &'a mut Session,
    pub out: &'a mut Vec<u8>,
}

impl Ctx<'_> {
    /// Announce a keyspace event of `class` on `key` (published after the command when the
    /// class is on: [`crate::notify`]).
    pub(crate) fn notify(&mut self, class: u32, event: &'static str, key: &[u8]) {
        self.info.notify.emit(class, event, key);
    }
}

/// Run one command, writing its reply to `out`. The command is found in the table
/// ([`crate::table`]), which gives its arity and whether it may run before AUTH.
pub fn execute(
    store: &mut Store,
    info: &mut ServerInfo,
    session: &mut Session,
    args: &[&[u8]],
    out: &mut Vec<u8>,
) -> Effect {
    let Some(&name) = args.first() else {
        // An empty multibulk is ignored, like Redis.
        return Effect::Read;
    };
    info.total_commands += 1;
    session.pushed.clear();
    let Some(cmd) = table::lookup(name) else {
        unknown_command(out, args);
        session.flag_transaction();
        return Effect::Read;
    };
    // Redis's order: an unknown command and a wrong arity are said before NOAUTH.
    if !cmd.arity_ok(args.len()) {
        info.command_stats
            .entry(CommandName(cmd.name))
            .or_default()
            .rejected_calls += 1;
        arity(out, name);
        session.flag_transaction();
        return Effect::Read;
    }
    if info.requirepass.is_some() && !session.authed && !cmd.has(flag::NO_AUTH) {
        info.command_stats
            .entry(CommandName(cmd.name))
            .or_default()
            .rejected_calls += 1;
        reply::error(out, "NOAUTH Authentication required.");
        session.flag_transaction();
        return Effect::Read;
    }
    if session.proto < 3
        && session.subscribed()
        && !matches!(
            cmd.name,
            "SUBSCRIBE"
                | "PSUBSCRIBE"
                | "SSUBSCRIBE"
                | "UNSUBSCRIBE"
                | "PUNSUBSCRIBE"
                | "SUNSUBSCRIBE"
                | "PING"
                | "QUIT"
                | "RESET"
        )
    {
        reply::error(
            out,
            &format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                cmd.name.to_ascii_lowercase()
            ),
        );
        return Effect::Read;
    }
    if let Some(err) = refusal(store, info, session, cmd) {
        info.command_stats
            .entry(CommandName(cmd.name))
            .or_default()
            .rejected_calls += 1;
        if cmd.name == "EXEC" && session.multi.is_some() {
            // Redis's execCommandAbort: the transaction goes, and says why.
            session.multi = None;
            session.multi_failed = false;
            info.unwatch(session);
            reply::error(
                out,
                &format!("EXECABORT Transaction discarded because of: {err}"),
            );
        } else {
            reply::error(out, err);
            session.flag_transaction();
        }
        return Effect::Read;
    }
    session.last_cmd = cmd.name;
    if let Some(queued) = session.multi.as_mut() {
        // Inside MULTI everything but the transaction's own commands is queued for EXEC.
        if !matches!(
            cmd.name,
            "EXEC" | "DISCARD" | "MULTI" | "WATCH" | "QUIT" | "RESET"
        ) {
            if cmd.has(flag::NO_MULTI) {
                reply::error(out, "ERR Command not allowed inside a transaction");
                session.multi_failed = true;
                return Effect::Read;
            }
            queued.push(args.iter().map(|a| a.to_vec()).collect());
            reply::simple(out, "QUEUED");
            return Effect::Read;
        }
    }
    let mut ctx = Ctx {
        store,
        info,
        session,
        out,
    };
    dispatch(&mut ctx, cmd, args)
}

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
const NOREPLICAS: &str = "NOREPLICAS Not enough good replicas to write.";

/// Why the server refuses `cmd` now, as Redis's processCommand does: writes while
/// `min-replicas-to-write` asks for replicas (cxltier has none), and commands that may grow
/// memory while `used_memory` is over a `CONFIG SET maxmemory` limit (inside MULTI, every
/// command but EXEC, DISCARD, QUIT and RESET: queuing takes memory too). EXEC counts as the
/// commands it would run.
fn refusal(
    store: &Store,
    info: &ServerInfo,
    session: &Session,
    cmd: &table::Command,
) -> Option<&'static str> {
    let queued = || {
        session
            .multi
            .iter()
            .flatten()
            .filter_map(|args| table::lookup(args.first()?))
    };
    let is_exec = cmd.name == "EXEC";
    let writes = cmd.has(flag::WRITE) || (is_exec && queued().any(|c| c.has(flag::WRITE)));
    // Redis's min-replicas-to-write: writes need that many replicas that acknowledged within
    // min-replicas-max-lag seconds.
    let (min_replicas, max_lag) = info.knobs.min_replicas();
    if writes
        && min_replicas > 0
        && max_lag > 0
        && (info
            .repl
            .good_replicas(max_lag as u64, std::time::Instant::now()) as i64)
            < min_replicas
    {
        return Some(NOREPLICAS);
    }
    let limit = info.maxmemory_limit?;
    let grows = cmd.has(flag::DENYOOM)
        || (is_exec && queued().any(|c| c.has(flag::DENYOOM)))
        || (session.multi.is_some() && !matches!(cmd.name, "EXEC" | "DISCARD" | "QUIT" | "RESET"));
    if grows && memory_figures(&store.stats()).0 > limit {
        return Some(OOM);
    }
    None
}

/// Run a command found in the table and checked: its handler, then what its write means for
/// the clients watching its keys. Every key argument goes to the handler with the byte of the
/// database it is kept in ([`crate::db`]), so handlers and the store see one database's keys.
fn dispatch(ctx: &mut Ctx<'_>, cmd: &'static table::Command, args: &[&[u8]]) -> Effect {
    // The keys with their database byte, one after the other in a buffer the server keeps
    // (so a command costs one allocation here, its argument list), then the arguments with
    // each key replaced by its slice of it.
    let physical = ctx.info.dbs.physical(ctx.session.db);
    let mut keyed = std::mem::take(&mut ctx.info.keyed_scratch);
    keyed.clear();
    table::for_each_key_position(cmd, args, |i| {
        keyed.push(physical);
        keyed.extend_from_slice(args[i]);
    });
    // On the stack for the usual few arguments: an allocation per command showed in profiles.
    let mut with_db: smallvec::SmallVec<[&[u8]; 8]> = smallvec::SmallVec::from_slice(args);
    let mut at = 0;
    table::for_each_key_position(cmd, args, |i| {
        let end = at + 1 + args[i].len();
        with_db[i] = &keyed[at..end];
        at = end;
    });
    let effect = dispatch_keyed(ctx, cmd, &with_db);
    drop(with_db);
    // A buffer grown by a command of many or long keys is not kept.
    if keyed.capacity() <= KEYED_SCRATCH_KEPT {
        ctx.info.keyed_scratch = keyed;
    }
    effect
}

/// The most bytes of keys dispatch's buffer keeps between commands.
const KEYED_SCRATCH_KEPT: usize = 64 << 10;

/// [`dispatch`], once every key argument has its database byte.
fn dispatch_keyed(ctx: &mut Ctx<'_>, cmd: &'static table::Command, args: &[&[u8]]) -> Effect {
    // FLUSHALL/FLUSHDB touch the watched keys that exist (Redis's rule), known only before;
    // FLUSHDB only those of its database.
    if !ctx.info.watchers.is_empty() && cmd.name.starts_with("FLUSH") {
        let only = (cmd.name == "FLUSHDB").then_some(ctx.session.db as u8);
        let dbs = &ctx.info.dbs;
        let existing: Vec<Vec<u8>> = ctx
            .info
            .watchers
            .keys()
            .filter(|k| only.is_none_or(|d| k.first() == Some(&d)))
            .filter(|k| ctx.store.contains(&dbs.to_physical_key(k)))
            .cloned()
            .collect();
        for k in existing {
            ctx.info.touch(&k);
        }
    }
    // The time the command sees (Redis's command time snapshot): read once, and frozen in the
    // store for the command's lookups; the commands of an EXEC or a script see their
    // caller's. The same reading starts the command's time in INFO commandstats.
    let started_us = now_us();
    let outermost = ctx.store.frozen_clock().is_none();
    if outermost {
        ctx.info.close_command_time(started_us);
        ctx.store.freeze_clock(started_us / 1000);
    }
    // Replication: this command's unit of the write stream begins (EXEC's commands come back
    // here nested), and what it changes is counted from here. Keys expired outside any
    // command (the server's look-ups before it) go first, each alone.
    if ctx.info.repl.enter() {
        drain_expired(ctx.store, ctx.info, false);
    }
    let changes_before = ctx.store.changes();
    ctx.session.replicating = ctx.info.repl.active;
    ctx.session.propagate = None;
    ctx.session.force_propagate = false;
    // Lazy expiry, counted: a key of the command whose TTL has passed is removed here, by an
    // index lookup that reads no value, so INFO's expired_keys counts it as Redis does.
    if cmd.first_key > 0 && ctx.store.may_have_expiring_keys() {
        let before = ctx.store.len();
        for i in cmd.key_positions(args.len()) {
            ctx.store.contains(args[i]);
        }
        ctx.info.expired_keys += before.saturating_sub(ctx.store.len());
    }
    // With notifications on: the expiries just found are announced first (Redis announces
    // one at the lookup that finds it), and which keys exist is noted, for the `new` and
    // `del` events that follow from the keyspace alone.
    let notifying = ctx.info.notify.active();
    let mut existed: Vec<(&[u8], bool)> = Vec::new();
    if notifying {
        crate::notify::announce_expired(ctx.store, ctx.info, true);
        let mut seen = hashbrown::HashSet::new();
        for i in cmd.key_positions(args.len()) {
            if seen.insert(args[i]) {
                existed.push((args[i], ctx.store.contains(args[i])));
            }
        }
    }
    let reply_at = ctx.out.len();
    let effect = match (cmd.handler)(ctx, args) {
        Ok(effect) => effect,
        Err(e) => {
            store_error(ctx.out, &e);
            Effect::Read
        }
    };
    propagate(ctx, cmd, args, changes_before);
    ctx.info
        .repl
        .leave(!crate::replication::touches_arbitrary_keys(cmd.name));
    let stat = ctx
        .info
        .command_stats
        .entry(CommandName(cmd.name))
        .or_default();
    stat.calls += 1;
    if outermost {
        // Its time ends at the next reading of the clock.
        ctx.info.timed = Some((cmd.name, started_us));
        ctx.store.thaw_clock();
    } else {
        let took_us = now_us().saturating_sub(started_us);
        stat.usec += took_us;
        ctx.info.command_latency.observe(took_us as f64 / 1e6);
    }
    if ctx.out.get(reply_at) == Some(&b'-') {
        stat.failed_calls += 1;
    }
    // A blocked client's keys are kept as the registries keep keys: by logical database.
    if let Some(block) = ctx.session.block.as_mut() {
        for k in &mut block.keys {
            *k = ctx.info.dbs.to_logical_key(k);
        }
    }
    if notifying {
        // A read-only command's keys that were not there are key misses (Redis's lookupKeyRead;
        // OBJECT looks without announcing).
        let reads = cmd.has(flag::READONLY) && cmd.name != "OBJECT";
        crate::notify::finish_command(ctx, &existed, reads, reply_at);
    }
    // The keys written (the table's key positions, unless the handler named some unchanged:
    // SMOVE of a member the destination holds already; and those the handler named written
    // beyond them: SORT's STORE) touch their watchers and may feed a connection parked by a
    // blocking command, which the server looks at once the command (or the whole EXEC) is
    // done. Looked at only when someone waits on keys.
    let unchanged = std::mem::take(&mut ctx.session.unchanged_keys);
    let written = std::mem::take(&mut ctx.session.written_keys);
    if effect == Effect::Wrote && !(ctx.info.blocked.is_empty() && ctx.info.watchers.is_empty()) {
        let positions = cmd.key_positions(args.len()).map(|i| args[i]);
        for k in positions.chain(written.iter().map(Vec::as_slice)) {
            if unchanged.iter().any(|u| u == k) {
                continue;
            }
            let logical = ctx.info.dbs.to_logical_key(k);
            ctx.info.touch(&logical);
            if !ctx.info.blocked.is_empty() {
                ctx.info.ready.push(logical);
            }
        }
    }
    effect
}

/// Add what the command just run means for the write stream to its unit: the keys it found
/// expired as `del` (or `unlink`), then, if it changed the store (or must be replicated anyway),
/// itself or what its handler rewrote it to.
fn propagate(ctx: &mut Ctx<'_>, cmd: &table::Command, args: &[&[u8]], changes_before: u64) {
    let rewrite = ctx.session.propagate.take();
    let forced = std::mem::take(&mut ctx.session.force_propagate);
    if !ctx.info.repl.active {
        return;
    }
    let db = ctx.session.db();
    drain_expired(ctx.store, ctx.info, true);
    let dirty = ctx.store.changes() != changes_before;
    if !(forced || (dirty && cmd.has(flag::WRITE))) {
        return;
    }
    match rewrite {
        Some(ops) => {
            for op in ops {
                ctx.info.repl.also_propagate(db, op);
            }
        }
        None => ctx
            .info
            .repl
            .also_propagate(db, args.iter().map(|a| a.to_vec()).collect()),
    }
}

/// The keys the store found past their TTL since it was last asked (by a lookup, or by its
/// background sampling), taken in one place so that neither of their two users misses what
/// the other took: each is replicated as a `del` (or `unlink` with `lazyfree-lazy-expire yes`)
/// — into the running command's unit of the stream when `in_command`, else alone — and
/// announced as `expired` (keyspace notifications; published with the command's events, or by
/// the caller).
pub(crate) fn drain_expired(store: &mut Store, info: &mut ServerInfo, in_command: bool) {
    for k in store.take_expired() {
        if info.repl.active {
            let (db, key) = expired_in(info, &k);
            let op = expired_delete_op(info, &key);
            if in_command {
                info.repl.also_propagate(db, op);
            } else {
                info.repl.emit(db, &op);
            }
        }
        info.notify
            .emit(crate::notify::class::EXPIRED, "expired", &k);
    }
}

/// An expired key as the store names it (its physical database's byte first): the logical
/// database the stream selects for its `del`, and the key with that database's byte (the
/// stream drops it, as it does every key argument's).
pub(crate) fn expired_in(info: &ServerInfo, store_key: &[u8]) -> (u32, Vec<u8>) {
    let key = info.dbs.to_logical_key(store_key);
    (key.first().map_or(0, |&d| u32::from(d)), key)
}

/// The reply to an expiry that leaves the key deleted: Redis replicates it as `del` (or
/// `unlink` with `lazyfree-lazy-expire yes`).
pub(crate) fn expired_delete_op(info: &ServerInfo, key: &[u8]) -> crate::replication::Op {
    let verb: &[u8] = if info.knobs.get("lazyfree-lazy-expire") == Some("yes") {
        b"unlink"
    } else {
        b"del"
    };
    vec![verb.to_vec(), key.to_vec()]
}

pub(crate) fn unknown_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    let mut shown = String::new();
    for a in args[1..].iter().take(3) {
        shown.push_str(&format!(
            "'{}' ",
            String::from_utf8_lossy(&a[..a.len().min(64)])
        ));
    }
    reply::error(
        out,
        &format!(
            "ERR unknown command '{}', with args beginning with: {}",
            String::from_utf8_lossy(&args[0][..args[0].len().min(64)]),
            shown
        ),
    );
}

/// Reply with `msg` as an error; the command changed nothing.
pub(crate) fn fail(ctx: &mut Ctx<'_>, msg: &str) -> Result<Effect, StoreError> {
    reply::error(ctx.out, msg);
    Ok(Effect::Read)
}

pub(crate) fn ping(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    // Subscribed in RESP2: Redis answers a "pong" message, the argument or "" after it.
    if ctx.session.proto < 3 && ctx.session.subscribed() && args.len() <= 2 {
        reply::array(ctx.out, 2);
        reply::bulk(ctx.out, b"pong");
        reply::bulk(ctx.out, args.get(1).copied().unwrap_or_default());
        return Ok(Effect::Read);
    }
    match args.len() {
        1 => reply::simple(ctx.out, "PONG"),
        2 => reply::bulk(ctx.out, args[1]),
        _ => arity(ctx.out, args[0]),
    }
    Ok(Effect::Read)
}

pub(crate) fn echo(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    reply::bulk(ctx.out, args[1]);
    Ok(Effect::Read)
}

pub(crate) fn get(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let o = ctx.store.get(args[1])?;
    ctx.info.lookup(args[1], o.is_some());
    match o {
        None => reply::null(ctx.out, ctx.session.proto),
        Some(o) if o.kind != Kind::String => reply::error(ctx.out, WRONGTYPE),
        Some(o) => reply::bulk(ctx.out, o.value),
    }
    Ok(Effect::Read)
}

pub(crate) fn set(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut expiry_given = false;
    let effect = set_command(ctx, args, &mut expiry_given)?;
    // Redis 7.0 replicates a SET with EX/PX/EXAT/PXAT as `SET key value PXAT ms`.
    if expiry_given && effect == Effect::Wrote {
        // From the index: a value written straight to NVMe is not in memory to peek at.
        if let Some(Some(at)) = ctx.store.expiry_of(args[1]) {
            ctx.session
                .propagate_as(|| vec![set_pxat_op(args[1], args[2], at)]);
        }
    }
    Ok(effect)
}

/// `SET key value PXAT ms`: how Redis 7.0 replicates a write of a value with an expiry.
pub(crate) fn set_pxat_op(key: &[u8], value: &[u8], at_ms: u64) -> crate::replication::Op {
    vec![
        b"set".to_vec(),
        key.to_vec(),
        value.to_vec(),
        b"PXAT".to_vec(),
        at_ms.to_string().into_bytes(),
    ]
}

fn set_expiring(ctx: &mut Ctx<'_>, args: &[&[u8]], seconds: bool) -> Result<Effect, StoreError> {
    let Some(t) = parse_i64(args[2]) else {
        return fail(ctx, NOT_INT);
    };
    let at = (t > 0).then(|| expire_at_ms(t, seconds, true)).flatten();
    let Some(at) = at else {
        invalid_expire(ctx.out, if seconds { "setex" } else { "psetex" });
        return Ok(Effect::Read);
    };
    ctx.store
        .put(args[1], Kind::String, args[3], Some(at as u64))?;
    ctx.session
        .propagate_as(|| vec![set_pxat_op(args[1], args[3], at as u64)]);
    ctx.notify(nc::STRING, "set", args[1]);
    ctx.notify(nc::GENERIC, "expire", args[1]);
    reply::ok(ctx.out);
    Ok(Effect::Wrote)
}

pub(crate) fn setex(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    set_expiring(ctx, args, true)
}

pub(crate) fn psetex(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    set_expiring(ctx, args, false)
}

/// DEL and UNLINK.
pub(crate) fn del(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut count = 0;
    for k in &args[1..] {
        count += ctx.store.delete(k)? as i64;
    }
    reply::int(ctx.out, count);
    Ok(Effect::Wrote)
}

pub(crate) fn exists(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut count = 0;
    for k in &args[1..] {
        let found = ctx.store.contains(k);
        ctx.info.lookup(k, found);
        count += usize::from(found);
    }
    reply::int(ctx.out, count as i64);
    Ok(Effect::Read)
}

pub(crate) fn type_(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    // From the index, without counting an access (Redis's LOOKUP_NOTOUCH), except for a value
    // kept in pieces, whose root says whether it is a string or a hash.
    let kind = match ctx.store.key_info(args[1]) {
        Some(i) if i.kind == Kind::BigString => ctx.store.get(args[1])?.map(|o| o.kind),
        i => i.map(|i| i.kind),
    };
    ctx.info.lookup(args[1], kind.is_some());
    let name = kind.map_or("none", crate::keyspace::type_name);
    reply::simple(ctx.out, name);
    Ok(Effect::Read)
}

pub(crate) fn mget(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    reply::array(ctx.out, args.len() - 1);
    for k in &args[1..] {
        let o = ctx.store.get(k)?;
        ctx.info.lookup(k, o.is_some());
        match o {
            Some(o) if o.kind == Kind::String => reply::bulk(ctx.out, o.value),
            _ => reply::null(ctx.out, ctx.session.proto),
        }
    }
    Ok(Effect::Read)
}

pub(crate) fn mset(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    if args.len() % 2 == 0 {
        arity(ctx.out, args[0]);
        return Ok(Effect::Read);
    }
    for kv in args[1..].chunks(2) {
        ctx.store.put(kv[0], Kind::String, kv[1], None)?;
        ctx.notify(nc::STRING, "set", kv[0]);
    }
    reply::ok(ctx.out);
    Ok(Effect::Wrote)
}

pub(crate) fn incr(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    incr_by(ctx, args[1], 1)
}

pub(crate) fn decr(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    incr_by(ctx, args[1], -1)
}

pub(crate) fn incrby(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match parse_i64(args[2]) {
        Some(by) => incr_by(ctx, args[1], by),
        None => fail(ctx, NOT_INT),
    }
}

pub(crate) fn decrby(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match parse_i64(args[2]) {
        Some(by) => match by.checked_neg() {
            Some(by) => incr_by(ctx, args[1], by),
            None => fail(ctx, "ERR decrement would overflow"),
        },
        None => fail(ctx, NOT_INT),
    }
}

fn incr_by(ctx: &mut Ctx<'_>, key: &[u8], by: i64) -> Result<Effect, StoreError> {
    let (current, expires) = match ctx.store.get(key)? {
        None => (0, None),
        Some(o) if o.kind != Kind::String => return fail(ctx, WRONGTYPE),
        Some(o) => match parse_i64(o.value) {
            Some(v) => (v, o.expires_at_ms),
            None => return fail(ctx, NOT_INT),
        },
    };
    let Some(next) = current.checked_add(by) else {
        return fail(ctx, "ERR increment or decrement would overflow");
    };
    let mut digits = itoa::Buffer::new();
    ctx.store
        .put(key, Kind::String, digits.format(next).as_bytes(), expires)?;
    ctx.notify(nc::STRING, "incrby", key);
    reply::int(ctx.out, next);
    Ok(Effect::Wrote)
}

pub(crate) fn hset(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hset_fields(ctx, args, false)
}

pub(crate) fn hmset(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hset_fields(ctx, args, true)
}

fn hset_fields(ctx: &mut Ctx<'_>, args: &[&[u8]], hmset: bool) -> Result<Effect, StoreError> {
    let n = args.len();
    if n % 2 != 0 {
        arity(ctx.out, args[0]);
        return Ok(Effect::Read);
    }
    let store = &mut *ctx.store;
    let out = &mut *ctx.out;
    // The common update (YCSB's): one existing field rewritten at the same length. Its
    // bytes are overwritten in place; nothing else of the record is read or written.
    if n == 4 {
        let span = match store.get(args[1])? {
            Some(o) if o.kind == Kind::Hash => hash::value_span(o.value, args[2])
                .flatten()
                .filter(|r| r.len() == args[3].len()),
            _ => None,
        };
        if let Some(r) = span {
            if store.patch(args[1], r.start, args[3])? {
                ctx.info.notify.emit(nc::HASH, "hset", args[1]);
                if hmset {
                    reply::ok(out);
                } else {
                    reply::int(out, 0);
                }
                return Ok(Effect::Wrote);
            }
        }
    }
    // One read of the record, borrowed: the new encoding is built from the old bytes and
    // the arguments without copying each field. When the one-field path above already
    // read it, its value is at hand: reading it again with `get` would count a second
    // access (admission would rate updated keys above read ones) and a second hit.
    let read_above = n == 4 && store.peek(args[1]).is_some();
    let (encoded, expires, added) = {
        let current = if read_above {
            store.peek(args[1])
        } else {
            store.get(args[1])?
        };
        let (old, expires) = match current {
            None => (None, None),
            Some(o) if o.kind == Kind::ChunkedHash => {
                // A large hash: the fields are written into its tree, the rest untouched.
                let added = store.hset(args[1], &hash::last_wins(&args[2..]))?;
                ctx.info.notify.emit(nc::HASH, "hset", args[1]);
                if hmset {
                    reply::ok(out);
                } else {
                    reply::int(out, added as i64);
                }
                return Ok(Effect::Wrote);
            }
            Some(o) if o.kind != Kind::Hash => {
                reply::error(out, WRONGTYPE);
                return Ok(Effect::Read);
            }
            Some(o) => (Some(o.value), o.expires_at_ms),
        };
        let mut fields: Vec<(&[u8], &[u8])> = match old.map(hash::decode) {
            None => Vec::new(),
            Some(Some(f)) => f,
            Some(None) => {
                reply::error(out, CORRUPT_HASH);
                return Ok(Effect::Read);
            }
        };
        let mut added = 0;
        if n - 2 <= 2 * FEW_FIELDS {
            for fv in args[2..].chunks(2) {
                match fields.iter_mut().find(|(f, _)| *f == fv[0]) {
                    Some(slot) => slot.1 = fv[1],
                    None => {
                        fields.push((fv[0], fv[1]));
                        added += 1;
                    }
                }
            }
        } else {
            // Many fields: a search of the list for each was quadratic (150,000 fields
            // held the server 15 s). An index from field to its place instead.
            let mut at: HashMap<&[u8], usize> = HashMap::with_capacity(fields.len());
            for (i, (f, _)) in fields.iter().enumerate() {
                at.entry(f).or_insert(i);
            }
            for fv in args[2..].chunks(2) {
                match at.entry(fv[0]) {
                    hashbrown::hash_map::Entry::Occupied(e) => fields[*e.get()].1 = fv[1],
                    hashbrown::hash_map::Entry::Vacant(e) => {
                        e.insert(fields.len());
                        fields.push((fv[0], fv[1]));
                        added += 1;
                    }
                }
            }
        }
        let encoded = hash::encode(fields.iter().copied());
        if encoded.len() > hash::FLAT_MAX_BYTES {
            // Too large to stay one value: the fields are copied out of the borrowed record.
            let owned: Vec<(Vec<u8>, Vec<u8>)> = fields
                .iter()
                .map(|(f, v)| (f.to_vec(), v.to_vec()))
                .collect();
            let was_flat = old.is_some();
            let pairs: Vec<(&[u8], &[u8])> = owned
                .iter()
                .map(|(f, v)| (f.as_slice(), v.as_slice()))
                .collect();
            let listpack = hash::redis_keeps_listpack(ctx.info, &pairs);
            hash::store_fields(
                store, args[1], &pairs, listpack, &encoded, expires, was_flat,
            )?;
            ctx.info.notify.emit(nc::HASH, "hset", args[1]);
            if hmset {
                reply::ok(out);
            } else {
                reply::int(out, added);
            }
            return Ok(Effect::Wrote);
        }
        (encoded, expires, added)
    };
    store.put(args[1], Kind::Hash, &encoded, expires)?;
    ctx.info.notify.emit(nc::HASH, "hset", args[1]);
    if hmset {
        reply::ok(out);
    } else {
        reply::int(out, added);
    }
    Ok(Effect::Wrote)
}

/// The hash reads, one handler each in the table, one body.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HashQuery {
    Get,
    MGet,
    GetAll,
    Len,
    Exists,
    Keys,
    Vals,
}

pub(crate) fn hget(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::Get)
}
pub(crate) fn hmget(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::MGet)
}
pub(crate) fn hgetall(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::GetAll)
}
pub(crate) fn hlen(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::Len)
}
pub(crate) fn hexists(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::Exists)
}
pub(crate) fn hkeys(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::Keys)
}
pub(crate) fn hvals(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::Vals)
}

fn hash_query(ctx: &mut Ctx<'_>, args: &[&[u8]], q: HashQuery) -> Result<Effect, StoreError> {
    let n = args.len();
    let proto = ctx.session.proto;
    let out = &mut *ctx.out;
    let o = ctx.store.get(args[1])?;
    ctx.info.lookup(args[1], o.is_some());
    let fields = match o {
        Some(o) if o.kind == Kind::ChunkedHash => return chunked_hash_query(ctx, args, q),
        None => Vec::new(),
        Some(o) if o.kind != Kind::Hash => {
            reply::error(out, WRONGTYPE);
            return Ok(Effect::Read);
        }
        Some(o) => match hash::decode(o.value) {
            Some(f) => f,
            None => {
                reply::error(out, CORRUPT_HASH);
                return Ok(Effect::Read);
            }
        },
    };
    // HMGET of many fields: an index rather than a search of the list for each. The
    // first of equal fields wins, as in `hash::value_span`.
    let index: Option<HashMap<&[u8], &[u8]>> = (n - 2 > FEW_FIELDS).then(|| {
        let mut m = HashMap::with_capacity(fields.len());
        for &(f, v) in fields.iter().rev() {
            m.insert(f, v);
        }
        m
    });
    let find = |f: &[u8]| match &index {
        Some(m) => m.get(f).copied(),
        None => fields.iter().find(|(k, _)| *k == f).map(|(_, v)| *v),
    };
    match q {
        HashQuery::Get => match find(args[2]) {
            Some(v) => reply::bulk(out, v),
            None => reply::null(out, proto),
        },
        HashQuery::MGet => {
            reply::array(out, n - 2);
            for f in &args[2..] {
                match find(f) {
                    Some(v) => reply::bulk(out, v),
                    None => reply::null(out, proto),
                }
            }
        }
        HashQuery::GetAll => {
            reply::map(out, proto, fields.len());
            for (f, v) in &fields {
                reply::bulk(out, f);
                reply::bulk(out, v);
            }
        }
        HashQuery::Keys | HashQuery::Vals => {
            reply::array(out, fields.len());
            for (f, v) in &fields {
                reply::bulk(out, if q == HashQuery::Keys { f } else { v });
            }
        }
        HashQuery::Len => reply::int(out, fields.len() as i64),
        HashQuery::Exists => reply::int(out, find(args[2]).is_some() as i64),
    }
    Ok(Effect::Read)
}

/// [`hash_query`] on a chunked hash: the fields asked for are looked up in its tree; HGETALL,
/// HKEYS and HVALS read it all, as Redis does.
fn chunked_hash_query(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    q: HashQuery,
) -> Result<Effect, StoreError> {
    let proto = ctx.session.proto;
    let key = args[1];
    match q {
        HashQuery::Get => match ctx.store.hget(key, args[2])? {
            Some(v) => reply::bulk(ctx.out, &v),
            None => reply::null(ctx.out, proto),
        },
        HashQuery::MGet => {
            let mut out = Vec::new();
            reply::array(&mut out, args.len() - 2);
            for f in &args[2..] {
                match ctx.store.hget(key, f)? {
                    Some(v) => reply::bulk(&mut out, &v),
                    None => reply::null(&mut out, proto),
                }
            }
            ctx.out.extend_from_slice(&out);
        }
        HashQuery::Exists => {
            let found = ctx.store.hget(key, args[2])?.is_some();
            reply::int(ctx.out, found as i64);
        }
        HashQuery::Len => {
            let n = ctx.store.hlen(key)?;
            reply::int(ctx.out, n as i64);
        }
        HashQuery::GetAll | HashQuery::Keys | HashQuery::Vals => {
            let fields = hash::chunked_fields(ctx.store, key)?;
            let out = &mut *ctx.out;
            if q == HashQuery::GetAll {
                reply::map(out, proto, fields.len());
            } else {
                reply::array(out, fields.len());
            }
            for (f, v) in &fields {
                match q {
                    HashQuery::GetAll => {
                        reply::bulk(out, f);
                        reply::bulk(out, v);
                    }
                    HashQuery::Keys => reply::bulk(out, f),
                    _ => reply::bulk(out, v),
                }
            }
        }
    }
    Ok(Effect::Read)
}

pub(crate) fn hdel(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let n = args.len();
    let fields = match read_hash(ctx.store, args[1])? {
        HashRead::Missing => {
            reply::int(ctx.out, 0);
            return Ok(Effect::Read);
        }
        HashRead::Chunked => {
            // Removing the last field deletes the key (the store has no empty collections).
            let removed = ctx.store.hdel(args[1], &args[2..])?;
            if removed > 0 {
                ctx.notify(nc::HASH, "hdel", args[1]);
            }
            reply::int(ctx.out, removed as i64);
            return Ok(if removed > 0 {
                Effect::Wrote
            } else {
                Effect::Read
            });
        }
        HashRead::Fields(f) => f,
        HashRead::WrongType => return fail(ctx, WRONGTYPE),
        HashRead::Corrupt => return fail(ctx, CORRUPT_HASH),
    };
    let before = fields.len();
    // Many fields to delete: a set, not a search of the arguments for each field.
    let gone: Option<hashbrown::HashSet<&[u8]>> =
        (n - 2 > FEW_FIELDS).then(|| args[2..].iter().copied().collect());
    let kept: Vec<_> = fields
        .into_iter()
        .filter(|(f, _)| match &gone {
            Some(set) => !set.contains(f.as_slice()),
            None => !args[2..].contains(&f.as_slice()),
        })
        .collect();
    let removed = before - kept.len();
    if removed > 0 {
        // Redis's order: hdel, then del when the hash is gone (the latter from dispatch).
        ctx.notify(nc::HASH, "hdel", args[1]);
    }
    if kept.is_empty() {
        ctx.store.delete(args[1])?;
    } else if removed > 0 {
        let expires = ctx.store.get(args[1])?.and_then(|o| o.expires_at_ms);
        let encoded = hash::encode(kept.iter().map(|(f, v)| (f.as_slice(), v.as_slice())));
        ctx.store.put(args[1], Kind::Hash, &encoded, expires)?;
    }
    reply::int(ctx.out, removed as i64);
    Ok(Effect::Wrote)
}

/// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: `key time [NX | XX | GT | LT]`, Redis 7's rules (a
/// key without a TTL counts as one that never expires: GT never applies to it, LT always).
fn expire_command(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    name: &str,
    seconds: bool,
    relative: bool,
) -> Result<Effect, StoreError> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &args[3..] {
        match opt.to_ascii_uppercase().as_slice() {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"GT" => gt = true,
            b"LT" => lt = true,
            _ => {
                return fail(
                    ctx,
                    &format!("ERR Unsupported option {}", String::from_utf8_lossy(opt)),
                )
            }
        }
    }
    if nx && (xx || gt || lt) {
        return fail(
            ctx,
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        );
    }
    if gt && lt {
        return fail(
            ctx,
            "ERR GT and LT options at the same time are not compatible",
        );
    }
    let Some(t) = parse_i64(args[2]) else {
        return fail(ctx, NOT_INT);
    };
    let Some(at) = expire_at_ms(t, seconds, relative) else {
        invalid_expire(ctx.out, name);
        return Ok(Effect::Read);
    };
    let Some(current) = ctx.store.get(args[1])?.map(|o| o.expires_at_ms) else {
        reply::int(ctx.out, 0);
        return Ok(Effect::Read);
    };
    let applies = match current {
        None => !(xx || gt),
        Some(c) => {
            let c = c as i64;
            !(nx || (gt && at <= c) || (lt && at >= c))
        }
    };
    if !applies {
        reply::int(ctx.out, 0);
        return Ok(Effect::Read);
    }
    if at <= now_ms() as i64 {
        let existed = ctx.store.delete(args[1])?;
        // Redis replicates an expiry already past as the delete it is.
        ctx.session
            .propagate_as(|| vec![expired_delete_op(ctx.info, args[1])]);
        reply::int(ctx.out, existed as i64);
    } else {
        let ok = ctx.store.set_expiry(args[1], Some(at as u64))?;
        // As `PEXPIREAT key ms`, the options kept (Redis's expireGenericCommand).
        ctx.session.propagate_as(|| {
            let mut op: crate::replication::Op = vec![
                b"pexpireat".to_vec(),
                args[1].to_vec(),
                at.to_string().into_bytes(),
            ];
            op.extend(args[3..].iter().map(|a| a.to_vec()));
            vec![op]
        });
        if ok {
            ctx.notify(nc::GENERIC, "expire", args[1]);
        }
        reply::int(ctx.out, ok as i64);
    }
    Ok(Effect::Wrote)
}

pub(crate) fn expire(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    expire_command(ctx, args, "expire", true, true)
}
pub(crate) fn pexpire(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    expire_command(ctx, args, "pexpire", false, true)
}
pub(crate) fn expireat(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    expire_command(ctx, args, "expireat", true, false)
}
pub(crate) fn pexpireat(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    expire_command(ctx, args, "pexpireat", false, false)
}

pub(crate) fn persist(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let had = ctx
        .store
        .get(args[1])?
        .is_some_and(|o| o.expires_at_ms.is_some());
    if had {
        ctx.store.set_expiry(args[1], None)?;
        ctx.notify(nc::GENERIC, "persist", args[1]);
    }
    reply::int(ctx.out, had as i64);
    Ok(Effect::Wrote)
}

fn time_to_live(ctx: &mut Ctx<'_>, key: &[u8], seconds: bool) -> Result<Effect, StoreError> {
    // From the index alone: TTL neither reads the value nor counts an access (Redis's
    // LOOKUP_NOTOUCH: OBJECT IDLETIME goes on growing).
    let o = ctx.store.key_info(key);
    ctx.info.lookup(key, o.is_some());
    match o {
        None => reply::int(ctx.out, -2),
        Some(o) => match o.expires_at_ms {
            None => reply::int(ctx.out, -1),
            Some(t) => {
                let left = t.saturating_sub(now_ms()) as i64;
                reply::int(ctx.out, if seconds { (left + 500) / 1000 } else { left });
            }
        },
    }
    Ok(Effect::Read)
}

pub(crate) fn ttl(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    time_to_live(ctx, args[1], true)
}
pub(crate) fn pttl(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    time_to_live(ctx, args[1], false)
}

pub(crate) fn scanrange(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(count) = parse_i64(args[2]).filter(|&c| (0..=100_000).contains(&c)) else {
        return fail(ctx, "ERR count must be an integer from 0 to 100000");
    };
    let physical = ctx.info.dbs.physical(ctx.session.db);
    let items = ctx.store.scan_db(physical, args[1], count as usize)?;
    reply::array(ctx.out, items.len());
    for it in items {
        reply::array(ctx.out, 2);
        reply::bulk(ctx.out, &it.key);
        if it.kind == Kind::ChunkedHash {
            let key = cxltier_store::db_key(physical, &it.key);
            let fields = hash::chunked_fields(ctx.store, &key)?;
            let out = &mut *ctx.out;
            reply::array(out, fields.len() * 2);
            for (f, v) in &fields {
                reply::bulk(out, f);
                reply::bulk(out, v);
            }
            continue;
        }
        let out = &mut *ctx.out;
        match (it.kind, hash::decode(&it.value)) {
            (Kind::Hash, Some(fields)) => {
                reply::array(out, fields.len() * 2);
                for (f, v) in fields {
                    reply::bulk(out, f);
                    reply::bulk(out, v);
                }
            }
            _ => reply::bulk(out, &it.value),
        }
    }
    Ok(Effect::Read)
}

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
    }
    // Replicated even when there was nothing to flush (Redis's forceCommandPropagation).
    ctx.session.force_propagate = true;
    reply::ok(ctx.out);
    Ok(Effect::Wrote)
}

/// SELECT db
pub(crate) fn select(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match ctx.info.dbs.parse(args[1]) {
        Ok(db) => {
            ctx.session.db = db;
            reply::ok(ctx.out);
            Ok(Effect::Read)
        }
        Err(msg) => fail(ctx, msg),
    }
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
                ctx.store.contains(&cxltier_store::db_key(pa, user))
                    || ctx.store.contains(&cxltier_store::db_key(pb, user))
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

pub(crate) fn auth(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let n = args.len();
    if n > 3 {
        return fail(ctx, SYNTAX);
    }
    let requirepass = ctx.info.requirepass.as_deref();
    match check_password(
        requirepass,
        ctx.session,
        (n == 3).then(|| args[1]),
        args[n - 1],
    ) {
        Ok(()) => reply::ok(ctx.out),
        Err(msg) => reply::error(ctx.out, msg),
    }
    Ok(Effect::Read)
}

/// AUTH's check (also HELLO's AUTH option): the default user's password. Needs no more of the
/// server than its password, so that a busy script's restricted mode runs it too.
pub(crate) fn check_password(
    requirepass: Option<&str>,
    session: &mut Session,
    user: Option<&[u8]>,
    given: &[u8],
) -> Result<(), &'static str> {
    match requirepass {
        // Redis's default user without a password takes any password given with its name
        // (clients configured with credentials send them), but a lone password is a mistake.
        None if user == Some(b"default") => Ok(()),
        None if user.is_some() => Err("WRONGPASS invalid username-password pair or user is disabled."),
        None => Err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
        Some(pw) if pw.as_bytes() == given && user.is_none_or(|u| u == b"default") => {
            session.authed = true;
            Ok(())
        }
        Some(_) => Err("WRONGPASS invalid username-password pair or user is disabled."),
    }
}

pub(crate) fn command(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    table::command_reply(ctx.out, ctx.session.proto, &args[1..]);
    Ok(Effect::Read)
}

/// Redis's rule for client names: printable ASCII without spaces.
fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

const BAD_CLIENT_NAME: &str =
    "ERR Client names cannot contain spaces, newlines or special characters.";

/// One line of CLIENT LIST / CLIENT INFO, in Redis 7's fields.
fn client_line(t: &mut String, id: u64, m: &ClientMeta, now: std::time::Instant, blocked: bool) {
    use std::fmt::Write;
    let mut flags = String::new();
    // Parked by a blocking command (Redis's `b`).
    if blocked {
        flags.push('b');
    }
    // A replica (Redis's `S`).
    if m.replica {
        flags.push('S');
    }
    if m.sub + m.psub + m.ssub > 0 {
        flags.push('P');
    }
    if m.multi >= 0 {
        flags.push('x');
    }
    if m.no_evict {
        flags.push('e');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let _ = writeln!(
        t,
        "id={id} addr={} laddr={} fd={} name={} age={} idle={} flags={flags} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=16384 rbp=0 obl=0 oll=0 omem={} tot-mem={} events=r cmd={} user=default redir=-1 resp={}",
        m.addr,
        m.laddr,
        m.fd,
        String::from_utf8_lossy(m.name.as_deref().unwrap_or_default()),
        now.saturating_duration_since(m.created).as_secs(),
        now.saturating_duration_since(m.last_active).as_secs(),
        m.db,
        m.sub,
        m.psub,
        m.ssub,
        m.multi,
        m.qbuf,
        m.omem,
        m.qbuf + m.omem,
        m.last_cmd.to_ascii_lowercase(),
        m.proto.max(2),
    );
}

/// The caller's own line is built from its session, which is current; the others' from what
/// the server last recorded of them.
fn client_meta(ctx: &Ctx<'_>, id: u64) -> Option<ClientMeta> {
    let mut m = ctx.info.clients.get(&id)?.clone();
    if id == ctx.session.id {
        m.update_from(ctx.session);
        m.last_active = std::time::Instant::now();
    }
    Some(m)
}

/// A `CLIENT KILL` filter: which connections it closes.
#[derive(Default)]
struct KillFilter {
    id: Option<u64>,
    addr: Option<Vec<u8>>,
    laddr: Option<Vec<u8>>,
    user: Option<Vec<u8>>,
    /// TYPE: normal or pubsub (there are no masters or replicas: those match nothing).
    kind: Option<&'static str>,
    skipme: bool,
}

fn parse_kill_filter(args: &[&[u8]]) -> Result<KillFilter, &'static str> {
    let mut f = KillFilter {
        skipme: true,
        ..KillFilter::default()
    };
    if args.len() % 2 != 0 {
        return Err(SYNTAX);
    }
    for pair in args.chunks(2) {
        let v = pair[1];
        match pair[0].to_ascii_uppercase().as_slice() {
            b"ID" => match parse_i64(v) {
                Some(id) if id > 0 => f.id = Some(id as u64),
                _ => return Err("ERR client-id should be greater than 0"),
            },
            b"ADDR" => f.addr = Some(v.to_vec()),
            b"LADDR" => f.laddr = Some(v.to_vec()),
            b"USER" => f.user = Some(v.to_vec()),
            b"SKIPME" => match v.to_ascii_lowercase().as_slice() {
                b"yes" => f.skipme = true,
                b"no" => f.skipme = false,
                _ => return Err(SYNTAX),
            },
            b"TYPE" => match v.to_ascii_lowercase().as_slice() {
                b"normal" => f.kind = Some("normal"),
                b"pubsub" => f.kind = Some("pubsub"),
                b"master" | b"slave" | b"replica" => f.kind = Some("replica"),
                _ => return Err("ERR Unknown client type"),
            },
            b"MAXAGE" => match parse_i64(v) {
                Some(_) => {}
                None => return Err(NOT_INT),
            },
            _ => return Err(SYNTAX),
        }
    }
    Ok(f)
}

pub(crate) fn client(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let n = args.len();
    let sub = args[1].to_ascii_uppercase();
    let proto = ctx.session.proto;
    let wrong = |ctx: &mut Ctx<'_>| {
        fail(
            ctx,
            &format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(args[1])
            ),
        )
    };
    match (sub.as_slice(), n) {
        (b"ID", 2) => reply::int(ctx.out, ctx.session.id as i64),
        (b"SETNAME", 3) => {
            if !valid_client_name(args[2]) {
                return fail(ctx, BAD_CLIENT_NAME);
            }
            ctx.session.name = (!args[2].is_empty()).then(|| args[2].to_vec());
            reply::ok(ctx.out);
        }
        (b"GETNAME", 2) => match &ctx.session.name {
            Some(nm) => reply::bulk(ctx.out, nm),
            None => reply::null(ctx.out, proto),
        },
        // Redis 7.2's library name and version: accepted, as clients send them at connect.
        (b"SETINFO", 4) => reply::ok(ctx.out),
        (b"INFO", 2) => {
            let mut t = String::new();
            if let Some(m) = client_meta(ctx, ctx.session.id) {
                client_line(&mut t, ctx.session.id, &m, std::time::Instant::now(), false);
            }
            reply::verbatim(ctx.out, proto, "txt", t.as_bytes());
        }
        (b"LIST", _) => {
            // CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id ...]
            let mut ids: Vec<u64> = ctx.info.clients.keys().copied().collect();
            ids.sort_unstable();
            let mut want_kind = None;
            let rest = &args[2..];
            if let Some(kind) = rest.first() {
                match (kind.to_ascii_uppercase().as_slice(), rest.len()) {
                    (b"TYPE", 2) => match rest[1].to_ascii_lowercase().as_slice() {
                        b"normal" => want_kind = Some("normal"),
                        b"pubsub" => want_kind = Some("pubsub"),
                        b"slave" | b"replica" => want_kind = Some("replica"),
                        // cxltier is no replica: it has no master link.
                        b"master" => ids.clear(),
                        _ => {
                            return fail(
                                ctx,
                                &format!(
                                    "ERR Unknown client type '{}'",
                                    String::from_utf8_lossy(rest[1])
                                ),
                            )
                        }
                    },
                    (b"ID", k) if k >= 2 => {
                        let mut wanted = Vec::new();
                        for v in &rest[1..] {
                            match parse_i64(v) {
                                Some(id) if id > 0 => wanted.push(id as u64),
                                _ => return fail(ctx, "ERR Invalid client ID"),
                            }
                        }
                        ids.retain(|id| wanted.contains(id));
                    }
                    _ => return fail(ctx, SYNTAX),
                }
            }
            let now = std::time::Instant::now();
            let mut t = String::new();
            for id in ids {
                if let Some(m) = client_meta(ctx, id) {
                    if want_kind.is_none_or(|k| k == m.kind()) {
                        client_line(&mut t, id, &m, now, ctx.info.blocked.contains(&id));
                    }
                }
            }
            reply::verbatim(ctx.out, proto, "txt", t.as_bytes());
        }
        (b"KILL", 3) => {
            // The old form: CLIENT KILL addr:port.
            let found = ctx
                .info
                .clients
                .iter()
                .find(|(_, m)| m.addr.as_bytes() == args[2])
                .map(|(&id, _)| id);
            match found {
                Some(id) => {
                    ctx.info.kill.push(id);
                    reply::ok(ctx.out);
                }
                None => return fail(ctx, "ERR No such client"),
            }
        }
        (b"KILL", _) if n >= 4 => {
            let f = match parse_kill_filter(&args[2..]) {
                Ok(f) => f,
                Err(e) => return fail(ctx, e),
            };
            let me = ctx.session.id;
            // The caller's own type from its session, which is current.
            let my_kind = if ctx.session.is_replica {
                "replica"
            } else if ctx.session.subscribed() {
                "pubsub"
            } else {
                "normal"
            };
            let mut killed: Vec<u64> = ctx
                .info
                .clients
                .iter()
                .filter(|(&id, m)| {
                    f.kind
                        .is_none_or(|k| k == if id == me { my_kind } else { m.kind() })
                        && f.id.is_none_or(|want| want == id)
                        && f.addr.as_deref().is_none_or(|a| a == m.addr.as_bytes())
                        && f.laddr.as_deref().is_none_or(|a| a == m.laddr.as_bytes())
                        && f.user.as_deref().is_none_or(|u| u == b"default")
                        && !(f.skipme && id == me)
                })
                .map(|(&id, _)| id)
                .collect();
            killed.sort_unstable();
            reply::int(ctx.out, killed.len() as i64);
            ctx.info.kill.extend(killed);
        }
        // The connection is woken by the server after this command: with an error, or as if
        // its timeout had passed.
        (b"UNBLOCK", 3 | 4) => {
            let Some(id) = parse_i64(args[2]) else {
                return fail(ctx, NOT_INT);
            };
            let error = match args.get(3).map(|a| a.to_ascii_uppercase()) {
                None => false,
                Some(m) if m == b"TIMEOUT" => false,
                Some(m) if m == b"ERROR" => true,
                Some(_) => {
                    return fail(ctx, "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
                }
            };
            let id = id as u64;
            let blocked =
                ctx.info.blocked.contains(&id) && !ctx.info.unblock.iter().any(|u| u.0 == id);
            if blocked {
                ctx.info.unblock.push((id, error));
            }
            reply::int(ctx.out, blocked as i64);
        }
        (b"NO-EVICT", 3) => match args[2].to_ascii_lowercase().as_slice() {
            b"on" => {
                ctx.session.no_evict = true;
                reply::ok(ctx.out);
            }
            b"off" => {
                ctx.session.no_evict = false;
                reply::ok(ctx.out);
            }
            _ => return fail(ctx, SYNTAX),
        },
        // Inside EXEC it would leave a hole in EXEC's array of replies.
        (b"REPLY", 3) if ctx.session.in_exec => {
            return fail(ctx, "ERR CLIENT REPLY is not allowed inside a transaction")
        }
        (b"REPLY", 3) => match args[2].to_ascii_lowercase().as_slice() {
            b"on" => {
                ctx.session.reply_off = false;
                ctx.session.reply_skip = 0;
                reply::ok(ctx.out);
            }
            // No reply to these: the server drops what this command writes, and with SKIP
            // the next command's reply too.
            b"off" => ctx.session.reply_off = true,
            b"skip" => ctx.session.reply_skip = 2,
            _ => return fail(ctx, SYNTAX),
        },
        (b"HELP", 2) => {
            let lines = [
                "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "ID",
                "    Return the ID of the current connection.",
                "INFO",
                "    Return information about the current client connection.",
                "GETNAME",
                "    Return the name of the current connection.",
                "SETNAME <name>",
                "    Assign the name <name> to the current connection.",
                "LIST [TYPE (NORMAL|MASTER|REPLICA|PUBSUB)] [ID <id> [<id> ...]]",
                "    Return information about client connections.",
                "KILL <ip:port>",
                "    Kill connection made from <ip:port>.",
                "KILL <option> <value> [<option> <value> [...]]",
                "    Kill connections. Options are: ID, ADDR, LADDR, USER, TYPE, SKIPME, MAXAGE.",
                "NO-EVICT (ON|OFF)",
                "    Protect the current client connection from eviction.",
                "REPLY (ON|OFF|SKIP)",
                "    Control the replies sent to the current connection.",
            ];
            reply::array(ctx.out, lines.len());
            for l in lines {
                reply::simple(ctx.out, l);
            }
        }
        _ => return wrong(ctx),
    }
    Ok(Effect::Read)
}

pub(crate) fn info(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sections: Vec<String> = args[1..]
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .collect();
    let text = info_text(ctx.store, ctx.info, &sections);
    reply::verbatim(ctx.out, ctx.session.proto, "txt", text.as_bytes());
    Ok(Effect::Read)
}

/// OBJECT ENCODING of a chunked hash: what Redis would use for its fields under the configured
/// thresholds (a chunked hash is over 32 KiB, so almost always "hashtable"; the fields are
/// read only when there are few enough for a listpack).
fn chunked_hash_encoding(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<&'static str, StoreError> {
    let entries = ctx.info.knobs.int("hash-max-listpack-entries");
    let longest = ctx.info.knobs.int("hash-max-listpack-value");
    if ctx.store.hlen(key)? as i64 > entries {
        return Ok("hashtable");
    }
    let fields = hash::chunked_fields(ctx.store, key)?;
    let small = fields
        .iter()
        .all(|(f, v)| f.len() as i64 <= longest && v.len() as i64 <= longest);
    Ok(if small { "listpack" } else { "hashtable" })
}

/// Redis's name for how it would encode a value under the configured thresholds (OBJECT
/// ENCODING): tools and Redis's own tests branch on it. cxltier stores every value as bytes in
/// one tier; the name says what Redis would do, not how cxltier lays the value out.
fn redis_encoding(info: &ServerInfo, kind: Kind, value: &[u8]) -> &'static str {
    match kind {
        Kind::Hash => {
            let fields = hash::decode(value).unwrap_or_default();
            if hash::redis_keeps_listpack(info, &fields) {
                "listpack"
            } else {
                "hashtable"
            }
        }
        _ => {
            // An integer without leading zeros or sign tricks that fits an i64 is "int";
            // short strings are "embstr" (44 bytes fit one allocation with the object).
            let int = value.len() <= 20
                && parse_i64(value).is_some_and(|n| n.to_string().as_bytes() == value);
            if int {
                "int"
            } else if value.len() <= 44 {
                "embstr"
            } else {
                "raw"
            }
        }
    }
}

pub(crate) fn object(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sub = args[1].to_ascii_uppercase();
    let proto = ctx.session.proto;
    if sub == b"HELP" && args.len() == 2 {
        let lines = [
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ENCODING <key>",
            "    Return the name Redis would use to encode the value stored at <key> under the",
            "    configured thresholds (cxltier stores values as bytes in one tier).",
            "FREQ <key>",
            "    Return the access frequency index of the key (LFU policies only).",
            "IDLETIME <key>",
            "    Return the idle time of the key, that is the approximated number",
            "    of seconds elapsed since the last access to the key.",
            "TIER <key>",
            "    Return where the value stored at <key> is: dram, cxl or nvme, or mixed for a",
            "    collection whose parts are in more than one tier.",
            "REFCOUNT <key>",
            "    Return the reference count of the object stored at <key>.",
        ];
        reply::array(ctx.out, lines.len());
        for l in lines {
            reply::simple(ctx.out, l);
        }
        return Ok(Effect::Read);
    }
    if args.len() != 3 {
        return fail(
            ctx,
            &format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try OBJECT HELP.",
                String::from_utf8_lossy(args[1])
            ),
        );
    }
    let key = args[2];
    // Looked at without counting an access (Redis's OBJECT does not touch the key either); a
    // value only on NVMe is read for ENCODING, which needs its bytes.
    if !ctx.store.contains(key) {
        reply::null(ctx.out, proto);
        return Ok(Effect::Read);
    }
    match sub.as_slice() {
        b"ENCODING" => {
            let (kind, name) = match ctx.store.peek(key) {
                Some(o) => (o.kind, redis_encoding(ctx.info, o.kind, o.value)),
                None => match ctx.store.get(key)? {
                    Some(o) => (o.kind, redis_encoding(ctx.info, o.kind, o.value)),
                    None => {
                        reply::null(ctx.out, proto);
                        return Ok(Effect::Read);
                    }
                },
            };
            // Collections: the name follows their members, which the root alone does not
            // tell. Redis 7.0 keeps every list in a quicklist.
            let name = match kind {
                Kind::List => "quicklist",
                Kind::Set => crate::set::encoding(ctx, key)?,
                Kind::ZSet => crate::zset::encoding(ctx, key)?,
                Kind::ChunkedHash => chunked_hash_encoding(ctx, key)?,
                _ => name,
            };
            reply::bulk(ctx.out, name.as_bytes());
        }
        // Where the value really is (ENCODING names what Redis would use).
        b"TIER" => match ctx.store.tier_of(key) {
            Some(t) => reply::bulk(ctx.out, t.as_bytes()),
            None => reply::null(ctx.out, proto),
        },
        b"REFCOUNT" => reply::int(ctx.out, 1),
        b"IDLETIME" => match ctx.store.key_info(key) {
            Some(i) => reply::int(ctx.out, i.idle_seconds as i64),
            None => reply::null(ctx.out, proto),
        },
        b"FREQ" => {
            return fail(ctx, "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")
        }
        _ => {
            return fail(
                ctx,
                &format!(
                    "ERR unknown subcommand '{}'. Try OBJECT HELP.",
                    String::from_utf8_lossy(args[1])
                ),
            )
        }
    }
    Ok(Effect::Read)
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
        _ => fail(
            ctx,
            &format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try MEMORY HELP.",
                String::from_utf8_lossy(args[1])
            ),
        ),
    }
}

/// A key's entry in the index (docs/server.md: 32-byte packed entries).
const INDEX_ENTRY_BYTES: usize = 32;

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
    reply::simple(ctx.out, "Background saving started");
    Ok(Effect::Wrote)
}

pub(crate) fn bgrewriteaof(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    // The NVMe log is cleaned segment by segment as it runs: nothing to rewrite.
    reply::simple(ctx.out, "Background append only file rewriting started");
    Ok(Effect::Read)
}

/// CLUSTER: cxltier serve is a standalone server, and Redis without cluster support answers
/// every CLUSTER subcommand (HELP included) with this error, which clients test for.
pub(crate) fn cluster(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    fail(ctx, "ERR This instance has cluster support disabled")
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

/// RESET: the connection as it was when accepted (RESP2, no name, replies on; authenticated
/// again only when no password is set).
pub(crate) fn reset(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    ctx.info.unwatch(ctx.session);
    ctx.info.pubsub.drop_session(ctx.session);
    let s = &mut *ctx.session;
    *s = Session {
        last_cmd: s.last_cmd,
        ..Session::new(s.id, ctx.info.requirepass.is_none())
    };
    reply::simple(ctx.out, "RESET");
    Ok(Effect::Read)
}

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
        let cmd = table::lookup(args[0]).expect("checked when queued");
        ctx.session.last_cmd = cmd.name;
        if dispatch(ctx, cmd, &args) == Effect::Wrote {
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

pub(crate) fn quit(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    reply::ok(ctx.out);
    Ok(Effect::Close)
}

pub(crate) fn shutdown(_ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    Ok(Effect::Shutdown)
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`: choose RESP2 or RESP3,
/// authenticate and name the connection in one step; the reply is Redis's map (in the protocol
/// just chosen).
pub(crate) fn hello(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let requirepass = ctx.info.requirepass.as_deref();
    if let Err(msg) = hello_in(ctx.session, requirepass, args, ctx.out) {
        return fail(ctx, &msg);
    }
    Ok(Effect::Read)
}

/// HELLO on a connection: its protocol, authentication and name; the reply, or the error to
/// answer. Needs no more of the server than its password (a busy script's restricted mode
/// runs it too).
pub(crate) fn hello_in(
    session: &mut Session,
    requirepass: Option<&str>,
    args: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let mut proto = session.proto.max(2);
    if let Some(v) = args.get(1) {
        match parse_i64(v) {
            Some(p @ 2..=3) => proto = p as u8,
            Some(_) => return Err("NOPROTO sorry, this protocol version is not supported.".into()),
            None => return Err("ERR Protocol version is not an integer or out of range".into()),
        }
    }
    let mut auth: Option<(&[u8], &[u8])> = None;
    let mut name: Option<&[u8]> = None;
    let mut i = 2;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        match opt.as_slice() {
            b"AUTH" if i + 2 < args.len() => {
                auth = Some((args[i + 1], args[i + 2]));
                i += 3;
            }
            b"SETNAME" if i + 1 < args.len() => {
                name = Some(args[i + 1]);
                i += 2;
            }
            _ => {
                return Err(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(args[i])
                ))
            }
        }
    }
    if let Some((user, pass)) = auth {
        check_password(requirepass, session, Some(user), pass)?;
    }
    if requirepass.is_some() && !session.authed {
        return Err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into());
    }
    if let Some(n) = name {
        if !valid_client_name(n) {
            return Err(BAD_CLIENT_NAME.into());
        }
        session.name = (!n.is_empty()).then(|| n.to_vec());
    }
    session.proto = proto;
    reply::map(out, proto, 7);
    reply::bulk(out, b"server");
    reply::bulk(out, b"redis");
    reply::bulk(out, b"version");
    reply::bulk(out, REDIS_VERSION.as_bytes());
    reply::bulk(out, b"proto");
    reply::int(out, proto as i64);
    reply::bulk(out, b"id");
    reply::int(out, session.id as i64);
    reply::bulk(out, b"mode");
    reply::bulk(out, b"standalone");
    reply::bulk(out, b"role");
    reply::bulk(out, b"master");
    reply::bulk(out, b"modules");
    reply::array(out, 0);
    Ok(())
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]
fn set_command(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    expiry_given: &mut bool,
) -> Result<Effect, StoreError> {
    let (store, out, proto) = (&mut *ctx.store, &mut *ctx.out, ctx.session.proto);
    let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
    let mut expires: Option<u64> = None;
    let mut i = 3;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        match opt.as_slice() {
            b"NX" if !xx => nx = true,
            b"XX" if !nx => xx = true,
            b"GET" => get = true,
            b"KEEPTTL" if expires.is_none() => keepttl = true,
            b"EX" | b"PX" | b"EXAT" | b"PXAT"
                if expires.is_none() && !keepttl && i + 1 < args.len() =>
            {
                let Some(t) = parse_i64(args[i + 1]) else {
                    reply::error(out, NOT_INT);
                    return Ok(Effect::Read);
                };
                let at = (t > 0)
                    .then(|| {
                        let o = opt.as_slice();
                        expire_at_ms(t, o == b"EX" || o == b"EXAT", o == b"EX" || o == b"PX")
                    })
                    .flatten();
                let Some(at) = at else {
                    invalid_expire(out, "SET");
                    return Ok(Effect::Read);
                };
                expires = Some(at as u64);
                i += 1;
            }
            _ => {
                reply::error(out, SYNTAX);
                return Ok(Effect::Read);
            }
        }
        i += 1;
    }
    // A plain SET needs only whether the key exists (for its notifications), not its value:
    // reading and copying the old value cost every SET an allocation.
    let old = if get || nx || xx || keepttl {
        store
            .get(args[1])?
            .map(|o| (o.kind, o.value.to_vec(), o.expires_at_ms))
    } else {
        None
    };
    // Whether it existed matters beyond NX/XX only for a TTL already past (its notifications).
    let exists = old.is_some() || (expires.is_some() && store.contains(args[1]));
    if get && old.as_ref().is_some_and(|o| o.0 != Kind::String) {
        reply::error(out, WRONGTYPE);
        return Ok(Effect::Read);
    }
    if (nx && exists) || (xx && !exists) {
        match (get, old) {
            (true, Some(o)) => reply::bulk(out, &o.1),
            _ => reply::null(out, proto),
        }
        return Ok(Effect::Read);
    }
    *expiry_given = expires.is_some();
    if keepttl {
        expires = old.as_ref().and_then(|o| o.2);
    }
    store.put(args[1], Kind::String, args[2], expires)?;
    // Redis's setGenericCommand: set, then expire when the command gave a TTL. Whether the
    // time was already past is what the store did with the write (a delete), not a second
    // reading of the clock, which may have ticked since.
    let past = expires.is_some() && !store.holds(args[1]);
    let notify = &mut ctx.info.notify;
    if past && !exists {
        // The store takes a time already past (EXAT/PXAT) as a delete, so the key is not seen
        // created: Redis adds it, and it expires at the next lookup.
        notify.emit(nc::NEW, "new", args[1]);
    }
    notify.emit(nc::STRING, "set", args[1]);
    if expires.is_some() && !keepttl {
        notify.emit(nc::GENERIC, "expire", args[1]);
    }
    if past {
        // Redis's key would be found expired by the next command or its active expiry;
        // here it is gone already, so both are said now (not `del`).
        notify.emit(nc::EXPIRED, "expired", args[1]);
        ctx.info.expired_keys += 1;
    }
    match (get, old) {
        (true, Some(o)) => reply::bulk(out, &o.1),
        (true, None) => reply::null(out, proto),
        _ => reply::ok(out),
    }
    Ok(Effect::Wrote)
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
    "tiers",
    "poison",
    "keyspace",
];

/// The process's resident memory in bytes (INFO's `used_memory_rss`, as Redis reads it): the
/// second field of `/proc/self/statm`, in pages; 0 where it cannot be read.
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * cxltier_sys::page_size() as u64)
}

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

/// What INFO memory and CONFIG GET maxmemory report, from the memory budget: `maxmemory` is
/// the budget (`--dram` plus the CXL tier's capacity), `used_memory` the pages the memory
/// tiers' arenas hold resident plus the key index, which the store keeps inside the DRAM budget
/// (the index's bytes come out of it, and an arena grows only while the budget has room).
pub fn memory_figures(st: &cxltier_store::StoreStats) -> (u64, u64) {
    let memory = st.tiers.iter().filter(|t| t.tier != "nvme");
    // The DRAM tier's capacity is what the budget leaves objects after the index.
    let max: u64 = memory.clone().map(|t| t.capacity_bytes).sum::<u64>() + st.index_bytes;
    let used: u64 = memory.map(|t| t.resident_bytes).sum::<u64>() + st.index_bytes;
    (used.min(max), max)
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
        let _ = write!(
            t,
            "# Server\r\nredis_version:{REDIS_VERSION}\r\ncxltier_version:{}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_build_id:0\r\nredis_mode:standalone\r\nos:Linux {} {}\r\narch_bits:{}\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\nprocess_supervised:no\r\nrun_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{now_us}\r\nuptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nhz:10\r\nconfigured_hz:10\r\nexecutable:{}\r\nconfig_file:\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            release.trim(),
            std::env::consts::ARCH,
            usize::BITS,
            std::process::id(),
            info.run_id,
            info.port,
            uptime / 86_400,
            std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default(),
        );
    }
    if want("clients") {
        let _ = write!(
            t,
            "# Clients\r\nconnected_clients:{}\r\ncluster_connections:0\r\nmaxclients:{}\r\nclient_recent_max_input_buffer:{}\r\nclient_recent_max_output_buffer:{}\r\nclient_peak_input_buffer:{}\r\nclient_peak_output_buffer:{}\r\nblocked_clients:{}\r\ntracking_clients:0\r\nclients_in_timeout_table:0\r\npubsub_clients:{}\r\nwatching_clients:{}\r\n\r\n",
            info.connected_clients,
            info.max_clients,
            info.client_peak_input_buffer,
            info.client_peak_output_buffer,
            info.client_peak_input_buffer,
            info.client_peak_output_buffer,
            info.blocked.len(),
            info.pubsub.subscribers(),
            info.watchers.values().flatten().collect::<hashbrown::HashSet<_>>().len(),
        );
    }
    if want("memory") {
        let (used, max) = memory_figures(&st);
        info.used_memory_peak = info.used_memory_peak.max(used);
        let peak = info.used_memory_peak;
        let rss = resident_bytes();
        let lua = info.scripts.used_memory() as u64;
        let _ = write!(
            t,
            "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\nused_memory_rss_human:{}\r\nused_memory_peak:{peak}\r\nused_memory_peak_human:{}\r\nused_memory_lua:{lua}\r\nused_memory_vm_eval:{lua}\r\nused_memory_lua_human:{}\r\nnumber_of_cached_scripts:{}\r\nmaxmemory:{max}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:noeviction\r\nindex_bytes:{}\r\n\r\n",
            human_bytes(used),
            human_bytes(rss),
            human_bytes(peak),
            human_bytes(lua),
            info.scripts.cached(),
            human_bytes(max),
            st.index_bytes
        );
    }
    if want("persistence") {
        let _ = write!(
            t,
            "# Persistence\r\nloading:0\r\naof_enabled:{}\r\ndurability:{}\r\n\r\n",
            (st.durability != "none") as u8,
            st.durability
        );
    }
    if want("recovery") {
        // What the store's recovery could not read at start (non-zero only with
        // --recover-anyway) and the keys it served although they may be stale.
        let r = store.recovery();
        let _ = write!(
            t,
            "# Recovery\r\nrecovery_keys_recovered:{}\r\nrecovery_records:{}\r\nrecovery_damaged_ranges:{}\r\nrecovery_damaged_bytes:{}\r\nrecovery_keys_possibly_stale:{}\r\nrecovery_torn_tail_bytes:{}\r\nrecovery_headers_repaired:{}\r\n",
            r.keys_recovered,
            r.records,
            r.damaged_ranges.len(),
            r.damaged_bytes,
            r.keys_possibly_stale,
            r.torn_tail.as_ref().map_or(0, |d| d.bytes),
            r.headers_repaired
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
        let _ = write!(
            t,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:{}\r\nrejected_connections:{}\r\nexpired_keys:{}\r\nevicted_keys:0\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\npubsub_channels:{}\r\npubsub_patterns:{}\r\npubsubshard_channels:{}\r\nclient_query_buffer_limit_disconnections:{}\r\nclient_output_buffer_limit_disconnections:{}\r\neventloop_cycles:{}\r\neventloop_connections_visited:{}\r\n\r\n",
            info.total_connections,
            info.total_commands,
            info.ops_per_sec(),
            info.rejected_connections,
            info.expired_keys,
            info.keyspace_hits,
            info.keyspace_misses,
            info.pubsub.channels.len(),
            info.pubsub.patterns.len(),
            info.pubsub.shard_channels.len(),
            info.client_query_buffer_limit_disconnections,
            info.client_output_buffer_limit_disconnections,
            info.eventloop_cycles,
            info.eventloop_connections_visited
        );
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
        let mut names: Vec<_> = info.command_stats.iter().collect();
        names.sort_by_key(|(n, _)| n.0);
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
                name.0.to_ascii_lowercase(),
                s.calls,
                s.usec,
                s.rejected_calls,
                s.failed_calls
            );
        }
        t.push_str("\r\n");
    }
    if want("tiers") {
        let _ = write!(
            t,
            "# Tiers\r\nkeys:{}\r\nindex_bytes:{}\r\nmisses:{}\r\nevictions_to_nvme:{}\r\nadmissions_rejected:{}\r\nslab_pages_moved:{}\r\nslab_objects_moved:{}\r\nslab_pages_compacted:{}\r\nspare_slot_writes:{}\r\nwrite_amplification:{:.3}\r\nsegments_cleaned:{}\r\ncxl_emulated_on_dram:{}\r\n",
            st.keys,
            st.index_bytes,
            st.misses,
            st.evictions_to_nvme,
            st.admissions_rejected,
            st.slab_pages_moved,
            st.slab_objects_moved,
            st.slab_pages_compacted,
            st.spare_slot_writes,
            st.write_amplification,
            st.segments_cleaned,
            st.cxl_emulated_on_dram as u8
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
    use super::*;
    use cxltier_store::StoreBuilder;

    struct Db {
        store: Store,
        info: ServerInfo,
        session: Session,
    }

    impl Db {
        fn new() -> Db {
            Db {
                store: StoreBuilder::new()
                    .dram(256 << 20)
                    .max_object(16 << 20)
                    .durability(cxltier_store::Durability::None)
                    .build()
                    .unwrap(),
                info: ServerInfo::default(),
                session: Session::new(0, true),
            }
        }
        /// Run a command given as its words; the reply's bytes.
        fn run(&mut self, args: &[&[u8]]) -> Vec<u8> {
            let mut out = Vec::new();
            execute(
                &mut self.store,
                &mut self.info,
                &mut self.session,
                args,
                &mut out,
            );
            out
        }
        fn cmd(&mut self, line: &str) -> String {
            let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            String::from_utf8(self.run(&words)).unwrap()
        }
    }

    #[test]
    fn a_commands_time_ends_at_the_next_reading_of_the_clock() {
        let mut db = Db::new();
        db.cmd("SET k v");
        let set = |db: &Db| db.info.command_stats.get("SET").map(|s| (s.calls, s.usec));
        assert_eq!(set(&db).map(|s| s.0), Some(1), "counted when it ran");
        assert_eq!(db.info.command_latency.count(), 0, "its time is still open");
        assert_eq!(db.info.timed.map(|t| t.0), Some("SET"));
        db.cmd("GET k");
        assert_eq!(db.info.command_latency.count(), 1, "closed by GET's start");
        assert_eq!(db.info.timed.map(|t| t.0), Some("GET"));
        // The commands of an EXEC are timed on their own (two readings) inside EXEC's time.
        db.cmd("MULTI");
        db.cmd("INCR n");
        db.cmd("EXEC");
        assert_eq!(db.info.command_stats["INCR"].calls, 1);
        assert_eq!(
            db.info.command_latency.count(),
            4,
            "SET, GET, MULTI, INCR inside EXEC (queuing runs nothing), and not EXEC yet"
        );
        assert_eq!(db.info.timed.map(|t| t.0), Some("EXEC"));
        db.info.close_command_time(now_us());
        assert_eq!(db.info.command_latency.count(), 5);
        assert!(db.info.timed.is_none());
        assert_eq!(set(&db).map(|s| s.0), Some(1));
    }

    /// CONFIG SET maxmemory below the budget: commands that may grow memory answer OOM (also
    /// when queued in MULTI, and the transaction then aborts), reads and deletes go on;
    /// maxmemory 0 lifts it. min-replicas-to-write > 0: writes answer NOREPLICAS, and an EXEC
    /// holding a write aborts with that reason. (Redis's multi tests.)
    #[test]
    fn a_maxmemory_limit_refuses_growth_and_min_replicas_refuses_writes() {
        let mut db = Db::new();
        db.cmd("SET a 1");
        assert_eq!(db.cmd("CONFIG SET maxmemory 1"), "+OK\r\n");
        assert!(db.cmd("CONFIG GET maxmemory").ends_with("$1\r\n1\r\n"));
        assert_eq!(db.cmd("SET b 2"), format!("-{OOM}\r\n"));
        assert!(db.cmd("LPUSH l x").starts_with("-OOM"));
        assert_eq!(db.cmd("GET a"), "$1\r\n1\r\n");
        assert_eq!(db.cmd("DEL a"), ":1\r\n");
        // Inside MULTI every queued command counts; DISCARD is never refused.
        assert_eq!(db.cmd("MULTI"), "+OK\r\n");
        assert!(db.cmd("GET a").starts_with("-OOM"));
        assert_eq!(db.cmd("DISCARD"), "+OK\r\n");
        assert_eq!(db.cmd("MULTI"), "+OK\r\n");
        assert!(db.cmd("SET x 1").starts_with("-OOM"));
        // Another connection lifts the limit (inside MULTI, CONFIG SET would be refused too).
        let mut other = Session::new(1, true);
        let mut out = Vec::new();
        execute(
            &mut db.store,
            &mut db.info,
            &mut other,
            &[b"CONFIG", b"SET", b"maxmemory", b"0"],
            &mut out,
        );
        assert_eq!(out, b"+OK\r\n");
        assert!(db.cmd("EXEC").starts_with("-EXECABORT"));
        assert_eq!(db.cmd("EXISTS x"), ":0\r\n");
        assert_eq!(db.cmd("SET b 2"), "+OK\r\n");
        // A maxmemory at or above the budget is the budget: nothing refused.
        assert_eq!(db.cmd("CONFIG SET maxmemory 100gb"), "+OK\r\n");
        assert_eq!(db.cmd("SET c 3"), "+OK\r\n");

        assert_eq!(db.cmd("MULTI"), "+OK\r\n");
        assert_eq!(db.cmd("INCR c"), "+QUEUED\r\n");
        out.clear();
        execute(
            &mut db.store,
            &mut db.info,
            &mut other,
            &[b"CONFIG", b"SET", b"min-replicas-to-write", b"2"],
            &mut out,
        );
        assert_eq!(out, b"+OK\r\n");
        let exec = db.cmd("EXEC");
        assert!(
            exec.starts_with("-EXECABORT") && exec.contains("NOREPLICAS"),
            "{exec}"
        );
        assert_eq!(db.cmd("GET c"), "$1\r\n3\r\n");
        assert!(db.cmd("SET d 4").starts_with("-NOREPLICAS"));
        assert_eq!(db.cmd("CONFIG SET min-replicas-to-write 0"), "+OK\r\n");
        assert_eq!(db.cmd("SET d 4"), "+OK\r\n");
    }

    /// INFO has Redis's cpu section by default and commandstats on request (Redis's
    /// info-command tests), with calls, rejected and failed calls counted per command.
    #[test]
    fn info_reports_cpu_time_and_per_command_counters() {
        let mut db = Db::new();
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
        assert!(stats.contains("cmdstat_get:calls=2,usec="), "{stats}");
        assert!(
            stats.contains(",rejected_calls=1,failed_calls=0\r\n"),
            "{stats}"
        );
        assert!(stats.contains("cmdstat_incr:calls=2,"), "{stats}");
        assert!(
            stats.contains(",rejected_calls=0,failed_calls=1\r\n"),
            "{stats}"
        );
        db.cmd("CONFIG RESETSTAT");
        assert!(!db.cmd("INFO commandstats").contains("cmdstat_get"));
    }

    /// COPY and RENAME take any type with all its members and its TTL (Redis's keyspace tests
    /// COPY lists, sets, sorted sets and hashes; this answered "a list is written through the
    /// store's collection calls").
    #[test]
    fn copy_and_rename_carry_collections_whole() {
        let mut db = Db::new();
        db.cmd("RPUSH l a b c");
        db.cmd("SADD s 1 2 3");
        db.cmd("ZADD z 1 a 2 b");
        db.cmd("HSET h f v");
        db.cmd("PEXPIRE l 100000");
        for k in ["l", "s", "z", "h"] {
            assert_eq!(db.cmd(&format!("COPY {k} {k}2")), ":1\r\n", "{k}");
        }
        assert_eq!(
            db.cmd("LRANGE l2 0 -1"),
            "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
        );
        assert_eq!(db.cmd("SCARD s2"), ":3\r\n");
        assert_eq!(db.cmd("ZSCORE z2 b"), "$1\r\n2\r\n");
        assert_eq!(db.cmd("HGET h2 f"), "$1\r\nv\r\n");
        assert!(db.cmd("PTTL l2").starts_with(':') && db.cmd("PTTL l2") != ":-1\r\n");
        // The copy is its own: changing it leaves the source alone.
        db.cmd("RPUSH l2 d");
        assert_eq!(db.cmd("LLEN l"), ":3\r\n");
        // COPY onto an existing key needs REPLACE.
        assert_eq!(db.cmd("COPY s l2"), ":0\r\n");
        assert_eq!(db.cmd("COPY s l2 REPLACE"), ":1\r\n");
        assert_eq!(db.cmd("TYPE l2"), "+set\r\n");
        assert_eq!(db.cmd("RENAME z zz"), "+OK\r\n");
        assert_eq!(db.cmd("EXISTS z"), ":0\r\n");
        assert_eq!(db.cmd("ZRANGE zz 0 -1"), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        assert_eq!(db.cmd("RENAMENX h zz"), ":0\r\n");
        assert_eq!(db.cmd("RENAMENX h hh"), ":1\r\n");
        assert_eq!(db.cmd("HGET hh f"), "$1\r\nv\r\n");
        assert_eq!(db.cmd("RENAME nothing x"), "-ERR no such key\r\n");
    }

    /// HELLO 3 switches the connection to RESP3: maps, nulls, verbatim strings; HELLO 2 back.
    #[test]
    fn hello_chooses_resp3_and_replies_take_its_shapes() {
        let mut db = Db::new();
        db.cmd("HSET h f v");
        assert_eq!(db.cmd("HGETALL h"), "*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(db.cmd("GET missing"), "$-1\r\n");
        let hello = db.cmd("HELLO 3");
        assert!(
            hello.starts_with("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"),
            "{hello}"
        );
        assert!(hello.contains("$5\r\nproto\r\n:3\r\n"), "{hello}");
        assert!(
            hello.contains("$7\r\nversion\r\n$6\r\n7.0.15\r\n"),
            "{hello}"
        );
        assert_eq!(db.cmd("HGETALL h"), "%1\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(db.cmd("GET missing"), "_\r\n");
        assert_eq!(db.cmd("HGET h nope"), "_\r\n");
        assert_eq!(db.cmd("MGET missing"), "*1\r\n_\r\n");
        assert_eq!(db.cmd("CLIENT GETNAME"), "_\r\n");
        assert!(db.cmd("INFO server").starts_with('='));
        assert!(db.cmd("CONFIG GET maxclients").starts_with("%1\r\n"));
        assert!(db.cmd("COMMAND INFO get").contains("~"));
        // HELLO with no version answers in the protocol in force.
        assert!(db.cmd("HELLO").contains(":3\r\n"));
        assert!(db.cmd("HELLO 2").starts_with("*14\r\n"));
        assert_eq!(db.cmd("GET missing"), "$-1\r\n");
        assert_eq!(
            db.cmd("HELLO 4"),
            "-NOPROTO sorry, this protocol version is not supported.\r\n"
        );
        assert!(db.cmd("HELLO x").starts_with("-ERR Protocol version"));
        assert!(db
            .cmd("HELLO 3 BOGUS")
            .starts_with("-ERR Syntax error in HELLO option"));
        assert_eq!(db.session.proto, 2, "a failed HELLO changes nothing");
        assert!(db.cmd("HELLO 3 SETNAME me").starts_with('%'));
        assert_eq!(db.cmd("CLIENT GETNAME"), "$2\r\nme\r\n");
        assert!(db
            .cmd("HELLO 3 SETNAME a\tb")
            .starts_with("-ERR Client names cannot"));
    }

    #[test]
    fn auth_with_a_user_and_no_password_configured() {
        let mut db = Db::new();
        assert_eq!(db.cmd("AUTH default anything"), "+OK\r\n");
        assert!(db.cmd("HELLO 3 AUTH default anything").starts_with("%7"));
        assert!(db.cmd("AUTH someone x").starts_with("-WRONGPASS"));
        assert!(db
            .cmd("AUTH x")
            .starts_with("-ERR AUTH <password> called without any password"));
    }

    #[test]
    fn hello_authenticates_with_requirepass() {
        let mut db = Db::new();
        db.info.requirepass = Some("pw".into());
        db.session.authed = false;
        assert!(db
            .cmd("HELLO 3")
            .starts_with("-NOAUTH HELLO must be called"));
        assert!(db
            .cmd("HELLO 3 AUTH default wrong")
            .starts_with("-WRONGPASS"));
        assert!(db.cmd("HELLO 3 AUTH someone pw").starts_with("-WRONGPASS"));
        assert_eq!(db.session.proto, 2);
        assert!(db
            .cmd("HELLO 3 AUTH default pw SETNAME app")
            .starts_with("%7"));
        assert!(db.session.authed);
        assert_eq!(db.session.name.as_deref(), Some(&b"app"[..]));
        assert_eq!(db.cmd("GET k"), "_\r\n");
    }

    #[test]
    fn client_subcommands() {
        let mut db = Db::new();
        db.session.id = 7;
        let now = std::time::Instant::now();
        for (id, addr) in [(7u64, "127.0.0.1:5000"), (8, "127.0.0.1:5001")] {
            db.info.clients.insert(
                id,
                ClientMeta {
                    addr: addr.into(),
                    laddr: "127.0.0.1:6379".into(),
                    fd: 9,
                    created: now,
                    last_active: now,
                    name: None,
                    proto: 2,
                    last_cmd: "NULL",
                    no_evict: false,
                    reply_off: false,
                    qbuf: 0,
                    omem: 0,
                    sub: 0,
                    psub: 0,
                    ssub: 0,
                    multi: -1,
                    replica: false,
                    db: 0,
                },
            );
        }
        assert_eq!(db.cmd("CLIENT ID"), ":7\r\n");
        assert_eq!(db.cmd("CLIENT SETNAME worker"), "+OK\r\n");
        assert!(db
            .cmd("CLIENT SETNAME a b")
            .contains("wrong number of arguments"));
        let list = db.cmd("CLIENT LIST");
        assert!(
            list.contains("id=7 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=9 name=worker "),
            "{list}"
        );
        assert!(list.contains("cmd=client "), "{list}");
        assert!(list.contains("id=8 addr=127.0.0.1:5001 "), "{list}");
        assert!(!db.cmd("CLIENT LIST ID 8").contains("id=7"));
        assert!(db.cmd("CLIENT LIST TYPE pubsub").starts_with("$0\r\n"));
        assert!(db.cmd("CLIENT INFO").contains("id=7 "));
        assert_eq!(db.cmd("CLIENT NO-EVICT on"), "+OK\r\n");
        assert!(db.cmd("CLIENT INFO").contains(" flags=e "));
        // KILL: the old form by address, and filters (SKIPME yes by default).
        assert_eq!(db.cmd("CLIENT KILL 127.0.0.1:9"), "-ERR No such client\r\n");
        assert_eq!(db.cmd("CLIENT KILL ID 7"), ":0\r\n");
        assert_eq!(db.cmd("CLIENT KILL ID 7 SKIPME no"), ":1\r\n");
        assert_eq!(db.cmd("CLIENT KILL LADDR 127.0.0.1:6379"), ":1\r\n");
        assert_eq!(db.cmd("CLIENT KILL 127.0.0.1:5001"), "+OK\r\n");
        assert_eq!(db.info.kill, [7, 8, 8]);
        assert!(db
            .cmd("CLIENT KILL ID 0")
            .starts_with("-ERR client-id should be greater than 0"));
        assert!(db.cmd("CLIENT KILL ID").starts_with("-ERR"));
        assert!(db.cmd("CLIENT NOPE").starts_with("-ERR unknown subcommand"));
        // REPLY: OFF and SKIP write nothing and mark what the server drops.
        assert_eq!(db.cmd("CLIENT REPLY SKIP"), "");
        assert!(db.session.drop_reply() && db.session.drop_reply());
        assert!(!db.session.drop_reply());
        assert_eq!(db.cmd("CLIENT REPLY OFF"), "");
        assert!(db.session.drop_reply() && db.session.drop_reply());
        assert_eq!(db.cmd("CLIENT REPLY ON"), "+OK\r\n");
        assert!(!db.session.drop_reply());
        // Subscribed: type pubsub, flag P, sub counted; in MULTI: flag x.
        db.cmd("HELLO 3");
        db.cmd("SUBSCRIBE ch");
        let pubsub = db.cmd("CLIENT LIST TYPE pubsub");
        assert!(
            pubsub.contains("id=7 ") && !pubsub.contains("id=8 "),
            "{pubsub}"
        );
        assert!(
            pubsub.contains(" flags=Pe ") && pubsub.contains(" sub=1 psub=0 "),
            "{pubsub}"
        );
        assert!(!db.cmd("CLIENT LIST TYPE normal").contains("id=7 "));
        assert_eq!(db.cmd("CLIENT KILL TYPE normal SKIPME no"), ":1\r\n");
        db.cmd("MULTI");
        db.cmd("GET k");
        db.cmd("DISCARD");
    }

    #[test]
    fn config_set_stores_knobs_and_refuses_what_it_cannot_change() {
        let mut db = Db::new();
        assert_eq!(
            db.cmd("CONFIG GET hash-max-listpack-entries"),
            "*2\r\n$25\r\nhash-max-listpack-entries\r\n$3\r\n128\r\n"
        );
        // An alias and its listpack name are one setting.
        assert_eq!(db.cmd("CONFIG SET hash-max-ziplist-entries 4"), "+OK\r\n");
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

    #[test]
    fn idle_time_counts_reads_and_writes_not_ttl_type_exists_or_object() {
        let mut db = Db::new();
        db.cmd("SET foo bar");
        db.cmd("ZADD z 1 a");
        db.cmd("SET bar x");
        // More than a second: the clock of seconds has ticked at least once.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        for c in [
            "TTL foo",
            "PTTL foo",
            "TYPE foo",
            "EXISTS foo",
            "EXPIRETIME foo",
            "OBJECT ENCODING foo",
            "OBJECT IDLETIME foo",
            "TYPE z",
        ] {
            db.cmd(c);
        }
        // At least 1 (more on a machine slow enough to oversleep).
        for k in ["foo", "z"] {
            let r = db.cmd(&format!("OBJECT IDLETIME {k}"));
            let idle: i64 = r.trim_start_matches(':').trim_end().parse().unwrap();
            assert!(idle >= 1, "{k}: {r}");
        }
        db.cmd("GET foo");
        db.cmd("ZSCORE z a");
        assert_eq!(db.cmd("TOUCH bar nope"), ":1\r\n");
        assert_eq!(db.cmd("OBJECT IDLETIME foo"), ":0\r\n");
        assert_eq!(db.cmd("OBJECT IDLETIME z"), ":0\r\n");
        assert_eq!(db.cmd("OBJECT IDLETIME bar"), ":0\r\n");
        assert_eq!(db.cmd("OBJECT IDLETIME nope"), "$-1\r\n");
    }

    #[test]
    fn object_encoding_follows_the_thresholds() {
        let mut db = Db::new();
        let long = "x".repeat(45);
        db.cmd("SET i 12345");
        db.cmd("SET z 012");
        db.cmd("SET e hello");
        db.cmd(&format!("SET r {long}"));
        db.cmd("HSET h a 1 b 2");
        let enc = |db: &mut Db, k: &str| db.cmd(&format!("OBJECT ENCODING {k}"));
        assert_eq!(enc(&mut db, "i"), "$3\r\nint\r\n");
        assert_eq!(enc(&mut db, "z"), "$6\r\nembstr\r\n");
        assert_eq!(enc(&mut db, "e"), "$6\r\nembstr\r\n");
        assert_eq!(enc(&mut db, "r"), "$3\r\nraw\r\n");
        assert_eq!(enc(&mut db, "h"), "$8\r\nlistpack\r\n");
        assert_eq!(enc(&mut db, "missing"), "$-1\r\n");
        db.cmd("CONFIG SET hash-max-listpack-entries 1");
        assert_eq!(enc(&mut db, "h"), "$9\r\nhashtable\r\n");
        db.cmd("CONFIG SET hash-max-listpack-entries 128");
        db.cmd("CONFIG SET hash-max-ziplist-value 0");
        assert_eq!(enc(&mut db, "h"), "$9\r\nhashtable\r\n");
        assert_eq!(db.cmd("OBJECT TIER e"), "$4\r\ndram\r\n");
        db.cmd("RPUSH l a b");
        assert_eq!(db.cmd("OBJECT TIER l"), "$4\r\ndram\r\n");
        assert_eq!(db.cmd("OBJECT TIER missing"), "$-1\r\n");
        assert_eq!(db.cmd("OBJECT REFCOUNT e"), ":1\r\n");
        assert_eq!(db.cmd("OBJECT IDLETIME e"), ":0\r\n");
        assert!(db
            .cmd("OBJECT FREQ e")
            .starts_with("-ERR An LFU maxmemory policy is not selected"));
        assert!(db.cmd("OBJECT HELP").starts_with('*'));
        assert!(db
            .cmd("OBJECT NOPE e")
            .starts_with("-ERR unknown subcommand"));
        assert_eq!(
            db.cmd("MEMORY USAGE e"),
            // The key as the store keeps it: its byte of database and its one byte.
            format!(":{}\r\n", 2 + 5 + INDEX_ENTRY_BYTES)
        );
        assert_eq!(db.cmd("MEMORY USAGE missing"), "$-1\r\n");
    }

    fn eval(db: &mut Db, args: &[&str]) -> String {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        String::from_utf8(db.run(&args)).unwrap()
    }

    /// A script that allocates without bound (a client's bytes) stops at the interpreter's
    /// memory limit with an error, and the server serves the next script.
    #[test]
    fn a_script_that_grows_without_bound_fails_at_the_memory_limit() {
        let mut db = Db::new();
        let script: &[u8] =
            b"local t = {} local s = string.rep('x', 1048576) for i = 1, 100000 do t[i] = s .. i end return 1";
        let mut out = Vec::new();
        execute(
            &mut db.store,
            &mut db.info,
            &mut db.session,
            &[b"EVAL", script, b"0"],
            &mut out,
        );
        let reply = String::from_utf8_lossy(&out).into_owned();
        assert!(
            reply.starts_with('-') && reply.contains("memory"),
            "{reply}"
        );
        let mut out = Vec::new();
        execute(
            &mut db.store,
            &mut db.info,
            &mut db.session,
            &[b"EVAL", b"return 7", b"0"],
            &mut out,
        );
        assert_eq!(out, b":7\r\n");
    }

    #[test]
    fn scripts_convert_replies_both_ways_as_redis_does() {
        let mut db = Db::new();
        let cases: &[(&[&str], &str)] = &[
            // Lua to RESP2: numbers truncate, tables stop at the first nil, booleans.
            (&["EVAL", "return {1,2,3.7,'x',nil,5}", "0"], "*4\r\n:1\r\n:2\r\n:3\r\n$1\r\nx\r\n"),
            (&["EVAL", "return -3.99", "0"], ":-3\r\n"),
            (&["EVAL", "return true", "0"], ":1\r\n"),
            (&["EVAL", "return false", "0"], "$-1\r\n"),
            (&["EVAL", "return nil", "0"], "$-1\r\n"),
            (&["EVAL", "return {ok='fine'}", "0"], "+fine\r\n"),
            (&["EVAL", "return {err='My Error'}", "0"], "-My Error\r\n"),
            (&["EVAL", "return redis.error_reply('-E x')", "0"], "-E x\r\n"),
            (&["EVAL", "return redis.status_reply('S')", "0"], "+S\r\n"),
            (&["EVAL", "return {double=3.5}", "0"], "$3\r\n3.5\r\n"),
            (&["EVAL", "return {KEYS[1],ARGV[1],#KEYS,#ARGV}", "1", "k", "a"], "*4\r\n$1\r\nk\r\n$1\r\na\r\n:1\r\n:1\r\n"),
            // RESP to Lua: null bulk is false, status a table, integers numbers.
            (&["EVAL", "return redis.call('get','nokey') == false", "0"], ":1\r\n"),
            (&["EVAL", "return redis.call('set','k','v').ok", "0"], "$2\r\nOK\r\n"),
            (&["EVAL", "return redis.call('incr','n') + 1", "0"], ":2\r\n"),
            (&["EVAL", "return redis.pcall('incr','k').err", "0"], "$43\r\nERR value is not an integer or out of range\r\n"),
            (&["EVAL", "redis.setresp(3) return redis.call('hgetall','none').map ~= nil", "0"], ":1\r\n"),
            // Errors, as redis-server 7.0.15 words them.
            (&["EVAL", "return redis.call('incr','k')", "0"], "-ERR value is not an integer or out of range\r\n"),
            (&["EVAL", "local x = redis.call('nosuch') return x", "0"], "-ERR Unknown Redis command called from script script: 1f0f2a4b0b6f7bb4bd4a48b6c47e2b6e9ba84f0f, on @user_script:1.\r\n"),
            (&["EVAL", "a = 1", "0"], "-ERR user_script:1: Attempt to modify a readonly table script: 86eda770a6060824b090dd4df091e3bd4121279c, on @user_script:1.\r\n"),
            (&["EVAL", "return nosuch(", "0"], "-ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'\r\n"),
            (&["EVAL_RO", "return redis.call('del','k')", "0"], "-ERR Write commands are not allowed from read-only scripts.\r\n"),
            (&["EVAL", "return redis.call('client','list')", "0"], "-ERR This Redis command is not allowed from script\r\n"),
            (&["EVAL", "return 1", "-1"], "-ERR Number of keys can't be negative\r\n"),
            (&["EVAL", "return 1", "2", "a"], "-ERR Number of keys can't be greater than number of args\r\n"),
            (&["EVAL", "local t = {} t[1] = t return t", "0"], "-ERR reached lua stack limit\r\n"),
            (&["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"], "-NOSCRIPT No matching script. Please use EVAL.\r\n"),
            (&["SCRIPT", "KILL"], "-NOTBUSY No scripts in execution right now.\r\n"),
            // Libraries.
            (&["EVAL", "return cjson.encode({1,'a/b',{x=true}})", "0"], "$21\r\n[1,\"a\\/b\",{\"x\":true}]\r\n"),
            (&["EVAL", "return cjson.decode('[1,{\"a\":[5]}]')[2].a[1]", "0"], ":5\r\n"),
            (&["EVAL", "return {bit.band(0xff,0x0f), bit.tobit(0xffffffff), bit.tohex(-1,-4)}", "0"], "*3\r\n:15\r\n:-1\r\n$4\r\nFFFF\r\n"),
            (&["EVAL", "return redis.sha1hex('')", "0"], "$40\r\nda39a3ee5e6b4b0d3255bfef95601890afd80709\r\n"),
            (&["EVAL", "return {type(os), type(io), type(dofile)}", "0"], "-ERR user_script:1: Script attempted to access nonexistent global variable 'os' script: 0d4a2cb4e1b9b4f5cf3bb8d8e0e0b0ad1a8d53f4, on @user_script:1.\r\n"),
        ];
        let mut diffs = Vec::new();
        for (args, want) in cases {
            let got = eval(&mut db, args);
            // The SHA1 in an error's suffix is the script's: computed, not copied.
            let want = match want.find(" script: ") {
                Some(at) => format!(
                    "{} script: {}{}",
                    &want[..at],
                    crate::scripting::sha1hex(args[1].as_bytes()),
                    &want[at + 49..]
                ),
                None => want.to_string(),
            };
            if got != want {
                diffs.push(format!("{args:?}\n  got:  {got:?}\n  want: {want:?}"));
            }
        }
        assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    }

    /// A script's commands run in the caller's database (a SELECT inside stays inside), and
    /// its writes reach the write stream under that database's `select`, with the user's keys,
    /// in one `multi` ... `exec`.
    #[test]
    fn scripts_write_in_the_callers_database_and_replicate_their_effects() {
        let mut db = Db::new();
        db.info.repl.attach();
        db.store.track_expired(true);
        db.cmd("SELECT 2");
        let script = "redis.call('set',KEYS[1],'v'); redis.call('incr',KEYS[2]); redis.call('select','5'); return redis.call('get',KEYS[1])";
        let words: Vec<&[u8]> = vec![b"EVAL", script.as_bytes(), b"2", b"k", b"n"];
        let mut out = Vec::new();
        execute(
            &mut db.store,
            &mut db.info,
            &mut db.session,
            &words,
            &mut out,
        );
        assert_eq!(out, b"$-1\r\n", "the script's own SELECT 5 holds inside it");
        assert_eq!(db.cmd("GET k"), "$1\r\nv\r\n");
        assert_eq!(db.session.db, 2, "the caller's database is unchanged");
        db.cmd("SELECT 0");
        assert_eq!(db.cmd("GET k"), "$-1\r\n");
        let stream = String::from_utf8_lossy(&db.info.repl.pending).into_owned();
        assert_eq!(
            stream,
            "*2\r\n$6\r\nselect\r\n$1\r\n2\r\n*1\r\n$5\r\nmulti\r\n*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$4\r\nincr\r\n$1\r\nn\r\n*1\r\n$4\r\nexec\r\n"
        );
    }

    #[test]
    fn script_load_exists_flush_and_evalsha() {
        let mut db = Db::new();
        let sha = crate::scripting::sha1hex(b"return 'loaded'");
        assert_eq!(
            eval(&mut db, &["SCRIPT", "LOAD", "return 'loaded'"]),
            format!("$40\r\n{sha}\r\n")
        );
        let upper = sha.to_ascii_uppercase();
        assert_eq!(
            eval(&mut db, &["SCRIPT", "EXISTS", &sha, &upper, "nope"]),
            "*3\r\n:1\r\n:1\r\n:0\r\n"
        );
        assert_eq!(eval(&mut db, &["EVALSHA", &upper, "0"]), "$6\r\nloaded\r\n");
        assert_eq!(
            eval(&mut db, &["EVALSHA_RO", &sha, "0"]),
            "$6\r\nloaded\r\n"
        );
        assert_eq!(db.cmd("SCRIPT FLUSH ASYNC"), "+OK\r\n");
        assert_eq!(eval(&mut db, &["SCRIPT", "EXISTS", &sha]), "*1\r\n:0\r\n");
        assert!(eval(&mut db, &["EVALSHA", &sha, "0"]).starts_with("-NOSCRIPT"));
        assert_eq!(
            db.cmd("SCRIPT FLUSH bogus"),
            "-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n"
        );
        assert_eq!(
            db.cmd("SCRIPT NOPE"),
            "-ERR unknown subcommand 'NOPE'. Try SCRIPT HELP.\r\n"
        );
        // EVAL caches what it ran; a write inside commits like the command's own.
        let set = "return redis.call('set',KEYS[1],ARGV[1])";
        assert_eq!(eval(&mut db, &["EVAL", set, "1", "k", "v"]), "+OK\r\n");
        assert_eq!(db.cmd("GET k"), "$1\r\nv\r\n");
        assert_eq!(
            eval(
                &mut db,
                &[
                    "SCRIPT",
                    "EXISTS",
                    &crate::scripting::sha1hex(set.as_bytes())
                ]
            ),
            "*1\r\n:1\r\n"
        );
        // math.random follows Redis's rand48 from its initial state (redis-server 7.0.15
        // answers 0.39646477363839 first after it starts).
        assert_eq!(
            eval(&mut db, &["EVAL", "return tostring(math.random())", "0"]),
            "$16\r\n0.39646477363839\r\n"
        );
        // Inside MULTI a script is queued and runs in EXEC.
        db.cmd("MULTI");
        assert_eq!(eval(&mut db, &["EVAL", "return 7", "0"]), "+QUEUED\r\n");
        assert_eq!(db.cmd("EXEC"), "*1\r\n:7\r\n");
    }

    #[test]
    fn server_commands_without_replicas_scripts_or_debug() {
        let mut db = Db::new();
        // No replica: WAIT 0 answers at once; WAIT 1 parks until its timeout (the server
        // answers it then with the count).
        assert_eq!(db.cmd("WAIT 0 0"), ":0\r\n");
        assert_eq!(db.cmd("WAIT 1 10"), "");
        let block = db.session.block.take().expect("parked");
        assert_eq!(block.wait, Some((0, 1)));
        assert!(block.deadline.is_some());
        assert_eq!(db.cmd("WAIT 1 -1"), "-ERR timeout is negative\r\n");
        let time = db.cmd("TIME");
        assert!(time.starts_with("*2\r\n$10\r\n"), "{time}");
        let before = db.cmd("LASTSAVE");
        assert!(before.starts_with(':'));
        assert_eq!(db.cmd("SAVE"), "+OK\r\n");
        assert_eq!(db.cmd("BGSAVE"), "+Background saving started\r\n");
        assert!(db.cmd("LASTSAVE") >= before);
        assert!(db
            .cmd("DEBUG SLEEP 0")
            .starts_with("-ERR DEBUG SLEEP is not supported"));
        assert_eq!(db.cmd("FUNCTION FLUSH"), "+OK\r\n");
        assert_eq!(db.cmd("FUNCTION FLUSH async"), "+OK\r\n");
        assert_eq!(db.cmd("FUNCTION LIST"), "*0\r\n");
        assert_eq!(db.cmd("SCRIPT FLUSH"), "+OK\r\n");
        // Functions are refused, naming what to use instead.
        for line in ["FCALL f 0", "FCALL_RO f 0", "FUNCTION LOAD x"] {
            let r = db.cmd(line);
            assert!(r.starts_with("-ERR Redis 7.0 functions"), "{line}: {r}");
            assert!(r.contains("EVAL"), "{line}: {r}");
        }
        db.cmd("SET k v");
        assert_eq!(db.cmd("FLUSHALL bogus"), "-ERR syntax error\r\n");
        assert_eq!(db.cmd("GET k"), "$1\r\nv\r\n");
        assert_eq!(db.cmd("FLUSHDB ASYNC"), "+OK\r\n");
        assert_eq!(db.cmd("DBSIZE"), ":0\r\n");
        // RESET: back to RESP2, no name, replies on.
        db.cmd("HELLO 3 SETNAME n");
        db.cmd("CLIENT REPLY SKIP");
        assert_eq!(db.cmd("RESET"), "+RESET\r\n");
        assert_eq!(db.session.proto, 2);
        assert_eq!(db.session.name, None);
        assert!(!db.session.drop_reply());
    }

    #[test]
    fn multi_exec_queues_and_runs_in_order() {
        let mut db = Db::new();
        assert_eq!(db.cmd("EXEC"), "-ERR EXEC without MULTI\r\n");
        assert_eq!(db.cmd("DISCARD"), "-ERR DISCARD without MULTI\r\n");
        assert_eq!(db.cmd("MULTI"), "+OK\r\n");
        assert_eq!(db.cmd("MULTI"), "-ERR MULTI calls can not be nested\r\n");
        assert_eq!(db.cmd("SET a 1"), "+QUEUED\r\n");
        assert_eq!(db.cmd("INCR a"), "+QUEUED\r\n");
        assert_eq!(db.cmd("SET s x"), "+QUEUED\r\n");
        // A runtime error does not stop the others.
        assert_eq!(db.cmd("INCR s"), "+QUEUED\r\n");
        assert_eq!(db.cmd("GET a"), "+QUEUED\r\n");
        assert_eq!(
            db.cmd("EXEC"),
            format!("*5\r\n+OK\r\n:2\r\n+OK\r\n-{}\r\n$1\r\n2\r\n", NOT_INT)
        );
        // A queueing error aborts the whole transaction.
        db.cmd("MULTI");
        assert_eq!(db.cmd("SET a 5"), "+QUEUED\r\n");
        assert!(db.cmd("SET a").starts_with("-ERR wrong number"));
        assert!(db.cmd("NOSUCH x").starts_with("-ERR unknown command"));
        assert_eq!(
            db.cmd("WATCH a"),
            "-ERR WATCH inside MULTI is not allowed\r\n"
        );
        assert_eq!(
            db.cmd("EXEC"),
            "-EXECABORT Transaction discarded because of previous errors.\r\n"
        );
        assert_eq!(db.cmd("GET a"), "$1\r\n2\r\n");
        db.cmd("MULTI");
        assert_eq!(
            db.cmd("SHUTDOWN"),
            "-ERR Command not allowed inside a transaction\r\n"
        );
        assert!(db.cmd("EXEC").starts_with("-EXECABORT"));
        db.cmd("MULTI");
        db.cmd("SET a 9");
        assert_eq!(db.cmd("DISCARD"), "+OK\r\n");
        assert_eq!(db.cmd("GET a"), "$1\r\n2\r\n");
        assert_eq!(db.cmd("MULTI"), "+OK\r\n");
        assert_eq!(db.cmd("EXEC"), "*0\r\n");
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

    /// A second connection's session, run against the same store and server state.
    fn run_as(db: &mut Db, session: &mut Session, line: &str) -> String {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let mut out = Vec::new();
        execute(&mut db.store, &mut db.info, session, &words, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn smove_of_a_member_the_destination_holds_leaves_its_watchers_alone() {
        let mut db = Db::new();
        db.session.id = 1;
        let mut other = Session::new(2, true);
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
        let mut db = Db::new();
        db.session.id = 1;
        let mut other = Session::new(2, true);
        db.cmd("SET k 1");
        // Written by another connection: EXEC answers null and runs nothing.
        assert_eq!(db.cmd("WATCH k"), "+OK\r\n");
        assert_eq!(run_as(&mut db, &mut other, "SET k 2"), "+OK\r\n");
        db.cmd("MULTI");
        db.cmd("SET k 3");
        assert_eq!(db.cmd("EXEC"), "*-1\r\n");
        assert_eq!(db.cmd("GET k"), "$1\r\n2\r\n");
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

    #[test]
    fn pubsub_subscriptions_messages_and_subscribed_mode() {
        let mut db = Db::new();
        db.session.id = 1;
        let mut other = Session::new(2, true);
        assert_eq!(
            db.cmd("SUBSCRIBE a b"),
            "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n"
        );
        assert_eq!(
            db.cmd("PSUBSCRIBE n*"),
            "*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:3\r\n"
        );
        // RESP2 subscribed mode: only the pub/sub commands, PING, QUIT and RESET.
        assert!(db
            .cmd("GET k")
            .starts_with("-ERR Can't execute 'get': only (P|S)SUBSCRIBE"));
        assert!(db
            .cmd("PUBLISH a x")
            .starts_with("-ERR Can't execute 'publish'"));
        assert_eq!(db.cmd("PING"), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
        // Another connection publishes: one message for the channel, one for the pattern.
        assert_eq!(run_as(&mut db, &mut other, "PUBLISH a hi"), ":1\r\n");
        assert_eq!(run_as(&mut db, &mut other, "PUBLISH news hi"), ":1\r\n");
        assert_eq!(run_as(&mut db, &mut other, "PUBLISH zzz hi"), ":0\r\n");
        let mut msgs = Vec::new();
        for d in std::mem::take(&mut db.info.pubsub.outbox) {
            assert_eq!(d.to, 1);
            crate::pubsub::write_message(&mut msgs, 2, &d);
        }
        assert_eq!(
            String::from_utf8(msgs).unwrap(),
            "*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
        );
        assert_eq!(
            run_as(&mut db, &mut other, "PUBSUB CHANNELS"),
            "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        assert_eq!(
            run_as(&mut db, &mut other, "PUBSUB NUMSUB a zzz"),
            "*4\r\n$1\r\na\r\n:1\r\n$3\r\nzzz\r\n:0\r\n"
        );
        assert_eq!(run_as(&mut db, &mut other, "PUBSUB NUMPAT"), ":1\r\n");
        // UNSUBSCRIBE without names: all channels; then nothing left gives a null name.
        assert_eq!(
            db.cmd("UNSUBSCRIBE"),
            "*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:2\r\n*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:1\r\n"
        );
        assert_eq!(
            db.cmd("PUNSUBSCRIBE"),
            "*3\r\n$12\r\npunsubscribe\r\n$2\r\nn*\r\n:0\r\n"
        );
        assert_eq!(
            db.cmd("UNSUBSCRIBE"),
            "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"
        );
        assert_eq!(db.cmd("GET k"), "$-1\r\n");
        assert!(db.info.pubsub.channels.is_empty() && db.info.pubsub.patterns.is_empty());
        // RESP3: pushes, other commands allowed, a message to oneself before PUBLISH's reply.
        db.cmd("HELLO 3");
        assert_eq!(
            db.cmd("SUBSCRIBE c"),
            ">3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"
        );
        assert_eq!(db.cmd("GET k"), "_\r\n");
        assert_eq!(
            db.cmd("PUBLISH c me"),
            ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nme\r\n:1\r\n"
        );
        assert_eq!(db.cmd("RESET"), "+RESET\r\n");
        assert!(db.info.pubsub.channels.is_empty());
    }

    fn info_field(db: &mut Db, section: &str, name: &str) -> String {
        let text = db.cmd(&format!("INFO {section}"));
        text.split("\r\n")
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in INFO {section}: {text}"))
            .to_string()
    }

    /// Hits and misses as Redis counts them: the keys read commands look up. A write is
    /// neither (an HSET of a new key used to count a miss).
    #[test]
    fn keyspace_hits_and_misses_count_reads_only() {
        let mut db = Db::new();
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
        let mut db = Db::new();
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
        let cfg = db.cmd("CONFIG GET maxmemory");
        assert!(
            cfg.ends_with(&format!("${}\r\n{max}\r\n", max.to_string().len())),
            "{cfg}"
        );
    }

    /// The length of the RESP2 or RESP3 frame at the start of `b`.
    fn frame_len(b: &[u8]) -> Result<usize, String> {
        let end = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a line without CRLF")?;
        let head = std::str::from_utf8(&b[1..end]).map_err(|e| e.to_string())?;
        let after = end + 2;
        let n = || head.parse::<i64>().map_err(|e| format!("{head:?}: {e}"));
        match b[0] {
            b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Ok(after),
            b'$' | b'=' => match n()? {
                -1 => Ok(after),
                l if l >= 0 && b.len() >= after + l as usize + 2 => Ok(after + l as usize + 2),
                l => Err(format!("bulk of {l}")),
            },
            t @ (b'*' | b'~' | b'>' | b'%') => match n()? {
                -1 if t == b'*' => Ok(after),
                c if c >= 0 => {
                    let items = if t == b'%' { 2 * c } else { c };
                    let mut at = after;
                    for _ in 0..items {
                        at += frame_len(&b[at..])?;
                    }
                    Ok(at)
                }
                c => Err(format!("aggregate of {c}")),
            },
            t => Err(format!("type {:?}", t as char)),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 128, ..Default::default() })]
        /// Any sequence of the connection-level commands (protocol switches, transactions,
        /// subscriptions, reply suppression, resets) keeps every reply well framed: one frame
        /// per command, none for CLIENT REPLY OFF/SKIP, one per channel for (un)subscribing.
        #[test]
        fn connection_commands_keep_replies_framed(picks in proptest::collection::vec(0usize..26, 1..40)) {
            const LINES: [&str; 26] = [
                "HELLO 3", "HELLO 2", "MULTI", "EXEC", "DISCARD", "WATCH k", "UNWATCH",
                "SET k 1", "GET k", "HGETALL h", "HSET h f v", "SUBSCRIBE a b", "PSUBSCRIBE a*",
                "UNSUBSCRIBE", "PUNSUBSCRIBE", "PUBLISH a m", "PING", "CLIENT REPLY SKIP",
                "CLIENT REPLY OFF", "CLIENT REPLY ON", "RESET", "CONFIG GET maxclients",
                "COMMAND INFO get", "INCR k", "GET", "CLIENT LIST",
            ];
            let mut db = Db::new();
            for p in picks {
                let line = LINES[p];
                let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
                let mut out = Vec::new();
                execute(&mut db.store, &mut db.info, &mut db.session, &words, &mut out);
                let dropped = db.session.drop_reply();
                let mut at = 0;
                let mut frames = 0;
                while at < out.len() {
                    at += frame_len(&out[at..]).map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{line}: {e}: {:?}", String::from_utf8_lossy(&out))))?;
                    frames += 1;
                }
                let many = line.contains("SUBSCRIBE") || line.starts_with("PUBLISH");
                proptest::prop_assert!(
                    frames == 1 || (frames == 0 && dropped) || (many && frames >= 1),
                    "{line}: {frames} frames: {:?}",
                    String::from_utf8_lossy(&out)
                );
                db.info.pubsub.outbox.clear();
            }
        }
    }

    /// The sequence the property test found: a RESP3 subscriber that publishes to its own channel
    /// inside MULTI/EXEC got its message in the middle of EXEC's array.
    #[test]
    fn a_self_publish_inside_exec_stays_out_of_execs_reply() {
        let mut db = Db::new();
        let mut last = Vec::new();
        for line in ["HELLO 3", "SUBSCRIBE a b", "MULTI", "PUBLISH a m", "EXEC"] {
            let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            last.clear();
            execute(
                &mut db.store,
                &mut db.info,
                &mut db.session,
                &words,
                &mut last,
            );
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

    #[test]
    fn expire_times_out_of_range_are_refused_as_redis_does() {
        let mut db = Db::new();
        assert_eq!(db.cmd("SET k v"), "+OK\r\n");
        // now + t*1000 overflows: refused, and the key is kept (it used to be deleted).
        for (line, name) in [
            ("EXPIRE k 9223372036854775", "expire"),
            ("EXPIRE k 9223372036854776", "expire"),
            ("EXPIREAT k 9223372036854776", "expireat"),
            ("PEXPIRE k 9223372036854775807", "pexpire"),
        ] {
            assert_eq!(
                db.cmd(line),
                format!("-ERR invalid expire time in '{name}' command\r\n"),
                "{line}"
            );
        }
        assert_eq!(db.cmd("TTL k"), ":-1\r\n");
        assert_eq!(db.cmd("GET k"), "$1\r\nv\r\n");
        // The largest absolute time is accepted, and far in the future.
        assert_eq!(db.cmd("PEXPIREAT k 9223372036854775807"), ":1\r\n");
        assert_eq!(db.cmd("EXPIREAT k 9223372036854775"), ":1\r\n");
        assert!(db.cmd("TTL k").starts_with(":92233"));
        for (line, name) in [
            ("SET k v EX 99999999999999999", "set"),
            ("SET k v PX 9223372036854775807", "set"),
            ("SET k v EXAT 9223372036854776", "set"),
            ("SET k v EX 0", "set"),
            ("SET k v PX -1", "set"),
            ("SETEX k 99999999999999999 v", "setex"),
            ("SETEX k 0 v", "setex"),
            ("PSETEX k 9223372036854775807 v", "psetex"),
        ] {
            assert_eq!(
                db.cmd(line),
                format!("-ERR invalid expire time in '{name}' command\r\n"),
                "{line}"
            );
        }
        assert_eq!(db.cmd("SET k v EX 100"), "+OK\r\n");
        let ttl = db.cmd("TTL k");
        assert!(ttl == ":100\r\n" || ttl == ":99\r\n", "{ttl}");
        assert_eq!(db.cmd("SET k v EXAT 9223372036854775"), "+OK\r\n");
        assert!(db.cmd("TTL k").starts_with(":92233"));
        // A time in the past still deletes, as in Redis.
        assert_eq!(db.cmd("EXPIRE k -9223372036854775"), ":1\r\n");
        assert_eq!(db.cmd("EXISTS k"), ":0\r\n");
    }

    /// 150,000 fields in one HSET (a search per field made this quadratic: 15 s of a frozen
    /// server), with duplicates: the last value wins, `added` counts distinct new fields; then
    /// HMGET and HDEL of as many.
    #[test]
    fn hset_hmget_hdel_of_many_fields() {
        let mut db = Db::new();
        const N: usize = 150_000;
        let names: Vec<String> = (0..N).map(|i| format!("f{}", i % (N / 2))).collect();
        let values: Vec<String> = (0..N).map(|i| format!("v{i}")).collect();
        let mut args: Vec<&[u8]> = vec![b"HSET", b"h", b"f0", b"old"];
        for i in 0..N {
            args.push(names[i].as_bytes());
            args.push(values[i].as_bytes());
        }
        assert_eq!(db.run(&args), format!(":{}\r\n", N / 2).into_bytes());
        assert_eq!(db.cmd("HLEN h"), format!(":{}\r\n", N / 2));
        // Field f<i> was set twice: at i and at i + N/2; the second wins.
        assert_eq!(
            db.cmd("HGET h f0"),
            format!("${}\r\nv{}\r\n", 1 + (N / 2).to_string().len(), N / 2)
        );
        args.truncate(4);
        assert_eq!(db.run(&args), b":0\r\n".to_vec());
        assert_eq!(db.cmd("HGET h f0"), "$3\r\nold\r\n");

        let mut get: Vec<&[u8]> = vec![b"HMGET", b"h"];
        get.extend(names.iter().map(|f| f.as_bytes()));
        get.push(b"missing");
        let reply = db.run(&get);
        let mut want = format!("*{}\r\n$3\r\nold\r\n", N + 1).into_bytes();
        for i in 1..N {
            let v = match i % (N / 2) {
                0 => "old".to_string(),
                j => format!("v{}", j + N / 2),
            };
            want.extend_from_slice(format!("${}\r\n{v}\r\n", v.len()).as_bytes());
        }
        want.extend_from_slice(b"$-1\r\n");
        assert!(reply == want, "HMGET of {} fields: wrong reply", N + 1);

        let mut del: Vec<&[u8]> = vec![b"HDEL", b"h"];
        del.extend(names.iter().filter(|f| *f != "f0").map(|f| f.as_bytes()));
        del.push(b"missing");
        assert_eq!(db.run(&del), format!(":{}\r\n", N / 2 - 1).into_bytes());
        assert_eq!(db.cmd("HGETALL h"), "*2\r\n$2\r\nf0\r\n$3\r\nold\r\n");
    }

    /// Each line's reply, Redis 7.0's answers (from its tests and redis-server), in order.
    fn replies(db: &mut Db, script: &[(&str, &str)]) {
        for (line, want) in script {
            assert_eq!(db.cmd(line), *want, "{line}");
        }
    }

    #[test]
    fn string_commands_answer_as_redis_does() {
        let mut db = Db::new();
        replies(
            &mut db,
            &[
                ("APPEND s foo", ":3\r\n"),
                ("APPEND s bar", ":6\r\n"),
                ("STRLEN s", ":6\r\n"),
                ("STRLEN missing", ":0\r\n"),
                ("GETRANGE s 0 -1", "$6\r\nfoobar\r\n"),
                ("GETRANGE s -3 -1", "$3\r\nbar\r\n"),
                ("GETRANGE s 0 -100", "$1\r\nf\r\n"),
                ("GETRANGE s -1 -3", "$0\r\n\r\n"),
                ("GETRANGE s 4 100", "$2\r\nar\r\n"),
                ("GETRANGE missing 0 -1", "$0\r\n\r\n"),
                (
                    "GETRANGE s a 1",
                    "-ERR value is not an integer or out of range\r\n",
                ),
                // SETRANGE past the end pads with zero bytes.
                ("SETRANGE r 3 ab", ":5\r\n"),
                ("GET r", "$5\r\n\0\0\0ab\r\n"),
                ("SETRANGE r 1 X", ":5\r\n"),
                ("GET r", "$5\r\n\0X\0ab\r\n"),
                ("SETRANGE none 0 ", ":0\r\n"),
                ("EXISTS none", ":0\r\n"),
                ("SETRANGE r -1 x", "-ERR offset is out of range\r\n"),
                (
                    "SETRANGE r 536870911 xx",
                    "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n",
                ),
                ("SET g v", "+OK\r\n"),
                ("GETSET g w", "$1\r\nv\r\n"),
                ("GETSET new x", "$-1\r\n"),
                ("GETDEL g", "$1\r\nw\r\n"),
                ("GETDEL g", "$-1\r\n"),
                ("SETNX n 1", ":1\r\n"),
                ("SETNX n 2", ":0\r\n"),
                ("GET n", "$1\r\n1\r\n"),
                ("MSETNX a 1 b 2", ":1\r\n"),
                ("MSETNX b 3 c 4", ":0\r\n"),
                ("EXISTS c", ":0\r\n"),
                (
                    "MSETNX a",
                    "-ERR wrong number of arguments for 'msetnx' command\r\n",
                ),
                ("SET f 10.5", "+OK\r\n"),
                ("INCRBYFLOAT f 0.1", "$4\r\n10.6\r\n"),
                ("INCRBYFLOAT f -5.6", "$1\r\n5\r\n"),
                ("INCRBYFLOAT nf 5.0e3", "$4\r\n5000\r\n"),
                ("INCRBYFLOAT f x", "-ERR value is not a valid float\r\n"),
                ("INCRBYFLOAT s 1", "-ERR value is not a valid float\r\n"),
            ],
        );
        // The sum overflows to infinity.
        db.cmd("SET big 1.7e308");
        assert_eq!(
            db.cmd("INCRBYFLOAT big 1.7e308"),
            "-ERR increment would produce NaN or Infinity\r\n"
        );
        db.cmd("HSET h f v");
        for line in [
            "APPEND h x",
            "GETRANGE h 0 1",
            "STRLEN h",
            "GETDEL h",
            "SETRANGE h 0 x",
        ] {
            assert_eq!(db.cmd(line), format!("-{WRONGTYPE}\r\n"), "{line}");
        }
    }

    #[test]
    fn getex_sets_and_clears_the_ttl() {
        let mut db = Db::new();
        replies(
            &mut db,
            &[
                ("SET k v", "+OK\r\n"),
                ("GETEX k EX 100", "$1\r\nv\r\n"),
                ("TTL k", ":100\r\n"),
                ("GETEX k PERSIST", "$1\r\nv\r\n"),
                ("TTL k", ":-1\r\n"),
                ("GETEX k", "$1\r\nv\r\n"),
                (
                    "GETEX k EX 0",
                    "-ERR invalid expire time in 'getex' command\r\n",
                ),
                ("GETEX k EX 10 PX 100", "-ERR syntax error\r\n"),
                ("GETEX k FOO", "-ERR syntax error\r\n"),
                ("GETEX missing EX 10", "$-1\r\n"),
                ("GETEX k PXAT 1", "$1\r\nv\r\n"),
                ("EXISTS k", ":0\r\n"),
            ],
        );
    }

    #[test]
    fn bit_commands_answer_as_redis_does() {
        let mut db = Db::new();
        replies(
            &mut db,
            &[
                ("SETBIT b 7 1", ":0\r\n"),
                ("SETBIT b 7 1", ":1\r\n"),
                ("GET b", "$1\r\n\x01\r\n"),
                ("GETBIT b 7", ":1\r\n"),
                ("GETBIT b 6", ":0\r\n"),
                ("GETBIT b 1000", ":0\r\n"),
                (
                    "SETBIT b -1 1",
                    "-ERR bit offset is not an integer or out of range\r\n",
                ),
                (
                    "SETBIT b 4294967296 1",
                    "-ERR bit offset is not an integer or out of range\r\n",
                ),
                (
                    "SETBIT b 1 2",
                    "-ERR bit is not an integer or out of range\r\n",
                ),
                ("SET s foobar", "+OK\r\n"),
                ("BITCOUNT s", ":26\r\n"),
                ("BITCOUNT s 0 0", ":4\r\n"),
                ("BITCOUNT s 1 1", ":6\r\n"),
                ("BITCOUNT s -2 -1", ":7\r\n"),
                ("BITCOUNT s -1 -2", ":0\r\n"),
                ("BITCOUNT s 5 30 BIT", ":17\r\n"),
                ("BITCOUNT s -8 -1 BIT", ":4\r\n"),
                ("BITCOUNT s 0", "-ERR syntax error\r\n"),
                ("BITCOUNT s 0 1 WORD", "-ERR syntax error\r\n"),
                ("BITCOUNT missing", ":0\r\n"),
            ],
        );
        db.run(&[b"SET", b"p", b"\xff\xf0\x00"]);
        replies(
            &mut db,
            &[
                ("BITPOS p 0", ":12\r\n"),
                ("BITPOS p 1", ":0\r\n"),
                ("BITPOS p 1 2", ":-1\r\n"),
                ("BITPOS p 0 1 1", ":12\r\n"),
                ("BITPOS p 1 7 15 BIT", ":7\r\n"),
                ("BITPOS p 2", "-ERR The bit argument must be 1 or 0.\r\n"),
                ("BITPOS missing 1", ":-1\r\n"),
                ("BITPOS missing 0", ":0\r\n"),
            ],
        );
        // All ones, no end given: the first clear bit is just past the string; with an end, none.
        db.run(&[b"SET", b"ones", b"\xff\xff"]);
        assert_eq!(db.cmd("BITPOS ones 0"), ":16\r\n");
        assert_eq!(db.cmd("BITPOS ones 0 0 -1"), ":-1\r\n");
    }

    #[test]
    fn expire_flags_follow_redis_7() {
        let mut db = Db::new();
        replies(
            &mut db,
            &[
                ("SET k v", "+OK\r\n"),
                ("EXPIRE k 100 XX", ":0\r\n"),
                ("EXPIRE k 100 GT", ":0\r\n"),
                ("EXPIRE k 100 LT", ":1\r\n"),
                ("EXPIRE k 200 NX", ":0\r\n"),
                ("EXPIRE k 50 GT", ":0\r\n"),
                ("EXPIRE k 200 GT", ":1\r\n"),
                ("EXPIRE k 300 LT", ":0\r\n"),
                ("EXPIRE k 150 XX LT", ":1\r\n"),
                ("TTL k", ":150\r\n"),
                ("PERSIST k", ":1\r\n"),
                ("EXPIRE k 100 NX", ":1\r\n"),
                (
                    "EXPIRE k 100 NX XX",
                    "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n",
                ),
                (
                    "EXPIRE k 100 GT LT",
                    "-ERR GT and LT options at the same time are not compatible\r\n",
                ),
                ("EXPIRE k 100 FOO", "-ERR Unsupported option FOO\r\n"),
                ("EXPIRE missing 100", ":0\r\n"),
                ("EXPIRETIME missing", ":-2\r\n"),
                ("SET p v", "+OK\r\n"),
                ("EXPIRETIME p", ":-1\r\n"),
                ("PEXPIRETIME p", ":-1\r\n"),
                ("PEXPIREAT p 99999999999999", ":1\r\n"),
                ("PEXPIRETIME p", ":99999999999999\r\n"),
                ("EXPIRETIME p", ":99999999999\r\n"),
            ],
        );
    }

    #[test]
    fn rename_copy_touch_and_randomkey() {
        let mut db = Db::new();
        replies(
            &mut db,
            &[
                ("RANDOMKEY", "$-1\r\n"),
                ("RENAME a b", "-ERR no such key\r\n"),
                ("SET a 1", "+OK\r\n"),
                ("EXPIRE a 100", ":1\r\n"),
                ("RENAME a b", "+OK\r\n"),
                ("EXISTS a", ":0\r\n"),
                ("TTL b", ":100\r\n"),
                ("RENAME b b", "+OK\r\n"),
                ("SET c 2", "+OK\r\n"),
                ("RENAMENX b c", ":0\r\n"),
                ("RENAMENX b d", ":1\r\n"),
                ("GET d", "$1\r\n1\r\n"),
                (
                    "COPY d d",
                    "-ERR source and destination objects are the same\r\n",
                ),
                ("COPY d c", ":0\r\n"),
                ("COPY d c REPLACE", ":1\r\n"),
                ("GET c", "$1\r\n1\r\n"),
                ("TTL c", ":100\r\n"),
                ("COPY d e DB 0", ":1\r\n"),
                ("COPY missing e", ":0\r\n"),
                ("COPY d e DB 1 REPLACE", ":1\r\n"),
                ("COPY d e DB 16", "-ERR DB index is out of range\r\n"),
                ("TOUCH c d c missing", ":3\r\n"),
            ],
        );
        let r = db.cmd("RANDOMKEY");
        assert!(
            ["$1\r\nc\r\n", "$1\r\nd\r\n", "$1\r\ne\r\n"].contains(&r.as_str()),
            "{r}"
        );
        db.cmd("HSET h f v");
        assert_eq!(db.cmd("RENAME h h2"), "+OK\r\n");
        assert_eq!(db.cmd("HGET h2 f"), "$1\r\nv\r\n");
    }

    /// SCAN to the end from cursor 0, with `extra` arguments; the keys in the order returned.
    fn scan_all(db: &mut Db, extra: &str) -> Vec<String> {
        let mut cursor = "0".to_string();
        let mut keys = Vec::new();
        loop {
            let r = db.cmd(&format!("SCAN {cursor}{extra}"));
            let (next, found) = parse_scan(&r);
            keys.extend(found);
            if next == "0" {
                return keys;
            }
            cursor = next;
        }
    }

    fn parse_scan(r: &str) -> (String, Vec<String>) {
        let lines: Vec<&str> = r.split("\r\n").collect();
        assert_eq!(lines[0], "*2");
        let next = lines[2].to_string();
        let n: usize = lines[3][1..].parse().unwrap();
        let keys = (0..n).map(|i| lines[5 + 2 * i].to_string()).collect();
        (next, keys)
    }

    #[test]
    fn scan_keys_match_count_type() {
        let mut db = Db::new();
        for i in 0..50 {
            db.cmd(&format!("SET k{i:02} v"));
        }
        db.cmd("HSET h f v");
        let mut all = scan_all(&mut db, " COUNT 7");
        all.sort();
        assert_eq!(all.len(), 51);
        assert_eq!(scan_all(&mut db, " MATCH k1* COUNT 3").len(), 10);
        assert_eq!(scan_all(&mut db, " TYPE hash"), ["h"]);
        assert_eq!(scan_all(&mut db, " TYPE list").len(), 0);
        assert_eq!(db.cmd("SCAN x"), "-ERR invalid cursor\r\n");
        assert_eq!(db.cmd("SCAN 0 COUNT 0"), "-ERR syntax error\r\n");
        assert_eq!(db.cmd("SCAN 0 MATCH"), "-ERR syntax error\r\n");
        assert_eq!(db.cmd("KEYS k4*").matches("$3\r\nk4").count(), 10);
        assert_eq!(db.cmd("KEYS nothing*"), "*0\r\n");
        assert_eq!(db.cmd("DBSIZE"), ":51\r\n");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Redis's guarantee under inserts and deletes between SCAN calls: every key present
        /// for the whole scan is returned, and (cursors kept) none twice.
        #[test]
        fn scan_returns_every_key_present_throughout(
            initial in proptest::collection::btree_set(0u16..300, 0..120),
            ops in proptest::collection::vec((proptest::bool::ANY, 0u16..300), 0..200),
            count in 1usize..20,
        ) {
            let mut db = Db::new();
            for k in &initial {
                db.cmd(&format!("SET {k} v"));
            }
            let mut present_throughout: std::collections::BTreeSet<String> =
                initial.iter().map(|k| k.to_string()).collect();
            let mut seen = Vec::new();
            let mut cursor = "0".to_string();
            let mut ops = ops.into_iter();
            loop {
                let (next, found) = parse_scan(&db.cmd(&format!("SCAN {cursor} COUNT {count}")));
                seen.extend(found);
                if next == "0" {
                    break;
                }
                cursor = next;
                for (insert, k) in ops.by_ref().take(3) {
                    if insert {
                        db.cmd(&format!("SET {k} v"));
                    } else {
                        db.cmd(&format!("DEL {k}"));
                        present_throughout.remove(&k.to_string());
                    }
                }
            }
            let unique: std::collections::BTreeSet<String> = seen.iter().cloned().collect();
            proptest::prop_assert_eq!(unique.len(), seen.len(), "a key returned twice");
            for k in &present_throughout {
                proptest::prop_assert!(unique.contains(k), "{} missed", k);
            }
        }
    }

    #[test]
    fn expired_keys_counts_keys_a_command_found_expired() {
        let mut db = Db::new();
        db.cmd("SET gone v PX 1");
        db.cmd("SET stays v");
        // Let the 1 ms TTL pass (a wait for a state, not a timed assertion).
        while db
            .store
            .peek(&cxltier_store::db_key(0, b"gone"))
            .is_some_and(|o| o.expires_at_ms > Some(now_ms()))
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(db.cmd("GET gone"), "$-1\r\n");
        assert_eq!(db.cmd("GET stays"), "$1\r\nv\r\n");
        assert_eq!(db.cmd("DEL stays"), ":1\r\n");
        assert_eq!(info_field(&mut db, "stats", "expired_keys"), "1");
    }

    #[test]
    fn randomkey_reaches_every_key_of_a_small_database() {
        let mut db = Db::new();
        // Keys bunched in the byte space: a random point of it would almost never give "a00".
        for k in ["a", "a0", "a00", "zzzz"] {
            db.cmd(&format!("SET {k} v"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            seen.insert(db.cmd("RANDOMKEY"));
        }
        assert_eq!(seen.len(), 4, "{seen:?}");
    }

    /// Every type of key, one name in two databases: each database sees only its own (value,
    /// type, TTL, counts, KEYS, SCAN, RANDOMKEY, DEL, RENAME), and SELECT's errors are Redis's.
    #[test]
    fn databases_keep_keys_of_every_type_apart() {
        let mut db = Db::new();
        let fill = |db: &mut Db, tag: &str| {
            for line in [
                format!("SET s {tag}"),
                format!("HSET h f {tag}"),
                format!("RPUSH l {tag} x"),
                format!("SADD set {tag}"),
                format!("ZADD z 1 {tag}"),
                format!("SET only{tag} 1"),
            ] {
                assert!(!db.cmd(&line).starts_with('-'), "{line}");
            }
        };
        fill(&mut db, "zero");
        assert_eq!(db.cmd("SELECT 1"), "+OK\r\n");
        assert_eq!(db.cmd("DBSIZE"), ":0\r\n");
        assert_eq!(db.cmd("GET s"), "$-1\r\n");
        assert_eq!(db.cmd("TYPE l"), "+none\r\n");
        // The same names as other types: no WRONGTYPE from database 0's keys.
        assert_eq!(db.cmd("LPUSH s one"), ":1\r\n");
        assert_eq!(db.cmd("SET l one"), "+OK\r\n");
        db.cmd("DEL s l");
        fill(&mut db, "one");
        db.cmd("EXPIRE s 100");
        for (d, tag) in [(0, "zero"), (1, "one")] {
            db.cmd(&format!("SELECT {d}"));
            let n = tag.len();
            assert_eq!(db.cmd("GET s"), format!("${n}\r\n{tag}\r\n"));
            assert_eq!(db.cmd("HGET h f"), format!("${n}\r\n{tag}\r\n"));
            assert_eq!(db.cmd("LINDEX l 0"), format!("${n}\r\n{tag}\r\n"));
            assert_eq!(
                db.cmd("SISMEMBER set zero"),
                format!(":{}\r\n", u8::from(d == 0))
            );
            assert_eq!(
                db.cmd("ZSCORE z one"),
                if d == 1 { "$1\r\n1\r\n" } else { "$-1\r\n" }
            );
            assert_eq!(db.cmd("TTL s"), if d == 1 { ":100\r\n" } else { ":-1\r\n" });
            assert_eq!(db.cmd("DBSIZE"), ":6\r\n");
            assert_eq!(
                db.cmd("KEYS only*"),
                format!("*1\r\n${}\r\nonly{tag}\r\n", n + 4)
            );
            let scan = db.cmd("SCAN 0 COUNT 100");
            assert!(scan.starts_with("*2\r\n$1\r\n0\r\n*6\r\n"), "{scan}");
            let other = if d == 0 { "onlyone" } else { "onlyzero" };
            assert!(
                scan.contains(&format!("only{tag}")) && !scan.contains(other),
                "{scan}"
            );
            for _ in 0..20 {
                let r = db.cmd("RANDOMKEY");
                assert!(
                    !r.contains(if d == 0 { "onlyone" } else { "onlyzero" }),
                    "{r}"
                );
            }
        }
        // DEL and RENAME stay in their database.
        db.cmd("SELECT 0");
        assert_eq!(db.cmd("RENAME s s2"), "+OK\r\n");
        assert_eq!(db.cmd("DEL h"), ":1\r\n");
        db.cmd("SELECT 1");
        assert_eq!(db.cmd("EXISTS s h s2"), ":2\r\n");
        // SELECT's errors, Redis's words.
        assert_eq!(db.cmd("SELECT 16"), "-ERR DB index is out of range\r\n");
        assert_eq!(db.cmd("SELECT -1"), "-ERR DB index is out of range\r\n");
        assert_eq!(db.cmd("SELECT x"), format!("-{NOT_INT}\r\n"));
        assert_eq!(db.session.db, 1, "a refused SELECT keeps the database");
        // RESET goes back to database 0; HELLO keeps the database (as Redis 7.0 does).
        db.cmd("HELLO 2");
        assert_eq!(db.cmd("GET s"), "$3\r\none\r\n");
        db.cmd("RESET");
        assert_eq!(db.cmd("GET s2"), "$4\r\nzero\r\n");
    }

    /// MOVE, COPY ... DB, FLUSHDB, FLUSHALL and SWAPDB, with Redis's replies and errors.
    #[test]
    fn move_copy_flushdb_and_swapdb() {
        let mut db = Db::new();
        replies(
            &mut db,
            &[
                ("RPUSH l a b", ":2\r\n"),
                ("PEXPIRE l 100000", ":1\r\n"),
                ("MOVE l 2", ":1\r\n"),
                ("EXISTS l", ":0\r\n"),
                ("MOVE l 2", ":0\r\n"),
                (
                    "MOVE l 0",
                    "-ERR source and destination objects are the same\r\n",
                ),
                ("MOVE l 16", "-ERR DB index is out of range\r\n"),
                (
                    "MOVE l x",
                    "-ERR value is not an integer or out of range\r\n",
                ),
                ("SELECT 2", "+OK\r\n"),
                ("LRANGE l 0 -1", "*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
                // The TTL went with it.
                ("EXPIRE l 100 NX", ":0\r\n"),
                ("SET s v", "+OK\r\n"),
                // MOVE onto a key the other database holds moves nothing.
                ("SELECT 0", "+OK\r\n"),
                ("SET s mine", "+OK\r\n"),
                ("MOVE s 2", ":0\r\n"),
                ("GET s", "$4\r\nmine\r\n"),
                (
                    "COPY s s DB 0",
                    "-ERR source and destination objects are the same\r\n",
                ),
                ("COPY s s DB 2", ":0\r\n"),
                ("COPY s s DB 2 REPLACE", ":1\r\n"),
                ("COPY s s DB 3", ":1\r\n"),
                (
                    "COPY s t DB x",
                    "-ERR value is not an integer or out of range\r\n",
                ),
                ("COPY s t DB 99", "-ERR DB index is out of range\r\n"),
                ("SELECT 2", "+OK\r\n"),
                ("GET s", "$4\r\nmine\r\n"),
                ("DBSIZE", ":2\r\n"),
                // FLUSHDB empties database 2 only.
                ("FLUSHDB", "+OK\r\n"),
                ("DBSIZE", ":0\r\n"),
                ("SELECT 3", "+OK\r\n"),
                ("GET s", "$4\r\nmine\r\n"),
                // SWAPDB: database 3's keys are database 5's and back.
                ("SWAPDB 3 5", "+OK\r\n"),
                ("DBSIZE", ":0\r\n"),
                ("SELECT 5", "+OK\r\n"),
                ("GET s", "$4\r\nmine\r\n"),
                ("SET n 1", "+OK\r\n"),
                ("SWAPDB 5 3", "+OK\r\n"),
                ("GET n", "$-1\r\n"),
                ("SELECT 3", "+OK\r\n"),
                ("MGET s n", "*2\r\n$4\r\nmine\r\n$1\r\n1\r\n"),
                ("SWAPDB 0 0", "+OK\r\n"),
                ("SWAPDB a 1", "-ERR invalid first DB index\r\n"),
                ("SWAPDB 1 b", "-ERR invalid second DB index\r\n"),
                ("SWAPDB 1 16", "-ERR DB index is out of range\r\n"),
                ("SWAPDB 3 9", "+OK\r\n"),
                ("FLUSHALL", "+OK\r\n"),
                ("DBSIZE", ":0\r\n"),
                ("SELECT 9", "+OK\r\n"),
                ("DBSIZE", ":0\r\n"),
                ("SELECT 0", "+OK\r\n"),
                ("DBSIZE", ":0\r\n"),
                (
                    "CONFIG GET databases",
                    "*2\r\n$9\r\ndatabases\r\n$2\r\n16\r\n",
                ),
            ],
        );
    }

    /// INFO keyspace: a line per database holding keys, by the number clients select (after a
    /// SWAPDB too), with the keys that have a TTL and their mean remaining TTL in ms.
    #[test]
    fn info_keyspace_counts_keys_expires_and_the_mean_ttl_per_database() {
        let mut db = Db::new();
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

    /// WATCH is per database: a write of the same name in another database leaves the
    /// transaction alone; FLUSHDB touches only its own database's watched keys that exist;
    /// SWAPDB touches the watched keys that exist in either database (Redis's rules).
    #[test]
    fn watched_keys_belong_to_their_database() {
        let mut db = Db::new();
        db.session.id = 1;
        let mut other = Session::new(2, true);
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
        // Written in database 0 (the other connection's): not a change of database 1's k.
        assert_eq!(
            exec_after(&mut db, &mut other, &["SET k 1"]),
            "*1\r\n+PONG\r\n"
        );
        assert_eq!(
            exec_after(&mut db, &mut other, &["SELECT 1", "SET k 1", "SELECT 0"]),
            "*-1\r\n"
        );
        // FLUSHDB of database 0 does not touch database 1's k; FLUSHDB of 1 does.
        assert_eq!(
            exec_after(&mut db, &mut other, &["FLUSHDB"]),
            "*1\r\n+PONG\r\n"
        );
        assert_eq!(
            exec_after(&mut db, &mut other, &["SELECT 1", "FLUSHDB", "SELECT 0"]),
            "*-1\r\n"
        );
        // SWAPDB of two databases without k touches nothing; with k in either, it does.
        assert_eq!(
            exec_after(&mut db, &mut other, &["SWAPDB 1 2"]),
            "*1\r\n+PONG\r\n"
        );
        assert_eq!(
            exec_after(&mut db, &mut other, &["SET k 0", "SWAPDB 1 3"]),
            "*1\r\n+PONG\r\n"
        );
        assert_eq!(exec_after(&mut db, &mut other, &["SWAPDB 0 1"]), "*-1\r\n");
        // And the watch follows the logical database: k is now database 1's, and a write of
        // it there is seen.
        assert_eq!(
            exec_after(&mut db, &mut other, &["SELECT 1", "SET k 2", "SELECT 0"]),
            "*-1\r\n"
        );
        assert!(db.info.watchers.is_empty());
    }

    /// SORT ... STORE writes a key that is no key position of the table's: its watchers (in the
    /// database it is written in) hear of it when it was written, a result stored or an old key
    /// deleted by an empty result (Redis's multi test "EXEC fail on WATCHed key modified by
    /// SORT with STORE even if the result is empty").
    #[test]
    fn sort_store_touches_its_destination_in_its_database() {
        let mut db = Db::new();
        db.session.id = 1;
        db.cmd("SELECT 1");
        db.cmd("LPUSH foo bar");
        db.cmd("WATCH foo");
        assert_eq!(db.cmd("SORT emptylist STORE foo"), ":0\r\n");
        db.cmd("MULTI");
        db.cmd("PING");
        assert_eq!(db.cmd("EXEC"), "*-1\r\n");
        // Nothing stored and nothing deleted: no change.
        db.cmd("WATCH foo");
        db.cmd("SORT emptylist STORE foo");
        db.cmd("MULTI");
        db.cmd("PING");
        assert_eq!(db.cmd("EXEC"), "*1\r\n+PONG\r\n");
    }

    /// Run `line` as the server does: the command, then CLIENT REPLY OFF/SKIP take its reply
    /// back but for its push messages.
    fn served(db: &mut Db, line: &str) -> String {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let mut out = Vec::new();
        execute(
            &mut db.store,
            &mut db.info,
            &mut db.session,
            &words,
            &mut out,
        );
        if db.session.drop_reply() {
            db.session.drop_output_from(&mut out, 0);
        }
        String::from_utf8(out).unwrap()
    }

    /// Redis's "PubSub messages with CLIENT REPLY OFF": subscription confirmations and
    /// messages are pushes, sent whatever CLIENT REPLY says (RESP2 and RESP3 alike); only the
    /// replies go. The old server dropped them with the reply, and the subscriber waited for ever.
    #[test]
    fn pushes_are_sent_under_client_reply_off_and_skip() {
        for proto in ["2", "3"] {
            let mut db = Db::new();
            db.session.id = 1;
            served(&mut db, &format!("HELLO {proto}"));
            let push = if proto == "3" { ">" } else { "*" };
            assert_eq!(served(&mut db, "CLIENT REPLY OFF"), "");
            assert_eq!(
                served(&mut db, "SUBSCRIBE ch"),
                format!("{push}3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n")
            );
            assert_eq!(
                served(&mut db, "PSUBSCRIBE c*"),
                format!("{push}3\r\n$10\r\npsubscribe\r\n$2\r\nc*\r\n:2\r\n")
            );
            // PING's answer is a reply, not a push: dropped.
            assert_eq!(served(&mut db, "PING"), "");
            assert_eq!(
                served(&mut db, "UNSUBSCRIBE ch"),
                format!("{push}3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:1\r\n")
            );
            assert_eq!(
                served(&mut db, "PUNSUBSCRIBE"),
                format!("{push}3\r\n$12\r\npunsubscribe\r\n$2\r\nc*\r\n:0\r\n")
            );
            assert_eq!(served(&mut db, "CLIENT REPLY ON"), "+OK\r\n");
            // SKIP: the next command's reply goes, its pushes stay.
            assert_eq!(served(&mut db, "CLIENT REPLY SKIP"), "");
            assert_eq!(
                served(&mut db, "SUBSCRIBE x"),
                format!("{push}3\r\n$9\r\nsubscribe\r\n$1\r\nx\r\n:1\r\n")
            );
            assert!(!served(&mut db, "PING").is_empty());
        }
        // RESP3: a message to itself survives OFF, PUBLISH's count does not.
        let mut db = Db::new();
        served(&mut db, "HELLO 3");
        served(&mut db, "SUBSCRIBE ch");
        served(&mut db, "CLIENT REPLY OFF");
        assert_eq!(
            served(&mut db, "PUBLISH ch hi"),
            ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"
        );
    }

    /// Redis's "EXEC fail on WATCHed key modified by SORT with STORE even if the result is
    /// empty": a SORT ... STORE that deletes its destination for an empty result wrote it. The
    /// old server touched the source (the table's key) instead and this EXEC ran.
    #[test]
    fn sort_store_touches_the_watchers_of_its_destination_not_its_source() {
        let mut db = Db::new();
        db.session.id = 1;
        let mut other = Session::new(2, true);
        db.cmd("LPUSH foo bar");
        db.cmd("LPUSH src 1");
        assert_eq!(db.cmd("WATCH foo"), "+OK\r\n");
        let mut out = Vec::new();
        execute(
            &mut db.store,
            &mut db.info,
            &mut other,
            &[b"SORT", b"emptylist", b"STORE", b"foo"],
            &mut out,
        );
        assert_eq!(out, b":0\r\n");
        db.cmd("MULTI");
        db.cmd("PING");
        assert_eq!(db.cmd("EXEC"), "*-1\r\n");
        // Watching the source: a SORT STORE elsewhere reads it, writes nothing of it.
        assert_eq!(db.cmd("WATCH src"), "+OK\r\n");
        out.clear();
        execute(
            &mut db.store,
            &mut db.info,
            &mut other,
            &[b"SORT", b"src", b"STORE", b"dst"],
            &mut out,
        );
        assert_eq!(out, b":1\r\n");
        db.cmd("MULTI");
        db.cmd("PING");
        assert_eq!(db.cmd("EXEC"), "*1\r\n+PONG\r\n");
    }

    /// A RESP3 client subscribed to its own keyspace events gets each before the reply of the
    /// command that caused it, as from Redis 7.0, and under CLIENT REPLY OFF still gets it;
    /// inside EXEC they go after the turn (not into EXEC's array).
    #[test]
    fn own_keyspace_events_come_before_the_reply_and_stay_out_of_exec() {
        let mut db = Db::new();
        db.session.id = 1;
        assert_eq!(db.cmd("CONFIG SET notify-keyspace-events KEA"), "+OK\r\n");
        served(&mut db, "HELLO 3");
        served(&mut db, "SUBSCRIBE __keyspace@0__:k");
        assert_eq!(
            served(&mut db, "SET k v"),
            ">3\r\n$7\r\nmessage\r\n$16\r\n__keyspace@0__:k\r\n$3\r\nset\r\n+OK\r\n"
        );
        served(&mut db, "CLIENT REPLY OFF");
        assert_eq!(
            served(&mut db, "DEL k"),
            ">3\r\n$7\r\nmessage\r\n$16\r\n__keyspace@0__:k\r\n$3\r\ndel\r\n"
        );
        served(&mut db, "CLIENT REPLY ON");
        served(&mut db, "MULTI");
        served(&mut db, "SET k w");
        assert_eq!(served(&mut db, "EXEC"), "*1\r\n+OK\r\n");
        let out: Vec<_> = std::mem::take(&mut db.info.pubsub.outbox);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].to, &*out[0].payload), (1, &b"set"[..]));
    }

    /// CONFIG SET notify-keyspace-events takes Redis's letters and answers Redis's canonical
    /// string; a wrong letter is refused with Redis's message, naming the letters.
    #[test]
    fn notify_keyspace_events_is_set_and_read_back_as_redis_does() {
        let mut db = Db::new();
        let get = |db: &mut Db| db.cmd("CONFIG GET notify-keyspace-events");
        assert!(get(&mut db).ends_with("$0\r\n\r\n"), "{}", get(&mut db));
        assert_eq!(db.cmd("CONFIG SET notify-keyspace-events KEA"), "+OK\r\n");
        assert!(get(&mut db).ends_with("$3\r\nAKE\r\n"), "{}", get(&mut db));
        assert_eq!(
            db.cmd("CONFIG SET notify-keyspace-events Kq"),
            "-ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'.\r\n"
        );
        assert!(get(&mut db).ends_with("$3\r\nAKE\r\n"));
        // Without K or E nothing is published, whatever the classes.
        assert_eq!(db.cmd("CONFIG SET notify-keyspace-events A"), "+OK\r\n");
        db.cmd("PSUBSCRIBE *");
        db.session = Session::new(2, true);
        db.cmd("SET k v");
        assert!(db.info.pubsub.outbox.is_empty());
    }

    /// Events name the database clients select and the user's key, also after a SWAPDB moved
    /// the database's keys elsewhere in the store.
    #[test]
    fn events_name_the_selected_database_and_the_users_key() {
        let mut db = Db::new();
        db.session.id = 1;
        db.cmd("PSUBSCRIBE __key*");
        db.session = Session::new(2, true);
        db.cmd("CONFIG SET notify-keyspace-events KEA");
        let heard = |db: &mut Db| -> Vec<(String, String)> {
            std::mem::take(&mut db.info.pubsub.outbox)
                .iter()
                .map(|d| {
                    (
                        String::from_utf8_lossy(&d.channel).into_owned(),
                        String::from_utf8_lossy(&d.payload).into_owned(),
                    )
                })
                .collect()
        };
        db.cmd("SELECT 3");
        db.cmd("SET k v");
        let ev = heard(&mut db);
        assert!(
            ev.contains(&("__keyspace@3__:k".into(), "set".into()))
                && ev.contains(&("__keyevent@3__:set".into(), "k".into())),
            "{ev:?}"
        );
        db.cmd("SWAPDB 3 5");
        heard(&mut db);
        db.cmd("SELECT 5");
        db.cmd("DEL k");
        let ev = heard(&mut db);
        assert!(
            ev.contains(&("__keyspace@5__:k".into(), "del".into())),
            "{ev:?}"
        );
    }

    /// Keys the store expires are announced as `expired` when `x` is on, lazily (a command
    /// finds one) and actively (the store's tick), and not kept at all when it is off.
    #[test]
    fn expired_keys_are_announced_lazily_and_actively() {
        let mut db = Db::new();
        db.session.id = 1;
        db.cmd("PSUBSCRIBE __keyevent@0__:*");
        db.session = Session::new(2, true);
        db.cmd("SET off v PX 1");
        db.cmd("CONFIG SET notify-keyspace-events Ex");
        db.cmd("SET lazy v PX 1");
        db.cmd("SET active v PX 1");
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(db.cmd("GET lazy"), "$-1\r\n");
        let events: Vec<(String, String)> = std::mem::take(&mut db.info.pubsub.outbox)
            .iter()
            .map(|d| {
                (
                    String::from_utf8_lossy(&d.channel).into_owned(),
                    String::from_utf8_lossy(&d.payload).into_owned(),
                )
            })
            .collect();
        // "off" expired before anyone asked: it may be found by the GET's lookup (as here)
        // only if it is one of the command's keys, and it is not.
        assert_eq!(
            events,
            [("__keyevent@0__:expired".to_string(), "lazy".to_string())]
        );
        // The tick samples every key of a small store: "active" and "off" go, "active" told.
        std::thread::sleep(std::time::Duration::from_millis(15));
        db.store.tick().unwrap();
        crate::notify::announce_expired(&mut db.store, &mut db.info, false);
        // Events name the store's keys (the database's byte first); publishing names the user's.
        let named: Vec<Vec<u8>> = db.info.notify.take().into_iter().map(|e| e.key).collect();
        assert!(
            named.contains(&cxltier_store::db_key(0, b"active")),
            "{named:?}"
        );
    }

    /// SET with an EXAT/PXAT already past: Redis adds the key (`new`, `set`, `expire`) and
    /// finds it expired at the next lookup (`expired`); the store takes such a write as a delete,
    /// which the server announced as `del` of an existing key and not at all for a new one.
    #[test]
    fn set_with_a_time_past_is_announced_as_set_then_expired() {
        let mut db = Db::new();
        db.session.id = 1;
        db.cmd("PSUBSCRIBE __keyspace@0__:*");
        db.session = Session::new(2, true);
        db.cmd("CONFIG SET notify-keyspace-events AKEn");
        db.cmd("SET old v");
        db.info.pubsub.outbox.clear();
        assert_eq!(db.cmd("SET fresh v PXAT 1"), "+OK\r\n");
        assert_eq!(db.cmd("SET old v EXAT 1"), "+OK\r\n");
        assert_eq!(db.cmd("EXISTS fresh old"), ":0\r\n");
        let heard: Vec<String> = std::mem::take(&mut db.info.pubsub.outbox)
            .iter()
            .map(|d| {
                format!(
                    "{} {}",
                    String::from_utf8_lossy(&d.channel),
                    String::from_utf8_lossy(&d.payload)
                )
            })
            .collect();
        assert_eq!(
            heard,
            [
                "__keyspace@0__:fresh new",
                "__keyspace@0__:fresh set",
                "__keyspace@0__:fresh expire",
                "__keyspace@0__:fresh expired",
                "__keyspace@0__:old set",
                "__keyspace@0__:old expire",
                "__keyspace@0__:old expired",
            ]
        );
        assert_eq!(info_field(&mut db, "stats", "expired_keys"), "2");
    }

    /// Shard channels (SSUBSCRIBE, SUNSUBSCRIBE, SPUBLISH, PUBSUB SHARDCHANNELS|SHARDNUMSUB):
    /// their own namespace and their own count in confirmations, as in Redis 7.0; NUMSUB and
    /// SHARDNUMSUB answer a flat array in RESP3 too (NUMSUB used to answer a map there).
    #[test]
    fn shard_channels_are_a_namespace_of_their_own() {
        let mut db = Db::new();
        db.session.id = 1;
        let mut other = Session::new(2, true);
        assert_eq!(
            db.cmd("SSUBSCRIBE c d"),
            "*3\r\n$10\r\nssubscribe\r\n$1\r\nc\r\n:1\r\n*3\r\n$10\r\nssubscribe\r\n$1\r\nd\r\n:2\r\n"
        );
        // A channel of the same name counts apart, and both are in subscribed mode.
        assert_eq!(
            db.cmd("SUBSCRIBE c"),
            "*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"
        );
        assert!(db.cmd("GET k").starts_with("-ERR Can't execute 'get'"));
        assert_eq!(run_as(&mut db, &mut other, "SPUBLISH c m"), ":1\r\n");
        assert_eq!(run_as(&mut db, &mut other, "PUBLISH c m"), ":1\r\n");
        let kinds: Vec<&[u8]> = db
            .info
            .pubsub
            .outbox
            .iter()
            .map(|d| {
                if d.shard {
                    &b"smessage"[..]
                } else {
                    &b"message"[..]
                }
            })
            .collect();
        assert_eq!(kinds, [&b"smessage"[..], &b"message"[..]]);
        let mut msg = Vec::new();
        crate::pubsub::write_message(&mut msg, 3, &db.info.pubsub.outbox[0]);
        assert_eq!(msg, b">3\r\n$8\r\nsmessage\r\n$1\r\nc\r\n$1\r\nm\r\n");
        db.info.pubsub.outbox.clear();
        run_as(&mut db, &mut other, "HELLO 3");
        assert_eq!(
            run_as(&mut db, &mut other, "PUBSUB SHARDNUMSUB c zz"),
            "*4\r\n$1\r\nc\r\n:1\r\n$2\r\nzz\r\n:0\r\n"
        );
        assert_eq!(
            run_as(&mut db, &mut other, "PUBSUB NUMSUB c"),
            "*2\r\n$1\r\nc\r\n:1\r\n"
        );
        assert_eq!(
            run_as(&mut db, &mut other, "PUBSUB SHARDCHANNELS"),
            "*2\r\n$1\r\nc\r\n$1\r\nd\r\n"
        );
        // UNSUBSCRIBE of all leaves the shard channels; SUNSUBSCRIBE of all takes them.
        assert_eq!(
            db.cmd("UNSUBSCRIBE"),
            "*3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n"
        );
        assert_eq!(run_as(&mut db, &mut other, "SPUBLISH d m"), ":1\r\n");
        assert_eq!(
            db.cmd("SUNSUBSCRIBE"),
            "*3\r\n$12\r\nsunsubscribe\r\n$1\r\nc\r\n:1\r\n*3\r\n$12\r\nsunsubscribe\r\n$1\r\nd\r\n:0\r\n"
        );
        assert_eq!(
            db.cmd("SUNSUBSCRIBE"),
            "*3\r\n$12\r\nsunsubscribe\r\n$-1\r\n:0\r\n"
        );
        assert!(!db.session.subscribed());
        assert_eq!(run_as(&mut db, &mut other, "SPUBLISH d m"), ":0\r\n");
    }
}
