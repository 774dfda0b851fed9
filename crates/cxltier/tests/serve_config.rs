//! `cxltier serve --config FILE`: a Redis configuration file as `redis-server FILE` reads it.
//! The file's parameters are in force before the first client (immutable ones too), its `dir`,
//! `logfile` and `pidfile` are honoured, a flag wins over the file, and a file that cannot be
//! honoured is refused with the file, the line and what to do.

mod common;
use common::serve;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_cxltier");

fn write_config(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("redis.conf");
    std::fs::write(&path, text).unwrap();
    path
}

/// The redis-server-like start: the file's settings answered by CONFIG GET, its databases
/// and password in force, the pid file there while it runs and gone after, and the log lines
/// that scripts written for redis-server wait for.
#[test]
fn a_redis_configuration_file_is_in_force_before_the_first_client() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let pid = dir.path().join("server.pid");
    let conf = write_config(
        dir.path(),
        &format!(
            "# a comment\nport 6390\nbind 127.0.0.1\ndatabases 4\nrequirepass \"s3cret pass\"\nnotify-keyspace-events KEA\ndbfilename kept.rdb\nmaxmemory-policy allkeys-lru\nsave 900 1\nsave 300 10\nuser alice on >alicepw ~a:* +get +set\nlogfile {}\npidfile {}\ndir {}\ndaemonize no\n",
            log.display(),
            pid.display(),
            dir.path().display()
        ),
    );
    let conf = conf.to_str().unwrap();
    // --bind (the test's own port) wins over the file's port; --requirepass is the file's.
    let s = common::try_serve(&["--config", conf, "--requirepass", "s3cret pass"])
        .unwrap_or_else(|e| panic!("{e}"));
    let mut c = s.client();
    assert_eq!(c.call_text(&["AUTH", "s3cret pass"]), "+OK\r\n");
    for (name, value) in [
        ("notify-keyspace-events", "AKE"),
        ("dbfilename", "kept.rdb"),
        ("maxmemory-policy", "allkeys-lru"),
        ("save", "900 1 300 10"),
        ("databases", "4"),
    ] {
        let got = c.call_text(&["CONFIG", "GET", name]);
        assert!(
            got.ends_with(&format!("${}\r\n{value}\r\n", value.len())),
            "{name}: {got}"
        );
    }
    // The file's ACL user, with its commands and keys.
    let mut alice = s.client();
    assert_eq!(alice.call_text(&["AUTH", "alice", "alicepw"]), "+OK\r\n");
    assert_eq!(alice.call_text(&["SET", "a:1", "x"]), "+OK\r\n");
    assert!(alice.call_text(&["GET", "b:1"]).starts_with("-NOPERM"));
    assert!(alice.call_text(&["DEL", "a:1"]).starts_with("-NOPERM"));
    drop(alice);
    assert_eq!(c.call_text(&["SELECT", "3"]), "+OK\r\n");
    assert!(c
        .call_text(&["SELECT", "4"])
        .starts_with("-ERR DB index is out of range"));
    let child_pid = s.child.id();
    assert_eq!(
        std::fs::read_to_string(&pid).unwrap().trim(),
        child_pid.to_string()
    );
    drop(c);
    // SHUTDOWN needs the password here; it closes the connection without a reply.
    {
        use std::io::{Read, Write};
        let mut raw = std::net::TcpStream::connect(&s.addr).unwrap();
        raw.write_all(b"*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\n*1\r\n$8\r\nSHUTDOWN\r\n")
            .unwrap();
        let mut rest = Vec::new();
        let _ = raw.read_to_end(&mut rest);
        assert_eq!(rest, b"+OK\r\n", "AUTH's reply, then the close");
    }
    let (status, _) = s.stop();
    assert!(status.success());
    assert!(!pid.exists(), "the pid file is removed at the end");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains(&format!(" PID: {child_pid}")), "{logged}");
    assert!(logged.contains("Ready to accept connections"), "{logged}");
    assert!(logged.contains("stopped; the store is closed"), "{logged}");
}

/// What cannot be honoured refuses the start (exit 2), naming the file's line and the fix;
/// a value a parameter does not take is refused as CONFIG SET refuses it.
#[test]
fn a_file_that_cannot_be_honoured_is_refused_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    for (text, says) in [
        (
            "port 0\nno-such-directive yes\n",
            "redis.conf:2: 'no-such-directive': Bad directive",
        ),
        (
            "daemonize yes\n",
            "redis.conf:1: daemonize yes: cxltier serve stays in the foreground",
        ),
        (
            "loadmodule /x.so\n",
            "redis.conf:1: loadmodule is not supported",
        ),
        (
            "port 0\nmaxmemory-policy most-fun\n",
            "redis.conf:2: maxmemory-policy \"most-fun\": argument(s) must be one of the following",
        ),
        (
            "port 0\nhz nope\n",
            "redis.conf:2: hz \"nope\": argument couldn't be parsed into an integer",
        ),
        (
            "dir /nonexistent/cxltier-dir\n",
            "entering the configuration file's dir /nonexistent/cxltier-dir",
        ),
    ] {
        let conf = write_config(dir.path(), text);
        let out = Command::new(BIN)
            .args([
                "serve",
                "--quarantine-file",
                "/nonexistent/q.jsonl",
                "--config",
            ])
            .arg(&conf)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{text:?}: {err}");
        assert_ne!(out.status.code(), Some(0), "{text:?}: {err}");
    }
    let out = Command::new(BIN)
        .args(["serve", "--config", "/nonexistent/redis.conf"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a file named that is not there is bad input"
    );
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("reading the configuration file /nonexistent/redis.conf"));
}

/// A server started with a flag keeps the flag's value whatever the file says.
#[test]
fn a_flag_wins_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_config(dir.path(), "databases 2\nmaxclients 7\n");
    let s = serve(&["--config", conf.to_str().unwrap(), "--databases", "5"]);
    let mut c = s.client();
    assert_eq!(c.call_text(&["SELECT", "4"]), "+OK\r\n");
    let got = c.call_text(&["CONFIG", "GET", "maxclients"]);
    assert!(got.ends_with("$1\r\n7\r\n"), "{got}");
    drop(c);
    s.stop();
}
