//! MONITOR: the connections that watch every command the server runs, and the lines a turn of
//! the loop leaves for them, in Redis 7.0's format (`+1339518083.107412 [0 127.0.0.1:60866]
//! "keys" "*"`, each argument quoted as Redis's `sdscatrepr` does); the loop appends them to
//! each monitor's output, under its output buffer limit.

/// The monitoring connections and the lines not yet handed to them.
#[derive(Debug, Default)]
pub struct Monitors {
    ids: Vec<u64>,
    pending: Vec<u8>,
}

/// Where a command came from, as its line names it.
pub enum Source<'a> {
    /// A client's `ip:port`.
    Client(&'a str),
    /// A script's `redis.call`.
    Lua,
}

impl Monitors {
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn add(&mut self, id: u64) {
        if !self.ids.contains(&id) {
            self.ids.push(id);
        }
    }

    /// The connection `id` monitors no more (RESET, or it closed); the lines go when no one
    /// is left to read them.
    pub fn remove(&mut self, id: u64) {
        self.ids.retain(|&m| m != id);
        if self.ids.is_empty() {
            self.pending = Vec::new();
        }
    }

    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    /// Add the line of a command run at `time_us` in logical database `db`; the arguments in
    /// `redacted` are shown as `(redacted)` (the slow log's rule).
    pub fn feed(
        &mut self,
        time_us: u64,
        db: usize,
        source: Source<'_>,
        args: &[&[u8]],
        redacted: &[usize],
    ) {
        if self.ids.is_empty() {
            return;
        }
        let out = &mut self.pending;
        let head = match source {
            Source::Client(addr) => format!(
                "+{}.{:06} [{db} {addr}]",
                time_us / 1_000_000,
                time_us % 1_000_000
            ),
            Source::Lua => format!(
                "+{}.{:06} [{db} lua]",
                time_us / 1_000_000,
                time_us % 1_000_000
            ),
        };
        out.extend_from_slice(head.as_bytes());
        for (j, a) in args.iter().enumerate() {
            out.push(b' ');
            if redacted.contains(&j) {
                repr(out, crate::slowlog::REDACTED);
            } else {
                repr(out, a);
            }
        }
        out.extend_from_slice(b"\r\n");
    }

    /// The lines left since the last call.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}

/// `b` quoted as Redis's `sdscatrepr`: `\\`, `\"`, `\n`, `\r`, `\t`, `\a`, `\b` escaped,
/// other unprintable bytes as `\xhh`.
pub fn repr(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'"');
    for &c in b {
        match c {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            c if c.is_ascii_graphic() || c == b' ' => out.push(c),
            c => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_redis_s_format_with_arguments_quoted_as_sdscatrepr() {
        let mut m = Monitors::default();
        m.feed(1, 0, Source::Lua, &[b"GET"], &[]);
        assert!(m.take().is_empty(), "no one monitors: nothing kept");
        m.add(3);
        m.add(3);
        assert_eq!(m.ids(), [3]);
        m.feed(
            1_339_518_083_107_412,
            0,
            Source::Client("127.0.0.1:60866"),
            &[b"keys", b"*"],
            &[],
        );
        m.feed(
            1_000_000_000_000_005,
            2,
            Source::Lua,
            &[b"set", b"a\"b\\c\n\r\t\x07\x08\x00\xff ok", b"pw"],
            &[2],
        );
        let text = String::from_utf8(m.take()).unwrap();
        assert_eq!(
            text,
            "+1339518083.107412 [0 127.0.0.1:60866] \"keys\" \"*\"\r\n\
             +1000000000.000005 [2 lua] \"set\" \"a\\\"b\\\\c\\n\\r\\t\\a\\b\\x00\\xff ok\" \"(redacted)\"\r\n"
        );
        m.feed(1, 0, Source::Lua, &[b"GET"], &[]);
        m.remove(3);
        assert!(m.is_empty() && m.take().is_empty());
    }
    mod command {
        use crate::context::Session;
        use crate::testdb::*;

        /// The lines a turn would hand the monitors, without their time: `[db source] args`.
        fn lines(db: &mut Db) -> Vec<String> {
            let text = String::from_utf8(db.info.monitors.take()).unwrap();
            text.split_terminator("\r\n")
                .map(|l| {
                    assert!(l.starts_with('+'), "{l}");
                    l.split_once(' ').unwrap().1.to_string()
                })
                .collect()
        }

        #[test]
        fn monitor_sees_other_clients_commands_but_not_admin_ones() {
            let mut db = Db::new();
            assert_eq!(db.cmd("MONITOR"), "+OK\r\n");
            assert_eq!(db.cmd("MONITOR"), "", "a second MONITOR answers nothing");
            let mut other = Session::new(1, true);
            run_as(&mut db, &mut other, "SET k v");
            run_as(&mut db, &mut other, "CONFIG SET maxclients 100");
            run_as(&mut db, &mut other, "AUTH secret");
            run_as(&mut db, &mut other, "SELECT 2");
            run_as(&mut db, &mut other, "GET k");
            run_as(&mut db, &mut other, "MULTI");
            run_as(&mut db, &mut other, "INCR n");
            run_as(&mut db, &mut other, "EXEC");
            eval(
                &mut db,
                &["EVAL", "return redis.call('GET', KEYS[1])", "1", "x"],
            );
            assert_eq!(
                lines(&mut db),
                [
                    r#"[0 ] "SET" "k" "v""#,
                    r#"[0 ] "AUTH" "(redacted)""#,
                    // Shown after it ran, in the database it selected (Redis 7.0's call()).
                    r#"[2 ] "SELECT" "2""#,
                    r#"[2 ] "GET" "k""#,
                    r#"[2 ] "MULTI""#,
                    r#"[2 ] "INCR" "n""#,
                    r#"[2 ] "EXEC""#,
                    r#"[0 ] "EVAL" "return redis.call('GET', KEYS[1])" "1" "x""#,
                    r#"[0 lua] "GET" "x""#,
                ]
            );
            // A transaction that failed to queue is shown as its MULTI and its EXEC.
            run_as(&mut db, &mut other, "MULTI");
            run_as(&mut db, &mut other, "syntax error");
            assert!(run_as(&mut db, &mut other, "EXEC").starts_with("-EXECABORT"));
            assert_eq!(lines(&mut db), [r#"[2 ] "MULTI""#, r#"[2 ] "EXEC""#]);
            db.cmd("MULTI");
            db.cmd("MONITOR");
            assert_eq!(
                db.cmd("EXEC"),
                "*1\r\n-ERR MONITOR isn't allowed for DENY BLOCKING client\r\n"
            );
            db.info.monitors.take();
            assert_eq!(db.cmd("RESET"), "+RESET\r\n");
            assert!(db.info.monitors.is_empty());
            db.cmd("PING");
            assert!(db.info.monitors.take().is_empty());
        }
    }
}
