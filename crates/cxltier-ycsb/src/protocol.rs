//! Wire formats: RESP2 requests and replies, and memcached's text protocol.

/// A RESP reply, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Simple(Vec<u8>),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

fn line(buf: &[u8], from: usize) -> Option<usize> {
    buf[from..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

fn int(b: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad integer {:?} in a reply", String::from_utf8_lossy(b)))
}

/// Parse one reply from the front of `buf`: `Ok(None)` when incomplete.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    parse_at(buf, 0, 0)
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, String> {
    if depth > 8 {
        return Err("reply nested too deeply".into());
    }
    if at >= buf.len() {
        return Ok(None);
    }
    let Some(end) = line(buf, at + 1) else {
        return Ok(None);
    };
    let body = &buf[at + 1..end];
    let next = end + 2;
    Ok(Some(match buf[at] {
        b'+' => (Reply::Simple(body.to_vec()), next),
        b'-' => (
            Reply::Error(String::from_utf8_lossy(body).into_owned()),
            next,
        ),
        b':' => (Reply::Int(int(body)?), next),
        b'$' => {
            let n = int(body)?;
            if n < 0 {
                (Reply::Bulk(None), next)
            } else {
                let n = n as usize;
                if buf.len() < next + n + 2 {
                    return Ok(None);
                }
                (
                    Reply::Bulk(Some(buf[next..next + n].to_vec())),
                    next + n + 2,
                )
            }
        }
        b'*' => {
            let n = int(body)?;
            if n < 0 {
                (Reply::Array(None), next)
            } else {
                let mut items = Vec::with_capacity(n.min(1 << 16) as usize);
                let mut pos = next;
                for _ in 0..n {
                    match parse_at(buf, pos, depth + 1)? {
                        Some((r, p)) => {
                            items.push(r);
                            pos = p;
                        }
                        None => return Ok(None),
                    }
                }
                (Reply::Array(Some(items)), pos)
            }
        }
        other => return Err(format!("unexpected reply type byte {:?}", other as char)),
    }))
}

/// Append a RESP command.
pub fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        out.push(b'$');
        out.extend_from_slice(a.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// A memcached reply, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McReply {
    Stored,
    /// A `get`: the value, or None on a miss.
    Value(Option<Vec<u8>>),
    Error(String),
}

/// Parse one memcached reply (to `set` or to a one-key `get`).
pub fn parse_mc(buf: &[u8]) -> Result<Option<(McReply, usize)>, String> {
    let Some(end) = line(buf, 0) else {
        return Ok(None);
    };
    let l = &buf[..end];
    let next = end + 2;
    if l == b"STORED" {
        return Ok(Some((McReply::Stored, next)));
    }
    if l == b"END" {
        return Ok(Some((McReply::Value(None), next)));
    }
    if let Some(rest) = l.strip_prefix(b"VALUE ") {
        let parts: Vec<&[u8]> = rest.split(|&b| b == b' ').collect();
        let n = parts.get(2).ok_or("VALUE line without a length")?;
        let n = int(n)? as usize;
        if buf.len() < next + n + 2 + 5 {
            return Ok(None);
        }
        let value = buf[next..next + n].to_vec();
        let after = next + n + 2;
        if &buf[after..after + 5] != b"END\r\n" {
            return Err("a get of one key returned more than one value".into());
        }
        return Ok(Some((McReply::Value(Some(value)), after + 5)));
    }
    Ok(Some((
        McReply::Error(String::from_utf8_lossy(l).into_owned()),
        next,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies() {
        let b = b"*2\r\n$2\r\nf0\r\n$-1\r\n:5\r\n";
        let (r, n) = parse_reply(b).unwrap().unwrap();
        assert_eq!(
            r,
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"f0".to_vec())),
                Reply::Bulk(None)
            ]))
        );
        assert_eq!(parse_reply(&b[n..]).unwrap().unwrap().0, Reply::Int(5));
        for cut in 0..n {
            assert_eq!(parse_reply(&b[..cut]).unwrap(), None);
        }
        assert_eq!(
            parse_mc(b"VALUE k 0 3\r\nabc\r\nEND\r\n")
                .unwrap()
                .unwrap()
                .0,
            McReply::Value(Some(b"abc".to_vec()))
        );
        assert_eq!(parse_mc(b"VALUE k 0 3\r\nab").unwrap(), None);
        assert_eq!(parse_mc(b"STORED\r\n").unwrap().unwrap().0, McReply::Stored);
    }
}
