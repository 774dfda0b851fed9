//! The CLIENT family: LIST, INFO, KILL, SETNAME/GETNAME, ID, REPLY, NO-EVICT, PAUSE,
//! UNBLOCK and the rest, over the connections the server keeps in [`ServerInfo::clients`].

use cxltier_store::StoreError;

use crate::context::*;
use crate::resp::reply;
use crate::tracking::Mode;

/// The caller's own line is built from its session, which is current; the others' from what
/// the server last recorded of them.
fn client_meta(ctx: &Ctx<'_>, id: u64) -> Option<ClientMeta> {
    let mut m = ctx.info.clients.get(&id)?.clone();
    if id == ctx.session.id {
        m.update_from(ctx.session);
        m.last_active = std::time::Instant::now();
        // The caller's own buffers as they are while its command runs (Redis's view): the
        // input from this command on, and the replies not yet sent before it.
        m.qbuf = ctx.session.input_pending;
        m.omem = ctx.session.output_pending;
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

fn parse_kill_filter(args: &[&[u8]]) -> Result<KillFilter, String> {
    let mut f = KillFilter {
        skipme: true,
        ..KillFilter::default()
    };
    if args.len() % 2 != 0 {
        return Err(SYNTAX.into());
    }
    for pair in args.chunks(2) {
        let v = pair[1];
        match pair[0].to_ascii_uppercase().as_slice() {
            b"ID" => match parse_i64(v) {
                Some(id) if id > 0 => f.id = Some(id as u64),
                _ => return Err("ERR client-id should be greater than 0".into()),
            },
            b"ADDR" => f.addr = Some(v.to_vec()),
            b"LADDR" => f.laddr = Some(v.to_vec()),
            b"USER" => f.user = Some(v.to_vec()),
            b"SKIPME" => match v.to_ascii_lowercase().as_slice() {
                b"yes" => f.skipme = true,
                b"no" => f.skipme = false,
                _ => return Err(SYNTAX.into()),
            },
            b"TYPE" => match v.to_ascii_lowercase().as_slice() {
                b"normal" => f.kind = Some("normal"),
                b"pubsub" => f.kind = Some("pubsub"),
                b"master" | b"slave" | b"replica" => f.kind = Some("replica"),
                _ => return Err("ERR Unknown client type".into()),
            },
            b"MAXAGE" => match parse_i64(v) {
                Some(_) => {}
                None => return Err(NOT_INT.into()),
            },
            _ => return Err(SYNTAX.into()),
        }
    }
    Ok(f)
}

pub(crate) fn client(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let n = args.len();
    let sub = args[1].to_ascii_uppercase();
    let proto = ctx.session.proto;
    let wrong =
        |ctx: &mut Ctx<'_>| fail(ctx, &crate::errors::unknown_subcommand("CLIENT", args[1]));
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
                let mode = ctx.info.tracking.clients.get(&ctx.session.id);
                client_line(
                    &mut t,
                    ctx.info.user_name(ctx.session.user),
                    ctx.session.id,
                    &m,
                    std::time::Instant::now(),
                    false,
                    mode,
                );
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
                        let blocked = ctx.info.blocked.contains(&id);
                        let mode = ctx.info.tracking.clients.get(&id);
                        let user = ctx.info.user_name(m.user);
                        client_line(&mut t, user, id, &m, now, blocked, mode);
                    }
                }
            }
            reply::verbatim(ctx.out, proto, "txt", t.as_bytes());
        }
        // Redis checks the subcommand's arity (`client|kill`: -3) before it runs.
        (b"KILL", 2) => {
            return fail(
                ctx,
                "ERR wrong number of arguments for 'client|kill' command",
            )
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
                Err(e) => return fail(ctx, &e),
            };
            let user = match f.user.as_deref() {
                Some(name) => match ctx.info.acl.users.id_of(name) {
                    Some(id) => Some(id),
                    None => {
                        let msg = format!("ERR No such user '{}'", String::from_utf8_lossy(name));
                        return fail(ctx, &msg);
                    }
                },
                None => None,
            };
            let my_user = ctx.session.user;
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
                        && user.is_none_or(|u| u == if id == me { my_user } else { m.user })
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
        (b"PAUSE", 3 | 4) => {
            // Redis's order: the mode is checked before the timeout.
            let all = match args.get(3).map(|a| a.to_ascii_uppercase()) {
                None => true,
                Some(m) if m == b"ALL" => true,
                Some(m) if m == b"WRITE" => false,
                Some(_) => return fail(ctx, "ERR CLIENT PAUSE mode must be WRITE or ALL"),
            };
            let until = match pause_deadline(args[2]) {
                Ok(t) => t,
                Err(e) => return fail(ctx, e),
            };
            ctx.info.pause_clients(until, all);
            reply::ok(ctx.out);
        }
        (b"UNPAUSE", 2) => {
            // The held connections run again at the server's next look (`server::wake_paused`).
            ctx.info.pause = None;
            reply::ok(ctx.out);
        }
        (b"TRACKING", _) if n >= 3 => return tracking(ctx, args),
        (b"CACHING", 3) => {
            let Some(mode) = ctx.info.tracking.clients.get_mut(&ctx.session.id) else {
                return fail(ctx, "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled");
            };
            match args[2].to_ascii_lowercase().as_slice() {
                b"yes" if mode.optin => mode.caching = true,
                b"yes" => return fail(
                    ctx,
                    "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
                ),
                b"no" if mode.optout => mode.caching = true,
                b"no" => return fail(
                    ctx,
                    "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
                ),
                _ => return fail(ctx, SYNTAX),
            }
            reply::ok(ctx.out);
        }
        (b"GETREDIR", 2) => {
            let redirect = ctx.info.tracking.clients.get(&ctx.session.id);
            reply::int(ctx.out, redirect.map_or(-1, |m| m.redirect as i64));
        }
        (b"TRACKINGINFO", 2) => {
            let mode = ctx.info.tracking.clients.get(&ctx.session.id);
            let mut flags = vec![if mode.is_some() { "on" } else { "off" }];
            if let Some(m) = mode {
                let pairs = [
                    (m.bcast, "bcast"),
                    (m.optin, "optin"),
                    (m.optin && m.caching, "caching-yes"),
                    (m.optout, "optout"),
                    (m.optout && m.caching, "caching-no"),
                    (m.noloop, "noloop"),
                    (m.broken, "broken_redirect"),
                ];
                flags.extend(pairs.iter().filter(|p| p.0).map(|p| p.1));
            }
            reply::map(ctx.out, proto, 3);
            reply::bulk(ctx.out, b"flags");
            reply::set(ctx.out, proto, flags.len());
            for f in flags {
                reply::bulk(ctx.out, f.as_bytes());
            }
            reply::bulk(ctx.out, b"redirect");
            reply::int(ctx.out, mode.map_or(-1, |m| m.redirect as i64));
            reply::bulk(ctx.out, b"prefixes");
            let prefixes = mode.map(|m| m.prefixes.as_slice()).unwrap_or_default();
            let mut sorted: Vec<&Vec<u8>> = prefixes.iter().collect();
            sorted.sort();
            reply::array(ctx.out, sorted.len());
            for p in sorted {
                reply::bulk(ctx.out, p);
            }
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
                "PAUSE <timeout> [WRITE|ALL]",
                "    Suspend all, or just write, clients for <timeout> milliseconds.",
                "REPLY (ON|OFF|SKIP)",
                "    Control the replies sent to the current connection.",
                "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
                "         [OPTIN] [OPTOUT] [NOLOOP]",
                "    Control server assisted client side caching.",
                "CACHING (YES|NO)",
                "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
                "GETREDIR",
                "    Return the client ID we are redirecting to when tracking is enabled.",
                "TRACKINGINFO",
                "    Report tracking status for the current connection.",
                "UNBLOCK <clientid> [TIMEOUT|ERROR]",
                "    Unblock the specified blocked client.",
                "UNPAUSE",
                "    Stop the current client pause, resuming traffic.",
            ];
            reply::simple_lines(ctx.out, &lines);
        }
        _ => return wrong(ctx),
    }
    Ok(Effect::Read)
}

/// When a CLIENT PAUSE of `arg` milliseconds ends (Redis's `getTimeoutFromObjectOrReply` in
/// milliseconds: a whole number, not negative; 0 ends it at once). A pause longer than a
/// century is held for a century: the clock cannot hold every deadline Redis accepts.
fn pause_deadline(arg: &[u8]) -> Result<std::time::Instant, &'static str> {
    let ms = parse_i64(arg).ok_or("ERR timeout is not an integer or out of range")?;
    let ms = u64::try_from(ms).map_err(|_| "ERR timeout is negative")?;
    const CENTURY_MS: u64 = 100 * 365 * 24 * 3600 * 1000;
    let now = std::time::Instant::now();
    Ok(now + std::time::Duration::from_millis(ms.min(CENTURY_MS)))
}

/// CLIENT TRACKING on|off [REDIRECT id] [BCAST] [PREFIX p ...] [OPTIN] [OPTOUT] [NOLOOP], with
/// Redis 7.0's checks in its order (options first, then the mode's rules).
fn tracking(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut mode = Mode::default();
    let mut j = 3;
    while j < args.len() {
        let more = j + 1 < args.len();
        match args[j].to_ascii_lowercase().as_slice() {
            b"redirect" if more => {
                j += 1;
                if mode.redirect != 0 {
                    return fail(
                        ctx,
                        "ERR A client can only redirect to a single other client",
                    );
                }
                let Some(id) = parse_i64(args[j]) else {
                    return fail(ctx, NOT_INT);
                };
                let exists = id == ctx.session.id as i64
                    || (id > 0 && ctx.info.clients.contains_key(&(id as u64)));
                if !exists {
                    return fail(ctx, "ERR The client ID you want redirect to does not exist");
                }
                mode.redirect = id as u64;
            }
            b"bcast" => mode.bcast = true,
            b"optin" => mode.optin = true,
            b"optout" => mode.optout = true,
            b"noloop" => mode.noloop = true,
            b"prefix" if more => {
                j += 1;
                mode.prefixes.push(args[j].to_vec());
            }
            _ => return fail(ctx, SYNTAX),
        }
        j += 1;
    }
    match args[2].to_ascii_lowercase().as_slice() {
        b"on" => {
            if let Err(e) = ctx.info.tracking.enable(ctx.session.id, mode) {
                return fail(ctx, &e);
            }
        }
        b"off" => ctx.info.tracking.disable(ctx.session.id),
        _ => return fail(ctx, SYNTAX),
    }
    // The store keeps the keys it expires while someone is told of them: their readers are.
    let wanted = ctx.info.notify.wants(crate::notify::class::EXPIRED)
        || ctx.info.repl.active
        || !ctx.info.tracking.clients.is_empty();
    ctx.store.track_expired(wanted);
    reply::ok(ctx.out);
    Ok(Effect::Read)
}

#[cfg(test)]
mod tests {

    use super::*;

    use crate::testdb::*;

    /// CLIENT PAUSE as Redis 7.0 holds commands: a held command is answered nothing here (the
    /// server keeps it queued and runs it again when the pause ends).
    #[test]
    fn client_pause_holds_writes_or_everything() {
        let (mut db, mut other) = Db::two_connections();
        db.replies(&[
            ("PFADD h a", ":1\r\n"),
            (
                "CLIENT PAUSE 1 NOPE",
                "-ERR CLIENT PAUSE mode must be WRITE or ALL\r\n",
            ),
            ("CLIENT PAUSE -1 WRITE", "-ERR timeout is negative\r\n"),
            (
                "CLIENT PAUSE x",
                "-ERR timeout is not an integer or out of range\r\n",
            ),
            ("CLIENT PAUSE 100000 WRITE", "+OK\r\n"),
        ]);
        db.replies_as(
            &mut other,
            &[
                ("GET k", "$-1\r\n"),
                ("SET k v", ""),
                // Not writes, but they may replicate.
                ("PUBLISH c m", ""),
                ("PFCOUNT h", ""),
                ("EVAL return 0", ""),
                // Refused at once: the checks before the pause's answer.
                (
                    "SET k",
                    "-ERR wrong number of arguments for 'set' command\r\n",
                ),
                ("MULTI", "+OK\r\n"),
                ("GET k", "+QUEUED\r\n"),
                ("EXEC", "*1\r\n$-1\r\n"),
            ],
        );
        // A transaction that writes is held at EXEC.
        db.info.pause = None;
        db.replies_as(
            &mut other,
            &[("MULTI", "+OK\r\n"), ("SET k v", "+QUEUED\r\n")],
        );
        db.cmd("CLIENT PAUSE 100000 WRITE");
        db.replies_as(&mut other, &[("EXEC", "")]);
        // A pause already in force keeps the stricter mode and the later end: ALL holds reads.
        db.cmd("CLIENT PAUSE 1 ALL");
        let pause = db.info.pause.expect("paused");
        assert!(pause.all);
        assert!(pause.until > std::time::Instant::now() + std::time::Duration::from_secs(60));
        db.replies_as(&mut other, &[("GET k", "")]);
        // UNPAUSE ends it (here from a replica's connection, which no pause holds).
        let mut replica = Session::new(3, true);
        replica.is_replica = true;
        db.replies_as(&mut replica, &[("CLIENT UNPAUSE", "+OK\r\n")]);
        assert!(db.info.pause.is_none());
        db.replies_as(
            &mut other,
            &[("EXEC", "*1\r\n+OK\r\n"), ("GET k", "$1\r\nv\r\n")],
        );
        // A function declared no-writes runs through a WRITE pause; one that may write waits.
        let code = "#!lua name=lib\n\
            redis.register_function{function_name='ro', callback=function() return 1 end, flags={'no-writes'}}\n\
            redis.register_function('rw', function() return 2 end)";
        assert_eq!(eval(&mut db, &["FUNCTION", "LOAD", code]), "$3\r\nlib\r\n");
        db.cmd("CLIENT PAUSE 100000 WRITE");
        db.replies_as(
            &mut other,
            &[
                ("FCALL ro 0", ":1\r\n"),
                ("FCALL_RO ro 0", ":1\r\n"),
                ("FCALL rw 0", ""),
            ],
        );
        db.info.pause = None;
        // A pause of 0 ms is over at once.
        db.replies(&[("CLIENT PAUSE 0 ALL", "+OK\r\n"), ("GET k", "$1\r\nv\r\n")]);
    }

    #[test]
    fn client_subcommands() {
        let mut db = Db::large();
        db.session.id = 7;
        let now = std::time::Instant::now();
        for (id, addr) in [(7u64, "127.0.0.1:5000"), (8, "127.0.0.1:5001")] {
            db.info.clients.insert(
                id,
                ClientMeta::new(addr.into(), "127.0.0.1:6379".into(), 9, now),
            );
        }
        db.replies(&[
            ("CLIENT ID", ":7\r\n"),
            ("CLIENT SETNAME worker", "+OK\r\n"),
        ]);
        assert!(db
            .cmd("CLIENT SETNAME a b")
            .contains("wrong number of arguments"));
        let list = db.cmd("CLIENT LIST");
        assert!(
            list.contains("id=7 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=9 name=worker "),
            "{list}"
        );
        assert!(list.contains("cmd=client|list "), "{list}");
        assert!(list.contains("id=8 addr=127.0.0.1:5001 "), "{list}");
        assert!(!db.cmd("CLIENT LIST ID 8").contains("id=7"));
        assert!(db.cmd("CLIENT LIST TYPE pubsub").starts_with("$0\r\n"));
        assert!(db.cmd("CLIENT INFO").contains("id=7 "));
        assert_eq!(db.cmd("CLIENT NO-EVICT on"), "+OK\r\n");
        assert!(db.cmd("CLIENT INFO").contains(" flags=e "));
        // KILL: the old form by address, and filters (SKIPME yes by default).
        db.replies(&[
            (
                "CLIENT KILL",
                "-ERR wrong number of arguments for 'client|kill' command\r\n",
            ),
            ("CLIENT KILL 127.0.0.1:9", "-ERR No such client\r\n"),
            ("CLIENT KILL USER nobody", "-ERR No such user 'nobody'\r\n"),
            ("CLIENT KILL ID 7", ":0\r\n"),
            ("CLIENT KILL ID 7 SKIPME no", ":1\r\n"),
            ("CLIENT KILL LADDR 127.0.0.1:6379", ":1\r\n"),
            ("CLIENT KILL 127.0.0.1:5001", "+OK\r\n"),
        ]);
        assert_eq!(db.info.kill, [7, 8, 8]);
        db.replies_starting(&[
            (
                "CLIENT KILL ID 0",
                "-ERR client-id should be greater than 0",
            ),
            ("CLIENT KILL ID", "-ERR"),
            ("CLIENT NOPE", "-ERR unknown subcommand"),
        ]);
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

    /// Redis's "PubSub messages with CLIENT REPLY OFF": subscription confirmations and
    /// messages are pushes, sent whatever CLIENT REPLY says (RESP2 and RESP3 alike); only the
    /// replies go. The old server dropped them with the reply, and the subscriber waited for ever.
    #[test]
    fn pushes_are_sent_under_client_reply_off_and_skip() {
        for proto in ["2", "3"] {
            let mut db = Db::large();
            db.session.id = 1;
            served(&mut db, &format!("HELLO {proto}"));
            let push = if proto == "3" { ">" } else { "*" };
            // Each line and what the server sends for it, a push's type written `{push}`.
            let script: &[(&str, &str)] = &[
                ("CLIENT REPLY OFF", ""),
                (
                    "SUBSCRIBE ch",
                    "{push}3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n",
                ),
                (
                    "PSUBSCRIBE c*",
                    "{push}3\r\n$10\r\npsubscribe\r\n$2\r\nc*\r\n:2\r\n",
                ),
                // PING's answer is a reply, not a push: dropped.
                ("PING", ""),
                (
                    "UNSUBSCRIBE ch",
                    "{push}3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:1\r\n",
                ),
                (
                    "PUNSUBSCRIBE",
                    "{push}3\r\n$12\r\npunsubscribe\r\n$2\r\nc*\r\n:0\r\n",
                ),
                ("CLIENT REPLY ON", "+OK\r\n"),
                // SKIP: the next command's reply goes, its pushes stay.
                ("CLIENT REPLY SKIP", ""),
                (
                    "SUBSCRIBE x",
                    "{push}3\r\n$9\r\nsubscribe\r\n$1\r\nx\r\n:1\r\n",
                ),
            ];
            for (line, want) in script {
                let want = want.replace("{push}", push);
                assert_eq!(served(&mut db, line), want, "RESP{proto}: {line}");
            }
            assert!(!served(&mut db, "PING").is_empty());
        }
        // RESP3: a message to itself survives OFF, PUBLISH's count does not.
        let mut db = Db::large();
        served(&mut db, "HELLO 3");
        served(&mut db, "SUBSCRIBE ch");
        served(&mut db, "CLIENT REPLY OFF");
        assert_eq!(
            served(&mut db, "PUBLISH ch hi"),
            ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"
        );
    }

    /// The invalidations waiting for the server, routed as it routes them: each connection of
    /// `peers` (id, protocol, subscribed) gets the bytes shown.
    fn delivered(db: &mut Db, peers: &[(u64, u8, bool)]) -> Vec<(u64, String)> {
        db.info.tracking.broadcast();
        let outbox = std::mem::take(&mut db.info.tracking.outbox);
        let peer = |id| {
            peers
                .iter()
                .find(|p| p.0 == id)
                .map(|&(_, proto, subscribed)| crate::tracking::Peer { proto, subscribed })
        };
        outbox
            .iter()
            .filter_map(|inv| match db.info.tracking.route(inv, peer) {
                crate::tracking::Route::Send { to, bytes } => {
                    Some((to, String::from_utf8(bytes).unwrap()))
                }
                crate::tracking::Route::Drop => None,
            })
            .collect()
    }

    const INV_K: &str = ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n";

    /// Default mode in RESP3: a key read is invalidated once when another connection writes
    /// it (delivered by the server), and after the reply of the tracking connection's own
    /// write (not with NOLOOP); a key not read again is not invalidated again.
    #[test]
    fn default_tracking_invalidates_each_key_read_once() {
        let (mut db, mut other) = Db::two_connections();
        db.replies_starting(&[("HELLO 3", "%7")]);
        db.replies(&[
            ("CLIENT TRACKING on", "+OK\r\n"),
            ("SET k 1", "+OK\r\n"),
            ("GET k", "$1\r\n1\r\n"),
        ]);
        assert_eq!(db.info.tracking.totals(), (1, 1, 0));
        run_as(&mut db, &mut other, "SET k 2");
        let peers = [(1, 3, false), (2, 2, false)];
        assert_eq!(delivered(&mut db, &peers), [(1, INV_K.to_string())]);
        run_as(&mut db, &mut other, "SET k 3");
        assert!(delivered(&mut db, &peers).is_empty(), "told once");
        db.cmd("GET k");
        assert_eq!(db.cmd("SET k 4"), format!("+OK\r\n{INV_K}"));
        // Inside MULTI: after EXEC's whole reply.
        db.cmd("GET k");
        db.cmd("MULTI");
        db.cmd("INCR k");
        assert_eq!(
            db.cmd("EXEC"),
            format!("*1\r\n:5\r\n{INV_K}"),
            "after the transaction's reply"
        );
        // NOLOOP: its own writes say nothing; another's do.
        db.cmd("CLIENT TRACKING on NOLOOP");
        db.cmd("GET k");
        assert_eq!(db.cmd("SET k 6"), "+OK\r\n");
        db.cmd("GET k");
        run_as(&mut db, &mut other, "DEL k");
        assert_eq!(delivered(&mut db, &peers), [(1, INV_K.to_string())]);
        // FLUSHALL: every tracking connection hears null, the table is emptied.
        db.cmd("CLIENT TRACKING off");
        db.cmd("CLIENT TRACKING on");
        db.cmd("SET k 7");
        db.cmd("GET k");
        run_as(&mut db, &mut other, "WATCH k");
        assert_eq!(
            db.cmd("FLUSHALL"),
            "+OK\r\n>2\r\n$10\r\ninvalidate\r\n_\r\n",
            "a null only, though k is watched"
        );
        assert_eq!(db.info.tracking.totals(), (0, 0, 0));
        assert_eq!(info_field(&mut db, "clients", "tracking_clients"), "1");
        db.cmd("GET k");
        db.cmd("CLIENT TRACKING off");
        assert_eq!(info_field(&mut db, "clients", "tracking_clients"), "0");
        // The keys read stay until changed, and a flush empties the table with nobody tracking.
        assert_eq!(db.info.tracking.totals(), (1, 1, 0));
        db.cmd("FLUSHALL");
        assert_eq!(db.info.tracking.totals(), (0, 0, 0));
    }

    /// RESP2 connections redirect to a connection subscribed to `__redis__:invalidate`: the
    /// message is an array of keys, `$-1` for a flush; a redirection that went away is said
    /// (`tracking-redir-broken`) to a RESP3 tracking connection, and shown as flag `R`.
    #[test]
    fn resp2_tracking_redirects_to_the_invalidate_channel() {
        let (mut db, mut other) = Db::two_connections();
        let now = std::time::Instant::now();
        for id in [1, 2] {
            let meta = ClientMeta::new("a:1".into(), "a:2".into(), 9, now);
            db.info.clients.insert(id, meta);
        }
        assert_eq!(
            db.cmd("CLIENT TRACKING on REDIRECT 99"),
            "-ERR The client ID you want redirect to does not exist\r\n"
        );
        db.replies(&[
            ("CLIENT TRACKING on REDIRECT 2", "+OK\r\n"),
            ("CLIENT GETREDIR", ":2\r\n"),
            ("SET k 1", "+OK\r\n"),
            ("GET k", "$1\r\n1\r\n"),
        ]);
        assert!(db.cmd("CLIENT INFO").contains(" flags=t db=0 "));
        assert!(db.cmd("CLIENT INFO").contains(" redir=2 "));
        assert_eq!(db.cmd("SET k 2"), "+OK\r\n", "nothing in its own replies");
        let msg = "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$1\r\nk\r\n";
        let subscribed = [(1, 2, false), (2, 2, true)];
        assert_eq!(delivered(&mut db, &subscribed), [(2, msg.to_string())]);
        db.cmd("GET k");
        run_as(&mut db, &mut other, "FLUSHDB");
        let null = "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n";
        assert_eq!(delivered(&mut db, &subscribed), [(2, null.to_string())]);
        // Not subscribed: nothing can be said in RESP2.
        db.cmd("GET k");
        db.cmd("SET k 3");
        assert!(delivered(&mut db, &[(1, 2, false), (2, 2, false)]).is_empty());
        // The redirection gone: a RESP3 tracking connection is told so.
        db.cmd("HELLO 3");
        db.cmd("GET k");
        db.cmd("SET k 4");
        assert_eq!(
            delivered(&mut db, &[(1, 3, false)]),
            [(
                1,
                ">2\r\n$21\r\ntracking-redir-broken\r\n:2\r\n".to_string()
            )]
        );
        assert!(db.cmd("CLIENT INFO").contains(" flags=tR db=0 "));
    }

    /// BCAST: every write under a prefix is announced once per turn, the keys in order, to each
    /// connection of the prefix (NOLOOP leaves its own out); prefixes must not overlap.
    #[test]
    fn bcast_announces_writes_under_its_prefixes() {
        let (mut db, mut other) = Db::two_connections();
        let now = std::time::Instant::now();
        let meta = ClientMeta::new("a:1".into(), "a:2".into(), 9, now);
        db.info.clients.insert(1, meta);
        db.cmd("HELLO 3");
        db.replies(&[
            ("CLIENT TRACKING on BCAST PREFIX a: PREFIX b:", "+OK\r\n"),
            (
                "CLIENT TRACKING on BCAST PREFIX a:x",
                "-ERR Prefix 'a:x' overlaps with an existing prefix 'a:'. Prefixes for a single client must not overlap.\r\n",
            ),
            (
                "CLIENT TRACKING on",
                "-ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.\r\n",
            ),
            (
                "CLIENT TRACKING on BCAST OPTIN",
                "-ERR OPTIN and OPTOUT are not compatible with BCAST\r\n",
            ),
        ]);
        run_as(&mut db, &mut other, "MSET a:2 1 a:1 1 c 1 b:1 1");
        let peers = [(1, 3, false)];
        assert_eq!(
            delivered(&mut db, &peers),
            [
                (
                    1,
                    ">2\r\n$10\r\ninvalidate\r\n*2\r\n$3\r\na:1\r\n$3\r\na:2\r\n".to_string()
                ),
                (
                    1,
                    ">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nb:1\r\n".to_string()
                ),
            ]
        );
        assert_eq!(info_field(&mut db, "stats", "tracking_total_prefixes"), "2");
        assert!(db.cmd("CLIENT INFO").contains(" flags=tB db=0 "));
        let info = db.cmd("CLIENT TRACKINGINFO");
        assert_eq!(
            info,
            "%3\r\n$5\r\nflags\r\n~2\r\n$2\r\non\r\n$5\r\nbcast\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*2\r\n$2\r\na:\r\n$2\r\nb:\r\n"
        );
        db.cmd("CLIENT TRACKING off");
        db.cmd("CLIENT TRACKING on BCAST NOLOOP");
        db.cmd("SET mine 1");
        run_as(&mut db, &mut other, "SET theirs 1");
        assert_eq!(
            delivered(&mut db, &peers),
            [(
                1,
                ">2\r\n$10\r\ninvalidate\r\n*1\r\n$6\r\ntheirs\r\n".to_string()
            )]
        );
    }

    /// OPTIN tracks only the command after CLIENT CACHING yes; OPTOUT all but the one after
    /// CLIENT CACHING no; the errors of CACHING are Redis's.
    #[test]
    fn optin_and_optout_follow_client_caching() {
        let (mut db, mut other) = Db::two_connections();
        db.replies(&[
            (
                "CLIENT CACHING yes",
                "-ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled\r\n",
            ),
            ("CLIENT TRACKING on OPTIN", "+OK\r\n"),
            (
                "CLIENT CACHING no",
                "-ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.\r\n",
            ),
            (
                "CLIENT TRACKING on OPTOUT",
                "-ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.\r\n",
            ),
            ("GET a", "$-1\r\n"),
            ("CLIENT CACHING yes", "+OK\r\n"),
            ("GET b", "$-1\r\n"),
            ("GET c", "$-1\r\n"),
        ]);
        assert_eq!(db.info.tracking.totals().0, 1, "b only");
        db.cmd("CLIENT TRACKING off");
        db.replies(&[
            ("CLIENT TRACKING on OPTOUT", "+OK\r\n"),
            ("CLIENT CACHING no", "+OK\r\n"),
            ("GET d", "$-1\r\n"),
            ("GET e", "$-1\r\n"),
        ]);
        run_as(&mut db, &mut other, "MSET a 1 b 1 c 1 d 1 e 1");
        let told: Vec<String> = db
            .info
            .tracking
            .outbox
            .iter()
            .flat_map(|i| i.keys.clone().unwrap_or_default())
            .map(|k| String::from_utf8(k).unwrap())
            .collect();
        assert_eq!(told, ["b", "e"]);
    }

    /// The table keeps `tracking-table-max-keys` keys: those over it are invalidated; keys
    /// that expire are invalidated too.
    #[test]
    fn the_table_is_capped_and_expiries_invalidate() {
        let (mut db, _) = Db::two_connections();
        db.cmd("CLIENT TRACKING on");
        db.cmd("MSET k1 1 k2 2 k3 3");
        db.cmd("MGET k1 k2 k3");
        assert_eq!(info_field(&mut db, "stats", "tracking_total_keys"), "3");
        db.cmd("CONFIG SET tracking-table-max-keys 1");
        assert_eq!(info_field(&mut db, "stats", "tracking_total_keys"), "1");
        assert_eq!(db.info.tracking.take_pending().len(), 0);
        assert_eq!(db.info.tracking.outbox.len(), 2, "two keys invalidated");
        db.cmd("CONFIG SET tracking-table-max-keys 0");
        db.cmd("FLUSHALL");
        db.info.tracking.outbox.clear();
        db.cmd("SET e 1 PX 1");
        db.cmd("GET e");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let mut other = Session::new(2, true);
        assert_eq!(run_as(&mut db, &mut other, "GET e"), "$-1\r\n");
        let told: Vec<_> = db.info.tracking.outbox.drain(..).map(|i| i.keys).collect();
        assert_eq!(told, [Some(vec![b"e".to_vec()])]);
    }

    /// A script's read-only commands make its caller remember the script's keys (not theirs);
    /// a script that reads nothing tracks nothing.
    #[test]
    fn scripts_track_their_keys_when_they_read() {
        let (mut db, _) = Db::two_connections();
        db.cmd("CLIENT TRACKING on");
        eval(
            &mut db,
            &["EVAL", "redis.call('set', 'k3', 'bar')", "2", "k1", "k2"],
        );
        assert_eq!(db.info.tracking.totals().0, 0);
        eval(
            &mut db,
            &["EVAL", "redis.call('get', 'k3')", "2", "k1", "k2"],
        );
        assert_eq!(db.info.tracking.totals().0, 2);
        eval(&mut db, &["EVAL_RO", "redis.call('ping')", "1", "k4"]);
        assert_eq!(db.info.tracking.totals().0, 2);
    }
}
