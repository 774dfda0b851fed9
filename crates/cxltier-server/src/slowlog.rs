//! The slow log (Redis 7.0's `slowlog.c`): the commands whose run took at least
//! `slowlog-log-slower-than` microseconds, newest first, at most `slowlog-max-len` of them, each
//! with its arguments trimmed as Redis trims them (32 arguments, 128 bytes each) and the
//! sensitive ones redacted; and the redaction rules of the commands that carry secrets (AUTH,
//! HELLO's AUTH, CONFIG SET of a password), which the command table names per command.
//!
//! A command's time is its run in dispatch: from the reading of the clock just before its
//! handler to the one just after. The wait for its values' NVMe reads, which the loop makes
//! before the command runs (Redis has no such wait), is not in it.

use std::collections::VecDeque;

/// The most arguments an entry keeps (the last then says how many more there were).
pub const MAX_ARGS: usize = 32;
/// The most bytes of one argument an entry keeps (then says how many more there were).
pub const MAX_ARG_BYTES: usize = 128;
/// What a redacted argument is shown as.
pub const REDACTED: &[u8] = b"(redacted)";

/// The argument positions a command's run hides from the slow log (and MONITOR), given its
/// arguments, name first: Redis's `redactClientCommandArgument` calls.
pub type RedactFn = fn(&[&[u8]]) -> Vec<usize>;

/// One logged command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: u64,
    /// Unix time, in seconds, of its start.
    pub time: u64,
    /// Microseconds its run took.
    pub duration_us: u64,
    pub args: Vec<Vec<u8>>,
    /// The client's address (`ip:port`) and name (empty without one).
    pub addr: String,
    pub name: Vec<u8>,
}

/// The log, newest entry first, and the id the next entry gets (ids are never reused, even
/// after SLOWLOG RESET, as in Redis).
#[derive(Debug, Default)]
pub struct SlowLog {
    entries: VecDeque<Entry>,
    next_id: u64,
    held: Held,
}

/// The last command the server ran, held until its time ends (the server reads the clock once
/// per command: a command's time ends at the next reading, see `ServerInfo::timed`): its
/// arguments as an entry would keep them, in one buffer reused from command to command, so
/// that holding a short command costs a copy of its few bytes and no allocation.
#[derive(Debug, Default)]
struct Held {
    on: bool,
    /// The kept arguments one after the other, and where each ends.
    bytes: Vec<u8>,
    ends: Vec<usize>,
    started_us: u64,
    client: u64,
    name: Vec<u8>,
}

/// The most bytes of arguments the held command's buffer keeps between commands (one with 32
/// arguments of 128 bytes and their suffixes fits).
const HELD_KEPT: usize = 8 << 10;

/// What the dispatcher knows of a command that ran, for [`SlowLog::push_if_needed`].
pub struct Run<'a> {
    pub args: &'a [&'a [u8]],
    /// The positions of `args` to show as `(redacted)`.
    pub redacted: &'a [usize],
    pub started_us: u64,
    pub duration_us: u64,
    pub addr: &'a str,
    pub name: &'a [u8],
}

impl SlowLog {
    /// Log `run` if it took at least `slower_than` µs (a negative threshold logs nothing), then
    /// drop the oldest entries beyond `max_len`.
    pub fn push_if_needed(&mut self, slower_than: i64, max_len: u64, run: &Run<'_>) {
        if slower_than < 0 {
            return;
        }
        if run.duration_us >= slower_than as u64 {
            let id = self.next_id;
            self.next_id += 1;
            self.entries.push_front(Entry {
                id,
                time: run.started_us / 1_000_000,
                duration_us: run.duration_us,
                args: entry_args(run.args, run.redacted),
                addr: run.addr.to_string(),
                name: run.name.to_vec(),
            });
        }
        self.trim(max_len);
    }

    /// Hold the command just run (its time is not known yet): `run`'s duration is ignored;
    /// `client` is its connection's id, for [`SlowLog::release`] to find its address.
    pub fn hold(&mut self, run: &Run<'_>, client: u64) {
        let h = &mut self.held;
        if h.bytes.capacity() > HELD_KEPT {
            h.bytes = Vec::new();
        }
        h.bytes.clear();
        h.ends.clear();
        for_each_entry_arg(run.args, run.redacted, |piece, end| {
            h.bytes.extend_from_slice(piece);
            if end {
                h.ends.push(h.bytes.len());
            }
        });
        h.name.clear();
        h.name.extend_from_slice(run.name);
        h.started_us = run.started_us;
        h.client = client;
        h.on = true;
    }

    /// Forget the held command (the command just run is not to be logged).
    pub fn forget(&mut self) {
        self.held.on = false;
    }

    /// The connection of the held command, if one is held.
    pub fn held_client(&self) -> Option<u64> {
        self.held.on.then_some(self.held.client)
    }

    /// The held command's time ended, `duration_us` after its start: log it if it took at least
    /// `slower_than` µs (see [`SlowLog::push_if_needed`]); `addr` is its client's address.
    pub fn release(&mut self, slower_than: i64, max_len: u64, duration_us: u64, addr: &str) {
        if !std::mem::take(&mut self.held.on) {
            return;
        }
        if slower_than >= 0 && duration_us >= slower_than as u64 {
            let h = &self.held;
            let mut args = Vec::with_capacity(h.ends.len());
            let mut from = 0;
            for &end in &h.ends {
                args.push(h.bytes[from..end].to_vec());
                from = end;
            }
            let id = self.next_id;
            self.next_id += 1;
            self.entries.push_front(Entry {
                id,
                time: h.started_us / 1_000_000,
                duration_us,
                args,
                addr: addr.to_string(),
                name: h.name.clone(),
            });
        }
        self.trim(max_len);
    }

    /// Drop the oldest entries beyond `max_len`.
    pub fn trim(&mut self, max_len: u64) {
        let keep = usize::try_from(max_len).unwrap_or(usize::MAX);
        self.entries.truncate(keep);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, newest first.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    /// SLOWLOG RESET: every entry goes; ids go on from where they were.
    pub fn reset(&mut self) {
        self.entries.clear();
    }
}

/// The arguments an entry keeps, as Redis's `slowlogCreateEntry` makes them: at most
/// [`MAX_ARGS`], the last of them then `... (N more arguments)`; each longer than
/// [`MAX_ARG_BYTES`] cut there and followed by `... (N more bytes)`; those in `redacted` shown
/// as `(redacted)` (before trimming, as Redis redacts the command's vector).
pub fn entry_args(args: &[&[u8]], redacted: &[usize]) -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    let mut arg = Vec::new();
    for_each_entry_arg(args, redacted, |piece, end| {
        arg.extend_from_slice(piece);
        if end {
            all.push(std::mem::take(&mut arg));
        }
    });
    all
}

/// [`entry_args`] in pieces: `f(piece, last)` for each piece of each kept argument, `last` on
/// an argument's last piece.
fn for_each_entry_arg(args: &[&[u8]], redacted: &[usize], mut f: impl FnMut(&[u8], bool)) {
    let kept = args.len().min(MAX_ARGS);
    for j in 0..kept {
        if kept != args.len() && j == kept - 1 {
            let more = format!("... ({} more arguments)", args.len() - kept + 1);
            f(more.as_bytes(), true);
            continue;
        }
        let a: &[u8] = if redacted.contains(&j) {
            REDACTED
        } else {
            args[j]
        };
        if a.len() > MAX_ARG_BYTES {
            f(&a[..MAX_ARG_BYTES], false);
            let more = format!("... ({} more bytes)", a.len() - MAX_ARG_BYTES);
            f(more.as_bytes(), true);
        } else {
            f(a, true);
        }
    }
}

/// AUTH [username] password: the password (and the username), as Redis 7.0's `authCommand`
/// (the form with more arguments is a syntax error and hides nothing).
pub fn redact_auth(args: &[&[u8]]) -> Vec<usize> {
    match args.len() {
        2 => vec![1],
        3 => vec![1, 2],
        _ => Vec::new(),
    }
}

/// ACL SETUSER name rules...: the name and every rule (they hold passwords), as Redis's
/// `aclCommand` hides them.
pub fn redact_acl(args: &[&[u8]]) -> Vec<usize> {
    if args.len() >= 3 && args[1].eq_ignore_ascii_case(b"setuser") {
        (2..args.len()).collect()
    } else {
        Vec::new()
    }
}

/// HELLO [protover [AUTH username password] [SETNAME name]]: AUTH's username and password, as
/// Redis 7.0's `helloCommand` (which hides nothing when the protocol version is refused).
pub fn redact_hello(args: &[&[u8]]) -> Vec<usize> {
    let Some(ver) = args.get(1) else {
        return Vec::new();
    };
    let valid = std::str::from_utf8(ver)
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .is_some_and(|v| (2..=3).contains(&v));
    if !valid {
        return Vec::new();
    }
    let mut hidden = Vec::new();
    let mut j = 2;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if args[j].eq_ignore_ascii_case(b"AUTH") && more >= 2 {
            hidden.extend([j + 1, j + 2]);
            j += 3;
        } else if args[j].eq_ignore_ascii_case(b"SETNAME") && more >= 1 {
            j += 2;
        } else {
            break;
        }
    }
    hidden
}

/// The parameters whose values CONFIG SET hides (Redis 7.0's `SENSITIVE_CONFIG`).
const SENSITIVE_CONFIG: &[&[u8]] = &[b"requirepass", b"masterauth", b"masteruser"];

/// CONFIG SET name value ...: the values of the sensitive parameters (every pair is looked at,
/// also after one Redis refuses, as Redis does); other CONFIG subcommands hide nothing.
pub fn redact_config(args: &[&[u8]]) -> Vec<usize> {
    let is_set = args.get(1).is_some_and(|s| s.eq_ignore_ascii_case(b"SET"));
    if !is_set || args.len() < 4 || args.len() % 2 != 0 {
        return Vec::new();
    }
    (2..args.len())
        .step_by(2)
        .filter(|&i| {
            SENSITIVE_CONFIG
                .iter()
                .any(|s| args[i].eq_ignore_ascii_case(s))
        })
        .map(|i| i + 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<'a>(args: &'a [&'a [u8]], duration_us: u64) -> Run<'a> {
        Run {
            args,
            redacted: &[],
            started_us: 1_700_000_000_123_456,
            duration_us,
            addr: "127.0.0.1:5000",
            name: b"",
        }
    }

    #[test]
    fn only_runs_at_or_over_the_threshold_are_logged_and_the_length_is_capped() {
        let mut log = SlowLog::default();
        let args: &[&[u8]] = &[b"PING"];
        log.push_if_needed(100, 10, &run(args, 99));
        assert!(log.is_empty());
        log.push_if_needed(100, 10, &run(args, 100));
        assert_eq!(log.len(), 1);
        log.push_if_needed(-1, 10, &run(args, 1_000_000));
        assert_eq!(log.len(), 1, "a negative threshold logs nothing");
        for _ in 0..20 {
            log.push_if_needed(0, 3, &run(args, 0));
        }
        assert_eq!(log.len(), 3);
        let ids: Vec<u64> = log.entries().map(|e| e.id).collect();
        assert_eq!(ids, [20, 19, 18], "newest first, ids counting the dropped");
        assert_eq!(log.entries().next().unwrap().time, 1_700_000_000);
        log.reset();
        assert!(log.is_empty());
        log.push_if_needed(0, 3, &run(args, 0));
        assert_eq!(log.entries().next().unwrap().id, 21, "ids survive RESET");
    }

    #[test]
    fn a_held_command_is_logged_when_its_time_ends_over_the_threshold() {
        let mut log = SlowLog::default();
        let long = vec![b'x'; 200];
        let args: &[&[u8]] = &[b"AUTH", &long];
        let mut r = run(args, 0);
        r.redacted = &[1];
        r.name = b"me";
        log.hold(&r, 7);
        assert_eq!(log.held_client(), Some(7));
        log.release(10, 5, 9, "1.2.3.4:5");
        assert!(log.is_empty() && log.held_client().is_none());
        log.release(0, 5, 9, "x");
        assert!(log.is_empty(), "released once");
        let args: &[&[u8]] = &[b"SET", b"k", &long];
        log.hold(&run(args, 0), 7);
        log.release(10, 5, 10, "1.2.3.4:5");
        let e = log.entries().next().unwrap();
        assert_eq!(e.args, entry_args(args, &[]));
        assert_eq!(e.args[2].len(), 128 + "... (72 more bytes)".len());
        assert_eq!(
            (e.duration_us, e.addr.as_str(), e.name.as_slice()),
            (10, "1.2.3.4:5", &b""[..])
        );
        log.hold(&run(args, 0), 7);
        log.forget();
        log.release(0, 5, 10, "");
        assert_eq!(log.len(), 1);
    }

    #[test]
    fn arguments_are_trimmed_and_redacted_as_redis_does() {
        let many: Vec<Vec<u8>> = (0..34).map(|i| i.to_string().into_bytes()).collect();
        let many: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
        let kept = entry_args(&many, &[]);
        assert_eq!(kept.len(), 32);
        assert_eq!(kept[30], b"30");
        assert_eq!(kept[31], b"... (3 more arguments)");
        let long = vec![b'A'; 129];
        let kept = entry_args(&[b"SET", b"k", &long], &[]);
        let mut want = vec![b'A'; 128];
        want.extend_from_slice(b"... (1 more bytes)");
        assert_eq!(kept[2], want);
        assert_eq!(entry_args(&[&b"x"[..]; 128], &[]).len(), 32);
        let exact = vec![b'B'; 128];
        assert_eq!(entry_args(&[&exact], &[])[0], exact);
        assert_eq!(
            entry_args(&[b"AUTH", b"secret"], &redact_auth(&[b"AUTH", b"secret"])),
            [b"AUTH".to_vec(), REDACTED.to_vec()]
        );
    }

    #[test]
    fn the_redaction_rules_follow_redis_7_0() {
        assert_eq!(redact_auth(&[b"AUTH", b"p"]), [1]);
        assert_eq!(redact_auth(&[b"AUTH", b"u", b"p"]), [1, 2]);
        assert!(redact_auth(&[b"AUTH", b"u", b"p", b"x"]).is_empty());
        assert_eq!(
            redact_hello(&[b"HELLO", b"3", b"AUTH", b"u", b"p", b"SETNAME", b"n"]),
            [3, 4]
        );
        assert_eq!(
            redact_hello(&[b"HELLO", b"2", b"SETNAME", b"n", b"auth", b"u", b"p"]),
            [5, 6]
        );
        assert!(redact_hello(&[b"HELLO", b"4", b"AUTH", b"u", b"p"]).is_empty());
        assert!(redact_hello(&[b"HELLO", b"3", b"AUTH", b"u"]).is_empty());
        assert!(redact_hello(&[b"HELLO"]).is_empty());
        assert_eq!(
            redact_config(&[b"CONFIG", b"set", b"maxclients", b"5", b"REQUIREPASS", b"p"]),
            [5]
        );
        assert_eq!(redact_config(&[b"CONFIG", b"SET", b"masterauth", b""]), [3]);
        assert!(redact_config(&[b"CONFIG", b"GET", b"requirepass"]).is_empty());
        assert!(redact_config(&[b"CONFIG", b"SET", b"requirepass"]).is_empty());
    }

    mod command {
        use crate::testdb::*;

        /// The arguments of each entry SLOWLOG GET answers, newest first.
        fn logged(db: &mut Db) -> Vec<Vec<String>> {
            let reply = db.run(&[b"SLOWLOG", b"GET", b"-1"]);
            let text = String::from_utf8(reply).unwrap();
            // Each entry: *6, :id, :time, :duration, *argc, the arguments, $addr, $name.
            let mut lines = text.split("\r\n").skip(1);
            let mut all = Vec::new();
            while let Some(head) = lines.next() {
                if head.is_empty() {
                    break;
                }
                assert_eq!(head, "*6");
                for _ in 0..3 {
                    assert!(lines.next().unwrap().starts_with(':'));
                }
                let argc: usize = lines.next().unwrap()[1..].parse().unwrap();
                let mut args = Vec::new();
                for _ in 0..argc {
                    lines.next();
                    args.push(lines.next().unwrap().to_string());
                }
                for _ in 0..2 {
                    lines.next();
                    lines.next();
                }
                all.push(args);
            }
            all
        }

        fn words(list: &[&str]) -> Vec<String> {
            list.iter().map(|s| s.to_string()).collect()
        }

        #[test]
        fn slowlog_logs_commands_as_sent_newest_first_and_caps_its_length() {
            let mut db = Db::new();
            assert_eq!(db.cmd("SLOWLOG LEN"), ":0\r\n");
            assert_eq!(db.cmd("CONFIG SET slowlog-log-slower-than 0"), "+OK\r\n");
            db.cmd("SET k v");
            db.cmd("get k");
            let all = logged(&mut db);
            assert_eq!(
                all[0],
                words(&["get", "k"]),
                "the name as sent, the key without its database"
            );
            assert_eq!(all[1], words(&["SET", "k", "v"]));
            assert_eq!(
                all[2],
                words(&["CONFIG", "SET", "slowlog-log-slower-than", "0"])
            );
            assert_eq!(db.cmd("CONFIG SET slowlog-max-len 3"), "+OK\r\n");
            for _ in 0..10 {
                db.cmd("PING");
            }
            let e = db.cmd("SLOWLOG GET 1");
            assert!(
                e.starts_with("*1\r\n*6\r\n:14\r\n"),
                "ids count every entry: {e}"
            );
            assert!(
                e.ends_with("*1\r\n$4\r\nPING\r\n$0\r\n\r\n$0\r\n\r\n"),
                "{e}"
            );
            assert_eq!(db.cmd("SLOWLOG LEN"), ":3\r\n");
            assert!(db.cmd("SLOWLOG GET 0") == "*0\r\n");
            assert!(db.cmd("SLOWLOG GET 1").starts_with("*1\r\n*6\r\n"));
            assert!(db.cmd("SLOWLOG GET").starts_with("*3\r\n"));
            db.cmd("CLIENT SETNAME foobar");
            let e = db.cmd("SLOWLOG GET 1");
            assert!(e.ends_with("$0\r\n\r\n$6\r\nfoobar\r\n"), "{e}");
            assert_eq!(db.cmd("SLOWLOG RESET"), "+OK\r\n");
            assert_eq!(
                db.cmd("SLOWLOG LEN"),
                ":1\r\n",
                "SLOWLOG RESET is logged itself"
            );
            // Off: nothing more is logged.
            assert_eq!(db.cmd("CONFIG SET slowlog-log-slower-than -1"), "+OK\r\n");
            db.cmd("PING");
            assert_eq!(db.cmd("SLOWLOG LEN"), ":2\r\n");
            // The default threshold (10 ms) logs nothing that quick.
            let mut db = Db::new();
            db.cmd("PING");
            assert_eq!(db.cmd("SLOWLOG LEN"), ":0\r\n");
        }

        #[test]
        fn exec_is_not_logged_but_the_commands_it_runs_are() {
            let mut db = Db::new();
            db.cmd("CONFIG SET slowlog-log-slower-than 0");
            db.cmd("SLOWLOG RESET");
            db.cmd("MULTI");
            db.cmd("INCR n");
            db.cmd("SET a b");
            db.cmd("EXEC");
            let all = logged(&mut db);
            assert_eq!(all[0], words(&["SET", "a", "b"]));
            assert_eq!(all[1], words(&["INCR", "n"]));
            assert_eq!(all[2], words(&["MULTI"]));
            assert_eq!(all[3], words(&["SLOWLOG", "RESET"]));
            assert_eq!(all.len(), 4);
        }

        #[test]
        fn secrets_are_redacted_and_long_commands_trimmed() {
            let mut db = Db::new();
            db.cmd("CONFIG SET slowlog-log-slower-than 0");
            db.cmd("SLOWLOG RESET");
            db.cmd("CONFIG SET requirepass sesame");
            db.cmd("AUTH sesame");
            db.cmd("AUTH default sesame");
            db.cmd("HELLO 2 AUTH default sesame SETNAME me");
            let all = logged(&mut db);
            assert_eq!(
                all[0],
                words(&[
                    "HELLO",
                    "2",
                    "AUTH",
                    "(redacted)",
                    "(redacted)",
                    "SETNAME",
                    "me"
                ])
            );
            assert_eq!(all[1], words(&["AUTH", "(redacted)", "(redacted)"]));
            assert_eq!(all[2], words(&["AUTH", "(redacted)"]));
            assert_eq!(
                all[3],
                words(&["CONFIG", "SET", "requirepass", "(redacted)"])
            );
            db.cmd("CONFIG SET requirepass");
            db.cmd("SLOWLOG RESET");
            let many: Vec<String> = (3..=33).map(|i| i.to_string()).collect();
            db.cmd(&format!("SADD set {}", many.join(" ")));
            let all = logged(&mut db);
            assert_eq!(all[0].len(), 32);
            assert_eq!(all[0][30], "31");
            assert_eq!(all[0][31], "... (2 more arguments)");
            let long = "A".repeat(129);
            db.cmd(&format!("SADD set foo {long}"));
            let all = logged(&mut db);
            assert_eq!(all[0][3], format!("{}... (1 more bytes)", "A".repeat(128)));
        }

        #[test]
        fn slowlog_answers_errors_and_help_as_redis_7_0() {
            let mut db = Db::new();
            for bad in ["-2", "-222", "x"] {
                assert_eq!(
                    db.cmd(&format!("SLOWLOG GET {bad}")),
                    "-ERR count should be greater than or equal to -1\r\n"
                );
            }
            assert_eq!(
                db.cmd("SLOWLOG nope"),
                "-ERR unknown subcommand 'nope'. Try SLOWLOG HELP.\r\n"
            );
            assert_eq!(
                db.cmd("SLOWLOG LEN x"),
                "-ERR wrong number of arguments for 'slowlog|len' command\r\n"
            );
            assert_eq!(
                db.cmd("SLOWLOG get 1 2"),
                "-ERR unknown subcommand or wrong number of arguments for 'get'. Try SLOWLOG HELP.\r\n"
            );
            assert_eq!(
                db.cmd("SLOWLOG"),
                "-ERR wrong number of arguments for 'slowlog' command\r\n"
            );
            let help = db.cmd("SLOWLOG HELP");
            assert!(
                help.starts_with(
                    "*12\r\n+SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
                ),
                "{help}"
            );
            assert!(help.ends_with("+HELP\r\n+    Print this help.\r\n"));
            assert_eq!(
                db.cmd("CONFIG SET slowlog-log-slower-than -2"),
                "-ERR CONFIG SET failed (possibly related to argument 'slowlog-log-slower-than') - argument must be between -1 and 9223372036854775807 inclusive\r\n"
            );
            assert_eq!(
                db.cmd("CONFIG SET slowlog-max-len -1"),
                "-ERR CONFIG SET failed (possibly related to argument 'slowlog-max-len') - argument must be between 0 and 9223372036854775807 inclusive\r\n"
            );
            assert!(db
                .cmd("CONFIG SET slowlog-max-len x")
                .contains("couldn't be parsed"));
            assert!(db
                .cmd("CONFIG GET slowlog-*")
                .contains("slowlog-max-len\r\n$3\r\n128"));
        }
    }
}
