//! Running one command: the checks before it (arity, NOAUTH, RESP2's subscribed mode, OOM and
//! NOREPLICAS refusals, queuing inside MULTI), the database byte given to each key argument,
//! its handler from the table, and what follows it (the write stream, watchers and blocked
//! clients, keyspace notifications, counters).

use cxltier_store::{Store, StoreError};

use crate::command::{flag, Command};
use crate::context::*;
use crate::notify::{channels, class, Event};
use crate::resp::reply;
use crate::table;
use crate::write_stream::Op;

fn store_error(out: &mut Vec<u8>, e: &StoreError) {
    match e {
        StoreError::Full { .. } => reply::error(out, &format!("OOM {e}")),
        StoreError::TooLarge { .. } => reply::error(out, &format!("ERR {e}")),
        _ => reply::error(out, &format!("ERR {e}")),
    }
}

/// Run one command, writing its reply to `out`. The command is found in the table
/// ([`crate::table`]), which gives its arity and whether it may run before AUTH. While
/// connections track keys (client-side caching), the outermost command (not one of a script's)
/// is followed by the invalidations it caused for its own connection, after its reply.
pub fn execute(
    store: &mut Store,
    info: &mut ServerInfo,
    session: &mut Session,
    args: &[&[u8]],
    out: &mut Vec<u8>,
) -> Effect {
    let tracking = !info.tracking.clients.is_empty() && store.frozen_clock().is_none();
    if !tracking {
        return execute_command(store, info, session, args, out);
    }
    info.tracking.current = Some(session.id);
    let effect = execute_command(store, info, session, args, out);
    let keeps_caching = args
        .first()
        .and_then(|name| table::COMMANDS.lookup(name))
        .is_some_and(|c| c.has(flag::KEEPS_CACHING));
    if session.multi.is_none() && !keeps_caching {
        info.tracking.command_done(session.id);
    }
    limit_tracking(info);
    send_invalidations(info, session, out);
    info.tracking.current = None;
    effect
}

/// Write the invalidations pending for `session`'s own connection to `out` (as pushes); those
/// for other connections or a redirection go to the outbox the loop delivers.
fn send_invalidations(info: &mut ServerInfo, session: &mut Session, out: &mut Vec<u8>) {
    for inv in info.tracking.take_pending() {
        let own = info
            .tracking
            .clients
            .get(&session.id)
            .is_some_and(|m| m.redirect == 0);
        if !own {
            info.tracking.outbox.push(inv);
            continue;
        }
        let me = crate::tracking::Peer {
            proto: session.proto,
            subscribed: session.subscribed(),
        };
        if let crate::tracking::Route::Send { bytes, .. } = info
            .tracking
            .route(&inv, |id| (id == session.id).then_some(me))
        {
            session.pushed.push(out.len()..out.len() + bytes.len());
            out.extend_from_slice(&bytes);
        }
    }
}

/// Keep the client-side caching table within `tracking-table-max-keys`.
pub(crate) fn limit_tracking(info: &mut ServerInfo) {
    if info.tracking.active() {
        let max = info.knobs.int("tracking-table-max-keys").max(0) as usize;
        info.tracking.limit(max);
    }
}

fn execute_command(
    store: &mut Store,
    info: &mut ServerInfo,
    session: &mut Session,
    args: &[&[u8]],
    out: &mut Vec<u8>,
) -> Effect {
    let at = out.len();
    let nested = store.frozen_clock().is_some();
    match admit(store, info, session, args, out) {
        Ok(cmd) => {
            let mut ctx = Ctx {
                store,
                info,
                session,
                out,
                execute,
                run_queued,
                dry_run: acl_dry_run,
                commands: &table::COMMANDS,
            };
            dispatch(&mut ctx, cmd, args)
        }
        // Refused before it ran (unknown, arity, NOAUTH, OOM, EXECABORT ...), or queued.
        Err(effect) => {
            count_error_reply(info, &out[at..], nested, false);
            effect
        }
    }
}

/// A parked command the loop answered itself (its timeout, CLIENT UNBLOCK, WAIT's count)
/// rather than running it again: one call of it, failed when `reply` is an error, which
/// errorstats counts.
pub fn count_answered_parked(info: &mut ServerInfo, args: &[&[u8]], reply: &[u8]) {
    let Some(cmd) = args.first().and_then(|name| table::COMMANDS.lookup(name)) else {
        return;
    };
    let stat = info
        .command_stats
        .entry(CommandName(cmd.name, table::COMMANDS.subcommand(cmd, args)))
        .or_default();
    stat.calls += 1;
    if reply.first() == Some(&b'-') {
        stat.failed_calls += 1;
    }
    count_error_reply(info, reply, false, false);
}

/// Counts an error reply in INFO errorstats where it was made: `nested` (a command a script or
/// EXEC ran) notes it, so that a script's error passing it on (`passes_on`: the command runs
/// scripts) is not counted again.
fn count_error_reply(info: &mut ServerInfo, reply: &[u8], nested: bool, passes_on: bool) {
    if reply.first() != Some(&b'-') {
        return;
    }
    let text = &crate::error_stats::error_text_with_dash(reply)[1..];
    if passes_on && info.nested_errors.iter().any(|e| text.starts_with(e)) {
        return;
    }
    info.errors.count(reply);
    if nested {
        info.nested_errors.push(text.to_vec());
    }
}

/// The checks before a command runs: `Ok` with the command to run, or `Err` once its answer
/// (a refusal, or QUEUED inside MULTI) is written.
fn admit(
    store: &mut Store,
    info: &mut ServerInfo,
    session: &mut Session,
    args: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<&'static Command, Effect> {
    let Some(&name) = args.first() else {
        // An empty multibulk is ignored, like Redis.
        return Err(Effect::Read);
    };
    info.total_commands += 1;
    session.pushed.clear();
    let Some(cmd) = table::COMMANDS.lookup(name) else {
        unknown_command(out, args);
        session.flag_transaction();
        return Err(Effect::Read);
    };
    // Redis's order: an unknown command and a wrong arity are said before NOAUTH.
    if !cmd.arity_ok(args.len()) {
        info.command_stats
            .entry(CommandName(cmd.name, table::COMMANDS.subcommand(cmd, args)))
            .or_default()
            .rejected_calls += 1;
        arity(out, name);
        session.flag_transaction();
        return Err(Effect::Read);
    }
    if info.acl.users.auth_required() && !session.authed && !cmd.has(flag::NO_AUTH) {
        info.command_stats
            .entry(CommandName(cmd.name, table::COMMANDS.subcommand(cmd, args)))
            .or_default()
            .rejected_calls += 1;
        reply::error(out, "NOAUTH Authentication required.");
        session.flag_transaction();
        return Err(Effect::Read);
    }
    if session.proto < 3 && session.subscribed() && !cmd.has(flag::ALLOWED_IN_RESP2_SUBSCRIBED) {
        reply::error(
            out,
            &format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                cmd.name.to_ascii_lowercase()
            ),
        );
        return Err(Effect::Read);
    }
    if let Err(denied) = acl_check(&info.acl.users, session.user, cmd, args) {
        info.command_stats
            .entry(CommandName(cmd.name, table::COMMANDS.subcommand(cmd, args)))
            .or_default()
            .rejected_calls += 1;
        acl_log(info, session, cmd, args, denied);
        let msg = if session.in_script {
            // A script's `redis.call` raises it (Redis's scriptVerifyACL).
            format!(
                "ERR The user executing the script {}",
                denied.0.script_message()
            )
        } else {
            denied.0.error(cmd, table::COMMANDS.subcommand(cmd, args))
        };
        reply::error(out, &msg);
        session.flag_transaction();
        return Err(Effect::Read);
    }
    if let Some(err) = refusal(store, info, session, cmd, args) {
        info.command_stats
            .entry(CommandName(cmd.name, table::COMMANDS.subcommand(cmd, args)))
            .or_default()
            .rejected_calls += 1;
        if cmd.has(flag::TX_EXEC) && session.multi.is_some() {
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
        return Err(Effect::Read);
    }
    // Keys evicted to make room for this command (Redis's order): their readers hear of it
    // before its reply.
    if info.tracking.current == Some(session.id) && info.tracking.active() {
        send_invalidations(info, session, out);
    }
    if held_by_pause(store, info, session, cmd, args) {
        // Not counted: it runs again, from the start, when the pause ends.
        info.total_commands -= 1;
        return Err(Effect::Postponed);
    }
    session.last_cmd = cmd.name;
    session.last_sub = table::COMMANDS.subcommand(cmd, args);
    if let Some(queued) = session.multi.as_mut() {
        // Inside MULTI everything but the transaction's own commands is queued for EXEC.
        if !cmd.has(flag::TX_CONTROL) {
            if cmd.has(flag::NO_MULTI) {
                reply::error(out, "ERR Command not allowed inside a transaction");
                session.multi_failed = true;
                return Err(Effect::Read);
            }
            queued.push(args.iter().map(|a| a.to_vec()).collect());
            reply::simple(out, "QUEUED");
            return Err(Effect::Read);
        }
    }
    Ok(cmd)
}

/// One parameter of the configuration file, applied before the first client is served
/// ([`crate::config::set_at_start`]); `Err` is why it was refused.
pub fn apply_setting_at_start(
    store: &mut Store,
    info: &mut ServerInfo,
    name: &str,
    value: &str,
) -> Result<(), String> {
    let mut session = Session::new(0, true);
    let mut out = Vec::new();
    let mut ctx = Ctx {
        store,
        info,
        session: &mut session,
        out: &mut out,
        execute,
        run_queued,
        dry_run: acl_dry_run,
        commands: &table::COMMANDS,
    };
    crate::config::set_at_start(&mut ctx, name, value)
}

/// What the ACL refused, and the argument (key or channel) that made it refuse.
#[derive(Debug, Clone, Copy)]
struct Denied(Refused, usize);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    Command,
    Key,
    Channel,
}

impl Refused {
    /// The error a client gets (Redis's processCommand).
    fn error(self, cmd: &Command, sub: Option<&str>) -> String {
        match self {
            Refused::Command => {
                let name = cmd.name.to_ascii_lowercase();
                match sub {
                    Some(sub) => format!(
                        "NOPERM this user has no permissions to run the '{name}|{sub}' command"
                    ),
                    None => format!("NOPERM this user has no permissions to run the '{name}' command"),
                }
            }
            Refused::Key => {
                "NOPERM this user has no permissions to access one of the keys used as arguments"
                    .into()
            }
            Refused::Channel => {
                "NOPERM this user has no permissions to access one of the channels used as arguments"
                    .into()
            }
        }
    }

    /// The end of a script's error (Redis's getAclErrorMessage).
    fn script_message(self) -> &'static str {
        match self {
            Refused::Command => "can't run this command or subcommand",
            Refused::Key => {
                "can't access at least one of the keys mentioned in the command arguments"
            }
            Refused::Channel => "can't publish to the channel mentioned in the command",
        }
    }

    /// EXEC's reason when the rules changed since the command was queued.
    fn exec_reason(self) -> &'static str {
        match self {
            Refused::Command => "no permission to execute the command or subcommand",
            Refused::Key => "no permission to touch the specified keys",
            Refused::Channel => "no permission to access one of the channels used as arguments",
        }
    }

    fn reason(self) -> crate::acl::Reason {
        match self {
            Refused::Command => crate::acl::Reason::Command,
            Refused::Key => crate::acl::Reason::Key,
            Refused::Channel => crate::acl::Reason::Channel,
        }
    }
}

/// Record an ACL refusal in ACL LOG: the command's full name, or the key or channel.
fn acl_log(info: &mut ServerInfo, session: &Session, cmd: &Command, args: &[&[u8]], d: Denied) {
    let object = match d.0 {
        Refused::Command => {
            let name = cmd.name.to_ascii_lowercase();
            match table::COMMANDS.subcommand(cmd, args) {
                Some(sub) => format!("{name}|{sub}").into_bytes(),
                None => name.into_bytes(),
            }
        }
        _ => args.get(d.1).map(|a| a.to_vec()).unwrap_or_default(),
    };
    info.acl_deny(session, d.0.reason(), &object, None);
}

/// The ACL's check of `cmd` run with `args` by user `user` (Redis's ACLCheckAllUserCommandPerm):
/// the command or subcommand (or an allowed first argument), then each key for what the
/// command does with it (its key-spec flags: read, write), then each channel it publishes or
/// subscribes to. A user deleted since finds nothing allowed.
fn acl_check(
    users: &crate::acl::Users,
    user: crate::acl::UserId,
    cmd: &'static Command,
    args: &[&[u8]],
) -> Result<(), Denied> {
    let Some(u) = users.get(user) else {
        return Err(Denied(Refused::Command, 0));
    };
    let p = &u.perms;
    if p.unrestricted() {
        return Ok(());
    }
    let commands = &*table::COMMANDS;
    let catalog = commands.acl();
    if !cmd.has(flag::NO_AUTH) && !p.allows_command(catalog, commands.acl_id(cmd, args), args) {
        return Err(Denied(Refused::Command, 0));
    }
    if !p.all_keys() {
        use crate::command_spec::ks;
        let described = crate::command_info::keys_with_flags(commands, args);
        let need = |i: usize| {
            let f = described
                .iter()
                .find(|&&(at, _)| at == i)
                .map_or(ks::ACCESS | ks::UPDATE, |&(_, f)| f);
            let mut need = 0;
            if f & ks::ACCESS != 0 {
                need |= crate::acl::READ;
            }
            if f & (ks::INSERT | ks::DELETE | ks::UPDATE) != 0 {
                need |= crate::acl::WRITE;
            }
            need
        };
        let mut denied = None;
        cmd.for_each_key_position(args, |i| {
            if denied.is_none() && !p.allows_key(args[i], need(i)) {
                denied = Some(i);
            }
        });
        // Keys Redis finds that the table does not mark (a script's KEYS).
        for &(i, _) in &described {
            if denied.is_none() && i < args.len() && !p.allows_key(args[i], need(i)) {
                denied = Some(i);
            }
        }
        if let Some(i) = denied {
            return Err(Denied(Refused::Key, i));
        }
    }
    if !p.all_channels() {
        let (from, pattern) = if cmd.has(flag::CHANNEL_PUBLISH) {
            (1..2.min(args.len()), false)
        } else if cmd.has(flag::CHANNELS_SUBSCRIBE) {
            (1..args.len(), false)
        } else if cmd.has(flag::CHANNEL_PATTERNS) {
            (1..args.len(), true)
        } else {
            (0..0, false)
        };
        for i in from {
            if !p.allows_channel(args[i], pattern) {
                return Err(Denied(Refused::Channel, i));
            }
        }
    }
    Ok(())
}

/// `ACL DRYRUN`'s answer for user `user` running `args`: `None` when allowed, else the reason
/// as Redis words it.
pub(crate) fn acl_dry_run(
    users: &crate::acl::Users,
    user: crate::acl::UserId,
    cmd: &'static Command,
    args: &[&[u8]],
) -> Option<String> {
    let Denied(why, at) = acl_check(users, user, cmd, args).err()?;
    let arg = || String::from_utf8_lossy(args.get(at).copied().unwrap_or_default()).into_owned();
    Some(match why {
        Refused::Command => {
            let name = cmd.name.to_ascii_lowercase();
            let full = match table::COMMANDS.subcommand(cmd, args) {
                Some(sub) => format!("{name}|{sub}"),
                None => name,
            };
            format!("This user has no permissions to run the '{full}' command")
        }
        Refused::Key => format!("This user has no permissions to access the '{}' key", arg()),
        Refused::Channel => {
            format!(
                "This user has no permissions to access the '{}' channel",
                arg()
            )
        }
    })
}

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// Whether CLIENT PAUSE holds `cmd` now, as Redis's processCommand decides, after every check
/// that answers at once (arity, auth, OOM): ALL holds every command of every client; WRITE
/// those that may write or replicate, EXEC among them when its transaction holds one. Only a
/// command a client sent, never one of a script or an EXEC already running, nor a parked
/// blocking command run again because its key was written (Redis serves those outside
/// processCommand); replicas are never held (their acknowledgements keep WAIT and the
/// failover's offsets moving).
fn held_by_pause(
    store: &Store,
    info: &mut ServerInfo,
    session: &Session,
    cmd: &Command,
    args: &[&[u8]],
) -> bool {
    if info.pause.is_none()
        || session.is_replica
        || session.block_retry
        || store.frozen_clock().is_some()
    {
        return false;
    }
    let Some(pause) = info.pause_in_force(std::time::Instant::now()) else {
        return false;
    };
    if pause.all {
        return true;
    }
    // A function or script declared `no-writes` is a read; an unknown one counts as the
    // command.
    let may_replicate = |flags: u64| flags & (flag::WRITE | flag::MAY_REPLICATE) != 0;
    may_replicate(command_flags(info, cmd, args))
        || (cmd.has(flag::TX_EXEC) && queued_flags(info, session).any(may_replicate))
}

/// Redis's `getCommandFlags`: the table's flags, but for a command that runs a function or a
/// script that declared its flags (FCALL; EVAL of a text with a shebang or of a cached
/// script that had one, EVALSHA of a cached one), whose flags then say what it is: a write
/// unless `no-writes`, one that grows memory unless `no-writes` or `allow-oom`, served stale
/// with `allow-stale`, and no longer a command that may replicate without writing.
fn command_flags(info: &ServerInfo, cmd: &Command, args: &[&[u8]]) -> u64 {
    use crate::functions::flags as script;
    let declared = match args.get(1) {
        Some(name) if cmd.has(flag::CALLS_FUNCTION) => {
            info.scripts.functions.find(name).map(|f| f.flags)
        }
        Some(body) if cmd.has(flag::RUNS_SCRIPT) => info.scripts.eval_flags(body, false),
        Some(sha) if cmd.has(flag::RUNS_CACHED_SCRIPT) => info.scripts.eval_flags(sha, true),
        _ => None,
    };
    let Some(declared) = declared else {
        return cmd.flags;
    };
    let mut flags = cmd.flags & !(flag::STALE | flag::DENYOOM | flag::WRITE | flag::MAY_REPLICATE);
    if declared & (script::ALLOW_OOM | script::NO_WRITES) == 0 {
        flags |= flag::DENYOOM;
    }
    if declared & script::NO_WRITES == 0 {
        flags |= flag::WRITE;
    }
    if declared & script::ALLOW_STALE != 0 {
        flags |= flag::STALE;
    }
    flags
}

/// The flags of each command the connection's transaction queued, as [`command_flags`] says.
fn queued_flags<'a>(info: &'a ServerInfo, session: &'a Session) -> impl Iterator<Item = u64> + 'a {
    session.multi.iter().flatten().filter_map(|args| {
        let cmd = table::COMMANDS.lookup(args.first()?)?;
        let words: smallvec::SmallVec<[&[u8]; 8]> = args.iter().map(Vec::as_slice).collect();
        Some(command_flags(info, cmd, &words))
    })
}

const NOREPLICAS: &str = "NOREPLICAS Not enough good replicas to write.";

/// Why the server refuses `cmd` now, as Redis's processCommand does: writes while
/// `min-replicas-to-write` asks for replicas (cxltier has none), and commands that may grow
/// memory while `used_memory` is over a `CONFIG SET maxmemory` limit (inside MULTI, every
/// command but EXEC, DISCARD, QUIT and RESET: queuing takes memory too), or, under a
/// `maxmemory-policy` that evicts, while the store is full and nothing can be evicted. EXEC
/// counts as the commands it would run. Eviction runs here, before any command the server runs
/// (not one of an EXEC or a script, which their caller's eviction covered), as Redis's does.
fn refusal(
    store: &mut Store,
    info: &mut ServerInfo,
    session: &Session,
    cmd: &Command,
    args: &[&[u8]],
) -> Option<&'static str> {
    let flags = command_flags(info, cmd, args);
    let is_exec = cmd.has(flag::TX_EXEC);
    let queued_has = |f: u64| is_exec && queued_flags(info, session).any(|q| q & f != 0);
    let writes = flags & flag::WRITE != 0 || queued_has(flag::WRITE);
    // Redis's min-replicas-to-write: writes need that many replicas that acknowledged within
    // min-replicas-max-lag seconds.
    if writes && info.too_few_good_replicas() {
        return Some(NOREPLICAS);
    }
    let grows = flags & flag::DENYOOM != 0
        || queued_has(flag::DENYOOM)
        || (session.multi.is_some() && !cmd.has(flag::TX_END));
    if store.eviction_policy() != cxltier_store::EvictionPolicy::NoEviction {
        let outermost = store.frozen_clock().is_none();
        if outermost && !crate::memory::perform_evictions(store, info) && grows {
            return Some(OOM);
        }
        return None;
    }
    let limit = info.maxmemory_limit?;
    if grows && !session.function_call && store.memory_used() > limit {
        return Some(OOM);
    }
    None
}

/// Run a command found in the table and checked: its handler, then what its write means for
/// the clients watching its keys. Every key argument goes to the handler with the byte of the
/// database it is kept in ([`crate::db`]), so handlers and the store see one database's keys.
fn dispatch(ctx: &mut Ctx<'_>, cmd: &'static Command, args: &[&[u8]]) -> Effect {
    // The keys with their database byte, one after the other in a buffer the server keeps
    // (so a command costs one allocation here, its argument list), then the arguments with
    // each key replaced by its slice of it.
    let physical = ctx.info.dbs.physical(ctx.session.db);
    let mut keyed = std::mem::take(&mut ctx.info.keyed_scratch);
    keyed.clear();
    cmd.for_each_key_position(args, |i| {
        crate::db::append_store_key(&mut keyed, physical, args[i]);
    });
    // On the stack for the usual few arguments: an allocation per command showed in profiles.
    let mut with_db: smallvec::SmallVec<[&[u8]; 8]> = smallvec::SmallVec::from_slice(args);
    let mut at = 0;
    cmd.for_each_key_position(args, |i| {
        let end = at + 1 + args[i].len();
        with_db[i] = &keyed[at..end];
        at = end;
    });
    let effect = dispatch_keyed(ctx, cmd, &with_db, args);
    drop(with_db);
    // A buffer grown by a command of many or long keys is not kept.
    if keyed.capacity() <= KEYED_SCRATCH_KEPT {
        ctx.info.keyed_scratch = keyed;
    }
    effect
}

/// Run a command EXEC queued: found in the table and checked when it was queued, it goes
/// straight to [`dispatch`] (EXEC's handler calls it through [`Ctx::run_queued`]).
pub(crate) fn run_queued(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Effect {
    let cmd = table::COMMANDS
        .lookup(args[0])
        .expect("checked when queued");
    // The user's rules may have changed since it was queued (Redis's execCommand).
    if let Err(denied) = acl_check(&ctx.info.acl.users, ctx.session.user, cmd, args) {
        acl_log(ctx.info, ctx.session, cmd, args, denied);
        reply::error(
            ctx.out,
            &format!(
                "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {}",
                denied.0.exec_reason()
            ),
        );
        return Effect::Read;
    }
    ctx.session.last_cmd = cmd.name;
    ctx.session.last_sub = table::COMMANDS.subcommand(cmd, args);
    dispatch(ctx, cmd, args)
}

/// The most bytes of keys dispatch's buffer keeps between commands.
const KEYED_SCRATCH_KEPT: usize = 64 << 10;

/// [`dispatch`], once every key argument has its database byte; `original` are the arguments
/// as the client sent them (the slow log's).
fn dispatch_keyed(
    ctx: &mut Ctx<'_>,
    cmd: &'static Command,
    args: &[&[u8]],
    original: &[&[u8]],
) -> Effect {
    // FLUSHALL/FLUSHDB touch the watched keys that exist (Redis's rule), known only before;
    // FLUSHDB only those of its database.
    if !ctx.info.watchers.is_empty() && cmd.has(flag::FLUSHES_ALL | flag::FLUSHES_DB) {
        let only = cmd.has(flag::FLUSHES_DB).then_some(ctx.session.db as u8);
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
            ctx.info.touch_watchers(&k);
        }
    }
    // The time the command sees (Redis's command time snapshot): read once, and frozen in the
    // store for the command's lookups; the commands of an EXEC or a script see their
    // caller's. The same reading starts the command's time in INFO commandstats.
    let started_us = now_us();
    let outermost = ctx.store.frozen_clock().is_none();
    if outermost {
        ctx.info.nested_errors.clear();
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
        // Their readers are told before the command's own reads are remembered.
        if ctx.info.tracking.active() {
            drain_expired(ctx.store, ctx.info, true);
        }
    }
    // With notifications on: the expiries just found are announced first (Redis announces
    // one at the lookup that finds it), and which keys exist is noted, for the `new` and
    // `del` events that follow from the keyspace alone.
    let notifying = ctx.info.notify.active();
    let mut existed: Vec<(&[u8], bool)> = Vec::new();
    if notifying {
        announce_expired(ctx.store, ctx.info, true);
        let mut seen = hashbrown::HashSet::new();
        for i in cmd.key_positions(args.len()) {
            if seen.insert(args[i]) {
                existed.push((args[i], ctx.store.contains(args[i])));
            }
        }
    }
    // MONITOR: a script's command is shown before the commands it runs (Redis's evalCommand);
    // any other after it ran, unless it is an admin command or a parked one run again.
    let scripted = cmd.has(flag::SCRIPTS) && !cmd.has(flag::TX_EXEC);
    if scripted && !ctx.info.monitors.is_empty() {
        feed_monitors(ctx, cmd, original, started_us, outermost);
    }
    let reply_at = ctx.out.len();
    // A script's read-only commands make its caller remember the script's keys.
    let script_keys = (cmd.has(flag::SCRIPTS)
        && !cmd.has(flag::TX_EXEC)
        && !ctx.info.tracking.clients.is_empty())
    .then(|| {
        // A script's keys are given to it as the user wrote them (no database byte).
        let positions = cmd.keys_fn.and_then(|f| f(args)).unwrap_or_default();
        let keys = positions
            .iter()
            .filter_map(|&i| args.get(i))
            .map(|k| k.to_vec());
        ctx.info.tracking.script_keys.replace(keys.collect())
    });
    let effect = match (cmd.handler)(ctx, args) {
        Ok(effect) => effect,
        // A write that found the store full, under a policy that evicts: keys are evicted and
        // it runs once more, when it changed nothing but the count of its failed write.
        Err(StoreError::Full { .. })
            if outermost
                && ctx.store.changes() <= changes_before + 1
                && crate::memory::evict_for_full(ctx.store, ctx.info) =>
        {
            ctx.out.truncate(reply_at);
            match (cmd.handler)(ctx, args) {
                Ok(effect) => effect,
                Err(e) => {
                    store_error(ctx.out, &e);
                    Effect::Read
                }
            }
        }
        Err(e) => {
            store_error(ctx.out, &e);
            Effect::Read
        }
    };
    propagate(ctx, cmd, args, changes_before);
    if let Some(outer) = script_keys {
        ctx.info.tracking.script_keys = outer;
    }
    track(ctx, cmd, args, reply_at);
    ctx.info.repl.leave(!cmd.has(flag::TOUCHES_ARBITRARY_KEYS));
    let stat = ctx
        .info
        .command_stats
        .entry(CommandName(
            cmd.name,
            table::COMMANDS.subcommand(cmd, original),
        ))
        .or_default();
    // A command that parked is counted when it is answered (run again, or answered by the
    // loop: `count_answered_parked`), once, as Redis counts a blocked command.
    let parked = ctx.session.block.is_some();
    if !parked {
        stat.calls += 1;
    }
    let mut took = None;
    if outermost {
        // Its time ends at the next reading of the clock.
        let sub = table::COMMANDS.subcommand(cmd, original);
        ctx.info.timed = Some((cmd.name, started_us, sub, cmd.has(flag::FAST)));
        ctx.store.thaw_clock();
    } else {
        let end = now_us();
        let took_us = end.saturating_sub(started_us);
        stat.usec += took_us;
        ctx.info.command_latency.observe(took_us as f64 / 1e6);
        took = Some((took_us, end));
    }
    if ctx.out.get(reply_at) == Some(&b'-') {
        stat.failed_calls += 1;
        count_error_reply(
            ctx.info,
            &ctx.out[reply_at..],
            !outermost,
            cmd.has(flag::SCRIPTS) || cmd.has(flag::CALLS_FUNCTION),
        );
    }
    if let Some((took_us, end)) = took {
        let key = (cmd.name, table::COMMANDS.subcommand(cmd, original));
        ctx.info
            .observe_latency(key, cmd.has(flag::FAST), took_us, end);
    }
    let took = took.map(|t| t.0);
    slow_log(ctx, cmd, original, started_us, took);
    if !ctx.info.monitors.is_empty()
        && !scripted
        && !cmd.has(flag::ADMIN)
        && !ctx.session.block_retry
    {
        feed_monitors(ctx, cmd, original, started_us, outermost);
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
        let reads = cmd.has(flag::READONLY) && !cmd.has(flag::NO_KEYMISS);
        finish_command(ctx, &existed, reads, reply_at);
    }
    // The keys written (the table's key positions, unless the handler named some unchanged:
    // SMOVE of a member the destination holds already; and those the handler named written
    // beyond them: SORT's STORE) touch their watchers and may feed a connection parked by a
    // blocking command, which the server looks at once the command (or the whole EXEC) is
    // done. Looked at only when someone waits on keys.
    let unchanged = std::mem::take(&mut ctx.session.unchanged_keys);
    let written = std::mem::take(&mut ctx.session.written_keys);
    if effect == Effect::Wrote
        && !(ctx.info.blocked.is_empty()
            && ctx.info.watchers.is_empty()
            && !ctx.info.tracking.active())
    {
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

/// Show `args` to the MONITOR connections: from a script when the command is nested outside
/// EXEC (`redis.call`), else from the client; with the secrets redacted as in the slow log.
/// Its time is the command's start (the clock is read once per command).
fn feed_monitors(
    ctx: &mut Ctx<'_>,
    cmd: &Command,
    args: &[&[u8]],
    started_us: u64,
    outermost: bool,
) {
    use crate::monitor::Source;
    let redacted = cmd.redact.map(|f| f(args)).unwrap_or_default();
    let source = if !outermost && !ctx.session.in_exec {
        Source::Lua
    } else {
        Source::Client(
            ctx.info
                .clients
                .get(&ctx.session.id)
                .map_or("", |m| m.addr.as_str()),
        )
    };
    ctx.info
        .monitors
        .feed(started_us, ctx.session.db, source, args, &redacted);
}

/// The slow log's part of a command just run: one run inside EXEC or a script, whose time
/// `took` is known, is logged now if it took `slowlog-log-slower-than` µs or more; the
/// outermost command is held until its time ends (the next reading of the clock,
/// [`ServerInfo::close_command_time`]). Not logged: EXEC (its commands are), and a command that
/// parked its connection (it runs again when woken, and is logged then).
fn slow_log(ctx: &mut Ctx<'_>, cmd: &Command, args: &[&[u8]], started_us: u64, took: Option<u64>) {
    let (slower_than, max_len) = ctx.info.knobs.slowlog();
    if slower_than < 0 || cmd.has(flag::SKIP_SLOWLOG) || ctx.session.block.is_some() {
        if took.is_none() {
            ctx.info.slowlog.forget();
        }
        return;
    }
    let redacted = cmd.redact.map(|f| f(args)).unwrap_or_default();
    let mut run = crate::slowlog::Run {
        args,
        redacted: &redacted,
        started_us,
        duration_us: 0,
        addr: "",
        name: ctx.session.name.as_deref().unwrap_or_default(),
    };
    match took {
        None => ctx.info.slowlog.hold(&run, ctx.session.id),
        Some(duration_us) => {
            run.duration_us = duration_us;
            if let Some(m) = ctx.info.clients.get(&ctx.session.id) {
                run.addr = &m.addr;
            }
            ctx.info.slowlog.push_if_needed(slower_than, max_len, &run);
        }
    }
}

/// Client-side caching after a command: a read-only command's keys are remembered for the
/// connection running it (a script's caller), and a flush that succeeded invalidates everything.
fn track(ctx: &mut Ctx<'_>, cmd: &Command, args: &[&[u8]], reply_at: usize) {
    let tracking = &ctx.info.tracking;
    // The table outlives its readers' tracking (and a flush empties it all the same).
    let flushed =
        cmd.has(flag::FLUSHES_ALL | flag::FLUSHES_DB) && ctx.out.get(reply_at) != Some(&b'-');
    if flushed && (tracking.active() || !tracking.clients.is_empty()) {
        ctx.info.tracking.flush();
        return;
    }
    if ctx.info.tracking.clients.is_empty() {
        return;
    }
    if cmd.has(flag::SCRIPTS) {
        // A script tracks through the read-only commands it runs, if any.
    } else if !cmd.has(flag::READONLY) {
        // Writes track nothing.
    } else if let Some(keys) = ctx.info.tracking.script_keys.take() {
        ctx.info.tracking.remember(keys.iter().map(Vec::as_slice));
        ctx.info.tracking.script_keys = Some(keys);
    } else {
        let mut keys: smallvec::SmallVec<[&[u8]; 4]> = smallvec::SmallVec::new();
        cmd.for_each_key_position(args, |i| keys.push(args[i].get(1..).unwrap_or_default()));
        ctx.info.tracking.remember(keys.into_iter());
    }
}

/// Add what the command just run means for the write stream to its unit: the keys it found
/// expired as `del` (or `unlink`), then, if it changed the store (or must be replicated anyway),
/// itself or what its handler rewrote it to.
fn propagate(ctx: &mut Ctx<'_>, cmd: &Command, args: &[&[u8]], changes_before: u64) {
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
                ctx.info.repl.also_propagate(db, user_keys(op));
            }
        }
        None => ctx
            .info
            .repl
            .also_propagate(db, user_keys(args.iter().map(|a| a.to_vec()).collect())),
    }
}

/// `op` as the stream carries it: the commands ran with each key argument carrying its
/// database's byte (dispatch gives it, and rewrites and expiries are built from those keys);
/// the stream, like Redis's, names the user's keys under a `select`. The key arguments are the
/// command table's key positions of `op`'s command.
pub(crate) fn user_keys(mut op: Op) -> Op {
    let Some(cmd) = op.first().and_then(|name| table::COMMANDS.lookup(name)) else {
        return op;
    };
    let mut positions = Vec::new();
    let args: Vec<&[u8]> = op.iter().map(Vec::as_slice).collect();
    cmd.for_each_key_position(&args, |i| positions.push(i));
    for i in positions {
        if !op[i].is_empty() {
            op[i].remove(0);
        }
    }
    op
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
            let op = user_keys(expired_delete_op(info, &key));
            if in_command {
                info.repl.also_propagate(db, op);
            } else {
                info.repl.emit(db, &op);
            }
        }
        if info.tracking.active() {
            let key = info.dbs.to_logical_key(&k);
            info.tracking
                .invalidate(key.get(1..).unwrap_or_default(), false);
        }
        info.notify
            .emit(crate::notify::class::EXPIRED, "expired", &k);
    }
}

/// Announce the keys the store found past their TTL since it was last asked (`expired`), and
/// replicate them (`drain_expired`); `in_command`: a command is running.
pub(crate) fn announce_expired(
    store: &mut cxltier_store::Store,
    info: &mut crate::context::ServerInfo,
    in_command: bool,
) {
    drain_expired(store, info, in_command);
}

/// After a command's handler: the events that follow from the keyspace (`new` for a key it
/// created, `del` for one it removed without saying how, `expired` for keys found past their
/// TTL on the way), then every event published. `existed` says which of the command's keys
/// existed before it ran, and `reads` whether it is a read-only command (its keys that were
/// missing are `keymiss` events, when its handler did not say so already); `reply_at` is where
/// its reply starts in the output.
pub(crate) fn finish_command(
    ctx: &mut Ctx<'_>,
    existed: &[(&[u8], bool)],
    reads: bool,
    reply_at: usize,
) {
    // Which keys exist now, before the expiries are announced: a key whose TTL ran out since
    // the handler is then said `expired`, not `del`.
    let now: Vec<bool> = existed.iter().map(|(k, _)| ctx.store.contains(k)).collect();
    announce_expired(ctx.store, ctx.info, true);
    if reads && ctx.info.notify.wants(class::KEY_MISS) {
        for &(key, before) in existed {
            if !before && !ctx.info.notify.emitted("keymiss", key) {
                ctx.info.notify.emit(class::KEY_MISS, "keymiss", key);
            }
        }
    }
    for (&(key, before), now) in existed.iter().zip(now) {
        let n = &mut ctx.info.notify;
        match (before, now) {
            (false, true) if !n.emitted("new", key) => n.insert_new(key),
            (true, false)
                if !["del", "rename_from", "move_from", "expired"]
                    .iter()
                    .any(|e| n.emitted(e, key)) =>
            {
                n.emit(class::GENERIC, "del", key)
            }
            _ => {}
        }
    }
    let events = ctx.info.notify.take();
    if events.is_empty() {
        return;
    }
    // A connection subscribed to its own events (RESP3) gets them before the command's reply,
    // as from Redis 7.0; inside EXEC they would land in EXEC's array: they go after the turn.
    let me = (!ctx.session.in_exec).then_some(ctx.session.id);
    let mut mine = Vec::new();
    publish(ctx.info, &events, me, ctx.session.proto, &mut mine);
    if !mine.is_empty() {
        let len = mine.len();
        ctx.out.splice(reply_at..reply_at, mine);
        for r in &mut ctx.session.pushed {
            if r.start >= reply_at {
                *r = r.start + len..r.end + len;
            }
        }
        ctx.session.pushed.push(reply_at..reply_at + len);
    }
}

/// Publish `events` to their subscribers: the messages for connection `me` are written to
/// `mine` in its protocol `proto`, the others left in the outbox for the server. Each event's
/// key is the store's (its physical database's byte first): the database named is the one
/// clients select for it (after any SWAPDB), the key the user's.
pub(crate) fn publish(
    info: &mut crate::context::ServerInfo,
    events: &[Event],
    me: Option<u64>,
    proto: u8,
    mine: &mut Vec<u8>,
) {
    let flags = info.notify.flags();
    for e in events {
        let logical = info.dbs.to_logical_key(&e.key);
        let Some((&db, key)) = logical.split_first() else {
            continue;
        };
        for (channel, payload) in channels(flags, u32::from(db), e.name, key) {
            for d in crate::subscriptions::deliveries(&info.pubsub, &channel, &payload) {
                if Some(d.to) == me {
                    crate::subscriptions::write_message(mine, proto, &d);
                } else {
                    info.pubsub.outbox.push(d);
                }
            }
        }
    }
}

/// Answer `args` of another connection while a script is busy, as Redis does then: a command
/// the table gives an answer for the busy mode (`while_busy`) runs it — `SCRIPT KILL` stops a
/// script that has not written, `SHUTDOWN NOSAVE` stops it and the server, `AUTH` and `HELLO`
/// authenticate (so that a new client of a server with a password can reach SCRIPT KILL), the
/// transaction's bookkeeping and QUIT go on, a replica's `REPLCONF ACK` is taken silently —
/// and everything else is refused with BUSY (inside MULTI that aborts the transaction at EXEC;
/// an EXEC now discards it with EXECABORT). Before AUTH, a server with a password answers
/// NOAUTH first, as always.
pub fn busy_command(b: &mut BusyCtx<'_>, args: &[&[u8]]) -> BusyOutcome {
    let Some(&name) = args.first() else {
        return BusyOutcome::Answered;
    };
    let Some(cmd) = table::COMMANDS.lookup(name) else {
        unknown_command(b.out, args);
        b.session.flag_transaction();
        return BusyOutcome::Answered;
    };
    if !cmd.arity_ok(args.len()) {
        arity(b.out, name);
        b.session.flag_transaction();
        return BusyOutcome::Answered;
    }
    if b.users.auth_required() && !b.session.authed && !cmd.has(flag::NO_AUTH) {
        reply::error(b.out, "NOAUTH Authentication required.");
        b.session.flag_transaction();
        return BusyOutcome::Answered;
    }
    let in_multi = b.session.multi.is_some();
    match cmd.while_busy {
        Some(answer) if !in_multi || cmd.has(flag::TX_CONTROL_WHILE_BUSY) => answer(b, args),
        _ if in_multi && cmd.has(flag::TX_EXEC) => {
            b.session.multi = None;
            b.session.multi_failed = false;
            reply::error(
                b.out,
                &format!(
                    "EXECABORT Transaction discarded because of: {}",
                    crate::errors::BUSY
                ),
            );
            BusyOutcome::Answered
        }
        _ => b.refuse(),
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    use crate::testdb::*;

    #[test]
    fn a_commands_time_ends_at_the_next_reading_of_the_clock() {
        let mut db = Db::large();
        db.cmd("SET k v");
        let set = |db: &Db| {
            db.info
                .command_stats
                .get(&CommandName("SET", None))
                .map(|s| (s.calls, s.usec))
        };
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
        assert_eq!(db.info.command_stats[&CommandName("INCR", None)].calls, 1);
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
        let mut db = Db::large();
        db.cmd("SET a 1");
        assert_eq!(db.cmd("CONFIG SET maxmemory 1"), "+OK\r\n");
        assert!(db.cmd("CONFIG GET maxmemory").ends_with("$1\r\n1\r\n"));
        assert_eq!(db.cmd("SET b 2"), format!("-{OOM}\r\n"));
        assert!(db.cmd("LPUSH l x").starts_with("-OOM"));
        db.replies(&[
            ("GET a", "$1\r\n1\r\n"),
            ("DEL a", ":1\r\n"),
            // Inside MULTI every queued command counts; DISCARD is never refused.
            ("MULTI", "+OK\r\n"),
        ]);
        assert!(db.cmd("GET a").starts_with("-OOM"));
        db.replies(&[("DISCARD", "+OK\r\n"), ("MULTI", "+OK\r\n")]);
        assert!(db.cmd("SET x 1").starts_with("-OOM"));
        // Another connection lifts the limit (inside MULTI, CONFIG SET would be refused too).
        let mut other = Session::new(1, true);
        assert_eq!(
            run_as(&mut db, &mut other, "CONFIG SET maxmemory 0"),
            "+OK\r\n"
        );
        assert!(db.cmd("EXEC").starts_with("-EXECABORT"));
        db.replies(&[
            ("EXISTS x", ":0\r\n"),
            ("SET b 2", "+OK\r\n"),
            // A maxmemory at or above the budget is the budget: nothing refused.
            ("CONFIG SET maxmemory 100gb", "+OK\r\n"),
            ("SET c 3", "+OK\r\n"),
            ("MULTI", "+OK\r\n"),
            ("INCR c", "+QUEUED\r\n"),
        ]);
        assert_eq!(
            run_as(&mut db, &mut other, "CONFIG SET min-replicas-to-write 2"),
            "+OK\r\n"
        );
        let exec = db.cmd("EXEC");
        assert!(
            exec.starts_with("-EXECABORT") && exec.contains("NOREPLICAS"),
            "{exec}"
        );
        assert_eq!(db.cmd("GET c"), "$1\r\n3\r\n");
        assert!(db.cmd("SET d 4").starts_with("-NOREPLICAS"));
        db.replies(&[
            ("CONFIG SET min-replicas-to-write 0", "+OK\r\n"),
            ("SET d 4", "+OK\r\n"),
        ]);
    }
}
