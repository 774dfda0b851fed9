//! The SCAN family's cursors: the SCAN cursors the server keeps (a number standing for the key
//! a scan goes on from), and the wire form of SSCAN, HSCAN and ZSCAN's member cursors.

use std::collections::VecDeque;

use hashbrown::HashMap;

/// How many SCAN cursors the server remembers (each holds one key).
pub const KEPT_CURSORS: usize = 16_384;

/// The SCAN cursors handed out: number → the key the next call starts from.
#[derive(Debug, Default)]
pub struct Cursors {
    next: u64,
    starts: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
}

impl Cursors {
    /// A new cursor for a scan that goes on from `start`.
    pub(crate) fn issue(&mut self, start: Vec<u8>) -> u64 {
        // 0 means "begin" and "done": never issued.
        self.next = self.next.wrapping_add(1).max(1);
        let id = self.next;
        self.starts.insert(id, start);
        self.order.push_back(id);
        while self.order.len() > KEPT_CURSORS {
            if let Some(old) = self.order.pop_front() {
                self.starts.remove(&old);
            }
        }
        id
    }

    /// Where the scan of `cursor` goes on; a cursor not (or no longer) known starts over.
    pub(crate) fn start(&self, cursor: u64) -> Vec<u8> {
        self.starts.get(&cursor).cloned().unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }
}

/// The smallest key after `key` in byte order.
pub(crate) fn successor(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.extend_from_slice(key);
    k.push(0);
    k
}

/// A SCAN-family cursor on the wire: Redis's are integers and clients parse them as such, while
/// the store's is the last member returned. A member `m` is written as `1` followed by each
/// byte as three decimal digits: an integer, lossless, linear in the member's length. `0` is
/// the start and the end.
pub(crate) fn cursor_to_wire(next: Option<&[u8]>) -> Vec<u8> {
    let Some(m) = next else {
        return b"0".to_vec();
    };
    let mut s = Vec::with_capacity(1 + 3 * m.len());
    s.push(b'1');
    for b in m {
        s.extend_from_slice(&[b'0' + b / 100, b'0' + b / 10 % 10, b'0' + b % 10]);
    }
    s
}

/// The store's cursor from the wire's: `Some(None)` is the start, `None` an invalid cursor.
pub(crate) fn cursor_from_wire(c: &[u8]) -> Option<Option<Vec<u8>>> {
    if c == b"0" {
        return Some(None);
    }
    let digits = c.strip_prefix(b"1")?;
    if digits.len() % 3 != 0 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits
        .chunks(3)
        .map(|d| {
            let n = (d[0] - b'0') as u32 * 100 + (d[1] - b'0') as u32 * 10 + (d[2] - b'0') as u32;
            u8::try_from(n).ok()
        })
        .collect::<Option<Vec<u8>>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_resume_and_forget_the_oldest() {
        let mut c = Cursors::default();
        let a = c.issue(b"a".to_vec());
        assert_ne!(a, 0);
        assert_eq!(c.start(a), b"a");
        for i in 0..KEPT_CURSORS {
            c.issue(i.to_string().into_bytes());
        }
        assert_eq!(c.len(), KEPT_CURSORS);
        // Forgotten: the scan starts over (repeats, never skips).
        assert_eq!(c.start(a), b"");
        assert_eq!(c.start(12345678), b"");
    }

    #[test]
    fn successor_is_the_next_key_in_byte_order() {
        assert!(successor(b"ab").as_slice() > b"ab".as_slice());
        assert!(successor(b"ab").as_slice() < b"ab\x00\x00".as_slice());
        assert!(successor(b"ab").as_slice() < b"ac".as_slice());
    }
}
