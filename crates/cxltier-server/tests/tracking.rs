//! Client-side caching over sockets: a RESP3 connection's `invalidate` pushes (after the reply
//! of its own write, and between its replies for another connection's), a RESP2 connection
//! redirecting to a connection subscribed to `__redis__:invalidate`, BCAST prefixes, flushes
//! and keys that expire, as Redis 7.0 sends them; and a run of every mode compared with
//! redis-server byte by byte (redis-server must be installed: scripts/peers installs it).

mod util;
use util::{redis, Conn, Reply as V, Server};

fn push_invalidate(keys: &[&str]) -> String {
    let mut s = format!(">2\r\n$10\r\ninvalidate\r\n*{}\r\n", keys.len());
    for k in keys {
        s.push_str(&format!("${}\r\n{k}\r\n", k.len()));
    }
    s
}

fn message(keys: Option<&[&str]>) -> String {
    let mut s = String::from("*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n");
    match keys {
        None => s.push_str("$-1\r\n"),
        Some(keys) => {
            s.push_str(&format!("*{}\r\n", keys.len()));
            for k in keys {
                s.push_str(&format!("${}\r\n{k}\r\n", k.len()));
            }
        }
    }
    s
}

#[test]
fn resp3_connections_get_invalidate_pushes() {
    let server = Server::start();
    let mut r = server.client();
    let mut other = server.client();
    r.replies_starting(&[("HELLO 3", "%7")]);
    r.replies(&[
        ("CLIENT TRACKING on", "+OK\r\n"),
        ("SET k 1", "+OK\r\n"),
        ("GET k", "$1\r\n1\r\n"),
    ]);
    other.replies(&[("SET k 2", "+OK\r\n")]);
    // Another connection's write: the push comes before r's next reply.
    assert_eq!(r.read_text(), push_invalidate(&["k"]));
    r.replies(&[("GET k", "$1\r\n2\r\n")]);
    // Its own write: the push follows the reply.
    r.replies(&[("DEL k", ":1\r\n")]);
    assert_eq!(r.read_text(), push_invalidate(&["k"]));
    // FLUSHALL: null.
    r.replies(&[("GET k", "_\r\n"), ("FLUSHALL", "+OK\r\n")]);
    assert_eq!(r.read_text(), ">2\r\n$10\r\ninvalidate\r\n_\r\n");
    // A key that expires is invalidated by the server's own expiry.
    r.replies(&[("SET e 1 PX 50", "+OK\r\n"), ("GET e", "$1\r\n1\r\n")]);
    assert_eq!(r.read_text(), push_invalidate(&["e"]));
    assert!(matches!(r.call_line("PING"), V::Simple(s) if s == "PONG"));
}

#[test]
fn resp2_connections_redirect_to_the_invalidate_channel() {
    let server = Server::start();
    let mut sub = server.client();
    let id = sub.cmd("CLIENT ID");
    let id = id.trim_start_matches(':').trim_end();
    sub.cmd("SUBSCRIBE __redis__:invalidate");
    let mut r = server.client();
    let mut other = server.client();
    r.replies(&[
        (&format!("CLIENT TRACKING on REDIRECT {id}"), "+OK\r\n"),
        ("CLIENT GETREDIR", &format!(":{id}\r\n")),
        ("MSET a 1 b 2", "+OK\r\n"),
        ("MGET a b", "*2\r\n$1\r\n1\r\n$1\r\n2\r\n"),
    ]);
    other.replies(&[("MSET b 3 a 4", "+OK\r\n")]);
    assert_eq!(sub.read_text(), message(Some(&["b"])));
    assert_eq!(sub.read_text(), message(Some(&["a"])));
    r.replies(&[("GET a", "$1\r\n4\r\n")]);
    other.replies(&[("FLUSHDB", "+OK\r\n")]);
    assert_eq!(sub.read_text(), message(None));
    // BCAST: one message per turn with the keys written under the prefix.
    r.replies(&[
        ("CLIENT TRACKING off", "+OK\r\n"),
        (
            &format!("CLIENT TRACKING on BCAST PREFIX p: REDIRECT {id}"),
            "+OK\r\n",
        ),
    ]);
    other.replies(&[("MSET p:2 1 q 1 p:1 1", "+OK\r\n")]);
    assert_eq!(sub.read_text(), message(Some(&["p:1", "p:2"])));
    let info = r.cmd("CLIENT INFO");
    assert!(
        info.contains(" flags=tB ") && info.contains(&format!(" redir={id} ")),
        "{info}"
    );
}

/// Every mode against redis-server: a RESP3 connection (default, NOLOOP, OPTIN/OPTOUT, BCAST
/// with prefixes, MULTI/EXEC, a script) and a RESP2 one redirecting to a subscriber, what each
/// reads after each step, byte for byte, and the errors and TRACKINGINFO on the way.
#[test]
fn tracking_is_redis_servers() {
    // Each step: who sends what (`w` the writer, `t` the RESP3 tracking connection, `r` the RESP2
    // one redirecting to `s`); after it, `t` PINGs and everything t and s received is recorded.
    const STEPS: &[(&str, &str)] = &[
        ("t", "CLIENT TRACKING on"),
        ("w", "MSET a 1 b 2 c 3"),
        ("t", "MGET a b"),
        ("w", "SET a 9"),
        ("t", "INCR b"),
        ("t", "GET c"),
        ("t", "MULTI"),
        ("t", "SET c 4"),
        ("t", "GET a"),
        ("t", "EXEC"),
        ("w", "SET a 10"),
        ("t", "CLIENT TRACKING on NOLOOP"),
        ("t", "GET b"),
        ("t", "SET b 1"),
        ("w", "SET b 2"),
        ("t", "CLIENT TRACKING on OPTOUT"),
        ("t", "CLIENT TRACKING off"),
        ("t", "CLIENT TRACKING on OPTIN"),
        ("t", "CLIENT CACHING no"),
        ("t", "GET a"),
        ("t", "CLIENT CACHING yes"),
        ("t", "GET c"),
        ("w", "MSET a 1 c 1"),
        ("t", "CLIENT TRACKINGINFO"),
        ("t", "CLIENT TRACKING off"),
        ("t", "CLIENT TRACKING on BCAST PREFIX x: PREFIX y"),
        ("t", "CLIENT TRACKING on BCAST PREFIX x:1"),
        ("t", "CLIENT TRACKING on BCAST PREFIX z PREFIX zz"),
        ("t", "CLIENT TRACKING on PREFIX q"),
        ("w", "MSET x:2 1 yes 1 x:1 1 other 1"),
        ("t", "CLIENT TRACKINGINFO"),
        ("t", "CLIENT TRACKING off"),
        ("t", "CLIENT TRACKING on"),
        ("t", "EVAL redis.call('get','k') 2 k1 k2"),
        ("w", "MSET k2 1 k1 1 k 1"),
        ("r", "CLIENT TRACKING on REDIRECT {s}"),
        ("r", "GET a"),
        ("w", "SET a 2"),
        ("r", "GET a"),
        ("t", "GET a"),
        ("w", "FLUSHALL"),
        ("t", "CLIENT TRACKING on REDIRECT 123456"),
        ("t", "CLIENT CACHING maybe"),
        ("t", "CLIENT GETREDIR"),
        ("r", "CLIENT GETREDIR"),
    ];
    let run = |addr: &str| -> Vec<String> {
        let [mut w, mut t, mut r, mut s] = [(); 4].map(|_| Conn::connect(addr));
        t.call(&["HELLO", "3"]);
        let sid = match s.call(&["CLIENT", "ID"]) {
            V::Int(id) => id,
            other => panic!("{other:?}"),
        };
        s.call(&["SUBSCRIBE", "__redis__:invalidate"]);
        let mut seen = Vec::new();
        for (who, line) in STEPS {
            let template = line;
            let line = line.replace("{s}", &sid.to_string());
            let c = match *who {
                "w" => &mut w,
                "t" => &mut t,
                _ => &mut r,
            };
            let words: Vec<&str> = line.split(' ').collect();
            let reply = c.call_text(&words);
            let queuing = line == "MULTI" || reply == "+QUEUED\r\n";
            // The subscriber's id differs between the servers: it is written as `{s}`.
            let reply = reply.replace(&format!(":{sid}\r\n"), ":{s}\r\n");
            seen.push(format!("{who}> {template}: {reply}"));
            if queuing {
                continue;
            }
            // Whatever t and s were sent comes before the reply to a PING.
            t.send(&["PING"]);
            loop {
                let got = t.read_text();
                if got == "+PONG\r\n" {
                    break;
                }
                seen.push(format!("  t: {got}"));
            }
            s.send(&["PING"]);
            loop {
                let got = s.read_text();
                if got.starts_with("*2\r\n$4\r\npong") {
                    break;
                }
                seen.push(format!("  s: {got}"));
            }
        }
        seen
    };
    let want = run(&redis().addr);
    let got = run(&Server::start().addr);
    let heard = |who: &str| want.iter().filter(|l| l.starts_with(who)).count();
    assert!(heard("  t: ") >= 8 && heard("  s: ") >= 2, "{want:#?}");
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(g, w, "line {i}");
    }
    assert_eq!(got.len(), want.len(), "{got:#?}");
}
