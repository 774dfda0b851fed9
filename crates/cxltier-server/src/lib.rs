//! A RESP2 (Redis protocol) server over the cxltier tiered object store.
//!
//! From the bottom up: the state commands run against, the handlers by kind, the table that
//! names them, dispatch, and the event loop at the top.
//!
//! - [`resp`]: the request parser (multibulk and inline; never panics) and reply writers;
//! - [`context`]: the state every handler sees: `ServerInfo` (the server's settings and
//!   counters), `Session` (one connection's), `Ctx` and `Effect`, and the helpers handlers
//!   share (error replies, clocks, expiry times); it imports no handler;
//! - [`errors`]: the error replies several kinds of command give, word for word;
//! - [`cursors`]: the SCAN cursors the server keeps, and SSCAN/HSCAN/ZSCAN's cursors on the wire;
//! - [`subscriptions`]: who subscribes to what, and the messages left for other connections;
//! - [`tracking`]: client-side caching (CLIENT TRACKING): the keys each tracking connection
//!   read, BCAST prefixes, and the invalidation messages writes, expiries and flushes leave;
//! - [`write_stream`]: the write stream replicas are fed, its offset and units;
//! - [`lua`]: the Lua interpreter scripts run in, its libraries, cache and running state;
//! - [`functions`]: Redis 7.0 functions' libraries: FUNCTION LOAD's sandbox and checks, the
//!   libraries by name and their functions, DUMP/RESTORE payloads, the copy the store keeps;
//! - [`version`]: the Redis version cxltier answers as;
//! - [`db`]: the databases (`SELECT`, `SWAPDB`): the logical → physical map kept in the store;
//! - [`glob`]: Redis's glob patterns, matched in bounded time (CONFIG GET, KEYS, SCAN MATCH);
//! - [`knobs`]: the parameters CONFIG SET stores, with their aliases and defaults, and the
//!   types of Redis's parameters ([`config_specs`]: all of Redis 7.0.15's, generated from its
//!   `src/config.c` by `scripts/gen-redis-specs`);
//! - [`limits`]: output buffer limits per kind of client, the bulk margin, byte counts;
//! - [`latency`]: LATENCY's events ("command", "fast-command" at `latency-monitor-threshold`)
//!   and the commands' latency histograms (`latency-tracking`), DOCTOR's and GRAPH's text;
//! - [`monitor`]: the MONITOR connections and the lines (Redis's format) a turn leaves them;
//! - [`slowlog`]: the slow log's entries (trimmed, sensitive arguments redacted), capped at
//!   `slowlog-max-len`, and the redaction rules the table gives AUTH, HELLO and CONFIG;
//! - [`ratelog`]: log lines of a repeating failure held back to one per interval, counted;
//! - [`args`]: what handlers of several kinds parse and answer alike (integers, WRONGTYPE,
//!   the SCAN family's arguments and pages, random counts and draws, blocking timeouts and
//!   parking, floats, counts, per-member lookups, and the multi-key and blocking pops);
//! - [`admin`]: DBSIZE, FLUSHALL/FLUSHDB, SWAPDB, MEMORY, TIME, LASTSAVE, SAVE, BGSAVE,
//!   SHUTDOWN, SLOWLOG, LATENCY, MONITOR: the server group's commands without a module of their own;
//! - [`debug`]: DEBUG's subcommands that mean something here (OBJECT, DIGEST, SLEEP, PROTOCOL,
//!   ...); [`digest`]: Redis's SHA1 digests of the dataset and of values, byte for byte;
//! - [`acl`]: Redis 7.0's ACL: users, their rules, ACL LOG's entries, the ACL file;
//!   [`acl_command`]: the ACL command over them;
//! - [`client`]: the CLIENT family (LIST, INFO, KILL, REPLY, PAUSE, UNBLOCK, ...);
//! - [`config`]: `CONFIG GET|SET|RESETSTAT|REWRITE`, and Redis's encoding knobs, stored;
//! - [`connection`]: PING, ECHO, SELECT, AUTH, HELLO, RESET, QUIT;
//! - [`geo`]: the GEO commands over sorted sets whose scores are 52-bit geohashes;
//! - [`hash_layout`]: a hash's two layouts: its fields encoded in one stored value, or a
//!   chunked collection, and the move from one to the other;
//! - [`stream_layout`]: how a stream is kept in the store (an entry's id as the key, its fields
//!   and values in the value; the stream's record, its groups, pending entries and consumers);
//! - [`encoding`]: OBJECT ENCODING, Redis's name for how it would encode a value under the
//!   configured thresholds (the hash and set commands ask it too);
//! - [`memory`]: the memory figures INFO, CONFIG, OOM, ROLE and the metrics share, and
//!   eviction under a `maxmemory-policy` (keys evicted, announced, replicated and counted);
//! - [`hash`]: the hash commands over both layouts;
//! - [`info`]: INFO's sections;
//! - [`keyspace`]: DEL, EXISTS, TYPE, the expiry commands, OBJECT, SCANRANGE (the ordered range
//!   scan of YCSB workload E), SCAN (cursors kept by the server), KEYS, RANDOMKEY, RENAME, COPY,
//!   TOUCH, EXPIRETIME, DUMP and RESTORE (atomic: a failed RESTORE leaves the keyspace as it
//!   was);
//! - [`list`], [`set`], [`zset`]: the list, set and sorted set commands;
//! - [`stream`]: the stream commands (XADD ... XINFO) over the store's stream trees;
//! - [`notify`]: keyspace notifications (`notify-keyspace-events`): the classes and the events
//!   commands announce (dispatch publishes them on `__keyspace@<db>__:` and
//!   `__keyevent@<db>__:` channels);
//! - [`pubsub`]: SUBSCRIBE, PSUBSCRIBE, PUBLISH, PUBSUB, and the messages for other connections;
//! - [`quarantine`]: follows the quarantine file of `cxltier ras --watch --quarantine` and hands
//!   new poisoned ranges to the store (`INFO poison`);
//! - [`rdb`]: the RDB snapshot (version 10, Redis's CRC64) a replica loads at SYNC/PSYNC, the
//!   decoder of RDB values (every encoding Redis 7.0 loads, streams with their groups included,
//!   validated) and DUMP/RESTORE payloads in Redis's format;
//! - [`replication`]: SYNC, PSYNC, REPLCONF, ROLE, WAIT, CLUSTER: replicas attach, are sent
//!   the snapshot, then the write stream as Redis 7.0 propagates it (what changed, rewritten,
//!   in MULTI/EXEC units, after SELECT);
//! - [`scripting`]: EVAL, EVALSHA, SCRIPT, FCALL, FUNCTION: Lua 5.1 scripts and Redis 7.0's
//!   functions with the `redis` library, conversions and errors, `cjson` and `bit`, and the busy
//!   mode while a script or function runs long;
//! - [`strings`]: GET, SET, INCR and the rest of the string commands, SETBIT, GETBIT, BITCOUNT
//!   and BITPOS;
//! - [`bitops`]: BITOP, BITFIELD and BITFIELD_RO;
//! - [`hyperloglog`]: PFADD, PFCOUNT, PFMERGE, PFDEBUG, PFSELFTEST over Redis 7.0's HLL strings,
//!   byte for byte;
//! - [`transaction`]: MULTI, EXEC, DISCARD, WATCH, UNWATCH;
//! - [`table`]: the command table (name, arity, flags, keys, handler) that dispatch, arity
//!   checks, NOAUTH, the checks by kind of command (flags, never names), the NVMe reads begun
//!   before a command and `COMMAND` all come from;
//! - [`command_info`]: COMMAND's replies (INFO, DOCS, LIST, GETKEYS, GETKEYSANDFLAGS) and the
//!   key specs followed as Redis follows them; [`command_specs`]: Redis 7.0.15's description of
//!   every command, generated from its `src/commands/*.json` by `scripts/gen-command-specs`;
//! - [`dispatch`]: running one command: the checks before it, the database byte of its keys,
//!   its handler, and what follows (the write stream, watchers and blocked clients, keyspace
//!   events published); it hands handlers the runners for other commands (`Ctx::execute`,
//!   `Ctx::run_queued`: a script's `redis.call`, EXEC's queue);
//! - [`commands`]: the entry for callers outside the crate (`execute`, the state types);
//! - [`store_options`]: the store as the server serves it, from `cxltier serve`'s store flags;
//! - [`metrics`]: the Prometheus exposition (`--metrics-addr`): tiers, hits and misses,
//!   commands and their latency histogram, clients, NVMe I/O, memory; published by the loop at
//!   most once a second and within 1% of its time;
//! - [`server`]: the single-threaded event loop with batching, NVMe prefetch and group commit.

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod acl;
pub mod acl_command;
pub mod admin;
pub mod arg_line;
pub mod args;
pub mod bitops;
pub mod client;
pub mod command;
pub mod command_info;
pub mod command_spec;
pub mod command_specs;
pub mod commands;
pub mod config;
pub mod config_file;
pub mod config_param;
pub mod config_specs;
pub mod connection;
pub mod context;
pub mod cursors;
pub mod db;
pub mod debug;
pub mod digest;
pub mod dispatch;
pub mod encoding;
pub mod error_stats;
pub mod errors;
pub mod functions;
pub mod geo;
pub mod glob;
pub mod hash;
pub mod hash_layout;
pub mod hyperloglog;
pub mod info;
pub mod keyspace;
pub mod knobs;
pub mod latency;
pub mod limits;
pub mod list;
pub mod lua;
pub mod memory;
pub mod metrics;
pub mod migrate;
pub mod monitor;
pub mod notify;
pub mod numbers;
pub mod pubsub;
pub mod quarantine;
pub mod ratelog;
pub mod rdb;
pub mod replication;
pub(crate) mod stream_layout;
pub use cxltier_resp as resp;
pub mod scripting;
pub mod server;
pub mod set;
pub mod slowlog;
pub mod store_options;
pub mod stream;
pub mod strings;
pub mod subscriptions;
pub mod table;
#[cfg(test)]
mod testdb;
pub mod tracking;
pub mod transaction;
pub mod version;
pub mod write_stream;
pub mod zset;

pub use limits::{parse_memory, OutputBufferLimit};
pub use ratelog::LogSink;
pub use server::{
    bind, parse_bind, parse_query_buffer_limit, serve, serve_on, ServerConfig, ServerError,
    DEFAULT_QUERY_BUFFER_LIMIT,
};
pub use store_options::StoreOptions;
