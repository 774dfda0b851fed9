//! The command table, Redis's design: one entry per command with its name, arity, flags, key
//! positions and handler ([`crate::command::Command`]). Dispatch, arity checks, NOAUTH, the keys
//! whose NVMe reads begin before a command runs, and the `COMMAND` replies all come from it;
//! there is no other list. It names every handler, so it sits above them: the handlers that look
//! commands up are handed it as [`crate::context::Ctx::commands`].
//!
//! The table is sorted by name; [`COMMANDS`] finds a command by one hash of its name in upper
//! case, with no allocation per command.

use crate::command::flag::*;
use crate::command::{busy, cmd, movable, redacted, Command, Commands};
use crate::keyspace as k;
use crate::strings as s;

const NOKEYS: (i32, i32, i32) = (0, 0, 0);
const KEY1: (i32, i32, i32) = (1, 1, 1);
const ALLKEYS: (i32, i32, i32) = (1, -1, 1);

/// A key count argument: a whole number of at least `least`, its keys all present.
fn counted_keys(args: &[&[u8]], at: usize, least: i64) -> Option<Vec<usize>> {
    let n: i64 = std::str::from_utf8(args.get(at)?).ok()?.parse().ok()?;
    if n < least || n > (args.len() - at - 1) as i64 {
        return None;
    }
    Some((at + 1..at + 1 + n as usize).collect())
}

/// MIGRATE's keys: the key argument (the empty key when KEYS is given), then those after KEYS.
fn migrate_keys(args: &[&[u8]]) -> Option<Vec<usize>> {
    let mut keys = vec![3];
    // KEYS may only follow the options; an AUTH password or AUTH2 name named KEYS is a value.
    let mut j = 6;
    while j < args.len() {
        match args[j].to_ascii_uppercase().as_slice() {
            b"AUTH" => j += 1,
            b"AUTH2" => j += 2,
            b"KEYS" => {
                keys.extend(j + 1..args.len());
                break;
            }
            _ => {}
        }
        j += 1;
    }
    Some(keys)
}

/// `CMD numkeys key ...` (ZUNION, ZINTER, ZDIFF, ZINTERCARD, SINTERCARD, LMPOP, ZMPOP).
fn numkeys_at_1(args: &[&[u8]]) -> Option<Vec<usize>> {
    counted_keys(args, 1, 1)
}

/// `CMD timeout numkeys key ...` (BLMPOP, BZMPOP).
fn numkeys_at_2(args: &[&[u8]]) -> Option<Vec<usize>> {
    counted_keys(args, 2, 1)
}

/// `CMD destination numkeys key ...` (ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE).
fn store_and_numkeys(args: &[&[u8]]) -> Option<Vec<usize>> {
    let mut keys = vec![1];
    keys.extend(counted_keys(args, 2, 1)?);
    Some(keys)
}

/// `EVAL script numkeys key ... arg ...` and the like: no key at all is fine.
fn script_keys(args: &[&[u8]]) -> Option<Vec<usize>> {
    counted_keys(args, 2, 0)
}

/// SORT's key and its STORE destination (the last one given).
fn sort_keys(args: &[&[u8]]) -> Option<Vec<usize>> {
    let mut store = None;
    let mut i = 2;
    while i < args.len() {
        if args[i].eq_ignore_ascii_case(b"STORE") && i + 1 < args.len() {
            store = Some(i + 1);
            i += 1;
        }
        i += 1;
    }
    let mut keys = vec![1];
    keys.extend(store);
    Some(keys)
}

/// MEMORY USAGE's key; MEMORY's other subcommands take none.
fn memory_keys(args: &[&[u8]]) -> Option<Vec<usize>> {
    (args.len() >= 3 && args[1].eq_ignore_ascii_case(b"USAGE")).then(|| vec![2])
}

/// XGROUP's key: the one its subcommands that take a key name (all but HELP).
fn xgroup_keys(args: &[&[u8]]) -> Option<Vec<usize>> {
    let takes_key = [
        &b"CREATE"[..],
        b"SETID",
        b"DESTROY",
        b"CREATECONSUMER",
        b"DELCONSUMER",
    ]
    .iter()
    .any(|s| args.get(1).is_some_and(|a| a.eq_ignore_ascii_case(s)));
    (takes_key && args.len() >= 3).then(|| vec![2])
}

/// XINFO's key: the one of CONSUMERS, GROUPS and STREAM.
fn xinfo_keys(args: &[&[u8]]) -> Option<Vec<usize>> {
    let takes_key = [&b"CONSUMERS"[..], b"GROUPS", b"STREAM"]
        .iter()
        .any(|s| args.get(1).is_some_and(|a| a.eq_ignore_ascii_case(s)));
    (takes_key && args.len() >= 3).then(|| vec![2])
}

/// XREAD and XREADGROUP's keys, as Redis's `xreadGetKeys` finds them: the first half of what
/// follows STREAMS, past the options before it; none when that is no even number.
fn xread_keys(args: &[&[u8]]) -> Option<Vec<usize>> {
    let mut i = 1;
    let mut streams = None;
    while i < args.len() {
        let a = args[i];
        if a.eq_ignore_ascii_case(b"BLOCK") || a.eq_ignore_ascii_case(b"COUNT") {
            i += 1;
        } else if a.eq_ignore_ascii_case(b"GROUP") {
            i += 2;
        } else if a.eq_ignore_ascii_case(b"NOACK") {
        } else if a.eq_ignore_ascii_case(b"STREAMS") {
            streams = Some(i);
            break;
        } else {
            break;
        }
        i += 1;
    }
    let at = streams?;
    let n = args.len() - at - 1;
    if n == 0 || n % 2 != 0 {
        return None;
    }
    Some((at + 1..at + 1 + n / 2).collect())
}

/// Every command served, sorted by name (a test checks).
#[rustfmt::skip]
pub static TABLE: &[Command] = &[
    redacted(cmd("ACL", -2, NOSCRIPT | LOADING | STALE, NOKEYS, crate::acl_command::acl, "server", "A container for Access List Control commands."), crate::slowlog::redact_acl),
    cmd("APPEND", 3, WRITE | DENYOOM | FAST | VALUES, KEY1, s::append, "string", "Appends a string to the value of a key. Creates the key if it doesn't exist."),
    redacted(busy(cmd("AUTH", -2, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY, NOKEYS, crate::connection::auth, "connection", "Authenticates the connection."), crate::connection::auth_while_busy), crate::slowlog::redact_auth),
    cmd("BGREWRITEAOF", 1, ADMIN | NOSCRIPT | NO_MULTI, NOKEYS, crate::admin::bgrewriteaof, "server", "Asynchronously rewrites the append-only file to disk (the NVMe log is cleaned as it runs: nothing to do)."),
    cmd("BGSAVE", -1, ADMIN | NOSCRIPT | NO_MULTI, NOKEYS, crate::admin::bgsave, "server", "Makes everything written durable now (as SAVE)."),
    cmd("BITCOUNT", -2, READONLY | VALUES, KEY1, s::bitcount, "bitmap", "Counts the number of set bits (population counting) in a string."),
    cmd("BITFIELD", -2, WRITE | DENYOOM | VALUES, KEY1, crate::bitops::bitfield, "bitmap", "Perform arbitrary bitfield integer operations on strings"),
    cmd("BITFIELD_RO", -2, READONLY | FAST | VALUES, KEY1, crate::bitops::bitfield_ro, "bitmap", "Perform arbitrary bitfield integer operations on strings. Read-only variant of BITFIELD"),
    cmd("BITOP", -4, WRITE | DENYOOM | VALUES, (2, -1, 1), crate::bitops::bitop, "bitmap", "Perform bitwise operations between strings"),
    cmd("BITPOS", -3, READONLY | VALUES, KEY1, s::bitpos, "bitmap", "Finds the first set (1) or clear (0) bit in a string."),
    cmd("BLMOVE", 6, WRITE | DENYOOM | NOSCRIPT | BLOCKING | VALUES, (1, 2, 1), crate::list::blmove, "list", "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise. Deletes the list if the last element was moved."),
    movable(cmd("BLMPOP", -5, WRITE | BLOCKING | MOVABLEKEYS, NOKEYS, crate::list::blmpop, "list", "Pops the first element from one of multiple lists. Blocks until an element is available otherwise. Deletes the list if the last element was popped."), numkeys_at_2),
    cmd("BLPOP", -3, WRITE | NOSCRIPT | BLOCKING | VALUES, (1, -2, 1), crate::list::blpop, "list", "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped."),
    cmd("BRPOP", -3, WRITE | NOSCRIPT | BLOCKING | VALUES, (1, -2, 1), crate::list::brpop, "list", "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped."),
    cmd("BRPOPLPUSH", 4, WRITE | DENYOOM | NOSCRIPT | BLOCKING | VALUES, (1, 2, 1), crate::list::brpoplpush, "list", "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise. Deletes the list if the last element was popped."),
    movable(cmd("BZMPOP", -5, WRITE | BLOCKING | MOVABLEKEYS, NOKEYS, crate::zset::bzmpop, "sorted-set", "Removes and returns a member by score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped."), numkeys_at_2),
    cmd("BZPOPMAX", -3, WRITE | NOSCRIPT | FAST | BLOCKING | VALUES, (1, -2, 1), crate::zset::bzpopmax, "sorted-set", "Removes and returns the member with the highest score from one or more sorted sets. Blocks until a member available otherwise. Deletes the sorted set if the last element was popped."),
    cmd("BZPOPMIN", -3, WRITE | NOSCRIPT | FAST | BLOCKING | VALUES, (1, -2, 1), crate::zset::bzpopmin, "sorted-set", "Removes and returns the member with the lowest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped."),
    cmd("CLIENT", -2, NOSCRIPT | LOADING | STALE | KEEPS_CACHING, NOKEYS, crate::client::client, "connection", "A container for client connection commands."),
    cmd("CLUSTER", -2, 0, NOKEYS, crate::replication::cluster, "cluster", "Answers as Redis without cluster support: cxltier serve is a standalone server."),
    cmd("COMMAND", -1, LOADING | STALE, NOKEYS, crate::command_info::command, "server", "Returns detailed information about all commands."),
    redacted(cmd("CONFIG", -2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, crate::config::config, "server", "A container for server configuration commands."), crate::slowlog::redact_config),
    cmd("COPY", -3, WRITE | DENYOOM | VALUES, (1, 2, 1), k::copy, "generic", "Copies the value of a key to a new key."),
    cmd("DBSIZE", 1, READONLY | FAST, NOKEYS, crate::admin::dbsize, "server", "Returns the number of keys in the database."),
    cmd("DEBUG", -2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, crate::debug::debug, "server", "A container for debugging commands."),
    cmd("DECR", 2, WRITE | DENYOOM | FAST | VALUES, KEY1, s::decr, "string", "Decrements the integer value of a key by one."),
    cmd("DECRBY", 3, WRITE | DENYOOM | FAST | VALUES, KEY1, s::decrby, "string", "Decrements a number from the integer value of a key."),
    cmd("DEL", -2, WRITE, ALLKEYS, k::del, "generic", "Deletes one or more keys."),
    busy(cmd("DISCARD", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY | TX_CONTROL | TX_END | TX_CONTROL_WHILE_BUSY, NOKEYS, crate::transaction::discard, "transactions", "Discards a transaction."), crate::transaction::discard_while_busy),
    cmd("DUMP", 2, READONLY | VALUES, KEY1, k::dump, "generic", "Returns a serialized representation of the value stored at a key."),
    cmd("ECHO", 2, FAST, NOKEYS, crate::connection::echo, "connection", "Returns the given string."),
    movable(cmd("EVAL", -3, SCRIPTS | NOSCRIPT | MOVABLEKEYS | VALUES | MAY_REPLICATE | RUNS_SCRIPT, NOKEYS, crate::scripting::eval, "scripting", "Executes a server-side Lua script."), script_keys),
    movable(cmd("EVALSHA", -3, SCRIPTS | NOSCRIPT | MOVABLEKEYS | VALUES | MAY_REPLICATE | RUNS_CACHED_SCRIPT, NOKEYS, crate::scripting::evalsha, "scripting", "Executes a server-side Lua script by SHA1 digest."), script_keys),
    movable(cmd("EVALSHA_RO", -3, SCRIPTS | NOSCRIPT | READONLY | MOVABLEKEYS | VALUES | RUNS_CACHED_SCRIPT, NOKEYS, crate::scripting::evalsha_ro, "scripting", "Executes a read-only server-side Lua script by SHA1 digest."), script_keys),
    movable(cmd("EVAL_RO", -3, SCRIPTS | NOSCRIPT | READONLY | MOVABLEKEYS | VALUES | RUNS_SCRIPT, NOKEYS, crate::scripting::eval_ro, "scripting", "Executes a read-only server-side Lua script."), script_keys),
    cmd("EXEC", 1, SCRIPTS | NOSCRIPT | LOADING | STALE | TX_CONTROL | TX_END | TX_EXEC | TX_CONTROL_WHILE_BUSY | SKIP_SLOWLOG, NOKEYS, crate::transaction::exec, "transactions", "Executes all commands in a transaction."),
    cmd("EXISTS", -2, READONLY | FAST, ALLKEYS, k::exists, "generic", "Determines whether one or more keys exist."),
    cmd("EXPIRE", -3, WRITE | FAST | VALUES, KEY1, k::expire, "generic", "Sets the expiration time of a key in seconds."),
    cmd("EXPIREAT", -3, WRITE | FAST | VALUES, KEY1, k::expireat, "generic", "Sets the expiration time of a key to a Unix timestamp."),
    cmd("EXPIRETIME", 2, READONLY | FAST, KEY1, k::expiretime, "generic", "Returns the expiration time of a key as a Unix timestamp."),
    movable(cmd("FCALL", -3, SCRIPTS | NOSCRIPT | MOVABLEKEYS | VALUES | MAY_REPLICATE | CALLS_FUNCTION, NOKEYS, crate::scripting::fcall, "scripting", "Invokes a function."), script_keys),
    movable(cmd("FCALL_RO", -3, SCRIPTS | NOSCRIPT | READONLY | MOVABLEKEYS | VALUES | CALLS_FUNCTION, NOKEYS, crate::scripting::fcall_ro, "scripting", "Invokes a read-only function."), script_keys),
    cmd("FLUSHALL", -1, WRITE | FLUSHES_ALL, NOKEYS, crate::admin::flushall, "server", "Removes all keys from all databases."),
    cmd("FLUSHDB", -1, WRITE | FLUSHES_DB, NOKEYS, crate::admin::flushall, "server", "Remove all keys from the current database."),
    busy(cmd("FUNCTION", -2, NOSCRIPT, NOKEYS, crate::scripting::function, "scripting", "A container for function commands."), crate::scripting::function_while_busy),
    cmd("GEOADD", -5, WRITE | DENYOOM | VALUES, KEY1, crate::geo::geoadd, "geo", "Adds one or more members to a geospatial index. The key is created if it doesn't exist."),
    cmd("GEODIST", -4, READONLY | VALUES, KEY1, crate::geo::geodist, "geo", "Returns the distance between two members of a geospatial index."),
    cmd("GEOHASH", -2, READONLY | VALUES, KEY1, crate::geo::geohash, "geo", "Returns members from a geospatial index as geohash strings."),
    cmd("GEOPOS", -2, READONLY | VALUES, KEY1, crate::geo::geopos, "geo", "Returns the longitude and latitude of members from a geospatial index."),
    movable(cmd("GEORADIUS", -6, WRITE | DENYOOM | MOVABLEKEYS | VALUES, KEY1, crate::geo::georadius, "geo", "Queries a geospatial index for members within a distance from a coordinate, optionally stores the result."), crate::geo::georadius_keys),
    movable(cmd("GEORADIUSBYMEMBER", -5, WRITE | DENYOOM | MOVABLEKEYS | VALUES, KEY1, crate::geo::georadiusbymember, "geo", "Queries a geospatial index for members within a distance from a member, optionally stores the result."), crate::geo::georadiusbymember_keys),
    cmd("GEORADIUSBYMEMBER_RO", -5, READONLY | VALUES, KEY1, crate::geo::georadiusbymember_ro, "geo", "Returns members from a geospatial index that are within a distance from a member."),
    cmd("GEORADIUS_RO", -6, READONLY | VALUES, KEY1, crate::geo::georadius_ro, "geo", "Returns members from a geospatial index that are within a distance from a coordinate."),
    cmd("GEOSEARCH", -7, READONLY | VALUES, KEY1, crate::geo::geosearch, "geo", "Queries a geospatial index for members inside an area of a box or a circle."),
    cmd("GEOSEARCHSTORE", -8, WRITE | DENYOOM | VALUES, (1, 2, 1), crate::geo::geosearchstore, "geo", "Queries a geospatial index for members inside an area of a box or a circle, optionally stores the result."),
    cmd("GET", 2, READONLY | FAST | VALUES, KEY1, s::get, "string", "Returns the string value of a key."),
    cmd("GETBIT", 3, READONLY | FAST | VALUES, KEY1, s::getbit, "bitmap", "Returns a bit value by offset."),
    cmd("GETDEL", 2, WRITE | FAST | VALUES, KEY1, s::getdel, "string", "Returns the string value of a key after deleting the key."),
    cmd("GETEX", -2, WRITE | FAST | VALUES, KEY1, s::getex, "string", "Returns the string value of a key after setting its expiration time."),
    cmd("GETRANGE", 4, READONLY | VALUES, KEY1, s::getrange, "string", "Returns a substring of the string stored at a key."),
    cmd("GETSET", 3, WRITE | DENYOOM | FAST | VALUES, KEY1, s::getset, "string", "Returns the previous string value of a key after setting it to a new value."),
    cmd("HDEL", -3, WRITE | FAST | VALUES, KEY1, crate::hash::hdel, "hash", "Deletes one or more fields and their values from a hash."),
    redacted(busy(cmd("HELLO", -1, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY, NOKEYS, crate::connection::hello, "connection", "Handshakes with the Redis server."), crate::connection::hello_while_busy), crate::slowlog::redact_hello),
    cmd("HEXISTS", 3, READONLY | FAST | VALUES, KEY1, crate::hash::hexists, "hash", "Determines whether a field exists in a hash."),
    cmd("HGET", 3, READONLY | FAST | VALUES, KEY1, crate::hash::hget, "hash", "Returns the value of a field in a hash."),
    cmd("HGETALL", 2, READONLY | VALUES, KEY1, crate::hash::hgetall, "hash", "Returns all fields and values in a hash."),
    cmd("HINCRBY", 4, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::hash::hincrby, "hash", "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist."),
    cmd("HINCRBYFLOAT", 4, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::hash::hincrbyfloat, "hash", "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist."),
    cmd("HKEYS", 2, READONLY | VALUES, KEY1, crate::hash::hkeys, "hash", "Returns all fields in a hash."),
    cmd("HLEN", 2, READONLY | FAST | VALUES, KEY1, crate::hash::hlen, "hash", "Returns the number of fields in a hash."),
    cmd("HMGET", -3, READONLY | FAST | VALUES, KEY1, crate::hash::hmget, "hash", "Returns the values of all fields in a hash."),
    cmd("HMSET", -4, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::hash::hmset, "hash", "Sets the values of multiple fields."),
    cmd("HRANDFIELD", -2, READONLY | VALUES, KEY1, crate::hash::hrandfield, "hash", "Returns one or more random fields from a hash."),
    cmd("HSCAN", -3, READONLY | VALUES, KEY1, crate::hash::hscan, "hash", "Iterates over fields and values of a hash."),
    cmd("HSET", -4, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::hash::hset, "hash", "Creates or modifies the value of a field in a hash."),
    cmd("HSETNX", 4, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::hash::hsetnx, "hash", "Sets the value of a field in a hash only when the field doesn't exist."),
    cmd("HSTRLEN", 3, READONLY | FAST | VALUES, KEY1, crate::hash::hstrlen, "hash", "Returns the length of the value of a field."),
    cmd("HVALS", 2, READONLY | VALUES, KEY1, crate::hash::hvals, "hash", "Returns all values in a hash."),
    cmd("INCR", 2, WRITE | DENYOOM | FAST | VALUES, KEY1, s::incr, "string", "Increments the integer value of a key by one."),
    cmd("INCRBY", 3, WRITE | DENYOOM | FAST | VALUES, KEY1, s::incrby, "string", "Increments the integer value of a key by a number."),
    cmd("INCRBYFLOAT", 3, WRITE | DENYOOM | FAST | VALUES, KEY1, s::incrbyfloat, "string", "Increment the floating point value of a key by a number."),
    cmd("INFO", -1, LOADING | STALE, NOKEYS, crate::info::info, "server", "Returns information and statistics about the server."),
    cmd("KEYS", 2, READONLY | TOUCHES_ARBITRARY_KEYS, NOKEYS, k::keys, "generic", "Returns all key names that match a pattern."),
    cmd("LASTSAVE", 1, LOADING | STALE | FAST, NOKEYS, crate::admin::lastsave, "server", "Returns the Unix timestamp of the last SAVE or BGSAVE (the start before any)."),
    cmd("LATENCY", -2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, crate::admin::latency, "server", "A container for latency diagnostics commands."),
    cmd("LCS", -3, READONLY | VALUES, (1, 2, 1), s::lcs, "string", "Finds the longest common substring."),
    cmd("LINDEX", 3, READONLY | VALUES, KEY1, crate::list::lindex, "list", "Returns an element from a list by its index."),
    cmd("LINSERT", 5, WRITE | DENYOOM | VALUES, KEY1, crate::list::linsert, "list", "Inserts an element before or after another element in a list."),
    cmd("LLEN", 2, READONLY | FAST | VALUES, KEY1, crate::list::llen, "list", "Returns the length of a list."),
    cmd("LMOVE", 5, WRITE | DENYOOM | VALUES, (1, 2, 1), crate::list::lmove, "list", "Returns an element after popping it from one list and pushing it to another."),
    movable(cmd("LMPOP", -4, WRITE | MOVABLEKEYS, NOKEYS, crate::list::lmpop, "list", "Returns multiple elements from a list after removing them. Deletes the list if the last element was popped."), numkeys_at_1),
    cmd("LPOP", -2, WRITE | FAST | VALUES, KEY1, crate::list::lpop, "list", "Returns the first elements in a list after removing it."),
    cmd("LPOS", -3, READONLY | VALUES, KEY1, crate::list::lpos, "list", "Returns the index of matching elements in a list."),
    cmd("LPUSH", -3, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::list::lpush, "list", "Prepends one or more elements to a list."),
    cmd("LPUSHX", -3, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::list::lpushx, "list", "Prepends one or more elements to a list only when the list exists."),
    cmd("LRANGE", 4, READONLY | VALUES, KEY1, crate::list::lrange, "list", "Returns a range of elements from a list."),
    cmd("LREM", 4, WRITE | VALUES, KEY1, crate::list::lrem, "list", "Removes elements from a list."),
    cmd("LSET", 4, WRITE | DENYOOM | VALUES, KEY1, crate::list::lset, "list", "Sets the value of an element in a list by its index."),
    cmd("LTRIM", 4, WRITE | VALUES, KEY1, crate::list::ltrim, "list", "Removes elements from both ends a list."),
    movable(cmd("MEMORY", -2, READONLY, NOKEYS, crate::admin::memory, "server", "A container for memory diagnostics commands."), memory_keys),
    cmd("MGET", -2, READONLY | FAST | VALUES, ALLKEYS, s::mget, "string", "Atomically returns the string values of one or more keys."),
    redacted(movable(cmd("MIGRATE", -6, WRITE | MOVABLEKEYS, NOKEYS, crate::migrate::migrate, "generic", "Atomically transfers a key from one Redis instance to another."), migrate_keys), crate::migrate::redact),
    cmd("MONITOR", 1, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, crate::admin::monitor, "server", "Listens for all requests received by the server in real-time."),
    cmd("MOVE", 3, WRITE | FAST, KEY1, k::move_key, "generic", "Moves a key to another database."),
    cmd("MSET", -3, WRITE | DENYOOM, (1, -1, 2), s::mset, "string", "Atomically creates or modifies the string values of one or more keys."),
    cmd("MSETNX", -3, WRITE | DENYOOM, (1, -1, 2), s::msetnx, "string", "Atomically modifies the string values of one or more keys only when all keys don't exist."),
    busy(cmd("MULTI", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY | TX_CONTROL | TX_CONTROL_WHILE_BUSY, NOKEYS, crate::transaction::multi, "transactions", "Starts a transaction."), crate::transaction::multi_while_busy),
    cmd("OBJECT", -2, READONLY | NO_KEYMISS, NOKEYS, k::object, "generic", "A container for object introspection commands."),
    cmd("PERSIST", 2, WRITE | FAST | VALUES, KEY1, k::persist, "generic", "Removes the expiration time of a key."),
    cmd("PEXPIRE", -3, WRITE | FAST | VALUES, KEY1, k::pexpire, "generic", "Sets the expiration time of a key in milliseconds."),
    cmd("PEXPIREAT", -3, WRITE | FAST | VALUES, KEY1, k::pexpireat, "generic", "Sets the expiration time of a key to a Unix milliseconds timestamp."),
    cmd("PEXPIRETIME", 2, READONLY | FAST, KEY1, k::pexpiretime, "generic", "Returns the expiration time of a key as a Unix milliseconds timestamp."),
    cmd("PFADD", -2, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::hyperloglog::pfadd, "hyperloglog", "Adds the specified elements to the specified HyperLogLog."),
    cmd("PFCOUNT", -2, READONLY | VALUES | MAY_REPLICATE, ALLKEYS, crate::hyperloglog::pfcount, "hyperloglog", "Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s)."),
    cmd("PFDEBUG", 3, WRITE | DENYOOM | ADMIN | VALUES, (2, 2, 1), crate::hyperloglog::pfdebug, "hyperloglog", "Internal commands for debugging HyperLogLog values"),
    cmd("PFMERGE", -2, WRITE | DENYOOM | VALUES, ALLKEYS, crate::hyperloglog::pfmerge, "hyperloglog", "Merge N different HyperLogLogs into a single one."),
    cmd("PFSELFTEST", 1, ADMIN, NOKEYS, crate::hyperloglog::pfselftest, "hyperloglog", "An internal command for testing HyperLogLog values"),
    cmd("PING", -1, FAST | ALLOWED_IN_RESP2_SUBSCRIBED, NOKEYS, crate::connection::ping, "connection", "Returns the server's liveliness response."),
    cmd("PSETEX", 4, WRITE | DENYOOM, KEY1, s::psetex, "string", "Sets both string value and expiration time in milliseconds of a key."),
    cmd("PSUBSCRIBE", -2, PUBSUB | CHANNEL_PATTERNS | NOSCRIPT | LOADING | STALE | ALLOWED_IN_RESP2_SUBSCRIBED, NOKEYS, crate::pubsub::psubscribe, "pubsub", "Listens for messages published to channels that match one or more patterns."),
    cmd("PSYNC", -3, ADMIN | NOSCRIPT | NO_MULTI, NOKEYS, crate::replication::psync, "server", "An internal command used in replication: answers FULLRESYNC, then the snapshot and the write stream."),
    cmd("PTTL", 2, READONLY | FAST, KEY1, k::pttl, "generic", "Returns the expiration time in milliseconds of a key."),
    cmd("PUBLISH", 3, PUBSUB | CHANNEL_PUBLISH | LOADING | STALE | FAST | MAY_REPLICATE, NOKEYS, crate::pubsub::publish, "pubsub", "Posts a message to a channel."),
    cmd("PUBSUB", -2, LOADING | STALE, NOKEYS, crate::pubsub::pubsub, "pubsub", "CHANNELS, NUMSUB, NUMPAT, SHARDCHANNELS, SHARDNUMSUB."),
    cmd("PUNSUBSCRIBE", -1, PUBSUB | NOSCRIPT | LOADING | STALE | ALLOWED_IN_RESP2_SUBSCRIBED, NOKEYS, crate::pubsub::punsubscribe, "pubsub", "Stops listening to messages published to channels that match one or more patterns."),
    busy(cmd("QUIT", -1, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY | ALLOWED_IN_RESP2_SUBSCRIBED | TX_CONTROL | TX_END | TX_CONTROL_WHILE_BUSY, NOKEYS, crate::connection::quit, "connection", "Closes the connection."), crate::connection::quit_while_busy),
    cmd("RANDOMKEY", 1, READONLY | TOUCHES_ARBITRARY_KEYS, NOKEYS, k::randomkey, "generic", "Returns a random key name from the database."),
    cmd("RENAME", 3, WRITE | VALUES, (1, 2, 1), k::rename, "generic", "Renames a key and overwrites the destination."),
    cmd("RENAMENX", 3, WRITE | FAST | VALUES, (1, 2, 1), k::renamenx, "generic", "Renames a key only when the target key name doesn't exist."),
    busy(cmd("REPLCONF", -1, ADMIN | NOSCRIPT | LOADING | STALE | ALLOW_BUSY, NOKEYS, crate::replication::replconf, "server", "An internal command for configuring the replication stream."), crate::replication::replconf_while_busy),
    cmd("REPLICAOF", 3, ADMIN | NOSCRIPT | STALE, NOKEYS, crate::replication::replicaof, "server", "Configures a server as replica of another: refused, cxltier serve is a master only."),
    cmd("RESET", 1, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY | ALLOWED_IN_RESP2_SUBSCRIBED | TX_CONTROL | TX_END, NOKEYS, crate::connection::reset, "connection", "Resets the connection."),
    cmd("RESTORE", -4, WRITE | DENYOOM, KEY1, k::restore, "generic", "Creates a key from the serialized representation of a value."),
    cmd("ROLE", 1, NOSCRIPT | LOADING | STALE | FAST, NOKEYS, crate::replication::role, "server", "Returns the replication role: master, its offset and its replicas."),
    cmd("RPOP", -2, WRITE | FAST | VALUES, KEY1, crate::list::rpop, "list", "Returns and removes the last elements of a list."),
    cmd("RPOPLPUSH", 3, WRITE | DENYOOM | VALUES, (1, 2, 1), crate::list::rpoplpush, "list", "Returns the last element of a list after removing and pushing it to another list."),
    cmd("RPUSH", -3, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::list::rpush, "list", "Appends one or more elements to a list."),
    cmd("RPUSHX", -3, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::list::rpushx, "list", "Appends an element to a list only when the list exists."),
    cmd("SADD", -3, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::set::sadd, "set", "Adds one or more members to a set. Creates the key if it doesn't exist."),
    cmd("SAVE", 1, ADMIN | NOSCRIPT | NO_MULTI, NOKEYS, crate::admin::save, "server", "Makes everything written durable now."),
    cmd("SCAN", -2, READONLY | TOUCHES_ARBITRARY_KEYS, NOKEYS, k::scan, "generic", "Iterates over the key names in the database."),
    cmd("SCANRANGE", 3, READONLY, NOKEYS, k::scanrange, "generic", "Returns up to count keys in byte order from the first key >= start, with their values (cxltier's own)."),
    cmd("SCARD", 2, READONLY | FAST | VALUES, KEY1, crate::set::scard, "set", "Returns the number of members in a set."),
    busy(cmd("SCRIPT", -2, NOSCRIPT, NOKEYS, crate::scripting::script, "scripting", "A container for Lua scripts management commands."), crate::scripting::script_while_busy),
    cmd("SDIFF", -2, READONLY | VALUES, ALLKEYS, crate::set::sdiff, "set", "Returns the difference of multiple sets."),
    cmd("SDIFFSTORE", -3, WRITE | DENYOOM | VALUES, ALLKEYS, crate::set::sdiffstore, "set", "Stores the difference of multiple sets in a key."),
    cmd("SELECT", 2, LOADING | STALE | FAST, NOKEYS, crate::connection::select, "connection", "Changes the selected database."),
    cmd("SET", -3, WRITE | DENYOOM | VALUES, KEY1, s::set, "string", "Sets the string value of a key, ignoring its type."),
    cmd("SETBIT", 4, WRITE | DENYOOM | VALUES, KEY1, s::setbit, "bitmap", "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist."),
    cmd("SETEX", 4, WRITE | DENYOOM, KEY1, s::setex, "string", "Sets the string value and expiration time of a key."),
    cmd("SETNX", 3, WRITE | DENYOOM | FAST, KEY1, s::setnx, "string", "Set the string value of a key only when the key doesn't exist."),
    cmd("SETRANGE", 4, WRITE | DENYOOM | VALUES, KEY1, s::setrange, "string", "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist."),
    busy(cmd("SHUTDOWN", -1, ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI | ALLOW_BUSY, NOKEYS, crate::admin::shutdown, "server", "Synchronously saves the database(s) to disk and shuts down the server."), crate::admin::shutdown_while_busy),
    cmd("SINTER", -2, READONLY | VALUES, ALLKEYS, crate::set::sinter, "set", "Returns the intersect of multiple sets."),
    movable(cmd("SINTERCARD", -3, READONLY | MOVABLEKEYS, NOKEYS, crate::set::sintercard, "set", "Returns the number of members of the intersect of multiple sets."), numkeys_at_1),
    cmd("SINTERSTORE", -3, WRITE | DENYOOM | VALUES, ALLKEYS, crate::set::sinterstore, "set", "Stores the intersect of multiple sets in a key."),
    cmd("SISMEMBER", 3, READONLY | FAST | VALUES, KEY1, crate::set::sismember, "set", "Determines whether a member belongs to a set."),
    cmd("SLAVEOF", 3, ADMIN | NOSCRIPT | STALE, NOKEYS, crate::replication::replicaof, "server", "Sets a Redis server as a replica of another, or promotes it to being a master: refused, cxltier serve is a master only."),
    cmd("SLOWLOG", -2, ADMIN | LOADING | STALE, NOKEYS, crate::admin::slowlog, "server", "A container for slow log commands."),
    cmd("SMEMBERS", 2, READONLY | VALUES, KEY1, crate::set::smembers, "set", "Returns all members of a set."),
    cmd("SMISMEMBER", -3, READONLY | FAST | VALUES, KEY1, crate::set::smismember, "set", "Determines whether multiple members belong to a set."),
    cmd("SMOVE", 4, WRITE | FAST | VALUES, (1, 2, 1), crate::set::smove, "set", "Moves a member from one set to another."),
    movable(cmd("SORT", -2, WRITE | DENYOOM | MOVABLEKEYS | VALUES, KEY1, k::sort, "generic", "Sorts the elements in a list, a set, or a sorted set, optionally storing the result."), sort_keys),
    movable(cmd("SORT_RO", -2, READONLY | MOVABLEKEYS | VALUES, KEY1, k::sort, "generic", "Returns the sorted elements of a list, a set, or a sorted set."), sort_keys),
    cmd("SPOP", -2, WRITE | FAST | VALUES, KEY1, crate::set::spop, "set", "Returns one or more random members from a set after removing them."),
    cmd("SPUBLISH", 3, PUBSUB | CHANNEL_PUBLISH | LOADING | STALE | FAST | MAY_REPLICATE, NOKEYS, crate::pubsub::spublish, "pubsub", "Post a message to a shard channel (one server: the shard channels are its own namespace)."),
    cmd("SRANDMEMBER", -2, READONLY | VALUES, KEY1, crate::set::srandmember, "set", "Get one or multiple random members from a set."),
    cmd("SREM", -3, WRITE | FAST | VALUES, KEY1, crate::set::srem, "set", "Removes one or more members from a set."),
    cmd("SSCAN", -3, READONLY | VALUES, KEY1, crate::set::sscan, "set", "Iterates over members of a set."),
    cmd("SSUBSCRIBE", -2, PUBSUB | CHANNELS_SUBSCRIBE | NOSCRIPT | LOADING | STALE | ALLOWED_IN_RESP2_SUBSCRIBED, NOKEYS, crate::pubsub::ssubscribe, "pubsub", "Listens for messages published to shard channels."),
    cmd("STRLEN", 2, READONLY | FAST | VALUES, KEY1, s::strlen, "string", "Returns the length of a string value."),
    cmd("SUBSCRIBE", -2, PUBSUB | CHANNELS_SUBSCRIBE | NOSCRIPT | LOADING | STALE | ALLOWED_IN_RESP2_SUBSCRIBED, NOKEYS, crate::pubsub::subscribe, "pubsub", "Listens for messages published to channels."),
    cmd("SUNION", -2, READONLY | VALUES, ALLKEYS, crate::set::sunion, "set", "Returns the union of multiple sets."),
    cmd("SUNIONSTORE", -3, WRITE | DENYOOM | VALUES, ALLKEYS, crate::set::sunionstore, "set", "Stores the union of multiple sets in a key."),
    cmd("SUNSUBSCRIBE", -1, PUBSUB | NOSCRIPT | LOADING | STALE | ALLOWED_IN_RESP2_SUBSCRIBED, NOKEYS, crate::pubsub::sunsubscribe, "pubsub", "Stops listening to messages posted to shard channels."),
    cmd("SWAPDB", 3, WRITE | FAST, NOKEYS, crate::admin::swapdb, "server", "Swaps two Redis databases."),
    cmd("SYNC", 1, ADMIN | NOSCRIPT | NO_MULTI, NOKEYS, crate::replication::sync, "server", "An internal command used in replication: the snapshot, then the write stream."),
    cmd("TIME", 1, LOADING | STALE | FAST, NOKEYS, crate::admin::time, "server", "Returns the server time."),
    cmd("TOUCH", -2, READONLY | FAST, ALLKEYS, k::touch, "generic", "Returns the number of existing keys out of those specified after updating the time they were last accessed."),
    cmd("TTL", 2, READONLY | FAST, KEY1, k::ttl, "generic", "Returns the expiration time in seconds of a key."),
    cmd("TYPE", 2, READONLY | FAST | VALUES, KEY1, k::type_, "generic", "Determines the type of value stored at a key."),
    cmd("UNLINK", -2, WRITE | FAST, ALLKEYS, k::del, "generic", "Asynchronously deletes one or more keys."),
    cmd("UNSUBSCRIBE", -1, PUBSUB | NOSCRIPT | LOADING | STALE | ALLOWED_IN_RESP2_SUBSCRIBED, NOKEYS, crate::pubsub::unsubscribe, "pubsub", "Stops listening to messages posted to channels."),
    cmd("UNWATCH", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, NOKEYS, crate::transaction::unwatch, "transactions", "Forgets about watched keys of a transaction."),
    cmd("WAIT", 3, NOSCRIPT, NOKEYS, crate::replication::wait, "generic", "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed."),
    cmd("WATCH", -2, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY | VALUES | TX_CONTROL, ALLKEYS, crate::transaction::watch, "transactions", "Monitors changes to keys to determine the execution of a transaction."),
    cmd("XACK", -4, WRITE | FAST | VALUES, KEY1, crate::stream::xack, "stream", "Returns the number of messages that were successfully acknowledged by the consumer group member of a stream."),
    cmd("XADD", -5, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::stream::xadd, "stream", "Appends a new message to a stream. Creates the key if it doesn't exist."),
    cmd("XAUTOCLAIM", -6, WRITE | FAST | VALUES, KEY1, crate::stream::xautoclaim, "stream", "Changes, or acquires, ownership of messages in a consumer group, as if the messages were delivered to as consumer group member."),
    cmd("XCLAIM", -6, WRITE | FAST | VALUES, KEY1, crate::stream::xclaim, "stream", "Changes, or acquires, ownership of a message in a consumer group, as if the message was delivered a consumer group member."),
    cmd("XDEL", -3, WRITE | FAST | VALUES, KEY1, crate::stream::xdel, "stream", "Returns the number of messages after removing them from a stream."),
    movable(cmd("XGROUP", -2, WRITE | DENYOOM | VALUES, NOKEYS, crate::stream::xgroup, "stream", "A container for consumer groups commands."), xgroup_keys),
    movable(cmd("XINFO", -2, READONLY | VALUES, NOKEYS, crate::stream::xinfo, "stream", "A container for stream introspection commands."), xinfo_keys),
    cmd("XLEN", 2, READONLY | FAST | VALUES, KEY1, crate::stream::xlen, "stream", "Return the number of messages in a stream."),
    cmd("XPENDING", -3, READONLY | VALUES, KEY1, crate::stream::xpending, "stream", "Returns the information and entries from a stream consumer group's pending entries list."),
    cmd("XRANGE", -4, READONLY | VALUES, KEY1, crate::stream::xrange, "stream", "Returns the messages from a stream within a range of IDs."),
    movable(cmd("XREAD", -4, READONLY | BLOCKING | MOVABLEKEYS | VALUES, NOKEYS, crate::stream::xread, "stream", "Returns messages from multiple streams with IDs greater than the ones requested. Blocks until a message is available otherwise."), xread_keys),
    movable(cmd("XREADGROUP", -7, WRITE | BLOCKING | MOVABLEKEYS | VALUES, NOKEYS, crate::stream::xreadgroup, "stream", "Returns new or historical messages from a stream for a consumer in a group. Blocks until a message is available otherwise."), xread_keys),
    cmd("XREVRANGE", -4, READONLY | VALUES, KEY1, crate::stream::xrevrange, "stream", "Returns the messages from a stream within a range of IDs in reverse order."),
    cmd("XSETID", -3, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::stream::xsetid, "stream", "An internal command for replicating stream values."),
    cmd("XTRIM", -4, WRITE | VALUES, KEY1, crate::stream::xtrim, "stream", "Deletes messages from the beginning of a stream."),
    cmd("ZADD", -4, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::zset::zadd, "sorted-set", "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist."),
    cmd("ZCARD", 2, READONLY | FAST | VALUES, KEY1, crate::zset::zcard, "sorted-set", "Returns the number of members in a sorted set."),
    cmd("ZCOUNT", 4, READONLY | FAST | VALUES, KEY1, crate::zset::zcount, "sorted-set", "Returns the count of members in a sorted set that have scores within a range."),
    movable(cmd("ZDIFF", -3, READONLY | MOVABLEKEYS, NOKEYS, crate::zset::zdiff, "sorted-set", "Returns the difference between multiple sorted sets."), numkeys_at_1),
    movable(cmd("ZDIFFSTORE", -4, WRITE | DENYOOM | MOVABLEKEYS, KEY1, crate::zset::zdiffstore, "sorted-set", "Stores the difference of multiple sorted sets in a key."), store_and_numkeys),
    cmd("ZINCRBY", 4, WRITE | DENYOOM | FAST | VALUES, KEY1, crate::zset::zincrby, "sorted-set", "Increments the score of a member in a sorted set."),
    movable(cmd("ZINTER", -3, READONLY | MOVABLEKEYS, NOKEYS, crate::zset::zinter, "sorted-set", "Returns the intersect of multiple sorted sets."), numkeys_at_1),
    movable(cmd("ZINTERCARD", -3, READONLY | MOVABLEKEYS, NOKEYS, crate::zset::zintercard, "sorted-set", "Returns the number of members of the intersect of multiple sorted sets."), numkeys_at_1),
    movable(cmd("ZINTERSTORE", -4, WRITE | DENYOOM | MOVABLEKEYS, KEY1, crate::zset::zinterstore, "sorted-set", "Stores the intersect of multiple sorted sets in a key."), store_and_numkeys),
    cmd("ZLEXCOUNT", 4, READONLY | FAST | VALUES, KEY1, crate::zset::zlexcount, "sorted-set", "Returns the number of members in a sorted set within a lexicographical range."),
    movable(cmd("ZMPOP", -4, WRITE | MOVABLEKEYS, NOKEYS, crate::zset::zmpop, "sorted-set", "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped."), numkeys_at_1),
    cmd("ZMSCORE", -3, READONLY | FAST | VALUES, KEY1, crate::zset::zmscore, "sorted-set", "Returns the score of one or more members in a sorted set."),
    cmd("ZPOPMAX", -2, WRITE | FAST | VALUES, KEY1, crate::zset::zpopmax, "sorted-set", "Returns the highest-scoring members from a sorted set after removing them."),
    cmd("ZPOPMIN", -2, WRITE | FAST | VALUES, KEY1, crate::zset::zpopmin, "sorted-set", "Returns the lowest-scoring members from a sorted set after removing them."),
    cmd("ZRANDMEMBER", -2, READONLY | VALUES, KEY1, crate::zset::zrandmember, "sorted-set", "Returns one or more random members from a sorted set."),
    cmd("ZRANGE", -4, READONLY | VALUES, KEY1, crate::zset::zrange, "sorted-set", "Returns members in a sorted set within a range of indexes, scores or members."),
    cmd("ZRANGEBYLEX", -4, READONLY | VALUES, KEY1, crate::zset::zrangebylex, "sorted-set", "Returns members in a sorted set within a lexicographical range."),
    cmd("ZRANGEBYSCORE", -4, READONLY | VALUES, KEY1, crate::zset::zrangebyscore, "sorted-set", "Returns members in a sorted set within a range of scores."),
    cmd("ZRANGESTORE", -5, WRITE | DENYOOM | VALUES, (1, 2, 1), crate::zset::zrangestore, "sorted-set", "Stores a range of members from sorted set in a key."),
    cmd("ZRANK", 3, READONLY | FAST | VALUES, KEY1, crate::zset::zrank, "sorted-set", "Returns the index of a member in a sorted set ordered by ascending scores."),
    cmd("ZREM", -3, WRITE | FAST | VALUES, KEY1, crate::zset::zrem, "sorted-set", "Removes one or more members from a sorted set."),
    cmd("ZREMRANGEBYLEX", 4, WRITE | VALUES, KEY1, crate::zset::zremrangebylex, "sorted-set", "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed."),
    cmd("ZREMRANGEBYRANK", 4, WRITE | VALUES, KEY1, crate::zset::zremrangebyrank, "sorted-set", "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed."),
    cmd("ZREMRANGEBYSCORE", 4, WRITE | VALUES, KEY1, crate::zset::zremrangebyscore, "sorted-set", "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed."),
    cmd("ZREVRANGE", -4, READONLY | VALUES, KEY1, crate::zset::zrevrange, "sorted-set", "Returns members in a sorted set within a range of indexes in reverse order."),
    cmd("ZREVRANGEBYLEX", -4, READONLY | VALUES, KEY1, crate::zset::zrevrangebylex, "sorted-set", "Returns members in a sorted set within a lexicographical range in reverse order."),
    cmd("ZREVRANGEBYSCORE", -4, READONLY | VALUES, KEY1, crate::zset::zrevrangebyscore, "sorted-set", "Returns members in a sorted set within a range of scores in reverse order."),
    cmd("ZREVRANK", 3, READONLY | FAST | VALUES, KEY1, crate::zset::zrevrank, "sorted-set", "Returns the index of a member in a sorted set ordered by descending scores."),
    cmd("ZSCAN", -3, READONLY | VALUES, KEY1, crate::zset::zscan, "sorted-set", "Iterates over members and scores of a sorted set."),
    cmd("ZSCORE", 3, READONLY | FAST | VALUES, KEY1, crate::zset::zscore, "sorted-set", "Returns the score of a member in a sorted set."),
    movable(cmd("ZUNION", -3, READONLY | MOVABLEKEYS, NOKEYS, crate::zset::zunion, "sorted-set", "Returns the union of multiple sorted sets."), numkeys_at_1),
    movable(cmd("ZUNIONSTORE", -4, WRITE | DENYOOM | MOVABLEKEYS, KEY1, crate::zset::zunionstore, "sorted-set", "Stores the union of multiple sorted sets in a key."), store_and_numkeys),
];

/// The table, found by name: what dispatch, the loop and the handlers (through
/// [`crate::context::Ctx::commands`]) look commands up in.
pub static COMMANDS: std::sync::LazyLock<Commands> =
    std::sync::LazyLock::new(|| Commands::new(TABLE, SUBCOMMANDS).with_acl(acl_categories));

/// A command's or subcommand's ACL categories: Redis's description's, or for cxltier's own
/// the table's ([`Command::categories`]).
fn acl_categories(cmd: &Command, sub: Option<&str>) -> Vec<&'static str> {
    let name = match sub {
        Some(s) => format!("{}|{s}", cmd.name.to_ascii_lowercase()),
        None => cmd.name.to_ascii_lowercase(),
    };
    match crate::command_info::spec(&name) {
        Some(s) => s.categories.to_vec(),
        None => cmd.categories(),
    }
}

/// The subcommands of the container commands, as `COMMAND LIST` names them (`config|get`):
/// those each handler serves.
pub static SUBCOMMANDS: &[(&str, &[&str])] = &[
    (
        "ACL",
        &[
            "cat", "deluser", "dryrun", "genpass", "getuser", "help", "list", "load", "log",
            "save", "setuser", "users", "whoami",
        ],
    ),
    (
        "CLIENT",
        &[
            "caching",
            "getname",
            "getredir",
            "help",
            "id",
            "info",
            "kill",
            "list",
            "no-evict",
            "reply",
            "setinfo",
            "setname",
            "tracking",
            "trackinginfo",
            "unblock",
        ],
    ),
    // A standalone server: each answers that cluster support is disabled, as Redis's does.
    (
        "CLUSTER",
        &[
            "addslots",
            "addslotsrange",
            "bumpepoch",
            "count-failure-reports",
            "countkeysinslot",
            "delslots",
            "delslotsrange",
            "failover",
            "flushslots",
            "forget",
            "getkeysinslot",
            "help",
            "info",
            "keyslot",
            "links",
            "meet",
            "myid",
            "nodes",
            "replicas",
            "replicate",
            "reset",
            "saveconfig",
            "set-config-epoch",
            "setslot",
            "shards",
            "slaves",
            "slots",
        ],
    ),
    (
        "COMMAND",
        &[
            "count",
            "docs",
            "getkeys",
            "getkeysandflags",
            "help",
            "info",
            "list",
        ],
    ),
    ("CONFIG", &["get", "resetstat", "rewrite", "set"]),
    (
        "FUNCTION",
        &[
            "delete", "dump", "flush", "help", "kill", "list", "load", "restore", "stats",
        ],
    ),
    (
        "LATENCY",
        &[
            "doctor",
            "graph",
            "help",
            "histogram",
            "history",
            "latest",
            "reset",
        ],
    ),
    (
        "MEMORY",
        &["doctor", "help", "malloc-stats", "purge", "stats", "usage"],
    ),
    (
        "OBJECT",
        &["encoding", "freq", "help", "idletime", "refcount", "tier"],
    ),
    ("PUBSUB", &["channels", "help", "numpat", "numsub"]),
    (
        "SCRIPT",
        &["debug", "exists", "flush", "help", "kill", "load"],
    ),
    ("SLOWLOG", &["get", "help", "len", "reset"]),
    (
        "XGROUP",
        &[
            "create",
            "createconsumer",
            "delconsumer",
            "destroy",
            "help",
            "setid",
        ],
    ),
    ("XINFO", &["consumers", "groups", "help", "stream"]),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &[u8]) -> Option<&'static Command> {
        COMMANDS.lookup(name)
    }

    #[test]
    fn the_table_is_sorted_upper_case_and_unique() {
        for w in TABLE.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
        for c in TABLE {
            assert_eq!(c.name, c.name.to_ascii_uppercase());
            assert!(c.arity != 0, "{}", c.name);
            // Redis's invariants: read or write, never both; keys given as a whole triple.
            assert!(!(c.has(WRITE) && c.has(READONLY)), "{}", c.name);
            assert_eq!(c.first_key == 0, c.step == 0, "{}", c.name);
        }
    }

    /// Every flag is a bit of its own: two flags sharing a bit would make each command that has
    /// one behave as if it had both. Read from this file's text, so a flag added later is
    /// checked without being listed here.
    #[test]
    fn every_flag_has_a_bit_of_its_own() {
        let text = include_str!("command.rs");
        let mut bits = std::collections::BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.trim().strip_prefix("pub const ") else {
                continue;
            };
            let Some((name, shift)) = rest.split_once(": u64 = 1 << ") else {
                continue;
            };
            let shift: u32 = shift.trim_end_matches(';').parse().expect(name);
            if let Some(other) = bits.insert(shift, name) {
                panic!("{name} and {other} share bit {shift}");
            }
        }
        assert!(bits.len() > 20, "the flags were not found: {bits:?}");
    }

    /// The busy mode answers what Redis allows while a script runs (`allow_busy`, or a KILL
    /// subcommand of a container); a transaction's own commands run inside MULTI then.
    #[test]
    fn the_busy_mode_answers_only_allow_busy_commands() {
        for c in TABLE {
            if c.while_busy.is_some() {
                assert!(
                    c.has(ALLOW_BUSY) || matches!(c.name, "SCRIPT" | "FUNCTION"),
                    "{} answers while busy without allow_busy",
                    c.name
                );
            }
            if c.has(TX_CONTROL_WHILE_BUSY) {
                assert!(
                    c.while_busy.is_some() || c.has(TX_EXEC),
                    "{} is a transaction command of the busy mode without an answer",
                    c.name
                );
            }
        }
    }

    #[test]
    fn lookup_is_case_insensitive_and_exact() {
        assert_eq!(lookup(b"get").unwrap().name, "GET");
        assert_eq!(lookup(b"GeT").unwrap().name, "GET");
        assert_eq!(lookup(b"hgetall").unwrap().name, "HGETALL");
        assert!(lookup(b"ge").is_none());
        assert!(lookup(b"gets").is_none());
        assert!(lookup(b"").is_none());
        assert!(lookup(&[b'G'; 200]).is_none(), "longer than any name");
        assert!(lookup("GÉT".as_bytes()).is_none());
        for c in TABLE {
            assert!(std::ptr::eq(lookup(c.name.as_bytes()).unwrap(), c));
            let lower = c.name.to_ascii_lowercase();
            assert!(std::ptr::eq(lookup(lower.as_bytes()).unwrap(), c));
        }
    }

    fn getkeys(line: &str) -> String {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let mut out = Vec::new();
        crate::command_info::command_reply(&COMMANDS, &mut out, 2, &args);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn getkeys_follows_key_counts_and_store_options() {
        let many: Vec<String> = (1..=260).map(|i| format!("k{i}")).collect();
        let r = getkeys(&format!("GETKEYS ZUNIONSTORE t 260 {}", many.join(" ")));
        assert!(r.starts_with("*261\r\n$1\r\nt\r\n$2\r\nk1\r\n"), "{r}");
        assert!(r.ends_with("$4\r\nk260\r\n"));
        assert_eq!(getkeys("GETKEYS EVAL s 1 key arg"), "*1\r\n$3\r\nkey\r\n");
        assert_eq!(getkeys("GETKEYS EVAL s 0"), "*0\r\n");
        assert_eq!(
            getkeys("GETKEYS ZUNIONSTORE t 3 a b"),
            "-ERR Invalid arguments specified for command\r\n"
        );
        assert_eq!(
            getkeys("GETKEYS ZINTERCARD 2 a b LIMIT 1"),
            "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        assert_eq!(getkeys("GETKEYS BLMPOP 0 1 l LEFT"), "*1\r\n$1\r\nl\r\n");
        assert_eq!(
            getkeys("GETKEYS SORT s BY w STORE d"),
            "*2\r\n$1\r\ns\r\n$1\r\nd\r\n"
        );
        assert_eq!(getkeys("GETKEYS MEMORY USAGE k"), "*1\r\n$1\r\nk\r\n");
        assert_eq!(
            getkeys("GETKEYS GEORADIUS g 1 2 3 km STOREDIST d"),
            "*2\r\n$1\r\ng\r\n$1\r\nd\r\n"
        );
        assert_eq!(
            getkeys("GETKEYS GEORADIUS_RO g 1 2 3 km"),
            "*1\r\n$1\r\ng\r\n"
        );
        // Every command with movable keys says where they are.
        for c in TABLE {
            if c.has(MOVABLEKEYS) {
                assert!(c.keys_fn.is_some(), "{}", c.name);
            }
        }
    }

    #[test]
    fn categories_come_in_redis_s_order() {
        assert_eq!(
            lookup(b"GET").unwrap().categories(),
            ["@read", "@string", "@fast"]
        );
        assert_eq!(
            lookup(b"GEORADIUS").unwrap().categories(),
            ["@write", "@geo", "@slow"]
        );
        assert_eq!(
            lookup(b"BLPOP").unwrap().categories(),
            ["@write", "@list", "@slow", "@blocking"]
        );
        assert_eq!(
            lookup(b"CONFIG").unwrap().categories(),
            ["@admin", "@slow", "@dangerous"]
        );
    }

    #[test]
    fn command_list_names_subcommands() {
        let list = |line: &str| getkeys(line);
        let all = list("LIST");
        assert!(all.contains("$3\r\nset\r\n") && all.contains("$11\r\nclient|list\r\n"));
        let scripting = list("LIST FILTERBY ACLCAT scripting");
        assert!(scripting.contains("$4\r\neval\r\n"));
        assert!(scripting.contains("$11\r\nscript|kill\r\n"));
        assert!(!scripting.contains("$3\r\nset\r\n"));
        assert_eq!(
            list("LIST FILTERBY PATTERN config|*re*"),
            "*2\r\n$16\r\nconfig|resetstat\r\n$14\r\nconfig|rewrite\r\n"
        );
        assert_eq!(list("LIST FILTERBY PATTERN set"), "*1\r\n$3\r\nset\r\n");
        let help = list("LIST FILTERBY PATTERN cl*help");
        assert!(
            help.contains("$11\r\nclient|help\r\n") && help.contains("$12\r\ncluster|help\r\n")
        );
        // Every container listed is a command of the table.
        for (parent, _) in SUBCOMMANDS {
            assert!(lookup(parent.as_bytes()).is_some(), "{parent}");
        }
    }

    fn read_keys(args: &[&str]) -> Vec<String> {
        let mut keys = Vec::new();
        COMMANDS.for_each_read_key(args.iter().map(|a| a.as_bytes()), |k| {
            keys.push(String::from_utf8(k.to_vec()).unwrap())
        });
        keys
    }

    #[test]
    fn movable_keys_are_found_as_the_handlers_read_them() {
        let positions = |line: &str| -> Vec<usize> {
            let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            let mut p = Vec::new();
            lookup(args[0])
                .unwrap()
                .for_each_key_position(&args, |i| p.push(i));
            p
        };
        assert_eq!(positions("GET k"), [1]);
        assert_eq!(positions("MSET a 1 b 2"), [1, 3]);
        assert_eq!(positions("LMPOP 2 a b LEFT"), [2, 3]);
        assert_eq!(positions("BLMPOP 0 2 a b LEFT COUNT 2"), [3, 4]);
        assert_eq!(positions("ZUNIONSTORE d 2 a b WEIGHTS 1 2"), [1, 3, 4]);
        assert_eq!(positions("ZINTERCARD 1 a LIMIT 3"), [2]);
        // A numkeys past the arguments, or no number: none (the handler answers the error).
        assert!(positions("LMPOP 5 a LEFT").is_empty());
        assert!(positions("SINTERCARD x a").is_empty());
        assert_eq!(positions("SORT l BY w_* LIMIT 0 5 GET # STORE d"), [1, 10]);
        // The last STORE is the one SORT writes (as in Redis).
        assert_eq!(positions("SORT l STORE d STORE e"), [1, 5]);
        assert_eq!(positions("GEORADIUS g 15 37 200 km STORE d"), [1, 7]);
        assert_eq!(positions("OBJECT ENCODING k"), [2]);
        assert!(positions("OBJECT HELP x").is_empty());
        assert_eq!(positions("MEMORY USAGE k SAMPLES 5"), [2]);
    }

    #[test]
    fn read_keys_come_from_the_key_positions() {
        assert_eq!(read_keys(&["get", "k"]), ["k"]);
        assert_eq!(read_keys(&["MGET", "a", "b", "c"]), ["a", "b", "c"]);
        assert_eq!(read_keys(&["HSET", "h", "f", "v"]), ["h"]);
        assert_eq!(read_keys(&["SET", "k", "v", "EX", "10"]), ["k"]);
        assert_eq!(read_keys(&["HMGET", "h", "f1", "f2"]), ["h"]);
        // Commands that read no values, wrong arities and unknown commands begin no reads.
        assert!(read_keys(&["EXISTS", "a"]).is_empty());
        assert!(read_keys(&["DEL", "a"]).is_empty());
        // TTL and EXPIRETIME answer from the index: no value to read.
        assert!(read_keys(&["TTL", "a"]).is_empty());
        assert!(read_keys(&["PEXPIRETIME", "a"]).is_empty());
        assert!(read_keys(&["MSET", "a", "1"]).is_empty());
        assert!(read_keys(&["GET"]).is_empty());
        assert!(read_keys(&["GET", "a", "b"]).is_empty());
        assert!(read_keys(&["NOPE", "a"]).is_empty());
        // A script's KEYS are read ahead like any command's keys; its ARGV are not keys.
        assert_eq!(
            read_keys(&["EVAL", "return 1", "2", "a", "b", "c"]),
            ["a", "b"]
        );
        assert_eq!(read_keys(&["evalsha", "abc", "1", "k"]), ["k"]);
        assert!(read_keys(&["EVAL", "return 1", "0", "x"]).is_empty());
        assert!(read_keys(&["EVAL", "return 1", "5", "x"]).is_empty());
        let mset = lookup(b"MSET").unwrap();
        assert_eq!(mset.key_positions(7).collect::<Vec<_>>(), [1, 3, 5]);
    }
}
