//! memcached's text protocol (RESP, the other wire format, is `cxltier_resp`'s).

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
