//! The server's side of RESP: requests parsed, and RESP2 and RESP3 replies written.
//!
//! A [`Parser`] reads one command from the front of a buffer: a multibulk array of bulk strings
//! (what every client library sends) or an inline command (what a person types into telnet). It
//! returns the arguments as byte ranges into the buffer, so nothing is copied, and never panics,
//! whatever the bytes. A command that has not fully arrived is not parsed again from its start
//! when more bytes come: the parser remembers how far it got (the arguments read, the length of
//! the bulk string being received), so each byte is looked at a bounded number of times however
//! finely the command is split (a 7 MB command sent in 256-byte pieces was re-parsed 28,000
//! times over).

use std::ops::Range;

/// Largest bulk string accepted at most (Redis's proto-max-bulk-len default); the server caps it
/// lower, to its largest object (see [`Limits`]).
pub const MAX_BULK: usize = 512 << 20;
/// Largest number of arguments in one command.
pub const MAX_ARGS: usize = 1 << 20;
/// Longest inline command line.
pub const MAX_INLINE: usize = 64 << 10;
/// Before AUTH, at most this many arguments in a command and this long a bulk string (Redis
/// since 6.2.6, CVE-2021-32675): a client without the password cannot make the server buffer
/// more than a few kilobytes.
pub const UNAUTHENTICATED_MAX_ARGS: usize = 10;
pub const UNAUTHENTICATED_MAX_BULK: usize = 16 << 10;
/// Arguments' ranges reserved up front from a multibulk count: the count is the client's word,
/// so a `*1000000` header must not reserve 16 MB before any argument arrives.
const ARGS_RESERVED: usize = 64;

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

/// What a connection may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest bulk string (proto-max-bulk-len): refused from its header, before it is buffered.
    pub max_bulk: usize,
    /// Not authenticated yet: [`UNAUTHENTICATED_MAX_ARGS`] and [`UNAUTHENTICATED_MAX_BULK`].
    pub unauthenticated: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk: MAX_BULK,
            unauthenticated: false,
        }
    }
}

/// A resumable parser: one per connection, fed the buffer from the first byte of the command
/// being received each time more bytes arrived.
#[derive(Debug, Default)]
pub struct Parser {
    /// How far the command was read, from its first byte.
    at: usize,
    /// Where the search for the end of the current line resumes (it was not found before).
    scan: usize,
    /// Multibulk arguments still to come, once the count is read.
    remaining: Option<usize>,
    /// The length of the bulk string whose header was read; its data starts at `at`.
    bulk: Option<usize>,
    /// The lengths of the current command's bulk strings whose headers were read.
    bulk_bytes: usize,
    args: Vec<Range<usize>>,
    /// Bytes looked at while searching for line ends and reading headers: what the parser's
    /// work is proportional to (tests assert on it).
    examined: u64,
}

/// The first CRLF at or after `from`, counting the bytes looked at.
fn find_crlf(buf: &[u8], from: usize, examined: &mut u64) -> Option<usize> {
    let mut i = from;
    while i + 1 < buf.len() {
        match memchr(b'\r', &buf[i..buf.len() - 1]) {
            Some(p) => {
                *examined += p as u64 + 1;
                let at = i + p;
                if buf[at + 1] == b'\n' {
                    return Some(at);
                }
                i = at + 1;
            }
            None => {
                *examined += (buf.len() - 1 - i) as u64;
                return None;
            }
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

/// Parse one command from the front of `buf` with no state kept; `Ok(None)` when more bytes
/// are needed.
pub fn parse(buf: &[u8]) -> Result<Option<Parsed>, ProtocolError> {
    Parser::default().parse(buf, Limits::default())
}

impl Parser {
    /// Bytes looked at so far (line-end searches and headers; bulk data is not looked at).
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// Whether part of a command has been read (the next call continues it).
    pub fn in_command(&self) -> bool {
        self.at > 0
    }

    /// The bytes of bulk data the command being received announced in the headers read so far
    /// (0 between commands): the server lets them past its query buffer limit, so that one big
    /// value arrives whole while pipelined small commands stay within the limit.
    pub fn bulk_bytes(&self) -> usize {
        self.bulk_bytes
    }

    /// Parse one command from the front of `buf`, which holds the same bytes as at the last
    /// call and maybe more; `Ok(None)` when more bytes are needed. After a command or an error
    /// the next call starts a new command.
    pub fn parse(&mut self, buf: &[u8], limits: Limits) -> Result<Option<Parsed>, ProtocolError> {
        let r = self.resume(buf, limits);
        if !matches!(r, Ok(None)) {
            let examined = self.examined;
            *self = Parser {
                examined,
                ..Parser::default()
            };
        }
        r
    }

    fn resume(&mut self, buf: &[u8], limits: Limits) -> Result<Option<Parsed>, ProtocolError> {
        if buf.is_empty() {
            return Ok(None);
        }
        if buf[0] != b'*' {
            return self.inline(buf);
        }
        let max_bulk = if limits.unauthenticated {
            limits.max_bulk.min(UNAUTHENTICATED_MAX_BULK)
        } else {
            limits.max_bulk
        };
        let remaining = match self.remaining {
            Some(r) => r,
            None => {
                let Some(end) = find_crlf(buf, self.scan.max(1), &mut self.examined) else {
                    if buf.len() > MAX_INLINE {
                        return Err(ProtocolError("too big mbulk count string".into()));
                    }
                    // A CR last may be followed by its LF: look at it again next time.
                    self.scan = buf.len().saturating_sub(1).max(1);
                    return Ok(None);
                };
                let count = parse_int(&buf[1..end])
                    .ok_or_else(|| ProtocolError("invalid multibulk length".into()))?;
                if limits.unauthenticated && count > UNAUTHENTICATED_MAX_ARGS as i64 {
                    return Err(ProtocolError("unauthenticated multibulk length".into()));
                }
                if count > MAX_ARGS as i64 {
                    return Err(ProtocolError("invalid multibulk length".into()));
                }
                self.at = end + 2;
                if count <= 0 {
                    return Ok(Some(Parsed {
                        args: Vec::new(),
                        consumed: self.at,
                    }));
                }
                self.args = Vec::with_capacity((count as usize).min(ARGS_RESERVED));
                self.remaining = Some(count as usize);
                count as usize
            }
        };
        let mut remaining = remaining;
        while remaining > 0 {
            let len = match self.bulk {
                Some(len) => len,
                None => {
                    let at = self.at;
                    if at >= buf.len() {
                        self.remaining = Some(remaining);
                        return Ok(None);
                    }
                    self.examined += 1;
                    if buf[at] != b'$' {
                        return Err(ProtocolError(format!(
                            "expected '$', got '{}'",
                            (buf[at] as char).escape_default()
                        )));
                    }
                    let Some(end) = find_crlf(buf, self.scan.max(at + 1), &mut self.examined)
                    else {
                        if buf.len() - at > 32 {
                            return Err(ProtocolError("invalid bulk length".into()));
                        }
                        self.scan = buf.len().saturating_sub(1).max(at + 1);
                        self.remaining = Some(remaining);
                        return Ok(None);
                    };
                    let len = parse_int(&buf[at + 1..end])
                        .filter(|&l| l >= 0)
                        .ok_or_else(|| ProtocolError("invalid bulk length".into()))?;
                    if len > max_bulk as i64 {
                        return Err(ProtocolError(if limits.unauthenticated {
                            "unauthenticated bulk length".into()
                        } else {
                            format!(
                                "invalid bulk length {len}: above proto-max-bulk-len {max_bulk} (the largest object, --max-object, and a margin)"
                            )
                        }));
                    }
                    let len = len as usize;
                    self.at = end + 2;
                    self.bulk = Some(len);
                    self.bulk_bytes = self.bulk_bytes.saturating_add(len);
                    len
                }
            };
            // The bulk's data is not looked at until all of it is there: one comparison per
            // call however many pieces it arrives in.
            let start = self.at;
            if buf.len() < start + len + 2 {
                self.remaining = Some(remaining);
                return Ok(None);
            }
            self.examined += 2;
            if &buf[start + len..start + len + 2] != b"\r\n" {
                return Err(ProtocolError("bulk string not terminated by CRLF".into()));
            }
            self.args.push(start..start + len);
            self.at = start + len + 2;
            self.bulk = None;
            remaining -= 1;
        }
        Ok(Some(Parsed {
            args: std::mem::take(&mut self.args),
            consumed: self.at,
        }))
    }

    /// An inline command: the search for its newline resumes where it stopped.
    fn inline(&mut self, buf: &[u8]) -> Result<Option<Parsed>, ProtocolError> {
        let from = self.scan.min(buf.len());
        let Some(p) = memchr(b'\n', &buf[from..]) else {
            self.examined += (buf.len() - from) as u64;
            if buf.len() > MAX_INLINE {
                return Err(ProtocolError("too big inline request".into()));
            }
            self.scan = buf.len();
            self.at = buf.len();
            return Ok(None);
        };
        self.examined += p as u64 + 1;
        parse_inline(buf, from + p)
    }
}

/// An inline command whose newline is at `nl`: words separated by spaces (an `\r` before the
/// newline is dropped). Double quotes group words, as in Redis.
fn parse_inline(buf: &[u8], nl: usize) -> Result<Option<Parsed>, ProtocolError> {
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
            // As Redis's sdssplitargs: a closing quote must end the word.
            if i < line_end && buf[i] != b' ' {
                return Err(ProtocolError("unbalanced quotes in request".into()));
            }
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
        line(out, b'+', s.as_bytes());
    }
    /// An array of simple strings: the lines of a HELP reply.
    pub fn simple_lines(out: &mut Vec<u8>, lines: &[&str]) {
        array(out, lines.len());
        for l in lines {
            simple(out, l);
        }
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
        line(out, b':', itoa::Buffer::new().format(n).as_bytes());
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
        header(out, b'*', n);
    }

    fn header(out: &mut Vec<u8>, tag: u8, n: usize) {
        line(out, tag, itoa::Buffer::new().format(n).as_bytes());
    }

    /// A line of its own: the type's `tag`, then `text`.
    fn line(out: &mut Vec<u8>, tag: u8, text: &[u8]) {
        out.push(tag);
        out.extend_from_slice(text);
        out.extend_from_slice(b"\r\n");
    }

    // RESP3's types. Each takes the connection's protocol and writes what Redis 7 writes in
    // RESP2 for the same reply when it is 2, so a handler shapes its reply once.

    /// A map of `n` pairs (the 2n items follow); RESP2: a flat array of 2n.
    pub fn map(out: &mut Vec<u8>, proto: u8, n: usize) {
        if proto >= 3 {
            header(out, b'%', n);
        } else {
            header(out, b'*', 2 * n);
        }
    }
    /// A set of `n` items; RESP2: an array.
    pub fn set(out: &mut Vec<u8>, proto: u8, n: usize) {
        header(out, if proto >= 3 { b'~' } else { b'*' }, n);
    }
    /// An out-of-band push of `n` items (pub/sub messages); RESP2: an array.
    pub fn push(out: &mut Vec<u8>, proto: u8, n: usize) {
        header(out, if proto >= 3 { b'>' } else { b'*' }, n);
    }
    /// The null of a missing value; RESP2: the null bulk string.
    pub fn null(out: &mut Vec<u8>, proto: u8) {
        out.extend_from_slice(if proto >= 3 { b"_\r\n" } else { b"$-1\r\n" });
    }
    /// The null of a missing array (EXEC aborted, COMMAND INFO of an unknown name); RESP2:
    /// the null array.
    pub fn null_array(out: &mut Vec<u8>, proto: u8) {
        out.extend_from_slice(if proto >= 3 { b"_\r\n" } else { b"*-1\r\n" });
    }
    /// A boolean; RESP2: the integer 1 or 0.
    pub fn boolean(out: &mut Vec<u8>, proto: u8, b: bool) {
        if proto >= 3 {
            out.extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            int(out, b as i64);
        }
    }
    /// A double, written as Redis writes it (`inf`, `-inf`, `nan`, else the shortest text that
    /// reads back the same); RESP2: that text as a bulk string.
    pub fn double(out: &mut Vec<u8>, proto: u8, d: f64) {
        let text = if d.is_nan() {
            "nan".to_string()
        } else if d.is_infinite() {
            if d > 0.0 { "inf" } else { "-inf" }.to_string()
        } else {
            g17(d)
        };
        if proto >= 3 {
            line(out, b',', text.as_bytes());
        } else {
            bulk(out, text.as_bytes());
        }
    }
    /// A finite double as C's `%.17g` writes it (Redis 7.0's addReplyDouble): 17 significant
    /// digits, trailing zeros dropped, an exponent (`e+20`, `e-05`) below 1e-4 or from 1e17.
    pub fn g17(d: f64) -> String {
        if d == 0.0 {
            return if d.is_sign_negative() { "-0" } else { "0" }.to_string();
        }
        // 17 significant digits in scientific form: the digits and the decimal exponent.
        let sci = format!("{d:.16e}");
        let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
        let exp: i32 = exp.parse().expect("an integer exponent");
        let trim = |t: &str| -> String {
            if t.contains('.') {
                t.trim_end_matches('0').trim_end_matches('.').to_string()
            } else {
                t.to_string()
            }
        };
        if !(-4..17).contains(&exp) {
            let sign = if exp < 0 { '-' } else { '+' };
            format!("{}e{sign}{:02}", trim(mantissa), exp.unsigned_abs())
        } else {
            trim(&format!("{d:.*}", (16 - exp) as usize))
        }
    }
    /// A big number given as its decimal digits; RESP2: a bulk string of them.
    pub fn big_number(out: &mut Vec<u8>, proto: u8, digits: &str) {
        if proto >= 3 {
            line(out, b'(', digits.as_bytes());
        } else {
            bulk(out, digits.as_bytes());
        }
    }
    /// A verbatim string of format `fmt` (three letters: `txt`, `mkd`); RESP2: a bulk string.
    pub fn verbatim(out: &mut Vec<u8>, proto: u8, fmt: &str, text: &[u8]) {
        if proto >= 3 {
            header(out, b'=', text.len() + 4);
            out.extend_from_slice(fmt.as_bytes());
            out.push(b':');
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        } else {
            bulk(out, text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The bulk data a partial command announced (what the server lets past its query limit),
    /// and nothing once the command is whole.
    #[test]
    fn bulk_bytes_counts_the_announced_data_of_the_command_being_received() {
        let mut p = Parser::default();
        let full = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\n";
        let mut buf = full.to_vec();
        buf.extend_from_slice(b"abc");
        assert_eq!(p.parse(&buf, Limits::default()), Ok(None));
        assert_eq!(p.bulk_bytes(), 104);
        buf.extend_from_slice(&[b'x'; 97]);
        buf.extend_from_slice(b"\r\n");
        assert!(p.parse(&buf, Limits::default()).unwrap().is_some());
        assert_eq!(p.bulk_bytes(), 0);
    }

    fn args(buf: &[u8]) -> Vec<Vec<u8>> {
        let p = parse(buf).unwrap().unwrap();
        p.args.iter().map(|r| buf[r.clone()].to_vec()).collect()
    }

    #[test]
    fn doubles_are_written_as_printf_g17() {
        use super::reply::g17;
        for (d, want) in [
            (0.697_076_566_841_954_6, "0.69707656684195463"),
            (f64::MAX, "1.7976931348623157e+308"),
            (1e20, "1e+20"),
            (10.5, "10.5"),
            (-3.0, "-3"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (0.1, "0.10000000000000001"),
            (0.0, "0"),
        ] {
            assert_eq!(g17(d), want, "{d}");
        }
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
            // Redis's protocol test: a closing quote must end its word.
            b"set \"\"\"test-key\"\"\" test-value\r\n",
            b"set \"a\"b c\r\n",
            b"set \"open\r\n",
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

    /// Parse a stream fed in chunks, the way the server does (keep unparsed bytes, append more,
    /// one parser that resumes), checking against a parse from scratch each time.
    fn parse_chunked(stream: &[u8], cuts: &[usize]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut pos = 0;
        let mut parser = Parser::default();
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
        bounds.push(stream.len());
        bounds.sort_unstable();
        for b in bounds {
            buf.extend_from_slice(&stream[pos..b.max(pos)]);
            pos = b.max(pos);
            loop {
                let fresh = parse(&buf);
                let resumed = parser.parse(&buf, Limits::default());
                assert_eq!(resumed, fresh, "a resumed parse differs from a fresh one");
                let Some(p) = resumed? else { break };
                out.push(p.args.iter().map(|r| buf[r.clone()].to_vec()).collect());
                buf.drain(..p.consumed);
            }
        }
        Ok(out)
    }

    /// A big command in small pieces: each byte is looked at a bounded number of times (the
    /// old parser started again from the command's first byte at every piece: quadratic).
    #[test]
    fn a_command_in_small_pieces_is_parsed_in_linear_work() {
        let fields: Vec<Vec<u8>> = (0..50_000)
            .map(|i| format!("field{i}").into_bytes())
            .collect();
        let mut cmd = vec![b"HSET".to_vec(), b"h".to_vec()];
        for f in &fields {
            cmd.push(f.clone());
            cmd.push(vec![b'v'; 20]);
        }
        cmd.push(vec![b'x'; 7 << 20]);
        cmd.push(b"last".to_vec());
        let stream = encode(&[cmd.clone()]);
        let mut parser = Parser::default();
        let mut got = None;
        let mut calls = 0u64;
        for end in (256..stream.len() + 256).step_by(256) {
            let buf = &stream[..end.min(stream.len())];
            calls += 1;
            if let Some(p) = parser.parse(buf, Limits::default()).unwrap() {
                assert_eq!(p.consumed, stream.len());
                got = Some(
                    p.args
                        .iter()
                        .map(|r| buf[r.clone()].to_vec())
                        .collect::<Vec<_>>(),
                );
            }
        }
        assert_eq!(got.unwrap(), cmd);
        // Headers and line ends only, each once (plus a CR that may be looked at twice per
        // call); the 7 MiB bulk itself is not scanned.
        let headers = (stream.len() - (7 << 20) - 20 * 50_000) as u64;
        assert!(
            parser.examined() <= 2 * headers + 2 * calls,
            "{} bytes examined for {} bytes of headers in {calls} pieces",
            parser.examined(),
            headers
        );
    }

    #[test]
    fn unauthenticated_clients_may_send_little() {
        let unauth = Limits {
            max_bulk: 1 << 20,
            unauthenticated: true,
        };
        let err = |buf: &[u8], l| Parser::default().parse(buf, l).unwrap_err().0;
        assert_eq!(err(b"*11\r\n", unauth), "unauthenticated multibulk length");
        assert_eq!(
            err(b"*2\r\n$3\r\nGET\r\n$16385\r\n", unauth),
            "unauthenticated bulk length"
        );
        // Refused from the header: nothing of the bulk is waited for.
        assert!(err(b"*1\r\n$536870912\r\n", unauth).contains("unauthenticated"));
        let ok = b"*2\r\n$4\r\nAUTH\r\n$16384\r\n";
        assert_eq!(Parser::default().parse(ok, unauth), Ok(None));
        // Once authenticated: the bulk is capped at the limit given, from its header.
        let authed = Limits {
            unauthenticated: false,
            ..unauth
        };
        assert_eq!(Parser::default().parse(b"*11\r\n$1\r\n", authed), Ok(None));
        assert_eq!(
            Parser::default().parse(b"*1\r\n$1048576\r\n", authed),
            Ok(None)
        );
        assert!(err(b"*1\r\n$1048577\r\n", authed).contains("proto-max-bulk-len 1048576"));
        // A huge count reserves nothing much before its arguments come.
        let mut p = Parser::default();
        assert_eq!(p.parse(b"*1000000\r\n", authed), Ok(None));
        assert!(p.args.capacity() <= ARGS_RESERVED);
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
