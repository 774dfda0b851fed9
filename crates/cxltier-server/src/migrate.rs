//! MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH password |
//! AUTH2 username password] [KEYS key ...], as Redis 7.0's `migrateCommand`: each key's DUMP
//! payload is sent to the target as `RESTORE key ttl payload [REPLACE]` (after `AUTH` and a
//! `SELECT` the cached connection does not need), the replies are read, and the keys the target
//! acknowledged are deleted here (not with COPY) and go to the write stream as one `DEL`. This is
//! what `redis-cli --cluster reshard` and `import` drive, and the target may be redis-server.
//!
//! Like Redis it blocks the event loop for the exchange, bounded by `timeout` ms for the connect
//! and for each write and read. Connections are kept per `host:port` for the next MIGRATE (at most
//! [`MAX_CACHED`]) and closed after [`IDLE_CLOSE`] unused ([`close_idle`], from the loop's tick);
//! INFO's `migrate_cached_sockets` counts them. A cached connection the target closed meanwhile
//! is opened again once, unless the failure was a timeout.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use cxltier_resp::{Client, Reply, RespError};
use cxltier_store::StoreError;

use crate::context::{fail, now_ms, Ctx, Effect};
use crate::rdb::RdbError;
use crate::resp::reply;

/// Connections kept at once (Redis's MIGRATE_SOCKET_CACHE_ITEMS).
pub const MAX_CACHED: usize = 64;
/// A connection unused this long is closed (Redis's MIGRATE_SOCKET_CACHE_TTL).
pub const IDLE_CLOSE: Duration = Duration::from_secs(10);
/// The longest reply line read from the target (Redis reads them into 1 KiB buffers).
const MAX_REPLY: usize = 64 << 10;

/// A connection kept for the next MIGRATE to the same target.
pub struct Cached {
    client: Client,
    /// The database SELECTed on it, when known.
    db: Option<i64>,
    last_use: Instant,
}

impl std::fmt::Debug for Cached {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.debug_struct("Cached")
            .field("db", &self.db)
            .field("last_use", &self.last_use)
            .finish_non_exhaustive()
    }
}

/// The connections MIGRATE keeps, by `host:port`.
#[derive(Debug, Default)]
pub struct MigrateSockets {
    by_target: HashMap<String, Cached>,
}

impl MigrateSockets {
    /// Connections kept (INFO's `migrate_cached_sockets`).
    pub fn len(&self) -> usize {
        self.by_target.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_target.is_empty()
    }
}

/// Closes the connections unused for [`IDLE_CLOSE`] (Redis's `migrateCloseTimedoutSockets`).
pub fn close_idle(sockets: &mut MigrateSockets, now: Instant) {
    sockets
        .by_target
        .retain(|_, c| now.saturating_duration_since(c.last_use) < IDLE_CLOSE);
}

/// What MIGRATE was asked.
struct Request<'a> {
    target: String,
    db: i64,
    timeout: Duration,
    copy: bool,
    replace: bool,
    auth: Option<(Option<&'a [u8]>, &'a [u8])>,
    keys: &'a [&'a [u8]],
}

fn parse<'a>(args: &'a [&'a [u8]]) -> Result<Request<'a>, String> {
    let (mut copy, mut replace, mut auth) = (false, false, None);
    let mut keys = &args[3..4];
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        match args[j].to_ascii_uppercase().as_slice() {
            b"COPY" => copy = true,
            b"REPLACE" => replace = true,
            b"AUTH" if more >= 1 => {
                auth = Some((None, args[j + 1]));
                j += 1;
            }
            b"AUTH2" if more >= 2 => {
                auth = Some((Some(args[j + 1]), args[j + 2]));
                j += 2;
            }
            b"KEYS" => {
                if !crate::db::user_key(args[3]).is_empty() {
                    return Err("ERR When using MIGRATE KEYS option, the key argument must be set to the empty string".into());
                }
                keys = &args[j + 1..];
                break;
            }
            _ => return Err(crate::errors::SYNTAX.into()),
        }
        j += 1;
    }
    let number = |b: &[u8]| -> Result<i64, String> {
        crate::numbers::int_arg(b).ok_or_else(|| crate::errors::NOT_INT.to_string())
    };
    let timeout = number(args[5])?;
    let db = number(args[4])?;
    let timeout = if timeout <= 0 { 1000 } else { timeout };
    Ok(Request {
        target: format!(
            "{}:{}",
            String::from_utf8_lossy(args[1]),
            String::from_utf8_lossy(args[2])
        ),
        db,
        timeout: Duration::from_millis(timeout as u64),
        copy,
        replace,
        auth,
        keys,
    })
}

/// The arguments MIGRATE's run hides from the slow log and MONITOR: the passwords of AUTH and
/// AUTH2 (the username too, as Redis redacts it).
pub fn redact(args: &[&[u8]]) -> Vec<usize> {
    let mut hidden = Vec::new();
    let mut j = 6;
    while j < args.len() {
        match args[j].to_ascii_uppercase().as_slice() {
            b"AUTH" if j + 1 < args.len() => {
                hidden.push(j + 1);
                j += 1;
            }
            b"AUTH2" if j + 2 < args.len() => {
                hidden.extend([j + 1, j + 2]);
                j += 2;
            }
            b"KEYS" => break,
            _ => {}
        }
        j += 1;
    }
    hidden
}

/// Why an exchange with the target failed on the socket.
enum SocketError {
    Connect,
    Write(RespError),
    Read(RespError),
}

impl SocketError {
    fn timed_out(&self) -> bool {
        let e = match self {
            SocketError::Connect => return false,
            SocketError::Write(e) | SocketError::Read(e) => e,
        };
        match e {
            RespError::Timeout(_) => true,
            RespError::Io(io) => matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ),
            _ => false,
        }
    }

    fn reply(&self) -> &'static str {
        match self {
            SocketError::Connect => "IOERR error or timeout connecting to the client",
            SocketError::Write(_) => "IOERR error or timeout writing to target instance",
            SocketError::Read(_) => "IOERR error or timeout reading to target instance",
        }
    }
}

pub(crate) fn migrate(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let req = match parse(args) {
        Ok(r) => r,
        Err(e) => return fail(ctx, &e),
    };
    // The keys that are here, with their payloads and TTLs; none: NOKEY (often a key that just
    // expired, which is no error).
    let now = now_ms();
    let mut found: Vec<(&[u8], Vec<u8>, u64)> = Vec::new();
    for &key in req.keys {
        let Some(info) = ctx.store.key_info(key) else {
            continue;
        };
        let ttl = match info.expires_at_ms {
            None => 0,
            Some(at) if at <= now => continue,
            Some(at) => (at - now).max(1),
        };
        match crate::rdb::dump::key_payload(ctx.store, key) {
            Ok(Some(payload)) => found.push((key, payload, ttl)),
            Ok(None) => {}
            Err(RdbError::Store(e)) => return Err(e),
            Err(RdbError::Io(e)) => return fail(ctx, &format!("ERR {e}")),
        }
    }
    if found.is_empty() {
        reply::simple(ctx.out, "NOKEY");
        return Ok(Effect::Read);
    }
    let mut may_retry = true;
    loop {
        match exchange(&mut ctx.info.migrate_sockets, &req, &found) {
            Ok(acked) => return Ok(finish(ctx, &req, &found, acked)),
            Err((e, sent_nothing)) => {
                ctx.info.migrate_sockets.by_target.remove(&req.target);
                // Retried once on a fresh connection when nothing reached the target (a cached
                // connection the target closed meanwhile), never after a timeout.
                if may_retry && sent_nothing && !e.timed_out() {
                    may_retry = false;
                    continue;
                }
                return fail(ctx, e.reply());
            }
        }
    }
}

/// What the target answered: `Ok` with, per key sent, whether it was restored, and the target's
/// first error when there was one.
struct Acked {
    restored: Vec<bool>,
    target_error: Option<String>,
}

/// Sends AUTH, SELECT and the RESTOREs in one write and reads their replies. `Err` on a socket
/// failure, with whether nothing was answered yet (only then may it be retried).
fn exchange(
    sockets: &mut MigrateSockets,
    req: &Request<'_>,
    found: &[(&[u8], Vec<u8>, u64)],
) -> Result<Acked, (SocketError, bool)> {
    if !sockets.by_target.contains_key(&req.target) {
        if sockets.by_target.len() >= MAX_CACHED {
            // Room for this one: the least recently used goes (Redis drops a random one).
            if let Some(oldest) = sockets
                .by_target
                .iter()
                .min_by_key(|(_, c)| c.last_use)
                .map(|(k, _)| k.clone())
            {
                sockets.by_target.remove(&oldest);
            }
        }
        let mut client = Client::connect_timeout(&req.target, req.timeout)
            .map_err(|_| (SocketError::Connect, true))?;
        client
            .set_timeout(req.timeout)
            .map_err(|_| (SocketError::Connect, true))?;
        client.set_max_reply(MAX_REPLY);
        sockets.by_target.insert(
            req.target.clone(),
            Cached {
                client,
                db: None,
                last_use: Instant::now(),
            },
        );
    }
    let cached = sockets
        .by_target
        .get_mut(&req.target)
        .expect("inserted above");
    cached.last_use = Instant::now();
    let select = cached.db != Some(req.db);
    let mut bytes = Vec::new();
    if let Some((user, password)) = req.auth {
        match user {
            Some(user) => cxltier_resp::write_command(&mut bytes, &[b"AUTH", user, password]),
            None => cxltier_resp::write_command(&mut bytes, &[b"AUTH", password]),
        }
    }
    if select {
        cxltier_resp::write_command(&mut bytes, &[b"SELECT", req.db.to_string().as_bytes()]);
    }
    for (key, payload, ttl) in found {
        let name = crate::db::user_key(key);
        let ttl = ttl.to_string();
        let mut restore: Vec<&[u8]> = vec![b"RESTORE", name, ttl.as_bytes(), payload];
        if req.replace {
            restore.push(b"REPLACE");
        }
        cxltier_resp::write_command(&mut bytes, &restore);
    }
    cached
        .client
        .send_raw(&bytes)
        .map_err(|e| (SocketError::Write(e), true))?;
    let mut first_error: Option<String> = None;
    let mut answered = false;
    let mut read = |client: &mut Client| -> Result<Option<String>, (SocketError, bool)> {
        let r = client
            .read()
            .map_err(|e| (SocketError::Read(e), !answered))?;
        answered = true;
        Ok(match r {
            Reply::Error(e) => Some(e),
            _ => None,
        })
    };
    let auth_error = match req.auth {
        Some(_) => read(&mut cached.client)?,
        None => None,
    };
    let select_error = if select {
        read(&mut cached.client)?
    } else {
        None
    };
    first_error = first_error.or(auth_error.clone()).or(select_error.clone());
    let mut restored = Vec::with_capacity(found.len());
    for _ in found {
        let err = read(&mut cached.client)?;
        let ok = err.is_none() && auth_error.is_none() && select_error.is_none();
        if first_error.is_none() {
            first_error = err;
        }
        restored.push(ok);
    }
    // On an error the database selected is no longer known; on success it is the one asked.
    cached.db = first_error.is_none().then_some(req.db);
    Ok(Acked {
        restored,
        target_error: first_error,
    })
}

/// The keys the target restored are deleted here (unless COPY) and propagated as one DEL; the
/// reply is +OK, or the target's first error.
fn finish(
    ctx: &mut Ctx<'_>,
    req: &Request<'_>,
    found: &[(&[u8], Vec<u8>, u64)],
    acked: Acked,
) -> Effect {
    let mut deleted: Vec<Vec<u8>> = Vec::new();
    if !req.copy {
        for ((key, _, _), ok) in found.iter().zip(&acked.restored) {
            if *ok && matches!(ctx.store.delete(key), Ok(true)) {
                ctx.notify(crate::notify::class::GENERIC, "del", key);
                ctx.session.written_keys.push(key.to_vec());
                deleted.push(key.to_vec());
            }
        }
    }
    // The write stream gets the keys moved as one DEL (nothing when none was: with COPY, or
    // when the target restored none).
    if !deleted.is_empty() {
        ctx.session.propagate_as(|| {
            vec![std::iter::once(b"DEL".to_vec())
                .chain(deleted.iter().cloned())
                .collect()]
        });
    }
    match acked.target_error {
        Some(e) => reply::error(
            ctx.out,
            &format!("ERR Target instance replied with error: {e}"),
        ),
        None => reply::ok(ctx.out),
    }
    if deleted.is_empty() {
        Effect::Read
    } else {
        Effect::Wrote
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(line: &str) -> Result<(String, i64, u64, bool, bool, usize), String> {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse(&args).map(|r| {
            (
                r.target,
                r.db,
                r.timeout.as_millis() as u64,
                r.copy,
                r.replace,
                r.keys.len(),
            )
        })
    }

    #[test]
    fn arguments_are_read_as_redis_reads_them() {
        assert_eq!(
            req("MIGRATE 127.0.0.1 6380 k 3 0 copy REPLACE").unwrap(),
            ("127.0.0.1:6380".into(), 3, 1000, true, true, 1)
        );
        assert_eq!(
            req("MIGRATE h 1 \0 0 50 KEYS a b c").unwrap().5,
            3,
            "the key argument is the empty key (database byte only) with KEYS"
        );
        assert!(req("MIGRATE h 1 \0k 0 50 KEYS a")
            .unwrap_err()
            .contains("must be set to the empty string"));
        assert_eq!(
            req("MIGRATE h 1 k 0 50 AUTH").unwrap_err(),
            crate::errors::SYNTAX
        );
        assert_eq!(
            req("MIGRATE h 1 k 0 50 AUTH2 u").unwrap_err(),
            crate::errors::SYNTAX
        );
        assert_eq!(
            req("MIGRATE h 1 k 0 50 NOPE").unwrap_err(),
            crate::errors::SYNTAX
        );
        assert_eq!(
            req("MIGRATE h 1 k x 50").unwrap_err(),
            crate::errors::NOT_INT
        );
        assert_eq!(
            req("MIGRATE h 1 k 0 x").unwrap_err(),
            crate::errors::NOT_INT
        );
    }

    #[test]
    fn passwords_are_redacted() {
        let args: Vec<&[u8]> = "MIGRATE h 1 k 0 50 AUTH pw AUTH2 u pw2 KEYS AUTH x"
            .split(' ')
            .map(str::as_bytes)
            .collect();
        assert_eq!(redact(&args), [7, 9, 10]);
    }
}
