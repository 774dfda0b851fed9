//! Lists, sets and sorted sets of the server over a real socket: raw RESP2/RESP3 replies
//! checked byte for byte, WRONGTYPE across types, and redis-benchmark's collection tests.

mod util;
use std::process::Command;
use util::{wait_blocked, Server};

const WT: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

#[test]
fn lists_sets_and_sorted_sets_over_the_wire() {
    let s = Server::start();
    let mut c = s.client();
    // Lists.
    c.replies(&[
        ("RPUSH l a b c", ":3\r\n"),
        ("LPUSH l z", ":4\r\n"),
        (
            "LRANGE l 0 -1",
            "*4\r\n$1\r\nz\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n",
        ),
        ("LPOS l b", ":2\r\n"),
        ("LMOVE l m RIGHT LEFT", "$1\r\nc\r\n"),
        ("RPOP l 2", "*2\r\n$1\r\nb\r\n$1\r\na\r\n"),
        // Sets.
        ("SADD s x y z", ":3\r\n"),
        ("SINTERCARD 2 s s", ":3\r\n"),
        ("SMEMBERS s", "*3\r\n$1\r\nx\r\n$1\r\ny\r\n$1\r\nz\r\n"),
        // Sorted sets.
        ("ZADD q 1 a 2.5 b", ":2\r\n"),
        ("ZSCORE q b", "$3\r\n2.5\r\n"),
        (
            "ZRANGE q +inf -inf BYSCORE REV WITHSCORES",
            "*4\r\n$1\r\nb\r\n$3\r\n2.5\r\n$1\r\na\r\n$1\r\n1\r\n",
        ),
        ("ZCOUNT q x 1", "-ERR min or max is not a float\r\n"),
    ]);
    // TYPE names each kind (it answered "string" for every collection).
    for (key, kind) in [("l", "list"), ("s", "set"), ("q", "zset"), ("nope", "none")] {
        assert_eq!(
            c.cmd(&format!("TYPE {key}")),
            format!("+{kind}\r\n"),
            "{key}"
        );
    }
    // Types are kept apart.
    for cmd in ["LPUSH s a", "SADD q a", "ZADD l 1 a", "LLEN q", "ZCARD s"] {
        assert_eq!(c.cmd(cmd), WT, "{cmd}");
    }
    // RESP3 shapes: a set, a double, score pairs.
    c.cmd("HELLO 3");
    assert!(c.cmd("SMEMBERS s").starts_with("~3\r\n"));
    c.replies(&[
        ("ZSCORE q b", ",2.5\r\n"),
        ("ZRANGE q 0 0 WITHSCORES", "*1\r\n*2\r\n$1\r\na\r\n,1\r\n"),
        ("LPOP nope", "_\r\n"),
    ]);
}

#[test]
fn redis_benchmark_collection_tests_complete() {
    util::need("redis-benchmark");
    let s = Server::start();
    let port = s.addr.rsplit(':').next().unwrap().to_string();
    let out = Command::new("redis-benchmark")
        .args([
            "-p",
            &port,
            "-t",
            "lpush,rpush,lpop,rpop,sadd,spop,zadd,zpopmin,lrange",
            "-n",
            "2000",
            "-q",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}{err}");
    assert!(!text.contains("ERR") && !err.contains("ERR"), "{text}{err}");
    for t in [
        "LPUSH",
        "RPUSH",
        "LPOP",
        "RPOP",
        "SADD",
        "SPOP",
        "ZADD",
        "ZPOPMIN",
        "LRANGE_100",
    ] {
        assert!(text.contains(t), "{t} missing: {text}");
    }
    // The server is still sound after it.
    let mut c = s.client();
    assert_eq!(c.cmd("PING"), "+PONG\r\n");
    assert!(c.cmd("LLEN mylist").starts_with(':'));
}

#[test]
fn blocking_pops_wait_for_a_push_in_order_without_holding_up_others() {
    let server = Server::start();
    let (mut a, mut b, mut c) = (server.client(), server.client(), server.client());
    // A blocked client holds nobody else up; its pipelined commands wait behind it.
    a.send_line("BLPOP q 0");
    a.send_line("PING");
    wait_blocked(&mut b, 1);
    let list = b.cmd("CLIENT LIST");
    assert_eq!(list.matches(" flags=b ").count(), 1, "{list}");
    assert!(list.contains(" cmd=blpop "), "{list}");
    b.replies(&[("LLEN q", ":0\r\n"), ("RPUSH q x", ":1\r\n")]);
    assert_eq!(a.read_text(), "*2\r\n$1\r\nq\r\n$1\r\nx\r\n");
    assert_eq!(a.read_text(), "+PONG\r\n");
    assert_eq!(b.cmd("EXISTS q"), ":0\r\n");
    // First blocked, first served.
    a.send_line("BRPOP q 0");
    wait_blocked(&mut b, 1);
    c.send_line("BLPOP q 0");
    wait_blocked(&mut b, 2);
    assert_eq!(b.cmd("RPUSH q 1 2"), ":2\r\n");
    assert_eq!(a.read_text(), "*2\r\n$1\r\nq\r\n$1\r\n2\r\n");
    assert_eq!(c.read_text(), "*2\r\n$1\r\nq\r\n$1\r\n1\r\n");
    // A push undone in the same transaction wakes nobody, nor does a key of another type.
    a.send_line("BLPOP q 0");
    wait_blocked(&mut b, 1);
    for cmd in ["MULTI", "LPUSH q a", "DEL q", "SET q str", "EXEC"] {
        b.cmd(cmd);
    }
    assert_eq!(b.cmd("DEL q"), ":1\r\n");
    wait_blocked(&mut b, 1);
    b.cmd("RPUSH q z");
    assert_eq!(a.read_text(), "*2\r\n$1\r\nq\r\n$1\r\nz\r\n");
    // BRPOPLPUSH feeds a client blocked on its destination.
    a.send_line("BRPOPLPUSH src dst 0");
    wait_blocked(&mut b, 1);
    c.send_line("BLMPOP 0 1 dst LEFT COUNT 5");
    wait_blocked(&mut b, 2);
    b.cmd("RPUSH src v");
    assert_eq!(a.read_text(), "$1\r\nv\r\n");
    assert_eq!(c.read_text(), "*2\r\n$3\r\ndst\r\n*1\r\n$1\r\nv\r\n");
    wait_blocked(&mut b, 0);
    // Inside MULTI nothing blocks: the answer is the timeout's.
    b.cmd("MULTI");
    b.cmd("BLPOP none 0");
    b.cmd("BLMOVE none dst LEFT LEFT 0");
    assert_eq!(b.cmd("EXEC"), "*2\r\n*-1\r\n$-1\r\n");
    // Timeouts, and their errors.
    a.replies(&[
        ("BLPOP none 0.01", "*-1\r\n"),
        ("BLPOP none -1", "-ERR timeout is negative\r\n"),
        (
            "BLPOP none x",
            "-ERR timeout is not a float or out of range\r\n",
        ),
    ]);
    a.cmd("HELLO 3");
    assert_eq!(a.cmd("BRPOP none 0.01"), "_\r\n");
    a.cmd("HELLO 2");
    // CLIENT UNBLOCK, as a timeout and as an error.
    let id = a.cmd("CLIENT ID");
    let id = id.trim_start_matches(':').trim();
    a.send_line("BLPOP none 0");
    wait_blocked(&mut b, 1);
    assert_eq!(b.cmd(&format!("CLIENT UNBLOCK {id}")), ":1\r\n");
    assert_eq!(a.read_text(), "*-1\r\n");
    a.send_line("BLPOP none 0");
    wait_blocked(&mut b, 1);
    assert_eq!(b.cmd(&format!("CLIENT UNBLOCK {id} ERROR")), ":1\r\n");
    assert_eq!(
        a.read_text(),
        "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
    );
    assert_eq!(b.cmd(&format!("CLIENT UNBLOCK {id}")), ":0\r\n");
    // A blocked client that goes away is no longer counted.
    c.send_line("BLPOP none 0");
    wait_blocked(&mut b, 1);
    drop(c);
    wait_blocked(&mut b, 0);
    // LMPOP, which never blocks.
    b.cmd("RPUSH l1 a b c");
    b.replies(&[
        (
            "LMPOP 2 l0 l1 RIGHT COUNT 2",
            "*2\r\n$2\r\nl1\r\n*2\r\n$1\r\nc\r\n$1\r\nb\r\n",
        ),
        ("LMPOP 1 l0 LEFT", "*-1\r\n"),
        (
            "LMPOP 0 l0 LEFT",
            "-ERR numkeys should be greater than 0\r\n",
        ),
        (
            "LMPOP 1 l1 LEFT COUNT 0",
            "-ERR count should be greater than 0\r\n",
        ),
        ("LMPOP 5 l1 LEFT", "-ERR syntax error\r\n"),
    ]);
}

#[test]
fn clients_sending_in_one_breath_are_served_in_the_order_they_sent() {
    let server = Server::start();
    let mut r = server.client();
    // The suite's "BRPOPLPUSH with multiple blocked clients": the three commands arrive
    // together; the pops must be parked, in order, before the push runs.
    for _ in 0..20 {
        let (mut a, mut b) = (server.client(), server.client());
        r.cmd("DEL blist target1 target2");
        r.cmd("SET target1 nolist");
        a.send_line("BRPOPLPUSH blist target1 0");
        b.send_line("BRPOPLPUSH blist target2 0");
        r.send_line("LPUSH blist foo");
        assert_eq!(r.read_text(), ":1\r\n");
        assert_eq!(a.read_text(), WT);
        assert_eq!(b.read_text(), "$3\r\nfoo\r\n");
        assert_eq!(r.cmd("LRANGE target2 0 -1"), "*1\r\n$3\r\nfoo\r\n");
    }
}

/// A list changed by pushes and, in the same batch (one write, read whole by the server), read
/// and moved by every other path: each sees every push, though the list's chunks are written
/// only when the batch ends.
#[test]
fn commands_in_the_batch_of_a_push_see_it() {
    let s = Server::start();
    let mut c = s.client();
    // Enough members for chunks below the root (4 KiB each).
    let members: Vec<String> = (0..1500).map(|i| format!("m{i:05}")).collect();
    assert_eq!(
        c.cmd(&format!("RPUSH l {}", members.join(" "))),
        ":1500\r\n"
    );
    let cmds = [
        ("LPUSH l p1", ":1501\r\n".to_string()),
        ("LPUSH l p2", ":1502\r\n".into()),
        ("LLEN l", ":1502\r\n".into()),
        ("LRANGE l 0 1", "*2\r\n$2\r\np2\r\n$2\r\np1\r\n".into()),
        ("TYPE l", "+list\r\n".into()),
        ("OBJECT ENCODING l", "$9\r\nquicklist\r\n".into()),
        ("COPY l c", ":1\r\n".into()),
        ("LPUSH l p3", ":1503\r\n".into()),
        ("LLEN c", ":1502\r\n".into()),
        ("LINDEX c 0", "$2\r\np2\r\n".into()),
        ("EXPIRE l 1000", ":1\r\n".into()),
        ("LPUSH l p4", ":1504\r\n".into()),
        ("TTL l", ":1000\r\n".into()),
        ("RENAME l r", "+OK\r\n".into()),
        ("LLEN r", ":1504\r\n".into()),
        ("LINDEX r 0", "$2\r\np4\r\n".into()),
        ("LINDEX r -1", "$6\r\nm01499\r\n".into()),
        ("EXISTS l", ":0\r\n".into()),
        ("RPUSH r t1", ":1505\r\n".into()),
        ("DEL r", ":1\r\n".into()),
        ("LPUSH r x", ":1\r\n".into()),
        ("LRANGE r 0 -1", "*1\r\n$1\r\nx\r\n".into()),
        ("LPUSH c p5", ":1503\r\n".into()),
    ];
    let mut batch = Vec::new();
    for (cmd, _) in &cmds {
        let args: Vec<&str> = cmd.split(' ').collect();
        batch.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in &args {
            batch.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }
    c.send_raw(&batch).unwrap();
    for (cmd, want) in &cmds {
        assert_eq!(&c.read_text(), want, "{cmd}");
    }
    // The batch's last push, then a MEMORY USAGE, a SCAN and a DUMP in one write: each sees
    // it (the key is there, the payload restores the whole list).
    let mut batch = Vec::new();
    for cmd in ["LPUSH c p6", "MEMORY USAGE c", "SCAN 0 COUNT 100", "DUMP c"] {
        let args: Vec<&str> = cmd.split(' ').collect();
        batch.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in &args {
            batch.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }
    c.send_raw(&batch).unwrap();
    assert_eq!(c.read_text(), ":1504\r\n");
    let usage = c.read_text();
    assert!(usage.starts_with(':') && usage.len() > 4, "{usage}");
    let scan = c.read_text();
    assert!(
        scan.contains("$1\r\nc\r\n") && scan.contains("$1\r\nr\r\n"),
        "{scan}"
    );
    let mut dump = Vec::new();
    c.read_raw(&mut dump).unwrap();
    // The payload back under a new key (RESTORE takes it as one binary argument).
    let payload_at = dump.iter().position(|&b| b == b'\n').unwrap() + 1;
    let payload = &dump[payload_at..dump.len() - 2];
    let mut req = b"*4\r\n$7\r\nRESTORE\r\n$1\r\nd\r\n$1\r\n0\r\n".to_vec();
    req.extend_from_slice(format!("${}\r\n", payload.len()).as_bytes());
    req.extend_from_slice(payload);
    req.extend_from_slice(b"\r\n");
    c.send_raw(&req).unwrap();
    assert_eq!(c.read_text(), "+OK\r\n");
    c.replies(&[
        ("LLEN d", ":1504\r\n"),
        ("LRANGE d 0 1", "*2\r\n$2\r\np6\r\n$2\r\np5\r\n"),
    ]);
}
