//! The state commands run against, at the bottom of the server: the server's settings and
//! counters ([`ServerInfo`]), one connection's ([`Session`], [`ClientMeta`]), what a handler is
//! given ([`Ctx`]) and what it did ([`Effect`]), with the small helpers every handler shares
//! (error replies, clocks, expiry times, the delete an expiry is replicated as). It imports no
//! handler module: the state it holds of other parts (knobs, cursors, subscriptions, the write
//! stream, the Lua interpreter, notifications, databases) lives in modules below it.

use cxltier_store::{Store, StoreError};
use hashbrown::HashMap;

pub(crate) use crate::errors::{NOT_INT, SYNTAX, WRONGTYPE};
use crate::resp::reply;

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
    /// Held by CLIENT PAUSE: nothing ran and nothing was answered; the server runs it again
    /// when the pause ends (Redis's BLOCKED_POSTPONE).
    Postponed,
}

/// CLIENT PAUSE in force.
#[derive(Debug, Clone, Copy)]
pub struct ClientPause {
    /// When it ends by itself (CLIENT UNPAUSE ends it sooner).
    pub until: std::time::Instant,
    /// ALL holds every command of every client; WRITE only those that may write or replicate.
    pub all: bool,
}

/// What a command of another connection is given while a script holds the server (the busy
/// mode: the loop answers other connections from inside the script's hook, and nothing may
/// touch the store or the server's state, which the script holds): the running script's
/// state, the connection, the ACL's users and the reply.
pub struct BusyCtx<'a> {
    pub run: &'a mut crate::lua::RunState,
    pub session: &'a mut Session,
    pub users: &'a crate::acl::Users,
    pub out: &'a mut Vec<u8>,
}

/// What a command of another connection got while a script is busy.
#[derive(Debug, PartialEq, Eq)]
pub enum BusyOutcome {
    /// Answered; the connection goes on.
    Answered,
    /// QUIT: close it after the reply.
    Close,
}

/// A command's answer in the busy mode (the table's `while_busy`).
pub type BusyHandler = fn(&mut BusyCtx<'_>, &[&[u8]]) -> BusyOutcome;

impl BusyCtx<'_> {
    /// BUSY: the command waits for the script's end. Inside MULTI that aborts the transaction
    /// at EXEC, as Redis's `flagTransaction` does.
    pub fn refuse(&mut self) -> BusyOutcome {
        if self.session.multi.is_some() {
            self.session.multi_failed = true;
        }
        let busy = if self.run.function.is_some() {
            crate::errors::BUSY_FUNCTION
        } else {
            crate::errors::BUSY
        };
        reply::error(self.out, busy);
        BusyOutcome::Answered
    }
}

/// Server-wide settings and counters the commands see.
#[derive(Debug, Default)]
pub struct ServerInfo {
    pub port: u16,
    pub bind: String,
    /// `requirepass` as configured (CONFIG GET); the default user's password is the ACL's.
    pub requirepass: Option<String>,
    /// The ACL's users and log.
    pub acl: crate::acl::Acl,
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
    /// DEBUG QUICKLIST-PACKED-THRESHOLD: the element size from which Redis keeps a list
    /// element in a quicklist node of its own (DEBUG OBJECT's `ql_*` fields); 0: Redis's
    /// default, 1 GB.
    pub quicklist_packed_threshold: u64,
    /// When the store was last made durable on request (SAVE, BGSAVE), in seconds since the
    /// epoch; the start time before (LASTSAVE).
    pub last_save: u64,
    /// Redis's keyspace hits and misses: the keys read commands looked up (a write of a new
    /// key is no miss).
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    /// The store's count of changes ([`Store::changes`]) at the last SAVE or BGSAVE: INFO's
    /// `rdb_changes_since_last_save` counts from it (Redis's `server.dirty`).
    pub changes_at_save: u64,
    /// The most `used_memory` INFO has reported since start or CONFIG RESETSTAT.
    pub used_memory_peak: u64,
    /// Commands processed, sampled at the loop's tick (instantaneous_ops_per_sec).
    pub ops_samples: std::collections::VecDeque<(std::time::Instant, u64)>,
    /// 40 hex digits, new at each start (INFO's run_id and master_replid).
    pub run_id: String,
    /// CONFIG SET's stored parameters.
    pub knobs: crate::knobs::Knobs,
    /// WATCHed keys and the connections watching each; the connections whose watched keys
    /// were written since (their EXEC fails).
    pub watchers: HashMap<Vec<u8>, Vec<u64>>,
    pub dirty: hashbrown::HashSet<u64>,
    /// Subscriptions, and the messages for other connections PUBLISH left.
    pub pubsub: crate::subscriptions::PubSub,
    /// Client-side caching: who tracks, the keys they read, the invalidations to send.
    pub tracking: crate::tracking::Tracking,
    /// The SCAN cursors handed out, each standing for the key its scan goes on from.
    pub scan_cursors: crate::cursors::Cursors,
    /// Keys removed because their TTL passed: found so by a command (lazy expiry) or by the
    /// store's background sampling (active expiry), INFO's `expired_keys`.
    pub expired_keys: u64,
    /// Keys evicted under a `maxmemory-policy` (INFO's `evicted_keys`).
    pub evicted_keys: u64,
    /// How full the store was (`Store::fill`'s bytes used) when a write last found it full
    /// under a policy that evicts: eviction keeps the store below it from then on.
    pub store_full_at: Option<u64>,
    /// `CONFIG SET maxmemory N` below the memory budget: once `used_memory` is over N, keys are
    /// evicted by the `maxmemory-policy` (the store's), or with `noeviction` commands that may
    /// grow memory answer OOM. `None` (maxmemory 0, the default): the budget alone bounds
    /// memory, and what does not fit goes to NVMe (and, under a policy, a full store evicts).
    pub maxmemory_limit: Option<u64>,
    /// Per command (the table's name): INFO commandstats.
    pub command_stats: HashMap<CommandName, CommandStat>,
    /// MIGRATE's connections kept for the next MIGRATE to the same target.
    pub migrate_sockets: crate::migrate::MigrateSockets,
    /// Error replies by code: INFO errorstats and `total_error_replies`.
    pub errors: crate::error_stats::ErrorStats,
    /// The errors of the commands a script or EXEC ran during the outermost command (first
    /// lines, `-` dropped), counted already: a script's error that passes one on is not
    /// counted again. Bounded by the commands a script may run; emptied by each outermost
    /// command.
    pub nested_errors: Vec<Vec<u8>>,
    /// How long each command took to run, every command (the metrics' latency histogram).
    pub command_latency: cxltier_metrics::Histogram,
    /// The last command the server ran (not one inside EXEC or a script) and the time it began,
    /// in µs: its time ends at the next reading of the clock ([`ServerInfo::close_command_time`]),
    /// the next command's start or the end of the loop's turn. One reading per command instead
    /// of two: on this kind of VM a reading costs 50–80 ns, 15% of a short command's time.
    /// Also its subcommand (for its latency histogram, `client|id`) and whether it is `fast`
    /// (its latency event is then "fast-command").
    pub timed: Option<(&'static str, u64, Option<&'static str>, bool)>,
    /// LATENCY's events and the commands' latency histograms.
    pub latency: crate::latency::Latency,
    /// The MONITOR connections and the lines for them.
    pub monitors: crate::monitor::Monitors,
    /// SLOWLOG's entries (`slowlog-log-slower-than`, `slowlog-max-len`).
    pub slowlog: crate::slowlog::SlowLog,
    /// The connections parked by a blocking command (BLPOP, ...), kept by the server: INFO's
    /// `blocked_clients` and what CLIENT UNBLOCK may wake.
    pub blocked: hashbrown::HashSet<u64>,
    /// CLIENT UNBLOCK's requests for the server: the connection, and whether it is answered
    /// with an error (else as a timeout).
    pub unblock: Vec<(u64, bool)>,
    /// CLIENT PAUSE in force, if any ([`ServerInfo::pause_in_force`]).
    pub pause: Option<ClientPause>,
    /// The connections a pause holds: counted in `blocked_clients`, run again when it ends.
    pub paused: hashbrown::HashSet<u64>,
    /// Keys written while connections were parked: the server tries those waiting on them.
    /// Like every registry of keys here, with their logical database byte ([`crate::db`]).
    pub ready: Vec<Vec<u8>>,
    /// Replicas, the write stream and its offset.
    pub repl: crate::write_stream::Replication,
    /// Where the snapshot a replica loads is written before it is sent (the store's directory);
    /// `None`: in memory.
    pub snapshot_dir: Option<std::path::PathBuf>,
    /// The databases and where each is kept (`SELECT`, `SWAPDB`).
    pub dbs: crate::db::Databases,
    /// Dispatch's buffer of key arguments with their database byte (kept to spare an allocation
    /// per command; see `dispatch`).
    pub keyed_scratch: Vec<u8>,
    /// SWAPDBs (and FLUSHDB/FLUSHALL, as a database paired with itself) run since the server
    /// last looked: the clients blocked on keys of those logical databases are tried again
    /// (Redis's `scanDatabaseForReadyKeys`, `signalFlushedDb`).
    pub db_swaps: Vec<(usize, usize)>,
    /// `notify-keyspace-events` and the events the running command announced.
    pub notify: crate::notify::Notifier,
    /// The Lua interpreter and its cached scripts (EVAL, SCRIPT LOAD).
    pub scripts: crate::lua::Scripts,
    /// SHUTDOWN NOSAVE came while a script was busy: the server stops once it has ended.
    pub shutdown_after_script: bool,
    /// Turns of the event loop (INFO stats' `eventloop_cycles`, Redis 7.2's name), and the
    /// connections they looked at (`eventloop_connections_visited`, cxltier's own): a turn looks
    /// at the connections with something to do, not at every one, and this shows it.
    pub eventloop_cycles: u64,
    pub eventloop_connections_visited: u64,
}

/// A command's name from the command table, and the subcommand run of a container command
/// (Redis 7 counts `config|set`, not `config`), as the key of its counters. Every name counted
/// comes from the one static table, so two equal names are almost always the same pointer:
/// equality tries that first, where comparing the bytes (two memcmp calls per command, one
/// to count the call and one to add its time) was 2% of a short command's time.
#[derive(Debug, Clone, Copy, PartialOrd, Ord)]
pub struct CommandName(pub &'static str, pub Option<&'static str>);

impl CommandName {
    /// As INFO commandstats names it: `get`, `config|set`.
    pub fn stat_name(&self) -> String {
        match self.1 {
            Some(sub) => format!("{}|{sub}", self.0.to_ascii_lowercase()),
            None => self.0.to_ascii_lowercase(),
        }
    }
}

impl PartialEq for CommandName {
    fn eq(&self, other: &Self) -> bool {
        let same = |a: &'static str, b: &'static str| std::ptr::eq(a, b) || a == b;
        same(self.0, other.0)
            && match (self.1, other.1) {
                (None, None) => true,
                (Some(a), Some(b)) => same(a, b),
                _ => false,
            }
    }
}

impl Eq for CommandName {}

impl std::hash::Hash for CommandName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
        self.1.hash(state);
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
    /// The arguments to run again, when not the command's own: XREAD's `$` is the stream's
    /// last id when it blocked, not when it is run again.
    pub args: Option<Vec<Vec<u8>>>,
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
    /// The ACL user its commands run as (the default user until AUTH or HELLO says another).
    pub user: crate::acl::UserId,
    pub name: Option<Vec<u8>>,
    /// The protocol spoken (HELLO): 2 or 3; 0 before any HELLO, which is RESP2.
    pub proto: u8,
    /// The last command run (CLIENT LIST's `cmd`), as the table names it, and its
    /// subcommand when it is a container's (`cmd=client|list`).
    pub last_cmd: &'static str,
    pub last_sub: Option<&'static str>,
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
    /// A script's `redis.call` runs the command (XREAD refuses BLOCK there, as Redis does).
    pub in_script: bool,
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
    pub propagate: Option<Vec<crate::write_stream::Op>>,
    /// Replicate the command even if it changed nothing (FLUSHALL, FLUSHDB, PUBLISH).
    pub force_propagate: bool,
    /// The session a function's or a flagged script's `redis.call` runs in: its commands are
    /// never refused OOM (FCALL or EVAL refused it up front unless its flags allow it, as Redis
    /// does).
    pub function_call: bool,
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
    /// While a command of the connection runs: the bytes of its input from this command on,
    /// and of its replies not yet sent (CLIENT LIST/INFO of the connection itself).
    pub input_pending: usize,
    pub output_pending: usize,
    /// The spans of the output the running command wrote that are push messages (pub/sub
    /// confirmations and messages, keyspace notifications to itself): CLIENT REPLY OFF and
    /// SKIP drop the command's reply but not these, as in Redis.
    pub pushed: Vec<std::ops::Range<usize>>,
}

impl ServerInfo {
    /// Redis's `min-replicas-to-write`: fewer replicas acknowledged within
    /// `min-replicas-max-lag` seconds than writes need now.
    pub fn too_few_good_replicas(&self) -> bool {
        let (min_replicas, max_lag) = self.knobs.min_replicas();
        min_replicas > 0
            && max_lag > 0
            && (self
                .repl
                .good_replicas(max_lag as u64, std::time::Instant::now()) as i64)
                < min_replicas
    }

    /// A configuration parameter of Redis's as CONFIG GET shows it (its default until CONFIG
    /// SET): `acllog-max-len`, `acl-pubsub-default`, `aclfile`.
    pub fn config_value(&self, name: &str) -> String {
        match crate::knobs::param(name) {
            Some(p) => self.knobs.param_value(p),
            None => String::new(),
        }
    }

    /// The name of ACL user `id` (`default` for one deleted since).
    pub fn user_name(&self, id: crate::acl::UserId) -> &[u8] {
        self.acl.users.get(id).map_or(b"default", |u| &u.name[..])
    }

    /// Record in ACL LOG that `session` was refused for `reason` on `object` (the command, key,
    /// channel, or AUTH's name), as user `username` (the session's when `None`).
    pub fn acl_deny(
        &mut self,
        session: &Session,
        reason: crate::acl::Reason,
        object: &[u8],
        username: Option<&[u8]>,
    ) {
        use crate::acl::LogContext;
        let context = if session.in_script {
            LogContext::Lua
        } else if session.multi.is_some() || session.in_exec {
            LogContext::Multi
        } else {
            LogContext::Toplevel
        };
        let entry = crate::acl::LogEntry {
            count: 1,
            reason,
            context,
            object: object.to_vec(),
            username: username.unwrap_or(self.user_name(session.user)).to_vec(),
            ctime_ms: now_ms(),
            client_info: self.client_info(session),
        };
        let max = self.config_value("acllog-max-len").parse().unwrap_or(128);
        self.acl.log(entry, max);
    }

    /// `session`'s line of CLIENT INFO (without its newline): what ACL LOG records of the
    /// client refused.
    pub fn client_info(&self, session: &Session) -> String {
        let now = std::time::Instant::now();
        let mut m = self
            .clients
            .get(&session.id)
            .cloned()
            .unwrap_or_else(|| ClientMeta::new(String::new(), String::new(), -1, now));
        if !session.in_script {
            m.update_from(session);
        }
        m.last_active = now;
        let mut t = String::new();
        let mode = self.tracking.clients.get(&session.id);
        client_line(
            &mut t,
            self.user_name(session.user),
            session.id,
            &m,
            now,
            false,
            mode,
        );
        t.pop();
        t
    }

    /// The pause in force now, if any: one whose time is up is ended here (Redis's
    /// `checkClientPauseTimeoutAndReturnIfPaused`).
    pub fn pause_in_force(&mut self, now: std::time::Instant) -> Option<ClientPause> {
        if self.pause.is_some_and(|p| p.until <= now) {
            self.pause = None;
        }
        self.pause
    }

    /// CLIENT PAUSE: a pause already in force keeps the later end and the stricter mode
    /// (Redis's `pauseClients`).
    pub fn pause_clients(&mut self, until: std::time::Instant, all: bool) {
        let now = std::time::Instant::now();
        self.pause = Some(match self.pause_in_force(now) {
            Some(p) => ClientPause {
                until: p.until.max(until),
                all: p.all || all,
            },
            None => ClientPause { until, all },
        });
    }

    /// End the time of the command in [`ServerInfo::timed`] at `now_us` (a reading of
    /// [`now_us`]): INFO commandstats' `usec` and the latency histogram get it, and the slow
    /// log, which held the command until then.
    pub fn close_command_time(&mut self, now_us: u64) {
        if let Some((name, started, sub, fast)) = self.timed.take() {
            let took = now_us.saturating_sub(started);
            self.observe_latency((name, sub), fast, took, now_us);
            if let Some(client) = self.slowlog.held_client() {
                let (slower_than, max_len) = self.knobs.slowlog();
                let addr = self.clients.get(&client).map_or("", |m| m.addr.as_str());
                self.slowlog.release(slower_than, max_len, took, addr);
            }
            self.command_stats
                .entry(CommandName(name, sub))
                .or_default()
                .usec += took;
            self.command_latency.observe(took as f64 / 1e6);
        }
    }

    /// A command's run of `took_us` ended at `now_us`: its latency histogram (with
    /// `latency-tracking yes`) and, at `latency-monitor-threshold` ms or more, a sample of the
    /// "command" event ("fast-command" for a `fast` one).
    pub fn observe_latency(
        &mut self,
        key: crate::latency::CommandKey,
        fast: bool,
        took_us: u64,
        now_us: u64,
    ) {
        let (threshold_ms, tracking) = self.knobs.latency();
        if tracking {
            self.latency.record(key, took_us.saturating_mul(1000));
        }
        let ms = took_us / 1000;
        if threshold_ms > 0 && ms >= threshold_ms as u64 {
            let event = if fast { "fast-command" } else { "command" };
            self.latency.add_sample(event, now_us / 1_000_000, ms);
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
        self.touch_watchers(key);
        // Its readers' cached copies are invalid (tracking knows no databases).
        if self.tracking.active() {
            self.tracking
                .invalidate(key.get(1..).unwrap_or_default(), true);
        }
    }

    /// The transactions watching `key` (with its logical database byte) will fail. A flush
    /// touches only those: its readers hear of it once, as a null invalidation.
    pub(crate) fn touch_watchers(&mut self, key: &[u8]) {
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

    /// Forget all of `session`'s subscriptions (RESET, and when the connection closes).
    pub fn drop_subscriptions(&mut self, session: &mut Session) {
        for ch in session.channels.drain(..) {
            crate::subscriptions::remove(&mut self.pubsub.channels, &ch, session.id);
        }
        for p in session.patterns.drain(..) {
            crate::subscriptions::remove(&mut self.pubsub.patterns, &p, session.id);
        }
        for ch in session.shard_channels.drain(..) {
            crate::subscriptions::remove(&mut self.pubsub.shard_channels, &ch, session.id);
        }
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
    pub(crate) fn propagate_as(&mut self, ops: impl FnOnce() -> Vec<crate::write_stream::Op>) {
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

/// One line of CLIENT LIST / CLIENT INFO, in Redis 7's fields.
pub(crate) fn client_line(
    t: &mut String,
    user: &[u8],
    id: u64,
    m: &ClientMeta,
    now: std::time::Instant,
    blocked: bool,
    tracking: Option<&crate::tracking::Mode>,
) {
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
    // Tracking (`t`), its redirection gone (`R`), in BCAST mode (`B`).
    if let Some(mode) = tracking {
        flags.push('t');
        if mode.broken {
            flags.push('R');
        }
        if mode.bcast {
            flags.push('B');
        }
    }
    if m.no_evict {
        flags.push('e');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let _ = writeln!(
        t,
        "id={id} addr={} laddr={} fd={} name={} age={} idle={} flags={flags} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=16384 rbp=0 obl=0 oll=0 omem={} tot-mem={} events=r cmd={} user={} redir={} resp={}",
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
        match m.last_sub {
            Some(sub) => format!("{}|{sub}", m.last_cmd.to_ascii_lowercase()),
            None => m.last_cmd.to_ascii_lowercase(),
        },
        String::from_utf8_lossy(user),
        tracking.map_or(-1, |mode| mode.redirect as i64),
        m.proto.max(2),
    );
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
    pub last_sub: Option<&'static str>,
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
    /// The ACL user it runs as.
    pub user: crate::acl::UserId,
}

impl ClientMeta {
    /// A connection just accepted: RESP2, database 0, no command yet, nothing buffered.
    pub fn new(addr: String, laddr: String, fd: i32, now: std::time::Instant) -> ClientMeta {
        ClientMeta {
            addr,
            laddr,
            fd,
            created: now,
            last_active: now,
            name: None,
            proto: 2,
            last_cmd: "NULL",
            last_sub: None,
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
            user: crate::acl::DEFAULT_USER,
        }
    }

    /// Copy what a session says of its connection.
    pub fn update_from(&mut self, s: &Session) {
        if self.name != s.name {
            self.name.clone_from(&s.name);
        }
        self.proto = s.proto;
        self.db = s.db;
        self.last_cmd = s.last_cmd;
        self.last_sub = s.last_sub;
        self.no_evict = s.no_evict;
        self.reply_off = s.reply_off;
        self.sub = s.channels.len();
        self.psub = s.patterns.len();
        self.ssub = s.shard_channels.len();
        self.multi = s.multi.as_ref().map_or(-1, |q| q.len() as i64);
        self.replica = s.is_replica;
        self.user = s.user;
    }

    /// Redis's client type for LIST and KILL filters: pubsub once subscribed, else normal.
    pub(crate) fn kind(&self) -> &'static str {
        if self.replica {
            "replica"
        } else if self.sub + self.psub + self.ssub > 0 {
            "pubsub"
        } else {
            "normal"
        }
    }
}

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

/// Redis's rule for client names: printable ASCII without spaces.
pub(crate) fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

pub(crate) const BAD_CLIENT_NAME: &str =
    "ERR Client names cannot contain spaces, newlines or special characters.";

/// What a handler works with: the store, the server's settings and counters, the connection's
/// state, and where its reply goes.
pub struct Ctx<'a> {
    pub store: &'a mut Store,
    pub info: &'a mut ServerInfo,
    pub session: &'a mut Session,
    pub out: &'a mut Vec<u8>,
    /// How a handler runs other commands: a script's `redis.call` as a client's command
    /// ([`crate::dispatch::execute`]), EXEC's queued commands as checked when queued
    /// ([`crate::dispatch::run_queued`]). Dispatch, which sits above the handlers, hands them
    /// down, so that no handler imports it.
    pub execute: Execute,
    pub run_queued: RunQueued,
    /// The ACL's check of a command for a user, without running it (ACL DRYRUN): `None` when
    /// allowed, else why not ([`crate::dispatch`]'s, handed down as `execute` is).
    pub dry_run: DryRun,
    /// The command table, for the handlers that look commands up (a script's `redis.call`,
    /// COMMAND): handed down by dispatch, as `execute` is, since the table names the handlers.
    pub commands: &'static crate::command::Commands,
}

/// Run one command as a client's: the table's checks, then its handler.
pub type Execute = fn(&mut Store, &mut ServerInfo, &mut Session, &[&[u8]], &mut Vec<u8>) -> Effect;

/// The ACL's check of a command line for a user (ACL DRYRUN's answer).
pub type DryRun = fn(
    &crate::acl::Users,
    crate::acl::UserId,
    &'static crate::command::Command,
    &[&[u8]],
) -> Option<String>;

/// Run one command EXEC queued (found in the table and checked when it was queued).
pub type RunQueued = fn(&mut Ctx<'_>, &[&[u8]]) -> Effect;

impl Ctx<'_> {
    /// Announce a keyspace event of `class` on `key` (published after the command when the
    /// class is on: [`crate::notify`]).
    pub(crate) fn notify(&mut self, class: u32, event: &'static str, key: &[u8]) {
        self.info.notify.emit(class, event, key);
    }

    /// A pop's event, then `del` when it emptied `key` (the store deleted it): also for the
    /// commands whose keys are no key positions of the table's (LMPOP, ZMPOP and their blocking
    /// forms), which dispatch cannot see.
    pub(crate) fn notify_pop(&mut self, class: u32, event: &'static str, key: &[u8]) {
        self.notify(class, event, key);
        if self.info.notify.active() && !self.store.contains(key) {
            self.notify(crate::notify::class::GENERIC, "del", key);
        }
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
pub(crate) fn expired_delete_op(info: &ServerInfo, key: &[u8]) -> crate::write_stream::Op {
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
