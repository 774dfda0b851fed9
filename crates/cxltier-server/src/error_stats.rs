//! INFO errorstats and `total_error_replies`: every error reply counted under its code (the
//! first word after `-`, Redis's `afterErrorReply`), once, where it was made: a command's error
//! inside EXEC or a script counts as that command's, and a script's error that only passes on
//! the error of a command it ran is not counted again.

use std::collections::BTreeMap;

/// Distinct codes kept: a script can make up codes (`redis.error_reply("X1 ...")`), and each
/// would otherwise take memory for ever. Past this, errors of new codes are counted in
/// `total_error_replies` only (Redis 7.2's bound on its error table).
pub const MAX_CODES: usize = 128;

/// Redis looks for the code's end within the first 32 bytes of the error.
const CODE_SEARCH: usize = 32;

#[derive(Debug, Default, Clone)]
pub struct ErrorStats {
    total: u64,
    by_code: BTreeMap<String, u64>,
}

impl ErrorStats {
    /// Counts `reply` if it is an error reply (`-CODE message\r\n`): under its code, or `ERR`
    /// when no space ends a code within its first 32 bytes.
    pub fn count(&mut self, reply: &[u8]) {
        if reply.first() != Some(&b'-') {
            return;
        }
        self.total += 1;
        let line = error_text_with_dash(reply);
        let searched = &line[..line.len().min(CODE_SEARCH)];
        let code = match searched.iter().position(|&b| b == b' ') {
            Some(end) => String::from_utf8_lossy(&line[1..end]).into_owned(),
            None => "ERR".to_string(),
        };
        if let Some(n) = self.by_code.get_mut(&code) {
            *n += 1;
        } else if self.by_code.len() < MAX_CODES {
            self.by_code.insert(code, 1);
        }
    }

    /// Error replies counted since the start or CONFIG RESETSTAT.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Each code and its count, in Redis's order (by code).
    pub fn codes(&self) -> impl Iterator<Item = (&str, u64)> {
        self.by_code.iter().map(|(c, n)| (c.as_str(), *n))
    }

    pub fn reset(&mut self) {
        *self = ErrorStats::default();
    }
}

/// The error's first line, its `-` included, without the line end.
pub fn error_text_with_dash(reply: &[u8]) -> &[u8] {
    let end = reply
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(reply.len());
    &reply[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_code_as_redis_does() {
        let mut s = ErrorStats::default();
        s.count(b"-ERR unknown command 'x'\r\n");
        s.count(b"-WRONGTYPE Operation against a key\r\n");
        s.count(b"-ERR syntax error\r\n");
        s.count(b"+OK\r\n");
        s.count(b"*1\r\n-ERR inside\r\n");
        // No space within 32 bytes: ERR.
        s.count(b"-NOSPACEINTHEFIRSTTHIRTYTWOBYTESATALL x\r\n");
        s.count(b"-NOSCRIPT\r\n");
        let codes: Vec<(&str, u64)> = s.codes().collect();
        assert_eq!(codes, [("ERR", 4), ("WRONGTYPE", 1)]);
        assert_eq!(s.total(), 5);
        s.reset();
        assert_eq!((s.total(), s.codes().count()), (0, 0));
    }

    #[test]
    fn made_up_codes_are_bounded() {
        let mut s = ErrorStats::default();
        for i in 0..MAX_CODES + 50 {
            s.count(format!("-C{i} made up\r\n").as_bytes());
        }
        s.count(b"-C0 again\r\n");
        assert_eq!(s.codes().count(), MAX_CODES);
        assert_eq!(s.total(), MAX_CODES as u64 + 51);
        assert_eq!(s.codes().find(|(c, _)| *c == "C0").unwrap().1, 2);
    }
}
