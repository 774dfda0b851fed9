//! Streams over a real socket, compared with a redis-server process: one script of commands
//! (explicit ids, so that both servers give the same ones) run on both in RESP2 and RESP3, the
//! replies compared value by value; blocked XREAD and XREADGROUP woken, failed and timed out as
//! redis-server's; and a stream kept over NVMe with a DRAM budget far below its size.

mod util;
use util::{over_nvme, redis, wait_blocked, Conn, Reply as V, Server};

/// Commands whose replies do not depend on the time (ids are given, idle times not asked).
const SCRIPT: &[&str] = &[
    "XADD s 1-1 a 1",
    "XADD s 1-* b 2",
    "XADD s 2-0 d 4 e 5",
    "XADD s MAXLEN = 10 3-0 f 6",
    "XADD s 0-1 x y",
    "XRANGE s - +",
    "XRANGE s (1-1 (3-0",
    "XREVRANGE s + - COUNT 2",
    "XRANGE s - + COUNT 0",
    "XLEN s",
    "XDEL s 1-2 9-9",
    "XGROUP CREATE s g 0",
    "XGROUP CREATE s g2 $",
    "XGROUP CREATE s g 0",
    "XREADGROUP GROUP g alice COUNT 2 STREAMS s >",
    "XREADGROUP GROUP g bob STREAMS s >",
    "XREADGROUP GROUP g bob STREAMS s >",
    "XPENDING s g",
    "XREADGROUP GROUP g alice STREAMS s 0",
    "XACK s g 1-1 5-5",
    "XINFO GROUPS s",
    "XCLAIM s g carol 0 2-0 JUSTID",
    "XCLAIM s g carol 0 3-0 TIME 1000 RETRYCOUNT 7",
    "XPENDING s g",
    "XAUTOCLAIM s g dave 0 0 COUNT 1 JUSTID",
    "XGROUP DELCONSUMER s g alice",
    "XGROUP CREATECONSUMER s g erin",
    "XGROUP SETID s g 1-1 ENTRIESREAD 1",
    "XINFO GROUPS s",
    "XREADGROUP GROUP g erin NOACK STREAMS s >",
    "XINFO GROUPS s",
    "XREAD COUNT 5 STREAMS s missing 0 0",
    "XREAD STREAMS missing $",
    "XTRIM s MINID 3-0",
    "XRANGE s - +",
    "XSETID s 10-0 ENTRIESADDED 20 MAXDELETEDID 9-0",
    "XADD s 10-* k v",
    "XADD s NOMKSTREAM 11-0 k v",
    "XADD missing NOMKSTREAM 11-0 k v",
    "XGROUP DESTROY s g2",
    "XGROUP CREATE fresh g $ MKSTREAM",
    "XLEN fresh",
    "XINFO GROUPS fresh",
    "TYPE s",
    "OBJECT ENCODING s",
    "SET str x",
    "XADD str 1-0 a b",
    "XRANGE s x +",
    "XREADGROUP GROUP nogroup c STREAMS s >",
    "XGROUP FOO",
    "XINFO HELP x",
    "COMMAND GETKEYS XREAD COUNT 1 STREAMS a b 0 0",
    "COMMAND GETKEYS XGROUP CREATE k g $",
];

fn run(addr: &str, proto: &str) -> Vec<(String, V)> {
    let mut c = Conn::connect(addr);
    c.call(&["HELLO", proto]);
    SCRIPT
        .iter()
        .map(|l| (l.to_string(), c.call_line(l)))
        .collect()
}

#[test]
fn replies_are_redis_server_s_in_resp2_and_resp3() {
    let redis = redis();
    for proto in ["2", "3"] {
        let cxl = Server::start();
        redis.client().call(&["FLUSHALL"]);
        let want = run(&redis.addr, proto);
        let got = run(&cxl.addr, proto);
        for (w, g) in want.iter().zip(&got) {
            assert_eq!(g, w, "RESP{proto}");
        }
    }
}

/// A blocked XREAD on `$` gets the entry added after it blocked; XREADGROUP waiting on a stream
/// that is deleted, or on a group that is destroyed, gets redis-server's error; a timeout is a
/// null array.
#[test]
fn blocked_reads_end_as_on_redis_server() {
    let redis = redis();
    let cxl = Server::start();
    for addr in [&redis.addr, &cxl.addr] {
        let mut c = Conn::connect(addr);
        let mut rd = Conn::connect(addr);
        c.cmd("FLUSHALL");
        c.cmd("XADD s 5-0 a 1");
        rd.send_line("XREAD BLOCK 0 STREAMS s $");
        wait_blocked(&mut c, 1);
        c.cmd("XADD s 6-0 b 2");
        assert_eq!(
            rd.read_text(),
            "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n6-0\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n",
            "{addr}"
        );
        c.cmd("XGROUP CREATE s g $");
        rd.send_line("XREADGROUP GROUP g alice BLOCK 0 STREAMS s >");
        wait_blocked(&mut c, 1);
        c.cmd("DEL s");
        assert!(
            rd.read_text().contains("no longer exists"),
            "{addr}: a deleted stream ends the wait"
        );
        c.cmd("XADD s 5-0 a 1");
        c.cmd("XGROUP CREATE s g $");
        rd.send_line("XREADGROUP GROUP g alice BLOCK 0 STREAMS s >");
        wait_blocked(&mut c, 1);
        c.cmd("XGROUP DESTROY s g");
        assert!(rd.read_text().starts_with("-NOGROUP"), "{addr}");
        assert_eq!(rd.cmd("XREAD BLOCK 10 STREAMS s $"), "*-1\r\n", "{addr}");
        c.cmd("XGROUP CREATE s g $");
        rd.send_line("XREADGROUP GROUP g alice BLOCK 0 STREAMS s >");
        wait_blocked(&mut c, 1);
        c.cmd("XADD s 7-0 c 3");
        assert_eq!(
            rd.read_text(),
            "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n7-0\r\n*2\r\n$1\r\nc\r\n$1\r\n3\r\n",
            "{addr}"
        );
        assert_eq!(
            c.cmd("XPENDING s g"),
            "*4\r\n:1\r\n$3\r\n7-0\r\n$3\r\n7-0\r\n*1\r\n*2\r\n$5\r\nalice\r\n$1\r\n1\r\n"
        );
    }
}

/// A stream several times the DRAM budget (30 MB of entries over 8 MiB): its entries go to NVMe as chunks and every one reads
/// back, in order, and its group's pending entries with them.
#[test]
fn a_stream_larger_than_dram_reads_back_whole() {
    let (_log, s) = over_nvme("8M", "256M");
    let mut c = s.client();
    let value = "x".repeat(1000);
    let n = 30_000u64;
    for i in 1..=n {
        let r = c.call(&["XADD", "big", &format!("{i}-0"), "v", &value]);
        assert_eq!(r, V::Bulk(format!("{i}-0").into_bytes()));
    }
    c.replies(&[("XGROUP CREATE big g 0", "+OK\r\n")]);
    c.call(&[
        "XREADGROUP",
        "GROUP",
        "g",
        "c",
        "COUNT",
        "5000",
        "STREAMS",
        "big",
        ">",
    ]);
    assert_eq!(c.cmd("XLEN big"), format!(":{n}\r\n"));
    let mut next = 1u64;
    let mut from = "-".to_string();
    loop {
        let V::Array(page) = c.call(&["XRANGE", "big", &from, "+", "COUNT", "1000"]) else {
            panic!("not an array")
        };
        if page.is_empty() {
            break;
        }
        for e in &page {
            let V::Array(e) = e else { panic!("{e:?}") };
            assert_eq!(e[0], V::Bulk(format!("{next}-0").into_bytes()));
            next += 1;
        }
        from = format!("({}-0", next - 1);
    }
    assert_eq!(next, n + 1);
    assert_eq!(
        c.cmd("XPENDING big g"),
        "*4\r\n:5000\r\n$3\r\n1-0\r\n$6\r\n5000-0\r\n*1\r\n*2\r\n$1\r\nc\r\n$4\r\n5000\r\n"
    );
}
