//! A line of words as Redis splits one (`sdssplitargs`): a function library's shebang, a
//! configuration file's directive. Linear in the line's length.

/// Redis's `sdssplitargs` of one line: words apart by whitespace, `"..."` with C escapes and
/// `'...'` grouping; `None` for unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut words = Vec::new();
    let mut i = 0;
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            return Some(words);
        }
        let mut word = Vec::new();
        let (mut inq, mut insq) = (false, false);
        loop {
            let c = line.get(i).copied();
            if inq {
                match c {
                    None => return None,
                    Some(b'\\')
                        if line.get(i + 1) == Some(&b'x')
                            && line.get(i + 2).and_then(|&c| hex(c)).is_some()
                            && line.get(i + 3).and_then(|&c| hex(c)).is_some() =>
                    {
                        word.push(hex(line[i + 2])? * 16 + hex(line[i + 3])?);
                        i += 3;
                    }
                    Some(b'\\') if i + 1 < line.len() => {
                        i += 1;
                        word.push(match line[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 8,
                            b'a' => 7,
                            other => other,
                        });
                    }
                    Some(b'"') => {
                        if line.get(i + 1).is_some_and(|c| !c.is_ascii_whitespace()) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    Some(c) => word.push(c),
                }
            } else if insq {
                match c {
                    None => return None,
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        word.push(b'\'');
                    }
                    Some(b'\'') => {
                        if line.get(i + 1).is_some_and(|c| !c.is_ascii_whitespace()) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    Some(c) => word.push(c),
                }
            } else {
                match c {
                    None => break,
                    Some(c) if c.is_ascii_whitespace() => break,
                    Some(b'"') => inq = true,
                    Some(b'\'') => insq = true,
                    Some(c) => word.push(c),
                }
            }
            i += 1;
        }
        words.push(word);
    }
}
