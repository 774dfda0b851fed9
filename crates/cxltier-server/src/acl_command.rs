//! ACL and its subcommands (WHOAMI, SETUSER, GETUSER, DELUSER, USERS, LIST, CAT, GENPASS,
//! DRYRUN, LOG, LOAD, SAVE, HELP), as Redis 7.0 answers them, over the users and log of
//! [`crate::acl`] that [`ServerInfo::acl`] holds.

use cxltier_store::StoreError;

use crate::acl::{Users, CATEGORIES};
use crate::context::*;
use crate::resp::reply;

const HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Print this help.",
];

const NO_ACL_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

/// The most bits ACL GENPASS makes.
const GENPASS_MAX_BITS: i64 = 4096;

pub(crate) fn acl(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let n = args.len();
    let sub = args[1].to_ascii_lowercase();
    let proto = ctx.session.proto;
    match (sub.as_slice(), n) {
        (b"setuser", 3..) => setuser(ctx, args),
        (b"deluser", 3..) => deluser(ctx, args),
        (b"getuser", 3) => {
            getuser(ctx, args[2]);
            Ok(Effect::Read)
        }
        (b"users", 2) => {
            let users = &ctx.info.acl.users;
            reply::array(ctx.out, users.len());
            for (_, u) in users.iter() {
                reply::bulk(ctx.out, &u.name);
            }
            Ok(Effect::Read)
        }
        (b"list", 2) => {
            let users = &ctx.info.acl.users;
            reply::array(ctx.out, users.len());
            for line in list_lines(users, ctx.commands.acl()) {
                reply::bulk(ctx.out, line.as_bytes());
            }
            Ok(Effect::Read)
        }
        (b"whoami", 2) => {
            let name = ctx.info.user_name(ctx.session.user).to_vec();
            reply::bulk(ctx.out, &name);
            Ok(Effect::Read)
        }
        (b"load" | b"save", 2) if aclfile(ctx).is_none() => fail(ctx, NO_ACL_FILE),
        (b"load", 2) => load(ctx),
        (b"save", 2) => save(ctx),
        (b"cat", 2) => {
            reply::array(ctx.out, CATEGORIES.len());
            for c in CATEGORIES {
                reply::bulk(ctx.out, c.as_bytes());
            }
            Ok(Effect::Read)
        }
        (b"cat", 3) => {
            let Some(bit) = crate::acl::category_bit(args[2]) else {
                let shown = &args[2][..args[2].len().min(128)];
                let msg = format!("ERR Unknown category '{}'", String::from_utf8_lossy(shown));
                return fail(ctx, &msg);
            };
            let catalog = ctx.commands.acl();
            let names: Vec<&str> = catalog
                .entries()
                .iter()
                .filter(|e| e.categories & bit != 0)
                .map(|e| e.name.as_str())
                .collect();
            reply::array(ctx.out, names.len());
            for name in names {
                reply::bulk(ctx.out, name.as_bytes());
            }
            Ok(Effect::Read)
        }
        (b"genpass", 2 | 3) => {
            let bits = match args.get(2) {
                None => 256,
                Some(v) => match parse_i64(v) {
                    Some(b) => b,
                    None => return fail(ctx, NOT_INT),
                },
            };
            if bits <= 0 || bits > GENPASS_MAX_BITS {
                return fail(ctx, &format!("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to {GENPASS_MAX_BITS}"));
            }
            let chars = ((bits + 3) / 4) as usize;
            let mut pass = String::with_capacity(chars);
            for _ in 0..chars {
                let d: u8 = rand::random::<u8>() & 15;
                pass.push(char::from_digit(u32::from(d), 16).unwrap_or('0'));
            }
            reply::bulk(ctx.out, pass.as_bytes());
            Ok(Effect::Read)
        }
        (b"log", 2 | 3) => log(ctx, args.get(2).copied(), proto),
        (b"dryrun", 4..) => {
            let users = &ctx.info.acl.users;
            let Some(id) = users.id_of(args[2]) else {
                let msg = format!("ERR User '{}' not found", String::from_utf8_lossy(args[2]));
                return fail(ctx, &msg);
            };
            let line = &args[3..];
            let found = ctx.commands.lookup(line[0]).filter(|cmd| {
                ctx.commands.subcommands_of(cmd).is_empty()
                    || line.len() < 2
                    || ctx.commands.subcommand(cmd, line).is_some()
            });
            let Some(cmd) = found else {
                let msg = format!(
                    "ERR Command '{}' not found",
                    String::from_utf8_lossy(line[0])
                );
                return fail(ctx, &msg);
            };
            if !cmd.arity_ok(line.len()) {
                let name = cmd.name.to_ascii_lowercase();
                return fail(
                    ctx,
                    &format!("ERR wrong number of arguments for '{name}' command"),
                );
            }
            match (ctx.dry_run)(users, id, cmd, line) {
                None => reply::ok(ctx.out),
                Some(why) => reply::bulk(ctx.out, why.as_bytes()),
            }
            Ok(Effect::Read)
        }
        (b"help", 2) => {
            reply::simple_lines(ctx.out, HELP);
            Ok(Effect::Read)
        }
        _ => fail(ctx, &crate::errors::unknown_subcommand("ACL", args[1])),
    }
}

/// `acl-pubsub-default`: a new or reset user may use every channel.
fn pubsub_default_all(ctx: &Ctx<'_>) -> bool {
    ctx.info.config_value("acl-pubsub-default") == "allchannels"
}

fn setuser(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let name = args[2];
    if name.iter().any(|&b| b.is_ascii_whitespace() || b == 0) {
        return fail(ctx, "ERR Usernames can't contain spaces or null characters");
    }
    let all_channels = pubsub_default_all(ctx);
    let catalog = ctx.commands.acl();
    let users = ctx.info.acl.users_mut();
    match users.set_user(catalog, name, &args[3..], all_channels) {
        Ok(id) => {
            kill_pubsub_clients_if_needed(ctx, id);
            reply::ok(ctx.out);
            Ok(Effect::Read)
        }
        Err(msg) => fail(ctx, &msg),
    }
}

/// The connections of user `id` subscribed to a channel or pattern its rules no longer allow
/// are closed (Redis's ACLKillPubsubClientsIfNeeded).
fn kill_pubsub_clients_if_needed(ctx: &mut Ctx<'_>, id: crate::acl::UserId) {
    let Some(user) = ctx.info.acl.users.get(id) else {
        return;
    };
    let perms = &user.perms;
    if perms.all_channels() {
        return;
    }
    let mut kill = Vec::new();
    let pubsub = &ctx.info.pubsub;
    let me = ctx.session.id;
    let mine = ctx.session.user == id;
    let lists = [
        (&pubsub.channels, false),
        (&pubsub.patterns, true),
        (&pubsub.shard_channels, false),
    ];
    for (list, pattern) in lists {
        for (channel, ids) in list.iter() {
            if perms.allows_channel(channel, pattern) {
                continue;
            }
            for &conn in ids {
                let of_user = if conn == me {
                    mine
                } else {
                    ctx.info.clients.get(&conn).is_some_and(|m| m.user == id)
                };
                if of_user && !kill.contains(&conn) {
                    kill.push(conn);
                }
            }
        }
    }
    ctx.info.kill.extend(kill);
}

fn deluser(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    if args[2..].iter().any(|name| *name == b"default") {
        return fail(ctx, "ERR The 'default' user cannot be removed");
    }
    let mut deleted = 0;
    for name in &args[2..] {
        let Some(id) = ctx.info.acl.users_mut().delete(name) else {
            continue;
        };
        deleted += 1;
        // Its connections close (this one after its reply), as Redis's
        // ACLFreeUserAndKillClients does.
        let me = ctx.session.id;
        let mut kill: Vec<u64> = ctx
            .info
            .clients
            .iter()
            .filter(|&(&c, m)| c != me && m.user == id)
            .map(|(&c, _)| c)
            .collect();
        if ctx.session.user == id {
            ctx.session.user = crate::acl::DEFAULT_USER;
            ctx.session.authed = false;
            kill.push(me);
        }
        kill.sort_unstable();
        ctx.info.kill.extend(kill);
    }
    reply::int(ctx.out, deleted);
    Ok(Effect::Read)
}

fn getuser(ctx: &mut Ctx<'_>, name: &[u8]) {
    let proto = ctx.session.proto;
    let out = &mut *ctx.out;
    let Some(u) = ctx.info.acl.users.by_name(name) else {
        reply::null(out, proto);
        return;
    };
    reply::map(out, proto, 6);
    reply::bulk(out, b"flags");
    let flags = u.flags();
    reply::set(out, proto, flags.len());
    for f in flags {
        reply::bulk(out, f.as_bytes());
    }
    reply::bulk(out, b"passwords");
    let passwords: Vec<&str> = u.passwords().collect();
    reply::array(out, passwords.len());
    for p in passwords {
        reply::bulk(out, p.as_bytes());
    }
    reply::bulk(out, b"commands");
    let rules = u.perms.describe_commands(ctx.commands.acl());
    reply::bulk(out, rules.as_bytes());
    reply::bulk(out, b"keys");
    reply::bulk(out, u.perms.describe_keys().as_bytes());
    reply::bulk(out, b"channels");
    reply::bulk(out, u.perms.describe_channels().as_bytes());
    reply::bulk(out, b"selectors");
    reply::array(out, 0);
}

/// Every user as `ACL LIST` and the ACL file write it: `user <name> <rules>`.
fn list_lines(users: &Users, catalog: &crate::acl::Catalog) -> Vec<String> {
    users
        .iter()
        .map(|(_, u)| {
            format!(
                "user {} {}",
                String::from_utf8_lossy(&u.name),
                u.describe(catalog)
            )
        })
        .collect()
}

fn log(ctx: &mut Ctx<'_>, arg: Option<&[u8]>, proto: u8) -> Result<Effect, StoreError> {
    let mut count = 10i64;
    if let Some(a) = arg {
        if a.eq_ignore_ascii_case(b"reset") {
            ctx.info.acl.reset_log();
            reply::ok(ctx.out);
            return Ok(Effect::Read);
        }
        match parse_i64(a) {
            Some(c) => count = c.max(0),
            None => return fail(ctx, NOT_INT),
        }
    }
    let count = (count as usize).min(ctx.info.acl.log_len());
    let now = now_ms();
    let out = &mut *ctx.out;
    reply::array(out, count);
    for e in ctx.info.acl.log_entries().take(count) {
        reply::map(out, proto, 7);
        reply::bulk(out, b"count");
        reply::int(out, e.count as i64);
        reply::bulk(out, b"reason");
        reply::bulk(out, e.reason.name().as_bytes());
        reply::bulk(out, b"context");
        reply::bulk(out, e.context.name().as_bytes());
        reply::bulk(out, b"object");
        reply::bulk(out, &e.object);
        reply::bulk(out, b"username");
        reply::bulk(out, &e.username);
        reply::bulk(out, b"age-seconds");
        let age = now.saturating_sub(e.ctime_ms) as f64 / 1000.0;
        reply::double(out, proto, age);
        reply::bulk(out, b"client-info");
        reply::bulk(out, e.client_info.as_bytes());
    }
    Ok(Effect::Read)
}

/// The `aclfile` configured, if any.
fn aclfile(ctx: &Ctx<'_>) -> Option<std::path::PathBuf> {
    Some(ctx.info.config_value("aclfile"))
        .filter(|f| !f.is_empty())
        .map(std::path::PathBuf::from)
}

fn load(ctx: &mut Ctx<'_>) -> Result<Effect, StoreError> {
    let Some(path) = aclfile(ctx) else {
        return fail(ctx, NO_ACL_FILE);
    };
    let all_channels = pubsub_default_all(ctx);
    let old_next = ctx.info.acl.users.next_id();
    match crate::acl::load_file(&path, ctx.commands.acl(), all_channels, old_next) {
        Ok(users) => {
            // Every user but the default one is new: their connections close, as Redis frees
            // the old users and kills their clients (this one after its reply).
            ctx.info.acl.users = std::sync::Arc::new(users);
            let me = ctx.session.id;
            let mut kill: Vec<u64> = ctx
                .info
                .clients
                .iter()
                .filter(|&(&c, m)| c != me && m.user != crate::acl::DEFAULT_USER)
                .map(|(&c, _)| c)
                .collect();
            if ctx.session.user != crate::acl::DEFAULT_USER {
                ctx.session.user = crate::acl::DEFAULT_USER;
                ctx.session.authed = false;
                kill.push(me);
            }
            kill.sort_unstable();
            ctx.info.kill.extend(kill);
            reply::ok(ctx.out);
            Ok(Effect::Read)
        }
        Err(msg) => fail(ctx, &format!("ERR {msg}")),
    }
}

fn save(ctx: &mut Ctx<'_>) -> Result<Effect, StoreError> {
    let Some(path) = aclfile(ctx) else {
        return fail(ctx, NO_ACL_FILE);
    };
    let lines = list_lines(&ctx.info.acl.users, ctx.commands.acl());
    match crate::acl::save_file(&path, &lines) {
        Ok(()) => {
            reply::ok(ctx.out);
            Ok(Effect::Read)
        }
        Err(_) => fail(
            ctx,
            "ERR There was an error trying to save the ACLs. Please check the server logs for more information",
        ),
    }
}
