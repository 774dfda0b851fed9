//! Client-side caching over sockets: a RESP3 connection's `invalidate` pushes (after the reply
//! of its own write, and between its replies for another connection's), a RESP2 connection
//! redirecting to a connection subscribed to `__redis__:invalidate`, BCAST prefixes, flushes
//! and keys that expire, as Redis 7.0 sends them.

mod util;
use util::{Reply as V, Server};

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
