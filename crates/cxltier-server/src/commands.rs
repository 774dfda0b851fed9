//! The commands: Redis semantics over the tiered store.

use cxltier_store::{Kind, Store, StoreError};
use hashbrown::HashMap;

use crate::hash;
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
}

/// One connection's state.
#[derive(Debug, Default)]
pub struct Session {
    pub id: u64,
    pub authed: bool,
    pub name: Option<Vec<u8>>,
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INT: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";
/// Up to this many fields in one HSET/HMGET/HDEL, each is looked for by a scan of the list (no
/// allocation: the common case); beyond, through a hash index, so the work stays linear.
const FEW_FIELDS: usize = 8;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// When an expiry given as `t` falls, in ms since the epoch, by Redis 7's rule: `t` in ms (times
/// 1000 for seconds) must fit an i64, and so must `now + ms` for a relative time; `None` is
/// "invalid expire time". Saturating instead turned `EXPIRE k 9223372036854775` into a time in
/// the past (the key was deleted) and `SET k v EX 99999999999999999` into a negative TTL.
fn expire_at_ms(t: i64, seconds: bool, relative: bool) -> Option<i64> {
    let ms = if seconds { t.checked_mul(1000)? } else { t };
    if relative {
        i64::try_from(now_ms()).ok()?.checked_add(ms)
    } else {
        Some(ms)
    }
}

fn parse_i64(b: &[u8]) -> Option<i64> {
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
fn invalid_expire(out: &mut Vec<u8>, cmd: &str) {
    reply::error(
        out,
        &format!(
            "ERR invalid expire time in '{}' command",
            cmd.to_lowercase()
        ),
    );
}

fn arity(out: &mut Vec<u8>, name: &[u8]) {
    reply::error(
        out,
        &format!(
            "ERR wrong number of arguments for '{}' command",
            String::from_utf8_lossy(name).to_lowercase()
        ),
    );
}

/// The key arguments of a read command (given as its arguments, name first), for the batch's
/// NVMe prefetch: `key` is called with each. Takes an iterator so that the server need not
/// collect a command's arguments into a vector to ask.
pub fn for_each_read_key<'a>(
    mut args: impl Iterator<Item = &'a [u8]>,
    mut key: impl FnMut(&'a [u8]),
) {
    let Some(name) = args.next() else { return };
    let mut upper = [0u8; 16];
    let n = name.len().min(16);
    upper[..n].copy_from_slice(&name[..n]);
    upper[..n].make_ascii_uppercase();
    match &upper[..n] {
        b"GET" | b"HGETALL" | b"HGET" | b"HMGET" | b"HSET" | b"HMSET" | b"HDEL" | b"INCR"
        | b"DECR" | b"INCRBY" | b"DECRBY" | b"HLEN" | b"TTL" | b"PTTL" => {
            if let Some(k) = args.next() {
                key(k);
            }
        }
        b"MGET" => args.for_each(key),
        _ => {}
    }
}

/// A hash's fields, or the reply to give when the key holds something else.
enum HashRead {
    Missing,
    Fields(Vec<(Vec<u8>, Vec<u8>)>),
    WrongType,
    Corrupt,
}

fn read_hash(store: &mut Store, key: &[u8]) -> Result<HashRead, StoreError> {
    Ok(match store.get(key)? {
        None => HashRead::Missing,
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

/// Run one command, writing its reply to `out`.
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
    let cmd = String::from_utf8_lossy(name).to_ascii_uppercase();
    if info.requirepass.is_some()
        && !session.authed
        && !matches!(cmd.as_str(), "AUTH" | "HELLO" | "QUIT")
    {
        reply::error(out, "NOAUTH Authentication required.");
        return Effect::Read;
    }
    match run(store, info, session, &cmd, args, out) {
        Ok(effect) => effect,
        Err(e) => {
            store_error(out, &e);
            Effect::Read
        }
    }
}

fn run(
    store: &mut Store,
    info: &mut ServerInfo,
    session: &mut Session,
    cmd: &str,
    args: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<Effect, StoreError> {
    let n = args.len();
    let name = args[0];
    macro_rules! need {
        ($cond:expr) => {
            if !($cond) {
                arity(out, name);
                return Ok(Effect::Read);
            }
        };
    }
    match cmd {
        "PING" => {
            need!(n <= 2);
            match args.get(1) {
                Some(m) => reply::bulk(out, m),
                None => reply::simple(out, "PONG"),
            }
        }
        "ECHO" => {
            need!(n == 2);
            reply::bulk(out, args[1]);
        }
        "GET" => {
            need!(n == 2);
            match store.get(args[1])? {
                None => reply::nil(out),
                Some(o) if o.kind != Kind::String => reply::error(out, WRONGTYPE),
                Some(o) => reply::bulk(out, o.value),
            }
        }
        "SET" => {
            need!(n >= 3);
            return set(store, args, out);
        }
        "SETEX" | "PSETEX" => {
            need!(n == 4);
            let Some(t) = parse_i64(args[2]) else {
                reply::error(out, NOT_INT);
                return Ok(Effect::Read);
            };
            let at = (t > 0)
                .then(|| expire_at_ms(t, cmd == "SETEX", true))
                .flatten();
            let Some(at) = at else {
                invalid_expire(out, cmd);
                return Ok(Effect::Read);
            };
            store.put(args[1], Kind::String, args[3], Some(at as u64))?;
            reply::ok(out);
            return Ok(Effect::Wrote);
        }
        "DEL" | "UNLINK" => {
            need!(n >= 2);
            let mut count = 0;
            for k in &args[1..] {
                count += store.delete(k)? as i64;
            }
            reply::int(out, count);
            return Ok(Effect::Wrote);
        }
        "EXISTS" => {
            need!(n >= 2);
            let count = args[1..].iter().filter(|k| store.contains(k)).count();
            reply::int(out, count as i64);
        }
        "TYPE" => {
            need!(n == 2);
            match store.get(args[1])? {
                None => reply::simple(out, "none"),
                Some(o) => reply::simple(
                    out,
                    if o.kind == Kind::Hash {
                        "hash"
                    } else {
                        "string"
                    },
                ),
            }
        }
        "MGET" => {
            need!(n >= 2);
            reply::array(out, n - 1);
            for k in &args[1..] {
                match store.get(k)? {
                    Some(o) if o.kind == Kind::String => reply::bulk(out, o.value),
                    _ => reply::nil(out),
                }
            }
        }
        "MSET" => {
            need!(n >= 3 && n % 2 == 1);
            for kv in args[1..].chunks(2) {
                store.put(kv[0], Kind::String, kv[1], None)?;
            }
            reply::ok(out);
            return Ok(Effect::Wrote);
        }
        "INCR" | "DECR" | "INCRBY" | "DECRBY" => {
            let by = match cmd {
                "INCR" => {
                    need!(n == 2);
                    1
                }
                "DECR" => {
                    need!(n == 2);
                    -1
                }
                _ => {
                    need!(n == 3);
                    match parse_i64(args[2]) {
                        Some(v) if cmd == "INCRBY" => v,
                        Some(v) => match v.checked_neg() {
                            Some(v) => v,
                            None => {
                                reply::error(out, "ERR decrement would overflow");
                                return Ok(Effect::Read);
                            }
                        },
                        None => {
                            reply::error(out, NOT_INT);
                            return Ok(Effect::Read);
                        }
                    }
                }
            };
            let (current, expires) = match store.get(args[1])? {
                None => (0, None),
                Some(o) if o.kind != Kind::String => {
                    reply::error(out, WRONGTYPE);
                    return Ok(Effect::Read);
                }
                Some(o) => match parse_i64(o.value) {
                    Some(v) => (v, o.expires_at_ms),
                    None => {
                        reply::error(out, NOT_INT);
                        return Ok(Effect::Read);
                    }
                },
            };
            let Some(next) = current.checked_add(by) else {
                reply::error(out, "ERR increment or decrement would overflow");
                return Ok(Effect::Read);
            };
            store.put(args[1], Kind::String, next.to_string().as_bytes(), expires)?;
            reply::int(out, next);
            return Ok(Effect::Wrote);
        }
        "HSET" | "HMSET" => {
            need!(n >= 4 && n % 2 == 0);
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
                        if cmd == "HMSET" {
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
                        reply::error(out, "ERR the stored hash is corrupt; DEL the key");
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
                (hash::encode(fields.iter().copied()), expires, added)
            };
            store.put(args[1], Kind::Hash, &encoded, expires)?;
            if cmd == "HMSET" {
                reply::ok(out);
            } else {
                reply::int(out, added);
            }
            return Ok(Effect::Wrote);
        }
        "HGET" | "HMGET" | "HGETALL" | "HLEN" | "HEXISTS" | "HKEYS" | "HVALS" => {
            need!(match cmd {
                "HGET" | "HEXISTS" => n == 3,
                "HMGET" => n >= 3,
                _ => n == 2,
            });
            let o = store.get(args[1])?;
            let fields = match o {
                None => Vec::new(),
                Some(o) if o.kind != Kind::Hash => {
                    reply::error(out, WRONGTYPE);
                    return Ok(Effect::Read);
                }
                Some(o) => match hash::decode(o.value) {
                    Some(f) => f,
                    None => {
                        reply::error(out, "ERR the stored hash is corrupt; DEL the key");
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
            match cmd {
                "HGET" => match find(args[2]) {
                    Some(v) => reply::bulk(out, v),
                    None => reply::nil(out),
                },
                "HMGET" => {
                    reply::array(out, n - 2);
                    for f in &args[2..] {
                        match find(f) {
                            Some(v) => reply::bulk(out, v),
                            None => reply::nil(out),
                        }
                    }
                }
                "HGETALL" => {
                    reply::array(out, fields.len() * 2);
                    for (f, v) in &fields {
                        reply::bulk(out, f);
                        reply::bulk(out, v);
                    }
                }
                "HKEYS" | "HVALS" => {
                    reply::array(out, fields.len());
                    for (f, v) in &fields {
                        reply::bulk(out, if cmd == "HKEYS" { f } else { v });
                    }
                }
                "HLEN" => reply::int(out, fields.len() as i64),
                _ => reply::int(out, find(args[2]).is_some() as i64),
            }
        }
        "HDEL" => {
            need!(n >= 3);
            let fields = match read_hash(store, args[1])? {
                HashRead::Missing => {
                    reply::int(out, 0);
                    return Ok(Effect::Read);
                }
                HashRead::Fields(f) => f,
                HashRead::WrongType => {
                    reply::error(out, WRONGTYPE);
                    return Ok(Effect::Read);
                }
                HashRead::Corrupt => {
                    reply::error(out, "ERR the stored hash is corrupt; DEL the key");
                    return Ok(Effect::Read);
                }
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
            if kept.is_empty() {
                store.delete(args[1])?;
            } else if removed > 0 {
                let expires = store.get(args[1])?.and_then(|o| o.expires_at_ms);
                let encoded = hash::encode(kept.iter().map(|(f, v)| (f.as_slice(), v.as_slice())));
                store.put(args[1], Kind::Hash, &encoded, expires)?;
            }
            reply::int(out, removed as i64);
            return Ok(Effect::Wrote);
        }
        "EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT" => {
            need!(n == 3);
            let Some(t) = parse_i64(args[2]) else {
                reply::error(out, NOT_INT);
                return Ok(Effect::Read);
            };
            let seconds = matches!(cmd, "EXPIRE" | "EXPIREAT");
            let relative = matches!(cmd, "EXPIRE" | "PEXPIRE");
            let Some(at) = expire_at_ms(t, seconds, relative) else {
                invalid_expire(out, cmd);
                return Ok(Effect::Read);
            };
            if at <= now_ms() as i64 {
                let existed = store.delete(args[1])?;
                reply::int(out, existed as i64);
            } else {
                let ok = store.set_expiry(args[1], Some(at as u64))?;
                reply::int(out, ok as i64);
            }
            return Ok(Effect::Wrote);
        }
        "PERSIST" => {
            need!(n == 2);
            let had = store
                .get(args[1])?
                .is_some_and(|o| o.expires_at_ms.is_some());
            if had {
                store.set_expiry(args[1], None)?;
            }
            reply::int(out, had as i64);
            return Ok(Effect::Wrote);
        }
        "TTL" | "PTTL" => {
            need!(n == 2);
            match store.get(args[1])? {
                None => reply::int(out, -2),
                Some(o) => match o.expires_at_ms {
                    None => reply::int(out, -1),
                    Some(t) => {
                        let left = t.saturating_sub(now_ms()) as i64;
                        reply::int(
                            out,
                            if cmd == "TTL" {
                                (left + 500) / 1000
                            } else {
                                left
                            },
                        );
                    }
                },
            }
        }
        "SCANRANGE" => {
            need!(n == 3);
            let Some(count) = parse_i64(args[2]).filter(|&c| (0..=100_000).contains(&c)) else {
                reply::error(out, "ERR count must be an integer from 0 to 100000");
                return Ok(Effect::Read);
            };
            let items = store.scan(args[1], count as usize)?;
            reply::array(out, items.len());
            for it in items {
                reply::array(out, 2);
                reply::bulk(out, &it.key);
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
        }
        "DBSIZE" => {
            need!(n == 1);
            reply::int(out, store.len() as i64);
        }
        "FLUSHALL" | "FLUSHDB" => {
            need!(n <= 2);
            store.flush_all()?;
            reply::ok(out);
            return Ok(Effect::Wrote);
        }
        "AUTH" => {
            need!(n == 2 || n == 3);
            let given = args[n - 1];
            match &info.requirepass {
                None => reply::error(
                    out,
                    "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
                ),
                Some(pw) if pw.as_bytes() == given && (n == 2 || args[1] == b"default") => {
                    session.authed = true;
                    reply::ok(out);
                }
                Some(_) => reply::error(out, "WRONGPASS invalid username-password pair or user is disabled."),
            }
        }
        "SELECT" => {
            need!(n == 2);
            if args[1] == b"0" {
                reply::ok(out);
            } else {
                reply::error(
                    out,
                    "ERR DB index is out of range (cxltier serves database 0 only)",
                );
            }
        }
        "CONFIG" => {
            need!(n >= 2);
            let sub = String::from_utf8_lossy(args[1]).to_ascii_uppercase();
            match sub.as_str() {
                "GET" => {
                    need!(n >= 3);
                    let settings = config_settings(info, store);
                    let mut matched = Vec::new();
                    for pat in &args[2..] {
                        for (k, v) in &settings {
                            if crate::glob::matches(pat, k.as_bytes(), true)
                                && !matched.iter().any(|(m, _)| m == k)
                            {
                                matched.push((k.clone(), v.clone()));
                            }
                        }
                    }
                    reply::array(out, matched.len() * 2);
                    for (k, v) in matched {
                        reply::bulk(out, k.as_bytes());
                        reply::bulk(out, v.as_bytes());
                    }
                }
                "SET" => reply::error(
                    out,
                    "ERR CONFIG SET is not supported: restart cxltier serve with the new options",
                ),
                "RESETSTAT" => {
                    // As Redis: the activity counters start again from zero (the store's and
                    // the server's); what is stored is untouched.
                    store.reset_stats();
                    info.total_commands = 0;
                    info.total_connections = 0;
                    info.rejected_connections = 0;
                    info.client_query_buffer_limit_disconnections = 0;
                    info.client_output_buffer_limit_disconnections = 0;
                    info.client_peak_input_buffer = 0;
                    info.client_peak_output_buffer = 0;
                    reply::ok(out);
                }
                _ => reply::error(
                    out,
                    &format!(
                        "ERR unknown subcommand '{}'. Try CONFIG GET.",
                        sub.to_lowercase()
                    ),
                ),
            }
        }
        "COMMAND" => {
            // redis-cli asks for COMMAND DOCS at start; an empty answer means "no hints".
            match args.get(1).map(|s| s.to_ascii_uppercase()) {
                Some(s) if s == b"COUNT" => reply::int(out, COMMANDS.len() as i64),
                _ => reply::array(out, 0),
            }
        }
        "CLIENT" => {
            need!(n >= 2);
            let sub = String::from_utf8_lossy(args[1]).to_ascii_uppercase();
            match sub.as_str() {
                "SETNAME" if n == 3 => {
                    session.name = Some(args[2].to_vec());
                    reply::ok(out);
                }
                "GETNAME" => match &session.name {
                    Some(nm) => reply::bulk(out, nm),
                    None => reply::nil(out),
                },
                "ID" => reply::int(out, session.id as i64),
                "SETINFO" => reply::ok(out),
                _ => reply::error(
                    out,
                    &format!("ERR unknown subcommand '{}'", sub.to_lowercase()),
                ),
            }
        }
        "INFO" => {
            let section = args
                .get(1)
                .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase());
            let text = info_text(store, info, section.as_deref());
            reply::bulk(out, text.as_bytes());
        }
        "QUIT" => {
            reply::ok(out);
            return Ok(Effect::Close);
        }
        "SHUTDOWN" => return Ok(Effect::Shutdown),
        "HELLO" => {
            // RESP3 is not spoken; clients fall back to RESP2 on this error.
            reply::error(
                out,
                "NOPROTO unsupported protocol version (cxltier speaks RESP2)",
            );
        }
        _ => {
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
                    String::from_utf8_lossy(&name[..name.len().min(64)]),
                    shown
                ),
            );
        }
    }
    Ok(Effect::Read)
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]
fn set(store: &mut Store, args: &[&[u8]], out: &mut Vec<u8>) -> Result<Effect, StoreError> {
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
    let old = store
        .get(args[1])?
        .map(|o| (o.kind, o.value.to_vec(), o.expires_at_ms));
    if get && old.as_ref().is_some_and(|o| o.0 != Kind::String) {
        reply::error(out, WRONGTYPE);
        return Ok(Effect::Read);
    }
    let exists = old.is_some();
    if (nx && exists) || (xx && !exists) {
        match (get, old) {
            (true, Some(o)) => reply::bulk(out, &o.1),
            _ => reply::nil(out),
        }
        return Ok(Effect::Read);
    }
    if keepttl {
        expires = old.as_ref().and_then(|o| o.2);
    }
    store.put(args[1], Kind::String, args[2], expires)?;
    match (get, old) {
        (true, Some(o)) => reply::bulk(out, &o.1),
        (true, None) => reply::nil(out),
        _ => reply::ok(out),
    }
    Ok(Effect::Wrote)
}

/// Commands served (for COMMAND COUNT and the docs).
pub const COMMANDS: &[&str] = &[
    "PING",
    "ECHO",
    "GET",
    "SET",
    "SETEX",
    "PSETEX",
    "DEL",
    "UNLINK",
    "EXISTS",
    "TYPE",
    "MGET",
    "MSET",
    "INCR",
    "DECR",
    "INCRBY",
    "DECRBY",
    "HSET",
    "HMSET",
    "HGET",
    "HMGET",
    "HGETALL",
    "HLEN",
    "HEXISTS",
    "HKEYS",
    "HVALS",
    "HDEL",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "PERSIST",
    "TTL",
    "PTTL",
    "SCANRANGE",
    "DBSIZE",
    "FLUSHALL",
    "FLUSHDB",
    "AUTH",
    "SELECT",
    "CONFIG",
    "COMMAND",
    "CLIENT",
    "INFO",
    "QUIT",
    "SHUTDOWN",
    "HELLO",
];

fn config_settings(info: &ServerInfo, store: &Store) -> Vec<(String, String)> {
    let st = store.stats();
    let memory: u64 = st
        .tiers
        .iter()
        .filter(|t| t.tier != "nvme")
        .map(|t| t.capacity_bytes)
        .sum();
    vec![
        ("maxmemory".into(), memory.to_string()),
        ("maxmemory-policy".into(), "noeviction".into()),
        ("save".into(), String::new()),
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
        ("databases".into(), "1".into()),
        ("bind".into(), info.bind.clone()),
        ("port".into(), info.port.to_string()),
        (
            "proto-max-bulk-len".into(),
            info.proto_max_bulk_len.to_string(),
        ),
        ("maxclients".into(), info.max_clients.to_string()),
        (
            "client-query-buffer-limit".into(),
            info.client_query_buffer_limit.to_string(),
        ),
        (
            "client-output-buffer-limit".into(),
            format!(
                "normal {} {} {}",
                info.client_output_buffer_limit.0,
                info.client_output_buffer_limit.1,
                info.client_output_buffer_limit.2
            ),
        ),
    ]
}

fn info_text(store: &Store, info: &ServerInfo, section: Option<&str>) -> String {
    use std::fmt::Write;
    let st = store.stats();
    let all = matches!(
        section,
        None | Some("all") | Some("everything") | Some("default")
    );
    let mut t = String::new();
    let want = |s: &str| all || section == Some(s);
    if want("server") {
        let uptime = info.started.map(|s| s.elapsed().as_secs()).unwrap_or(0);
        let _ = write!(
            t,
            "# Server\r\ncxltier_version:{}\r\nredis_version:7.0.0\r\nredis_mode:standalone\r\nos:Linux\r\narch_bits:64\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            info.port,
            uptime
        );
    }
    if want("clients") {
        let _ = write!(
            t,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nclient_peak_input_buffer:{}\r\nclient_peak_output_buffer:{}\r\n\r\n",
            info.connected_clients,
            info.max_clients,
            info.client_peak_input_buffer,
            info.client_peak_output_buffer
        );
    }
    if want("memory") {
        let memory: u64 = st
            .tiers
            .iter()
            .filter(|t| t.tier != "nvme")
            .map(|t| t.bytes)
            .sum();
        let cap: u64 = st
            .tiers
            .iter()
            .filter(|t| t.tier != "nvme")
            .map(|t| t.capacity_bytes)
            .sum();
        let _ = write!(
            t,
            "# Memory\r\nused_memory:{}\r\nmaxmemory:{cap}\r\nindex_bytes:{}\r\n\r\n",
            memory + st.index_bytes,
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
        let hits: u64 = st.tiers.iter().map(|t| t.hits).sum();
        let _ = write!(
            t,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nkeyspace_hits:{hits}\r\nkeyspace_misses:{}\r\nrejected_connections:{}\r\nclient_query_buffer_limit_disconnections:{}\r\nclient_output_buffer_limit_disconnections:{}\r\n\r\n",
            info.total_connections,
            info.total_commands,
            st.misses,
            info.rejected_connections,
            info.client_query_buffer_limit_disconnections,
            info.client_output_buffer_limit_disconnections
        );
    }
    if want("tiers") {
        let _ = write!(
            t,
            "# Tiers\r\nkeys:{}\r\nindex_bytes:{}\r\nmisses:{}\r\nevictions_to_nvme:{}\r\nadmissions_rejected:{}\r\nwrite_amplification:{:.3}\r\nsegments_cleaned:{}\r\ncxl_emulated_on_dram:{}\r\n",
            st.keys,
            st.index_bytes,
            st.misses,
            st.evictions_to_nvme,
            st.admissions_rejected,
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
        let _ = write!(
            t,
            "# Keyspace\r\ndb0:keys={},expires=0,avg_ttl=0\r\n",
            store.len()
        );
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
                session: Session {
                    authed: true,
                    ..Session::default()
                },
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
}
