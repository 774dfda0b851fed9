//! COMMAND and its subcommands (COUNT, LIST, INFO, DOCS, GETKEYS, GETKEYSANDFLAGS, HELP), as
//! Redis 7.0 answers them: the commands are the table's (and the subcommands its containers
//! serve, [`Commands::subcommands`]); what Redis says of each (flags, key specs, ACL
//! categories, tips, docs) comes from [`crate::command_specs`], generated from Redis's own
//! command descriptions. A command of cxltier's own (no Redis description) is described from
//! the table.
//!
//! Keys are found as Redis's `getKeysFromCommandWithSpecs` finds them: by the key specs when
//! they are complete and their flags fixed, otherwise by the command's own key function (Redis's
//! `getkeys_proc`s, ported below for the table's commands that have one).

use crate::command::{Command, Commands};
use crate::command_spec::{ks, Arg, Begin, Find, KeySpec, Spec};
use crate::command_specs::SPECS;
use crate::context::{Ctx, Effect};
use crate::resp::reply;
use cxltier_store::StoreError;

/// Redis's description of the command or subcommand named `full` (lower case, `a|b`).
pub fn spec(full: &str) -> Option<&'static Spec> {
    SPECS
        .binary_search_by(|s| s.name.cmp(full))
        .ok()
        .map(|i| &SPECS[i])
}

/// A command or one of the subcommands the table serves.
#[derive(Clone, Copy)]
struct Found {
    cmd: &'static Command,
    /// The subcommand, as [`Commands::subcommands`] spells it.
    sub: Option<&'static str>,
    /// The subcommands the command serves when it is a container (none for a subcommand).
    subs: &'static [&'static str],
}

impl Found {
    fn command(commands: &Commands, cmd: &'static Command) -> Found {
        Found {
            cmd,
            sub: None,
            subs: commands.subcommands_of(cmd),
        }
    }

    fn subcommand(&self, sub: &'static str) -> Found {
        Found {
            cmd: self.cmd,
            sub: Some(sub),
            subs: &[],
        }
    }

    fn full_name(&self) -> String {
        let name = self.cmd.name.to_ascii_lowercase();
        match self.sub {
            Some(s) => format!("{name}|{s}"),
            None => name,
        }
    }
    fn spec(&self) -> Option<&'static Spec> {
        spec(&self.full_name())
    }
}

/// Redis's `lookupCommandBySds`: `name` or `container|sub`, any case.
fn by_full_name(commands: &Commands, name: &[u8]) -> Option<Found> {
    let mut parts = name.split(|&b| b == b'|');
    let found = Found::command(commands, commands.lookup(parts.next()?)?);
    let Some(sub) = parts.next() else {
        return Some(found);
    };
    if parts.next().is_some() {
        return None;
    }
    let sub = found
        .subs
        .iter()
        .copied()
        .find(|s| s.as_bytes().eq_ignore_ascii_case(sub))?;
    Some(found.subcommand(sub))
}

/// Redis's `lookupCommand` of a command line: a container's subcommand when it has them.
fn by_args(commands: &Commands, args: &[&[u8]]) -> Option<Found> {
    let found = Found::command(commands, commands.lookup(args.first()?)?);
    if found.subs.is_empty() || args.len() < 2 {
        return Some(found);
    }
    let sub = found
        .subs
        .iter()
        .copied()
        .find(|s| s.as_bytes().eq_ignore_ascii_case(args[1]))?;
    Some(found.subcommand(sub))
}

fn write_set_of_simple(out: &mut Vec<u8>, proto: u8, items: &[&str]) {
    reply::set(out, proto, items.len());
    for i in items {
        reply::simple(out, i);
    }
}

fn write_key_flags(out: &mut Vec<u8>, proto: u8, flags: u16) {
    let names: Vec<&str> = ks::NAMES
        .iter()
        .filter(|(f, _)| flags & f != 0)
        .map(|(_, n)| *n)
        .collect();
    write_set_of_simple(out, proto, &names);
}

fn write_key_specs(out: &mut Vec<u8>, proto: u8, specs: &[KeySpec]) {
    reply::set(out, proto, specs.len());
    for s in specs {
        reply::map(out, proto, 3 + usize::from(s.notes.is_some()));
        if let Some(n) = s.notes {
            reply::bulk(out, b"notes");
            reply::bulk(out, n.as_bytes());
        }
        reply::bulk(out, b"flags");
        write_key_flags(out, proto, s.flags);
        reply::bulk(out, b"begin_search");
        reply::map(out, proto, 2);
        reply::bulk(out, b"type");
        match s.begin {
            Begin::Unknown => {
                reply::bulk(out, b"unknown");
                reply::bulk(out, b"spec");
                reply::map(out, proto, 0);
            }
            Begin::Index(pos) => {
                reply::bulk(out, b"index");
                reply::bulk(out, b"spec");
                reply::map(out, proto, 1);
                reply::bulk(out, b"index");
                reply::int(out, pos.into());
            }
            Begin::Keyword { keyword, startfrom } => {
                reply::bulk(out, b"keyword");
                reply::bulk(out, b"spec");
                reply::map(out, proto, 2);
                reply::bulk(out, b"keyword");
                reply::bulk(out, keyword.as_bytes());
                reply::bulk(out, b"startfrom");
                reply::int(out, startfrom.into());
            }
        }
        reply::bulk(out, b"find_keys");
        reply::map(out, proto, 2);
        reply::bulk(out, b"type");
        match s.find {
            Find::Unknown => {
                reply::bulk(out, b"unknown");
                reply::bulk(out, b"spec");
                reply::map(out, proto, 0);
            }
            Find::Range {
                lastkey,
                keystep,
                limit,
            } => {
                reply::bulk(out, b"range");
                reply::bulk(out, b"spec");
                reply::map(out, proto, 3);
                for (k, v) in [("lastkey", lastkey), ("keystep", keystep), ("limit", limit)] {
                    reply::bulk(out, k.as_bytes());
                    reply::int(out, v.into());
                }
            }
            Find::Keynum {
                keynumidx,
                firstkey,
                keystep,
            } => {
                reply::bulk(out, b"keynum");
                reply::bulk(out, b"spec");
                reply::map(out, proto, 3);
                for (k, v) in [
                    ("keynumidx", keynumidx),
                    ("firstkey", firstkey),
                    ("keystep", keystep),
                ] {
                    reply::bulk(out, k.as_bytes());
                    reply::int(out, v.into());
                }
            }
        }
    }
}

/// `COMMAND INFO`'s ten fields for a command or subcommand.
fn write_info(out: &mut Vec<u8>, proto: u8, f: Found) {
    reply::array(out, 10);
    reply::bulk(out, f.full_name().as_bytes());
    let subs = f.subs;
    match f.spec() {
        Some(s) => {
            reply::int(out, s.arity.into());
            write_set_of_simple(out, proto, s.flags);
            reply::int(out, s.legacy_keys.0.into());
            reply::int(out, s.legacy_keys.1.into());
            reply::int(out, s.legacy_keys.2.into());
            write_set_of_simple(out, proto, s.categories);
            reply::set(out, proto, s.tips.len());
            for t in s.tips {
                reply::bulk(out, t.as_bytes());
            }
            write_key_specs(out, proto, s.key_specs);
        }
        None => {
            // cxltier's own: what the table says (a subcommand without a Redis description
            // takes its container's categories).
            let c = f.cmd;
            let arity = if f.sub.is_some() { -2 } else { c.arity };
            reply::int(out, arity.into());
            let names: Vec<&str> = crate::command::flag::NAMES
                .iter()
                .filter(|(fl, _)| f.sub.is_none() && c.has(*fl))
                .map(|(_, n)| *n)
                .collect();
            write_set_of_simple(out, proto, &names);
            let (first, last, step) = if f.sub.is_some() {
                (0, 0, 0)
            } else {
                (c.first_key, c.last_key, c.step)
            };
            reply::int(out, first.into());
            reply::int(out, last.into());
            reply::int(out, step.into());
            write_set_of_simple(out, proto, &categories(f));
            reply::set(out, proto, 0);
            reply::set(out, proto, 0);
        }
    }
    if subs.is_empty() {
        reply::set(out, proto, 0);
    } else {
        reply::array(out, subs.len());
        for s in subs {
            write_info(out, proto, f.subcommand(s));
        }
    }
}

fn write_args(out: &mut Vec<u8>, proto: u8, args: &[Arg]) {
    reply::array(out, args.len());
    for a in args {
        let nested = matches!(a.kind, "oneof" | "block");
        let n = 2
            + usize::from(a.key_spec_index != -1)
            + usize::from(a.token.is_some())
            + usize::from(a.summary.is_some())
            + usize::from(a.since.is_some())
            + usize::from(a.deprecated_since.is_some())
            + usize::from(!a.flags.is_empty())
            + usize::from(nested);
        reply::map(out, proto, n);
        reply::bulk(out, b"name");
        reply::bulk(out, a.name.as_bytes());
        reply::bulk(out, b"type");
        reply::bulk(out, a.kind.as_bytes());
        if a.key_spec_index != -1 {
            reply::bulk(out, b"key_spec_index");
            reply::int(out, a.key_spec_index.into());
        }
        for (k, v) in [
            ("token", a.token),
            ("summary", a.summary),
            ("since", a.since),
            ("deprecated_since", a.deprecated_since),
        ] {
            if let Some(v) = v {
                reply::bulk(out, k.as_bytes());
                reply::bulk(out, v.as_bytes());
            }
        }
        if !a.flags.is_empty() {
            reply::bulk(out, b"flags");
            write_set_of_simple(out, proto, a.flags);
        }
        if nested {
            reply::bulk(out, b"arguments");
            write_args(out, proto, a.args);
        }
    }
}

/// `COMMAND DOCS`' map for a command or subcommand (its name written by the caller).
fn write_docs(out: &mut Vec<u8>, proto: u8, f: Found) {
    let subs = f.subs;
    let Some(s) = f.spec() else {
        // cxltier's own: the table's summary and group.
        reply::map(out, proto, 2 + usize::from(!subs.is_empty()));
        reply::bulk(out, b"summary");
        reply::bulk(out, f.cmd.summary.as_bytes());
        reply::bulk(out, b"group");
        reply::bulk(out, f.cmd.group.as_bytes());
        write_sub_docs(out, proto, f, subs);
        return;
    };
    let n = 1
        + usize::from(s.summary.is_some())
        + usize::from(s.since.is_some())
        + usize::from(s.complexity.is_some())
        + usize::from(!s.doc_flags.is_empty())
        + usize::from(s.deprecated_since.is_some())
        + usize::from(s.replaced_by.is_some())
        + usize::from(!s.history.is_empty())
        + usize::from(!s.args.is_empty())
        + usize::from(!subs.is_empty());
    reply::map(out, proto, n);
    for (k, v) in [("summary", s.summary), ("since", s.since)] {
        if let Some(v) = v {
            reply::bulk(out, k.as_bytes());
            reply::bulk(out, v.as_bytes());
        }
    }
    reply::bulk(out, b"group");
    reply::bulk(out, s.group.as_bytes());
    if let Some(c) = s.complexity {
        reply::bulk(out, b"complexity");
        reply::bulk(out, c.as_bytes());
    }
    if !s.doc_flags.is_empty() {
        reply::bulk(out, b"doc_flags");
        write_set_of_simple(out, proto, s.doc_flags);
    }
    for (k, v) in [
        ("deprecated_since", s.deprecated_since),
        ("replaced_by", s.replaced_by),
    ] {
        if let Some(v) = v {
            reply::bulk(out, k.as_bytes());
            reply::bulk(out, v.as_bytes());
        }
    }
    if !s.history.is_empty() {
        reply::bulk(out, b"history");
        reply::set(out, proto, s.history.len());
        for (since, change) in s.history {
            reply::array(out, 2);
            reply::bulk(out, since.as_bytes());
            reply::bulk(out, change.as_bytes());
        }
    }
    if !s.args.is_empty() {
        reply::bulk(out, b"arguments");
        write_args(out, proto, s.args);
    }
    write_sub_docs(out, proto, f, subs);
}

fn write_sub_docs(out: &mut Vec<u8>, proto: u8, f: Found, subs: &[&'static str]) {
    if subs.is_empty() {
        return;
    }
    reply::bulk(out, b"subcommands");
    reply::map(out, proto, subs.len());
    for s in subs {
        let sub = f.subcommand(s);
        reply::bulk(out, sub.full_name().as_bytes());
        write_docs(out, proto, sub);
    }
}

/// The ACL categories of a command or subcommand: Redis's, or for cxltier's own the table's
/// (from its flags and group, as Redis would imply them).
fn categories(f: Found) -> Vec<&'static str> {
    if let Some(s) = f.spec() {
        return s.categories.to_vec();
    }
    f.cmd.categories()
}

/// The names `COMMAND LIST` gives: each command, then `name|sub` for each subcommand served.
fn all_found(commands: &Commands) -> impl Iterator<Item = Found> + '_ {
    commands.all().iter().flat_map(|cmd| {
        let found = Found::command(commands, cmd);
        std::iter::once(found).chain(found.subs.iter().map(move |s| found.subcommand(s)))
    })
}

/// The keys of a command line (name first, a command of `commands`) and their key-spec flags
/// ([`ks`]), as Redis's `getKeysFromCommandWithSpecs` finds them: the ACL's key checks read
/// and write by them. Empty for cxltier's own commands (no description).
pub fn keys_with_flags(commands: &Commands, args: &[&[u8]]) -> Vec<(usize, u16)> {
    let Some(f) = by_args(commands, args) else {
        return Vec::new();
    };
    match f.spec() {
        Some(spec) => keys_and_flags(f, spec, args),
        None => Vec::new(),
    }
}

/// The keys of a command line and their flags, as Redis's `getKeysFromCommandWithSpecs` finds
/// them: `None` when its arguments name no valid keys.
fn keys_and_flags(f: Found, spec: &Spec, args: &[&[u8]]) -> Vec<(usize, u16)> {
    let complete = spec.key_specs.iter().any(|k| k.flags & ks::NOT_KEY == 0);
    let variable = spec
        .key_specs
        .iter()
        .any(|k| k.flags & ks::VARIABLE_FLAGS != 0);
    if complete && !variable {
        if let Some(keys) = keys_by_specs(spec.key_specs, args) {
            return keys;
        }
    }
    if spec.getkeys_function {
        return keys_by_function(f, args);
    }
    Vec::new()
}

/// Redis's `getKeysUsingKeySpecs` (without partial results): `None` for a spec that cannot
/// be followed (unknown, a bad key count, keys past the arguments, or incomplete).
pub fn keys_by_specs(specs: &[KeySpec], args: &[&[u8]]) -> Option<Vec<(usize, u16)>> {
    let argc = args.len() as i64;
    let mut keys = Vec::new();
    for spec in specs {
        if spec.flags & ks::NOT_KEY != 0 {
            continue;
        }
        let mut first: i64 = match spec.begin {
            Begin::Unknown => return None,
            Begin::Index(pos) => pos.into(),
            Begin::Keyword { keyword, startfrom } => {
                let startfrom = i64::from(startfrom);
                let start = if startfrom > 0 {
                    startfrom
                } else {
                    argc + startfrom
                };
                let end = if startfrom > 0 { argc - 1 } else { 1 };
                let mut found = 0;
                let mut i = start;
                while i != end {
                    if i >= argc || i < 1 {
                        break;
                    }
                    if args[i as usize].eq_ignore_ascii_case(keyword.as_bytes()) {
                        found = i + 1;
                        break;
                    }
                    i = if start <= end { i + 1 } else { i - 1 };
                }
                if found == 0 {
                    continue;
                }
                found
            }
        };
        let (last, step) = match spec.find {
            Find::Unknown => return None,
            Find::Range {
                lastkey,
                keystep,
                limit,
            } => {
                let (lastkey, limit) = (i64::from(lastkey), i64::from(limit));
                let last = if lastkey >= 0 {
                    first + lastkey
                } else if limit == 0 {
                    argc + lastkey
                } else {
                    first + ((argc - first) / limit + lastkey)
                };
                (last, i64::from(keystep))
            }
            Find::Keynum {
                keynumidx,
                firstkey,
                keystep,
            } => {
                let at = first + i64::from(keynumidx);
                if i64::from(keynumidx) >= argc || at >= argc {
                    return None;
                }
                let numkeys: i64 =
                    crate::numbers::int_arg(args[at as usize]).filter(|&n| n >= 0)?;
                first += i64::from(firstkey);
                // A count as large as the client likes: past the arguments, not an overflow.
                (
                    first.saturating_add(numkeys).saturating_sub(1),
                    i64::from(keystep),
                )
            }
        };
        if last >= argc || last < first || first >= argc {
            return None;
        }
        let mut i = first;
        while i <= last {
            keys.push((i as usize, spec.flags));
            i += step.max(1);
        }
        if spec.flags & ks::INCOMPLETE != 0 {
            return None;
        }
    }
    Some(keys)
}

/// C's `atoi`: leading blanks, a sign, then digits as far as they go (0 for none).
fn atoi(b: &[u8]) -> i64 {
    let s = std::str::from_utf8(b).unwrap_or("").trim_start();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut n: i64 = 0;
    for d in digits.bytes().take_while(u8::is_ascii_digit) {
        n = n.saturating_mul(10).saturating_add(i64::from(d - b'0'));
    }
    if neg {
        -n
    } else {
        n
    }
}

/// Redis's `genericGetKeys`: `num` keys from `first` (the count at `count_at`), then the
/// destination at `store` when there is one; no flags.
fn generic_keys(store: usize, count_at: usize, first: usize, args: &[&[u8]]) -> Vec<(usize, u16)> {
    let Some(count) = args.get(count_at) else {
        return Vec::new();
    };
    let num = atoi(count);
    if num < 1 || num > args.len() as i64 - first as i64 {
        return Vec::new();
    }
    let mut keys: Vec<(usize, u16)> = (0..num as usize).map(|i| (first + i, 0)).collect();
    if store != 0 {
        keys.push((store, 0));
    }
    keys
}

/// Redis's key functions (`getkeys_proc`) of the table's commands that have one, used when
/// their key specs cannot tell (SET's and BITFIELD's flags depend on their arguments; SORT's
/// STORE and GEORADIUS's STORE may be anywhere).
fn keys_by_function(f: Found, args: &[&[u8]]) -> Vec<(usize, u16)> {
    let is = |a: &[u8], w: &str| a.eq_ignore_ascii_case(w.as_bytes());
    match f.cmd.name {
        "SET" => {
            let get = args.iter().skip(3).any(|a| is(a, "GET"));
            vec![(
                1,
                if get {
                    ks::RW | ks::ACCESS | ks::UPDATE
                } else {
                    ks::OW | ks::UPDATE
                },
            )]
        }
        "BITFIELD" => {
            let mut readonly = true;
            let mut i = 2;
            while i < args.len() {
                let remaining = args.len() - i - 1;
                if is(args[i], "GET") && remaining >= 2 {
                    i += 2;
                } else if (is(args[i], "SET") || is(args[i], "INCRBY")) && remaining >= 3 {
                    readonly = false;
                    break;
                } else if is(args[i], "OVERFLOW") && remaining >= 1 {
                    i += 1;
                } else {
                    // A syntax error: safer taken as a write.
                    readonly = false;
                    break;
                }
                i += 1;
            }
            let flags = if readonly {
                ks::RO | ks::ACCESS
            } else {
                ks::RW | ks::ACCESS | ks::UPDATE
            };
            vec![(1, flags)]
        }
        "SORT_RO" => vec![(1, ks::RO | ks::ACCESS)],
        "SORT" => {
            // Options take no argument unless listed; the last STORE wins, as in SORT.
            let mut keys = vec![(1, ks::RO | ks::ACCESS)];
            let mut store = None;
            let mut i = 2;
            while i < args.len() {
                if is(args[i], "LIMIT") {
                    i += 2;
                } else if is(args[i], "STORE") && i + 1 < args.len() {
                    store = Some(i + 1);
                } else if is(args[i], "GET") || is(args[i], "BY") {
                    i += 1;
                }
                i += 1;
            }
            keys.extend(store.map(|s| (s, ks::OW | ks::UPDATE)));
            keys
        }
        "GEORADIUS" | "GEORADIUSBYMEMBER" => {
            let mut stored = None;
            let mut i = 5;
            while i < args.len() {
                if (is(args[i], "STORE") || is(args[i], "STOREDIST")) && i + 1 < args.len() {
                    stored = Some(i + 1);
                    i += 1;
                }
                i += 1;
            }
            let mut keys = vec![(1, 0)];
            keys.extend(stored.map(|s| (s, 0)));
            keys
        }
        "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" | "FCALL" | "FCALL_RO" | "BLMPOP"
        | "BZMPOP" => generic_keys(0, 2, 3, args),
        "LMPOP" | "ZMPOP" | "SINTERCARD" | "ZINTERCARD" | "ZUNION" | "ZINTER" | "ZDIFF" => {
            generic_keys(0, 1, 2, args)
        }
        "ZUNIONSTORE" | "ZINTERSTORE" | "ZDIFFSTORE" => generic_keys(1, 2, 3, args),
        // A command added to the table with a Redis key function not ported here: its table
        // key function, without flags.
        _ => f
            .cmd
            .keys_fn
            .and_then(|kf| kf(args))
            .unwrap_or_default()
            .into_iter()
            .map(|i| (i, 0))
            .collect(),
    }
}

fn getkeys(commands: &Commands, out: &mut Vec<u8>, proto: u8, line: &[&[u8]], with_flags: bool) {
    let Some(f) = by_args(commands, line) else {
        reply::error(out, "ERR Invalid command specified");
        return;
    };
    let Some(spec) = f.spec() else {
        // cxltier's own commands have no keys Redis could describe.
        reply::error(out, "ERR The command has no key arguments");
        return;
    };
    let has_keys =
        spec.getkeys_function || spec.key_specs.iter().any(|k| k.flags & ks::NOT_KEY == 0);
    if !has_keys {
        reply::error(out, "ERR The command has no key arguments");
        return;
    }
    let n = line.len() as i64;
    let arity = i64::from(spec.arity);
    if (arity > 0 && arity != n) || n < -arity {
        reply::error(out, "ERR Invalid number of arguments specified for command");
        return;
    }
    let keys = keys_and_flags(f, spec, line);
    if keys.is_empty() {
        if spec.has_flag("no_mandatory_keys") {
            reply::array(out, 0);
        } else {
            reply::error(out, "ERR Invalid arguments specified for command");
        }
        return;
    }
    reply::array(out, keys.len());
    for (i, flags) in keys {
        if with_flags {
            reply::array(out, 2);
            reply::bulk(out, line[i]);
            write_key_flags(out, proto, flags);
        } else {
            reply::bulk(out, line[i]);
        }
    }
}

/// COMMAND's subcommands (those [`Commands::subcommands`] lists for it).
const SUBCOMMANDS_OF_COMMAND: &[&str] = &[
    "count",
    "docs",
    "getkeys",
    "getkeysandflags",
    "help",
    "info",
    "list",
];

const HELP: &[&str] = &[
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all Redis commands.",
    "COUNT",
    "    Return the total number of commands in this Redis server.",
    "LIST",
    "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "GETKEYSANDFLAGS <full-command>",
    "    Return the keys and the access flags from a full Redis command.",
    "HELP",
    "    Print this help.",
];

/// COMMAND and its subcommands: the table itself, as Redis describes its commands.
pub(crate) fn command(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    command_reply(ctx.commands, ctx.out, ctx.session.proto, &args[1..]);
    Ok(Effect::Read)
}

/// The reply to `COMMAND ...` about `commands`, `sub` being the arguments after COMMAND.
pub fn command_reply(commands: &Commands, out: &mut Vec<u8>, proto: u8, sub: &[&[u8]]) {
    let Some(&which) = sub.first() else {
        reply::array(out, commands.all().len());
        for cmd in commands.all() {
            write_info(out, proto, Found::command(commands, cmd));
        }
        return;
    };
    let rest = &sub[1..];
    let upper = which.to_ascii_uppercase();
    // A subcommand's arity, as Redis checks it before running it (COMMAND's own counted).
    let full = format!(
        "command|{}",
        String::from_utf8_lossy(which).to_ascii_lowercase()
    );
    if let Some(s) = spec(&full).filter(|_| SUBCOMMANDS_OF_COMMAND.contains(&&full[8..])) {
        let n = sub.len() as i64 + 1;
        let arity = i64::from(s.arity);
        if (arity > 0 && arity != n) || n < -arity {
            reply::error(
                out,
                &format!("ERR wrong number of arguments for '{full}' command"),
            );
            return;
        }
    }
    match (upper.as_slice(), rest.len()) {
        (b"HELP", 0) => reply::simple_lines(out, HELP),
        (b"COUNT", 0) => reply::int(out, commands.all().len() as i64),
        (b"INFO", 0) => command_reply(commands, out, proto, &[]),
        (b"INFO", _) => {
            reply::array(out, rest.len());
            for name in rest {
                match by_full_name(commands, name) {
                    Some(f) => write_info(out, proto, f),
                    None => reply::null(out, proto),
                }
            }
        }
        (b"DOCS", _) => {
            let found: Vec<Found> = if rest.is_empty() {
                commands
                    .all()
                    .iter()
                    .map(|cmd| Found::command(commands, cmd))
                    .collect()
            } else {
                rest.iter()
                    .filter_map(|n| by_full_name(commands, n))
                    .collect()
            };
            reply::map(out, proto, found.len());
            for f in found {
                reply::bulk(out, f.full_name().as_bytes());
                write_docs(out, proto, f);
            }
        }
        (b"LIST", _) => list(commands, out, rest),
        (b"GETKEYS", 1..) => getkeys(commands, out, proto, rest, false),
        (b"GETKEYSANDFLAGS", 1..) => getkeys(commands, out, proto, rest, true),
        _ => reply::error(out, &crate::errors::unknown_subcommand("COMMAND", which)),
    }
}

enum Filter<'a> {
    All,
    Module,
    Category(&'a [u8]),
    Pattern(&'a [u8]),
}

/// `COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]`.
fn list(commands: &Commands, out: &mut Vec<u8>, rest: &[&[u8]]) {
    let filter = match rest {
        [] => Filter::All,
        [f, by, arg] if f.eq_ignore_ascii_case(b"FILTERBY") => {
            match by.to_ascii_uppercase().as_slice() {
                b"PATTERN" => Filter::Pattern(arg),
                b"ACLCAT" => Filter::Category(arg),
                // No modules are loaded: nothing comes from one.
                b"MODULE" => Filter::Module,
                _ => return reply::error(out, crate::errors::SYNTAX),
            }
        }
        _ => return reply::error(out, crate::errors::SYNTAX),
    };
    let names: Vec<String> = all_found(commands)
        .filter(|f| match filter {
            Filter::All => true,
            Filter::Module => false,
            Filter::Pattern(p) => crate::glob::matches(p, f.full_name().as_bytes(), true),
            Filter::Category(cat) => categories(*f)
                .iter()
                .any(|k| k.as_bytes()[1..].eq_ignore_ascii_case(cat)),
        })
        .map(|f| f.full_name())
        .collect();
    reply::array(out, names.len());
    for n in names {
        reply::bulk(out, n.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::TABLE;

    fn run(line: &str) -> String {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let mut out = Vec::new();
        command_reply(&crate::table::COMMANDS, &mut out, 2, &args);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_specs_are_sorted_and_name_every_redis_command_of_the_table() {
        for w in SPECS.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
        // Every command of the table but cxltier's own is Redis's, with Redis's arity.
        for c in TABLE {
            match spec(&c.name.to_ascii_lowercase()) {
                Some(s) => assert_eq!(s.arity, c.arity, "{}", c.name),
                None => assert_eq!(c.name, "SCANRANGE", "no Redis description"),
            }
        }
        // Redis's invariants on the generated flags and keys.
        for s in SPECS {
            assert!(!s.categories.is_empty(), "{}", s.name);
            let movable = s.has_flag("movablekeys");
            let plain = s.key_specs.iter().all(|k| {
                matches!(
                    (k.begin, k.find),
                    (Begin::Index(_), Find::Range { keystep: 1, .. })
                ) && k.flags & ks::INCOMPLETE == 0
            });
            if s.key_specs.len() == 1 && plain {
                assert!(!movable, "{}", s.name);
            }
        }
    }

    #[test]
    fn getkeysandflags_answers_redis_s_flags() {
        assert_eq!(
            run("GETKEYSANDFLAGS set k1 v1"),
            "*1\r\n*2\r\n$2\r\nk1\r\n*2\r\n+OW\r\n+update\r\n"
        );
        assert_eq!(
            run("GETKEYSANDFLAGS set k1 v1 GET"),
            "*1\r\n*2\r\n$2\r\nk1\r\n*3\r\n+RW\r\n+access\r\n+update\r\n"
        );
        assert_eq!(
            run("GETKEYSANDFLAGS LMOVE k1 k2 left right"),
            "*2\r\n*2\r\n$2\r\nk1\r\n*3\r\n+RW\r\n+access\r\n+delete\r\n\
             *2\r\n$2\r\nk2\r\n*2\r\n+RW\r\n+insert\r\n"
        );
        assert_eq!(
            run("GETKEYSANDFLAGS sort k1 store k2"),
            "*2\r\n*2\r\n$2\r\nk1\r\n*2\r\n+RO\r\n+access\r\n*2\r\n$2\r\nk2\r\n*2\r\n+OW\r\n+update\r\n"
        );
        assert_eq!(
            run("GETKEYSANDFLAGS bitfield b GET u8 0"),
            "*1\r\n*2\r\n$1\r\nb\r\n*2\r\n+RO\r\n+access\r\n"
        );
        assert_eq!(
            run("GETKEYSANDFLAGS mset a 1 b 2"),
            "*2\r\n*2\r\n$1\r\na\r\n*2\r\n+OW\r\n+update\r\n*2\r\n$1\r\nb\r\n*2\r\n+OW\r\n+update\r\n"
        );
    }

    #[test]
    fn getkeys_refuses_as_redis() {
        assert_eq!(run("GETKEYS nope x"), "-ERR Invalid command specified\r\n");
        // COMMAND GETKEYS takes a command and at least one argument (Redis's arity, -4).
        assert_eq!(
            run("GETKEYS ping"),
            "-ERR wrong number of arguments for 'command|getkeys' command\r\n"
        );
        assert_eq!(
            run("GETKEYS ping x"),
            "-ERR The command has no key arguments\r\n"
        );
        assert_eq!(
            run("GETKEYS get a b"),
            "-ERR Invalid number of arguments specified for command\r\n"
        );
        assert_eq!(
            run("GETKEYS config get maxmemory"),
            "-ERR The command has no key arguments\r\n"
        );
        assert_eq!(run("GETKEYS memory usage k"), "*1\r\n$1\r\nk\r\n");
        assert_eq!(run("GETKEYS object encoding k"), "*1\r\n$1\r\nk\r\n");
        assert_eq!(run("GETKEYS lcs a b"), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        assert_eq!(run("GETKEYS eval s 0"), "*0\r\n");
        assert_eq!(
            run("GETKEYS zunionstore d 9223372036854775807 a"),
            "-ERR Invalid arguments specified for command\r\n"
        );
        assert_eq!(run("GETKEYS eval s x"), "*0\r\n");
        assert_eq!(
            run("GETKEYS zunionstore d 3 a b"),
            "-ERR Invalid arguments specified for command\r\n"
        );
        assert_eq!(
            run("GETKEYS georadius g 1 2 3 km STORE d"),
            "*2\r\n$1\r\ng\r\n$1\r\nd\r\n"
        );
    }

    #[test]
    fn info_has_key_specs_subcommands_and_redis_s_flags() {
        let get = run("INFO get");
        assert!(
            get.starts_with("*1\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n"),
            "{get}"
        );
        assert!(get.contains("$12\r\nbegin_search\r\n"));
        assert!(run("INFO zunionstore").contains("+movablekeys"));
        assert!(!run("INFO memory").contains("+movablekeys"));
        assert!(!run("INFO memory|usage").contains("+movablekeys"));
        assert!(run("INFO georadius").contains("+movablekeys"));
        assert!(!run("INFO georadius_ro").contains("+movablekeys"));
        assert_eq!(run("INFO get|key"), "*1\r\n$-1\r\n");
        assert_eq!(run("INFO config|get|key"), "*1\r\n$-1\r\n");
        let config = run("INFO config");
        assert!(config.contains("$10\r\nconfig|get\r\n"), "{config}");
        let docs = run("DOCS get");
        assert!(
            docs.contains("$10\r\ncomplexity\r\n$4\r\nO(1)\r\n"),
            "{docs}"
        );
        assert!(docs.contains("$9\r\narguments\r\n"));
        assert_eq!(run("DOCS nope"), "*0\r\n");
    }

    #[test]
    fn keyword_specs_search_from_either_end() {
        let specs = [KeySpec {
            notes: None,
            flags: ks::RW,
            begin: Begin::Keyword {
                keyword: "KEYS",
                startfrom: -2,
            },
            find: Find::Range {
                lastkey: -1,
                keystep: 1,
                limit: 0,
            },
        }];
        let args: Vec<&[u8]> = ["MIGRATE", "h", "p", "", "0", "5", "KEYS", "a", "b"]
            .iter()
            .map(|s| s.as_bytes())
            .collect();
        assert_eq!(
            keys_by_specs(&specs, &args),
            Some(vec![(7, ks::RW), (8, ks::RW)])
        );
        assert_eq!(atoi(b" 12x"), 12);
        assert_eq!(atoi(b"-3"), -3);
        assert_eq!(atoi(b"x"), 0);
    }

    #[test]
    fn list_filters_by_category_pattern_and_module() {
        assert_eq!(run("LIST FILTERBY PATTERN set"), "*1\r\n$3\r\nset\r\n");
        assert_eq!(run("LIST FILTERBY MODULE m"), "*0\r\n");
        assert_eq!(run("LIST FILTERBY ACLCAT nope"), "*0\r\n");
        assert_eq!(run("LIST bad"), "-ERR syntax error\r\n");
        let scripting = run("LIST FILTERBY ACLCAT scripting");
        assert!(scripting.contains("$4\r\neval\r\n") && !scripting.contains("$3\r\nset\r\n"));
        assert!(run("HELP").starts_with("*"));
    }
}
