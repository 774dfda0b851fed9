//! What a client reads: a RESP2 or RESP3 reply as a value, decoded from the front of a buffer
//! with its nesting and its claimed lengths bounded, so that no bytes make it panic or reserve
//! more than they hold.

use crate::error::RespError;

/// Deepest nesting of aggregates decoded (Redis's own replies nest a few levels: COMMAND DOCS).
pub const MAX_DEPTH: usize = 64;

/// A reply as the server sent it, RESP2 or RESP3.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// RESP2's null bulk string (`$-1`).
    NullBulk,
    /// RESP2's null array (`*-1`).
    NullArray,
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
    Set(Vec<Reply>),
    /// An out-of-band push (pub/sub messages in RESP3).
    Push(Vec<Reply>),
    /// A double as the server wrote it (`1.5`, `inf`, `nan`).
    Double(String),
    /// RESP3's null.
    Null,
    Boolean(bool),
    /// A big number's decimal digits.
    BigNumber(String),
    /// A verbatim string: its three-letter format (`txt`, `mkd`) and its text.
    Verbatim(String, Vec<u8>),
}

impl Reply {
    /// A bulk string of `s`'s bytes.
    pub fn bulk(s: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(s.as_ref().to_vec())
    }

    /// A scalar reply as text (bulk and verbatim strings lossily), `None` for aggregates and
    /// nulls.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Reply::Simple(s) | Reply::Error(s) | Reply::Double(s) | Reply::BigNumber(s) => {
                Some(s.clone())
            }
            Reply::Bulk(b) | Reply::Verbatim(_, b) => Some(String::from_utf8_lossy(b).into_owned()),
            Reply::Int(i) => Some(i.to_string()),
            Reply::Boolean(b) => Some(b.to_string()),
            _ => None,
        }
    }

    /// The items of an array, a set or a push.
    pub fn as_items(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(v) | Reply::Set(v) | Reply::Push(v) => Some(v),
            _ => None,
        }
    }

    /// A map's value for a key given as text.
    pub fn field(&self, key: &str) -> Option<&Reply> {
        match self {
            Reply::Map(pairs) => pairs
                .iter()
                .find(|(k, _)| k.as_text().as_deref() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }
}

/// The end of the line starting at `from` (its CR), if the buffer holds it whole.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 1 < buf.len() {
        let p = buf[i..buf.len() - 1].iter().position(|&b| b == b'\r')?;
        if buf[i + p + 1] == b'\n' {
            return Some(i + p);
        }
        i += p + 1;
    }
    None
}

fn int(b: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            RespError::Malformed(format!(
                "bad integer {:?} in a reply",
                String::from_utf8_lossy(b)
            ))
        })
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A reply's first line: its type byte, the line's body and where the next line starts.
struct Head<'a> {
    tag: u8,
    body: &'a [u8],
    next: usize,
}

fn head(buf: &[u8], at: usize, depth: usize) -> Result<Option<Head<'_>>, RespError> {
    if depth > MAX_DEPTH {
        return Err(RespError::Malformed(format!(
            "a reply nested deeper than {MAX_DEPTH}"
        )));
    }
    if at >= buf.len() {
        return Ok(None);
    }
    let Some(end) = line_end(buf, at + 1) else {
        return Ok(None);
    };
    Ok(Some(Head {
        tag: buf[at],
        body: &buf[at + 1..end],
        next: end + 2,
    }))
}

/// Where a string of `n` bytes starting at `next` ends (after its CRLF), or `None` when the
/// buffer does not hold it yet.
fn string_end(buf: &[u8], next: usize, n: i64) -> Result<Option<usize>, RespError> {
    let n = usize::try_from(n)
        .map_err(|_| RespError::Malformed(format!("string length {n} in a reply")))?;
    let end = next.saturating_add(n).saturating_add(2);
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err(RespError::Malformed("a string not followed by CRLF".into()));
    }
    Ok(Some(end))
}

/// Items reserved up front for an aggregate of `n`: no more than the rest of the buffer could
/// hold (each item takes at least 3 bytes), so a claimed count reserves nothing it lacks.
fn reserve(buf: &[u8], next: usize, n: usize) -> usize {
    n.min(buf.len().saturating_sub(next) / 3)
}

/// Decode one reply from the front of `buf`: the reply and the bytes it took, or `Ok(None)`
/// when it has not fully arrived.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, RespError> {
    parse_at(buf, 0, 0)
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, RespError> {
    let Some(Head { tag, body, next }) = head(buf, at, depth)? else {
        return Ok(None);
    };
    let items = |n: i64, per: usize| -> Result<Option<(Vec<Reply>, usize)>, RespError> {
        let n = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(per))
            .ok_or_else(|| RespError::Malformed(format!("aggregate length {n} in a reply")))?;
        let mut items = Vec::with_capacity(reserve(buf, next, n));
        let mut pos = next;
        for _ in 0..n {
            let Some((r, p)) = parse_at(buf, pos, depth + 1)? else {
                return Ok(None);
            };
            items.push(r);
            pos = p;
        }
        Ok(Some((items, pos)))
    };
    Ok(Some(match tag {
        b'+' => (Reply::Simple(text(body)), next),
        b'-' => (Reply::Error(text(body)), next),
        b':' => (Reply::Int(int(body)?), next),
        b',' => (Reply::Double(text(body)), next),
        b'(' => (Reply::BigNumber(text(body)), next),
        b'_' => (Reply::Null, next),
        b'#' => (Reply::Boolean(body == b"t"), next),
        b'$' | b'=' => {
            let n = int(body)?;
            if n < 0 && tag == b'$' {
                return Ok(Some((Reply::NullBulk, next)));
            }
            let Some(end) = string_end(buf, next, n)? else {
                return Ok(None);
            };
            let data = &buf[next..end - 2];
            if tag == b'$' {
                (Reply::Bulk(data.to_vec()), end)
            } else {
                if data.len() < 4 || data[3] != b':' {
                    return Err(RespError::Malformed(
                        "a verbatim string without its format".into(),
                    ));
                }
                (Reply::Verbatim(text(&data[..3]), data[4..].to_vec()), end)
            }
        }
        b'*' | b'~' | b'>' => {
            let n = int(body)?;
            if n < 0 && tag == b'*' {
                return Ok(Some((Reply::NullArray, next)));
            }
            let Some((items, end)) = items(n, 1)? else {
                return Ok(None);
            };
            let reply = match tag {
                b'*' => Reply::Array(items),
                b'~' => Reply::Set(items),
                _ => Reply::Push(items),
            };
            (reply, end)
        }
        b'%' => {
            let Some((items, end)) = items(int(body)?, 2)? else {
                return Ok(None);
            };
            let mut pairs = Vec::with_capacity(items.len() / 2);
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            (Reply::Map(pairs), end)
        }
        other => {
            return Err(RespError::Malformed(format!(
                "unexpected reply type byte {:?}",
                other as char
            )))
        }
    }))
}

/// The bytes the first reply in `buf` takes, without building it (for comparing replies byte
/// for byte), or `Ok(None)` when it has not fully arrived.
pub fn reply_len(buf: &[u8]) -> Result<Option<usize>, RespError> {
    len_at(buf, 0, 0)
}

fn len_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<usize>, RespError> {
    let Some(Head { tag, body, next }) = head(buf, at, depth)? else {
        return Ok(None);
    };
    let per = match tag {
        b'+' | b'-' | b':' | b',' | b'(' | b'_' | b'#' => return Ok(Some(next)),
        b'$' | b'=' => {
            let n = int(body)?;
            if n < 0 && tag == b'$' {
                return Ok(Some(next));
            }
            return string_end(buf, next, n);
        }
        b'*' | b'~' | b'>' => 1,
        b'%' => 2,
        other => {
            return Err(RespError::Malformed(format!(
                "unexpected reply type byte {:?}",
                other as char
            )))
        }
    };
    let n = int(body)?;
    if n < 0 && tag == b'*' {
        return Ok(Some(next));
    }
    let n = usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_mul(per))
        .ok_or_else(|| RespError::Malformed(format!("aggregate length {n} in a reply")))?;
    let mut pos = next;
    for _ in 0..n {
        let Some(p) = len_at(buf, pos, depth + 1)? else {
            return Ok(None);
        };
        pos = p;
    }
    Ok(Some(pos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply;

    #[test]
    fn resp2_replies_decode_and_wait_for_their_last_byte() {
        let b = b"*2\r\n$2\r\nf0\r\n$-1\r\n:5\r\n";
        let (r, n) = parse_reply(b).unwrap().unwrap();
        assert_eq!(r, Reply::Array(vec![Reply::bulk("f0"), Reply::NullBulk]));
        assert_eq!(reply_len(b).unwrap(), Some(n));
        assert_eq!(parse_reply(&b[n..]).unwrap().unwrap().0, Reply::Int(5));
        for cut in 0..n {
            assert_eq!(parse_reply(&b[..cut]).unwrap(), None);
            assert_eq!(reply_len(&b[..cut]).unwrap(), None);
        }
    }

    /// What the server's writers write in RESP3 reads back as the same values.
    #[test]
    fn resp3_replies_written_by_the_server_read_back() {
        let mut out = Vec::new();
        reply::map(&mut out, 3, 1);
        reply::simple(&mut out, "k");
        reply::set(&mut out, 3, 2);
        reply::double(&mut out, 3, 1.5);
        reply::boolean(&mut out, 3, true);
        reply::push(&mut out, 3, 3);
        reply::null(&mut out, 3);
        reply::big_number(&mut out, 3, "123456789012345678901234567890");
        reply::verbatim(&mut out, 3, "txt", b"hi\r\nthere");
        reply::error(&mut out, "ERR no");
        let (m, n) = parse_reply(&out).unwrap().unwrap();
        assert_eq!(
            m,
            Reply::Map(vec![(
                Reply::Simple("k".into()),
                Reply::Set(vec![Reply::Double("1.5".into()), Reply::Boolean(true)])
            )])
        );
        assert_eq!(m.field("k").unwrap().as_items().unwrap().len(), 2);
        let (p, m2) = parse_reply(&out[n..]).unwrap().unwrap();
        assert_eq!(
            p,
            Reply::Push(vec![
                Reply::Null,
                Reply::BigNumber("123456789012345678901234567890".into()),
                Reply::Verbatim("txt".into(), b"hi\r\nthere".to_vec()),
            ])
        );
        assert_eq!(reply_len(&out[n..]).unwrap(), Some(m2));
        assert_eq!(
            parse_reply(&out[n + m2..]).unwrap().unwrap().0,
            Reply::Error("ERR no".into())
        );
    }

    #[test]
    fn hostile_replies_are_refused_without_reserving_what_they_claim() {
        // A count of a billion items with none sent: incomplete, nothing reserved up front.
        assert_eq!(parse_reply(b"*1000000000\r\n:1\r\n").unwrap(), None);
        let deep = "*1\r\n".repeat(MAX_DEPTH + 2);
        assert!(parse_reply(deep.as_bytes()).is_err());
        assert!(reply_len(deep.as_bytes()).is_err());
        assert!(parse_reply(b"?x\r\n").is_err());
        assert!(parse_reply(b"$3\r\nabcd\r\n").is_err());
        assert!(parse_reply(b"$-5\r\n").is_ok());
        assert!(parse_reply(b"=-5\r\n").is_err());
        assert!(parse_reply(b"~-1\r\n").is_err());
    }
}
