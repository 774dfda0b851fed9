//! A RESP2 (Redis protocol) server over the cxltier tiered object store.
//!
//! - [`resp`]: the request parser (multibulk and inline; never panics) and reply writers;
//! - [`commands`]: Redis semantics of each command over [`cxltier_store::Store`], including
//!   `SCANRANGE` (the ordered range scan of YCSB workload E) and `INFO tiers`;
//! - [`db`]: the databases (`SELECT`, `SWAPDB`): the logical → physical map kept in the store;
//! - [`config`]: `CONFIG GET|SET|RESETSTAT|REWRITE`, and Redis's encoding knobs, stored;
//! - [`geo`]: the GEO commands over sorted sets whose scores are 52-bit geohashes;
//! - [`glob`]: Redis's glob patterns, matched in bounded time (CONFIG GET);
//! - [`hash`]: how a hash's fields are encoded in one stored value;
//! - [`keyspace`]: SCAN (cursors kept by the server), KEYS, RANDOMKEY, RENAME, COPY, TOUCH,
//!   EXPIRETIME, DUMP and RESTORE (atomic: a failed RESTORE leaves the keyspace as it was);
//! - [`metrics`]: the Prometheus exposition (`--metrics-addr`): tiers, hits and misses,
//!   commands and their latency histogram, clients, NVMe I/O, memory; published by the loop at
//!   most once a second and within 1% of its time;
//! - [`notify`]: keyspace notifications (`notify-keyspace-events`): the events commands
//!   announce, published on `__keyspace@<db>__:` and `__keyevent@<db>__:` channels;
//! - [`pubsub`]: SUBSCRIBE, PSUBSCRIBE, PUBLISH, PUBSUB, and the messages for other connections;
//! - [`quarantine`]: follows the quarantine file of `cxltier ras --watch --quarantine` and hands
//!   new poisoned ranges to the store (`INFO poison`);
//! - [`ratelog`]: log lines of a repeating failure held back to one per interval, counted;
//! - [`rdb`]: the RDB snapshot (version 10, Redis's CRC64) a replica loads at SYNC/PSYNC, the
//!   decoder of RDB values (every encoding Redis 7.0 loads, validated) and DUMP/RESTORE payloads
//!   in Redis's format;
//! - [`replication`]: SYNC, PSYNC, REPLCONF, ROLE, WAIT, and the write stream as Redis 7.0
//!   propagates it (what changed, rewritten, in MULTI/EXEC units, after SELECT);
//! - [`table`]: the command table (name, arity, flags, keys, handler) that dispatch, arity
//!   checks, NOAUTH, the NVMe reads begun before a command and `COMMAND` all come from;
//! - [`strings`]: APPEND, GETRANGE, SETRANGE, GETEX, INCRBYFLOAT, the bit operations and the
//!   rest of the string commands;
//! - [`scripting`]: EVAL, EVALSHA, SCRIPT: Lua 5.1 scripts with Redis 7.0's `redis` library,
//!   conversions and errors, `cjson` and `bit`, and the busy mode while a script runs long;
//! - [`server`]: the single-threaded event loop with batching, NVMe prefetch and group commit.

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod commands;
pub mod config;
pub mod db;
pub mod geo;
pub mod glob;
pub mod hash;
pub mod keyspace;
pub mod list;
pub mod metrics;
pub mod notify;
pub mod pubsub;
pub mod quarantine;
pub mod ratelog;
pub mod rdb;
pub mod replication;
pub use cxltier_resp as resp;
pub mod scripting;
pub mod server;
pub mod set;
pub mod strings;
pub mod table;
pub mod zset;

pub use ratelog::LogSink;
pub use server::{
    bind, parse_memory, serve, serve_on, OutputBufferLimit, ServerConfig, ServerError,
    DEFAULT_QUERY_BUFFER_LIMIT,
};
