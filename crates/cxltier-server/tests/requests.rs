//! Requests as the server reads them: AUTH before anything else, malformed requests answered
//! with an error and closed without hurting other clients, and bulk lengths over
//! proto-max-bulk-len refused from their header (the error line reaching a client still
//! sending the body), with CONFIG SET changing that limit while the server runs.

mod util;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use util::{bulk, Reply as V, Server};

#[test]
fn malformed_requests_get_an_error_and_hurt_nobody_else() {
    let s = Server::start();
    let mut good = s.client();
    assert_eq!(good.call(&["SET", "keep", "safe"]), V::Simple("OK".into()));
    for garbage in [
        &b"*2\r\n$3\r\nGET\r\n:oops\r\n"[..],
        b"*-x\r\n",
        b"*1\r\n$999999999999\r\n",
        b"\"unbalanced\r\n",
    ] {
        let mut raw = TcpStream::connect(&s.addr).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        raw.write_all(garbage).unwrap();
        let mut reply = Vec::new();
        let _ = raw.read_to_end(&mut reply); // the server closes after the error
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            reply.starts_with("-ERR Protocol error") || reply.starts_with("-ERR unknown"),
            "{garbage:?} got {reply:?}"
        );
    }
    // Empty commands (`*0`, an empty inline line) are ignored, as Redis ignores them: the
    // command after them is answered.
    let mut raw = TcpStream::connect(&s.addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    raw.write_all(b"*0\r\n\r\n*0\r\n*1\r\n$4\r\nPING\r\n")
        .unwrap();
    let mut reply = [0u8; 7];
    raw.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"+PONG\r\n");
    // A huge inline line and random bytes.
    let mut raw = TcpStream::connect(&s.addr).unwrap();
    let _ = raw.write_all(&vec![b'a'; 100_000]);
    let mut raw2 = TcpStream::connect(&s.addr).unwrap();
    let noise: Vec<u8> = (0..5000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let _ = raw2.write_all(&noise);
    drop((raw, raw2));
    assert_eq!(good.call(&["GET", "keep"]), bulk("safe"));
    assert_eq!(good.call(&["PING"]), V::Simple("PONG".into()));
}

/// Read until the server closes the connection: the close must end the reading (not an error),
/// and what arrived before it must start with `start`.
fn replied_then_closed(raw: &mut TcpStream, start: &str) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let err = loop {
        match raw.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => break Some(e),
        }
    };
    assert!(
        err.is_none(),
        "reading until the server closes: {err:?} (after {got:?})"
    );
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with(start), "{got}");
}

#[test]
fn a_client_sending_an_over_limit_body_reads_the_error_line_before_the_close() {
    // The server refuses a bulk length over proto-max-bulk-len and closes; the client is still
    // sending the 3 MiB body. The server lingers, dropping what arrives, so that its close is not
    // a reset that could reach the client before the error line.
    let s = Server::builder().dram("32M").start();
    let mut c = s.client();
    assert_eq!(
        c.call(&["CONFIG", "SET", "proto-max-bulk-len", "1mb"]),
        V::Simple("OK".into())
    );
    let mut raw = TcpStream::connect(&s.addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = vec![b'v'; 3 << 20];
    let mut request = format!("*3\r\n$3\r\nSET\r\n$2\r\nk3\r\n${}\r\n", body.len()).into_bytes();
    request.extend_from_slice(&body);
    request.extend_from_slice(b"\r\n");
    // The whole request, as a client that does not wait for replies sends it: written in full
    // (the server reads and drops it), then the reply read to the end.
    raw.write_all(&request).unwrap();
    replied_then_closed(&mut raw, "-ERR Protocol error: invalid bulk length");
    assert_eq!(c.call(&["EXISTS", "k3"]), V::Int(0));
}

/// CONFIG SET proto-max-bulk-len changes the largest value while the server runs, within what
/// the store accepts.
#[test]
fn config_set_proto_max_bulk_len_changes_the_largest_value() {
    let s = Server::builder().dram("32M").max_object("4M").start();
    let mut c = s.client();
    let v = vec![b'v'; 3 << 20];
    assert_eq!(c.call_bytes(&[b"SET", b"k", &v]), V::Simple("OK".into()));
    assert_eq!(
        c.call(&["CONFIG", "SET", "proto-max-bulk-len", "2mb"]),
        V::Simple("OK".into())
    );
    // A value over the new limit: its length alone is refused. Only the header is sent: had the
    // body followed, the server's close with it unread would be a reset, which may reach the
    // client before the error line does.
    let mut raw = TcpStream::connect(&s.addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    raw.write_all(format!("*3\r\n$3\r\nSET\r\n$2\r\nk2\r\n${}\r\n", v.len()).as_bytes())
        .unwrap();
    // (Only the header was sent: nothing is left unread, whatever the server does at its close.)
    replied_then_closed(&mut raw, "-ERR Protocol error: invalid bulk length");
    // That closed the connection, as Redis does; a new one sees the new limit, and nothing was
    // stored.
    let mut c = s.client();
    assert_eq!(c.call(&["EXISTS", "k2"]), V::Int(0));
    assert_eq!(
        c.call(&["CONFIG", "GET", "proto-max-bulk-len"]),
        V::Array(vec![bulk("proto-max-bulk-len"), bulk("2097152")])
    );
    assert_eq!(
        c.call(&["APPEND", "small", &"x".repeat(1000)]),
        V::Int(1000)
    );
    let V::Error(e) = c.call(&["CONFIG", "SET", "proto-max-bulk-len", "10gb"]) else {
        panic!("10gb accepted")
    };
    assert!(e.contains("argument must be between"), "{e}");
    assert_eq!(
        c.call(&["CONFIG", "SET", "proto-max-bulk-len", "5mb"]),
        V::Simple("OK".into())
    );
    let w = vec![b'w'; 5 << 20];
    assert_eq!(
        c.call_bytes(&[b"SET", b"k2", &w[..(5 << 20) - (64 << 10)]]),
        V::Simple("OK".into())
    );
    assert_eq!(c.call(&["STRLEN", "k2"]), V::Int((5 << 20) - (64 << 10)));
}
