//! What a command is, as the command table holds it (Redis's design: one entry per command with
//! its name, arity, flags, key positions and handler), and [`Commands`], a table of them found
//! by name. The server's table itself is `crate::table`; this module names no handler, so the
//! handlers that look commands up can import it without a loop.

use cxltier_store::StoreError;

use crate::context::{BusyHandler, Ctx, Effect};

/// A command's handler: its arguments, name first, already checked against the arity.
pub type Handler = fn(&mut Ctx<'_>, &[&[u8]]) -> Result<Effect, StoreError>;

/// The key positions of a command whose keys move with its arguments (MOVABLEKEYS: a STORE
/// option, a key count), given its arguments, name first; `None` when they name no valid keys.
pub type KeysFn = fn(&[&[u8]]) -> Option<Vec<usize>>;

/// Redis's command flags (`COMMAND INFO` names them), and ours.
pub mod flag {
    pub const WRITE: u64 = 1 << 0;
    pub const READONLY: u64 = 1 << 1;
    pub const DENYOOM: u64 = 1 << 2;
    pub const ADMIN: u64 = 1 << 3;
    pub const PUBSUB: u64 = 1 << 4;
    pub const NOSCRIPT: u64 = 1 << 5;
    pub const BLOCKING: u64 = 1 << 6;
    pub const LOADING: u64 = 1 << 7;
    pub const STALE: u64 = 1 << 8;
    pub const FAST: u64 = 1 << 9;
    pub const NO_AUTH: u64 = 1 << 10;
    pub const NO_MULTI: u64 = 1 << 11;
    pub const MOVABLEKEYS: u64 = 1 << 12;
    pub const ALLOW_BUSY: u64 = 1 << 13;
    /// cxltier's own: the handler reads the values of its keys, so their NVMe reads begin
    /// before it runs and it waits (without blocking the loop) until they are at hand. Commands
    /// that only look at the index (EXISTS, DEL) go without. Not shown by `COMMAND INFO`.
    pub const VALUES: u64 = 1 << 31;
    /// cxltier's own: it may run a Lua script (EVAL and its kin, and EXEC, whose transaction
    /// may hold one): the loop lends the other connections to the script's busy mode while it
    /// runs, so that a script that runs long answers them BUSY, accepts new ones and heeds
    /// SCRIPT KILL and stop signals. Not shown by `COMMAND INFO`.
    pub const SCRIPTS: u64 = 1 << 30;

    /// cxltier's own, not shown by `COMMAND INFO`: what a command is, for the checks dispatch
    /// and the loop make by kind of command (none is made by its name).
    ///
    /// May run while a RESP2 connection is subscribed: Redis allows only the (un)subscribe
    /// commands, PING, QUIT and RESET then, since every reply in that mode is a message.
    pub const ALLOWED_IN_RESP2_SUBSCRIBED: u64 = 1 << 14;
    /// A transaction's own command (MULTI, EXEC, DISCARD, WATCH, QUIT, RESET): inside MULTI it
    /// runs at once instead of being queued, since it is what ends or guards the transaction.
    pub const TX_CONTROL: u64 = 1 << 15;
    /// Ends the transaction being queued (EXEC, DISCARD, QUIT, RESET): it queues nothing, so it
    /// is not refused OOM inside MULTI, where every other command takes memory to queue.
    pub const TX_END: u64 = 1 << 16;
    /// Runs the queued transaction (EXEC): it counts as the commands it would run (writes and
    /// memory growth refused as theirs, their keys read before it runs), and a refusal discards
    /// the transaction with EXECABORT.
    pub const TX_EXEC: u64 = 1 << 17;
    /// Removes every key of every database (FLUSHALL), or of the selected one (FLUSHDB): the
    /// watched keys that exist are touched before they go (Redis's rule, known only before).
    pub const FLUSHES_ALL: u64 = 1 << 18;
    pub const FLUSHES_DB: u64 = 1 << 19;
    /// Redis's CMD_TOUCHES_ARBITRARY_KEYS (SCAN, KEYS, RANDOMKEY): its unit of the write
    /// stream is never wrapped in `multi`/`exec` (the keys it found expired go one by one).
    pub const TOUCHES_ARBITRARY_KEYS: u64 = 1 << 20;
    /// A read whose missing keys are no key misses (OBJECT: Redis looks its key up without
    /// announcing anything).
    pub const NO_KEYMISS: u64 = 1 << 21;

    /// Inside MULTI while a script is busy, runs instead of being refused BUSY (EXEC, DISCARD,
    /// MULTI, QUIT): the busy mode's own answers end or refuse the transaction.
    pub const TX_CONTROL_WHILE_BUSY: u64 = 1 << 23;
    /// Leaves a connection's `CLIENT CACHING yes|no` in force for its next command (CLIENT's
    /// own subcommands, as Redis's `resetClient` spares them).
    pub const KEEPS_CACHING: u64 = 1 << 24;

    /// Redis's CMD_SKIP_SLOWLOG (EXEC): not logged itself; the commands it runs are.
    pub const SKIP_SLOWLOG: u64 = 1 << 25;

    /// Redis's CMD_MAY_REPLICATE: not a write, but it may put something in the write stream
    /// (EVAL, PUBLISH, PFCOUNT's cache update): CLIENT PAUSE WRITE holds it as a write.
    pub const MAY_REPLICATE: u64 = 1 << 26;

    /// cxltier's own: runs the function its first argument names (FCALL, FCALL_RO), whose
    /// flags then decide what the command is (a `no-writes` function neither writes nor may
    /// replicate: Redis's `fcallGetCommandFlags`).
    pub const CALLS_FUNCTION: u64 = 1 << 27;
    /// cxltier's own: runs the script its first argument is (EVAL, EVAL_RO), or the cached
    /// script its first argument names by SHA1 (EVALSHA, EVALSHA_RO); a script whose shebang
    /// declared flags is then what they say, as a function is (Redis's `evalGetCommandFlags`).
    pub const RUNS_SCRIPT: u64 = 1 << 28;
    pub const RUNS_CACHED_SCRIPT: u64 = 1 << 29;

    /// cxltier's own, for the ACL's channel checks (Redis's key specs of channels): its first
    /// argument is a channel it publishes to (PUBLISH, SPUBLISH); every argument is a channel
    /// it subscribes to (SUBSCRIBE, SSUBSCRIBE); every argument is a pattern (PSUBSCRIBE).
    pub const CHANNEL_PUBLISH: u64 = 1 << 22;
    pub const CHANNELS_SUBSCRIBE: u64 = 1 << 32;
    pub const CHANNEL_PATTERNS: u64 = 1 << 33;

    /// Redis's names of the flags above, in `COMMAND INFO`'s order.
    pub const NAMES: &[(u64, &str)] = &[
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (PUBSUB, "pubsub"),
        (NOSCRIPT, "noscript"),
        (BLOCKING, "blocking"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        (NO_MULTI, "no_multi"),
        (MOVABLEKEYS, "movablekeys"),
        (ALLOW_BUSY, "allow_busy"),
        (MAY_REPLICATE, "may_replicate"),
    ];
}

use flag::*;

/// One command.
#[derive(Debug)]
pub struct Command {
    /// Upper case; the table is sorted by it.
    pub name: &'static str,
    /// Redis's convention: `n` exactly n arguments (the name included), `-n` at least n.
    pub arity: i32,
    pub flags: u64,
    /// Where the keys are: the first and last argument that is a key (a negative last counts
    /// from the end: -1 the last argument) and the step between keys; 0 0 0 for no keys.
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    pub handler: Handler,
    /// Where the keys are for a command whose keys move (`COMMAND GETKEYS`); the triple above
    /// is then Redis's legacy first/last/step, which names only the fixed ones.
    pub keys_fn: Option<KeysFn>,
    /// Its answer while a script is busy, when it has one (every other command is refused
    /// BUSY then): see [`crate::dispatch::busy_command`].
    pub while_busy: Option<BusyHandler>,
    /// `COMMAND DOCS`: Redis's group and a one-line summary.
    pub group: &'static str,
    pub summary: &'static str,
    /// The arguments its run hides from the slow log, when it carries secrets (AUTH).
    pub redact: Option<crate::slowlog::RedactFn>,
}

impl Command {
    pub fn has(&self, f: u64) -> bool {
        self.flags & f != 0
    }

    /// Whether `n` arguments (the name included) fit the arity.
    pub fn arity_ok(&self, n: usize) -> bool {
        if self.arity >= 0 {
            n == self.arity as usize
        } else {
            n >= self.arity.unsigned_abs() as usize
        }
    }

    /// The positions of the key arguments of a command of `n` arguments, from the table.
    pub fn key_positions(&self, n: usize) -> impl Iterator<Item = usize> {
        let first = self.first_key.max(0) as usize;
        let last = if self.last_key < 0 {
            n as i64 + self.last_key as i64
        } else {
            self.last_key as i64
        };
        let last = if first == 0 {
            0
        } else {
            last.min(n as i64 - 1).max(0) as usize
        };
        let step = self.step.max(1) as usize;
        (first..=last)
            .step_by(step)
            .filter(move |&i| i > 0 && i < n)
    }

    /// Every argument of a command that is a key: the table's key positions, then those the table
    /// cannot say (Redis's movable keys: the command's key function — a `numkeys` argument then
    /// that many keys, SORT's `STORE` destination, GEORADIUS's `STORE`, `MEMORY USAGE`'s key — and
    /// `OBJECT`'s key); `key` is called with each position, once. Dispatch gives each its database.
    /// A `numkeys` that is no number or names more keys than are given marks none (the handler
    /// answers the error). A script's keys are not marked: they reach the script as the client gave
    /// them, and the commands it runs get their database as any command does. Allocates only for
    /// a movable-keys command (dispatch runs this on every command).
    pub fn for_each_key_position(&self, args: &[&[u8]], mut key: impl FnMut(usize)) {
        let cmd = self;
        let n = args.len();
        cmd.key_positions(n).for_each(&mut key);
        match cmd.name {
            "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" | "FCALL" | "FCALL_RO" => {}
            "OBJECT" => {
                if n == 3 && !args[1].eq_ignore_ascii_case(b"HELP") {
                    key(2)
                }
            }
            _ => {
                let Some(extra) = cmd.keys_fn.and_then(|f| f(args)) else {
                    return;
                };
                for i in extra {
                    if i < n && !cmd.key_positions(n).any(|p| p == i) {
                        key(i);
                    }
                }
            }
        }
    }

    /// Redis's ACL categories of a command, from its flags and group: those of cxltier's own
    /// commands, which Redis does not describe (`COMMAND INFO`).
    pub fn categories(&self) -> Vec<&'static str> {
        let c = self;
        let mut cats = Vec::new();
        if c.has(WRITE) {
            cats.push("@write");
        }
        if c.has(READONLY) {
            cats.push("@read");
        }
        if c.has(ADMIN) {
            cats.extend(["@admin", "@dangerous"]);
        }
        if c.has(PUBSUB) {
            cats.push("@pubsub");
        }
        if c.has(BLOCKING) {
            cats.push("@blocking");
        }
        cats.push(if c.has(FAST) { "@fast" } else { "@slow" });
        cats.push(match c.group {
            // Redis puts CLUSTER in no group category.
            "cluster" => "@slow",
            "generic" => "@keyspace",
            "string" => "@string",
            "hash" => "@hash",
            "list" => "@list",
            "set" => "@set",
            "sorted-set" => "@sortedset",
            "bitmap" => "@bitmap",
            "hyperloglog" => "@hyperloglog",
            "geo" => "@geo",
            "pubsub" => "@pubsub",
            "transactions" => "@transaction",
            "scripting" => "@scripting",
            "connection" => "@connection",
            _ => "@admin",
        });
        // Redis lists them in the order of its category table (ACLCommandCategories).
        const ORDER: &[&str] = &[
            "@keyspace",
            "@read",
            "@write",
            "@set",
            "@sortedset",
            "@list",
            "@hash",
            "@string",
            "@bitmap",
            "@hyperloglog",
            "@geo",
            "@stream",
            "@pubsub",
            "@admin",
            "@fast",
            "@slow",
            "@blocking",
            "@dangerous",
            "@connection",
            "@transaction",
            "@scripting",
        ];
        cats.sort_by_key(|c| ORDER.iter().position(|o| o == c));
        cats.dedup();
        cats
    }
}

pub(crate) const fn cmd(
    name: &'static str,
    arity: i32,
    flags: u64,
    keys: (i32, i32, i32),
    handler: Handler,
    group: &'static str,
    summary: &'static str,
) -> Command {
    Command {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        handler,
        keys_fn: None,
        while_busy: None,
        group,
        summary,
        redact: None,
    }
}

/// `c` with its keys found by `f` (a command with movable keys).
pub(crate) const fn movable(c: Command, f: KeysFn) -> Command {
    Command {
        keys_fn: Some(f),
        ..c
    }
}

/// `c` with the arguments `f` names hidden from the slow log.
pub(crate) const fn redacted(c: Command, f: crate::slowlog::RedactFn) -> Command {
    Command {
        redact: Some(f),
        ..c
    }
}

/// `c` answered by `f` while a script is busy.
pub(crate) const fn busy(c: Command, f: BusyHandler) -> Command {
    Command {
        while_busy: Some(f),
        ..c
    }
}

/// A table of commands (the server's is `crate::table::COMMANDS`), with the subcommands its
/// containers serve, found by name. Handlers that look commands up (a script's `redis.call`,
/// COMMAND) get it from [`crate::context::Ctx::commands`], so that they need not import the
/// table, which names them.
pub struct Commands {
    table: &'static [Command],
    subcommands: &'static [(&'static str, &'static [&'static str])],
    by_name: hashbrown::HashMap<&'static [u8], &'static Command>,
    /// The commands as ACL rules name them: a command's id is its place in the table, its
    /// subcommands' ids follow the table's.
    acl: crate::acl::Catalog,
}

/// The ACL categories of a command or one of its subcommands (`config|get`): Redis's, or
/// for cxltier's own [`Command::categories`]. Given by the table, which may read Redis's
/// descriptions.
pub type CategoriesFn = fn(&Command, Option<&str>) -> Vec<&'static str>;

/// Longer than any command's name.
const LONGEST_NAME: usize = 32;

impl Commands {
    /// `table` sorted by name, upper case; `subcommands` as `COMMAND LIST` names them.
    pub fn new(
        table: &'static [Command],
        subcommands: &'static [(&'static str, &'static [&'static str])],
    ) -> Commands {
        let by_name = table
            .iter()
            .inspect(|c| assert!(c.name.len() <= LONGEST_NAME, "{}", c.name))
            .map(|c| (c.name.as_bytes(), c))
            .collect();
        Commands {
            table,
            subcommands,
            by_name,
            acl: crate::acl::Catalog::default(),
        }
    }

    /// The table with its ACL catalog, each command's categories given by `categories`.
    pub fn with_acl(mut self, categories: CategoriesFn) -> Commands {
        let mut catalog = crate::acl::Catalog::default();
        for cmd in self.table {
            catalog.add(&cmd.name.to_ascii_lowercase(), None, &categories(cmd, None));
        }
        for (i, cmd) in self.table.iter().enumerate() {
            for sub in self.subcommands_of(cmd) {
                let full = format!("{}|{sub}", cmd.name.to_ascii_lowercase());
                catalog.add(&full, Some(i as u32), &categories(cmd, Some(sub)));
            }
        }
        self.acl = catalog;
        self
    }

    /// The commands as ACL rules name them.
    pub fn acl(&self) -> &crate::acl::Catalog {
        &self.acl
    }

    /// The ACL id of `cmd` (a command of this table) run with `args`: its subcommand's when it
    /// runs one.
    pub fn acl_id(&self, cmd: &Command, args: &[&[u8]]) -> u32 {
        let at = (cmd as *const Command as usize).wrapping_sub(self.table.as_ptr() as usize)
            / std::mem::size_of::<Command>();
        let id = at as u32;
        match self.subcommand(cmd, args) {
            Some(sub) => self.acl.sub_id(id, sub).unwrap_or(id),
            None => id,
        }
    }

    /// Every command, sorted by name.
    pub fn all(&self) -> &'static [Command] {
        self.table
    }

    /// The subcommands of the container commands, as `COMMAND LIST` names them (`config|get`).
    pub fn subcommands(&self) -> &'static [(&'static str, &'static [&'static str])] {
        self.subcommands
    }

    /// The subcommands `cmd` serves (none when it is no container).
    pub fn subcommands_of(&self, cmd: &Command) -> &'static [&'static str] {
        self.subcommands
            .iter()
            .find(|(parent, _)| *parent == cmd.name)
            .map_or(&[][..], |(_, subs)| *subs)
    }

    /// The command named `name`, in any case.
    pub fn lookup(&self, name: &[u8]) -> Option<&'static Command> {
        // Every command is looked up several times on its way (its reads, its arity, its keys), so
        // by one hash of its name in upper case rather than a binary search of case-folding
        // comparisons, which showed in profiles of short commands.
        let mut upper = [0u8; LONGEST_NAME];
        let upper = upper.get_mut(..name.len())?;
        for (u, b) in upper.iter_mut().zip(name) {
            *u = b.to_ascii_uppercase();
        }
        self.by_name.get(&*upper).copied()
    }

    /// The subcommand `args` run of a container command (`CLIENT ID`: `id`), as its subcommands list
    /// spells it; `None` for another command or a subcommand it does not have.
    pub fn subcommand(&self, cmd: &Command, args: &[&[u8]]) -> Option<&'static str> {
        let sub = args.get(1)?;
        self.subcommands_of(cmd)
            .iter()
            .copied()
            .find(|s| s.as_bytes().eq_ignore_ascii_case(sub))
    }

    /// Whether Redis's description flags the subcommand `args` run `noscript` where the table
    /// flags its container as a whole otherwise (CLUSTER RESET: a script may run the other
    /// CLUSTER subcommands).
    pub fn noscript_subcommand(&self, cmd: &Command, args: &[&[u8]]) -> bool {
        let Some(sub) = self.subcommand(cmd, args) else {
            return false;
        };
        let full = format!("{}|{}", cmd.name, sub).to_ascii_lowercase();
        let specs = crate::command_specs::SPECS;
        specs
            .binary_search_by(|s| s.name.cmp(full.as_str()))
            .is_ok_and(|i| specs[i].flags.contains(&"noscript"))
    }

    /// The key arguments of a command (given as its arguments, name first) whose handler reads their
    /// values, for the NVMe reads begun before it runs: `key` is called with each. Takes an
    /// iterator so that the server need not collect a command's arguments into a vector to ask.
    pub fn for_each_read_key<'a>(
        &self,
        mut args: impl ExactSizeIterator<Item = &'a [u8]>,
        mut key: impl FnMut(&'a [u8]),
    ) {
        let n = args.len();
        let Some(name) = args.next() else { return };
        let Some(cmd) = self.lookup(name) else { return };
        if !cmd.has(VALUES) || !cmd.arity_ok(n) {
            return;
        }
        // Keys that are all where the arguments say (EVAL's numkeys): found by the command's key
        // function. Commands with a fixed key and a movable destination (SORT's STORE) read only
        // the fixed one.
        if let (Some(f), 0) = (cmd.keys_fn, cmd.first_key) {
            let all: Vec<&'a [u8]> = std::iter::once(name).chain(args).collect();
            for i in f(&all).unwrap_or_default() {
                key(all[i]);
            }
            return;
        }
        let mut positions = cmd.key_positions(n).peekable();
        for (i, a) in args.enumerate() {
            let Some(&p) = positions.peek() else { return };
            if i + 1 == p {
                key(a);
                positions.next();
            }
        }
    }
}
