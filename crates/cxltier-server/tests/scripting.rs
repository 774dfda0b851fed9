//! Lua scripting in the server over a socket, as clients use it: a lock script loaded with
//! SCRIPT LOAD and run with EVALSHA (redis-py's Lock), replies compared with redis-server 7.0's;
//! a busy script stopped by SCRIPT KILL from a connection made while it runs.
//!
//! redis-server is installed by scripts/peers (scripts/test runs it first); without it the test
//! fails with that instruction.

mod util;
use std::time::{Duration, Instant};
use util::{kill_script, redis, run_until_busy, wait_busy, Conn, Server, GUARD};

/// redis-py's Lock release script.
const UNLOCK: &str = "local token = redis.call('get', KEYS[1]) if not token or token ~= ARGV[1] then return 0 end redis.call('del', KEYS[1]) return 1";
/// redis-py's Lock extend script.
const EXTEND: &str = "local token = redis.call('get', KEYS[1]) if not token or token ~= ARGV[1] then return 0 end local expiration = redis.call('pttl', KEYS[1]) if not expiration then expiration = 0 end if expiration < 0 then return 0 end local newttl = ARGV[2] if ARGV[3] == '0' then newttl = ARGV[2] + expiration end redis.call('pexpire', KEYS[1], newttl) return 1";

#[test]
fn lock_scripts_by_evalsha_answer_as_redis_server_does() {
    let (ours, theirs) = (Server::start(), redis());
    let mut a = Conn::connect(&ours.addr);
    let mut b = Conn::connect(&theirs.addr);
    let unlock_sha = a.call_text(&["SCRIPT", "LOAD", UNLOCK]);
    assert_eq!(unlock_sha, b.call_text(&["SCRIPT", "LOAD", UNLOCK]));
    let extend_sha = a.call_text(&["SCRIPT", "LOAD", EXTEND]);
    assert_eq!(extend_sha, b.call_text(&["SCRIPT", "LOAD", EXTEND]));
    let sha = |r: &str| r.lines().nth(1).unwrap().to_string();
    let (unlock, extend) = (sha(&unlock_sha), sha(&extend_sha));
    let steps: Vec<Vec<&str>> = vec![
        vec!["SET", "lock:a", "tok1", "NX", "PX", "10000"],
        vec!["SET", "lock:a", "tok2", "NX", "PX", "10000"],
        vec!["EVALSHA", &extend, "1", "lock:a", "tok2", "5000", "1"],
        vec!["EVALSHA", &extend, "1", "lock:a", "tok1", "50000", "1"],
        vec!["EVALSHA", &unlock, "1", "lock:a", "tok2"],
        vec!["EXISTS", "lock:a"],
        vec!["EVALSHA", &unlock, "1", "lock:a", "tok1"],
        vec!["EXISTS", "lock:a"],
        vec!["EVALSHA", &unlock, "1", "lock:a", "tok1"],
        vec!["SCRIPT", "EXISTS", &unlock, &extend, "0000"],
        vec!["EVALSHA", "0000000000000000000000000000000000000000", "0"],
        vec![
            "EVAL",
            "return {1, 2.9, 'x', false, {ok='S'}, {err='E bad'}, nil, 9}",
            "0",
        ],
        vec![
            "EVAL",
            "return redis.call('hset', KEYS[1], 'f', ARGV[1])",
            "1",
            "h",
            "v",
        ],
        vec!["EVAL", "return redis.call('hgetall', KEYS[1])", "1", "h"],
        vec![
            "EVAL",
            "return cjson.encode(cjson.decode(ARGV[1]))",
            "0",
            "[1,\"a\",true]",
        ],
        vec!["EVAL", "return bit.bxor(bit.lshift(1, 4), 3)", "0"],
        vec!["EVAL", "local x = redis.call('nosuch') return x", "0"],
        vec!["EVAL", "x = 1", "0"],
        vec!["EVAL_RO", "local r = redis.call('del', 'h') return r", "0"],
        vec!["EVAL", "return 1", "3", "a"],
        vec!["EVAL", "return {math.random(100), math.random(5, 10)}", "0"],
        vec!["HELLO", "3"],
        vec!["EVAL", "return {double=1.5}", "0"],
        vec!["EVAL", "return true", "0"],
        vec!["EVAL", "redis.setresp(3) return true", "0"],
        vec![
            "EVAL",
            "redis.setresp(3) return redis.call('hgetall', 'h')",
            "0",
        ],
    ];
    let mut diffs = Vec::new();
    for s in &steps {
        let (x, y) = (a.call_text(s), b.call_text(s));
        if s[0] == "HELLO" {
            continue;
        }
        if x != y {
            diffs.push(format!("{s:?}\n  cxltier: {x:?}\n  redis:   {y:?}"));
        }
    }
    assert!(
        diffs.is_empty(),
        "{} of {} replies differ from redis-server's:\n{}",
        diffs.len(),
        steps.len(),
        diffs.join("\n")
    );
}

#[test]
fn a_busy_script_accepts_new_connections_which_can_kill_it() {
    let ours = Server::start();
    let mut admin = Conn::connect(&ours.addr);
    admin.call_text(&["SET", "k", "1"]);
    let mut runner = run_until_busy(&ours.addr, &mut admin, "while true do end");
    // Connections made while it is busy are accepted and answered: BUSY, and SCRIPT KILL.
    for _ in 0..20 {
        let mut late = Conn::connect(&ours.addr);
        assert!(late.call_text(&["GET", "k"]).starts_with("-BUSY"));
        assert!(late.call_text(&["SHUTDOWN"]).starts_with("-BUSY"));
    }
    let mut late = Conn::connect(&ours.addr);
    assert!(late
        .call_text(&["NOSUCHCOMMAND"])
        .starts_with("-ERR unknown command"));
    kill_script(&mut late, &mut runner);
    // The connections accepted in busy mode are ordinary ones afterwards.
    assert_eq!(late.call_text(&["GET", "k"]), "$1\r\n1\r\n");
    let list = late.call_text(&["CLIENT", "LIST"]);
    assert!(
        list.lines().filter(|l| l.contains("id=")).count() >= 3,
        "{list}"
    );
    assert_eq!(admin.call_text(&["INCR", "k"]), ":2\r\n");
}

#[test]
fn a_busy_script_lets_a_new_client_authenticate_then_kill_it() {
    let ours = Server::builder().requirepass("s3cret").start();
    let mut admin = Conn::connect(&ours.addr);
    assert_eq!(admin.call_text(&["AUTH", "s3cret"]), "+OK\r\n");
    assert_eq!(
        admin.call_text(&["CONFIG", "SET", "busy-reply-threshold", "50"]),
        "+OK\r\n"
    );
    let mut runner = Conn::connect(&ours.addr);
    assert_eq!(runner.call_text(&["AUTH", "s3cret"]), "+OK\r\n");
    runner.send(&["EVAL", "while true do end", "0"]);
    let mut late = Conn::connect(&ours.addr);
    // Before AUTH: NOAUTH, as always; a wrong password is refused.
    late.replies_starting(&[
        ("SCRIPT KILL", "-NOAUTH"),
        ("AUTH wrong", "-WRONGPASS"),
        ("HELLO 3 AUTH default s3cret", "%7\r\n"),
    ]);
    // GET answers (null, in RESP3) until the script has begun, then BUSY.
    let t = Instant::now();
    loop {
        let reply = late.call_text(&["GET", "k"]);
        if reply.starts_with("-BUSY") {
            break;
        }
        assert_eq!(reply, "_\r\n");
        assert!(t.elapsed() < GUARD, "the script never made the server busy");
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_script(&mut late, &mut runner);
    assert_eq!(late.call_text(&["PING"]), "+PONG\r\n");
}

#[test]
fn a_script_in_a_transaction_is_busy_and_killable_too() {
    let ours = Server::start();
    let mut admin = Conn::connect(&ours.addr);
    assert_eq!(
        admin.call_text(&["CONFIG", "SET", "busy-reply-threshold", "50"]),
        "+OK\r\n"
    );
    let mut runner = Conn::connect(&ours.addr);
    assert_eq!(runner.call_text(&["MULTI"]), "+OK\r\n");
    assert_eq!(
        runner.call_text(&["EVAL", "while true do end", "0"]),
        "+QUEUED\r\n"
    );
    runner.send(&["EXEC"]);
    wait_busy(&ours.addr);
    let mut late = Conn::connect(&ours.addr);
    assert!(late.call_text(&["PING"]).starts_with("-BUSY"));
    assert_eq!(late.call_text(&["SCRIPT", "KILL"]), "+OK\r\n");
    let mut out = Vec::new();
    runner.read_raw(&mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.starts_with("*1\r\n-ERR Script killed"), "{out}");
}
