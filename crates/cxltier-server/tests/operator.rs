//! The operator's commands over a socket: SLOWLOG's entries name the client as the server sees
//! it (its address and name), commands pipelined in one turn of the loop are each logged with
//! their own time, and secrets never reach the log.

mod util;
use util::{bulk, Reply as V, Server};

/// SLOWLOG GET -1's entries as (id, time, duration, args, addr, name).
type Entry = (i64, i64, i64, Vec<String>, String, String);

fn slowlog(c: &mut util::Conn) -> Vec<Entry> {
    let V::Array(entries) = c.call(&["SLOWLOG", "GET", "-1"]) else {
        panic!("SLOWLOG GET answers an array");
    };
    let text = |r: &V| match r {
        V::Bulk(b) => String::from_utf8(b.clone()).unwrap(),
        other => panic!("a bulk string, not {other:?}"),
    };
    entries
        .iter()
        .map(|e| match e {
            V::Array(f) if f.len() == 6 => match (&f[0], &f[1], &f[2], &f[3]) {
                (V::Int(id), V::Int(time), V::Int(us), V::Array(args)) => (
                    *id,
                    *time,
                    *us,
                    args.iter().map(text).collect(),
                    text(&f[4]),
                    text(&f[5]),
                ),
                _ => panic!("an entry's fields: {f:?}"),
            },
            other => panic!("an entry of 6 fields, not {other:?}"),
        })
        .collect()
}

#[test]
fn slowlog_entries_name_the_client_and_pipelined_commands_are_each_logged() {
    let s = Server::builder().requirepass("sesame").start();
    let mut c = s.client();
    assert_eq!(c.call(&["AUTH", "sesame"]), V::Simple("OK".into()));
    let addr = c.stream().local_addr().unwrap().to_string();
    assert_eq!(
        c.call(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        V::Simple("OK".into())
    );
    assert_eq!(
        c.call(&["CLIENT", "SETNAME", "ops"]),
        V::Simple("OK".into())
    );
    assert_eq!(c.call(&["SLOWLOG", "RESET"]), V::Simple("OK".into()));
    // Three commands in one write: one turn of the loop, the last closed at its end.
    c.0.send_raw(b"SET k v\r\nGET k\r\nAUTH sesame\r\n")
        .unwrap();
    assert_eq!(c.read(), V::Simple("OK".into()));
    assert_eq!(c.read(), bulk("v"));
    assert_eq!(c.read(), V::Simple("OK".into()));
    let log = slowlog(&mut c);
    let args: Vec<Vec<String>> = log.iter().map(|e| e.3.clone()).collect();
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        args,
        [
            words(&["AUTH", "(redacted)"]),
            words(&["GET", "k"]),
            words(&["SET", "k", "v"]),
            words(&["SLOWLOG", "RESET"]),
        ]
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for (i, (id, time, us, _, a, name)) in log.iter().enumerate() {
        assert_eq!(*id, log[0].0 - i as i64, "ids count down, newest first");
        assert!(
            (now - 5..=now).contains(time),
            "{time} is the start's Unix time"
        );
        assert!(*us >= 0);
        assert_eq!(a, &addr, "the client's address as the server sees it");
        assert_eq!(name, "ops");
    }
    // Another client's commands carry its own address and no name; off, nothing is logged.
    let mut other = s.client();
    other.call(&["AUTH", "sesame"]);
    other.call(&["PING"]);
    let log = slowlog(&mut c);
    let ping = log.iter().find(|e| e.3 == ["PING"]).expect("PING logged");
    assert_eq!(ping.4, other.stream().local_addr().unwrap().to_string());
    assert_eq!(ping.5, "");
    c.call(&["CONFIG", "SET", "slowlog-log-slower-than", "-1"]);
    let before = c.call(&["SLOWLOG", "LEN"]);
    other.call(&["PING"]);
    assert_eq!(c.call(&["SLOWLOG", "LEN"]), before);
}

#[test]
fn monitor_receives_other_clients_commands_in_redis_line_format() {
    let s = Server::start();
    let mut m = s.client();
    assert_eq!(m.call(&["MONITOR"]), V::Simple("OK".into()));
    let mut c = s.client();
    let addr = c.stream().local_addr().unwrap().to_string();
    c.call(&["SET", "k", "a b\n\"c\""]);
    c.call(&["CONFIG", "GET", "maxclients"]);
    c.call(&["KEYS", "*"]);
    for want in [
        format!(r#"[0 {addr}] "SET" "k" "a b\n\"c\"""#),
        format!(r#"[0 {addr}] "KEYS" "*""#),
    ] {
        let V::Simple(line) = m.read() else {
            panic!("a MONITOR line is a status reply");
        };
        let (time, rest) = line.split_once(' ').unwrap();
        let (secs, micros) = time.split_once('.').unwrap();
        assert!(secs.parse::<u64>().is_ok() && micros.len() == 6, "{line}");
        assert_eq!(rest, want, "CONFIG (admin) is not shown");
    }
    // After RESET the connection is an ordinary one again.
    assert_eq!(m.call(&["RESET"]), V::Simple("RESET".into()));
    c.call(&["PING"]);
    assert_eq!(m.call(&["PING"]), V::Simple("PONG".into()));
}

#[test]
fn a_monitor_that_does_not_read_is_closed_at_its_output_limit() {
    let s = Server::builder()
        .client_output_buffer_limit("1mb 512kb 60")
        .start();
    let mut m = s.client();
    assert_eq!(m.call(&["MONITOR"]), V::Simple("OK".into()));
    let mut c = s.client();
    let value = "x".repeat(64 << 10);
    // The monitor reads nothing: its lines pile up until the server closes it.
    let mut closed = false;
    for _ in 0..400 {
        c.call(&["SET", "k", value.as_str()]);
        if info_clients(&mut c) < 2 {
            closed = true;
            break;
        }
    }
    assert!(closed, "the monitor was closed at its hard limit");
}

fn info_clients(c: &mut util::Conn) -> u64 {
    util::info_number(c, "clients", "connected_clients")
}

/// CLIENT PAUSE WRITE holds another client's write (counted in `blocked_clients`) and the
/// commands it pipelined behind it, while reads go on; CLIENT UNPAUSE runs them, in order.
#[test]
fn client_pause_write_holds_writes_until_unpaused() {
    let server = Server::start();
    let mut admin = server.client();
    let mut writer = server.client();
    let mut reader = server.client();
    assert_eq!(admin.cmd("CLIENT PAUSE 600000 WRITE"), "+OK\r\n");
    writer.send_line("SET k v");
    writer.send_line("GET k");
    util::wait_blocked(&mut admin, 1);
    assert_eq!(reader.cmd("GET k"), "$-1\r\n");
    assert_eq!(admin.cmd("CLIENT UNPAUSE"), "+OK\r\n");
    assert_eq!(writer.read_text(), "+OK\r\n");
    assert_eq!(writer.read_text(), "$1\r\nv\r\n");
    util::wait_blocked(&mut admin, 0);
    // A pause that ends by itself lets them go too.
    assert_eq!(admin.cmd("CLIENT PAUSE 50 ALL"), "+OK\r\n");
    assert_eq!(writer.cmd("INCR n"), ":1\r\n");
}

/// A blocking command is one call however long it waits (Redis counts it when it is answered):
/// answered by a write, or by CLIENT UNBLOCK ... ERROR, whose UNBLOCKED error errorstats counts.
#[test]
fn a_parked_command_is_counted_once_when_it_is_answered() {
    let s = Server::start();
    let mut c = s.client();
    let mut waiter = s.client();
    let id = match waiter.call(&["CLIENT", "ID"]) {
        V::Int(id) => id,
        other => panic!("{other:?}"),
    };
    c.call(&["CONFIG", "RESETSTAT"]);
    waiter.send(&["BLPOP", "list1", "0"]);
    util::wait_until("the BLPOP parks", || {
        util::info_number(&mut c, "clients", "blocked_clients") == 1
    });
    assert_eq!(
        c.call(&["CLIENT", "UNBLOCK", &id.to_string(), "ERROR"]),
        V::Int(1)
    );
    match waiter.read() {
        V::Error(e) => assert!(e.starts_with("UNBLOCKED"), "{e}"),
        other => panic!("{other:?}"),
    }
    // Parked again, then answered by a write: one more call, not failed.
    waiter.send(&["BLPOP", "list1", "0"]);
    util::wait_until("the BLPOP parks", || {
        util::info_number(&mut c, "clients", "blocked_clients") == 1
    });
    c.call(&["RPUSH", "list1", "a"]);
    assert_eq!(waiter.read(), V::Array(vec![bulk("list1"), bulk("a")]));
    let V::Bulk(stats) = c.call(&["INFO", "commandstats"]) else {
        panic!("INFO answers a bulk string");
    };
    let stats = String::from_utf8(stats).unwrap();
    assert!(
        stats.contains("cmdstat_blpop:calls=2,")
            && stats.contains(",rejected_calls=0,failed_calls=1\r\n"),
        "{stats}"
    );
    assert!(stats.contains("cmdstat_client|unblock:calls=1,"), "{stats}");
    assert_eq!(
        util::info_field(&mut c, "errorstats", "errorstat_UNBLOCKED"),
        "count=1"
    );
    assert_eq!(util::info_number(&mut c, "stats", "total_error_replies"), 1);
}
