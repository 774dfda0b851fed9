//! RESP2 requests and replies.
//!
//! [`parse`] reads one command from the front of a buffer: a multibulk array of bulk strings (what
//! every client library sends) or an inline command (what a person types into telnet). It returns
//! the arguments as byte ranges into the buffer, so nothing is copied, and never panics, whatever
//! the bytes.

use std::ops::Range;

/// Largest bulk string accepted (Redis's proto-max-bulk-len default).
pub const MAX_BULK: usize = 512 << 20;
/// Largest number of arguments in one command.
pub const MAX_ARGS: usize = 1 << 20;
/// Longest inline command line.
pub const MAX_INLINE: usize = 64 << 10;

/// A malformed request: the connection gets `-ERR Protocol error: ...` and is closed (as Redis
/// does), because the stream can no longer be framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// One parsed command: its arguments as ranges of the buffer, and the bytes it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub args: Vec<Range<usize>>,
    pub consumed: usize,
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 1 < buf.len() {
        match memchr(b'\r', &buf[i..buf.len() - 1]) {
            Some(p) => {
                let at = i + p;
                if buf[at + 1] == b'\n' {
                    return Some(at);
                }
                i = at + 1;
            }
            None => return None,
        }
    }
    None
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

fn parse_int(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > 19 {
        return None;
    }
    let (neg, digits) = match bytes[0] {
        b'-' => (true, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add((d - b'0') as i64)?;
    }
    Some(if neg { -n } else { n })
}

/// Parse one command from the front of `buf`; `Ok(None)` when more bytes are needed.
pub fn parse(buf: &[u8]) -> Result<Option<Parsed>, ProtocolError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        return parse_inline(buf);
    }
    let Some(end) = find_crlf(buf, 1) else {
        if buf.len() > MAX_INLINE {
            return Err(ProtocolError("too big mbulk count string".into()));
        }
        return Ok(None);
    };
    let count =
        parse_int(&buf[1..end]).ok_or_else(|| ProtocolError("invalid multibulk length".into()))?;
    if count > MAX_ARGS as i64 {
        return Err(ProtocolError("invalid multibulk length".into()));
    }
    let mut at = end + 2;
    if count <= 0 {
        return Ok(Some(Parsed {
            args: Vec::new(),
            consumed: at,
        }));
    }
    let mut args = Vec::with_capacity(count as usize);
    for _ in 0..count {
        if at >= buf.len() {
            return Ok(None);
        }
        if buf[at] != b'$' {
            return Err(ProtocolError(format!(
                "expected '$', got '{}'",
                (buf[at] as char).escape_default()
            )));
        }
        let Some(end) = find_crlf(buf, at + 1) else {
            if buf.len() - at > 32 {
                return Err(ProtocolError("invalid bulk length".into()));
            }
            return Ok(None);
        };
        let len = parse_int(&buf[at + 1..end])
            .filter(|&l| (0..=MAX_BULK as i64).contains(&l))
            .ok_or_else(|| ProtocolError("invalid bulk length".into()))? as usize;
        let start = end + 2;
        if buf.len() < start + len + 2 {
            return Ok(None);
        }
        if &buf[start + len..start + len + 2] != b"\r\n" {
            return Err(ProtocolError("bulk string not terminated by CRLF".into()));
        }
        args.push(start..start + len);
        at = start + len + 2;
    }
    Ok(Some(Parsed { args, consumed: at }))
}

/// An inline command: words separated by spaces, up to `\n` (an `\r` before it is dropped).
/// Double quotes group words, as in Redis.
fn parse_inline(buf: &[u8]) -> Result<Option<Parsed>, ProtocolError> {
    let Some(nl) = memchr(b'\n', buf) else {
        if buf.len() > MAX_INLINE {
            return Err(ProtocolError("too big inline request".into()));
        }
        return Ok(None);
    };
    let line_end = if nl > 0 && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    let mut args = Vec::new();
    let mut i = 0;
    while i < line_end {
        while i < line_end && buf[i] == b' ' {
            i += 1;
        }
        if i >= line_end {
            break;
        }
        if buf[i] == b'"' {
            let start = i + 1;
            let Some(close) = memchr(b'"', &buf[start..line_end]) else {
                return Err(ProtocolError("unbalanced quotes in request".into()));
            };
            args.push(start..start + close);
            i = start + close + 1;
        } else {
            let start = i;
            while i < line_end && buf[i] != b' ' {
                i += 1;
            }
            args.push(start..i);
        }
    }
    Ok(Some(Parsed {
        args,
        consumed: nl + 1,
    }))
}

/// Reply writers: everything goes straight into the connection's output buffer.
pub mod reply {
    pub fn ok(out: &mut Vec<u8>) {
        out.extend_from_slice(b"+OK\r\n");
    }
    pub fn simple(out: &mut Vec<u8>, s: &str) {
        out.push(b'+');
        out.extend_from_slice(s.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    /// An error reply; `msg` starts with its code (ERR, WRONGTYPE, NOAUTH, OOM, ...).
    pub fn error(out: &mut Vec<u8>, msg: &str) {
        out.push(b'-');
        // A CR or LF inside would break the framing of every reply after it.
        out.extend(
            msg.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        out.extend_from_slice(b"\r\n");
    }
    pub fn int(out: &mut Vec<u8>, n: i64) {
        out.push(b':');
        out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    /// A bulk string. Lengths are formatted on the stack: an HGETALL of ten fields writes
    /// twenty of these, and a `to_string` each was a tenth of the server's time in allocation.
    pub fn bulk(out: &mut Vec<u8>, b: &[u8]) {
        let mut len = itoa::Buffer::new();
        let len = len.format(b.len()).as_bytes();
        out.reserve(len.len() + b.len() + 5);
        out.push(b'$');
        out.extend_from_slice(len);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(b);
        out.extend_from_slice(b"\r\n");
    }
    pub fn nil(out: &mut Vec<u8>) {
        out.extend_from_slice(b"$-1\r\n");
    }
    pub fn array(out: &mut Vec<u8>, n: usize) {
        out.push(b'*');
        out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn args(buf: &[u8]) -> Vec<Vec<u8>> {
        let p = parse(buf).unwrap().unwrap();
        p.args.iter().map(|r| buf[r.clone()].to_vec()).collect()
    }

    #[test]
    fn multibulk_and_inline() {
        assert_eq!(
            args(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
            vec![b"GET".to_vec(), b"k".to_vec()]
        );
        assert_eq!(
            args(b"set a \"b c\"\r\n"),
            vec![b"set".to_vec(), b"a".to_vec(), b"b c".to_vec()]
        );
        assert_eq!(args(b"PING\n"), vec![b"PING".to_vec()]);
        assert_eq!(args(b"*1\r\n$0\r\n\r\n"), vec![Vec::<u8>::new()]);
    }

    #[test]
    fn incomplete_input_waits() {
        let full = b"*2\r\n$3\r\nGET\r\n$5\r\nhello\r\n";
        for cut in 0..full.len() {
            assert_eq!(parse(&full[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn malformed_input_is_a_protocol_error() {
        for bad in [
            &b"*x\r\n"[..],
            b"*1\r\n:3\r\n",
            b"*1\r\n$-5\r\n",
            b"*1\r\n$3\r\nabcd\r\n",
            b"*99999999999\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn encode(cmds: &[Vec<Vec<u8>>]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in cmds {
            out.extend_from_slice(format!("*{}\r\n", c.len()).as_bytes());
            for a in c {
                out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                out.extend_from_slice(a);
                out.extend_from_slice(b"\r\n");
            }
        }
        out
    }

    /// Parse a stream fed in chunks, the way the server does (keep unparsed bytes, append more).
    fn parse_chunked(stream: &[u8], cuts: &[usize]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut pos = 0;
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
        bounds.push(stream.len());
        bounds.sort_unstable();
        for b in bounds {
            buf.extend_from_slice(&stream[pos..b.max(pos)]);
            pos = b.max(pos);
            while let Some(p) = parse(&buf)? {
                out.push(p.args.iter().map(|r| buf[r.clone()].to_vec()).collect());
                buf.drain(..p.consumed);
            }
        }
        Ok(out)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        /// Fuzz: arbitrary bytes never panic, and every range returned is inside the buffer.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(Some(p)) = parse(&bytes) {
                prop_assert!(p.consumed <= bytes.len());
                for r in p.args { prop_assert!(r.end <= bytes.len() && r.start <= r.end); }
            }
        }

        /// Valid streams split anywhere parse to the same commands.
        #[test]
        fn valid_streams_split_anywhere(
            cmds in proptest::collection::vec(proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6), 1..8),
            cuts in proptest::collection::vec(any::<usize>(), 0..6),
        ) {
            let stream = encode(&cmds);
            prop_assert_eq!(parse_chunked(&stream, &cuts).unwrap(), cmds);
        }

        /// Valid streams with bytes mutated: never a panic, only commands or a protocol error.
        #[test]
        fn mutated_streams_never_panic(
            cmds in proptest::collection::vec(proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 1..4), 1..4),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            cuts in proptest::collection::vec(any::<usize>(), 0..4),
        ) {
            let mut stream = encode(&cmds);
            let n = stream.len();
            for (at, b) in flips { stream[at % n] = b; }
            let _ = parse_chunked(&stream, &cuts);
        }
    }
}
